"""Chat: what the model sees and says, as retinue keeps it (its home is now ``retinue.protocol``).

The chat messages of a turn and their stored transcript (``ChatMessage``,
``encode_transcript``/``decode_transcript``, ``turn_input``, the repair of a
call left without its result), the transcript's cut to its bound, and text
made storable once, where it arrives from a model or a tool
(``assistant_message``, ``piece``, ``tool_outcome``).

These are the stored transcript's vocabulary, pure data and rules, so they
live in :mod:`retinue.protocol.chat`, :mod:`retinue.protocol.transcript_cut` and
:mod:`retinue.protocol.arrival`, beside the records they encode: a model turn
then crosses no folder of its own for them (``python -m stress.hops``). This
package keeps the names it always offered, for whoever imports them from here.
"""

from __future__ import annotations

from retinue.protocol.arrival import assistant_message, piece, tool_outcome
from retinue.protocol.chat import (
    GENERATION_TAG,
    ChatMessage,
    bound_at,
    decode_transcript,
    encode_transcript,
    for_model,
    render_message,
    repair_dangling,
    stored_calls,
    stored_journal,
    timed_call,
    turn_input,
    unanswered_calls,
)

__all__ = [
    "GENERATION_TAG",
    "ChatMessage",
    "assistant_message",
    "bound_at",
    "decode_transcript",
    "encode_transcript",
    "for_model",
    "piece",
    "render_message",
    "repair_dangling",
    "stored_calls",
    "stored_journal",
    "timed_call",
    "tool_outcome",
    "turn_input",
    "unanswered_calls",
]
