"""The Prometheus collector: scraped during and after real runs, parsed, checked against the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from control.writer import Writer as ControlWriter
from support import EventFields, wait_until
from support.meta_flush import free_pages, meta_page_ahead
from web.writer import Writer

from retinue import (
    AgentState,
    Event,
    InvalidArgument,
    ModelCallFinished,
    Profile,
    ProviderLimit,
    Runtime,
    ToolCallFinished,
    ToolCallInDoubt,
    Turn,
)
from retinue.testing import Gate, echo

prometheus_client = pytest.importorskip(
    "prometheus_client", reason="the metrics need the 'metrics' extra: pip install -e '.[metrics]'"
)
from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from retinue.metrics import OTHER, RetinueCollector  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "code_review" / "team.toml"


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Scrape the text exposition and parse it: (sample name, labels) -> value."""
    text = generate_latest(registry).decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_counts_during_and_after_a_run_match_the_run(tmp_path: Path, gate: Gate) -> None:
    def lead(turn: Turn) -> str:
        results = turn.run_many([("leaf", "a"), ("leaf", "b"), ("leaf", "c")], timeout=30)
        return f"{len(results)} done"

    profiles = [Profile("lead", subagents=["leaf"], runner=lead), Profile("leaf", runner=gate)]
    registry = CollectorRegistry()
    with Runtime.open(tmp_path / "store", profiles=profiles) as rt:
        collector = RetinueCollector(rt, registry=registry, min_read_interval_s=0)
        info = rt.spawn("lead", "plan", name="plan")
        gate.wait_started(3)
        during = scrape(registry)
        assert value(during, "retinue_agents", state="running") == 4
        assert value(during, "retinue_turns_running") == 4
        assert value(during, "retinue_turns_queued") == 0
        assert value(during, "retinue_agents_by_profile", profile="leaf") == 3
        assert value(during, "retinue_agents_by_profile", profile="lead") == 1
        assert (
            "retinue_turns_settled_total",
            (("profile", "leaf"), ("status", "completed")),
        ) not in during
        gate.release()
        rt.wait(info.id, timeout=30)
        rt.send(info.id, "a note for its next turn")
        wait_until(
            lambda: (
                value(
                    scrape(registry),
                    "retinue_turns_settled_total",
                    profile="lead",
                    status="completed",
                )
                == 1
            )
        )
        after = scrape(registry)
        assert value(after, "retinue_agents", state="completed") == 4
        assert value(after, "retinue_agents", state="running") == 0
        assert value(after, "retinue_turns_settled_total", profile="leaf", status="completed") == 3
        assert value(after, "retinue_turn_duration_seconds_count", profile="leaf") == 3
        assert value(after, "retinue_turn_duration_seconds_count", profile="lead") == 1
        assert value(after, "retinue_turn_duration_seconds_bucket", profile="leaf", le="+Inf") == 3
        assert value(after, "retinue_unread_messages") == 1
        assert value(after, "retinue_pending_completions") == 0  # the host received it
        assert value(after, "retinue_abandoned_runners") == 0
        assert value(after, "retinue_events_dropped_total") == 0
        size = value(after, "retinue_store_file_bytes")
        assert size == (rt.path / "data.mdb").stat().st_size
        assert 0 < value(after, "retinue_store_map_used_ratio") <= 1
        assert value(after, "retinue_store_used_bytes") <= value(after, "retinue_store_map_bytes")
        page = value(after, "retinue_store_page_bytes")
        in_use, free = (value(after, f"retinue_store_pages_{k}") for k in ("in_use", "free"))
        assert in_use > 0 and free >= 0
        assert (in_use + free) * page == value(after, "retinue_store_used_bytes")
        headroom = value(after, "retinue_store_map_headroom_bytes")
        assert headroom == value(after, "retinue_store_map_bytes") - (in_use + free) * page
        # No label carries an agent id, a path or a task.
        for _, labels in after:
            for _, label in labels:
                assert info.id not in label and "/root" not in label and label != "plan"
        collector.close()
        assert scrape(registry) == {}


