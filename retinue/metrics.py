"""``retinue.metrics``: a Prometheus collector of a runtime (extra: ``retinue[metrics]``).

``RetinueCollector(rt)`` is a custom collector: register it with the host's
registry (``registry.register(collector)``, or pass ``registry=``), for a
writer or a read-only runtime. At each scrape it serves the state gauges from
one read of the store (``rt.agents``, ``rt.backlog``, the data file's meta
pages and ``rt.diagnostics.store``, its pages in use and free; a read-only
runtime reads its snapshot, and no read happens when no commit did since the
last one); from the runtime's events (a writer's) it
counts settled turns, model calls, tokens, cost, tool calls and tool calls in
doubt (``ToolCallInDoubt``: by tool and action), and times
turns, model calls and tool calls. On a writer it also attaches to the
runtime's timers (:mod:`retinue.actors.supervisor._timings`): the store's writer tells
:meth:`RetinueCollector.observe_commit` how long each group commit took, and
the supervisor tells :meth:`RetinueCollector.observe_command` how long each
command took (a read-only runtime has neither: those histograms stay empty).
While no collector is attached, the runtime reads no clock for them.
Under provider limits, each limit's calls in flight and waiting, its adaptive
level, and its calls admitted and answered 429 are read from
``rt.diagnostics.provider_limits`` at each scrape (label ``limit``: its match).

Cardinality is bounded: no label carries an agent id, path or task. Labels are
the state, profile, status, model, tool, outcome, in-doubt action and command kind, and each
keeps at most ``max_label_values`` values; later ones are counted under
``other`` (and in ``retinue_metrics_label_overflow_total``).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from retinue.errors import ExtraNotInstalled, InvalidArgument, RetinueError

try:
    from prometheus_client.metrics_core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import Collector, CollectorRegistry
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ExtraNotInstalled("metrics", "retinue.metrics", exc.name or "prometheus-client") from None

from retinue.persistence.integrity import StoreUsage, store_usage
from retinue.persistence.space import StoreSpace
from retinue.protocol.messages import AgentState

if TYPE_CHECKING:
    from retinue.runtime import Runtime

__all__ = ["COMMIT_BUCKETS", "LATENCY_BUCKETS", "OTHER", "RetinueCollector"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
"""Seconds; turns, model calls and tool calls."""
COMMIT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1)
"""Seconds; store commits and supervisor commands."""
OTHER = "other"
"""The label value of everything past ``max_label_values`` distinct values."""
_USAGE_GAUGES = (  # (metric, StoreUsage field, help): from the data file's meta pages
    ("store_file_bytes", "file_bytes", "Size of the store's data.mdb"),
    ("store_used_bytes", "used_bytes", "Bytes of the LMDB map in use"),
    ("store_map_bytes", "map_bytes", "Size of the LMDB map"),
)
_SPACE_GAUGES = (  # (metric, StoreSpace field, help): how the store file is used
    ("store_pages_in_use", "pages_in_use", "LMDB pages the databases hold (about a copy's)"),
    ("store_pages_free", "pages_free", "Free LMDB pages below the file's high-water mark"),
    ("store_page_bytes", "page_size", "Bytes of one LMDB page"),
    ("store_map_headroom_bytes", "map_headroom_bytes", "Bytes the file may grow in its map"),
)


class _Histogram:
    """Cumulative-bucket histograms by label values (not thread-safe: callers lock)."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(sorted(buckets))
        self.series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        counts, total = self.series.setdefault(labels, ([0] * (len(self.buckets) + 1), [0.0]))
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                counts[i] += 1
        counts[-1] += 1
        total[0] += value

    def family(self, name: str, doc: str, labels: Sequence[str]) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, doc, labels=list(labels))
        for values, (counts, total) in sorted(self.series.items()):
            pairs = [(_bound(b), float(c)) for b, c in zip(self.buckets, counts, strict=False)]
            pairs.append(("+Inf", float(counts[-1])))
            family.add_metric(list(values), pairs, total[0])
        return family


def _bound(value: float) -> str:
    return repr(float(value))


class _State:
    """What one read of the store gave, for the state gauges."""

    def __init__(self) -> None:
        self.states: dict[str, int] = {}
        self.profiles: dict[str, int] = {}
        self.unread = 0
        self.pending = 0
        self.usage: StoreUsage | None = None
        self.space: StoreSpace | None = None


