"""Crash recovery and durability tests, with helpers shared by the modules here.

Everything runs against real LMDB stores in ``tmp_path`` and real pykka
actors. Records are hand-written exactly as the supervisor writes them
(msgpack-encoded ``retinue.protocol.records`` structs under their keys), and
crashes are real: a child process runs a runtime and is killed with SIGKILL.
Children are synchronised through the lines they print, never through sleeps.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from retinue import Turn
from retinue.persistence.migrations import indexed
from retinue.persistence.store import Store, Write
from retinue.protocol import paths
from retinue.protocol.messages import AgentState, Completion, CompletionStatus, Message
from retinue.protocol.records import (
    AgentRecord,
    CompletionRecord,
    MessageRecord,
    completion_key,
    message_key,
)

REPO = Path(__file__).resolve().parents[2]
CHILD_ENV = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
# Generous bound for "this should happen promptly"; never a timing assertion.
PROMPT_S = 20.0

encode = msgspec.msgpack.encode


# -- hand-written records ------------------------------------------------------


def agent(
    agent_id: str,
    path: str,
    parent_id: str | None = None,
    *,
    state: AgentState | str = AgentState.COMPLETED,
    generation: int = 1,
    task: str = "stored task",
    profile: str = "worker",
    created_at: float = 1000.0,
    **extra: Any,
) -> AgentRecord:
    """Return an agent record consistent with ``path`` (unless ``extra`` says otherwise)."""
    fields: dict[str, Any] = {
        "id": agent_id,
        "name": paths.name_of(path),
        "path": path,
        "profile": profile,
        "parent_id": parent_id,
        "parent_path": paths.parent_of(path),
        "depth": paths.depth(path),
        "state": AgentState(state),
        "generation": generation,
        "task": task,
        "output": "out" if state == AgentState.COMPLETED else None,
        "created_at": created_at,
        "updated_at": created_at,
    }
    fields.update(extra)
    return AgentRecord(**fields)


def agent_write(record: AgentRecord) -> Write:
    """The store write of an agent record (keyed by its id)."""
    return ("agents", record.id.encode(), encode(record))


def message(
    recipient: AgentRecord | tuple[str, str],
    seq: int,
    content: str,
    *,
    read: bool = False,
    sender: AgentRecord | None = None,
) -> MessageRecord:
    """Return a mailbox record for ``recipient`` (a record, or an ``(id, path)`` pair)."""
    rid, rpath = (recipient.id, recipient.path) if isinstance(recipient, AgentRecord) else recipient
    msg = Message(
        id=f"{rid}:{seq}",
        kind="message",
        sender=paths.ROOT if sender is None else sender.path,
        sender_id="" if sender is None else sender.id,
        recipient=rpath,
        recipient_id=rid,
        content=content,
        created_at=1000.0 + seq,
    )
    return MessageRecord(message=msg, seq=seq, read=read, read_at=1001.0 + seq if read else None)


def message_write(record: MessageRecord) -> Write:
    """The store write of a mailbox record."""
    key = message_key(record.message.recipient_id, record.seq)
    return ("messages", key, encode(record))


def completion(
    of: AgentRecord | tuple[str, str],
    generation: int,
    seq: int,
    *,
    status: CompletionStatus | str = CompletionStatus.COMPLETED,
    recipient_id: str | None = None,
    delivered: bool = False,
    output: str | None = "out",
    created_at: float = 1000.0,
) -> CompletionRecord:
    """Return a completion record of ``of`` (a record, or an ``(id, path)`` pair)."""
    aid, apath = (of.id, of.path) if isinstance(of, AgentRecord) else of
    done = Completion(
        id=f"{aid}:{generation}",
        agent_id=aid,
        path=apath,
        generation=generation,
        status=CompletionStatus(status),
        output=output,
        created_at=created_at,
    )
    return CompletionRecord(
        completion=done, recipient_id=recipient_id, seq=seq, delivered=delivered
    )


def completion_write(record: CompletionRecord) -> Write:
    """The store write of a completion record."""
    done = record.completion
    return ("completions", completion_key(done.agent_id, done.generation), encode(record))


def with_index(writes: Sequence[Write]) -> list[Write]:
    """``writes`` with the ``undelivered`` index kept in step, as the supervisor keeps it."""
    out: list[Write] = []
    for database, key, value in writes:
        out.append((database, key, value))
        if database == "completions":
            out.append(("undelivered", key, b"" if value is not None and indexed(value) else None))
    return out


def write_store(folder: Path, writes: Sequence[Write]) -> None:
    """Commit ``writes`` (their index kept in step) into the store at ``folder`` (created
    if needed) and close it."""
    store = Store(folder)
    try:
        store.write_now(with_index(writes))
    finally:
        store.close()


def read_db(folder: Path, database: str) -> dict[bytes, bytes]:
    """Return every raw record of one database of a closed store (read-only)."""
    store = Store(folder, readonly=True)
    try:
        return dict(store.snapshot([database]).records[database])
    finally:
        store.close()


def decode_db(folder: Path, database: str, kind: type[Any]) -> dict[bytes, Any]:
    """Return every record of one database, decoded as ``kind``."""
    decoder = msgspec.msgpack.Decoder(kind)
    return {k: decoder.decode(v) for k, v in read_db(folder, database).items()}


def completions_of(folder: Path, agent_id: str) -> list[CompletionRecord]:
    """Return the stored completion records of one agent, by generation."""
    records = decode_db(folder, "completions", CompletionRecord).values()
    mine = [r for r in records if r.completion.agent_id == agent_id]
    return sorted(mine, key=lambda r: r.completion.generation)


# -- runners --------------------------------------------------------------------


@dataclass
class Seen:
    """What a runner saw of one turn."""

    agent_id: str
    generation: int
    task: str
    reason: str
    messages: list[Message]


@dataclass
class Recorder:
    """A runner that records every turn and settles it at once with ``done:<task>``."""

    turns: list[Seen] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def __call__(self, turn: Turn) -> str:
        """Record the turn; return ``done:<task>``."""
        seen = Seen(turn.agent.id, turn.agent.generation, turn.task, turn.reason, turn.messages)
        with self._cond:
            self.turns.append(seen)
            self._cond.notify_all()
        return f"done:{turn.task}"

    def count(self) -> int:
        """Return how many turns entered the runner."""
        with self._cond:
            return len(self.turns)

    def of(self, agent_id: str) -> list[Seen]:
        """Return the turns of one agent, in start order."""
        with self._cond:
            return [t for t in self.turns if t.agent_id == agent_id]


# -- child processes ---------------------------------------------------------------


class Child:
    """A ``python -c`` child process whose output lines the test can wait for.

    stdout and stderr are merged and read by a thread; :meth:`expect` returns
    the next line starting with a prefix. Use it as a context manager: the
    child is SIGKILLed on exit whatever happened.
    """

    def __init__(self, script: str, *args: str | os.PathLike[str]) -> None:
        """Start ``script`` with ``args`` as ``sys.argv[1:]``."""
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=REPO,
            env=CHILD_ENV,
        )
        self.pid = self.proc.pid
        self.lines: list[str] = []
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            self._queue.put(line)
        self._queue.put(None)

    def expect(self, prefix: str, timeout: float = PROMPT_S) -> list[str]:
        """Return the words after ``prefix`` of the next line starting with it.

        Raises:
            AssertionError: the child exited or stayed silent for ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(self._story(f"no {prefix!r} line in {timeout:g}s")) from None
            if line is None:
                self._queue.put(None)
                raise AssertionError(self._story(f"child exited before {prefix!r}"))
            if line.startswith(prefix):
                return line[len(prefix) :].split()

    def _story(self, what: str) -> str:
        return f"{what}; child output:\n" + "\n".join(self.lines[-40:])

    def kill(self) -> None:
        """SIGKILL the child and reap it (idempotent)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=PROMPT_S)
        self._reader.join(timeout=PROMPT_S)
        if self.proc.stdout is not None:  # the reader has seen its end: close our end
            self.proc.stdout.close()

    def finish(self, timeout: float = PROMPT_S) -> int:
        """Wait for the child to exit on its own; return its exit code."""
        return self.proc.wait(timeout=timeout)

    def __enter__(self) -> Child:
        """Return the child."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Kill the child."""
        self.kill()


class Trees:
    """The trees the writer's opens built (``_boot.load_tree`` patched to keep them)."""

    def __init__(self, monkeypatch: Any) -> None:
        """Patch the boot's ``load_tree`` through ``monkeypatch`` (pytest's fixture)."""
        from retinue.actors.system import _boot  # the patch's target, imported when used
        from retinue.actors.tree import load_tree

        self.built: list[Any] = []
        load = load_tree

        def loading(snapshot: Any, cap: int | None, stored: Any = None, **options: Any) -> Any:
            tree, restored = load(snapshot, cap, stored, **options)
            self.built.append(tree)
            return tree, restored

        monkeypatch.setattr(_boot, "load_tree", loading)
