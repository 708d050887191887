"""``ProviderLimit``: one provider's, model's or endpoint's limits, and what it matches.

A limit's ``match`` names what it covers:

- an endpoint, when it holds ``://``: an ``api_base`` URL (``http`` or
  ``https``). It covers the calls made with that ``api_base`` or one below it
  (``http://host:8000`` covers ``http://host:8000/v1``); scheme and host are
  compared without case, a trailing ``/`` is ignored;
- a model, when it holds a ``/``: a litellm model string
  (``"openai/gpt-4.1-mini"``), compared exactly;
- else a provider (``"openai"``): every call whose model string starts with
  ``"<provider>/"``, or whose provider the caller names (litellm's own
  answer for a bare ``"gpt-4o"``).

The most specific limit of a call is an endpoint's (the longest), else a
model's, else a provider's: :func:`specificity` orders them.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal
from urllib.parse import urlsplit

import msgspec

from retinue.errors import InvalidLimits

__all__ = [
    "KINDS",
    "LimitKind",
    "ProviderLimit",
    "covers",
    "kind_of",
    "normalise_api_base",
    "normalise_match",
    "provider_of",
    "specificity",
]

LimitKind = Literal["provider", "model", "endpoint"]
KINDS: tuple[LimitKind, ...] = ("provider", "model", "endpoint")
"""The kinds of ``match``, least specific first."""
_MAX_INT = 2**62
_MAX_SLOTS = 4096


def kind_of(match: str) -> LimitKind:
    """Return what a (normalised) ``match`` names: an endpoint, a model or a provider."""
    if "://" in match:
        return "endpoint"
    return "model" if "/" in match else "provider"


def normalise_api_base(api_base: str) -> str:
    """Return ``api_base`` as matches compare it: scheme and host lower case, no trailing ``/``."""
    text = api_base.strip()
    try:
        parts = urlsplit(text)
    except ValueError:
        return text.rstrip("/")
    if not parts.scheme or not parts.netloc:
        return text.rstrip("/")
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path}".rstrip("/")


def normalise_match(match: object) -> str:
    """Return ``match`` checked and normalised (an endpoint as :func:`normalise_api_base`).

    Raises:
        InvalidLimits: not a string, empty, with white space or control
            characters, a model with an empty provider or name (``"openai/"``),
            or an endpoint that is not an ``http``/``https`` URL with a host
            and without query or fragment.
    """
    if not isinstance(match, str):
        raise InvalidLimits(
            f"ProviderLimit.match must be a provider, model or api_base string, "
            f"got {type(match).__name__} {match!r}"
        )
    text = match.strip()
    if not text or any(c.isspace() or not c.isprintable() for c in text):
        raise InvalidLimits(
            f"ProviderLimit.match must be a provider (openai), a model (openai/gpt-4.1-mini) "
            f"or an api_base URL, without spaces, got {match!r}"
        )
    kind = kind_of(text)
    if kind == "endpoint":
        return _endpoint(text)
    if kind == "model":
        provider, _, name = text.partition("/")
        if not provider or not name:
            raise InvalidLimits(
                f"ProviderLimit.match {match!r} names a model with an empty provider or name; "
                f"write it as litellm does: provider/model"
            )
    return text


def _endpoint(text: str) -> str:
    """Return an endpoint match normalised; raise ``InvalidLimits`` if it is no usable URL."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError as exc:
        raise InvalidLimits(f"ProviderLimit.match {text!r} is not a URL: {exc}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise InvalidLimits(
            f"ProviderLimit.match {text!r} must be an http(s) api_base URL with a host"
        )
    if parts.query or parts.fragment:
        raise InvalidLimits(
            f"ProviderLimit.match {text!r} must be an api_base without query or fragment"
        )
    return normalise_api_base(text)


def provider_of(model: str, provider: str | None = None) -> str | None:
    """Return a call's provider: ``provider`` if given, else the model string's prefix."""
    if provider:
        return provider
    head, slash, _ = model.partition("/")
    return head if slash and head else None


def covers(match: str, model: str, api_base: str | None, provider: str | None = None) -> bool:
    """Whether the (normalised) ``match`` covers a call of ``model`` at ``api_base``.

    ``provider`` is the call's provider when the caller knows it (litellm's
    for a model string without one); else the model string's prefix.
    """
    kind = kind_of(match)
    if kind == "model":
        return model == match
    if kind == "provider":
        return provider_of(model, provider) == match
    if api_base is None:
        return False
    base = normalise_api_base(api_base)
    return base == match or base.startswith(match + "/")


