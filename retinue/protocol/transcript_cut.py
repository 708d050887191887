"""Keeping a stored transcript within ``Limits.transcript_max_bytes`` without breaking the chat.

A provider refuses a chat in which a ``tool`` message has no call before it
(a 400 from OpenAI-compatible servers), and a model that lost its own task
cannot finish it. So the cut works on *units*: a message alone, or an
assistant message together with the tool results of its calls, and it keeps,
whatever the bound:

- the current task (the ``user`` message that opened the running turn), whose
  content is cut (its start kept, at least :data:`TASK_FLOOR_BYTES`, with a
  marker) only if it alone is too big;
- the last unit (the step in progress), whole but for the contents of its
  earlier tool results as a last resort;
- every ``system`` message (the runner does not store its system prompt);
- the chat's structure: no tool result without its call, no call without its
  results, no transcript that starts with a tool result.

In order, until the transcript fits: the oldest tool results' contents become
:data:`CUT_MARKER`; the oldest oversized tool-call arguments become
:data:`CUT_ARGUMENTS` (valid JSON holding the marker); the oldest other
contents become the marker; then whole units go, oldest first (those before
the task, then those between the task and the last unit). Tool results
left without their call by an older version's cut are removed on the way.

The common case costs little: a transcript that fits comes back as it is (a
new list of the same messages, nothing copied), which a cheap upper bound of
its size usually shows; a turn's session keeps each message's bound, size
and record from one step to the next (:mod:`retinue.protocol.transcript_memo`),
so a step sizes only the messages it added.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from retinue.protocol.text import truncate_utf8
from retinue.protocol.transcript_memo import TranscriptMemo

__all__ = [
    "CUT_ARGUMENTS",
    "CUT_MARKER",
    "GENERATION_TAG",
    "TASK_FLOOR_BYTES",
    "cut_transcript",
    "fits",
    "message_size",
    "task_index",
]

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
_C_ENCODER: Callable[..., Callable[[Any, int], Sequence[str]]] | None = getattr(
    json.encoder, "c_make_encoder", None
)


def _json_text(message: ChatMessage) -> str:
    """``_JSON.encode(message)`` for a dict, without its two Python frames: the same C
    encoder :meth:`json.JSONEncoder.iterencode` builds (fresh markers: circular check)."""
    if _C_ENCODER is None:  # an interpreter without json's C speedups
        return _JSON.encode(message)
    encode = _C_ENCODER(
        {}, _JSON.default, json.encoder.encode_basestring, None, ": ", ", ", False, False, True
    )
    return "".join(encode(message, 0))


def message_size(message: ChatMessage) -> int:
    """Return the approximate stored size of one message, in bytes (its generation tag aside)."""
    if GENERATION_TAG in message:
        message = {k: v for k, v in message.items() if k != GENERATION_TAG}
    text = _json_text(message)
    return (len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))) + 8


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
    """One cut: the units, their running size, and what is protected.

    It changes no message it was given: a message it cuts is copied first
    (copy on write), and the copy takes its place in its unit.
    """

    def __init__(
        self,
        units: list[list[ChatMessage]],
        task: ChatMessage | None,
        sizes: dict[int, int],
    ) -> None:
        """``sizes``: the messages' sizes by identity (those missing are computed)."""
        self.units = units
        self.task = task
        self.sizes = sizes
        self.copies: set[int] = set()  # the identities of this cut's own copies
        self.total = sum(self.size(m) for unit in units for m in unit)
        self.cut = 0

    def size(self, message: ChatMessage) -> int:
        """:func:`message_size` of ``message``, known or computed (and kept)."""
        known = self.sizes.get(id(message))
        if known is None:
            known = self.sizes[id(message)] = message_size(message)
        return known

    def over(self, max_bytes: int) -> bool:
        return self.total > max_bytes

    def _protected(self, unit: list[ChatMessage]) -> bool:
        return unit is self.units[-1] or any(  # callers only run with units present
            m is self.task or m.get("role") == "system" for m in unit
        )

    def _set(self, unit: list[ChatMessage], index: int, key: str, value: Any) -> None:
        """Set ``key`` of ``unit[index]`` (a copy of it, the first time) to ``value``."""
        message = unit[index]
        before = self.size(message)
        if id(message) not in self.copies:
            copy = dict(message)
            self.copies.add(id(copy))
            if message is self.task:
                self.task = copy
            unit[index] = message = copy
        message[key] = value
        self.sizes[id(message)] = size = message_size(message)
        self.total += size - before
        self.cut += 1

    def replace_contents(self, roles: Sequence[str], max_bytes: int) -> None:
        """Replace the oldest contents of ``roles`` with the marker, unprotected units only."""
        for unit in self.units:
            if self._protected(unit):
                continue
            for index, message in enumerate(unit):
                if not self.over(max_bytes):
                    return
                content = message.get("content")
                if (
                    message.get("role") in roles
                    and isinstance(content, str)
                    and len(content) > len(CUT_MARKER)
                ):
                    self._set(unit, index, "content", CUT_MARKER)

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
                self._set(unit, 0, "tool_calls", kept)

    def drop_units(self, max_bytes: int) -> None:
        """Drop whole unprotected units, oldest first, until the transcript fits."""
        index = 0
        while self.over(max_bytes) and index < len(self.units):
            unit = self.units[index]
            if self._protected(unit):
                index += 1
                continue
            self.total -= sum(self.size(m) for m in unit)
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
            unit = next(u for u in self.units if any(m is task for m in u))
            self._set(unit, next(i for i, m in enumerate(unit) if m is task), "content", shorter)

    def last_unit_results(self, max_bytes: int) -> None:
        """As a last resort, cut the earlier tool results of the step in progress."""
        unit = self.units[-1]
        for index in range(1, len(unit) - 1):
            if not self.over(max_bytes):
                return
            content = unit[index].get("content")
            if isinstance(content, str) and len(content) > len(CUT_MARKER):
                self._set(unit, index, "content", CUT_MARKER)


