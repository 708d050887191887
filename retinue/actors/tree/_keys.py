"""How the tree's indexes are keyed: the host's key, recipients, spawn keys, read messages.

Shared by :class:`~retinue.actors.tree.Tree` and the index families it is made
of (:mod:`~retinue.actors.tree._mailbox`, :mod:`~retinue.actors.tree._completions`),
and by the parts that read those indexes.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["HOST_KEY", "ReadEntry", "recipient_key", "spawn_key"]

HOST_KEY = ""
"""The host's key in the tree's indexes (its mailbox, pending completions, top-level children)."""


class ReadEntry(NamedTuple):
    """A read message still stored, in the order messages were read."""

    read_at: float
    recipient_id: str
    seq: int
    dedup: tuple[str, str] | None  # (sender id, dedup key)
    generation: int  # of the turn that read it


def recipient_key(recipient_id: str | None) -> str:
    """Map a stored recipient (None for the host) to its index key."""
    return HOST_KEY if recipient_id is None else recipient_id


def spawn_key(parent_id: str | None, key: str) -> tuple[str, str]:
    """Return the index key of a spawn idempotency ``key`` under a parent (None: the host)."""
    return (recipient_key(parent_id), key)
