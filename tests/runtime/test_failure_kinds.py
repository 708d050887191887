"""Typed failures: every failed completion names its error's class, and permanent ones stay failed.

``Completion.error_type`` (also on ``AgentInfo``, ``TurnSettled`` and
``TurnRestarting``) is the exception's class name, or the supervisor's
verdict. ``Restart(retry_on="transient")`` (the default) leaves a permanent
failure failed; ``retry_on="any"`` restarts it too. Real runtimes on real
stores; backoffs are tiny and nothing asserts time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import msgspec
import pytest
from support import PROMPT_S, EventLog, OpenRuntime

from retinue import (
    ConfigurationError,
    PermanentError,
    Profile,
    Restart,
    ResultContractError,
    ToolsNotPermitted,
    Turn,
    TurnRestarting,
    TurnSettled,
)
from retinue.protocol.failures import is_permanent, status_of

FAST = Restart(max_restarts=3, backoff_s=0.01, backoff_max_s=0.01, jitter=0.0)


class BadInput(PermanentError):
    """A runner's own permanent failure (a subclass keeps its name)."""


class Raises:
    """A runner that raises ``make()`` on every attempt below ``until`` (then answers)."""

    def __init__(self, make: Callable[[], BaseException], until: int = 99) -> None:
        self.make = make
        self.until = until
        self.attempts: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, turn: Turn) -> str:
        with self.lock:
            self.attempts.append(turn.attempt)
        if turn.attempt < self.until:
            raise self.make()
        return f"done on attempt {turn.attempt}"


def test_a_failed_completion_names_its_exceptions_class(
    open_runtime: OpenRuntime, events: EventLog
) -> None:
    rt = open_runtime([Profile("worker", runner=Raises(lambda: KeyError("nope")))])
    rt.subscribe(events)
    a = rt.spawn("worker", "t")
    got = rt.wait(a.id, timeout=PROMPT_S)
    assert (got.status, got.error, got.error_type) == ("failed", "KeyError: 'nope'", "KeyError")
    assert rt.get(a.id).error_type == "KeyError"
    settled = events.wait_for(lambda es: any(isinstance(e, TurnSettled) for e in es))
    (event,) = [e for e in settled if isinstance(e, TurnSettled)]
    assert (event.status, event.error_type) == ("failed", "KeyError")
    assert msgspec.json.decode(msgspec.json.encode(event))["error_type"] == "KeyError"


def test_a_completed_or_interrupted_completion_has_no_error_type(
    open_runtime: OpenRuntime,
) -> None:
    def hold(turn: Turn) -> str:
        turn.cancelled.wait(PROMPT_S)
        return "late"

    rt = open_runtime(
        [Profile("worker", runner=lambda turn: "fine"), Profile("holder", runner=hold)]
    )
    got = rt.wait(rt.spawn("worker", "t").id, timeout=PROMPT_S)
    assert (got.status, got.error_type) == ("completed", None)
    held = rt.spawn("holder", "t")
    rt.interrupt(held.id)
    got = rt.wait(held.id, timeout=PROMPT_S)
    assert (got.status, got.error_type) == ("interrupted", None)


def test_an_exception_class_with_any_name_is_stored(open_runtime: OpenRuntime) -> None:
    odd = type("Odd\u00e9" + "x" * 500, (Exception,), {})  # type() takes any length
    rt = open_runtime([Profile("worker", runner=Raises(lambda: odd("a long name")))])
    got = rt.wait(rt.spawn("worker", "t").id, timeout=PROMPT_S)
    assert got.error_type is not None and got.error_type.startswith("Odd\u00e9xxx")
    assert len(got.error_type.encode()) <= 200


def test_a_runner_returning_no_text_fails_as_a_type_error(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=lambda turn: 42)])  # type: ignore[arg-type,return-value]
    got = rt.wait(rt.spawn("worker", "t").id, timeout=PROMPT_S)
    assert (got.status, got.error_type) == ("failed", "TypeError")


@pytest.mark.parametrize(
    "make",
    [
        lambda: BadInput("the input cannot be parsed"),
        lambda: PermanentError("never again"),
        lambda: ResultContractError("missing field", field="summary"),
        lambda: ConfigurationError("bad profile"),
        lambda: ToolsNotPermitted("too many tools", extra=("bash",)),
    ],
    ids=["subclass", "PermanentError", "ResultContractError", "ConfigurationError", "Tools"],
)
def test_a_permanent_failure_is_not_restarted_by_default(
    open_runtime: OpenRuntime, make: Callable[[], BaseException]
) -> None:
    runner = Raises(make)
    rt = open_runtime([Profile("worker", runner=runner, restart=FAST)])
    got = rt.wait(rt.spawn("worker", "t").id, timeout=PROMPT_S)
    assert (got.status, got.attempt, got.error_type) == ("failed", 1, type(make()).__name__)
    rt.wait_idle(PROMPT_S)
    assert runner.attempts == [1]


