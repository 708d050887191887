"""Pages of ``agents()``: the arguments' checks and the one order pages come in.

``agents()`` without ``limit`` or ``after`` returns every agent oldest first,
as it always has. With either, it returns a page: agents ordered by path, then
id (a stable order: an agent never moves, and a new one lands where its path
sorts), the first ``limit`` of them after the cursor ``after``. The cursor is
the id or the path of the last agent of the previous page: an id names the
exact place (closed agents may share a path), a path means "after every agent
at that path", and ``"<path> <id>"`` (what :func:`iter_pages` passes) names the
exact place even once that agent is compacted. ``limit`` is bounded by ``Limits.agents_page_max``.

Pure rules over anything with ``id``, ``path``, ``state`` and ``created_at``
(an ``AgentRecord``, an ``AgentInfo``); the faces walk pages with
:func:`iter_pages` / :func:`aiter_pages`.
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

from retinue.errors import ArgumentTypeError, InvalidArgument, PageLimitExceeded, UnknownAgent
from retinue.protocol.messages import AgentInfo, AgentState

__all__ = [
    "AGENTS_PAGE_DEFAULT",
    "aiter_pages",
    "check_page",
    "cursor_of",
    "iter_pages",
    "page_of",
]

AGENTS_PAGE_DEFAULT = 1_000
"""Agents per page an ``iter_agents`` asks for when no ``page_size`` is given."""

_AFTER_EVERY_ID = "~"  # sorts after any id (ids are hex digits)


class _Listed(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def state(self) -> AgentState: ...
    @property
    def created_at(self) -> float: ...


T = TypeVar("T", bound=_Listed)


def check_page(limit: Any, after: Any, page_max: int) -> None:
    """Check ``agents()``'s ``limit`` and ``after``.

    Raises:
        ArgumentTypeError: ``limit`` is not an int (or None), ``after`` not a str (or None).
        InvalidArgument: ``limit`` is below 1, or ``after`` is empty.
        PageLimitExceeded: ``limit`` is above ``page_max`` (``Limits.agents_page_max``).
    """
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ArgumentTypeError(f"limit must be an int or None, not {type(limit).__name__}")
        if limit < 1:
            raise InvalidArgument(f"limit must be 1 or more, not {limit}")
        if limit > page_max:
            raise PageLimitExceeded(
                f"a page holds at most {page_max} agents (Limits.agents_page_max), not {limit}: "
                "ask for a smaller limit and page on with after=",
                limit=page_max,
                value=limit,
            )
    if after is not None:
        if not isinstance(after, str):
            raise ArgumentTypeError(f"after must be a str or None, not {type(after).__name__}")
        if not after:
            raise InvalidArgument("after must be the id or path of the previous page's last agent")


def cursor_of(after: str, find: Callable[[str], T | None]) -> tuple[str, str]:
    """Return the (path, id) key a page starts after, for ``after`` (an id or a path).

    Raises:
        UnknownAgent: ``after`` is an id ``find`` does not know.
    """
    if after.startswith("/"):
        path, _, agent_id = after.partition(" ")  # no path holds a space
        return path, agent_id or _AFTER_EVERY_ID
    item = find(after)
    if item is None:
        raise UnknownAgent(
            f"no agent with id {after!r} to page after (it may have been compacted): "
            "pass '<path> <id>' of the previous page's last agent instead"
        )
    return item.path, item.id


def page_of(
    items: Iterable[T],
    *,
    include_closed: bool,
    limit: int | None,
    after: str | None,
    find: Callable[[str], T | None],
) -> list[T]:
    """Return ``items`` as ``agents()`` lists them (checked arguments; see the module).

    ``find`` looks an item up by id (for an ``after`` that is an id).

    Raises:
        UnknownAgent: ``after`` is an id no item has.
    """
    shown = (i for i in items if include_closed or i.state is not AgentState.CLOSED)
    if limit is None and after is None:
        return sorted(shown, key=lambda i: i.created_at)
    if after is not None:
        cursor = cursor_of(after, find)
        shown = (i for i in shown if (i.path, i.id) > cursor)
    if limit is None:
        return sorted(shown, key=lambda i: (i.path, i.id))
    return heapq.nsmallest(limit, shown, key=lambda i: (i.path, i.id))


def iter_pages(
    fetch: Callable[[int, str | None], list[AgentInfo]],
    page_size: int,
    after: str | None,
) -> Iterator[AgentInfo]:
    """Yield every agent ``fetch(limit, after)`` pages through, in page order.

    Each page is asked for after ``"<path> <id>"`` of the previous page's last
    agent: a cursor that holds even if that agent is compacted meanwhile.
    """
    while True:
        page = fetch(page_size, after)
        yield from page
        if len(page) < page_size:
            return
        after = f"{page[-1].path} {page[-1].id}"


async def aiter_pages(
    fetch: Callable[[int, str | None], Awaitable[list[AgentInfo]]],
    page_size: int,
    after: str | None,
) -> AsyncIterator[AgentInfo]:
    """Like :func:`iter_pages`, with an awaitable ``fetch``."""
    while True:
        page = await fetch(page_size, after)
        for info in page:
            yield info
        if len(page) < page_size:
            return
        after = f"{page[-1].path} {page[-1].id}"
