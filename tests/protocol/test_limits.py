"""Limits: defaults, validation, replace and environment overrides."""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
import pytest

from retinue.errors import ArgumentTypeError, InvalidLimits, RetinueError, TeamFileError
from retinue.protocol.limits import Limits
from retinue.team import load_team

DEFAULTS: dict[str, int | float | None] = {
    "depth_cap": 5,
    "fanout_cap": 8,
    "max_tree_agents": 64,
    "max_agents": 10_000,
    "max_active_turns": 32,
    "mailbox_capacity": 100,
    "message_max_bytes": 16_384,
    "output_max_bytes": 51_200,
    "dedup_key_max_length": 256,
    "pending_completions_per_agent": 20,
    "wait_default_s": 30.0,
    "wait_max_s": 3600.0,
    # Retention (compaction) bounds, added after the twelve caps.
    "retain_closed_agents": 10_000,
    "retain_read_messages": 100_000,
    "retain_age_s": 7 * 24 * 3600.0,
    "compact_interval_s": 60.0,
    # LLM layer: token budgets (None = unlimited), transcript bound, per-model concurrency.
    "tokens_per_agent": None,
    "tokens_per_tree": None,
    "transcript_max_bytes": 262_144,
    "max_concurrent_calls": 64,
    "event_queue_capacity": 10_000,
    # Execution: runners that ignored an interrupt, beyond max_active_turns.
    "max_abandoned_runners": 8,
    # Supervision: cost budgets (None = unlimited), the call estimate, approval timeouts.
    "usd_per_agent": None,
    "usd_per_tree": None,
    "call_reserve_tokens": None,
    "approval_timeout_s": None,
    # Observability: the text a live tool-call event carries.
    "event_preview_bytes": 1024,
    "trace_content_max_bytes": 16_384,
    # The web view's timeline: the model calls a stored transcript keeps the times of.
    "transcript_max_calls": 200,
    # The store file: the share of the map its high-water mark reaches before a warning.
    "store_map_warn_ratio": 0.9,
    # Provider limits: the span of their per-minute windows.
    "provider_window_s": 60.0,
    # Fork: the settled generations of each agent kept to fork as of.
    "fork_generations": 16,
    # The control socket: connections, frame size, a frame's read time, calls in flight.
    "control_max_connections": 64,
    "control_max_message_bytes": 16 * 1024 * 1024,
    "control_read_timeout_s": 10.0,
    "control_max_calls": 1_000,
    # agents(): the largest page one call may ask for.
    "agents_page_max": 10_000,
}
FLOAT_FIELDS = [
    "wait_default_s",
    "wait_max_s",
    "retain_age_s",
    "compact_interval_s",
    "store_map_warn_ratio",
    "provider_window_s",
    "control_read_timeout_s",
]
OPTIONAL_INT_FIELDS = ["tokens_per_agent", "tokens_per_tree", "call_reserve_tokens"]
OPTIONAL_FLOAT_FIELDS = ["usd_per_agent", "usd_per_tree", "approval_timeout_s"]
OPTIONAL_FIELDS = OPTIONAL_INT_FIELDS + OPTIONAL_FLOAT_FIELDS
INT_FIELDS = [f for f in DEFAULTS if f not in FLOAT_FIELDS and f not in OPTIONAL_FIELDS]


def test_fields_and_defaults_in_order() -> None:
    limits = Limits()
    assert limits.__struct_fields__ == tuple(DEFAULTS)
    assert msgspec.structs.asdict(limits) == DEFAULTS
    for field in FLOAT_FIELDS:
        assert type(getattr(limits, field)) is float
    for field in INT_FIELDS:
        assert type(getattr(limits, field)) is int


def test_limits_is_immutable() -> None:
    limits = Limits()
    with pytest.raises(AttributeError):
        limits.depth_cap = 3  # type: ignore[misc]


def test_limits_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        Limits(3)  # type: ignore[call-arg]


def test_valid_values_are_kept() -> None:
    limits = Limits(depth_cap=1, fanout_cap=2, wait_default_s=0.5, wait_max_s=10)
    assert (limits.depth_cap, limits.fanout_cap) == (1, 2)
    assert limits.wait_default_s == 0.5
    assert limits.wait_max_s == 10.0
    assert type(limits.wait_max_s) is float


