"""``retinue mcp``: open a store (as its writer) and serve it over stdio or streamable HTTP.

stdio is the default: the MCP client starts ``retinue mcp`` and talks over
its stdin and stdout; when the client goes away (stdin closes) the server
shuts the runtime down, so running agents are saved ``interrupted`` and a
new client resumes them. With ``--http`` the server outlives its clients.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from retinue.errors import ConfigurationError
from retinue.mcp.options import TOKEN_ENV, listen_address
from retinue.runtime import Runtime
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


def serve(args: argparse.Namespace, store: Path) -> int:
    """Serve ``store`` as ``args`` say (``team``, ``http``, ``host``); return the exit code.

    Raises:
        ConfigurationError: the mcp extra is missing, or a bad listening address.
        TeamFileError, StoreLocked, StoreError: as ``Runtime.open`` raises.
    """
    try:
        import anyio

        from retinue.mcp.server import build_server, with_bearer_token
    except ImportError:
        raise ConfigurationError(
            "retinue mcp needs the mcp extra, which is not installed: pip install 'retinue[mcp]'"
        ) from None
    from retinue.mcp.tools import Tools

    token = os.environ.get(TOKEN_ENV) or None
    address = None
    if args.http is not None:
        try:
            address = listen_address(args.http, args.host, token)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
    elif args.host is not None:
        raise ConfigurationError("--host needs --http [HOST:]PORT")
    team = _team(store, args.team)
    kwargs: dict[str, Any] = {"team": team} if team is not None else {"profiles": []}
    if team is not None:
        kwargs["durability"] = team.defaults.durability
    rt = Runtime.open(store, **kwargs)
    _stop_on_sigterm()
    try:
        server = build_server(Tools(rt, team))
        if address is None:
            anyio.run(server.run_stdio_async)
        else:
            app = server.streamable_http_app(host=address[0])
            anyio.run(_serve_http, with_bearer_token(app, token) if token else app, *address)
    except KeyboardInterrupt:
        pass
    finally:
        rt.shutdown()
    return 0


async def _serve_http(app: Any, host: str, port: int) -> None:
    import socket

    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound = sock.getsockname()[1]
    print(f"retinue mcp: serving http://{host}:{bound}/mcp", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        sock.close()
