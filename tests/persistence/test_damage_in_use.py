"""Damage met by a store in use: every caller gets ``StoreCorrupted``, never a signal.

Each case runs in a child process (a SIGBUS shows up as a negative return code
instead of killing the test run) and damages the store in one way: pages
zeroed under an open runtime (LMDB then fails the commit with
``MDB_BAD_TXN``, having lost the error that named the damage); the free-page
list damaged while the store was closed (every tree page is sound, so it
opens, and the first commit that takes a free page fails); pages zeroed under
an open read-only runtime (LMDB aborts on a damaged page) or under an open
writer whose settled agents are read from the store; ``data.mdb``
truncated under an open writer or an open read-only runtime (LMDB would read
the lost pages through its map: SIGBUS).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from . import CHILD_ENV, PROMPT_S, REPO

CHILD = r"""
import asyncio, os, struct, sys, threading
from pathlib import Path
from retinue import Limits, Profile, RetinueError, Runtime, StoreCorrupted
from retinue.persistence import verify
from retinue.persistence.integrity import read_meta_pages
from retinue.persistence.store import Store

case, folder = sys.argv[1], Path(sys.argv[2])
data = folder / "data.mdb"
PAGE = 4096
profiles = [Profile("worker", runner=lambda turn: "done " + "o" * 300)]
limits = Limits(max_tree_agents=100_000, wait_default_s=10)


def fill(rt, count):
    for i in range(count):
        rt.wait(rt.spawn("worker", "task " + "x" * 300).id, timeout=10)


def report(step, call):
    try:
        call()
        print(step, "OK", flush=True)
    except RetinueError as exc:
        advice = "copy a backup in its place" in str(exc)
        print(step, type(exc).__name__, exc.path == str(folder), advice, flush=True)
        return exc
    return None


