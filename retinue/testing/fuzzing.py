"""What ``retinue fuzz`` runs: the one public seam of the fuzzer's private machinery.

The machinery lives in the private ``retinue.testing._fuzz_*`` modules (the
operations a case draws, one checked run, the checks on a live runtime, the
child process a crash kills, the team on the chaos model, the cassette seeded
search with its faults and crashes). The command line (``retinue.cli.fuzz``)
uses it through the names here; a user's own tests reach the same search
through ``retinue fuzz`` or :mod:`retinue.testing`'s public names (the chaos
model, the invariant checker, :func:`~retinue.testing.replay`).
"""

from __future__ import annotations

from retinue.testing._fuzz_cassette import Finding, load_example, perturbed_run, seeded_search
from retinue.testing._fuzz_ops import OPS, Op, lines
from retinue.testing._fuzz_run import CaseResult, Setup, run_case
from retinue.testing._fuzz_team import operations

__all__ = [
    "OPS",
    "CaseResult",
    "Finding",
    "Op",
    "Setup",
    "lines",
    "load_example",
    "operations",
    "perturbed_run",
    "run_case",
    "seeded_search",
]
