"""A turn built outside a runtime, for tests of the parts that hold one.

``Turn`` has no public constructor (only the runtime makes one); a test of a
part that holds a turn (a watch, the executor's claim) builds one here the
runtime's way: a :class:`~retinue.actors.turns.TurnControl` with no engine, and
the :class:`~retinue.Turn` composed with it (``Turn._create(control)``).
"""

from __future__ import annotations

from retinue import AgentInfo, AgentState, Limits, Profile, Turn
from retinue.actors.turns import TurnControl, control_of
from retinue.testing import echo

__all__ = ["control_of", "loose_turn"]


def loose_turn(
    task: str = "t", *, agent_id: str = "a", reason: str = "spawn", limits: Limits | None = None
) -> Turn:
    """Return the turn of a running agent ``agent_id`` (at ``/root/<id>``) that no runtime
    holds: its operations have no engine to send to, its cancellation and watch work."""
    info = AgentInfo(
        id=agent_id,
        name=agent_id,
        path=f"/root/{agent_id}",
        profile="p",
        parent_path="/root",
        depth=1,
        state=AgentState.RUNNING,
        generation=1,
        task=task,
    )
    control = TurnControl(
        engine=None,  # type: ignore[arg-type]  # no runtime: nothing is sent
        agent=info,
        task=task,
        messages=[],
        reason=reason,
        limits=limits or Limits(),
        profile=Profile("p", runner=echo),
    )
    return Turn._create(control)
