"""An open hands back the store file's pages its restore read through LMDB's map.

Every page of the file an open reads stayed mapped into the process, so a
writer's RSS carried a second copy of its store's size (``RssFile``: 2.3 GiB
at a million idle agents). :func:`~retinue.persistence.residency.release_mapped`
advises the kernel that the process no longer needs them; they are read back
on demand, unchanged.
"""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

import pytest

from retinue import Limits, Profile, Runtime, Turn
from retinue.persistence.integrity import DATA_FILE
from retinue.persistence.residency import release_mapped

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/self/smaps (Linux)"
)

PAGE = mmap.PAGESIZE


def _resident_kib(path: Path) -> int:
    """Sum the ``Rss`` of this process's mappings of ``path`` (KiB)."""
    target = os.path.realpath(path)
    total = 0
    mapped = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if not fields:
            continue
        if not fields[0].endswith(":"):  # a mapping's header: range, perms, ..., path
            mapped = len(fields) == 6 and fields[5] == target
        elif mapped and fields[0] == "Rss:":
            total += int(fields[1])
    return total


def test_release_mapped_drops_the_pages_and_keeps_the_content(tmp_path: Path) -> None:
    data = tmp_path / "file.bin"
    content = bytes(range(256)) * (256 * PAGE // 256)
    data.write_bytes(content)
    with data.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert sum(m[i] for i in range(0, len(m), PAGE)) >= 0  # touch every page
        assert _resident_kib(data) >= 200 * PAGE // 1024
        assert release_mapped(data) >= len(content)
        assert _resident_kib(data) == 0
        assert m[:] == content  # read back on demand, unchanged
    assert release_mapped(data) == 0  # nothing mapped any more


def test_release_mapped_of_a_file_not_mapped_does_nothing(tmp_path: Path) -> None:
    assert release_mapped(tmp_path / "absent") == 0


async def _idle(turn: Turn) -> str:
    return "done " * 50


def test_an_open_leaves_no_store_page_it_read_resident(tmp_path: Path) -> None:
    store = tmp_path / "store"
    team = [Profile("w", runner=_idle)]
    with Runtime.open(store, profiles=team, limits=Limits(max_active_turns=64)) as rt:
        ids = [rt.spawn("w", "task " * 100).id for _ in range(400)]
        for agent_id in ids:
            rt.wait(agent_id, timeout=60)
    assert (store / DATA_FILE).stat().st_size >= 256 * 1024
    with Runtime.open(store, profiles=team) as rt:
        # The restore read every agent and completion; none of those pages stays mapped.
        assert _resident_kib(store / DATA_FILE) < 64
        assert len(rt.agents()) == 400
        assert rt.get(ids[-1]).output == "done " * 50
