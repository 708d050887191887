"""What a read of one agent shows: its snapshot, its mailbox, its pending results, its transcript.

:class:`AgentDetail` is the answer of ``Runtime.inspect`` (on a writer or a
read-only runtime): everything an operator looks at for one agent, read in
one consistent view of the store.
"""

from __future__ import annotations

import msgspec

from retinue.protocol.messages import AgentInfo, Completion, Message
from retinue.protocol.records import TranscriptMessage

__all__ = ["AgentDetail"]


class AgentDetail(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One agent in full, as the store has it.

    ``unread`` are the messages waiting in its mailbox (oldest first);
    ``pending`` the completions routed to it that it has not received yet;
    ``transcript`` the last messages of its stored LLM conversation (at most
    the tail asked for), of ``transcript_length`` in all, ``transcript_cut``
    of them replaced by a cut marker over its life.
    """

    info: AgentInfo
    unread: tuple[Message, ...] = ()
    pending: tuple[Completion, ...] = ()
    transcript: tuple[TranscriptMessage, ...] = ()
    transcript_length: int = 0
    transcript_cut: int = 0
