"""The tree: the supervisor's in-memory picture of agents, mailboxes and completions.

``Tree`` owns every index (agents, paths, children, mailboxes, completions,
leases, spawn keys; the delivered completions an open left in the store are read
through ``StoredCompletions`` when asked for) and gathers the store writes of each change; it is
journaled, so a failed command leaves it as it found it. ``load_tree`` fills
one from a store snapshot (or a clean shutdown's index of its agents:
``write_open_index``, ``read_open_index``); ``compact`` and ``Retention`` choose what retention
removes. ``_journal`` is the journal that makes every supervisor command one
transaction (its containers hold the tree's and every part's state); the
package publishes it as ``retinue.actors.Journal`` and friends, and the
tree's modules import it directly (the package imports it first).

The rest of the package may use the names in ``__all__``; the modules are private.
"""

from __future__ import annotations

from retinue.actors.tree._compaction import Retention, compact
from retinue.actors.tree._keys import HOST_KEY, spawn_key
from retinue.actors.tree._loading import collector_paused
from retinue.actors.tree._open_index import (
    OPEN_INDEX_DATABASE,
    OPEN_INDEX_KEY,
    OpenIndex,
    read_open_index,
    write_open_index,
)
from retinue.actors.tree._stored import StoredCompletions
from retinue.actors.tree._tree import Tree, load_tree

__all__ = [
    "HOST_KEY",
    "OPEN_INDEX_DATABASE",
    "OPEN_INDEX_KEY",
    "OpenIndex",
    "Retention",
    "StoredCompletions",
    "Tree",
    "collector_paused",
    "compact",
    "load_tree",
    "read_open_index",
    "spawn_key",
    "write_open_index",
]
