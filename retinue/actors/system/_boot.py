"""Start-up wiring below the runtime: profiles, restore, load, recover, the supervisor actor.

:func:`boot` turns an open writable store into a running supervisor: it
restores the store in one read, loads the tree, turns crashed turns into
``interrupted`` ones, writes that recovery before anything else, and starts
the supervisor actor. :func:`read_diagnostics` does the read-only half.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import pykka

from retinue.actors import Profile
from retinue.actors.admission import Admission
from retinue.actors.calls import Engine
from retinue.actors.events import EventBus, Spans
from retinue.actors.supervisor import Supervisor, SupervisorActor
from retinue.actors.tree import (
    OPEN_INDEX_DATABASE,
    OPEN_INDEX_KEY,
    OpenIndex,
    StoredCompletions,
    collector_paused,
    load_tree,
    read_open_index,
)
from retinue.actors.turns import Executor, Runner
from retinue.errors import ConfigurationError
from retinue.persistence.integrity import DATA_FILE
from retinue.persistence.residency import release_mapped
from retinue.persistence.restore import Diagnostic, restore
from retinue.persistence.store import RESTORE_DATABASES, Snapshot, Store
from retinue.protocol.effects import check_effect_names
from retinue.protocol.graph import validate_graph
from retinue.protocol.limits import Limits
from retinue.protocol.supervision import check_approve_names
from retinue.protocol.tools import (
    BUILTIN_TOOLS,
    check_offered_names,
    resolve_profile_tools,
    runner_tools,
    unavailable_tools,
)

__all__ = [
    "DEPTH_CAP_KEY",
    "FREEZE_AT_AGENTS",
    "Booted",
    "ModelRunnerFactory",
    "boot",
    "inherited_model",
    "profile_table",
    "read_diagnostics",
    "stored_depth_cap",
]


ModelRunnerFactory = Callable[[Profile, Profile], Runner]
"""``factory(profile, model_profile)``: the runner a profile gets from a model profile."""


def inherited_model(name: str, table: dict[str, Profile]) -> Profile | None:
    """Return the nearest profile up the delegation graph that names a model.

    Parents (profiles listing ``name`` in ``subagents``) are searched breadth
    first, in definition order; a parent with a runner of its own ends the
    search along its branch.
    """
    seen = {name}
    frontier = [name]
    while frontier:
        parents = [
            p
            for child in frontier
            for p in table.values()
            if child in p.subagents and p.name not in seen
        ]
        for parent in parents:
            if parent.model is not None and parent.runner is None:
                return parent
        seen.update(p.name for p in parents)
        frontier = [p.name for p in parents if p.runner is None]
    return None


def profile_table(
    profiles: Iterable[Profile],
    runner: Runner | None,
    limits: Limits,
    *,
    model_runner: ModelRunnerFactory | None = None,
) -> tuple[dict[str, Profile], dict[str, Runner]]:
    """Index profiles by name with the runner each one uses.

    A profile's runner is, in order: its own ``runner``; ``model_runner(p, p)``
    when it names a ``model``; ``model_runner(p, parent)`` for the model of the
    nearest profile that may spawn it (inherited); the runtime's ``runner``.

    A profile whose ``tools`` is None is replaced by a copy holding the tools
    it inherits (see :func:`~retinue.protocol.tools.resolve_profile_tools`).

    Raises:
        ConfigurationError: not a Profile, defined twice, or no runner at all;
            a profile whose tools exceed those of a profile that spawns it
            (the capability ceiling; the message names the extra tools), or
            whose model runner's own tools (``LiteLLMRunner(tools=...)``)
            exceed the profile's; a profile with a model runner naming tools
            that are neither built in nor registered on that runner; two tools
            a model would be offered under one function name; an ``approve``
            entry that names no tool of the profile.
        DelegationCycleError, DelegationDepthError: a bad profile graph.
    """
    table: dict[str, Profile] = {}
    runners: dict[str, Runner] = {}
    if isinstance(profiles, str | bytes | Profile) or not isinstance(profiles, Iterable):
        raise ConfigurationError(
            f"profiles must be a list of Profile objects, not {type(profiles).__name__}"
        )
    if runner is not None and not callable(runner):
        raise ConfigurationError(f"runner must be callable, not {type(runner).__name__}")
    for profile in profiles:
        if not isinstance(profile, Profile):
            raise ConfigurationError(
                f"profiles must be Profile objects, not {type(profile).__name__}"
            )
        if profile.name in table:
            raise ConfigurationError(f"profile {profile.name!r} is defined twice")
        table[profile.name] = profile
    validate_graph({p.name: list(p.subagents) for p in table.values()}, cap=limits.depth_cap)
    tools = resolve_profile_tools({p.name: (p.tools, p.subagents) for p in table.values()})
    explicit = {name for name, profile in table.items() if profile.tools is not None}
    for name, profile in table.items():
        if profile.tools is None:  # inheriting: record what it inherits
            table[name] = dataclasses.replace(profile, tools=tools[name])
    for profile in table.values():
        chosen = profile.runner
        if chosen is None and model_runner is not None:
            source = profile if profile.model is not None else inherited_model(profile.name, table)
            if source is not None:
                chosen = model_runner(profile, source)
        chosen = chosen or runner
        if chosen is None:
            raise ConfigurationError(
                f"profile {profile.name!r} has no runner and no model (nor a parent with one), "
                "and the runtime has no default runner"
            )
        runners[profile.name] = chosen
        hosts = getattr(chosen, "host_tools", None)  # a model runner's registered tools
        _check_names(profile, tools[profile.name], chosen if isinstance(hosts, Mapping) else None)
        if profile.name in explicit and isinstance(hosts, Mapping):
            missing = unavailable_tools(tools[profile.name], hosts)
            if missing:
                raise ConfigurationError(
                    f"profile {profile.name!r} names tools that are neither built in nor "
                    f"registered on its runner: {', '.join(missing)}; built-in tools are "
                    f"{', '.join(BUILTIN_TOOLS)}; register host tools with "
                    "LiteLLMRunner(host_tools={...})"
                )
    return table, runners


def _check_names(profile: Profile, tools: tuple[str, ...], model_runner: object) -> None:
    """Check a model runner's own tools, the names its model is offered, the ``approve`` entries.

    ``tools`` are the profile's effective tools, its capability ceiling; a
    model runner built with tools of its own (``LiteLLMRunner(tools=...)``)
    offers those instead, and they must lie within the ceiling.

    Raises:
        ToolsNotPermitted: the runner's own tools go beyond the profile's
            (:func:`~retinue.protocol.tools.runner_tools`).
        ConfigurationError: see :func:`~retinue.protocol.tools.check_offered_names`,
            :func:`~retinue.protocol.supervision.check_approve_names` and
            :func:`~retinue.protocol.effects.check_effect_names`.
    """
    own = getattr(model_runner, "tools", None)
    names = tools if own is None else runner_tools(profile.name, own, tools)
    check_offered_names(profile.name, names)
    check_approve_names(profile.name, profile.approve, names)
    check_effect_names(profile.name, profile.effects, names)


def read_diagnostics(store: Store) -> list[Diagnostic]:
    """Return what a read-only restore of ``store`` skips or repairs (no cap applies)."""
    return list(restore(store.snapshot(), None).diagnostics)


DEPTH_CAP_KEY = b"depth_cap"
"""The meta key holding the ``depth_cap`` the store's last writer ran with."""