def specificity(match: str) -> tuple[int, int]:
    """Order matches by how precisely they name a quota: endpoint > model > provider, longer."""
    return (KINDS.index(kind_of(match)), len(match))


def _count(name: str, value: object, *, optional: bool) -> int | None:
    """Return ``value`` if it is a positive int (or None when ``optional``); else raise."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_INT:
        what = "a positive integer or None" if optional else "a positive integer"
        raise InvalidLimits(f"ProviderLimit.{name} must be {what}, got {value!r}")
    return value


def _number(name: str, value: object, low: float, high: float, *, closed: bool) -> float:
    """Return ``value`` as a float within ``(low, high)`` (``[low, high]`` when ``closed``)."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (low <= value <= high if closed else low < value < high)
    )
    if not ok:
        span = f"[{low:g}, {high:g}]" if closed else f"({low:g}, {high:g})"
        raise InvalidLimits(f"ProviderLimit.{name} must be a number in {span}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


class _Matched(msgspec.Struct, frozen=True):
    """The positional part of :class:`ProviderLimit`: what it matches."""

    match: str


class ProviderLimit(_Matched, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Limits on the model calls to a provider, a model or an endpoint (``match``).

    ``max_in_flight`` bounds the calls in flight at once, ``requests_per_minute``
    and ``tokens_per_minute`` the calls and tokens (a call's estimate until its
    response reports its usage) admitted in any 60 s; None leaves a dimension
    open. With ``adaptive``, a 429 lowers the admitted in-flight level
    (times ``decrease``, never below ``min_in_flight``) and successes raise
    it back (``increase`` calls per level's worth of successes, never above
    ``max_in_flight``). A 429's ``Retry-After`` (at most ``max_retry_after_s``)
    closes the limit for every call it covers, adaptive or not; the calls
    that waited are then let go over ``jitter`` times the Retry-After, at
    jittered intervals. With ``adaptive`` and ``learn_rate``, a 429 that a
    rate explains also sets a learned requests and tokens per window
    (``rate_decrease`` times what was admitted in the window before it,
    counted in ``rate_slots`` slots) and lets calls go at that pace (at most
    ``rate_burst`` of a window's requests at once); after a clean window it
    regains most of the slack, then rises by ``rate_increase`` of it, the
    step doubling up to ``rate_max_step``. Below what a learned rate needs
    in flight (``level_headroom`` x the rate x the mean call duration) the
    level climbs one call per success. With ``adaptive`` and
    ``provider_headers``, the limits the provider's answers state in their
    headers bound the windows and pace the calls, and a 429 they show was not
    a rate's lowers only the level. See :mod:`retinue.protocol.provider_limits`
    for how limits combine.

    Raises:
        InvalidLimits: a bad ``match`` (see :func:`normalise_match`), a count
            that is not a positive integer, ``min_in_flight`` above
            ``max_in_flight``, ``decrease`` outside (0, 1), ``increase`` or
            ``max_retry_after_s`` not positive, ``jitter`` outside [0, 1],
            ``rate_decrease`` or ``rate_increase`` outside (0, 1),
            ``rate_slots`` not in [1, 4096], ``rate_max_step`` outside (0, 1),
            ``rate_burst`` outside (0, 1], ``level_headroom`` outside [0, 1000],
            or ``adaptive``, ``learn_rate`` or ``provider_headers`` not a bool.
            The message names the field.
    """

    max_in_flight: int | None = None
    """Calls in flight at once; None: no static bound (an adaptive level may still bound it)."""
    requests_per_minute: int | None = None
    """Calls admitted in any 60 s; None: unlimited."""
    tokens_per_minute: int | None = None
    """Tokens (prompt + completion) admitted in any 60 s; None: unlimited."""
    adaptive: bool = True
    """Lower the in-flight level on a 429, raise it back on successes (AIMD)."""
    min_in_flight: int = 1
    """The adaptive level's floor: a 429 never lowers it below this."""
    decrease: float = 0.5
    """What a 429 multiplies the adaptive level by."""
    increase: float = 1.0
    """Calls the adaptive level gains per level's worth of successes (``increase / level`` each)."""
    max_retry_after_s: float = 60.0
    """The longest a provider's ``Retry-After`` closes the limit for."""
    jitter: float = 0.25
    """The calls waiting out a Retry-After are let go over ``jitter`` x its seconds, jittered."""
    learn_rate: bool = True
    """With ``adaptive``: learn the requests and tokens per window a 429 shows (see
    :mod:`retinue.protocol.provider_limits.learned`) and admit within them."""
    rate_decrease: float = 0.9
    """A learned rate is this times what was admitted in the window before the 429."""
    rate_increase: float = 0.02
    """After each clean window a learned rate rises by this times its value when learned."""
    rate_slots: int = 64
    """The learned rate counts admissions in this many slots per window (its resolution)."""
    rate_max_step: float = 0.16
    """Past the rate a 429 showed, a learned rate's step (``rate_increase``) doubles after each
    clean window that raised it, up to this times its value when learned."""
    level_headroom: float = 1.5
    """Once a rate is learned, the adaptive level climbs by one call per success (not one per
    level's worth) while below this times the calls the rate needs in flight (Little's law:
    the learned rate per second x the mean call duration); 0: always additively."""
    rate_burst: float = 0.125
    """A learned rate lets calls go at its pace, at most this share of its requests per window
    at once (1.0: a window's worth at once, as the window allows)."""
    provider_headers: bool = True
    """With ``adaptive``: follow the rate limits the provider's answers state in their headers
    (OpenAI's ``x-ratelimit-*``, Anthropic's ``anthropic-ratelimit-*``; see
    :mod:`retinue.protocol.provider_limits.stated`): a stated limit bounds the window and paces
    the calls, and a 429 whose headers show requests and tokens left lowers only the level."""

    FIELDS: ClassVar[tuple[str, ...]] = (
        "max_in_flight",
        "requests_per_minute",
        "tokens_per_minute",
        "adaptive",
        "min_in_flight",
        "decrease",
        "increase",
        "max_retry_after_s",
        "jitter",
        "learn_rate",
        "rate_decrease",
        "rate_increase",
        "rate_slots",
        "rate_max_step",
        "rate_burst",
        "level_headroom",
        "provider_headers",
    )
    """The settings besides ``match`` (a team file's ``[providers."<match>"]`` keys)."""

    def __post_init__(self) -> None:
        """Check and normalise every field (see the class docstring)."""
        set_ = msgspec.structs.force_setattr
        set_(self, "match", normalise_match(self.match))
        for name in ("max_in_flight", "requests_per_minute", "tokens_per_minute"):
            _count(name, getattr(self, name), optional=True)
        _count("min_in_flight", self.min_in_flight, optional=False)
        if self.max_in_flight is not None and self.min_in_flight > self.max_in_flight:
            raise InvalidLimits(
                f"ProviderLimit.min_in_flight ({self.min_in_flight}) is above "
                f"max_in_flight ({self.max_in_flight})"
            )
        if not isinstance(self.adaptive, bool):
            raise InvalidLimits(
                f"ProviderLimit.adaptive must be true or false, got {self.adaptive!r}"
            )
        set_(self, "decrease", _number("decrease", self.decrease, 0.0, 1.0, closed=False))
        set_(self, "increase", _number("increase", self.increase, 0.0, 1e6, closed=False))
        retry = _number("max_retry_after_s", self.max_retry_after_s, 0.0, 1e9, closed=False)
        set_(self, "max_retry_after_s", retry)
        set_(self, "jitter", _number("jitter", self.jitter, 0.0, 1.0, closed=True))
        for flag in ("learn_rate", "provider_headers"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidLimits(
                    f"ProviderLimit.{flag} must be true or false, got {getattr(self, flag)!r}"
                )
        decrease = _number("rate_decrease", self.rate_decrease, 0.0, 1.0, closed=False)
        set_(self, "rate_decrease", decrease)
        increase = _number("rate_increase", self.rate_increase, 0.0, 1.0, closed=False)
        set_(self, "rate_increase", increase)
        step = _number("rate_max_step", self.rate_max_step, 0.0, 1.0, closed=False)
        set_(self, "rate_max_step", step)
        headroom = _number("level_headroom", self.level_headroom, 0.0, 1e3, closed=True)
        set_(self, "level_headroom", headroom)
        burst = _number("rate_burst", self.rate_burst, 0.0, 1.0, closed=True)
        if burst == 0:
            raise InvalidLimits("ProviderLimit.rate_burst must be a number in (0, 1], got 0")
        set_(self, "rate_burst", burst)
        _count("rate_slots", self.rate_slots, optional=False)
        if self.rate_slots > _MAX_SLOTS:
            raise InvalidLimits(
                f"ProviderLimit.rate_slots must be at most {_MAX_SLOTS}, got {self.rate_slots!r}"
            )

    @property
    def kind(self) -> LimitKind:
        """What ``match`` names: ``"provider"``, ``"model"`` or ``"endpoint"``."""
        return kind_of(self.match)

    def covers(self, model: str, api_base: str | None = None, provider: str | None = None) -> bool:
        """Whether this limit covers a call of ``model`` at ``api_base`` (see :func:`covers`)."""
        return covers(self.match, model, api_base, provider)
