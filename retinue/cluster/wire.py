"""What crosses the wire between the host face and a shard: msgspec bytes, typed on each side.

A call is one frozen struct of the :data:`Call` union (tagged by ``call``),
encoded to msgpack; a shard answers with an encoded :class:`Reply` whose
``value`` stays raw until the face decodes it with the type that call
returns. Nothing is pickled: msgspec structs pickled by value arrive without
their fields, and a typed decode refuses what the other side did not mean.

Errors cross as :class:`WireError` (the class name in :mod:`retinue.errors`,
the message and the plain attributes) and are raised again on the face as
the same class with the same message and attributes.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from retinue.cluster.eventwire import CloseStream, OpenStream, TakeEvents
from retinue.errors import ClusterError, RetinueError, RuntimeClosed, StoreError
from retinue.protocol import wire_errors
from retinue.protocol.wire_errors import WireError

__all__ = [
    "Ack",
    "Agents",
    "Approvals",
    "Approve",
    "Call",
    "Close",
    "CloseTree",
    "Deny",
    "FollowUp",
    "Get",
    "Inspect",
    "Interrupt",
    "InterruptTree",
    "Messages",
    "Ping",
    "Pong",
    "Release",
    "Reply",
    "Resume",
    "Send",
    "SetFault",
    "Shutdown",
    "Spawn",
    "StopWaiting",
    "Wait",
    "WireError",
    "decode_call",
    "decode_reply",
    "encode_call",
    "error_reply",
    "from_wire",
    "is_recorded",
    "ok_reply",
    "recordable",
    "to_wire",
]

T = TypeVar("T")


class _Call(msgspec.Struct, frozen=True, tag_field="call"):
    """Base of every call a shard serves."""


class Spawn(_Call, frozen=True, tag="spawn"):
    """``spawn`` under ``parent`` (a shard-local ref); the face sets ``key`` (see the router)."""

    rid: str
    profile: str
    task: str
    name: str | None
    parent: str
    key: str | None


class Send(_Call, frozen=True, tag="send"):
    """``send``; the face sets ``dedup_key`` (it makes one from the request id)."""

    rid: str
    ref: str
    content: str
    dedup_key: str | None


class FollowUp(_Call, frozen=True, tag="follow_up"):
    """``follow_up``."""

    rid: str
    ref: str
    task: str


class Resume(_Call, frozen=True, tag="resume"):
    """``resume``."""

    rid: str
    ref: str


class Interrupt(_Call, frozen=True, tag="interrupt"):
    """``interrupt``."""

    rid: str
    ref: str


class InterruptTree(_Call, frozen=True, tag="interrupt_tree"):
    """``interrupt_tree``."""

    rid: str
    ref: str


class Close(_Call, frozen=True, tag="close"):
    """``close`` of one agent."""

    rid: str
    ref: str


class CloseTree(_Call, frozen=True, tag="close_tree"):
    """``close_tree``."""

    rid: str
    ref: str


class Messages(_Call, frozen=True, tag="messages"):
    """``messages``: the shard's host inbox, waiting up to ``timeout`` for the first."""

    rid: str
    timeout: float


class StopWaiting(_Call, frozen=True, tag="stop_waiting"):
    """End the blocked ``messages`` calls ``rids`` now (another shard answered first)."""

    rids: tuple[str, ...]


class Wait(_Call, frozen=True, tag="wait"):
    """A host wait under ``lease`` (the shard stores the handover in the same commit)."""

    lease: str
    ref: str
    timeout: float


class Ack(_Call, frozen=True, tag="ack"):
    """The face has the completion ``lease`` took: forget the lease."""

    lease: str


class Release(_Call, frozen=True, tag="release"):
    """The face lost what ``lease`` took (its caller was cancelled): give it back."""

    lease: str


class Get(_Call, frozen=True, tag="get"):
    """``get`` (a read: no request id)."""

    ref: str


class Inspect(_Call, frozen=True, tag="inspect"):
    """``inspect`` (a read)."""

    ref: str
    transcript_tail: int


class Agents(_Call, frozen=True, tag="agents"):
    """``agents`` (a read)."""

    include_closed: bool


class Approvals(_Call, frozen=True, tag="approvals"):
    """``approvals``: the pending requests of ``ref``'s subtree, or all (a read)."""

    ref: str | None


class Approve(_Call, frozen=True, tag="approve"):
    """``approve`` of the shard-local ``request_id``."""

    rid: str
    request_id: str
    note: str | None


class Deny(_Call, frozen=True, tag="deny"):
    """``deny`` of the shard-local ``request_id``."""

    rid: str
    request_id: str
    reason: str


