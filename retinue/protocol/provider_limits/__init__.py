"""Provider limits: admission of model calls within a provider's, model's or endpoint's limits.

Pure data and rules (no thread, no clock, no I/O), in one room per concept:

- :mod:`.limit`: :class:`ProviderLimit` and what a ``match`` covers;
- :mod:`.sources`: limits from tables, the environment
  (``RETINUE_PROVIDER_LIMITS``), and how sources merge;
- :mod:`.window`: the per-minute windows; :mod:`.level`: the adaptive
  in-flight level (AIMD); :mod:`.learned`: the requests and tokens per
  window an adaptive limit learns from 429s; :mod:`.stated`: the limits a
  provider's headers state; :mod:`.state`: one limit's live state;
- :mod:`.fairness`: fair turns between top-level trees;
- :mod:`.controller`: :class:`AdmissionController`, which admits calls;
- :mod:`.estimate`: a call's token estimate.

How limits combine. Every limit whose ``match`` covers a call applies to
it: the call is admitted only when it fits each of them, and each limit is
one pool shared by all the calls it covers (``"openai"``'s requests per
minute count the calls to every OpenAI model). A 429 (its ``Retry-After``,
and the adaptive decrease) is charged to the call's *most specific* limit
only (an endpoint's, the longest first, else the model's, else the
provider's): the narrowest quota known to have run out, so one model's 429s
do not stall a provider's other models. The same ``match`` given by several
sources is one limit: the most authoritative source's definition replaces
the others whole (environment < team file < ``Runtime.open``'s
``provider_limits``, once model calls are admitted through the controller).
"""

from __future__ import annotations

from retinue.protocol.provider_limits.controller import (
    AdmissionController,
    Admitted,
    ModelCall,
    Waiting,
)
from retinue.protocol.provider_limits.estimate import (
    DEFAULT_COMPLETION_TOKENS,
    TokenEstimator,
    count_prompt_tokens,
    rough_tokens,
)
from retinue.protocol.provider_limits.fairness import FairQueue
from retinue.protocol.provider_limits.learned import LearnedRate, Slot
from retinue.protocol.provider_limits.level import AdaptiveLevel
from retinue.protocol.provider_limits.limit import (
    KINDS,
    LimitKind,
    ProviderLimit,
    covers,
    kind_of,
    normalise_api_base,
    normalise_match,
    provider_of,
    specificity,
)
from retinue.protocol.provider_limits.sources import (
    ENV_VAR,
    check_unique,
    limit_from_table,
    merge_provider_limits,
    provider_limits_from_env,
)
from retinue.protocol.provider_limits.state import WINDOW_S, BackOff, LimitSnapshot, LimitState
from retinue.protocol.provider_limits.stated import StatedLimits, parse_duration, stated_limits
from retinue.protocol.provider_limits.window import RateWindow

__all__ = [  # noqa: RUF022 (plain sorted())
    "AdaptiveLevel",
    "AdmissionController",
    "Admitted",
    "BackOff",
    "DEFAULT_COMPLETION_TOKENS",
    "ENV_VAR",
    "FairQueue",
    "KINDS",
    "LearnedRate",
    "LimitKind",
    "LimitSnapshot",
    "LimitState",
    "ModelCall",
    "ProviderLimit",
    "RateWindow",
    "Slot",
    "StatedLimits",
    "TokenEstimator",
    "WINDOW_S",
    "Waiting",
    "check_unique",
    "count_prompt_tokens",
    "covers",
    "kind_of",
    "limit_from_table",
    "merge_provider_limits",
    "normalise_api_base",
    "normalise_match",
    "parse_duration",
    "provider_limits_from_env",
    "provider_of",
    "rough_tokens",
    "specificity",
    "stated_limits",
]
