"""One connection to a writer's control socket: its calls, their confirmations, its stream.

A connection is checked first (the peer's uid, the number of connections),
greeted (:class:`~retinue.control._wire.Hello`), then read frame by frame.
Each :class:`~retinue.control._wire.Call` runs as a task of its own, so a
long wait never holds up the connection's other calls (at most
``Limits.control_max_calls`` at once); a
:class:`~retinue.control._wire.Stream` turns the connection into an event
stream. What a call took (a wait's completion, the host's messages) is kept
only once the client confirms it has the answer
(:class:`~retinue.control._wire.Received`); a cancelled call, or a
connection that closes first, gives it back, so a dropped connection loses
nothing (a wait under the caller's lease keeps it then: the caller's to
acknowledge or release, as in process; its cancel releases it). A call that
arrives after a :class:`~retinue.control._wire.Cancel` is served once the
cancelled calls ended, so it comes after their give-backs (a wait sent right
after a cancelled one receives what that one gave back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

import msgspec

from retinue.actors.calls import RuntimeState
from retinue.actors.commands import Command
from retinue.actors.events import AsyncEventStream, stream_root
from retinue.actors.system import System
from retinue.control import _wire as w
from retinue.control._serving import Served, serve
from retinue.control._socket import peer_uid
from retinue.errors import ControlError, LimitExceeded, NotPermitted, RetinueError, RuntimeClosed

__all__ = ["STREAM_BATCH", "STREAM_POLL_S", "Connection"]

STREAM_BATCH = 256
"""Events a stream sends in one frame at most."""
STREAM_POLL_S = 30.0
"""How long one take of a stream's events waits (the client's leaving ends it at once)."""
log = logging.getLogger("retinue.control")


class Connection:
    """A client's connection; :meth:`run` serves it until it closes."""

    def __init__(
        self,
        system: System,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        admitted: Callable[[Connection], str | None],
    ) -> None:
        """Serve ``system`` on ``reader``/``writer``; ``admitted`` says why not (None: yes)."""
        self.system = system
        self.limits = system.limits
        self.reader = reader
        self.writer = writer
        self._admitted = admitted
        self._calls: dict[int, asyncio.Task[None]] = {}
        # Calls cancelled in flight, until they end (a later call is served after them).
        self._ending: set[asyncio.Task[None]] = set()
        self._unconfirmed: dict[int, Served] = {}
        self._sending = asyncio.Lock()
        self._closed = False

    # -- the connection's life -------------------------------------------------------------

    async def run(self) -> None:
        """Check, greet, then serve frames until the client leaves (or the writer stops)."""
        try:
            refusal = self._refusal()
            if refusal is not None:
                await self._send(w.Refused(error=w.wire_error(refusal)))
                return
            await self._send(self._hello())
            await self._serve_frames()
        except (ConnectionError, RetinueError) as exc:
            log.debug("control connection ended: %s", exc)
        finally:
            await self._end()

    def _refusal(self) -> RetinueError | None:
        """Why this connection is refused: the peer's uid, or too many connections."""
        sock = self.writer.get_extra_info("socket")
        uid = None if sock is None else peer_uid(sock)
        mine = os.geteuid()
        if uid is not None and uid not in (mine, 0):
            return NotPermitted(
                f"the control socket of {self.system.path} serves its writer's user (uid "
                f"{mine}) and root; uid {uid} was refused"
            )
        reason = self._admitted(self)
        if reason is not None:
            cap = self.limits.control_max_connections
            return LimitExceeded(reason, limit=cap, value=cap + 1)
        return None

    def _hello(self) -> w.Hello:
        limits = self.limits
        return w.Hello(
            protocol=w.PROTOCOL,
            pid=os.getpid(),
            store=str(self.system.path),
            wait_default_s=limits.wait_default_s,
            wait_max_s=limits.wait_max_s,
            max_message_bytes=limits.control_max_message_bytes,
        )

    async def _serve_frames(self) -> None:
        limits = self.limits
        while True:
            body = await w.read_frame(
                self.reader, limits.control_max_message_bytes, limits.control_read_timeout_s
            )
            if body is None:
                return
            match w.decode_client(body):
                case w.Call() as call:
                    await self._start_call(call)
                case w.Cancel(id=call_id):
                    self._cancel(call_id)
                case w.Received(id=call_id):
                    self._confirmed(call_id)
                case w.Stream() as stream:
                    await self._stream(stream)
                    return

    async def _end(self) -> None:
        """Cancel the calls in flight, give back what no client confirmed, close."""
        self._closed = True
        calls = list(self._calls.values())
        for task in calls:
            task.cancel()
        if calls:
            await asyncio.gather(*calls, return_exceptions=True)
        for call_id in list(self._unconfirmed):
            self._give_back(call_id, dropped=True)
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()

    async def stop(self) -> None:
        """The writer stops: end the connection (its calls are cancelled, given back)."""
        self.writer.close()

    @property
    def busy(self) -> bool:
        """Whether calls are in flight on this connection."""
        return bool(self._calls)

    # -- calls ------------------------------------------------------------------------------

    async def _start_call(self, call: w.Call) -> None:
        if call.id in self._calls or call.id in self._unconfirmed:
            await self._answer_error(call.id, ControlError(f"call id {call.id} is in use"))
            return
        if len(self._calls) >= self.limits.control_max_calls:
            error = LimitExceeded(
                f"{len(self._calls)} calls are in flight on this connection, "
                f"control_max_calls ({self.limits.control_max_calls}); wait for some to end "
                "or raise the limit",
                limit=self.limits.control_max_calls,
                value=len(self._calls) + 1,
            )
            await self._answer_error(call.id, error)
            return
        ending = self._ending
        task = asyncio.create_task(self._run_call(call, tuple(ending) if ending else ()))
        self._calls[call.id] = task

    async def _run_call(self, call: w.Call, after: tuple[asyncio.Task[None], ...]) -> None:
        """Serve ``call`` once the calls cancelled before it arrived have ended (``after``).

        A cancelled wait that was answered gives its completion back as its task
        ends (the answer may still be on its way); a call the client sent after
        the cancel must reach the supervisor after that give-back, or a wait
        right behind it finds the completion still leased and gets
        ``NothingToWaitFor``.
        """
        try:
            try:
                if after:
                    await asyncio.wait(after)
                command: Command[Any] = w.decode_command(call.command)
                served = await serve(self.system, command, call.timeout)
            except RetinueError as exc:
                await self._answer_error(call.id, exc)
                return
            except Exception as exc:  # a bug: the client gets InternalError, the log the rest
                log.exception("the control socket failed on a call")
                await self._answer_error(call.id, exc)
                return
            with contextlib.suppress(ConnectionError, RuntimeError):  # given back
                await self._answer(call.id, served)
        except asyncio.CancelledError:  # also while its answer waits to be written
            self._calls.pop(call.id, None)
            self._give_back(call.id, dropped=self._closed)  # cancelled as its answer went
            raise
        finally:
            self._calls.pop(call.id, None)

    async def _answer(self, call_id: int, served: Served) -> None:
        """Send ``served``'s answer; keep what it took unconfirmed until the client says so."""
        try:
            value = w.encode(served.value)
            frame = w.Answer(id=call_id, value=msgspec.Raw(value), confirm=served.confirm)
            body = w.framed(w.encode(frame), self.limits.control_max_message_bytes)
        except RetinueError as exc:  # too large: refused, and what it took given back
            self._undo(served)
            await self._answer_error(call_id, exc)
            return
        if served.confirm:
            self._unconfirmed[call_id] = served
        try:
            await self._write(body)
        except (ConnectionError, RuntimeError):
            self._give_back(call_id, dropped=True)
            raise

    async def _answer_error(self, call_id: int, error: BaseException) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._send(w.Answer(id=call_id, error=w.wire_error(error)))

    def _cancel(self, call_id: int) -> None:
        """Cancel a call in flight; one answered but not confirmed gives back what it took."""
        task = self._calls.get(call_id)
        if task is not None:
            task.cancel()
            self._ending.add(task)
            task.add_done_callback(self._ending.discard)
        else:
            self._give_back(call_id)

    def _confirmed(self, call_id: int) -> None:
        """The client has the answer of ``call_id``: keep what it took."""
        served = self._unconfirmed.pop(call_id, None)
        if served is not None and served.keep is not None:
            self.system.engine.tell(served.keep)

    def _give_back(self, call_id: int, dropped: bool = False) -> None:
        """Give back what ``call_id`` took, unconfirmed: the client cancelled it, or
        (``dropped``) the connection closed first, which keeps a caller's lease."""
        served = self._unconfirmed.pop(call_id, None)
        if served is not None and not (dropped and served.kept_on_drop):
            self._undo(served)

    def _undo(self, served: Served) -> None:
        if served.give_back is not None:
            self.system.engine.tell(served.give_back)

    # -- a stream ---------------------------------------------------------------------------

    async def _stream(self, request: w.Stream) -> None:
        """Answer the stream's opening, then send its events until it ends or the client goes."""
        system = self.system
        try:
            if system.state is not RuntimeState.OPEN:
                raise RuntimeClosed("the runtime is closed; open it again to stream its events")
            events = AsyncEventStream(system.bus, stream_root(system.store, request.ref))
        except RetinueError as exc:
            await self._answer_error(request.id, exc)
            return
        try:
            await self._send(w.Answer(id=request.id))
            gone = asyncio.ensure_future(self.reader.read(1))  # any byte or EOF: the end
            try:
                while True:
                    taking = asyncio.ensure_future(events.take(STREAM_BATCH, STREAM_POLL_S))
                    await asyncio.wait({taking, gone}, return_when=asyncio.FIRST_COMPLETED)
                    if not taking.done():  # the client left (or the writer stops)
                        taking.cancel()
                        return
                    batch = taking.result()
                    if batch is None:
                        await self._send(w.End(id=request.id))
                        return
                    if batch:
                        await self._send(w.Events(id=request.id, events=batch))
            finally:
                gone.cancel()
        finally:
            events.close()

    # -- writing ----------------------------------------------------------------------------

    async def _send(self, frame: w.ServerFrame) -> None:
        await self._write(w.framed(w.encode(frame), self.limits.control_max_message_bytes))

    async def _write(self, body: bytes) -> None:
        """Write one frame whole (frames of several tasks never interleave)."""
        async with self._sending:
            if self.writer.is_closing():
                raise ConnectionResetError("the client's connection is closed")
            self.writer.write(body)
            await self.writer.drain()
