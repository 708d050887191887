"""Every sync call and its ``*_async`` twin agree, and a twin never blocks the event loop."""

from __future__ import annotations

import asyncio
import inspect
import threading
from pathlib import Path
from typing import Any

import pytest
from support import PROMPT_S, OpenRuntime

from retinue import Profile, Runtime
from retinue.actors.system import _reader as reader_module
from retinue.actors.tree import load_tree
from retinue.testing import echo

TWINS = sorted(
    name.removesuffix("_async")
    for name, member in inspect.getmembers(Runtime)
    if name.endswith("_async") and not name.startswith("_") and inspect.iscoroutinefunction(member)
)


def test_every_documented_call_has_an_async_twin() -> None:
    documented = {
        "agents",
        "backup",
        "wait_idle",
        "close",
        "close_tree",
        "compact",
        "follow_up",
        "get",
        "interrupt",
        "interrupt_tree",
        "messages",
        "resume",
        "send",
        "spawn",
        "wait",
    }
    assert documented <= set(TWINS)


@pytest.mark.parametrize("name", TWINS)
def test_a_twin_takes_exactly_the_arguments_of_its_sync_call(name: str) -> None:
    sync = inspect.signature(getattr(Runtime, name))
    twin = inspect.signature(getattr(Runtime, f"{name}_async"))
    assert list(twin.parameters.values()) == list(sync.parameters.values())
    assert twin.return_annotation == sync.return_annotation


def test_sync_and_async_reads_agree_on_a_live_runtime(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    a = rt.spawn("worker", "x", name="a")
    rt.wait(a.id, timeout=PROMPT_S)

    async def reads() -> tuple[Any, ...]:
        return (
            await rt.get_async("/root/a"),
            await rt.agents_async(),
            await rt.agents_async(include_closed=True),
        )

    assert asyncio.run(reads()) == (rt.get("/root/a"), rt.agents(), rt.agents(include_closed=True))


def test_a_read_only_runtime_reads_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    with Runtime.open(store, profiles=[Profile("worker", runner=echo)]) as rt:
        rt.wait(rt.spawn("worker", "x", name="a").id, timeout=PROMPT_S)
    released = threading.Event()
    real_load = load_tree  # what the reader calls; gated below

    def gated_load(*args: Any, **kwargs: Any) -> Any:
        # Only the loop can release the read: a read run on the loop deadlocks here.
        if not released.wait(timeout=PROMPT_S):
            raise AssertionError("the read blocked the event loop")
        return real_load(*args, **kwargs)

    monkeypatch.setattr(reader_module, "load_tree", gated_load)
    reader = Runtime.open(store, readonly=True)
    try:

        async def scenario() -> list[str]:
            reading = asyncio.ensure_future(reader.agents_async())
            fetching = asyncio.ensure_future(reader.get_async("/root/a"))
            await asyncio.sleep(0)  # both reads are in flight; the loop still runs
            released.set()
            agents = await reading
            return [a.path for a in agents] + [(await fetching).path]

        assert asyncio.run(scenario()) == ["/root/a", "/root/a"]
    finally:
        reader.shutdown()


def test_wait_idle_async_and_backup_async_do_what_their_sync_calls_do(
    open_runtime: OpenRuntime, tmp_path: Path
) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])

    async def drive() -> Path:
        a = await rt.spawn_async("worker", "x", name="a")
        await rt.wait_idle_async(timeout=PROMPT_S)  # the turn settled: nothing runs
        assert (await rt.get_async(a.id)).state.settled
        return await rt.backup_async(tmp_path / "copy")

    copy = asyncio.run(drive())
    with Runtime.open(copy, readonly=True) as reader:
        assert [i.path for i in reader.agents()] == ["/root/a"]
