"""Compatibility alias: the OpenAI stub lives in :mod:`retinue.testing` now.

``from retinue.llm.stub import OpenAIStub`` keeps working; new code imports
``from retinue.testing import OpenAIStub``.
"""

from __future__ import annotations

from retinue.testing.stub import OpenAIStub, StubReply, StubRequest

__all__ = ["OpenAIStub", "StubReply", "StubRequest"]
