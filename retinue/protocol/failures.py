"""Failure classes: a failed turn's ``error_type``, and whether another attempt may help.

Every failed completion carries ``error_type``: the class name of the
exception that ended its turn (``"ModelCallFailed"``, ``"RuntimeError"``, a
runner's own class), or the name of the supervisor's verdict
(``"TurnTimeout"``, ``"RestartLimitExceeded"``, ``"CrashLoop"``).

A failure is *permanent* when another attempt cannot fix it: a provider's
4xx answer other than 408, 409, 425 and 429 (the exception's ``status``, as
:class:`~retinue.errors.ModelCallFailed` has it, or ``status_code``, as
litellm's and the OpenAI SDK's exceptions have it), a
:class:`~retinue.errors.ResultContractError`, a
:class:`~retinue.errors.ConfigurationError` (a
:class:`~retinue.errors.ToolsNotPermitted` is one) and a runner's
:class:`~retinue.errors.PermanentError`. Every other failure is *transient*:
rate limits, 5xx answers, timeouts (``TurnTimeout`` too), connection errors,
a turn lost in a crash, and any exception nothing says more about. A
restart policy restarts transient failures (``Restart(retry_on="transient")``,
the default) or both kinds (``retry_on="any"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from retinue.errors import (
    CassetteError,
    ConfigurationError,
    PermanentError,
    ResultContractError,
)
from retinue.protocol.text import bounded_text

__all__ = [
    "CRASH_LOOP",
    "PERMANENT_ERRORS",
    "RETRY_ON",
    "TRANSIENT_STATUSES",
    "TURN_TIMEOUT",
    "RetryOn",
    "TurnError",
    "is_permanent",
    "status_of",
    "turn_error",
]

RetryOn = Literal["transient", "any"]
"""What a restart policy restarts: transient failures only, or any failure."""
RETRY_ON: tuple[RetryOn, ...] = ("transient", "any")
TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
"""The 4xx statuses worth another attempt (timeout, conflict, too early, rate limited)."""
PERMANENT_ERRORS: tuple[type[BaseException], ...] = (
    CassetteError,
    ConfigurationError,
    PermanentError,
    ResultContractError,
)
"""Exceptions (with their subclasses) that another attempt cannot fix."""
TURN_TIMEOUT = "TurnTimeout"
"""The ``error_type`` of a turn that ran past its profile's ``turn_timeout_s`` (transient)."""
CRASH_LOOP = "CrashLoop"
"""The ``error_type`` of a task lost ``Restart.max_lost`` times in a row."""
_TYPE_MAX_BYTES = 200


@dataclass(frozen=True, slots=True)
class TurnError:
    """How a turn failed: its stored ``text`` (``"<Type>: <message>"``), ``type`` and class.

    ``permanent`` says another attempt cannot fix it (see the module docstring).
    """

    text: str
    type: str
    permanent: bool = False


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception carries (``status`` or ``status_code``), None if none."""
    for name in ("status", "status_code"):
        try:
            status = getattr(exc, name, None)
        except Exception:  # a hostile attribute must not lose the completion
            continue
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def is_permanent(exc: BaseException) -> bool:
    """Whether another attempt cannot fix the failure ``exc`` (see the module docstring)."""
    if isinstance(exc, PERMANENT_ERRORS):
        return True
    status = status_of(exc)
    return status is not None and 400 <= status < 500 and status not in TRANSIENT_STATUSES


def turn_error(exc: BaseException, text: str) -> TurnError:
    """The :class:`TurnError` of a turn that ended with ``exc`` (``text``: its stored text).

    The type is the exception's class name, made storable and bounded (a
    class built with ``type(...)`` may have any name).
    """
    name = bounded_text(str(type(exc).__name__), _TYPE_MAX_BYTES)
    return TurnError(text, name, is_permanent(exc))
