"""Tracing with OpenTelemetry's API and no SDK: no span is started, no context is lost.

While no tracer provider is configured, a turn with no stored trace context
starts no span at all (it could record nothing and pass nothing on); a
context propagated to the host (a remote parent, as a web service extracts
from its request headers) is still stored with the agent it spawns, and that
agent's turns still continue it. The script runs in a fresh interpreter, so
no test's global tracer provider is set there.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cliutil import env

pytest.importorskip("opentelemetry.trace", reason="the otel extra is not installed")

SCRIPT = textwrap.dedent(
    """
    import sys
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
    from retinue import Profile, Runtime
    from retinue.llm import SCRIPTED_MODEL, LiteLLMRunner
    from retinue.tracing import Tracing

    started = []
    asked = []
    original = Tracing.turn
    capture, recording = Tracing.capture, Tracing.recording

    def counted(self, turn, model):
        started.append(turn.agent.path)
        return original(self, turn, model)

    def captured(self):
        asked.append("capture")
        return capture(self)

    def recorded(self):
        asked.append("recording")
        return recording(self)

    Tracing.turn = counted
    Tracing.capture = captured
    Tracing.recording = recorded
    profiles = [
        Profile("lead", subagents=["leaf"], runner=LiteLLMRunner(SCRIPTED_MODEL)),
        Profile("leaf", runner=LiteLLMRunner(SCRIPTED_MODEL)),
    ]
    remote = SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, TraceFlags(1)
    )
    ask = (
        'Call spawn_subagent with {"profile": "leaf", "task": "hi", "wait": true}, '
        "then answer done."
    )
    with Runtime.open(sys.argv[1], profiles=profiles) as rt:
        with trace.use_span(NonRecordingSpan(remote)):
            lead = rt.spawn("lead", ask, name="lead")
        solo = rt.spawn("leaf", "alone", name="solo")
        assert rt.wait(lead.id, timeout=120).status == "completed"
        assert rt.wait(solo.id, timeout=120).status == "completed"
        child = [a for a in rt.agents() if a.path.startswith("/root/lead/")][0]
        print(rt.inspect(lead.id).trace)
        print(rt.inspect(child.id).trace)
        print(rt.inspect(solo.id).trace)
    print("|".join(sorted(started)))
    print("|".join(asked))
    """
)


def test_without_an_sdk_only_a_turn_with_a_stored_context_starts_a_span(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "s")],
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lead, child, solo, started, asked = done.stdout.strip().splitlines()[-5:]
    remote = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert lead == remote  # the host's context, stored with the agent
    assert child == solo == "None"  # no SDK: nothing was recorded to pass on
    # Only the turn with a stored context asked for a span (as before, it continues
    # that context); the others could record nothing and pass nothing on: none.
    assert started == "/root/lead"
    # The tracing package itself is asked only for the spawn made under a span: the
    # others (no current context, no stored one) never call into it (a cheap check
    # on OpenTelemetry's own context and provider, at the call site).
    assert asked == "capture"
