"""Supervision lives in the store: an open that lacks an agent's profile ends no supervised work.

The restart policy is stored with each agent. ``retinue compact`` (a writer
with no profiles) or ``Runtime.open(..., profiles=[])`` on a store a SIGKILL
left keeps a lost turn under a ``"lost"`` policy due, a pending restart
pending and a park for approval parked; a runtime that defines the profiles
carries them on. The crashed store comes from a real runtime in a child
process, killed with SIGKILL while one turn runs and another's restart is
pending (or, on a slow machine, has started: then it is lost as well).
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from cliutil import retinue_cli
from persistence import Child, agent, agent_write, completions_of, decode_db, write_store

from retinue import AgentState, Profile, Restart, Runtime, Turn
from retinue.protocol.records import AgentRecord
from retinue.protocol.supervision import LOST_ERROR, RestartRecord

PROMPT_S = 20.0

CRASH_CHILD = r"""
import sys, threading, time
from retinue import AgentState, Profile, Restart, Runtime

hold = threading.Event()

def say(*parts):
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()

def blocking(turn):
    say("STARTED", turn.agent.name, turn.attempt)
    hold.wait()
    return "never"

def fails_first(turn):
    if turn.attempt == 1:
        raise RuntimeError("attempt 1 fails")
    return blocking(turn)

lost = Restart(on=("failed", "lost"), backoff_s=0.01, backoff_max_s=0.01, jitter=0.0)
later = Restart(on=("failed", "lost"), backoff_s=1.0, backoff_max_s=1.0, jitter=0.0)
profiles = [
    Profile("worker", runner=blocking, restart=lost),
    Profile("flaky", runner=fails_first, restart=later),
]
rt = Runtime.open(sys.argv[1], profiles=profiles)
rt.spawn("worker", "the long job", name="w")
rt.spawn("flaky", "the flaky job", name="f")
while rt.get("f").state is not AgentState.RESTARTING and rt.get("f").attempt < 2:
    time.sleep(0.005)
while rt.get("w").state is not AgentState.RUNNING:
    time.sleep(0.005)
say("READY")
hold.wait()
"""


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store left by a runtime SIGKILLed with ``w`` running and ``f`` restarting."""
    store = tmp_path_factory.mktemp("crashed") / "store"
    with Child(CRASH_CHILD, store) as child:
        child.expect("READY")
        child.kill()
    return store


@pytest.fixture
def copy(crashed: Path, tmp_path: Path) -> Path:
    """A private copy of the crashed store."""
    store = tmp_path / "store"
    shutil.copytree(crashed, store, ignore=shutil.ignore_patterns("control.sock"))
    return store


