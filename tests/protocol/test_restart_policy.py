"""The restart policy as data: its backoff for any attempt, its stored form, its team-file form."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retinue import Restart, Team, TeamFileError
from retinue.protocol.supervision import RestartRecord

SETTINGS = settings(max_examples=200, derandomize=True, deadline=None)

SECONDS = st.floats(min_value=0.0, max_value=1e308, allow_nan=False, allow_infinity=False)


@st.composite
def policies(draw: st.DrawFn) -> Restart:
    low, high = sorted((draw(SECONDS), draw(SECONDS)))
    jitter = draw(st.floats(min_value=0.0, max_value=1.0))
    return Restart(backoff_s=low, backoff_max_s=high, jitter=jitter)


ATTEMPTS = st.integers(min_value=-5, max_value=10**6)


def test_attempt_1025_no_longer_overflows() -> None:
    """``2.0 ** 1024`` overflows: the backoff of a policy that never gives up, one restart
    a minute, raised OverflowError after ~17 h (inside the settle, wedging the agent)."""
    policy = Restart(backoff_s=1.0, backoff_max_s=60.0, jitter=0.0)
    assert policy.delay(1025, random.Random(0)) == 60.0
    assert policy.delay(10**6, random.Random(0)) == 60.0


@SETTINGS
@given(policy=policies(), restart=ATTEMPTS, seed=st.integers(0, 2**32))
def test_a_delay_is_finite_and_within_its_bounds(policy: Restart, restart: int, seed: int) -> None:
    delay = policy.delay(restart, random.Random(seed))
    assert math.isfinite(delay)
    assert 0.0 <= delay <= policy.backoff_max_s * (1.0 + policy.jitter)


@SETTINGS
@given(policy=policies(), restart=ATTEMPTS, later=st.integers(0, 10**6))
def test_without_jitter_the_delay_never_shrinks(policy: Restart, restart: int, later: int) -> None:
    plain = msgspec.structs.replace(policy, jitter=0.0)
    rng = random.Random(0)
    first = plain.delay(restart, rng)
    assert first <= plain.delay(restart + later, rng) <= plain.backoff_max_s
    if restart >= 1:  # the formula, in exact arithmetic (past 2**2100 every cap is reached)
        exact = Fraction(plain.backoff_s) * 2 ** min(restart - 1, 2100)
        assert first == pytest.approx(float(min(exact, Fraction(plain.backoff_max_s))))


def test_the_stored_form_has_the_policys_fields_in_order_with_its_defaults() -> None:
    stored = msgspec.structs.fields(RestartRecord)
    policy = msgspec.structs.fields(Restart)
    assert [(f.name, f.default) for f in stored] == [(f.name, f.default) for f in policy]


def test_the_stored_form_round_trips_and_ignores_a_newer_retinues_fields() -> None:
    policy = Restart(on=("failed", "lost"), retry_on="any", max_lost=5, backoff_s=0.25)
    raw = msgspec.msgpack.encode(RestartRecord.of(policy))
    assert msgspec.msgpack.decode(raw, type=RestartRecord).policy() == policy
    newer = msgspec.msgpack.encode([*msgspec.msgpack.decode(raw), "a field of tomorrow"])
    assert msgspec.msgpack.decode(newer, type=RestartRecord).policy() == policy


def test_a_team_file_sets_retry_on_and_max_lost() -> None:
    team = Team.from_toml(
        "[agents.a]\nmodel = 'retinue/scripted'\n"
        "restart = { on = ['failed', 'lost'], retry_on = 'any', max_lost = 5 }\n",
        environ=False,
    )
    (profile,) = team.profiles()
    assert profile.restart == Restart(on=("failed", "lost"), retry_on="any", max_lost=5)


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("restart = { retry_on = 'sometimes' }", "restart.retry_on"),
        ("restart = { max_lost = 0 }", "restart"),
    ],
)
def test_a_bad_retry_on_or_max_lost_in_a_team_file_names_the_key(line: str, key: str) -> None:
    with pytest.raises(TeamFileError) as caught:
        Team.from_toml(f"[agents.a]\n{line}\n", source="team.toml", environ=False)
    assert caught.value.key == key
