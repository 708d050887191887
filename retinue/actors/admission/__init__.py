"""Admission of model calls under provider limits, at run time.

``ProviderGate`` (one per runtime writer that has provider limits) drives the
pure admission controller (:mod:`retinue.protocol.provider_limits`) on the
runtime's event loop; ``Admission`` is what the LLM layer asks of a gate
(the cluster's leased gate is another); ``SharedCapacity`` is what a gate
shares with other processes (a cluster's lease, :mod:`retinue.cluster.limits`);
``CallOwner`` names a call's agent.

The rest of the package may use the names in ``__all__``; the modules are private.
"""

from __future__ import annotations

from retinue.actors.admission._gate import (
    Admission,
    CallOwner,
    ProviderGate,
    SharedCapacity,
    backoff_event,
    resolve,
    wall_clock,
)

__all__ = [
    "Admission",
    "CallOwner",
    "ProviderGate",
    "SharedCapacity",
    "backoff_event",
    "resolve",
    "wall_clock",
]
