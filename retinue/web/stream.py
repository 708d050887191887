"""The view's server-sent event stream: what changed, as it changes.

``GET /api/events?since=VERSION`` opens it: ``hello`` first, then ``update``
(the rows that changed, with the version as the event id), ``reset`` (the
page reloads what it shows), ``activity`` (spans and tool calls from
events), ``summary`` (the header's counts and the writer's status, sent when
the writer stops or comes back with nothing committed) and a comment every
``heartbeat_s``; ``max_messages=N`` ends the stream after N messages.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec

from retinue.web.live import Delta, LiveTree

__all__ = ["event_stream", "sse"]

_encode = msgspec.json.Encoder().encode


def sse(kind: str, payload: Any, version: int | None) -> str:
    """Return one server-sent event (with ``id: version`` when given)."""
    head = f"id: {version}\n" if version is not None else ""
    return f"{head}event: {kind}\ndata: {_encode(payload).decode()}\n\n"


def _delta_message(delta: Delta, summary: dict[str, Any]) -> str:
    if delta.reset:
        return sse("reset", {"version": delta.version, "summary": summary}, delta.version)
    payload = {"version": delta.version, "rows": delta.rows, "removed": delta.removed}
    payload["summary"] = summary
    return sse("update", payload, delta.version)


async def event_stream(
    live: LiveTree,
    since: int | None,
    most: int,
    summary: Callable[[], dict[str, Any]],
) -> AsyncIterator[str]:
    """Yield the events of one stream of ``live`` (see the module), from version ``since``.

    ``summary()`` is the header's payload sent with each update; ``most`` (0:
    no bound) ends the stream after that many messages.
    """
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()

    def wake_up() -> None:
        loop.call_soon_threadsafe(wake.set)

    remove = live.add_listener(wake_up)
    sent = 0
    try:
        snap = live.snapshot(0)
        version = snap.version if snap is not None else 0
        hello = {"version": version, "now": time.time(), "readonly": live.rt.readonly}
        yield sse("hello", hello, version)
        sent += 1
        if since is not None:
            version = since
            wake.set()
        seq = live.activity.seq
        tools: dict[str, str] = {}
        writer = live.writer
        deadline = time.monotonic() + live.options.stream_max_s
        while not live.stopping and time.monotonic() < deadline:
            if most and sent >= most:
                return
            try:
                await asyncio.wait_for(wake.wait(), live.options.heartbeat_s)
            except TimeoutError:
                yield ": ping\n\n"
                continue
            wake.clear()
            delta = live.delta(version)
            if delta is not None:
                version = delta.version
                yield _delta_message(delta, summary())
                sent += 1
            elif live.writer != writer:
                yield sse("summary", summary(), None)
                sent += 1
            writer = live.writer
            spans, seq = live.activity.since(seq, 200)
            now_tools = live.activity.tools()
            if spans or now_tools != tools:
                tools = now_tools
                payload = {"spans": [s.payload() for s in spans], "tools": tools}
                yield sse("activity", payload, None)
                sent += 1
    finally:
        remove()
