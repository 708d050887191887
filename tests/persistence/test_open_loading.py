"""An open fills the tree in one pass per index family, with what one put at a time gives.

``Tree.load`` indexes restored agents and completions in plain containers
first (an open's agents as restore's walk placed them, ``Restored.placed``)
and hands them to the journaled ones in one step
(:mod:`retinue.actors.tree._loading`); the tree it makes must be the tree
``put_agent`` and ``add_completion`` make one record at a time, journaled
containers included (a plain set or dict would escape the journal).
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from retinue.actors import JDict, JSet
from retinue.actors.tree import HOST_KEY, Tree
from retinue.persistence.placed import Placed
from retinue.persistence.restore import Restored, _Scan, restore
from retinue.persistence.store import Snapshot
from retinue.protocol import paths
from retinue.protocol.messages import AgentState
from retinue.protocol.records import AgentRecord, CompletionRecord

from . import agent, completion, encode

STATES = [
    AgentState.COMPLETED,
    AgentState.CLOSED,
    AgentState.FAILED,
    AgentState.INTERRUPTED,
    AgentState.RUNNING,
    AgentState.RESTARTING,
    AgentState.STARTING,
    AgentState.AWAITING_APPROVAL,
]


@st.composite
def forests(draw: st.DrawFn) -> tuple[list[AgentRecord], list[CompletionRecord]]:
    """Agents (parents before children) and their completions, some undelivered."""
    count = draw(st.integers(1, 14))
    agents: list[AgentRecord] = []
    for index in range(count):
        parent = draw(st.none() | st.sampled_from(agents)) if agents else None
        path = f"/root/a{index}" if parent is None else f"{parent.path}/a{index}"
        key = draw(st.none() | st.sampled_from(["k1", "k2"]))
        agents.append(
            agent(
                f"id{index}",
                path,
                None if parent is None else parent.id,
                state=draw(st.sampled_from(STATES)),
                profile=draw(st.sampled_from(["lead", "leaf"])),
                idempotency_key=key,
                generation=3,
            )
        )
    done: list[CompletionRecord] = []
    for seq, record in enumerate(draw(st.lists(st.sampled_from(agents), max_size=10)), 1):
        recipient = None if record.parent_id is None else record.parent_id
        generation = draw(st.integers(1, 3))
        done.append(
            completion(
                record, generation, seq, recipient_id=recipient, delivered=draw(st.booleans())
            )
        )
    return agents, done


def _one_at_a_time(agents: list[AgentRecord], done: list[CompletionRecord]) -> Tree:
    tree = Tree()
    tree.keys_stale = True
    for record in agents:
        tree.put_agent(record, persist=False)
    for done_record in done:
        tree.add_completion(done_record, persist=False)
    return tree


def _picture(tree: Tree) -> dict[str, Any]:
    """Every agent and completion index, order kept where the order means something."""
    return {
        "agents": dict(tree.agents),
        "order": list(tree.agents),
        "state_counts": dict(tree.state_counts),
        "live_profiles": dict(tree.live_profiles),
        "live_paths": dict(tree.live_paths),
        "children": {key: set(kids) for key, kids in tree.children.items()},
        "top_of": dict(tree.top_of),
        "busy": list(tree.busy),
        "closed": dict(tree.closed),
        "stored_children": dict(tree.stored_children),
        "tree_count": dict(tree.tree_count),
        "spawn_keys": dict(tree.spawn_keys),
        "live_count": tree.live_count,
        "completions": {key: list(known.items()) for key, known in tree.completions.items()},
        "pending": {key: list(queue.items()) for key, queue in tree.pending.items()},
        "undelivered": dict(tree.undelivered),
    }


@settings(max_examples=80, derandomize=True, deadline=None)
@given(forests())
def test_a_loaded_tree_is_the_tree_one_put_at_a_time_makes(
    forest: tuple[list[AgentRecord], list[CompletionRecord]],
) -> None:
    agents, done = forest
    loaded = Tree()
    loaded.load(agents, [], done)
    assert _picture(loaded) == _picture(_one_at_a_time(agents, done))
    # Journaled containers all the way down: a command's change to them can be undone.
    assert all(type(kids) is JSet for kids in loaded.children.values())
    assert all(type(known) is JDict for known in loaded.completions.values())
    assert all(type(queue) is JDict for queue in loaded.pending.values())
    assert loaded.writes == []  # nothing was running with inputs: nothing to rewrite
    # As an open loads them: restored (siblings oldest first, ties by id), then indexed
    # by restore's walk.
    raws = sorted((record.id.encode(), encode(record)) for record in agents)
    restored = restore(Snapshot(records={"agents": raws}), None, index=True)
    placed = Tree()
    placed.load(restored.agents, [], done, placed=restored.placed)
    assert _picture(placed) == _picture(_one_at_a_time(restored.agents, done))
    assert all(type(kids) is JSet for kids in placed.children.values())


def test_a_loaded_tree_undoes_a_failed_command_exactly() -> None:
    lead = agent("lead1", "/root/lead", state=AgentState.COMPLETED)
    kid = agent("kid1", "/root/lead/kid", "lead1", state=AgentState.COMPLETED)
    tree = Tree()
    tree.load([lead, kid], [], [completion(kid, 1, 1, recipient_id="lead1")])
    before = _picture(tree)
    journal = tree.journal
    journal.begin("Close")
    tree.put_agent(agent("kid2", "/root/lead/kid2", "lead1", state=AgentState.RUNNING))
    tree.put_agent(agent("kid1", "/root/lead/kid", "lead1", state=AgentState.CLOSED))
    tree.mark_delivered(tree.pending_for("lead1")[0])
    assert _picture(tree) != before
    journal.roll_back()
    assert _picture(tree) == before
    assert set(tree.pending) == {HOST_KEY, "lead1"}


DAMAGES = ["orphan", "cycle", "bad_name", "bad_path", "moved", "deeper", "undecodable", "key"]


@st.composite
def stores(draw: st.DrawFn) -> tuple[list[tuple[bytes, bytes]], int | None]:
    """A store's agent records (by key, as LMDB reads them) and a depth cap: a sound
    tree with live siblings that may share a name and ties in ``created_at``, and in
    half the examples damage of every kind restore knows."""
    count = draw(st.integers(1, 14))
    records: list[AgentRecord] = []
    for index in range(count):
        parent = draw(st.none() | st.sampled_from(records)) if records else None
        name = draw(st.sampled_from(["x", "y", f"n{index}"]))
        records.append(
            agent(
                f"{(index * 37) % 101:03d}{index}",  # keys not in creation order
                f"{paths.ROOT if parent is None else parent.path}/{name}",
                None if parent is None else parent.id,
                state=draw(st.sampled_from(STATES)),
                created_at=draw(st.sampled_from([1.0, 2.0, 3.0])),
            )
        )
    raws = {record.id: encode(record) for record in records}
    damages = draw(
        st.lists(st.tuples(st.integers(0, count - 1), st.sampled_from(DAMAGES)), max_size=3)
    )
    for index, damage in damages if draw(st.booleans()) else []:
        record = records[index]
        other = records[draw(st.integers(0, count - 1))]
        changes: dict[str, dict[str, Any]] = {
            "orphan": {"parent_id": "gone"},
            "cycle": {"parent_id": other.id},
            "bad_name": {"name": "Bad"},
            "bad_path": {"path": record.path + "//x"},
            "moved": {"path": f"{paths.ROOT}/elsewhere/{record.name}"},
            "deeper": {"depth": record.depth + 1, "parent_path": paths.ROOT + "/p"},
        }
        changed = changes.get(damage)
        if changed is not None:
            raws[record.id] = encode(msgspec.structs.replace(record, **changed))
        elif damage == "undecodable":
            raws[record.id] = b"\xc1"
        else:
            raws[record.id] = encode(msgspec.structs.replace(record, id="other"))
    cap = draw(st.sampled_from([None, 2, 3]))
    return sorted((key.encode(), raw) for key, raw in raws.items()), cap


def _careful(raws: list[tuple[bytes, bytes]], cap: int | None) -> Restored:
    scan = _Scan(Restored(placed=Placed()))
    scan.careful(raws, cap)
    return scan.out


@settings(max_examples=300, derandomize=True, deadline=None)
@given(stores())
def test_a_sound_store_restores_as_the_careful_way_restores_it(
    store: tuple[list[tuple[bytes, bytes]], int | None],
) -> None:
    raws, cap = store
    fast = restore(Snapshot(records={"agents": list(raws)}), cap, index=True)
    careful = _careful(raws, cap)
    assert fast.agents == careful.agents  # parents first, siblings oldest first: in order
    assert fast.rewritten == careful.rewritten
    assert fast.diagnostics == careful.diagnostics
    fast_tree, careful_tree = Tree(), Tree()
    fast_tree.load(fast.agents, [], [])
    careful_tree.load(careful.agents, [], [])
    assert _picture(fast_tree) == _picture(careful_tree)
    # What the walk indexed on the way, either way, is what the tree indexes itself.
    for walked in (fast, careful):
        placed = Tree()
        placed.load(walked.agents, [], [], placed=walked.placed)
        assert _picture(placed) == _picture(careful_tree)
