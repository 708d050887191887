"""``retinue run --record C`` then ``--replay C``: the same tree, offline; a change misses."""

from __future__ import annotations

from pathlib import Path

from cliutil import retinue_cli, tree_json

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "code_review" / "team.toml"


def _tree(store: Path) -> list[tuple[str, str, str | None]]:
    return sorted((a["path"], a["state"], a["output"]) for a in tree_json(store))


def test_record_then_replay_a_run(tmp_path: Path) -> None:
    cassette = tmp_path / "review.cassette"
    recorded = retinue_cli(
        "run", EXAMPLE, "review it", "--store", tmp_path / "a", "--record", cassette, timeout=180
    )
    assert recorded.returncode == 0, recorded.stderr
    replayed = retinue_cli(
        "run", EXAMPLE, "review it", "--store", tmp_path / "b", "--replay", cassette, timeout=180
    )
    assert replayed.returncode == 0, replayed.stderr
    assert _tree(tmp_path / "b") == _tree(tmp_path / "a")
    missed = retinue_cli(
        "run", EXAMPLE, "review this", "--store", tmp_path / "c", "--replay", cassette, timeout=180
    )
    assert missed.returncode == 1
    assert "CassetteMiss: /root/review's model call 0 differs" in missed.stdout + missed.stderr
    assert "at messages[1].content" in missed.stdout + missed.stderr


def test_cassette_options_are_checked(tmp_path: Path) -> None:
    lone = retinue_cli("run", EXAMPLE, "x", "--store", tmp_path / "s", "--redact", "a")
    assert (lone.returncode, lone.stderr.strip()) == (
        2,
        "retinue: --redact applies to what --record writes; add --record CASSETTE",
    )
    missing = retinue_cli("run", EXAMPLE, "x", "--store", tmp_path / "s", "--replay", "nope")
    assert missing.returncode == 2 and "no such cassette" in missing.stderr
    both = retinue_cli("run", EXAMPLE, "x", "--record", "a", "--replay", "b")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_fuzz_seeded_by_a_cassette(tmp_path: Path) -> None:
    cassette = tmp_path / "review.cassette"
    recorded = retinue_cli(
        "run", EXAMPLE, "review it", "--store", tmp_path / "a", "--record", cassette, timeout=180
    )
    assert recorded.returncode == 0, recorded.stderr
    fuzzed = retinue_cli("fuzz", EXAMPLE, "--cassette", cassette, "--examples", "2", timeout=300)
    assert fuzzed.returncode == 0, fuzzed.stdout + fuzzed.stderr
    assert "no invariant broken in 2 perturbed replays" in fuzzed.stdout
    one = '{"perturb": {"/root/review#0": "chaos"}, "seed": 3}'
    rerun = retinue_cli("fuzz", EXAMPLE, "--cassette", cassette, "--perturb", one, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    # A crash at the lead's second call: its child process SIGKILLed, the store reopened.
    crash = '{"perturb": {"/root/review#1": "crash", "/root/review#0": "server_error"}, "seed": 3}'
    crashed = retinue_cli("fuzz", EXAMPLE, "--cassette", cassette, "--perturb", crash, timeout=300)
    assert crashed.returncode == 0, crashed.stdout + crashed.stderr
    assert "(1 crashes)" in crashed.stdout, crashed.stdout
    bad = retinue_cli("fuzz", EXAMPLE, "--cassette", cassette, "--perturb", "{}")
    assert bad.returncode == 2 and "--perturb takes the example" in bad.stderr
