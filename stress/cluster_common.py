"""What the cluster parts of the stress suite share: the guard, a local Ray, the runners.

Every part that starts Ray refuses to unless Ray is installed and this
process runs in a loopback-only network namespace (``.ci/extras-ray.sh`` and
CONTRIBUTING.md show the ``unshare -n`` line). The runners are the cluster tests'
``clusterlib`` package (``tests/clusterlib``), shipped to Ray's workers with
``runtime_env={"py_modules": [...]}``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from retinue.cluster.loopback import interfaces, only_loopback_interfaces

CLUSTERLIB = Path(__file__).resolve().parent.parent / "tests"
"""The folder of ``clusterlib``: a top-level module of the test suite (so last on the path)."""
if str(CLUSTERLIB) not in sys.path:
    sys.path.append(str(CLUSTERLIB))

import clusterlib  # noqa: E402

__all__ = ["CLUSTERLIB", "clusterlib", "connect", "ray_session", "why_not"]


def why_not() -> str | None:
    """Say why Ray must not start here (None: it may)."""
    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed (pip install -e '.[ray]')"
    if not only_loopback_interfaces():
        return (
            "Ray starts only in a loopback-only network namespace (interfaces here: "
            f"{', '.join(interfaces())}); as root: unshare -n sh -c "
            "'ip link set lo up && exec python -m stress --only cluster'"
        )
    return None


def connect(gates: Path | None = None, *, nodes: int = 1, num_cpus: int = 2) -> Any:
    """Start a local Ray on loopback and connect this process to it; return the LocalRay."""
    import ray

    from retinue.cluster import start_local_ray

    local = start_local_ray(nodes=nodes, num_cpus=num_cpus)
    env: dict[str, Any] = {"py_modules": [str(CLUSTERLIB / "clusterlib")]}
    if gates is not None:
        env["env_vars"] = {"RETINUE_CLUSTER_GATES": str(gates)}
    ray.init(address=local.address, log_to_driver=False, runtime_env=env)
    return local


@contextlib.contextmanager
def ray_session() -> Iterator[None]:
    """Be connected to a local Ray for the block: the one this process has, or a new one."""
    import ray

    if ray.is_initialized():
        yield
        return
    local = connect()
    try:
        yield
    finally:
        local.shutdown()