class Ping(_Call, frozen=True, tag="ping"):
    """Is the shard up? Answered with a :class:`Pong`."""


class Shutdown(_Call, frozen=True, tag="shutdown"):
    """Close the shard's runtime and its request log."""


class SetFault(_Call, frozen=True, tag="set_fault"):
    """Fault injection for tests and the crash loop: kill this shard's process at a point.

    ``point`` is ``"after_runtime"`` (the runtime committed the call, the
    request log has not recorded it) or ``"after_record"`` (recorded, not
    answered); ``calls`` names the call tags it applies to; ``times`` how
    many such calls crash it (0 clears the fault).
    """

    point: str
    calls: tuple[str, ...]
    times: int = 1


Call = (
    Spawn
    | Send
    | FollowUp
    | Resume
    | Interrupt
    | InterruptTree
    | Close
    | CloseTree
    | Messages
    | StopWaiting
    | Wait
    | Ack
    | Release
    | Get
    | Inspect
    | Agents
    | Approvals
    | Approve
    | Deny
    | Ping
    | Shutdown
    | SetFault
    | OpenStream
    | TakeEvents
    | CloseStream
)

RECORDED = (
    Spawn,
    Send,
    FollowUp,
    Resume,
    Interrupt,
    InterruptTree,
    Close,
    CloseTree,
    Messages,
    Approve,
    Deny,
)
"""Mutating calls: each carries a request id the shard records with its answer."""


def is_recorded(call: Call) -> bool:
    """Return True for a call whose answer the shard records under its request id."""
    return isinstance(call, RECORDED)


class Pong(msgspec.Struct, frozen=True, kw_only=True):
    """A shard's answer to :class:`Ping`: where it runs and what it runs with."""

    shard: int
    pid: int
    node_id: str
    config_digest: str
    leases: int
    restored_at: float
    streams: int = 0  # event streams open on it


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    """A shard's answer: the encoded value of the call's type, or the error it raised."""

    value: msgspec.Raw = msgspec.Raw(b"\xc0")
    error: WireError | None = None


_encoder = msgspec.msgpack.Encoder()
_call_decoder: msgspec.msgpack.Decoder[Call] = msgspec.msgpack.Decoder(Call)
_reply_decoder = msgspec.msgpack.Decoder(Reply)


def encode_call(call: Call) -> bytes:
    """Encode a call for the wire."""
    return _encoder.encode(call)


def decode_call(payload: bytes) -> Call:
    """Decode a call on the shard.

    Raises:
        ClusterError: the bytes are not a call this retinue knows.
    """
    try:
        return _call_decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise ClusterError(
            f"a shard got a call it cannot decode ({exc}); are the face and the shards "
            "running the same retinue?"
        ) from None


def ok_reply(value: Any) -> bytes:
    """Encode a successful answer (any msgspec-encodable value)."""
    return _encoder.encode(Reply(value=msgspec.Raw(_encoder.encode(value))))


def to_wire(error: BaseException) -> WireError:
    """Describe ``error`` for the wire: a retinue error keeps its class and attributes.

    Any other exception (a bug) crosses as ``ClusterError`` naming its type.
    """
    return wire_errors.to_wire(error, ClusterError)


def error_reply(error: BaseException) -> bytes:
    """Encode an answer that raises ``error`` on the face."""
    return _encoder.encode(Reply(error=to_wire(error)))


def from_wire(wire: WireError) -> RetinueError:
    """Rebuild the exception a shard raised: same class, message and attributes."""
    return wire_errors.from_wire(wire, ClusterError)


def decode_reply(raw: bytes, kind: type[T]) -> T:
    """Decode a shard's answer as ``kind``; raise the error it carries instead.

    Raises:
        RetinueError: the error the shard raised (its own class).
        ClusterError: the bytes are not an answer of that type.
    """
    try:
        reply = _reply_decoder.decode(raw)
        if reply.error is not None:
            raise from_wire(reply.error)
        value: T = msgspec.msgpack.decode(reply.value, type=kind)
    except msgspec.DecodeError as exc:
        raise ClusterError(f"a shard's answer does not decode as {kind}: {exc}") from None
    return value


def recordable(error: BaseException) -> bool:
    """Return True if a refusal is the call's answer for good (recorded for its retries).

    A closing runtime, a failing store or a cluster fault is the shard's
    trouble, not the call's: a retry after the shard comes back must run the
    call again.
    """
    return isinstance(error, RetinueError) and not isinstance(
        error, RuntimeClosed | StoreError | ClusterError
    )
