"""Restore: rebuild a consistent tree from one store snapshot, record by record.

Each record is decoded and checked on its own; one that does not decode or
breaks a rule is skipped with a :class:`Diagnostic` and never costs the rest
of the store. Skipped records stay on disk untouched (a newer retinue may read
them); only records that restore repairs are rewritten.

Diagnostic codes (stable, for tooling):

- ``undecodable``: the bytes are not a valid record of that database.
- ``key_mismatch``: the record's id does not match its key.
- ``bad_path``: the stored name or path breaks the path rules.
- ``orphan``: the agent's parent is missing (or was itself dropped).
- ``cycle``: the agent's parent chain loops.
- ``too_deep``: the agent is deeper than the current ``depth_cap``.
- ``path_collision``: two live agents share a path; the later one was renamed
  to its derived name (kept, rewritten).
- ``path_rewritten``: a stored path disagreed with its parent's; rewritten.
- ``live_under_closed``: a live agent whose parent is closed (a store written
  by a faulty writer); kept, and routed to its nearest live ancestor.
- ``dangling_message`` / ``dangling_completion``: the record belongs to an
  agent that was not restored.
- ``dangling_approval``: an approval request of an agent that was not restored.
- ``migrated``: the store was migrated from an older schema version (added
  by the writer's open, not by the scan).

The operating guide (docs/guides/operating.md) lists the same codes;
``tests/runtime/test_semantics.py`` keeps the two lists, and the codes the
code emits, in step.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter, itemgetter
from typing import cast

import msgspec

from retinue.errors import InvalidAgentPath
from retinue.persistence.placed import BUSY_STATES, AgentPlace, Placed
from retinue.persistence.store import Snapshot
from retinue.protocol import paths
from retinue.protocol.messages import AgentState, Completion
from retinue.protocol.records import AgentRecord, CompletionRecord, MessageRecord
from retinue.protocol.supervision import ApprovalRecord

__all__ = ["Diagnostic", "Restored", "decode_agent", "restore", "restore_around"]


class Diagnostic(msgspec.Struct, frozen=True, kw_only=True):
    """One problem restore found and how it handled it."""

    database: str
    key: str
    code: str
    message: str


@dataclass
class Restored:
    """What restore kept, parents before children, and what it had to say.

    ``placed`` holds the kept agents again, indexed for the tree as the walk
    placed them (see :class:`~retinue.persistence.placed.Placed`; None: the
    restore was not asked to, ``restore(index=False)``).
    ``places``: the kept agents that are not busy are their places only
    (:class:`~retinue.persistence.placed.AgentPlace`, ``restore(places=True)``
    on a sound store): whoever keeps them reads their records from the store.
    """

    agents: list[AgentRecord] = field(default_factory=list)
    placed: Placed | None = None
    messages: list[MessageRecord] = field(default_factory=list)
    completions: list[CompletionRecord] = field(default_factory=list)
    rewritten: list[AgentRecord] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    leases: list[tuple[str, Completion]] = field(default_factory=list)
    approvals: list[ApprovalRecord] = field(default_factory=list)
    places: bool = False


def _key_text(key: bytes) -> str:
    return key.decode("utf-8", "backslashreplace")


def restore(
    snapshot: Snapshot, depth_cap: int | None, *, index: bool = False, places: bool = False
) -> Restored:
    """Decode and check every record of ``snapshot``; return the consistent part.

    The records are taken out of ``snapshot`` as they are decoded, so each
    database's raw bytes are freed once decoded (an open's peak memory is
    not the raw store and the decoded tree at once); it is empty afterwards.
    ``depth_cap`` None drops no agent for its depth: a read-only view shows
    the store as its writer kept it, whatever cap that writer ran with.
    ``index``: the walk also indexes the kept agents for a tree
    (``Restored.placed``, what :func:`~retinue.actors.tree.load_tree` loads).
    ``places``: a sound store's agents that are not busy are decoded as their
    places only (``Restored.places``), for a caller that reads their records
    from the store when asked (an open of a big store decodes a fraction of
    each); a store restored the careful way, or whose walk rewrites a record,
    is decoded whole.
    """
    scan = _Scan(Restored(placed=Placed() if index else None), places=places)
    scan.around(snapshot, scan.agents(snapshot.records.pop("agents", []), depth_cap))
    return scan.out


def restore_around(snapshot: Snapshot, agents: Container[str]) -> Restored:
    """Restore what ``snapshot`` holds beside the agents, whose ids ``agents`` are.

    For an open that knows the agents already (a clean shutdown's index,
    :mod:`retinue.actors.tree._open_index`): the messages, completions,
    approval requests and leases, checked as :func:`restore` checks them.
    ``Restored.agents`` is empty.
    """
    scan = _Scan(Restored())
    snapshot.records.pop("agents", None)
    scan.around(snapshot, agents)
    return scan.out


class _Scan:
    """The steps of one restore, gathering what they keep and say into ``out``."""

    def __init__(self, out: Restored, *, places: bool = False) -> None:
        self.out = out
        self.places = places

    def around(self, snapshot: Snapshot, kept: Container[str]) -> None:
        """Restore the messages, completions, approval requests and leases of ``snapshot``
        (those of agents not in ``kept`` go, the leases stay)."""
        self.messages(snapshot, kept)
        self.completions(snapshot, kept)
        self.approvals(snapshot, kept)
        _restore_leases(snapshot, self.out)

    def diag(self, database: str, key: str, code: str, message: str) -> None:
        """Record a diagnostic."""
        self.out.diagnostics.append(
            Diagnostic(database=database, key=key, code=code, message=message)
        )

    def agents(
        self, raws: list[tuple[bytes, bytes]], depth_cap: int | None
    ) -> dict[str, AgentRecord]:
        """Decode, check and place the agents; return the kept ones by id.

        A sound store costs one decode, a few checks of all the records at
        once and one top-down walk (:meth:`rebuild`, which also indexes the
        agents for a tree in ``out.placed`` if asked): the walk reaches exactly
        the agents whose parent chain ends at the host, so reaching them all
        proves there is no orphan and no cycle. At the first doubt what was
        gathered goes and the store is restored the careful way, each record
        checked on its own and every chain walked (:meth:`chains`), with the
        same diagnostics in the same order as ever.
        """
        out = self.out
        mark = len(out.diagnostics)
        decoded = self._decode_all(raws)
        if decoded is not None:
            reached = self.rebuild(_children(decoded), depth_cap)
            # each id once: it is its key (ids are unique); a record rewritten is whole
            if reached == len(decoded) and not (self.places and out.rewritten):
                out.places = self.places
                return self._kept(decoded if len(out.agents) == reached else out.agents)
            del out.agents[:], out.rewritten[:], out.diagnostics[mark:]
            out.placed = None if out.placed is None else Placed()
        return self.careful(raws, depth_cap)

    def careful(
        self, raws: list[tuple[bytes, bytes]], depth_cap: int | None
    ) -> dict[str, AgentRecord]:
        """Restore the agents the careful way: each record checked on its own, every parent
        chain walked, then the walk; return the kept ones by id."""
        decoded = {record.id: record for record in self._decode_each(raws)}
        self.rebuild(self.chains(decoded), depth_cap)
        return self._kept(self.out.agents)

    def _kept(self, records: list[AgentRecord]) -> dict[str, AgentRecord]:
        """Return the kept agents by id, once placed; ``records`` are the same agents (in
        any order) to count into ``out.placed`` if the restore indexes them."""
        out = self.out
        if out.placed is None:
            return {record.id: record for record in out.agents}
        out.placed.count(records)
        return out.placed.agents

    def _decode_all(self, raws: list[tuple[bytes, bytes]]) -> list[AgentRecord] | None:
        """Decode every record and check them all at once: None unless each decodes, its id
        is its key, its name is sound and its path not too long.

        A path is not checked here: the walk (:meth:`rebuild`) checks each
        against its parent's path and its name, and on its own one that
        disagrees or belongs to an agent too deep.
        """
        try:
            records = list(map((_PLACE if self.places else _AGENT).decode, map(_VALUE, raws)))
            if self.places:  # the busy ones whole: recovery and the rearms read them at once
                busy = map(BUSY_STATES.__contains__, map(_STATE, records))
                for at in compress(range(len(records)), busy):
                    records[at] = _AGENT.decode(raws[at][1])
            ids = list(map(_ID, records))
            sound = (
                ids == list(map(bytes.decode, map(_KEY, raws)))
                and paths.names_sound(list(map(_NAME, records)))
                and max(map(len, map(_PATH, records)), default=0) <= paths.MAX_PATH_LENGTH
            )
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None
        # A place stands for its record until its keeper reads the record from the store.
        return cast("list[AgentRecord]", records) if sound else None

    def _decode_each(self, raws: list[tuple[bytes, bytes]]) -> list[AgentRecord]:
        """Decode and check each record on its own; say why each one that goes goes."""
        records: list[AgentRecord] = []
        for raw_key, raw in raws:
            record = decode_agent(raw_key, raw)
            if isinstance(record, Diagnostic):
                self.out.diagnostics.append(record)
            else:
                records.append(record)
        return records

    def chains(self, decoded: dict[str, AgentRecord]) -> dict[str | None, list[AgentRecord]]:
        """Drop the agents whose parent chain loops or ends nowhere; return the children."""
        status = _chain_status(decoded)
        children: dict[str | None, list[AgentRecord]] = {}
        for agent_id, record in decoded.items():
            state = status[agent_id]
            if state == "cycle":
                self.diag("agents", agent_id, "cycle", f"{record.path}: parent chain loops")
            elif state == "orphan":
                self.diag("agents", agent_id, "orphan", f"{record.path}: parent is missing")
            else:
                children.setdefault(record.parent_id, []).append(record)
        return children

    def rebuild(self, children: dict[str | None, list[AgentRecord]], depth_cap: int | None) -> int:
        """Rebuild the tree top-down from the host (depths, paths, unique live paths) into
        ``out.agents`` and ``out.placed`` if set (each parent's children indexed together,
        as they are placed); return how many agents it reached (kept or too deep), or -1
        at a record whose stored path is not sound (:meth:`_decode_all` leaves paths to
        this: a path that agrees with its parent's and its name is sound, the others and
        those of the agents too deep are checked one by one)."""
        closed = AgentState.CLOSED
        placed = self.out.placed
        live_paths: dict[str, str] = {} if placed is None else placed.live_paths
        out = self.out.agents
        reached = 0
        # (parent id, its path, its depth, whether it is closed)
        frontier: list[tuple[str | None, str, int, bool]] = [(None, paths.ROOT, 0, False)]
        while frontier:
            parent_id, parent_path, parent_depth, under_closed = frontier.pop()
            mine = children.get(parent_id)
            if mine is None:  # a leaf: most agents of a big store
                continue
            if len(mine) > 1:
                mine = sorted(mine, key=_CREATED_AT)
            depth = parent_depth + 1
            if depth_cap is not None and depth > depth_cap:
                for record in mine:
                    dropped = self._too_deep(children, record, depth, depth_cap)
                    if dropped < 0:
                        return -1
                    reached += dropped
                continue
            reached += len(mine)
            prefix = parent_path + "/"
            kept: list[AgentRecord] = []
            for record in mine:
                path = prefix + record.name
                if not (  # the common case: the store has it where it belongs
                    path == record.path
                    and depth == record.depth
                    and parent_path == record.parent_path
                    and (record.state is closed or record.path not in live_paths)
                ):
                    if not paths.is_sound(record.path, record.name):
                        return -1  # only a store not checked record by record has one
                    record = self._placed(record, parent_path, depth, live_paths)
                is_closed = record.state is closed
                if not is_closed:
                    live_paths[record.path] = record.id
                    if under_closed:
                        agent_id = record.id
                        self.diag(
                            "agents",
                            agent_id,
                            "live_under_closed",
                            f"{record.path} is live under closed {parent_path}; kept, its "
                            "completions go to the nearest live ancestor",
                        )
                kept.append(record)
                if record.id in children:
                    frontier.append((record.id, record.path, depth, is_closed))
            out += kept
            if placed is not None:
                placed.add(parent_id, kept)
        return reached

    def _too_deep(
        self,
        children: dict[str | None, list[AgentRecord]],
        record: AgentRecord,
        depth: int,
        cap: int,
    ) -> int:
        """Drop an agent deeper than the cap, and its whole subtree, each with a diagnostic;
        return how many went, or -1 at one whose stored path is not sound (the walk's
        caller restores the store the careful way, where such a record went first)."""
        below = [(record, depth)]
        dropped = 0
        while below:
            node, node_depth = below.pop()
            if not paths.is_sound(node.path, node.name):
                return -1
            dropped += 1
            node_id = node.id
            self.diag("agents", node_id, "too_deep", f"{node.path}: depth {node_depth} > cap {cap}")
            below.extend((c, node_depth + 1) for c in children.get(node_id, []))
        return dropped

    def _placed(
        self, record: AgentRecord, parent_path: str, depth: int, live_paths: dict[str, str]
    ) -> AgentRecord:
        """The record at its place below ``parent_path``: its path rewritten or its name
        derived where the store disagrees, or a live sibling already holds the path."""
        agent_id = record.id
        # The parent's path is placed (valid) and the name was checked as it decoded.
        path = paths.child_path(parent_path, record.name)
        changed = False
        if path != record.path:
            self.diag("agents", agent_id, "path_rewritten", f"{record.path} is now {path}")
            changed = True
        name = record.name
        if record.state is not AgentState.CLOSED and path in live_paths:
            name = paths.derive_name(agent_id)
            new_path = paths.join(parent_path, name)
            self.diag(
                "agents",
                agent_id,
                "path_collision",
                f"{path} is held by another live agent; renamed to {new_path}",
            )
            path, changed = new_path, True
        if changed or depth != record.depth or record.parent_path != parent_path:
            record = msgspec.structs.replace(
                record, name=name, path=path, depth=depth, parent_path=parent_path
            )
            self.out.rewritten.append(record)
        return record

    def messages(self, snapshot: Snapshot, kept: Container[str]) -> None:
        """Decode the messages; those of agents not restored go."""
        decoder = msgspec.msgpack.Decoder(MessageRecord)
        for raw_key, raw in snapshot.records.pop("messages", []):
            key = _key_text(raw_key)
            try:
                message = decoder.decode(raw)
            except msgspec.DecodeError as exc:
                self.diag("messages", key, "undecodable", f"message record does not decode: {exc}")
                continue
            recipient = message.message.recipient_id
            if recipient and recipient not in kept:  # "" is the host's own mailbox
                self.diag("messages", key, "dangling_message", "recipient was not restored")
                continue
            self.out.messages.append(message)

    def completions(self, snapshot: Snapshot, kept: Container[str]) -> None:
        """Decode the completions; those of agents not restored go."""
        decoder = msgspec.msgpack.Decoder(CompletionRecord)
        for raw_key, raw in snapshot.records.pop("completions", []):
            key = _key_text(raw_key)
            try:
                completion = decoder.decode(raw)
            except msgspec.DecodeError as exc:
                self.diag("completions", key, "undecodable", f"completion does not decode: {exc}")
                continue
            if completion.completion.agent_id not in kept:
                self.diag("completions", key, "dangling_completion", "its agent was not restored")
                continue
            self.out.completions.append(completion)

    def approvals(self, snapshot: Snapshot, kept: Container[str]) -> None:
        """Decode the approval requests whose agent was restored."""
        decoder = msgspec.msgpack.Decoder(ApprovalRecord)
        for raw_key, raw in snapshot.records.pop("approvals", []):
            key = _key_text(raw_key)
            try:
                record = decoder.decode(raw)
            except msgspec.DecodeError as exc:
                self.diag(
                    "approvals", key, "undecodable", f"approval request does not decode: {exc}"
                )
                continue
            if record.request.agent_id not in kept:
                self.diag("approvals", key, "dangling_approval", "its agent was not restored")
                continue
            self.out.approvals.append(record)


_AGENT = msgspec.msgpack.Decoder(AgentRecord)
_PLACE = msgspec.msgpack.Decoder(AgentPlace)


def decode_agent(raw_key: bytes, raw: bytes) -> AgentRecord | Diagnostic:
    """Decode one stored agent record and check it on its own, as restore does.

    Returns the record, or the diagnostic that drops it: ``undecodable``,
    ``key_mismatch`` (its id is not its key) or ``bad_path`` (its path or name
    breaks the path rules).
    """
    key = _key_text(raw_key)
    try:
        record = _AGENT.decode(raw)
    except msgspec.DecodeError as exc:
        return _diag("agents", key, "undecodable", f"agent record does not decode: {exc}")
    if record.id != key:
        return _diag("agents", key, "key_mismatch", f"record id {record.id!r} != key")
    if paths.is_sound(record.path, record.name):
        return record
    try:  # say what is wrong
        paths.validate(record.path)
        paths.validate_name(record.name)
    except (InvalidAgentPath, TypeError) as exc:
        return _diag("agents", key, "bad_path", f"{exc}")
    return record


_KEY = itemgetter(0)
_VALUE = itemgetter(1)
_ID = attrgetter("id")
_PATH = attrgetter("path")
_NAME = attrgetter("name")
_STATE = attrgetter("state")
_CREATED_AT = attrgetter("created_at")
"""The sort key of an agent among its siblings: when its record was created."""


def _children(records: Iterable[AgentRecord]) -> dict[str | None, list[AgentRecord]]:
    """The agents grouped under their parent id (None: the host), in ``records``' order."""
    children: dict[str | None, list[AgentRecord]] = {}
    for record in records:
        mine = children.get(record.parent_id)
        if mine is None:
            children[record.parent_id] = [record]
        else:
            mine.append(record)
    return children


