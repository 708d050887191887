"""The wire of cluster event streams: open a pull stream on a shard, take its events, close it.

A face's stream (:mod:`retinue.cluster._streaming`) names itself with a
stream id it makes, so opening is idempotent (a retry after a lost reply
opens nothing twice). A take is a long poll: up to ``max_events`` events,
waiting up to ``wait_s`` for the first, answered with an :class:`EventBatch`
whose events are msgpack-encoded with their type (the tagged ``Event``
union). These calls are part of :data:`retinue.cluster.wire.Call`; none is
recorded (they change no stored state).
"""

from __future__ import annotations

import msgspec

from retinue.protocol.messages import Event

__all__ = ["CloseStream", "EventBatch", "OpenStream", "TakeEvents"]


class OpenStream(msgspec.Struct, frozen=True, tag_field="call", tag="open_stream"):
    """Open the pull stream ``stream_id`` of ``ref``'s subtree (None: every agent); idempotent."""

    stream_id: str
    ref: str | None


class TakeEvents(msgspec.Struct, frozen=True, tag_field="call", tag="take_events"):
    """Take up to ``max_events`` events of ``stream_id``, waiting up to ``wait_s`` for the first."""

    stream_id: str
    max_events: int
    wait_s: float


class CloseStream(msgspec.Struct, frozen=True, tag_field="call", tag="close_stream"):
    """Close ``stream_id`` (a take waiting on it returns at once, ended); idempotent."""

    stream_id: str


class EventBatch(msgspec.Struct, frozen=True, kw_only=True):
    """A take's answer: the events (ids as cluster ids), and whether the stream ended.

    ``unknown``: the shard has no such stream (it restarted, or closed the
    stream after ``stream_idle_s`` without a take); the face reopens it.
    """

    events: tuple[Event, ...] = ()
    ended: bool = False
    unknown: bool = False
