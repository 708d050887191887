"""Supervision's values: restart policies and approval requests (pure data and rules).

:class:`Restart` is a profile's restart policy, OTP's intensity and period
with a backoff: which failures it answers (``on``, ``retry_on``), how long it
waits before each restart, and when it gives up (``max_restarts`` within
``within_s``, ``max_lost`` losses in a row). :class:`RestartRecord` is how the
store keeps it with each agent, so an open without the agent's profile still
decides as the policy says. :class:`ApprovalRequest` is a tool call a model
asked for that a person must approve first; :class:`ApprovalRecord` is how the
store keeps it, with its answer. All are frozen msgspec structs (schema rule:
new fields at the end, with defaults).
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Iterable
from typing import Literal

import msgspec

from retinue.errors import ConfigurationError
from retinue.protocol.backoff import capped_exponential
from retinue.protocol.failures import RETRY_ON, RetryOn
from retinue.protocol.tools import covers, split_mcp_name

__all__ = [
    "APPROVAL_REASON",
    "LOST_ERROR",
    "RESTART_ON",
    "RESTART_REASON",
    "SPAWN_REASON",
    "TIMED_OUT",
    "ApprovalRecord",
    "ApprovalRequest",
    "ApprovalStatus",
    "Restart",
    "RestartRecord",
    "check_approve",
    "check_approve_names",
    "needs_approval",
    "never_restarts",
]

RESTART_ON = ("failed", "lost")
"""What a restart policy may answer: a turn that ``failed``, and one ``lost`` in a crash."""
RESTART_REASON = "restart"
"""``turn.reason`` of a turn a restart policy runs again."""
APPROVAL_REASON = "approval"
"""``turn.reason`` of a turn that carries on after its approvals were answered in a new process."""
SPAWN_REASON = "spawn"
"""``turn.reason`` of a spawned agent's first turn (its agent has stored no transcript yet)."""
LOST_ERROR = "lost: the runtime stopped while this turn was queued or running"
"""The ``last_error`` of a turn restarted because it was lost in a crash."""
TIMED_OUT = "timed out"
"""The reason of an approval request denied by ``Limits.approval_timeout_s``."""
_FINAL = ("TokenBudgetExceeded", "CostBudgetExceeded", "RestartLimitExceeded", "CrashLoop")


def _seconds(name: str, value: object, *, zero: bool) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
    ):
        want = "a non-negative" if zero else "a positive"
        raise ConfigurationError(
            f"Restart.{name} must be {want} finite number of seconds, not {value!r}"
        )
    return float(value)


