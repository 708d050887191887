"""The store's completions and settled agents, read for a tree that holds only some in memory.

An open loads the undelivered completions only (the store's ``undelivered``
index lists them); a delivered one stays in the store until the supervisor
asks for it (a host wait, routing's checks, a removal or a compaction), and
:class:`StoredCompletions` reads it then, an agent's at a time. The same
reads serve the settled agents an open leaves in the store
(:class:`~retinue.actors.tree._agents.AgentTable`).
"""

from __future__ import annotations

import msgspec

from retinue.errors import StoreCorrupted
from retinue.persistence.reads import StoreReads
from retinue.protocol.records import AgentRecord, CompletionRecord

__all__ = ["StoredCompletions"]

_DECODE = msgspec.msgpack.Decoder(CompletionRecord).decode
_AGENT = msgspec.msgpack.Decoder(AgentRecord).decode


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

    def agent(self, agent_id: str) -> AgentRecord:
        """Return a settled agent's stored record.

        Raises:
            StoreCorrupted: it is not stored or does not decode (the open found it sound).
            StoreError: the read failed.
        """
        return self._agent(agent_id, self._store.get("agents", agent_id.encode()))

    def some(self, agent_ids: list[str]) -> list[AgentRecord]:
        """Return the stored records of ``agent_ids``, in their order (one read transaction).

        Raises:
            StoreCorrupted: one is not stored or does not decode.
            StoreError: the read failed.
        """
        with self._store.view() as view:
            raws = [view.get("agents", key.encode()) for key in agent_ids]
        return [self._agent(key, raw) for key, raw in zip(agent_ids, raws, strict=True)]

    def _agent(self, agent_id: str, raw: bytes | None) -> AgentRecord:
        """Decode a settled agent's record read as ``raw`` (None: not stored)."""
        folder = str(self._store.folder)
        if raw is None:
            raise StoreCorrupted(
                f"store {folder}: agent {agent_id} is gone from the store since it was opened",
                path=folder,
            )
        try:
            record = _AGENT(raw)
        except msgspec.DecodeError as exc:
            raise StoreCorrupted(
                f"store {folder}: agent {agent_id}'s record does not decode: {exc}", path=folder
            ) from None
        if record.id != agent_id:
            raise StoreCorrupted(
                f"store {folder}: the record stored as agent {agent_id} is {record.id}",
                path=folder,
            )
        return record
