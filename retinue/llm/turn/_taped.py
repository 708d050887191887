"""One call of a turn through its runner's cassette: answered from it, or recorded to it.

:class:`Taped` wraps a model call (keyed by the agent's path, its call index
and the canonical request), :class:`TapedTool` a host tool call (by the
agent's host-tool call index and the tool's name and arguments). Without a
cassette both answer nothing and record nothing.

Both indices come from the chat the call is made in, never from a counter of
the process: a model call's is the number of assistant messages before it
(:func:`~retinue.llm.cassette.model_call_index`), a host tool call's the number
of host tool calls those messages asked for before it (:func:`host_call_index`).
So a run recorded, killed and resumed in another process keys its calls as one
uninterrupted run does, and a replay finds them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Mapping, Sequence
from typing import Any

from retinue.llm.cassette import Cassette, model_call_index
from retinue.llm.model import CallSettings
from retinue.llm.turn._settings import RunnerSettings
from retinue.protocol.chat import ChatMessage
from retinue.protocol.messages import Usage

__all__ = ["Taped", "TapedTool", "host_call_index"]


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
        """Key the call: its index in the chat (``messages``) and its canonical request."""
        self.cassette = cassette
        self.agent = agent
        if cassette is None:
            self.index, self.request = 0, {}
            return
        self.index = model_call_index(messages)
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
        the cassette's off-script model (a fuzzer's: free, never recorded, one retry; a
        fault perturbation's ``retinue/fault_<kind>``).

        An off-script call keeps the runner's deadline: a shorter one would fire on an
        answer that is merely late on a loaded machine (litellm's first call in a
        process), so a replay's answers would depend on the clock. The fuzzer's chaos
        model answers a hang with a timeout at once instead (``hang_s=None``).
        """
        cassette = self.cassette
        model = None if cassette is None else cassette.off_script_model(self.agent, self.index)
        if model is None:
            return calls
        kwargs = {"model": model, "input_cost_per_token": 0.0, "output_cost_per_token": 0.0}
        return dataclasses.replace(calls, model=model, kwargs=kwargs, retries=1)

    def record(self, message: ChatMessage, usage: Usage) -> None:
        """Record the live call's answer (when recording).

        Raises:
            CassetteError: the cassette cannot be written.
        """
        if self.cassette is not None:
            self.cassette.record_model(self.agent, self.index, self.request, message, usage)


class TapedTool:
    """One tool call of ``agent``: a host tool's goes through the runner's cassette."""

    def __init__(
        self,
        runner: RunnerSettings,
        agent: str,
        name: str,
        arguments: str,
        index: int | None = None,
    ) -> None:
        """Key the call by ``index`` (:func:`host_call_index`; None: the cassette's count of
        this process, in call order)."""
        cassette = runner.cassette
        self.cassette = cassette if name in runner.host_tools else None
        self.agent, self.name, self.arguments = agent, name, arguments
        if self.cassette is None:
            self.index = 0
        else:
            self.index = self.cassette.next_tool_index(agent) if index is None else index

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


def host_call_index(
    history: Sequence[Mapping[str, Any]], call: Mapping[str, Any], host_tools: Container[str]
) -> int:
    """The host-tool call index of ``call``, a tool call of an assistant message of
    ``history`` (the last that holds it): the host tool calls the assistant messages
    before that one asked for, plus those before ``call`` in its own message."""
    where, position = len(history), 0
    for at in range(len(history) - 1, -1, -1):
        found = _position(history[at], call) if history[at].get("role") == "assistant" else None
        if found is not None:
            where, position = at, found
            break
    count = 0
    for message in history[:where]:
        if message.get("role") == "assistant":
            count += sum(1 for c in message.get("tool_calls") or () if _name(c) in host_tools)
    if where < len(history):
        asked = list(history[where].get("tool_calls") or ())
        count += sum(1 for c in asked[:position] if _name(c) in host_tools)
    return count


def _position(message: Mapping[str, Any], call: Mapping[str, Any]) -> int | None:
    """Where ``call`` is among ``message``'s tool calls (itself, else the first of its id)."""
    asked = list(message.get("tool_calls") or ())
    same = next((j for j, c in enumerate(asked) if c is call), None)
    if same is not None:
        return same
    return next((j for j, c in enumerate(asked) if c.get("id") == call.get("id")), None)


def _name(call: Mapping[str, Any]) -> str:
    return str((call.get("function") or {}).get("name", ""))
