"""``retinue web``: the live view of a store in a browser (extra: ``pip install 'retinue[web]'``).

:func:`serve` serves the view of an open runtime (a writer, or a read-only
runtime beside a writer in another process) on a background thread and
returns a :class:`WebServer` to stop; :func:`start_web` does the same from a
``HOST:PORT`` text (``retinue run --web``); :func:`create_app` is the ASGI app
itself, over a :class:`LiveTree`, for a host that runs its own ASGI server.
Every bound is a :class:`WebOptions` field. With ``actions=True`` the page
can approve, deny, interrupt, resume and close (:class:`Actions`: through
the writer in process, :class:`RuntimeActions`; a read-only view refuses
each, :class:`WriterNeeded`), every action a ``POST`` with its page's token.
The page is static HTML, scripts and style shipped in the package (no build
step); it builds its DOM with ``textContent`` only, so agent output is shown
as text.
"""

from __future__ import annotations

from retinue.errors import ExtraNotInstalled

try:
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ExtraNotInstalled("web", "retinue web", exc.name or "starlette") from None

from retinue.web.actions import ActionResult, Actions, RuntimeActions, WriterNeeded
from retinue.web.app import create_app
from retinue.web.live import LiveTree
from retinue.web.options import WebOptions
from retinue.web.server import WebServer, parse_address, serve, start_web

__all__ = [
    "ActionResult",
    "Actions",
    "LiveTree",
    "RuntimeActions",
    "WebOptions",
    "WebServer",
    "WriterNeeded",
    "create_app",
    "parse_address",
    "serve",
    "start_web",
]
