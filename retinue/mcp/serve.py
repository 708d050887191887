"""``retinue mcp``: open a store (as its writer) and serve it over stdio or streamable HTTP.

stdio is the default: the MCP client starts ``retinue mcp`` and talks over
its stdin and stdout. The server answers the ``initialize`` handshake before
it opens the store (which may import litellm and restore a large tree: see
:mod:`retinue.mcp.opening`); a store another writer holds is refused before
the handshake. When the client goes away (stdin closes) the server shuts the
runtime down, so running agents are saved ``interrupted`` and a new client
resumes them. With ``--http`` the store is opened first, the server applies
the server policy (:mod:`retinue.serving`) to every request, and it outlives
its clients.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from retinue.errors import ConfigurationError
from retinue.mcp.opening import Opening, check_lease_room, release_leftover_leases
from retinue.mcp.options import TOKEN_ENV, listen_address
from retinue.mcp.waits import SESSION_HEADER
from retinue.persistence.lock import WriterLock
from retinue.protocol.limits import Limits
from retinue.runtime import Runtime
from retinue.serving import Guard, ServerPolicy, bound_address, listen
from retinue.team import Team, load_team

__all__ = ["RUN_FILE", "serve"]

RUN_FILE = "retinue-run.json"
"""What ``retinue run`` writes next to a store: the team ``retinue mcp`` uses without --team."""


def _team(store: Path, team_file: str | None) -> Team | None:
    if team_file is not None:
        return load_team(team_file)
    try:
        record = json.loads((store / RUN_FILE).read_text(encoding="utf-8"))
        return Team.from_toml(record["team_toml"], source=record["team"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _stop_on_sigterm() -> None:
    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)  # unwinds into the runtime's shutdown

    signal.signal(signal.SIGTERM, stop)


def _opener(store: Path, team: Team | None, limits: Limits) -> Any:
    """The open of the served runtime: the team's profiles, then the leftover leases back."""
    kwargs: dict[str, Any] = {"team": team} if team is not None else {"profiles": []}
    if team is not None:
        kwargs["durability"] = team.defaults.durability

    def open_runtime() -> Runtime:
        rt = Runtime.open(store, limits=limits, **kwargs)
        try:
            check_lease_room(rt)
            release_leftover_leases(rt)
        except BaseException:
            rt.shutdown()
            raise
        return rt

    return open_runtime


def _refuse_if_locked(store: Path) -> None:
    """Refuse a store another writer holds now, before the handshake (the open says it later).

    Raises:
        StoreLocked: another process holds the store's writer lock.
    """
    if (store / "data.mdb").exists():
        WriterLock(store).release()


def serve(args: argparse.Namespace, store: Path) -> int:
    """Serve ``store`` as ``args`` say (``team``, ``http``, ``host``, ``token``,
    ``allowed_host``); return the exit code.

    Raises:
        ConfigurationError: the mcp extra is missing, or a bad listening address.
        InvalidArgument: an unsafe bind (see :mod:`retinue.serving`).
        TeamFileError, StoreLocked, StoreError: as ``Runtime.open`` raises.
    """
    try:
        import anyio

        from retinue.mcp.server import build_server
    except ImportError:
        raise ConfigurationError(
            "retinue mcp needs the mcp extra, which is not installed: pip install 'retinue[mcp]'"
        ) from None
    from retinue.mcp.tools import Tools

    token = getattr(args, "token", None) or os.environ.get(TOKEN_ENV) or None
    allowed = list(getattr(args, "allowed_host", None) or ())
    policy = None
    if args.http is not None:
        try:
            host, port = listen_address(args.http, args.host, token)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        source = f"${TOKEN_ENV} or --token"
        policy = ServerPolicy.for_bind(
            host, port, token=token, allowed_hosts=allowed, token_source=source
        )
    elif args.host is not None or allowed:
        raise ConfigurationError("--host and --allowed-host need --http [HOST:]PORT")
    team = _team(store, args.team)
    limits = team.limits if team is not None else Limits.from_env()
    opener = _opener(store, team, limits)
    _stop_on_sigterm()
    if policy is None:
        _refuse_if_locked(store)
        opening = Opening(opener)
        try:
            server = build_server(Tools(opening, team, limits))
            server.middleware.append(opening.middleware)
            anyio.run(server.run_stdio_async)
        except KeyboardInterrupt:
            pass
        finally:
            opening.shutdown()
        return 0
    return _serve_http(build_server, Tools, opener, team, limits, policy)


def _serve_http(
    build_server: Any, tools: Any, opener: Any, team: Team | None, limits: Limits, policy: Any
) -> int:
    """Bind, open the store, then serve streamable HTTP behind the policy's guard until stopped."""
    import anyio
    from mcp.server.transport_security import TransportSecuritySettings

    sock = listen(policy.host, policy.port, hint="choose another --http port (0 picks a free one)")
    try:
        bound, port = bound_address(sock)
        policy = dataclasses.replace(policy, host=bound, port=port)
        rt = opener()
    except BaseException:
        sock.close()
        raise
    try:
        served = tools(rt, team, limits)
        server = build_server(served)
        # The guard checks Host and Origin for every loopback alias; the SDK's own check
        # knows three strings, so it is off.
        unguarded = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        app = server.streamable_http_app(host=policy.host, transport_security=unguarded)
        print(
            f"retinue mcp: serving {policy.url('/mcp')} (listening on {policy.describe()}"
            f"{'; bearer token required' if policy.token else ''})",
            file=sys.stderr,
            flush=True,
        )
        anyio.run(_run_uvicorn, Guard(_confirm_on_session_end(app, served), policy), sock)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        rt.shutdown()
    return 0


def _confirm_on_session_end(app: Any, tools: Any) -> Any:
    """``app``, with a session's orderly end (its ``DELETE``) confirming its waits' answers."""

    async def ended(scope: Any, receive: Any, send: Any) -> None:
        session = None
        if scope.get("type") == "http" and scope.get("method") == "DELETE":
            raw = dict(scope.get("headers") or ()).get(SESSION_HEADER.encode())
            session = raw.decode("latin-1") if raw else None
        await app(scope, receive, send)
        if session is not None:
            await tools.confirm(session)

    return ended


async def _run_uvicorn(app: Any, sock: Any) -> None:
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])
