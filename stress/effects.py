"""Side effects across SIGKILL: no unsafe call runs twice, an idempotent call keeps its key.

``python -m stress --only effects``. A child process opens a runtime whose
model agents (on a local OpenAI stub in the parent) each handle one order in
one step of three tool calls: the host tool ``refund(order)`` (``unsafe``,
the default), the host tool ``credit(order)`` (``@tool(effect="idempotent")``)
and ``bash`` (``unsafe``) appending a line. Each appends its order, its
idempotency key and its attempt to a ledger file outside the store (fsync'd),
then sleeps a little before it returns, so kills land during calls, between a
call's effect and the commit of its result, and during commits. Half the
agents answer an unsafe call in doubt with a report to the model; the other
half (``Profile(in_doubt="approve")``) with an approval request, which the
workload approves or denies. The parent kills the child at a random instant,
reopens, and checks:

- an ``unsafe`` call never ran twice (no order refunded twice, no bash line
  twice): ``duplicates`` must be 0;
- an ``idempotent`` call's key never changed between its runs;
- every call found in doubt was acted on by its class (read/idempotent:
  ``rerun``; unsafe: ``reported`` or ``approval``);
- every acknowledged spawn and approval answer is in the store.

A last phase opens the store once more, resumes and answers everything, and
checks that no call is left in doubt. The same workload runs through an
at-least-once baseline in the same run (:mod:`stress.effects_baseline`: a
step journal that re-runs the step in flight at a crash, as the
durable-execution engines do); its duplicates are printed beside ours.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from retinue import AgentState, Limits, Profile, Restart, Runtime, ToolCall, ToolCallInDoubt
from retinue.errors import RetinueError, WaitTimeout
from retinue.llm import LiteLLMRunner, tool
from retinue.persistence.store import Store
from retinue.protocol.records import AgentRecord
from retinue.protocol.supervision import ApprovalRecord
from retinue.testing import OpenAIStub, StubReply, StubRequest
from stress.effects_baseline import Baseline, run_baseline
from stress.parts import Options, Part, Result

LIMITS = Limits(max_agents=20_000, max_active_turns=8, wait_default_s=10.0)
LIVE = 4  # agents the workload keeps busy
UNSAFE = ("refund", "bash")
LOST = Restart(max_restarts=1000, within_s=60, backoff_s=0.05, on=("lost",))


def _append(path: Path, line: str) -> None:
    """Append one line and fsync it: the effect is done once this returns."""
    with open(path, "a", buffering=1) as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def _tools(work: Path) -> dict[str, Any]:
    """The host tools: each appends ``order key attempt`` to its ledger, then lingers."""

    def refund(order: str, call: ToolCall) -> str:
        """Refund an order."""
        _append(work / "refund.log", f"{order} {call.idempotency_key} {call.attempt}")
        time.sleep(random.uniform(0.0, 0.1))  # effect done, result not yet committed
        return f"refunded {order}"

    def credit(order: str, call: ToolCall) -> str:
        """Credit an order's account (the same key again changes nothing)."""
        _append(work / "credit.log", f"{order} {call.idempotency_key} {call.attempt}")
        time.sleep(random.uniform(0.0, 0.1))
        return f"credited {order}"

    return {"refund": tool(refund), "credit": tool(credit, effect="idempotent")}


def profiles(stub_url: str, work: Path) -> list[Profile]:
    """``shop`` (in-doubt unsafe calls reported; lost turns restarted) and ``shop_ask``
    (in-doubt unsafe calls sent to a person; interrupted turns resumed by the workload)."""
    runner = LiteLLMRunner(
        "openai/shop",
        api_base=stub_url,
        api_key="x",
        host_tools=_tools(work),
        workspace=work / "ws",
        retries=1,
        retry_base_s=0.05,
        request_timeout_s=10,
    )
    tools = ["refund", "credit", "bash"]
    return [
        Profile("shop", tools=tools, runner=runner, restart=LOST),
        Profile("shop_ask", tools=tools, runner=runner, in_doubt="approve"),
    ]


