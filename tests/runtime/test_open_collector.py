"""An open freezes what it built out of the collector's scans, never the host's garbage.

The boot pauses the cyclic collector while it restores the tree and freezes
what is alive as it ends (``gc.freeze()``: a million restored agents are not
walked by every later full collection). A cycle of the host's that was
garbage, not yet collected, at that moment would be frozen for good: the
boot collects first.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from retinue import Profile, Runtime
from retinue.testing import echo


class _Node:
    """A host object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_an_open_freezes_no_garbage_cycle_of_the_host(tmp_path: Path) -> None:
    enabled = gc.isenabled()
    gc.disable()  # the cycle below stays uncollected until the open
    try:
        node = _Node()
        gone = weakref.ref(node)
        del node
        assert gone() is not None
        with Runtime.open(tmp_path / "store", profiles=[Profile("echo", runner=echo)]):
            pass
    finally:
        if enabled:
            gc.enable()
    gc.collect()
    assert gone() is None
