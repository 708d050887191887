"""The pure rules of ``agents()`` pages: order, cursors, the walk over a compacted cursor,
and the cluster's page cut from every shard's list."""

from __future__ import annotations

import pytest

from retinue import AgentInfo, AgentState, UnknownAgent
from retinue.cluster._face import _page
from retinue.protocol.paging import iter_pages, page_of


def info(agent_id: str, path: str, state: str = "completed", at: float = 0.0) -> AgentInfo:
    return AgentInfo(
        id=agent_id,
        name=path.rsplit("/", 1)[1],
        path=path,
        profile="p",
        parent_path="/root",
        depth=1,
        state=AgentState(state),
        generation=1,
        task="t",
        created_at=at,
    )


INFOS = [
    info("b", "/root/z", at=1),
    info("a", "/root/a", at=2),
    info("d", "/root/m", "closed", at=3),
    info("c", "/root/m", at=4),
]
BY_ID = {i.id: i for i in INFOS}


def test_without_limit_or_after_every_agent_oldest_first() -> None:
    every = page_of(INFOS, include_closed=True, limit=None, after=None, find=BY_ID.get)
    assert [i.id for i in every] == ["b", "a", "d", "c"]


def test_pages_by_path_then_id_and_a_path_cursor_skips_its_path() -> None:
    def page(limit: int | None, after: str | None) -> list[str]:
        found = page_of(INFOS, include_closed=True, limit=limit, after=after, find=BY_ID.get)
        return [i.id for i in found]

    assert page(2, None) == ["a", "c"]
    assert page(2, "c") == ["d", "b"]  # the closed agent at the same path, after by id
    assert page(None, "/root/m") == ["b"]
    assert page(None, "/root/m c") == ["d", "b"]  # path and id: exact, known or not
    assert page(None, "/root/m cc") == ["d", "b"]
    with pytest.raises(UnknownAgent):
        page(1, "gone")


def test_a_walk_goes_on_after_the_path_of_a_compacted_cursor() -> None:
    held = dict(BY_ID)
    asked: list[str | None] = []

    def fetch(limit: int, after: str | None) -> list[AgentInfo]:
        asked.append(after)
        page = page_of(
            list(held.values()), include_closed=True, limit=limit, after=after, find=held.get
        )
        if after is None:
            del held["c"]  # compacted between the first and the second page
        return page

    walked = [i.id for i in iter_pages(fetch, 2, None)]
    assert walked == ["a", "c", "d", "b"]
    assert asked == [None, "/root/m c", "/root/z b"]


def test_the_cluster_cuts_its_page_from_every_shards_list() -> None:
    assert [i.id for i in _page(INFOS, True, None, None)] == ["b", "a", "d", "c"]
    assert [i.id for i in _page(INFOS, True, 3, "a")] == ["c", "d", "b"]
