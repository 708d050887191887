"""The caps and bounds a runtime enforces, validated and settable from the environment.

``Limits`` is an immutable msgspec struct. Every field must be a positive
number: integer fields take an ``int`` (never a ``bool``), float fields take an
``int`` or a ``float`` (stored as ``float``) that is finite. A bad value raises
:class:`~retinue.errors.InvalidLimits` naming the field. The budgets
(``tokens_per_agent``, ``tokens_per_tree``, ``usd_per_agent``,
``usd_per_tree``), ``call_reserve_tokens`` and ``approval_timeout_s`` are the
optional fields: ``None`` (their default) means unlimited (or unset),
otherwise they are positive numbers; in the environment, ``none`` or
``unlimited`` sets ``None``.

``Limits.from_env()`` reads ``RETINUE_<FIELD>`` variables (for example
``RETINUE_DEPTH_CAP``); keyword overrides win over the environment.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import msgspec

from retinue.errors import ArgumentTypeError, InvalidLimits
from retinue.protocol.paths import MAX_PATH_LENGTH, ROOT

__all__ = ["ENV_PREFIX", "Limits", "MAX_DEPTH", "MAX_INT"]  # noqa: RUF022 (plain sorted())

ENV_PREFIX = "RETINUE_"
"""Prefix of the environment variables read by :meth:`Limits.from_env`."""


MAX_INT = 2**62
"""The largest integer bound (it is stored, and must stay a machine integer)."""
MAX_DEPTH = (MAX_PATH_LENGTH - len(ROOT)) // 2
"""The deepest path there can be: ``/root`` and one-letter names up to the path limit."""


def _check_int(field: str, value: object) -> int:
    """Return ``value`` if it is a positive ``int`` within its ceiling, else raise InvalidLimits."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidLimits(
            f"Limits.{field} must be a positive integer, got {type(value).__name__} {value!r}"
        )
    if value <= 0:
        raise InvalidLimits(f"Limits.{field} must be a positive integer, got {value!r}")
    if field == "depth_cap" and value > MAX_DEPTH:
        raise InvalidLimits(
            f"Limits.depth_cap is at most {MAX_DEPTH} (a path holds {MAX_PATH_LENGTH} "
            f"characters), got {value!r}"
        )
    if value > MAX_INT:
        raise InvalidLimits(f"Limits.{field} is at most {MAX_INT}, got {value!r}")
    return value


