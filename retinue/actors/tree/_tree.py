"""The supervisor's in-memory picture of the tree, and the writes that keep the store in step.

Only the supervisor thread touches a :class:`Tree`. Every mutation updates the
indexes and records the matching LMDB write; :meth:`Tree.take_writes` hands
them to the supervisor as one transition. An agent changed several times in
one transition is encoded and written once, as it ends.

The tree's indexes come in three families: its agents (here), its mailboxes
(:class:`~retinue.actors.tree._mailbox.MailboxIndex`) and its completions
(:class:`~retinue.actors.tree._completions.CompletionIndex`); the tree is made
of all three, and only its methods edit them. Here too: what removal takes
away with an agent, and :func:`load_tree`, which fills a tree from a store
snapshot, giving the inputs a crash took from a running turn back to its
next one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from operator import attrgetter

import msgspec

from retinue.actors.tree._agents import AgentTable
from retinue.actors.tree._completions import CompletionIndex
from retinue.actors.tree._journal import (
    _MISSING,
    JDeque,
    JDict,
    JList,
    Journal,
    Journaled,
    JSet,
    _reset_attribute,
    _restore_item,
)
from retinue.actors.tree._keys import HOST_KEY, ReadEntry, spawn_key
from retinue.actors.tree._loading import BUSY_STATES, BulkLoad, collector_paused
from retinue.actors.tree._mailbox import MailboxIndex
from retinue.actors.tree._open_index import OpenIndex, build_open_index
from retinue.actors.tree._pages import PageIndex
from retinue.actors.tree._stored import StoredCompletions
from retinue.persistence.placed import Placed
from retinue.persistence.restore import Restored, restore, restore_around
from retinue.persistence.store import Snapshot, Write
from retinue.protocol.messages import AgentState, Completion, Message
from retinue.protocol.records import (
    AgentRecord,
    CompletionRecord,
    MessageRecord,
    completion_key,
    generation_key,
    message_key,
)

__all__ = ["Tree", "load_tree"]

_NO_CHILDREN: frozenset[str] = frozenset()

_encode = msgspec.msgpack.Encoder().encode
_CLOSED = AgentState.CLOSED  # a global: an enum member's lookup is a slow descriptor
_dict_set = dict.__setitem__  # a dict's own get, set and delete, not a journaled one's
_dict_get = dict.get
_dict_del = dict.__delitem__
_dict_new = dict.setdefault  # a key the dict cannot hold yet (see Tree._put_new)
_dict_pop = dict.pop
_set_attribute = object.__setattr__  # an attribute set unjournaled (never through __dict__:
# asking for it makes every later attribute read of the tree a slow one, see own_attribute)
_PATH = attrgetter("path")
_STATE_KEYS = {state: state.value for state in AgentState}
"""Each state's key in ``Tree.state_counts`` (a dict lookup: ``.value`` is a slow property)."""
_MOVES: dict[tuple[AgentState, AgentState], tuple[str, str, int]] = {
    (old, new): (old.value, new.value, (new in BUSY_STATES) - (old in BUSY_STATES))
    for old in AgentState
    for new in AgentState
    if old is not new and old is not AgentState.CLOSED and new is not AgentState.CLOSED
}
"""A live agent's change of state, by (old, new): the two keys of ``Tree.state_counts``
it moves between, and whether it joins (1) or leaves (-1) the busy agents (0: neither).
What :func:`_move_counts` works out per change, once: :meth:`Tree.put_agent`'s common
changes (a turn starts, settles) look it up."""


def _step(counts: dict[str, int], key: str, step: int) -> None:
    """Add ``step`` to ``counts[key]``; a count that falls to 0 goes (journaled).

    The count's old value (or its absence) is journaled here, as the journaled dict's
    own set or delete would (one entry), without a frame of theirs per count.
    """
    old = _dict_get(counts, key, _MISSING)
    count = (0 if old is _MISSING else old) + step
    journal: Journal = counts._journal  # type: ignore[attr-defined]  # a JDict's
    if journal.active:
        journal.log((_restore_item, (counts, key, old)))
    if count:
        _dict_set(counts, key, count)
    else:
        _dict_del(counts, key)


