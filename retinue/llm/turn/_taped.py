"""One call of a turn through its runner's cassette: answered from it, or recorded to it.

:class:`Taped` wraps a model call (keyed by the agent's path, its call index
and the canonical request), :class:`TapedTool` a host tool call (by the
agent's host-tool call index and the tool's name and arguments). Without a
cassette both answer nothing and record nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from retinue.llm.cassette import Cassette
from retinue.llm.chat import ChatMessage
from retinue.llm.model import CallSettings
from retinue.llm.turn._settings import RunnerSettings
from retinue.protocol.messages import Usage

__all__ = ["OFF_SCRIPT_TIMEOUT_S", "Taped", "TapedTool"]

OFF_SCRIPT_TIMEOUT_S = 2.0
"""The most an off-script call (a fuzzer's chaos answer) may take: its hangs end there."""


class Taped:
    """One model call of ``agent`` through ``cassette`` (None: no cassette)."""

    def __init__(
        self,
        cassette: Cassette | None,
        agent: str,
        calls: CallSettings,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
    ) -> None:
        """Key the call: the agent's next call index and its canonical request."""
        self.cassette = cassette
        self.agent = agent
        if cassette is None:
            self.index, self.request = 0, {}
            return
        self.index = cassette.next_model_index(agent)
        self.request = cassette.request(calls.model, messages, tools, calls.kwargs)

    def answer(self) -> tuple[ChatMessage, Usage] | None:
        """The recorded answer and usage (None: make the call live).

        Raises:
            CassetteMiss: replaying, and the call was not recorded.
            CassetteError: the cassette is damaged or of a newer version.
        """
        if self.cassette is None:
            return None
        return self.cassette.model_answer(self.agent, self.index, self.request)

    def live(self, calls: CallSettings) -> CallSettings:
        """How a call the cassette does not answer is made: as the runner makes it, or on
        the cassette's off-script model (a fuzzer's: free, never recorded)."""
        model = None if self.cassette is None else self.cassette.off_script
        if model is None:
            return calls
        kwargs = {"model": model, "input_cost_per_token": 0.0, "output_cost_per_token": 0.0}
        timeout = min(calls.request_timeout_s, OFF_SCRIPT_TIMEOUT_S)
        return dataclasses.replace(
            calls, model=model, kwargs=kwargs, request_timeout_s=timeout, retries=1
        )

    def record(self, message: ChatMessage, usage: Usage) -> None:
        """Record the live call's answer (when recording).

        Raises:
            CassetteError: the cassette cannot be written.
        """
        if self.cassette is not None:
            self.cassette.record_model(self.agent, self.index, self.request, message, usage)


class TapedTool:
    """One tool call of ``agent``: a host tool's goes through the runner's cassette."""

    def __init__(self, runner: RunnerSettings, agent: str, name: str, arguments: str) -> None:
        """Take the call's index now (calls of one step are keyed in the model's order)."""
        cassette = runner.cassette
        self.cassette = cassette if name in runner.host_tools else None
        self.agent, self.name, self.arguments = agent, name, arguments
        self.index = 0 if self.cassette is None else self.cassette.next_tool_index(agent)

    def answer(self) -> tuple[str, str | None] | None:
        """The recorded result and error (None: run the tool).

        Raises:
            CassetteMiss: replaying host tools, and this call was not recorded.
        """
        if self.cassette is None:
            return None
        return self.cassette.tool_answer(self.agent, self.index, self.name, self.arguments)

    def record(self, result: str, error: str | None) -> None:
        """Record the tool's result (when recording)."""
        if self.cassette is not None:
            self.cassette.record_tool(
                self.agent, self.index, self.name, self.arguments, result, error
            )
