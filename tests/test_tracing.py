"""OpenTelemetry traces (retinue.tracing): spans that nest like the tree, per the GenAI conventions.

Recorded with the SDK's in-memory exporter on a provider given to
``Runtime.open(tracer_provider=...)``; the offline model runs the real litellm
path. Skipped, with the reason, without the SDK (``pip install -e '.[dev]'``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cliutil import env

from retinue import AgentState, Profile, Runtime, Turn
from retinue.llm import SCRIPTED_MODEL
from retinue.testing import Gate, OpenAIStub, StubReply, echo

pytest.importorskip(
    "opentelemetry.sdk",
    reason="the tracing tests need the OpenTelemetry SDK: pip install -e '.[dev]'",
)
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "code_review" / "team.toml"
WAIT_S = 120.0


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield tracer_provider
    tracer_provider.shutdown()


def named(spans: tuple[ReadableSpan, ...] | list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if (s.name or "").startswith(prefix)]


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def run_script(code: str, store: Path, **environ: str) -> str:
    """Run ``code`` with ``store`` as its argument in a fresh interpreter; return its output."""
    done = subprocess.run(
        [sys.executable, "-c", code, str(store)],
        env=env(**environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_span_tree_of_a_team_run_matches_the_agent_tree(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    host = provider.get_tracer("host")
    with Runtime.open(tmp_path / "s", team=EXAMPLE, tracer_provider=provider) as rt:
        with host.start_as_current_span("handle request") as request:
            lead = rt.spawn("lead", "review the change", name="review")
        rt.wait(lead.id, timeout=WAIT_S)
        rt.wait_idle(timeout=WAIT_S)
        agents = {a.path: a for a in rt.agents()}
    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1  # one trace: the whole delegation
    turns = {attrs(s)["retinue.agent.path"]: s for s in named(spans, "invoke_agent ")}
    assert set(turns) == set(agents) and len(agents) == 10  # three levels
    by_id = {s.context.span_id: s for s in spans}
    # The host's span parents the top-level turn.
    assert parent_id(turns["/root/review"]) == request.get_span_context().span_id
    for path, span in turns.items():
        agent = agents[path]
        if agent.parent_path == "/root":
            continue
        # A child's turn is the child of its parent's execute_tool spawn_subagents span,
        # itself in the parent's turn.
        spawner = by_id[parent_id(span)]
        assert spawner.name == "execute_tool spawn_subagents"
        assert parent_id(spawner) == turns[agent.parent_path].context.span_id
    for span in named(spans, "chat ") + named(spans, "execute_tool "):
        owner = by_id[parent_id(span)]
        assert owner.name.startswith("invoke_agent ")


def test_attributes_follow_the_genai_conventions(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    with Runtime.open(tmp_path / "s", team=EXAMPLE, tracer_provider=provider) as rt:
        lead = rt.spawn("lead", "review", name="review")
        rt.wait(lead.id, timeout=WAIT_S)
        rt.wait_idle(timeout=WAIT_S)
        child = rt.get("/root/review/security")
    spans = exporter.get_finished_spans()
    (turn,) = [s for s in named(spans, "invoke_agent ") if attrs(s)["gen_ai.agent.id"] == child.id]
    assert turn.name == "invoke_agent security" and turn.kind is SpanKind.INTERNAL
    assert attrs(turn) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "security",
        "gen_ai.agent.id": child.id,
        "gen_ai.conversation.id": lead.id,  # the top-level agent's id
        "gen_ai.provider.name": "retinue",
        "gen_ai.request.model": "scripted",
        "retinue.agent.path": "/root/review/security",
        "retinue.turn.generation": 1,
        "retinue.turn.reason": "spawn",
        "retinue.turn.attempt": 1,
        "retinue.turn.status": "completed",
    }
    chat = [
        s for s in named(spans, "chat ") if s.parent and s.parent.span_id == turn.context.span_id
    ]
    assert chat and all(s.name == "chat scripted" and s.kind is SpanKind.CLIENT for s in chat)
    first = attrs(chat[0])
    assert first["gen_ai.operation.name"] == "chat"
    assert (first["gen_ai.provider.name"], first["gen_ai.request.model"]) == ("retinue", "scripted")
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert first["gen_ai.usage.input_tokens"] > 0 and first["gen_ai.usage.output_tokens"] > 0
    assert attrs(chat[-1])["gen_ai.response.finish_reasons"] == ("stop",)
    (tool,) = [
        s
        for s in named(spans, "execute_tool ")
        if s.parent and s.parent.span_id == turn.context.span_id
    ]
    assert tool.name == "execute_tool spawn_subagents" and tool.kind is SpanKind.INTERNAL
    assert attrs(tool) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "spawn_subagents",
        "gen_ai.tool.call.id": "call_0_0_spawn_subagents",
        "gen_ai.tool.type": "function",
    }
    assert tool.status.status_code is StatusCode.UNSET


def test_no_content_is_recorded_without_the_opt_in(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter, monkeypatch: Any
) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    profiles = [Profile("leaf", model=SCRIPTED_MODEL, instructions="SECRET-INSTRUCTIONS")]
    with Runtime.open(tmp_path / "s", profiles=profiles, tracer_provider=provider) as rt:
        info = rt.spawn("leaf", "SECRET-TASK")
        rt.wait(info.id, timeout=WAIT_S)
        rt.wait_idle(timeout=WAIT_S)
    spans = exporter.get_finished_spans()
    assert named(spans, "chat ")
    text = json.dumps([attrs(s) for s in spans], default=str)
    assert "SECRET" not in text and "gen_ai.input.messages" not in text


def test_content_with_the_opt_in_is_recorded_and_bounded(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter, monkeypatch: Any
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    profiles = [Profile("leaf", model=SCRIPTED_MODEL, instructions="Be brief.")]
    from retinue import Limits

    limits = Limits(trace_content_max_bytes=200)
    with Runtime.open(
        tmp_path / "s", profiles=profiles, tracer_provider=provider, limits=limits
    ) as rt:
        info = rt.spawn("leaf", "check " + "x" * 500)
        rt.wait(info.id, timeout=WAIT_S)
        rt.wait_idle(timeout=WAIT_S)
    (chat,) = named(exporter.get_finished_spans(), "chat ")
    recorded = attrs(chat)
    assert json.loads(recorded["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "Be brief."}
    ]
    (sent,) = json.loads(recorded["gen_ai.input.messages"])  # cut texts, whole JSON
    (part,) = sent["parts"]
    assert sent["role"] == "user" and part["type"] == "text"
    assert len(part["content"].encode()) <= 200 and part["content"].endswith("…[truncated]")
    assert json.loads(recorded["gen_ai.output.messages"])[0]["finish_reason"] == "stop"


def test_follow_up_and_resume_continue_the_agents_trace_with_a_link(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    host = provider.get_tracer("host")
    with Runtime.open(
        tmp_path / "s", profiles=[Profile("worker", runner=echo)], tracer_provider=provider
    ) as rt:
        with host.start_as_current_span("first request") as first:
            info = rt.spawn("worker", "t", name="w")
        rt.wait(info.id, timeout=WAIT_S)
        with host.start_as_current_span("second request") as second:
            rt.follow_up(info.id, "again")
        rt.wait(info.id, timeout=WAIT_S)
        rt.wait_idle(timeout=WAIT_S)
    turns = named(exporter.get_finished_spans(), "invoke_agent ")
    assert [attrs(s)["retinue.turn.generation"] for s in turns] == [1, 2]
    one, two = turns
    assert one.context.trace_id == two.context.trace_id == first.get_span_context().trace_id
    assert parent_id(two) == first.get_span_context().span_id  # the agent's stored context
    assert [link.context.span_id for link in two.links] == [second.get_span_context().span_id]
    assert attrs(two)["retinue.turn.reason"] == "follow_up"


def test_a_wake_links_to_the_childs_turn_that_woke_it(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    gate = Gate()

    def lead(turn: Turn) -> str:
        if turn.reason == "spawn":
            turn.spawn("worker", "w", name="w")  # not waited for: its completion wakes us
            return "delegated"
        return "woken"

    profiles = [Profile("lead", subagents=["worker"], runner=lead), Profile("worker", runner=gate)]
    with Runtime.open(tmp_path / "s", profiles=profiles, tracer_provider=provider) as rt:
        info = rt.spawn("lead", "go", name="lead")
        assert rt.wait(info.id, timeout=WAIT_S).output == "delegated"
        gate.release()  # the child completes once the lead is idle: a wake
        rt.wait(info.id, timeout=WAIT_S)
        rt.wait_idle(timeout=WAIT_S)
        woke = rt.get(info.id)
    assert woke.generation == 2 and woke.output == "woken"
    turns = named(exporter.get_finished_spans(), "invoke_agent ")
    (child,) = [s for s in turns if attrs(s)["retinue.agent.path"] == "/root/lead/w"]
    first, wake = [s for s in turns if attrs(s)["retinue.agent.path"] == "/root/lead"]
    assert attrs(wake)["retinue.turn.reason"] == "wake"
    assert len({s.context.trace_id for s in turns}) == 1  # the lead's first turn is its trace
    assert parent_id(child) == first.context.span_id
    assert parent_id(wake) == first.context.span_id
    assert [link.context.span_id for link in wake.links] == [child.context.span_id]


def test_a_forks_first_turn_links_to_its_origins_span(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    with Runtime.open(
        tmp_path / "s", profiles=[Profile("worker", runner=echo)], tracer_provider=provider
    ) as rt:
        info = rt.spawn("worker", "t", name="w")
        rt.wait(info.id, timeout=WAIT_S)
        fork = rt.fork(info.id)
        rt.follow_up(fork.id, "differently")
        rt.wait(fork.id, timeout=WAIT_S)
        rt.follow_up(fork.id, "once more")
        rt.wait(fork.id, timeout=WAIT_S)
        rt.wait_idle(timeout=WAIT_S)
    turns = named(exporter.get_finished_spans(), "invoke_agent ")
    (origin,) = [s for s in turns if attrs(s)["retinue.agent.path"] == "/root/w"]
    first, second = [s for s in turns if attrs(s)["retinue.agent.path"] == "/root/w_fork1"]
    assert [attrs(s)["retinue.turn.generation"] for s in (first, second)] == [2, 3]
    assert [link.context.span_id for link in first.links] == [origin.context.span_id]
    assert list(second.links) == []


def test_a_failed_turn_is_an_error_span(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    def broken(turn: Turn) -> str:
        raise ValueError("no luck")

    with Runtime.open(
        tmp_path / "s", profiles=[Profile("worker", runner=broken)], tracer_provider=provider
    ) as rt:
        info = rt.spawn("worker", "t")
        rt.wait(info.id, timeout=WAIT_S)
        rt.wait_idle(timeout=WAIT_S)
    (turn,) = named(exporter.get_finished_spans(), "invoke_agent ")
    assert turn.status.status_code is StatusCode.ERROR
    assert turn.status.description == "ValueError: no luck"
    assert attrs(turn)["error.type"] == "ValueError"
    assert attrs(turn)["retinue.turn.status"] == "failed"


def test_retries_are_span_events_and_a_failed_call_an_error(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    from retinue.llm import LiteLLMRunner

    with OpenAIStub() as stub:
        stub.handler = lambda r: StubReply(status=503, error="busy") if r.number <= 2 else None
        runner = LiteLLMRunner(
            "openai/gpt-4o-mini",
            api_base=stub.url,
            api_key="x",
            retries=3,
            retry_base_s=0.01,
            temperature=0.2,
            max_tokens=99,
        )
        with Runtime.open(
            tmp_path / "s", profiles=[Profile("leaf", runner=runner)], tracer_provider=provider
        ) as rt:
            info = rt.spawn("leaf", "t")
            rt.wait(info.id, timeout=WAIT_S)
            rt.wait_idle(timeout=WAIT_S)
    (chat,) = named(exporter.get_finished_spans(), "chat ")
    assert chat.name == "chat gpt-4o-mini"
    assert [e.name for e in chat.events] == ["retry", "retry"]
    assert chat.events[0].attributes and chat.events[0].attributes["retinue.retry.attempt"] == 1
    recorded = attrs(chat)
    assert recorded["gen_ai.provider.name"] == "openai"
    assert recorded["gen_ai.request.temperature"] == 0.2
    assert recorded["gen_ai.request.max_tokens"] == 99
    assert recorded["server.address"] == "127.0.0.1" and recorded["server.port"] > 0
    assert recorded["gen_ai.response.model"] == "gpt-4o-mini"
    assert chat.status.status_code is StatusCode.UNSET


def test_no_duplicate_chat_spans_with_litellms_own_otel_callback(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    from litellm.integrations.opentelemetry import OpenTelemetry, OpenTelemetryConfig

    from retinue.llm.model import load_litellm

    litellm = load_litellm()
    callback = OpenTelemetry(
        config=OpenTelemetryConfig(exporter=exporter), tracer_provider=provider
    )
    before = list(getattr(litellm, "callbacks"))  # noqa: B009
    setattr(litellm, "callbacks", [*before, callback])  # noqa: B010
    try:
        profiles = [Profile("leaf", model=SCRIPTED_MODEL)]
        with Runtime.open(tmp_path / "s", profiles=profiles, tracer_provider=provider) as rt:
            info = rt.spawn("leaf", "t")
            rt.wait(info.id, timeout=WAIT_S)
            rt.wait_idle(timeout=WAIT_S)
    finally:
        setattr(litellm, "callbacks", before)  # noqa: B010
    spans = exporter.get_finished_spans()
    (chat,) = named(spans, "chat ")  # litellm made no litellm_request span of its own
    assert not [s for s in spans if s.name == "litellm_request"]
    # What litellm adds (a raw-request span when its own content logging is on) nests
    # under the one chat span of the call.
    others = [s for s in spans if s.name not in ("chat scripted", "invoke_agent leaf")]
    assert all(parent_id(s) == chat.context.span_id for s in others)


def test_the_global_tracer_provider_is_used_by_default(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from retinue import Profile, Runtime
        from retinue.testing import echo
        import sys
        exporter = InMemorySpanExporter()
        with Runtime.open(sys.argv[1], profiles=[Profile("worker", runner=echo)]) as rt:
            provider = TracerProvider()  # configured after the open: still used
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
            rt.wait(rt.spawn("worker", "t").id, timeout=60)
            rt.wait_idle(timeout=60)
        print(sorted(s.name for s in exporter.get_finished_spans()))
        """
    )
    assert run_script(code, tmp_path / "s") == "['invoke_agent worker']"
    assert run_script(code, tmp_path / "s2", OTEL_SDK_DISABLED="true") == "[]"


