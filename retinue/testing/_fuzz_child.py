"""The child process of a fuzzing run: runs operations until the crash it is killed at.

``python -m retinue.testing._fuzz_child SPEC`` reads the JSON spec
:func:`~retinue.testing._fuzz_run.run_case` wrote (the setup, the segment's
operations, the store, the workspace, the acknowledgement log), installs the
chaos model, opens the runtime and runs the operations, appending one JSON
line per step to the log *after* it returned: ``{"outcome": ...}`` with what
the host's waits received, ``{"broken": ...}`` for an untyped error, a hung
call or an event that does not encode (:class:`~retinue.testing._fuzz_checks.EventCheck`),
``{"crash_point": n}`` when it reaches the crash. Then it waits to be
killed. The parent reads the log, so a completion logged was received; one
received but not yet logged when the kill came is the crash's to lose.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from retinue.llm.model import load_litellm
from retinue.protocol.messages import Completion
from retinue.testing._fuzz_checks import EventCheck
from retinue.testing._fuzz_ops import Op
from retinue.testing._fuzz_run import Setup, host_op, open_runtime, reopened

__all__ = ["main"]


def main(spec_path: str) -> None:
    """Run the segment of ``spec_path`` and wait for the kill (see the module docstring)."""
    spec: dict[str, Any] = json.loads(Path(spec_path).read_text())
    setup = msgspec.convert(spec["setup"], Setup)
    ops = [msgspec.convert(raw, Op) for raw in spec["ops"]]
    log = open(spec["acks"], "a", buffering=1)  # noqa: SIM115 - lives until the kill

    def ack(**entry: Any) -> None:
        log.write(json.dumps(entry) + "\n")

    load_litellm()  # before the runtime opens: the kill should not land in litellm's import
    setup.chaos().install()
    rt = open_runtime(setup, Path(spec["store"]), Path(spec["workspace"]))
    events = EventCheck()
    events.watch(rt)
    ack(opened=True)
    for number, op in enumerate(ops, spec["first"]):
        if op.kind == "crash":
            ack(crash_point=number)
            time.sleep(3600)
            return
        ledger: list[Completion] = []
        if op.kind == "reopen":
            again, broken = reopened(rt, setup, Path(spec["store"]), Path(spec["workspace"]))
            outcome = "shutdown hung" if again is None else "reopened"
            if again is not None:
                events.watch(again)
            rt = again or rt
        else:
            outcome, broken = host_op(rt, op, number, ledger, setup.label)
        for found in broken + events.take():
            ack(broken={"invariant": found.invariant, "path": found.path, "detail": found.detail})
        ack(outcome=outcome, received=[msgspec.to_builtins(c) for c in ledger])
        if outcome in ("hung", "shutdown hung"):
            time.sleep(3600)
    rt.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
