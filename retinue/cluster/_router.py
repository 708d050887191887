"""The host calls of a cluster, each written once as a generator of transport steps.

:class:`Router` holds what a face knows: the shard count, the directory
entries it has seen (entries never change once recorded, so a cached one is
never stale), the completions it has returned and the leases it could not
acknowledge yet. Each host call is one method returning an
:data:`~retinue.cluster._transport.Op`, run by the transport from a thread
or an event loop; it sends the runtime's own command for that call
(:mod:`retinue.actors.commands`, wrapped by :func:`~retinue.cluster.wire.run`)
and decodes the answer as that command's answer type.

- A ref that is a cluster id (``s<k>-...``) goes to shard ``k``; a path goes
  to the shard the directory records for its top-level name. A name the
  directory does not know (a spawn whose directory record was lost with its
  driver, or an id without its shard) is looked for on every shard, and
  recorded where it is found.
- Mutating calls carry a fresh request id; a spawn without an idempotency key
  gets one made from it, a send without a dedup key too (taken off the
  returned message again), so the runtime's own commit deduplicates a retry.
- A wait is leased and acknowledged as it returns (the ack is sent before
  the return; on an event loop it is not awaited, so no cancel lands between
  the answer and the return); the face never returns one completion twice. A
  cancelled wait (in its call or in its back-off after a failed one) releases
  its lease and awaits the shard's answer, up to ``call_timeout_s``, before the
  cancel goes on. An ack or a release the shard did not answer for good is
  sent again by the transport's outbox until it is, not left to
  ``lease_timeout_s`` (which would hand the completion out again, to another
  face too). A wait that gives up (``ShardUnavailable`` once ``retry_s`` has
  passed, or the shard's refusal) after a call under its lease failed unseen
  releases the lease as a cancel does, and awaits the answer the same way, so
  the caller's retry gets what that call took.
- An approval request's id carries its shard too: approve and deny go
  straight there (recorded under their request ids, so a retry answers
  once); ``approvals()`` merges every shard's pending requests.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from retinue.actors.calls import resolve_timeout
from retinue.actors.commands import (
    HOST,
    AckLease,
    Agents,
    Approvals,
    Approve,
    Close,
    CloseTree,
    Command,
    Deny,
    FollowUp,
    Get,
    HostMessages,
    Inspect,
    Interrupt,
    InterruptTree,
    ReleaseLease,
    Resume,
    Send,
    Spawn,
    Wait,
    answer_type,
)
from retinue.cluster import wire as w
from retinue.cluster._transport import (
    BACKOFF_S,
    Check,
    Dir,
    Flush,
    Many,
    One,
    Op,
    Pause,
    Race,
    Tell,
)
from retinue.cluster.ids import split_id
from retinue.errors import (
    ArgumentTypeError,
    DedupKeyTooLong,
    RetinueError,
    ShardUnavailable,
    UnknownAgent,
    UnknownApproval,
)
from retinue.protocol import paths
from retinue.protocol.checks import check_key, preview
from retinue.protocol.details import AgentDetail
from retinue.protocol.ids import new_id
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, Completion, Message
from retinue.protocol.supervision import ApprovalRequest

__all__ = ["Router"]

KEY_PREFIX = "~"  # generated idempotency and dedup keys: "~<request id>"
MIN_GENERATED_KEY = 17  # a generated key keeps at least 64 random bits, or none is made
_enc = w.encode_call
R = TypeVar("R")


class Router:
    """A face's routing state and its host calls as transport generators.

    Thread-safe: host threads and event loops may run operations at once; the
    shared state is only touched under a lock, never across a step.
    """

    def __init__(
        self,
        shards: int,
        limits: Limits,
        *,
        retry_s: float,
        call_timeout_s: float,
        remember: int = 100_000,
    ) -> None:
        """Route over ``shards`` shards; remember up to ``remember`` names and completions."""
        self.shards = shards
        self.limits = limits
        self.retry_s = retry_s
        self.call_timeout_s = call_timeout_s
        self.remember = remember
        self.names: OrderedDict[str, int] = OrderedDict()
        self._returned: set[str] = set()
        self._returned_order: deque[str] = deque()
        self._lock = threading.Lock()

    # -- routing -------------------------------------------------------------------------

    def _cache(self, name: str, shard: int) -> int:
        with self._lock:
            self.names[name] = shard
            if len(self.names) > self.remember:
                self.names.popitem(last=False)
        return shard

    def route(self, ref: Any, field: str = "ref") -> Op[tuple[int, str]]:
        """Return ``(shard, shard-local ref)`` for a host's agent reference.

        Raises:
            ArgumentTypeError, InvalidAgentPath: a bad reference.
            UnknownAgent: an id of a shard the cluster does not have, or a
                name no shard holds.
        """
        if not isinstance(ref, str):
            raise ArgumentTypeError(f"{field} must be a str, not {type(ref).__name__}")
        split = split_id(ref)
        if split is not None:
            shard, local = split
            if shard >= self.shards:
                raise UnknownAgent(f"no agent {preview(ref)}: the cluster has {self.shards} shards")
            return shard, local
        path = paths.resolve(paths.ROOT, ref, field=field)
        if path == paths.ROOT:
            return 0, ref
        top = path.split("/")[2]
        cached = self.names.get(top)
        if cached is None:
            found: int | None = yield Dir("lookup", (top,))
            cached = found if found is not None else (yield from self._search(ref, top))
            self._cache(top, cached)
        return cached, path

    def stream_targets(self, ref: Any) -> Op[list[tuple[int, str | None]]]:
        """Return the ``(shard, shard-local ref)`` a stream of ``ref`` listens on.

        An id: its shard; a path: its top-level name's shard, or every shard
        while the directory has not placed that name; None or ``/root``: every shard.

        Raises:
            ArgumentTypeError, InvalidAgentPath: a bad reference.
            UnknownAgent: an id of a shard the cluster does not have.
        """
        if ref is not None and not isinstance(ref, str):
            raise ArgumentTypeError(
                f"ref must be an agent id, a path or None, not {type(ref).__name__}"
            )
        if ref is not None and split_id(ref) is not None:
            return [(yield from self.route(ref))]
        path = None if ref is None else paths.resolve(paths.ROOT, ref, field="ref")
        if path is not None and path != paths.ROOT:
            top = path.split("/")[2]
            shard = self.names.get(top)
            if shard is None:
                shard = yield Dir("lookup", (top,))
            if shard is not None:
                return [(self._cache(top, shard), path)]
        return [(k, path) for k in range(self.shards)]

    def _search(self, ref: str, top: str) -> Op[int]:
        """Ask every shard for ``ref``; record where its top-level name lives.

        Raises:
            UnknownAgent (or the shards' own refusal): no shard holds it.
        """
        replies = yield Many(tuple(_one(k, Get(HOST, ref)) for k in range(self.shards)))
        first: RetinueError | None = None
        for shard, raw in enumerate(replies):
            try:
                info = w.decode_reply(raw, AgentInfo)
            except RetinueError as exc:
                first = first or exc
                continue
            if info.path.split("/")[2] == top:
                yield Dir("record", (top, shard))
            return shard
        assert first is not None
        raise first

    def _key(self, given: Any, rid: str, field: str) -> str | None:
        """Return the key a call carries: the caller's (checked), or one made from ``rid``.

        Raises:
            ArgumentTypeError, InvalidArgument, DedupKeyTooLong: a bad given key.
        """
        cap = self.limits.dedup_key_max_length
        if given is not None:
            key = check_key(given, field)
            if len(key) > cap:
                raise DedupKeyTooLong(
                    f"{field} has {len(key)} characters; max is {cap}", limit=cap, value=len(key)
                )
            return key
        if cap < MIN_GENERATED_KEY:
            return None
        return KEY_PREFIX + rid[: cap - len(KEY_PREFIX)]

    def _ask(self, shard: int, command: Command[R], rid: str | None = None) -> Op[R]:
        """Run ``command`` on ``shard`` (under ``rid``, or a fresh one if it is recorded)."""
        if rid is None and type(command) in w.RECORDED:
            rid = new_id()
        raw = yield _one(shard, command, rid)
        answer: R = w.decode_reply(raw, answer_type(type(command)))
        return answer

    def _on(self, ref: Any, make: Callable[[str], Command[R]]) -> Op[R]:
        """Run the command ``make`` builds for ``ref``'s shard-local ref on its shard."""
        shard, local = yield from self.route(ref)
        return (yield from self._ask(shard, make(local)))

    # -- mutating calls ------------------------------------------------------------------

    def spawn(self, profile: str, task: str, name: Any, parent: Any, key: Any) -> Op[AgentInfo]:
        """Spawn on the parent's shard, or place a new top-level agent (see the directory)."""
        rid = new_id()
        made = self._key(key, rid, "idempotency_key")
        top = parent is None or parent == paths.ROOT
        if not top:
            shard, local_parent = yield from self.route(parent, "parent")
        elif name is not None:
            paths.validate_name(name, field="name")
            cached = self.names.get(name)
            shard = (
                cached if cached is not None else self._cache(name, (yield Dir("place", (name,))))
            )
            local_parent = paths.ROOT
        else:
            shard = (yield Dir("place_key", (made,))) if key is not None else (yield Dir("pick"))
            local_parent = paths.ROOT
        command = Spawn(HOST, profile, task, name, local_parent, made)
        info = yield from self._ask(shard, command, rid)
        if top and name is None:
            self._cache(info.name, (yield Dir("record", (info.name, shard))))
        return info

    def send(self, ref: Any, content: str, dedup_key: Any) -> Op[Message]:
        """Send to an agent's mailbox; a made dedup key is taken off the returned message."""
        rid = new_id()
        key = self._key(dedup_key, rid, "dedup_key")
        shard, local = yield from self.route(ref)
        message = yield from self._ask(shard, Send(HOST, local, content, key), rid)
        if dedup_key is None and message.dedup_key is not None:
            message = msgspec.structs.replace(message, dedup_key=None)
        return message

    def follow_up(self, ref: Any, task: str) -> Op[AgentInfo]:
        """Queue a follow-up turn of an idle agent."""
        return self._on(ref, lambda local: FollowUp(HOST, local, task))

    def resume(self, ref: Any) -> Op[AgentInfo]:
        """Run an interrupted agent's task again."""
        return self._on(ref, lambda local: Resume(HOST, local))

    def interrupt(self, ref: Any) -> Op[AgentInfo]:
        """Cancel an agent's queued or running turn."""
        return self._on(ref, lambda local: Interrupt(HOST, local))

    def interrupt_tree(self, ref: Any) -> Op[list[AgentInfo]]:
        """Cancel the turns of an agent's whole live subtree."""
        return self._on(ref, lambda local: InterruptTree(HOST, local))

    def close(self, ref: Any) -> Op[AgentInfo]:
        """Close one agent."""
        return self._on(ref, lambda local: Close(HOST, local))

    def close_tree(self, ref: Any) -> Op[list[AgentInfo]]:
        """Close an agent's whole subtree."""
        return self._on(ref, lambda local: CloseTree(HOST, local))

    # -- waits ---------------------------------------------------------------------------

    def wait(self, ref: Any, timeout: float | None) -> Op[Completion]:
        """Wait under a lease; acknowledge it; never return one completion twice.

        Raises:
            WaitTimeout, NothingToWaitFor, UnknownAgent: as ``Runtime.wait``.
            ShardUnavailable: the shard did not come back within ``retry_s``.
        """
        seconds = resolve_timeout(timeout, self.limits)
        shard, local = yield from self.route(ref)
        deadline = time.monotonic() + seconds
        # A release owed to the shard (a wait that gave up, a cancel whose release missed
        # call_timeout_s) goes first: else this wait could find its completion still leased.
        yield Flush(shard)
        failing_since: float | None = None
        attempt = 0
        lease = new_id()
        unseen = False  # a call under the lease may have run without its answer seen
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            release = _enc(w.run(ReleaseLease(lease)))
            call = One(
                shard,
                _enc(w.run(Wait(HOST, local, lease=lease), timeout=remaining)),
                "wait",
                timeout_s=remaining,
                retry=False,
                on_cancel=release,
            )
            try:
                try:
                    raw = yield call
                except ShardUnavailable:
                    unseen = True
                    failing_since = failing_since or time.monotonic()
                    if time.monotonic() - failing_since > self.retry_s:
                        raise
                    # The failed call may have taken a completion under the lease: a cancel
                    # in the back-off releases it, as one during the call does.
                    backoff = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
                    yield Pause(backoff, on_cancel=One(shard, release, "release"))
                    attempt += 1
                    continue  # the same lease: a wait that took a completion hands it over
                completion = w.decode_reply(raw, Completion)
            except Exception:
                if unseen:  # giving up: what a lost answer's call took goes back now
                    yield Tell((One(shard, release, "release"),), settle=True)
                raise
            yield from self._ack(shard, lease, release)
            if self._first_time(completion.id):
                return completion
            # Handed out again after its lease ran out: not returned twice. Leasing again,
            # this wait may come to owe one more call than its slot holds (its last ack may
            # still be owed): the face must owe less than the bound, its own slot aside.
            yield Check()
            lease = new_id()
            unseen = False

    def run(
        self,
        profile: str,
        task: str,
        name: Any,
        parent: Any,
        key: Any,
        timeout: float | None,
    ) -> Op[Completion]:
        """Spawn as :meth:`spawn` does, then wait on the new agent as :meth:`wait` does.

        Two shard calls, not the runtime's one ``Run`` command: the wait is
        leased and acknowledged as every cluster wait is, and the spawn keeps
        its own request id and idempotency key (one made from the request id
        when none is given), so a transport retry spawns once. ``timeout`` is
        checked before anything is spawned and counts the spawn's time too.

        Raises:
            InvalidArgument, ArgumentTypeError: a bad ``timeout`` (nothing spawned).
            UnknownProfile, NotPermitted, DuplicateAgentPath: as :meth:`spawn` (nothing spawned).
            WaitTimeout, AgentClosed, NothingToWaitFor: as :meth:`wait`; the agent
                keeps running after a timeout.
            ShardUnavailable: the shard did not come back within ``retry_s``.
        """
        seconds = resolve_timeout(timeout, self.limits)
        deadline = time.monotonic() + seconds
        info = yield from self.spawn(profile, task, name, parent, key)
        return (yield from self.wait(info.id, max(0.0, deadline - time.monotonic())))

    def _ack(self, shard: int, lease: str, release: bytes) -> Op[None]:
        """Acknowledge ``lease`` (``release`` gives it back instead).

        A :class:`~retinue.cluster._transport.Tell`: on an event loop nothing is awaited
        between the wait's answer and its return, so a cancel cannot land after the
        acknowledgement and lose the completion. One the shard did not answer for good
        (the call failed, or the shard refused it for a trouble of its own) is sent again
        by the transport's outbox until it is.

        Raises:
            RuntimeClosed: the face was closed while the wait was in flight: no outbox
                would send the acknowledgement again, so the lease is released instead
                and the completion is not returned (its shard hands it out once more).
                So too when the close overtook the acknowledgement (during its retries,
                or as it was sent) unless the shard answers the release that the lease
                was acknowledged already (the completion is returned then).
        """
        yield Tell((dataclasses.replace(_one(shard, AckLease(lease)), on_cancel=release),))

    def _first_time(self, completion_id: str) -> bool:
        """Note that the face returns ``completion_id``; False if it returned it before."""
        with self._lock:
            if completion_id in self._returned:
                return False
            self._returned.add(completion_id)
            self._returned_order.append(completion_id)
            if len(self._returned_order) > self.remember:
                self._returned.discard(self._returned_order.popleft())
            return True

    def messages(self, timeout: float | None) -> Op[list[Message]]:
        """Every shard's host inbox, oldest first; wait for the first message on any shard."""
        seconds = resolve_timeout(timeout, self.limits)
        inbox = HostMessages(HOST)
        polls = tuple(_one(k, inbox, new_id(), 0.0) for k in range(self.shards))
        got = _merge((yield Many(polls)))
        if got or seconds == 0:
            return got
        rids = [new_id() for _ in range(self.shards)]
        replies = yield Race(
            calls=tuple(
                _one(k, inbox, rid, seconds, timeout_s=seconds) for k, rid in enumerate(rids)
            ),
            stops=tuple(One(k, _enc(w.StopWaiting((rid,)))) for k, rid in enumerate(rids)),
            fallback=tuple(_one(k, inbox, rid, 0.0) for k, rid in enumerate(rids)),
            done=_has_messages,
        )
        return _merge(replies)

    # -- reads ---------------------------------------------------------------------------

    def get(self, ref: Any) -> Op[AgentInfo]:
        """One agent, by cluster id or live path."""
        return self._on(ref, lambda local: Get(HOST, local))

    def inspect(self, ref: Any, tail: int) -> Op[AgentDetail]:
        """One agent in full."""
        return self._on(ref, lambda local: Inspect(HOST, local, tail))

    def agents(self, include_closed: bool) -> Op[list[AgentInfo]]:
        """Every shard's agents, merged oldest first."""
        command = Agents(HOST, include_closed)
        replies = yield Many(tuple(_one(k, command) for k in range(self.shards)))
        merged = [a for raw in replies for a in w.decode_reply(raw, list[AgentInfo])]
        return sorted(merged, key=lambda a: (a.created_at, a.id))

    # -- approvals -----------------------------------------------------------------------

    def approvals(self, ref: Any) -> Op[list[ApprovalRequest]]:
        """The pending approval requests of ``ref``'s subtree, or of every shard, oldest first."""
        if ref is None:
            every = Approvals(HOST, None)
            replies = yield Many(tuple(_one(k, every) for k in range(self.shards)))
        else:
            shard, local = yield from self.route(ref)
            replies = [(yield _one(shard, Approvals(HOST, local)))]
        merged = [r for raw in replies for r in w.decode_reply(raw, list[ApprovalRequest])]
        return sorted(merged, key=lambda r: (r.requested_at, r.id))

    def approve(self, request_id: Any, note: Any) -> Op[None]:
        """Approve a request on the shard its id names (a retry answers once).

        Raises:
            ArgumentTypeError: a non-str id.
            UnknownApproval: an id no shard of this cluster made.
            ApprovalAlreadyAnswered, InvalidArgument: as ``Runtime.approve``.
        """
        shard, local = self._request(request_id)
        return self._ask(shard, Approve(local, note))

    def deny(self, request_id: Any, reason: Any) -> Op[None]:
        """Deny a request on the shard its id names (raises as :meth:`approve`)."""
        shard, local = self._request(request_id)
        return self._ask(shard, Deny(local, reason))

    def _request(self, request_id: Any) -> tuple[int, str]:
        """Return ``(shard, shard-local id)`` of an approval request's cluster id.

        Raises:
            ArgumentTypeError: a non-str id.
            UnknownApproval: an id no shard of this cluster made.
        """
        if not isinstance(request_id, str):
            raise ArgumentTypeError(f"request_id must be a str, not {type(request_id).__name__}")
        split = split_id(request_id)
        if split is None or split[0] >= self.shards:
            raise UnknownApproval(
                f"no approval request {preview(request_id)}; list them with approvals()"
            )
        return split


def _one(
    shard: int,
    command: Command[Any],
    rid: str | None = None,
    timeout: float | None = None,
    *,
    timeout_s: float | None = None,
) -> One:
    """The step that runs ``command`` on ``shard`` under the name the call goes by."""
    payload = _enc(w.run(command, rid=rid, timeout=timeout))
    return One(shard, payload, w.call_name(command), timeout_s=timeout_s)


def _has_messages(raw: bytes) -> bool:
    """Return True if an inbox answer holds messages (a refusal holds none)."""
    try:
        return bool(w.decode_reply(raw, list[Message]))
    except RetinueError:
        return False


def _merge(replies: list[bytes]) -> list[Message]:
    """Decode every shard's inbox answer and merge them oldest first."""
    merged = [m for raw in replies for m in w.decode_reply(raw, list[Message])]
    return sorted(merged, key=lambda m: (m.created_at, m.id))
