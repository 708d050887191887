"""How the store file is used: ``rt.diagnostics.store``, and the warning before the map fills."""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

from support import EventLog

from retinue import Limits, Profile, Runtime, StoreMapFilling, Turn
from retinue.persistence.space import StoreSpace, map_watch


def _echo(turn: Turn) -> str:
    return turn.task


def _churn(rt: Runtime, agents: int, task: str = "x") -> None:
    for _ in range(agents):
        agent = rt.spawn("worker", task)
        rt.wait(agent.id)
        rt.close(agent.id)


def test_diagnostics_report_the_file_its_pages_and_the_map(tmp_path: Path) -> None:
    """The figures add up, and a compacting copy is about the pages in use."""
    profiles = [Profile("worker", runner=_echo)]
    limits = Limits(retain_closed_agents=50)
    with Runtime.open(tmp_path / "s", profiles=profiles, limits=limits) as rt:
        assert rt.diagnostics == []  # still restore's list: nothing was skipped
        _churn(rt, 300, "x" * 500)
        space = rt.diagnostics.store
        assert space is not None
        assert space.file_bytes == os.path.getsize(tmp_path / "s" / "data.mdb")
        assert space.pages == space.pages_in_use + space.pages_free
        assert space.used_bytes == space.pages * space.page_size
        assert space.map_headroom_bytes == space.map_bytes - space.used_bytes
        assert space.pages_free > 0  # compactions freed pages below the mark
        assert set(space.databases) >= {"agents", "messages", "completions", "meta"}
        assert space.disk_free_bytes > 0
        copy = rt.backup(tmp_path / "copy")
    copied = os.path.getsize(copy / "data.mdb")
    assert copied <= space.in_use_bytes  # the copy holds the pages in use, not the free ones
    assert copied >= space.in_use_bytes - 16 * space.page_size  # LMDB's free tree aside


def test_a_reader_reports_the_space_and_a_closed_runtime_none(tmp_path: Path) -> None:
    """A read-only runtime measures the same file; once closed there is nothing to measure."""
    profiles = [Profile("worker", runner=_echo)]
    with Runtime.open(tmp_path / "s", profiles=profiles) as rt:
        _churn(rt, 5)
        written = rt.diagnostics.store
    with Runtime.open(tmp_path / "s", readonly=True) as reader:
        read = reader.diagnostics.store
    assert written is not None and read is not None
    assert read.pages == written.pages
    assert read.pages_in_use == written.pages_in_use
    assert reader.diagnostics.store is None
    assert reader.diagnostics == []


def _fill(rt: Runtime, share: float, past_map: int = 0) -> int:
    """Churn until the mark passes ``share`` of a map larger than ``past_map``; return it."""
    for _ in range(1000):
        _churn(rt, 5, "y" * 4000)
        space = rt.diagnostics.store
        assert space is not None
        if space.map_bytes > past_map and space.map_used_ratio >= share:
            return space.map_bytes
    raise AssertionError("the store never filled its map")


def _warnings(log: EventLog) -> list[StoreMapFilling]:
    return [e for e in log.events if isinstance(e, StoreMapFilling)]


def test_an_event_warns_once_the_file_passes_its_share_of_the_map(tmp_path: Path) -> None:
    """Past ``store_map_warn_ratio`` of the map: one ``StoreMapFilling`` per map size."""
    profiles = [Profile("worker", runner=_echo)]
    limits = Limits(store_map_warn_ratio=0.5, retain_closed_agents=100_000)
    log = EventLog()
    with Runtime.open(tmp_path / "s", profiles=profiles, limits=limits, map_size=1 << 20) as rt:
        rt.subscribe(log)
        first_map = _fill(rt, 0.5)
        log.wait_for(lambda events: bool(_warnings(log)))
        event = _warnings(log)[0]
        assert event.agent_id == "" and event.path == "/root"
        assert event.map_bytes == first_map == 1 << 20
        assert event.used_bytes >= event.map_bytes // 2
        assert event.map_headroom_bytes == event.map_bytes - event.used_bytes
        assert event.in_use_bytes + event.free_bytes == event.used_bytes
        assert event.file_bytes > 0 and event.disk_free_bytes > 0
        _fill(rt, 0.5, past_map=first_map)  # the writer doubled the full map ...
        log.wait_for(lambda events: len(_warnings(log)) >= 2)  # ... and warns again at 50%
        maps = [e.map_bytes for e in _warnings(log)]
    assert maps[:2] == [1 << 20, 1 << 21]
    assert len(maps) == len(set(maps))  # once per map size


class _Env:
    """An environment's ``info`` and ``stat``, counting the looks."""

    def __init__(self, pages: int, map_size: int) -> None:
        self.pages, self.map_size, self.looks = pages, map_size, 0

    def info(self) -> dict[str, int]:
        self.looks += 1
        return {"last_pgno": self.pages - 1, "map_size": self.map_size}

    def stat(self) -> dict[str, int]:
        return {"psize": 4096}


def test_the_map_watch_looks_at_the_environment_only_once_the_file_reaches_the_share() -> None:
    env = _Env(pages=16, map_size=1 << 20)
    size = [16 * 4096]
    warned: list[StoreSpace] = []
    space = cast(StoreSpace, object())  # what space() measures: not looked at here
    grew = map_watch(lambda: env, lambda: space, 0.5, warned.append, lambda: size[0])
    grew()  # the first growth reads the map's size
    assert (env.looks, warned) == (1, [])
    for pages in (32, 64, 127):  # below half the map: no look
        size[0] = pages * 4096
        grew()
    assert (env.looks, warned) == (1, [])
    env.pages, size[0] = 128, 128 * 4096  # half the map: a look, and the warning
    grew()
    assert (env.looks, warned) == (2, [space])
    env.pages, size[0] = 130, 130 * 4096
    grew()  # past the share already: it looks, and warns no more for this map size
    assert (env.looks, warned) == (3, [space])
    env.map_size = 1 << 21  # the writer doubled the map: the share read before is passed
    env.pages, size[0] = 200, 200 * 4096
    grew()
    assert (env.looks, len(warned)) == (4, 1)
    env.pages, size[0] = 255, 255 * 4096  # below half the doubled map: no look
    grew()
    assert (env.looks, len(warned)) == (4, 1)
    env.pages, size[0] = 256, 256 * 4096  # half of it: warned again
    grew()
    assert (env.looks, len(warned)) == (5, 2)


def test_the_map_watch_without_a_size_looks_at_every_growth() -> None:
    env = _Env(pages=16, map_size=1 << 20)
    grew = map_watch(lambda: env, lambda: cast(StoreSpace, object()), 0.5, print)
    for _ in range(3):
        grew()
    assert env.looks == 3
