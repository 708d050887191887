"""Host waits with a durable lease: the handover of a completion survives a lost answer.

``rt.wait(ref, lease=L)`` stores ``L -> completion`` in the same commit that
marks the completion received, so a host that lost the answer (a dropped
reply, its own crash, the runtime's crash) asks again with ``L`` and gets the
same completion; ``ack_lease`` forgets it, ``release_lease`` gives it back.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import PROMPT_S, OpenRuntime, wait_settled, wait_until

from retinue import (
    ArgumentTypeError,
    DedupKeyTooLong,
    InvalidArgument,
    NothingToWaitFor,
    Profile,
    Runtime,
    WaitTimeout,
)
from retinue.testing import Gate, echo


def test_a_wait_repeated_with_its_lease_returns_the_same_completion(
    open_runtime: OpenRuntime,
) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    a = rt.spawn("worker", "t1", name="a")
    wait_settled(rt, a.id, 1)
    rt.follow_up(a.id, "t2")
    wait_settled(rt, a.id, 2)
    first = rt.wait(a.id, timeout=5, lease="L1")
    assert (first.generation, first.output) == (1, "done:t1")
    # The answer was "lost": the same lease returns the same completion, at once,
    # by id or path, and takes nothing else.
    assert rt.wait(a.id, timeout=0, lease="L1") == first
    assert rt.wait("/root/a", timeout=0, lease="L1") == first
    assert rt.leases() == {"L1": first}
    second = rt.wait(a.id, timeout=5, lease="L2")
    assert second.generation == 2
    assert rt.leases() == {"L1": first, "L2": second}


def test_ack_forgets_a_lease_and_is_idempotent(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    a = rt.spawn("worker", "t", name="a")
    done = rt.wait(a.id, timeout=5, lease="L")
    assert rt.ack_lease("L") is True
    assert rt.ack_lease("L") is False
    assert rt.leases() == {}
    # The completion stays received: nothing hands it out again.
    with pytest.raises(NothingToWaitFor):
        rt.wait(a.id, timeout=5, lease="L")
    with pytest.raises(NothingToWaitFor):
        rt.wait(a.id, timeout=5)
    assert done.generation == 1


def test_release_gives_the_completion_to_the_next_wait(open_runtime: OpenRuntime) -> None:
    rt = open_runtime([Profile("worker", runner=echo)])
    a = rt.spawn("worker", "t", name="a")
    done = rt.wait(a.id, timeout=5, lease="L")
    assert rt.release_lease("L") is True
    assert rt.release_lease("L") is False
    assert rt.leases() == {}
    assert rt.wait(a.id, timeout=0) == done
    with pytest.raises(NothingToWaitFor):
        rt.wait(a.id, timeout=0)


def test_release_answers_a_host_wait_already_blocked(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])
    a = rt.spawn("worker", "t", name="a")
    gate.release("t")
    done = rt.wait(a.id, timeout=5, lease="L")
    rt.follow_up(a.id, "second")  # the agent is busy again: a new wait blocks
    gate.wait_started(2)

    async def scenario() -> None:
        blocked = asyncio.create_task(rt.wait_async(a.id, timeout=PROMPT_S))
        await asyncio.sleep(0.05)
        assert not blocked.done()
        assert await rt.release_lease_async("L") is True
        assert await blocked == done  # the released generation 1 comes first

    asyncio.run(scenario())
    gate.release()
    assert rt.wait(a.id, timeout=5).generation == 2


def test_leases_survive_a_reopen(open_runtime: OpenRuntime, store_path: Path) -> None:
    profiles = [Profile("worker", runner=echo)]
    rt = open_runtime(profiles)
    a = rt.spawn("worker", "t1", name="a")
    kept = rt.wait(a.id, timeout=5, lease="kept")
    rt.follow_up(a.id, "t2")
    given = rt.wait(a.id, timeout=5, lease="given")
    rt.shutdown()
    again = open_runtime(profiles)
    assert again.leases() == {"kept": kept, "given": given}
    assert again.wait(a.id, timeout=0, lease="kept") == kept
    # Both are received: only their leases reach them, until one is released.
    with pytest.raises(NothingToWaitFor):
        again.wait(a.id, timeout=0)
    assert again.release_lease("given") is True
    assert again.wait(a.id, timeout=0) == given
    assert again.ack_lease("kept") is True
    again.shutdown()
    third = open_runtime(profiles)
    assert third.leases() == {}


def test_a_cancelled_leased_wait_async_releases_its_lease(
    open_runtime: OpenRuntime, gate: Gate
) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])
    a = rt.spawn("worker", "t", name="a")

    async def scenario() -> None:
        waiting = asyncio.create_task(rt.wait_async(a.id, timeout=PROMPT_S, lease="L"))
        await asyncio.sleep(0.05)
        gate.release()
        # Cancel as the answer lands: whichever way the race goes, nothing is lost.
        await asyncio.to_thread(wait_settled, rt, a.id, 1)
        waiting.cancel()
        try:
            got = await waiting
        except asyncio.CancelledError:
            wait_until(lambda: not rt.leases(), what="the cancelled wait's lease released")
            done = await rt.wait_async(a.id, timeout=5)
            assert done.generation == 1
        else:  # the task had already returned: its lease holds the completion
            assert rt.leases() == {"L": got}

    asyncio.run(scenario())


def test_a_timed_out_leased_wait_stores_nothing(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime([Profile("worker", runner=gate)])
    a = rt.spawn("worker", "t", name="a")
    with pytest.raises(WaitTimeout):
        rt.wait(a.id, timeout=0.05, lease="L")
    assert rt.leases() == {}
    gate.release()
    assert rt.wait(a.id, timeout=5, lease="L").generation == 1


def test_bad_leases_are_refused_with_typed_errors(open_runtime: OpenRuntime, gate: Gate) -> None:
    rt = open_runtime([Profile("worker", runner=gate)], dedup_key_max_length=8)
    a = rt.spawn("worker", "t", name="a")
    b = rt.spawn("worker", "t", name="b")
    with pytest.raises(InvalidArgument, match="lease must not be empty"):
        rt.wait(a.id, timeout=0, lease="")
    with pytest.raises(ArgumentTypeError, match="lease must be a str"):
        rt.wait(a.id, timeout=0, lease=7)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="lone surrogate"):
        rt.wait(a.id, timeout=0, lease="\ud800")
    with pytest.raises(DedupKeyTooLong):
        rt.wait(a.id, timeout=0, lease="x" * 9)
    with pytest.raises(ArgumentTypeError):
        rt.ack_lease(None)  # type: ignore[arg-type]

    async def scenario() -> None:
        blocked = asyncio.create_task(rt.wait_async(a.id, timeout=PROMPT_S, lease="busy"))
        await asyncio.sleep(0.05)
        with pytest.raises(InvalidArgument, match="held by a host wait still blocked"):
            await rt.wait_async(b.id, timeout=0, lease="busy")
        gate.release()
        assert (await blocked).agent_id == a.id

    asyncio.run(scenario())
    with pytest.raises(InvalidArgument, match="holds a completion of /root/a, not of /root/b"):
        rt.wait(b.id, timeout=5, lease="busy")
    assert rt.wait(b.id, timeout=5, lease="other").agent_id == b.id


LEASE_CHILD = r"""
import os, signal, sys
from retinue import Profile, Runtime

def echo(turn):
    return "done:" + turn.task

rt = Runtime.open(sys.argv[1], profiles=[Profile("worker", runner=echo)])
a = rt.spawn("worker", "t", name="a")
done = rt.wait(a.id, timeout=10, lease="L")
sys.stdout.write(done.id + "\n")
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGKILL)  # nothing after the answer: no later commit
"""


def test_the_lease_is_in_the_commit_that_answers_the_wait(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    child = subprocess.run(
        [sys.executable, "-c", LEASE_CHILD, str(store)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    completion_id = child.stdout.strip()
    with Runtime.open(store, profiles=[Profile("worker", runner=echo)]) as rt:
        leases = rt.leases()
        assert [c.id for c in leases.values()] == [completion_id]
        agent_id = leases["L"].agent_id
        # Received in that same commit: only the lease reaches it.
        with pytest.raises(NothingToWaitFor):
            rt.wait(agent_id, timeout=0)
        assert rt.wait(agent_id, timeout=0, lease="L").id == completion_id
