"""A fuzzer's perturbations of a replayed cassette: what each does, and their checks.

A perturbation is keyed by a call of the recording: ``"<agent path>#<index>"``
for a model call, ``"<agent path>#tool<index>"`` for a host tool call (the
indices of :mod:`retinue.llm.cassette._cassette`, durable across processes).

- A model call: ``"chaos"`` answers it on the off-script model; ``"repeat"``
  with the agent's last recorded tool calls again; a fault of
  :data:`MODEL_FAULTS` makes it on the offline model ``retinue/fault_<kind>``
  (:func:`fault_model`), which the fuzzer serves: its first attempt fails as a
  provider does (a 429 with ``Retry-After``, a 5xx, a timeout) or answers a
  malformed tool call, a retry is answered off script; ``"crash"`` calls the
  cassette's crash hook before the call is answered (the fuzzer SIGKILLs its
  process there).
- A host tool call: ``"raise"`` answers it as a tool that raised
  (:func:`raised`), without running it; ``"crash"`` calls the crash hook after
  the tool ran and before its result is recorded (an effect done, its record lost).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from retinue.errors import ConfigurationError

__all__ = [
    "FAULT_PREFIX",
    "INJECTED",
    "MODEL_FAULTS",
    "MODEL_PERTURBATIONS",
    "TOOL_PERTURBATIONS",
    "check_perturb",
    "fault_model",
    "is_tool_key",
    "raised",
    "tool_key",
]

MODEL_FAULTS = ("rate_limited", "server_error", "timeout", "malformed_json")
"""Faults of a model call, as a provider fails (the chaos model's kinds of the same names)."""
MODEL_PERTURBATIONS = ("chaos", "repeat", *MODEL_FAULTS, "crash")
"""What a model call's perturbation may be."""
TOOL_PERTURBATIONS = ("raise", "crash")
"""What a host tool call's perturbation may be."""
FAULT_PREFIX = "retinue/fault_"
"""A fault perturbation's call is made on ``retinue/fault_<kind>``."""
INJECTED = "HostToolFault: injected by retinue fuzz"
"""The error of a host tool call a ``"raise"`` perturbation answered."""


def tool_key(agent: str, index: int) -> str:
    """The perturbation key of ``agent``'s host tool call ``index``."""
    return f"{agent}#tool{index}"


def is_tool_key(key: str) -> bool:
    """Whether ``key`` names a host tool call (else a model call)."""
    return key.rpartition("#")[2].startswith("tool")


def check_perturb(perturb: Mapping[str, str], crash: object) -> None:
    """Check every perturbation fits its call's kind, and that crashes have a hook.

    Raises:
        ConfigurationError: an unknown perturbation, or ``"crash"`` with no crash hook.
    """
    for key, how in sorted(perturb.items()):
        allowed = TOOL_PERTURBATIONS if is_tool_key(key) else MODEL_PERTURBATIONS
        if how not in allowed:
            raise ConfigurationError(
                f"the perturbation of {key} is one of {', '.join(allowed)}, not {how!r}"
            )
        if how == "crash" and crash is None:
            raise ConfigurationError(
                f"the perturbation of {key} is a crash, and the cassette has no crash hook"
            )


def fault_model(how: str | None) -> str | None:
    """The offline model a model call perturbed with ``how`` is made on (None: not a fault)."""
    return f"{FAULT_PREFIX}{how}" if how in MODEL_FAULTS else None


def raised(tool: str) -> tuple[str, str]:
    """The ``(result, error)`` of a host tool call a ``"raise"`` perturbation answers."""
    message = f"{tool} failed: {INJECTED}"
    return json.dumps({"error": message}), message
