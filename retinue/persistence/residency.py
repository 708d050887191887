"""Handing back the store file's pages an open read through LMDB's memory map.

LMDB reads the file through a shared, read-only memory map: every page an
open's restore reads (every agent, every completion) stays mapped into the
process and counts in its RSS (``RssFile``), as much as the file is large,
though the process holds none of it in its own memory. After the open,
:func:`release_mapped` tells the kernel (``madvise(MADV_DONTNEED)``) that the
process no longer needs those pages: they leave the process's RSS and stay in
the kernel's page cache, shared and reclaimable, and a later read maps the
page it touches again. Nothing is lost: the map is of the file itself, and a
dropped page is read back from the page cache or the file. Linux only (it
reads ``/proc/self/maps``); elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

__all__ = ["release_mapped"]

_MADV_DONTNEED = 4  # Linux


def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """Return libc's ``madvise`` (None: no such function here)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


def release_mapped(path: Path) -> int:
    """Advise the kernel that this process no longer needs its mapped pages of ``path``.

    Returns how many bytes of mappings were advised (0: none, or not on
    Linux). Never raises: a mapping it cannot advise is left as it was.
    """
    maps = Path("/proc/self/maps")
    if not maps.exists():
        return 0
    madvise = _madvise()
    if madvise is None:
        return 0
    try:
        target = os.path.realpath(path)
        text = maps.read_text()
    except OSError:
        return 0
    advised = 0
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or fields[5] != target:
            continue
        start, end = (int(part, 16) for part in fields[0].split("-"))
        if madvise(start, end - start, _MADV_DONTNEED) == 0:
            advised += end - start
    return advised
