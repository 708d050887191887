"""Loopback only: what a local Ray is started with, and where its processes listen."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from support import wait_until

from retinue.cluster.local import (
    LOOPBACK_PROXY,
    OWNER_FILE,
    TEMP_PREFIX,
    loopback_environment,
    make_address_folder,
    remove_stale_state,
)
from retinue.cluster.loopback import descendants, is_loopback, listening_sockets


def test_the_environment_keeps_ray_on_loopback() -> None:
    env = loopback_environment({})
    assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert env["RAY_USAGE_STATS_ENABLED"] == "0"
    assert env["RAY_AUTH_MODE"] == "disabled"
    assert env["http_proxy"] == env["HTTPS_PROXY"] == LOOPBACK_PROXY
    assert env["no_proxy"].split(",") == ["127.0.0.1", "localhost", "::1"]


def test_the_hosts_own_settings_are_kept() -> None:
    env = loopback_environment(
        {
            "https_proxy": "http://proxy.corp:3128",
            "no_proxy": "internal.corp,localhost",
            "RAY_USAGE_STATS_ENABLED": "1",
        }
    )
    assert "http_proxy" not in env and "https_proxy" not in env
    assert "RAY_USAGE_STATS_ENABLED" not in env
    assert env["no_proxy"].split(",") == ["internal.corp", "localhost", "127.0.0.1", "::1"]
    assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"  # never left to chance


def test_stale_state_of_killed_runs_is_removed(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    gone = tmp_path / f"{TEMP_PREFIX}gone"
    gone.mkdir()
    (gone / OWNER_FILE).write_text(dead.stdout.strip())
    mine = tmp_path / f"{TEMP_PREFIX}mine"
    mine.mkdir()
    (mine / OWNER_FILE).write_text(str(os.getpid()))
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    (tmp_path / "ray").mkdir()
    current = tmp_path / "ray" / "ray_current_cluster"
    current.write_text(f"127.0.0.1:{port}")
    removed = remove_stale_state(tmp_path)
    assert sorted(removed) == sorted([gone, current])
    assert mine.exists() and not gone.exists() and not current.exists()


def test_the_folder_ray_writes_its_address_to_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's test cluster writes ``<temp>/ray/ray_current_cluster`` and fails on a machine
    where that folder does not exist yet: the start makes it."""
    pytest.importorskip("ray", reason="needs the ray extra")
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    assert make_address_folder() == tmp_path / "ray"
    assert (tmp_path / "ray").is_dir()
    assert make_address_folder() == tmp_path / "ray"  # there already: fine


def test_addresses_are_classified() -> None:
    for address in ("127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"):
        assert is_loopback(address), address
    for address in ("0.0.0.0", "::", "10.0.0.2", "::ffff:10.0.0.2", "169.254.169.254"):
        assert not is_loopback(address), address


@pytest.mark.ray
def test_every_socket_the_clusters_processes_listen_on_is_loopback(
    shared_cluster: Any, local_ray: Any
) -> None:
    cluster = shared_cluster
    cluster.spawn("worker", "x", name="listen")
    pids = descendants(os.getpid())
    assert set(local_ray.node_pids()) <= set(pids)
    shard_pids = {pong.pid for pong in cluster.ping()}
    assert shard_pids <= set(pids)  # the shards' workers are below this driver too
    listeners = listening_sockets(pids)
    assert {lst.pid for lst in listeners} & set(local_ray.node_pids())  # GCS, raylets, ...
    assert {lst.pid for lst in listeners} & shard_pids  # each worker serves its calls
    outside = [lst for lst in listeners if not is_loopback(lst.address)]
    assert outside == [], outside


@pytest.mark.ray
def test_the_dead_proxy_goes_to_rays_processes_not_to_the_host(
    shared_cluster: Any, local_ray: Any
) -> None:
    for pong in shared_cluster.ping():
        environ = Path(f"/proc/{pong.pid}/environ").read_bytes().split(b"\0")
        assert f"http_proxy={LOOPBACK_PROXY}".encode() in environ  # the shard's model calls too
        assert b"RAY_USAGE_STATS_ENABLED=0" in environ
    assert os.environ.get("http_proxy") != LOOPBACK_PROXY  # this process keeps its own


def _processes_naming(folder: Path) -> list[int]:
    """The live processes whose command line names ``folder`` (a local Ray's temp folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(folder).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.ray
def test_a_start_that_fails_leaves_no_ray_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The head node is up when writing its address fails: the failed start stops it."""
    import ray._private.utils

    from retinue.cluster import start_local_ray
    from retinue.errors import ClusterError

    def refuse(address: str, temp_dir: str | None = None) -> None:
        raise OSError("injected: the address file cannot be written")

    monkeypatch.setattr(ray._private.utils, "write_ray_address", refuse)
    root = Path(tempfile.mkdtemp(prefix="rt-"))  # short: Ray's socket paths are bounded
    try:
        with pytest.raises(ClusterError, match="injected"):
            start_local_ray(temp_root=root)
        wait_until(lambda: not _processes_naming(root), timeout=60, what="its processes gone")
    finally:
        shutil.rmtree(root, ignore_errors=True)
