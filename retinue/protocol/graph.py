"""The definition-time check of the profiles' delegation graph: no cycle, bounded depth.

A profile names the profiles it may spawn. :func:`validate_graph` walks that
graph once, iteratively (no recursion, linear in nodes plus edges), and
returns every profile's delegation depth.

Depth is counted as the runtime counts it: an agent's depth is the number of
segments of its path below ``/root``, so a top-level agent is at depth 1, its
children at 2, and so on; ``depth_cap`` is the deepest allowed. A profile's
delegation depth is the depth the deepest agent of its chain reaches when
the profile is spawned at the top: a profile with no children has depth 1,
any other has 1 + the deepest of its children, so ``a -> b -> c`` has depth
3 and needs ``depth_cap >= 3``. A graph that passes the check with the
runtime's ``depth_cap`` therefore never hits that cap at run time. A child
that is not a profile of the graph is a leaf (depth 1), not an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from retinue.errors import (
    ArgumentTypeError,
    DelegationCycleError,
    DelegationDepthError,
    DelegationGraphError,
    InvalidArgument,
)
from retinue.protocol.limits import Limits

__all__ = ["validate_graph"]


def _children(owner: str, children: object) -> list[str]:
    """Return ``children`` as a list of profile names; else raise ``ArgumentTypeError``."""
    if isinstance(children, str | bytes) or not isinstance(children, Iterable):
        raise ArgumentTypeError(
            f"subagents of profile {owner!r} must be a list of profile names, "
            f"not {type(children).__name__}"
        )
    names = list(children)
    for name in names:
        if not isinstance(name, str):
            raise ArgumentTypeError(
                f"subagents of profile {owner!r} must be profile names (str), "
                f"not {type(name).__name__}"
            )
    return names


def _adjacency(graph: Mapping[str, Iterable[str]] | Iterable[Any]) -> dict[str, list[str]]:
    """Normalise either accepted graph shape into ``{profile: [children]}``."""
    if isinstance(graph, Mapping):
        items: list[tuple[object, object]] = list(graph.items())
    elif isinstance(graph, str | bytes) or not isinstance(graph, Iterable):
        raise ArgumentTypeError(
            "graph must be a mapping {profile: [child profiles]} or an iterable of "
            f"profiles with .name and .subagents, not {type(graph).__name__}"
        )
    else:
        items = []
        profiles: Iterable[Any] = graph
        for profile in profiles:
            try:
                items.append((profile.name, profile.subagents))
            except AttributeError:
                raise ArgumentTypeError(
                    "every profile in the graph must have .name and .subagents, "
                    f"not {type(profile).__name__}"
                ) from None
    adjacency: dict[str, list[str]] = {}
    for name, children in items:
        if not isinstance(name, str):
            raise ArgumentTypeError(f"profile names must be str, not {type(name).__name__}")
        if name in adjacency:
            raise DelegationGraphError(
                f"profile {name!r} is defined twice; give every profile a unique name"
            )
        adjacency[name] = _children(name, children)
    return adjacency


def validate_graph(
    graph: Mapping[str, Iterable[str]] | Iterable[Any], cap: int | None = None
) -> dict[str, int]:
    """Check a delegation graph and return ``{profile: delegation depth}``.

    ``graph`` is a mapping ``{profile: [child profiles]}`` or an iterable of
    objects with ``.name`` and ``.subagents``. ``cap`` defaults to
    ``Limits.from_env().depth_cap``. Depth counts profiles, as the runtime
    counts path segments below ``/root`` (see the module docstring): a leaf
    profile has depth 1 and a chain of exactly ``cap`` profiles is accepted.
    Depths are computed bottom-up, so the depth reported for a chain that is
    too deep is ``cap + 1``. A cycle is reported in preference to a depth
    error. The result lists the profiles in input order.

    Raises:
        DelegationCycleError: profiles delegate in a cycle (a self-loop too);
            ``.cycle`` is e.g. ``["a", "b", "a"]`` and the message
            ``subagent cycle detected: a -> b -> a``.
        DelegationDepthError: a profile's depth exceeds ``cap``; the message
            is e.g. ``subagent depth 6 exceeds cap 5``.
        DelegationGraphError: a profile name is defined twice.
        ArgumentTypeError: the graph, a name or a children list has the wrong type,
            or ``cap`` is not an ``int``.
        InvalidArgument: ``cap`` is negative.
        InvalidLimits: ``cap`` is omitted and ``RETINUE_DEPTH_CAP`` is invalid.
    """
    if cap is None:
        cap = Limits.from_env().depth_cap
    elif isinstance(cap, bool) or not isinstance(cap, int):
        raise ArgumentTypeError(f"cap must be an int, not {type(cap).__name__}")
    if cap < 0:
        raise InvalidArgument(f"cap must be at least 0, got {cap}")
    adjacency = _adjacency(graph)

    depths: dict[str, int] = {}
    too_deep: int | None = None
    for start in adjacency:
        if start in depths:
            continue
        # Explicit DFS stack: path[i] is being expanded by iterators[i], and
        # best[i] is the deepest "1 + child depth" seen for it so far.
        path: list[str] = [start]
        position: dict[str, int] = {start: 0}
        iterators: list[Iterator[str]] = [iter(adjacency[start])]
        best: list[int] = [1]
        while path:
            for child in iterators[-1]:
                if child in position:
                    raise DelegationCycleError([*path[position[child] :], child])
                known = depths.get(child)
                if known is not None:
                    best[-1] = max(best[-1], known + 1)
                elif child not in adjacency:  # a leaf of depth 1 below this node
                    best[-1] = max(best[-1], 2)
                    if cap < 1 and too_deep is None:
                        too_deep = 1
                else:
                    position[child] = len(path)
                    path.append(child)
                    iterators.append(iter(adjacency[child]))
                    best.append(1)
                    break
            else:
                node = path.pop()
                iterators.pop()
                del position[node]
                node_depth = best.pop()
                depths[node] = node_depth
                if node_depth > cap and too_deep is None:
                    too_deep = node_depth
                if best:
                    best[-1] = max(best[-1], node_depth + 1)
    if too_deep is not None:
        raise DelegationDepthError(too_deep, cap)
    return {name: depths[name] for name in adjacency}