@pytest.mark.parametrize("field", INT_FIELDS)
@pytest.mark.parametrize("value", [0, -1, True, False, 1.5, 5.0, "5", None])
def test_bad_int_field_raises_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidLimits, match=rf"\b{field}\b"):
        Limits(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("field", FLOAT_FIELDS)
@pytest.mark.parametrize("value", [0, 0.0, -1, -0.5, True, "1", None, math.nan, math.inf])
def test_bad_float_field_raises_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidLimits, match=rf"\b{field}\b"):
        Limits(**{field: value})  # type: ignore[arg-type]


def test_invalid_limits_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        Limits(depth_cap=0)
    assert issubclass(InvalidLimits, RetinueError)


def test_replace_returns_a_validated_copy() -> None:
    limits = Limits()
    changed = limits.replace(depth_cap=2, wait_max_s=60)
    assert changed.depth_cap == 2
    assert changed.wait_max_s == 60.0
    assert type(changed.wait_max_s) is float
    assert limits.depth_cap == 5
    assert changed.fanout_cap == limits.fanout_cap
    with pytest.raises(InvalidLimits, match="fanout_cap"):
        limits.replace(fanout_cap=0)
    with pytest.raises(ArgumentTypeError):
        limits.replace(no_such_field=1)


def test_msgspec_round_trip_and_decode_validation() -> None:
    limits = Limits(depth_cap=3)
    assert msgspec.json.decode(msgspec.json.encode(limits), type=Limits) == limits
    with pytest.raises(msgspec.ValidationError, match="depth_cap"):
        msgspec.json.decode(b'{"depth_cap": 0}', type=Limits)


def test_env_var_names() -> None:
    assert Limits.env_var("depth_cap") == "RETINUE_DEPTH_CAP"
    assert Limits.env_var("fanout_cap") == "RETINUE_FANOUT_CAP"
    assert Limits.env_var("wait_max_s") == "RETINUE_WAIT_MAX_S"
    with pytest.raises(ArgumentTypeError):
        Limits.env_var("nope")


# -- from_env ----------------------------------------------------------------------


def test_from_env_with_empty_environment_gives_defaults() -> None:
    assert Limits.from_env({}) == Limits()


@pytest.mark.parametrize("field", list(DEFAULTS))
def test_every_field_can_be_set_from_the_environment(field: str) -> None:
    value = 0.7 if field == "store_map_warn_ratio" else 7  # a share is at most 1
    limits = Limits.from_env({"RETINUE_" + field.upper(): str(value)})
    assert getattr(limits, field) == value
    others = {k: v for k, v in msgspec.structs.asdict(limits).items() if k != field}
    assert others == {k: v for k, v in DEFAULTS.items() if k != field}


def test_env_values_are_stripped_and_floats_parse() -> None:
    limits = Limits.from_env({"RETINUE_DEPTH_CAP": " 3 ", "RETINUE_WAIT_DEFAULT_S": "2.5"})
    assert limits.depth_cap == 3
    assert limits.wait_default_s == 2.5


@pytest.mark.parametrize("blank", ["", " ", "\t\n"])
def test_blank_env_value_means_default(blank: str) -> None:
    limits = Limits.from_env({"RETINUE_DEPTH_CAP": blank, "RETINUE_WAIT_MAX_S": blank})
    assert limits == Limits()


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("RETINUE_DEPTH_CAP", "abc"),
        ("RETINUE_DEPTH_CAP", "5.0"),
        ("RETINUE_DEPTH_CAP", "0x10"),
        ("RETINUE_FANOUT_CAP", "eight"),
        ("RETINUE_WAIT_MAX_S", "1.5x"),
        ("RETINUE_WAIT_DEFAULT_S", "soon"),
    ],
)
def test_non_number_env_value_raises_naming_the_variable(var: str, value: str) -> None:
    with pytest.raises(InvalidLimits, match=var):
        Limits.from_env({var: value})


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("RETINUE_DEPTH_CAP", "0"),
        ("RETINUE_MAX_AGENTS", "-4"),
        ("RETINUE_WAIT_MAX_S", "0"),
        ("RETINUE_WAIT_MAX_S", "nan"),
        ("RETINUE_WAIT_DEFAULT_S", "inf"),
    ],
)
def test_out_of_range_env_value_raises_naming_the_variable(var: str, value: str) -> None:
    with pytest.raises(InvalidLimits, match=var):
        Limits.from_env({var: value})


