"""The pure rules of side effects: effect classes, keys, what a call in doubt gets."""

from __future__ import annotations

import json

import pytest

from retinue import AgentInfo, AgentState, ConfigurationError, Team
from retinue.llm.turn._intents import doubtful_calls, intents, open_count, settle, started
from retinue.protocol.effects import (
    BUILTIN_EFFECTS,
    check_effect_names,
    effect_of,
    idempotency_key,
    in_doubt_action,
    in_doubt_result,
    mcp_effect,
    not_run_result,
)


def _call(call_id: str, name: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def _agent() -> AgentInfo:
    return AgentInfo(
        id="a1",
        name="a",
        path="/root/a",
        profile="p",
        parent_path="/root",
        depth=1,
        state=AgentState.RUNNING,
        generation=2,
        task="t",
    )


def test_builtin_classes_follow_the_issue() -> None:
    assert {n for n, e in BUILTIN_EFFECTS.items() if e == "read"} == {
        "read_file",
        "list_dir",
        "grep",
        "find",
    }
    assert (BUILTIN_EFFECTS["write_file"], BUILTIN_EFFECTS["edit_file"]) == ("idempotent", "unsafe")
    assert BUILTIN_EFFECTS["bash"] == "unsafe"


def test_mcp_annotations_give_the_class() -> None:
    assert mcp_effect(None) == "unsafe"
    assert mcp_effect({"readOnlyHint": True, "idempotentHint": True}) == "read"
    assert mcp_effect({"idempotentHint": True}) == "idempotent"
    assert mcp_effect({"readOnlyHint": False, "destructiveHint": True}) == "unsafe"

    class Sdk:  # the SDK's ToolAnnotations attribute names
        read_only_hint = None
        idempotent_hint = True

    assert mcp_effect(Sdk()) == "idempotent"


def test_an_override_by_name_or_server_wins() -> None:
    overrides = {"payments.refund": "idempotent", "docs.*": "read"}
    assert effect_of("payments.refund", "unsafe", overrides) == "idempotent"  # type: ignore[arg-type]
    assert effect_of("docs.search", "unsafe", overrides) == "read"  # type: ignore[arg-type]
    assert effect_of("payments.charge", "unsafe", overrides) == "unsafe"  # type: ignore[arg-type]
    check_effect_names("p", overrides, ("payments.refund", "docs.search"))
    with pytest.raises(ConfigurationError, match=r"'mail\.\*', which is not one of its tools"):
        check_effect_names("p", {"mail.*": "read"}, ("payments.refund",))


def test_keys_come_from_agent_generation_step_and_place() -> None:
    assert idempotency_key("a1", 3, 2, 0) == "a1-3-2-0"
    step = intents(
        "a1", 3, 2, [_call("x", "look"), _call("x", "pay")], {}, lambda n: "unsafe", set()
    )
    assert [c.key for c in step.calls] == ["a1-3-2-0", "a1-3-2-1"]  # a repeated id: two keys


def test_settle_acts_by_class_and_mode() -> None:
    classes = {"look": "read", "put": "idempotent", "pay": "unsafe"}
    calls = [_call("c1", "look"), _call("c2", "put"), _call("c3", "pay")]
    step = intents("a1", 1, 1, calls, {}, lambda n: classes[n], set())  # type: ignore[arg-type,return-value]
    assert open_count(step) == 3
    for mode, last in (("report", "reported"), ("approve", "approval")):
        settled, events = settle(step, mode, _agent())
        assert [e.action for e in events] == ["rerun", "rerun", last]
        assert [(c.state, c.attempt, c.in_doubt) for c in settled.calls[:2]] == [
            ("running", 2, True),
            ("running", 2, True),
        ]
        pay = settled.calls[2]
        if mode == "report":
            assert (pay.state, pay.result) == ("done", in_doubt_result("pay", "a1-1-1-2"))
        else:
            assert (pay.state, pay.attempt) == ("waiting", 1)
            assert started(settled, {}).calls[2].attempt == 2  # approved: its second run
    assert in_doubt_action("unsafe", "report") == "reported"


def test_a_step_that_waited_for_approvals_and_never_started_is_not_in_doubt() -> None:
    step = intents("a1", 1, 1, [_call("c1", "pay")], {}, lambda n: "read", {"c1"})
    assert (step.calls[0].state, step.calls[0].effect, open_count(step)) == ("waiting", "unsafe", 0)
    settled, events = settle(step, "report", _agent())
    assert events == []
    assert (settled.calls[0].state, settled.calls[0].result) == ("done", not_run_result("pay"))


def test_a_journal_binds_only_to_its_own_unanswered_step() -> None:
    calls = [_call("c1", "pay")]
    step = intents("a1", 1, 1, calls, {}, lambda n: "unsafe", set())
    chat = [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": calls}]
    assert doubtful_calls(step, chat) == calls
    answered = [*chat, {"role": "tool", "tool_call_id": "c1", "content": "{}"}]
    assert doubtful_calls(step, answered) == []
    assert doubtful_calls(step, [*answered, {"role": "user", "content": "more"}]) == []
    data = json.loads(in_doubt_result("pay", "k"))
    assert data == {
        "error": "in doubt: pay was running when the process stopped; it may or may not have "
        "taken effect. Check before you call it again.",
        "idempotency_key": "k",
    }


TEAM = """
[defaults]
model = "retinue/scripted"
tools = ["read_file", "write_file"]
in_doubt = "approve"

[agents.lead]
effects = { "write_file" = "unsafe" }
"""


def test_a_team_file_sets_effects_and_in_doubt() -> None:
    (lead,) = Team.from_toml(TEAM, environ=False).profiles()
    assert (dict(lead.effects), lead.in_doubt) == ({"write_file": "unsafe"}, "approve")
