"""The cluster face's plumbing: the transport and router it runs its calls on, and test hooks.

:class:`FaceBase` is the first base of :class:`~retinue.cluster.face.Cluster`:
``_ops`` (the transport and router, or ``RuntimeClosed``), ``_run`` and
``_run_async`` (a router operation from a thread or an event loop), which
the face and its mixins (approvals, streams) call; and the hooks the tests
and the crash loop use (``faults``, ``set_fault``, ``ping``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from retinue.cluster import wire as w
from retinue.cluster.router import Router
from retinue.cluster.transport import Faults, One, Op, Transport
from retinue.errors import RuntimeClosed

__all__ = ["FaceBase"]


class FaceBase:
    """What the face's calls run on; the face sets these attributes in ``Cluster.open``."""

    shards: int
    _lock: threading.Lock
    _closed: bool
    _transport: Transport | None
    _router: Router | None

    def _ops(self) -> tuple[Transport, Router]:
        with self._lock:
            if self._closed or self._transport is None or self._router is None:
                raise RuntimeClosed("the cluster is closed; open it again to continue")
            return self._transport, self._router

    def _run(self, operation: str, *args: Any) -> Any:
        """Run the router's ``operation`` from this thread."""
        transport, router = self._ops()
        return transport.run(getattr(router, operation)(*args))

    async def _run_async(self, operation: str, *args: Any) -> Any:
        """Run the router's ``operation`` on the running event loop."""
        transport, router = self._ops()
        return await transport.run_async(getattr(router, operation)(*args))

    @property
    def faults(self) -> Faults:
        """Lost replies to inject, by call tag (for tests and the crash loop)."""
        transport, _ = self._ops()
        return transport.faults

    def set_fault(self, shard: int, point: str, calls: Iterable[str], times: int = 1) -> None:
        """Make shard ``shard`` kill its own process at ``point`` (for tests; see the wire)."""
        transport, _ = self._ops()
        transport.run(_call(One(shard, w.encode_call(w.SetFault(point, tuple(calls), times)))))

    def ping(self) -> list[w.Pong]:
        """Return what every shard says about itself (pid, node, leases held)."""
        transport, _ = self._ops()
        ping = w.encode_call(w.Ping())
        return [
            w.decode_reply(transport.run(_call(One(k, ping, "ping"))), w.Pong)
            for k in range(self.shards)
        ]


def _call(step: One) -> Op[bytes]:
    """An operation of one step: the raw reply."""
    raw: bytes = yield step
    return raw
