"""The timeline's turns and model calls as the store keeps them, for a view with no events.

A view of a store a writer in another process fills (``retinue web --store``)
sees none of that runtime's events. Each LLM agent's stored transcript keeps
the times of its newest model calls (:class:`~retinue.protocol.records.ModelCallRecord`,
at most ``Limits.transcript_max_calls``), each with its turn's generation and
start. From them come a ``model`` span per call and a ``turn`` span per
earlier turn (from its start to its last call's answer); the agent's current
or last turn is drawn from its row (its start and settle times), as before.
A turn that made no model call (a plain runner's) shows only as that row.
Each agent's read costs about a ``Runtime.inspect`` (a running agent's, on a
large store, a page check and a scan of the completions; another's, a few
gets), so the reads stop once ``WebOptions.timeline_read_s`` is spent.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from retinue.errors import UnknownAgent
from retinue.protocol.details import AgentDetail
from retinue.web.activity import Span

if TYPE_CHECKING:
    from retinue.runtime import Runtime

__all__ = ["read_spans", "stored_spans"]


async def read_spans(
    rt: Runtime, ids: Sequence[str], limit: int, budget_s: float
) -> tuple[list[Span], int]:
    """Return the spans the stored model calls of the agents ``ids`` give, the newest
    ``limit``, oldest first, and how many of ``ids`` were read: one ``Runtime.inspect``
    each, in order, until ``budget_s`` is spent (an agent gone since the view's snapshot
    is skipped)."""
    details: list[AgentDetail] = []
    began = time.perf_counter()
    read = 0
    for agent in ids:
        if read and time.perf_counter() - began > budget_s:
            break
        read += 1
        try:
            details.append(await rt.inspect_async(agent, transcript_tail=0))
        except UnknownAgent:
            continue
    return stored_spans(details, limit), read


def stored_spans(details: Iterable[AgentDetail], limit: int) -> list[Span]:
    """Return the spans the ``details``' stored model calls give, the newest ``limit``,
    oldest first."""
    spans: list[Span] = []
    for detail in details:
        agent = detail.info.id
        turns: dict[int, tuple[float, float]] = {}
        for call in detail.calls:
            tokens = call.prompt_tokens + call.completion_tokens
            detail_text = f"{tokens} tokens"
            spans.append(
                Span("model", agent, call.model, call.started_at, call.ended_at, True, detail_text)
            )
            begin = call.turn_started_at if call.turn_started_at is not None else call.started_at
            first, last = turns.get(call.generation, (begin, call.ended_at))
            turns[call.generation] = (min(first, begin), max(last, call.ended_at))
        for generation, (begin, end) in turns.items():
            if generation != detail.info.generation:
                spans.append(Span("turn", agent, f"g{generation}", begin, end, True))
    spans.sort(key=lambda s: s.start)
    return spans[len(spans) - limit :] if len(spans) > limit else spans
