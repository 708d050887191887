"""The delegation graph check: depths, cycles, the depth cap, and scale."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retinue.errors import (
    ArgumentTypeError,
    DelegationCycleError,
    DelegationDepthError,
    DelegationGraphError,
    InvalidArgument,
)
from retinue.protocol.graph import validate_graph

SETTINGS = settings(max_examples=150, derandomize=True, deadline=None)
BIG = 10**9


@dataclass
class Profile:
    name: str
    subagents: list[str] = field(default_factory=list)


def chain(edges: int, prefix: str = "n") -> dict[str, list[str]]:
    """A chain n0 -> n1 -> ... -> n<edges>, every node a key."""
    graph = {f"{prefix}{i}": [f"{prefix}{i + 1}"] for i in range(edges)}
    graph[f"{prefix}{edges}"] = []
    return graph


# -- depths ------------------------------------------------------------------------


def test_depths_of_a_small_graph() -> None:
    graph = {"lead": ["review", "research"], "review": ["lint"], "research": [], "lint": []}
    assert validate_graph(graph, cap=5) == {"lead": 3, "review": 2, "research": 1, "lint": 1}


def test_unknown_child_is_a_leaf() -> None:
    assert validate_graph({"a": ["ghost"], "b": []}, cap=5) == {"a": 2, "b": 1}


def test_result_keeps_input_order() -> None:
    graph = {"z": ["m"], "a": [], "m": ["a"]}
    assert list(validate_graph(graph, cap=5)) == ["z", "a", "m"]


def test_diamond_uses_the_deepest_child() -> None:
    graph = {"top": ["left", "right"], "left": ["bottom"], "right": [], "bottom": ["x"]}
    assert validate_graph(graph, cap=5)["top"] == 4


def test_iterable_of_profile_objects() -> None:
    profiles = [Profile("lead", ["worker"]), Profile("worker", ["tool"]), Profile("tool")]
    assert validate_graph(profiles, cap=5) == {"lead": 3, "worker": 2, "tool": 1}


def test_children_may_be_any_iterable() -> None:
    assert validate_graph({"a": ("b",), "b": iter([])}, cap=5) == {"a": 2, "b": 1}


def test_empty_graph() -> None:
    assert validate_graph({}, cap=5) == {}


def test_memoised_not_exponential() -> None:
    # Every level has two nodes that both point at both nodes of the next
    # level: 2**60 paths, so only a memoised walk finishes.
    levels = 60
    graph: dict[str, list[str]] = {}
    for i in range(levels):
        graph[f"a{i}"] = [f"a{i + 1}", f"b{i + 1}"]
        graph[f"b{i}"] = [f"a{i + 1}", f"b{i + 1}"]
    depths = validate_graph(graph, cap=BIG)
    assert depths["a0"] == depths["b0"] == levels + 1


# -- cycles ------------------------------------------------------------------------


def test_self_loop() -> None:
    with pytest.raises(DelegationCycleError) as info:
        validate_graph({"a": ["a"]}, cap=5)
    assert info.value.cycle == ["a", "a"]
    assert str(info.value) == "subagent cycle detected: a -> a"


def test_two_node_cycle() -> None:
    with pytest.raises(DelegationCycleError) as info:
        validate_graph({"a": ["b"], "b": ["a"]}, cap=5)
    assert info.value.cycle == ["a", "b", "a"]
    assert str(info.value) == "subagent cycle detected: a -> b -> a"


def test_cycle_reached_from_outside_lists_only_the_cycle() -> None:
    graph = {"r": ["x", "a"], "x": [], "a": ["b"], "b": ["c"], "c": ["a"]}
    with pytest.raises(DelegationCycleError) as info:
        validate_graph(graph, cap=5)
    assert info.value.cycle == ["a", "b", "c", "a"]
    assert str(info.value) == "subagent cycle detected: a -> b -> c -> a"


def test_cycle_errors_are_value_errors() -> None:
    with pytest.raises(ValueError):
        validate_graph({"a": ["a"]}, cap=5)
    assert issubclass(DelegationCycleError, DelegationGraphError)


def test_cycle_is_reported_before_depth() -> None:
    graph = chain(20)
    graph["x"] = ["y"]
    graph["y"] = ["x"]
    with pytest.raises(DelegationCycleError):
        validate_graph(graph, cap=5)


# -- the depth cap -----------------------------------------------------------------


def test_chain_of_seven_edges_with_cap_five_reports_depth_six() -> None:
    with pytest.raises(DelegationDepthError) as info:
        validate_graph(chain(7), cap=5)
    assert (info.value.depth, info.value.cap) == (6, 5)
    assert str(info.value) == "subagent depth 6 exceeds cap 5"
    assert isinstance(info.value, DelegationGraphError)


def test_chain_of_exactly_cap_profiles_is_accepted() -> None:
    # Five profiles (four edges): spawned at the top, the last runs at depth 5.
    assert validate_graph(chain(4), cap=5)["n0"] == 5


def test_chain_of_cap_plus_one_profiles_is_refused() -> None:
    with pytest.raises(DelegationDepthError, match=r"^subagent depth 6 exceeds cap 5$"):
        validate_graph(chain(5), cap=5)


def test_depth_counts_as_the_runtime_does_a_top_level_agent_is_depth_one() -> None:
    # a -> b -> c puts c at /root/a/b/c, depth 3: the example.
    with pytest.raises(DelegationDepthError, match=r"^subagent depth 3 exceeds cap 2$"):
        validate_graph({"a": ["b"], "b": ["c"]}, cap=2)
    assert validate_graph({"a": ["b"], "b": ["c"]}, cap=3) == {"a": 3, "b": 2}
    assert validate_graph({"solo": []}, cap=1) == {"solo": 1}


def test_chain_ending_in_an_unknown_leaf_counts_that_leaf() -> None:
    graph = {"a": ["b"], "b": ["unknown"]}
    assert validate_graph(graph, cap=3) == {"a": 3, "b": 2}
    with pytest.raises(DelegationDepthError, match=r"^subagent depth 3 exceeds cap 2$"):
        validate_graph(graph, cap=2)


def test_cap_zero_allows_no_profile() -> None:
    assert validate_graph({}, cap=0) == {}
    with pytest.raises(DelegationDepthError, match=r"^subagent depth 1 exceeds cap 0$"):
        validate_graph({"a": []}, cap=0)


def test_cap_defaults_to_limits_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RETINUE_DEPTH_CAP", raising=False)
    assert validate_graph(chain(4))["n0"] == 5
    with pytest.raises(DelegationDepthError, match=r"^subagent depth 6 exceeds cap 5$"):
        validate_graph(chain(5))
    monkeypatch.setenv("RETINUE_DEPTH_CAP", "2")
    with pytest.raises(DelegationDepthError, match=r"^subagent depth 3 exceeds cap 2$"):
        validate_graph(chain(2))


# -- bad input ---------------------------------------------------------------------


def test_bad_cap() -> None:
    with pytest.raises(InvalidArgument):
        validate_graph({}, cap=-1)
    with pytest.raises(ArgumentTypeError):
        validate_graph({}, cap=True)
    with pytest.raises(ArgumentTypeError):
        validate_graph({}, cap=2.0)  # type: ignore[arg-type]


def test_bad_graph_shapes() -> None:
    with pytest.raises(ArgumentTypeError):
        validate_graph({"a": "bc"}, cap=5)
    with pytest.raises(ArgumentTypeError):
        validate_graph({"a": [1]}, cap=5)
    with pytest.raises(ArgumentTypeError):
        validate_graph({1: []}, cap=5)
    with pytest.raises(ArgumentTypeError):
        validate_graph([object()], cap=5)
    with pytest.raises(ArgumentTypeError):
        validate_graph(42, cap=5)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError):
        validate_graph("ab", cap=5)


def test_duplicate_profile_names_are_refused() -> None:
    with pytest.raises(DelegationGraphError, match="defined twice"):
        validate_graph([Profile("a"), Profile("a", ["b"])], cap=5)


# -- scale -------------------------------------------------------------------------


def test_100_000_node_chain_with_a_large_cap() -> None:
    depths = validate_graph(chain(99_999), cap=BIG)
    assert len(depths) == 100_000
    assert depths["n0"] == 100_000
    assert depths["n99999"] == 1


def test_100_000_node_chain_over_the_cap() -> None:
    with pytest.raises(DelegationDepthError, match=r"^subagent depth 51 exceeds cap 50$"):
        validate_graph(chain(99_999), cap=50)


def test_100_000_node_cycle() -> None:
    graph = chain(99_999)
    graph["n99999"] = ["n0"]
    with pytest.raises(DelegationCycleError) as info:
        validate_graph(graph, cap=BIG)
    assert len(info.value.cycle) == 100_001
    assert info.value.cycle[0] == info.value.cycle[-1] == "n0"


# -- properties --------------------------------------------------------------------


def brute_force_depth(graph: dict[str, list[str]], node: str) -> int:
    """Profiles on the longest chain from ``node`` (a leaf is 1), by plain recursion."""
    children = graph.get(node)
    if not children:
        return 1
    return 1 + max(brute_force_depth(graph, child) for child in children)


def has_cycle(graph: dict[str, list[str]]) -> bool:
    """Whether ``graph`` has a cycle, by Kahn's algorithm."""
    indegree = dict.fromkeys(graph, 0)
    for children in graph.values():
        for child in children:
            if child in indegree:
                indegree[child] += 1
    ready = [n for n, d in indegree.items() if d == 0]
    removed = 0
    while ready:
        node = ready.pop()
        removed += 1
        for child in graph[node]:
            if child in indegree:
                indegree[child] -= 1
                if indegree[child] == 0:
                    ready.append(child)
    return removed != len(graph)


