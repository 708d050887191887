"""The restart machine's checks of an open without the profiles, and of the open after it.

An open that lacks an agent's profile (``retinue compact``,
``Runtime.open(store, profiles=[])``) decides nothing (:func:`check_bare`):
a turn the store held queued or running (lost) becomes a pending restart,
its loss counted (``lost`` grows by one for a turn lost while running), its
generation and attempt the next ones, with no completion; every other agent
is exactly as stored. The first open with the profiles decides
(:func:`check_decided`): a pending restart whose task was lost ``max_lost``
times in a row settles ``CrashLoop`` at once, one that makes more than
``max_restarts`` restarts within ``within_s`` ``RestartLimitExceeded``, as
if that runtime had made it; any other is carried on.
"""

from __future__ import annotations

from retinue.protocol.messages import AgentInfo, AgentState
from retinue.protocol.records import AgentRecord, CompletionRecord
from stress.statemachine.restart_plans import policy
from stress.statemachine.trace import STATS, fail

__all__ = ["check_bare", "check_decided", "give_up"]

GIVE_UPS = ("CrashLoop", "RestartLimitExceeded")


def check_bare(
    before: dict[str, AgentRecord],
    after: dict[str, AgentInfo],
    left: dict[str, AgentRecord],
    done_before: dict[tuple[str, int], CompletionRecord],
    done_after: dict[tuple[str, int], CompletionRecord],
) -> None:
    """A runtime without the profiles ended no supervised work and decided nothing.

    ``before``: the store's agents before it opened; ``after``: what it listed;
    ``left``: the store's agents after it closed; ``done_*``: the stored
    completions before and after.
    """
    if set(done_after) != set(done_before):
        fail(f"an open without profiles made completions {set(done_after) - set(done_before)}")
    for agent_id, stored in before.items():
        if stored.state is AgentState.CLOSED:
            continue  # not listed
        now, kept = after.get(agent_id), left.get(agent_id)
        if now is None or kept is None:
            fail(f"{agent_id} ({stored.state}) is gone after an open without profiles")
        if stored.state.has_turn:
            lost = stored.lost + (1 if stored.state is AgentState.RUNNING else 0)
            want = (AgentState.RESTARTING, stored.generation + 1, stored.attempt + 1, lost)
            ok = (kept.state, kept.generation, kept.attempt, kept.lost) == want
            ok = ok and now.state is AgentState.RESTARTING and kept.restart_due_at is not None
            STATS[f"restart:bare:lost:{now.state}"] += 1
        else:
            ok = (now.state, now.generation) == (stored.state, stored.generation)
            ok = ok and (kept.state, kept.generation) == (stored.state, stored.generation)
            STATS[f"restart:bare:kept:{now.state}"] += 1
        if not ok:
            fail(f"an open without profiles turned {agent_id} from {stored} into {kept}")


def give_up(record: AgentRecord) -> str | None:
    """What the profiles' policy gives a pending restart up as (None: it runs)."""
    rule = policy(record.profile)
    if record.lost >= rule.max_lost:
        return "CrashLoop"
    if record.restarts:
        made = record.restarts[-1]
        before = [t for t in record.restarts[:-1] if t > made - rule.within_s]
        if len(before) + 1 > rule.max_restarts:
            return "RestartLimitExceeded"
    return None


def check_decided(
    left: dict[str, AgentRecord], now: dict[str, AgentInfo], ran: set[tuple[str, int]]
) -> None:
    """The open with the profiles decided every pending restart the bare open left.

    ``left``: the store's agents after the bare open; ``now``: each agent as
    the runtime with the profiles has it just after its open; ``ran``: the
    turns (agent id, generation) that runtime's runners started so far (a
    pending attempt that ran may have failed and given up on its own).
    """
    for agent_id, record in left.items():
        if record.state is not AgentState.RESTARTING:
            continue
        info = now[agent_id]
        verdict = give_up(record)
        settled = (
            (agent_id, record.generation) not in ran
            and info.generation == record.generation
            and info.state is AgentState.FAILED
            and info.error_type in GIVE_UPS
        )
        if verdict is not None:
            STATS[f"restart:decided:{verdict}"] += 1
            if not settled or info.error_type != verdict:
                fail(f"{agent_id}: the open with profiles did not settle {record} as {verdict}")
        elif settled:
            fail(f"{agent_id}: the open with profiles gave {record} up: {info}")