def stub_handler(work: Path) -> Any:
    """The model: one step of three calls for the task's order, then an answer."""
    bash_log = work / "bash.log"

    def handle(request: StubRequest) -> StubReply:
        task = next(m["content"] for m in request.messages if m.get("role") == "user")
        order = str(task).split()[-1]
        if any(m.get("role") == "tool" for m in request.messages):
            return StubReply(message={"role": "assistant", "content": f"order {order} handled"})
        line = f'echo "{order} $RETINUE_IDEMPOTENCY_KEY 1" >> {bash_log}; sleep 0.05'
        calls = [
            ("refund", {"order": order}),
            ("credit", {"order": order}),
            ("bash", {"command": line}),
        ]
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{request.number}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for i, (name, args) in enumerate(calls)
            ],
        }
        return StubReply(message=message)

    return handle


def _wake(rt: Runtime, rng: random.Random, ack: Any) -> None:
    """Resume interrupted agents, follow up failed ones that hold calls in doubt (a turn
    lost in a crash ``max_lost`` times in a row fails with ``CrashLoop``: the next turn
    settles its calls), answer some approvals (acknowledged once committed)."""
    for info in rt.agents():
        with contextlib.suppress(RetinueError):
            if info.state is AgentState.INTERRUPTED:
                rt.resume(info.id)
            elif info.state is AgentState.FAILED and info.in_doubt:
                rt.follow_up(info.id, "carry on")
    for request in rt.approvals():
        if rng.random() < 0.5:
            continue
        with contextlib.suppress(RetinueError):
            if rng.random() < 0.6:
                rt.approve(request.id)
                ack(op="approve", request=request.id)
            else:
                rt.deny(request.id, reason="checked: it went through")
                ack(op="deny", request=request.id)


def child_main(store: str, ack_log: str, seed: int, stub_url: str, work: str) -> None:
    """Run the workload until killed, logging every acknowledgement and in-doubt event."""
    from retinue.llm.model import load_litellm

    load_litellm()
    rng = random.Random(seed)
    lock = threading.Lock()
    log = open(ack_log, "a", buffering=1)  # noqa: SIM115 - lives until the kill

    def ack(**entry: Any) -> None:
        with lock:
            log.write(json.dumps(entry) + "\n")

    def on_event(event: Any) -> None:
        if isinstance(event, ToolCallInDoubt):
            ack(op="in_doubt", tool=event.tool, key=event.idempotency_key, action=event.action)

    rt = Runtime.open(store, profiles=profiles(stub_url, Path(work)), limits=LIMITS)
    rt.subscribe(on_event)
    ack(op="opened")
    while True:
        _wake(rt, rng, ack)
        busy = [a for a in rt.agents() if a.state not in (AgentState.COMPLETED, AgentState.FAILED)]
        if len(busy) < LIVE:
            order = f"O{rng.randrange(10**9):09d}"
            with contextlib.suppress(RetinueError):
                info = rt.spawn(rng.choice(("shop", "shop_ask")), f"refund order {order}")
                ack(op="spawn", id=info.id, order=order)
        time.sleep(rng.uniform(0.0, 0.05))


@dataclass
class Ledgers:
    """What the effects' ledgers hold: unsafe runs by key, credit keys by order."""

    runs: Counter[str] = field(default_factory=Counter)
    credit_keys: dict[str, set[str]] = field(default_factory=dict)
    credit_runs: int = 0


def read_ledgers(work: Path) -> Ledgers:
    """Read the three ledgers (a line cut by the kill is ignored)."""
    found = Ledgers()
    for name in UNSAFE:
        path = work / f"{name}.log"
        for line in path.read_text().splitlines() if path.exists() else []:
            parts = line.split()
            if len(parts) == 3:
                found.runs[parts[1]] += 1
    path = work / "credit.log"
    for line in path.read_text().splitlines() if path.exists() else []:
        parts = line.split()
        if len(parts) == 3:
            found.credit_keys.setdefault(parts[0], set()).add(parts[1])
            found.credit_runs += 1
    return found


