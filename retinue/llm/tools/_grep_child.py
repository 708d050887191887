"""The grep engine's child process: Python's ``re`` over a list of files, killed at a deadline.

Run as ``python -I -S grep_child.py`` by :mod:`retinue.llm.tools._grep`; it
imports only the standard library (never retinue). A pattern that backtracks
catastrophically (``(a+)+$``) holds the GIL of the process it runs in, so it
runs here, where the parent's deadline can kill it without freezing anything
else. Input (stdin, one JSON object): ``pattern``, ``flags``, ``files``
(``[real path, shown path]`` pairs), ``max_results``, ``max_line_chars``,
``max_file_bytes``. Output (stdout, one JSON object): ``matches`` (``[shown
path, line number, text]``), ``searched`` and ``truncated``.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from typing import Any

_BINARY_PROBE = 8192


def _read(real: str, limit: int) -> bytes | None:
    """Return a regular file's bytes, or None (not regular, too big, unreadable)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(real, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        pieces: list[bytes] = []
        size = 0
        while piece := os.read(fd, 1 << 20):
            size += len(piece)
            if size > limit:
                return None
            pieces.append(piece)
        return b"".join(pieces)
    except OSError:
        return None
    finally:
        os.close(fd)


def search(request: dict[str, Any]) -> dict[str, Any]:
    """Search the request's files; return the matches (see the module docstring)."""
    regex = re.compile(request["pattern"], int(request["flags"]))
    wanted = int(request["max_results"])
    width = int(request["max_line_chars"])
    matches: list[list[Any]] = []
    searched = 0
    for real, shown in request["files"]:
        data = _read(real, int(request["max_file_bytes"]))
        if data is None or b"\x00" in data[:_BINARY_PROBE]:
            continue
        searched += 1
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if regex.search(line):
                if len(matches) >= wanted:
                    return {"matches": matches, "searched": searched, "truncated": True}
                matches.append([shown, number, line[:width]])
    return {"matches": matches, "searched": searched, "truncated": False}


def main() -> None:
    """Read the request from stdin, write the result to stdout."""
    request = json.loads(sys.stdin.buffer.read())
    sys.stdout.write(json.dumps(search(request)))


if __name__ == "__main__":
    main()
