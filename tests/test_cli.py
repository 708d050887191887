"""The retinue command: the demo runs a real tree on a store, tree reads it back."""

from __future__ import annotations

from pathlib import Path

import pytest

from retinue.cli import main


def test_demo_then_tree_shows_the_settled_team(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "demo"
    assert main(["demo", "--store", str(store), "--slow", "0", "--reviewers", "2"]) == 0
    out = capsys.readouterr().out
    assert "7 agents settled" in out  # a lead, 2 reviewers, 4 checkers
    assert "review done: 2 reports" in out
    assert main(["tree", str(store)]) == 0
    tree = capsys.readouterr().out
    assert tree.count("checker completed") == 4
    assert tree.count("reviewer completed") == 2
    assert "lead completed" in tree


def test_tree_of_a_missing_store_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tree", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert "StoreError" in err and "no retinue store" in err


def test_compact_reports_what_went(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "demo"
    assert main(["demo", "--store", str(store), "--slow", "0", "--reviewers", "1"]) == 0
    capsys.readouterr()
    assert main(["compact", str(store)]) == 0
    assert "CompactionReport" in capsys.readouterr().out
