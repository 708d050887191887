"""A completion a blocked host wait takes as its turn settles is stored as a later wait's.

A host wait blocked on an agent when its turn settles takes the completion
in the settle's own transition (``HostWaits.take_now``): the receipt mark
rides on the settle's record write and a completion routed to the host is
stored delivered at once. What the store holds after the commit must be
exactly what it holds when the wait comes after the settle (the completion
queued, then received by the wait's command): same completion record, no
key in the ``undelivered`` index, same receipt mark, same lease.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support import wait_settled

from retinue import Profile, Runtime
from retinue.protocol.messages import Completion
from retinue.protocol.records import AgentRecord
from retinue.testing import echo

from . import PROMPT_S, completions_of, decode_db, read_db

PROFILES = [Profile("w", runner=echo)]


def stored(folder: Path, agent_id: str) -> dict[str, Any]:
    """Return what the store holds of ``agent_id``'s completion and receipt, without ids
    and times (which differ from run to run)."""
    (done,) = completions_of(folder, agent_id)
    agent = decode_db(folder, "agents", AgentRecord)[agent_id.encode()]
    leases = decode_db(folder, "leases", Completion)
    assert agent.ended is not None
    return {
        "completion": (
            done.recipient_id,
            done.delivered,
            done.delivered_generation,
            done.completion.generation,
            done.completion.status,
            done.completion.output,
            done.completion.error,
        ),
        "undelivered": sorted(read_db(folder, "undelivered")),
        "agent": (
            agent.state,
            agent.generation,
            agent.host_received,
            agent.host_returned,
            agent.output,
            agent.ended.generation,
            agent.ended.state,
        ),
        "leases": {k: (v.agent_id == agent_id, v.generation, v.output) for k, v in leases.items()},
    }


def test_a_wait_blocked_as_the_turn_settles_stores_what_a_later_wait_does(
    tmp_path: Path,
) -> None:
    blocked, later = tmp_path / "blocked", tmp_path / "later"
    with Runtime.open(blocked, profiles=PROFILES) as rt:
        # run: the host's wait is registered in the spawn's command, so it is blocked
        # when the turn settles.
        got = rt.run("w", "job", name="a", lease="L1", timeout=PROMPT_S)
        a = got.agent_id
    with Runtime.open(later, profiles=PROFILES) as rt:
        b = rt.spawn("w", "job", name="a").id
        wait_settled(rt, b)  # its completion is queued for the host first
        late = rt.wait(b, lease="L1", timeout=PROMPT_S)
    assert (got.generation, got.output) == (late.generation, late.output) == (1, "done:job")
    first, second = stored(blocked, a), stored(later, b)
    assert first == second
    assert first["completion"][:3] == (None, True, 0)  # delivered to the host
    assert first["undelivered"] == []
    assert first["agent"][2:4] == (1, ())  # received by the host
    assert first["leases"] == {b"L1": (True, 1, "done:job")}


def test_a_wait_blocked_without_a_lease_stores_what_a_later_wait_does(tmp_path: Path) -> None:
    blocked, later = tmp_path / "blocked", tmp_path / "later"
    with Runtime.open(blocked, profiles=PROFILES) as rt:
        a = rt.run("w", "job", name="a", timeout=PROMPT_S).agent_id
    with Runtime.open(later, profiles=PROFILES) as rt:
        b = rt.spawn("w", "job", name="a").id
        wait_settled(rt, b)
        rt.wait(b, timeout=PROMPT_S)
    assert stored(blocked, a) == stored(later, b)
    assert stored(blocked, a)["leases"] == {}


def test_a_completion_taken_as_it_settles_is_handed_again_under_its_lease_after_a_reopen(
    tmp_path: Path,
) -> None:
    """The answer of the wait is lost (the host crashed after the commit): the same
    lease gets the same completion from the reopened store, once acknowledged gone."""
    folder = tmp_path / "store"
    with Runtime.open(folder, profiles=PROFILES) as rt:
        got = rt.run("w", "job", name="a", lease="L1", timeout=PROMPT_S)
    with Runtime.open(folder, profiles=PROFILES) as rt:
        again = rt.wait(got.agent_id, lease="L1", timeout=PROMPT_S)
        assert again == got
        assert rt.ack_lease("L1")
        assert not rt.ack_lease("L1")
