"""One writer per store: a second writer, here or in another process, gets ``StoreLocked``."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from retinue import (
    ConfigurationError,
    DelegationCycleError,
    InvalidArgument,
    Profile,
    Runtime,
    StoreError,
    StoreLocked,
)

from . import PROMPT_S, Child, Recorder


def open_rt(path: Path, runner: Recorder | None = None) -> Runtime:
    """Open a writer runtime with one ``worker`` profile."""
    return Runtime.open(path, profiles=[Profile("worker", runner=runner or Recorder())])


HOLDER = r"""
import os, sys, threading
from retinue import Profile, Runtime
rt = Runtime.open(sys.argv[1], profiles=[Profile("worker", runner=lambda turn: "ok")])
info = rt.spawn("worker", "from the holder", name="held")
rt.wait(info.id, timeout=20)
print("HOLDING", os.getpid(), flush=True)
threading.Event().wait()
"""

CONTENDER = r"""
import sys
from retinue import Profile, Runtime, StoreLocked
try:
    rt = Runtime.open(sys.argv[1], profiles=[Profile("worker", runner=lambda turn: "ok")])
except StoreLocked as exc:
    print("LOCKED", exc.pid, "|", str(exc).replace("\n", " "), flush=True)
else:
    rt.shutdown()
    print("OPENED", flush=True)
"""


def test_second_writer_in_this_process_is_refused_and_the_first_keeps_working(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    runner = Recorder()
    with open_rt(store, runner) as rt:
        for _ in range(2):  # a refused open must not release the holder's lock
            with pytest.raises(StoreLocked) as caught:
                open_rt(store)
            assert caught.value.pid == os.getpid()
            assert str(os.getpid()) in str(caught.value)
            assert isinstance(caught.value, StoreError)
            # It says what works: not readonly=True here (a process opens a store once).
            assert "in this process" in str(caught.value)
            assert "readonly=True here fails too" in str(caught.value)
        with pytest.raises(StoreError, match="already open in this process"):
            Runtime.open(store, readonly=True)  # the advice does not send you here
        info = rt.spawn("worker", "still mine")
        assert rt.wait(info.id, timeout=PROMPT_S).output == "done:still mine"
    with open_rt(store) as rt:
        assert [a.task for a in rt.agents()] == ["still mine"]


def test_the_same_store_by_another_name_is_still_locked(tmp_path: Path) -> None:
    store = tmp_path / "store"
    alias = tmp_path / "alias"
    with open_rt(store):
        alias.symlink_to(store, target_is_directory=True)
        for other in (alias, tmp_path / "." / "store", Path(str(store) + "/")):
            with pytest.raises(StoreLocked):
                open_rt(other)


def test_writer_in_another_process_is_named_by_pid(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Child(HOLDER, store) as holder:
        (pid,) = holder.expect("HOLDING")
        assert int(pid) == holder.pid
        for _ in range(2):
            with pytest.raises(StoreLocked) as caught:
                open_rt(store)
            assert caught.value.pid == holder.pid
            assert str(holder.pid) in str(caught.value)


def test_this_process_holding_is_named_to_another_process(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with open_rt(store), Child(CONTENDER, store) as contender:
        words = contender.expect("LOCKED")
        assert contender.finish() == 0
    assert words[0] == str(os.getpid())
    assert str(os.getpid()) in " ".join(words[2:])
    # Closed, the store is free for the other process.
    with Child(CONTENDER, store) as contender:
        contender.expect("OPENED")
        assert contender.finish() == 0


def test_a_killed_holder_does_not_keep_the_lock(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Child(HOLDER, store) as holder:
        holder.expect("HOLDING")
        with pytest.raises(StoreLocked):
            open_rt(store)
        holder.kill()
    with open_rt(store) as rt:
        assert [a.name for a in rt.agents()] == ["held"]
        # Now this process is the holder, and says so.
        with Child(CONTENDER, store) as contender:
            words = contender.expect("LOCKED")
        assert words[0] == str(os.getpid())


def test_a_failed_open_does_not_hold_the_lock(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with open_rt(store):
        pass
    bad = [Profile("worker", runner=lambda turn: "x"), Profile("worker", runner=lambda t: "y")]
    with pytest.raises(ConfigurationError):
        Runtime.open(store, profiles=bad)
    with pytest.raises(InvalidArgument):
        Runtime.open(store, profiles=[Profile("worker", runner=Recorder())], durability="nope")
    with pytest.raises(DelegationCycleError):
        Runtime.open(store, profiles=[Profile("w", subagents=("w",), runner=Recorder())])
    with open_rt(store), pytest.raises(StoreLocked):
        open_rt(store)


READER = r"""
import sys, threading
from retinue import Runtime
rt = Runtime.open(sys.argv[1], readonly=True)
print("READING", len(rt.agents()), flush=True)
threading.Event().wait()
"""


def test_readers_do_not_take_the_writer_lock(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with open_rt(store) as rt:
        rt.spawn("worker", "before the reader")
    with Child(READER, store) as reader:
        assert reader.expect("READING") == ["1"]
        with open_rt(store) as rt:
            info = rt.spawn("worker", "while a reader is open")
            rt.wait(info.id, timeout=PROMPT_S)


FORKER = r"""
import multiprocessing, os, sys, threading
from retinue import Profile, Runtime

