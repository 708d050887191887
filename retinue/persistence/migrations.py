"""Schema migrations: one step per stored schema version.

``MIGRATIONS[v]`` upgrades a store at version ``v`` to ``v + 1`` inside the
write transaction that opens it. Version 0 is a store written before the
schema carried a version: its records already match version 1, so the step
only stamps the version. Version 2 adds the ``undelivered`` index (the keys
of the completions not delivered yet, written in the same commit as each
completion): its step builds the index from a scan of ``completions``, once.
A new schema version adds its step here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from retinue.errors import StoreVersionError
from retinue.protocol.records import SCHEMA_VERSION, CompletionRecord

__all__ = [
    "MIGRATIONS",
    "SCHEMA_KEY",
    "Migration",
    "indexed",
    "migrate",
    "stamped_version",
    "upgrade",
]

SCHEMA_KEY = b"schema_version"
"""The meta key holding the store's schema version."""

_COMPLETION = msgspec.msgpack.Decoder(CompletionRecord)

# A step gets the open write transaction and the named databases.
Migration = Callable[[Any, Mapping[str, Any]], None]


def _v0_to_v1(txn: Any, dbs: Mapping[str, Any]) -> None:
    """Version 0 had the same records; nothing to rewrite."""


def indexed(raw: bytes) -> bool:
    """Return whether the stored completion ``raw`` belongs in the ``undelivered`` index:
    it is not delivered, or does not decode (the open's restore reads it and reports it)."""
    try:
        return not _COMPLETION.decode(raw).delivered
    except msgspec.DecodeError:
        return True


def _v1_to_v2(txn: Any, dbs: Mapping[str, Any]) -> None:
    """Index the keys of the completions not delivered yet."""
    index = dbs["undelivered"]
    with txn.cursor(db=dbs["completions"]) as cursor:
        for key, raw in cursor.iternext(keys=True, values=True):
            if indexed(raw):
                txn.put(key, b"", db=index)


MIGRATIONS: dict[int, Migration] = {0: _v0_to_v1, 1: _v1_to_v2}


def upgrade(
    txn: Any,
    dbs: Mapping[str, Any],
    found: int,
    current: int,
    steps: Mapping[int, Migration] | None = None,
) -> list[int]:
    """Run every step from ``found`` up to ``current``; return the versions upgraded from.

    Raises:
        StoreVersionError: ``found`` is newer than ``current``, or a step is missing.
    """
    table = MIGRATIONS if steps is None else steps
    if found > current:
        raise StoreVersionError(
            f"store schema version {found} is newer than this retinue's {current}; "
            "upgrade retinue to open it"
        )
    done: list[int] = []
    for version in range(found, current):
        step = table.get(version)
        if step is None:
            raise StoreVersionError(f"no migration from store schema version {version}")
        step(txn, dbs)
        done.append(version)
    return done


def stamped_version(txn: Any, dbs: Mapping[str, Any]) -> int:
    """Return the schema version stamped in the store (0 if none)."""
    raw = txn.get(SCHEMA_KEY, db=dbs["meta"])
    return 0 if raw is None else msgspec.msgpack.decode(raw, type=int)


def migrate(txn: Any, dbs: Mapping[str, Any]) -> list[int]:
    """Upgrade the store to this retinue's schema in ``txn`` and stamp it; return the steps.

    A store stamped with this schema is not written: an open commits nothing
    of its own until its recovery (a clean shutdown's index of the agents,
    tagged with the store's last transaction, stays valid through it).

    A store with no stamp and no data is new (stamped current); one with data
    but no stamp is version 0.

    Raises:
        StoreVersionError: the store is newer than this retinue, or a step is missing.
    """
    stamped = txn.get(SCHEMA_KEY, db=dbs["meta"]) is not None
    if not stamped:
        has_data = any(txn.stat(dbs[name])["entries"] for name in ("agents", "messages"))
        found = 0 if has_data else SCHEMA_VERSION
    else:
        found = stamped_version(txn, dbs)
    done = upgrade(txn, dbs, found, SCHEMA_VERSION)
    if not stamped or found != SCHEMA_VERSION:  # a store stamped current is left as it is
        txn.put(SCHEMA_KEY, msgspec.msgpack.encode(SCHEMA_VERSION), db=dbs["meta"])
    return done