class Done:
    """The runners of the runtime that carries the work on: every turn answers at once."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int]] = []  # agent name, reason, attempt
        self.lock = threading.Lock()

    def __call__(self, turn: Turn) -> str:
        with self.lock:
            self.seen.append((turn.agent.name, turn.reason, turn.attempt))
        return f"done {turn.task}"


def profiles(done: Done) -> list[Profile]:
    lost = Restart(on=("failed", "lost"), backoff_s=0.01, backoff_max_s=0.01, jitter=0.0)
    return [
        Profile("worker", runner=done, restart=lost),
        Profile("flaky", runner=done, restart=lost),
    ]


def _agents(store: Path) -> dict[str, AgentRecord]:
    return {r.name: r for r in decode_db(store, "agents", AgentRecord).values()}


def _check_kept(store: Path) -> None:
    """Nothing of the supervised work ended: both agents wait for a restart, no completion."""
    agents = _agents(store)
    w, f = agents["w"], agents["f"]
    assert (w.state, w.attempt, w.last_error) == (AgentState.RESTARTING, 2, LOST_ERROR)
    assert w.restart_due_at is not None
    assert f.state is AgentState.RESTARTING, f
    assert f.error is None and f.error_type is None
    assert completions_of(store, w.id) == [] and completions_of(store, f.id) == []


def _check_carried_on(store: Path) -> None:
    """A runtime with the profiles runs both restarts: one completion each."""
    done = Done()
    with Runtime.open(store, profiles=profiles(done)) as rt:
        for name in ("w", "f"):
            got = rt.wait(name, timeout=PROMPT_S)
            assert (got.status, got.attempt) == ("completed", rt.get(name).attempt)
            assert got.attempt >= 2
        rt.wait_idle(PROMPT_S)
    assert sorted(name for name, _, _ in done.seen) == ["f", "w"]
    assert {reason for _, reason, _ in done.seen} == {"restart"}
    for record in _agents(store).values():
        assert len(completions_of(store, record.id)) == 1


def test_compact_on_a_sigkilled_store_keeps_lost_and_pending_restarts(copy: Path) -> None:
    done = retinue_cli("compact", "--store", copy)
    assert done.returncode == 0, done.stderr
    _check_kept(copy)
    _check_carried_on(copy)


def test_an_open_without_profiles_keeps_lost_and_pending_restarts(copy: Path) -> None:
    with Runtime.open(copy, profiles=[]) as rt:
        rt.wait_idle(PROMPT_S)  # nothing is due here: no restart can run without its profile
        assert {a.name: a.state for a in rt.agents()} == {
            "w": AgentState.RESTARTING,
            "f": AgentState.RESTARTING,
        }
    _check_kept(copy)
    _check_carried_on(copy)


def test_each_agent_stores_its_profiles_policy(store_path: Path) -> None:
    policy = Restart(on=("failed", "lost"), max_restarts=5, backoff_s=2.0, max_lost=4)
    plain = Profile("plain", runner=lambda turn: "ok")
    kept = Profile("kept", runner=lambda turn: "ok", restart=policy)
    with Runtime.open(store_path, profiles=[plain, kept]) as rt:
        a = rt.spawn("kept", "t")
        b = rt.spawn("plain", "t")
        rt.wait_idle(PROMPT_S)
    agents = {r.id: r for r in decode_db(store_path, "agents", AgentRecord).values()}
    assert agents[a.id].restart == RestartRecord.of(policy)
    assert agents[a.id].restart is not None and agents[a.id].restart.policy() == policy
    assert agents[b.id].restart is None


def test_without_its_profile_the_stored_policy_decides_a_lost_turn(tmp_path: Path) -> None:
    """A stored policy that does not answer ``lost`` leaves a lost turn interrupted; one
    that does makes it a pending restart, which waits for a runtime with the profile."""
    store = tmp_path / "store"
    failed_only = RestartRecord.of(Restart(on=("failed",)))
    lost = RestartRecord.of(Restart(on=("failed", "lost"), backoff_s=0.01, jitter=0.0))
    records = [
        agent("a", "/root/a", state="running", restart=failed_only),
        agent("b", "/root/b", state="running", restart=lost),
        agent("c", "/root/c", state="running"),
    ]
    write_store(store, [agent_write(r) for r in records])
    with Runtime.open(store, profiles=[]) as rt:
        rt.wait_idle(PROMPT_S)
        states = {a.name: a.state for a in rt.agents()}
    assert states == {"a": "interrupted", "b": "restarting", "c": "interrupted"}
    done = Done()
    with Runtime.open(store, profiles=[Profile("worker", runner=done)]) as rt:
        got = rt.wait("b", timeout=PROMPT_S)
        assert (got.status, got.attempt, got.generation) == ("completed", 2, 2)
    assert done.seen == [("b", "restart", 2)]


def test_a_park_for_approval_stays_parked_without_its_profile(tmp_path: Path) -> None:
    """A parked turn whose requests were answered is carried on only by a runtime that
    defines its profile; one without it leaves it parked."""
    store = tmp_path / "store"
    write_store(store, [agent_write(agent("p", "/root/p", state="awaiting_approval"))])
    with Runtime.open(store, profiles=[]) as rt:
        rt.wait_idle(PROMPT_S)
        assert rt.get("p").state is AgentState.AWAITING_APPROVAL
    done = Done()
    with Runtime.open(store, profiles=[Profile("worker", runner=done)]) as rt:
        got = rt.wait("p", timeout=PROMPT_S)
        assert (got.status, got.generation) == ("completed", 1)
    assert done.seen == [("p", "approval", 1)]
