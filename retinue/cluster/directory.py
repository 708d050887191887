"""The cluster's directory: which shard holds each top-level name, durably.

A top-level agent and its whole tree live on one shard. The shard of a new
top-level name is the one with the fewest names recorded so far (ties go to
the lowest index), and once recorded a name stays on its shard for good: a
later agent of the same name goes to the same shard, so that shard's own
runtime keeps live names unique across the cluster. A spawn with an
idempotency key and no name is placed by its key the same way (a retry finds
the agent it made). An unnamed spawn goes to the least-loaded shard and its
derived name is recorded after it.

It also records the cluster's shard count (it may grow, never shrink: ids
carry their shard) and the node address each shard's store lives on.
:class:`Directory` is plain Python over its own LMDB environment
(``<store_root>/directory``); the Ray actor that serves it to every face is
in :mod:`retinue.cluster._actors`.
"""

from __future__ import annotations

from pathlib import Path

import lmdb
import msgspec

from retinue.errors import ConfigurationError, StoreError

__all__ = ["Directory"]

MAP_SIZE = 64 * 1024 * 1024
_SHARDS = b"shards"


def _int(raw: bytes) -> int:
    return msgspec.msgpack.decode(raw, type=int)


def _raw(value: int) -> bytes:
    return msgspec.msgpack.encode(value)


class Directory:
    """Top-level name -> shard, idempotency key -> shard, and where each shard lives."""

    def __init__(self, folder: Path, shards: int) -> None:
        """Open (or create) the directory in ``folder`` for a cluster of ``shards`` shards.

        Raises:
            ConfigurationError: ``shards`` is below the count the directory records.
            StoreError: LMDB refused the folder.
        """
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._env = lmdb.open(str(folder), map_size=MAP_SIZE, max_dbs=6)
            self._names = self._env.open_db(b"names")
            self._keys = self._env.open_db(b"keys")
            self._nodes = self._env.open_db(b"nodes")
            self._meta = self._env.open_db(b"meta")
        except (OSError, lmdb.Error) as exc:
            raise StoreError(f"directory {folder}: cannot open: {exc}", path=str(folder)) from None
        self.folder = folder
        with self._env.begin(write=True) as txn:
            raw = txn.get(_SHARDS, db=self._meta)
            recorded = 0 if raw is None else _int(raw)
            if shards < recorded:
                self._env.close()
                raise ConfigurationError(
                    f"the cluster at {folder.parent} has {recorded} shards; it can grow, "
                    f"not shrink to {shards} (agent ids name their shard); open it with "
                    f"shards={recorded} or more"
                )
            txn.put(_SHARDS, _raw(shards), db=self._meta)
            self.counts = [0] * shards
            for _, value in txn.cursor(db=self._names):
                self.counts[_int(value)] += 1
        self.shards = shards

    def _placed(self, db: lmdb._Database, key: str) -> int:
        """Return the shard recorded for ``key`` in ``db``, recording the least-loaded first."""
        encoded = key.encode("utf-8", "surrogatepass")
        with self._env.begin(write=True) as txn:
            raw = txn.get(encoded, db=db)
            if raw is not None:
                return _int(raw)
            shard = self.pick()
            txn.put(encoded, _raw(shard), db=db)
        if db is self._names:
            self.counts[shard] += 1
        return shard

    def place(self, name: str) -> int:
        """Return the shard of top-level name ``name``, placing it if it is new."""
        return self._placed(self._names, name)

    def place_key(self, key: str) -> int:
        """Return the shard of an unnamed top-level spawn's idempotency ``key``."""
        return self._placed(self._keys, key)

    def pick(self) -> int:
        """Return the least-loaded shard (fewest names recorded; lowest index on a tie)."""
        return min(range(self.shards), key=lambda k: (self.counts[k], k))

    def lookup(self, name: str) -> int | None:
        """Return the shard recorded for ``name``, or None."""
        with self._env.begin() as txn:
            raw = txn.get(name.encode("utf-8", "surrogatepass"), db=self._names)
        return None if raw is None else _int(raw)

    def record(self, name: str, shard: int) -> int:
        """Record that ``name`` lives on ``shard`` (unless recorded already); return its shard."""
        encoded = name.encode("utf-8", "surrogatepass")
        with self._env.begin(write=True) as txn:
            raw = txn.get(encoded, db=self._names)
            if raw is not None:
                return _int(raw)
            txn.put(encoded, _raw(shard), db=self._names)
        self.counts[shard] += 1
        return shard

    def nodes(self) -> dict[int, str]:
        """Return the node address recorded for each shard that was ever started."""
        with self._env.begin() as txn:
            return {_int(k): v.decode() for k, v in txn.cursor(db=self._nodes)}

    def set_node(self, shard: int, address: str) -> None:
        """Record that ``shard``'s store lives on the node at ``address``."""
        with self._env.begin(write=True) as txn:
            txn.put(_raw(shard), address.encode(), db=self._nodes)

    def close(self) -> None:
        """Close the environment."""
        self._env.close()