def task_index(messages: Sequence[ChatMessage], task_at: int | None) -> int | None:
    """The index of the current task in ``messages``: ``task_at`` if it is a ``user``
    message there, else the last ``user`` message's (None: there is none)."""
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


_Scan = tuple[frozenset[Any], bool, int, int]
"""What :func:`fits` knows after a message: the latest unit's calls still without a result,
whether a unit has started, the orphans so far (as :func:`_units` would find them; no unit
is built), and the cheap upper bound of the messages' sizes so far (:func:`_size_bound`)."""
_START: _Scan = (frozenset(), False, 0, 0)
_JSON_GROWTH = 6
"""How much longer a message's :func:`message_size` JSON can be than its compact JSON
(msgspec's) at most: a character ``json`` escapes as ``\\u00XX`` where msgspec writes
it raw (6 bytes for 1); separators (``": "``, ``", "``: 2 for 1); numbers and
literals keep their length, give or take an exponent's sign. Only a message that its
compact JSON holds exactly is bounded so (:func:`_size_bound`)."""
_COMPACT = msgspec.json.Encoder().encode
_FROM_COMPACT = msgspec.json.Decoder().decode


def _size_bound(message: ChatMessage) -> int:
    """Return an upper bound of :func:`message_size`, cheaply: from the message's compact
    JSON when that JSON holds it exactly (read back, it equals the message), else the size.
    """
    try:
        compact = _COMPACT(message)
        if _FROM_COMPACT(compact) == message:
            return _JSON_GROWTH * len(compact) + 8
    except (TypeError, ValueError, UnicodeError, msgspec.MsgspecError):
        pass  # a value compact JSON cannot hold (a lone surrogate, an object)
    return message_size(message)


def _scan_step(state: _Scan, message: ChatMessage) -> _Scan:
    """:func:`_units`'s step over one message, on its state alone, with the size bound."""
    open_ids, started, orphans, bound = state
    bound += _size_bound(message)
    if message.get("role") == "tool":
        call_id = message.get("tool_call_id")
        if started and call_id in open_ids:
            return open_ids - {call_id}, True, orphans, bound
        return open_ids, started, orphans + 1, bound
    return frozenset(_call_ids(message)), True, orphans, bound


def fits(messages: Sequence[ChatMessage], max_bytes: int, memo: TranscriptMemo | None) -> bool:
    """Whether ``messages`` are within ``max_bytes`` and have no orphan: nothing to cut
    (``memo`` then holds ``messages``: :meth:`~TranscriptMemo.hold`).

    Sizes are bounded from above first (cheap); only when the bound is over
    ``max_bytes`` are the exact sizes summed (with a ``memo``, each message's
    once; the running state of the scan is kept too, so a chat that grew is
    scanned from where it was, not from its start).
    """
    if memo is None:
        state = _START
        for message in messages:
            state = _scan_step(state, message)
    else:
        states = memo.scan("fits", messages, _scan_step, _START)
        state = states[-1] if states else _START
    if state[2]:
        return False
    if state[3] <= max_bytes:
        return True
    if memo is None:
        return sum(message_size(m) for m in messages) <= max_bytes
    return sum(memo.held_column("size", message_size)) <= max_bytes


def cut_transcript(
    messages: Sequence[ChatMessage],
    max_bytes: int,
    task_at: int | None = None,
    *,
    memo: TranscriptMemo | None = None,
) -> tuple[list[ChatMessage], int, int | None]:
    """Return ``messages`` cut to fit ``max_bytes``, the number of cuts, and the task's new index.

    ``task_at`` is the index of the current task (the ``user`` message that
    opened the running turn); None, or an index that is not a ``user``
    message, means the last ``user`` message. The input is not changed. See
    the module docstring for what is kept and in which order things go.

    A transcript that fits (and has no tool result without its call), the
    common case, comes back as a new list of the same messages, nothing
    copied; a cut one as a list of copies, the cut ones changed. ``memo``
    keeps the messages' sizes from one call to the next
    (:class:`~retinue.protocol.transcript_memo.TranscriptMemo`): only those
    added or changed since are sized again.
    """
    if fits(messages, max_bytes, memo):
        return list(messages), 0, task_index(messages, task_at)
    return _cut_all(messages, max_bytes, task_at, memo)


def _cut_all(
    messages: Sequence[ChatMessage],
    max_bytes: int,
    task_at: int | None,
    memo: TranscriptMemo | None = None,
) -> tuple[list[ChatMessage], int, int | None]:
    """:func:`cut_transcript` without its shortcut: the messages cut (copied where cut).

    The task is copied at once, so that it is known by its place in the chat
    even if its dict is in the chat twice.
    """
    sizes = {}
    if memo is not None:  # the sizes of the messages as given (the task's is its copy's)
        known = memo.column("size", messages, message_size)
        sizes = {id(m): size for m, size in zip(messages, known, strict=True)}
    chat = list(messages)
    picked = task_index(chat, task_at)
    task = None
    if picked is not None:
        task = chat[picked] = dict(chat[picked])
    units, orphans = _units(chat)
    cutter = _Cutter(units, task, sizes)
    if task is not None:
        cutter.copies.add(id(task))
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
    where = next((i for i, m in enumerate(out) if m is cutter.task), None)
    return out, cutter.cut, where
