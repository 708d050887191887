"""One writer per store: a second writer, here or in another process, gets ``StoreLocked``."""

from __future__ import annotations

import os
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
