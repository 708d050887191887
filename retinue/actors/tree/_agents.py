"""The tree's agents by id: those changed since the open in memory, the settled rest stored.

An open of a big store need not hold every agent's record: most are settled
(completed, failed, closed: nothing runs for them) and may never be asked for
again. :class:`AgentTable` is the dict of the agents the supervisor holds in
memory plus the ids of the **settled** agents it left in the store
(:attr:`AgentTable.settled`, with their paths, which pages sort by): a
settled agent's record is read from the store when asked for (``get``,
``[]``, ``values``), kept in a small cache of the last
ones read (:data:`AGENT_CACHE`), and held in memory for good once the tree
changes it (:meth:`~retinue.actors.tree.Tree.put_agent` takes it out of the
settled ids). A settled agent's stored record is its record: nothing writes an
agent but the tree, and the tree writes only the agents it holds.

The indexes (paths, children, counts, busy agents) hold every agent, settled
or not: only the records stay out. Reads of the table look like a dict's; the
two that return every record (``values``, ``items``) read the settled ones
from the store in one read transaction, key by key, and
:meth:`AgentTable.page_keys` gives every agent's path and id without reading one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, Protocol, TypeVar, overload

from retinue.actors.tree._journal import JDict, Journal
from retinue.protocol.records import AgentRecord

__all__ = ["AGENT_CACHE", "AgentReads", "AgentTable"]

_T = TypeVar("_T")

AGENT_CACHE = 4096
"""How many settled agents' records read from the store the table keeps (newest read)."""


class AgentReads(Protocol):
    """Where a table reads its settled agents (the store's committed records)."""

    def agent(self, agent_id: str) -> AgentRecord:
        """Return one stored agent's record.

        Raises:
            StoreCorrupted, StoreError: it is not stored, does not decode, or the read failed.
        """
        ...

    def some(self, agent_ids: list[str]) -> list[AgentRecord]:
        """Return the stored records of ``agent_ids``, in their order (one read).

        Raises:
            StoreCorrupted, StoreError: one is missing, does not decode, or the read failed.
        """
        ...


def _unsettle_undo(table: AgentTable, key: str, path: str) -> None:
    table.settled[key] = path


def _unswept_undo(table: AgentTable, keys: list[str]) -> None:
    table._unswept.update(dict.fromkeys(keys))