def _diag(database: str, key: str, code: str, message: str) -> Diagnostic:
    return Diagnostic(database=database, key=key, code=code, message=message)


def _chain_status(decoded: dict[str, AgentRecord]) -> dict[str, str]:
    """Walk every parent chain once: each agent is ``ok``, an ``orphan`` or on a ``cycle``."""
    status: dict[str, str] = {}
    for start, record in decoded.items():
        parent_id = record.parent_id
        if parent_id is None or status.get(parent_id) == "ok":
            status[start] = "ok"  # the common case: its parent is known sound
            continue
        chain: list[str] = []
        on_chain: set[str] = set()
        node: str | None = start
        verdict = "ok"
        while node is not None and node not in status:
            if node in on_chain:
                verdict = "cycle"
                break
            found = decoded.get(node)
            if found is None:
                verdict = "orphan"
                break
            chain.append(node)
            on_chain.add(node)
            node = found.parent_id
        else:
            if node is not None:
                verdict = "ok" if status[node] == "ok" else "orphan"
        if verdict == "cycle":
            assert node is not None
            loop_start = chain.index(node)
            for member in chain[loop_start:]:
                status[member] = "cycle"
            for member in chain[:loop_start]:
                status[member] = "orphan"
        else:
            for member in chain:
                status[member] = verdict
    return status


def _restore_leases(snapshot: Snapshot, out: Restored) -> None:
    """Decode the host waits' unacknowledged leases (kept even if their agent is gone)."""
    decoder = msgspec.msgpack.Decoder(Completion)
    for raw_key, raw in snapshot.records.pop("leases", []):
        key = _key_text(raw_key)
        try:
            out.leases.append((key, decoder.decode(raw)))
        except msgspec.DecodeError as exc:
            out.diagnostics.append(
                Diagnostic(
                    database="leases",
                    key=key,
                    code="undecodable",
                    message=f"lease does not decode: {exc}",
                )
            )
