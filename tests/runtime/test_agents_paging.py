"""``agents(limit=, after=)`` and ``iter_agents``: pages by path then id, bounded, resumable.

A real store in a temp folder and real actors: the writer's pages, a read-only
runtime's pages, and the async twins all give the same order; a page larger
than ``Limits.agents_page_max`` is refused with ``PageLimitExceeded``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from retinue import (
    AgentInfo,
    AgentState,
    ArgumentTypeError,
    InvalidArgument,
    Limits,
    PageLimitExceeded,
    Profile,
    Runtime,
    UnknownAgent,
)

PROFILES = [Profile("echo", runner=lambda t: t.task)]


def fill(rt: Runtime, names: list[str]) -> None:
    """Spawn one echo agent per name and wait for every one to settle."""
    for name in names:
        rt.spawn("echo", name, name=name)
    rt.wait_idle(60)


def by_path(infos: list[AgentInfo]) -> list[str]:
    return [i.path for i in sorted(infos, key=lambda i: (i.path, i.id))]


def test_pages_come_by_path_and_walk_every_agent_once(tmp_path: Path) -> None:
    names = [f"a{n:02d}" for n in (7, 3, 11, 0, 5, 9, 1, 2, 10, 4, 8, 6)]
    with Runtime.open(tmp_path / "s", profiles=PROFILES) as rt:
        fill(rt, names)
        everything = rt.agents()
        assert [a.path for a in everything] == [f"/root/{n}" for n in names]  # oldest first
        first = rt.agents(limit=5)
        assert [a.path for a in first] == by_path(everything)[:5]
        second = rt.agents(limit=5, after=first[-1].id)
        third = rt.agents(limit=5, after=second[-1].path)  # a path is a cursor too
        assert [a.path for a in first + second + third] == by_path(everything)
        assert rt.agents(limit=5, after=third[-1].id) == []
        assert [a.path for a in rt.agents(after=first[-1].id)] == by_path(everything)[5:]
        walked = list(rt.iter_agents(page_size=4))
        assert [a.path for a in walked] == by_path(everything)


def test_closed_agents_share_a_path_and_pages_by_id_keep_them_all(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "s", profiles=PROFILES) as rt:
        for _ in range(5):  # five closed agents at /root/same, then a live one
            rt.spawn("echo", "x", name="same")
            rt.wait_idle(60)
            rt.close("/root/same")
        fill(rt, ["same", "other"])
        walked = list(rt.iter_agents(include_closed=True, page_size=2))
        assert len(walked) == len({a.id for a in walked}) == 7
        assert [a.path for a in walked] == ["/root/other"] + ["/root/same"] * 6
        live = list(rt.iter_agents(page_size=1))
        assert [a.path for a in live] == ["/root/other", "/root/same"]
        assert all(a.state is not AgentState.CLOSED for a in live)


def test_a_page_past_the_bound_or_a_bad_cursor_is_refused(tmp_path: Path) -> None:
    limits = Limits(agents_page_max=3)
    with Runtime.open(tmp_path / "s", profiles=PROFILES, limits=limits) as rt:
        fill(rt, ["a", "b", "c", "d"])
        with pytest.raises(PageLimitExceeded) as caught:
            rt.agents(limit=4)
        assert (caught.value.limit, caught.value.value) == (3, 4)
        assert "agents_page_max" in str(caught.value)
        assert len(rt.agents(limit=3)) == 3
        with pytest.raises(InvalidArgument):
            rt.agents(limit=0)
        with pytest.raises(ArgumentTypeError):
            rt.agents(limit=True)
        with pytest.raises(ArgumentTypeError):
            rt.agents(after=7)  # type: ignore[arg-type]
        with pytest.raises(UnknownAgent):
            rt.agents(limit=2, after="f" * 32)
        with pytest.raises(PageLimitExceeded):
            next(rt.iter_agents(page_size=4))
        assert len(list(rt.iter_agents(page_size=3))) == 4


def test_a_reader_and_the_async_twins_page_alike(tmp_path: Path) -> None:
    names = [f"n{i}" for i in (4, 1, 3, 0, 2)]
    with Runtime.open(tmp_path / "s", profiles=PROFILES) as rt:
        fill(rt, names)
        expected = [a.path for a in rt.iter_agents(page_size=2)]

        async def walk() -> list[str]:
            paged = await rt.agents_async(limit=2)
            assert [a.path for a in paged] == expected[:2]
            return [a.path async for a in rt.iter_agents_async(page_size=2)]

        assert asyncio.run(walk()) == expected
    with Runtime.open(tmp_path / "s", readonly=True) as reader:
        assert [a.path for a in reader.iter_agents(page_size=2)] == expected
        first = reader.agents(limit=3)
        assert [a.path for a in reader.agents(after=first[-1].id)] == expected[3:]
        with pytest.raises(PageLimitExceeded):
            reader.agents(limit=Limits().agents_page_max + 1)


def test_agent_counts_match_the_agents_on_a_writer_and_a_reader(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "s", profiles=PROFILES) as rt:
        fill(rt, ["a", "b", "c"])
        rt.close("/root/a")
        counts = rt.agent_counts()
        assert counts.by_state == {"closed": 1, "completed": 2}
        assert counts.live_by_profile == {"echo": 2}
        assert asyncio.run(rt.agent_counts_async()) == counts
    with Runtime.open(tmp_path / "s", readonly=True) as reader:
        assert reader.agent_counts() == counts
