"""Capability ceilings through a real runtime: checked at open and again at every spawn."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import PROMPT_S, OpenRuntime

from retinue import (
    CompletionStatus,
    ConfigurationError,
    Profile,
    Runtime,
    Turn,
)
from retinue.protocol.tools import READ_TOOLS
from retinue.testing import echo


def test_open_refuses_a_child_with_more_tools_than_its_parent(store_path: Path) -> None:
    profiles = [
        Profile("lead", subagents=["worker"], tools="read", runner=echo),
        Profile("worker", tools="modify", runner=echo),
    ]
    with pytest.raises(ConfigurationError) as info:
        Runtime.open(store_path, profiles=profiles)
    assert "bash, edit_file, write_file" in str(info.value)
    assert not (store_path / "data.mdb").exists()  # refused before the store was created


def test_open_refuses_tools_under_a_host_only_parent_without_tools(store_path: Path) -> None:
    profiles = [
        Profile("lead", subagents=["worker"], runner=echo),
        Profile("worker", tools=["grep"], runner=echo),
    ]
    with pytest.raises(ConfigurationError, match="lacks: grep"):
        Runtime.open(store_path, profiles=profiles)


def test_profile_refuses_coordinator_tools_and_unknown_presets() -> None:
    with pytest.raises(ConfigurationError, match="coordinator tool"):
        Profile("lead", tools=["read_file", "spawn_subagent"])
    with pytest.raises(ConfigurationError, match="not a preset"):
        Profile("lead", tools="everything")
    assert Profile("lead", tools=["grep", "grep", "find"]).tools == ("grep", "find")


def test_open_records_inherited_tools(open_runtime: OpenRuntime) -> None:
    seen: dict[str, object] = {}

    def record(turn: Turn) -> str:
        seen[turn.profile.name] = turn.profile.tools  # the profile the runtime resolved
        return "ok"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], tools="modify", runner=record),
            Profile("reviewer", subagents=["worker"], tools="read", runner=record),
            Profile("worker", runner=record),
            Profile("solo", runner=record),
        ]
    )
    for name in ("lead", "worker", "solo"):
        rt.wait(rt.spawn(name, "t").id, timeout=PROMPT_S)
    assert seen["lead"] == "modify"
    assert seen["worker"] == READ_TOOLS  # what both spawners share
    assert seen["solo"] == ()


def test_spawn_within_the_ceiling_runs(open_runtime: OpenRuntime) -> None:
    def lead(turn: Turn) -> str:
        done = turn.run("worker", "look", timeout=5)
        return f"lead<{done.output}>"

    rt = open_runtime(
        [
            Profile("lead", subagents=["worker"], tools="modify", runner=lead),
            Profile("worker", tools=["grep", "bash"], runner=echo),
        ]
    )
    top = rt.spawn("lead", "go")
    done = rt.wait(top.id, timeout=10)
    assert (done.status, done.output) == (CompletionStatus.COMPLETED, "lead<done:look>")


def test_open_refuses_tool_names_a_model_runner_cannot_provide(store_path: Path) -> None:
    from retinue.llm import LiteLLMRunner, tool

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    typo = Profile("lead", tools=["read_flie", "grep"], model="retinue/scripted")
    with pytest.raises(ConfigurationError) as info:
        Runtime.open(store_path, profiles=[typo])
    assert "registered on its runner: read_flie; built-in tools are read_file," in str(info.value)
    unregistered = Profile("lead", tools=["lookup"], runner=LiteLLMRunner("retinue/scripted"))
    with pytest.raises(ConfigurationError, match="registered on its runner: lookup"):
        Runtime.open(store_path, profiles=[unregistered])
    registered = Profile(
        "lead",
        tools=["lookup", "grep"],
        runner=LiteLLMRunner("retinue/scripted", host_tools={"lookup": lookup}),
    )
    Runtime.open(store_path, profiles=[registered]).shutdown()


def test_python_runners_may_name_any_tools(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("lead", tools=["anything_goes"], runner=echo)])
    assert rt.wait(rt.spawn("lead", "x").id, timeout=10).output == "done:x"


def test_open_refuses_a_model_runner_whose_own_tools_exceed_its_profile(
    store_path: Path,
) -> None:
    from retinue.errors import ToolsNotPermitted
    from retinue.llm import LiteLLMRunner

    wide = LiteLLMRunner("retinue/scripted", tools="modify", workspace=store_path.parent)
    with pytest.raises(ToolsNotPermitted) as info:
        Runtime.open(store_path, profiles=[Profile("a", tools="read", runner=wide)])
    assert info.value.extra == ("bash", "edit_file", "write_file")
    assert "the runner asks for tools its profile does not grant" in str(info.value)
    assert not (store_path / "data.mdb").exists()  # refused at open, not at every turn
    narrow = LiteLLMRunner("retinue/scripted", tools=["grep"], workspace=store_path.parent)
    with Runtime.open(store_path, profiles=[Profile("a", tools="read", runner=narrow)]) as rt:
        # A bound, not a timing: the first model turn imports litellm (slow on a loaded box).
        done = rt.wait(rt.spawn("a", "hi").id, timeout=60)
        assert done.status is CompletionStatus.COMPLETED, done.error
