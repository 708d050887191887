"""The invariant checker finds planted breaks and holds on a real run; leaks, shutdown bounds."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from retinue import Profile, Runtime, Turn
from retinue.llm.chat import decode_transcript, encode_transcript
from retinue.llm.model import load_litellm
from retinue.persistence.store import Store
from retinue.protocol.messages import AgentState, Completion, CompletionStatus
from retinue.protocol.records import AgentRecord, CompletionRecord, ToolStep
from retinue.testing import Broken, Leaks, check_invariants, shutdown_within

SPAWN_RESULT = "spawn_subagents"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A finished run on the scripted model: a lead delegating to two readers; the host waited."""
    load_litellm()
    folder = tmp_path_factory.mktemp("run")
    ws = folder / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    profiles = [
        Profile("lead", subagents=["reader", "checker"], model="retinue/scripted", tools="read"),
        Profile("reader", tools="read"),
        Profile("checker", tools="read"),
    ]
    with Runtime.open(folder / "store", profiles=profiles, workspace=ws) as rt:
        lead = rt.spawn("lead", "review the folder")
        received = [rt.wait(lead.id, timeout=60)]
        rt.wait_idle(60)
    yield {"store": folder / "store", "ws": ws, "lead": lead.id, "received": received}


def copy_of(run: dict[str, Any], tmp_path: Path) -> Path:
    """A copy of the run's store, to plant a break in."""
    store = Store(run["store"], readonly=True)
    try:
        return store.backup(tmp_path / "copy")
    finally:
        store.close()


def edit_transcript(store_path: Path, agent_id: str, edit: Any) -> None:
    """Rewrite an agent's stored transcript with ``edit(messages) -> messages``."""
    store = Store(store_path)
    try:
        messages, cut = decode_transcript(store.get("transcripts", agent_id.encode()))
        raw = encode_transcript(agent_id, edit(messages), cut)
        store.write_now([("transcripts", agent_id.encode(), raw)])
    finally:
        store.close()


def names(broken: list[Broken]) -> set[str]:
    return {b.invariant for b in broken}


def test_a_real_run_breaks_nothing(run: dict[str, Any]) -> None:
    assert check_invariants(run["store"], host_received=run["received"], workspace=run["ws"]) == []


def test_a_tool_result_without_its_call_is_found(run: dict[str, Any], tmp_path: Path) -> None:
    store = copy_of(run, tmp_path)
    edit_transcript(store, run["lead"], lambda ms: [m for m in ms if not m.get("tool_calls")])
    broken = check_invariants(store)
    assert "tool_result_without_call" in names(broken)
    (first,) = [b for b in broken if b.invariant == "tool_result_without_call"]
    assert first.path.startswith("/root/") and "not in the step before it" in str(first)


def test_a_call_left_without_a_result_mid_chat_is_found(
    run: dict[str, Any], tmp_path: Path
) -> None:
    store = copy_of(run, tmp_path)
    edit_transcript(store, run["lead"], lambda ms: [m for m in ms if m["role"] != "tool"])
    assert "tool_call_without_result" in names(check_invariants(store))