def _put_back_agent(
    tree: Tree,
    written: dict[str, AgentRecord] | None,
    key: str,
    old: AgentRecord,
    before: AgentRecord | None,
    settled: str | None = None,
) -> None:
    """Undo :meth:`Tree.put_agent` of an agent the tree had (a new one's is
    :func:`_unput_new`): the record, its gathered write, and what the put changed of
    the counts and the busy and closed agents (which it changes unjournaled: this one
    entry puts them back). ``settled``: the agent was a settled one, left in the store
    under that path: it is again, not held."""
    agents = tree.agents
    new = dict.get(agents, key)
    restore: tuple[tuple[dict[str, AgentRecord] | None, AgentRecord | None], ...]
    if settled is None:
        restore = ((agents, old), (written, before))
    else:  # back in the store, not held (its stored record is ``old``)
        dict.pop(agents, key, None)
        agents.settled[key] = settled
        restore = ((written, before),)
    for target, value in restore:
        if target is None:
            continue
        if value is None:
            dict.pop(target, key, None)
        else:
            dict.__setitem__(target, key, value)
    if new is None:
        return
    if new.state is not old.state or new.profile != old.profile:
        _move_counts(tree, new, old)
    if old.state in BUSY_STATES:
        dict.__setitem__(tree.busy, key, None)
    else:
        dict.pop(tree.busy, key, None)
    if old.state is AgentState.CLOSED:
        dict.__setitem__(tree.closed, key, old.closed_at or old.updated_at)
    else:
        dict.pop(tree.closed, key, None)


def _move_counts(tree: Tree, old: AgentRecord, new: AgentRecord) -> None:
    """Move an agent's counts (by state, live by profile, busy) from ``old`` to ``new``,
    touching only those that change, unjournaled: :func:`_put_back_agent` moves them
    back (this same function, ``new`` to ``old``)."""
    if old.state is not new.state:  # (the module's aliases: a method looked up per call
        counts = tree.state_counts  # on ``dict`` costs as much again)
        key = _STATE_KEYS[old.state]
        count = _dict_get(counts, key, 0) - 1
        if count > 0:
            _dict_set(counts, key, count)
        else:
            _dict_pop(counts, key, None)
        key = _STATE_KEYS[new.state]
        held = _dict_get(counts, key)
        if held is None:  # a state no agent was in: a new key
            _dict_new(counts, key, 1)
        else:
            _dict_set(counts, key, held + 1)
        busy = new.state in BUSY_STATES
        if busy is not (old.state in BUSY_STATES):
            if busy:
                _dict_set(tree.busy, new.id, None)
            else:
                _dict_pop(tree.busy, new.id, None)
    was_live = old.state is not _CLOSED
    live = new.state is not _CLOSED
    if was_live and live and old.profile == new.profile:
        return
    if was_live:
        _count_down(tree.live_profiles, old.profile)
    if live:
        profiles = tree.live_profiles
        dict.__setitem__(profiles, new.profile, dict.get(profiles, new.profile, 0) + 1)


def _unput_new(
    tree: Tree,
    record: AgentRecord,
    written: dict[str, AgentRecord] | None,
    before: AgentRecord | None,
    live_path: object,
    made_kids: bool,
) -> None:
    """Undo :meth:`Tree._put_new`: the record, its gathered write (``before``: what was
    gathered for it, None: nothing) and every index the put changed. Undone newest first,
    the journal has put back every later change already, so each count is stepped back.
    ``live_path``: what ``live_paths`` held at its path (``_MISSING``: nothing; None: the
    agent was put closed); ``made_kids``: the put made its parent's set of live children."""
    key, state, parent_id = record.id, record.state, record.parent_id
    dict.pop(tree.agents, key, None)
    if written is not None:
        if before is None:
            dict.pop(written, key, None)
        else:
            dict.__setitem__(written, key, before)
    _count_down(tree.state_counts, _STATE_KEYS[state])
    dict.pop(tree.busy, key, None)
    top = dict.pop(tree.top_of, key, key)
    if parent_id is not None:
        _count_down(tree.stored_children, parent_id)
    if live_path is None:
        dict.pop(tree.closed, key, None)
        return
    _count_down(tree.live_profiles, record.profile)
    _restore_item(tree.live_paths, record.path, live_path)
    kin = HOST_KEY if parent_id is None else parent_id
    kids = dict.get(tree.children, kin)
    if kids is not None:
        set.discard(kids, key)
        if made_kids:
            dict.pop(tree.children, kin, None)
    _count_down(tree.tree_count, top)
    object.__setattr__(tree, "live_count", tree.live_count - 1)