def stored_depth_cap(snapshot: Snapshot) -> int | None:
    """Return the ``depth_cap`` the store's last writer recorded (None: never recorded)."""
    for key, raw in snapshot.records.get("meta", []):
        if key == DEPTH_CAP_KEY:
            try:
                value = msgspec.msgpack.decode(raw, type=int)
            except msgspec.DecodeError:
                return None
            return value
    return None


@dataclass(frozen=True)
class Booted:
    """A running supervisor and what its restore found."""

    actor: pykka.ActorRef[Any]
    diagnostics: list[Diagnostic]
    core: Supervisor
    froze: bool = False
    """The open froze what was alive (a big tree: :data:`FREEZE_AT_AGENTS`); the
    shutdown unfreezes it."""


FREEZE_AT_AGENTS = 20_000
"""An open restoring at least this many agents freezes what it built out of the
cyclic collector's scans (smaller trees cost the collector little)."""


def _read_for_open(store: Store, depth_cap: int | None) -> tuple[Snapshot, OpenIndex | None]:
    """Read what an open restores, and a clean shutdown's index of the agents if the store
    is as that shutdown left it (then the snapshot holds no agent: the open reads only
    the busy ones; else it walks them all). The delivered completions stay in the store:
    the tree reads an agent's when asked.

    Raises:
        StoreCorrupted, StoreError: a read failed.
    """
    index = read_open_index(store, depth_cap)
    every = (*RESTORE_DATABASES, "leases", "approvals")
    snapshot = store.snapshot(
        [name for name in every if index is None or name != "agents"], undelivered_only=True
    )
    if index is not None and not index.current(store):
        # Another LMDB writer committed between the two reads: walk what it left.
        return store.snapshot(every, undelivered_only=True), None
    return snapshot, index