CRASHING = textwrap.dedent(
    """
    import sys, time
    from opentelemetry.sdk.trace import TracerProvider
    from retinue import Profile, Runtime

    def lead(turn):
        turn.run("worker", "work", name="w", timeout=600)
        return "done"

    def worker(turn):
        print("working", flush=True)
        time.sleep(600)
        return "late"

    provider = TracerProvider()
    profiles = [
        Profile("lead", subagents=["worker"], runner=lead),
        Profile("worker", runner=worker),
    ]
    rt = Runtime.open(sys.argv[1], profiles=profiles, tracer_provider=provider)
    with provider.get_tracer("host").start_as_current_span("host") as span:
        context = span.get_span_context()
        print(f"trace {context.trace_id:032x} {context.span_id:016x}", flush=True)
        rt.spawn("lead", "go", name="lead")
    time.sleep(600)
    """
)


def test_after_a_sigkill_resumed_turns_continue_the_same_trace(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    store = tmp_path / "s"
    child = subprocess.Popen(
        [sys.executable, "-c", CRASHING, str(store)],
        env=env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        _, trace_hex, host_hex = child.stdout.readline().split()
        assert child.stdout.readline().strip() == "working"  # the tree is mid-run
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()
    profiles = [
        Profile("lead", subagents=["worker"], runner=lambda turn: "resumed"),
        Profile("worker", runner=echo),
    ]
    with Runtime.open(store, profiles=profiles, tracer_provider=provider) as rt:
        assert {a.state for a in rt.agents()} == {AgentState.INTERRUPTED}
        for path in ("/root/lead/w", "/root/lead"):
            rt.resume(path)
            rt.wait(path, timeout=WAIT_S)
        rt.wait_idle(timeout=WAIT_S)
    turns = {
        attrs(s)["retinue.agent.path"]: s
        for s in named(exporter.get_finished_spans(), "invoke_agent ")
    }
    assert set(turns) == {"/root/lead", "/root/lead/w"}
    assert {f"{s.context.trace_id:032x}" for s in turns.values()} == {trace_hex}
    # The resumed top-level turn is still the host span's child, across the restart.
    assert f"{parent_id(turns['/root/lead']):016x}" == host_hex
    assert attrs(turns["/root/lead/w"])["retinue.turn.reason"] == "resume"


def test_a_tracer_provider_without_the_extra_is_refused_clearly(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry"] = None  # as if the extra were not installed
        from retinue import ExtraNotInstalled, Profile, Runtime
        from retinue.testing import echo
        with Runtime.open(sys.argv[1], profiles=[Profile("w", runner=echo)]) as rt:
            rt.wait(rt.spawn("w", "t").id, timeout=60)  # no extra: no spans, all works
        try:
            Runtime.open(sys.argv[1] + "2", profiles=[Profile("w", runner=echo)], tracer_provider=1)
        except ExtraNotInstalled as exc:
            print(exc.extra)
        """
    )
    assert run_script(code, tmp_path / "s") == "otel"


def test_capture_content_must_be_a_bool(tmp_path: Path, provider: TracerProvider) -> None:
    from retinue import ArgumentTypeError

    with pytest.raises(ArgumentTypeError, match="capture_content"):
        Runtime.open(tmp_path / "s", tracer_provider=provider, capture_content="yes")  # type: ignore[arg-type]
    assert trace.get_tracer_provider() is not provider  # a given provider is never made global
