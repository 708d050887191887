"""Where provider limits come from: tables (a team file, the environment), and their merge.

The environment variable :data:`ENV_VAR` (``RETINUE_PROVIDER_LIMITS``) holds
a JSON object of the same shape as a team file's ``[providers."<match>"]``
tables: each key a ``match``, each value the limit's settings::

    RETINUE_PROVIDER_LIMITS='{"openai/gpt-4.1-mini": {"requests_per_minute": 500,
                              "tokens_per_minute": 200000},
                              "http://127.0.0.1:8000/v1": {"max_in_flight": 4}}'

Unset, empty, blank or ``none`` means no limits from the environment.
Sources are merged by :func:`merge_provider_limits`: a later source's limit
replaces an earlier one's with the same ``match`` (normalised) whole; the
order is the environment, then the team file, then ``Runtime.open``'s
``provider_limits`` (which will take them when model calls are admitted
through the controller). Within one source two limits with the same ``match``
are an error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from retinue.errors import InvalidLimits
from retinue.protocol.provider_limits.limit import ProviderLimit

__all__ = [
    "ENV_VAR",
    "check_unique",
    "limit_from_table",
    "merge_provider_limits",
    "provider_limits_from_env",
]

ENV_VAR = "RETINUE_PROVIDER_LIMITS"
"""The environment variable :func:`provider_limits_from_env` reads (a JSON object)."""


def limit_from_table(match: str, table: object) -> ProviderLimit:
    """Build the limit ``match`` from its settings table (a mapping of field to value).

    Raises:
        InvalidLimits: ``table`` is not a mapping, holds an unknown key (also
            ``match``: the key of the table names it), a value of the wrong
            type, or a value :class:`ProviderLimit` refuses; the message names
            the key.
    """
    if not isinstance(table, Mapping):
        raise InvalidLimits(
            f"provider limit {match!r} must be a table of settings, not {type(table).__name__}"
        )
    for key in table:
        if key not in ProviderLimit.FIELDS:
            raise InvalidLimits(
                f"provider limit {match!r}: unknown key {key!r}; known keys: "
                f"{', '.join(ProviderLimit.FIELDS)}"
            )
    try:
        return msgspec.convert({"match": match, **table}, ProviderLimit)
    except msgspec.ValidationError as exc:
        detail = str(exc).replace("`", "").replace(" | null", "").replace(" - at $.", " at key ")
        raise InvalidLimits(f"provider limit {match!r}: {detail}") from None


def check_unique(limits: Iterable[ProviderLimit], where: str) -> tuple[ProviderLimit, ...]:
    """Return ``limits`` as a tuple, checked: each a ProviderLimit, no ``match`` twice.

    Raises:
        InvalidLimits: an item is not a :class:`ProviderLimit`, or two name
            the same ``match`` (after normalisation); ``where`` names the source.
    """
    seen: set[str] = set()
    checked: list[ProviderLimit] = []
    for limit in limits:
        if not isinstance(limit, ProviderLimit):
            raise InvalidLimits(
                f"{where} must hold retinue.ProviderLimit values, not {type(limit).__name__}"
            )
        if limit.match in seen:
            raise InvalidLimits(
                f"{where} names {limit.match!r} twice; give each provider, model or endpoint "
                f"one ProviderLimit"
            )
        seen.add(limit.match)
        checked.append(limit)
    return tuple(checked)


def merge_provider_limits(*sources: Iterable[ProviderLimit]) -> tuple[ProviderLimit, ...]:
    """Merge sources of limits, least to most authoritative: a later ``match`` replaces it whole.

    The result keeps the order in which each ``match`` first appeared.

    Raises:
        InvalidLimits: one source names a ``match`` twice, or holds something
            else than ProviderLimit values.
    """
    merged: dict[str, ProviderLimit] = {}
    for number, source in enumerate(sources, 1):
        for limit in check_unique(source, f"provider limits source {number}"):
            merged[limit.match] = limit
    return tuple(merged.values())


def provider_limits_from_env(
    environ: Mapping[str, str] | None = None,
) -> tuple[ProviderLimit, ...]:
    """Return the limits :data:`ENV_VAR` sets (``environ`` defaults to ``os.environ``).

    Raises:
        InvalidLimits: the variable is not a JSON object of tables, or a table
            is not a valid limit; the message names the variable and the match.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    raw = env.get(ENV_VAR)
    if raw is None or not raw.strip() or raw.strip().lower() == "none":
        return ()
    try:
        data: Any = json.loads(raw)
    except ValueError as exc:
        raise InvalidLimits(
            f"{ENV_VAR} must be a JSON object such as "
            f'{{"openai": {{"max_in_flight": 16}}}}, got invalid JSON ({exc}); fix or unset it'
        ) from None
    if not isinstance(data, dict):
        raise InvalidLimits(
            f"{ENV_VAR} must be a JSON object of provider, model or api_base to its limits, "
            f"not {type(data).__name__}; fix or unset it"
        )
    limits: list[ProviderLimit] = []
    for match, table in data.items():
        try:
            limits.append(limit_from_table(match, table))
        except InvalidLimits as exc:
            raise InvalidLimits(f"{ENV_VAR}: {exc}") from None
    try:
        return check_unique(limits, ENV_VAR)
    except InvalidLimits as exc:
        raise InvalidLimits(f"{exc} (keys that differ only in case or a trailing /)") from None
