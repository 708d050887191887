"""The LLM layer: a litellm-driven turn runner, its tools interface and an offline model.

Importing this package does not import litellm; the runner imports it the
first time a model is called (see :mod:`retinue.llm.provider`).
"""

from __future__ import annotations

from retinue.llm.provider import SCRIPTED_MODEL
from retinue.llm.runner import LiteLLMRunner, model_runner_factory

__all__ = ["SCRIPTED_MODEL", "LiteLLMRunner", "model_runner_factory"]
