"""Prompt tokens counted with litellm's counter for the model, never over the network."""

from __future__ import annotations

import socket
from types import ModuleType
from typing import Any

import pytest

from retinue.protocol.provider_limits import count_prompt_tokens, rough_tokens

CHAT = [
    {"role": "system", "content": "You review code."},
    {"role": "user", "content": "Check the authentication module for mistakes. " * 20},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the workspace.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def test_a_prompt_is_counted_by_litellm_for_its_model(litellm: ModuleType) -> None:
    counted = count_prompt_tokens(litellm, "openai/gpt-4.1-mini", CHAT, TOOLS)
    assert counted == litellm.token_counter(model="openai/gpt-4.1-mini", messages=CHAT, tools=TOOLS)
    assert counted > count_prompt_tokens(litellm, "openai/gpt-4.1-mini", CHAT)  # tools count


def test_a_model_whose_tokenizer_litellm_would_download_is_counted_offline(
    litellm: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """litellm fetches llama's and cohere's tokenizers from the Hugging Face hub (with
    retries: ~25 s offline); they are counted with its default encoding instead."""
    looked_up: list[Any] = []
    real = socket.getaddrinfo

    def recording(host: Any, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(host)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recording)
    counted = count_prompt_tokens(litellm, "ollama/llama-3-8b-instruct", CHAT)
    assert counted == litellm.token_counter(model="", messages=CHAT)
    assert looked_up == []


def test_a_chat_litellm_cannot_count_gets_the_rough_count(litellm: ModuleType) -> None:
    odd = [{"role": "user", "content": [{"type": "hologram", "data": "x" * 40}]}]
    assert count_prompt_tokens(litellm, "openai/gpt-4.1-mini", odd) == rough_tokens(odd)
