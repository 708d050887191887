"""Fixtures of the LLM tests: litellm loaded once per process, a local OpenAI stub, runtimes.

litellm costs seconds to import, so it is imported once (module-scoped
fixture) and every test goes through the real litellm call path: the
scripted custom provider or litellm's OpenAI provider against
:class:`~retinue.testing.OpenAIStub` on 127.0.0.1. No network.
"""

from __future__ import annotations

import faulthandler
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support import wait_settled

from retinue import AgentInfo, Limits, Profile, Runtime
from retinue.llm import LiteLLMRunner
from retinue.llm.model import load_litellm
from retinue.testing import OpenAIStub

WATCHDOG_S = 240.0
SETTLE_S = 60.0  # an upper bound under a loaded CI machine, never a timing assertion


@pytest.fixture(autouse=True)
def _llm_watchdog() -> Iterator[None]:
    """Abort with every thread's stack if one LLM test hangs."""
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def litellm() -> ModuleType:
    """litellm, imported once for the whole run (as retinue imports it)."""
    return load_litellm()


@pytest.fixture
def stub(litellm: ModuleType) -> Iterator[OpenAIStub]:
    """A running OpenAI chat-completions stub (scripted answers by default)."""
    with OpenAIStub() as server:
        yield server


def stub_runner(stub: OpenAIStub, **kwargs: Any) -> LiteLLMRunner:
    """A runner on litellm's OpenAI provider path against ``stub``; quick backoff."""
    kwargs.setdefault("retry_base_s", 0.01)
    kwargs.setdefault("retry_max_s", 5.0)
    kwargs.setdefault("request_timeout_s", 30)
    return LiteLLMRunner("openai/stub-model", api_base=stub.url, api_key="x", **kwargs)


@pytest.fixture
def llm_runtime(tmp_path: Path, litellm: ModuleType) -> Iterator[Any]:
    """Return ``open(profiles, *, path=None, workspace=None, **limits) -> Runtime``."""
    opened: list[Runtime] = []

    def _open(
        profiles: list[Profile],
        *,
        path: Path | None = None,
        workspace: Path | None = None,
        **limits: Any,
    ) -> Runtime:
        limits.setdefault("wait_default_s", 30.0)
        rt = Runtime.open(
            path or tmp_path / "store",
            profiles=profiles,
            limits=Limits(**limits),
            workspace=workspace,
        )
        opened.append(rt)
        return rt

    yield _open
    for rt in reversed(opened):
        rt.shutdown()


def run(rt: Runtime, profile: str, task: str, *, name: str | None = None) -> AgentInfo:
    """Spawn a top-level agent and return it once its first turn settled."""
    info = rt.spawn(profile, task, name=name)
    return wait_settled(rt, info.id, info.generation, timeout=SETTLE_S)


def tool_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the tool results in a chat."""
    return [m for m in messages if m.get("role") == "tool"]


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    """An assistant message that calls one tool."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }
