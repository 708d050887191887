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
    return f"{_random.getrandbits(128):032x}"
