"""A model call's token estimate: prompt plus the completion expected, learnt from usage."""

from __future__ import annotations

import json

import pytest

from retinue import InvalidArgument, Usage
from retinue.protocol.provider_limits import DEFAULT_COMPLETION_TOKENS, TokenEstimator, rough_tokens


def test_the_estimate_is_the_prompt_plus_max_tokens_else_the_largest_completion() -> None:
    estimator = TokenEstimator()
    assert estimator.estimate("a", 100) == 100 + DEFAULT_COMPLETION_TOKENS
    assert estimator.estimate("a", 100, max_tokens=50) == 150
    estimator.observe("a", Usage(prompt_tokens=100, completion_tokens=300))
    estimator.observe("a", Usage(prompt_tokens=100, completion_tokens=120))
    assert estimator.estimate("a", 100) == 400  # the largest so far, not the last
    assert estimator.estimate("a", 100, max_tokens=10) == 110  # max_tokens wins when set
    assert estimator.estimate("b", 0) == DEFAULT_COMPLETION_TOKENS  # agents apart
    estimator.forget("a")
    assert estimator.estimate("a", 1) == 1 + DEFAULT_COMPLETION_TOKENS


def test_the_estimator_keeps_a_bounded_number_of_agents_least_recent_out() -> None:
    estimator = TokenEstimator(default_completion_tokens=7, max_agents=2)
    for agent in ("a", "b"):
        estimator.observe(agent, Usage(prompt_tokens=0, completion_tokens=50))
    assert estimator.completion("a") == 50  # "a" is now the most recent
    estimator.observe("c", Usage(prompt_tokens=0, completion_tokens=60))
    assert (estimator.completion("a"), estimator.completion("b")) == (50, 7)
    for bad in ({"default_completion_tokens": -1}, {"max_agents": 0}):
        with pytest.raises(InvalidArgument):
            TokenEstimator(**bad)


def test_the_rough_count_is_four_characters_of_json_a_token() -> None:
    chat = [{"role": "user", "content": "x" * 400}]
    assert rough_tokens(chat) == len(json.dumps([chat, []])) // 4 == 109
    assert rough_tokens([]) == 2  # "[[], []]"
