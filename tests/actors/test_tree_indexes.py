"""The tree's maintained indexes match a full walk of its agents after any operations.

``Tree.state_counts`` / ``Tree.live_profiles`` (the scrape's gauges), the busy
agents (``Tree.busy``: what recovery and the start-up rearms look at) and the
page index behind ``agents(limit=, after=)`` are kept as records change
(put, close, removal, a command rolled back by the journal), so a scrape, an
open and a page never walk every agent. Hypothesis drives random operations;
after each one the indexes equal a recount and every page equals a sort of the
agents.
"""

from __future__ import annotations

from collections import Counter
from unittest import mock

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from persistence import agent

from retinue.actors.tree import Tree, _pages
from retinue.actors.tree._journal import snapshot
from retinue.protocol.messages import AgentState, Completion, CompletionStatus
from retinue.protocol.records import AgentRecord, CompletionRecord

STATES = [s for s in AgentState]
Op = tuple[str, int, int, int]

ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "set", "remove", "page", "undone"]),
        st.integers(0, 40),
        st.integers(0, len(STATES) - 1),
        st.integers(0, 6),
    ),
    max_size=60,
)


Indexes = tuple[dict[str, int], dict[str, int], set[str], dict[str, float], dict[str, int]]


def recount(tree: Tree) -> Indexes:
    agents = tree.agents.values()
    states = Counter(r.state.value for r in agents)
    live = Counter(r.profile for r in agents if r.state is not AgentState.CLOSED)
    busy = {r.id for r in agents if r.state.busy}
    closed = {r.id: r.closed_at or r.updated_at for r in agents if r.state is AgentState.CLOSED}
    children = Counter(r.parent_id for r in agents if r.parent_id is not None)
    return dict(states), dict(live), busy, closed, dict(children)


def indexes(tree: Tree) -> Indexes:
    return (
        dict(tree.state_counts),
        dict(tree.live_profiles),
        set(tree.busy),
        dict(tree.closed),
        dict(tree.stored_children),
    )


def naive_page(
    tree: Tree, cursor: tuple[str, str] | None, limit: int | None, include_closed: bool
) -> list[AgentRecord]:
    shown = sorted(
        (r for r in tree.agents.values() if include_closed or r.state is not AgentState.CLOSED),
        key=lambda r: (r.path, r.id),
    )
    after = [r for r in shown if cursor is None or (r.path, r.id) > cursor]
    return after if limit is None else after[:limit]


class Driver:
    def __init__(self) -> None:
        self.tree = Tree()
        self.made = 0

    def apply(self, op: Op) -> None:
        kind, n, s, p = op
        tree, ids = self.tree, sorted(self.tree.agents)
        if kind == "add":
            self.made += 1
            state = STATES[s]
            parent = ids[n % len(ids)] if ids and n % 2 else None
            record = agent(
                f"{self.made:032x}", f"/root/n{n % 7}", parent, state=state, profile=f"p{p}"
            )
            tree.put_agent(record)
        elif kind == "set" and ids:
            old = tree.agents[ids[n % len(ids)]]
            if old.state is not AgentState.CLOSED:  # a closed agent stays closed
                new = msgspec.structs.replace(
                    old, state=STATES[s], profile=f"p{p}", updated_at=float(n)
                )
                tree.put_agent(new)
        elif kind == "remove":
            closed = [i for i in ids if tree.agents[i].state is AgentState.CLOSED]
            if closed:
                tree.remove_agents([closed[n % len(closed)]])
        elif kind == "page":
            self.check_page(n, p, include_closed=bool(s % 2))

    def check_page(self, n: int, p: int, *, include_closed: bool) -> None:
        tree, ids = self.tree, sorted(self.tree.agents)
        cursor = None
        if ids and n % 3:
            record = tree.agents[ids[n % len(ids)]]
            cursor = (record.path, record.id) if n % 3 == 1 else (record.path, "~")
        limit = None if p == 0 else p
        assert tree.page(cursor, limit, include_closed) == naive_page(
            tree, cursor, limit, include_closed
        )

    def check(self) -> None:
        assert indexes(self.tree) == recount(self.tree)
        for include_closed in (False, True):
            assert self.tree.page(None, None, include_closed) == naive_page(
                self.tree, None, None, include_closed
            )


@settings(max_examples=60, derandomize=True, deadline=None)
@given(ops, ops, st.sampled_from([2, 1024]))
def test_counts_and_pages_match_a_full_walk(
    first: list[Op], undone: list[Op], resort_min: int
) -> None:
    with mock.patch.object(_pages, "_RESORT_MIN", resort_min):  # 2: resorts, rolled back too
        run(first, undone)


