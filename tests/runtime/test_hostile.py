"""Hostile strings and arguments: refused at the boundary with a typed error, nothing half-done.

Lone surrogates, blank text, NaN and infinite timeouts, bad open arguments,
huge inputs and bad references each end in a typed ``RetinueError`` that
names the argument, and leave the tree, the store and the disk as they were.
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import OpenRuntime, Script, act, wait_settled

from retinue import (
    AgentLimitExceeded,
    ArgumentTypeError,
    CompletionBacklogFull,
    CompletionStatus,
    ConfigurationError,
    DedupKeyTooLong,
    FanoutLimitExceeded,
    InvalidAgentPath,
    InvalidArgument,
    LimitExceeded,
    Limits,
    MailboxFull,
    MessageTooLarge,
    Profile,
    RetinueError,
    Runtime,
    RuntimeClosed,
    StoreError,
    Turn,
    UnknownProfile,
)
from retinue.protocol.text import HEAD_TRUNCATION_MARKER
from retinue.testing import Gate, echo

SURROGATE = "\ud800"  # what surrogateescape makes of a stray byte in a file name


def team(script: Script) -> list[Profile]:
    """lead -> worker, both run by ``script``; neither wakes on completions."""
    return [
        Profile("lead", subagents=["worker"], runner=script, wake_on_completion=False),
        Profile("worker", runner=script, wake_on_completion=False),
    ]


def snapshot(rt: Runtime) -> list[tuple[str, str, int, str]]:
    """What a reader of the tree sees: path, state, generation and task of every agent."""
    return [(a.path, str(a.state), a.generation, a.task) for a in rt.agents(include_closed=True)]


def reopened_snapshot(rt: Runtime, profiles: list[Profile], path: Path) -> list[Any]:
    """Close ``rt`` and return what the store holds, read by a new runtime."""
    rt.shutdown()
    again = Runtime.open(path, profiles=profiles, limits=Limits(wait_default_s=10))
    try:
        return snapshot(again)
    finally:
        again.shutdown()


# -- lone surrogates ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "call"),
    [
        ("task", lambda rt: rt.spawn("worker", "scan " + SURROGATE)),
        ("task", lambda rt: rt.follow_up("/root/w", "again " + SURROGATE)),
        ("content", lambda rt: rt.send("/root/w", "hi " + SURROGATE)),
        ("dedup_key", lambda rt: rt.send("/root/w", "hi", dedup_key="k" + SURROGATE)),
    ],
)
def test_a_lone_surrogate_from_the_host_is_refused_and_changes_nothing(
    open_runtime: OpenRuntime,
    script: Script,
    store_path: Path,
    field: str,
    call: Callable[[Runtime], object],
) -> None:
    rt = open_runtime(team(script))
    rt.spawn("worker", "first", name="w")
    wait_settled(rt, "/root/w")
    before = snapshot(rt)
    with pytest.raises(InvalidArgument, match=rf"^{field} contains a lone surrogate"):
        call(rt)
    # No ghost agent, no agent left `starting`, and the store agrees with memory.
    assert snapshot(rt) == before
    assert act(rt, "/root/w", "still works").output == "ok:still works"
    after = snapshot(rt)
    assert reopened_snapshot(rt, team(script), store_path) == after


def test_a_lone_surrogate_from_a_turn_is_refused_with_the_field_named(
    open_runtime: OpenRuntime, script: Script
) -> None:
    refusals: list[str] = []

    def lead(turn: Turn) -> str:
        for attempt in (
            lambda: turn.spawn("worker", "bad " + SURROGATE),
            lambda: turn.run("worker", SURROGATE, timeout=5),
            lambda: turn.send("/root/a/c", SURROGATE),
        ):
            try:
                attempt()
            except InvalidArgument as exc:
                refusals.append(str(exc).split(" ", 1)[0])
        return f"{len(turn.children())} children"

    script.on("go", lead)
    script.on("child", lambda turn: "child done")
    rt = open_runtime(team(script))
    a = rt.spawn("lead", "spawn child", name="a")
    wait_settled(rt, a.id)
    rt.spawn("worker", "child", name="c", parent="/root/a")
    assert act(rt, a.id, "go").output == "1 children"
    assert refusals == ["task", "task", "content"]


def test_a_name_or_profile_with_a_lone_surrogate_is_refused(
    open_runtime: OpenRuntime, script: Script
) -> None:
    rt = open_runtime(team(script))
    with pytest.raises(InvalidAgentPath, match=r"^name '\\ud800' must use lowercase"):
        rt.spawn("worker", "t", name=SURROGATE)
    with pytest.raises(UnknownProfile, match=r"unknown profile 'worker\\ud800'"):
        rt.spawn("worker" + SURROGATE, "t")
    with pytest.raises(ConfigurationError, match="lone surrogate"):
        Profile("odd" + SURROGATE, runner=echo)
    with pytest.raises(ConfigurationError, match="lone surrogate"):
        Profile("lead", subagents=["x" + SURROGATE], runner=echo)
    assert rt.agents() == []


def test_a_runner_error_with_a_lone_surrogate_still_makes_its_completion(
    open_runtime: OpenRuntime, store_path: Path
) -> None:
    def broken(turn: Turn) -> str:
        raise OSError(f"cannot read /data/r{SURROGATE}port.txt")

    profiles = [Profile("worker", runner=broken)]
    rt = open_runtime(profiles)
    a = rt.spawn("worker", "read it", name="a")
    done = rt.wait(a.id, timeout=10)
    assert done.status is CompletionStatus.FAILED
    assert done.error == "OSError: cannot read /data/r\\ud800port.txt"  # escaped, not lost
    rt.shutdown()
    again = open_runtime(profiles, path=store_path)
    info = again.get(a.id)
    assert (info.state, info.error) == ("failed", "OSError: cannot read /data/r\\ud800port.txt")


def test_a_runner_error_whose_str_fails_still_makes_its_completion(
    open_runtime: OpenRuntime,
) -> None:
    class Weird(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    def broken(turn: Turn) -> str:
        raise Weird

    rt = open_runtime([Profile("worker", runner=broken)])
    done = rt.wait(rt.spawn("worker", "t").id, timeout=10)
    assert (done.status, done.error) == ("failed", "Weird: (its message could not be read)")


# -- blank text ----------------------------------------------------------------------------


@pytest.mark.parametrize("blank", ["", "   ", "\n\t "])
def test_blank_tasks_and_messages_are_refused(
    open_runtime: OpenRuntime, script: Script, blank: str
) -> None:
    rt = open_runtime(team(script))
    w = rt.spawn("worker", "first", name="w")
    wait_settled(rt, w.id)
    with pytest.raises(InvalidArgument, match=r"^task must not be blank"):
        rt.spawn("worker", blank)
    with pytest.raises(InvalidArgument, match=r"^task must not be blank"):
        rt.follow_up(w.id, blank)
    with pytest.raises(InvalidArgument, match=r"^content must not be blank"):
        rt.send(w.id, blank)
    assert [a.path for a in rt.agents()] == ["/root/w"]

    refused: list[type[BaseException]] = []

    def lead(turn: Turn) -> str:
        for attempt in (
            lambda: turn.spawn("worker", blank),
            lambda: turn.send("/root", blank),
            lambda: turn.run_many([("worker", blank)], timeout=5),
        ):
            try:
                result = attempt()
            except RetinueError as exc:
                refused.append(type(exc))
            else:  # run_many keeps a refused spawn in its place
                assert isinstance(result, list)
                refused.extend(type(r) for r in result if isinstance(r, RetinueError))
        return "done"

    script.on("try", lead)
    lead_agent = rt.spawn("lead", "try", name="l")
    wait_settled(rt, lead_agent.id)
    assert refused == [InvalidArgument, InvalidArgument, InvalidArgument]


# -- numbers ------------------------------------------------------------------------------


BAD_SECONDS = [math.nan, math.inf, -math.inf, -1.0]


@pytest.mark.parametrize("timeout", BAD_SECONDS)
def test_nan_and_infinite_host_timeouts_are_refused(
    open_runtime: OpenRuntime, gate: Gate, timeout: float
) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])
    a = rt.spawn("worker", "hold")
    with pytest.raises(InvalidArgument, match=r"^timeout must"):
        rt.wait(a.id, timeout=timeout)
    with pytest.raises(InvalidArgument, match=r"^timeout must"):
        asyncio.run(rt.wait_async(a.id, timeout=timeout))
    with pytest.raises(ArgumentTypeError):
        rt.wait(a.id, timeout="5")  # type: ignore[arg-type]
    gate.release()
    assert rt.wait(a.id, timeout=10).output == "released:hold"  # the refusals consumed nothing


@pytest.mark.parametrize("timeout", BAD_SECONDS)
def test_nan_and_infinite_turn_timeouts_are_refused(
    open_runtime: OpenRuntime, script: Script, timeout: float
) -> None:
    refused: list[str] = []

    def lead(turn: Turn) -> str:
        for name, attempt in (
            ("run", lambda: turn.run("worker", "w", timeout=timeout)),
            ("wait", lambda: turn.wait("/root/l/c", timeout=timeout)),
            ("run_many", lambda: turn.run_many([("worker", "w")], timeout=timeout)),
        ):
            try:
                attempt()
            except InvalidArgument as exc:
                assert str(exc).startswith("timeout must")
                refused.append(name)
        return "done"

    script.on("try", lead)
    rt = open_runtime(team(script))
    rt.spawn("lead", "start", name="l")
    wait_settled(rt, "/root/l")
    rt.spawn("worker", "child", name="c", parent="/root/l")
    assert act(rt, "/root/l", "try").output == "done"
    assert refused == ["run", "wait", "run_many"]
    # None of them spawned anything: only the child the host made is there.
    assert [a.path for a in rt.agents()] == ["/root/l", "/root/l/c"]


# -- Runtime.open ---------------------------------------------------------------------------


def _open_cases(tmp: Path) -> list[tuple[str, dict[str, Any], type[RetinueError], str]]:
    file = tmp / "a_file"
    file.write_text("not a store")
    return [
        ("a file", {"path": file}, InvalidArgument, "is a file, not a store folder"),
        ("below a file", {"path": file / "store"}, StoreError, "cannot create the store"),
        ("NUL", {"path": str(tmp / "a\x00b")}, InvalidArgument, "contains a NUL"),
        ("an int", {"path": 3}, ArgumentTypeError, "path must be a str or os.PathLike"),
        ("bytes", {"path": b"/tmp/x"}, ArgumentTypeError, "path must be a str"),
        ("blank", {"path": " "}, InvalidArgument, "path must not be blank"),
        ("surrogate", {"path": str(tmp / SURROGATE)}, InvalidArgument, "lone surrogate"),
        ("map str", {"map_size": "64M"}, ArgumentTypeError, "map_size must be an int"),
        ("map zero", {"map_size": 0}, InvalidArgument, "map_size must be between"),
        ("map huge", {"map_size": 2**70}, InvalidArgument, "map_size must be between"),
        ("map bool", {"map_size": True}, ArgumentTypeError, "map_size must be an int"),
        ("limits dict", {"limits": {"depth_cap": 2}}, ArgumentTypeError, "limits must be"),
        ("durability", {"durability": "fast"}, InvalidArgument, "durability must be"),
        ("durability int", {"durability": 1}, InvalidArgument, "durability must be"),
        ("readonly str", {"readonly": "yes"}, ArgumentTypeError, "readonly must be"),
        ("profiles str", {"profiles": "lead"}, ConfigurationError, "profiles must be a list"),
        ("runner", {"runner": "echo"}, ConfigurationError, "runner must be callable"),
    ]


def test_bad_open_arguments_are_typed_errors_and_leave_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp_root))  # where path=None stores go
    work = tmp_path / "work"
    work.mkdir()
    for label, kwargs, error, message in _open_cases(work):
        before = sorted(os.listdir(work))
        kwargs.setdefault("path", None)
        kwargs.setdefault("profiles", [Profile("worker", runner=echo)])
        with pytest.raises(error, match=message):
            Runtime.open(**kwargs)
        assert sorted(os.listdir(work)) == before, label
        assert os.listdir(temp_root) == [], label


def test_a_failed_open_removes_the_folder_it_created(tmp_path: Path) -> None:
    # A real LMDB failure after the folder exists: the address space is capped
    # below the map asked for, so mapping it fails in the child process.
    store = tmp_path / "new" / "deeper" / "store"
    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    code = textwrap.dedent(
        f"""
        import resource, sys, tempfile
        from retinue import Profile, Runtime, StoreError
        tempfile.tempdir = {str(temp_root)!r}
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/statm") as statm:
            used = int(statm.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (used + (512 << 20), hard))
        profiles = [Profile("worker", runner=lambda turn: "ok")]
        for path in ({str(store)!r}, None):
            try:
                Runtime.open(path, profiles=profiles, map_size=1 << 40)
            except StoreError as exc:
                print("StoreError", exc)
            else:
                sys.exit("opened a 1 TiB map under a 512 MiB address-space cap")
        """
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("StoreError") == 2
    assert os.listdir(tmp_path) == ["tmp"]  # not even tmp_path/new
    assert os.listdir(temp_root) == []


def test_retinue_tree_on_a_file_prints_one_line_and_no_traceback(tmp_path: Path) -> None:
    file = tmp_path / "not_a_store"
    file.write_text("x")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    result = subprocess.run(
        [sys.executable, "-m", "retinue.cli", "tree", str(file)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "is a file" in line


# -- huge inputs and outputs --------------------------------------------------------------


def test_a_huge_runner_error_is_stored_capped_with_a_marker(open_runtime: OpenRuntime) -> None:
    def broken(turn: Turn) -> str:
        raise ValueError("x" * 10_000_000)

    rt = open_runtime([Profile("worker", runner=broken)], output_max_bytes=1000)
    done = rt.wait(rt.spawn("worker", "t").id, timeout=10)
    assert done.status is CompletionStatus.FAILED
    assert done.error is not None
    assert done.error.startswith("ValueError: xxx")
    assert done.error.endswith(HEAD_TRUNCATION_MARKER)
    assert len(done.error.encode()) <= 1000


def test_a_huge_unknown_profile_name_is_quoted_short(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    with pytest.raises(UnknownProfile) as caught:
        rt.spawn("p" * 10_000_000, "t")
    message = str(caught.value)
    assert "(10000000 characters)" in message
    assert len(message) < 300


# -- references name the argument ---------------------------------------------------------


def test_a_bad_reference_names_the_argument_the_caller_passed(
    open_runtime: OpenRuntime, script: Script
) -> None:
    rt = open_runtime(team(script))
    with pytest.raises(InvalidAgentPath, match=r"^ref 'Bad Ref': every name in it must use"):
        rt.get("Bad Ref")
    with pytest.raises(InvalidAgentPath, match=r"^ref '/root/a/' must not end with /"):
        rt.send("/root/a/", "hi")
    with pytest.raises(InvalidAgentPath, match=r"^parent '/elsewhere' must start with /root"):
        rt.spawn("worker", "t", parent="/elsewhere")
    with pytest.raises(InvalidAgentPath, match=r"^name 'Bad' must use lowercase"):
        rt.spawn("worker", "t", name="Bad")
    with pytest.raises(InvalidAgentPath) as caught:
        rt.interrupt("X" * 100_000)
    assert len(str(caught.value)) < 300


def test_subscribe_on_a_closed_runtime_raises(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    rt.shutdown()
    with pytest.raises(RuntimeClosed):
        rt.subscribe(lambda event: None)


# -- every bound carries .limit, .value and .path ----------------------------------------------


def _grab(call: Callable[[], object]) -> RetinueError:
    """Return the ``RetinueError`` that ``call`` raises (fail if it raises none)."""
    try:
        call()
    except RetinueError as exc:
        return exc
    raise AssertionError("no error was raised")


def _bound(error: RetinueError) -> tuple[object, ...]:
    """Return an error's type and the bound it carries."""
    assert isinstance(error, LimitExceeded), error
    return (type(error), error.limit, error.value, error.path)


