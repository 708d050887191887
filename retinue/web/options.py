"""Every bound of the web view, in one place: poll pacing, page sizes, histories, streams."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from retinue.errors import ArgumentTypeError, InvalidArgument

__all__ = ["WebOptions"]


@dataclass(frozen=True)
class WebOptions:
    """The web view's bounds; each is checked when built.

    Polling: a read of the store comes at most every ``min_interval_s``, and
    no sooner than ``cost_factor`` times what the last read cost; with no
    commit in the store there is no read, and the store's meta pages are
    looked at every ``min_interval_s`` (``max_interval_s`` is the longest a
    pause between reads gets). ``probe_budget_s`` is the time a poll may spend
    reading running agents' transcripts for the tool they call (when no event
    tells it). Pages: ``page_size`` children by default, ``max_page_size`` at
    most; ``search_limit`` search hits. ``transcript_tail`` is the default (and
    ``max_transcript_tail`` the largest) number of transcript messages in an
    agent's detail; ``timeline_agents`` and ``timeline_spans`` bound a
    timeline; ``timeline_read_s`` is the time a read-only view's timeline may
    spend reading its agents' stored model calls (each read costs about what
    ``Runtime.inspect`` does; the agents past it are drawn without their calls,
    and the answer says how many were read). ``history`` versions are kept for
    a page that reconnects; a page further behind, or one that would get more than ``max_changes``
    rows, reloads instead. ``activity_capacity`` spans of events are kept
    (older ones are counted as dropped). Streams: at most ``max_streams`` open
    at once (more get HTTP 503), a comment every ``heartbeat_s``, and each ends
    after ``stream_max_s`` (the browser reconnects with its version).
    The page opens the whole tree expanded when it shows at most
    ``expand_rows`` agents (more: the top level only, each agent opened by a
    click). An action's request body is at most ``max_action_bytes``.
    """

    min_interval_s: float = 0.25
    max_interval_s: float = 5.0
    cost_factor: float = 3.0
    probe_budget_s: float = 0.05
    page_size: int = 200
    max_page_size: int = 1000
    search_limit: int = 100
    transcript_tail: int = 50
    max_transcript_tail: int = 500
    timeline_agents: int = 300
    timeline_spans: int = 2000
    timeline_read_s: float = 1.0
    history: int = 64
    max_changes: int = 2000
    activity_capacity: int = 10_000
    max_streams: int = 32
    heartbeat_s: float = 15.0
    stream_max_s: float = 600.0
    expand_rows: int = 300
    max_action_bytes: int = 16_384

    def __post_init__(self) -> None:
        """Check every field.

        Raises:
            ArgumentTypeError: a field of the wrong type.
            InvalidArgument: a field out of range.
        """
        for spec in fields(self):
            value = getattr(self, spec.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ArgumentTypeError(
                    f"WebOptions.{spec.name} must be a number, not {type(value).__name__}"
                )
            if spec.type == "int" and not isinstance(value, int):
                raise ArgumentTypeError(f"WebOptions.{spec.name} must be an int, not {value!r}")
            zero_ok = spec.name == "probe_budget_s"
            if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
                raise InvalidArgument(
                    f"WebOptions.{spec.name} must be a finite number above 0, not {value!r}"
                )
        if self.min_interval_s > self.max_interval_s:
            raise InvalidArgument(
                f"WebOptions.min_interval_s ({self.min_interval_s}) is above "
                f"max_interval_s ({self.max_interval_s})"
            )
        if self.page_size > self.max_page_size:
            raise InvalidArgument(
                f"WebOptions.page_size ({self.page_size}) is above "
                f"max_page_size ({self.max_page_size})"
            )
        if self.transcript_tail > self.max_transcript_tail:
            raise InvalidArgument(
                f"WebOptions.transcript_tail ({self.transcript_tail}) is above "
                f"max_transcript_tail ({self.max_transcript_tail})"
            )
