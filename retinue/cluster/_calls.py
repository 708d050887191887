"""A call to one shard and what the face's transport and its outbox share about calls.

:class:`One` is a call's step (its shard, bytes and bounds); :data:`BACKOFF_S` the pauses
between a failed call's attempts; :func:`failure_text` the one line a failed Ray call is
reported by; :func:`answer_of` a call's answer as a future the face may cancel. Both
:mod:`retinue.cluster._transport` and :mod:`retinue.cluster._outbox` use them, so they
live here, below both.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any

__all__ = ["BACKOFF_S", "One", "answer_of", "failure_text"]

BACKOFF_S = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass(frozen=True)
class One:
    """Call shard ``shard`` with ``payload``; the result is the reply's bytes.

    ``tag`` names the call (for fault injection); ``timeout_s`` bounds one
    attempt; ``on_cancel`` is sent if an async caller is cancelled while
    the call is in flight, and its answer awaited (up to ``call_timeout_s``)
    before the cancel goes on, so what the caller does next comes after it. A
    :class:`~retinue.cluster._transport.Tell`'s call is not sent once the face is
    closed: its ``on_cancel`` is sent instead.
    """

    shard: int
    payload: bytes
    tag: str = ""
    timeout_s: float | None = None
    retry: bool = True
    on_cancel: bytes | None = None


def failure_text(error: BaseException) -> str:
    """Return one line saying why a Ray call failed (a constructor's own error if it was one).

    Ray's message for an actor whose constructor raised carries the whole
    remote traceback; its last line is the error itself.
    """
    text = str(error)
    if getattr(error, "actor_init_failed", False):
        lines = [line for line in text.splitlines() if line.strip()]
        text = lines[-1].strip() if lines else text
    return f"{type(error).__name__}: {text[:300]}"


def answer_of(ref: Any) -> Future[Any]:
    """Return a future set to the outcome of Ray's ``ref`` (an object ref), which the face
    may cancel (a wait given up, an awaiting task cancelled) without cancelling Ray's own.

    Ray sets ``ref.future()`` from its callback thread after checking that it is not done
    (``ray._raylet._set_future_helper``): a cancel landing between that check and the set
    made the set raise InvalidStateError in Ray's thread, logged there as "failed to run
    async callback". Ray's future is never cancelled now; only this one is.
    """
    answer: Future[Any] = Future()
    source: Future[Any] = ref.future()

    def copy(done: Future[Any]) -> None:
        with contextlib.suppress(InvalidStateError):  # the face cancelled its answer
            if done.cancelled():
                answer.cancel()
            elif (error := done.exception()) is not None:
                answer.set_exception(error)
            else:
                answer.set_result(done.result())

    source.add_done_callback(copy)
    return answer
