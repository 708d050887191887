"""What crosses the control socket: the runtime's own commands, and the frames around them.

A frame is a 4-byte big-endian length and a msgpack body, at most
``Limits.control_max_message_bytes``. The body is one of a few tagged
structs (``frame``): a client sends :class:`Call`, :class:`Cancel`,
:class:`Received` and :class:`Stream`; the writer :class:`Hello` (or
:class:`Refused`) once, then :class:`Answer`, :class:`Events` and
:class:`End`.

No second command set: a :class:`Call` carries one of the runtime's own
commands (:mod:`retinue.actors.commands`, the members of
``SupervisorCommand`` a host sends: :data:`REMOTE`), encoded by field from
its dataclass under a tag that is its class name. Each is decoded through a
msgspec struct derived from the dataclass's own fields and types
(:func:`_mirror`), so msgspec checks every field's type, and built again as
the same dataclass with the host as its sender: a remote caller is always the
host, never a turn. Answers are encoded as the command's answer type
(``Command[R]``'s ``R``), errors as :class:`~retinue.protocol.wire_errors.WireError`
and raised again on the client as the same class.
"""

from __future__ import annotations

import asyncio
import dataclasses
import typing
from typing import Any, Union

import msgspec

from retinue.actors.commands import (
    HOST,
    AckLease,
    Agents,
    Approvals,
    Approve,
    Close,
    CloseTree,
    Command,
    CountAgents,
    CountBacklog,
    Deny,
    FollowUp,
    Get,
    HostMessages,
    Idle,
    Inspect,
    Interrupt,
    InterruptTree,
    Leases,
    ReleaseLease,
    Resume,
    Send,
    Spawn,
    Wait,
)
from retinue.errors import (
    ArgumentTypeError,
    ControlError,
    InternalError,
    InvalidArgument,
    LimitExceeded,
)
from retinue.protocol.messages import Completion, Event
from retinue.protocol.wire_errors import WireError, from_wire, to_wire

__all__ = [
    "PROTOCOL",
    "REMOTE",
    "Answer",
    "Call",
    "Cancel",
    "ClientFrame",
    "End",
    "Events",
    "Hello",
    "Received",
    "Refused",
    "ServerFrame",
    "Stream",
    "answer_type",
    "decode_client",
    "decode_command",
    "decode_server",
    "decode_value",
    "encode",
    "encode_command",
    "error_of",
    "framed",
    "read_frame",
    "wire_error",
]

PROTOCOL = 1
"""The control protocol's version, said in :class:`Hello`; a client refuses another."""

REMOTE: tuple[type[Command[Any]], ...] = (
    Spawn,
    FollowUp,
    Resume,
    Interrupt,
    InterruptTree,
    Close,
    CloseTree,
    Send,
    HostMessages,
    Wait,
    Idle,
    AckLease,
    ReleaseLease,
    Leases,
    Get,
    Agents,
    Inspect,
    CountBacklog,
    CountAgents,
    Approvals,
    Approve,
    Deny,
)
"""The commands a client may send: the host's calls of ``SupervisorCommand``."""


def _mirror(cls: type[Command[Any]]) -> type[msgspec.Struct]:
    """A msgspec struct with ``cls``'s fields and types but ``sender``, tagged by its name."""
    hints = typing.get_type_hints(cls)
    fields: list[tuple[str, Any, Any]] = []
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name == "sender":
            continue
        default = msgspec.NODEFAULT if field.default is dataclasses.MISSING else field.default
        fields.append((field.name, hints[field.name], default))
    return msgspec.defstruct(
        cls.__name__,
        fields,
        kw_only=True,
        frozen=True,
        forbid_unknown_fields=True,
        tag=cls.__name__,
        module=__name__,
    )


_MIRRORS: dict[type[Command[Any]], type[msgspec.Struct]] = {cls: _mirror(cls) for cls in REMOTE}
_BUILD: dict[type[msgspec.Struct], type[Command[Any]]] = {m: c for c, m in _MIRRORS.items()}
_command_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(
    Union[tuple(_MIRRORS.values())]  # noqa: UP007 (a union built at run time)
)


def answer_type(cls: type[Command[Any]]) -> Any:
    """The type a command is answered with (``Command[R]``'s ``R``; a host's wait: Completion)."""
    if cls is Wait:
        return Completion
    for base in getattr(cls, "__orig_bases__", ()):
        if typing.get_origin(base) is Command:
            return typing.get_args(base)[0]
    raise TypeError(f"{cls.__name__} names no answer type")  # pragma: no cover - REMOTE's


def encode_command(command: Command[Any]) -> msgspec.Raw:
    """Encode one of the :data:`REMOTE` commands (its sender is the host's, implied).

    Raises:
        ArgumentTypeError: a field holds a value msgspec cannot encode.
        InvalidArgument: a text holds a lone surrogate (it has no UTF-8 encoding).
    """
    mirror = _MIRRORS[type(command)]
    fields = {f: getattr(command, f) for f in mirror.__struct_fields__}
    try:
        return msgspec.Raw(_encoder.encode(mirror(**fields)))
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"{type(command).__name__}: a text argument has no UTF-8 encoding ({exc.reason} at "
            f"position {exc.start}); remove the lone surrogate"
        ) from None
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"{type(command).__name__}: {exc}") from None


