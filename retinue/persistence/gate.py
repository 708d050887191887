"""The gate of a store's environment: many readers at once, or one thread that replaces it.

A reclaim (:mod:`retinue.persistence.copies`) closes the LMDB environment and
opens it again on a compacted file, and the writer grows the map; LMDB
allows either only while no other thread of the process is inside a
transaction (py-lmdb releases the GIL inside LMDB: closing the map under a
reading thread would crash the process). Every read holds the gate shared;
those two hold it exclusive, for milliseconds.

A thread that holds it shared may take it shared again (a read inside a read).
A waiting exclusive holder is served before new readers, so a steady stream
of reads cannot starve it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["Gate"]


class Gate:
    """Shared for reads, exclusive to replace (or resize) the environment. Thread-safe."""

    def __init__(self) -> None:
        """Start open: no reader, nobody waiting."""
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._exclusive = False
        self._waiting = 0
        self._depth = threading.local()

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the gate shared (with other readers) for the block."""
        depth: int = getattr(self._depth, "value", 0)
        with self._cond:
            if depth == 0:  # a nested read must not wait behind an exclusive waiter
                while self._exclusive or self._waiting:
                    self._cond.wait()
            self._readers += 1
        self._depth.value = depth + 1
        try:
            yield
        finally:
            self._depth.value = depth
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    def held(self) -> bool:
        """True if this thread holds the gate shared now."""
        return bool(getattr(self._depth, "value", 0))

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the gate alone for the block, once every reader has left it."""
        with self._cond:
            self._waiting += 1
            try:
                while self._exclusive or self._readers:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()
