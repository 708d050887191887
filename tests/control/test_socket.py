"""The control socket's own rules: its peers, its bounds, its file's life.

The peer check runs a real client as another user: a child process that
imports retinue, drops to uid 65534 (``nobody``) and connects. That needs
root; elsewhere it is skipped.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import wait_until

import retinue
from control.writer import ROOT
from retinue import Limits, Profile, Runtime
from retinue.actors.commands import HOST, Wait
from retinue.control import _wire as w
from retinue.errors import LimitExceeded, StoreError

ECHO = [Profile("echo", runner=lambda t: t.task)]
NOBODY = 65534
AS_NOBODY = """
import concurrent.futures.thread, os, sys  # imported before the uid can no longer read them
import retinue
os.setgid({uid}); os.setuid({uid})
try:
    retinue.connect(sys.argv[1], connect_timeout_s=30).disconnect()
    print("connected")
except retinue.RetinueError as exc:
    print(type(exc).__name__, exc)
"""


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder other users may enter (pytest's own are its user's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="retinue-control-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def _connect_as_nobody(store: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, "-c", AS_NOBODY.format(uid=NOBODY), str(store)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid needs root")
def test_another_user_is_refused_by_the_file_and_by_its_credentials(open_folder: Path) -> None:
    store = open_folder / "store"
    with Runtime.open(store, profiles=ECHO):
        store.chmod(0o755)
        said = _connect_as_nobody(store)
        assert said.startswith("NotPermitted") and "refuses this user" in said
        # Even with the file's mode loosened, the writer checks the peer's uid itself.
        (store / "control.sock").chmod(0o666)
        said = _connect_as_nobody(store)
        assert said.startswith("NotPermitted") and f"uid {NOBODY} was refused" in said
        with retinue.connect(store) as remote:  # the writer's own user still is served
            remote.spawn("echo", "hi", name="e")
            assert remote.wait("e", 30).output == "hi"


def test_control_false_serves_no_socket_and_clears_a_stale_one(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with Runtime.open(store, profiles=ECHO):
        pass
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(store / "control.sock"))  # a socket file no one listens on
    stale.close()
    with Runtime.open(store, profiles=ECHO, control=False):
        assert not (store / "control.sock").exists()
    with pytest.raises(retinue.ArgumentTypeError, match="control must be True or False"):
        Runtime.open(store, control="yes")  # type: ignore[arg-type]


def test_a_file_in_the_sockets_place_is_an_error(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with Runtime.open(store, profiles=ECHO):
        pass
    (store / "control.sock").write_text("not a socket")
    with pytest.raises(StoreError, match="is not a socket"):
        Runtime.open(store, profiles=ECHO)


def test_the_connection_bound(tmp_path: Path) -> None:
    limits = Limits(control_max_connections=1)
    with Runtime.open(tmp_path / "s", profiles=ECHO, limits=limits) as rt:
        with retinue.connect(rt.path) as first:
            with pytest.raises(LimitExceeded, match="control_max_connections"):
                retinue.connect(rt.path)
            assert first.agents() == []
        with retinue.connect(rt.path) as again:
            assert again.agents() == []


def test_the_message_bound(tmp_path: Path) -> None:
    limits = Limits(control_max_message_bytes=4096)
    with Runtime.open(tmp_path / "s", profiles=ECHO, limits=limits) as rt:
        with retinue.connect(rt.path) as remote:
            rt.spawn("echo", "x" * 10_000, name="big")
            with pytest.raises(LimitExceeded, match="control_max_message_bytes"):
                remote.wait("big", 30)
            with pytest.raises(LimitExceeded, match="control_max_message_bytes"):
                remote.spawn("echo", "y" * 10_000)  # too large to send: refused on this side
            assert remote.backlog().host_pending_completions == 1  # the connection goes on
        assert rt.wait("big", 30).output == "x" * 10_000  # the refused answer was given back


def test_an_unconfirmed_answer_is_given_back_when_its_connection_closes(tmp_path: Path) -> None:
    """A client that reads a wait's answer but never confirms it (it died) loses nothing."""
    with Runtime.open(tmp_path / "s", profiles=ECHO) as rt:
        rt.spawn("echo", "kept", name="e")
        raw = socket.socket(socket.AF_UNIX)
        raw.settimeout(30)
        raw.connect(str(rt.path / "control.sock"))
        with raw:
            assert isinstance(w.decode_server(_read(raw)), w.Hello)
            command = w.encode_command(Wait(HOST, "e"))
            raw.sendall(w.framed(w.encode(w.Call(id=1, command=command, timeout=30)), 1 << 20))
            answer = w.decode_server(_read(raw))
            assert isinstance(answer, w.Answer) and answer.confirm and answer.error is None
            assert len(rt.leases()) == 1  # taken under the socket's lease, not acknowledged
        # The connection closed without Received: once the writer sees it gone, the
        # completion's lease is released and the completion is the host's again.
        wait_until(lambda: rt.leases() == {}, 30, "the socket's lease released")
        assert rt.wait("e", 30).output == "kept"


def _read(sock: socket.socket) -> bytes:
    size = int.from_bytes(_exactly(sock, 4), "big")
    return _exactly(sock, size)


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the writer closed the connection"
        data += chunk
    return data


def test_a_lease_the_socket_took_before_a_crash_is_released_by_the_next_writer(
    tmp_path: Path,
) -> None:
    from retinue.control import LEASE_PREFIX

    store = tmp_path / "s"
    with Runtime.open(store, profiles=ECHO, control=False) as rt:
        rt.spawn("echo", "kept", name="e")
        rt.wait("e", 30, lease=f"{LEASE_PREFIX}lost")  # taken, never confirmed
        rt.spawn("echo", "mine", name="m")
        rt.wait("m", 30, lease="the-hosts-own")
    with Runtime.open(store, profiles=ECHO) as rt:  # its socket gives back what was lost
        assert set(rt.leases()) == {"the-hosts-own"}  # a host's own lease is the host's
        assert rt.wait("e", 30).output == "kept"
