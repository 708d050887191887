"""The invariant checker behind ``retinue fuzz``: what a store must show after any run.

:func:`check_invariants` reads a store (a folder, or a :class:`~retinue.Runtime`:
an open one through a backup, a closed one through its folder) and returns the
broken invariants as :class:`Broken` records (an empty list: all hold):

- ``tool_result_without_call``: a stored transcript has a tool result whose
  call is not in the assistant step just before it (a provider refuses it);
- ``tool_call_without_result``: a step's tool call has no result although the
  chat went on after it (only the last step may be unanswered: a crash, or an
  interrupt, mid-step);
- ``duplicate_tool_call_id``: one step's calls share an id, or one call has two results;
- ``journal_out_of_step``: a transcript's journal of tool calls holds intents
  that are not its last step's unanswered calls (a result stored without its
  intent cleared, or an intent of a step the chat does not hold), or the
  record of an agent whose turn is not running counts other calls open than
  the journal (``open_calls``: the turn's end writes both in one commit; a
  running turn's record may count as of its last write);
- ``completion_twice`` / ``completion_missing``: an agent's runs are not each
  covered by exactly one completion (a restarted task's attempts share one);
- ``completion_received_twice``: a completion shows more often in its
  recipient's transcript (or the host's ``host_received``) than it was delivered;
- ``completion_not_in_transcript``: a model agent received a completion that
  its transcript does not show (checked where the transcript was never cut;
  what a turn still running in the store received is its to show: a crash
  between a wait and the next step leaves that, and the next open hands it on;
  an input kept in the ``then`` of a step left open with calls in doubt counts
  as shown: it joins the chat after their results);
- ``completion_not_received``: the store says the host received a completion
  that no wait in ``host_received`` returned (only with ``ledger_complete``),
  or a wait returned one the store would hand out again;
- ``path_outside_workspace``: a tool result (other than bash's output, which
  the workspace does not confine) shows the workspace's host path or one of
  the ``forbidden`` texts (a canary kept outside the workspace).

It assumes nothing was compacted for age (``Limits.retain_age_s``, a week by
default) while the run lasted. :mod:`retinue.testing.leaks` checks the
process: threads, child processes and tasks left behind, a shutdown's bound.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from retinue.persistence.store import Store
from retinue.protocol.messages import AgentState, Completion
from retinue.protocol.records import (
    AgentRecord,
    CompletionRecord,
    TranscriptMessage,
    TranscriptRecord,
    open_count,
)
from retinue.runtime import Runtime

__all__ = ["INVARIANTS", "Broken", "check_invariants"]

INVARIANTS = (
    "tool_result_without_call",
    "tool_call_without_result",
    "duplicate_tool_call_id",
    "journal_out_of_step",
    "completion_twice",
    "completion_missing",
    "completion_received_twice",
    "completion_not_in_transcript",
    "completion_not_received",
    "path_outside_workspace",
    "thread_left_behind",
    "process_left_behind",
    "task_left_behind",
    "shutdown_too_slow",
)
"""Every invariant's name (the last four are :mod:`retinue.testing.leaks`'s)."""

_SETTLED = ("completed", "failed", "interrupted")
_BUSY = ("restarting", "awaiting_approval", "starting", "running")
_TRUNCATED_NOTE = "the result was over"  # the toolbox's note on a cut result


@dataclass(frozen=True)
class Broken:
    """One broken invariant: its name, where (an agent's path, or ``""``), and what was seen."""

    invariant: str
    path: str
    detail: str

    def __str__(self) -> str:
        """``<invariant> at <path>: <detail>``."""
        where = f" at {self.path}" if self.path else ""
        return f"{self.invariant}{where}: {self.detail}"


@dataclass(frozen=True)
class _Records:
    agents: dict[str, AgentRecord]
    completions: list[CompletionRecord]
    transcripts: dict[str, TranscriptRecord]


def _decode_all(raw: Sequence[tuple[bytes, bytes]], kind: type[Any]) -> list[Any]:
    decoder = msgspec.msgpack.Decoder(kind)
    out = []
    for _, value in raw:
        try:
            out.append(decoder.decode(value))
        except msgspec.DecodeError:
            continue  # a damaged record is the restore's diagnostic, not an invariant
    return out


def _read_folder(folder: Path) -> _Records:
    store = Store(folder, readonly=True)
    try:
        snap = store.snapshot(["agents", "completions", "transcripts"])
    finally:
        store.close()
    agents: list[AgentRecord] = _decode_all(snap.records["agents"], AgentRecord)
    transcripts: list[TranscriptRecord] = _decode_all(snap.records["transcripts"], TranscriptRecord)
    return _Records(
        agents={a.id: a for a in agents},
        completions=_decode_all(snap.records["completions"], CompletionRecord),
        transcripts={t.agent_id: t for t in transcripts},
    )


def _read(source: Runtime | str | os.PathLike[str]) -> _Records:
    """Read the records of a store folder, or of a runtime's store (a backup if it is open)."""
    if isinstance(source, Runtime):
        if source.closed:
            return _read_folder(source.path)
        with tempfile.TemporaryDirectory(prefix="retinue-check-") as tmp:
            return _read_folder(source.backup(Path(tmp) / "copy"))
    return _read_folder(Path(source))


def _shape(path: str, messages: Sequence[TranscriptMessage]) -> list[Broken]:
    """The chat-structure invariants of one transcript."""
    broken: list[Broken] = []
    step: list[str] = []  # the call ids of the assistant step the tool results belong to
    answered: Counter[str] = Counter()

    def close_step(index: int, final: bool) -> None:
        missing = [i for i in step if not answered[i]]
        if missing and not final:
            broken.append(
                Broken("tool_call_without_result", path, f"calls {missing} before message {index}")
            )

    for index, message in enumerate(messages):
        if message.role == "tool":
            call = message.tool_call_id or ""
            if call not in step:
                broken.append(
                    Broken(
                        "tool_result_without_call",
                        path,
                        f"message {index}: result of call {call!r} not in the step before it",
                    )
                )
            elif answered[call]:
                broken.append(
                    Broken("duplicate_tool_call_id", path, f"message {index}: {call!r} twice")
                )
            answered[call] += 1
            continue
        close_step(index, final=False)
        step = [c.id for c in message.tool_calls] if message.role == "assistant" else []
        answered = Counter()
        twins = sorted(i for i, n in Counter(step).items() if n > 1)
        if twins:
            broken.append(
                Broken("duplicate_tool_call_id", path, f"message {index}: calls share ids {twins}")
            )
    close_step(len(messages), final=True)
    return broken


def _mentions(messages: Sequence[TranscriptMessage]) -> tuple[Counter[str], bool]:
    """How often each child path's completion shows in a transcript, and whether it is whole."""
    seen: Counter[str] = Counter()
    whole = True
    for message in messages:
        text = message.content or ""
        if message.role == "user":
            for part in text.split("\n\n"):
                if part.startswith("[subagent:") and "] delegated task" in part:
                    seen[part[len("[subagent:") : part.index("] delegated task")]] += 1
        elif message.role == "tool":
            if _TRUNCATED_NOTE in text:
                whole = False
            for entry in _completion_entries(text):
                seen[entry] += 1
        if "[retinue: older content cut" in text:
            whole = False
    return seen, whole


def _completion_entries(text: str) -> list[str]:
    """The child paths whose completions a coordinator tool result carries."""
    try:
        data = json.loads(text)
    except ValueError:
        return []
    if not isinstance(data, Mapping):
        return []
    results = data.get("results")
    entries = results if isinstance(results, list) else [data]
    return [
        str(e["path"])
        for e in entries
        if isinstance(e, Mapping)
        and isinstance(e.get("path"), str)
        and e.get("status") in _SETTLED
        and e.get("event", "completion") == "completion"
    ]


def _journals(records: _Records) -> list[Broken]:
    """Each journal holds its transcript's last unanswered step, as its agent's record counts."""
    broken: list[Broken] = []
    for agent_id, transcript in records.transcripts.items():
        agent = records.agents.get(agent_id)
        path = agent.path if agent is not None else agent_id
        journal = transcript.journal
        ids = [c.call_id for c in journal.calls] if journal is not None else []
        if ids and transcript.cut == 0 and ids != _unanswered(transcript.messages):
            got = _unanswered(transcript.messages)
            broken.append(
                Broken("journal_out_of_step", path, f"journal holds {ids}, the chat leaves {got}")
            )
        counted = open_count(journal)
        # A running turn's record may count as of its last write (AgentRecord.open_calls).
        running = agent is not None and agent.state is AgentState.RUNNING
        if agent is not None and not running and agent.open_calls != counted:
            detail = f"record counts {agent.open_calls} calls open, the journal {counted}"
            broken.append(Broken("journal_out_of_step", path, detail))
    return broken


def _unanswered(messages: Sequence[TranscriptMessage]) -> list[str]:
    """The ids of the last assistant step's calls that have no result, in order."""
    answered: set[str] = set()
    for message in reversed(messages):
        if message.role == "tool":
            answered.add(message.tool_call_id or "")
            continue
        if message.role != "assistant":
            return []
        return [c.id for c in message.tool_calls if c.id not in answered]
    return []


def _coverage(records: _Records) -> list[Broken]:
    """Each run of each agent is covered by exactly one completion (a task's attempts share one)."""
    broken: list[Broken] = []
    done: dict[str, list[Completion]] = {}
    for record in records.completions:
        done.setdefault(record.completion.agent_id, []).append(record.completion)
    for agent in records.agents.values():
        covered: Counter[int] = Counter()
        for c in done.get(agent.id, []):
            covered.update(range(c.generation - c.attempt + 1, c.generation + 1))
        if agent.state in _BUSY:
            covered.update(range(agent.generation - agent.attempt + 1, agent.generation + 1))
        twice = sorted(g for g, n in covered.items() if n > 1)
        missing = [g for g in range(1, agent.generation + 1) if not covered[g]]
        if twice:
            broken.append(Broken("completion_twice", agent.path, f"runs {twice}"))
        if missing:
            broken.append(Broken("completion_missing", agent.path, f"runs {missing}"))
    return broken


def _received(records: _Records) -> list[Broken]:
    """A model agent's transcript shows each completion it received exactly once."""
    broken: list[Broken] = []
    delivered: dict[str, Counter[str]] = {}
    held: dict[str, Counter[str]] = {}
    for record in records.completions:
        if record.delivered and record.recipient_id is not None:
            delivered.setdefault(record.recipient_id, Counter())[record.completion.path] += 1
            if _held(records.agents.get(record.recipient_id), record):
                held.setdefault(record.recipient_id, Counter())[record.completion.path] += 1
    for agent_id, transcript in records.transcripts.items():
        agent = records.agents.get(agent_id)
        if agent is None:
            continue
        shown, whole = _mentions(transcript.messages)
        then = transcript.journal.then if transcript.journal is not None else None
        if then:  # a turn's input kept in its open step's journal, to join the chat after it
            shown += _mentions([TranscriptMessage(role="user", content=then)])[0]
        got = delivered.get(agent_id, Counter())
        holding = held.get(agent_id, Counter())
        for child in sorted(set(shown) | set(got)):
            if shown[child] > got[child]:
                detail = f"{child}'s completions shown {shown[child]} times, delivered {got[child]}"
                broken.append(Broken("completion_received_twice", agent.path, detail))
            elif shown[child] < got[child] - holding[child] and whole and transcript.cut == 0:
                detail = f"{got[child]} of {child}'s completions delivered, {shown[child]} shown"
                broken.append(Broken("completion_not_in_transcript", agent.path, detail))
    return broken


def _held(recipient: AgentRecord | None, record: CompletionRecord) -> bool:
    """Whether ``record`` is held by its recipient's turn, not yet in its transcript.

    A model turn's wait marks what it receives delivered (tagged with the
    turn's generation) one commit before the step that shows it: a store
    left by a crash between the two has the recipient still running in that
    generation, and its next open hands the completion to the next turn
    (:meth:`retinue.actors.tree.Tree.load`, the same rule).
    """
    return (
        recipient is not None
        and recipient.state == "running"
        and record.delivered_generation == recipient.generation
    )


def _host_took(agent: AgentRecord, generation: int) -> bool:
    """Whether the host's receipt mark on ``agent`` covers its run ``generation``."""
    return generation <= agent.host_received and generation not in agent.host_returned


def _host(
    records: _Records, host_received: Iterable[Completion], ledger_complete: bool
) -> list[Broken]:
    """The host received each completion its waits returned once, and the store knows it."""
    broken: list[Broken] = []
    ledger = Counter((c.agent_id, c.generation) for c in host_received)
    by_id = {(r.completion.agent_id, r.completion.generation): r for r in records.completions}
    for key, times in sorted(ledger.items()):
        record = by_id.get(key)
        agent = records.agents.get(key[0])
        path = agent.path if agent is not None else key[0]
        if times > 1:
            broken.append(Broken("completion_received_twice", path, f"run {key[1]}: {times} waits"))
        # A host wait may take any agent's completion: its receipt is the mark on
        # the agent's record. The completion's own delivered flag belongs to its
        # recipient: the host only when it was routed to the host (else a parent,
        # who receives it on its own, whatever the host took).
        host_mark = agent is not None and _host_took(agent, key[1])
        unmarked = record is not None and record.recipient_id is None and not record.delivered
        if (agent is not None and not host_mark) or unmarked:
            detail = f"run {key[1]} was returned by a wait but is still pending"
            broken.append(Broken("completion_not_received", path, detail))
    if ledger_complete:
        for key, record in sorted(by_id.items()):
            agent = records.agents.get(key[0])
            took = agent is not None and _host_took(agent, key[1])
            if key not in ledger and (took or (record.recipient_id is None and record.delivered)):
                detail = f"run {key[1]} marked received by the host; no wait returned it"
                broken.append(Broken("completion_not_received", record.completion.path, detail))
    return broken


def _paths(records: _Records, forbidden: Sequence[str]) -> list[Broken]:
    """No tool result (bash's output aside) shows a forbidden text (a host path, a canary)."""
    broken: list[Broken] = []
    for agent_id, transcript in records.transcripts.items():
        agent = records.agents.get(agent_id)
        names: dict[str, str] = {}
        for index, message in enumerate(transcript.messages):
            for call in message.tool_calls:
                names[call.id] = call.name
            if message.role != "tool" or not message.content:
                continue
            tool = message.name or names.get(message.tool_call_id or "", "")
            if tool == "bash" and not message.content.startswith('{"error"'):
                continue  # bash is not confined to the workspace (see docs/guides/tools.md)
            for text in forbidden:
                if text in message.content:
                    where = agent.path if agent is not None else agent_id
                    detail = f"message {index} ({tool or 'tool'}) shows {text!r}"
                    broken.append(Broken("path_outside_workspace", where, detail))
    return broken


def _forbidden(workspace: str | os.PathLike[str] | None, extra: Iterable[str]) -> list[str]:
    texts = [t for t in extra if t]
    if workspace is not None:
        given = Path(workspace).absolute()
        texts += {str(given), str(given.resolve())}
    return texts


def check_invariants(
    source: Runtime | str | os.PathLike[str],
    *,
    host_received: Iterable[Completion] | None = None,
    ledger_complete: bool = True,
    workspace: str | os.PathLike[str] | None = None,
    forbidden: Iterable[str] = (),
) -> list[Broken]:
    """Return the invariants a store breaks (see the module docstring); empty if all hold.

    ``source``: a store folder (no writer of this process may hold it: read a
    runtime of this process through ``source=rt``), or a runtime (open: read
    through a backup; closed: its folder). ``host_received``: every completion
    the host's waits returned, in any order (None: the host's side is not
    checked); ``ledger_complete=False`` when a process that received some may
    have died before noting them (a crash test). ``workspace``: its host path
    must show in no tool result, nor any of ``forbidden``.

    Raises:
        StoreError: the store cannot be read (missing, locked by another
            process's exclusive open, damaged).
    """
    records = _read(source)
    broken: list[Broken] = []
    for agent_id, transcript in records.transcripts.items():
        agent = records.agents.get(agent_id)
        broken += _shape(agent.path if agent is not None else agent_id, transcript.messages)
    broken += _journals(records)
    broken += _coverage(records)
    broken += _received(records)
    if host_received is not None:
        broken += _host(records, host_received, ledger_complete)
    texts = _forbidden(workspace, forbidden)
    if texts:
        broken += _paths(records, texts)
    return broken
