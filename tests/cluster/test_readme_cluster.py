"""The README's cluster example works as written (in a loopback-only namespace: it starts Ray)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import retinue

README = Path(retinue.__file__).resolve().parents[1] / "README.md"

pytestmark = pytest.mark.ray


def test_the_scale_out_example_runs(tmp_path: Path) -> None:
    blocks = [b for b in re.findall(r"```py\n(.*?)```", README.read_text(), re.S) if "Cluster" in b]
    assert len(blocks) == 1
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert re.fullmatch(r"s[01]-[0-9a-f]{32}", lines[0])
    assert "/root/review_api" in lines[-1] and "/root/review_api/" in lines[-1]
