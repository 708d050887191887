"""Start a local Ray that stays on loopback: :func:`start_local_ray`, the one way retinue does it.

Measured on Linux with Ray 2.60: by default Ray's processes listen on every
interface and dial the machine's external address (``_node_ip_address`` does
not change that), its dashboard probes cloud metadata addresses at start-up,
a killed run leaves state that breaks the next start, its node processes die
with the thread that started them, and a ``ray`` folder in the working
directory (``/tmp/ray`` when run from ``/tmp``) shadows the package. So,
before Ray starts, :func:`start_local_ray`:

- sets ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (every process then binds and
  advertises 127.0.0.1), ``RAY_USAGE_STATS_ENABLED=0`` and
  ``RAY_AUTH_MODE=disabled`` (no token file in the home folder) unless the host
  set them, and sends HTTP(S) to anything but loopback to a dead loopback proxy
  (``http_proxy=http://127.0.0.1:9``, ``no_proxy`` for loopback) unless the
  host configured a proxy of its own;
- starts no dashboard;
- removes what killed runs left: its own temporary folders whose owner died,
  and a ``ray_current_cluster`` file naming a loopback address nobody serves;
- starts the nodes from a thread of its own that lives until
  :meth:`LocalRay.shutdown`, in a temporary folder of its own, and a reaper
  (:mod:`retinue.cluster._reaper`) that kills every process of this Ray when
  the driver dies, so a killed driver leaves no shard holding its store.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retinue.errors import ClusterError

__all__ = ["LOOPBACK_PROXY", "LocalRay", "load_ray", "loopback_environment", "start_local_ray"]

LOOPBACK_PROXY = "http://127.0.0.1:9"  # the discard port: nothing answers, nothing leaves
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
PROXY_VARIABLES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")
TEMP_PREFIX = "retinue-ray-"
OWNER_FILE = "owner.pid"
START_TIMEOUT_S = 120.0
OBJECT_STORE_BYTES = 80 * 1024 * 1024


def load_ray() -> Any:
    """Import Ray, making sure it is the installed package.

    Raises:
        ClusterError: Ray is not installed (``pip install 'retinue[ray]'``), or a
            folder named ``ray`` (``/tmp/ray`` when run from ``/tmp``) shadows it.
    """
    try:
        import ray
    except ImportError:
        raise ClusterError("retinue.cluster needs Ray: pip install 'retinue[ray]'") from None
    if getattr(ray, "__file__", None) is None or not hasattr(ray, "init"):
        where = list(getattr(ray, "__path__", []))
        raise ClusterError(
            f"a folder named 'ray' ({', '.join(where)}) shadows the ray package on sys.path "
            "(Ray's own /tmp/ray does when Python runs from /tmp); run from another folder"
        )
    return ray


def loopback_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Return the variables a local Ray needs to bind and dial loopback only.

    ``environ`` (default ``os.environ``) is what the host set: its own
    ``RAY_USAGE_STATS_ENABLED``, ``RAY_AUTH_MODE`` and proxy settings are kept.
    """
    current = dict(os.environ if environ is None else environ)
    env = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    for key, value in (("RAY_USAGE_STATS_ENABLED", "0"), ("RAY_AUTH_MODE", "disabled")):
        if key not in current:
            env[key] = value
    if not any(current.get(v) for v in PROXY_VARIABLES):
        env.update(dict.fromkeys(PROXY_VARIABLES, LOOPBACK_PROXY))
    for key in ("no_proxy", "NO_PROXY"):
        hosts = [h for h in current.get(key, "").split(",") if h]
        env[key] = ",".join([*hosts, *(h for h in LOOPBACK_HOSTS if h not in hosts)])
    return env


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_state(temp_root: Path | None = None) -> list[Path]:
    """Remove what killed local starts left behind; return what went.

    That is this module's temporary folders whose owner process is gone, and
    Ray's ``ray_current_cluster`` file (which makes a later ``ray.init()``
    connect to a dead cluster) when it names a loopback address nobody serves.
    """
    root = Path(tempfile.gettempdir()) if temp_root is None else temp_root
    removed: list[Path] = []
    for folder in root.glob(f"{TEMP_PREFIX}*"):
        try:
            owner = int((folder / OWNER_FILE).read_text())
        except (OSError, ValueError):
            owner = 0
        if owner and _pid_alive(owner):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    current = root / "ray" / "ray_current_cluster"
    with contextlib.suppress(OSError, ValueError):
        host, _, port = current.read_text().strip().rpartition(":")
        if host in LOOPBACK_HOSTS and not _serves(host, int(port)):
            current.unlink()
            removed.append(current)
    return removed


