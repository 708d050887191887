"""Where a fork's generations are kept: the newest on the agent's record, older ones on their own.

A lifecycle (spawn, run, close) writes no generation record of its own (the
settle's write of the agent's record carries it), yet the closed agent forks
as of its last generation, after a reopen too; a follow-up writes the
generation it ends, in its own transition. Python runners on a real store.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
from support import OpenRuntime, act, wait_settled

from retinue import AgentState, Profile, Turn
from retinue.persistence.store import Store
from retinue.protocol.records import GenerationRecord


def answer(turn: Turn) -> str:
    """Answer ``done:<task>``; a task ``fail`` fails."""
    if turn.task == "fail":
        raise RuntimeError("asked to fail")
    return f"done:{turn.task}"


def stored_generations(folder: Path) -> dict[str, tuple[str, str | None]]:
    """The generation records of a closed store: key -> (state, output)."""
    store = Store(folder, readonly=True)
    try:
        raw = dict(store.snapshot(["generations"]).records["generations"])
    finally:
        store.close()
    decode = msgspec.msgpack.Decoder(GenerationRecord).decode
    return {
        key.decode().rsplit(":", 1)[1].lstrip("0"): (
            str(decode(value).agent.state),
            decode(value).agent.output,
        )
        for key, value in raw.items()
    }


def test_a_lifecycle_writes_no_generation_yet_its_closed_agent_forks_after_a_reopen(
    open_runtime: OpenRuntime, store_path: Path
) -> None:
    rt = open_runtime([Profile("w", runner=answer)])
    for name in ("a", "b"):
        info = rt.spawn("w", name, name=name)
        rt.wait(info.id, timeout=10)
        rt.close(info.id)
    failed = rt.spawn("w", "fail", name="f")
    wait_settled(rt, failed.id)
    rt.close(failed.id)
    rt.shutdown()
    assert stored_generations(store_path) == {}  # the agents' records carry them

    rt = open_runtime([Profile("w", runner=answer)])
    fork = rt.fork(info.id)  # closed: as of its last settled generation
    assert (fork.path, fork.state, fork.generation, fork.output) == (
        "/root/b_fork1",
        AgentState.COMPLETED,
        1,
        "done:b",
    )
    again = rt.fork(failed.id, at=1)
    assert (again.state, again.generation, again.error) == (
        AgentState.FAILED,
        1,
        "RuntimeError: asked to fail",
    )
    # A fork is settled as of then: forking the fork needs no write either.
    assert rt.fork(fork.id, name="twice").output == "done:b"


def test_a_new_generation_writes_the_one_it_ends_and_keeps_the_newest(
    open_runtime: OpenRuntime, store_path: Path
) -> None:
    rt = open_runtime([Profile("w", runner=answer)], fork_generations=2)
    w = rt.spawn("w", "g1", name="w")
    wait_settled(rt, w.id)
    for n in (2, 3):
        act(rt, w.id, f"g{n}")
    # g1 and g2 were written as g2 and g3 started; g3 rides on the record.
    assert [(g, rt.fork(w.id, at=g).output) for g in (2, 3)] == [(2, "done:g2"), (3, "done:g3")]
    rt.shutdown()
    assert stored_generations(store_path) == {
        "1": ("completed", "done:g1"),
        "2": ("completed", "done:g2"),
    }
    rt = open_runtime([Profile("w", runner=answer)], fork_generations=2)
    assert rt.fork(w.id, at=3).output == "done:g3"  # from the reopened record
    act(rt, w.id, "g4")
    rt.close(w.id)
    assert [rt.fork(w.id, at=g).output for g in (3, 4)] == ["done:g3", "done:g4"]
    rt.shutdown()
    assert stored_generations(store_path) == {
        "2": ("completed", "done:g2"),
        "3": ("completed", "done:g3"),
    }