def _reindex_live(tree: Tree, record: AgentRecord, held: bool, kids: set[str] | None) -> None:
    """Undo :meth:`Tree._unindex_live` of ``record``: its live path (``held``: the put
    took it), its place among its parent's live children (``kids``: the set it was
    taken from, None: it was in none), its tree's count and the live count. Undone
    newest first, the journal has put back every later change already."""
    key, parent_id = record.id, record.parent_id
    if held:
        dict.__setitem__(tree.live_paths, record.path, key)
    if kids is not None:
        set.add(kids, key)
        kin = HOST_KEY if parent_id is None else parent_id
        if dict.get(tree.children, kin) is not kids:  # the put took the emptied set away
            dict.__setitem__(tree.children, kin, kids)
    trees, top = tree.tree_count, tree.top_of[key]
    dict.__setitem__(trees, top, dict.get(trees, top, 0) + 1)
    object.__setattr__(tree, "live_count", tree.live_count + 1)


def _count_down(counts: dict[str, int], key: str) -> None:
    """Take one from ``counts[key]`` (unjournaled); a count that falls to 0 goes."""
    count = dict.get(counts, key, 0) - 1
    if count > 0:
        dict.__setitem__(counts, key, count)
    else:
        dict.pop(counts, key, None)


class Tree(Journaled, MailboxIndex, CompletionIndex, PageIndex, BulkLoad):
    """Agents, mailboxes and completions, indexed for the supervisor's rules.

    The host's own mailbox (messages top-level agents send to ``/root``) is
    ``mailbox[HOST_KEY]``. Every index is journaled (:mod:`retinue.actors.tree._journal`),
    and so are the writes a command gathers: a command that fails (or a
    refusal caught inside one) leaves the tree and its writes as it found them.
    """

    _config = frozenset({"stored"})  # the store it reads delivered completions from

    def __init__(self, journal: Journal | None = None) -> None:
        """Create an empty tree whose changes ``journal`` records (a new one if None)."""
        self._journal = journal if journal is not None else Journal()
        MailboxIndex.__init__(self)
        CompletionIndex.__init__(self)
        j = self._journal
        # Every agent by id; an open leaves the settled ones in the store (AgentTable).
        self.agents: AgentTable = AgentTable(j)
        PageIndex.__init__(self)
        # Every agent by state, live (not closed) agents by profile: the scrape's gauges.
        self.state_counts: dict[str, int] = JDict(j)
        self.live_profiles: dict[str, int] = JDict(j)
        self.live_paths: dict[str, str] = JDict(j)
        self.children: dict[str, set[str]] = JDict(j, {HOST_KEY: JSet(j)})
        self.top_of: dict[str, str] = JDict(j)
        self.tree_count: dict[str, int] = JDict(j)
        self.live_count = 0
        # The busy agents' ids (a turn queued or running, a restart pending, a tool call
        # awaiting approval), in the order they became busy: what recovery and the
        # start-up rearms look at, never every agent.
        self.busy: dict[str, None] = JDict(j)
        # What compaction looks at, never every agent: the closed agents' ids and when
        # they closed (closed_at, else updated_at), and how many stored agents (closed
        # ones included) name each agent as their parent.
        self.closed: dict[str, float] = JDict(j)
        self.stored_children: dict[str, int] = JDict(j)
        # Spawn idempotency keys: (parent id, or HOST_KEY for top level; key) -> agent id.
        self.spawn_keys: dict[tuple[str, str], str] = JDict(j)
        # Host waits' leases not yet acknowledged: lease id -> the completion it took.
        self.leases: dict[str, Completion] = JDict(j)
        # Running agents whose journal counts other open tool calls than their record:
        # agent id -> the count (see AgentRecord.open_calls). Written into the record
        # with its next change (World.update), never on its own.
        self.open_calls: dict[str, int] = JDict(j)
        self.seq = 0
        self.writes: list[Write] = JList(j)
        self.spread: list[Write] = JList(j)  # a compaction's deletes (see spread_since)
        self._agents_written: dict[str, AgentRecord] = JDict(j)  # encoded by take_writes
        # Removed agents whose last change was not written yet (see spread_since).
        self._removed_unwritten: dict[str, AgentRecord] = JDict(j)

    @property
    def journal(self) -> Journal:
        """The journal that records this tree's changes (the supervisor's one journal)."""
        return self._journal

    # -- sequencing and batching --------------------------------------------

    def next_seq(self) -> int:
        """Return the next arrival sequence number."""
        # Journaled.__setattr__'s work inline (a frame less per completion and message).
        seq = self.seq
        journal = self._journal
        if journal.active:
            journal.log((_reset_attribute, (self, "seq", seq)))
        _set_attribute(self, "seq", seq + 1)  # unjournaled: the entry above undoes it
        return seq + 1

    def drop_writes(self) -> None:
        """Forget the writes gathered since the last :meth:`take_writes` (a command failed)."""
        self.writes = JList(self._journal)
        self.spread = JList(self._journal)
        self._agents_written = JDict(self._journal)
        self._removed_unwritten = JDict(self._journal)

    def take_writes(self) -> list[Write]:
        """Return and clear the writes gathered since the last call (each agent's last state).

        The containers are emptied unjournaled: a command's writes are taken
        at its end, and a rollback after that drops the gathered writes anyway
        (:meth:`drop_writes`), so there is nothing to restore (and nothing to
        log per command). The list is replaced, not cleared, so that an undo
        the command logged (a pop) still finds its item; the dicts' undos
        (restore or pop a key) are harmless on an emptied dict.
        """
        writes: list[Write] = list(self.writes)
        if writes:  # replaced unjournaled
            _set_attribute(self, "writes", JList(self._journal))
        if self._removed_unwritten:  # removed in this transaction: no spread delete follows
            dict.clear(self._removed_unwritten)
        agents = self._agents_written
        if agents:
            for agent_id, record in dict.items(agents):  # a loop: a comprehension is a call
                writes.append(("agents", agent_id.encode(), _encode(record)))
            dict.clear(agents)
        return writes

    def spread_since(self, mark: int) -> None:
        """Move the writes gathered since ``len(writes)`` was ``mark`` (deletes) to ``spread``.

        The store commits spread writes in small transactions (a crash may cut
        them anywhere), so they are ordered for every prefix to be consistent:
        what names an agent (messages, completions, transcript, approvals) goes
        before agent records, and agents in the order they were removed
        (leaves before parents). A removed agent this transition changed
        (closed, then removed by retention) is written as the transition left
        it, so that until its spread delete the store holds it closed, not as it
        was before (live, under a closed parent).
        """
        moved = self.writes[mark:]
        del self.writes[mark:]
        self.spread += [w for w in moved if w[0] != "agents"]
        self.spread += [w for w in moved if w[0] == "agents"]
        if self._removed_unwritten:
            self.writes += [
                ("agents", agent_id.encode(), _encode(record))
                for agent_id, record in self._removed_unwritten.items()
            ]
            self._removed_unwritten = JDict(self._journal)

    def take_spread(self) -> list[Write]:
        """Return and clear the spread writes gathered since the last call."""
        if not self.spread:  # nearly every command: nothing to replace
            return []
        spread: list[Write] = list(self.spread)
        self.spread = JList(self._journal)
        return spread

    # -- agents --------------------------------------------------------------

    def live_children(self, agent_id: str | None) -> AbstractSet[str]:
        """Return the ids of the live children of an agent (None: top-level agents)."""
        return self.children.get(HOST_KEY if agent_id is None else agent_id, _NO_CHILDREN)

    def put_agent(self, record: AgentRecord, *, persist: bool = True) -> AgentRecord:
        """Insert or update an agent, keeping every index in step."""
        agents, key = self.agents, record.id
        # The held record in C (AgentTable.get, a Python call, reads a settled one too).
        old = _dict_get(agents, key)
        if old is None:
            if not agents.settled or key not in agents.settled:  # one the tree never had
                return self._put_new(record, persist)
            old = agents[key]  # a settled one's (read)
        # One journal entry puts back the record, its gathered write and its busy,
        # closed and stored-children entries (each a journaled dict set otherwise: an
        # entry and a frame each per change).
        journal = self._journal
        written = self._agents_written if persist else None
        settled = agents.settled
        if journal.active:
            before = None if written is None else dict.get(written, key)
            path = settled.get(key) if settled else None
            journal.log((_put_back_agent, (self, written, key, old, before, path)))
        if settled:  # a settled agent changed is held in memory from now on
            agents.hold(key)
        dict.__setitem__(agents, key, record)
        state = record.state
        # Unjournaled, as _move_counts: the entry above moves them back.
        move: tuple[str, str, int] | None = (
            None if old.state is state else _MOVES.get((old.state, state))
        )
        if move is None or old.profile != record.profile:  # a close, a reopen, a new profile
            if old.state is not state or old.profile != record.profile:
                _move_counts(self, old, record)
        else:  # a live agent's new state, its profile kept: two counts, maybe its busy entry
            counts = self.state_counts
            was, now, busy = move
            left = _dict_get(counts, was, 0) - 1
            if left > 0:
                _dict_set(counts, was, left)
            else:
                _dict_pop(counts, was, None)
            held = _dict_get(counts, now)
            if held is None:  # a state no agent was in: a new key
                _dict_new(counts, now, 1)
            else:
                _dict_set(counts, now, held + 1)
            if busy:
                if busy > 0:
                    _dict_set(self.busy, key, None)
                else:
                    _dict_pop(self.busy, key, None)
        if state is _CLOSED:
            closed_at = record.closed_at or record.updated_at
            if self.closed.get(key) != closed_at:  # unjournaled: the entry above undoes it
                _dict_set(self.closed, key, closed_at)
        if old.path != record.path:
            self._page_add(record)  # its old key is skipped by the pages (path differs)
        if old.state is not _CLOSED:
            if state is _CLOSED:
                self._unindex_live(record)
        elif state is not _CLOSED:
            _dict_del(self.closed, key)
        # (setdefault first: the record is new to the gathered writes in most commands)
        if written is not None and _dict_new(written, key, record) is not record:
            dict.__setitem__(written, key, record)  # written earlier in the command
        return record

    def _put_new(self, record: AgentRecord, persist: bool) -> AgentRecord:
        """:meth:`put_agent` of an agent the tree does not hold (a spawn's, a fork's).

        Every index is set with the dict's own operations, and one journal entry,
        logged before any of them, undoes them all (:func:`_unput_new`): a spawn makes
        one entry here instead of one per index. The spawn key and the page key,
        journaled on their own, come last, after every change that entry undoes.
        """
        key, state, parent_id = record.id, record.state, record.parent_id
        journal = self._journal
        written = self._agents_written if persist else None
        live = state is not _CLOSED
        children = self.children
        kin = HOST_KEY if parent_id is None else parent_id  # recipient_key, inline
        kids = _dict_get(children, kin) if live else None
        if journal.active:
            journal.log(
                (
                    _unput_new,
                    (
                        self,
                        record,
                        written,
                        None if written is None else _dict_get(written, key),
                        _dict_get(self.live_paths, record.path, _MISSING) if live else None,
                        live and kids is None,
                    ),
                )
            )
        # A key the tree never had (the agent's id) is set with setdefault: a method, where
        # dict.__setitem__ is a slot wrapper called with a tuple of its arguments (a third
        # of the cost); a key that may be there already (a count, a path) is set as ever.
        _dict_new(self.agents, key, record)
        counts = self.state_counts
        count_key = _STATE_KEYS[state]
        count = _dict_get(counts, count_key)
        if count is None:  # no agent in this state (a spawn's running, one at a time)
            _dict_new(counts, count_key, 1)
        else:
            _dict_set(counts, count_key, count + 1)
        if state in BUSY_STATES:
            _dict_new(self.busy, key, None)
        top_of = self.top_of
        if parent_id is None:
            top = key
        else:
            top = _dict_get(top_of, parent_id, parent_id)
            stored = self.stored_children
            _dict_set(stored, parent_id, _dict_get(stored, parent_id, 0) + 1)
        _dict_new(top_of, key, top)
        if live:
            profiles = self.live_profiles
            _dict_set(profiles, record.profile, _dict_get(profiles, record.profile, 0) + 1)
            # A live path is new (a spawn checks it); one held already is set over, as ever.
            if _dict_new(self.live_paths, record.path, key) is not key:
                _dict_set(self.live_paths, record.path, key)
            if kids is None:
                kids = JSet(journal)
                _dict_set(children, kin, kids)
            set.add(kids, key)
            trees = self.tree_count
            count = _dict_get(trees, top)
            if count is None:  # a new top-level agent's tree
                _dict_new(trees, top, 1)
            else:
                _dict_set(trees, top, count + 1)
            _set_attribute(self, "live_count", self.live_count + 1)  # unjournaled (see above)
        else:
            _dict_set(self.closed, key, record.closed_at or record.updated_at)
        if written is not None and _dict_new(written, key, record) is not record:
            _dict_set(written, key, record)  # (never, for a new agent)
        if record.idempotency_key is not None:  # journaled on its own, as the page key
            self.spawn_keys[spawn_key(parent_id, record.idempotency_key)] = key
        self._page_add(record)
        return record

    def _uncount(self, record: AgentRecord) -> None:
        """Take ``record`` out of the counts (and the busy agents); a count that falls to 0
        goes."""
        _step(self.state_counts, _STATE_KEYS[record.state], -1)
        if record.state in BUSY_STATES:
            del self.busy[record.id]
        if record.state is not AgentState.CLOSED:
            _step(self.live_profiles, record.profile, -1)

    def _unindex_live(self, record: AgentRecord) -> None:
        """Take a closing agent out of the live indexes (its path, its parent's live
        children, its tree's count, the live count), with the dicts' own operations
        and one journal entry, logged first, that puts them all back
        (:func:`_reindex_live`), instead of an entry and a journaled call per index."""
        key, path, parent_id = record.id, record.path, record.parent_id
        paths = self.live_paths
        held = _dict_get(paths, path) == key
        kin = HOST_KEY if parent_id is None else parent_id  # recipient_key, inline
        kids = _dict_get(self.children, kin)
        if kids is not None and key not in kids:
            kids = None  # (it is in no set of live children: none to take it from)
        trees, top = self.tree_count, self.top_of[key]
        count = trees[top] - 1  # (what may raise, before the entry: nothing changed then)
        journal = self._journal
        if journal.active:
            journal.log((_reindex_live, (self, record, held, kids)))
        if held:
            _dict_del(paths, path)
        if kids is not None:
            set.discard(kids, key)
            if not kids and kin != HOST_KEY:  # a leaf holds no set: 10,000 closed agents, no sets
                _dict_del(self.children, kin)
        if count:
            _dict_set(trees, top, count)
        else:
            _dict_del(trees, top)
        _set_attribute(self, "live_count", self.live_count - 1)  # unjournaled (see above)

    def is_live(self, agent_id: str) -> bool:
        """Return True if the agent exists and is not closed."""
        record = self.agents.get(agent_id)
        return record is not None and record.state is not AgentState.CLOSED

    def nearest_live_ancestor(self, record: AgentRecord) -> str | None:
        """Return the id of the closest non-closed ancestor, or None for the host."""
        parent_id = record.parent_id
        while parent_id is not None:
            parent = self.agents[parent_id]
            if parent.state is not AgentState.CLOSED:
                return parent_id
            parent_id = parent.parent_id
        return None

    def descendants_postorder(self, agent_id: str) -> list[str]:
        """Return the live subtree below and including ``agent_id``, children first.

        Siblings come in creation order.
        """
        order: list[str] = []
        stack: list[tuple[str, bool]] = [(agent_id, False)]
        children, agents = self.children, self.agents
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            kids = children.get(node)  # live_children's look (a node is an agent, never None)
            if not kids:  # a leaf (most nodes): in the order at once, nothing to sort
                order.append(node)
                continue
            stack.append((node, True))
            for child in sorted(kids, key=lambda c: agents[c].created_at, reverse=True):
                stack.append((child, False))
        return order

    def open_index(self, txn: int) -> OpenIndex:
        """The agents' indexes for the next open, tagged ``txn`` (see
        :mod:`~retinue.actors.tree._open_index`)."""
        return build_open_index(
            txn,
            {key: path for path, key in self.agents.page_keys()},
            top_of=self.top_of,
            children=self.children,
            tree_count=self.tree_count,
            stored_children=self.stored_children,
            state_counts=self.state_counts,
            live_profiles=self.live_profiles,
            busy=self.busy,
            closed=self.closed,
            spawn_keys=self.spawn_keys,
        )

    # -- transcripts -----------------------------------------------------------

    def put_transcript(self, agent_id: str, transcript: bytes) -> None:
        """Store an agent's encoded LLM transcript (it goes with the agent on removal)."""
        # JList.append's work inline (a model step's every command comes through here).
        writes, journal = self.writes, self._journal
        if journal.active:
            journal.log((list.pop, (writes,)))
        list.append(writes, ("transcripts", agent_id.encode(), transcript))

    # -- removal (compaction) -------------------------------------------------------

    def remove_agents(self, agent_ids: Iterable[str], *, generations: int = 0) -> int:
        """Delete closed agents with their messages, completions, transcripts and their
        newest ``generations`` kept generations (``Limits.fork_generations``).

        Returns how many completions went.

        Every index forgets them, dedup keys of their messages included (a
        key deduplicates for as long as its message is retained). The caller
        removes leaves before parents and only agents nobody waits on.
        """
        ordered = list(dict.fromkeys(agent_ids))  # their writes in the order given
        removed = set(ordered)
        completions = 0
        for agent_id in ordered:
            unwritten = self._agents_written.pop(agent_id, None)
            if unwritten is not None:
                self._removed_unwritten[agent_id] = unwritten
            self.writes.append(("agents", agent_id.encode(), None))
            self.writes.append(("transcripts", agent_id.encode(), None))
            newest = self.agents[agent_id].generation if agent_id in self.agents else 0
            for generation in range(max(1, newest - generations), newest + 1):
                self.writes.append(("generations", generation_key(agent_id, generation), None))
            for seq, record in self.mailbox.pop(agent_id, {}).items():
                self.writes.append(("messages", message_key(agent_id, seq), None))
                message = record.message
                if message.dedup_key is not None:
                    self._forget_dedup((message.sender_id, message.dedup_key), agent_id)
            done = dict(self.known(agent_id))  # the stored ones too: all go
            self._written(agent_id)
            self.completions.pop(agent_id, None)
            self.shares.partial.discard(agent_id)
            self.shares.swept.discard(agent_id)
            for generation, stored in done.items():
                stored_key = completion_key(agent_id, generation)
                self.writes.append(("completions", stored_key, None))
                if not stored.delivered:
                    self.writes.append(("undelivered", stored_key, None))
            completions += len(done)
            self.undelivered.pop(agent_id, None)
            self.pending.pop(agent_id, None)  # as a recipient: rerouted when it closed
            self.top_of.pop(agent_id, None)
            self.children.pop(agent_id, None)
            gone = self.agents.pop(agent_id, None)
            if gone is not None:
                self._uncount(gone)
                self.closed.pop(agent_id, None)
                if gone.parent_id is not None:
                    _step(self.stored_children, gone.parent_id, -1)
            if gone is not None and gone.idempotency_key is not None:
                key = spawn_key(gone.parent_id, gone.idempotency_key)
                if self.spawn_keys.get(key) == agent_id:
                    del self.spawn_keys[key]
        self._page_gone(len(ordered))
        if removed:  # their read messages go with them
            kept: deque[ReadEntry] = JDeque(self._journal)
            for entry in self.read_log:
                if entry.recipient_id in removed:
                    self.writes.append(
                        ("messages", message_key(entry.recipient_id, entry.seq), None)
                    )
                    self._forget_dedup(entry.dedup, entry.recipient_id)
                else:
                    kept.append(entry)
            self.read_log = kept
        return completions

    # -- leases ------------------------------------------------------------------

    def put_lease(self, lease: str, completion: Completion) -> None:
        """Store that a host wait under ``lease`` took ``completion``."""
        self.leases[lease] = completion
        self.writes.append(("leases", lease.encode(), _encode(completion)))

    def drop_lease(self, lease: str) -> Completion | None:
        """Forget a lease; return the completion it held (None: no such lease)."""
        completion = self.leases.pop(lease, None)
        if completion is not None:
            self.writes.append(("leases", lease.encode(), None))
        return completion

    # -- loading: what a crash leaves ---------------------------------------------------

    def load(
        self,
        agents: Iterable[AgentRecord],
        messages: Iterable[MessageRecord],
        completions: Iterable[CompletionRecord],
        leases: Iterable[tuple[str, Completion]] = (),
        *,
        partial: bool = False,
        placed: Placed | None = None,
    ) -> None:
        """Fill an empty tree from restored records (parents before children).

        Inputs that a turn still ``running`` in the store had received (it was
        killed by a crash before it settled) become unread and undelivered
        again, so the next turn gets them; those rewrites land in ``writes``.
        ``partial``: ``completions`` are the undelivered ones only, the others
        stay in the store (``stored``, which must be set) until asked for; a
        turn to replay reads them all once to find what it had received.
        ``placed``: ``agents`` as restore's walk indexed them (see
        :class:`~retinue.persistence.placed.Placed`; None: indexed here).

        Raises:
            StoreCorrupted, StoreError: ``partial`` and a replay's read failed.
        """
        self.paging.stale = True  # one sort at the first page, not a key per agent loaded
        self._load_agents(agents, placed)
        # Only a turn still running in the store held inputs to replay: with none (a
        # store closed cleanly, or idle), no input is looked at for it.
        replays = self.state_counts.get(AgentState.RUNNING.value, 0) > 0
        ordered = sorted(
            (self._replay_message(m) for m in messages) if replays else messages,
            key=lambda m: (m.read, m.read_at or 0.0, m.seq),
        )
        for message in ordered:
            self.seq = max(self.seq, message.seq)
            self.add_message(message, persist=False)
        if replays and partial:
            assert self.stored is not None
            completions = [*completions, *self._held_by_running(self.stored.every())]
        ordered_completions = sorted(completions, key=attrgetter("seq"))
        if ordered_completions:
            self.seq = max(self.seq, ordered_completions[-1].seq)
        self._load_completions(
            (self._replay_completion(c) for c in ordered_completions)
            if replays
            else ordered_completions,
            partial=partial,
        )
        self.leases.update(leases)

    def consume_inputs(
        self, recipient_id: str, generation: int, inputs: Iterable[Message | Completion]
    ) -> None:
        """The turn ``generation`` of ``recipient_id`` stored ``inputs`` in its transcript.

        Their records lose the turn's tag: a crash that kills the turn no
        longer hands them to the next one (the transcript has them).
        """
        for event in inputs:
            done = event if isinstance(event, Completion) else event.completion
            if done is not None:
                self._untag_delivered(done, generation)
            elif isinstance(event, Message):
                self._untag_read(recipient_id, event, generation)

    def held_by_running_turn(self, recipient_id: str | None, generation: int) -> bool:
        """True if the running turn ``generation`` of ``recipient_id`` received the input.

        Such inputs are replayed to the next turn if a crash kills this one.
        """
        agent = None if recipient_id is None else self.agents.get(recipient_id)
        return (
            agent is not None
            and generation > 0
            and agent.state is AgentState.RUNNING
            and agent.generation == generation
        )

    def _replay_message(self, record: MessageRecord) -> MessageRecord:
        message = record.message
        if not (
            record.read and self.held_by_running_turn(message.recipient_id, record.read_generation)
        ):
            return record
        record = msgspec.structs.replace(record, read=False, read_at=None, read_generation=0)
        self.writes.append(
            ("messages", message_key(message.recipient_id, record.seq), _encode(record))
        )
        return record

    def _held_by_running(self, stored: Iterable[CompletionRecord]) -> list[CompletionRecord]:
        """Return the delivered completions of restored agents a running turn received."""
        return [
            record
            for record in stored
            if record.delivered
            and record.completion.agent_id in self.agents
            and self.held_by_running_turn(record.recipient_id, record.delivered_generation)
        ]

    def _replay_completion(self, record: CompletionRecord) -> CompletionRecord:
        if not (
            record.delivered
            and self.held_by_running_turn(record.recipient_id, record.delivered_generation)
        ):
            return record
        record = msgspec.structs.replace(record, delivered=False, delivered_generation=0)
        self._write_completion(record, index=True)
        return record