def _read(store_path: Path, database: str, kind: type[Any]) -> list[Any]:
    if not (store_path / "data.mdb").exists():
        return []
    store = Store(store_path, readonly=True)
    try:
        raw = store.snapshot([database]).records[database]
    finally:
        store.close()
    decoder = msgspec.msgpack.Decoder(kind)
    return [decoder.decode(v) for _, v in raw]


@dataclass
class Tally:
    """The whole run's figures."""

    kills: int = 0
    calls: int = 0
    duplicates: int = 0
    in_doubt: Counter[str] = field(default_factory=Counter)
    key_changes: int = 0
    approved_reruns: int = 0
    crash_loops: int = 0
    problems: list[str] = field(default_factory=list)


def check_round(store: Path, work: Path, acks: list[dict[str, Any]], tally: Tally) -> None:
    """Check one kill's promises against the ledgers, the store and the acknowledgements."""
    p = tally.problems
    agents = {r.id for r in _read(store, "agents", AgentRecord)}
    approvals = {r.request.id: r for r in _read(store, "approvals", ApprovalRecord)}
    for entry in acks:
        op = entry["op"]
        if op == "spawn" and entry["id"] not in agents:
            p.append(f"acknowledged spawn of {entry['id']} is lost")
        elif op in ("approve", "deny"):
            held = approvals.get(entry["request"])
            want = "approved" if op == "approve" else "denied"
            if held is None or held.status != want:
                p.append(f"acknowledged {op} of {entry['request']} is lost")
        elif op == "in_doubt":
            tally.in_doubt[entry["action"]] += 1
            unsafe = entry["tool"] in UNSAFE
            if (entry["action"] == "rerun") == unsafe:
                p.append(f"{entry['tool']} in doubt got {entry['action']}")


def check_ledgers(store: Path, work: Path, tally: Tally) -> None:
    """Count calls and duplicates: an unsafe call that ran more often than once plus the
    reruns a person approved (an in-doubt approval request of its key); a changed key."""
    found = read_ledgers(work)
    approved = Counter(
        r.request.idempotency_key
        for r in _read(store, "approvals", ApprovalRecord)
        if r.request.in_doubt and r.status == "approved"
    )
    tally.approved_reruns = sum(approved.values())
    tally.calls = sum(found.runs.values()) + found.credit_runs
    tally.duplicates = 0
    for key, times in found.runs.items():
        extra = times - 1 - approved[key]
        if extra > 0:
            tally.duplicates += extra
            tally.problems.append(f"unsafe call {key} ran {times} times ({approved[key]} approved)")
    tally.key_changes = sum(1 for keys in found.credit_keys.values() if len(keys) > 1)
    if tally.key_changes:
        tally.problems.append(f"{tally.key_changes} idempotent calls ran with a changed key")


def _progress(store: Path, work: Path, tally: Tally, kills: int) -> None:
    """Print the figures so far (a long run shows where it stands)."""
    now = Tally(kills=tally.kills, in_doubt=tally.in_doubt)
    check_ledgers(store, work, now)
    line = (
        f"effects: {now.kills}/{kills} kills, {now.calls} calls, {now.duplicates} duplicates, "
        f"in doubt {dict(now.in_doubt)}, problems {len(tally.problems) + len(now.problems)}"
    )
    print(line, file=sys.stderr, flush=True)


