"""The offline models a cassette's fault perturbations are made on: ``retinue/fault_<kind>``.

While :class:`FaultModels` is installed (``with FaultModels(): ...``), a call
on ``retinue/fault_rate_limited``, ``retinue/fault_server_error`` or
``retinue/fault_timeout`` fails on its first attempt as a provider does (a 429
with a ``Retry-After`` header, a 5xx, a timeout: the chaos model's answers of
those kinds, through litellm's real call path), and its retry is answered by
the chaos model it was given (:class:`~retinue.testing.ChaosModel`).
``retinue/fault_malformed_json`` answers with a tool call whose arguments are
not the JSON the tool takes. Deterministic: each answer is
drawn from the request's own digest.
"""

from __future__ import annotations

import collections
import hashlib
import importlib
import json
import random
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from retinue.llm.cassette._perturb import FAULT_PREFIX, MODEL_FAULTS
from retinue.llm.model import register_offline_model
from retinue.testing.chaos import ChaosModel
from retinue.testing.chaos_answers import build
from retinue.testing.chaos_args import seen_in

__all__ = ["FaultModels"]

_MAX_SEEN = 65_536  # attempt counters kept (least recently used go first)


class FaultModels:
    """Serve ``retinue/fault_<kind>`` for each kind of :data:`MODEL_FAULTS` (see the module)."""

    def __init__(self, chaos: ChaosModel) -> None:
        """Keep ``chaos`` (it answers retries); nothing is served until :meth:`install`."""
        self.chaos = chaos
        self._lock = threading.Lock()
        self._attempts: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._previous: list[list[Any]] = []

    def install(self) -> FaultModels:
        """Serve the fault models in this process (until :meth:`uninstall`)."""
        names = [FAULT_PREFIX.partition("/")[2] + kind for kind in MODEL_FAULTS]
        self._previous.append([(n, register_offline_model(n, self._respond)) for n in names])
        return self

    def uninstall(self) -> None:
        """Stop serving them (what served those names before serves again)."""
        for name, previous in self._previous.pop() if self._previous else []:
            register_offline_model(name, previous)

    def __enter__(self) -> FaultModels:
        """Install the models (see :meth:`install`)."""
        return self.install()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Uninstall the models."""
        self.uninstall()

    async def _respond(
        self, model: str, messages: list[Any], optional_params: Mapping[str, Any]
    ) -> Any:
        """The first attempt's fault (or malformed call); a retry's chaos answer.

        Raises:
            litellm exceptions: the fault, as a provider's status maps to it.
        """
        kind = model.removeprefix(FAULT_PREFIX)
        digest = hashlib.sha256(
            json.dumps(messages, sort_keys=True, default=str).encode("utf-8", "surrogatepass")
        ).hexdigest()[:16]
        with self._lock:
            attempt = self._attempts.pop(digest, 0)
            self._attempts[digest] = attempt + 1
            while len(self._attempts) > _MAX_SEEN:
                self._attempts.popitem(last=False)
        tools = optional_params.get("tools") or []
        provider = importlib.import_module("retinue.testing.chaos_provider")
        if attempt == 0 or kind == "malformed_json":
            rng = random.Random(f"{digest}{kind}")
            answer = build(
                kind, rng, tools=tools, seen=seen_in(messages), tag=digest[:10], structured=False
            )
            return await provider.deliver(answer, model, messages, 0.0)
        answer = self.chaos.answer(messages, tools)
        return await provider.deliver(answer, model, messages, self.chaos.hang_s)
