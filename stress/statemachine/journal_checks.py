"""The journal machine's invariants: effects per key, one action per call in doubt, the chat.

- :func:`check_runs` (after every step): every run of a call carries the key of
  its ``(agent, generation, step, index)``, one key never covers two calls (a
  model that repeats call ids included), no ``(key, attempt)`` runs twice, a
  call's first run happens once, and an ``unsafe`` call runs again only as
  often as a person approved it (its effect count <= 1 per key otherwise).
- :func:`check_events` (after every step; ``final`` once all is settled): every
  ``ToolCallInDoubt`` names a call found in doubt with the action of its class
  (``read``/``idempotent``: ``rerun``; ``unsafe``: ``reported``, or ``approval``
  under ``Profile(in_doubt="approve")``), at most one per finding, exactly one
  at the end. A *finding* is a ``(key, attempt)`` seen in doubt at an open.
- :func:`check_notes` (at the end, per agent): each message the host sent
  reached the model once (or is still unread).
- :func:`check_chat` (at the end, per agent): the model read one result per
  call: a rerun's is its latest run's, an unsafe call in doubt's is the issue's
  exact message (with a person's reason when one denied it).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from retinue.protocol.effects import idempotency_key, in_doubt_result
from retinue.protocol.messages import ToolCallInDoubt
from stress.statemachine.journal_world import EFFECTS, LEDGER, Run
from stress.statemachine.trace import STATS, fail

__all__ = [
    "Finding",
    "check_agent",
    "check_chat",
    "check_events",
    "check_notes",
    "check_runs",
    "expected_action",
]

_RESULT = re.compile(r"^(\w+) (\S+) key=(\S+) attempt=(\d+)$")


@dataclass(frozen=True)
class Finding:
    """A call seen in doubt at an open: its key, runs so far, class and agent's profile."""

    key: str
    attempt: int
    tool: str
    effect: str
    profile: str
    agent_id: str


def expected_action(effect: str, profile: str) -> str:
    """The action the runtime owes a call in doubt of ``effect`` under ``profile``."""
    if effect in ("read", "idempotent"):
        return "rerun"
    return "approval" if profile == "asks" else "reported"


def check_runs(runs: Sequence[Run], approved: Mapping[str, int]) -> None:
    """Hold the ledger to the effect rules (see the module's docstring)."""
    by_key: dict[str, list[Run]] = defaultdict(list)
    calls: dict[tuple[str, int, int, int], str] = {}
    for run in runs:
        by_key[run.key].append(run)
        where = (run.agent_id, run.generation, run.step, run.index)
        if run.key != idempotency_key(*where):
            fail(f"run {run} carries key {run.key}, not the key of {where}")
        if calls.setdefault(where, run.tool) != run.tool:
            fail(f"{where} ran as {calls[where]} and as {run.tool}: one key, two calls")
    for key, of_key in by_key.items():
        attempts = Counter(r.attempt for r in of_key)
        if any(n > 1 for n in attempts.values()):
            fail(f"call {key} ran one attempt twice: {of_key}")
        if sum(1 for r in of_key if not r.in_doubt) > 1:
            fail(f"call {key} ran its first attempt more than once: {of_key}")
        if len({(r.agent_id, r.tool, r.order) for r in of_key}) > 1:
            fail(f"the key {key} changed hands between runs: {of_key}")
        if EFFECTS[of_key[0].tool] == "unsafe":
            again = sum(1 for r in of_key if r.in_doubt)
            if again > approved.get(key, 0):
                fail(f"unsafe call {key} ran again {again} times, approved {approved.get(key, 0)}")
            if again:
                STATS["journal:unsafe_rerun_approved"] += 1