class AgentTable(JDict[str, AgentRecord]):
    """Agents by id: held ones in the dict, settled ones read from the store (module docstring)."""

    __slots__ = ("_cache", "_unswept", "reads", "settled")

    def __init__(self, journal: Journal) -> None:
        """Create an empty table bound to ``journal``."""
        JDict.__init__(self, journal)
        self.settled: dict[str, str] = {}
        """The settled agents left in the store, by id, with their paths (never an id
        the dict holds)."""
        self.reads: AgentReads | None = None
        # Oldest read first; an OrderedDict: a dict's first key is slow to find once many
        # keys before it went (its iterator walks their empty slots).
        self._cache: OrderedDict[str, AgentRecord] = OrderedDict()
        self._unswept: dict[str, None] = {}

    def settle(self, reads: AgentReads, settled: dict[str, str]) -> None:
        """Leave the agents ``settled`` names (id -> path) in the store, read from ``reads``
        when asked.

        For a tree being loaded from ``reads``' store, before its held agents
        are (none of them settled). Unjournaled (a load is not a command).
        """
        self.reads = reads
        self.settled = settled
        self._unswept = dict.fromkeys(settled)

    def unswept(self, count: int) -> list[AgentRecord]:
        """Up to ``count`` agents left in the store at the open and not yet handed out by
        this method, oldest settled first (a compaction's sweep of the stored completions
        reads a bounded number a run, never every agent). Those removed since are skipped.

        Raises:
            StoreCorrupted, StoreError: a settled agent's read failed.
        """
        out: list[AgentRecord] = []
        taken: list[str] = []
        pending = self._unswept
        while pending and len(out) < count:
            key = next(iter(pending))
            del pending[key]
            taken.append(key)
            record = self.get(key)
            if record is not None:
                out.append(record)
        if taken and self._journal.active:  # a command rolled back hands them out again
            self._journal.log((_unswept_undo, (self, taken)))
        return out

    def _read(self, key: str) -> AgentRecord:
        """A settled agent's record, from the cache or the store."""
        cache = self._cache
        record = cache.get(key)
        if record is None:
            assert self.reads is not None  # settled ids come with their reads
            record = cache[key] = self.reads.agent(key)
            if len(cache) > AGENT_CACHE:
                cache.popitem(last=False)
        return record

    def read_ahead(self, keys: list[str]) -> None:
        """Read the settled agents among ``keys`` not in the cache yet, in one read of the
        store (a page's), into the cache.

        Raises:
            StoreCorrupted, StoreError: a settled agent's read failed.
        """
        settled, cache = self.settled, self._cache
        wanted = [key for key in keys if key in settled and key not in cache]
        if not wanted:
            return
        assert self.reads is not None  # settled ids come with their reads
        cache.update(zip(wanted, self.reads.some(wanted), strict=True))
        while len(cache) > AGENT_CACHE:
            cache.popitem(last=False)

    def hold(self, key: str) -> None:
        """The tree changes ``key``'s record: it is held in memory from now on."""
        if self.settled.pop(key, None) is not None:
            self._cache.pop(key, None)

    @overload
    def get(self, key: str, default: None = None, /) -> AgentRecord | None: ...

    @overload
    def get(self, key: str, default: AgentRecord | _T, /) -> AgentRecord | _T: ...

    def get(self, key: str, default: Any = None, /) -> Any:
        """Return the agent's record (a settled one read from the store), else ``default``.

        Raises:
            StoreCorrupted, StoreError: a settled agent's read failed.
        """
        record = dict.get(self, key)
        if record is not None:
            return record
        if key in self.settled:
            return self._read(key)
        return default

    def __missing__(self, key: str) -> AgentRecord:
        """``table[key]`` of an agent not held: read a settled one, else KeyError."""
        if key in self.settled:
            return self._read(key)
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        """True if the agent is held or settled."""
        return dict.__contains__(self, key) or key in self.settled

    def __len__(self) -> int:
        """How many agents, held and settled."""
        return dict.__len__(self) + len(self.settled)

    def __bool__(self) -> bool:
        """True if there is an agent."""
        return dict.__len__(self) > 0 or bool(self.settled)

    def __iter__(self) -> Iterator[str]:
        """Every agent id: the held ones, then the settled ones."""
        yield from list(dict.__iter__(self))
        yield from list(self.settled)

    def keys(self) -> list[str]:  # type: ignore[override]
        """Every agent id: the held ones, then the settled ones."""
        return [*dict.keys(self), *self.settled]

    def values(self) -> list[AgentRecord]:  # type: ignore[override]
        """Every agent's record, the settled ones read from the store in one read transaction.

        They are read key by key, never by stepping from leaf to leaf: LMDB checks
        each page it descends to and fails the read of one damaged in place since
        the open, where its step onto a damaged sibling leaf aborts the process.

        Raises:
            StoreCorrupted, StoreError: a settled agent's read failed.
        """
        held = list(dict.values(self))
        if not self.settled:
            return held
        assert self.reads is not None
        return held + self.reads.some(list(self.settled))

    def page_keys(self) -> list[tuple[str, str]]:
        """Every agent's ``(path, id)``, unsorted, reading no record from the store."""
        held = [(record.path, record.id) for record in dict.values(self)]
        return held + [(path, key) for key, path in self.settled.items()]

    def items(self) -> list[tuple[str, AgentRecord]]:  # type: ignore[override]
        """Every agent's id and record (see :meth:`values`)."""
        return [(record.id, record) for record in self.values()]

    def pop(self, key: str, *default: Any) -> Any:
        """Remove the agent and return its record (journaled), else ``default``.

        Raises:
            KeyError: no such agent and no default.
            StoreCorrupted, StoreError: a settled agent's read failed.
        """
        if key in self.settled:
            record = self._read(key)
            journal = self._journal
            if journal.active:
                journal.log((_unsettle_undo, (self, key, self.settled[key])))
            del self.settled[key]
            self._cache.pop(key, None)
            return record
        return JDict.pop(self, key, *default)

    def __delitem__(self, key: str) -> None:
        """Remove the agent (journaled). Raises KeyError if there is none."""
        if key in self.settled:
            self.pop(key)
        else:
            JDict.__delitem__(self, key)

    def __reduce__(self) -> Any:
        """Pickle as a plain dict of every agent."""
        return (dict, (dict(self.items()),))
