"""What a read of one agent shows: its snapshot, its mailbox, its pending results, its transcript.

:class:`AgentDetail` is the answer of ``Runtime.inspect`` (on a writer or a
read-only runtime): everything an operator looks at for one agent, read in
one consistent view of the store.
"""

from __future__ import annotations

import msgspec

from retinue.protocol.messages import AgentInfo, Completion, Message
from retinue.protocol.records import ModelCallRecord, ToolStep, TranscriptMessage

__all__ = [
    "AgentCounts",
    "AgentDetail",
    "Backlog",
    "CompactionReport",
    "InDoubtCall",
    "in_doubt_calls",
]


class InDoubtCall(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A tool call in doubt: it was running when its turn stopped and has no result.

    It may or may not have taken effect. ``tool`` is the name it is granted
    by, ``effect`` the class it ran under, ``idempotency_key`` the key every
    run of it carries, ``attempt`` its runs so far; ``generation`` and
    ``step`` the turn and step that made it; ``arguments`` its JSON text (as
    the transcript keeps it). ``awaiting_approval``: a person is asked whether
    it runs again (``Profile(in_doubt="approve")``). The agent's next turn acts
    on it (``ToolCallInDoubt`` says how).
    """

    call_id: str
    tool: str
    idempotency_key: str
    effect: str
    generation: int
    step: int
    attempt: int = 1
    arguments: str = ""
    awaiting_approval: bool = False


def in_doubt_calls(
    journal: ToolStep | None, messages: tuple[TranscriptMessage, ...], *, running: bool
) -> tuple[InDoubtCall, ...]:
    """Return the calls of a stored ``journal`` that are in doubt.

    A call that may have started (``running``) is in doubt once its agent's
    turn is not running (``running`` False); one found in doubt and waiting
    for a person's answer is in doubt either way. ``messages`` are the
    transcript's, whose last assistant message holds the calls' arguments.
    """
    if journal is None or not journal.calls:
        return ()
    arguments: dict[str, str] = {}
    for message in reversed(messages):
        if message.role == "assistant" and message.tool_calls:
            arguments = {c.id: c.arguments for c in message.tool_calls}
            break
    out: list[InDoubtCall] = []
    for call in journal.calls:
        waiting = call.state == "waiting" and call.in_doubt
        if not waiting and not (call.state == "running" and not running):
            continue
        out.append(
            InDoubtCall(
                call_id=call.call_id,
                tool=call.tool,
                idempotency_key=call.key,
                effect=call.effect,
                generation=journal.generation,
                step=journal.step,
                attempt=call.attempt,
                arguments=arguments.get(call.call_id, ""),
                awaiting_approval=waiting,
            )
        )
    return tuple(out)


class AgentDetail(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One agent in full, as the store has it.

    ``unread`` are the messages waiting in its mailbox (oldest first);
    ``pending`` the completions routed to it that it has not received yet;
    ``transcript`` the last messages of its stored LLM conversation (at most
    the tail asked for), of ``transcript_length`` in all, ``transcript_cut``
    of them replaced by a cut marker over its life; ``calls`` its last model
    calls as its transcript keeps them (when each started and ended);
    ``trace`` the W3C ``traceparent`` its turns' spans continue (None: the
    runtime traced nothing for it); ``in_doubt`` its tool calls in doubt.
    """

    info: AgentInfo
    unread: tuple[Message, ...] = ()
    pending: tuple[Completion, ...] = ()
    transcript: tuple[TranscriptMessage, ...] = ()
    transcript_length: int = 0
    transcript_cut: int = 0
    calls: tuple[ModelCallRecord, ...] = ()
    trace: str | None = None
    in_doubt: tuple[InDoubtCall, ...] = ()


class Backlog(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What is waiting to be received across the whole store (``Runtime.backlog``).

    ``unread_messages`` counts the unread messages of every mailbox, the
    host's included (``host_unread_messages`` of them); ``pending_completions``
    the completions routed but not received yet, by agents and the host
    (``host_pending_completions`` of them).
    """

    unread_messages: int = 0
    pending_completions: int = 0
    host_unread_messages: int = 0
    host_pending_completions: int = 0


class AgentCounts(msgspec.Struct, frozen=True, kw_only=True):
    """How many agents the store holds, by state and by profile (``Runtime.agent_counts``).

    ``by_state`` counts every agent (closed ones included) by its state's value;
    ``live_by_profile`` the live (not closed) agents by profile. A writer keeps
    both as its tree changes, so reading them never walks the agents.
    """

    by_state: dict[str, int] = msgspec.field(default_factory=dict)
    live_by_profile: dict[str, int] = msgspec.field(default_factory=dict)


class CompactionReport(msgspec.Struct, frozen=True, kw_only=True):
    """How many records one compaction removed; with a reclaim, the file before and after.

    ``file_bytes_before`` and ``file_bytes_after`` are the data file's sizes
    around ``compact(reclaim=True)``'s swap (0 when no reclaim was asked).
    """

    messages: int = 0
    agents: int = 0
    completions: int = 0
    file_bytes_before: int = 0
    file_bytes_after: int = 0

    @property
    def reclaimed_bytes(self) -> int:
        """Bytes a reclaim gave back to the file system (0 without one)."""
        return max(0, self.file_bytes_before - self.file_bytes_after)
