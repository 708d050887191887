"""Reopen benchmark: how long ``Runtime.open`` takes on a store of many agents.

The store is written directly (records as the supervisor writes them): top-level
agents with seven children each, 1% of them left ``running`` as a crash would
leave them, so restore also has to interrupt them and route their completions.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec

from retinue import Profile, Runtime, Turn
from retinue.persistence.store import Store, Write
from retinue.protocol import paths
from retinue.protocol.messages import AgentState
from retinue.protocol.records import AgentRecord
from stress.parts import Options, Part, Result


def _idle(turn: Turn) -> str:
    return "ok"


def build_store(folder: Path, agents: int) -> None:
    """Write ``agents`` agent records (1% running) into a new store at ``folder``."""
    encode = msgspec.msgpack.Encoder().encode
    store = Store(folder, durability="buffered")
    batch: list[Write] = []
    now = time.time()
    made = 0
    while made < agents:
        top_id = uuid.uuid4().hex
        top_path = paths.join(paths.ROOT, paths.derive_name(top_id))
        family: list[tuple[str, str | None, str]] = [(top_id, None, top_path)]
        for _ in range(min(7, agents - made - 1)):
            child_id = uuid.uuid4().hex
            family.append((child_id, top_id, paths.join(top_path, paths.derive_name(child_id))))
        for agent_id, parent_id, path in family:
            made += 1
            state = AgentState.RUNNING if made % 100 == 0 else AgentState.COMPLETED
            record = AgentRecord(
                id=agent_id,
                name=paths.name_of(path),
                path=path,
                profile="worker",
                parent_id=parent_id,
                parent_path=paths.parent_of(path),
                depth=paths.depth(path),
                state=state,
                generation=1,
                task="t",
                created_at=now,
                updated_at=now,
            )
            batch.append(("agents", agent_id.encode(), encode(record)))
        if len(batch) >= 5000:
            store.write_now(batch)
            batch = []
    if batch:
        store.write_now(batch)
    store.close()


def run(agents: int = 100_000) -> dict[str, Any]:
    """Build a store of ``agents`` agents and time two reopens."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "store"
        t0 = time.perf_counter()
        build_store(folder, agents)
        built = time.perf_counter() - t0
        profiles = [Profile("worker", runner=_idle)]
        t0 = time.perf_counter()
        with Runtime.open(folder, profiles=profiles) as rt:
            first = time.perf_counter() - t0
            count = len(rt.agents())
            interrupted = sum(1 for a in rt.agents() if a.state == "interrupted")
        t0 = time.perf_counter()
        with Runtime.open(folder, profiles=profiles):
            second = time.perf_counter() - t0
    return {
        "agents": count,
        "interrupted_at_restore": interrupted,
        "build_s": round(built, 2),
        "first_reopen_s": round(first, 2),
        "second_reopen_s": round(second, 2),
    }


def _part(options: Options) -> Result:
    row = run(10_000 if options.quick else 100_000)
    return Result.row("reopen: Runtime.open on a large store", row)


PART = Part("reopen", _part)