def boot(
    store: Store,
    *,
    profiles: dict[str, Profile],
    runners: dict[str, Runner],
    limits: Limits,
    bus: EventBus,
    engine: Engine,
    executor: Executor | None = None,
    spans: Spans | None = None,
    admission: Admission | None = None,
) -> Booted:
    """Restore ``store`` into a tree, recover crashed turns and start the supervisor.

    Agents that were queued or running become ``interrupted`` (with their
    completions); that recovery is committed before the supervisor serves
    anything. On failure nothing is left running (the store stays open).

    Raises:
        StoreError: the recovery could not be written.
    """
    snapshot, index = _read_for_open(store, limits.depth_cap)
    agents = len(snapshot.records.get("agents", ())) if index is None else len(index.paths)
    freeze = agents >= FREEZE_AT_AGENTS
    if freeze:  # the open ends by freezing what is alive: collect the host's garbage
        gc.collect()  # first, so no cycle of it is frozen (the tree is not built yet)
    # Paused from the load to the freeze: a collection as the load ends would walk the
    # whole young tree once before the freeze spares the rest of the runtime the same.
    with collector_paused():
        tree, restored = load_tree(
            snapshot, limits.depth_cap, StoredCompletions(store), settle=True, index=index
        )
        diagnostics = list(restored.diagnostics) + [
            Diagnostic(
                database="meta",
                key="schema_version",
                code="migrated",
                message=f"store migrated from schema version {v}",
            )
            for v in store.migrated_from
        ]
        for record in restored.rewritten:
            tree.put_agent(record)
        core = Supervisor(
            store=store,
            tree=tree,
            profiles=profiles,
            runners=runners,
            limits=limits,
            bus=bus,
            engine=engine,
            executor=executor,
            spans=spans,
            admission=admission,
        )
        core.supervision.approvals.load(restored.approvals)
        core.recover()
        cap = ("meta", DEPTH_CAP_KEY, msgspec.msgpack.encode(limits.depth_cap))
        # The index is stale from this commit on: it leaves the file with it.
        stale = (OPEN_INDEX_DATABASE, OPEN_INDEX_KEY, None)
        store.write_now([*tree.take_writes(), cap, stale])
        del snapshot, restored  # the raw records and the restore's lists: the tree has them
        release_mapped(store.folder / DATA_FILE)  # the pages the restore read leave the RSS
        # The tree was built with the collector paused: its containers are all young, and
        # the collections after the open would walk every one of them (pauses of seconds at
        # a million agents, each spawn waiting). Freeze what is alive, as the litellm import
        # does (llm/model/_provider.py): still freed by reference counting, and the shutdown
        # unfreezes it, so no cycle among it outlives the runtime.
        if freeze:
            gc.freeze()
    actor = SupervisorActor.start(core)  # serves nothing before the recovery is committed
    return Booted(actor=actor, diagnostics=diagnostics, core=core, froze=freeze)
