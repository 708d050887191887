"""An open of a big tree freezes what it built out of the collector's scans, never the
host's garbage, and its shutdown unfreezes it.

The boot pauses the cyclic collector while it restores the tree and, when the
tree is big (``FREEZE_AT_AGENTS`` restored agents), freezes what is alive as it
ends (``gc.freeze()``: a million restored agents are not walked by every later
full collection). A cycle of the host's that was garbage, not yet collected, at
that moment would be frozen for good: the boot collects first. A cycle that
becomes garbage while frozen is collected once the runtime is shut down (it
unfreezes). A small tree freezes nothing.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from retinue import Profile, Runtime
from retinue.actors.system import _boot
from retinue.testing import echo


class _Node:
    """A host object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def freezing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every open freezes, as an open of a big tree does."""
    monkeypatch.setattr(_boot, "FREEZE_AT_AGENTS", 0)


@pytest.mark.usefixtures("freezing")
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


@pytest.mark.usefixtures("freezing")
def test_a_cycle_that_dies_while_frozen_is_collected_after_the_shutdown(tmp_path: Path) -> None:
    node = _Node()  # alive when the open freezes
    gone = weakref.ref(node)
    rt = Runtime.open(tmp_path / "store", profiles=[Profile("echo", runner=echo)])
    try:
        assert gc.get_freeze_count() > 0
        del node  # garbage now, but frozen: no collection reaches it
        gc.collect()
        assert gone() is not None
    finally:
        rt.shutdown()
    gc.collect()
    assert gone() is None


def test_an_open_of_a_small_tree_freezes_nothing(tmp_path: Path) -> None:
    gc.unfreeze()
    with Runtime.open(tmp_path / "store", profiles=[Profile("echo", runner=echo)]) as rt:
        rt.wait(rt.spawn("echo", "hi").id, timeout=30)
        assert gc.get_freeze_count() == 0
