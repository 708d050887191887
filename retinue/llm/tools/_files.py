"""Opening workspace files without blocking: regular files only, checked before and after open.

Opening a FIFO for reading blocks until a writer comes (for ever, if none
does), and reading a character device may never end; a tool thread stuck
there is lost. So the file tools refuse anything but a regular file: by
``stat`` before the open, then by ``fstat`` on the descriptor, which is opened
with ``O_NONBLOCK`` (a FIFO swapped in between the two cannot block the open).
Messages name the path the model gave, never the host's path.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import BinaryIO

from retinue.llm.tools._arguments import ToolError

__all__ = ["check_regular", "open_for_reading", "write_regular"]

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _refusal(shown: str, mode: int) -> ToolError:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return ToolError(f"{shown!r} is {kind}; the file tools read and write regular files only")


def check_regular(real: Path, shown: str) -> os.stat_result:
    """Return ``real``'s status if it is a regular file (symlinks followed).

    Raises:
        ToolError: it is a folder, a FIFO, a socket or a device.
        OSError: it cannot be examined (missing, no permission).
    """
    status = real.stat()
    if stat.S_ISDIR(status.st_mode):
        raise ToolError(f"{shown!r} is a folder")
    if not stat.S_ISREG(status.st_mode):
        raise _refusal(shown, status.st_mode)
    return status


def _checked_fd(real: Path, shown: str, flags: int) -> int:
    fd = os.open(real, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refusal(shown, mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_for_reading(real: Path, shown: str) -> BinaryIO:
    """Open the regular file ``real`` for reading in binary mode, without ever blocking.

    Raises:
        ToolError: it is not a regular file.
        OSError: it cannot be opened.
    """
    check_regular(real, shown)
    return os.fdopen(_checked_fd(real, shown, os.O_RDONLY), "rb")


def write_regular(real: Path, shown: str, data: bytes) -> None:
    """Replace the content of ``real`` (made if missing) with ``data``; regular files only.

    Raises:
        ToolError: ``real`` exists and is not a regular file.
        OSError: it cannot be written.
    """
    with contextlib.suppress(FileNotFoundError):
        check_regular(real, shown)
    fd = _checked_fd(real, shown, os.O_WRONLY | os.O_CREAT)
    with os.fdopen(fd, "wb") as handle:
        handle.truncate(0)
        handle.write(data)
