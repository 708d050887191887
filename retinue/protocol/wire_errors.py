"""An exception as it crosses a process boundary: its class, its message, its plain attributes.

Both wires of retinue (the cluster's, between a face and its shards, and the
control socket's, between a writer and its clients) send a refusal as a
:class:`WireError` and raise it again on the other side as the same class of
:mod:`retinue.errors`, with the same message and attributes, so a caller
catches ``UnknownAgent`` whether the runtime runs in its process or not.
Nothing is pickled: only plain values cross (str, int, float, bool, None, and
lists or tuples of them).
"""

from __future__ import annotations

from typing import Any

import msgspec

import retinue.errors as errors
from retinue.errors import RetinueError

__all__ = ["WireError", "from_wire", "to_wire"]

_PLAIN = (str, int, float, bool, type(None))


class WireError(msgspec.Struct, frozen=True, kw_only=True):
    """An exception as it crosses: its class in :mod:`retinue.errors`, message, attributes."""

    type: str
    message: str
    attrs: dict[str, Any] = {}
    tuples: tuple[str, ...] = ()  # attributes that were tuples (msgpack only has arrays)


def to_wire(error: BaseException, fallback: type[RetinueError]) -> WireError:
    """Describe ``error`` for the wire: a retinue error keeps its class and attributes.

    Any other exception (a bug) crosses as ``fallback``, its message naming the
    exception's type.
    """
    if isinstance(error, RetinueError) and getattr(errors, type(error).__name__, None) is type(
        error
    ):
        attrs = {
            k: v
            for k, v in vars(error).items()
            if isinstance(v, _PLAIN)
            or (isinstance(v, list | tuple) and all(isinstance(i, _PLAIN) for i in v))
        }
        tuples = tuple(k for k, v in attrs.items() if isinstance(v, tuple))
        return WireError(type=type(error).__name__, message=str(error), attrs=attrs, tuples=tuples)
    return WireError(type=fallback.__name__, message=f"{type(error).__name__}: {error}")


def from_wire(wire: WireError, fallback: type[RetinueError]) -> RetinueError:
    """Rebuild the exception the other side raised: same class, message and attributes.

    A class this side does not know becomes ``fallback`` naming it.
    """
    cls = getattr(errors, wire.type, None)
    if not (isinstance(cls, type) and issubclass(cls, RetinueError)):
        return fallback(f"{wire.type}: {wire.message}")
    error = cls.__new__(cls)
    Exception.__init__(error, wire.message)
    for key, value in wire.attrs.items():
        setattr(error, key, tuple(value) if key in wire.tuples else value)
    return error
