"""Declaring MCP servers (no SDK needed): McpServer, [mcp.<server>] tables, checks at open."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from retinue import ConfigurationError, Profile, Runtime, TeamFileError
from retinue.llm import LiteLLMRunner, McpServer
from retinue.team import Team

TEAM = """
[mcp.time]
command = "mcp-server-time"
args = ["--local-timezone", "UTC"]
env = {TZ = "UTC"}
env_from_host = ["SOME_TOKEN"]
startup_timeout_s = 5

[mcp.fs]
url = "http://127.0.0.1:3001/mcp"
headers = {Authorization = "Bearer secret"}

[agents.lead]
model = "retinue/scripted"
tools = ["time.*", "fs.read_file"]
subagents = ["helper"]

[agents.helper]
tools = ["time.get_current_time"]
"""


def test_import_retinue_llm_does_not_import_the_mcp_sdk() -> None:
    code = "import sys, retinue, retinue.llm, retinue.cli, retinue.mcp.options\n"
    code += "print('mcp' in sys.modules, 'mcp_types' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_stdio_and_http_declarations() -> None:
    server = McpServer.stdio("mcp-server-time", ["--x"], env={"TZ": "UTC"}, tool_timeout_s=5)
    assert (server.transport, server.command, server.args) == ("stdio", "mcp-server-time", ("--x",))
    assert server.tool_timeout_s == 5
    web = McpServer.http("http://127.0.0.1:3001/mcp", headers={"Authorization": "Bearer s3cret"})
    assert "s3cret" not in repr(web)
    assert "Authorization" in repr(web)
    assert "UTC" not in repr(server)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: McpServer.stdio(""), "command"),
        (lambda: McpServer.stdio("x", "--flag"), "args must be a list"),
        (lambda: McpServer.stdio("x", env={"BAD NAME": "1"}), "not a valid name"),
        (lambda: McpServer.stdio("x", env={"A": "1\n2"}), "one line"),
        (lambda: McpServer.stdio("x", tool_timeout_s=0), "tool_timeout_s"),
        (lambda: McpServer.stdio("x", startup_timeout_s=float("nan")), "startup_timeout_s"),
        (lambda: McpServer.stdio("x", max_tool=3), "no setting max_tool"),
        (lambda: McpServer.http("ftp://host/x"), "http:// or https://"),
        (lambda: McpServer.http("http:///mcp"), "with a host"),
        (lambda: McpServer.http("http://h/mcp", headers={"X": "a\r\nb"}), "one line"),
    ],
)
def test_bad_declarations_are_configuration_errors(make: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make()  # type: ignore[operator]


def test_the_environment_holds_only_what_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOST_SECRET", "do-not-leak")
    monkeypatch.setenv("PASSED_ON", "yes")
    server = McpServer.stdio("x", env={"TZ": "UTC"}, env_from_host=["PASSED_ON"])
    env = server.environment()
    assert env["TZ"] == "UTC" and env["PASSED_ON"] == "yes"
    assert "HOST_SECRET" not in env
    assert set(env) <= {"PATH", "HOME", "LANG", "TZ", "PASSED_ON"}
    monkeypatch.delenv("PASSED_ON")
    with pytest.raises(ConfigurationError, match="PASSED_ON"):
        server.environment()


def test_a_team_file_declares_servers(tmp_path: Path) -> None:
    file = tmp_path / "team.toml"
    file.write_text(
        TEAM.replace('command = "mcp-server-time"', 'command = "mcp-server-time"\ncwd = "tools"')
    )
    team = Team.from_toml(file.read_text(), source=file)
    time, fs = team.mcp["time"], team.mcp["fs"]
    assert time.args == ("--local-timezone", "UTC") and dict(time.env) == {"TZ": "UTC"}
    assert time.env_from_host == ("SOME_TOKEN",) and time.startup_timeout_s == 5
    assert time.cwd == tmp_path / "tools"
    assert fs.url == "http://127.0.0.1:3001/mcp" and dict(fs.headers) == {
        "Authorization": "Bearer secret"
    }


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda t: t.replace("[mcp.fs]", "[mcp.Fs]"), "[mcp.Fs]"),
        (lambda t: t.replace("[mcp.fs]", "[mcp.root]"), "[mcp.root]"),
        (lambda t: t.replace('url = "http', 'command = "x"\nurl = "http'), "either command"),
        (
            lambda t: t.replace("startup_timeout_s = 5", "startup_timeout = 5"),
            "key 'startup_timeout'",
        ),
        (lambda t: t.replace("headers = {", 'args = ["a"]\nheaders = {'), "key 'args'"),
        (
            lambda t: t.replace("startup_timeout_s = 5", "startup_timeout_s = -1"),
            "startup_timeout_s",
        ),
        (lambda t: t.replace('"fs.read_file"', '"gh.read_file"'), "MCP server 'gh'"),
        (
            lambda t: t.replace('tools = ["time.get_current_time"]', 'tools = ["fs.*"]'),
            "lacks: fs.*",
        ),
    ],
)
def test_bad_mcp_tables_and_grants_name_the_table(edit: object, where: str) -> None:
    with pytest.raises(TeamFileError) as info:
        Team.from_toml(edit(TEAM))  # type: ignore[operator]
    assert where in str(info.value)


def test_retinue_validate_refuses_a_grant_beyond_the_ceiling(tmp_path: Path) -> None:
    file = tmp_path / "team.toml"
    file.write_text(TEAM.replace('tools = ["time.get_current_time"]', 'tools = ["fs.*"]'))
    out = subprocess.run(
        [sys.executable, "-m", "retinue.cli", "validate", str(file)], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert "lacks: fs.*" in out.stderr


def test_open_refuses_grants_of_undeclared_servers(tmp_path: Path) -> None:
    profiles = [Profile("lead", model="retinue/scripted", tools=["time.*"])]
    with pytest.raises(ConfigurationError, match=r"MCP server 'time'.*\[mcp\.time\]"):
        Runtime.open(tmp_path / "s", profiles=profiles)
    assert not (tmp_path / "s").exists()


def test_open_refuses_a_child_granted_more_mcp_tools_than_its_parent(tmp_path: Path) -> None:
    servers = {"time": McpServer.stdio("mcp-server-time")}
    profiles = [
        Profile("lead", model="retinue/scripted", tools=["time.get_current_time"], subagents=["w"]),
        Profile("w", tools=["time.*"]),
    ]
    with pytest.raises(ConfigurationError, match=r"lacks: time\.\*"):
        Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers=servers)


def test_open_refuses_mcp_grants_on_a_runner_built_outside_the_runtime(tmp_path: Path) -> None:
    servers = {"time": McpServer.stdio("mcp-server-time")}
    runner = LiteLLMRunner("retinue/scripted")
    profiles = [Profile("lead", tools=["time.*"], runner=runner)]
    with pytest.raises(ConfigurationError, match="built outside"):
        Runtime.open(tmp_path / "s", profiles=profiles, mcp_servers=servers)


@pytest.mark.parametrize(
    ("servers", "error"),
    [
        ({"Time": McpServer.stdio("x")}, ConfigurationError),
        ({"time": "mcp-server-time"}, ConfigurationError),
        (["time"], TypeError),
    ],
)
def test_open_checks_the_server_table(tmp_path: Path, servers: object, error: type) -> None:
    with pytest.raises(error):
        Runtime.open(tmp_path / "s", profiles=[], runner=lambda t: "", mcp_servers=servers)  # type: ignore[arg-type]
