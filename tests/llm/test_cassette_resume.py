"""A cassette's call indices survive a crash: a replay killed mid-run carries on in a new process.

The indices come from the agent's stored chat, not from a counter of the
process, so a run resumed by another process keys its calls as a run that
never stopped: here a replay in a child process is SIGKILLed while its turn is
parked on a host tool's approval, and this process reopens the store, approves,
and the turn carries on from the cassette (its model call 2 and host tool call
1, not 0 and 0) to the recorded answer, without a ``CassetteMiss``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from persistence import Child
from support import wait_until

from llm.conftest import SETTLE_S
from llm.taped_team import DONE, TASK, profiles, runs, script
from retinue import CompletionStatus, Runtime
from retinue.testing import OpenAIStub

pytestmark = pytest.mark.usefixtures("litellm")

TESTS = Path(__file__).resolve().parents[1]

PARKED_CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[4])
from llm.taped_team import TASK, profiles
from retinue import Runtime

rt = Runtime.open(sys.argv[1], profiles=profiles(sys.argv[2], counter=sys.argv[3], approve=True))
rt.spawn("worker", TASK, name="deployer")
while not rt.approvals():
    time.sleep(0.02)
print("PARKED", flush=True)
time.sleep(3600)  # SIGKILLed here, parked on the deploy's approval
"""


def _record(stub: OpenAIStub, cassette: Path, counter: Path, store: Path) -> None:
    """Record the run in this process, the deploy approved as soon as it is asked."""
    stub.handler = script
    taped = profiles(cassette, counter=str(counter), approve=True, mode="record", api_base=stub.url)
    with Runtime.open(store, profiles=taped) as rt:
        info = rt.spawn("worker", TASK, name="deployer")
        wait_until(lambda: bool(rt.approvals()), timeout=SETTLE_S)
        rt.approve(rt.approvals()[0].id)
        assert rt.wait(info.id, timeout=SETTLE_S).output == DONE


def test_a_replay_killed_mid_run_carries_on_from_the_cassette_in_a_new_process(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    cassette, counter = tmp_path / "run.cassette", tmp_path / "deploys"
    _record(stub, cassette, counter, tmp_path / "live")
    assert runs(counter) == 1
    live = len(stub.requests)
    store = tmp_path / "replayed"
    with Child(PARKED_CHILD, store, cassette, counter, TESTS) as child:
        child.expect("PARKED", timeout=SETTLE_S)
        child.kill()
    with Runtime.open(store, profiles=profiles(cassette, counter=str(counter), approve=True)) as rt:
        (request,) = rt.approvals()
        rt.approve(request.id)
        (top,) = rt.agents()
        done = rt.wait(top.id, timeout=SETTLE_S)
    assert (done.status, done.error) == (CompletionStatus.COMPLETED, None)
    assert done.output == DONE
    assert runs(counter) == 1, "the deploy was answered from the cassette, not run"
    assert len(stub.requests) == live, "the replay never called the provider"