def load_tree(
    snapshot: Snapshot,
    depth_cap: int | None,
    stored: StoredCompletions | None = None,
    *,
    settle: bool = False,
    index: OpenIndex | None = None,
) -> tuple[Tree, Restored]:
    """Restore ``snapshot`` (see :func:`~retinue.persistence.restore.restore`) into a tree.

    The one loader from a store snapshot to the supervisor's picture of it,
    for the writer's boot and a reader's every read. Rewritten records are in
    the returned ``Restored`` (a writer stores them; a reader has them as they
    were restored). ``stored``: the tree reads the completions the snapshot
    left out (``Snapshot.partial``) from there when asked for; without it,
    the tree knows only the snapshot's. ``settle`` (with ``stored``; the
    store's own writer, whose store changes only as its tree does): the agents
    that are not busy stay in the store, their records read when asked for
    (:class:`~retinue.actors.tree._agents.AgentTable`), and ``Restored.agents``
    are places for most of them (``Restored.places``). ``index`` (with
    ``settle``): the agents are as a clean shutdown's index has them
    (:mod:`~retinue.actors.tree._open_index`), not read from the snapshot,
    which need not hold them; ``Restored.agents`` are the busy ones.

    Raises:
        StoreCorrupted, StoreError: a replay's read of ``stored``, or a busy agent's
            read with ``index``, failed.
    """
    with collector_paused():
        settle = settle and stored is not None
        tree = Tree()
        tree.stored = stored
        if settle and index is not None:  # a clean shutdown's index: no agent walked
            assert stored is not None
            restored = restore_around(snapshot, index.paths)
            restored.agents = [stored.agent(key) for key in index.busy]
            placed: Placed | None = index.placed(restored.agents)
            restored.placed = placed
            paths = index.paths
        else:
            restored = restore(snapshot, depth_cap, index=True, places=settle)
            placed = restored.placed
            if settle:
                assert placed is not None
                paths = dict(zip(placed.agents, map(_PATH, placed.agents.values()), strict=True))
        if settle:  # what nothing runs for stays in the store until asked for
            assert stored is not None and placed is not None  # (places restore left too)
            held = {*placed.busy, *(record.id for record in restored.rewritten)}
            for key in held:
                del paths[key]
            placed.agents = {key: placed.agents[key] for key in held}
            tree.agents.settle(stored, paths)
        tree.load(
            restored.agents,
            restored.messages,
            restored.completions,
            restored.leases,
            partial=snapshot.partial and stored is not None,
            placed=placed,
        )
    return tree, restored
