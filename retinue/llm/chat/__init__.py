"""Chat: what the model sees and says, as retinue keeps it.

The chat messages of a turn and their stored transcript (``ChatMessage``,
``encode_transcript``/``decode_transcript``, ``turn_input``, the repair of a
call left without its result), the transcript's cut to its bound, and text
made storable once, where it arrives from a model or a tool
(``assistant_message``, ``piece``, ``tool_outcome``).

The rest of the package may use the names in ``__all__``; the modules are private.
"""

from __future__ import annotations

from retinue.llm.chat._arrival import assistant_message, piece, tool_outcome
from retinue.llm.chat._conversation import (
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
