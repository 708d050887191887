"""What tests of agent systems built on retinue need: runners, a local model server, probes.

- :func:`echo`: a runner that settles at once; :class:`Gate`: a runner whose
  turns block until the test lets them go (``gate.release(task)``), so a test
  stages any race without sleeping.
- :class:`OpenAIStub`: a local HTTP server speaking the OpenAI chat API on
  127.0.0.1 (scripted answers, per-request errors, ``Retry-After``, delays),
  for ``LiteLLMRunner("openai/<name>", api_base=stub.url, api_key="x")``:
  litellm's real provider path, no network.
- Quiescence instead of polling: ``rt.wait_idle(timeout)`` / ``await
  rt.settled()`` return once no turn is queued or running and every event was
  delivered.

Nothing here is imported by ``import retinue``.
"""

from __future__ import annotations

from retinue.testing.gate import Gate, echo
from retinue.testing.stub import OpenAIStub, StubReply, StubRequest

__all__ = ["Gate", "OpenAIStub", "StubReply", "StubRequest", "echo"]