def linger():
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    threading.Event().wait()

rt = Runtime.open(sys.argv[1], profiles=[Profile("worker", runner=lambda turn: "ok")])
child = multiprocessing.get_context("fork").Process(target=linger, daemon=False)
child.start()
print("HOLDING", os.getpid(), child.pid, flush=True)
threading.Event().wait()
"""


def test_a_forked_child_does_not_keep_a_dead_writers_lock(tmp_path: Path) -> None:
    store = tmp_path / "store"
    grandchild = 0
    try:
        with Child(FORKER, store) as writer:
            pid, grandchild_pid = writer.expect("HOLDING")
            grandchild = int(grandchild_pid)
            with pytest.raises(StoreLocked) as caught:  # the writer itself still holds it
                open_rt(store)
            assert caught.value.pid == int(pid)
            writer.kill()
        with open_rt(store) as rt:  # the forked child outlives the writer, not its lock
            assert rt.agents() == []
    finally:
        if grandchild:
            with contextlib.suppress(ProcessLookupError):
                os.kill(grandchild, signal.SIGKILL)


SQUATTER = r"""
import fcntl, os, sys, threading
fd = os.open(os.path.join(sys.argv[1], "writer.lock"), os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, bytes.fromhex(sys.argv[2]))
print("SQUATTING", flush=True)
threading.Event().wait()
"""


def test_a_lock_held_in_the_name_of_a_dead_pid_says_so(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with Child(SQUATTER, store, str(gone.pid).encode().hex()) as squatter:
        squatter.expect("SQUATTING")
        with pytest.raises(StoreLocked) as caught:
            open_rt(store)
    assert caught.value.pid is None
    assert f"pid {gone.pid}" in str(caught.value)
    assert "no longer running" in str(caught.value)


@pytest.mark.parametrize("garbage", ["\xff\xfe\x00garbage", "12 34", "9" * 40, "-5"])
def test_a_garbage_lock_file_is_named_as_such_or_overwritten(tmp_path: Path, garbage: str) -> None:
    store = tmp_path / "store"
    store.mkdir()
    with Child(SQUATTER, store, garbage.encode("latin-1").hex()) as squatter:
        squatter.expect("SQUATTING")
        with pytest.raises(StoreLocked) as caught:
            open_rt(store)
        assert caught.value.pid is None
        assert "names no pid" in str(caught.value)
    (store / "writer.lock").write_bytes(garbage.encode("latin-1"))  # nobody holds it now
    with open_rt(store) as rt:
        assert rt.agents() == []
    assert (store / "writer.lock").read_bytes() == b""


def test_the_lock_descriptor_is_not_inherited_by_exec(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with open_rt(store):
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
        lock_fds = [
            fd
            for fd in fds
            if os.path.realpath(f"/proc/self/fd/{fd}") == str((store / "writer.lock").resolve())
        ]
        assert len(lock_fds) == 1
        assert not os.get_inheritable(lock_fds[0])
        assert fcntl.fcntl(lock_fds[0], fcntl.F_GETFD) & fcntl.FD_CLOEXEC