def test_mailbox_message_dedup_fanout_and_backlog_errors_carry_their_bound(
    open_runtime: OpenRuntime, script: Script
) -> None:
    rt = open_runtime(
        team(script),
        fanout_cap=2,
        mailbox_capacity=1,
        message_max_bytes=10,
        dedup_key_max_length=3,
        pending_completions_per_agent=1,
    )
    lead = rt.spawn("lead", "l", name="l")
    wait_settled(rt, lead.id)
    assert _bound(_grab(lambda: rt.send(lead.id, "é" * 6))) == (MessageTooLarge, 10, 12, None)
    assert _bound(_grab(lambda: rt.send(lead.id, "hi", dedup_key="long"))) == (
        DedupKeyTooLong,
        3,
        4,
        None,
    )
    rt.send(lead.id, "one")
    assert _bound(_grab(lambda: rt.send(lead.id, "two"))) == (MailboxFull, 1, 1, "/root/l")
    for name in ("a", "b"):
        rt.spawn("worker", "w", name=name, parent="/root/l")
    assert _bound(_grab(lambda: rt.spawn("worker", "w", parent="/root/l"))) == (
        FanoutLimitExceeded,
        2,
        2,
        "/root/l",
    )
    # Its first completion is still unreceived: the backlog of one is full.
    assert _bound(_grab(lambda: rt.follow_up(lead.id, "again"))) == (
        CompletionBacklogFull,
        1,
        1,
        "/root/l",
    )

    caught: list[RetinueError] = []

    def many(turn: Turn) -> str:
        caught.append(_grab(lambda: turn.run_many([("worker", "w")] * 3)))
        return "done"

    script.on("many", many)
    rt.spawn("lead", "many", name="n")
    wait_settled(rt, "/root/n")
    assert [_bound(e) for e in caught] == [(FanoutLimitExceeded, 2, 3, "/root/n")]


