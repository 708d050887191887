"""A client's link to a writer's control socket: one connection for calls, one per stream.

:class:`Link` runs an asyncio loop on a daemon thread of its own
(``retinue-connect``), so a blocking caller and an event loop use it alike
and thread-safely: :meth:`Link.submit` hands a call over and returns a
``concurrent.futures.Future`` of its :class:`Reply`. The calls share one
connection (:class:`Session`), each under its own id, so a long wait never
holds up another call; a connection that closes is opened again by the next
call (to the same writer, or the next one). Every call has a hang guard: a
wait's (or a run's) own time plus ``call_timeout_s``, any other call ``call_timeout_s``.

What a call took (a wait's completion, the host's messages) is confirmed by
:meth:`Link.received` once its caller has the value, and given back by
:meth:`Link.give_back` when the caller never gets it (its task was
cancelled); a connection that closes gives it back on the writer's side.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from retinue.actors.commands import Command, HostMessages, Idle, Run, Wait
from retinue.control import _wire as w
from retinue.control._socket import connect_control_socket
from retinue.errors import ControlError, RetinueError
from retinue.protocol.checks import check_seconds

__all__ = ["Link", "Reply", "Session"]

T = TypeVar("T")
_WAITS = (Wait, Run, HostMessages, Idle)
_CLOSE_TIMEOUT_S = 5.0
_END_WAIT_S = 1.0
"""How long a closing connection waits for the writer to end its side (its give-backs)."""
_CLOSED = "this connection to the writer was closed (disconnect())"


@dataclass(frozen=True)
class Reply:
    """A call's answer as it came, with the session that confirms it."""

    session: Session
    answer: w.Answer


