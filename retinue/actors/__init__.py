"""The runtime below its facade: pykka actors, the supervisor, turns and the tree.

Folders by concept, lowest first (a folder imports only from those before it):

- ``_profile``: ``Profile``; the journal that makes every supervisor command
  one transaction lives in ``tree/_journal.py`` (the tree's indexes are its
  first users) and is published here;
- ``events/``: the event bus, turns' live watches, streams;
- ``commands/``: the closed union of typed commands the supervisor serves;
- ``calls/``: the engine, channel and reply every call goes through;
- ``tree/``: the in-memory tree and its indexes, compaction;
- ``turns/``: the turn a runner sees, its control, the agent actors and executors;
- ``supervisor/``: the supervisor, its parts and its rescue of failed commands;
- ``system/``: start-up, tear-down, the read-only runtime.

Each folder's ``__init__`` names what the rest of the package may use; its
modules are private (``_x.py``).
"""

from __future__ import annotations

from retinue.actors._profile import Profile
from retinue.actors.tree._journal import (
    FaultPlan,
    InjectedFault,
    JDeque,
    JDict,
    JList,
    Journal,
    Journaled,
    JSet,
    claim,
    snapshot,
)

__all__ = [
    "FaultPlan",
    "InjectedFault",
    "JDeque",
    "JDict",
    "JList",
    "JSet",
    "Journal",
    "Journaled",
    "Profile",
    "claim",
    "snapshot",
]
