"""Replay a recorded run in a test: ``replay(cassette, team, task)`` runs it again, offline.

The team's model agents answer every call from the cassette (recorded with
``retinue run --record`` or ``LiteLLMRunner(cassette=..., mode="record")``);
nothing reaches a provider. The run happens in a fresh store (a temporary
folder unless ``store`` is given) and :class:`Replayed` holds what it made:
the lead's completion, every agent and its transcript, and
:meth:`Replayed.outcome`, the canonical bytes of the tree (paths, states,
outputs, errors, transcripts) that a recorded run's :func:`outcome_of` must
equal, byte for byte.

Example (a pytest test)::

    def test_the_review_still_ships(tmp_path):
        run = replay("tests/cassettes/review.cassette", "team.toml", "review the change")
        assert run.completion.status == "completed"
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from retinue.errors import CassetteMiss
from retinue.llm.cassette import Cassette
from retinue.protocol.details import AgentDetail
from retinue.protocol.messages import AgentInfo, Completion
from retinue.runtime import Runtime
from retinue.team import Team, load_team

__all__ = ["Replayed", "outcome_of", "replay"]

_encode = msgspec.json.Encoder(order="sorted").encode


@dataclass(frozen=True)
class Replayed:
    """What a replayed run made: the lead's ``completion``, every agent (oldest first,
    closed ones included) in ``details`` with its whole transcript, and the store's path."""

    completion: Completion
    details: tuple[AgentDetail, ...]
    store: Path | None

    @property
    def agents(self) -> list[AgentInfo]:
        """Every agent of the run, oldest first."""
        return [d.info for d in self.details]

    def outcome(self) -> bytes:
        """The canonical bytes of the tree (see :func:`outcome_of`)."""
        return _outcome(self.details)

    def misses(self) -> list[AgentInfo]:
        """The agents whose turn failed with ``CassetteMiss``."""
        return [a for a in self.agents if a.error_type == "CassetteMiss"]


def outcome_of(rt: Runtime) -> bytes:
    """The canonical bytes of ``rt``'s tree: each agent's path, profile, state,
    generation, task, output, error, token counts and whole transcript (ids and
    times left out), by path (siblings are created in whatever order their
    parents' concurrent calls ran). A replay of a recorded run must give the same."""
    return _outcome(_details(rt))


def replay(
    cassette: str | os.PathLike[str],
    team: Team | str | os.PathLike[str],
    task: str,
    *,
    agent: str | None = None,
    name: str | None = None,
    store: str | os.PathLike[str] | None = None,
    timeout: float = 120.0,
    replay_tools: bool = True,
    strict: bool = True,
) -> Replayed:
    """Run ``team``'s lead (or ``agent``) on ``task`` with every model call answered from
    ``cassette``; return what it made once every agent has settled.

    ``name`` is the top-level agent's (default: the team's name, as ``retinue
    run`` names it); ``store`` keeps the store (default: a temporary one,
    removed); ``replay_tools=False`` runs host tools instead of answering
    them from the cassette.

    Raises:
        CassetteMiss: ``strict``, and an agent's call was not recorded (its path,
            and the first differing field in the message).
        CassetteError: the cassette is missing, damaged or of a newer version.
        TeamFileError: the team file is unusable. WaitTimeout: the run did not
            settle within ``timeout`` seconds.
    """
    Cassette(os.fspath(cassette), "replay").entries()  # missing, damaged, newer: CassetteError now
    chosen = team if isinstance(team, Team) else load_team(team)
    taped = chosen.with_runner_settings(
        cassette=os.fspath(cassette), mode="replay", replay_tools=replay_tools
    )
    folder = Path(tempfile.mkdtemp(prefix="retinue-replay-")) if store is None else Path(store)
    try:
        with Runtime.open(folder, team=taped) as rt:
            lead = rt.spawn(agent or chosen.lead, task, name=name or chosen.name)
            completion = rt.wait(lead.id, timeout=timeout)
            rt.wait_idle(timeout)
            details = _details(rt)
    finally:
        if store is None:
            shutil.rmtree(folder, ignore_errors=True)
    run = Replayed(completion, tuple(details), None if store is None else folder)
    missed = run.misses()
    if strict and missed:
        first = missed[0]
        text = str(first.error).removeprefix("CassetteMiss: ")
        raise CassetteMiss(text, agent=first.path)
    return run


def _details(rt: Runtime) -> list[AgentDetail]:
    """Every agent of ``rt`` with its whole stored transcript."""
    infos = rt.agents(include_closed=True)
    return [rt.inspect(a.id, transcript_tail=1_000_000) for a in infos]


def _outcome(details: Sequence[AgentDetail]) -> bytes:
    rows = []
    for detail in sorted(details, key=lambda d: d.info.path):
        info = detail.info
        rows.append(
            {
                "path": info.path,
                "profile": info.profile,
                "state": str(info.state),
                "generation": info.generation,
                "task": info.task,
                "output": info.output,
                "error": info.error,
                "tokens": [info.usage.prompt_tokens, info.usage.completion_tokens],
                "transcript": [msgspec.to_builtins(m) for m in detail.transcript],
            }
        )
    return _encode(rows)
