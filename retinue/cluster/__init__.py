"""Past one machine: top-level trees sharded over Ray actors (``pip install 'retinue[ray]'``).

:class:`Cluster` is a host face with the calls a host makes on a
:class:`~retinue.runtime.Runtime`, sync and ``*_async``, over shards that are
Ray actors, each hosting one ordinary ``Runtime`` over its own store. A
top-level agent and its whole tree live on one shard; agent ids carry their
shard (``s<k>-...``); a path goes through the cluster's directory. Mutating
calls carry request ids the shards record with their answers, and waits
hand completions out under leases the face acknowledges, so nothing
acknowledged is lost or received twice across the wire.

:func:`start_local_ray` is the one way retinue starts a Ray on this machine:
loopback only, no dashboard, no usage stats, stale state removed.

Importing this package does not import Ray; :meth:`Cluster.open` does.

The rest of retinue and users may use the names in ``__all__``. The public
modules are the parts a test or a tool may drive on their own: the wire
(:mod:`~retinue.cluster.wire`, :mod:`~retinue.cluster.eventwire`), cluster ids
(:mod:`~retinue.cluster.ids`), a shard's core and request log
(:mod:`~retinue.cluster.shard`, :mod:`~retinue.cluster.requests`), the
directory, profiles as data (:mod:`~retinue.cluster.specs`), the provider-limit
leases (:mod:`~retinue.cluster.leasebook`, :mod:`~retinue.cluster.limits`) and
the local Ray (:mod:`~retinue.cluster.local`, :mod:`~retinue.cluster.loopback`).
The ``_x`` modules are the face's own: ``Cluster`` (``_face``), its routed
operations (``_router``), the Ray calls with retries (``_transport``), the open
(``_startup``), the Ray actors (``_actors``), event streams (``_streaming``, a
shard's ``_shardstreams``) and the reaper of a local Ray (``_reaper``).
"""

from __future__ import annotations

from retinue.cluster._face import Cluster
from retinue.cluster._transport import OutboxFull
from retinue.cluster.local import LocalRay, loopback_environment, start_local_ray

__all__ = ["Cluster", "LocalRay", "OutboxFull", "loopback_environment", "start_local_ray"]
