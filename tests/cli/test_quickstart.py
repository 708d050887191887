"""The README's two quickstart commands, in a fresh clone, as a new user runs them.

This builds a virtual environment and installs every dependency (network,
minutes), then runs the whole test suite once more inside the clone, so it
runs only when ``RETINUE_TEST_QUICKSTART=1`` is set:

    RETINUE_TEST_QUICKSTART=1 python -m pytest tests/cli/test_quickstart.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cliutil import SOURCE

pytestmark = pytest.mark.skipif(
    not os.environ.get("RETINUE_TEST_QUICKSTART"),
    reason="set RETINUE_TEST_QUICKSTART=1 (builds a fresh clone's .venv: network, minutes)",
)


def test_dev_demo_and_dev_test_in_a_fresh_clone(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (SOURCE / ".git").exists():
        pytest.skip("needs git and a git checkout")
    clone = tmp_path / "retinue"
    subprocess.run(["git", "clone", "--quiet", str(SOURCE), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.pop("RETINUE_TEST_QUICKSTART")
    demo = subprocess.run(
        ["./dev", "demo"], cwd=clone, env=env, capture_output=True, text=True, timeout=1800
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "/root/review/security/secrets" in demo.stdout
    assert "answer of /root/review (lead)" in demo.stdout
    assert (clone / ".venv" / "bin" / "retinue").exists()
    test = subprocess.run(
        ["./dev", "test", "-x"], cwd=clone, env=env, capture_output=True, text=True, timeout=1800
    )
    output = test.stdout + test.stderr
    assert test.returncode == 0, output[-3000:]
    assert re.search(r"^stress: \d+ passed, 0 failed$", output, re.M), output[-3000:]
    assert re.search(r"\d+ passed", test.stdout.strip().splitlines()[-1]), test.stdout[-3000:]
