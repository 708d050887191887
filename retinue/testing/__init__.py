"""What tests of agent systems built on retinue need: runners, a local model server, chaos.

- :func:`echo`: a runner that settles at once; :class:`Gate`: a runner whose
  turns block until the test lets them go (``gate.release(task)``), so a test
  stages any race without sleeping.
- :class:`OpenAIStub`: a local HTTP server speaking the OpenAI chat API on
  127.0.0.1 (scripted answers, per-request errors, ``Retry-After``, delays),
  for ``LiteLLMRunner("openai/<name>", api_base=stub.url, api_key="x")``:
  litellm's real provider path, no network. :class:`RateLimitedStub` is
  one that rate-limits like a provider (requests and tokens per minute,
  concurrent requests: 429 with ``Retry-After`` and OpenAI's error body) and
  reports what it admitted per window (:class:`ProviderQuota`, :class:`QuotaReport`).
- :class:`ChaosModel`: the model ``retinue/chaos`` (:data:`CHAOS_MODEL`), a
  litellm custom provider whose answers are drawn, for a seed, from what real
  providers send: tool calls valid and malformed, unknown tools, huge
  arguments, lone surrogates, empty choices, 429s, 5xx, timeouts, hangs.
  ``ChaosModel.strategy()`` draws them in hypothesis tests.
- :func:`check_invariants`: what a store must show after any run (each
  completion received once and in its recipient's transcript, transcripts a
  provider accepts, no host path in a tool result), as :class:`Broken`
  records; :class:`Leaks` and :func:`shutdown_within`: what a shutdown must
  not leave behind, and its bound; :func:`chaos_workspace`: a workspace with a
  FIFO, symlink loops and links pointing out. ``retinue fuzz`` is built on these.
- :func:`replay`: run a team again with every model call answered from a
  cassette a live run recorded (offline, byte-identical: :func:`outcome_of`),
  for a user's own regression tests.
- Quiescence instead of polling: ``rt.wait_idle(timeout)`` / ``await
  rt.settled()`` return once no turn is queued or running and every event was
  delivered; :func:`wait_settled` waits for one turn to settle without
  receiving its completion.

Nothing here is imported by ``import retinue``; litellm is imported only when
a model is first called.
"""

from __future__ import annotations

from retinue.testing._fuzz_workspace import ChaosWorkspace, chaos_workspace
from retinue.testing.chaos import CHAOS_MODEL, ChaosModel
from retinue.testing.gate import Gate, echo
from retinue.testing.invariants import INVARIANTS, Broken, check_invariants
from retinue.testing.leaks import Leaks, shutdown_within
from retinue.testing.quota import ProviderQuota, QuotaReport
from retinue.testing.rate_stub import RateLimitedStub
from retinue.testing.replay import Replayed, outcome_of, replay
from retinue.testing.settling import wait_settled
from retinue.testing.stub import OpenAIStub, StubReply, StubRequest

__all__ = [  # noqa: RUF022 (plain sorted(), as retinue/__init__.py)
    "Broken",
    "CHAOS_MODEL",
    "ChaosModel",
    "ChaosWorkspace",
    "Gate",
    "INVARIANTS",
    "Leaks",
    "OpenAIStub",
    "ProviderQuota",
    "QuotaReport",
    "RateLimitedStub",
    "Replayed",
    "StubReply",
    "StubRequest",
    "chaos_workspace",
    "check_invariants",
    "echo",
    "outcome_of",
    "replay",
    "shutdown_within",
    "wait_settled",
]
