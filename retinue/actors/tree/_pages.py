"""The tree's agents in page order (path, then id), so a page of ``agents()`` costs its size.

A sorted tuple of ``(path, id)`` keys (``sorted_keys``) plus the keys of
agents added since it was sorted (``new_keys``). Removals are not applied to
the tuple: a key whose agent is gone (or whose id now names another path) is
skipped as a page is read, and the tuple is sorted again once the keys added
and removed since pass a share of it, so paging costs the page plus the
amortised resort. Past that share the keys are dropped at once (the next page
sorts every agent): a runtime nobody pages holds a bounded number of keys.
The index only ever holds keys that may be stale, never a record: a command
rolled back by the journal leaves at most a key that a read skips.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterator
from itertools import islice

from retinue.actors.tree._agents import AgentTable
from retinue.actors.tree._journal import JList, Journal, Journaled
from retinue.protocol.messages import AgentState
from retinue.protocol.records import AgentRecord

__all__ = ["PageIndex", "PageKeys"]

_RESORT_MIN = 1024  # keys changed since the sort before a resort is considered
_RESORT_SHARE = 8  # ... and a resort once they pass 1/8 of the sorted keys
_READ_AHEAD = 1024  # keys whose settled agents a page reads from the store at once

Key = tuple[str, str]


class PageKeys(Journaled):
    """The page index's keys, held apart from the tree (its attribute ``paging``).

    Apart, so that the tree keeps fewer than 30 attributes: past that, CPython
    3.11 holds an instance's attributes in a real dict, and every attribute read
    of the tree (hundreds a turn) misses the specializing interpreter.
    """

    def __init__(self, journal: Journal) -> None:
        """Start with no keys."""
        self._journal = journal
        self.sorted_keys: tuple[Key, ...] = ()
        self.new_keys: list[Key] = JList(journal)
        self.gone_keys = 0
        self.stale = False  # True: sort every key at the next page (a tree just loaded)


class PageIndex:
    """Agents' ``(path, id)`` keys, sorted lazily; a mixin of :class:`~retinue.actors.tree.Tree`."""

    agents: AgentTable
    _journal: Journal

    def __init__(self) -> None:
        """Start with no keys."""
        self.paging = PageKeys(self._journal)

    @property
    def sorted_keys(self) -> tuple[Key, ...]:
        """The keys sorted at the last resort (some may be stale)."""
        return self.paging.sorted_keys

    @property
    def new_keys(self) -> list[Key]:
        """The keys of agents added since the last resort."""
        return self.paging.new_keys

    @property
    def gone_keys(self) -> int:
        """How many agents went since the last resort."""
        return self.paging.gone_keys

    @property
    def keys_stale(self) -> bool:
        """True: the next page sorts every key (a tree just loaded, or too many changes)."""
        return self.paging.stale

    @keys_stale.setter
    def keys_stale(self, stale: bool) -> None:
        self.paging.stale = stale

    def _page_add(self, record: AgentRecord) -> None:
        paging = self.paging
        if not paging.stale:
            paging.new_keys.append((record.path, record.id))
            self._maybe_stale()

    def _page_gone(self, count: int) -> None:
        paging = self.paging
        if not paging.stale:
            paging.gone_keys += count
            self._maybe_stale()

    def _maybe_stale(self) -> None:
        """Once the keys changed since the sort pass what the next page would resort
        for, keep none of them: that page sorts every key (``keys_stale``). A runtime
        nobody pages keeps no key per agent it ever had, and adds cost no more work."""
        paging = self.paging
        changed = len(paging.new_keys) + paging.gone_keys
        if changed > max(_RESORT_MIN, len(paging.sorted_keys) // _RESORT_SHARE):
            paging.sorted_keys = ()
            paging.new_keys = JList(self._journal)
            paging.gone_keys = 0
            paging.stale = True

    def _present(self, key: Key) -> AgentRecord | None:
        record = self.agents.get(key[1])
        return record if record is not None and record.path == key[0] else None

    def page(
        self, cursor: Key | None, limit: int | None, include_closed: bool
    ) -> list[AgentRecord]:
        """Return up to ``limit`` agents (None: all) after ``cursor`` in (path, id) order,
        closed ones only with ``include_closed``."""
        paging = self.paging
        changed = len(paging.new_keys) + paging.gone_keys
        if paging.stale or changed > max(_RESORT_MIN, len(paging.sorted_keys) // _RESORT_SHARE):
            paging.sorted_keys = tuple(sorted(self.agents.page_keys()))
            paging.new_keys = JList(self._journal)
            paging.gone_keys = 0
            paging.stale = False
        start = 0 if cursor is None else bisect_right(paging.sorted_keys, cursor)
        fresh = sorted(k for k in paging.new_keys if cursor is None or k > cursor)
        merged: Iterator[Key] = heapq.merge(_tail(paging.sorted_keys, start), fresh)
        out: list[AgentRecord] = []
        last: Key | None = None
        while True:
            # A batch of keys at a time: the settled agents among them read from the
            # store in one read, not one each.
            batch = list(islice(merged, _READ_AHEAD if limit is None else min(limit, _READ_AHEAD)))
            if not batch:
                return out
            self.agents.read_ahead([key[1] for key in batch])
            for key in batch:
                if key == last:  # added again after a rolled-back resort: once
                    continue
                last = key
                record = self._present(key)
                if record is None or (not include_closed and record.state is AgentState.CLOSED):
                    continue
                out.append(record)
                if limit is not None and len(out) >= limit:
                    return out


def _tail(keys: tuple[Key, ...], start: int) -> Iterator[Key]:
    for index in range(start, len(keys)):
        yield keys[index]
