"""Operate a running writer from outside its process: the control socket and ``retinue.connect``.

Every writer serves a Unix domain socket beside its store,
``<store>/control.sock`` (:class:`ControlServer`; mode 0600, its peers
checked by uid, replaced after a crash, removed at shutdown;
``Runtime.open(..., control=False)`` turns it off). It speaks the runtime's
own commands (:mod:`retinue.actors.commands`) as msgspec frames
(:mod:`retinue.control._wire`), each served as the host through the
runtime's Engine. :func:`connect` returns a :class:`RemoteRuntime` with the
runtime's host calls over it; :class:`Host` is the protocol ``Runtime``,
``RemoteRuntime`` and ``retinue.cluster.Cluster`` all satisfy.

The rest of the package may use the names in ``__all__``; the modules are private.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from retinue.control._host import HOST_CALLS, AsyncEvents, Events, Host
from retinue.control._link import Link
from retinue.control._remote import RemoteRuntime
from retinue.control._server import ControlServer
from retinue.control._serving import LEASE_PREFIX
from retinue.control._socket import SOCKET_NAME, remove_stale_socket, socket_path
from retinue.control._streams import AsyncRemoteStream, RemoteStream
from retinue.errors import ArgumentTypeError, InvalidArgument
from retinue.protocol.limits import Limits

__all__ = [
    "HOST_CALLS",
    "LEASE_PREFIX",
    "SOCKET_NAME",
    "AsyncEvents",
    "AsyncRemoteStream",
    "ControlServer",
    "Events",
    "Host",
    "RemoteRuntime",
    "RemoteStream",
    "connect",
    "remove_stale_socket",
    "socket_path",
]


def _positive(value: object, name: str, *, integer: bool = False) -> float:
    """Return ``value`` if it is a positive finite number (an int if ``integer``).

    Raises:
        ArgumentTypeError: not a number (``bool`` refused), or not an int when one is needed.
        InvalidArgument: zero, negative, NaN or infinite.
    """
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        wanted = "an int" if integer else "a number"
        raise ArgumentTypeError(f"{name} must be {wanted}, not {type(value).__name__}")
    number = float(value)  # type: ignore[arg-type]  # an int or a float: checked above
    if not (math.isfinite(number) and number > 0):
        raise InvalidArgument(f"{name} must be a positive finite number, not {value!r}")
    return number


def connect(
    store: str | os.PathLike[str],
    *,
    connect_timeout_s: float = 10.0,
    call_timeout_s: float = 60.0,
    max_message_bytes: int | None = None,
) -> RemoteRuntime:
    """Connect to the writer of the store at ``store`` over its control socket.

    Returns a :class:`RemoteRuntime` with the host calls of ``Runtime``
    (spawn, wait with leases, send, messages, follow_up, resume, interrupt,
    interrupt_tree, close, close_tree, get, agents, inspect, approvals,
    approve, deny, stream, and their async twins). ``connect_timeout_s``
    bounds a connection and the writer's greeting; ``call_timeout_s`` a
    call's answer beyond a wait's own time; ``max_message_bytes`` (None:
    ``Limits().control_max_message_bytes``) the largest answer read.

    Raises:
        ArgumentTypeError, InvalidArgument: a bad argument.
        NoWriter: no writer serves the store's control socket: none holds the
            store, its socket is stale (the writer was killed), or it runs
            with ``control=False``; the message says which.
        NotPermitted: the socket refuses this user (only the writer's user and root).
        LimitExceeded: the writer serves ``control_max_connections`` already.
        ControlError: the writer did not greet in time, or speaks another version.
    """
    if not isinstance(store, str | os.PathLike):
        raise ArgumentTypeError(f"store must be a path, not {type(store).__name__}")
    limit = Limits().control_max_message_bytes if max_message_bytes is None else max_message_bytes
    link = Link(
        Path(store),
        connect_timeout_s=_positive(connect_timeout_s, "connect_timeout_s"),
        call_timeout_s=_positive(call_timeout_s, "call_timeout_s"),
        limit=int(_positive(limit, "max_message_bytes", integer=True)),
    )
    return RemoteRuntime(link, link.open())
