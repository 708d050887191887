"""Each tool of a server's listing checked on its own, before the SDK's client reads the listing.

The SDK's client checks a ``tools/list`` answer as a whole: one tool a
third-party server describes badly (``"inputSchema": {}``, with no
``"type": "object"``) fails the listing, and with it the whole server.
:class:`ListingScreen` sits between the transport and the client: it notes
the ids of the ``initialize`` and ``tools/list`` requests going out, reads
the protocol version the server answers ``initialize`` with, and takes out
of each ``tools/list`` answer every tool that the SDK's own check of that
version refuses, keeping why (:meth:`ListingScreen.take_refused`). The other
tools reach the client as the server sent them. Needs the ``mcp`` extra.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from mcp.shared.message import SessionMessage
from mcp_types import methods
from pydantic import ValidationError

from retinue.protocol.text import truncate_utf8

__all__ = ["ListingScreen"]

_DEFAULT_VERSION = "2025-11-25"
_REASON_BYTES = 300


def _why(error: ValidationError) -> str:
    """The first complaint of the SDK's check of one tool, as ``inputSchema.type: Field
    required``."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"][2:])  # past ("tools", 0)
    text = f"{where}: {first['msg']}" if where else str(first["msg"])
    return truncate_utf8(text, _REASON_BYTES)[0]


class _Read:
    """The client's read stream: the transport's, with listings screened."""

    def __init__(self, inner: Any, screen: ListingScreen) -> None:
        self._inner = inner
        self._screen = screen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # last_context and the like

    async def receive(self) -> Any:
        return self._screen.incoming(await self._inner.receive())

    def __aiter__(self) -> _Read:
        return self

    async def __anext__(self) -> Any:
        return self._screen.incoming(await self._inner.__anext__())

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Read:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        result: bool | None = await self._inner.__aexit__(*exc)
        return result


class _Write:
    """The client's write stream: the transport's, noting the requests the screen follows."""

    def __init__(self, inner: Any, screen: ListingScreen) -> None:
        self._inner = inner
        self._screen = screen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def send(self, item: Any, /) -> None:
        self._screen.outgoing(item)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Write:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        result: bool | None = await self._inner.__aexit__(*exc)
        return result


class ListingScreen:
    """Leaves out of ``tools/list`` answers each tool the SDK would refuse, and says why."""

    def __init__(self, server: str) -> None:
        """Screen the listings of server ``server`` (named in the reasons)."""
        self.server = server
        self._listings: set[Any] = set()
        self._handshakes: set[Any] = set()
        self._version = _DEFAULT_VERSION
        self._refused: list[str] = []

    @contextlib.asynccontextmanager
    async def wrap(self, transport: Any) -> AsyncIterator[tuple[Any, Any]]:
        """Enter ``transport`` (an SDK transport) and yield its streams, screened."""
        async with transport as (read, write):
            yield _Read(read, self), _Write(write, self)

    def take_refused(self) -> list[str]:
        """The reasons of the tools left out since the last call (``server.tool: why``)."""
        taken, self._refused = self._refused, []
        return taken

    def outgoing(self, item: Any) -> None:
        """Note an ``initialize`` or ``tools/list`` request going out."""
        message = getattr(item, "message", None)
        method = getattr(message, "method", None)
        number = getattr(message, "id", None)
        if number is None:
            return  # a notification
        if method == "tools/list":
            self._listings.add(number)
        elif method == "initialize":
            self._handshakes.add(number)

    def incoming(self, item: Any) -> Any:
        """Return ``item`` with a listing's refused tools taken out (anything else as it is)."""
        if not isinstance(item, SessionMessage):
            return item
        message = item.message
        result = getattr(message, "result", None)
        number = getattr(message, "id", None)
        if not isinstance(result, dict) or number is None:
            return item
        if number in self._handshakes:
            self._handshakes.discard(number)
            version = result.get("protocolVersion")
            if isinstance(version, str):
                self._version = version
        elif number in self._listings:
            self._listings.discard(number)
            tools = result.get("tools")
            if isinstance(tools, list):
                result["tools"] = [tool for tool in tools if self._usable(tool)]
        return item

    def _usable(self, tool: Any) -> bool:
        """Whether the SDK accepts ``tool`` alone; if not, the reason is kept."""
        try:
            methods.validate_server_result("tools/list", self._version, {"tools": [tool]})
        except ValidationError as exc:
            name = tool.get("name") if isinstance(tool, dict) else None
            shown = name if isinstance(name, str) and name else "a tool without a name"
            self._refused.append(
                f"{self.server}.{shown[:100]}: its listing is invalid: {_why(exc)}"
            )
            return False
        except (KeyError, ValueError):  # a version the SDK has no check for: it decides
            return True
        return True
