"""What every part of the supervisor shares: the world it acts on and its lookups.

The supervisor is composed of small parts with one job each (see
:mod:`retinue.actors.supervisor`). They share one :class:`World`: the store,
the in-memory :class:`~retinue.actors.tree.Tree`, the profiles, the limits and
the event bus, plus the lookups and record updates every rule needs. A
handler checks the rules first (a refused command changes nothing), then
mutates the tree, which gathers the matching writes; everything else a
command does goes into its :class:`~retinue.actors.supervisor._transition.Transition`.
Only the supervisor thread touches a World.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from retinue.actors import Journal, Journaled, Profile
from retinue.actors.admission import Admission
from retinue.actors.calls import Engine
from retinue.actors.commands import Host, Sender
from retinue.actors.events import EventBus, Observer, Spans
from retinue.actors.supervisor._history import History
from retinue.actors.supervisor._transition import Transition, resolve_future
from retinue.actors.tree import HOST_KEY, Tree
from retinue.actors.turns import Executor, Runner, is_async_runner, is_model_runner
from retinue.errors import (
    ArgumentTypeError,
    InvalidArgument,
    MessageTooLarge,
    NotPermitted,
    TurnInterrupted,
    UnknownAgent,
)
from retinue.persistence.store import Store
from retinue.protocol import paths
from retinue.protocol.details import AgentDetail, Backlog, InDoubtCall, in_doubt_calls
from retinue.protocol.limits import Limits
from retinue.protocol.messages import AgentInfo, AgentState, Completion, Message
from retinue.protocol.paging import check_page, cursor_of, page_of
from retinue.protocol.records import (
    TRANSCRIPT_VERSION,
    AgentRecord,
    CompletionRecord,
    MessageRecord,
    ModelCallRecord,
    TranscriptMessage,
    TranscriptRecord,
)
from retinue.protocol.supervision import RestartRecord

__all__ = [
    "World",
    "agent_list",
    "agent_records",
    "backlog_of",
    "check_tail",
    "detail_from",
    "detail_of",
    "find_agent",
    "info_of",
    "require_str",
    "resolve_future",
    "sending_turn",
    "spawned_info",
]


def info_of(record: AgentRecord) -> AgentInfo:
    """Return the public snapshot of a stored agent."""
    return AgentInfo(
        id=record.id,
        name=record.name,
        path=record.path,
        profile=record.profile,
        parent_path=record.parent_path,
        depth=record.depth,
        state=record.state,
        generation=record.generation,
        task=record.task,
        output=record.output,
        error=record.error,
        created_at=record.created_at,
        updated_at=record.updated_at,
        usage=record.usage,
        tree_usage=record.tree_usage if record.parent_id is None else None,
        started_at=record.started_at,
        attempt=record.attempt,
        last_error=record.last_error,
        restart_due_at=record.restart_due_at,
        error_type=record.error_type,
        forked_from=record.forked_from,
        in_doubt=record.open_calls if record.state is not AgentState.RUNNING else 0,
    )


def spawned_info(record: AgentRecord) -> AgentInfo:
    """Return :func:`info_of` ``record``, an agent a spawn has just made (``Spawner``):
    every field a spawn leaves at its default is left at the snapshot's own default.

    A quarter of :func:`info_of`'s work: the spawn's fields only, given in the snapshot's
    field order. ``tests/actors/test_spawning.py`` checks it equals :func:`info_of`.
    """
    return AgentInfo(
        id=record.id,
        name=record.name,
        path=record.path,
        profile=record.profile,
        parent_path=record.parent_path,
        depth=record.depth,
        state=record.state,
        generation=record.generation,
        task=record.task,
        created_at=record.created_at,
        updated_at=record.updated_at,
        tree_usage=record.tree_usage if record.parent_id is None else None,
        started_at=record.started_at,
    )


_TRANSCRIPT = msgspec.msgpack.Decoder(TranscriptRecord)
_held = dict.get  # a held agent's record (AgentTable.get, a Python call, also reads settled ones)
_RUNNING = AgentState.RUNNING  # a global: an enum member's lookup is a slow descriptor


def detail_of(tree: Tree, record: AgentRecord, transcript: bytes | None, tail: int) -> AgentDetail:
    """Return ``record`` in full: its unread messages, pending completions, transcript tail.

    ``transcript`` is the agent's stored transcript record (None: none); one
    that does not decode, or was written by a newer retinue, shows as empty.
    """
    return detail_from(
        record, tree.unread(record.id), tree.pending_for(record.id), transcript, tail
    )


def detail_from(
    record: AgentRecord,
    unread: Sequence[MessageRecord],
    pending: Sequence[CompletionRecord],
    transcript: bytes | None,
    tail: int,
) -> AgentDetail:
    """Return ``record`` in full from its ``unread`` messages and ``pending`` completions
    (in order) and its stored ``transcript`` (see :func:`detail_of`)."""
    messages: tuple[TranscriptMessage, ...] = ()
    calls: tuple[ModelCallRecord, ...] = ()
    cut = 0
    doubt: tuple[InDoubtCall, ...] = ()
    if transcript is not None:
        try:
            stored = _TRANSCRIPT.decode(transcript)
        except msgspec.DecodeError:
            stored = None
        if stored is not None and stored.version <= TRANSCRIPT_VERSION:
            messages, cut, calls = stored.messages, stored.cut, stored.calls
            running = record.state is AgentState.RUNNING
            doubt = in_doubt_calls(stored.journal, messages, running=running)
    return AgentDetail(
        info=info_of(record),
        unread=tuple(m.message for m in unread),
        pending=tuple(p.completion for p in pending),
        transcript=messages[len(messages) - tail :] if tail > 0 else (),
        transcript_length=len(messages),
        transcript_cut=cut,
        calls=calls,
        trace=record.trace,
        in_doubt=doubt,
    )


def check_tail(value: Any) -> int:
    """Return ``value`` as a transcript tail length.

    Raises:
        ArgumentTypeError: it is not an int. InvalidArgument: it is negative.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"transcript_tail must be an int, not {type(value).__name__}")
    if value < 0:
        raise InvalidArgument(f"transcript_tail must be 0 or more, not {value}")
    return value