def run(first: list[Op], undone: list[Op]) -> None:
    driver = Driver()
    journal = driver.tree.journal
    for op in first:
        if op[0] == "undone":  # a command that fails half way: the journal rolls it back
            before = recount(driver.tree)
            journal.begin(None)
            for inner in undone:
                driver.apply(inner)
            journal.roll_back()
            assert recount(driver.tree) == before
            assert indexes(driver.tree) == before
        else:
            journal.begin(None)
            driver.apply(op)
            journal.keep()
        driver.check()


def test_a_page_after_many_spawns_resorts_once_and_stays_exact() -> None:
    tree = Tree()
    for k in range(3000):  # past the resort threshold: the sorted keys are rebuilt
        tree.put_agent(agent(f"{k:032x}", f"/root/a{(k * 7919) % 3000}"))
    first = tree.page(None, 10, False)
    assert [r.path for r in first] == sorted(f"/root/a{k}" for k in range(3000))[:10]
    assert len(tree.sorted_keys) == 3000 and not tree.new_keys
    tree.remove_agents([r.id for r in first[:5]])
    assert tree.page(None, 5, True) == first[5:]
    assert dict(tree.state_counts) == {"completed": 2995}


def test_agents_added_while_nobody_pages_hold_a_bounded_number_of_keys() -> None:
    """Spawns with no page in between keep at most the resort threshold of keys (not one
    per agent ever added, removed ones included); the next page is still exact."""
    tree = Tree()
    made = [f"{k:032x}" for k in range(3 * _pages._RESORT_MIN)]
    for k, agent_id in enumerate(made):
        tree.put_agent(agent(agent_id, f"/root/a{k}"))
        if k % 2:
            tree.remove_agents([made[k - 1]])
    assert len(tree.new_keys) + len(tree.sorted_keys) <= _pages._RESORT_MIN
    assert tree.page(None, None, True) == naive_page(tree, None, None, True)


def test_a_command_rolled_back_after_its_writes_were_taken_is_undone_and_writes_nothing() -> None:
    """``take_writes`` empties the gathered writes unjournaled (a rollback drops them):
    the command's changes still undo cleanly, its taken writes stay with their taker,
    and the next command starts with nothing gathered."""
    tree = Tree()
    journal = tree.journal
    kept = agent("a" * 32, "/root/a1", state=AgentState.RUNNING)
    journal.begin(None)
    tree.put_agent(kept)
    tree.put_transcript("a" * 32, b"first")
    first = tree.take_writes()
    journal.keep()
    assert [w[0] for w in first] == ["transcripts", "agents"]
    journal.begin("LlmStep")
    tree.put_transcript("a" * 32, b"second")
    tree.put_agent(msgspec.structs.replace(kept, open_calls=1))
    taken = tree.take_writes()
    journal.roll_back()  # a fault after the writes were taken (Rescue.roll_back)
    tree.drop_writes()
    assert [w[0] for w in taken] == ["transcripts", "agents"]  # the taker's copy, untouched
    assert tree.agents["a" * 32] == kept
    assert tree.take_writes() == []


def test_a_new_agents_put_rolled_back_leaves_every_index_as_it_was() -> None:
    """A new agent's put changes every index with one journal entry (``_unput_new``):
    rolled back, top-level or under a parent (whose set of live children it made),
    live or closed, the tree is as it was, picture for picture."""
    tree = Tree()
    journal = tree.journal
    top = agent("a" * 32, "/root/a", state=AgentState.RUNNING, profile="lead")
    sibling = agent("b" * 32, "/root/b", state=AgentState.COMPLETED)
    journal.begin(None)
    tree.put_agent(top)
    tree.put_agent(sibling)
    tree.take_writes()
    journal.keep()
    before = snapshot(tree)
    news = [
        agent("c" * 32, "/root/c", state=AgentState.STARTING),
        agent("d" * 32, "/root/a/d", "a" * 32, state=AgentState.RUNNING),
        agent("e" * 32, "/root/a/e", "a" * 32, state=AgentState.CLOSED, closed_at=5.0),
        agent("f" * 32, "/root/f", state=AgentState.RUNNING, idempotency_key="k"),
    ]
    for record in news:
        journal.begin("Spawn")
        tree.put_agent(record)
        assert tree.agents[record.id] == record
        journal.roll_back()
        assert snapshot(tree) == before, record.path
        assert indexes(tree) == recount(tree)
    journal.begin("Spawn")
    for record in news:
        tree.put_agent(record)
    journal.roll_back()  # several new agents, undone newest first
    assert snapshot(tree) == before
    journal.begin("Spawn")
    for record in news:
        tree.put_agent(record)
    journal.keep()
    assert indexes(tree) == recount(tree)
    assert tree.live_children("a" * 32) == {"d" * 32}
    trees = {"a" * 32: 2, "b" * 32: 1, "c" * 32: 1, "f" * 32: 1}  # a completed agent is live
    assert (tree.live_count, tree.tree_count) == (5, trees)
    assert tree.top_of["d" * 32] == tree.top_of["e" * 32] == "a" * 32
    assert tree.spawn_keys == {("", "k"): "f" * 32}
    assert tree.live_paths["/root/a/d"] == "d" * 32 and "/root/a/e" not in tree.live_paths


