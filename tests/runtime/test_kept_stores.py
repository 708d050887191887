"""Stores that outlive a release: every kept store opens with today's code and its agents go on.

``tests/fixtures/stores/`` keeps, per schema version and release
(``schema-<SCHEMA_VERSION>_retinue-<version>/``, written by ``python -m
stress.fixtures``), one small store per state a long-lived deployment
upgrades under: turns running when the process was SIGKILLed, a pending
restart with its due time, a park for approval (closed cleanly, and
SIGKILLed), a host wait's lease not acknowledged, and unread messages. Each
test opens a copy with the current code (the schema stamp checked, the
migrations run) and carries every agent on: the lost turn under a ``"lost"``
policy runs again and the other comes back ``interrupted`` and resumes, the
pending restart fires, the parks' requests are answered and the turns
finish, the lease gives the same completion again, and the next turn reads
the unread messages. The profiles here are this test's own (the store keeps
their names, restart policies and approval lists, not their runners).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from retinue import AgentState, CompletionStatus, Profile, Restart, Runtime, Turn
from retinue.errors import NothingToWaitFor
from retinue.persistence.store import Store
from retinue.protocol.records import SCHEMA_VERSION, AgentRecord

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stores"
PROMPT_S = 60.0
LEASE = "kept-store-lease"
MESSAGES = ["first unread note", "second unread note"]


def _manifest(folder: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((folder / "manifest.json").read_text())
    return loaded


FOLDERS = sorted(p for p in FIXTURES.iterdir() if (p / "manifest.json").exists())
CASES = [(folder, state) for folder in FOLDERS for state in _manifest(folder)["stores"]]


class Seen:
    """What this runtime's runners saw: (agent name, reason, attempt, message contents)."""

    def __init__(self) -> None:
        self.turns: list[tuple[str, str, int, list[str]]] = []
        self.lock = threading.Lock()

    def __call__(self, turn: Turn) -> str:
        contents = [m.content for m in turn.messages]
        with self.lock:
            self.turns.append((turn.agent.name, turn.reason, turn.attempt, contents))
        return f"carried on at attempt {turn.attempt}: {' | '.join(contents)}"


def profiles(seen: Seen) -> list[Profile]:
    """Today's team for the kept stores' profile names; every runner finishes at once."""
    return [
        Profile("keeper", runner=seen, restart=Restart(on=("failed", "lost"), backoff_s=0.05)),
        Profile("plain", runner=seen),
        Profile("flaky", runner=seen, restart=Restart(backoff_s=0.05)),
        Profile("auditor", model="retinue/scripted", tools="read", approve=["list_dir"]),
        Profile("leased", runner=seen),
        Profile("reader", runner=seen),
    ]


def _due_by_now(store: Path) -> None:
    """On a machine whose clock is behind the writer's, make a pending restart due now.

    The due time is wall-clock time; a kept restart is due long ago unless
    this clock is behind the one that wrote it (then it would wait that long).
    """
    opened = Store(store)
    try:
        raw = opened.snapshot(["agents"]).records["agents"]
        decoder = msgspec.msgpack.Decoder(AgentRecord)
        now = time.time()
        writes = []
        for key, value in raw:
            record = decoder.decode(value)
            if record.restart_due_at is not None and record.restart_due_at > now:
                later = msgspec.structs.replace(record, restart_due_at=now)
                writes.append(("agents", key, msgspec.msgpack.encode(later)))
        if writes:
            opened.write_now(writes)
    finally:
        opened.close()


def _running(rt: Runtime, seen: Seen, facts: dict[str, Any]) -> None:
    """A lost turn under a "lost" policy runs again; the other is interrupted, then resumed."""
    assert rt.get("plain").state is AgentState.INTERRUPTED
    assert rt.wait("plain", timeout=PROMPT_S).status is CompletionStatus.INTERRUPTED
    kept = rt.wait("keeper", timeout=PROMPT_S)
    assert (kept.status, kept.attempt) == (CompletionStatus.COMPLETED, 2)
    rt.resume("plain")
    resumed = rt.wait("plain", timeout=PROMPT_S)
    assert resumed.status is CompletionStatus.COMPLETED
    assert {(name, reason) for name, reason, _, _ in seen.turns} == {
        ("keeper", "restart"),
        ("plain", "resume"),
    }


