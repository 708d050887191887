"""A cassette: a versioned, append-only file of a run's model calls and host tool results.

The file is JSON lines encoded by msgspec: a header (``{"format":
"retinue-cassette", "version": 1, "redact": [...]}``), then one entry per answered call,
appended as it is answered:

- a model call (``kind: "model"``): the agent's path, its call index (the
  assistant messages of the chat it was made in: 0 for the agent's first), the request's
  key (:func:`~retinue.llm.cassette._requests.request_key`), the canonical
  request, the assistant message the turn kept, and its usage;
- a host tool call (``kind: "tool"``): the agent's path, its host-tool call
  index (the host tool calls its chat asked for before it), the key of the
  tool's name and arguments, the result and the error.

Modes: ``record`` appends every answered call (creating the file; an existing
cassette of this version is added to); ``replay`` answers every call from the
file by its key and never calls the model: a request that matches no entry
raises :class:`~retinue.errors.CassetteMiss` naming the agent, the index and
the first differing field; ``auto`` replays what matches and records the
rest. Host tools are answered from the cassette in ``replay`` (and, for what
it holds, ``auto``) unless ``replay_tools=False``: then they run.

An index counts what the agent's stored chat already holds, so concurrent
calls of sibling agents match whatever order they arrive in, and a run
resumed in another process (after a crash) keys its calls as one that never
stopped. A fuzzer's perturbations are in :mod:`retinue.llm.cassette._perturb`. A last line cut short
by a crash while recording is ignored; any other damage is a
:class:`~retinue.errors.CassetteError`. Thread-safe: appends to one file are
serialised across every cassette of the process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from retinue.errors import CassetteError, CassetteMiss, ConfigurationError
from retinue.llm.cassette._file import Entry, ModelEntry, ToolEntry, append, read_cassette
from retinue.llm.cassette._perturb import check_perturb, fault_model, raised, tool_key
from retinue.llm.cassette._requests import (
    Redactor,
    around,
    canonical_request,
    first_difference,
    request_key,
    value_at,
)
from retinue.protocol.checks import preview
from retinue.protocol.messages import Usage

__all__ = ["MODES", "Cassette"]

MODES = ("record", "replay", "auto")
Mode = Literal["record", "replay", "auto"]


class Cassette:
    """The cassette at ``path`` in ``mode``, as one runner uses it (see the module docstring).

    Raises:
        ConfigurationError: an unknown mode, or a bad ``redact`` pattern.
        CassetteError: ``replay`` of a file that does not exist.
    """

    def __init__(
        self,
        path: str | Path,
        mode: str = "replay",
        *,
        redact: Sequence[str] = (),
        secrets: Sequence[str | None] = (),
        replay_tools: bool = True,
        off_script: str | None = None,
        perturb: Mapping[str, str] | None = None,
        crash: Callable[[str], None] | None = None,
    ) -> None:
        """Check the settings; the file is read (or created) at the first call.

        ``off_script`` (replay only; a fuzzer's) is a model that answers, live and
        unrecorded, what the cassette does not hold, instead of a ``CassetteMiss``;
        ``perturb`` maps ``"<agent path>#<call index>"`` to ``"chaos"`` (answered
        off script), ``"repeat"`` (answered with that agent's last recorded
        tool calls again, as a model that repeats itself), a provider's fault or
        ``"crash"``, and ``"<agent path>#tool<index>"`` to ``"raise"`` or ``"crash"``
        (:mod:`~retinue.llm.cassette._perturb`); ``crash(key)`` is called where a
        crash perturbation lands (a fuzzer's: it kills the process).
        """
        if mode not in MODES:
            raise ConfigurationError(
                f"cassette mode must be one of {', '.join(MODES)}, not {mode!r}"
            )
        if isinstance(redact, str):
            redact = [redact]
        self.path = Path(path).expanduser().resolve()
        self.mode: Mode = mode  # type: ignore[assignment]
        self.redact = list(redact)
        self.redactor = Redactor(redact, secrets)
        self.secrets = list(secrets)
        self.replay_tools = bool(replay_tools)
        if off_script is not None and mode != "replay":
            raise ConfigurationError("a cassette's off_script model is for mode='replay' only")
        self.off_script = off_script
        self.perturb = dict(perturb or {})
        check_perturb(self.perturb, crash)
        self.crash = crash
        if mode == "replay" and not self.path.is_file():
            raise CassetteError(
                f"no cassette at {self.path} to replay; record one first (mode='record', "
                "retinue run --record)",
                path=str(self.path),
            )
        self._lock = threading.Lock()
        self._loaded = False
        self._models: dict[tuple[str, int], list[ModelEntry]] = {}
        self._tools: dict[tuple[str, int], list[ToolEntry]] = {}
        self._answered: dict[str, int] = {}  # agent path -> its model calls answered
        self._tool_calls: dict[str, int] = {}  # agent path -> its host tool calls started

    def __repr__(self) -> str:
        """The file and the mode."""
        return f"Cassette({str(self.path)!r}, mode={self.mode!r})"

    # -- model calls -------------------------------------------------------------------

    def request(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        kwargs: Mapping[str, Any],
    ) -> dict[str, Any]:
        """The canonical, scrubbed request of one model call (scrubbed with the cassette's
        own ``redact`` patterns too, when replaying).

        Raises:
            CassetteError: the file is damaged or of a newer version.
        """
        if self.mode != "record":
            self._load()
        return canonical_request(model, messages, tools, kwargs, self.redactor)

    def next_model_index(self, agent: str) -> int:
        """The calls of ``agent`` this cassette answered in this process (a runner keys its
        calls by :func:`~retinue.llm.cassette.model_call_index` instead: durable)."""
        with self._lock:
            return self._answered.get(agent, 0)

    def model_answer(
        self, agent: str, index: int, request: dict[str, Any]
    ) -> tuple[dict[str, Any], Usage] | None:
        """The recorded answer and usage of ``request`` (None: record it, live).

        Raises:
            CassetteMiss: replaying, and no entry of ``agent``'s call ``index`` has this key.
            CassetteError: the file is damaged or of a newer version.
        """
        if self.mode == "record":
            return None
        self._load()
        key = request_key(request)
        with self._lock:
            entries = self._models.get((agent, index), [])
        how = self.perturb.get(f"{agent}#{index}")
        if how == "crash" and self.crash is not None:
            self.crash(f"{agent}#{index}")  # the fuzzer's process dies here
            how = None
        if how == "repeat":
            repeated = self._repeat(agent, index)
            if repeated is not None:
                self._count(agent, index)
                return repeated
        for entry in reversed(entries if how is None else []):
            if entry.key == key:
                self._count(agent, index)
                return _copy(entry.answer), entry.usage
        if self.mode == "auto":
            return None
        if self.off_script is not None or fault_model(how) is not None:
            self._count(agent, index)
            return None
        raise self._miss(agent, index, request, entries)

    def off_script_model(self, agent: str, index: int) -> str | None:
        """The model that answers ``agent``'s call ``index`` when the cassette does not: a
        fault perturbation's ``retinue/fault_<kind>``, else ``off_script``."""
        return fault_model(self.perturb.get(f"{agent}#{index}")) or self.off_script

    def _repeat(self, agent: str, index: int) -> tuple[dict[str, Any], Usage] | None:
        """``agent``'s last recorded answer before call ``index`` that called tools, its
        calls renamed (None: it had none)."""
        with self._lock:
            for earlier in range(index - 1, -1, -1):
                for entry in reversed(self._models.get((agent, earlier), [])):
                    if entry.answer.get("tool_calls"):
                        answer = _copy(entry.answer)
                        for call in answer["tool_calls"]:
                            call["id"] = f"{call.get('id', 'call')}_again{index}"
                        return answer, entry.usage
        return None

    def record_model(
        self,
        agent: str,
        index: int,
        request: dict[str, Any],
        answer: Mapping[str, Any],
        usage: Usage,
    ) -> None:
        """Append a live call's answer (scrubbed) as ``agent``'s call ``index`` (an off-script
        answer is not recorded).

        Raises:
            CassetteError: the file cannot be written.
        """
        self._count(agent, index)
        if self.mode == "replay":
            return
        entry = ModelEntry(
            agent=agent,
            index=index,
            key=request_key(request),
            request=request,
            answer=self.redactor.value(dict(answer)),
            usage=usage,
        )
        self._append(entry)
        with self._lock:
            self._models.setdefault((agent, index), []).append(entry)

    def _count(self, agent: str, index: int) -> None:
        with self._lock:
            self._answered[agent] = max(self._answered.get(agent, 0), index + 1)

    def _miss(
        self, agent: str, index: int, request: dict[str, Any], entries: list[ModelEntry]
    ) -> CassetteMiss:
        where = f"{agent}'s model call {index}"
        if not entries:
            return CassetteMiss(
                f"{self.path} holds no {where} (it recorded {self._recorded(agent)} calls of "
                f"{agent}); the run went further than the recording: record it again",
                agent=agent,
                index=index,
                field=None,
                path=str(self.path),
            )
        recorded = entries[-1].request
        field = first_difference(recorded, request) or "request"
        was, now = around(value_at(recorded, field), value_at(request, field))
        return CassetteMiss(
            f"{where} differs from the one recorded in {self.path} at {field}: recorded "
            f"{preview(was, 120)}, now {preview(now, 120)}; record it again "
            "(mode='record') or undo the change",
            agent=agent,
            index=index,
            field=field,
            path=str(self.path),
        )

    def _recorded(self, agent: str) -> int:
        with self._lock:
            return len({i for a, i in self._models if a == agent})

    # -- host tools --------------------------------------------------------------------

    def next_tool_index(self, agent: str) -> int:
        """Take the index of ``agent``'s next host tool call in this process (a runner keys
        its calls by the chat's count instead: ``retinue.llm.turn._taped.host_call_index``)."""
        with self._lock:
            index = self._tool_calls.get(agent, 0)
            self._tool_calls[agent] = index + 1
            return index

    def tool_answer(
        self, agent: str, index: int, tool: str, arguments: str
    ) -> tuple[str, str | None] | None:
        """The recorded result and error of a host tool call (None: run it).

        Raises:
            CassetteMiss: replaying tools, and the call was not recorded with these arguments.
        """
        if self.perturb.get(tool_key(agent, index)) == "raise":
            return raised(tool)
        if self.mode == "record" or not self.replay_tools:
            return None
        self._load()
        key = _tool_key(tool, self.redactor.text(arguments))
        with self._lock:
            entries = self._tools.get((agent, index), [])
        for entry in reversed(entries):
            if entry.key == key:
                return entry.result, entry.error
        if self.mode == "auto":
            return None
        field = None if not entries else ("tool" if entries[-1].tool != tool else "arguments")
        raise CassetteMiss(
            f"{self.path} holds no host tool call {index} of {agent} as "
            f"{tool}({preview(arguments, 80)})"
            + ("" if field is None else f": the recorded one differs in its {field}")
            + "; record the run again, or replay with replay_tools=False to run the tools",
            agent=agent,
            index=index,
            field=field,
            path=str(self.path),
        )

    def record_tool(
        self, agent: str, index: int, tool: str, arguments: str, result: str, error: str | None
    ) -> None:
        """Append a host tool call's result (scrubbed); a crash perturbed there lands first."""
        if self.crash is not None and self.perturb.get(tool_key(agent, index)) == "crash":
            self.crash(tool_key(agent, index))  # the tool ran; its record is lost
        if self.mode == "replay":
            return
        scrubbed = self.redactor.text(arguments)
        entry = ToolEntry(
            agent=agent,
            index=index,
            key=_tool_key(tool, scrubbed),
            tool=tool,
            arguments=scrubbed,
            result=self.redactor.text(result),
            error=None if error is None else self.redactor.text(error),
        )
        self._append(entry)
        with self._lock:
            self._tools.setdefault((agent, index), []).append(entry)

    # -- the file ------------------------------------------------------------------------

    def entries(self) -> list[Entry]:
        """Every entry of the file, in order.

        Raises:
            CassetteError: the file is missing, damaged or of a newer version.
        """
        return read_cassette(self.path)[1]

    def _load(self) -> None:
        """Read the file's entries once (a missing file in ``auto``: none yet); scrub with
        the patterns it was recorded with from then on.

        Raises:
            CassetteError: the file is damaged or of a newer version.
        """
        with self._lock:
            if self._loaded:
                return
            if self.mode == "auto" and not self.path.exists():
                self._loaded = True
                return
            header, entries = read_cassette(self.path)
            self._loaded = True
            extra = [p for p in header.redact if p not in self.redact]
            if extra:
                self.redact += extra
                self.redactor = Redactor(self.redact, self.secrets)
            for entry in entries:
                if isinstance(entry, ModelEntry):
                    self._models.setdefault((entry.agent, entry.index), []).append(entry)
                else:
                    self._tools.setdefault((entry.agent, entry.index), []).append(entry)

    def _append(self, entry: Entry) -> None:
        """Append one entry (the header first, to a new or empty file).

        Raises:
            CassetteError: the file cannot be written, is not a cassette of this
                version, or was recorded with other ``redact`` patterns.
        """
        append(self.path, entry, self.redact)


def _copy(answer: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a recorded answer (the turn may change the one it keeps)."""
    copied: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(answer))
    return copied


def _tool_key(tool: str, arguments: str) -> str:
    return request_key({"tool": tool, "arguments": arguments})
