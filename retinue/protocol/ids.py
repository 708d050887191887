"""Agent ids: 128 random bits as 32 lowercase hex digits, made without a system call.

``uuid.uuid4()`` reads ``os.urandom`` on every call; under many threads that
system call was a third of the supervisor's time per spawn. Ids need to be
unique, not secret (they are references within one store, and every call is
checked against the tree), so a Mersenne Twister seeded from ``os.urandom``
(and reseeded in a forked child) makes them at a fraction of the cost.
"""

from __future__ import annotations

import os
import random

__all__ = ["new_id"]

_random = random.Random(os.urandom(32))


def _reseed() -> None:
    _random.seed(os.urandom(32))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed)


def new_id() -> str:
    """Return a fresh id: 32 lowercase hex digits (128 random bits)."""
    # The 16 bytes' hex: the same 32 digits as ``f"{n:032x}"``, without int.__format__'s
    # format-spec parse (a third of the cost).
    return _random.getrandbits(128).to_bytes(16, "big").hex()