def test_retry_on_any_restarts_a_permanent_failure(open_runtime: OpenRuntime) -> None:
    runner = Raises(lambda: BadInput("flaky parser"), until=3)
    policy = Restart(max_restarts=3, backoff_s=0.01, jitter=0.0, retry_on="any")
    rt = open_runtime([Profile("worker", runner=runner, restart=policy)])
    got = rt.wait(rt.spawn("worker", "t").id, timeout=PROMPT_S)
    assert (got.status, got.attempt, got.error_type) == ("completed", 3, None)
    assert runner.attempts == [1, 2, 3]


def test_a_transient_failure_restarts_and_its_restart_event_names_the_class(
    open_runtime: OpenRuntime, events: EventLog
) -> None:
    runner = Raises(lambda: ConnectionError("reset by peer"), until=2)
    rt = open_runtime([Profile("worker", runner=runner, restart=FAST)])
    rt.subscribe(events)
    got = rt.wait(rt.spawn("worker", "t").id, timeout=PROMPT_S)
    assert (got.status, got.attempt) == ("completed", 2)
    seen = events.wait_for(lambda es: any(isinstance(e, TurnRestarting) for e in es))
    (restart,) = [e for e in seen if isinstance(e, TurnRestarting)]
    assert (restart.error, restart.error_type) == (
        "ConnectionError: reset by peer",
        "ConnectionError",
    )


def test_giving_up_is_a_restart_limit_exceeded(open_runtime: OpenRuntime) -> None:
    policy = Restart(max_restarts=1, backoff_s=0.01, jitter=0.0)
    rt = open_runtime([Profile("worker", runner=Raises(lambda: OSError("disk")), restart=policy)])
    got = rt.wait(rt.spawn("worker", "t").id, timeout=PROMPT_S)
    assert (got.status, got.attempt, got.error_type) == ("failed", 2, "RestartLimitExceeded")


def test_a_turn_timeout_is_transient_and_typed(open_runtime: OpenRuntime) -> None:
    def slow(turn: Turn) -> str:
        turn.cancelled.wait(PROMPT_S)
        return "late"

    policy = Restart(max_restarts=1, backoff_s=0.01, jitter=0.0)
    rt = open_runtime([Profile("worker", runner=slow, restart=policy, turn_timeout_s=0.05)])
    got = rt.wait(rt.spawn("worker", "t").id, timeout=PROMPT_S)
    # Restarted once (transient), then the policy gave up.
    assert (got.status, got.attempt, got.error_type) == ("failed", 2, "RestartLimitExceeded")
    assert rt.get(got.agent_id).last_error == "TurnTimeout: turn exceeded 0.05 s"
    solo = open_runtime(
        [Profile("solo", runner=slow, turn_timeout_s=0.05)], path=rt.path.parent / "solo"
    )
    got = solo.wait(solo.spawn("solo", "t").id, timeout=PROMPT_S)
    assert (got.status, got.error_type) == ("failed", "TurnTimeout")


class _Status(Exception):
    def __init__(self, status_code: object) -> None:
        super().__init__(f"status {status_code}")
        self.status_code = status_code


class _Hostile(Exception):
    @property
    def status(self) -> int:
        raise RuntimeError("no status here")


@pytest.mark.parametrize(
    ("status", "permanent"),
    [
        (400, True),
        (401, True),
        (404, True),
        (422, True),
        (408, False),
        (409, False),
        (425, False),
        (429, False),
        (500, False),
        (503, False),
        ("400", False),  # not a status
        (True, False),
    ],
)
def test_a_providers_4xx_is_permanent_but_408_409_425_429(status: object, permanent: bool) -> None:
    assert is_permanent(_Status(status)) is permanent


def test_a_hostile_status_attribute_is_no_status() -> None:
    assert status_of(_Hostile("x")) is None
    assert not is_permanent(_Hostile("x"))


@pytest.mark.parametrize(
    "bad", [{"retry_on": "never"}, {"retry_on": None}, {"max_lost": 0}, {"max_lost": True}]
)
def test_a_bad_retry_on_or_max_lost_is_a_configuration_error(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError, match="Restart"):
        Restart(**bad)  # type: ignore[arg-type]
