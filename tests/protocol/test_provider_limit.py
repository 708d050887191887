"""``retinue.ProviderLimit``: its checks, what a match covers, the environment, the merge."""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec
import pytest

from retinue import InvalidLimits, ProviderLimit
from retinue.protocol.provider_limits import (
    ENV_VAR,
    AdmissionController,
    ModelCall,
    merge_provider_limits,
    provider_limits_from_env,
    specificity,
)


def test_the_issues_signature_and_its_defaults() -> None:
    limit = ProviderLimit("openai/gpt-4.1-mini", max_in_flight=8, requests_per_minute=500)
    assert (limit.match, limit.max_in_flight, limit.requests_per_minute) == (
        "openai/gpt-4.1-mini",
        8,
        500,
    )
    assert (limit.tokens_per_minute, limit.adaptive, limit.min_in_flight) == (None, True, 1)
    assert (limit.decrease, limit.increase, limit.jitter) == (0.5, 1.0, 0.25)
    assert limit.kind == "model"
    with pytest.raises(TypeError):
        ProviderLimit("openai", 8)  # type: ignore[call-arg]  # the limits are keyword-only


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"match": ""}, "ProviderLimit.match"),
        ({"match": "open ai"}, "without spaces"),
        ({"match": 3}, "ProviderLimit.match must be"),
        ({"match": "openai/"}, "empty provider or name"),
        ({"match": "/gpt-4o"}, "empty provider or name"),
        ({"match": "ftp://host/v1"}, "http(s) api_base"),
        ({"match": "http:///v1"}, "with a host"),
        ({"match": "http://host/v1?key=x"}, "without query"),
        ({"match": "http://host:99999/v1"}, "is not a URL"),
        ({"max_in_flight": 0}, "ProviderLimit.max_in_flight must be a positive integer"),
        ({"requests_per_minute": -5}, "ProviderLimit.requests_per_minute"),
        ({"tokens_per_minute": 1.5}, "ProviderLimit.tokens_per_minute"),
        ({"tokens_per_minute": True}, "ProviderLimit.tokens_per_minute"),
        ({"min_in_flight": 0}, "ProviderLimit.min_in_flight must be a positive integer"),
        ({"min_in_flight": 5, "max_in_flight": 4}, "min_in_flight (5) is above max_in_flight"),
        ({"adaptive": 1}, "ProviderLimit.adaptive must be true or false"),
        ({"decrease": 1.0}, "ProviderLimit.decrease must be a number in (0, 1)"),
        ({"decrease": 0}, "ProviderLimit.decrease"),
        ({"increase": 0}, "ProviderLimit.increase"),
        ({"increase": float("nan")}, "ProviderLimit.increase"),
        ({"max_retry_after_s": float("inf")}, "ProviderLimit.max_retry_after_s"),
        ({"jitter": 1.5}, "ProviderLimit.jitter must be a number in [0, 1]"),
    ],
)
def test_a_bad_field_is_refused_with_its_name(kwargs: dict[str, Any], says: str) -> None:
    arguments = {"match": "openai", **kwargs}
    match = arguments.pop("match")
    with pytest.raises(InvalidLimits) as caught:
        ProviderLimit(match, **arguments)
    assert says in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_a_match_is_normalised() -> None:
    assert ProviderLimit("  openai ").match == "openai"
    endpoint = ProviderLimit("HTTP://LocalHost:8000/V1/")
    assert endpoint.match == "http://localhost:8000/V1"  # a path keeps its case
    assert endpoint.kind == "endpoint"
    assert ProviderLimit("anthropic").kind == "provider"


@pytest.mark.parametrize(
    ("match", "model", "api_base", "provider", "covered"),
    [
        ("openai", "openai/gpt-4.1-mini", None, None, True),
        ("openai", "openai/gpt-4o", "http://proxy/v1", None, True),
        ("openai", "anthropic/claude-3-5-sonnet", None, None, False),
        ("openai", "openaix/gpt", None, None, False),
        ("openai", "gpt-4o", None, None, False),  # no provider in the model string...
        ("openai", "gpt-4o", None, "openai", True),  # ...unless the caller names litellm's
        ("openai/gpt-4.1-mini", "openai/gpt-4.1-mini", None, None, True),
        ("openai/gpt-4.1", "openai/gpt-4.1-mini", None, None, False),
        ("http://127.0.0.1:8000", "openai/x", "http://127.0.0.1:8000/v1", None, True),
        ("http://127.0.0.1:8000/v1", "openai/x", "HTTP://127.0.0.1:8000/v1/", None, True),
        ("http://127.0.0.1:8000/v1", "openai/x", "http://127.0.0.1:8000/v10", None, False),
        ("http://127.0.0.1:8000/v1", "openai/x", "http://127.0.0.1:8001/v1", None, False),
        ("http://127.0.0.1:8000/v1", "openai/x", None, None, False),
    ],
)
def test_what_a_match_covers(
    match: str, model: str, api_base: str | None, provider: str | None, covered: bool
) -> None:
    assert ProviderLimit(match).covers(model, api_base, provider) is covered


