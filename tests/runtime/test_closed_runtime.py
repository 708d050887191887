"""Every call on a closed runtime raises ``RuntimeClosed``, writable or read-only, sync or async.

The table below must name every public method of :class:`Runtime` (the test
checks it against the class), so a new method cannot skip the rule.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from retinue import Limits, Profile, Runtime, RuntimeClosed
from retinue.testing import echo

Call = Callable[[Runtime, str, Path], Any]

# How to call each public method on a closed runtime: ``ref`` is an agent the
# runtime had, ``dest`` a free path for a backup.
CALLS: dict[str, Call] = {
    "ack_lease": lambda rt, ref, dest: rt.ack_lease("L"),
    "agents": lambda rt, ref, dest: rt.agents(include_closed=True),
    "agent_counts": lambda rt, ref, dest: rt.agent_counts(),
    "iter_agents": lambda rt, ref, dest: next(rt.iter_agents()),  # raises as it pages
    "approvals": lambda rt, ref, dest: rt.approvals(),
    "approve": lambda rt, ref, dest: rt.approve("request"),
    "deny": lambda rt, ref, dest: rt.deny("request", reason="no"),
    "backlog": lambda rt, ref, dest: rt.backlog(),
    "backup": lambda rt, ref, dest: rt.backup(dest),
    "close": lambda rt, ref, dest: rt.close(ref),
    "close_tree": lambda rt, ref, dest: rt.close_tree(ref),
    "compact": lambda rt, ref, dest: rt.compact(),
    "follow_up": lambda rt, ref, dest: rt.follow_up(ref, "again"),
    "fork": lambda rt, ref, dest: rt.fork(ref),
    "get": lambda rt, ref, dest: rt.get(ref),
    "inspect": lambda rt, ref, dest: rt.inspect(ref),
    "interrupt": lambda rt, ref, dest: rt.interrupt(ref),
    "interrupt_tree": lambda rt, ref, dest: rt.interrupt_tree(ref),
    "leases": lambda rt, ref, dest: rt.leases(),
    "messages": lambda rt, ref, dest: rt.messages(timeout=1),
    "release_lease": lambda rt, ref, dest: rt.release_lease("L"),
    "resume": lambda rt, ref, dest: rt.resume(ref),
    "run": lambda rt, ref, dest: rt.run("worker", "t", timeout=1),
    "send": lambda rt, ref, dest: rt.send(ref, "hi"),
    "spawn": lambda rt, ref, dest: rt.spawn("worker", "t"),
    "stream": lambda rt, ref, dest: rt.stream(ref),
    "subscribe": lambda rt, ref, dest: rt.subscribe(lambda event: None),
    "wait": lambda rt, ref, dest: rt.wait(ref, timeout=1),
    "wait_idle": lambda rt, ref, dest: rt.wait_idle(timeout=1),
}
ASYNC_CALLS: dict[str, Call] = {
    "ack_lease_async": lambda rt, ref, dest: rt.ack_lease_async("L"),
    "backup_async": lambda rt, ref, dest: rt.backup_async(dest),
    "wait_idle_async": lambda rt, ref, dest: rt.wait_idle_async(timeout=1),
    "agents_async": lambda rt, ref, dest: rt.agents_async(include_closed=True),
    "agent_counts_async": lambda rt, ref, dest: rt.agent_counts_async(),
    "iter_agents_async": lambda rt, ref, dest: anext(rt.iter_agents_async()),
    "approvals_async": lambda rt, ref, dest: rt.approvals_async(),
    "approve_async": lambda rt, ref, dest: rt.approve_async("request"),
    "deny_async": lambda rt, ref, dest: rt.deny_async("request", reason="no"),
    "backlog_async": lambda rt, ref, dest: rt.backlog_async(),
    "close_async": lambda rt, ref, dest: rt.close_async(ref),
    "close_tree_async": lambda rt, ref, dest: rt.close_tree_async(ref),
    "compact_async": lambda rt, ref, dest: rt.compact_async(),
    "follow_up_async": lambda rt, ref, dest: rt.follow_up_async(ref, "again"),
    "fork_async": lambda rt, ref, dest: rt.fork_async(ref),
    "get_async": lambda rt, ref, dest: rt.get_async(ref),
    "inspect_async": lambda rt, ref, dest: rt.inspect_async(ref),
    "interrupt_async": lambda rt, ref, dest: rt.interrupt_async(ref),
    "interrupt_tree_async": lambda rt, ref, dest: rt.interrupt_tree_async(ref),
    "leases_async": lambda rt, ref, dest: rt.leases_async(),
    "messages_async": lambda rt, ref, dest: rt.messages_async(timeout=1),
    "release_lease_async": lambda rt, ref, dest: rt.release_lease_async("L"),
    "resume_async": lambda rt, ref, dest: rt.resume_async(ref),
    "run_async": lambda rt, ref, dest: rt.run_async("worker", "t", timeout=1),
    "send_async": lambda rt, ref, dest: rt.send_async(ref, "hi"),
    "spawn_async": lambda rt, ref, dest: rt.spawn_async("worker", "t"),
    "stream_async": lambda rt, ref, dest: rt.stream_async(ref),  # raises as it is called
    "wait_async": lambda rt, ref, dest: rt.wait_async(ref, timeout=1),
    "settled": lambda rt, ref, dest: rt.settled(timeout=1),
}
# Not calls on an open runtime: ``open`` makes one and ``shutdown`` is idempotent.
NOT_CALLS = {"open", "shutdown"}


def test_the_table_names_every_public_method() -> None:
    public = {
        name
        for name, value in inspect.getmembers(Runtime)
        if not name.startswith("_") and callable(value)
    }
    assert public == set(CALLS) | set(ASYNC_CALLS) | NOT_CALLS


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
@pytest.mark.parametrize("name", sorted(CALLS) + sorted(ASYNC_CALLS))
def test_every_call_on_a_closed_runtime_raises_runtime_closed(
    tmp_path: Path, name: str, readonly: bool
) -> None:
    store = tmp_path / "store"
    profiles = [Profile("worker", runner=echo)]
    with Runtime.open(store, profiles=profiles, limits=Limits(wait_default_s=10)) as first:
        agent = first.spawn("worker", "t", name="a")
        first.wait(agent.id, timeout=30)
    rt = Runtime.open(store, profiles=profiles, readonly=readonly)
    rt.shutdown()
    dest = tmp_path / "backup"
    with pytest.raises(RuntimeClosed):
        if name in CALLS:
            CALLS[name](rt, agent.id, dest)
        else:
            asyncio.run(ASYNC_CALLS[name](rt, agent.id, dest))
    assert not dest.exists()
    assert rt.closed


def test_a_shut_down_runtime_still_referenced_keeps_no_tree(tmp_path: Path) -> None:
    """A host that keeps its ``Runtime`` after ``shutdown()`` holds none of its agents:
    the memory of the tree goes back before the object does (issue 33)."""
    import gc
    import tracemalloc

    profiles = [Profile("echo", runner=echo)]

    def fill(rt: Runtime) -> None:
        for n in range(1_500):
            rt.spawn("echo", f"task {n} " + "x" * 100)
        rt.wait_idle(60)

    # The same work once before: what the process allocates once (imports, caches made on
    # first use, such as at a store's first map growth) stays out of the measure.
    with Runtime.open(tmp_path / "warm-up", profiles=profiles) as warm:
        fill(warm)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        rt = Runtime.open(tmp_path / "store", profiles=profiles)
        fill(rt)
        gc.collect()
        held_open = tracemalloc.get_traced_memory()[0] - before
        rt.shutdown()
        gc.collect()
        held_closed = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # 1,500 agents with their completions take megabytes; what a closed runtime keeps
    # (its parts, caches) is a fraction of that, and does not grow with the tree.
    assert held_closed < held_open / 3, (held_open, held_closed)
    with pytest.raises(RuntimeClosed):
        rt.agents()


def test_a_shut_down_runtime_releases_the_tree_its_open_restored(tmp_path: Path) -> None:
    """The tree an open restores (frozen out of the collector's scans as the open ends)
    goes back too once the runtime is shut down, though the host keeps the object."""
    import gc
    import tracemalloc

    profiles = [Profile("echo", runner=echo)]
    with Runtime.open(tmp_path / "store", profiles=profiles) as first:
        for n in range(1_500):
            first.spawn("echo", f"task {n} " + "x" * 100)
        first.wait_idle(60)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        rt = Runtime.open(tmp_path / "store", profiles=profiles)
        assert len(rt.agents()) == 1_500
        gc.collect()
        held_open = tracemalloc.get_traced_memory()[0] - before
        rt.shutdown()
        gc.collect()
        held_closed = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held_closed < held_open / 3, (held_open, held_closed)