def agent_list(
    tree: Tree,
    *,
    include_closed: bool,
    limit: int | None = None,
    after: str | None = None,
    page_max: int = Limits().agents_page_max,
) -> list[AgentInfo]:
    """Return the tree's agents as ``agents()`` does (:mod:`retinue.protocol.paging`).

    Raises:
        ArgumentTypeError, InvalidArgument, PageLimitExceeded, UnknownAgent: as
            ``check_page`` and ``page_of`` (:mod:`retinue.protocol.paging`).
    """
    check_page(limit, after, page_max)
    if limit is None and after is None:
        return agent_records(list(tree.agents.values()), include_closed=include_closed)
    cursor = None if after is None else cursor_of(after, tree.agents.get)
    return [info_of(r) for r in tree.page(cursor, limit, include_closed)]


def agent_records(
    records: Sequence[AgentRecord],
    *,
    include_closed: bool,
    limit: int | None = None,
    after: str | None = None,
    page_max: int = Limits().agents_page_max,
) -> list[AgentInfo]:
    """Return ``records`` as ``agents()`` does: oldest first (ties in the order given), or
    a page of them by path; closed ones only with ``include_closed``.

    Raises:
        ArgumentTypeError, InvalidArgument, PageLimitExceeded, UnknownAgent: as :func:`agent_list`.
    """
    check_page(limit, after, page_max)

    def find(agent_id: str) -> AgentRecord | None:
        return next((r for r in records if r.id == agent_id), None)

    page = page_of(records, include_closed=include_closed, limit=limit, after=after, find=find)
    return [info_of(r) for r in page]


def backlog_of(tree: Tree) -> Backlog:
    """Count the unread messages and undelivered completions of every recipient."""
    host = tree.mailbox.get(HOST_KEY, {})
    return Backlog(
        unread_messages=sum(len(box) for box in tree.mailbox.values()),
        pending_completions=sum(len(queue) for queue in tree.pending.values()),
        host_unread_messages=len(host),
        host_pending_completions=len(tree.pending.get(HOST_KEY, {})),
    )


def sending_turn(me: AgentRecord | None) -> AgentRecord:
    """Return the sending turn's agent of a command only a running turn sends.

    ``me`` is the sender :meth:`World.sender` resolved (None: the host).

    Raises:
        ArgumentTypeError: the host sent it.
    """
    if me is None:
        raise ArgumentTypeError("only a running turn sends this command")
    return me