def test_a_calls_limits_come_most_specific_first() -> None:
    """An endpoint (the longest first), then the model, then the provider."""
    limits = [
        ProviderLimit("openai"),
        ProviderLimit("http://127.0.0.1:8000"),
        ProviderLimit("openai/gpt-4.1-mini"),
        ProviderLimit("http://127.0.0.1:8000/v1"),
        ProviderLimit("anthropic"),
    ]
    controller = AdmissionController(limits, random.Random(0))
    call = ModelCall("c", "tree", "openai/gpt-4.1-mini", api_base="http://127.0.0.1:8000/v1")
    assert [limit.match for limit in controller.matching(call)] == [
        "http://127.0.0.1:8000/v1",
        "http://127.0.0.1:8000",
        "openai/gpt-4.1-mini",
        "openai",
    ]
    assert specificity("openai") < specificity("openai/x") < specificity("http://h")


def test_the_environment_variable_holds_json_tables() -> None:
    environ = {
        ENV_VAR: json.dumps(
            {
                "openai/gpt-4.1-mini": {"requests_per_minute": 500, "tokens_per_minute": 200000},
                "http://127.0.0.1:8000/v1/": {"max_in_flight": 4, "adaptive": False},
            }
        )
    }
    assert provider_limits_from_env(environ) == (
        ProviderLimit("openai/gpt-4.1-mini", requests_per_minute=500, tokens_per_minute=200000),
        ProviderLimit("http://127.0.0.1:8000/v1", max_in_flight=4, adaptive=False),
    )
    for unset in ({}, {ENV_VAR: ""}, {ENV_VAR: "  "}, {ENV_VAR: "none"}):
        assert provider_limits_from_env(unset) == ()


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{openai: 1}", "invalid JSON"),
        ('["openai"]', "must be a JSON object"),
        ('{"openai": 3}', "must be a table of settings"),
        ('{"openai": {"rpm": 3}}', "unknown key 'rpm'"),
        ('{"openai": {"match": "x"}}', "unknown key 'match'"),
        ('{"openai": {"max_in_flight": "8"}}', "Expected int"),
        ('{"openai": {"max_in_flight": 0}}', "max_in_flight must be a positive integer"),
        ('{"http://h/v1": {}, "HTTP://H/v1/": {}}', "names 'http://h/v1' twice"),
    ],
)
def test_a_bad_environment_variable_is_refused_naming_it(raw: str, says: str) -> None:
    with pytest.raises(InvalidLimits) as caught:
        provider_limits_from_env({ENV_VAR: raw})
    assert ENV_VAR in str(caught.value) and says in str(caught.value)


def test_a_later_source_replaces_a_match_whole_and_order_is_kept() -> None:
    env = [ProviderLimit("openai", max_in_flight=8), ProviderLimit("anthropic", max_in_flight=2)]
    team = [ProviderLimit("openai", requests_per_minute=100), ProviderLimit("openai/x")]
    explicit = [ProviderLimit("anthropic", tokens_per_minute=1000)]
    assert merge_provider_limits(env, team, explicit) == (
        ProviderLimit("openai", requests_per_minute=100),  # not max_in_flight=8: whole
        ProviderLimit("anthropic", tokens_per_minute=1000),
        ProviderLimit("openai/x"),
    )
    with pytest.raises(InvalidLimits, match="names 'openai' twice"):
        merge_provider_limits([ProviderLimit("openai"), ProviderLimit(" openai")])
    with pytest.raises(InvalidLimits, match=r"must hold retinue\.ProviderLimit values"):
        merge_provider_limits(["openai"])  # type: ignore[list-item]


def test_a_limit_crosses_the_wire_unchanged() -> None:
    limit = ProviderLimit("openai", max_in_flight=4, tokens_per_minute=9000, adaptive=False)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(limit), type=ProviderLimit) == limit