def zero_tree_pages():
    raw = data.read_bytes()
    at = struct.calcsize("P") + 2
    with data.open("r+b") as handle:
        for n in range(2, len(raw) // PAGE):
            (flags,) = struct.unpack_from("=H", raw, n * PAGE + at)
            if flags in (1, 2):
                handle.seek(n * PAGE)
                handle.write(bytes(PAGE))


U16 = struct.Struct("=HHHH")


def newest_meta_at():
    # The meta page of the newest transaction (its txnid, not its main tree's root: a
    # newer root may sit on a lower, reused page, and the older meta's tree may hold
    # pages the current one freed).
    return max(read_meta_pages(data), key=lambda meta: meta.txnid).index * PAGE


def nodes(raw, pgno):
    # (offset of the node's key, key size, the node's first six bytes as lo, hi, flags)
    base = pgno * PAGE
    _, _, lower, _ = U16.unpack_from(raw, base + verify._S)
    count = (lower - verify._HDR) // 2
    for offset in struct.unpack_from(f"={count}H", raw, base + verify._HDR):
        lo, hi, flags, ksize = U16.unpack_from(raw, base + offset)
        yield base + offset + 8, ksize, lo, hi, flags


def zero_second_agents_leaf():
    # LMDB asserts (abort) when a cursor steps onto a zeroed sibling leaf.
    raw = data.read_bytes()
    meta_at = newest_meta_at()
    depth, root = verify._db_record(raw, meta_at + verify._DBS_AT + verify._DB_SIZE)
    assert depth == 1, depth  # the main tree of this store is one leaf
    for key_at, ksize, *_ in nodes(raw, root):
        if raw[key_at : key_at + ksize] == b"agents":
            depth, root = verify._db_record(raw, key_at + ksize)
    assert depth == 2, depth  # a branch over the agents' leaves
    children = [lo | hi << 16 | flags << 32 for _, _, lo, hi, flags in nodes(raw, root)]
    with data.open("r+b") as handle:
        handle.seek(children[1] * PAGE)
        handle.write(bytes(PAGE))


def break_newest_free_entry():
    # The free-page tree's newest entry (a list of page numbers) claims 2**40 pages.
    raw = bytearray(data.read_bytes())
    meta_at = newest_meta_at()
    depth, root = verify._db_record(raw, meta_at + verify._DBS_AT)
    assert depth == 1, depth  # the free tree of this small store is one leaf
    base = root * PAGE
    _, _, lower, _ = U16.unpack_from(raw, base + verify._S)
    count = (lower - verify._HDR) // 2
    offset = struct.unpack_from(f"={count}H", raw, base + verify._HDR)[-1]
    ksize = U16.unpack_from(raw, base + offset)[3]
    struct.pack_into("=Q", raw, base + offset + 8 + ksize, 1 << 40)
    data.write_bytes(raw)


if case == "zeroed_under_writer":
    rt = Runtime.open(folder, profiles=profiles, limits=limits)
    fill(rt, 60)
    zero_tree_pages()
    report("spawn", lambda: rt.spawn("worker", "t"))
    report("again", lambda: rt.spawn("worker", "t"))
    rt.shutdown()
elif case == "free_list_damaged_while_closed":
    # Built by the store's own writer, one commit at a time: the same pages every run.
    store = Store(folder)
    for r in range(6):
        store.write_now([("transcripts", f"{r}-{i:04d}".encode(), b"v" * 300) for i in range(200)])
        store.write_now([("transcripts", f"{r}-{i:04d}".encode(), None) for i in range(0, 200, 2)])
    store.close()
    break_newest_free_entry()
    store = Store(folder)  # every tree page is sound: it opens
    print("open OK", flush=True)
    report("commit", lambda: store.write_now([("transcripts", b"new", b"z" * 300)]))
    report("again", lambda: store.write_now([("transcripts", b"new", b"z" * 300)]))
    store.close()
elif case == "settle_fails_under_a_host_wait":
    # The host waits; then the store is damaged and the turn settles: its commit
    # fails, and the wait it would have answered gets that failure, not silence.
    gate = threading.Event()
    def held(turn):
        gate.wait(30)
        return "late"
    rt = Runtime.open(folder, profiles=[Profile("held", runner=held), *profiles], limits=limits)
    fill(rt, 60)
    agent = rt.spawn("held", "t")
    async def scenario():
        waiting = asyncio.ensure_future(rt.wait_async(agent.id, timeout=10))
        await asyncio.sleep(0)  # the task has submitted its wait
        await rt.get_async(agent.id)  # served after the wait: the wait is registered
        zero_tree_pages()
        gate.set()
        await waiting
    report("wait", lambda: asyncio.run(scenario()))
    rt.shutdown()
elif case == "truncated_under_writer":
    rt = Runtime.open(folder, profiles=profiles, limits=limits)
    fill(rt, 60)
    os.truncate(data, 3 * PAGE)
    report("spawn", lambda: rt.spawn("worker", "t"))
    report("again", lambda: rt.spawn("worker", "t"))
    rt.shutdown()
elif case == "zeroed_under_reader":
    with Runtime.open(folder, profiles=profiles, limits=limits) as rt:
        fill(rt, 60)
    rt = Runtime.open(folder, readonly=True)
    report("agents", lambda: rt.agents(include_closed=True))
    zero_second_agents_leaf()
    report("agents", lambda: rt.agents(include_closed=True))
    report("get", lambda: rt.get("/root/x"))
    rt.shutdown()
elif case == "zeroed_under_writer_settled":
    # The reopened writer holds its settled agents in the store, not in memory:
    # reading them all meets the zeroed leaf, and must not step onto it.
    with Runtime.open(folder, profiles=profiles, limits=limits) as rt:
        fill(rt, 60)
    rt = Runtime.open(folder, profiles=profiles, limits=limits)
    report("agents", lambda: rt.agents(include_closed=True))
    zero_second_agents_leaf()
    report("agents", lambda: rt.agents(include_closed=True))
    rt.shutdown()
elif case == "truncated_under_reader":
    with Runtime.open(folder, profiles=profiles, limits=limits) as rt:
        fill(rt, 60)
    rt = Runtime.open(folder, readonly=True)
    report("agents", lambda: rt.agents(include_closed=True))
    os.truncate(data, 3 * PAGE)
    report("agents", lambda: rt.agents(include_closed=True))
    rt.shutdown()
"""

EXPECTED = {
    "zeroed_under_writer": ["spawn StoreCorrupted True True", "again StoreCorrupted True True"],
    # The open commits nothing of its own (a store stamped current stays as it is), so
    # the first commit reuses none of the pages the damaged newest entry lists: LMDB
    # reads that entry for the next one.
    "free_list_damaged_while_closed": [
        "open OK",
        "commit OK",
        "again StoreCorrupted True True",
    ],
    "settle_fails_under_a_host_wait": ["wait StoreCorrupted True True"],
    "truncated_under_writer": ["spawn StoreCorrupted True True", "again StoreCorrupted True True"],
    "zeroed_under_reader": [
        "agents OK",
        "agents StoreCorrupted True True",
        "get StoreCorrupted True True",
    ],
    "zeroed_under_writer_settled": ["agents OK", "agents StoreCorrupted True True"],
    "truncated_under_reader": ["agents OK", "agents StoreCorrupted True True"],
}


@pytest.mark.parametrize("case", list(EXPECTED))
def test_damage_met_in_use_is_store_corrupted_with_the_path_and_advice(
    tmp_path: Path, case: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, case, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        env=dict(CHILD_ENV, PYTHONPATH=str(REPO)),
        timeout=PROMPT_S * 6,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.splitlines() == EXPECTED[case], done.stderr[-2000:]