def require_str(value: Any, what: str) -> str:
    """Return ``value`` if it is a str.

    Raises:
        ArgumentTypeError: it is not.
    """
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


def find_agent(tree: Tree, base: str, ref: Any, field: str = "ref") -> AgentRecord:
    """Return the agent of ``tree`` that ``ref`` names: an id, or a path relative to ``base``.

    ``field`` is the name of the caller's argument (``ref``, ``parent``,
    ``to``, ``agent``: a command's ``field``), which the errors name, quoting
    at most a short prefix of the value.

    Raises:
        ArgumentTypeError: ``ref`` is not a str.
        InvalidAgentPath: a malformed path.
        UnknownAgent: no such agent (a path names live agents only).
    """
    ref = require_str(ref, field)
    record = tree.agents.get(ref)
    if record is not None:
        return record
    path = paths.resolve(base, ref, field=field)
    agent_id = tree.live_paths.get(path)
    if agent_id is None:
        raise UnknownAgent(f"no live agent at {path}")
    return tree.agents[agent_id]


class World(Journaled):
    """The supervisor's shared state and lookups. Supervisor thread only.

    Attributes:
        engine: the runtime's call engine (turns send their commands through it).
        observer: gives each turn its watch (live tool and model call events).
        executor: the pool and event loop agent actors run on.
        runner_is_async: per profile, whether its runner is ``async def``.
        model_runners: the profiles whose runner is a model runner (their turns are
            handed their stored state as they start, ``Turn.llm_state``).
        policies: per profile, its restart policy as agents store it (None: none).
        admission: the gate of model calls under provider limits (None: none).
        closing: the runtime is closing: no turn starts, nothing is woken.
        restoring: recovery after a restore is running: nothing is woken.
        history: each agent's newest settled generations, kept to fork as of.
        journal: records every change a command makes to the supervisor's
            memory, so a command that fails is undone (:mod:`retinue.actors.tree._journal`).
    """

    _config = frozenset(
        {
            "store",
            "profiles",
            "runners",
            "limits",
            "bus",
            "observer",
            "engine",
            "executor",
            "runner_is_async",
            "model_runners",
            "policies",
            "admission",
        }
    )

    def __init__(
        self,
        *,
        store: Store,
        tree: Tree,
        profiles: Mapping[str, Profile],
        runners: Mapping[str, Runner],
        limits: Limits,
        bus: EventBus,
        engine: Engine,
        executor: Executor | None = None,
        spans: Spans | None = None,
        admission: Admission | None = None,
    ) -> None:
        """Gather the store, tree, profiles, limits, bus, engine and the runners' executors
        (``spans``: where turns' spans go, when the runtime traces; ``admission``: the
        provider limits' gate model calls pass, None: no provider limit)."""
        self._journal = tree.journal
        self.store = store
        self.tree = tree
        self.profiles = profiles
        self.runners = runners
        self.limits = limits
        self.bus = bus
        self.observer = Observer(bus, spans)
        self.engine = engine
        self.executor = executor if executor is not None else Executor()
        self.runner_is_async = {name: is_async_runner(r) for name, r in runners.items()}
        self.model_runners = frozenset(n for n, r in runners.items() if is_model_runner(r))
        self.policies = {
            name: None if p.restart is None else RestartRecord.of(p.restart)
            for name, p in profiles.items()
        }
        self.admission = admission
        self.closing = False
        self.restoring = False
        self.history = History(tree, store, limits)

    @property
    def journal(self) -> Journal:
        """The one journal of every change the supervisor's parts make (the tree's)."""
        return self._journal

    def release(self) -> None:
        """Forget the tree (for a stopped supervisor): a runtime that was shut down but
        is still referenced keeps none of its agents, mailboxes or completions."""
        self.tree = Tree(self._journal)
        self.history = History(self.tree, self.store, self.limits)  # it held the old tree

    # -- lookups --------------------------------------------------------------

    def sender(self, sender: Sender) -> AgentRecord | None:
        """Return the sending turn's agent, or None for the host.

        Raises:
            TurnInterrupted: the turn is no longer its agent's running turn.
        """
        if isinstance(sender, Host):
            return None
        # The held records' own dict lookup, in C (AgentTable.get is a Python call): a
        # running agent is always held (the tree holds every record it changes), so an
        # agent settled in the store is not running either way.
        record = _held(self.tree.agents, sender.agent_id)
        if record is None or record.generation != sender.generation or record.state is not _RUNNING:
            raise TurnInterrupted("this turn was interrupted; its calls are refused")
        return record

    def find(self, sender: AgentRecord | None, ref: Any, field: str = "ref") -> AgentRecord:
        """Return the agent ``ref`` (an id, or a path relative to the sender) names.

        ``field`` is the name of the caller's argument, as for :func:`find_agent`.

        Raises:
            ArgumentTypeError, InvalidAgentPath, UnknownAgent: as :func:`find_agent`.
        """
        return find_agent(self.tree, paths.ROOT if sender is None else sender.path, ref, field)

    def is_descendant(self, record: AgentRecord, ancestor_id: str) -> bool:
        """Return True if ``record`` lies below ``ancestor_id``."""
        parent_id = record.parent_id
        while parent_id is not None:
            if parent_id == ancestor_id:
                return True
            parent_id = self.tree.agents[parent_id].parent_id
        return False

    def target(
        self, sender: AgentRecord | None, ref: Any, action: str, field: str = "ref"
    ) -> AgentRecord:
        """Return the agent ``ref`` names, which a turn may only act on in its own subtree.

        ``field`` is the caller's argument name, as for :meth:`find`.

        Raises:
            NotPermitted: it lies outside the sending turn's subtree.
            and everything :meth:`find` raises.
        """
        record = self.find(sender, ref, field)
        if sender is not None and not self.is_descendant(record, sender.id):
            raise NotPermitted(f"{sender.path} may only {action} agents in its own subtree")
        return record

    def update(self, record: AgentRecord, **changes: Any) -> AgentRecord:
        """Apply ``changes`` to the agent's current record and store it; return it.

        ``updated_at`` is now unless given. The changes land on the record the
        tree holds now, never on the copy the caller read earlier: a handler
        that read ``record``, then routed a completion (which moved the host's
        receipt mark) must not write the old mark back, or a received
        completion would be handed out again. A newer count of the agent's open
        tool calls the tree holds (``Tree.open_calls``) is written with it.
        """
        tree = self.tree
        current: AgentRecord | None = _held(tree.agents, record.id)  # in C (see sender)
        if current is None:  # a settled one's (or the caller's)
            current = tree.agents.get(record.id, record)
        if "updated_at" not in changes:  # no clock read when the caller gives the time
            changes["updated_at"] = time.time()
        if current.id in tree.open_calls:  # a running agent's newer count rides along
            changes.setdefault("open_calls", tree.open_calls.pop(current.id))
        return tree.put_agent(msgspec.structs.replace(current, **changes))

    def check_size(self, content: str, what: str) -> None:
        """Refuse a text above ``message_max_bytes``.

        Raises:
            MessageTooLarge: it is.
        """
        # An ASCII text's size is its length (a flag CPython keeps): no encoded copy made.
        size = len(content) if content.isascii() else len(content.encode("utf-8", "surrogatepass"))
        cap = self.limits.message_max_bytes
        if size > cap:
            raise MessageTooLarge(
                f"{what} is {size} bytes; message_max_bytes is {cap}", limit=cap, value=size
            )

    # -- taking inputs ----------------------------------------------------------

    def deliver(self, tx: Transition, pending: CompletionRecord) -> CompletionRecord:
        """Mark a completion received; its agent's backlog shrank, so it may wake."""
        tx.drain(pending.completion.agent_id)
        return self.tree.mark_delivered(pending)

    def take_completion(self, tx: Transition, pending: CompletionRecord) -> Completion:
        """Mark a completion received by its waiting recipient (as it stands now)."""
        done = pending.completion
        current = self.tree.completion(done.agent_id, done.generation) or pending
        if not current.delivered:
            self.deliver(tx, current)
        return done

    def take_message(self, record: MessageRecord) -> Message:
        """Mark a message read by its recipient's running turn; return it."""
        self.tree.mark_read(record, time.time())
        return record.message
