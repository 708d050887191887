"""The tree's agent indexes kept by a clean shutdown, so that the next open walks no agent.

An open of a big store spends most of its time on the agents: reading every
record, decoding where each sits and walking the tree top-down to rebuild the
indexes (paths, children, tree tops, counts, spawn keys). A writer that shuts
down cleanly has those indexes in memory and the store exactly in step with
them, so it writes them as one :class:`OpenIndex` to the ``open_index``
database, in the shutdown's last commit, tagged with that commit's LMDB
transaction id. The next open takes it only if the store's last transaction is
still that one (:func:`read_open_index`): any later write, by this runtime, a
crash's recovery or any other LMDB writer, moves the id on, and a crash leaves
no fresh index; either way the open walks the agents as always. The open
reads the busy agents' records (few after a clean shutdown) and leaves every
other agent's in the store (:class:`~retinue.actors.tree._agents.AgentTable`),
and its first commit deletes the index, so the file holds it only while the
store is closed.

An index is written for a tree of at least :data:`OPEN_INDEX_AT` agents
(below that the walk costs milliseconds), and used only if no agent is deeper
than the open's depth cap (a smaller cap drops agents: the walk says which).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from retinue.actors.tree._keys import HOST_KEY
from retinue.persistence.placed import Placed
from retinue.persistence.store import Store
from retinue.protocol import paths
from retinue.protocol.messages import AgentState
from retinue.protocol.records import AgentRecord

__all__ = [
    "OPEN_INDEX_AT",
    "OPEN_INDEX_DATABASE",
    "OPEN_INDEX_KEY",
    "OpenIndex",
    "build_open_index",
    "read_open_index",
    "write_open_index",
]

OPEN_INDEX_AT = 10_000
"""The fewest agents whose tree a clean shutdown keeps an index of."""

OPEN_INDEX_DATABASE = "open_index"
OPEN_INDEX_KEY = b"tree"
_VERSION = 1


class OpenIndex(msgspec.Struct, array_like=True, gc=False):
    """The tree's agent indexes as a clean shutdown left them (see the module docstring).

    ``paths`` has every agent (id -> path); the others are the tree's indexes
    of the same names, host keys as ``HOST_KEY``; ``spawn_keys`` are
    ``(parent key, key, agent id)``.
    """

    version: int
    txn: int
    max_depth: int
    paths: dict[str, str]
    top_of: dict[str, str]
    live_kids: dict[str, list[str]]
    live_per_tree: dict[str, int]
    stored_children: dict[str, int]
    states: dict[str, int]
    live_profiles: dict[str, int]
    busy: list[str]
    closed: dict[str, float]
    spawn_keys: list[tuple[str, str, str]]

    def current(self, store: Store) -> bool:
        """True while ``store``'s last transaction is the one that wrote this index."""
        return self.txn == int(store.env.info()["last_txnid"])

    def placed(self, busy: list[AgentRecord]) -> Placed:
        """The indexes as an open's walk would have placed them, ``busy`` their records."""
        closed = self.closed
        return Placed(
            agents={record.id: record for record in busy},
            top_of=self.top_of,
            live_paths={path: key for key, path in self.paths.items() if key not in closed},
            live_kids={
                (None if key == HOST_KEY else key): kids for key, kids in self.live_kids.items()
            },
            live_per_tree=self.live_per_tree,
            stored_children=self.stored_children,
            states={AgentState(state): count for state, count in self.states.items()},
            live_profiles=self.live_profiles,
            busy=dict.fromkeys(self.busy),
            closed=closed,
            spawn_keys={
                (None if parent == HOST_KEY else parent, key): agent_id
                for parent, key, agent_id in self.spawn_keys
            },
        )


_decode = msgspec.msgpack.Decoder(OpenIndex).decode
_encode = msgspec.msgpack.Encoder().encode


def write_open_index(store: Store, agents: int, index: Callable[[int], OpenIndex]) -> bool:
    """Write a tree's index in a commit of its own, tagged with that commit's id.

    ``agents``: how many agents the tree has (under :data:`OPEN_INDEX_AT` it
    gets no index); ``index(txn)``: its index tagged ``txn``
    (:meth:`Tree.open_index <retinue.actors.tree.Tree.open_index>`). For the
    tree of a stopped supervisor (nothing changes it) whose every change was
    submitted. Returns whether an index was written.

    Raises:
        StoreError: the commit failed (the next open then walks the agents).
    """
    if agents < OPEN_INDEX_AT:
        return False
    store.flush()  # every transition committed: the next commit is the index's
    made = index(int(store.env.info()["last_txnid"]) + 1)
    store.write_now([(OPEN_INDEX_DATABASE, OPEN_INDEX_KEY, _encode(made))])
    return True


def build_open_index(
    txn: int,
    every: dict[str, str],
    *,
    top_of: dict[str, str],
    children: dict[str, set[str]],
    tree_count: dict[str, int],
    stored_children: dict[str, int],
    state_counts: dict[str, int],
    live_profiles: dict[str, int],
    busy: dict[str, None],
    closed: dict[str, float],
    spawn_keys: dict[tuple[str, str], str],
) -> OpenIndex:
    """An index tagged ``txn`` of a tree whose agents' paths are ``every`` (id -> path)
    and whose indexes are the rest (the tree's containers of the same names)."""
    return OpenIndex(
        version=_VERSION,
        txn=txn,
        max_depth=max(path.count("/") for path in every.values()) - paths.ROOT.count("/"),
        paths=every,
        top_of=dict(top_of),
        live_kids={key: list(kids) for key, kids in children.items() if kids},
        live_per_tree=dict(tree_count),
        stored_children=dict(stored_children),
        states=dict(state_counts),
        live_profiles=dict(live_profiles),
        busy=list(busy),
        closed=dict(closed),
        spawn_keys=[(parent, key, agent_id) for (parent, key), agent_id in spawn_keys.items()],
    )


def read_open_index(store: Store, depth_cap: int | None) -> OpenIndex | None:
    """Return the index a clean shutdown left, if the store is still as it left it.

    None: there is none, it does not decode (a newer or damaged one), a
    transaction came after it, or an agent is deeper than ``depth_cap``.

    Raises:
        StoreCorrupted, StoreError: the read failed.
    """
    raw = store.get(OPEN_INDEX_DATABASE, OPEN_INDEX_KEY)
    if raw is None:
        return None
    try:
        index = _decode(raw)
    except msgspec.DecodeError:
        return None
    if (
        index.version != _VERSION
        or not index.current(store)
        or (depth_cap is not None and index.max_depth > depth_cap)
    ):
        return None
    return index
