"""The wire (msgspec bytes, typed on each side) and cluster ids; no Ray needed."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import msgspec
import pytest

from retinue import (
    AgentInfo,
    AgentState,
    ArgumentTypeError,
    ClusterError,
    Completion,
    CompletionStatus,
    DepthLimitExceeded,
    Message,
    RetinueError,
    ShardUnavailable,
    StoreLocked,
    TeamFileError,
    ToolsNotPermitted,
    UnknownAgent,
)
from retinue.actors.commands import (
    HOST,
    AckLease,
    Agents,
    Approvals,
    Approve,
    Close,
    CloseTree,
    Command,
    Deny,
    FollowUp,
    Get,
    HostMessages,
    Idle,
    Inspect,
    Interrupt,
    InterruptTree,
    ReleaseLease,
    Resume,
    Send,
    Spawn,
    Wait,
    encode_command,
)
from retinue.cluster import ids
from retinue.cluster import wire as w
from retinue.protocol.details import AgentDetail

LOCAL = "0123456789abcdef0123456789abcdef"


def info(agent_id: str = LOCAL) -> AgentInfo:
    return AgentInfo(
        id=agent_id,
        name="a",
        path="/root/a",
        profile="worker",
        parent_path="/root",
        depth=1,
        state=AgentState.RUNNING,
        generation=1,
        task="t",
    )


def completion(agent_id: str = LOCAL) -> Completion:
    return Completion(
        id=f"{agent_id}:1",
        agent_id=agent_id,
        path="/root/a",
        generation=1,
        status=CompletionStatus.COMPLETED,
        output="ok",
    )


COMMANDS: list[tuple[Command[Any], str | None]] = [
    (Spawn(HOST, "worker", "task", None, "/root", "~r1"), "r1"),
    (Send(HOST, "/root/a", "hi", None), "r2"),
    (FollowUp(HOST, LOCAL, "again"), "r3"),
    (Resume(HOST, LOCAL), "r4"),
    (Interrupt(HOST, LOCAL), "r5"),
    (InterruptTree(HOST, LOCAL), "r6"),
    (Close(HOST, LOCAL), "r7"),
    (CloseTree(HOST, LOCAL), "r8"),
    (HostMessages(HOST), "r9"),
    (Approve(LOCAL, "ok"), "r10"),
    (Deny(LOCAL, "no"), "r11"),
    (Wait(HOST, LOCAL, lease="lease"), None),
    (AckLease("lease"), None),
    (ReleaseLease("lease"), None),
    (Get(HOST, "/root/a"), None),
    (Inspect(HOST, LOCAL, 5), None),
    (Agents(HOST, True), None),
    (Approvals(HOST, None), None),
]
OWN: list[w.Call] = [
    w.StopWaiting(("r9",)),
    w.Ping(),
    w.Shutdown(),
    w.SetFault("after_runtime", ("spawn",), 1),
]


@pytest.mark.parametrize("pair", COMMANDS, ids=lambda p: type(p[0]).__name__)
def test_every_host_call_crosses_as_the_runtimes_own_command(
    pair: tuple[Command[Any], str | None],
) -> None:
    command, rid = pair
    call = w.run(command, rid=rid, timeout=1.5)
    payload = w.encode_call(call)
    assert isinstance(payload, bytes)
    decoded = w.decode_call(payload)
    assert decoded == call and isinstance(decoded, w.Run)
    assert w.command_of(decoded) == command  # the same dataclass, the host as its sender
    assert (type(command) in w.RECORDED) == (rid is not None) == w.is_recorded(decoded)
    assert w.call_name(command) == w.CALL_NAMES[type(command)]


@pytest.mark.parametrize("call", OWN, ids=lambda c: type(c).__name__)
def test_the_clusters_own_calls_cross_as_typed_bytes(call: w.Call) -> None:
    assert w.decode_call(w.encode_call(call)) == call
    assert not w.is_recorded(call)


def test_every_command_a_shard_serves_has_a_name_and_a_test() -> None:
    assert {type(c) for c, _ in COMMANDS} == set(w.CALL_NAMES)
    assert set(w.CALL_NAMES) >= w.RECORDED


def test_a_payload_that_is_not_a_call_is_a_cluster_error() -> None:
    with pytest.raises(ClusterError, match="cannot decode"):
        w.decode_call(b"\x93\x01\x02\x03")
    with pytest.raises(ClusterError, match="cannot decode"):
        w.decode_call(msgspec.msgpack.encode({"call": "format_disk"}))


def test_a_command_of_the_wrong_shape_is_a_typed_error_naming_the_field() -> None:
    bad = w.run(Spawn(HOST, "worker", 42, None, "/root", None))  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match=r"\$\.task"):
        w.command_of(bad)
    idle = w.Run(encode_command(Idle(HOST)))  # a host command, not one a shard serves
    with pytest.raises(ArgumentTypeError, match="a shard does not serve Idle"):
        w.command_of(idle)
    with pytest.raises(ClusterError, match="without a request id"):
        w.command_of(w.run(Close(HOST, LOCAL)))  # a mutating command is only run once


def test_answers_decode_with_the_type_the_call_returns() -> None:
    assert w.decode_reply(w.ok_reply(info()), AgentInfo) == info()
    assert w.decode_reply(w.ok_reply([completion()]), list[Completion]) == [completion()]
    assert w.decode_reply(w.ok_reply(None), type(None)) is None
    with pytest.raises(ClusterError, match="does not decode"):
        w.decode_reply(w.ok_reply([1, 2]), AgentInfo)


@pytest.mark.parametrize(
    "error",
    [
        UnknownAgent("no live agent at /root/x"),
        DepthLimitExceeded("too deep", limit=3, value=4, path="/root/a/b/c/d"),
        ToolsNotPermitted("beyond the parent's", extra=("bash", "write_file")),
        StoreLocked("held", pid=42),
        TeamFileError("team.toml", "agents.lead", "modle", "unknown key"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_refusal_is_raised_again_as_its_own_class_with_its_attributes(
    error: RetinueError,
) -> None:
    with pytest.raises(type(error)) as caught:
        w.decode_reply(w.error_reply(error), AgentInfo)
    got = caught.value
    assert type(got) is type(error)
    assert str(got) == str(error)
    assert vars(got) == vars(error)


def test_a_bug_on_a_shard_crosses_as_a_cluster_error() -> None:
    with pytest.raises(ClusterError, match="KeyError: 'x'"):
        w.decode_reply(w.error_reply(KeyError("x")), AgentInfo)
    forged = msgspec.msgpack.encode(w.Reply(error=w.WireError(type="SystemExit", message="bye")))
    with pytest.raises(ClusterError, match="SystemExit: bye"):
        w.decode_reply(forged, AgentInfo)


def test_only_the_calls_own_refusals_are_recorded() -> None:
    assert w.recordable(UnknownAgent("x"))
    assert not w.recordable(StoreLocked("x"))  # the shard's trouble: run the call again
    assert not w.recordable(ShardUnavailable("x"))  # never raised by a shard, but not final
    assert not w.recordable(KeyError("x"))


def test_cluster_ids_carry_their_shard() -> None:
    assert ids.global_id(3, LOCAL) == f"s3-{LOCAL}"
    assert ids.global_id(3, "") == ""  # the host's own id stays empty
    assert ids.split_id(f"s3-{LOCAL}") == (3, LOCAL)
    assert ids.split_id(f"s12-{LOCAL}:7") == (12, f"{LOCAL}:7")
    for not_an_id in ("/root/a", "a", LOCAL, "s-1", "s03-x", "s1", "x1-ab"):
        assert ids.split_id(not_an_id) is None, not_an_id


def test_every_id_a_shard_sends_is_mapped() -> None:
    c = completion()
    mapped = ids.map_completion(2, c)
    assert (mapped.id, mapped.agent_id) == (f"s2-{LOCAL}:1", f"s2-{LOCAL}")
    message = Message(
        id=f"{LOCAL}:4",
        kind="completion",
        sender="/root/a",
        sender_id=LOCAL,
        recipient="/root",
        recipient_id="",
        content="done",
        completion=c,
    )
    out = ids.map_message(2, message)
    assert (out.id, out.sender_id, out.recipient_id) == (f"s2-{LOCAL}:4", f"s2-{LOCAL}", "")
    assert out.completion == mapped
    detail = ids.map_detail(2, AgentDetail(info=info(), unread=(message,), pending=(c,)))
    assert detail.info.id == f"s2-{LOCAL}"
    assert detail.unread == (out,) and detail.pending == (mapped,)


def test_importing_the_cluster_package_does_not_import_ray() -> None:
    code = "import sys, retinue, retinue.cluster\nprint('ray' in sys.modules)\n"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"