class Restart(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A restart policy: restart a failed (or lost) turn after a backoff, within an intensity.

    ``on`` names what it answers: ``"failed"`` (the runner raised, a model
    call failed after its retries, ``TurnTimeout``, a tool error that ended
    the turn) and ``"lost"`` (the turn was queued or running when the process
    died). ``retry_on`` says which failures: ``"transient"`` (the default)
    leaves a permanent one failed (a provider's 4xx other than 408, 409, 425
    and 429, ``ResultContractError``, ``ConfigurationError``,
    ``PermanentError``: see :mod:`retinue.protocol.failures`), ``"any"``
    restarts it too; a lost turn is transient. The n-th restart of a task
    waits ``min(backoff_s * 2**(n-1), backoff_max_s)``, jittered by
    +-``jitter`` (a fraction). When a restart would make more than
    ``max_restarts`` restarts within ``within_s`` seconds, the policy gives
    up: the turn settles ``failed`` with ``RestartLimitExceeded``. A task
    lost while running ``max_lost`` times in a row (counted across opens,
    however far apart) settles ``failed`` with ``CrashLoop`` instead of
    restarting again.

    Raises:
        ConfigurationError: a negative count, a bad number of seconds, a
            jitter outside 0-1, ``backoff_max_s`` below ``backoff_s``, an
            ``on`` that is empty or names something else than failed and lost,
            a ``retry_on`` other than transient and any, or a ``max_lost``
            that is not a positive integer.
    """

    max_restarts: int = 3
    within_s: float = 60.0
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    jitter: float = 0.2
    on: tuple[Literal["failed", "lost"], ...] = ("failed",)
    retry_on: RetryOn = "transient"
    max_lost: int = 3

    def __post_init__(self) -> None:
        """Check every field (see the class docstring)."""
        count = self.max_restarts
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigurationError(
                f"Restart.max_restarts must be a non-negative integer, not {count!r}"
            )
        set_ = msgspec.structs.force_setattr
        set_(self, "within_s", _seconds("within_s", self.within_s, zero=False))
        set_(self, "backoff_s", _seconds("backoff_s", self.backoff_s, zero=True))
        set_(self, "backoff_max_s", _seconds("backoff_max_s", self.backoff_max_s, zero=True))
        if self.backoff_max_s < self.backoff_s:
            raise ConfigurationError(
                f"Restart.backoff_max_s ({self.backoff_max_s:g}) is below "
                f"backoff_s ({self.backoff_s:g})"
            )
        jitter = self.jitter
        if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter <= 1:
            raise ConfigurationError(
                f"Restart.jitter must be a fraction from 0 to 1, not {jitter!r}"
            )
        set_(self, "jitter", float(jitter))
        set_(self, "on", _check_on(self.on))
        if self.retry_on not in RETRY_ON:
            raise ConfigurationError(
                f"Restart.retry_on must be {' or '.join(map(repr, RETRY_ON))}, "
                f"not {self.retry_on!r}"
            )
        lost = self.max_lost
        if isinstance(lost, bool) or not isinstance(lost, int) or lost < 1:
            raise ConfigurationError(f"Restart.max_lost must be a positive integer, not {lost!r}")

    def delay(self, restart: int, rng: random.Random) -> float:
        """Return the seconds before the ``restart``-th restart of a task (1 for the first).

        Finite for any ``restart``: the cap is applied before the power is
        computed (``2.0 ** 1024`` would overflow), and the result lies within
        ``[0, backoff_max_s * (1 + jitter)]``.
        """
        base = self._base_delay(max(0, restart - 1))
        if self.jitter:
            base *= 1.0 + rng.uniform(-self.jitter, self.jitter)
        return min(max(0.0, base), sys.float_info.max)

    def _base_delay(self, doublings: int) -> float:
        """``min(backoff_s * 2**doublings, backoff_max_s)``, without computing a huge power."""
        return capped_exponential(self.backoff_s, self.backoff_max_s, doublings)


def _check_on(on: object) -> tuple[Literal["failed", "lost"], ...]:
    """Return ``Restart.on`` as a tuple without repeats.

    Raises:
        ConfigurationError: it is not a non-empty list of failed and lost.
    """
    if isinstance(on, str) or not isinstance(on, Iterable):
        raise ConfigurationError(
            f"Restart.on must be a list of {' and '.join(RESTART_ON)}, not {on!r}"
        )
    names = tuple(dict.fromkeys(on))
    if not names or any(name not in RESTART_ON for name in names):
        raise ConfigurationError(
            f"Restart.on must name some of {', '.join(RESTART_ON)}, not {list(on)!r}"
        )
    return names


class RestartRecord(msgspec.Struct, frozen=True, kw_only=True, array_like=True, gc=False):
    """A :class:`Restart` policy as stored with its agent (``AgentRecord.restart``).

    The same fields, in the same order, with the same defaults; stored as a
    compact array whose unknown trailing fields (a newer retinue's) are
    ignored, so a store stays readable. :meth:`policy` checks it again.
    """

    max_restarts: int = 3
    within_s: float = 60.0
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    jitter: float = 0.2
    on: tuple[str, ...] = ("failed",)
    retry_on: str = "transient"
    max_lost: int = 3

    @classmethod
    def of(cls, policy: Restart) -> RestartRecord:
        """The stored form of ``policy``."""
        return cls(**msgspec.structs.asdict(policy))

    def policy(self) -> Restart:
        """The policy this record holds.

        Raises:
            ConfigurationError: the stored fields are not a valid policy.
        """
        return Restart(**msgspec.structs.asdict(self))


def never_restarts(error: str) -> bool:
    """Whether a turn's error is final whatever the policy: an exhausted budget, or a give-up."""
    return error.startswith(_FINAL)


ApprovalStatus = Literal["pending", "approved", "denied", "cancelled"]
"""Where an approval request is: waiting, approved, denied (or timed out), or cancelled
(its turn was interrupted or closed first)."""


class ApprovalRequest(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A tool call a model asked for that must be approved before it runs.

    ``arguments`` is the call's raw JSON text; ``generation`` the turn that
    asked, ``call_id`` the model's id of the call; ``expires_at`` is when
    ``Limits.approval_timeout_s`` denies it (None: never). ``in_doubt``: the
    call was running when its turn stopped and may or may not have taken
    effect (``Profile(in_doubt="approve")``): approving runs it again with
    the same ``idempotency_key``.
    """

    id: str
    agent_id: str
    path: str
    tool: str
    arguments: str
    requested_at: float
    generation: int = 0
    call_id: str = ""
    expires_at: float | None = None
    in_doubt: bool = False
    idempotency_key: str | None = None


class ApprovalRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An approval request as stored (keyed by its id), with its answer once given.

    ``note`` is the approver's note, ``reason`` a denial's reason.
    """

    request: ApprovalRequest
    status: ApprovalStatus = "pending"
    answered_at: float | None = None
    note: str | None = None
    reason: str | None = None

    @property
    def pending(self) -> bool:
        """True until it is answered (or cancelled)."""
        return self.status == "pending"


def check_approve(owner: str, approve: object) -> tuple[str, ...]:
    """Return a profile's ``approve`` setting as a tuple of tool names (``"*"``: every tool).

    Raises:
        ConfigurationError: it is a single string or holds something else than
            non-empty tool names.
    """
    if isinstance(approve, str) or not isinstance(approve, Iterable):
        raise ConfigurationError(
            f"profile {owner!r}: approve must be a list of tool names (or ['*']), not {approve!r}"
        )
    names = tuple(dict.fromkeys(approve))
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(
                f"profile {owner!r}: approve must hold tool names, not {name!r}"
            )
    return names


def needs_approval(approve: Iterable[str], tool: str, coordinator: Iterable[str]) -> bool:
    """Whether a call of ``tool`` (its granted name) must be approved.

    It must when ``approve`` names it, or names its MCP server's pattern
    (``time.*`` covers ``time.get_current_time``), or holds ``"*"`` (every
    tool but the ``coordinator`` tools).
    """
    names = tuple(approve)
    if covers(tool, names):
        return True
    return "*" in names and tool not in tuple(coordinator)


def check_approve_names(owner: str, approve: Iterable[str], tools: Iterable[str]) -> None:
    """Check that each ``approve`` entry names a tool the profile has (its effective ``tools``).

    An entry is ``"*"``, a tool the profile has (built in, host, or an MCP
    tool it is granted exactly or by its server's pattern), or
    ``<server>.*`` for a server it has tools of: a misspelt name would
    otherwise let the calls it meant run unapproved.

    Raises:
        ConfigurationError: an entry names no tool of the profile (named, with its tools).
    """
    has = tuple(tools)
    servers = {split[0] for name in has if (split := split_mcp_name(name)) is not None}
    for name in approve:
        if name == "*" or covers(name, has):
            continue
        split = split_mcp_name(name)
        if split is not None and split[1] == "*" and split[0] in servers:
            continue
        offered = ", ".join(has) or "none"
        raise ConfigurationError(
            f"profile {owner!r}: approve names {name!r}, which is not one of its tools "
            f"({offered}); name a tool it has, '<server>.*' for an MCP server it uses, or '*'"
        )