def test_model_and_tool_calls_of_a_run_match_its_events(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    seen: list[Event] = []
    with Runtime.open(tmp_path / "store", team=EXAMPLE) as rt:
        collector = RetinueCollector(rt, registry=registry)
        rt.subscribe(seen.append)
        lead = rt.spawn("lead", "review", name="review")
        rt.wait(lead.id, timeout=120)
        rt.wait_idle(timeout=30)
        samples = scrape(registry)
        agents = rt.agents()
        collector.close()
    calls = [e for e in seen if isinstance(e, ModelCallFinished)]
    tools = [e for e in seen if isinstance(e, ToolCallFinished)]
    assert calls and tools
    model = "retinue/scripted"
    assert {c.model for c in calls} == {model}
    assert value(samples, "retinue_model_calls_total", model=model) == len(calls)
    # The tokens counted are the ones the agents were charged with.
    prompt = sum(a.usage.prompt_tokens for a in agents)
    completion = sum(a.usage.completion_tokens for a in agents)
    assert value(samples, "retinue_model_tokens_total", model=model, kind="prompt") == prompt
    assert value(samples, "retinue_model_tokens_total", model=model, kind="completion") == (
        completion
    )
    assert value(samples, "retinue_model_call_duration_seconds_count", model=model) == len(calls)
    for tool in {t.tool for t in tools}:
        ok = sum(1 for t in tools if t.tool == tool and t.ok)
        assert value(samples, "retinue_tool_calls_total", tool=tool, outcome="ok") == ok
    # The scripted leads delegate in one spawn_subagents call each.
    leads = {a.parent_path for a in agents} - {"/root"}
    spawns = value(samples, "retinue_tool_calls_total", tool="spawn_subagents", outcome="ok")
    assert spawns == len(leads) > 1
    settled = sum(v for (name, _), v in samples.items() if name == "retinue_turns_settled_total")
    assert settled == 10


def test_provider_limits_are_served_by_limit(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    seen: list[Event] = []
    limits = [ProviderLimit("retinue", max_in_flight=2), ProviderLimit("openai", max_in_flight=9)]
    with Runtime.open(tmp_path / "store", team=EXAMPLE, provider_limits=limits) as rt:
        collector = RetinueCollector(rt, registry=registry)
        rt.subscribe(seen.append)
        lead = rt.spawn("lead", "review", name="review")
        rt.wait(lead.id, timeout=120)
        rt.wait_idle(timeout=30)
        samples = scrape(registry)
        collector.close()
    calls = sum(1 for e in seen if isinstance(e, ModelCallFinished))
    assert calls > 2
    assert value(samples, "retinue_provider_calls_admitted_total", limit="retinue") == calls
    assert value(samples, "retinue_provider_calls_admitted_total", limit="openai") == 0
    assert value(samples, "retinue_provider_rate_limited_total", limit="retinue") == 0
    assert value(samples, "retinue_provider_calls_in_flight", limit="retinue") == 0
    assert value(samples, "retinue_provider_calls_waiting", limit="retinue") == 0
    assert value(samples, "retinue_provider_level", limit="retinue") == 2.0
    learned = {name for name, _ in samples if name.startswith("retinue_provider_learned")}
    assert learned == set()  # no 429, no learned rate: the families have no sample


def test_model_and_tool_call_labels_are_bounded(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    with Runtime.open(tmp_path / "store", profiles=[Profile("worker", runner=echo)]) as rt:
        collector = RetinueCollector(rt, registry=registry, max_label_values=2)
        worker = rt.spawn("worker", "work", name="w")
        rt.wait(worker.id, timeout=30)
        args: EventFields = {"agent_id": worker.id, "path": worker.path, "at": 10.0}
        for prompt, completion, cost, seconds in ((100, 20, 0.25, 1.5), (10, 2, 0.05, 0.2)):
            collector.observe(
                ModelCallFinished(
                    **args,
                    model="gpt-x",
                    prompt_tokens=prompt,
                    completion_tokens=completion,
                    cost_usd=cost,
                    duration_s=seconds,
                )
            )
        for tool, ok in (("grep", True), ("grep", False), ("read_file", True), ("bash", True)):
            collector.observe(
                ToolCallFinished(
                    **args,
                    call_id="c",
                    tool=tool,
                    ok=ok,
                    duration_s=0.01,
                    error=None if ok else "boom",
                )
            )
        before = scrape(registry)
        collector.observe_commit(0.002)
        collector.observe_command("Manual", 0.0001)
        samples = scrape(registry)
    assert value(samples, "retinue_model_calls_total", model="gpt-x") == 2
    assert value(samples, "retinue_model_tokens_total", model="gpt-x", kind="prompt") == 110
    assert value(samples, "retinue_model_tokens_total", model="gpt-x", kind="completion") == 22
    assert value(samples, "retinue_model_cost_usd_total", model="gpt-x") == pytest.approx(0.30)
    assert value(samples, "retinue_model_call_duration_seconds_count", model="gpt-x") == 2
    assert value(
        samples, "retinue_model_call_duration_seconds_sum", model="gpt-x"
    ) == pytest.approx(1.7)
    assert (
        value(samples, "retinue_model_call_duration_seconds_bucket", model="gpt-x", le="0.25") == 1
    )
    assert value(samples, "retinue_tool_calls_total", tool="grep", outcome="ok") == 1
    assert value(samples, "retinue_tool_calls_total", tool="grep", outcome="error") == 1
    assert value(samples, "retinue_tool_calls_total", tool="read_file", outcome="ok") == 1
    # A third tool name is past max_label_values=2: counted, under "other".
    assert value(samples, "retinue_tool_calls_total", tool=OTHER, outcome="ok") == 1
    assert value(samples, "retinue_metrics_label_overflow_total") >= 1
    # The timers' interface, called by hand (the store and the supervisor call it too); the
    # command kinds are bounded like every label: past two, "Manual" counts as "other".
    assert value(samples, "retinue_store_commit_duration_seconds_count") >= 1 + value(
        before, "retinue_store_commit_duration_seconds_count"
    )
    command = "retinue_supervisor_command_duration_seconds_count"
    kinds = {dict(labels)["command"] for name, labels in samples if name == command}
    assert len(kinds - {OTHER}) == 2 and "Manual" not in kinds
    assert value(samples, command, command=OTHER) >= 1


def test_commits_and_supervisor_commands_of_a_run_are_timed(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    with Runtime.open(tmp_path / "store", profiles=[Profile("worker", runner=echo)]) as rt:
        collector = RetinueCollector(rt, registry=registry)
        for n in range(3):
            rt.wait(rt.spawn("worker", f"task {n}", name=f"w{n}").id, timeout=30)
        samples = scrape(registry)
        collector.close()
        # Detached: what the runtime does next is not timed any more.
        rt.wait(rt.spawn("worker", "after", name="after").id, timeout=30)
        alone = CollectorRegistry()
        alone.register(collector)
        after = scrape(alone)
    commits = value(samples, "retinue_store_commit_duration_seconds_count")
    assert commits > 0
    assert value(samples, "retinue_store_commit_duration_seconds_bucket", le="+Inf") == commits
    assert value(samples, "retinue_store_commit_duration_seconds_sum") > 0
    command = "retinue_supervisor_command_duration_seconds_count"
    assert value(samples, command, command="Spawn") == 3
    assert value(samples, command, command="Wait") == 3
    assert value(samples, command, command="Settle") == 3
    assert value(samples, "retinue_supervisor_command_duration_seconds_sum", command="Spawn") > 0
    assert value(after, command, command="Spawn") == 3
    assert value(after, "retinue_store_commit_duration_seconds_count") == commits


def test_a_read_only_runtime_serves_the_state_gauges(tmp_path: Path) -> None:
    writer = Writer(tmp_path / "store", tmp_path / "release")  # a writer in another process
    try:
        reader = Runtime.open(writer.store, readonly=True)
        registry = CollectorRegistry()
        try:
            RetinueCollector(reader, registry=registry, min_read_interval_s=0)
            wait_until(
                lambda: any(
                    a.path == "/root/review/hostile" and a.state == AgentState.COMPLETED
                    for a in reader.agents()
                ),
                timeout=60,
            )
            samples = scrape(registry)
            agents = reader.agents(include_closed=True)
            details = [reader.inspect(a.id, transcript_tail=0) for a in agents]
            unread = sum(len(d.unread) for d in details)
            pending = sum(len(d.pending) for d in details)
        finally:
            reader.shutdown()
    finally:
        writer.stop()
    assert value(samples, "retinue_agents", state="running") == 2  # the lead and the worker
    assert value(samples, "retinue_agents", state="completed") == 1
    assert value(samples, "retinue_agents", state="closed") == 0
    assert value(samples, "retinue_turns_running") == 2
    assert value(samples, "retinue_agents_by_profile", profile="lead") == 1
    # The backlog gauges agree with one inspect per agent (the host has none pending here).
    assert value(samples, "retinue_unread_messages") == unread
    assert value(samples, "retinue_pending_completions") == pending
    assert pending + unread >= 1  # hostile's completion waits for the running lead
    # A reader sees no events: its counters stay at zero rather than missing.
    assert value(samples, "retinue_events_dropped_total") == 0


def test_a_read_only_scrape_sees_a_commit_whose_meta_page_came_before_its_readers(
    tmp_path: Path,
) -> None:
    """A scrape in the moment LMDB has written a commit's meta page but readers do not see
    it yet must not keep what it read as that commit's: the next scrape reads again."""
    import retinue

    writer = ControlWriter(tmp_path / "store")
    try:
        with retinue.connect(writer.store) as remote:
            free_pages(remote)  # the interrupt's commit keeps the file's size
            blocker = remote.spawn("blocker", "hold", name="c")
            reader = Runtime.open(writer.store, readonly=True)
            registry = CollectorRegistry()
            try:
                RetinueCollector(reader, registry=registry, min_read_interval_s=0)
                wait_until(lambda: reader.get(blocker.id).state == AgentState.RUNNING)
                meta_page_ahead(writer.store, reader)
                assert value(scrape(registry), "retinue_agents", state="running") == 1
                remote.interrupt(blocker.id)  # the commit readers see next
                wait_until(lambda: reader.get(blocker.id).state == AgentState.INTERRUPTED)
                samples = scrape(registry)
            finally:
                reader.shutdown()
    finally:
        writer.stop()
    assert value(samples, "retinue_agents", state="running") == 0
    assert value(samples, "retinue_agents", state="interrupted") == 1


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with Runtime.open(tmp_path / "store", profiles=[Profile("p", runner=lambda t: "")]) as rt:
        for kwargs in (
            {"namespace": "bad-name"},
            {"max_label_values": 0},
            {"min_read_interval_s": -1.0},
            {"latency_buckets": ()},
        ):
            with pytest.raises(InvalidArgument):
                RetinueCollector(rt, **kwargs)


def test_tool_calls_in_doubt_are_counted_by_tool_and_action(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    with Runtime.open(tmp_path / "store", profiles=[Profile("worker", runner=echo)]) as rt:
        collector = RetinueCollector(rt, registry=registry)
        worker = rt.spawn("worker", "work", name="w")
        rt.wait(worker.id, timeout=30)
        args: EventFields = {"agent_id": worker.id, "path": worker.path, "at": 10.0}
        for tool, effect, action in (
            ("refund", "unsafe", "reported"),
            ("refund", "unsafe", "reported"),
            ("credit", "idempotent", "rerun"),
        ):
            collector.observe(
                ToolCallInDoubt(
                    **args,
                    call_id="c",
                    tool=tool,
                    idempotency_key="k",
                    effect=effect,
                    action=action,
                )
            )
        samples = scrape(registry)
    assert (
        value(samples, "retinue_tool_calls_in_doubt_total", tool="refund", action="reported") == 2
    )
    assert value(samples, "retinue_tool_calls_in_doubt_total", tool="credit", action="rerun") == 1
