"""One turn of a model agent: the tool loop, from the stored conversation to the final answer.

A turn sends the profile's instructions as the system message, then the
stored conversation, then the turn's input (its task and unread messages,
children's completions rendered as ``[subagent:<path>] ...``). It loops over
the model's tool calls (run through the turn's toolbox) until the model
answers without one; that answer is the turn's output. Every step is
recorded through the supervisor (usage and transcript in one committed
transition); the first step also stores the turn's input, so nothing the
turn was handed is lost if it fails later (see ``LlmStep.takes_input``).

Supervision: a restarted turn (``reason == "restart"``) opens with a marker
saying the previous attempt failed and why; calls of tools the profile names
in ``approve`` pass the approval gate (:mod:`retinue.llm.turn._approval_gate`); a
turn that carries on after its approvals were answered in a new process
(``reason == "approval"``) first runs the step it parked on; with a budget
set, every model call is admitted first (:func:`~retinue.llm.model._budgets.admit_call`);
under provider limits each attempt is then admitted by the runtime's gate
(:class:`~retinue.llm.model.LimitedCalls`): a call a budget refuses never waits.

Side effects: every step's tool calls are journaled (:mod:`retinue.llm.turn._intents`):
their intents are stored with the step that asks for them, before they run,
and their results with the step that answers them. A turn that loads a
journal with calls but no results (its last turn stopped while they ran)
settles those calls in doubt by their effect class before anything else:
it stores its own input first (in the journal's ``then``), reruns the read
and idempotent ones with their keys, reports the unsafe ones (or asks a
person), then adds the results and its input to the chat.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine, Sequence
from types import ModuleType
from typing import Any

import msgspec

from retinue.actors.commands import LlmStep
from retinue.actors.events import ModelCallWatch
from retinue.errors import (
    CassetteMiss,
    CostBudgetExceeded,
    ModelCallFailed,
    ResultContractError,
    TokenBudgetExceeded,
    ToolCallLimitExceeded,
)
from retinue.llm.mcp import mcp_tool_defs
from retinue.llm.model import (
    CallSettings,
    LimitedCalls,
    admit_call,
    check_budgets,
    complete,
    usage_of,
)
from retinue.llm.tools import ToolBoxProtocol, build_toolbox
from retinue.llm.turn._approval_gate import ask_approvals, denied_result, gated, granted_names
from retinue.llm.turn._bridge import llm_load, llm_step
from retinue.llm.turn._context import TurnContext
from retinue.llm.turn._intents import (
    closed,
    denied_in_doubt,
    doubtful_calls,
    intents,
    open_count,
    settle,
    started,
    tool_call,
)
from retinue.llm.turn._settings import RunnerSettings
from retinue.llm.turn._taped import Taped, TapedTool, host_call_index
from retinue.protocol.arrival import assistant_message
from retinue.protocol.budgets import has_budget
from retinue.protocol.chat import (
    ChatMessage,
    for_model,
    render_message,
    repair_dangling,
    stored_chat,
    stored_once,
    stored_transcript,
    timed_call,
    turn_input,
    unanswered_calls,
)
from retinue.protocol.effects import Effect, effect_of
from retinue.protocol.limits import Limits
from retinue.protocol.messages import ToolCallInDoubt, Usage
from retinue.protocol.records import ModelCallRecord, ToolStep
from retinue.protocol.results import encode_result, parse_result, result_instruction
from retinue.protocol.supervision import APPROVAL_REASON, ApprovalRecord
from retinue.protocol.tools import is_mcp_name, resolve_tools
from retinue.protocol.transcript_memo import TranscriptMemo

__all__ = ["REPAIR_PROMPT", "TurnSession"]

_NONE = Usage()
"""No usage (a step that made no model call); a frozen struct, shared."""

_budget: tuple[Limits | None, bool] = (None, False)
"""The limits a turn last started under, and whether they set a budget (frozen limits)."""


def _remember_budget(limits: Limits) -> tuple[Limits, bool]:
    """Whether ``limits`` set a budget (:func:`has_budget`), kept as the last asked about."""
    global _budget
    _budget = (limits, has_budget(limits))
    return _budget


REPAIR_PROMPT = (
    "Your answer does not follow the structured result contract: {error}. "
    "Answer again with only the corrected JSON object."
)
"""The one repair request sent after a structured answer that does not parse."""


class TurnSession:
    """One turn of a :class:`~retinue.llm.turn._runner.LiteLLMRunner`: its chat and its usage.

    ``runner`` is read for its settings only (:class:`RunnerSettings`).
    """

    # The turn's state, as it starts: class defaults (a turn sets one only as it changes
    # it; a one-call turn changes few), but for what __init__ sets.
    box: ToolBoxProtocol | None = None  # built when first needed (_toolbox)
    history: list[ChatMessage]
    # the history's sizes and records, kept between saves: made by the first save that
    # is not the turn's last (a turn saved once, a one-call turn, makes none)
    memo: TranscriptMemo | None = None
    cut = 0
    input_stored = False  # the first save stores the turn's input with its step
    task_at: int | None = None
    agent_usage = tree_usage = _NONE
    calls_made = 0
    repaired = False
    call_times: list[ModelCallRecord]  # stored with the transcript (its timeline)
    journal: ToolStep | None = None  # the tool calls' journal, stored with each save
    step = 0  # this generation's tool steps so far (a key's step)
    doubt: Sequence[Any] = ()  # the chat's calls of a journal found open (in doubt)
    then: str | None = None  # this turn's input, added after the open step's results
    in_doubt: tuple[ToolCallInDoubt, ...] = ()  # published with the next save
    tagged = False  # the history was loaded: messages of it carry their generation tags
    # the model call in flight, as _call_model started it (for _answered)
    call_watch: ModelCallWatch
    call_settings: CallSettings
    call_started = 0.0
    tape: Taped | None = None

    def __init__(self, runner: RunnerSettings, turn: TurnContext, litellm: ModuleType) -> None:
        """Prepare the turn (nothing is read or called yet)."""
        self.runner = runner
        self.turn = turn
        self.litellm = litellm
        self.limits = limits = turn.limits
        self.structured = (runner.result_format or turn.profile.result_format) == "structured"
        budget = _budget  # else no call is admitted, no budget checked
        if budget[0] is not limits:  # (every turn of a runtime has its limits: asked once)
            budget = _remember_budget(limits)
        self.budgeted = budget[1]
        self.call_times = []
        self.limited = LimitedCalls.of(turn, litellm, runner.calls.model, runner.calls.kwargs)

    @property
    def tools(self) -> str | Sequence[str] | None:
        """The tools the turn is granted: the runner's, else its profile's."""
        tools = self.runner.tools
        return tools if tools is not None else self.turn.profile.tools

    def _system(self) -> list[ChatMessage]:
        text = self.turn.instructions or ""
        if self.structured:
            text = f"{text}\n\n{result_instruction()}" if text else result_instruction()
        return [{"role": "system", "content": text}] if text else []

    async def run(self) -> str:
        """Run the turn's tool loop; return the model's final answer (the turn's output).

        Raises:
            ModelCallFailed, TokenBudgetExceeded, ToolCallLimitExceeded,
            ResultContractError: as :meth:`LiteLLMRunner.__call__` says.
        """
        turn = self.turn
        started = turn.llm_state  # a scheduler-started turn carries its state: no await
        if started is not None:
            turn.llm_state = None
            self._open(started.transcript(), started.usage, started.tree_usage)
        else:
            self._open(*await llm_load(turn))
        schemas = self._kept_schemas()  # the kept ones: no toolbox built, nothing awaited
        if schemas is None:
            schemas = await self._schemas()
        if self.turn.reason == APPROVAL_REASON:
            await self._carry_on(await self._toolbox())
        elif self.doubt:
            await self._settle(await self._toolbox())
        while True:
            admitted = self.budgeted and await admit_call(
                self.turn, self.agent_usage, self.tree_usage
            )
            # the call is awaited here, not in a coroutine of its own: one frame fewer
            # to make, and to pass through at each resumption while the model answers
            call = self._call_model(schemas)
            if isinstance(call, tuple):  # the cassette answered: nothing to await
                assistant, usage = call
            else:
                watch = self.call_watch
                try:
                    if watch.span is None:  # no context held across the call for no span
                        response = await call
                    else:
                        with watch.current():  # litellm's own OTel callback sees it as its parent
                            response = await call
                    message = assistant_message(_first_message(response, self.runner.model))
                except BaseException as exc:
                    watch.failed(exc)
                    raise
                assistant, usage = self._answered(response, message)
            self.history.append(assistant)
            calls = assistant.get("tool_calls") or []
            if calls:
                toolbox = self.box or await self._toolbox()  # built at the first tool step
                await self._run_tools(toolbox, usage, assistant, admitted)
                continue
            answer, repairable = self._final(assistant["content"] or "")
            if repairable and not self.repaired and isinstance(answer, ResultContractError):
                await self._save(usage, ends_call=admitted)  # the turn goes on: a repair
                self._check_spent()
                await self._repair(answer)
                continue
            self._save_last(usage, ends_call=admitted)  # committed with the turn's settle
            self._check_spent()
            if isinstance(answer, ResultContractError):
                raise answer
            return answer

    def _call_model(
        self, schemas: list[dict[str, Any]]
    ) -> tuple[ChatMessage, Usage] | Coroutine[Any, Any, Any]:
        """Start one model call (reported on the turn's watch): return the coroutine that
        answers litellm's response, for :meth:`run` to await (then :meth:`_answered`),
        or, for a call the cassette answers, its answer and usage.

        Raises:
            CassetteMiss: replaying, and the cassette has no such call.
        """
        calls = self.runner.calls
        history = self.history
        messages = self._system() + (for_model(history) if self.tagged else history)
        traced = self.turn.watch.span is not None  # the chat span reads the request
        request = dict(calls.kwargs, messages=messages, stream=calls.stream) if traced else None
        tape = None
        if self.runner.cassette is not None:
            tape = Taped(self.runner.cassette, self.turn.agent.path, calls, messages, schemas)
            recorded = tape.answer()  # CassetteMiss: replaying, not recorded
            if recorded is not None:
                return self._replayed(calls.model, request, *recorded)
        self.call_watch = watch = self.turn.watch.model_call(calls.model, request)
        self.call_started = time.time()
        if tape is not None:
            calls = tape.live(calls)
        self.tape = tape
        self.call_settings = calls
        return complete(
            self.litellm,
            calls,
            messages,
            schemas,
            self.limits.max_concurrent_calls,
            watch,
            self.limited,
        )

    def _answered(self, response: Any, message: ChatMessage) -> tuple[ChatMessage, Usage]:
        """The call :meth:`_call_model` started was answered with ``response`` (``message``:
        its answer, every text of it made storable where it arrives,
        :func:`~retinue.protocol.arrival.assistant_message`): report and time it; return
        the answer and its usage."""
        calls = self.call_settings
        usage = usage_of(self.litellm, calls, response)
        if self.tape is not None:
            self.tape.record(message, usage)
        self.call_watch.finished(usage, response)
        self.call_times.append(timed_call(self.turn.agent, calls.model, self.call_started, usage))
        del self.call_times[: -self.limits.transcript_max_calls]  # the newest are kept
        return message, usage

    def _replayed(
        self, model: str, request: dict[str, Any] | None, message: ChatMessage, usage: Usage
    ) -> tuple[ChatMessage, Usage]:
        """A call the cassette answers: reported and timed as a call of ``model`` would be."""
        watch = self.turn.watch.model_call(model, request)
        started = time.time()
        watch.finished(usage)
        self.call_times.append(timed_call(self.turn.agent, model, started, usage))
        del self.call_times[: -self.limits.transcript_max_calls]
        return message, usage

    def _open(self, raw: bytes | None, agent_usage: Usage, tree_usage: Usage) -> None:
        """Take the stored conversation ``raw``, the usage totals and the journal (what
        :func:`~retinue.llm.turn._bridge.llm_load` answers); open the chat with this
        turn's input.

        A turn carrying on after a reopen keeps the step it parked on (its
        calls have no results yet); its input follows their results. So does
        the input of a turn that finds its journal's step open (calls in doubt).
        With nothing stored (an agent's first turn), the chat is its input alone.
        """
        turn = self.turn
        self.agent_usage, self.tree_usage = agent_usage, tree_usage
        generation = turn.agent.generation
        if raw is None and turn.reason != APPROVAL_REASON:  # no journal, no call in doubt
            text = turn_input(turn.task, turn.reason, turn.messages, turn.agent.last_error)
            self.journal = closed(None, generation)
            self.task_at = 0  # the transcript cut always keeps this turn's task
            self.history = [{"role": "user", "content": text}]
            return
        history, self.cut, self.call_times, journal = stored_transcript(raw)  # one decode
        self.tagged = True  # its messages keep their generations (for_model drops them)
        if journal is not None and journal.generation == generation:
            self.step = journal.step
        if turn.reason == APPROVAL_REASON:
            self.journal = journal
            self.history = history
            self.input_stored = True  # its input joins the chat after the parked step
            return
        text = turn_input(turn.task, turn.reason, turn.messages, turn.agent.last_error)
        self.doubt = doubtful_calls(journal, history) or ()  # an empty one held as ()
        if self.doubt and journal is not None:
            self.journal, self.history = journal, history
            self.then = text if journal.then is None else f"{journal.then}\n\n{text}"
            return
        self.journal = closed(journal, generation)
        self.history = repair_dangling(history)
        self.task_at = len(self.history)  # the transcript cut always keeps this turn's task
        self.history.append({"role": "user", "content": text})

    async def _carry_on(self, toolbox: ToolBoxProtocol) -> None:
        """Run the step a turn parked on before its process stopped; then add its input."""
        calls = doubtful_calls(self.journal, self.history)
        if not calls:  # parked by an older retinue, before journals: its step starts now
            calls = unanswered_calls(self.history)
            if calls:
                self._open_step(toolbox, calls)
        if calls:
            results = await self._call_tools(toolbox, calls, resume=True)
            self._answer_calls(calls, results)
        then = self.journal.then if self.journal is not None else None
        parts = ([then] if then else []) + [render_message(m) for m in self.turn.messages]
        if parts:
            self.task_at = len(self.history)
            self.history.append({"role": "user", "content": "\n\n".join(parts)})
        self.journal = closed(self.journal, self.turn.agent.generation)
        self.input_stored = False  # the next save stores the input (or the results)
        await self._save(_NONE)

    async def _settle(self, toolbox: ToolBoxProtocol) -> None:
        """Act on the calls in doubt of the step the last turn left open, then add the input.

        First one commit stores this turn's input (in the journal's ``then``,
        so nothing it was handed is lost), the calls as they now run and the
        events of those in doubt; then they run (or wait for a person), and
        their results and the input join the chat.
        """
        assert self.journal is not None
        mode = self.turn.profile.in_doubt
        self.journal, events = settle(
            msgspec.structs.replace(self.journal, then=self.then), mode, self.turn.agent
        )
        self.in_doubt = tuple(events)
        await self._save(_NONE)
        calls = self.doubt
        results = await self._call_tools(toolbox, calls)
        self._answer_calls(calls, results)
        self.task_at = len(self.history)
        self.history.append({"role": "user", "content": self.then or ""})
        self.journal = closed(self.journal, self.turn.agent.generation)
        await self._save(_NONE)

    def _open_step(self, toolbox: ToolBoxProtocol, calls: Sequence[Any]) -> None:
        """Journal a new step of ``calls`` (each call's intent, before any runs)."""
        self.step += 1
        agent = self.turn.agent
        names = granted_names(toolbox)
        approve = self.turn.profile.approve
        gated_ids = {c["id"] for c in gated(approve, calls, names)} if approve else set()
        overrides = self.turn.profile.effects

        def effect(name: str) -> Effect:
            return effect_of(names.get(name, name), toolbox.effect(name), overrides)

        self.journal = intents(
            agent.id, agent.generation, self.step, calls, names, effect, gated_ids
        )

    def _kept_schemas(self) -> list[dict[str, Any]] | None:
        """The schemas the runner's last such turn left (:mod:`~retinue.llm.turn._offered`),
        or None: :meth:`_schemas` builds the toolbox for them."""
        runner = self.runner
        if runner.toolbox_builder is not build_toolbox:
            return None
        turn = self.turn
        profile, limits = turn.profile, turn.limits
        can_spawn = bool(profile.subagents) and limits.depth_allowed(turn.agent.depth + 1)
        return runner.offered.get(profile, limits, can_spawn)

    async def _schemas(self) -> list[dict[str, Any]]:
        """The schemas this turn offers its model when none are kept (:meth:`_kept_schemas`):
        its toolbox's, built now (and kept for the next such turns with the default builder).

        Raises:
            ConfigurationError: the toolbox cannot be built (its tools are not valid).
        """
        runner = self.runner
        if runner.toolbox_builder is not build_toolbox:
            return (await self._toolbox()).schemas()
        turn = self.turn
        profile, limits = turn.profile, turn.limits
        can_spawn = bool(profile.subagents) and limits.depth_allowed(turn.agent.depth + 1)
        toolbox = await self._toolbox()
        granted = resolve_tools(self.tools, owner=profile.name) or ()
        runner.offered.keep(profile, limits, can_spawn, toolbox, granted)
        return toolbox.schemas()

    async def _toolbox(self) -> ToolBoxProtocol:
        """The turn's toolbox, built the first time it is asked for."""
        if self.box is not None:
            return self.box
        runner = self.runner
        owner = self.turn.profile.name
        granted = resolve_tools(self.tools, owner=owner) or ()
        mcp = any(is_mcp_name(n) for n in granted)  # else the MCP layer is not even asked
        self.box = runner.toolbox_builder(
            self.turn,
            tools=self.tools,
            workspace=runner.workspace,
            host_tools=runner.host_tools,
            tool_timeout_s=runner.tool_timeout_s,
            mcp_tools=await mcp_tool_defs(runner.mcp, self.tools, owner) if mcp else [],
        )
        return self.box

    async def _run_tools(
        self, toolbox: ToolBoxProtocol, usage: Usage, assistant: ChatMessage, admitted: bool
    ) -> None:
        """Run the model's tool calls (at once) and record their results.

        Raises:
            ToolCallLimitExceeded: the turn would pass ``max_tool_calls``.
        """
        calls = assistant.get("tool_calls") or []
        limit = self.runner.max_tool_calls
        over = self.calls_made + len(calls) > limit
        if over:
            self._answer_calls(calls, [_not_run(limit)] * len(calls))
        else:
            self._open_step(toolbox, calls)  # the intents, committed with this step
        await self._save(usage, ends_call=admitted)
        try:
            self._check_spent()
        except (TokenBudgetExceeded, CostBudgetExceeded):
            if not over:  # none of them ran: they are not in doubt
                self._answer_calls(calls, [_spent()] * len(calls))
                self.journal = closed(self.journal, self.turn.agent.generation)
                await self._save(_NONE)
            raise
        if over:
            raise ToolCallLimitExceeded(
                f"the model asked for more than max_tool_calls={limit} tool calls in one turn",
                limit=limit,
                value=self.calls_made + len(calls),
                path=self.turn.agent.path,
            )
        self.calls_made += len(calls)
        results = await self._call_tools(toolbox, calls)
        self._answer_calls(calls, results)
        self.journal = closed(self.journal, self.turn.agent.generation)
        await self._save(_NONE)

    async def _call_tools(
        self, toolbox: ToolBoxProtocol, calls: Sequence[Any], *, resume: bool = False
    ) -> list[str]:
        """Run the journaled ``calls`` of the open step at once, after the approval gate;
        return their results in order.

        A step with calls that need approval (the profile's ``approve``, or a
        call in doubt sent to a person) waits for their answers first (the turn
        parks); then the journal is stored with every call to run ``running``
        (a denied one ``done``, not run), before any runs, so a crash while
        they run leaves them in doubt, never run twice behind anyone's back.
        """
        journal = self.journal
        assert journal is not None
        names = granted_names(toolbox)
        entries = {c.call_id: c for c in journal.calls}
        answers: dict[str, ApprovalRecord] = {}
        if any(c.state == "waiting" for c in journal.calls):
            approve = self.turn.profile.approve
            gated_ids = {c["id"] for c in gated(approve, calls, names)} if approve else set()
            doubt = {c.call_id: c.key for c in journal.calls if c.state == "waiting" and c.in_doubt}
            asked = [  # a call denied before a crash (done) is not asked about again
                c
                for c in calls
                if entries[c["id"]].state == "waiting"
                and (c["id"] in gated_ids or c["id"] in doubt)
            ]
            answers = await ask_approvals(
                self.turn, asked, names=names, resume=resume, in_doubt=doubt
            )
            denied = {
                i: denied_in_doubt(entries[i], a.reason or a.status)
                if entries[i].in_doubt
                else denied_result(a)
                for i, a in answers.items()
                if a.status != "approved"
            }
            self.journal = journal = started(journal, denied)
            entries = {c.call_id: c for c in journal.calls}
            await self._save(_NONE)  # the calls are running from here on

        async def one(call: Any) -> str:
            entry = entries[call["id"]]
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            watch = self.turn.watch.tool_call(call["id"], name, arguments, toolbox.kind(name))
            answer = answers.get(call["id"])
            if entry.state == "done":
                note = f"denied: {answer.reason or answer.status}" if answer else "not run"
                watch.finished(note)
                return entry.result or _not_run(self.runner.max_tool_calls)
            ran_as = tool_call(journal, entry, self.turn.agent.id)
            taped = self.runner.cassette is not None  # only a cassette reads the index
            index = host_call_index(self.history, call, self.runner.host_tools) if taped else 0
            tool = TapedTool(self.runner, self.turn.agent.path, name, arguments, index)
            try:
                recorded = tool.answer()  # replaying host tools: the recorded result
            except CassetteMiss as exc:  # not recorded: the turn fails, loudly
                watch.finished(str(exc))
                raise
            try:
                with watch.current():  # what the tool spawns nests under its span
                    result, error = recorded or await toolbox.run(name, arguments, ran_as)
                if recorded is None:
                    tool.record(result, error)
            except BaseException:
                watch.cancelled()
                raise
            watch.finished(error, result)
            return result

        return list(await asyncio.gather(*(one(c) for c in calls)))

    def _final(self, text: str) -> tuple[str | ResultContractError, bool]:
        """The turn's output for the model's final ``text``, or the error of a structured
        answer that breaks the contract; and whether a repair may mend it (an answer
        that does not parse: once; a result over the output bound fails the turn)."""
        if not self.structured:
            return text, False
        try:
            result = parse_result(text)
        except ResultContractError as exc:
            return exc, True
        try:
            return encode_result(result, self.limits.output_max_bytes), False
        except ResultContractError as exc:
            return exc, False

    async def _repair(self, error: ResultContractError) -> None:
        """Ask the model once to repair its structured answer (the one repair request)."""
        self.repaired = True
        self.history.append({"role": "user", "content": REPAIR_PROMPT.format(error=error)})
        await self._save(_NONE)

    def _answer_calls(self, calls: Sequence[Any], results: Sequence[str]) -> None:
        for call, content in zip(calls, results, strict=True):
            self.history.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "name": call["function"]["name"],
                    "content": content,
                }
            )

    def _check_spent(self) -> None:
        """After a call is recorded: the turn fails once a budget is crossed."""
        if self.budgeted:
            check_budgets(
                self.limits, self.turn.agent.path, self.agent_usage, self.tree_usage, before=False
            )

    async def _save(self, usage: Usage, *, ends_call: bool = False) -> None:
        """Store the chat (bounded) and add ``usage``; the first save also takes the input.

        ``ends_call``: ``usage`` is an admitted call's (its reservation ends).
        """
        step = self._step(usage, ends_call)
        self.agent_usage, self.tree_usage = await llm_step(
            self.turn,
            usage,
            step.transcript,
            takes_input=step.takes_input,
            ends_call=ends_call,
            open_calls=step.open_calls,
            in_doubt=step.in_doubt,
        )

    def _save_last(self, usage: Usage, *, ends_call: bool = False) -> None:
        """Hand the turn's last step (as :meth:`_save` stores one) to its settle.

        It is committed with the settle, in one transition (``Settle.step``);
        the usage totals the turn checks its budgets on are counted here (the
        supervisor checks them again on its own, exact for the tree), when it
        has a budget to check them against.
        """
        self.turn.last_step = self._step(usage, ends_call, last=True)
        if self.budgeted:  # else nothing reads them again: the turn ends here
            self.agent_usage = self.agent_usage.add(usage)
            self.tree_usage = self.tree_usage.add(usage)

    def _step(self, usage: Usage, ends_call: bool, *, last: bool = False) -> LlmStep:
        """The next step to store: the chat (bounded, encoded) with ``usage``.

        ``last``: the turn's last step (nothing is saved after it). A turn's
        first save that is not its last makes the memo the next saves reuse; a
        turn saved once (a one-call turn) makes none.
        """
        agent = self.turn.agent
        memo = self.memo
        if memo is None and last:  # stored once: the bounded chat is not kept
            raw = stored_once(
                agent.id,
                self.history,
                self.limits.transcript_max_bytes,
                self.task_at,
                cut=self.cut,
                calls=self.call_times,
                generation=agent.generation,
                journal=self.journal,
            )
        else:
            if memo is None:
                memo = self.memo = TranscriptMemo()
            history, cut, task_at, raw = stored_chat(
                agent.id,
                self.history,
                self.limits.transcript_max_bytes,
                self.task_at,
                cut=self.cut,
                calls=self.call_times,
                generation=agent.generation,
                journal=self.journal,
                memo=memo,
            )
        step = LlmStep(
            self.turn.ref,
            usage,
            raw,
            not self.input_stored,
            ends_call,
            open_count(self.journal),
            self.in_doubt,
        )
        if not last:  # the turn goes on from the chat as stored (stored_chat's, above)
            self.history, self.cut, self.task_at = history, cut, task_at
            self.input_stored = True
            self.in_doubt = ()
        return step


def _first_message(response: Any, model: str) -> Any:
    """The first choice's message of a response.

    Raises:
        ModelCallFailed: the response has no choices.
    """
    choices = getattr(response, "choices", None) or []
    if not choices:
        raise ModelCallFailed(f"{model}: the model returned no choices", provider=model)
    return choices[0].message


def _not_run(limit: int) -> str:
    return json.dumps({"error": f"not run: the turn reached max_tool_calls={limit}"})


def _spent() -> str:
    return json.dumps({"error": "not run: the turn's budget is spent"})
