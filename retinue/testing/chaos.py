"""The chaos model ``retinue/chaos``: a litellm provider that answers as badly as real ones do.

``ChaosModel(seed=...)`` installed (``with ChaosModel(seed=7): ...``, or
:meth:`ChaosModel.install`) serves the model name ``retinue/chaos`` in this
process, through the same offline litellm provider as ``retinue/scripted``
(:mod:`retinue.llm.model._offline`): litellm's real call path, no key, no network.
Its answers are drawn from what providers really send (the kinds in
:data:`~retinue.testing.chaos_answers.KINDS`): valid tool calls of the tools
the request offers (most of the time, so turns get somewhere), parallel calls,
malformed JSON arguments, unknown tools, huge arguments, calls without an id or
sharing one, lone surrogates (half an emoji: in the text, in a tool's name, in a
call's id, in the arguments of a call of a tool approvals may gate;
:data:`~retinue.testing.chaos_answers.SURROGATE_KINDS`), content parts, empty
or null choices, 429s with ``Retry-After``, 5xx, 400, timeouts, hangs and slow
answers. It always answers in the end: a turn's final-answer odds start low
and grow with each step, and after ``max_steps`` steps it only answers with
text (or fails).

Deterministic for a seed, whatever the threads do: each call draws from a
stream derived from the seed, the agent (its system prompt and first task) and
the call's place in that agent's conversation (and the attempt, for a retry),
never from a shared sequence. :meth:`ChaosModel.strategy` gives hypothesis
strategies of chaos models for users' own property tests.
"""

from __future__ import annotations

import collections
import hashlib
import importlib
import random
import threading
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from retinue.llm.model import register_offline_model
from retinue.protocol.results import RESULT_VERSION
from retinue.testing.chaos_answers import (
    DEFAULT_WEIGHTS,
    FAULT_KINDS,
    FINAL_KINDS,
    KINDS,
    SURROGATE_KINDS,
    TOOL_KINDS,
    Answer,
    build,
)
from retinue.testing.chaos_args import seen_in

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = ["CHAOS_MODEL", "ChaosModel"]

CHAOS_MODEL = "retinue/chaos"
"""The model name the installed :class:`ChaosModel` serves."""
_NAME = "chaos"
_MAX_STREAMS = 65_536  # attempt counters kept (least recently used go first)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