def _check_float(field: str, value: object, unit: str = "seconds") -> float:
    """Return ``value`` as a float if it is a positive finite number; else raise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidLimits(
            f"Limits.{field} must be a positive number of {unit}, "
            f"got {type(value).__name__} {value!r}"
        )
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise InvalidLimits(
            f"Limits.{field} must be a positive finite number of {unit}, got {value!r}"
        )
    return number


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """Caps and bounds enforced by the runtime; immutable and validated on creation.

    Raises:
        InvalidLimits: a field is zero, negative, not finite or of the wrong type
            (``bool`` is not accepted as an integer). The message names the field.
    """

    depth_cap: int = 5
    """Deepest allowed agent below ``/root`` (a top-level agent has depth 1)."""
    fanout_cap: int = 8
    """Live children per agent; also the size and concurrency of one spawn batch."""
    max_tree_agents: int = 64
    """Live agents under one top-level agent, itself included."""
    max_agents: int = 10_000
    """Live agents in a runtime."""
    max_active_turns: int = 32
    """Turns running at once; a turn waiting for a slot is ``starting``."""
    mailbox_capacity: int = 100
    """Unread messages an agent's mailbox holds before refusing new ones."""
    message_max_bytes: int = 16_384
    """Largest message content, in bytes of UTF-8."""
    output_max_bytes: int = 51_200
    """Largest turn output kept, in bytes of UTF-8."""
    dedup_key_max_length: int = 256
    """Longest deduplication key, in characters."""
    pending_completions_per_agent: int = 20
    """Completions an agent may hold unreceived."""
    wait_default_s: float = 30.0
    """Seconds a wait lasts when no timeout is given."""
    wait_max_s: float = 3600.0
    """Longest wait a caller may ask for, in seconds."""
    retain_closed_agents: int = 10_000
    """Closed agents kept in the store before compaction removes the oldest."""
    retain_read_messages: int = 100_000
    """Read messages kept in the store before compaction removes the oldest."""
    retain_age_s: float = 7 * 24 * 3600.0
    """Closed agents, read messages and delivered completions older than this go."""
    compact_interval_s: float = 60.0
    """Seconds between background compactions."""
    tokens_per_agent: int | None = None
    """Model tokens (prompt + completion) one agent may spend in all its turns; None: no cap."""
    tokens_per_tree: int | None = None
    """Model tokens one top-level agent's whole tree may spend; None: unlimited."""
    transcript_max_bytes: int = 262_144
    """Largest stored transcript of one LLM agent; past it the oldest tool results are cut."""
    max_concurrent_calls: int = 64
    """Model calls in flight at once per model, across the runtime's LLM agents."""
    event_queue_capacity: int = 10_000
    """Events queued per subscriber; a slower one loses its oldest (``EventsDropped``)."""
    max_abandoned_runners: int = 8
    """Sync runners that ignored an interrupt and still hold their thread, beyond
    ``max_active_turns``; past it new sync turns wait as ``starting``."""
    usd_per_agent: float | None = None
    """Model cost in USD (litellm's cost map) one agent may spend in all its turns; None: no cap."""
    usd_per_tree: float | None = None
    """Model cost in USD one top-level agent's whole tree may spend; None: unlimited."""
    call_reserve_tokens: int | None = None
    """Tokens a model call is assumed to take while a budget admits calls in flight (at
    least; an agent's largest call so far counts when larger); None: the largest call so far."""
    approval_timeout_s: float | None = None
    """Seconds an approval request waits for an answer before it is denied (``timed out``);
    None: it waits until answered."""
    event_preview_bytes: int = 1024
    """Largest text a live tool-call event carries (the arguments' preview, the error), in
    bytes of UTF-8; longer text is cut with ``…[truncated]``."""
    trace_content_max_bytes: int = 16_384
    """Largest content value a span records when content capture is on (a chat, an answer,
    tool arguments or a result), in bytes of UTF-8; longer is cut with ``…[truncated]``."""
    transcript_max_calls: int = 200
    """Model calls an LLM agent's stored transcript keeps the times of (for the web view's
    timeline), newest; an older call's times go, its messages stay."""
    store_map_warn_ratio: float = 0.9
    """Share of the LMDB map the store file's high-water mark may reach before a
    ``StoreMapFilling`` event warns (once per map size; the writer doubles a full map)."""
    provider_window_s: float = 60.0
    """The span, in seconds, of a provider limit's ``requests_per_minute`` and
    ``tokens_per_minute`` (a minute; shorter only against a test provider whose
    "minute" is, such as ``RateLimitedStub(window_s=...)``)."""
    fork_generations: int = 16
    """Settled generations of each agent the store keeps for ``Runtime.fork(at=...)``, newest
    (each the agent's record as that generation ended); an older one cannot be forked
    (``GenerationNotKept``). At least 1."""
    control_max_connections: int = 64
    """Connections the writer's control socket (``<store>/control.sock``) serves at once; one
    more is refused with ``LimitExceeded``."""
    control_max_message_bytes: int = 16 * 1024 * 1024
    """Largest frame the control socket reads or writes, in bytes; a larger request closes
    its connection, a larger answer is refused with ``LimitExceeded``."""
    control_read_timeout_s: float = 10.0
    """Seconds a frame the control socket has begun to read may take to arrive whole; a
    connection that stalls mid-frame is closed."""
    control_max_calls: int = 1_000
    """Calls in flight on one control socket connection (waits included); one more is
    answered ``LimitExceeded``."""
    agents_page_max: int = 10_000
    """Most agents one page of ``agents(limit=...)`` may ask for; a larger ``limit`` is
    refused with ``PageLimitExceeded`` (page on with ``after=``, or ``iter_agents``)."""

    _FLOAT_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {
            "wait_default_s",
            "wait_max_s",
            "retain_age_s",
            "compact_interval_s",
            "approval_timeout_s",
            "usd_per_agent",
            "usd_per_tree",
            "store_map_warn_ratio",
            "provider_window_s",
            "control_read_timeout_s",
        }
    )
    _RATIO_FIELDS: ClassVar[frozenset[str]] = frozenset({"store_map_warn_ratio"})
    _USD_FIELDS: ClassVar[frozenset[str]] = frozenset({"usd_per_agent", "usd_per_tree"})
    _OPTIONAL_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {
            "tokens_per_agent",
            "tokens_per_tree",
            "usd_per_agent",
            "usd_per_tree",
            "call_reserve_tokens",
            "approval_timeout_s",
        }
    )

    def __post_init__(self) -> None:
        """Validate every field; raise ``InvalidLimits`` naming the first bad one."""
        for field in self.__struct_fields__:
            value = getattr(self, field)
            if value is None and field in self._OPTIONAL_FIELDS:
                continue
            if field in self._FLOAT_FIELDS:
                number = _check_float(field, value, self._unit(field))
                if field in self._RATIO_FIELDS and number > 1.0:
                    raise InvalidLimits(
                        f"Limits.{field} is a share of the map: at most 1.0, got {value!r}"
                    )
                if type(value) is not float:
                    msgspec.structs.force_setattr(self, field, number)
            else:
                _check_int(field, value)

    @classmethod
    def _unit(cls, field: str) -> str:
        """The unit a float field's errors name."""
        if field in cls._USD_FIELDS:
            return "USD"
        return "map share (at most 1.0)" if field in cls._RATIO_FIELDS else "seconds"

    def depth_allowed(self, depth: int) -> bool:
        """Whether an agent at ``depth`` (segments below ``/root``) is within ``depth_cap``.

        The one depth rule of spawns: a spawn whose child would be deeper is
        refused, and an agent whose children would be is offered no spawn tools.
        """
        return depth <= self.depth_cap

    def replace(self, **changes: Any) -> Limits:
        """Return a copy with ``changes`` applied, validated again.

        Raises:
            InvalidLimits: a changed value is invalid.
            ArgumentTypeError: a keyword is not a field of ``Limits``.
        """
        for key in changes:
            if key not in self.__struct_fields__:
                raise ArgumentTypeError(f"Limits has no field {key!r}")
        return msgspec.structs.replace(self, **changes)

    @classmethod
    def env_var(cls, field: str) -> str:
        """Return the environment variable that sets ``field`` (``RETINUE_<FIELD>``).

        Raises:
            ArgumentTypeError: ``field`` is not a field of ``Limits``.
        """
        if field not in cls.__struct_fields__:
            raise ArgumentTypeError(f"Limits has no field {field!r}")
        return ENV_PREFIX + field.upper()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Limits:
        """Build ``Limits`` from ``RETINUE_<FIELD>`` variables, then keyword overrides.

        ``environ`` defaults to ``os.environ``. An unset, empty or blank variable
        means the field's default. Keyword ``overrides`` win over the environment.
        Variables with the prefix that name no field are ignored.

        Raises:
            InvalidLimits: a variable is not a number of the field's kind (the
                message names the variable), or a resulting value is invalid.
            ArgumentTypeError: an override keyword is not a field of ``Limits``.
        """
        env: Mapping[str, str] = os.environ if environ is None else environ
        for key in overrides:
            if key not in cls.__struct_fields__:
                raise ArgumentTypeError(f"Limits has no field {key!r}")
        values: dict[str, Any] = {}
        for field in cls.__struct_fields__:
            if field in overrides:
                continue
            var = cls.env_var(field)
            raw = env.get(var)
            if raw is None or not raw.strip():
                continue
            text = raw.strip()
            if field in cls._OPTIONAL_FIELDS and text.lower() in ("none", "unlimited"):
                values[field] = None
                continue
            if field in cls._FLOAT_FIELDS:
                unit = cls._unit(field)
                try:
                    number: int | float = float(text)
                except ValueError:
                    raise InvalidLimits(
                        f"{var} must be a positive number of {unit}, got {raw!r}; fix or unset it"
                    ) from None
            else:
                try:
                    number = int(text, 10)
                except ValueError:
                    raise InvalidLimits(
                        f"{var} must be a positive integer, got {raw!r}; fix or unset it"
                    ) from None
            probe: dict[str, Any] = {field: number}
            try:
                cls(**probe)
            except InvalidLimits as exc:
                raise InvalidLimits(f"{var}: {exc}") from None
            values[field] = number
        values.update(overrides)
        return cls(**values)
