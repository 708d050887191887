"""The crash test's supervision part: restarts and approvals under SIGKILL.

Two profiles join the crash workload: ``flaky`` (a worker that fails at
random under a restart policy answering ``failed`` and ``lost``, with
backoffs of a tenth of a second, so kills land during them) and
``deployer`` (a model agent on a local OpenAI stub whose model calls the
host tool ``deploy``, which needs approval; the workload approves or denies
some requests and leaves others pending, so kills land on parked turns and
on approved calls while they run). ``deploy`` appends its target to a runs
log before it works, so a call that ran twice shows as a duplicate line.

After each kill the checker reopens the store and checks, beyond the crash
test's own promises: every task's generations are covered by exactly one
completion each (a completion of attempt ``a`` at generation ``g`` covers
``g-a+1..g``; a task still pending covers its own), the approvals pending at
the kill are pending after the reopen, every acknowledged answer is stored,
and no approved call ran twice or ran without an approval.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from retinue import Profile, Restart, Runtime, Turn
from retinue.errors import RetinueError
from retinue.llm import LiteLLMRunner
from retinue.llm.chat import decode_transcript, stored_journal
from retinue.llm.turn._approval_gate import CUT_SHORT_RESULT
from retinue.llm.turn._intents import open_count
from retinue.persistence.store import Store
from retinue.protocol.records import AgentRecord, CompletionRecord
from retinue.protocol.supervision import ApprovalRecord
from retinue.testing import StubReply, StubRequest

__all__ = [
    "FLAKY_POLICY",
    "SupervisionFacts",
    "answer_some",
    "check_coverage",
    "check_supervision",
    "count_cut_short",
    "read_approvals",
    "stub_handler",
    "supervised_profiles",
]

FLAKY_POLICY = Restart(
    max_restarts=2, within_s=60, backoff_s=0.1, backoff_max_s=0.4, jitter=0.5, on=("failed", "lost")
)


def _flaky(turn: Turn) -> str:
    rng = random.Random(turn.agent.id + str(turn.agent.generation))
    time.sleep(rng.uniform(0, 0.05))
    if rng.random() < 0.6:
        raise RuntimeError(f"flaky attempt {turn.attempt} failed on purpose")
    return f"flaky done on attempt {turn.attempt}"


def _deploy_tool(runs_log: Path) -> Callable[[str], str]:
    def deploy(target: str) -> str:
        """Deploy ``target`` (logged before it works: a second run of one call shows)."""
        with open(runs_log, "a", buffering=1) as log:
            log.write(target + "\n")
            log.flush()
            os.fsync(log.fileno())
        time.sleep(random.uniform(0.02, 0.2))
        return f"deployed {target}"

    return deploy


def supervised_profiles(stub_url: str, runs_log: Path) -> list[Profile]:
    """The two supervised profiles, ``flaky`` and ``deployer``."""
    runner = LiteLLMRunner(
        "openai/deployer",
        api_base=stub_url,
        api_key="x",
        host_tools={"deploy": _deploy_tool(runs_log)},
        retries=1,
        retry_base_s=0.05,
        request_timeout_s=10,
    )
    return [
        Profile("flaky", runner=_flaky, restart=FLAKY_POLICY),
        Profile("deployer", tools=["deploy"], approve=["deploy"], runner=runner),
    ]


def stub_handler(request: StubRequest) -> StubReply:
    """The deployer's model: call ``deploy`` once (a unique target), then answer."""
    if any(m.get("role") == "tool" for m in request.messages):
        return StubReply(message={"role": "assistant", "content": "deployment handled"})
    call = {
        "id": f"call_{request.number}",
        "type": "function",
        "function": {"name": "deploy", "arguments": json.dumps({"target": f"t{request.number}"})},
    }
    return StubReply(message={"role": "assistant", "content": None, "tool_calls": [call]})


def answer_some(rt: Runtime, rng: random.Random, ack: Callable[..., None]) -> None:
    """Approve (most) or deny one pending request, acknowledging the answer once committed."""
    pending = rt.approvals()
    if not pending:
        return
    request = rng.choice(pending)
    try:
        if rng.random() < 0.7:
            rt.approve(request.id)
            ack(op="approve", request=request.id, id=request.agent_id)
        else:
            rt.deny(request.id, reason="not now")
            ack(op="deny", request=request.id, id=request.agent_id)
    except RetinueError:
        pass