class Session:
    """One connection to the writer, greeted; calls multiplexed by id (or one stream)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        hello: w.Hello,
        limit: int,
        read_timeout_s: float,
    ) -> None:
        """Use :meth:`open`."""
        self.reader = reader
        self.writer = writer
        self.hello = hello
        self.limit = limit
        self.read_timeout_s = read_timeout_s
        self.pending: dict[int, asyncio.Future[w.Answer]] = {}
        self.closed = False
        self._ids = itertools.count(1)
        self._reading: asyncio.Task[None] | None = None
        self._confirming = threading.Lock()  # closed and the queued confirms, together
        self._confirms: list[bytes] = []

    @classmethod
    async def open(cls, store: Path, timeout: float, limit: int) -> Session:
        """Connect to ``store``'s writer and take its greeting.

        Raises:
            NoWriter: no writer serves the store's control socket.
            NotPermitted, LimitExceeded: the writer refused this connection.
            ControlError: the writer did not greet in time, or speaks another protocol.
        """
        sock = await asyncio.to_thread(connect_control_socket, store, timeout)
        sock.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        try:
            body = await asyncio.wait_for(w.read_frame(reader, limit, timeout), timeout)
            if body is None:
                raise ControlError(f"the writer of {store} closed the connection at once")
            frame = w.decode_server(body)
            if isinstance(frame, w.Refused):
                raise w.error_of(frame.error)
            if not isinstance(frame, w.Hello) or frame.protocol != w.PROTOCOL:
                raise ControlError(
                    f"the writer of {store} speaks another control protocol ({frame!r:.80}); "
                    "run the same retinue version on both sides"
                )
        except TimeoutError:
            writer.close()
            raise ControlError(
                f"the writer of {store} did not greet within {timeout:g} s"
            ) from None
        except BaseException:
            writer.close()
            raise
        return cls(reader, writer, frame, min(limit, frame.max_message_bytes), timeout)

    def next_id(self) -> int:
        """A call id not used on this session yet."""
        return next(self._ids)

    async def send(self, frame: w.ClientFrame) -> None:
        """Send one frame.

        Raises:
            ControlError: the connection is closed.
            LimitExceeded: the frame is larger than the bound.
        """
        if self.closed or self.writer.is_closing():
            raise ControlError("the connection to the writer is closed")
        self.writer.write(w.framed(w.encode(frame), self.limit))
        try:
            await self.writer.drain()
        except ConnectionError as exc:
            raise ControlError(f"the connection to the writer closed: {exc}") from None

    def confirm(self, frame: w.ClientFrame) -> bool:
        """Queue ``frame`` (a ``Received``) to be written before the connection ends.

        Thread-safe, and decided at once: True if it is written (by
        :meth:`flush_confirms`, or by :meth:`close` before the connection ends),
        False if the connection is closed already. A close cannot fall between
        the decision and the write.
        """
        body = w.framed(w.encode(frame), self.limit)
        with self._confirming:
            if self.closed:
                return False
            self._confirms.append(body)
        return True

    def flush_confirms(self) -> None:
        """Write the queued confirms (on the connection's loop)."""
        with self._confirming:
            confirms, self._confirms = self._confirms, []
        with contextlib.suppress(Exception):  # a connection that broke: the writer gives back
            for body in confirms:
                self.writer.write(body)

    def start_reading(self) -> None:
        """Route answers to their calls from now on (a session for calls)."""
        self._reading = asyncio.create_task(self._read_answers())

    async def _read_answers(self) -> None:
        error: BaseException = ControlError(
            "the connection to the writer closed before it answered (the writer shut down or "
            "died); a wait or messages call lost nothing and may be called again; another "
            "call may or may not have run"
        )
        try:
            while True:
                body = await w.read_frame(self.reader, self.limit, self.read_timeout_s)
                if body is None:
                    break
                frame = w.decode_server(body)
                if isinstance(frame, w.Answer):
                    waiter = self.pending.pop(frame.id, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(frame)
                    elif frame.confirm:  # nobody waits for it any more: give it back
                        await self.send(w.Cancel(id=frame.id))
        except RetinueError as exc:
            error = exc
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed = True
            for waiter in self.pending.values():
                if not waiter.done():
                    waiter.set_exception(error)
            self.pending.clear()
            self.writer.close()

    async def call(self, command: Command[Any], timeout: float | None, guard: float) -> w.Answer:
        """Send ``command`` and return its answer within ``guard`` seconds.

        A cancelled call is cancelled on the writer too (what it took is given back).

        Raises:
            ControlError: the connection closed, or no answer within ``guard``.
        """
        call_id = self.next_id()
        waiter: asyncio.Future[w.Answer] = asyncio.get_running_loop().create_future()
        self.pending[call_id] = waiter
        try:
            await self.send(w.Call(id=call_id, command=w.encode_command(command), timeout=timeout))
            return await asyncio.wait_for(asyncio.shield(waiter), guard)
        except TimeoutError:
            await self._cancel(call_id)
            raise ControlError(
                f"the writer did not answer {type(command).__name__} within {guard:g} s; "
                "it may or may not have run"
            ) from None
        except asyncio.CancelledError:
            await self._cancel(call_id)
            raise
        finally:
            self.pending.pop(call_id, None)

    async def _cancel(self, call_id: int) -> None:
        with contextlib.suppress(RetinueError):
            await self.send(w.Cancel(id=call_id))

    async def close(self) -> None:
        """Close the connection (calls in flight end with ``ControlError``).

        Confirms queued before the close (:meth:`confirm`) are written first. A
        connection for calls then ends its own side and waits (at most
        ``_END_WAIT_S``) for the writer to end its: the writer does so once it has
        given back what this connection took and nobody confirmed, so a call on a
        new connection right after this close finds it back (not ``NothingToWaitFor``).
        """
        with self._confirming:
            self.closed = True
            confirms, self._confirms = self._confirms, []
        reading = self._reading
        with contextlib.suppress(Exception):
            for body in confirms:
                self.writer.write(body)
            if reading is not None and not reading.done():
                self.writer.write_eof()
                await asyncio.wait_for(asyncio.shield(reading), _END_WAIT_S)
        self.writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), _CLOSE_TIMEOUT_S)
        if reading is not None:
            with contextlib.suppress(BaseException):
                await reading


