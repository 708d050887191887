"""The host's rules: one host thread calling the runtime, each call judged against the model.

By theme: :mod:`~.spawning` (spawns, keyed spawns retried), :mod:`~.lifecycle`
(follow-up, resume, interrupt, close, close-tree, interrupt-tree) and
:mod:`~.delivery` (the host's messages and waits); :mod:`~.faults` injects
faults into the commands those calls (and turns' settles) send. Hypothesis finds the rules
by name on the machine, so the split changes neither their set nor their order.
"""

from __future__ import annotations

from stress.statemachine.rules.delivery import DeliveryRules
from stress.statemachine.rules.faults import FaultRules
from stress.statemachine.rules.lifecycle import TurnRules
from stress.statemachine.rules.spawning import SPAWN_KEYS, SpawnRules

__all__ = ["SPAWN_KEYS", "DeliveryRules", "FaultRules", "HostRules", "SpawnRules", "TurnRules"]


class HostRules(FaultRules):
    """One host thread calling the runtime; each call is judged against the model."""
