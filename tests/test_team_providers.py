"""Provider limits in team files (``[providers."<match>"]``) and a profile's ``priority``."""

from __future__ import annotations

import json

import pytest

from retinue import ConfigurationError, Profile, ProviderLimit, Team, TeamFileError
from retinue.protocol.provider_limits import ENV_VAR

TEAM = """
[agents.lead]
model = "retinue/scripted"
subagents = ["leaf"]
priority = 2

[agents.leaf]

[providers.openai]
max_in_flight = 16

[providers."openai/gpt-4.1-mini"]
requests_per_minute = 500
tokens_per_minute = 200000

[providers."HTTP://127.0.0.1:8000/v1/"]
max_in_flight = 4
adaptive = false
decrease = 0.7
"""


def test_the_tables_are_provider_limits_on_the_team() -> None:
    team = Team.from_toml(TEAM, environ=False)
    assert team.provider_limits == (
        ProviderLimit("openai", max_in_flight=16),
        ProviderLimit("openai/gpt-4.1-mini", requests_per_minute=500, tokens_per_minute=200000),
        ProviderLimit("http://127.0.0.1:8000/v1", max_in_flight=4, adaptive=False, decrease=0.7),
    )
    assert Team.from_toml("[agents.a]", environ=False).provider_limits == ()


def test_a_table_replaces_the_environments_limit_of_its_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        ENV_VAR,
        json.dumps({"openai": {"requests_per_minute": 60}, "anthropic": {"max_in_flight": 2}}),
    )
    limits = {limit.match: limit for limit in Team.from_toml(TEAM).provider_limits}
    assert limits["openai"] == ProviderLimit("openai", max_in_flight=16)  # whole, not merged
    assert limits["anthropic"] == ProviderLimit("anthropic", max_in_flight=2)
    assert "anthropic" not in {x.match for x in Team.from_toml(TEAM, environ=False).provider_limits}


@pytest.mark.parametrize(
    ("text", "table", "key", "words"),
    [
        ("[providers.openai]\nrpm = 5", "providers.openai", "rpm", "unknown key; known keys"),
        ("[providers.openai]\nmatch = 'x'", "providers.openai", "match", "the table's name"),
        (
            "[providers.openai]\nrequests_per_minute = 0",
            "providers.openai",
            "requests_per_minute",
            "must be a positive integer",
        ),
        ("[providers.openai]\nmax_in_flight = 'x'", "providers.openai", "max_in_flight", "int"),
        ("[providers.openai]\ndecrease = 2.0", "providers.openai", "decrease", "(0, 1)"),
        (
            "[providers.openai]\nmin_in_flight = 3\nmax_in_flight = 2",
            "providers.openai",
            "min_in_flight",
            "above max_in_flight",
        ),
        ('[providers."openai/"]', 'providers."openai/"', "", "empty provider or name"),
        ('[providers."ftp://h/v1"]', 'providers."ftp://h/v1"', "", "http(s) api_base"),
        ("[providers]\nopenai = 3", "providers.openai", "", "must be a table"),
        (
            '[providers."http://h/v1"]\n[providers."HTTP://H/v1/"]',
            'providers."HTTP://H/v1/"',
            "",
            "differ only in case or a trailing /",
        ),
        ("[agents.b]\npriority = 0", "agents.b", "priority", "> 0"),
    ],
)
def test_a_bad_table_is_named_with_its_key(text: str, table: str, key: str, words: str) -> None:
    with pytest.raises(TeamFileError) as caught:
        Team.from_toml(text + "\n[agents.a]\n", source="t.toml", environ=False)
    error = caught.value
    assert (error.table, error.key) == (table, key)
    assert words in str(error) and str(error).startswith("t.toml: [")


def test_an_agents_priority_reaches_its_profile() -> None:
    profiles = {p.name: p for p in Team.from_toml(TEAM, environ=False).profiles()}
    assert (profiles["lead"].priority, profiles["leaf"].priority) == (2.0, 1.0)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "2", 1e7])
def test_a_profiles_priority_is_a_positive_number(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="priority must be a positive number"):
        Profile("p", priority=bad)  # type: ignore[arg-type]
    assert Profile("p", priority=3).priority == 3.0