def decode_command(raw: msgspec.Raw | bytes) -> Command[Any]:
    """Decode a command a client sent, as the runtime's own dataclass with the host as sender.

    Raises:
        ArgumentTypeError: a field of the wrong type (the message names it),
            or a command a client may not send.
    """
    try:
        mirror = _command_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise ArgumentTypeError(f"a command sent over the control socket: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ArgumentTypeError(f"a command that does not decode: {exc}") from None
    fields = msgspec.structs.asdict(mirror)
    return _BUILD[type(mirror)](sender=HOST, **fields)  # type: ignore[call-arg]


# -- frames ------------------------------------------------------------------------------


class _Frame(msgspec.Struct, frozen=True, kw_only=True, tag_field="frame"):
    """Base of every frame."""


class Call(_Frame, frozen=True, tag="call"):
    """Run ``command`` (encoded by :func:`encode_command`); ``timeout`` for a wait (None: the
    writer's ``wait_default_s``)."""

    id: int
    command: msgspec.Raw
    timeout: float | None = None


class Cancel(_Frame, frozen=True, tag="cancel"):
    """Stop call ``id``: a wait gives back what it took, even if it was answered already."""

    id: int


class Received(_Frame, frozen=True, tag="received"):
    """The caller has the answer of call ``id`` (one sent with ``confirm``): keep it taken."""

    id: int


class Stream(_Frame, frozen=True, tag="stream"):
    """Turn this connection into a stream of the events of ``ref``'s subtree (None: all)."""

    id: int
    ref: str | None = None


class Hello(_Frame, frozen=True, tag="hello"):
    """The writer's greeting: what it serves, and the bounds a client needs."""

    protocol: int
    pid: int
    store: str
    wait_default_s: float
    wait_max_s: float
    max_message_bytes: int


class Refused(_Frame, frozen=True, tag="refused"):
    """The connection is refused (a peer check, a bound); it closes after this frame."""

    error: WireError


class Answer(_Frame, frozen=True, tag="answer"):
    """The answer to call ``id``: its value (encoded as the command's answer type) or error.

    ``confirm``: what the call took (a wait's completion, the host's
    messages) stays given back on a close until the client sends :class:`Received`.
    """

    id: int
    value: msgspec.Raw = msgspec.Raw(b"\xc0")
    error: WireError | None = None
    confirm: bool = False


class Events(_Frame, frozen=True, tag="events"):
    """Events of stream ``id``, in commit order."""

    id: int
    events: list[Event]


class End(_Frame, frozen=True, tag="end"):
    """Stream ``id`` ended (the runtime closed, or ``error``)."""

    id: int
    error: WireError | None = None


ClientFrame = Call | Cancel | Received | Stream
ServerFrame = Hello | Refused | Answer | Events | End

_encoder = msgspec.msgpack.Encoder()
_client_decoder: msgspec.msgpack.Decoder[ClientFrame] = msgspec.msgpack.Decoder(ClientFrame)
_server_decoder: msgspec.msgpack.Decoder[ServerFrame] = msgspec.msgpack.Decoder(ServerFrame)


def encode(value: Any) -> bytes:
    """Encode a frame (or an answer's value) as msgpack."""
    return _encoder.encode(value)


def decode_client(body: bytes) -> ClientFrame:
    """Decode a client's frame.

    Raises:
        ControlError: it is not a frame of this protocol.
    """
    try:
        return _client_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise ControlError(f"a frame that is not of the control protocol: {exc}") from None


def decode_server(body: bytes) -> ServerFrame:
    """Decode the writer's frame.

    Raises:
        ControlError: it is not a frame of this protocol (another retinue version?).
    """
    try:
        return _server_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise ControlError(
            f"the writer sent a frame this retinue cannot read ({exc}); are the writer and this "
            "client the same retinue version?"
        ) from None


def decode_value(raw: msgspec.Raw, kind: Any) -> Any:
    """Decode an answer's value as ``kind``.

    Raises:
        ControlError: it does not decode as ``kind``.
    """
    try:
        return msgspec.msgpack.decode(raw, type=kind)
    except msgspec.DecodeError as exc:
        raise ControlError(f"the writer's answer does not decode as {kind}: {exc}") from None


def wire_error(error: BaseException) -> WireError:
    """``error`` for the wire; anything but a retinue error crosses as ``InternalError``."""
    return to_wire(error, InternalError)


def error_of(wire: WireError) -> BaseException:
    """The exception the writer raised, rebuilt: same class, message and attributes."""
    return from_wire(wire, InternalError)


def framed(body: bytes, limit: int) -> bytes:
    """``body`` with its length in front.

    Raises:
        LimitExceeded: it is larger than ``limit`` bytes.
    """
    if len(body) > limit:
        raise LimitExceeded(
            f"a control socket message of {len(body)} bytes exceeds control_max_message_bytes "
            f"({limit}); ask for less at once (a page, a shorter transcript tail) or raise the "
            "limit",
            limit=limit,
            value=len(body),
        )
    return len(body).to_bytes(4, "big") + body


async def read_frame(reader: asyncio.StreamReader, limit: int, timeout: float) -> bytes | None:
    """Read one frame's body; None at the end of the stream between frames.

    Waits as long as it takes for a frame to begin; once begun it must arrive
    whole within ``timeout`` seconds.

    Raises:
        LimitExceeded: the frame is larger than ``limit`` bytes.
        ControlError: the stream ended, or stalled, in the middle of a frame.
    """
    try:
        first = await reader.readexactly(1)
    except asyncio.IncompleteReadError:
        return None
    try:
        async with asyncio.timeout(timeout):
            size = int.from_bytes(first + await reader.readexactly(3), "big")
            if size > limit:
                raise LimitExceeded(
                    f"a control socket message of {size} bytes exceeds "
                    f"control_max_message_bytes ({limit})",
                    limit=limit,
                    value=size,
                )
            return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise ControlError("the connection closed in the middle of a frame") from None
    except TimeoutError:
        raise ControlError(
            f"a frame did not arrive whole within control_read_timeout_s ({timeout:g} s)"
        ) from None
