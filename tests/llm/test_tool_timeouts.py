"""tool_timeout_s end to end: the runner's keyword, team files, and what the model sees."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from llm.conftest import run, stub_runner, tool_call, tool_messages
from retinue import AgentState, Profile, Runtime
from retinue.errors import ConfigurationError, TeamFileError
from retinue.llm import LiteLLMRunner, tool
from retinue.team import Team
from retinue.testing import OpenAIStub, StubReply

release = threading.Event()


@tool
def stuck_lookup(key: str) -> str:
    """Look a key up in a system that hangs."""
    release.wait(60)
    return key


def scripted(replies: list[dict[str, Any]]) -> Any:
    return lambda request: StubReply(message=replies[min(request.number, len(replies)) - 1])


def test_a_host_tool_past_the_runners_tool_timeout_gives_the_model_an_error(
    stub: OpenAIStub, llm_runtime: Any
) -> None:
    release.clear()
    stub.handler = scripted(
        [tool_call("stuck_lookup", {"key": "k"}), {"role": "assistant", "content": "gave up"}]
    )
    runner = stub_runner(stub, host_tools={"stuck_lookup": stuck_lookup}, tool_timeout_s=0.5)
    rt: Runtime = llm_runtime([Profile("leaf", tools=["stuck_lookup"], runner=runner)])
    try:
        info = run(rt, "leaf", "look it up")
    finally:
        release.set()
    assert info.state is AgentState.COMPLETED, info.error
    assert info.output == "gave up"
    results = tool_messages(stub.requests[-1].messages)
    assert [json.loads(r["content"]) for r in results] == [
        {"error": "tool stuck_lookup timed out after 0.5 s"}
    ]


def test_file_tools_get_the_runners_tool_timeout(
    stub: OpenAIStub, llm_runtime: Any, tmp_path: Path
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("hi\n")
    stub.handler = scripted(
        [tool_call("read_file", {"path": "a.txt"}), {"role": "assistant", "content": "read"}]
    )
    runner = stub_runner(stub, tool_timeout_s=30, workspace=tmp_path / "ws")
    rt: Runtime = llm_runtime([Profile("leaf", tools="read", runner=runner)])
    info = run(rt, "leaf", "read it")
    assert info.state is AgentState.COMPLETED, info.error
    assert json.loads(tool_messages(stub.requests[-1].messages)[0]["content"])["content"] == "hi\n"


@pytest.mark.parametrize("bad", [0, -2, float("nan"), "fast"])
def test_the_runner_refuses_a_bad_tool_timeout(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="tool_timeout_s"):
        LiteLLMRunner("retinue/scripted", tool_timeout_s=bad)


def test_team_files_set_tool_timeout_s_in_defaults_and_per_agent() -> None:
    team = Team.from_toml(
        """
        [defaults]
        model = "retinue/scripted"
        tool_timeout_s = 15
        [agents.lead]
        subagents = ["helper"]
        [agents.helper]
        tool_timeout_s = 2.5
        """,
        environ=False,
    )
    lead, helper = team.profiles()
    assert lead.model_settings == {"tool_timeout_s": 15}
    assert helper.model_settings == {"tool_timeout_s": 2.5}
    assert LiteLLMRunner(helper.model or "", **helper.model_settings).tool_timeout_s == 2.5


@pytest.mark.parametrize("value", ["0", "-1", '"soon"', "inf", "nan"])
def test_team_files_refuse_a_bad_tool_timeout(value: str) -> None:
    text = f'[defaults]\ntool_timeout_s = {value}\n[agents.lead]\nmodel = "retinue/scripted"\n'
    with pytest.raises(TeamFileError, match="tool_timeout_s"):
        Team.from_toml(text, environ=False)
    per_agent = f'[agents.lead]\nmodel = "retinue/scripted"\ntool_timeout_s = {value}\n'
    with pytest.raises(TeamFileError, match="tool_timeout_s"):
        Team.from_toml(per_agent, environ=False)
