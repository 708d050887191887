"""Tool presets and capability ceilings over the static profile graph (pure rules)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retinue.errors import ConfigurationError
from retinue.protocol.tools import (
    BUILTIN_TOOLS,
    COORDINATOR_TOOLS,
    MODIFY_TOOLS,
    PRESETS,
    READ_TOOLS,
    ToolSpec,
    exceeds_ceiling,
    extra_tools,
    resolve_profile_tools,
    resolve_tools,
)


def test_presets_are_the_documented_names() -> None:
    assert READ_TOOLS == ("read_file", "list_dir", "grep", "find")
    assert (*READ_TOOLS, "write_file", "edit_file", "bash") == MODIFY_TOOLS
    assert BUILTIN_TOOLS == MODIFY_TOOLS
    assert dict(PRESETS) == {"none": (), "read": READ_TOOLS, "modify": MODIFY_TOOLS}
    assert set(COORDINATOR_TOOLS).isdisjoint(BUILTIN_TOOLS)


def test_presets_cannot_be_edited() -> None:
    with pytest.raises(TypeError):
        PRESETS["read"] = ("bash",)  # type: ignore[index]


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        (None, None),
        ("none", ()),
        ("read", READ_TOOLS),
        ("modify", MODIFY_TOOLS),
        (["grep", "lookup_user", "grep"], ("grep", "lookup_user")),
        ((), ()),
        (iter(["a-b", "c_1"]), ("a-b", "c_1")),
    ],
)
def test_resolve_tools(spec: object, names: tuple[str, ...] | None) -> None:
    assert resolve_tools(spec) == names


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("read_file", "not a preset"),
        ("all", "not a preset"),
        (["read_file", 3], "must be strings"),
        (b"read", "not bytes"),
        (5, "not int"),
        (["spawn_subagent"], "coordinator tool"),
        (["read_file", "close_agent"], "coordinator tool"),
        (["has space"], "must match"),
        ([""], "must match"),
        (["x" * 65], "must match"),
    ],
)
def test_bad_specs_are_configuration_errors(spec: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        resolve_tools(spec, owner="worker")
    assert "profile 'worker'" in str(info.value)


def test_extra_tools_are_sorted_and_unique() -> None:
    assert extra_tools(["bash", "grep", "write_file", "bash"], READ_TOOLS) == ("bash", "write_file")
    assert extra_tools(READ_TOOLS, MODIFY_TOOLS) == ()


@pytest.mark.parametrize(
    ("child", "parent", "extra"),
    [
        (None, None, ()),
        (None, "none", ()),
        ("read", "modify", ()),
        ("read", "read", ()),
        (["grep"], "read", ()),
        ("read", None, ("find", "grep", "list_dir", "read_file")),
        ("modify", "read", ("bash", "edit_file", "write_file")),
        (["grep", "lookup"], ["grep"], ("lookup",)),
    ],
)
def test_exceeds_ceiling(child: object, parent: object, extra: tuple[str, ...]) -> None:
    assert exceeds_ceiling(child, parent) == extra  # type: ignore[arg-type]


def test_explicit_child_within_parent_is_accepted() -> None:
    tools = resolve_profile_tools(
        {"lead": ("modify", ["worker"]), "worker": ("read", []), "other": (["lookup"], [])}
    )
    assert tools == {"lead": MODIFY_TOOLS, "worker": READ_TOOLS, "other": ("lookup",)}


def test_child_above_parent_is_refused_naming_the_extra_tools() -> None:
    with pytest.raises(ConfigurationError) as info:
        resolve_profile_tools({"lead": ("read", ["worker"]), "worker": ("modify", [])})
    message = str(info.value)
    assert "'worker'" in message and "'lead'" in message
    assert "bash, edit_file, write_file" in message
    assert "read_file" not in message


def test_host_only_profile_without_tools_cannot_grant_any() -> None:
    with pytest.raises(ConfigurationError, match="lacks: grep"):
        resolve_profile_tools({"lead": (None, ["worker"]), "worker": (["grep"], [])})


def test_inheriting_profile_gets_what_every_spawner_has() -> None:
    tools = resolve_profile_tools(
        {
            "a": ("modify", ["shared", "deep"]),
            "b": (["grep", "bash", "lookup"], ["shared"]),
            "shared": (None, ["leaf"]),
            "leaf": (None, []),
            "deep": (None, []),
            "alone": (None, []),
        }
    )
    assert tools["shared"] == ("grep", "bash")  # a's order, b's intersection
    assert tools["leaf"] == ("grep", "bash")  # through an inheriting parent
    assert tools["deep"] == MODIFY_TOOLS
    assert tools["alone"] == ()


def test_inherited_tools_still_bound_explicit_grandchildren() -> None:
    with pytest.raises(ConfigurationError, match="lacks: write_file"):
        resolve_profile_tools(
            {
                "lead": ("modify", ["mid"]),
                "other": ("read", ["mid"]),
                "mid": (None, ["leaf"]),
                "leaf": (["grep", "write_file"], []),
            }
        )


def test_unknown_subagent_names_are_ignored() -> None:
    assert resolve_profile_tools({"lead": ("read", ["ghost"])}) == {"lead": READ_TOOLS}


def test_inheritance_through_a_cycle_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="cycle"):
        resolve_profile_tools({"a": (None, ["b"]), "b": (None, ["a"])})


def test_long_inheriting_chain_resolves_without_recursion() -> None:
    chain: dict[str, tuple[ToolSpec, list[str]]] = {
        f"p{i}": (None, [f"p{i + 1}"]) for i in range(5000)
    }
    chain["p0"] = ("read", ["p1"])
    chain["p5000"] = (None, [])
    tools = resolve_profile_tools(chain)
    assert tools["p5000"] == READ_TOOLS


PROFILE_NAMES = ["a", "b", "c", "d", "e"]
SPECS = st.one_of(
    st.none(),
    st.sampled_from(["none", "read", "modify"]),
    st.lists(st.sampled_from([*MODIFY_TOOLS, "lookup"]), max_size=4),
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(
    st.lists(st.tuples(SPECS, st.sets(st.integers(0, 4))), min_size=5, max_size=5),
)
def test_resolution_either_fits_every_edge_or_names_the_breach(
    rows: list[tuple[object, set[int]]],
) -> None:
    # Edges only go from a lower index to a higher one: the graph is acyclic.
    profiles = {
        name: (spec, [PROFILE_NAMES[j] for j in sorted(kids) if j > i])
        for i, (name, (spec, kids)) in enumerate(zip(PROFILE_NAMES, rows, strict=True))
    }
    try:
        tools = resolve_profile_tools(profiles)  # type: ignore[arg-type]
    except ConfigurationError as exc:
        assert "lacks:" in str(exc)
        return
    for name, (spec, kids) in profiles.items():
        if spec is not None:
            assert tools[name] == resolve_tools(spec)
        for kid in kids:
            assert set(tools[kid]) <= set(tools[name])
        spawners = [p for p, (_, k) in profiles.items() if name in k]
        if spec is None and not spawners:
            assert tools[name] == ()
