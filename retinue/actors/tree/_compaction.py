"""Compaction: closed agents, read messages and old completions do not grow the store forever.

Retention is set by three limits: ``retain_closed_agents`` and
``retain_read_messages`` (how many to keep) and ``retain_age_s`` (anything
older goes, whatever the count). What is removed:

- read messages beyond the count or older than the age (their dedup keys go
  with them: a key deduplicates for as long as its message is retained);
- closed agents beyond the count or older than the age, leaves first: a closed
  agent is removed only once no retained record names it as parent and none of
  its completions is still waiting for a recipient; its messages (and their
  dedup keys) and completions go with it;
- delivered completions older than the age, except each agent's latest.

Nothing unread, undelivered or live is ever removed, nor anything a running
turn received (it is replayed to the next turn if a crash kills this one). The
supervisor runs this on its own thread, as one transition, every
``compact_interval_s``. This module only chooses what goes: the
:class:`~retinue.actors.tree.Tree` removes it, keeping its indexes in step.

The counts are also enforced as they are crossed, not only on the timer:
:class:`Retention` is consulted after every close, and once the closed agents
(or read messages) exceed their count by a slack of a tenth of it (at least
:data:`MIN_SLACK`), it compacts in the same transition. Each compaction thus
removes at least a slack's worth of records, so its cost is amortised over
that many closes, and what is held never exceeds the count plus the slack
(plus whatever cannot be removed yet).
"""

from __future__ import annotations

from retinue.actors.tree._journal import Journal, Journaled
from retinue.actors.tree._tree import Tree
from retinue.protocol.details import CompactionReport
from retinue.protocol.limits import Limits

__all__ = ["MIN_SLACK", "CompactionReport", "Retention", "compact", "retention_slack"]

MIN_SLACK = 32
"""Fewest records past a retention count before a compaction is triggered."""