class Link:
    """The loop thread and the calls' connection of one ``RemoteRuntime`` (see the module)."""

    def __init__(
        self, store: Path, *, connect_timeout_s: float, call_timeout_s: float, limit: int
    ) -> None:
        """Reach ``store``'s writer with these bounds; nothing runs before :meth:`open`."""
        self.store = store
        self.connect_timeout_s = connect_timeout_s
        self.call_timeout_s = call_timeout_s
        self.limit = limit
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="retinue-connect", daemon=True
        )
        self._session: Session | None = None
        self._opening: asyncio.Lock | None = None
        self._streams: set[Session] = set()
        self._ending: set[asyncio.Task[None]] = set()  # cancelled calls, until they end
        self._outstanding: set[concurrent.futures.Future[Reply]] = set()  # submitted, unanswered
        self.closed = False

    def open(self) -> w.Hello:
        """Start the thread and connect now; return the writer's greeting.

        Raises:
            NoWriter, NotPermitted, LimitExceeded, ControlError: as :meth:`Session.open`.
        """
        self._thread.start()
        try:
            return self.run(self._calls()).hello
        except BaseException:
            self.close()
            raise

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the link's loop and block for its result (cancelled on an
        interrupt of this thread)."""
        future = self.submit_coroutine(coroutine)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def submit_coroutine(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coroutine`` on the link's loop.

        Raises:
            ControlError: the link is closed.
        """
        if self.closed:
            coroutine.close()
            raise ControlError(_CLOSED)
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def _end(self, outer: concurrent.futures.Future[Reply]) -> None:
        """End a call's future whose task was cancelled: ``ControlError`` if the link
        closed under it, else cancelled (its caller gave it up)."""
        if self.closed:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                outer.set_exception(ControlError(_CLOSED))
        else:
            outer.cancel()

    async def _calls(self) -> Session:
        """The session calls go over, opened (again) if it is closed."""
        if self.closed:
            raise ControlError(_CLOSED)
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            session = self._session
            if session is None or session.closed:
                session = await Session.open(self.store, self.connect_timeout_s, self.limit)
                session.start_reading()
                self._session = session
            return session

    def guard(self, command: Command[Any], timeout: float | None, hello: w.Hello) -> float:
        """How long a call may take before the client gives it up (see the module)."""
        if isinstance(command, _WAITS):
            waits = hello.wait_default_s if timeout is None else timeout
            return waits + self.call_timeout_s
        return self.call_timeout_s

    def submit(
        self, command: Command[Any], timeout: float | None = None
    ) -> concurrent.futures.Future[Reply]:
        """Hand ``command`` over; return the future of its :class:`Reply` (thread-safe).

        Cancelling the future cancels the call on the writer; if its answer came
        first, what it took is given back before any call submitted after the
        cancel is sent.

        Raises:
            ArgumentTypeError, InvalidArgument: ``timeout`` is not a finite,
                non-negative number (its bound, ``wait_max_s``, is the writer's to check).
            ControlError: the link is closed.
        """
        if timeout is not None:
            timeout = check_seconds(timeout, "timeout")
        if self.closed:
            raise ControlError(_CLOSED)
        outer: concurrent.futures.Future[Reply] = concurrent.futures.Future()
        started: list[asyncio.Task[None]] = []
        self._outstanding.add(outer)  # a close answers it if the loop never does
        outer.add_done_callback(self._outstanding.discard)

        async def call() -> None:
            try:
                if self._ending:  # calls the caller cancelled first: their Cancel goes first
                    await asyncio.wait(tuple(self._ending))
                session = await self._calls()
                guard = self.guard(command, timeout, session.hello)
                answer = await session.call(command, timeout, guard)
            except asyncio.CancelledError:
                self._end(outer)
                raise
            except Exception as exc:
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    outer.set_exception(exc)
                return
            # The answer is handed to the caller, or (it gave up meanwhile) given back
            # here, before this task yields: a call the caller makes once its cancel
            # returned is sent after this give-back.
            if outer.set_running_or_notify_cancel():
                outer.set_result(Reply(session, answer))
            elif answer.confirm:
                with contextlib.suppress(RetinueError):
                    await session.send(w.Cancel(id=answer.id))

        def start() -> None:
            if not outer.cancelled():
                task = self.loop.create_task(call())
                task.add_done_callback(settle)
                started.append(task)

        def settle(task: asyncio.Task[None]) -> None:
            if task.cancelled():  # the loop cancelled it: the caller's wait ends too
                self._end(outer)
            elif task.exception() is not None:  # not an Exception: the task let it through
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    outer.set_exception(task.exception())

        def cancelled(done: concurrent.futures.Future[Reply]) -> None:
            if done.cancelled():
                with contextlib.suppress(RuntimeError):  # a closed loop: nothing runs
                    self.loop.call_soon_threadsafe(self._abandon, started)

        try:
            self.loop.call_soon_threadsafe(start)  # in order with the calls' cancels
        except RuntimeError:  # the loop closed meanwhile
            raise ControlError("this connection to the writer was closed") from None
        outer.add_done_callback(cancelled)
        return outer

    def _abandon(self, started: list[asyncio.Task[None]]) -> None:
        """Cancel a call's task; calls submitted after this wait until it ended (on the loop).

        The cancelled task sends its ``Cancel`` (or gives back an answer that
        came) as it ends, so it reaches the writer before those later calls.
        """
        for task in started:
            if not task.done():
                task.cancel()
                self._ending.add(task)
                task.add_done_callback(self._ending.discard)

    def received(self, reply: Reply) -> bool:
        """The caller has ``reply``'s value: confirm it to the writer (if it asked).

        Returns False when it cannot: the link or the answer's connection is closed
        (a ``disconnect()`` raced the answer), so the writer gives the value back as
        the connection ends, and the caller must not keep it too.
        """
        if not reply.answer.confirm:
            return True
        session = reply.session
        if not session.confirm(w.Received(id=reply.answer.id)):
            return False
        # Written now on the loop, or by the session's close at the latest (which the
        # link's close runs before its loop stops).
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(session.flush_confirms)
        return True

    def give_back(self, reply: Reply) -> None:
        """The caller never got ``reply``'s value: the writer gives back what it took."""
        if reply.answer.confirm:
            self._tell(reply.session, w.Cancel(id=reply.answer.id))

    def _tell(self, session: Session, frame: w.ClientFrame) -> None:
        async def send() -> None:
            with contextlib.suppress(RetinueError):
                await session.send(frame)

        with contextlib.suppress(RuntimeError, ControlError):  # a closed loop: nothing to tell
            self.submit_coroutine(send())

    async def open_stream(self, ref: str | None) -> Session:
        """Open a connection of its own for a stream of ``ref``'s events.

        Raises:
            NoWriter, ControlError: as :meth:`Session.open`; and what the stream's opening
                raises on the writer (``InvalidAgentPath``, ``RuntimeClosed``).
        """
        session = await Session.open(self.store, self.connect_timeout_s, self.limit)
        try:
            await session.send(w.Stream(id=1, ref=ref))
            body = await asyncio.wait_for(
                w.read_frame(session.reader, session.limit, session.read_timeout_s),
                self.call_timeout_s,
            )
            frame = None if body is None else w.decode_server(body)
            if not isinstance(frame, w.Answer):
                raise ControlError("the writer closed the stream before it opened")
            if frame.error is not None:
                raise w.error_of(frame.error)
        except TimeoutError:
            await session.close()
            raise ControlError(
                f"the writer did not open the stream within {self.call_timeout_s:g} s"
            ) from None
        except BaseException:
            await session.close()
            raise
        self._streams.add(session)
        return session

    async def stream_batch(self, session: Session) -> list[Any] | None:
        """The stream's next events, waiting for them; None once it ended.

        Raises:
            RetinueError: the error the stream ended with on the writer.
        """
        if session.closed:
            return None
        try:
            body = await w.read_frame(session.reader, session.limit, session.read_timeout_s)
        except (RetinueError, ConnectionError):
            body = None
        frame = None if body is None else w.decode_server(body)
        if isinstance(frame, w.Events):
            return frame.events
        await self.end_stream(session)
        if isinstance(frame, w.End) and frame.error is not None:
            raise w.error_of(frame.error)
        return None

    async def end_stream(self, session: Session) -> None:
        """Close a stream's connection."""
        self._streams.discard(session)
        await session.close()

    def close(self) -> None:
        """Close every connection and stop the loop thread (idempotent)."""
        if self.closed:
            return
        self.closed = True
        if self._thread.is_alive():

            async def close_all() -> None:
                sessions = [s for s in (self._session, *self._streams) if s is not None]
                await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
                # Calls still running (one reopening its session, one waiting for a
                # cancelled call's end) end now: cancelled, their callers told it closed.
                me = asyncio.current_task()
                left = [t for t in asyncio.all_tasks() if t is not me]
                for task in left:
                    task.cancel()
                await asyncio.gather(*left, return_exceptions=True)

            future = asyncio.run_coroutine_threadsafe(close_all(), self.loop)
            with contextlib.suppress(Exception):
                future.result(_CLOSE_TIMEOUT_S + 1.0)
            self.loop.call_soon_threadsafe(self.loop.stop)
            if self._thread is not threading.current_thread():
                self._thread.join(_CLOSE_TIMEOUT_S)
        if not self._thread.is_alive():
            self.loop.close()
        for outer in list(self._outstanding):  # none waits for ever on a closed link
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                outer.set_exception(ControlError(_CLOSED))
