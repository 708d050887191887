"""The service soak's team: model trees and async Python trees, each a lead and three leaves.

- A *model tree*: ``model_lead`` (a ``LiteLLMRunner`` on ``openai/scripted``,
  served by an :class:`~retinue.testing.OpenAIStub` with the scripted model's
  answers, each 0.1-0.6 s late) delegates its task to its three leaf profiles
  in one ``spawn_subagents`` call, waits for them, and sums them up: one lead
  turn, three leaf turns, five model calls.
- A *Python tree*: ``py_lead`` (an async runner) runs three ``py_leaf``
  children with ``turn.run_many_async``; a leaf awaits 0.1-0.6 s (drawn from
  its task) and answers.

A tree's lead is spawned by the host under a key (its idempotency key, also
in its task) and closed with ``close_tree`` once its completion came.
"""

from __future__ import annotations

import asyncio
import random

from retinue import Profile, Turn
from retinue.errors import RetinueError

__all__ = ["LEADS", "MODEL", "profiles", "task_of"]

MODEL = "openai/scripted"
"""The model name the stub answers under (its answers are the scripted model's)."""
LEAVES = 3
LEADS = ("model_lead", "py_lead")
"""The two kinds of tree, by their lead's profile."""
DELAY_S = (0.1, 0.6)
"""The range of a model call's delay and of a Python leaf's await."""


def task_of(key: str) -> str:
    """The task of the tree spawned under ``key`` (the same on a retried spawn)."""
    return f"tree {key}: look at item {key} and report"


async def _py_lead(turn: Turn) -> str:
    requests = [("py_leaf", f"{turn.task} / part {i}") for i in range(LEAVES)]
    results = await turn.run_many_async(requests, timeout=300)
    failed = [r for r in results if isinstance(r, RetinueError)]
    if failed:
        raise RuntimeError(f"{len(failed)} leaves failed: {failed[0]}")
    return f"{len(results)} parts done"


async def _py_leaf(turn: Turn) -> str:
    await asyncio.sleep(random.Random(turn.task).uniform(*DELAY_S))
    return f"done: {turn.task[-40:]}"


def profiles(stub_url: str) -> list[Profile]:
    """The soak's profiles, the model ones calling the stub at ``stub_url``."""
    settings = {"api_base": stub_url, "api_key": "soak", "request_timeout_s": 120.0}
    leaves = [f"model_leaf_{i}" for i in range(LEAVES)]
    return [
        Profile("model_lead", subagents=leaves, model=MODEL, model_settings=settings),
        *(Profile(name, model=MODEL, model_settings=settings) for name in leaves),
        Profile("py_lead", subagents=["py_leaf"], runner=_py_lead),
        Profile("py_leaf", runner=_py_leaf),
    ]