def read_approvals(store_path: Path) -> dict[str, ApprovalRecord]:
    """The stored approval records of a closed store, by request id."""
    if not (store_path / "data.mdb").exists():
        return {}
    store = Store(store_path, readonly=True)
    try:
        raw = store.snapshot(["approvals"]).records["approvals"]
    finally:
        store.close()
    decoder = msgspec.msgpack.Decoder(ApprovalRecord)
    return {k.decode(): decoder.decode(v) for k, v in raw}


@dataclass
class SupervisionFacts:
    """What the kill caught: agents in a backoff, parked, and calls running."""

    restarting: int = 0
    awaiting: int = 0
    approved_calls: int = 0
    runs: int = 0
    cut_short: int = 0
    problems: list[str] = field(default_factory=list)


def count_cut_short(store_path: Path) -> int:
    """How many approved calls a kill cut short: results that say a call is in doubt, or
    calls a stored journal holds running without a result."""
    store = Store(store_path, readonly=True)
    try:
        raw = store.snapshot(["transcripts"]).records["transcripts"]
    finally:
        store.close()
    count = 0
    for _, value in raw:
        messages, _ = decode_transcript(value)
        count += sum(1 for m in messages if _cut_short(m.get("content")))
        journal = stored_journal(value)
        count += open_count(journal)
    return count


def _cut_short(content: Any) -> bool:
    """Whether a tool result says its call was cut short (in doubt, or an older retinue's
    cut-short record)."""
    return isinstance(content, str) and (
        content == CUT_SHORT_RESULT or content.startswith('{"error": "in doubt:')
    )


def check_coverage(record: AgentRecord, done: list[CompletionRecord]) -> str | None:
    """Check that each of the agent's generations belongs to exactly one task's completion.

    A task still pending (the agent is busy) covers its own generations.
    """
    covered: list[int] = []
    for entry in done:
        c = entry.completion
        covered += range(c.generation - c.attempt + 1, c.generation + 1)
    if record.state in ("restarting", "awaiting_approval", "starting", "running"):
        covered += range(record.generation - record.attempt + 1, record.generation + 1)
    if sorted(covered) != list(range(1, record.generation + 1)):
        return f"{record.path}: completions cover {sorted(covered)} of {record.generation} runs"
    return None


def check_supervision(
    before: dict[str, AgentRecord],
    approvals_before: dict[str, ApprovalRecord],
    approvals_after: dict[str, ApprovalRecord],
    pending_after_open: set[str],
    acks: list[dict[str, Any]],
    runs_log: Path,
) -> SupervisionFacts:
    """The supervision promises across one kill (see the module docstring)."""
    facts = SupervisionFacts()
    p = facts.problems
    facts.restarting = sum(1 for r in before.values() if r.state == "restarting")
    facts.awaiting = sum(1 for r in before.values() if r.state == "awaiting_approval")
    for request_id, record in approvals_before.items():
        agent = before.get(record.request.agent_id)
        parked = agent is not None and agent.state == "awaiting_approval"
        if record.pending and parked and request_id not in pending_after_open:
            p.append(f"approval {request_id} was pending at the kill and not after the reopen")
    for entry in acks:
        if entry["op"] in ("approve", "deny"):
            held = approvals_after.get(entry["request"])
            want = "approved" if entry["op"] == "approve" else "denied"
            if held is None or held.status != want:
                got = None if held is None else held.status
                p.append(f"acknowledged {entry['op']} of {entry['request']} is lost ({got})")
    approved = {
        json.loads(r.request.arguments).get("target")
        for r in approvals_after.values()
        if r.status == "approved"
    }
    facts.approved_calls = len(approved)
    runs = runs_log.read_text().split() if runs_log.exists() else []
    facts.runs = len(runs)
    for target in sorted(set(runs)):
        if runs.count(target) > 1:
            p.append(f"approved call {target} ran {runs.count(target)} times")
        if target not in approved:
            p.append(f"call {target} ran without a stored approval")
    return facts