class ChaosModel:
    """The ``retinue/chaos`` model of one seed; install it to serve that name.

    ``weights`` changes the odds of answer kinds (a mapping kind -> weight
    >= 0, merged over :data:`~retinue.testing.chaos_answers.DEFAULT_WEIGHTS`;
    ``{"hang": 0}`` turns hangs off). ``max_steps``: tool steps in one turn
    before the model only answers with text. ``hang_s``: how long a hang lasts
    (the runner's ``request_timeout_s`` cuts it first, as it would a real
    provider's); None: a hang fails at once as a timeout, so no clock decides
    whether a call is answered (a cassette fuzzer's replay); ``slow_s``: the
    range of a slow answer's delay.
    :attr:`counts` tells how often each kind was answered.

    Raises:
        ValueError: an unknown kind, a negative or non-number weight, weights
            that are all zero, ``max_steps`` < 1, or a negative duration.
    """

    def __init__(
        self,
        seed: int = 0,
        *,
        weights: Mapping[str, float] | None = None,
        max_steps: int = 6,
        hang_s: float | None = 3600.0,
        slow_s: tuple[float, float] = (0.05, 0.5),
    ) -> None:
        """Check and keep the settings; nothing is served until :meth:`install`."""
        merged = dict(DEFAULT_WEIGHTS)
        for kind, weight in (weights or {}).items():
            if kind not in DEFAULT_WEIGHTS:
                raise ValueError(
                    f"unknown chaos answer kind {kind!r}; the kinds: {', '.join(KINDS)}"
                )
            if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
                raise ValueError(f"the weight of {kind!r} must be a number >= 0, not {weight!r}")
            merged[kind] = float(weight)
        if not any(merged[k] for k in (*FINAL_KINDS, *TOOL_KINDS, "slow")):
            raise ValueError("the chaos model needs a kind of answer that is not a fault")
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be an integer >= 1, not {max_steps!r}")
        if (hang_s is not None and hang_s < 0) or slow_s[0] < 0 or slow_s[1] < slow_s[0]:
            raise ValueError("hang_s and slow_s must be durations >= 0 (slow_s: low <= high)")
        self.seed = int(seed)
        self.weights: Mapping[str, float] = merged
        self.max_steps = max_steps
        self.hang_s = None if hang_s is None else float(hang_s)
        self.slow_s = (float(slow_s[0]), float(slow_s[1]))
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._attempts: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._previous: list[Any] = []

    def __repr__(self) -> str:
        """Show the seed and the weights that differ from the defaults."""
        changed = {k: v for k, v in self.weights.items() if DEFAULT_WEIGHTS[k] != v}
        extra = f", weights={changed!r}" if changed else ""
        return f"ChaosModel(seed={self.seed}{extra})"

    # -- serving -------------------------------------------------------------

    def install(self) -> ChaosModel:
        """Serve ``retinue/chaos`` with this model in this process (until :meth:`uninstall`).

        The last one installed serves; uninstalling it brings back the one before.
        """
        self._previous.append(register_offline_model(_NAME, self._respond))
        return self

    def uninstall(self) -> None:
        """Stop serving ``retinue/chaos`` with this model (the one before it serves again)."""
        previous = self._previous.pop() if self._previous else None
        register_offline_model(_NAME, previous)

    def __enter__(self) -> ChaosModel:
        """Install the model (see :meth:`install`)."""
        return self.install()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Uninstall the model."""
        self.uninstall()

    async def _respond(
        self, model: str, messages: list[Any], optional_params: Mapping[str, Any]
    ) -> Any:
        """The provider's answer to one call (litellm's response, or its exception)."""
        answer = self.answer(messages, optional_params.get("tools") or [])
        provider = importlib.import_module("retinue.testing.chaos_provider")
        return await provider.deliver(answer, model, messages, self.hang_s)

    # -- deciding ------------------------------------------------------------

    def _stream(self, messages: Sequence[Mapping[str, Any]]) -> tuple[str, random.Random]:
        """The key of this call's stream and its generator (seed, agent, place, attempt)."""
        system = next((_text(m.get("content")) for m in messages if m.get("role") == "system"), "")
        first = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
        place = sum(1 for m in messages if m.get("role") == "assistant")
        base = hashlib.sha256(
            f"{self.seed}\x00{system}\x00{first}\x00{place}".encode("utf-8", "surrogatepass")
        ).hexdigest()[:16]
        with self._lock:
            attempt = self._attempts.pop(base, 0)
            self._attempts[base] = attempt + 1
            while len(self._attempts) > _MAX_STREAMS:
                self._attempts.popitem(last=False)
        key = f"{base}{attempt}"
        return key[:10], random.Random(key)

    def _kind(self, rng: random.Random, steps: int, tools: bool) -> str:
        """Draw the answer's kind; text grows likelier with each step of the turn."""
        allowed = [*FINAL_KINDS, *FAULT_KINDS, "slow"]
        if tools and steps < self.max_steps:
            allowed += TOOL_KINDS
        # A first step rarely ends the turn; each step after makes an answer likelier.
        grow = 0.25 + steps
        weights = [self.weights[k] * (grow if k in FINAL_KINDS else 1) for k in allowed]
        if not any(weights):
            return "text"
        return rng.choices(allowed, weights)[0]

    def answer(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> Answer:
        """Return the answer to one call with ``messages`` and ``tools`` offered (pure data).

        The same seed, agent, place and attempt give the same answer.
        """
        key, rng = self._stream(messages)
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        steps = sum(1 for m in messages[last_user + 1 :] if m.get("role") == "assistant")
        structured = any(
            m.get("role") == "system" and RESULT_VERSION in _text(m.get("content"))
            for m in messages
        )
        kind = self._kind(rng, steps, bool(tools))
        delay = 0.0
        if kind == "slow":
            delay = rng.uniform(*self.slow_s)
            kind = (
                "tool_call" if tools and steps < self.max_steps and rng.random() < 0.6 else "text"
            )
        answer = build(
            kind, rng, tools=tools, seen=seen_in(messages), tag=key, structured=structured
        )
        if delay:
            answer = Answer("slow", answer.message, delay_s=delay)
        with self._lock:
            self.counts[answer.kind] += 1
        return answer

    # -- hypothesis ----------------------------------------------------------

    @classmethod
    def strategy(
        cls, *, weights: Mapping[str, float] | None = None, **settings: Any
    ) -> SearchStrategy[ChaosModel]:
        """A hypothesis strategy of chaos models: seeds drawn, and some kinds switched off.

        The kinds a model drawn may lack are the faults and the half-emoji
        answers (:data:`~retinue.testing.chaos_answers.SURROGATE_KINDS`); a
        failing example shrinks toward a model with all of them.
        ``weights`` and ``settings`` (``max_steps``, ``hang_s``, ``slow_s``) are
        applied to every model drawn. Needs hypothesis (``pip install hypothesis``).
        """
        from hypothesis import strategies as st

        base = dict(weights or {})
        switchable = (*FAULT_KINDS, *SURROGATE_KINDS)
        faults = st.lists(st.sampled_from(switchable), unique=True, max_size=len(switchable))

        def make(seed: int, off: list[str]) -> ChaosModel:
            return cls(seed, weights={**base, **dict.fromkeys(off, 0.0)}, **settings)

        return st.builds(make, st.integers(0, 2**32 - 1), faults)
