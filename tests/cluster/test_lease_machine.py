"""A hypothesis state machine over one shard's leased waits, as two faces drive them (no Ray).

Two faces wait on a real :class:`~retinue.cluster.shard.ShardCore` (served on
an event loop of its own, as the actor's) under fresh leases, in any order:
a wait is sent before or after its face cancels it (the release reaches the
shard before, during or after the wait's take), its answer is delivered or
lost (the face then repeats it under the same lease, or cancels it), an ack
is delivered, lost (the face's outbox sends it again later) or duplicated, a
wait whose answer was lost gives up (``retry_s`` passed, or its repeat was
refused) and releases its lease, a release is lost the same way, a face is
closed while its ack is owed (it releases the lease and reads the answer), a
gated turn settles at any point, and the shard restarts (its process dies: calls in
flight lose their answers, leases are restored, tombstones are not).
``lease_timeout_s`` is far away, so nothing here may rely on it.

Whatever the interleaving: no completion is returned by any face twice, and
once the faces' outboxes are flushed, their cancelled (or given up) waits
released, every turn settled and the agents drained, every completion was
returned exactly once and the shard holds no lease.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import clusterlib
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from retinue import AgentInfo, Completion, NothingToWaitFor, Profile
from retinue.actors.commands import HOST, AckLease, ReleaseLease, Spawn, Wait
from retinue.cluster import wire as w
from retinue.cluster.shard import ShardCore
from retinue.cluster.specs import ShardConfig, spec_of
from retinue.errors import RetinueError

PROFILES = (
    spec_of(Profile("worker", runner=clusterlib.echo)),
    spec_of(Profile("gated", runner=clusterlib.gated)),
)
GATES = "RETINUE_CLUSTER_GATES"
ANSWER_S = 30.0  # bound of one shard call here (a wait that blocks is given its own)
_names = itertools.count()


@dataclass
class Lease:
    """One face wait under one lease, as the face sees it."""

    face: int
    agent: str  # shard-local id
    lease: str
    state: str = "new"  # new, sent, lost, returned, acked, cancelled
    epoch: int = 0  # the shard process it was cancelled under
    released: bool = False  # its release reached the shard
    completion: str | None = None  # the id of what it returned
    call: concurrent.futures.Future[bytes] | None = field(default=None, repr=False)


class ShardLeases(RuleBasedStateMachine):
    """Leased waits of two faces on one shard, with lost answers, acks and restarts."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="lease-machine-"))
        self.gates = self.folder / "gates"
        self.gates.mkdir()
        self.env = os.environ.get(GATES)
        os.environ[GATES] = str(self.gates)  # the gated runner runs in this process
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.config = ShardConfig(profiles=PROFILES, lease_timeout_s=3600.0)
        self.epoch = 0  # shard restarts so far
        self.core = self._open()
        self.agents: dict[str, str] = {}  # shard-local id -> its gate (task)
        self.returned: dict[str, int] = {}  # completion id -> the face that returned it
        self.outbox: list[tuple[w.Run, Lease]] = []  # acks and releases owed (lost)
        self.leases: list[Lease] = []

    # -- plumbing ------------------------------------------------------------------------

    def _open(self) -> ShardCore:
        return ShardCore.open(1, self.folder / "shard-1", self.config)

    def _send(self, call: w.Call) -> concurrent.futures.Future[bytes]:
        return asyncio.run_coroutine_threadsafe(self.core.handle(w.encode_call(call)), self.loop)

    def _ask(self, call: w.Call, kind: type[Any]) -> Any:
        return w.decode_reply(self._send(call).result(ANSWER_S), kind)

    def _eligible(self, *states: str, sent: bool | None = None) -> list[Lease]:
        """The face waits in one of ``states`` (with a call in flight, or not, if ``sent``)."""
        return [
            held
            for held in self.leases
            if held.state in states and (sent is None or (held.call is not None) == sent)
        ]

    def _can_send(self) -> list[Lease]:
        return [
            held
            for held in self._eligible("new", "lost", "cancelled", sent=False)
            if held.state != "cancelled" or held.epoch == self.epoch
        ]

    def _answered(self) -> list[Lease]:
        """The waits in flight that end without anything else happening: their turn has
        settled (or the agent has none running), or their release reached the shard."""
        return [
            held
            for held in self.leases
            if held.call is not None
            and (held.released or (self.gates / self.agents[held.agent]).exists())
        ]

    def _return(self, held: Lease, completion: Completion) -> None:
        """The face has the completion: it returns it and acknowledges the lease."""
        assert completion.id not in self.returned, (
            f"{completion.id} returned by face {self.returned[completion.id]}, "
            f"now again by face {held.face}"
        )
        self.returned[completion.id] = held.face
        held.state = "returned"
        held.completion = completion.id

    def teardown(self) -> None:
        try:
            self._drain()
        finally:
            self.core.close()
            asyncio.run_coroutine_threadsafe(_cancel_the_rest(), self.loop).result(ANSWER_S)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()
            if self.env is None:
                os.environ.pop(GATES, None)
            else:
                os.environ[GATES] = self.env
            shutil.rmtree(self.folder, ignore_errors=True)

    # -- rules ---------------------------------------------------------------------------

    @initialize()
    def spawn_first(self) -> None:
        self.spawn(gated=False)

    @precondition(lambda self: len(self.agents) < 3)
    @rule(gated=st.booleans())
    def spawn(self, gated: bool) -> None:
        """A new agent: a worker settles at once, a gated one when its gate opens."""
        task = f"t{next(_names)}"
        spawn = Spawn(HOST, "gated" if gated else "worker", task, task, "/root", f"~{task}")
        info = self._ask(w.run(spawn, rid=task), AgentInfo)
        self.agents[info.id.removeprefix("s1-")] = task
        if not gated:
            (self.gates / task).touch()  # a worker has no gate: count it as open

    @precondition(lambda self: self.agents and len(self.leases) < 8)
    @rule(face=st.integers(0, 1), pick=st.integers(0, 2))
    def new_wait(self, face: int, pick: int) -> None:
        """A face starts a wait: its lease exists, its call is not sent yet."""
        agent = sorted(self.agents)[pick % len(self.agents)]
        self.leases.append(Lease(face, agent, f"L{next(_names)}"))

    @precondition(lambda self: self.leases)
    @rule(pick=st.integers(0, 7))
    def send_wait(self, pick: int) -> None:
        """The wait's call reaches the shard (after its release, if the face cancelled:
        in the same process, as calls in flight die with it)."""
        held = self.leases[pick % len(self.leases)]
        if held not in self._can_send():
            return
        call = w.run(Wait(HOST, held.agent, lease=held.lease), timeout=ANSWER_S)
        held.call = self._send(call)
        if held.state != "cancelled":
            held.state = "sent"

    @precondition(lambda self: self.leases)
    @rule(pick=st.integers(0, 7), lost=st.booleans())
    def answer(self, pick: int, lost: bool) -> None:
        """A wait's answer comes back, delivered or lost on the way."""
        held = self.leases[pick % len(self.leases)]
        if held not in self._answered():
            return
        self._receive(held, lost)

    def _receive(self, held: Lease, lost: bool) -> None:
        """``held``'s answer (ready) comes back, delivered or lost on the way."""
        assert held.call is not None
        raw, held.call = held.call.result(ANSWER_S), None
        if held.state != "sent":
            return  # cancelled: nobody reads it
        if lost:
            held.state = "lost"  # the face repeats it under the same lease, or cancels
            return
        try:
            completion = w.decode_reply(raw, Completion)
        except RetinueError:
            held.state = "lost"  # NothingToWaitFor, a closing runtime: the face may repeat
            return
        self._return(held, completion)

    @precondition(lambda self: self.leases)
    @rule(pick=st.integers(0, 7), how=st.sampled_from(["delivered", "lost", "twice"]))
    def ack(self, pick: int, how: str) -> None:
        """The face acknowledges what it returned: the ack arrives, is lost (the outbox
        owes it), or arrives twice."""
        held = self.leases[pick % len(self.leases)]
        if held.state != "returned":
            return
        ack = w.run(AckLease(held.lease))
        held.state = "acked"
        if how == "lost":
            self.outbox.append((ack, held))
            return
        for _ in range(2 if how == "twice" else 1):
            self._ask(ack, bool)

    def _acking(self) -> list[Lease]:
        """The waits that have their completion, or whose answer (maybe one) is ready."""
        ready = [held for held in self._answered() if held.state == "sent"]
        return self._eligible("returned") + ready

    @precondition(lambda self: self._acking())
    @rule(pick=st.integers(0, 7), landed=st.booleans())
    def close_during_ack(self, pick: int, landed: bool) -> None:
        """The face is closed while it acknowledges what it has (its answer, if not read
        yet, comes back first): the ack's sends failed (``landed``: one ran, its answer
        lost) and the closed outbox will not send it again. The face sends the release and
        reads its answer: it took the lease back -> the wait raises RuntimeClosed (nothing
        returned); it found the lease acknowledged -> the wait returns the completion."""
        acking = self._acking()
        held = acking[pick % len(acking)]
        if held.state == "sent":
            self._receive(held, lost=False)
        if held.state != "returned":
            return  # no completion: nothing to acknowledge
        if landed:
            self._ask(w.run(AckLease(held.lease)), bool)
        took = self._ask(w.run(ReleaseLease(held.lease)), bool)
        assert took is not landed, (held, landed, took)  # what the face decides by
        held.state = "acked"  # the wait is over either way
        if took:
            assert held.completion is not None
            del self.returned[held.completion]  # not returned: handed out again, once

    @precondition(lambda self: self.leases)
    @rule(pick=st.integers(0, 7), lost=st.booleans())
    def cancel(self, pick: int, lost: bool) -> None:
        """The face's caller cancels the wait: the face sends the release (lost: owed)."""
        held = self.leases[pick % len(self.leases)]
        if held.state not in ("new", "sent", "lost"):
            return
        self._release(held, lost)

    @precondition(lambda self: self.leases)
    @rule(pick=st.integers(0, 7), lost=st.booleans())
    def give_up(self, pick: int, lost: bool) -> None:
        """A face wait whose call ran unseen (its answer lost) gives up: ``retry_s`` passed,
        or its repeat under the lease was refused (a closing shard). It raises to its
        caller and releases the lease as a cancel does (lost: the outbox owes the release);
        the caller's next wait is a new lease, which must find what the call took."""
        held = self.leases[pick % len(self.leases)]
        if held.state != "lost" or held.call is not None:
            return
        self._release(held, lost)

    def _release(self, held: Lease, lost: bool) -> None:
        """The face ends the wait and sends its release (lost: the outbox owes it)."""
        held.state = "cancelled"
        held.epoch = self.epoch
        held.released = False
        release = w.run(ReleaseLease(held.lease))
        if lost:
            self.outbox.append((release, held))
        else:
            self._ask(release, bool)
            held.released = True

    @precondition(lambda self: self.leases)
    @rule()
    def flush(self) -> None:
        """The faces' outboxes deliver what they owe (late, maybe after a restart)."""
        owed, self.outbox = self.outbox, []
        for call, held in owed:
            self._ask(call, bool)
            if held.state == "cancelled":
                held.released = held.epoch == self.epoch  # a restart ended its wait anyway

    def _closed_gates(self) -> list[str]:
        return sorted(t for t in self.agents.values() if not (self.gates / t).exists())

    @precondition(lambda self: self._closed_gates())
    @rule(pick=st.integers(0, 2))
    def settle(self, pick: int) -> None:
        """A gated turn settles."""
        closed = self._closed_gates()
        (self.gates / closed[pick % len(closed)]).touch()

    @precondition(lambda self: self.epoch < 2 and self.leases)
    @rule()
    def restart(self) -> None:
        """The shard's process dies and comes back: every call in flight loses its answer."""
        self.core.close()
        for held in self.leases:
            if held.call is not None:
                held.call = None
                if held.state == "sent":
                    held.state = "lost"
        self.core = self._open()
        self.epoch += 1

    # -- the end -------------------------------------------------------------------------

    def _drain(self) -> None:
        """Settle everything as the faces would, then every completion was returned once."""
        for task in self.agents.values():
            (self.gates / task).touch()
        for held in self.leases:
            if held.call is not None:
                with contextlib.suppress(concurrent.futures.CancelledError):
                    held.call.result(ANSWER_S)
                if held.state == "sent":
                    held.state = "lost"  # not read: the face repeats it below
                held.call = None
        if self.outbox:
            self.flush()
        for held in self.leases:
            if held.state == "lost":  # the face repeats the wait, under the same lease
                raw = self._send(
                    w.run(Wait(HOST, held.agent, lease=held.lease), timeout=ANSWER_S)
                ).result(ANSWER_S)
                try:
                    self._return(held, w.decode_reply(raw, Completion))
                except NothingToWaitFor:
                    held.state = "acked"  # it had taken nothing
            if held.state == "returned":
                self._ask(w.run(AckLease(held.lease)), bool)
        for agent in self.agents:
            while True:
                held = Lease(0, agent, f"L{next(_names)}", state="sent")
                try:
                    raw = self._ask(
                        w.run(Wait(HOST, agent, lease=held.lease), timeout=ANSWER_S), Completion
                    )
                except NothingToWaitFor:
                    break
                self._return(held, raw)
                self._ask(w.run(AckLease(held.lease)), bool)
        expected = {f"s1-{agent}:1" for agent in self.agents}
        assert set(self.returned) == expected
        assert self.core.rt.leases() == {}


async def _cancel_the_rest() -> None:
    """Cancel every other task of the running loop and wait for their ends."""
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


TestShardLeases = ShardLeases.TestCase
TestShardLeases.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