def _restarting(rt: Runtime, seen: Seen, facts: dict[str, Any]) -> None:
    """The pending restart fires (it is due) and completes the task."""
    done = rt.wait("flaky", timeout=PROMPT_S)
    assert (done.status, done.attempt, done.generation) == (CompletionStatus.COMPLETED, 2, 2)
    assert seen.turns == [("flaky", "restart", 2, [])]


def _answer(approve: bool) -> Callable[[Runtime, Seen, dict[str, Any]], None]:
    def carry_on(rt: Runtime, seen: Seen, facts: dict[str, Any]) -> None:
        """The park's request is still pending; answered, the turn finishes."""
        assert rt.get("auditor").state is AgentState.AWAITING_APPROVAL
        (request,) = rt.approvals("auditor")
        assert (request.id, request.tool) == (facts["requests"][0], "list_dir")
        if approve:
            rt.approve(request.id, note="kept across the upgrade")
        else:
            rt.deny(request.id, reason="not after the upgrade")
        done = rt.wait("auditor", timeout=PROMPT_S)
        assert done.status is CompletionStatus.COMPLETED, done
        assert rt.approvals() == []

    return carry_on


def _leases(rt: Runtime, seen: Seen, facts: dict[str, Any]) -> None:
    """The lease is honoured: a wait with it gets the same completion; acknowledged, gone."""
    assert rt.leases()[LEASE].id == facts["completion"]
    again = rt.wait("leased", timeout=PROMPT_S, lease=LEASE)
    assert (again.id, again.output) == (facts["completion"], facts["output"])
    assert rt.ack_lease(LEASE)
    assert rt.leases() == {}
    with pytest.raises(NothingToWaitFor):
        rt.wait("leased", timeout=0)


def _unread(rt: Runtime, seen: Seen, facts: dict[str, Any]) -> None:
    """The unread messages wait in order; the next turn reads them."""
    assert [m.id for m in rt.inspect("reader").unread] == facts["messages"]
    rt.follow_up("reader", "read your notes")
    done = rt.wait("reader", timeout=PROMPT_S)
    assert done.output == f"carried on at attempt 1: {' | '.join(MESSAGES)}"
    assert seen.turns == [("reader", "follow_up", 1, MESSAGES)]
    assert not rt.inspect("reader").unread


CARRY_ON: dict[str, Callable[[Runtime, Seen, dict[str, Any]], None]] = {
    "running": _running,
    "restarting": _restarting,
    "parked": _answer(approve=True),
    "approval_pending": _answer(approve=False),
    "leases": _leases,
    "unread": _unread,
}


def test_this_schema_version_has_its_kept_stores() -> None:
    """A new schema version adds its folder (``python -m stress.fixtures``); none is newer."""
    versions = [_manifest(folder)["schema_version"] for folder in FOLDERS]
    assert SCHEMA_VERSION in versions, f"no kept stores for schema {SCHEMA_VERSION}: {FOLDERS}"
    assert max(versions) <= SCHEMA_VERSION
    for folder in FOLDERS:
        manifest = _manifest(folder)
        assert folder.name == (
            f"schema-{manifest['schema_version']}_retinue-{manifest['retinue_version']}"
        )
        assert set(manifest["stores"]) <= set(CARRY_ON), "a kept state this test cannot carry on"


@pytest.mark.parametrize(
    ("folder", "state"), CASES, ids=[f"{folder.name}/{state}" for folder, state in CASES]
)
def test_a_kept_store_opens_and_its_agents_carry_on(
    folder: Path, state: str, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    shutil.copytree(folder / state, store)  # a copy: the kept store stays as it was
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("the notes the auditor reads\n")
    _due_by_now(store)
    manifest = _manifest(folder)["stores"][state]
    seen = Seen()
    with Runtime.open(store, profiles=profiles(seen), workspace=workspace) as rt:
        assert {a.name: str(a.state) for a in rt.agents()} != {}
        assert [d for d in rt.diagnostics if d.code != "migrated"] == []
        CARRY_ON[state](rt, seen, manifest["facts"])
        rt.wait_idle(PROMPT_S)
        assert not any(a.state.busy for a in rt.agents())
