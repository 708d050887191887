"""Fair turns between top-level trees: the calls waiting, and which tree goes next.

Start-time fair queuing over the trees that have calls waiting: each such
tree has a virtual time; the tree with the lowest goes next (ties: the tree
that started waiting first), and each call admitted from it adds
``1 / weight`` (a call of a profile with priority 2 costs its tree half a
turn). A tree that starts waiting joins at the system's virtual time, the
start of the call admitted last: it neither inherits credit from a quiet
spell nor pays for its past, and a tree with 2 agents gets the next turn
when it asks, however many calls a tree with 64 keeps waiting. Within a
tree, calls keep their order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["FairQueue"]

T = TypeVar("T")


class FairQueue(Generic[T]):
    """Calls waiting, per tree, in order; the order in which the trees are served."""

    __slots__ = ("_count", "_queues", "_seq", "_since", "_virtual", "_vt")

    def __init__(self) -> None:
        """An empty queue."""
        self._queues: dict[str, dict[str, T]] = {}  # tree -> call key -> call, in order
        self._vt: dict[str, float] = {}  # virtual time of each tree with calls waiting
        self._since: dict[str, int] = {}  # when each tree started waiting (ties)
        self._seq = itertools.count()
        self._count = 0
        self._virtual = 0.0  # the start of the call admitted last

    def __len__(self) -> int:
        """The calls waiting."""
        return self._count

    def __contains__(self, tree: object) -> bool:
        """Whether ``tree`` has calls waiting."""
        return tree in self._queues

    def push(self, tree: str, key: str, call: T) -> None:
        """Queue ``call`` (known as ``key``) at the end of ``tree``'s calls."""
        queue = self._queues.get(tree)
        if queue is None:
            queue = self._queues[tree] = {}
            self._vt[tree] = self._virtual
            self._since[tree] = next(self._seq)
        if key not in queue:
            self._count += 1
        queue[key] = call

    def remove(self, tree: str, key: str) -> T | None:
        """Take ``key`` out of ``tree``'s calls without serving it; return it (None: not there)."""
        queue = self._queues.get(tree)
        if queue is None or key not in queue:
            return None
        call = queue.pop(key)
        self._count -= 1
        if not queue:
            self._drop(tree)
        return call

    def served(self, tree: str, key: str, weight: float) -> T:
        """Admit ``key`` from ``tree``: take it out and advance the tree by ``1 / weight``.

        Raises:
            KeyError: ``key`` is not waiting in ``tree``.
        """
        queue = self._queues[tree]
        call = queue.pop(key)
        self._count -= 1
        start = self._vt[tree]
        self._virtual = max(self._virtual, start)
        self._vt[tree] = start + 1.0 / weight
        if not queue:
            self._drop(tree)
        return call

    def _drop(self, tree: str) -> None:
        del self._queues[tree], self._vt[tree], self._since[tree]

    def rank(self, tree: str) -> tuple[float, int]:
        """The order key of a waiting ``tree``: lower goes first."""
        return (self._vt[tree], self._since[tree])

    def trees(self) -> list[str]:
        """The trees with calls waiting, the next to serve first."""
        return sorted(self._queues, key=self.rank)

    def calls(self, tree: str) -> Iterator[tuple[str, T]]:
        """Yield ``(key, call)`` of ``tree``'s waiting calls, in order (a copy: safe to change)."""
        yield from list(self._queues.get(tree, {}).items())

    def __iter__(self) -> Iterator[T]:
        """Every waiting call, tree by tree."""
        for queue in list(self._queues.values()):
            yield from list(queue.values())
