"""``compact(reclaim=True)``: the file's free pages go back, and nothing acknowledged is lost.

A reclaim swaps a compacting copy of ``data.mdb`` in place at a quiet point of
the writer. These tests run it on real stores: what it gives back, that what
was committed before and submitted during it is there after, that a reader in
another process follows the new file, and that a SIGKILL at each of its steps
(and at random instants) leaves a store that opens with everything acknowledged.
"""

from __future__ import annotations

import asyncio
import errno
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from retinue import AgentState, Limits, Profile, Runtime
from retinue.actors.tree._compaction import CompactionReport
from retinue.errors import StoreError, StoreReadOnly
from retinue.persistence import copies
from retinue.persistence.copies import RECLAIM_FILE

from . import CHILD_ENV, PROMPT_S, REPO, Child


def _out(turn: object) -> str:
    return "o" * 400


PROFILES = [Profile("worker", runner=_out)]


def _churn(rt: Runtime, agents: int, keep_every: int = 0) -> list[str]:
    """Run ``agents`` agents; close all but every ``keep_every``-th; return the kept ids."""
    kept: list[str] = []
    for i in range(agents):
        agent = rt.spawn("worker", f"task {i}")
        rt.wait(agent.id)
        if keep_every and i % keep_every == 0:
            kept.append(agent.id)
        else:
            rt.close(agent.id)
    return kept


