"""A team file on the chaos model, and the hypothesis strategy of a fuzzing host's operations.

:func:`chaos_team` keeps a team's instructions, tools, limits, Python runners,
approvals, restart policies and MCP servers, and puts every model agent on
``retinue/chaos``, with each model call cut at ``call_timeout_s`` (the chaos
model's hangs end there, as a real provider's would at ``request_timeout_s``).
:func:`team_factory` is the :class:`~retinue.testing._fuzz_run.Setup` factory
``retinue fuzz`` uses; :func:`operations` draws operation sequences that
hypothesis shrinks to the shortest one that still fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from retinue.team import Team, load_team
from retinue.testing._fuzz_ops import AGENT_OPS, Op
from retinue.testing.chaos import CHAOS_MODEL

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = ["DEFAULT_CALL_TIMEOUT_S", "chaos_team", "operations", "team_factory"]

DEFAULT_CALL_TIMEOUT_S = 1.0
"""The most one model call of a fuzzed team may take (its own ``request_timeout_s`` if lower)."""
_DEFAULT_REQUEST_TIMEOUT_S = 120.0  # LiteLLMRunner's


def _capped(value: float | None, cap: float) -> float:
    return min(value if value is not None else _DEFAULT_REQUEST_TIMEOUT_S, cap)


def chaos_team(team: Team, *, call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> Team:
    """Return ``team`` with its model agents on the chaos model, calls cut at ``call_timeout_s``."""
    chaotic = team.with_model(CHAOS_MODEL)
    defaults = msgspec.structs.replace(
        chaotic.defaults,
        request_timeout_s=_capped(chaotic.defaults.request_timeout_s, call_timeout_s),
    )
    agents = {
        name: msgspec.structs.replace(
            spec, request_timeout_s=_capped(spec.request_timeout_s, call_timeout_s)
        )
        if spec.request_timeout_s is not None
        else spec
        for name, spec in chaotic.agents.items()
    }
    return Team(
        agents=agents,
        limits=chaotic.limits,
        defaults=defaults,
        name=chaotic.name,
        lead=chaotic.lead,
        description=chaotic.description,
        source=chaotic.source,
        mcp=chaotic.mcp,
    )


def team_factory(
    workspace: Path, *, team: str, call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
) -> dict[str, Any]:
    """``Runtime.open`` arguments for the team file ``team`` on the chaos model.

    Raises:
        TeamFileError: the team file is unusable.
    """
    return {"team": chaos_team(load_team(team), call_timeout_s=call_timeout_s)}


def operations(
    profiles: Sequence[str], *, lead: str, crash: bool = False, max_ops: int = 8
) -> SearchStrategy[list[Op]]:
    """Sequences of 1 to ``max_ops`` host operations on a team with ``profiles``.

    Each starts with a spawn (of ``lead``, as hypothesis shrinks it); spawns
    come first in hypothesis's order, so sequences shrink toward them;
    ``crash`` adds SIGKILLs of the process.
    """
    from hypothesis import strategies as st

    targets = st.integers(0, 3)
    spawn = st.builds(Op, kind=st.just("spawn"), profile=st.sampled_from([lead, *profiles]))
    choices = [
        spawn,
        st.builds(Op, kind=st.sampled_from(AGENT_OPS), target=targets, deep=st.booleans()),
        st.builds(Op, kind=st.just("wait"), target=targets, value=st.sampled_from((0.0, 0.5, 3.0))),
        st.builds(Op, kind=st.just("settle"), value=st.sampled_from((2.0, 10.0))),
        st.builds(Op, kind=st.just("pause"), value=st.sampled_from((0.05, 0.3))),
        st.builds(Op, kind=st.sampled_from(("messages", "reopen"))),
        st.builds(Op, kind=st.just("approvals"), value=st.sampled_from((1.0, 0.0))),
    ]
    if crash:
        choices.append(st.builds(Op, kind=st.just("crash"), value=st.sampled_from((0.0, 0.3, 1.0))))
    rest = st.lists(st.one_of(choices), max_size=max_ops - 1)
    return st.builds(lambda first, more: [first, *more], spawn, rest)