def test_calls_sharing_an_id_are_found(run: dict[str, Any], tmp_path: Path) -> None:
    def twin(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for m in messages:
            if m.get("tool_calls"):
                m = {**m, "tool_calls": m["tool_calls"] * 2}
            out.append(m)
        return out

    store = copy_of(run, tmp_path)
    edit_transcript(store, run["lead"], twin)
    assert "duplicate_tool_call_id" in names(check_invariants(store))


def test_a_completion_shown_twice_or_not_at_all_is_found(
    run: dict[str, Any], tmp_path: Path
) -> None:
    def shown_twice(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        result = next(m for m in messages if m.get("name") == SPAWN_RESULT)
        path = msgspec.json.decode(result["content"])["results"][0]["path"]
        again = {"role": "user", "content": f"[subagent:{path}] delegated task completed. x"}
        return [*messages, again]

    twice = copy_of(run, tmp_path / "twice")
    edit_transcript(twice, run["lead"], shown_twice)
    assert "completion_received_twice" in names(check_invariants(twice))
    lost = copy_of(run, tmp_path / "lost")
    edit_transcript(
        lost,
        run["lead"],
        lambda ms: [m for m in ms if not m.get("tool_calls") and m["role"] != "tool"],
    )
    assert "completion_not_in_transcript" in names(check_invariants(lost))


def crashed_mid_turn(store_path: Path, agent_id: str) -> None:
    """Make ``agent_id`` running, holding its receipts, as a SIGKILL mid-turn leaves it."""
    store = Store(store_path)
    try:
        raw = store.get("agents", agent_id.encode())
        assert raw is not None
        record = msgspec.msgpack.decode(raw, type=AgentRecord)
        running = msgspec.structs.replace(record, state=AgentState.RUNNING)
        writes = [("agents", agent_id.encode(), msgspec.msgpack.encode(running))]
        for key, value in store.snapshot(["completions"]).records["completions"]:
            held = msgspec.msgpack.decode(value, type=CompletionRecord)
            if held.recipient_id == agent_id:
                tagged = msgspec.structs.replace(held, delivered_generation=record.generation)
                writes.append(("completions", key, msgspec.msgpack.encode(tagged)))
        store.write_now(writes)
    finally:
        store.close()


def test_a_completion_held_by_a_turn_a_crash_stopped_is_not_lost(
    run: dict[str, Any], tmp_path: Path
) -> None:
    """A SIGKILL between a model turn's wait and its next step leaves the wait's
    receipts delivered to the still-running turn and not yet in its transcript:
    the next open hands them to the next turn (the service soak met this store).
    Once the turn is over, the same store is a lost completion."""

    def without_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [m for m in messages if not m.get("tool_calls") and m["role"] != "tool"]

    killed = copy_of(run, tmp_path / "killed")
    edit_transcript(killed, run["lead"], without_results)
    crashed_mid_turn(killed, run["lead"])
    # (the planted copy keeps the lead's own completion: only the receipts are looked at)
    assert "completion_not_in_transcript" not in names(check_invariants(killed))
    settled = copy_of(run, tmp_path / "settled")
    edit_transcript(settled, run["lead"], without_results)
    assert "completion_not_in_transcript" in names(check_invariants(settled))


def test_a_completion_kept_in_an_open_steps_input_is_shown(
    run: dict[str, Any], tmp_path: Path
) -> None:
    """A turn that finds calls in doubt keeps its input (the completions it was
    handed) in the open step's ``then`` until their results are in; a stop then
    leaves them there, stored, and the next turn adds them to the chat (the
    fuzzer met this store: crash, resume, shut down mid-rerun)."""

    def lines(messages: list[dict[str, Any]]) -> list[str]:
        result = next(m for m in messages if m.get("name") == SPAWN_RESULT)
        paths = [r["path"] for r in msgspec.json.decode(result["content"])["results"]]
        return [f"[subagent:{path}] delegated task completed. x" for path in paths]

    store = copy_of(run, tmp_path)
    found: list[str] = []

    def keep_in_then(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        found.extend(lines(messages))
        return [m for m in messages if not m.get("tool_calls") and m["role"] != "tool"][:1]

    edit_transcript(store, run["lead"], keep_in_then)
    assert "completion_not_in_transcript" in names(check_invariants(store))
    writer = Store(store)
    try:
        messages, cut = decode_transcript(writer.get("transcripts", run["lead"].encode()))
        step = ToolStep(generation=1, step=1, then="\n\n".join(["carry on", *found]))
        kept = encode_transcript(run["lead"], messages, cut, journal=step)
        writer.write_now([("transcripts", run["lead"].encode(), kept)])
    finally:
        writer.close()
    assert "completion_not_in_transcript" not in names(check_invariants(store))


def test_the_hosts_ledger_is_checked_both_ways(run: dict[str, Any]) -> None:
    (completion,) = run["received"]
    twice = check_invariants(run["store"], host_received=[completion, completion])
    assert names(twice) == {"completion_received_twice"}
    none = check_invariants(run["store"], host_received=[])
    assert names(none) == {"completion_not_received"}
    assert check_invariants(run["store"], host_received=[], ledger_complete=False) == []
    pending = msgspec.structs.replace(completion, agent_id="nobody")
    assert check_invariants(run["store"], host_received=[completion, pending]) == []


def test_a_run_left_without_its_completion_is_found(run: dict[str, Any], tmp_path: Path) -> None:
    store_path = copy_of(run, tmp_path)
    store = Store(store_path)
    try:
        raw = store.get("agents", run["lead"].encode())
        assert raw is not None
        record = msgspec.msgpack.decode(raw, type=AgentRecord)
        bumped = msgspec.structs.replace(record, generation=record.generation + 1)
        store.write_now([("agents", record.id.encode(), msgspec.msgpack.encode(bumped))])
    finally:
        store.close()
    assert "completion_missing" in names(check_invariants(store_path))


def test_a_host_path_in_a_tool_result_is_found(run: dict[str, Any], tmp_path: Path) -> None:
    def leak(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {**m, "content": f'{{"error": "cannot read {run["ws"]}/x"}}'}
            if m["role"] == "tool"
            else m
            for m in messages
        ]

    store = copy_of(run, tmp_path)
    edit_transcript(store, run["lead"], leak)
    broken = check_invariants(store, workspace=run["ws"])
    assert "path_outside_workspace" in names(broken)
    assert "path_outside_workspace" not in names(check_invariants(store, forbidden=["CANARY"]))


def test_check_invariants_reads_an_open_runtime_through_a_backup(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "store", profiles=[Profile("p", runner=lambda t: "ok")]) as rt:
        info = rt.spawn("p", "go")
        got = rt.wait(info.id, timeout=10)
        assert check_invariants(rt, host_received=[got]) == []
    assert check_invariants(rt, host_received=[got]) == []  # closed: its folder


def test_leaks_finds_a_thread_left_behind_and_shutdown_within_a_slow_one(tmp_path: Path) -> None:
    release = threading.Event()
    with Leaks() as leaks:
        stray = threading.Thread(target=release.wait, name="stray", daemon=True)
        stray.start()
        (found,) = leaks.check(grace_s=0.1)
        assert found.invariant == "thread_left_behind" and "'stray'" in found.detail
        release.set()
        stray.join()
        assert leaks.check() == []

    def stuck(turn: Any) -> str:
        release.wait()
        return "late"

    release.clear()
    rt = Runtime.open(tmp_path / "store", profiles=[Profile("p", runner=stuck)])
    rt.spawn("p", "block")
    try:
        assert shutdown_within(rt, 60) == []  # the runner is abandoned within the bound
    finally:
        release.set()


def test_a_completion_can_be_checked_from_its_fields() -> None:
    one = Completion(
        id="a:1", agent_id="a", path="/root/a", generation=1, status=CompletionStatus.COMPLETED
    )
    assert str(Broken("completion_received_twice", one.path, "twice")).startswith(
        "completion_received_twice at /root/a"
    )


def test_a_host_wait_on_a_child_leaves_its_parents_receipt_alone(tmp_path: Path) -> None:
    """The host may wait on any agent: it takes a child's completion without taking it
    from the parent it was routed to, and the checker reads the host's receipt on the
    agent's record, not as the parent's (found by the fuzzer: a host wait on a child
    of an interrupted lead was reported as a completion "still pending")."""

    def lead(turn: Turn) -> str:
        turn.spawn("child", "c", name="c")
        return "spawned"

    profiles = [
        Profile("lead", subagents=["child"], runner=lead, wake_on_completion=False),
        Profile("child", runner=lambda turn: "done"),
    ]
    with Runtime.open(tmp_path / "store", profiles=profiles) as rt:
        info = rt.spawn("lead", "go", name="a")
        received = [rt.wait(info.id, timeout=60)]
        received.append(rt.wait("/root/a/c", timeout=60))
        rt.wait_idle(60)
        # The lead did not run again, so the child's completion still waits for it.
        assert rt.backlog().pending_completions == 1
        assert check_invariants(rt, host_received=received) == []
        assert names(check_invariants(rt, host_received=received[:1])) == {
            "completion_not_received"
        }