def test_every_state_change_of_a_live_agent_moves_its_counts_and_is_undone() -> None:
    """``put_agent``'s own move of a live agent's state (``_MOVES``: its profile kept,
    neither state closed) counts as a full walk does, kept or rolled back, from every
    live state to every other (a turn that starts, settles, parks, restarts)."""
    live = [s for s in AgentState if s is not AgentState.CLOSED]
    for old in live:
        for new in live:
            tree = Tree()
            journal = tree.journal
            other = agent("b" * 32, "/root/b", state=new)  # a count the move must not drop
            record = agent("a" * 32, "/root/a", state=old)
            journal.begin(None)
            tree.put_agent(other)
            tree.put_agent(record)
            journal.keep()
            before = snapshot(tree)
            changed = msgspec.structs.replace(record, state=new, updated_at=2.0)
            journal.begin("Settle")
            tree.put_agent(changed)
            assert indexes(tree) == recount(tree), (old, new)
            journal.roll_back()
            assert snapshot(tree) == before, (old, new)
            journal.begin("Settle")
            tree.put_agent(changed)
            journal.keep()
            assert indexes(tree) == recount(tree), (old, new)
            assert (record.id in tree.busy) is new.busy, (old, new)


def test_a_new_agents_first_completion_rolled_back_leaves_no_index_of_it() -> None:
    """The first completion of an agent makes its completions' dict: one journal entry
    undoes both (the dict and the completion in it); a later one is journaled alone."""
    tree = Tree()
    journal = tree.journal

    def completion(generation: int) -> CompletionRecord:
        done = Completion(
            id=f"{'a' * 32}:{generation}",
            agent_id="a" * 32,
            path="/root/a",
            generation=generation,
            status=CompletionStatus.COMPLETED,
            output="ok",
        )
        return CompletionRecord(completion=done, recipient_id=None, seq=generation)

    before = snapshot(tree)
    journal.begin("Settle")
    tree.add_completion(completion(1))
    assert dict(tree.completions["a" * 32]) == {1: completion(1)}
    journal.roll_back()
    assert snapshot(tree) == before
    assert "a" * 32 not in tree.completions
    journal.begin("Settle")
    tree.add_completion(completion(1))
    tree.take_writes()
    journal.keep()
    kept = snapshot(tree)
    journal.begin("Settle")
    tree.add_completion(completion(2))
    journal.roll_back()
    assert snapshot(tree) == kept
    assert dict(tree.completions["a" * 32]) == {1: completion(1)}


def test_a_close_rolled_back_puts_every_live_index_back() -> None:
    """A close takes the agent out of the live indexes with one journal entry
    (``_reindex_live``): rolled back, a top-level agent, an only child (whose parent's
    set of live children went with it) and a child with a sibling are live again,
    picture for picture; kept, the indexes equal a full walk."""
    tree = Tree()
    journal = tree.journal
    lead = agent("a" * 32, "/root/a", state=AgentState.COMPLETED)
    only = agent("b" * 32, "/root/a/b", "a" * 32, state=AgentState.COMPLETED)
    mid = agent("c" * 32, "/root/c", state=AgentState.RUNNING)
    kids = [agent(f"{k * 32}", f"/root/c/{k}", "c" * 32, state=AgentState.FAILED) for k in "de"]
    journal.begin(None)
    for record in [lead, only, mid, *kids]:
        tree.put_agent(record)
    tree.take_writes()
    journal.keep()
    before = snapshot(tree)
    for record in [lead, only, kids[0], mid]:
        closed = msgspec.structs.replace(record, state=AgentState.CLOSED, closed_at=9.0)
        journal.begin("Close")
        tree.put_agent(closed)
        assert record.path not in tree.live_paths
        assert indexes(tree) == recount(tree), record.path
        journal.roll_back()
        assert snapshot(tree) == before, record.path
    journal.begin("CloseTree")  # several in one command, leaves first: undone newest first
    for record in [only, lead, *kids, mid]:
        tree.put_agent(msgspec.structs.replace(record, state=AgentState.CLOSED, closed_at=9.0))
    assert (tree.live_count, tree.tree_count, tree.live_paths) == (0, {}, {})
    assert "a" * 32 not in tree.children and "c" * 32 not in tree.children
    journal.roll_back()
    assert snapshot(tree) == before
    journal.begin("Close")
    tree.put_agent(msgspec.structs.replace(only, state=AgentState.CLOSED, closed_at=9.0))
    journal.keep()
    assert indexes(tree) == recount(tree)
    assert (tree.live_count, tree.tree_count) == (4, {"a" * 32: 1, "c" * 32: 3})
    assert "a" * 32 not in tree.children
