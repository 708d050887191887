"""The host's commands as bytes: how a command crosses a process boundary, declared once.

The control socket (:mod:`retinue.control`) and a cluster's shards
(:mod:`retinue.cluster`) both carry the runtime's own commands, the members of
``SupervisorCommand`` a host sends (:data:`REMOTE`); this module is their one
wire form. Each is encoded by field from its dataclass under a tag that is its
class name, and decoded through a msgspec struct derived from the dataclass's
own fields and types (:func:`_mirror`), so msgspec checks every field's type,
and built again as the same dataclass with the host as its sender: a remote
caller is always the host, never a turn. The fields only the writer sets
(:data:`_LOCAL`: a wait's ``internal_lease``) are not on the wire either, so a
remote caller never sets them. A command is answered with its answer
type (``Command[R]``'s ``R``: :func:`answer_type`).

Evolution, as the protocol's records: a new field goes at the end of its
command with a default (a peer that does not send it still decodes); a new
command is a new tag (a peer that does not know it refuses it with a typed
error). Renaming a command or a field, or changing a field's type, is not
compatible: both sides must run the same retinue.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Union

import msgspec

from retinue.actors.commands._base import HOST, Command
from retinue.actors.commands._leases import AckLease, Leases, ReleaseLease
from retinue.actors.commands._lifecycle import (
    Close,
    CloseTree,
    FollowUp,
    Interrupt,
    InterruptTree,
    Resume,
)
from retinue.actors.commands._mailboxes import HostMessages, Send
from retinue.actors.commands._reads import Agents, CountAgents, CountBacklog, Get, Inspect
from retinue.actors.commands._spawning import Run, Spawn
from retinue.actors.commands._supervision import Approvals, Approve, Deny
from retinue.actors.commands._waits import Idle, Wait
from retinue.errors import ArgumentTypeError, InvalidArgument
from retinue.protocol.messages import Completion

__all__ = ["REMOTE", "answer_type", "decode_command", "encode_command"]

REMOTE: tuple[type[Command[Any]], ...] = (
    Spawn,
    Run,
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
"""The commands a host may send from outside the writer's process: its calls of
``SupervisorCommand``."""


_LOCAL = frozenset({"sender", "internal_lease"})
"""The fields a command never carries over the wire: its sender (the host's, implied) and
what only the writer sets (a lease of its own, not bounded by ``dedup_key_max_length``)."""


def _mirror(cls: type[Command[Any]]) -> type[msgspec.Struct]:
    """A msgspec struct with ``cls``'s fields and types but :data:`_LOCAL`, tagged by its name."""
    hints = typing.get_type_hints(cls)
    fields: list[tuple[str, Any, Any]] = []
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name in _LOCAL:
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
_encoder = msgspec.msgpack.Encoder()
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


def decode_command(raw: msgspec.Raw | bytes, source: str = "the control socket") -> Command[Any]:
    """Decode a command sent through ``source``, as the runtime's own dataclass with the host
    as its sender.

    Raises:
        ArgumentTypeError: a field of the wrong type (the message names it),
            or a command a host may not send from outside.
    """
    try:
        mirror = _command_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise ArgumentTypeError(f"a command sent over {source}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ArgumentTypeError(f"a command that does not decode: {exc}") from None
    fields = msgspec.structs.asdict(mirror)
    return _BUILD[type(mirror)](sender=HOST, **fields)  # type: ignore[call-arg]