def test_agent_count_errors_carry_their_bound(open_runtime: OpenRuntime, script: Script) -> None:
    rt = open_runtime(team(script), max_tree_agents=3, max_agents=5)
    rt.spawn("lead", "l", name="l")
    for name in ("a", "b"):
        rt.spawn("worker", "w", name=name, parent="/root/l")
    assert _bound(_grab(lambda: rt.spawn("worker", "w", parent="/root/l"))) == (
        AgentLimitExceeded,
        3,
        3,
        "/root/l",
    )
    rt.spawn("worker", "w", name="x")
    rt.spawn("worker", "w", name="y")
    assert _bound(_grab(lambda: rt.spawn("worker", "w", name="z"))) == (
        AgentLimitExceeded,
        5,
        5,
        None,
    )


def test_every_limit_error_raised_in_the_package_names_its_bound() -> None:
    """Each raise of a LimitExceeded subclass passes the bound and the figure that hit it."""
    import ast
    import inspect

    import retinue
    import retinue.errors as errors

    kinds = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, LimitExceeded)
    }
    # The budget errors take the figure as `used` (it is also `.value`).
    figure = {"TokenBudgetExceeded": "used", "CostBudgetExceeded": "used"}
    missing: list[str] = []
    sites = 0
    for path in Path(retinue.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in kinds
            ):
                sites += 1
                given = {k.arg for k in node.keywords}
                if not {"limit", figure.get(node.func.id, "value")} <= given:
                    missing.append(f"{path.name}:{node.lineno} {node.func.id}")
    assert sites >= 10
    assert missing == []


def test_a_token_budget_error_keeps_its_bound() -> None:
    import pickle

    from retinue.errors import TokenBudgetExceeded

    error = TokenBudgetExceeded(
        "spent", budget="tokens_per_agent", limit=10, used=12, path="/root/a"
    )
    again = pickle.loads(pickle.dumps(error))
    for e in (error, again):
        assert (e.limit, e.value, e.path, e.used, e.budget) == (
            10,
            12,
            "/root/a",
            12,
            "tokens_per_agent",
        )
        assert str(e) == "spent"
