"""Fixtures of the cluster tests: one real two-node Ray on loopback per session, and clusters.

Tests that start Ray carry the ``ray`` marker and are skipped, with the
reason, unless Ray is installed and this process runs in a network namespace
whose only interface is ``lo`` (``.ci/extras-ray.sh`` runs them in
``unshare -n``): nobody starts Ray on the open network by accident. The
other tests here (wire, directory, request log, shard core, specs) need
neither and run everywhere.

Runners reach the workers as Ray's runtime environment: the ``clusterlib``
package (``tests/clusterlib``, a top-level module of the test suite as
``cliutil`` is, so pytest, mypy and the workers all import it under that one
name) is uploaded with ``py_modules``.
"""

from __future__ import annotations

import faulthandler
import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import clusterlib
import pytest

from retinue import Limits, Profile
from retinue.cluster.loopback import interfaces, only_loopback_interfaces
from retinue.cluster.specs import ShardConfig, spec_of

WATCHDOG_S = 170.0  # a cluster test that hangs dumps every stack and stops


def ray_unavailable() -> str | None:
    """Say why Ray must not start here (None: it may)."""
    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed: pip install -e '.[ray]' (CI: .ci/extras-ray.sh)"
    if not only_loopback_interfaces():
        return (
            "Ray starts only inside a loopback-only network namespace "
            f"(interfaces here: {', '.join(interfaces())}); run "
            "unshare -n sh -c 'ip link set lo up && exec python -m pytest tests/cluster' as root"
        )
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    why = ray_unavailable()
    if why is None:
        return
    skip = pytest.mark.skip(reason=why)
    for item in items:
        # The marker, not item.keywords: keywords also hold the names of the folders above
        # (a checkout in a folder named "ray" would skip every test here).
        if item.get_closest_marker("ray") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _cluster_watchdog() -> Iterator[None]:
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def gates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder whose files open gated turns (``(gates / task).touch()``)."""
    return tmp_path_factory.mktemp("gates")


@pytest.fixture(scope="session")
def local_ray(gates: Path) -> Iterator[Any]:
    """A two-node local Ray on loopback, this process its driver, for the whole session."""
    why = ray_unavailable()
    if why is not None:
        pytest.skip(why)
    import ray

    from retinue.cluster import start_local_ray

    local = start_local_ray(nodes=2)
    ray.init(
        address=local.address,
        log_to_driver=False,
        runtime_env={
            "py_modules": [str(Path(clusterlib.__file__).parent)],
            "env_vars": {"RETINUE_CLUSTER_GATES": str(gates)},
        },
    )
    yield local
    local.shutdown()


TREE_PROFILES = [
    Profile("worker", runner=clusterlib.echo),
    Profile("gated", runner=clusterlib.gated),
    Profile("talker", runner=clusterlib.talker),
    Profile("lead", subagents=["mid"], runner=clusterlib.lead),
    Profile("mid", subagents=["leaf"], runner=clusterlib.mid),
    Profile("leaf", runner=clusterlib.leaf),
]

OpenCluster = Callable[..., Any]


def _opened(root: Path, shards: int, **kwargs: Any) -> Any:
    """Open a cluster over ``root`` with the tests' defaults (``TREE_PROFILES``, 30 s waits)."""
    from retinue.cluster import Cluster

    kwargs.setdefault("profiles", TREE_PROFILES)
    kwargs.setdefault("limits", Limits(wait_default_s=30.0))
    kwargs.setdefault("retry_s", 60.0)
    return Cluster.open(root, shards=shards, **kwargs)


@pytest.fixture
def open_cluster(local_ray: Any, tmp_path: Path) -> Iterator[OpenCluster]:
    """Return ``open(shards=2, **kwargs) -> Cluster``; every cluster is shut at the end.

    For a test that needs a cluster of its own: its placements from a fresh
    directory, other profiles or settings, faults, killed shards, a shutdown.
    """
    opened: list[Any] = []

    def _open(shards: int = 2, root: Path | None = None, **kwargs: Any) -> Any:
        cluster = _opened(root or tmp_path / "cluster", shards, **kwargs)
        opened.append(cluster)
        return cluster

    yield _open
    for cluster in reversed(opened):
        cluster.shutdown()


@pytest.fixture(scope="session")
def _session_cluster(local_ray: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    cluster = _opened(tmp_path_factory.mktemp("shared") / "cluster", 2)
    yield cluster
    cluster.shutdown()


@pytest.fixture
def shared_cluster(_session_cluster: Any) -> Iterator[Any]:
    """The session's 2-shard cluster (``TREE_PROFILES``), for tests that need none of their own.

    Each Cluster.open starts a Ray worker process per shard and one for the
    directory (seconds each on a loaded 2-core machine), so the tests that
    only need a cluster share this one. Each starts with no live agent, an
    empty host inbox and no injected fault; after it, every tree it left open
    is closed and the inbox drained. Its placements depend on the tests
    before it: a test that asserts where new names go opens its own
    (:func:`open_cluster`).
    """
    cluster = _session_cluster
    assert cluster.agents() == [], "a test before this one left live agents"
    assert cluster.messages(timeout=0) == []
    yield cluster
    cluster.faults.drop.clear()
    for agent in cluster.agents():
        if agent.path.count("/") == 2:  # top-level: /root/<name>
            cluster.close_tree(agent.id)
    while cluster.messages(timeout=0):
        pass


SHARD_PROFILES = (
    spec_of(Profile("worker", runner=clusterlib.echo)),
    spec_of(Profile("talker", runner=clusterlib.talker)),
    spec_of(Profile("gated", runner=clusterlib.gated)),
)


@pytest.fixture
def open_core(tmp_path: Path) -> Iterator[Any]:
    """Return ``open(**ShardConfig options) -> ShardCore``: shard 1's core without Ray over
    ``tmp_path/shard-1`` (worker, talker and gated profiles); each is closed at the end."""
    from retinue.cluster.shard import ShardCore

    opened: list[ShardCore] = []

    def _open(**options: Any) -> ShardCore:
        config = ShardConfig(profiles=SHARD_PROFILES, **options)
        core = ShardCore.open(1, tmp_path / "shard-1", config)
        opened.append(core)
        return core

    yield _open
    for core in opened:
        core.close()
