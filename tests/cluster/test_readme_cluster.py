"""The scale-out guide's cluster example works as written (in a loopback-only namespace: Ray).

``tests/test_docs_examples.py`` runs every other example of the docs; this one is
marked not to run there, since it starts Ray.

It runs in this process, on the session's two-node Ray: the example opens
its cluster with ``address=None``, which uses the Ray this process is
connected to (a driver that starts a local Ray of its own is
``test_faults``' killed-driver test), so no second Ray starts for it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import retinue

GUIDE = Path(retinue.__file__).resolve().parents[1] / "docs" / "guides" / "cluster.md"

pytestmark = pytest.mark.ray


def test_the_scale_out_example_runs(
    local_ray: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    found = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    blocks = [b for b in found if "Cluster" in b]
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)  # the example's store is a relative folder
    exec(compile(blocks[0], f"{GUIDE}:scale-out example", "exec"), {"__name__": "__main__"})
    assert (tmp_path / "cluster-store" / "shard-0").is_dir()
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"s[01]-[0-9a-f]{32}", lines[0])
    assert "/root/review_api" in lines[-1] and "/root/review_api/" in lines[-1]
