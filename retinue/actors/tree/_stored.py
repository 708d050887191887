"""The store's completions, read for a tree that holds only some of them in memory.

An open loads the undelivered completions only (the store's ``undelivered``
index lists them); a delivered one stays in the store until the supervisor
asks for it (a host wait, routing's checks, a removal or a compaction), and
:class:`StoredCompletions` reads it then, an agent's at a time.
"""

from __future__ import annotations

import msgspec

from retinue.persistence.reads import StoreReads
from retinue.protocol.records import CompletionRecord

__all__ = ["StoredCompletions"]

_DECODE = msgspec.msgpack.Decoder(CompletionRecord).decode


class StoredCompletions:
    """Reads of the completions committed in one store."""

    def __init__(self, store: StoreReads) -> None:
        """Read from ``store``."""
        self._store = store

    def of_agent(self, agent_id: str) -> list[CompletionRecord]:
        """Return the committed completions of ``agent_id``, oldest generation first.

        One that does not decode is left out, as restore leaves it out.

        Raises:
            StoreCorrupted, StoreError: the read failed.
        """
        prefix = f"{agent_id}:".encode()
        with self._store.view() as view:
            rows = view.prefix("completions", prefix)
        found: list[CompletionRecord] = []
        for key, raw in rows:
            if not key[len(prefix) :].isdigit():  # another agent whose id goes on past ':'
                continue
            try:
                record = _DECODE(raw)
            except msgspec.DecodeError:
                continue
            if record.completion.agent_id == agent_id:
                found.append(record)
        return found

    def every(self) -> list[CompletionRecord]:
        """Return every committed completion that decodes (a crash's replay needs them).

        Raises:
            StoreCorrupted, StoreError: the read failed.
        """
        found: list[CompletionRecord] = []
        for _, raw in self._store.snapshot(("completions",)).records["completions"]:
            try:
                found.append(_DECODE(raw))
            except msgspec.DecodeError:
                continue
        return found
