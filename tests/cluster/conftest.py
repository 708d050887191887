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
        if "ray" in item.keywords:
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


@pytest.fixture
def open_cluster(local_ray: Any, tmp_path: Path) -> Iterator[OpenCluster]:
    """Return ``open(shards=2, **kwargs) -> Cluster``; every cluster is shut at the end."""
    from retinue.cluster import Cluster

    opened: list[Any] = []

    def _open(shards: int = 2, root: Path | None = None, **kwargs: Any) -> Any:
        kwargs.setdefault("profiles", TREE_PROFILES)
        kwargs.setdefault("limits", Limits(wait_default_s=30.0))
        kwargs.setdefault("retry_s", 60.0)
        cluster = Cluster.open(root or tmp_path / "cluster", shards=shards, **kwargs)
        opened.append(cluster)
        return cluster

    yield _open
    for cluster in reversed(opened):
        cluster.shutdown()
