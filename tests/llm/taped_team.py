"""A worker with two host tools, for the tests of cassettes across crashes and their children.

Its runtime is built by :func:`runtime` (``factory(tape, **args)``, as
``retinue.testing._fuzz_crash`` calls it in each child process): ``lookup``
reads, ``deploy`` is ``unsafe`` and counts its runs in a file outside the
store (``counter``), so a test sees an effect that ran twice. With
``lookup_once`` the lookup is declared ``read`` but is not: it fails when it
runs a second time (a bug only a crash inside it finds: the call in doubt is
run again). :func:`script`
answers the stub: lookup alpha, then deploy prod, then a final answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from retinue import Profile
from retinue.llm import LiteLLMRunner, tool
from retinue.llm.cassette import Cassette
from retinue.testing import StubReply, StubRequest

TASK = "look alpha up, then deploy prod"
DONE = "deployed after the lookup"


def _call(name: str, arguments: dict[str, str], call_id: str) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def script(request: StubRequest) -> StubReply:
    """The stub's answers: lookup, deploy, done (by the tool results so far)."""
    done = sum(1 for m in request.messages if m["role"] == "tool")
    if done == 0:
        return StubReply(message=_call("lookup", {"word": "alpha"}, "call_lookup"))
    if done == 1:
        return StubReply(message=_call("deploy", {"target": "prod"}, "call_deploy"))
    return StubReply(message={"role": "assistant", "content": DONE})


def runs(counter: str | Path) -> int:
    """How many times ``deploy`` ran (the lines of its counter file)."""
    path = Path(counter)
    return len(path.read_text().splitlines()) if path.exists() else 0


def profiles(
    tape: Cassette | Path,
    *,
    counter: str,
    approve: bool = False,
    mode: str = "replay",
    lookup_once: bool = False,
    **kw: Any,
) -> list[Profile]:
    """The worker with its runner on ``tape`` (``kw``: the runner's, e.g. the stub's url)."""

    @tool(effect="read")
    def lookup(word: str) -> str:
        """Look a word up."""
        if lookup_once:
            if runs(f"{counter}.lookups"):
                raise RuntimeError("the lookup table was already consumed")
            with Path(f"{counter}.lookups").open("a") as file:
                file.write(f"{word}\n")
        return f"{word}: found"

    @tool(effect="unsafe")
    def deploy(target: str) -> str:
        """Deploy ``target`` (counted outside the store)."""
        with Path(counter).open("a") as file:
            file.write(f"{target}\n")
        return f"deployed {target}"

    kw.setdefault("api_base", "http://127.0.0.1:9")  # a replay never calls it
    runner = LiteLLMRunner(
        "openai/stub-model",
        api_key="x",
        host_tools={"lookup": lookup, "deploy": deploy},
        cassette=tape,
        mode=mode,
        **kw,
    )
    approvals = ["deploy"] if approve else []
    return [Profile("worker", runner=runner, tools=["lookup", "deploy"], approve=approvals)]


def runtime(
    tape: Cassette, *, counter: str, approve: bool = False, lookup_once: bool = False
) -> dict[str, Any]:
    """``Runtime.open``'s arguments: the worker on ``tape``."""
    return {"profiles": profiles(tape, counter=counter, approve=approve, lookup_once=lookup_once)}
