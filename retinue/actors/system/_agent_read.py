"""One agent read from its own records, for a read-only runtime: no whole-store restore.

A reader used to answer ``get`` and ``inspect`` by restoring the whole store
(:func:`~retinue.actors.tree.load_tree`), seconds on 100,000 agents, for one
agent. Here the agent is read from its own records in one consistent view
(:meth:`Store.view <retinue.persistence.store.Store.view>`):

- by id: its record, then its parents' up to the top (gets by key);
- by path: the store keeps no index of paths (agents are keyed by id, and the
  writer's path index lives in memory), so the agents database is searched
  for records whose bytes hold the path as msgpack encodes it (a byte search,
  without decoding the others); the live one whose path it is is the answer;
- its unread messages: a scan of its mailbox's keys (``<id>:<seq>``);
- the completions routed to it (keyed by their sender, not by it): those the
  ``undelivered`` index lists (a running agent's, or an older store's without
  the index: the completions database searched for its id);
- its transcript: one get.

The answers are the ones restore's whole view gives: every rule restore applies
to one record and its parent chain is applied here (a record that does not
decode, mismatches its key or breaks the path rules; an orphan or a cycle; a
stored path, parent path or depth that restore would rewrite), and where one
of them would change or drop a record on the way, the reader answers from the
whole view instead (None here says so). Restore also renames the later of two
live agents on one path, which no single record shows; a reader trusts paths
to be unique (every writer keeps them so) unless its open found a renamed or
rewritten path, and then reads everything through the whole view. Inputs a
running turn had taken come back as unread or pending, as restore gives them
back after a crash.
"""

from __future__ import annotations

import msgspec

from retinue.actors.supervisor import detail_from, require_str
from retinue.errors import UnknownAgent
from retinue.persistence.restore import Diagnostic, decode_agent
from retinue.persistence.view import StoreView
from retinue.protocol import paths
from retinue.protocol.details import AgentDetail
from retinue.protocol.messages import AgentState
from retinue.protocol.records import AgentRecord, CompletionRecord, MessageRecord

__all__ = ["PATHS_RENAMED", "find_record", "read_detail"]

PATHS_RENAMED = frozenset({"path_collision", "path_rewritten"})
"""Diagnostics of a store whose paths restore had to change: read it whole."""

_encode = msgspec.msgpack.Encoder().encode
_MESSAGE = msgspec.msgpack.Decoder(MessageRecord)
_COMPLETION = msgspec.msgpack.Decoder(CompletionRecord)


def find_record(view: StoreView, ref: object, field: str = "ref") -> AgentRecord | None:
    """Return the agent ``ref`` names (an id, or a path relative to ``/root``), as restore
    would keep it; None when restore's whole view is needed to answer.

    Raises:
        ArgumentTypeError: ``ref`` is not a str.
        InvalidAgentPath: a malformed path.
        UnknownAgent: no live agent at that path.
    """
    ref = require_str(ref, field)
    raw = view.get("agents", _key(ref))
    if raw is not None:
        record = decode_agent(ref.encode("utf-8", "surrogatepass"), raw)
        if isinstance(record, Diagnostic) or not placed(view, record):
            return None  # restore drops or rewrites it: the whole view says what ref names
        return record
    path = paths.resolve(paths.ROOT, ref, field=field)
    live = []
    for key, value in view.containing("agents", _encode(path)):
        found = decode_agent(key, value)
        if (
            isinstance(found, AgentRecord)
            and found.path == path
            and found.state is not AgentState.CLOSED
        ):
            live.append(found)
    if not live:
        raise UnknownAgent(f"no live agent at {path}")
    if len(live) > 1 or not placed(view, live[0]):
        return None  # restore renames one of them, or rewrites the path
    return live[0]


def placed(view: StoreView, record: AgentRecord) -> bool:
    """Whether restore keeps ``record`` as it is stored: its parents up to the top are
    stored and sound, with no cycle, and its path, parent path and depth (and theirs)
    are the ones its place gives."""
    chain = [record]
    seen = {record.id}
    node = record
    while node.parent_id is not None:
        if node.parent_id in seen:
            return False  # a cycle
        raw = view.get("agents", _key(node.parent_id))
        if raw is None:
            return False  # an orphan
        parent = decode_agent(node.parent_id.encode("utf-8", "surrogatepass"), raw)
        if isinstance(parent, Diagnostic):
            return False
        chain.append(parent)
        seen.add(parent.id)
        node = parent
    parent_path = paths.ROOT
    for depth, member in enumerate(reversed(chain), start=1):
        if (
            member.parent_path != parent_path
            or member.depth != depth
            or member.path != f"{parent_path}/{member.name}"
        ):
            return False
        parent_path = member.path
    return True


def read_detail(view: StoreView, record: AgentRecord, tail: int) -> AgentDetail | None:
    """Return ``record`` in full (``Runtime.inspect``), read from its own records; None
    when a completion routed to it comes from an agent restore would not keep."""
    pending = _pending(view, record)
    if pending is None:
        return None
    transcript = view.get("transcripts", _key(record.id))
    return detail_from(record, _unread(view, record), pending, transcript, tail)


def _held(record: AgentRecord, generation: int) -> bool:
    """Whether ``record``'s running turn ``generation`` took an input (a crash gives it back)."""
    return generation > 0 and record.state is AgentState.RUNNING and record.generation == generation


def _unread(view: StoreView, record: AgentRecord) -> list[MessageRecord]:
    """The agent's unread messages in arrival order, those its running turn read included."""
    unread: list[MessageRecord] = []
    for _, raw in view.prefix("messages", _key(f"{record.id}:")):
        try:
            stored = _MESSAGE.decode(raw)
        except msgspec.DecodeError:
            continue  # restore skips it too
        if stored.message.recipient_id != record.id:
            continue
        if stored.read:
            if not _held(record, stored.read_generation):
                continue
            stored = msgspec.structs.replace(stored, read=False, read_at=None, read_generation=0)
        if stored.message.seq != stored.seq:  # stored before messages carried their seq
            message = msgspec.structs.replace(stored.message, seq=stored.seq)
            stored = msgspec.structs.replace(stored, message=message)
        unread.append(stored)
    unread.sort(key=lambda m: (m.read_at or 0.0, m.seq))
    return unread


def _pending(view: StoreView, record: AgentRecord) -> list[CompletionRecord] | None:
    """The completions routed to the agent and not received yet, in routing order (those
    its running turn received included); None if one comes from an agent restore drops."""
    pending: list[CompletionRecord] = []
    # Only a running turn's inputs are delivered and pending: else the index lists them all.
    rows = None if record.state is AgentState.RUNNING else view.listed("completions", "undelivered")
    if rows is None:
        rows = view.containing("completions", _encode(record.id))
    for _, raw in rows:
        try:
            stored = _COMPLETION.decode(raw)
        except msgspec.DecodeError:
            continue
        if stored.recipient_id != record.id:
            continue
        if stored.delivered:
            if not _held(record, stored.delivered_generation):
                continue
            stored = msgspec.structs.replace(stored, delivered=False, delivered_generation=0)
        sender_id = stored.completion.agent_id
        sender = view.get("agents", _key(sender_id))
        if sender is None:
            return None
        found = decode_agent(sender_id.encode("utf-8", "surrogatepass"), sender)
        if isinstance(found, Diagnostic) or not placed(view, found):
            return None
        pending.append(stored)
    pending.sort(key=lambda c: c.seq)
    return pending


def _key(text: str) -> bytes:
    """``text`` as a store key (a lone surrogate kept, as restore's key text shows it)."""
    return text.encode("utf-8", "surrogatepass")
