"""The supervisor: the one actor that owns the tree and serves every command as one transaction.

``Supervisor`` composes its parts over one ``World`` (spawning, the turn-slot
scheduler, waits, the router of completions, the lifecycle of turns, the
input rule and deadlines, supervision with restarts, approvals and call
admission, model turns' state, upkeep) and serves each command in one
``match``; ``SupervisorActor`` is its pykka shell. A failed command is rolled
back (``retinue.actors.tree._journal``) and rescued (``_rescue``): nothing half
applied, no agent stranded.

The rest of the package may use the names in ``__all__``; the modules are private.
"""

from __future__ import annotations

from retinue.actors.supervisor._actor import SupervisorActor
from retinue.actors.supervisor._approvals import pending_requests
from retinue.actors.supervisor._supervisor import Supervisor
from retinue.actors.supervisor._timings import Timings, TimingSink
from retinue.actors.supervisor._transition import resolve_future
from retinue.actors.supervisor._world import (
    agent_records,
    backlog_of,
    check_tail,
    detail_from,
    detail_of,
    find_agent,
    info_of,
    require_str,
)

__all__ = [
    "Supervisor",
    "SupervisorActor",
    "TimingSink",
    "Timings",
    "agent_records",
    "backlog_of",
    "check_tail",
    "detail_from",
    "detail_of",
    "find_agent",
    "info_of",
    "pending_requests",
    "require_str",
    "resolve_future",
]
