"""The control socket's file: where it is, how a writer binds it, how a client reaches it.

A writer binds ``<store>/control.sock`` (:data:`SOCKET_NAME`) while it holds
the store's writer lock, so a socket file found there at that moment was left
by a writer that is gone (killed): it is removed and bound anew. The file is
made mode 0600 before the socket listens, so no connection is accepted before
its mode is right; the writer's user owns it. Every accepted peer is checked
again by its credentials (``SO_PEERCRED``: its uid must be the writer's or
root's), which holds even if the mode is changed later.

Unix socket paths are short (108 bytes on Linux); a longer store path is
reached through ``/proc/self/fd/<n>/control.sock``, a descriptor of the
store's folder held open for the call.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import struct
from collections.abc import Iterator
from pathlib import Path

from retinue.errors import NotPermitted, NoWriter, StoreError
from retinue.persistence.lock import pid_alive, read_holder_pid

__all__ = [
    "SOCKET_NAME",
    "bind_control_socket",
    "connect_control_socket",
    "peer_uid",
    "remove_stale_socket",
    "socket_path",
]

SOCKET_NAME = "control.sock"
"""The control socket's file name in a store's folder."""
_MAX_PATH = 100  # bytes of a socket path that always fit in sun_path (108 with its NUL)


def socket_path(store: str | os.PathLike[str]) -> Path:
    """Return the control socket's path for the store folder ``store``."""
    return Path(store) / SOCKET_NAME


@contextlib.contextmanager
def _reachable(path: Path) -> Iterator[str]:
    """Yield a path to ``path`` that fits in a socket address (see the module docstring)."""
    if len(os.fsencode(path)) <= _MAX_PATH:
        yield str(path)
        return
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{folder}/{path.name}"
    finally:
        os.close(folder)


def remove_stale_socket(store: Path) -> bool:
    """Remove the socket file a gone writer left in ``store``; return True if there was one.

    Call it only while holding the store's writer lock: then no live process serves it.

    Raises:
        StoreError: something other than a socket is in its place, or it cannot be removed.
    """
    path = socket_path(store)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(mode):
        raise StoreError(
            f"{path} is not a socket; remove it (the writer serves its control socket there)",
            path=str(store),
        )
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreError(f"cannot remove the stale control socket {path}: {exc}") from None
    return True


def bind_control_socket(store: Path, backlog: int) -> tuple[socket.socket, int]:
    """Bind and listen on ``store``'s control socket (mode 0600); return it and its inode.

    A stale socket file is replaced (see :func:`remove_stale_socket`).

    Raises:
        StoreError: the socket cannot be bound (its message says why, and that
            ``Runtime.open(..., control=False)`` runs without it).
    """
    remove_stale_socket(store)
    path = socket_path(store)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _reachable(path) as where:
            sock.bind(where)
        os.chmod(path, 0o600)  # before listen(): no connection is accepted before this
        sock.listen(backlog)
        sock.setblocking(False)
        return sock, os.stat(path).st_ino
    except OSError as exc:
        sock.close()
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                path.unlink()
        raise StoreError(
            f"cannot serve the control socket {path}: {exc.strerror or exc}; open the runtime "
            "with control=False to run without it",
            path=str(store),
        ) from None


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of ``sock`` (None where the OS cannot say)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:  # not Linux: the file's mode 0600 is the check
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)


def connect_control_socket(store: Path, timeout: float) -> socket.socket:
    """Connect to ``store``'s control socket; return the connected (blocking) socket.

    Raises:
        NoWriter: no writer serves it (no socket file, or a stale one whose
            writer is gone; the message says which, and what the lock file says).
        NotPermitted: the socket refuses this user (its mode is 0600).
    """
    path = socket_path(store)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        with _reachable(path) as where:
            sock.connect(where)
    except FileNotFoundError:
        sock.close()
        if not Path(store).is_dir():
            raise NoWriter(
                f"no store at {store}: there is no folder to find a writer in", path=str(path)
            ) from None
        raise _no_writer(store, path, stale=False) from None
    except ConnectionRefusedError:
        sock.close()
        raise _no_writer(store, path, stale=True) from None
    except PermissionError:
        sock.close()
        raise NotPermitted(
            f"the control socket {path} refuses this user (uid {os.geteuid()}): only the "
            "writer's user and root may act on a running store"
        ) from None
    except OSError as exc:
        sock.close()
        if exc.errno == errno.ENOTDIR or not Path(store).is_dir():
            raise NoWriter(
                f"no store at {store}: there is no folder to find a writer in", path=str(path)
            ) from None
        raise NoWriter(f"cannot reach the control socket {path}: {exc}", path=str(path)) from None
    return sock


def _no_writer(store: Path, path: Path, *, stale: bool) -> NoWriter:
    """The error of a store whose control socket is missing (or stale), with what the lock says."""
    pid = read_holder_pid(store)
    alive = pid is not None and pid_alive(pid)
    if alive and stale:
        said = (
            f"the control socket {path} refuses connections although the store's writer "
            f"(pid {pid}) runs: it may be starting or closing; try again"
        )
    elif alive:
        said = (
            f"the store's writer (pid {pid}) serves no control socket at {path}: it was "
            "opened with control=False (or by a retinue without one)"
        )
    elif stale:
        said = (
            f"the control socket {path} is stale: the writer that made it is gone "
            f"(killed{f', pid {pid}' if pid is not None else ''}); no writer holds {store} now, "
            "and the next writer replaces the socket"
        )
    else:
        said = f"no writer holds {store} (no control socket at {path}); start one, or open it"
    return NoWriter(said, path=str(path), stale=stale and not alive)