def test_reclaim_gives_the_free_pages_back_and_keeps_every_record(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    limits = Limits(retain_closed_agents=100)
    with Runtime.open(folder, profiles=PROFILES, limits=limits, durability="buffered") as rt:
        kept = _churn(rt, 1500, keep_every=3)
        rt.send(kept[0], "unread")
        rt.compact()  # what retention removes goes first: the reclaim then removes nothing
        before = rt.diagnostics.store
        agents = {a.id: a for a in rt.agents(include_closed=True)}
        report = rt.compact(reclaim=True)
        after = rt.diagnostics.store
        assert before is not None and after is not None
        assert report.file_bytes_before == before.file_bytes
        assert report.file_bytes_after == after.file_bytes < before.file_bytes
        assert report.reclaimed_bytes == before.file_bytes - after.file_bytes
        assert after.pages_free <= 2  # a compacted file: LMDB's own bookkeeping aside
        assert after.txnid == before.txnid  # the copy goes on from the old file's last
        assert {a.id: a for a in rt.agents(include_closed=True)} == agents
        assert rt.backlog().unread_messages == 1
        more = _churn(rt, 50, keep_every=1)  # the writer commits to the new file
    assert not (folder / RECLAIM_FILE).exists()
    with Runtime.open(folder, profiles=PROFILES, limits=limits) as rt:
        assert rt.diagnostics == []
        for agent_id in kept + more:
            assert rt.get(agent_id).state == AgentState.COMPLETED


def test_what_is_submitted_during_a_reclaim_is_committed_after_it(tmp_path: Path) -> None:
    """Spawns from other threads while reclaims run: every one answered is stored."""
    folder = tmp_path / "store"
    acked: list[str] = []
    stop = threading.Event()
    errors: list[BaseException] = []
    with Runtime.open(folder, profiles=PROFILES, limits=Limits(retain_closed_agents=50)) as rt:
        _churn(rt, 300)

        def spawner() -> None:
            try:
                while not stop.is_set():
                    acked.append(rt.spawn("worker", "during").id)
            except BaseException as exc:  # pragma: no cover - the assertion below says it
                errors.append(exc)

        threads = [threading.Thread(target=spawner) for _ in range(3)]
        for thread in threads:
            thread.start()
        reports = [rt.compact(reclaim=True) for _ in range(5)]
        stop.set()
        for thread in threads:
            thread.join(PROMPT_S)
        assert errors == []
        assert all(r.file_bytes_after > 0 for r in reports)
    with Runtime.open(folder, readonly=True) as reader:
        stored = {a.id for a in reader.agents(include_closed=True)}
    assert acked and set(acked) <= stored


def test_the_async_twin_reclaims_while_the_loop_runs(tmp_path: Path) -> None:
    limits = Limits(retain_closed_agents=50)

    async def scenario(rt: Runtime) -> tuple[CompactionReport, int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())
        report = await rt.compact_async(reclaim=True)
        ticker.cancel()
        return report, ticks

    with Runtime.open(tmp_path / "s", profiles=PROFILES, limits=limits) as rt:
        _churn(rt, 300)
        report, ticks = asyncio.run(scenario(rt))
    assert 0 < report.file_bytes_after < report.file_bytes_before
    assert ticks > 1  # the loop ran while the store was copied


def test_a_copy_that_fails_leaves_the_store_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills while the copy is written: a typed error, the live file untouched."""
    folder = tmp_path / "store"

    def full(path: Path, txnid: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with Runtime.open(folder, profiles=PROFILES, limits=Limits(retain_closed_agents=50)) as rt:
        kept = _churn(rt, 200, keep_every=2)
        live = (folder / "data.mdb").stat().st_ino
        monkeypatch.setattr(copies, "rebase_meta_pages", full)
        with pytest.raises(StoreError, match=r"No space left on device.*unchanged"):
            rt.compact(reclaim=True)
        assert not (folder / RECLAIM_FILE).exists()
        # The same file (no swap); its size may move with the compaction that ran first.
        assert (folder / "data.mdb").stat().st_ino == live
        kept += _churn(rt, 5, keep_every=1)  # the writer goes on, on the same file
    with Runtime.open(folder, readonly=True) as reader:
        assert reader.diagnostics == []
        assert {a.id for a in reader.agents()} >= set(kept)


def test_a_reader_refuses_to_reclaim(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "s", profiles=PROFILES) as rt:
        _churn(rt, 3)
    with Runtime.open(tmp_path / "s", readonly=True) as reader, pytest.raises(StoreReadOnly):
        reader.compact(reclaim=True)


READER_CHILD = r"""
import sys
from retinue import Runtime
with Runtime.open(sys.argv[1], readonly=True) as rt:
    print("OPEN", flush=True)
    for line in sys.stdin:
        agents = rt.agents(include_closed=True)
        print("COUNT", len(agents), rt.diagnostics.store.file_bytes, flush=True)
"""


def test_a_reader_in_another_process_follows_the_reclaimed_file(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    limits = Limits(retain_closed_agents=1000)
    with Runtime.open(folder, profiles=PROFILES, limits=limits) as rt:
        _churn(rt, 400, keep_every=2)
        for agent in rt.agents():
            rt.close(agent.id)
        rt.compact()  # nothing to remove yet: the retention keeps 1,000
        reader = subprocess.Popen(
            [sys.executable, "-c", READER_CHILD, str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=CHILD_ENV,
        )
        try:
            assert reader.stdin is not None and reader.stdout is not None
            assert reader.stdout.readline().split() == ["OPEN"]

            def count() -> tuple[int, int]:
                assert reader.stdin is not None and reader.stdout is not None
                reader.stdin.write("count\n")
                reader.stdin.flush()
                words = reader.stdout.readline().split()
                assert words[0] == "COUNT", words
                return int(words[1]), int(words[2])

            assert count()[0] == 400
            report = rt.compact(reclaim=True)
            assert count() == (400, report.file_bytes_after)  # the reader opened the new file
            _churn(rt, 20, keep_every=1)
            assert count()[0] == 420  # and reads what the writer commits to it
        finally:
            if reader.stdin is not None:
                reader.stdin.close()
            code = reader.wait(PROMPT_S)
            if reader.stdout is not None:
                reader.stdout.close()
        assert code == 0


# -- SIGKILL during a reclaim ---------------------------------------------------------------

RECLAIM_CHILD = r"""
import sys, threading, time
from retinue import Limits, Profile, Runtime
import retinue.persistence.copies as copies
import retinue.persistence.store as store

folder, step = sys.argv[1], sys.argv[2]

out = threading.Lock()  # one whole line at a time: two threads print

def say(*words):
    # One write per line: print writes its words and the newline apart when stdout is
    # unbuffered, and a SIGKILL between them left a line cut short ("ACK " with no id).
    with out:
        sys.stdout.write(" ".join(map(str, words)) + "\n")
        sys.stdout.flush()

def stall(name):
    say("AT", name)
    time.sleep(3600)

def wrap(module, attr, name, before):
    original = getattr(module, attr)
    def wrapped(*args, **kwargs):
        if before and step == name:
            stall(name)
        result = original(*args, **kwargs)
        if not before and step == name:
            stall(name)
        return result
    setattr(module, attr, wrapped)

wrap(copies, "rebase_meta_pages", "copied", before=True)      # the copy written, not rebased
wrap(store, "compacting_copy", "checked", before=False)       # the copy whole, not swapped
wrap(store, "swap_in", "detached", before=True)               # the live file closed
wrap(store, "swap_in", "swapped", before=False)               # renamed, not reopened

limits = Limits(retain_closed_agents=200)
profiles = [Profile("worker", runner=lambda turn: "o" * 400)]
rt = Runtime.open(folder, profiles=profiles, limits=limits)
for i in range(600):
    agent = rt.spawn("worker", "warm")
    rt.wait(agent.id)
    rt.close(agent.id)

def spawner():
    while True:
        info = rt.spawn("worker", "acked")
        say("ACK", info.id)

say("WARM")
threading.Thread(target=spawner, daemon=True).start()
time.sleep(0.05)
while True:
    report = rt.compact(reclaim=True)
    say("RECLAIMED", report.file_bytes_before, report.file_bytes_after)
"""


def _acked(child: Child) -> list[str]:
    return [line.split()[1] for line in child.lines if line.startswith("ACK ")]


def _check_reopens_whole(folder: Path, acked: list[str]) -> None:
    """The store opens (a writer), without diagnostics, with every acknowledged agent."""
    with Runtime.open(folder, profiles=PROFILES) as rt:
        assert rt.diagnostics == []
        stored = {a.id for a in rt.agents(include_closed=True)}
        missing = [a for a in acked if a not in stored]
        assert not missing, f"{len(missing)} acknowledged spawns lost"
        assert not (folder / RECLAIM_FILE).exists()  # a half-done reclaim is undone
        rt.spawn("worker", "after")  # and it takes new work


@pytest.mark.parametrize("step", ["copied", "checked", "detached", "swapped"])
def test_a_sigkill_at_each_step_of_a_reclaim_loses_nothing(tmp_path: Path, step: str) -> None:
    folder = tmp_path / "store"
    with Child(RECLAIM_CHILD, folder, step) as child:
        child.expect("WARM", timeout=PROMPT_S * 3)
        child.expect("AT", timeout=PROMPT_S * 3)
        child.kill()
        acked = _acked(child)
    assert (folder / RECLAIM_FILE).exists() == (step in ("copied", "checked", "detached"))
    _check_reopens_whole(folder, acked)


def test_sigkills_at_random_instants_of_repeated_reclaims_lose_nothing(tmp_path: Path) -> None:
    """Reclaims in a loop beside spawns; killed at random instants, reopened each time."""
    folder = tmp_path / "store"
    rng = random.Random(33)
    for _ in range(4):
        with Child(RECLAIM_CHILD, folder, "none") as child:
            child.expect("WARM", timeout=PROMPT_S * 3)
            child.expect("RECLAIMED", timeout=PROMPT_S * 3)
            threading.Event().wait(rng.uniform(0.0, 0.3))
            child.kill()
            acked = _acked(child)
        _check_reopens_whole(folder, acked)
