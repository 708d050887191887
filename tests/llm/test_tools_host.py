"""Host tools: registration, schemas from type hints or a struct, sync and async calls, errors."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal

import msgspec
import pytest

from llm.conftest import run
from retinue import AgentState, Profile
from retinue.errors import ConfigurationError
from retinue.llm import SCRIPTED_MODEL, HostTool, LiteLLMRunner, ToolBox, ToolError, tool
from retinue.llm.tools._arguments import _schema_json
from retinue.llm.tools._host import host_tool_defs


def box_of(*fns: Any, **options: Any) -> ToolBox:
    return ToolBox([t.definition() for t in host_tool_defs(list(fns)).values()], **options)


def call(box: ToolBox, name: str, arguments: Any) -> Any:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return json.loads(asyncio.run(box.call(name, text)))


def params(box: ToolBox, name: str) -> dict[str, Any]:
    (entry,) = [s for s in box.schemas() if s["function"]["name"] == name]
    parameters: dict[str, Any] = entry["function"]["parameters"]
    return parameters


@tool
def lookup_user(email: str, include_orders: bool = False, limit: int = 10) -> dict[str, Any]:
    """Find a customer by e-mail.

    More prose that is not part of the summary.

    Args:
        email: the customer's e-mail address,
            on two lines.
        limit (int): most orders to return.
    """
    return {"email": email, "orders": include_orders, "limit": limit}


class Refund(msgspec.Struct, forbid_unknown_fields=True):
    """A refund request."""

    order_id: Annotated[str, msgspec.Meta(description="The order to refund.")]
    reason: Literal["damaged", "late", "other"]
    amount_cents: Annotated[int, msgspec.Meta(gt=0)] | None = None


@tool(name="refund", description="Refund an order.")
async def refund_order(request: Refund) -> Refund:
    await asyncio.sleep(0)
    return request


def test_schema_from_type_hints_and_docstring() -> None:
    box = box_of(lookup_user)
    (entry,) = box.schemas()
    assert entry["type"] == "function"
    assert entry["function"]["name"] == "lookup_user"
    assert entry["function"]["description"] == "Find a customer by e-mail."
    assert entry["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "email": {
                "type": "string",
                "description": "the customer's e-mail address, on two lines.",
            },
            "include_orders": {"type": "boolean", "default": False},
            "limit": {"type": "integer", "default": 10, "description": "most orders to return."},
        },
        "required": ["email"],
        "additionalProperties": False,
    }


def test_schema_from_a_struct_parameter() -> None:
    box = box_of(refund_order)
    (entry,) = box.schemas()
    assert (entry["function"]["name"], entry["function"]["description"]) == (
        "refund",
        "Refund an order.",
    )
    props = params(box, "refund")["properties"]
    assert props["order_id"] == {"type": "string", "description": "The order to refund."}
    assert props["reason"] == {"enum": ["damaged", "late", "other"]}
    assert props["amount_cents"] == {"type": "integer", "exclusiveMinimum": 0}
    assert params(box, "refund")["required"] == ["order_id", "reason"]


def test_a_schema_edited_by_its_caller_leaves_the_next_toolbox_unchanged() -> None:
    # Schemas are built once per tool and shared by every turn's toolbox:
    # what one caller does to its copy must not reach another's.
    first = box_of(refund_order)
    edited = first.schemas()
    edited[0]["function"]["parameters"]["properties"].clear()
    edited[0]["function"]["description"] = "changed"
    assert params(first, "refund")["properties"]["reason"] == {"enum": ["damaged", "late", "other"]}
    (entry,) = box_of(refund_order).schemas()
    assert entry["function"]["description"] == "Refund an order."
    assert entry["function"]["parameters"]["required"] == ["order_id", "reason"]


def test_sync_tool_runs_off_the_event_loop_thread() -> None:
    seen: list[str] = []

    def where() -> str:
        """Report the thread."""
        seen.append(threading.current_thread().name)
        return "ok"

    async def scenario() -> str:
        loop_thread = threading.current_thread().name
        result = await box_of(where).call("where", "{}")
        assert seen and seen[0] != loop_thread
        return result

    assert json.loads(asyncio.run(scenario())) == {"result": "ok"}


def test_calls_decode_and_return_json() -> None:
    box = box_of(lookup_user, refund_order)
    assert call(box, "lookup_user", {"email": "a@b.c", "limit": 3}) == {
        "email": "a@b.c",
        "orders": False,
        "limit": 3,
    }
    refund = {"order_id": "o1", "reason": "late", "amount_cents": 500}
    assert call(box, "refund", refund) == refund


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "missing required argument `email`"),
        ({"email": 3}, "argument `email`: Expected `str`, got `int`"),
        ({"email": "x", "limit": "ten"}, "argument `limit`: Expected `int`, got `str`"),
        ({"email": "x", "admin": True}, "unknown argument `admin`"),
        ("[1, 2]", "Expected `object`, got `array`"),
        ("{not json", "not valid JSON"),
    ],
)
def test_argument_errors_name_the_field(arguments: Any, expected: str) -> None:
    result = call(box_of(lookup_user), "lookup_user", arguments)
    assert set(result) == {"error"}
    assert result["error"].startswith("invalid arguments for lookup_user: ")
    assert expected in result["error"]


def test_nested_struct_errors_name_the_field() -> None:
    result = call(box_of(refund_order), "refund", {"order_id": "o", "reason": "bored"})
    assert "argument `reason`: Invalid enum value 'bored'" in result["error"]
    result = call(box_of(refund_order), "refund", {"order_id": "o", "reason": "late",
                                                   "amount_cents": 0})  # fmt: skip
    assert "argument `amount_cents`" in result["error"]


def test_empty_arguments_mean_an_empty_object() -> None:
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    assert call(box_of(ping), "ping", "") == {"result": "pong"}


def test_exceptions_come_back_as_errors_without_traceback() -> None:
    @tool
    def boom(x: int) -> int:
        """Fail."""
        raise KeyError(f"no row {x}")

    @tool
    async def refuse(x: int) -> int:
        """Refuse politely."""
        raise ToolError(f"row {x} is locked; try again later")

    box = box_of(boom, refuse)
    assert call(box, "boom", {"x": 7}) == {"error": "boom failed: KeyError: 'no row 7'"}
    assert call(box, "refuse", {"x": 7}) == {"error": "row 7 is locked; try again later"}


def test_results_that_are_not_json_are_errors() -> None:
    @tool
    def odd() -> object:
        """Return something JSON cannot carry."""
        return {1, 2}.__iter__()

    result = call(box_of(odd), "odd", {})
    assert "odd returned a value that is not JSON" in result["error"]


def test_big_results_are_cut_to_the_bound() -> None:
    @tool
    def big() -> str:
        """Return a lot."""
        return "x" * 10_000

    result = call(box_of(big, max_result_bytes=1000), "big", {})
    assert result["truncated"] is True
    assert len(json.dumps(result)) <= 1000


def test_scalars_and_lists_are_wrapped_in_an_object() -> None:
    @tool
    def count(n: int) -> list[int]:
        """Count."""
        return list(range(n))

    assert call(box_of(count), "count", {"n": 3}) == {"result": [0, 1, 2]}


def test_a_decorated_function_stays_callable() -> None:
    assert isinstance(lookup_user, HostTool)
    assert lookup_user("a@b.c")["email"] == "a@b.c"


def test_a_mapping_renames_tools() -> None:
    def echo(x: str) -> str:
        return x

    named: dict[str, Callable[..., Any]] = {"find_customer": lookup_user, "plain": echo}
    tools = host_tool_defs(named)
    assert sorted(tools) == ["find_customer", "plain"]
    assert tools["find_customer"].description == "Find a customer by e-mail."


def variadic(*args: int) -> None:
    """Take anything."""


def untyped(x):  # type: ignore[no-untyped-def]
    """Take an untyped argument."""
    return x


def positional(x: int, /) -> int:
    """Take a positional-only argument."""
    return x


def fine() -> None:
    """Do nothing."""


@pytest.mark.parametrize(
    ("fn", "name", "message"),
    [
        (variadic, None, "plain named parameter"),
        (positional, None, "plain named parameter"),
        (untyped, None, "needs a type hint"),
        (fine, "bash", "taken by a built-in"),
        (fine, "spawn_subagent", "taken by a built-in"),
        (fine, "read", "taken by a built-in"),
        (fine, "has space", "must match"),
        (fine, "", "must match"),
        (3, "three", "must be a function"),
    ],
)
def test_bad_registrations_are_configuration_errors(
    fn: Any, name: str | None, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        tool(fn, name=name) if name is not None else tool(fn)


def test_types_json_cannot_describe_are_refused() -> None:
    def takes_a_lock(lock: threading.Lock) -> None:
        return None

    with pytest.raises(ConfigurationError, match="cannot be sent as JSON"):
        tool(takes_a_lock)


def test_two_tools_of_one_name_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="two host tools are named 'lookup_user'"):
        host_tool_defs([lookup_user, lookup_user.fn])


def test_a_runners_plain_functions_are_built_once_not_per_turn(llm_runtime: Any) -> None:
    """A plain function given as ``host_tools`` is read (signature, argument struct, schema)
    once, not on every turn: each build made a new struct type, whose schema was then
    built again and kept by the schema and decoder caches."""

    def note(text: str) -> str:
        """Keep a note."""
        return text

    runner = LiteLLMRunner(SCRIPTED_MODEL, host_tools={"note": note})
    rt = llm_runtime([Profile("agent", runner=runner, tools=["note"])])
    assert run(rt, "agent", "warm up").state is AgentState.COMPLETED
    built = _schema_json.cache_info().misses
    for n in range(3):
        assert run(rt, "agent", f"task {n}").state is AgentState.COMPLETED
    assert _schema_json.cache_info().misses == built
    assert host_tool_defs({"note": note})["note"] is host_tool_defs({"note": note})["note"]
