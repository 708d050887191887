"""The service soak's ledger: what each life of the host was told, written after each call returned.

Every life of the host (one child process, killed with SIGKILL or stopped at
the end) appends JSON lines to ``ledger-<life>.jsonl`` in the run's folder,
line-buffered, so a line is in the file once ``write`` returned (a SIGKILL
loses the process, not the kernel's copy):

- ``intent``: a tree is about to be spawned (``key``, lead ``profile``);
- ``spawn``: the spawn returned (``key``, agent ``id``; ``retry`` on the spawn
  a later life repeats with the same idempotency key);
- ``got``: a host wait returned a completion (``key``, ``id``, ``gen``, the
  completion's ``cid`` and ``status``);
- ``closed``: ``close_tree`` returned (``key``, the closed agents' ``ids``),
  or, for a tree a kill left open, refused it as closed already (``found_closed``);
- ``gone`` / ``error``: a recovered tree's agent was not there / a call failed;
- ``stalled``: a tree still open when the host stopped, past the grace period;
- ``opened``: the life opened the store (``open_s``).

:func:`read_trees` folds every life's lines into one :class:`TreeState` per
key, for the parent's checks and, through :func:`note_open_trees`, the next
life's recovery.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = [
    "LedgerWriter",
    "TreeState",
    "note_open_trees",
    "open_trees",
    "read_entries",
    "read_trees",
]


class LedgerWriter:
    """Appends one life's lines to its ledger file (line-buffered)."""

    def __init__(self, folder: Path, life: int) -> None:
        """Open ``folder/ledger-<life>.jsonl`` for appending."""
        self._file: IO[str] = (folder / f"ledger-{life}.jsonl").open("a", buffering=1)

    def write(self, op: str, **fields: Any) -> None:
        """Append one line (``op`` and ``fields``); it is in the file when this returns."""
        self._file.write(json.dumps({"op": op, **fields}) + "\n")

    def close(self) -> None:
        """Close the file."""
        self._file.close()


@dataclass
class TreeState:
    """One tree as the ledgers tell it: its lead, the completions received, whether closed."""

    key: str
    profile: str = ""
    agent_id: str | None = None
    cids: list[str] = field(default_factory=list)
    generations: list[int] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    recovered: bool = False
    """A later life than the one that began it finished it (a kill came between)."""
    failed_unkilled: int = 0
    """Completions ``failed`` that a life received in its own run of the tree (no kill between)."""
    closed: bool = False
    closed_ids: list[str] = field(default_factory=list)
    gone: bool = False
    spawns: int = 0
    repeated: int = 0
    """Spawns repeated with the tree's key by a later life."""
    life: int = 0


def read_entries(folder: Path, life: int | None = None) -> list[tuple[int, dict[str, Any]]]:
    """Return the ledger lines of ``folder`` (of one ``life``, or all) as ``(life, entry)``.

    Life by life, in order. A last line cut short by a kill is skipped (the
    call it would acknowledge counts as not acknowledged).
    """
    entries: list[tuple[int, dict[str, Any]]] = []
    files = sorted(folder.glob("ledger-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
    for path in files:
        at = int(path.stem.split("-")[1])
        if life is not None and at != life:
            continue
        for line in path.read_text().splitlines():
            try:
                entries.append((at, json.loads(line)))
            except ValueError:
                continue
    return entries


def read_trees(folder: Path) -> dict[str, TreeState]:
    """Fold the ledgers of ``folder`` into one :class:`TreeState` per tree key."""
    trees: dict[str, TreeState] = {}
    for life, entry in read_entries(folder):
        key = entry.get("key")
        if not isinstance(key, str):
            continue
        tree = trees.setdefault(key, TreeState(key, life=life))
        op = entry["op"]
        tree.recovered = tree.recovered or life > tree.life
        if op == "intent":
            tree.profile = entry["profile"]
        elif op == "spawn":
            tree.agent_id = entry["id"]
            tree.spawns += 1
            tree.repeated += bool(entry.get("retry"))
        elif op == "got":
            tree.cids.append(entry["cid"])
            tree.generations.append(entry["gen"])
            tree.statuses.append(entry["status"])
            tree.failed_unkilled += entry["status"] == "failed" and not entry.get("recovered")
        elif op == "closed":
            tree.closed = True
            tree.closed_ids = list(entry["ids"])
        elif op == "gone":
            tree.closed = tree.gone = True
    return trees


def note_open_trees(folder: Path, life: int) -> int:
    """Write the trees the lives before ``life`` left open to ``open-<life>.json``; count them."""
    left = [asdict(tree) for tree in read_trees(folder).values() if not tree.closed]
    (folder / f"open-{life}.json").write_text(json.dumps(left))
    return len(left)


def open_trees(folder: Path, life: int) -> list[TreeState]:
    """The trees :func:`note_open_trees` wrote for ``life`` (none for the first life)."""
    path = folder / f"open-{life}.json"
    if not path.exists():
        return []
    return [TreeState(**fields) for fields in json.loads(path.read_text())]
