"""The read-only face of a store: the reads a runtime serves without a supervisor.

A :class:`StoreReader` answers :class:`~retinue.actors.commands.Get`,
:class:`~retinue.actors.commands.Agents`, :class:`~retinue.actors.commands.Approvals` and
:class:`~retinue.actors.commands.Inspect` from a fresh consistent snapshot of
the store, on a worker thread, through the same future a supervisor would
answer, so the runtime's sync call and its ``*_async`` twin stay one line over
the same command and an event loop never runs an LMDB scan. It serves
exactly :data:`~retinue.actors.commands.ReadCommand` (its ``match`` is
exhaustive); every other command is refused with ``StoreReadOnly``.

``get`` and ``inspect`` read the one agent's own records
(:mod:`~retinue.actors.system._agent_read`), not the whole store, and give the answers
restore's whole view gives (they fall back to it where a record on the way is
one restore would change); ``agents`` restores the agents database alone.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, assert_never

from retinue.actors.calls import Reply
from retinue.actors.commands import (
    Agents,
    Approvals,
    Barrier,
    Command,
    CountAgents,
    CountBacklog,
    Get,
    Idle,
    Inspect,
    ReadCommand,
)
from retinue.actors.supervisor import (
    agent_records,
    backlog_of,
    check_tail,
    detail_of,
    find_agent,
    info_of,
    pending_requests,
    resolve_future,
)
from retinue.actors.system._agent_read import find_record, read_detail
from retinue.actors.tree import StoredCompletions, Tree, load_tree
from retinue.errors import RuntimeClosed, StoreReadOnly
from retinue.persistence.restore import restore
from retinue.persistence.store import RESTORE_DATABASES, Store
from retinue.protocol import paths
from retinue.protocol.details import AgentCounts, AgentDetail
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, AgentState
from retinue.protocol.supervision import ApprovalRequest

__all__ = ["StoreReader"]


class StoreReader:
    """Serves reads of a store opened read-only; thread-safe."""

    def __init__(self, store: Store, limits: Limits, *, direct: bool = True) -> None:
        """Read ``store`` (opened read-only) with ``limits`` for the restore checks.

        ``direct``: read one agent from its own records (False: through the whole
        store, for a store whose paths restore renamed or rewrote as it opened).
        """
        self.store = store
        self.limits = limits
        self.direct = direct
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False

    def submit(
        self, command: Command[Any], reply: concurrent.futures.Future[Any] | None = None
    ) -> concurrent.futures.Future[Any]:
        """Start serving ``command``; return the future its answer goes to (``reply`` if given).

        Raises:
            StoreReadOnly: the command would change the store.
            RuntimeClosed: the reader is closed.
        """
        if not isinstance(command, ReadCommand):
            name = type(command).__name__
            raise StoreReadOnly(f"runtime on {self.store.folder} is read-only; {name} is refused")
        future: concurrent.futures.Future[Any] = reply if reply is not None else Reply()
        match command:
            case Get():
                return self._run(future, self.get, command.ref, command.field)
            case Agents():
                return self._run(
                    future, self.agents, command.include_closed, command.limit, command.after
                )
            case Inspect():
                tail = check_tail(command.transcript_tail)
                return self._run(future, self.inspect, command.ref, tail, command.field)
            case CountBacklog():
                return self._run(future, lambda: backlog_of(self._tree()))
            case CountAgents():
                return self._run(future, self.counts)
            case Approvals():
                return self._run(future, self.approvals, command.ref, command.field)
            case Barrier() | Idle():  # nothing is ever pending or running on a reader
                resolve_future(future, None)
                return future
            case _:
                assert_never(command)

    def _run(
        self, future: concurrent.futures.Future[Any], fn: Any, *args: Any
    ) -> concurrent.futures.Future[Any]:
        """Serve ``fn(*args)`` on a worker thread; its answer (or error) goes to ``future``."""

        def serve() -> None:
            try:
                value = fn(*args)
            except Exception as exc:
                resolve_future(future, exc)
            else:
                resolve_future(future, value)

        with self._lock:
            if self._closed:
                raise RuntimeClosed("the runtime is closed")
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=2, thread_name_prefix="retinue-reader"
                )
            self._pool.submit(serve)
        return future

    def _tree(self) -> Tree:
        # A view drops no agent for a cap; it reads a delivered completion when asked.
        snapshot = self.store.snapshot(undelivered_only=True)
        tree, _ = load_tree(snapshot, None, StoredCompletions(self.store))
        return tree

    def get(self, ref: str, field: str = "ref") -> AgentInfo:
        """Return an agent by id or live path, as the store has it now.

        ``ref`` is looked up as a writer's supervisor does (an id, or a path
        relative to ``/root``); ``field`` is the caller's argument name.

        Raises:
            ArgumentTypeError, InvalidAgentPath, UnknownAgent: as
                :func:`~retinue.actors.supervisor._world.find_agent`.
        """
        if self.direct:
            with self.store.view() as view:
                record = find_record(view, ref, field)
            if record is not None:
                return info_of(record)
        return info_of(find_agent(self._tree(), paths.ROOT, ref, field))

    def inspect(self, ref: str, tail: int, field: str = "ref") -> AgentDetail:
        """Return an agent in full (see ``Runtime.inspect``), as the store has it now.

        Raises:
            ArgumentTypeError, InvalidAgentPath, UnknownAgent: as :meth:`get`.
        """
        if self.direct:
            with self.store.view() as view:
                record = find_record(view, ref, field)
                detail = None if record is None else read_detail(view, record, tail)
            if detail is not None:
                return detail
        tree = self._tree()
        record = find_agent(tree, paths.ROOT, ref, field)
        return detail_of(tree, record, self.store.get("transcripts", record.id.encode()), tail)

    def approvals(self, ref: str | None, field: str = "ref") -> list[ApprovalRequest]:
        """Return the pending approval requests (of ``ref``'s subtree, or all), oldest first.

        Raises:
            ArgumentTypeError, InvalidAgentPath, UnknownAgent: as :meth:`get`.
        """
        snapshot = self.store.snapshot((*RESTORE_DATABASES, "approvals"), undelivered_only=True)
        tree, restored = load_tree(snapshot, None, StoredCompletions(self.store))
        below = None if ref is None else find_agent(tree, paths.ROOT, ref, field)
        held = {r.request.id: r for r in restored.approvals}
        return pending_requests(held, tree.agents, below)

    def agents(
        self, include_closed: bool, limit: int | None = None, after: str | None = None
    ) -> list[AgentInfo]:
        """Return every agent oldest first, or a page of them by path (``limit``, ``after``);
        closed ones only with ``include_closed``.

        Only the agents database is restored: messages and completions change no agent.

        Raises:
            ArgumentTypeError, InvalidArgument, PageLimitExceeded, UnknownAgent: a bad page.
        """
        restored = restore(self.store.snapshot(("agents",)), None)
        return agent_records(
            restored.agents,
            include_closed=include_closed,
            limit=limit,
            after=after,
            page_max=self.limits.agents_page_max,
        )

    def counts(self) -> AgentCounts:
        """Count every agent by state and the live ones by profile (a walk of the agents
        database: a reader keeps no tree)."""
        counts = AgentCounts()
        for record in restore(self.store.snapshot(("agents",)), None).agents:
            state = record.state.value
            counts.by_state[state] = counts.by_state.get(state, 0) + 1
            if record.state is not AgentState.CLOSED:
                live = counts.live_by_profile
                live[record.profile] = live.get(record.profile, 0) + 1
        return counts

    def close(self) -> None:
        """Stop the worker threads (waiting for reads in progress); idempotent."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