def test_keyword_overrides_win_over_the_environment() -> None:
    env = {"RETINUE_DEPTH_CAP": "3", "RETINUE_FANOUT_CAP": "4"}
    limits = Limits.from_env(env, depth_cap=9)
    assert limits.depth_cap == 9
    assert limits.fanout_cap == 4


def test_override_replaces_an_invalid_environment_value() -> None:
    limits = Limits.from_env({"RETINUE_DEPTH_CAP": "junk"}, depth_cap=2)
    assert limits.depth_cap == 2


def test_bad_override_raises() -> None:
    with pytest.raises(InvalidLimits, match="depth_cap"):
        Limits.from_env({}, depth_cap=0)
    with pytest.raises(ArgumentTypeError):
        Limits.from_env({}, nope=1)


def test_unrelated_prefixed_variables_are_ignored() -> None:
    assert Limits.from_env({"RETINUE_STORE": "x", "RETINUE_NOPE": "junk"}) == Limits()


def test_from_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RETINUE_DEPTH_CAP", "2")
    monkeypatch.setenv("RETINUE_WAIT_MAX_S", "12")
    limits = Limits.from_env()
    assert limits.depth_cap == 2
    assert limits.wait_max_s == 12.0


# -- token budgets: optional fields (None = unlimited) ---------------------------------


@pytest.mark.parametrize("field", OPTIONAL_INT_FIELDS)
@pytest.mark.parametrize("value", [0, -1, True, 1.5, "5"])
def test_bad_budget_raises_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidLimits, match=rf"\b{field}\b"):
        Limits(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("field", OPTIONAL_FLOAT_FIELDS)
@pytest.mark.parametrize("value", [0, -1, True, "5", math.nan, math.inf])
def test_bad_optional_float_raises_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidLimits, match=rf"\b{field}\b"):
        Limits(**{field: value})  # type: ignore[arg-type]
    assert getattr(Limits(**{field: 2}), field) == 2.0


@pytest.mark.parametrize("field", OPTIONAL_FIELDS)
def test_budget_is_unlimited_by_default_and_settable(field: str) -> None:
    assert getattr(Limits(), field) is None
    assert getattr(Limits(**{field: 500}), field) == 500
    assert getattr(Limits(**{field: 500}).replace(**{field: None}), field) is None


@pytest.mark.parametrize("field", OPTIONAL_FIELDS)
@pytest.mark.parametrize("text", ["none", "Unlimited", " NONE "])
def test_budget_env_none_means_unlimited(field: str, text: str) -> None:
    var = "RETINUE_" + field.upper()
    assert getattr(Limits.from_env({var: text}), field) is None
    with pytest.raises(InvalidLimits, match=var):
        Limits.from_env({var: "lots"})


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("depth_cap", 99999999999999999999, "depth_cap is at most 509"),
        ("depth_cap", 510, "depth_cap is at most 509"),
        ("fanout_cap", 2**63, "fanout_cap is at most"),
    ],
)
def test_a_bound_beyond_what_can_be_stored_or_reached_is_refused(
    field: str, value: int, said: str
) -> None:
    with pytest.raises(InvalidLimits, match=said):
        Limits(**{field: value})


def test_a_huge_depth_cap_in_a_team_file_is_a_team_file_error(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text('[limits]\ndepth_cap = 99999999999999999999\n[agents.lead]\nrunner = "x:y"\n')
    with pytest.raises(TeamFileError, match="depth_cap"):
        load_team(team)


@pytest.mark.parametrize("value", [1.01, 2, 100.0])
def test_a_map_share_past_one_is_refused(value: object) -> None:
    with pytest.raises(InvalidLimits, match=r"store_map_warn_ratio.*at most 1\.0"):
        Limits(store_map_warn_ratio=value)  # type: ignore[arg-type]
    assert Limits(store_map_warn_ratio=1).store_map_warn_ratio == 1.0
    assert Limits.from_env({"RETINUE_STORE_MAP_WARN_RATIO": "0.5"}).store_map_warn_ratio == 0.5