def drain(store: Path, work: Path, url: str, tally: Tally) -> None:
    """Open once more, resume and approve until idle: no call may stay in doubt."""
    rt = Runtime.open(store, profiles=profiles(url, work), limits=LIMITS)
    seen: list[Any] = []
    rt.subscribe(seen.append)
    try:
        for _ in range(20):
            for info in rt.agents():
                with contextlib.suppress(RetinueError):
                    if info.state is AgentState.INTERRUPTED:
                        rt.resume(info.id)
                    elif info.state is AgentState.FAILED and info.in_doubt:
                        rt.follow_up(info.id, "carry on")
            for request in rt.approvals():
                with contextlib.suppress(RetinueError):
                    rt.approve(request.id)
            with contextlib.suppress(WaitTimeout):
                rt.wait_idle(30)
            if not rt.approvals() and not any(
                a.state is AgentState.INTERRUPTED or a.in_doubt for a in rt.agents()
            ):
                break
        for info in rt.agents():  # failed: CrashLoop, lost in crashes max_lost times in a row
            tally.crash_loops += info.state is AgentState.FAILED
            if info.in_doubt or info.state not in (AgentState.COMPLETED, AgentState.FAILED):
                tally.problems.append(
                    f"{info.path} ends {info.state} with {info.in_doubt} in doubt"
                )
    finally:
        rt.shutdown()
    for event in seen:
        if isinstance(event, ToolCallInDoubt):
            tally.in_doubt[event.action] += 1


def run_effects(workdir: Path, kills: int, seed: int, max_run_s: float = 2.0) -> Tally:
    """Run ``kills`` kill-and-reopen rounds on one store, then drain it; return the tally."""
    rng = random.Random(seed)
    (workdir / "ws").mkdir(parents=True, exist_ok=True)
    store, tally = workdir / "store", Tally()
    with OpenAIStub(stub_handler(workdir)) as stub:
        for round_no in range(kills):
            ack_log = workdir / f"acks-{round_no}.jsonl"
            args = [str(store), str(ack_log), str(rng.randrange(2**31)), stub.url, str(workdir)]
            proc = subprocess.Popen(
                [sys.executable, "-m", "stress.effects", "child", *args],
                env=dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True"),
                cwd=Path(__file__).resolve().parent.parent,
            )
            deadline = time.monotonic() + 60
            while not ack_log.exists() or "opened" not in ack_log.read_text():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"effects child exited early with {proc.returncode}")
                time.sleep(0.01)
            time.sleep(rng.uniform(0.05, max_run_s))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            tally.kills += 1
            text = ack_log.read_text()
            acks = [json.loads(line) for line in text.splitlines() if line.endswith("}")]
            check_round(store, workdir, acks, tally)
            if tally.kills % 10 == 0:
                _progress(store, workdir, tally, kills)
        drain(store, workdir, stub.url, tally)
    check_ledgers(store, workdir, tally)
    return tally


if __name__ == "__main__" and len(sys.argv) == 7 and sys.argv[1] == "child":
    child_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6])


def _part(options: Options) -> Result:
    """SIGKILL agents while their tool calls run; count duplicate effects, ours and a baseline's."""
    kills = options.kills if options.kills is not None else (5 if options.quick else 200)
    with tempfile.TemporaryDirectory() as tmp:
        found: list[Baseline] = []
        beside = threading.Thread(  # its children mostly sleep and fsync: run it meanwhile
            target=lambda: found.append(run_baseline(Path(tmp) / "baseline", kills, options.seed))
        )
        beside.start()
        t0 = time.perf_counter()
        tally = run_effects(Path(tmp) / "retinue", kills, options.seed)
        seconds = round(time.perf_counter() - t0, 1)
        beside.join()
        base = found[0] if found else Baseline()
    row = {
        "kills": tally.kills,
        "calls": tally.calls,
        "duplicates": tally.duplicates,
        "in_doubt": sum(tally.in_doubt.values()),
        "rerun": tally.in_doubt["rerun"],
        "reported": tally.in_doubt["reported"],
        "approval": tally.in_doubt["approval"],
        "approved_reruns": tally.approved_reruns,
        "failed_crash_loop": tally.crash_loops,
        "idempotent_key_changes": tally.key_changes,
        "baseline_kills": base.kills,
        "baseline_calls": base.calls,
        "baseline_duplicates": base.duplicates,
        "seconds": seconds,
    }
    return Result.row(
        "effects: SIGKILL during tool calls; duplicate effects (retinue vs at-least-once)",
        row,
        tally.problems,
    )


PART = Part("effects", _part, check=True, in_quick=False)