def make_address_folder() -> Path:
    """Create (if missing) the folder Ray's ``cluster_utils`` writes ``ray_current_cluster`` to.

    That is Ray's default temporary folder (``/tmp/ray``, or under
    ``RAY_TMPDIR``), whatever ``temp_dir`` the nodes get; on a machine where
    it does not exist yet (no Ray ever ran) the start fails with
    ``FileNotFoundError``. Returns the folder.
    """
    from ray._common.utils import get_default_ray_temp_dir

    folder = Path(get_default_ray_temp_dir())
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _serves(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


@dataclass
class LocalRay:
    """A Ray cluster of ``nodes`` nodes on this machine, on loopback, owned by one thread."""

    address: str
    nodes: int
    temp_dir: Path
    owner: int = field(default_factory=os.getpid)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _cluster: Any = field(default=None, repr=False)
    _reaper: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def node_pids(self) -> list[int]:
        """Return the pids of the node processes this cluster started (raylets, GCS, ...)."""
        pids: list[int] = []
        cluster = self._cluster
        for node in [cluster.head_node, *cluster.worker_nodes] if cluster is not None else []:
            for infos in node.all_processes.values():
                pids.extend(info.process.pid for info in infos)
        return pids

    def shutdown(self) -> None:
        """Disconnect this process if it is connected, stop every node, remove the folder."""
        if self._stop.is_set():
            return
        ray = load_ray()
        with contextlib.suppress(Exception):
            if ray.is_initialized():
                ray.shutdown()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(START_TIMEOUT_S)
        self._release_reaper()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def _start_reaper(self) -> None:
        """Start the process that kills this Ray's processes once the driver is gone."""
        self._reaper = subprocess.Popen(
            [sys.executable, "-m", "retinue.cluster._reaper", *map(str, self.node_pids())],
            stdin=subprocess.PIPE,
            start_new_session=True,
        )

    def _release_reaper(self) -> None:
        """Close the reaper's pipe (it reaps what is left) and wait for it."""
        reaper, self._reaper = self._reaper, None
        if reaper is not None and reaper.stdin is not None:
            reaper.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                reaper.wait(START_TIMEOUT_S)


def start_local_ray(
    *,
    nodes: int = 1,
    num_cpus: int = 1,
    object_store_memory: int = OBJECT_STORE_BYTES,
    temp_root: str | os.PathLike[str] | None = None,
) -> LocalRay:
    """Start a local Ray of ``nodes`` nodes (``num_cpus`` each), bound to loopback only.

    Everything Ray needs is set before it starts (see the module's
    docstring); the proxy variables go to Ray's processes (and so to the
    shards' model calls: a host that calls a hosted model from a local
    cluster sets its own proxy, or names the provider in ``no_proxy``) and
    this process gets its own back. Connect with ``ray.init(address=local.address)`` or pass the
    address to :meth:`retinue.cluster.Cluster.open`; stop it with
    :meth:`LocalRay.shutdown`.

    Raises:
        ClusterError: Ray is missing or shadowed, or it did not start (the
            message carries Ray's error).
    """
    if nodes < 1 or num_cpus < 0:
        raise ClusterError(f"a local Ray needs at least one node, not {nodes}")
    load_ray()
    env = loopback_environment()
    # The proxies are for Ray's processes (they keep them); this process gets its own back.
    saved = {key: os.environ.get(key) for key in env if not key.startswith("RAY_")}
    os.environ.update(env)
    try:
        return _start(nodes, num_cpus, object_store_memory, temp_root)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _start(
    nodes: int, num_cpus: int, object_store_memory: int, temp_root: str | os.PathLike[str] | None
) -> LocalRay:
    """Start the nodes (the environment is set) and their reaper; see :func:`start_local_ray`."""
    from ray.cluster_utils import Cluster as RayCluster

    root = Path(tempfile.gettempdir() if temp_root is None else temp_root)
    remove_stale_state(root)
    make_address_folder()
    temp_dir = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=root))
    (temp_dir / OWNER_FILE).write_text(str(os.getpid()))
    local = LocalRay(address="", nodes=nodes, temp_dir=temp_dir)
    started = threading.Event()
    failure: list[BaseException] = []
    args: dict[str, Any] = {
        "num_cpus": num_cpus,
        "object_store_memory": object_store_memory,
        "temp_dir": str(temp_dir),
    }

    def own() -> None:
        # Ray's node processes die with the thread that started them: this one
        # lives until shutdown.
        cluster: Any = None
        try:
            cluster = RayCluster(initialize_head=False, shutdown_at_exit=False)
            cluster.add_node(**args, include_dashboard=False)  # the head
            for _ in range(nodes - 1):
                cluster.add_node(**args)
            local._cluster = cluster
            local.address = cluster.address
            local._start_reaper()
        except BaseException as exc:
            failure.append(exc)
            if cluster is not None:  # what started before the failure must not outlive it
                with contextlib.suppress(Exception):
                    cluster.shutdown()
            return
        finally:
            started.set()
        local._stop.wait()
        with contextlib.suppress(Exception):
            cluster.shutdown()

    local._thread = threading.Thread(target=own, name="retinue-local-ray", daemon=True)
    local._thread.start()
    if not started.wait(START_TIMEOUT_S) or failure:
        local._stop.set()
        local._release_reaper()
        shutil.rmtree(temp_dir, ignore_errors=True)
        why = f"{type(failure[0]).__name__}: {failure[0]}" if failure else "it timed out"
        raise ClusterError(f"a local Ray did not start ({why})")
    return local
