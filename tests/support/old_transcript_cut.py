"""The transcript cut as it was before its shortcut and its memo, kept verbatim as a reference.

``tests/llm/test_transcript_memo.py`` checks that every step a turn stores now
(the cut's shortcut, the copy-on-write cut, the memo's sizes and records) is
the one this cut and an encoding without a memo gave. Its own constants and
helpers are those of ``retinue/protocol/transcript_cut.py`` at the time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from retinue.protocol.text import truncate_utf8

__all__ = ["cut_transcript", "message_size"]

ChatMessage = dict[str, Any]

CUT_MARKER = "[retinue: older content cut to keep the transcript within transcript_max_bytes]"
"""What replaces a content cut from a stored transcript."""
CUT_ARGUMENTS = json.dumps({"retinue_cut": CUT_MARKER})
"""What replaces the arguments of an old tool call cut from a stored transcript (valid JSON)."""
TASK_FLOOR_BYTES = 1024
"""The current task keeps at least this much of its content, whatever the bound."""
GENERATION_TAG = "retinue_generation"
"""The key a loaded chat message keeps its stored generation under (never sent to a model:
see :func:`~retinue.protocol.chat.for_model`; not counted in its size)."""


_JSON = json.JSONEncoder(ensure_ascii=False)
"""``json.dumps(..., ensure_ascii=False)``'s encoder, built once (dumps builds one per call)."""


def message_size(message: ChatMessage) -> int:
    """Return the approximate stored size of one message, in bytes (its generation tag aside)."""
    if GENERATION_TAG in message:
        message = {k: v for k, v in message.items() if k != GENERATION_TAG}
    return len(_JSON.encode(message).encode("utf-8", "surrogatepass")) + 8


def _call_ids(message: ChatMessage) -> list[Any]:
    if message.get("role") != "assistant":
        return []
    return [call.get("id") for call in message.get("tool_calls") or ()]


def _units(messages: list[ChatMessage]) -> tuple[list[list[ChatMessage]], int]:
    """Group messages into units; drop tool results without their call. Return (units, dropped)."""
    units: list[list[ChatMessage]] = []
    dropped = 0
    open_ids: set[Any] = set()  # calls of the latest assistant unit still without a result
    for message in messages:
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if units and call_id in open_ids:
                units[-1].append(message)
                open_ids.discard(call_id)
            else:
                dropped += 1  # an orphan: no provider accepts it
            continue
        units.append([message])
        open_ids = set(_call_ids(message))
    return units, dropped


class _Cutter:
    """One cut: the units, their running size, and what is protected."""

    def __init__(self, units: list[list[ChatMessage]], task: ChatMessage | None) -> None:
        self.units = units
        self.task = task
        self.total = sum(message_size(m) for unit in units for m in unit)
        self.cut = 0

    def over(self, max_bytes: int) -> bool:
        return self.total > max_bytes

    def _protected(self, unit: list[ChatMessage]) -> bool:
        return unit is self.units[-1] or any(  # callers only run with units present
            m is self.task or m.get("role") == "system" for m in unit
        )

    def _set(self, message: ChatMessage, key: str, value: Any) -> None:
        before = message_size(message)
        message[key] = value
        self.total += message_size(message) - before
        self.cut += 1

    def replace_contents(self, roles: Sequence[str], max_bytes: int) -> None:
        """Replace the oldest contents of ``roles`` with the marker, unprotected units only."""
        for unit in self.units:
            if self._protected(unit):
                continue
            for message in unit:
                if not self.over(max_bytes):
                    return
                content = message.get("content")
                if (
                    message.get("role") in roles
                    and isinstance(content, str)
                    and len(content) > len(CUT_MARKER)
                ):
                    self._set(message, "content", CUT_MARKER)

    def replace_arguments(self, max_bytes: int) -> None:
        """Replace the oldest oversized tool-call arguments with :data:`CUT_ARGUMENTS`."""
        for unit in self.units:
            if self._protected(unit) or not self.over(max_bytes):
                continue
            head = unit[0]
            calls = head.get("tool_calls")
            if not calls:
                continue
            kept: list[Any] = []
            changed = False
            for call in calls:
                function = dict(call.get("function") or {})
                arguments = function.get("arguments")
                if isinstance(arguments, str) and len(arguments) > len(CUT_ARGUMENTS):
                    function["arguments"] = CUT_ARGUMENTS
                    call = {**call, "function": function}
                    changed = True
                kept.append(call)
            if changed:
                self._set(head, "tool_calls", kept)

    def drop_units(self, max_bytes: int) -> None:
        """Drop whole unprotected units, oldest first, until the transcript fits."""
        index = 0
        while self.over(max_bytes) and index < len(self.units):
            unit = self.units[index]
            if self._protected(unit):
                index += 1
                continue
            self.total -= sum(message_size(m) for m in unit)
            self.cut += len(unit)
            del self.units[index]

    def shorten_task(self, max_bytes: int) -> None:
        """Cut the task's own content when it alone keeps the transcript over the bound."""
        task = self.task
        content = None if task is None else task.get("content")
        if task is None or not isinstance(content, str) or not self.over(max_bytes):
            return
        room = len(content.encode("utf-8", "surrogatepass")) - (self.total - max_bytes)
        shorter, cut = truncate_utf8(content, max(room, TASK_FLOOR_BYTES))
        if cut:
            self._set(task, "content", shorter)

    def last_unit_results(self, max_bytes: int) -> None:
        """As a last resort, cut the earlier tool results of the step in progress."""
        for message in self.units[-1][1:-1]:
            if not self.over(max_bytes):
                return
            content = message.get("content")
            if isinstance(content, str) and len(content) > len(CUT_MARKER):
                self._set(message, "content", CUT_MARKER)


def _pick_task(messages: Sequence[ChatMessage], task_at: int | None) -> int | None:
    if (
        task_at is not None
        and 0 <= task_at < len(messages)
        and (messages[task_at].get("role") == "user")
    ):
        return task_at
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return None


def cut_transcript(
    messages: Sequence[ChatMessage], max_bytes: int, task_at: int | None = None
) -> tuple[list[ChatMessage], int, int | None]:
    """Return ``messages`` cut to fit ``max_bytes``, the number of cuts, and the task's new index.

    ``task_at`` is the index of the current task (the ``user`` message that
    opened the running turn); None, or an index that is not a ``user``
    message, means the last ``user`` message. The input is not changed. See
    the module docstring for what is kept and in which order things go.
    """
    copies = [dict(m) for m in messages]
    picked = _pick_task(copies, task_at)
    task = None if picked is None else copies[picked]
    units, orphans = _units(copies)
    cutter = _Cutter(units, task)
    cutter.cut += orphans
    steps: tuple[Callable[[int], None], ...] = (
        lambda bound: cutter.replace_contents(("tool",), bound),
        cutter.replace_arguments,
        lambda bound: cutter.replace_contents(("user", "assistant"), bound),
        cutter.drop_units,
        cutter.shorten_task,
        cutter.last_unit_results,
    )
    for step in steps:
        if not units or not cutter.over(max_bytes):
            break
        step(max_bytes)
    out = [m for unit in cutter.units for m in unit]
    where = next((i for i, m in enumerate(out) if m is task), None)
    return out, cutter.cut, where
