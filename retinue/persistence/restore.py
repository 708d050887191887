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

from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from retinue.errors import InvalidAgentPath
from retinue.persistence.store import Snapshot
from retinue.protocol import paths
from retinue.protocol.messages import AgentState, Completion
from retinue.protocol.records import AgentRecord, CompletionRecord, MessageRecord
from retinue.protocol.supervision import ApprovalRecord

__all__ = ["Diagnostic", "Restored", "decode_agent", "restore"]


class Diagnostic(msgspec.Struct, frozen=True, kw_only=True):
    """One problem restore found and how it handled it."""

    database: str
    key: str
    code: str
    message: str


@dataclass
class Restored:
    """What restore kept, parents before children, and what it had to say."""

    agents: list[AgentRecord] = field(default_factory=list)
    messages: list[MessageRecord] = field(default_factory=list)
    completions: list[CompletionRecord] = field(default_factory=list)
    rewritten: list[AgentRecord] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    leases: list[tuple[str, Completion]] = field(default_factory=list)
    approvals: list[ApprovalRecord] = field(default_factory=list)


def _key_text(key: bytes) -> str:
    return key.decode("utf-8", "backslashreplace")


def restore(snapshot: Snapshot, depth_cap: int | None) -> Restored:
    """Decode and check every record of ``snapshot``; return the consistent part.

    The records are taken out of ``snapshot`` as they are decoded, so each
    database's raw bytes are freed once decoded (an open's peak memory is
    not the raw store and the decoded tree at once); it is empty afterwards.
    ``depth_cap`` None drops no agent for its depth: a read-only view shows
    the store as its writer kept it, whatever cap that writer ran with.
    """
    scan = _Scan(Restored())
    decoded = scan.agents(snapshot)
    children = scan.chains(decoded)
    kept = scan.rebuild(decoded, children, depth_cap)
    scan.messages(snapshot, kept)
    scan.completions(snapshot, kept)
    scan.approvals(snapshot, kept)
    _restore_leases(snapshot, scan.out)
    return scan.out


class _Scan:
    """The steps of one restore, gathering what they keep and say into ``out``."""

    def __init__(self, out: Restored) -> None:
        self.out = out

    def diag(self, database: str, key: str, code: str, message: str) -> None:
        """Record a diagnostic."""
        self.out.diagnostics.append(
            Diagnostic(database=database, key=key, code=code, message=message)
        )

    def agents(self, snapshot: Snapshot) -> dict[str, AgentRecord]:
        """Decode the agent records each on its own: undecodable, mismatched, bad paths go."""
        decoded: dict[str, AgentRecord] = {}
        for raw_key, raw in snapshot.records.pop("agents", []):
            record = decode_agent(raw_key, raw)
            if isinstance(record, Diagnostic):
                self.out.diagnostics.append(record)
            else:
                decoded[record.id] = record
        return decoded

    def chains(self, decoded: dict[str, AgentRecord]) -> dict[str | None, list[str]]:
        """Drop the agents whose parent chain loops or ends nowhere; return the children."""
        children: dict[str | None, list[str]] = {}
        status, sound = _chain_status(decoded, children)
        if sound:  # every chain ends at the host: the children as they were gathered
            return children
        children = {}
        for agent_id, record in decoded.items():
            state = status[agent_id]
            if state == "cycle":
                self.diag("agents", agent_id, "cycle", f"{record.path}: parent chain loops")
            elif state == "orphan":
                self.diag("agents", agent_id, "orphan", f"{record.path}: parent is missing")
            else:
                children.setdefault(record.parent_id, []).append(agent_id)
        return children

    def rebuild(
        self,
        decoded: dict[str, AgentRecord],
        children: dict[str | None, list[str]],
        depth_cap: int | None,
    ) -> dict[str, AgentRecord]:
        """Rebuild the tree top-down: depths, paths, unique live paths; return what is kept."""
        closed = AgentState.CLOSED
        live_paths: set[str] = set()
        kept: dict[str, AgentRecord] = {}
        out = self.out.agents
        frontier: list[tuple[str | None, str, int]] = [(None, paths.ROOT, 0)]
        created = _created_at(decoded)
        while frontier:
            parent_id, parent_path, parent_depth = frontier.pop()
            mine = children.get(parent_id)
            if mine is None:  # a leaf: most agents of a big store
                continue
            ordered = sorted(mine, key=created) if len(mine) > 1 else mine
            depth = parent_depth + 1
            if depth_cap is not None and depth > depth_cap:
                for agent_id in ordered:
                    self._too_deep(decoded, children, agent_id, depth, depth_cap)
                continue
            parent = kept.get(parent_id) if parent_id is not None else None
            under_closed = parent is not None and parent.state is closed
            for agent_id in ordered:
                record = decoded[agent_id]
                path = parent_path + "/" + record.name
                if not (  # the common case: the store has it where it belongs
                    path == record.path
                    and depth == record.depth
                    and parent_path == record.parent_path
                    and (record.state is closed or path not in live_paths)
                ):
                    record = self._placed(record, parent_path, depth, live_paths)
                if record.state is not closed:
                    live_paths.add(record.path)
                    if under_closed:
                        assert parent is not None
                        self.diag(
                            "agents",
                            agent_id,
                            "live_under_closed",
                            f"{record.path} is live under closed {parent.path}; kept, its "
                            "completions go to the nearest live ancestor",
                        )
                kept[agent_id] = record
                out.append(record)
                if agent_id in children:
                    frontier.append((agent_id, record.path, depth))
        return kept

    def _too_deep(
        self,
        decoded: dict[str, AgentRecord],
        children: dict[str | None, list[str]],
        agent_id: str,
        depth: int,
        cap: int,
    ) -> None:
        """Drop an agent deeper than the cap, and its whole subtree, each with a diagnostic."""
        below = [(agent_id, depth)]
        while below:
            node, node_depth = below.pop()
            self.diag(
                "agents", node, "too_deep", f"{decoded[node].path}: depth {node_depth} > cap {cap}"
            )
            below.extend((c, node_depth + 1) for c in children.get(node, []))

    def _placed(
        self, record: AgentRecord, parent_path: str, depth: int, live_paths: set[str]
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

    def messages(self, snapshot: Snapshot, kept: dict[str, AgentRecord]) -> None:
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

    def completions(self, snapshot: Snapshot, kept: dict[str, AgentRecord]) -> None:
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

    def approvals(self, snapshot: Snapshot, kept: dict[str, AgentRecord]) -> None:
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


def _created_at(decoded: dict[str, AgentRecord]) -> Callable[[str], float]:
    """The sort key of an agent id among its siblings: when its record was created."""
    return lambda agent_id: decoded[agent_id].created_at


def _diag(database: str, key: str, code: str, message: str) -> Diagnostic:
    return Diagnostic(database=database, key=key, code=code, message=message)


def _chain_status(
    decoded: dict[str, AgentRecord], children: dict[str | None, list[str]]
) -> tuple[dict[str, str], bool]:
    """Walk every parent chain once: each agent is ``ok``, an ``orphan`` or on a ``cycle``.

    Returns the verdicts and whether all are ``ok``. Gathers every agent under
    its parent id into ``children`` on the way (in ``decoded``'s order; one
    pass over a big store's agents instead of two): only right when all are.
    """
    status: dict[str, str] = {}
    sound = True
    for start, record in decoded.items():
        parent_id = record.parent_id
        mine = children.get(parent_id)
        if mine is None:
            children[parent_id] = [start]
        else:
            mine.append(start)
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
        if verdict != "ok":
            sound = False
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
    return status, sound


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