@st.composite
def dags(draw: st.DrawFn) -> dict[str, list[str]]:
    """Random DAGs: edges only go from a lower to a higher rank; some unknown leaves."""
    size = draw(st.integers(min_value=0, max_value=9))
    nodes = [f"p{i}" for i in range(size)]
    graph: dict[str, list[str]] = {}
    for i, node in enumerate(nodes):
        later = [*nodes[i + 1 :], "ghost1", "ghost2"]
        graph[node] = draw(st.lists(st.sampled_from(later), max_size=4))
    order = draw(st.permutations(nodes))
    return {node: graph[node] for node in order}


@st.composite
def any_graphs(draw: st.DrawFn) -> dict[str, list[str]]:
    """Random directed graphs over a few names, cycles and self-loops included."""
    size = draw(st.integers(min_value=0, max_value=7))
    nodes = [f"p{i}" for i in range(size)]
    targets = [*nodes, "ghost"]
    return {node: draw(st.lists(st.sampled_from(targets), max_size=3)) for node in nodes}


@SETTINGS
@given(dags())
def test_dag_depths_equal_brute_force(graph: dict[str, list[str]]) -> None:
    depths = validate_graph(graph, cap=BIG)
    assert depths == {node: brute_force_depth(graph, node) for node in graph}


@SETTINGS
@given(dags(), st.integers(min_value=0, max_value=10))
def test_dag_depth_cap_is_enforced_exactly(graph: dict[str, list[str]], cap: int) -> None:
    deepest = max((brute_force_depth(graph, node) for node in graph), default=0)
    if deepest <= cap:
        assert validate_graph(graph, cap=cap) == validate_graph(graph, cap=BIG)
    else:
        with pytest.raises(DelegationDepthError) as info:
            validate_graph(graph, cap=cap)
        assert (info.value.depth, info.value.cap) == (cap + 1, cap)


@SETTINGS
@given(any_graphs())
def test_reported_cycles_are_real_and_acyclic_graphs_pass(graph: dict[str, list[str]]) -> None:
    cyclic = has_cycle(graph)
    try:
        validate_graph(graph, cap=BIG)
    except DelegationCycleError as exc:
        cycle = exc.cycle
        assert cyclic
        assert len(cycle) >= 2
        assert cycle[0] == cycle[-1]
        assert len(set(cycle[:-1])) == len(cycle) - 1
        for parent, child in itertools.pairwise(cycle):
            assert child in graph[parent]
        assert str(exc) == "subagent cycle detected: " + " -> ".join(cycle)
    else:
        assert not cyclic
