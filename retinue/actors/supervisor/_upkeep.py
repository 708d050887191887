"""Retention upkeep in the supervisor: counts enforced as closes cross them, compaction on demand.

:class:`~retinue.actors.tree._compaction.Retention` tells when a close crossed a
retention count; :func:`~retinue.actors.tree._compaction.compact` chooses what goes
and the tree removes it, in the current transition. The approval requests of
the agents removed go with them. A compaction's deletes are the transition's
spread writes (:meth:`~retinue.actors.tree.Tree.spread_since`): the store
commits them in small transactions after the transition's own writes, so that
removing thousands of records at once does not grow the store file (see
:mod:`retinue.persistence.writer`).
"""

from __future__ import annotations

import time

from retinue.actors import Journaled
from retinue.actors.supervisor._approvals import Approvals
from retinue.actors.supervisor._world import World
from retinue.actors.tree import Retention, compact
from retinue.protocol.details import CompactionReport

__all__ = ["Upkeep"]


class Upkeep(Journaled):
    """Retention over one world, with its approvals. Supervisor thread only."""

    def __init__(self, world: World, approvals: Approvals) -> None:
        """Keep ``world``'s tree within its limits; prune ``approvals`` with it."""
        self._journal = world.journal
        self.world = world
        self.approvals = approvals
        self.retention = Retention(
            world.limits, world.journal
        )  # enforces retain_* counts as they are crossed

    def after_close(self) -> None:
        """Enforce the retention counts after a close (approvals of removed agents go too)."""
        now = time.time()
        tree = self.world.tree
        mark = len(tree.writes)
        if self.retention.enforce(tree, now) is not None:
            self.approvals.prune(now - self.world.limits.retain_age_s)
        tree.spread_since(mark)

    def compact(self) -> CompactionReport:
        """Remove what retention no longer keeps, as one transition."""
        now = time.time()
        tree = self.world.tree
        mark = len(tree.writes)
        report = compact(tree, self.world.limits, now)
        self.approvals.prune(now - self.world.limits.retain_age_s)
        tree.spread_since(mark)
        return report
