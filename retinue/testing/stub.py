"""A local OpenAI chat-completions server for tests and benchmarks (stdlib only, no network).

:class:`OpenAIStub` serves ``POST /v1/chat/completions`` on 127.0.0.1 from a
thread, so ``LiteLLMRunner(model="openai/<name>", api_base=stub.url,
api_key="x")`` goes through litellm's real OpenAI provider path. By default it
answers like the scripted model (:func:`retinue.llm.model._script.script_reply`:
leads delegate in one ``spawn_subagents`` call, leaves answer), with tool calls
and usage. A test changes behaviour per request with :attr:`OpenAIStub.handler`:
return a :class:`StubReply` (an error status, a ``Retry-After``, a delay, a
custom message) or None for the default answer. Every request is recorded.
A request with ``"stream": true`` is answered as OpenAI streams: server-sent
``chat.completion.chunk`` events (the text and each tool call's arguments in
pieces, see :func:`~retinue.llm.model._script.reply_deltas`), the usage in a last
chunk when ``stream_options.include_usage`` asks for it, then ``[DONE]``.

Example::

    with OpenAIStub() as stub:
        stub.handler = lambda request: StubReply(status=429, headers={"Retry-After": "1"})
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from retinue.llm.model import count_tokens, reply_deltas, script_reply

__all__ = ["OpenAIStub", "StubReply", "StubRequest"]


@dataclass(frozen=True)
class StubRequest:
    """One request the stub received: its JSON body, arrival time and its number (from 1)."""

    body: dict[str, Any]
    at: float
    number: int

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages of the request."""
        return list(self.body.get("messages") or [])

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools offered."""
        return [t["function"]["name"] for t in self.body.get("tools") or []]


@dataclass
class StubReply:
    """What the stub answers: ``message`` (None: the scripted answer) or an error status.

    ``delay_s`` waits before answering (a slow model); ``headers`` are sent
    as they are (``Retry-After``); ``usage`` overrides the token counts.
    """

    status: int = 200
    message: dict[str, Any] | None = None
    error: str = "stub error"
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    usage: tuple[int, int] | None = None
    piece: int = 8
    """Characters per streamed piece of text or arguments (a streamed answer)."""
    chunks: list[dict[str, Any]] | None = None
    """The deltas a streamed answer sends as they are (None: ``message`` in pieces)."""
    chunk_delay_s: float = 0.0
    """Seconds between two streamed chunks."""
    error_type: str = "stub_error"
    """The error body's ``type`` (OpenAI's: ``requests``, ``tokens``, ``invalid_request_error``)."""
    error_code: str | int | None = None
    """The error body's ``code`` (None: the status; OpenAI's 429: ``rate_limit_exceeded``)."""


Handler = Callable[[StubRequest], StubReply | None]


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet."""

    def do_POST(self) -> None:
        """Answer one chat-completions request."""
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        self.server.stub._serve(self, body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    stub: OpenAIStub

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Drop a client that went away (a killed process, a cancelled call) quietly.

        socketserver prints a traceback to stderr for any error; a client that
        hangs up mid-request is what tests that kill or cancel their callers
        expect. Any other error is printed as before.
        """
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class OpenAIStub:
    """A chat-completions server on 127.0.0.1 (a free port); use it as a context manager."""

    def __init__(self, handler: Handler | None = None) -> None:
        """Prepare the server (not started: use ``with`` or :meth:`start`)."""
        self.handler: Handler | None = handler
        self.requests: list[StubRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.answered = 0
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The ``api_base`` to give litellm (``http://127.0.0.1:<port>/v1``)."""
        assert self._server is not None, "start the stub first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> Self:
        """Start serving from a daemon thread; return the stub."""
        server = _Server(("127.0.0.1", 0), _RequestHandler)
        server.stub = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="openai-stub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (requests still sleeping in a delay are abandoned)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        """Start the stub."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the stub."""
        self.stop()

    def _serve(self, http: _RequestHandler, body: dict[str, Any]) -> None:
        with self._lock:
            request = StubRequest(body=body, at=time.monotonic(), number=len(self.requests) + 1)
            self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self._answer(http, request, body)
        finally:
            with self._lock:
                self.in_flight -= 1
                self.answered += 1

    def _answer(self, http: _RequestHandler, request: StubRequest, body: dict[str, Any]) -> None:
        self._send(http, request, body, self._reply(request))

    def _reply(self, request: StubRequest) -> StubReply:
        """What the handler answers ``request`` with (the scripted answer when it says None)."""
        return (self.handler(request) if self.handler is not None else None) or StubReply()

    def _resolved(
        self, request: StubRequest, body: dict[str, Any], reply: StubReply
    ) -> tuple[dict[str, Any], tuple[int, int]]:
        """The message a 200 ``reply`` sends, and its usage (prompt, completion tokens)."""
        message = reply.message or script_reply(request.messages, body.get("tools") or [])
        usage = reply.usage or (
            count_tokens(json.dumps(request.messages)),
            count_tokens(json.dumps(message)),
        )
        return message, usage

    def _send(
        self, http: _RequestHandler, request: StubRequest, body: dict[str, Any], reply: StubReply
    ) -> None:
        """Send ``reply`` (after its delay): an error, a plain answer or a streamed one."""
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.status != 200:
            code = reply.status if reply.error_code is None else reply.error_code
            payload: dict[str, Any] = {
                "error": {"message": reply.error, "type": reply.error_type, "code": code}
            }
        else:
            message, (prompt, completion) = self._resolved(request, body, reply)
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
            if body.get("stream"):
                self._stream(http, request, reply, message, usage)
                return
            payload = {
                "id": f"chatcmpl-stub-{request.number}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "stub"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                    }
                ],
                "usage": usage,
            }
        data = json.dumps(payload).encode()
        try:
            http.send_response(reply.status)
            http.send_header("Content-Type", "application/json")
            http.send_header("Content-Length", str(len(data)))
            for name, value in reply.headers.items():
                http.send_header(name, value)
            http.end_headers()
            http.wfile.write(data)
        except OSError:  # the client gave up (an abandoned call)
            pass

    def _stream(
        self,
        http: _RequestHandler,
        request: StubRequest,
        reply: StubReply,
        message: dict[str, Any],
        usage: dict[str, int],
    ) -> None:
        """Answer a streamed request: SSE chunks, sent as they are made (chunked encoding)."""
        body = request.body
        base = {
            "id": f"chatcmpl-stub-{request.number}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
        }
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        deltas = reply.chunks if reply.chunks is not None else reply_deltas(message, reply.piece)
        events = [
            {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            for delta in deltas
        ]
        events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({**base, "choices": [], "usage": usage})
        try:
            http.send_response(200)
            http.send_header("Content-Type", "text/event-stream")
            http.send_header("Transfer-Encoding", "chunked")
            for name, value in reply.headers.items():
                http.send_header(name, value)
            http.end_headers()
            lines = [f"data: {json.dumps(event)}\n\n" for event in events] + ["data: [DONE]\n\n"]
            for number, line in enumerate(lines):
                if number and reply.chunk_delay_s:
                    time.sleep(reply.chunk_delay_s)
                data = line.encode()
                http.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                http.wfile.flush()
            http.wfile.write(b"0\r\n\r\n")
            http.wfile.flush()
        except OSError:  # the client gave up (an abandoned call)
            pass
