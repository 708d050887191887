"""MCP tool names in grants: exact names, server patterns, offered names, capability ceilings."""

from __future__ import annotations

import pytest

from retinue.errors import ConfigurationError
from retinue.protocol.tools import (
    covers,
    exceeds_ceiling,
    extra_tools,
    mcp_grant_servers,
    mcp_granted,
    offered_name,
    resolve_profile_tools,
    resolve_tools,
    split_mcp_name,
    unavailable_tools,
)


def test_mcp_names_and_patterns_are_valid_tool_specs() -> None:
    names = resolve_tools(
        ["read_file", "time.get_current_time", "fs.*", "fs.*", "gh.list-issues.v2"]
    )
    assert names == ("read_file", "time.get_current_time", "fs.*", "gh.list-issues.v2")
    assert split_mcp_name("time.get_current_time") == ("time", "get_current_time")
    assert split_mcp_name("fs.*") == ("fs", "*")
    assert split_mcp_name("read_file") is None
    assert mcp_grant_servers(names) == ("time", "fs", "gh")


@pytest.mark.parametrize(
    "name",
    ["Time.now", "root.now", "time.", ".now", "time.now now", "t" * 41 + ".x", "time.a*", "a.b/c"],
)
def test_bad_mcp_names_are_refused_with_the_rule(name: str) -> None:
    with pytest.raises(ConfigurationError, match="MCP tool") as info:
        resolve_tools([name], owner="worker")
    assert "profile 'worker'" in str(info.value)


def test_a_pattern_covers_its_servers_tools_and_only_itself() -> None:
    assert covers("time.now", ["time.*"])
    assert covers("time.*", ["time.*"])
    assert not covers("time.*", ["time.now"])
    assert not covers("clock.now", ["time.*"])
    assert mcp_granted("time", "now", ["time.*"])
    assert mcp_granted("time", "now", ["time.now"])
    assert not mcp_granted("time", "later", ["time.now"])


def test_ceilings_cover_mcp_tools() -> None:
    assert extra_tools(["time.now", "read_file"], ["time.*", "read_file"]) == ()
    assert extra_tools(["time.*"], ["time.now"]) == ("time.*",)
    assert exceeds_ceiling(["fs.read"], ["time.*"]) == ("fs.read",)
    assert exceeds_ceiling(["time.now"], "read") == ("time.now",)


def test_mcp_tools_need_no_registered_host_tool() -> None:
    assert unavailable_tools(["time.now", "fs.*", "lookup"], registered=[]) == ("lookup",)


def test_an_inheriting_profile_gets_what_all_its_parents_grant() -> None:
    effective = resolve_profile_tools(
        {
            "a": (["time.*", "read_file"], ["shared"]),
            "b": (["time.now", "fs.*"], ["shared"]),
            "shared": (None, []),
        }
    )
    assert effective["shared"] == ("time.now",)


def test_a_child_granted_an_mcp_tool_its_parent_lacks_is_refused_naming_it() -> None:
    with pytest.raises(ConfigurationError, match=r"lacks: time\.\*"):
        resolve_profile_tools({"lead": (["time.now"], ["worker"]), "worker": (["time.*"], [])})


def test_offered_names_follow_the_function_name_rule() -> None:
    assert offered_name("time", "get_current_time") == "time__get_current_time"
    assert offered_name("gh", "issues.list") == "gh__issues_list"
    long = offered_name("server", "t" * 200)
    assert len(long) == 64
    assert long != offered_name("server", "t" * 199)
