"""A run in progress: other processes read it, Ctrl-C saves it, resume finishes it.

py-lmdb opens a store once per process, so the readers (``tree``, ``inspect``)
and the second writer (``compact``) are separate processes, as they are for a
user with two terminals.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from cliutil import HERE, TEAM, command, env, finish, retinue_cli, tree_json

LEAVES = {
    "/root/review/security/secrets",
    "/root/review/security/injection",
    "/root/review/style/naming",
}


def _wait_until_running(store: Path, run: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """Poll ``retinue tree --json`` until the three leaves run (the run sleeps in them)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert run.poll() is None, run.communicate()
        if (store / "data.mdb").exists():
            agents = tree_json(store)
            running = {a["path"] for a in agents if a["state"] == "running"}
            if running >= LEAVES:
                return agents
        time.sleep(0.2)
    raise AssertionError("the run never got its leaves running")


def test_readers_beside_a_run_then_ctrl_c_then_resume(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run = subprocess.Popen(
        command("run", TEAM, "review the change", "--store", store),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(CLI_TEST_DELAY="120"),
    )
    try:
        agents = _wait_until_running(store, run)
        # tree, read-only from another process while the run holds the store.
        assert len(agents) == 6
        assert {a["path"] for a in agents} >= LEAVES | {"/root/review", "/root/review/security"}
        shown = retinue_cli("inspect", "/root/review/security/secrets", "--store", store, "--json")
        assert shown.returncode == 0, shown.stderr
        detail = json.loads(shown.stdout)
        assert detail["agent"]["state"] == "running"
        assert detail["agent"]["task"] == "review the change / security / secrets"
        # A second writer is told who holds the store and what to do, in CLI terms.
        locked = retinue_cli("compact", "--store", store)
        assert locked.returncode == 2
        assert f"is in use by process {run.pid}" in locked.stderr
        assert "readonly=True" not in locked.stderr and "Traceback" not in locked.stderr
        run.send_signal(signal.SIGINT)
        out, err = finish(run)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert f"resume with: retinue resume --store {store}" in out
    assert "6 agents: 6 interrupted" in out, out
    states = {a["path"]: a["state"] for a in tree_json(store)}
    assert set(states.values()) == {"interrupted"}, states

    resumed = retinue_cli("resume", "--store", store, "--json", CLI_TEST_DELAY="0")
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads(resumed.stdout.splitlines()[-1])
    assert final["event"] == "run_finished" and final["states"] == {"completed": 6}
    after = {a["path"]: a for a in tree_json(store)}
    assert {a["state"] for a in after.values()} == {"completed"}
    assert all(a["generation"] == 2 for a in after.values())
    assert after["/root/review"]["output"].startswith("lead done; security: security done")
    nothing = retinue_cli("resume", "--store", store)
    assert nothing.returncode == 0 and "nothing to resume" in nothing.stderr


def test_model_agents_resume_from_their_transcripts_after_ctrl_c(tmp_path: Path) -> None:
    """The same, with the offline model driving the lead and reviewers through litellm."""
    store = tmp_path / "store"
    run = subprocess.Popen(
        command("run", HERE / "mixed.toml", "review the change", "--store", store, "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(CLI_TEST_DELAY="120"),
    )
    try:
        _wait_until_running(store, run)
        run.send_signal(signal.SIGINT)
        out, err = finish(run)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 130, err
    final = json.loads(out.splitlines()[-1])
    assert final["exit_code"] == 130 and final["states"] == {"interrupted": 6}
    resumed = retinue_cli("resume", "--store", store, "--json", CLI_TEST_DELAY="0", timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = {a["path"]: a for a in tree_json(store)}
    assert {a["state"] for a in after.values()} == {"completed"}
    lead = after["/root/review"]
    assert lead["generation"] >= 2 and lead["output"]
    assert lead["usage"]["prompt_tokens"] > 0
    shown = retinue_cli("inspect", "/root/review/security", "--store", store, "--json")
    transcript = json.loads(shown.stdout)["transcript_tail"]
    assert any("[subagent:/root/review/security/" in (m.get("content") or "") for m in transcript)


def test_ctrl_c_during_a_python_leads_wake_turn_then_resume_keeps_its_input(
    tmp_path: Path,
) -> None:
    """The lead's wake turn was handed its worker's result when Ctrl-C interrupted it: the
    result goes back to the lead, and the resumed turn summarises it."""
    store = tmp_path / "store"
    run = subprocess.Popen(
        command("run", HERE / "wake.toml", "review the change", "--store", store),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(CLI_TEST_DELAY="120"),
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # until the lead's wake turn (its second) runs
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "the lead was never woken"
            if (store / "data.mdb").exists():
                lead = {a["path"]: a for a in tree_json(store)}.get("/root/wake")
                if lead is not None and (lead["state"], lead["generation"]) == ("running", 2):
                    break
            time.sleep(0.2)
        run.send_signal(signal.SIGINT)
        _, err = finish(run)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 130, err
    resumed = retinue_cli("resume", "--store", store, "--json", CLI_TEST_DELAY="0")
    assert resumed.returncode == 0, resumed.stderr
    after = {a["path"]: a for a in tree_json(store)}
    assert after["/root/wake"]["output"] == "summary of ['checked /root/wake/worker']"
