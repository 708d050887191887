"""What crosses the wire between the host face and a shard: msgspec bytes, typed on each side.

A call is one frozen struct of the :data:`Call` union (tagged by ``call``),
encoded to msgpack; a shard answers with an encoded :class:`Reply` whose
``value`` stays raw until the face decodes it with the type that call
returns. Nothing is pickled: msgspec structs pickled by value arrive without
their fields, and a typed decode refuses what the other side did not mean.

No second command set: a host call is a :class:`Run` that carries one of the
runtime's own commands (:mod:`retinue.actors.commands`), in the one wire form
the control socket uses too (``encode_command``: one tagged struct per
command, checked field by field on the shard and built again as the runtime's
dataclass), with a shard-local ref; the shard submits it to its runtime as the
host and answers with the command's answer type (``answer_type``), every id
in it a cluster id. :data:`CALL_NAMES` lists the commands a shard serves; the
mutating ones (:data:`RECORDED`) carry a request id the shard records with its
answer. The other calls are the cluster's own: a shard's health, faults and
shutdown, the stop of a blocked inbox wait, the event streams.

Evolution, as the protocol's: a new field goes at the end of its struct with a
default (an older peer's call still decodes); a new call is a new tag (an
older shard refuses it with ``ClusterError``). Anything else (a renamed tag or
field, a changed type) needs the face and the shards on the same retinue.

Errors cross as :class:`WireError` (the class name in :mod:`retinue.errors`,
the message and the plain attributes) and are raised again on the face as
the same class with the same message and attributes.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from retinue.actors import commands as c
from retinue.cluster.eventwire import CloseStream, OpenStream, TakeEvents
from retinue.errors import ArgumentTypeError, ClusterError, RetinueError, RuntimeClosed, StoreError
from retinue.protocol import wire_errors
from retinue.protocol.wire_errors import WireError

__all__ = [
    "CALL_NAMES",
    "RECORDED",
    "Call",
    "Ping",
    "Pong",
    "Reply",
    "Run",
    "SetFault",
    "Shutdown",
    "StopWaiting",
    "WireError",
    "call_name",
    "command_of",
    "decode_call",
    "decode_reply",
    "encode_call",
    "error_reply",
    "final_reply",
    "from_wire",
    "is_recorded",
    "ok_reply",
    "recordable",
    "run",
    "to_wire",
]

T = TypeVar("T")

CALL_NAMES: dict[type[c.Command[Any]], str] = {
    c.Spawn: "spawn",
    c.Send: "send",
    c.FollowUp: "follow_up",
    c.Resume: "resume",
    c.Interrupt: "interrupt",
    c.InterruptTree: "interrupt_tree",
    c.Close: "close",
    c.CloseTree: "close_tree",
    c.HostMessages: "messages",
    c.Wait: "wait",
    c.AckLease: "ack",
    c.ReleaseLease: "release",
    c.Get: "get",
    c.Inspect: "inspect",
    c.Agents: "agents",
    c.Approvals: "approvals",
    c.Approve: "approve",
    c.Deny: "deny",
}
"""The runtime commands a shard serves, by the name a call goes by (the face's method;
fault injection names calls so)."""

RECORDED: frozenset[type[c.Command[Any]]] = frozenset(
    {c.Spawn, c.Send, c.FollowUp, c.Resume, c.Interrupt, c.InterruptTree, c.Close}
    | {c.CloseTree, c.HostMessages, c.Approve, c.Deny}
)
"""Mutating commands: each :class:`Run` of one carries a request id the shard records."""


class _Call(msgspec.Struct, frozen=True, tag_field="call"):
    """Base of every call a shard serves."""


class Run(_Call, frozen=True, tag="run"):
    """Run one of the runtime's commands (``command``: its wire form) on the shard as the host.

    ``rid``: the request id of a mutating command (:data:`RECORDED`), None for
    the others; ``timeout``: how long a waiting command (a wait, the host's
    inbox) waits. Make one with :func:`run`.
    """

    command: msgspec.Raw
    rid: str | None = None
    timeout: float | None = None


class StopWaiting(_Call, frozen=True, tag="stop_waiting"):
    """End the blocked ``messages`` calls ``rids`` now (another shard answered first)."""

    rids: tuple[str, ...]


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


Call = Run | StopWaiting | Ping | Shutdown | SetFault | OpenStream | TakeEvents | CloseStream


def run(command: c.Command[Any], *, rid: str | None = None, timeout: float | None = None) -> Run:
    """Wrap one of the commands a shard serves (:data:`CALL_NAMES`) as a call.

    Raises:
        ArgumentTypeError: a field holds a value msgspec cannot encode.
        InvalidArgument: a text holds a lone surrogate.
    """
    return Run(c.encode_command(command), rid, timeout)


def command_of(call: Run) -> c.Command[Any]:
    """Decode the runtime command a :class:`Run` carries (the host as its sender).

    Raises:
        ArgumentTypeError: a field of the wrong type, or a command no shard serves.
        ClusterError: a mutating command without a request id.
    """
    command = c.decode_command(call.command, "a cluster's wire")
    if type(command) not in CALL_NAMES:
        raise ArgumentTypeError(
            f"a shard does not serve {type(command).__name__}; a cluster's host calls are "
            f"{', '.join(sorted(CALL_NAMES.values()))}"
        )
    if type(command) in RECORDED and call.rid is None:
        raise ClusterError(
            f"a {type(command).__name__} came without a request id: a shard runs a mutating "
            "command only under one (are the face and the shards the same retinue?)"
        )
    return command


def call_name(call: Call | c.Command[Any]) -> str:
    """The name a call goes by: a command's (:data:`CALL_NAMES`), or the cluster call's tag."""
    if isinstance(call, _Call | OpenStream | TakeEvents | CloseStream):
        tag: str = call.__struct_config__.tag  # type: ignore[assignment]
        return tag
    return CALL_NAMES[type(call)]


def is_recorded(call: Call) -> bool:
    """Return True for a call whose answer the shard records under its request id."""
    return isinstance(call, Run) and call.rid is not None


class Pong(msgspec.Struct, frozen=True, kw_only=True):
    """A shard's answer to :class:`Ping`: where it runs and what it runs with."""

    shard: int
    pid: int
    node_id: str
    config_digest: str
    leases: int
    restored_at: float
    streams: int = 0  # event streams open on it
    released_dropped_early: int = 0  # released leases forgotten early (max_released_leases)


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


def final_reply(raw: bytes) -> bool:
    """Return True if ``raw`` answers its call for good: a value, or a refusal
    :func:`recordable` says is final (False: the shard's trouble, or not an answer)."""
    try:
        reply = _reply_decoder.decode(raw)
    except msgspec.DecodeError:
        return False
    return reply.error is None or recordable(from_wire(reply.error))


def recordable(error: BaseException) -> bool:
    """Return True if a refusal is the call's answer for good (recorded for its retries).

    A closing runtime, a failing store or a cluster fault is the shard's
    trouble, not the call's: a retry after the shard comes back must run the
    call again.
    """
    return isinstance(error, RetinueError) and not isinstance(
        error, RuntimeClosed | StoreError | ClusterError
    )
