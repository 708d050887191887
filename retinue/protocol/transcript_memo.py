"""What a turn's stored transcript costs to compute, kept from one step to the next.

Every step of a model turn stores the whole chat: each message is sized for
the bound (:func:`~retinue.protocol.transcript_cut.cut_transcript`) and
converted to its record (:func:`~retinue.protocol.chat.encode_transcript`).
A step only adds messages at the end, so doing that for every message at
every step makes a turn of ``n`` steps cost ``O(n^2)``. A
:class:`TranscriptMemo` keeps those per-message values for the leading part
of the chat that is still made of the same messages, and computes them only
for the rest.

A message is known by its identity: the memo holds the messages it computed
values for and, at every use, checks that the chat starts with those very
objects (pointers compared, no message read again). A list is compared with
the held messages in one list comparison, which takes the held object as
equal without reading it and counts an equal copy as the held message (every
value the memo keeps depends on a message's content alone). From the first
message that is neither on (one the cut replaced, one a repair added, a
list edited in place: an item replaced, inserted or removed), the running
states are computed again, and so are the values of every message that is not
one the memo held (a message the change only moved keeps its values). So a
message in a chat is a value: it is changed by
replacing it with a new dict, as the cut, the repair and a fork do, never by
editing it in place (an edit in place would keep its old size and record).
Nothing in retinue edits a chat's message in place (litellm replaces an
assistant message's ``tool_calls`` with copies equal to them, which changes
nothing stored).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

__all__ = ["TranscriptMemo"]

ChatMessage = dict[str, Any]
T = TypeVar("T")
S = TypeVar("S")
_MISSING: Any = object()


class TranscriptMemo:
    """Per-message values of one chat (sizes, records), kept for its unchanged leading part.

    One memo serves one chat that grows at its end, e.g. a turn's history
    (:class:`~retinue.llm.turn._session.TurnSession` keeps one). It holds
    references to the chat's messages (so an identity is never reused while
    it is held). It is not thread-safe: one chat, one thread.
    """

    def __init__(self) -> None:
        """An empty memo (it learns the chat at its first use)."""
        self._held: list[ChatMessage] = []
        self._columns: dict[Hashable, list[Any]] = {}
        # The values of the messages past the last change, by identity (their messages kept
        # alive with them): a message the change only moved (a cut before it) reuses them.
        self._moved: dict[Hashable, dict[int, Any]] = {}
        self._moved_messages: list[ChatMessage] = []

    def hold(self, messages: Sequence[ChatMessage]) -> None:
        """Hold ``messages``: keep the values of the longest leading run of the same objects,
        drop the others (the values of the messages after that run are kept aside, by
        identity, for a message the change only moved)."""
        held = self._held
        count = len(held)
        if (
            count > len(messages)
            or (  # a list's leading items compared in C, then any
                messages[:count] != held  # sequence's (a tuple is never equal to a list)
                and not all(map(operator.is_, messages, held))
            )
        ):
            keep = next(
                (i for i, (m, h) in enumerate(zip(messages, held, strict=False)) if m is not h),
                min(count, len(messages)),
            )
            self._moved_messages = held[keep:]
            self._moved = {
                key: {id(m): v for m, v in zip(self._moved_messages, values[keep:], strict=False)}
                for key, values in self._columns.items()
            }
            del held[keep:]
            for values in self._columns.values():
                del values[keep:]
        held.extend(messages[len(held) :])

    def column(
        self, key: Hashable, messages: Sequence[ChatMessage], compute: Callable[[ChatMessage], T]
    ) -> list[T]:
        """Return ``[compute(m) for m in messages]``, computing only what the memo lacks.

        ``key`` names the value (one per kind of value, and per anything else
        ``compute`` depends on, e.g. ``("record", generation)``). The list
        returned is the memo's own: read it, never change it.
        """
        self.hold(messages)
        return self.held_column(key, compute)

    def held_column(self, key: Hashable, compute: Callable[[ChatMessage], T]) -> list[T]:
        """:meth:`column` of the messages the memo holds, as the last :meth:`hold` (or
        :meth:`column`, :meth:`scan`) left them: for a caller that holds the chat and
        reads several values of it, without checking the chat again for each."""
        held = self._held
        values: list[T] = self._columns.setdefault(key, [])
        if len(values) < len(held):
            moved = self._moved.get(key, {})
            for message in held[len(values) :]:
                known = moved.get(id(message), _MISSING)
                values.append(compute(message) if known is _MISSING else known)
        return values

    def scan(
        self,
        key: Hashable,
        messages: Sequence[ChatMessage],
        step: Callable[[S, ChatMessage], S],
        start: S,
    ) -> list[S]:
        """Return the running states of ``messages``, computing only what the memo lacks.

        The state after message ``i`` is ``step(state after i - 1, messages[i])``
        (``start`` before the first). As :meth:`column`: ``key`` names it, and
        the list returned is the memo's own (never change it).
        """
        self.hold(messages)
        states: list[S] = self._columns.setdefault(key, [])
        state = states[-1] if states else start
        for message in messages[len(states) :]:
            state = step(state, message)
            states.append(state)
        return states
