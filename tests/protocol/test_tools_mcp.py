"""MCP tool names in grants: exact names, server patterns, offered names, capability ceilings."""

from __future__ import annotations

import pytest

from retinue.errors import ConfigurationError
from retinue.protocol.supervision import check_approve_names, needs_approval
from retinue.protocol.tools import (
    COORDINATOR_TOOLS,
    check_offered_names,
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


def test_approve_matches_mcp_tools_by_their_granted_names_and_patterns() -> None:
    def needs(approve: list[str], tool: str) -> bool:
        return needs_approval(approve, tool, COORDINATOR_TOOLS)

    assert needs(["time.get_current_time"], "time.get_current_time")
    assert needs(["time.*"], "time.get_current_time") and needs(["time.*"], "time.convert_time")
    assert not needs(["time.*"], "fs.read_text_file")
    assert not needs(["time.get_current_time"], "time.convert_time")
    assert not needs(["time.get_current_time"], "time__get_current_time")  # the offered name
    assert needs(["*"], "time.get_current_time") and not needs(["*"], "spawn_subagent")


def test_an_approve_entry_must_name_a_tool_the_profile_has() -> None:
    has = ("read_file", "deploy", "time.get_current_time", "fs.*")
    check_approve_names("p", ["*", "read_file", "deploy", "time.get_current_time"], has)
    check_approve_names("p", ["time.*", "fs.*", "fs.read_text_file"], has)
    for wrong in ["bash", "time.convert_time", "gh.*", "time__get_current_time", "fs"]:
        with pytest.raises(ConfigurationError, match=f"approve names '{wrong}', which is not"):
            check_approve_names("p", ["read_file", wrong], has)
    with pytest.raises(ConfigurationError, match=r"not one of its tools \(none\)"):
        check_approve_names("p", ["bash"], ())


@pytest.mark.parametrize(
    ("first", "second", "offered"),
    [
        ("kit.get.x", "kit.get_x", "kit__get_x"),  # one server
        ("kit.x__echo", "kit__x.echo", "kit__x__echo"),  # two servers
        ("a__b", "a.b", "a__b"),  # a host tool and an MCP tool
    ],
)
def test_two_exact_tools_offered_under_one_name_are_refused(
    first: str, second: str, offered: str
) -> None:
    with pytest.raises(
        ConfigurationError, match=f"would both be offered to a model as '{offered}'"
    ):
        check_offered_names("p", [first, "read_file", second])


def test_distinct_offered_names_and_patterns_pass() -> None:
    check_offered_names("p", ["kit.get_x", "kit.get_y", "kit.*", "kit2.*", "read_file"])