class RetinueCollector(Collector):
    """The Prometheus collector of one runtime (writer or read-only); thread-safe."""

    def __init__(
        self,
        rt: Runtime,
        *,
        registry: CollectorRegistry | None = None,
        namespace: str = "retinue",
        max_label_values: int = 100,
        min_read_interval_s: float = 1.0,
        latency_buckets: Sequence[float] = LATENCY_BUCKETS,
        commit_buckets: Sequence[float] = COMMIT_BUCKETS,
    ) -> None:
        """Collect ``rt``'s metrics; subscribe to its events if it is a writer.

        ``registry``: register there now (and unregister on :meth:`close`).
        ``min_read_interval_s``: scrapes closer together than this share one
        read of the store.

        Raises:
            InvalidArgument: a bad ``namespace``, ``max_label_values``,
                ``min_read_interval_s`` or empty bucket list.
            RuntimeClosed: the runtime is closed.
        """
        if not namespace.replace("_", "a").isalnum() or not namespace[:1].isalpha():
            raise InvalidArgument(f"namespace must be letters, digits and _, not {namespace!r}")
        if isinstance(max_label_values, bool) or not isinstance(max_label_values, int):
            raise InvalidArgument("max_label_values must be an int")
        if max_label_values < 1 or not 0 <= min_read_interval_s < float("inf"):
            raise InvalidArgument("max_label_values must be >= 1 and min_read_interval_s >= 0")
        if not latency_buckets or not commit_buckets:
            raise InvalidArgument("histogram buckets must not be empty")
        self.rt = rt
        self.ns = namespace
        self.max_label_values = max_label_values
        self.min_read_interval_s = min_read_interval_s
        self._lock = threading.Lock()
        self._labels: dict[str, set[str]] = defaultdict(set)
        self._overflow = 0
        self._counters: dict[str, dict[tuple[str, ...], float]] = defaultdict(
            lambda: defaultdict(float)
        )
        self._hist = {
            "turn": _Histogram(latency_buckets),
            "model": _Histogram(latency_buckets),
            "tool": _Histogram(latency_buckets),
            "commit": _Histogram(commit_buckets),
            "command": _Histogram(commit_buckets),
        }
        self._profile_of: dict[str, str] = {}
        self._started: dict[tuple[str, int], float] = {}
        self._errors = 0
        self._state: _State | None = None
        self._state_key: tuple[int, int] | None = None
        self._state_at = 0.0
        self._unsubscribe = None if rt.readonly else rt.subscribe(self.observe)
        self._untime = None if rt.readonly else rt._attach_timings(self)
        self._registry = registry
        if registry is not None:
            registry.register(self)

    # -- the timers of the store and the supervisor (retinue.actors.supervisor._timings) --

    def observe_commit(self, seconds: float) -> None:
        """Record one store commit that took ``seconds`` (called on the store's writer thread)."""
        with self._lock:
            self._hist["commit"].observe((), seconds)

    def observe_command(self, kind: str, seconds: float) -> None:
        """Record one supervisor command of ``kind`` (e.g. ``Spawn``) that took ``seconds``
        (called on the supervisor's thread)."""
        with self._lock:
            self._hist["command"].observe((self._label("command", kind),), seconds)

    def close(self) -> None:
        """Stop counting events and timings, and unregister from the registry given; idempotent."""
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        untime, self._untime = self._untime, None
        if untime is not None:
            untime()
        registry, self._registry = self._registry, None
        if registry is not None:
            registry.unregister(self)

    # -- events -----------------------------------------------------------------------------

    def _label(self, name: str, value: str) -> str:
        known = self._labels[name]
        if value in known:
            return value
        if len(known) >= self.max_label_values:
            self._overflow += 1
            return OTHER
        known.add(value)
        return value

    def _count(self, name: str, labels: tuple[str, ...], amount: float = 1.0) -> None:
        self._counters[name][labels] += amount

    def _lookup(self, agent_id: str) -> str:
        """The profile of an agent spawned before this collector subscribed."""
        try:
            return self.rt.get(agent_id).profile
        except RetinueError:
            return "unknown"

    def observe(self, event: Any) -> None:
        """Count one runtime event (the subscriber this collector registers on a writer)."""
        config = getattr(type(event), "__struct_config__", None)
        tag = getattr(config, "tag", None) or type(event).__name__
        agent = str(getattr(event, "agent_id", ""))
        at = float(getattr(event, "at", 0.0) or 0.0)
        if tag in ("turn_started", "turn_settled") and agent not in self._profile_of:
            profile = self._lookup(agent)  # an rt.get outside the lock, once per agent
            with self._lock:
                self._profile_of[agent] = profile
        with self._lock:
            self._handle(tag, event, agent, at)

    def _handle(self, tag: str, event: Any, agent: str, at: float) -> None:
        if tag == "agent_spawned":
            self._profile_of[agent] = str(getattr(event, "profile", "unknown"))
        elif tag == "turn_started":
            self._started[(agent, int(getattr(event, "generation", 0)))] = at
        elif tag == "turn_settled":
            profile = self._label("profile", self._profile_of.get(agent, "unknown"))
            status = self._label("status", str(getattr(event, "status", "unknown")))
            self._count("turns_settled", (profile, status))
            began = self._started.pop((agent, int(getattr(event, "generation", 0))), None)
            if began is not None:
                self._hist["turn"].observe((profile,), max(0.0, at - began))
        elif tag == "agent_closed":
            self._profile_of.pop(agent, None)
        elif tag == "model_call_finished":
            model = self._label("model", str(getattr(event, "model", "unknown")))
            self._count("model_calls", (model,))
            for kind in ("prompt", "completion"):
                tokens = float(getattr(event, f"{kind}_tokens", 0) or 0)
                self._count("model_tokens", (model, kind), tokens)
            self._count("model_cost", (model,), float(getattr(event, "cost_usd", 0.0) or 0.0))
            self._hist["model"].observe((model,), float(getattr(event, "duration_s", 0.0) or 0.0))
        elif tag == "tool_call_finished":
            tool = self._label("tool", str(getattr(event, "tool", "unknown")))
            outcome = (
                "ok" if getattr(event, "ok", getattr(event, "error", None) is None) else "error"
            )
            self._count("tool_calls", (tool, outcome))
            self._hist["tool"].observe((tool,), float(getattr(event, "duration_s", 0.0) or 0.0))
        elif tag == "tool_call_in_doubt":
            tool = self._label("tool", str(getattr(event, "tool", "unknown")))
            action = self._label("action", str(getattr(event, "action", "unknown")))
            self._count("tool_calls_in_doubt", (tool, action))
        elif tag == "events_dropped":
            self._count("events_dropped", (), float(getattr(event, "dropped", 0) or 0))

    # -- scrapes ----------------------------------------------------------------------------

    def _read_state(self) -> _State | None:
        """One read of the store for the gauges; reused while no commit happened.

        The data file's newest meta page says whether one did (two small file
        reads); the read is keyed by the transaction a read saw, taken before it
        (LMDB writes a commit's meta page before readers see the commit, so the
        file alone could claim a commit the read missed).
        """
        usage = store_usage(self.rt.path)
        key = None if usage is None else (usage.txnid, usage.file_bytes)
        fresh = time.monotonic() - self._state_at < self.min_read_interval_s
        if self._state is not None and (fresh or (key is not None and key == self._state_key)):
            return self._state
        state = _State()
        try:
            state.space = self.rt.diagnostics.store
            counts = self.rt.agent_counts()  # kept by the writer's tree: no walk of the agents
            state.states.update(counts.by_state)
            state.profiles.update(counts.live_by_profile)
            backlog = self.rt.backlog()
        except RetinueError:
            with self._lock:
                self._errors += 1
            return self._state
        state.unread, state.pending = backlog.unread_messages, backlog.pending_completions
        state.usage = usage
        space = state.space
        read = None if space is None else (space.txnid, space.file_bytes)
        self._state, self._state_key, self._state_at = state, read, time.monotonic()
        return state

    def describe(self) -> Iterable[Metric]:
        """Return the metric families this collector serves, without samples."""
        return list(self._families(None, sample=False))

    def collect(self) -> Iterable[Metric]:
        """Return every metric family with its samples (one store read at most)."""
        return list(self._families(self._read_state(), sample=True))

    def _families(self, state: _State | None, *, sample: bool) -> Iterator[Metric]:
        yield from self._gauges(state, sample)
        yield from self._provider_families(sample)
        with self._lock:
            yield from self._event_families()

    def _provider_families(self, sample: bool) -> Iterator[Metric]:
        """Each provider limit's figures (``rt.diagnostics.provider_limits``), by its match."""
        limits: tuple[Any, ...] = ()
        if sample and not self.rt.readonly:
            try:
                limits = tuple(self.rt.diagnostics.provider_limits)
            except RetinueError:
                with self._lock:
                    self._errors += 1
        ns, labels = self.ns, ["limit"]
        families = [
            (GaugeMetricFamily, "provider_calls_in_flight", "Model calls in flight", "in_flight"),
            (GaugeMetricFamily, "provider_calls_waiting", "Model calls waiting", "waiting"),
            (GaugeMetricFamily, "provider_level", "Adaptive in-flight level (AIMD)", "level"),
            (
                GaugeMetricFamily,
                "provider_learned_requests",
                "Requests per window learned from 429s",
                "learned_requests",
            ),
            (
                GaugeMetricFamily,
                "provider_learned_tokens",
                "Tokens per window learned from 429s",
                "learned_tokens",
            ),
            (
                GaugeMetricFamily,
                "provider_stated_requests",
                "Requests per window the provider's headers state",
                "stated_requests",
            ),
            (
                GaugeMetricFamily,
                "provider_stated_tokens",
                "Tokens per window the provider's headers state",
                "stated_tokens",
            ),
            (CounterMetricFamily, "provider_calls_admitted", "Model calls admitted", "admitted"),
            (
                CounterMetricFamily,
                "provider_rate_limited",
                "Model calls answered 429",
                "rate_limited",
            ),
        ]
        with self._lock:
            named = [(self._label("limit", s.match), s) for s in limits]
        for kind, name, doc, field in families:
            family = kind(f"{ns}_{name}", f"{doc}, by provider limit", labels=labels)
            for label, snap in named:
                value = getattr(snap, field)
                if value is not None:  # an unbounded level, a rate not learned: no sample
                    family.add_metric([label], float(value))
            yield family

    def _gauges(self, state: _State | None, sample: bool) -> Iterator[Metric]:
        ns = self.ns
        agents = GaugeMetricFamily(f"{ns}_agents", "Agents in the store by state", labels=["state"])
        profiles = GaugeMetricFamily(
            f"{ns}_agents_by_profile", "Live (not closed) agents by profile", labels=["profile"]
        )
        if state is not None:
            for name in sorted({*(s.value for s in AgentState), *state.states}):
                agents.add_metric([name], state.states.get(name, 0))
            with self._lock:
                by_profile: dict[str, float] = defaultdict(float)
                for profile, count in state.profiles.items():
                    by_profile[self._label("profile", profile)] += count
            for label, total in sorted(by_profile.items()):
                profiles.add_metric([label], total)
        yield agents
        yield profiles
        states = state.states if state is not None else {}
        usage = state.usage if state is not None else None
        space = state.space if state is not None else None
        unread, pending = (state.unread, state.pending) if state is not None else (None, None)
        plain = [
            ("turns_running", "Turns running now", states.get("running")),
            ("turns_queued", "Turns queued for a slot (agents starting)", states.get("starting")),
            ("unread_messages", "Unread messages in every mailbox (the host's included)", unread),
            ("pending_completions", "Completions routed and not received yet", pending),
            (
                "abandoned_runners",
                "Sync runners that ignored an interrupt and keep a thread",
                self.rt.abandoned_runners if sample else None,
            ),
            *[(n, doc, getattr(usage, f) if usage else None) for n, f, doc in _USAGE_GAUGES],
            (
                "store_map_used_ratio",
                "Share of the LMDB map in use (it grows by itself when full)",
                usage.used_bytes / usage.map_bytes if usage and usage.map_bytes else None,
            ),
        ]
        plain += [(n, doc, getattr(space, f) if space else None) for n, f, doc in _SPACE_GAUGES]
        for name, doc, value in plain:
            family = GaugeMetricFamily(f"{ns}_{name}", doc)
            if sample and (value is not None or name.startswith("turns_")):
                family.add_metric([], float(value or 0))
            yield family

    def _event_families(self) -> Iterator[Metric]:
        ns = self.ns
        counters = [
            ("turns_settled", "Turns settled, by profile and status", ["profile", "status"]),
            ("model_calls", "Model calls made, by model", ["model"]),
            (
                "model_tokens",
                "Model tokens, by model and kind (prompt, completion)",
                ["model", "kind"],
            ),
            ("model_cost", "Model cost in USD (litellm's cost map), by model", ["model"]),
            ("tool_calls", "Tool calls, by tool and outcome (ok, error)", ["tool", "outcome"]),
            (
                "tool_calls_in_doubt",
                "Tool calls found in doubt after a crash, by tool and action "
                "(rerun, reported, approval)",
                ["tool", "action"],
            ),
            ("events_dropped", "Events this collector's subscription lost (fell behind)", []),
        ]
        for name, doc, labels in counters:
            unit = "usd" if name == "model_cost" else ""
            family = CounterMetricFamily(f"{ns}_{name}", doc, labels=labels, unit=unit)
            series = self._counters.get(name, {})
            if not labels and not series:
                family.add_metric([], 0.0)
            for values, amount in sorted(series.items()):
                family.add_metric(list(values), amount)
            yield family
        yield CounterMetricFamily(
            f"{ns}_metrics_label_overflow",
            f"Label values counted as '{OTHER}'",
            value=float(self._overflow),
        )
        yield CounterMetricFamily(
            f"{ns}_metrics_read_errors",
            "Scrapes whose store read failed",
            value=float(self._errors),
        )
        histograms = [
            ("turn", "turn_duration_seconds", "Turn duration (started to settled)", ["profile"]),
            ("model", "model_call_duration_seconds", "Model call latency", ["model"]),
            ("tool", "tool_call_duration_seconds", "Tool call latency", ["tool"]),
            ("commit", "store_commit_duration_seconds", "Store commit latency", []),
            (
                "command",
                "supervisor_command_duration_seconds",
                "Supervisor command latency",
                ["command"],
            ),
        ]
        for key, name, doc, labels in histograms:
            yield self._hist[key].family(f"{ns}_{name}", doc, labels)
