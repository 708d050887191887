"""The damage suite's sample store and the ways its copies are damaged.

A sample store (agents in a tree, messages, completions, closed agents) is
built once. Damages: truncation of ``data.mdb`` at every page boundary (and
inside a page), an empty or deleted ``data.mdb``, flipped bytes at random
offsets, random bytes scribbled over part of a page, zeroed pages (each page
in turn), garbage ``writer.lock`` / ``lock.mdb`` / ``retinue.json`` files; and
in use (applied by the worker to a store it has open): truncation at page
boundaries and zeroed pages.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Case", "build_sample", "cases", "in_use_cases", "worker_runner"]


def worker_runner(turn: Any) -> str:
    """A worker's turn: settles at once."""
    return f"done {turn.task[:20]} after {len(turn.messages)} messages"


def _lead_runner(turn: Any) -> str:
    """A lead's turn: spawns two workers."""
    for i in range(2):
        turn.spawn("worker", f"sub {i} of {turn.task[:20]} " + "y" * 200)
    return "lead done"


def build_sample(folder: Path, agents: int) -> int:
    """Create the sample store; return how many agents (closed included) it holds."""
    from retinue import Limits, Profile, Runtime

    profiles = [
        Profile("lead", subagents=["worker"], runner=_lead_runner),
        Profile("worker", runner=worker_runner),
    ]
    limits = Limits(max_tree_agents=200, fanout_cap=8, pending_completions_per_agent=1000)
    with Runtime.open(folder, profiles=profiles, limits=limits) as rt:
        leads = []
        for i in range(max(1, agents // 3)):
            lead = rt.spawn("lead", f"lead task {i} " + "x" * 400, name=f"lead{i}")
            leads.append(lead)
        for lead in leads:
            rt.wait(lead.id, timeout=30)
            rt.send(lead.id, "a message for the next turn " + "m" * 300)
        for lead in leads[::4]:  # some closed, with their subtrees
            rt.close_tree(lead.id)
        count = len(rt.agents(include_closed=True))
    return count


@dataclass(frozen=True)
class Case:
    """One way of damaging a copy of the sample store."""

    kind: str
    arg: int = 0
    arg2: int = 0
    label: str = ""

    def name(self) -> str:
        """A short, unique description."""
        return self.label or f"{self.kind}:{self.arg}" + (f":{self.arg2}" if self.arg2 else "")

    def apply(self, folder: Path, page: int) -> None:
        """Damage ``folder`` (a copy of the sample) in this case's way."""
        data = folder / "data.mdb"
        if self.kind == "truncate":
            os.truncate(data, self.arg)
        elif self.kind == "delete":
            data.unlink()
        elif self.kind == "flip":
            with data.open("r+b") as handle:
                handle.seek(self.arg)
                byte = handle.read(1)
                handle.seek(self.arg)
                handle.write(bytes([byte[0] ^ (self.arg2 or 0xFF)]))
        elif self.kind == "scribble":  # random bytes over part of a page
            rng = random.Random(self.arg)
            with data.open("r+b") as handle:
                handle.seek(self.arg)
                handle.write(rng.randbytes(self.arg2))
        elif self.kind == "zero":
            with data.open("r+b") as handle:
                handle.seek(self.arg * page)
                handle.write(bytes(page))
        elif self.kind == "garbage":
            target = folder / self.label.split(":", 1)[1]
            rng = random.Random(self.arg)
            target.write_bytes(rng.randbytes(self.arg2))
        else:
            raise ValueError(f"unknown damage {self.kind}")


def cases(data_size: int, page: int, quick: bool, seed: int) -> list[Case]:
    """Every damage case for a sample of ``data_size`` bytes (a seeded subset if quick)."""
    rng = random.Random(seed)
    pages = data_size // page
    truncations = [Case("truncate", n * page) for n in range(pages)]
    truncations += [Case("truncate", n * page + page // 2) for n in range(0, pages, 7)]
    truncations.append(Case("truncate", data_size - 1))
    flips = [
        Case("flip", rng.randrange(data_size), rng.choice([0xFF, 0x01, 0x80, 0x10]))
        for _ in range(pages * 4)
    ]
    zeros = [Case("zero", n) for n in range(pages)]
    scribbles = [
        Case("scribble", rng.randrange(data_size - 512), rng.choice([8, 64, 512]))
        for _ in range(pages * 2)
    ]
    lost = [Case("delete", label="delete:data.mdb"), Case("truncate", 0, label="empty:data.mdb")]
    garbage = [
        Case("garbage", 1, 64, "garbage:writer.lock"),
        Case("garbage", 2, 1 << 20, "garbage:writer.lock"),
        Case("garbage", 3, 8192, "garbage:lock.mdb"),
        Case("garbage", 4, 10, "garbage:lock.mdb"),
        Case("garbage", 5, 0, "garbage:lock.mdb"),
        Case("garbage", 6, 100, "garbage:retinue.json"),
    ]
    if quick:
        truncations = [truncations[0], *rng.sample(truncations[1:], min(8, len(truncations) - 1))]
        flips = rng.sample(flips, min(10, len(flips)))
        zeros = rng.sample(zeros, min(8, len(zeros)))
        scribbles = rng.sample(scribbles, min(6, len(scribbles)))
    return lost + garbage + truncations + zeros + flips + scribbles


def in_use_cases(data_size: int, page: int, quick: bool, seed: int) -> list[Case]:
    """Damage applied under an open runtime: truncation at every page boundary, zeroed pages."""
    rng = random.Random(seed + 1)
    pages = data_size // page
    truncations = [
        Case("truncate", n * page, label=f"in_use:truncate:{n * page}") for n in range(pages)
    ]
    zeros = [Case("zero", n, label=f"in_use:zero:{n}") for n in range(2, pages)]
    if quick:
        truncations = rng.sample(truncations, min(4, len(truncations)))
        zeros = rng.sample(zeros, min(4, len(zeros)))
    return truncations + zeros