def retention_slack(keep: int) -> int:
    """Return how far past the retention count ``keep`` a compaction is triggered."""
    return max(MIN_SLACK, keep // 10)


class Retention(Journaled):
    """Enforces the retention counts when they are crossed, cheaply and amortised.

    The check is O(1); a compaction runs only once the closed agents (or read
    messages) exceed the larger of their count and what the last compaction
    had to keep, by :func:`retention_slack`. Supervisor thread only.
    """

    _config = frozenset({"limits"})

    def __init__(self, limits: Limits, journal: Journal | None = None) -> None:
        """Track retention for ``limits`` (its counters journaled by ``journal``)."""
        self._journal = journal if journal is not None else Journal()
        self.limits = limits
        self._kept_agents = 0  # closed agents the last compaction could not remove
        self._kept_messages = 0
        self.compactions = 0

    def enforce(self, tree: Tree, now: float) -> CompactionReport | None:
        """Compact ``tree`` if a count is exceeded by its slack; return the report or None.

        The deletes land in ``tree.writes`` (the current transition).
        """
        limits = self.limits
        closed = len(tree.agents) - tree.live_count
        keep_agents = limits.retain_closed_agents
        keep_messages = limits.retain_read_messages
        agents_due = closed > max(keep_agents, self._kept_agents) + retention_slack(keep_agents)
        messages_due = len(tree.read_log) > max(
            keep_messages, self._kept_messages
        ) + retention_slack(keep_messages)
        if not (agents_due or messages_due):
            return None
        report = compact(tree, limits, now)
        self._kept_agents = len(tree.agents) - tree.live_count
        self._kept_messages = len(tree.read_log)
        self.compactions += 1
        return report


def compact(tree: Tree, limits: Limits, now: float) -> CompactionReport:
    """Remove what retention no longer keeps; the deletes land in ``tree.writes``."""
    horizon = now - limits.retain_age_s
    messages = _compact_read_messages(tree, limits.retain_read_messages, horizon)
    agents, completions = _compact_closed_agents(
        tree, limits.retain_closed_agents, horizon, limits.fork_generations
    )
    completions += _compact_completions(tree, horizon)
    return CompactionReport(messages=messages, agents=agents, completions=completions)


def _compact_read_messages(tree: Tree, keep: int, horizon: float) -> int:
    """Remove read messages oldest first, stopping at one a running turn still holds.

    A running turn's inputs are replayed to the next turn if a crash kills it,
    so they stay until that turn settles (later compactions take them).
    """
    removed = 0
    while (entry := tree.oldest_read()) is not None and (
        len(tree.read_log) > keep or entry.read_at < horizon
    ):
        if tree.held_by_running_turn(entry.recipient_id, entry.generation):
            break
        tree.remove_oldest_read()
        removed += 1
    return removed


def _compact_closed_agents(
    tree: Tree, keep: int, horizon: float, generations: int
) -> tuple[int, int]:
    known = tree.closed  # when each closed agent closed
    budget = len(known) - keep
    if budget <= 0 and (not known or min(known.values()) >= horizon):
        return 0, 0
    closed = sorted((closed_at, agent_id) for agent_id, closed_at in known.items())
    stored = tree.stored_children
    gone: dict[str, int] = {}  # the children chosen so far, by parent
    chosen: list[str] = []
    remaining = closed
    progress = True
    while progress:  # leaves first: a parent becomes removable once its children went
        progress = False
        later: list[tuple[float, str]] = []
        for closed_at, agent_id in remaining:
            wanted = len(chosen) < budget or closed_at < horizon
            if (
                not wanted
                or stored.get(agent_id, 0) > gone.get(agent_id, 0)
                or tree.undelivered.get(agent_id, 0)
            ):
                later.append((closed_at, agent_id))
                continue
            chosen.append(agent_id)
            parent_id = tree.agents[agent_id].parent_id
            if parent_id is not None:
                gone[parent_id] = gone.get(parent_id, 0) + 1
            progress = True
        remaining = later
    return len(chosen), tree.remove_agents(chosen, generations=generations)


STORED_READS_PER_RUN = 1000
"""How many agents' stored completions one compaction reads at most (see
:func:`_compact_completions`): the rest wait for the next runs."""


def _compact_completions(tree: Tree, horizon: float) -> int:
    """Remove each agent's delivered completions older than ``horizon`` but its latest.

    Memory holds every completion of the agents this run touched; an agent
    whose completions stay in the store is read only if it may keep old
    generations there (it is past its first generation), at most
    :data:`STORED_READS_PER_RUN` a run, and once a run unless a generation it
    keeps was too young to go.
    """
    partial = tree.shares.partial
    held = [a for a, done in tree.completions.items() if len(done) > 1 and a not in partial]
    removed = sum(_compact_agent(tree, agent_id, horizon) for agent_id in held)
    if tree.stored is None:
        return removed
    completions, swept = tree.completions, tree.shares.swept
    in_memory = dict.values(tree.agents)  # and the settled ones, a bounded number a run
    stored = [
        record.id
        for record in (*in_memory, *tree.agents.unswept(STORED_READS_PER_RUN))
        if record.generation >= 2
        and (record.id not in completions or record.id in partial)
        and record.id not in swept
    ]
    for agent_id in stored[:STORED_READS_PER_RUN]:
        removed += _compact_agent(tree, agent_id, horizon)
        if len(tree.known(agent_id)) < 2:
            swept.add(agent_id)
    return removed


def _compact_agent(tree: Tree, agent_id: str, horizon: float) -> int:
    """Remove ``agent_id``'s delivered completions older than ``horizon`` but its latest."""
    done = tree.known(agent_id)
    if len(done) < 2:
        return 0
    latest = max(done)
    removed = 0
    for generation in [g for g in done if g != latest]:
        record = done[generation]
        if (
            record.delivered
            and record.completion.created_at < horizon
            and not tree.held_by_running_turn(record.recipient_id, record.delivered_generation)
        ):
            tree.remove_completion(agent_id, generation)
            removed += 1
    return removed
