"""The system: start-up and tear-down of a runtime's parts, and the read-only runtime.

``System`` starts a writer (``_boot``: profiles, restore, load, recover, the
supervisor actor) and closes it in order; ``ReadOnlySystem`` serves reads
beside a writer from store snapshots (``_reader``, ``_agent_read``).

The rest of the package may use the names in ``__all__``; the modules are private.
"""

from __future__ import annotations

from retinue.actors.system._boot import profile_table
from retinue.actors.system._readonly import ReadOnlySystem
from retinue.actors.system._system import System

__all__ = ["ReadOnlySystem", "System", "profile_table"]
