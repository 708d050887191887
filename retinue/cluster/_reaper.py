"""The local Ray's reaper: when its driver dies, every process of that Ray dies too.

Measured: the node processes ``ray.cluster_utils`` starts from a thread do
not share their driver's fate; a driver killed with SIGKILL left its GCS,
raylets and shard workers running, and those workers kept their stores'
writer locks, so the next driver could not open them. So
:func:`~retinue.cluster.local.start_local_ray` starts this small process
(``python -m retinue.cluster._reaper PID...``) with a pipe from the driver:
when the pipe closes (the driver shut the cluster down, or died), it kills
the given node processes and everything below them (the workers), children
first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from retinue.cluster.loopback import descendants

__all__ = ["main", "reap"]


def reap(roots: list[int]) -> int:
    """SIGKILL every process below and including ``roots``; return how many were signalled."""
    doomed: list[int] = []
    for root in roots:
        doomed += [p for p in reversed(descendants(root)) if p not in doomed]
    count = 0
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            count += 1
    return count


def main(argv: list[str]) -> int:
    """Wait for end-of-file on stdin, then reap the processes named in ``argv``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the driver's
    roots = [int(arg) for arg in argv]
    sys.stdin.buffer.read()
    reap(roots)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
