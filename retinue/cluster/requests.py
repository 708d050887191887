"""A shard's request log: every mutating call's request id, recorded durably with its answer.

Ray runs an actor call at most once and may report a failure for a call that
ran, so the face repeats a call with the same request id until it gets an
answer; the shard answers a request id it has recorded with the recorded
answer and runs nothing again. The log is the shard's own small LMDB
environment (``<shard folder>/requests``), written by one thread that commits
what queued meanwhile in one transaction (group commit); a caller's
:meth:`RequestLog.record` returns once its entry is committed.

Entries older than ``ttl_s``, and the oldest beyond ``max_entries``, are
pruned: a retry comes within the face's retry bound (seconds to minutes).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

import lmdb
import msgspec

from retinue.errors import StoreError

__all__ = ["RequestLog"]

MAP_SIZE = 16 * 1024 * 1024
PRUNE_EVERY_S = 1.0


class _Entry(msgspec.Struct, frozen=True, array_like=True):
    at: float
    reply: bytes


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(_Entry).decode
_Item = tuple[str, bytes, asyncio.Future[None], asyncio.AbstractEventLoop]
_STOP = None


def _time_key(at: float, rid: str) -> bytes:
    return f"{int(at * 1e6):020d}:{rid}".encode()


def _resolve(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class RequestLog:
    """Recorded answers by request id, in an LMDB environment of their own."""

    def __init__(
        self,
        folder: Path,
        *,
        sync: bool = True,
        ttl_s: float = 3600.0,
        max_entries: int = 1_000_000,
    ) -> None:
        """Open (or create) the log in ``folder``.

        Raises:
            StoreError: LMDB refused the folder.
        """
        self.folder = folder
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._env = lmdb.open(
                str(folder), map_size=MAP_SIZE, max_dbs=4, sync=sync, metasync=sync
            )
            self._answers = self._env.open_db(b"answers")
            self._by_time = self._env.open_db(b"by_time")
        except (OSError, lmdb.Error) as exc:
            raise StoreError(
                f"request log {folder}: cannot open: {exc}", path=str(folder)
            ) from None
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._pruned_at = 0.0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="retinue-requests", daemon=True)
        self._thread.start()

    def get(self, rid: str) -> bytes | None:
        """Return the answer recorded for ``rid``, or None."""
        with self._env.begin() as txn:
            raw = txn.get(rid.encode(), db=self._answers)
        return None if raw is None else _decode(raw).reply

    def __len__(self) -> int:
        """Return how many answers are recorded."""
        with self._env.begin() as txn:
            entries: int = txn.stat(self._answers)["entries"]
        return entries

    async def record(self, rid: str, reply: bytes) -> None:
        """Record ``reply`` as the answer to ``rid``; return once it is committed.

        Raises:
            StoreError: the commit failed, or the log is closed.
        """
        if self._closed:
            raise StoreError("the request log is closed", path=str(self.folder))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._queue.put((rid, reply, future, loop))
        await future

    def close(self) -> None:
        """Commit what is queued, stop the writer and close the environment."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()
        self._env.close()

    # -- the writer thread ---------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        while not stopping:
            items: list[_Item] = []
            item = self._queue.get()
            while True:
                if item is None:
                    stopping = True
                else:
                    items.append(item)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if items:
                self._commit(items)

    def _commit(self, items: list[_Item]) -> None:
        now = time.time()
        error: BaseException | None = None
        try:
            self._grow_on_full(lambda: self._write(items, now))
        except lmdb.Error as exc:
            error = StoreError(f"request log {self.folder}: commit failed: {exc}")
        for _, _, future, loop in items:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(_resolve, future, error)

    def _write(self, items: list[_Item], now: float) -> None:
        with self._env.begin(write=True) as txn:
            for rid, reply, _, _ in items:
                key = rid.encode()
                if txn.get(key, db=self._answers) is None:
                    txn.put(key, _encode(_Entry(now, reply)), db=self._answers)
                    txn.put(_time_key(now, rid), b"", db=self._by_time)
            if now - self._pruned_at >= PRUNE_EVERY_S:
                self._prune(txn, now)
                self._pruned_at = now

    def _prune(self, txn: lmdb.Transaction, now: float) -> None:
        """Delete entries past ``ttl_s`` and the oldest beyond ``max_entries``."""
        excess = txn.stat(self._answers)["entries"] - self.max_entries
        horizon = _time_key(now - self.ttl_s, "")
        with txn.cursor(db=self._by_time) as cursor:
            if not cursor.first():
                return
            while True:
                key = bytes(cursor.key())
                if not key or (key >= horizon and excess <= 0):
                    return
                txn.delete(key.split(b":", 1)[1], db=self._answers)
                excess -= 1
                if not cursor.delete():  # moves to the next entry
                    return

    def _grow_on_full(self, step: Callable[[], None]) -> None:
        while True:
            try:
                step()
                return
            except lmdb.MapFullError:
                self._env.set_mapsize(self._env.info()["map_size"] * 2)