def check_events(
    events: Sequence[ToolCallInDoubt], findings: Iterable[Finding], *, final: bool
) -> None:
    """Hold the ``ToolCallInDoubt`` events to the calls found in doubt (see the module)."""
    owed: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:
        owed[finding.key].append(finding)
    got: Counter[str] = Counter()
    for event in events:
        got[event.idempotency_key] += 1
        found = owed.get(event.idempotency_key)
        if not found:
            fail(f"{event} names a call never found in doubt")
        first = found[0]
        if (event.tool, event.effect) != (first.tool, first.effect):
            fail(f"{event} does not match the call found in doubt: {first}")
        if event.action != expected_action(first.effect, first.profile):
            fail(f"{event}: a {first.effect} call of {first.profile} owed another action")
    for key, found in owed.items():
        if got[key] > len(found) or (final and got[key] != len(found)):
            fail(f"call {key} found in doubt {len(found)} times, got {got[key]} events")


def _results(chat: Sequence[Mapping[str, Any]]) -> list[Any]:
    out = []
    for message in chat:
        if message.get("role") == "tool":
            try:
                out.append(json.loads(str(message.get("content"))))
            except ValueError:
                fail(f"a tool result the model read is not JSON: {message}")
    return out


def check_chat(
    chat: Sequence[Mapping[str, Any]],
    runs: Sequence[Run],
    findings: Sequence[Finding],
    denied: Mapping[str, str],
) -> None:
    """Hold one agent's last chat to its runs and its calls in doubt (see the module).

    ``denied`` maps the keys of calls in doubt a person denied to the reason given.
    """
    latest: dict[str, int] = {}
    for run in runs:
        latest[run.key] = max(run.attempt, latest.get(run.key, 0))
    told: Counter[str] = Counter()
    for data in _results(chat):
        if isinstance(data, dict) and isinstance(data.get("result"), str):
            found = _RESULT.match(data["result"])
            if found is None:
                fail(f"the model read a result no run made: {data}")
            key, attempt = found.group(3), int(found.group(4))
            told[key] += 1
            if latest.get(key) != attempt:
                fail(f"the model read attempt {attempt} of {key}; its runs: {latest.get(key)}")
            continue
        key = str(data.get("idempotency_key")) if isinstance(data, dict) else ""
        doubt = [f for f in findings if f.key == key]
        if not doubt:
            fail(f"the model read an error for a call never in doubt: {data}")
        told[key] += 1
        exact = json.loads(in_doubt_result(doubt[0].tool, key))
        if key in denied:
            exact["error"] += f" A person chose not to run it again: {denied[key]}"
            STATS["journal:denied_read"] += 1
        else:
            STATS["journal:reported_read"] += 1
        if data != exact:
            fail(f"the model read {data} for unsafe call {key} in doubt, not {exact}")
    for key, times in told.items():
        if times > 1:
            fail(f"the model read {times} results for call {key}")
    for finding in findings:
        if finding.key not in told:
            fail(f"the model never read a result for {finding}")


def check_notes(
    chat: Sequence[Mapping[str, Any]], notes: Sequence[str], unread: Sequence[str]
) -> None:
    """Each message the host sent an agent (acknowledged) reached its model once, or is
    still unread: none lost by a crash or a settle, none handed twice."""
    said = [str(m.get("content")) for m in chat if m.get("role") == "user"]
    for note in notes:
        times = sum(text.count(f"] {note}\n") + text.endswith(f"] {note}") for text in said)
        if times + unread.count(note) != 1:
            fail(f"the note {note!r} reached the model {times} times, unread {unread}: {said}")
        STATS["journal:notes_read" if times else "journal:notes_unread"] += 1


def check_agent(
    agent_id: str, tag: str, findings: Iterable[Finding], denied: Mapping[str, str]
) -> None:
    """Hold one agent's last chat (:data:`LEDGER`) to its runs and to the last finding of
    each of its unsafe calls in doubt (:func:`check_chat`)."""
    latest: dict[str, Finding] = {}
    for finding in findings:  # in the order found: the chat holds each call's last answer
        if finding.agent_id == agent_id:
            latest[finding.key] = finding
    with LEDGER.lock:
        chat = list(LEDGER.chats.get(tag, []))
    runs = [r for r in LEDGER.snapshot() if r.agent_id == agent_id]
    check_chat(chat, runs, [f for f in latest.values() if f.effect == "unsafe"], denied)
