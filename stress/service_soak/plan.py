"""The service soak's plan: how long, how many trees, how often to sample, compact and kill.

One :class:`Plan` is made by the parent from the command line
(:meth:`Plan.of`) and handed to each life of the host as JSON. ``--quick``:
one minute, 10 trees in flight, a sample every 5 s, one kill. Otherwise
``--minutes`` (15 by default), ``--trees`` (50), ``--sample-seconds`` (30),
``--soak-kills`` (one per 10 minutes, all in the first half of the run: the
second half is one life). The warm-ups say which samples the drift
ignores: the first ``warmup_s`` of the run for the store's series (its file
never shrinks, so they run across kills), the first ``life_warmup_s`` of each
life for the process's series (a kill restarts the process).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass

from stress.parts import Options

__all__ = ["Plan"]


@dataclass(frozen=True)
class Plan:
    """The soak's settings (seconds unless named otherwise)."""

    seconds: float
    trees: int
    sample_s: float
    compact_s: float
    kills: int
    warmup_s: float
    life_warmup_s: float
    seed: int = 1

    @classmethod
    def of(cls, options: Options) -> Plan:
        """The plan the command line asks for (see the module docstring)."""
        minutes = options.minutes or (1.0 if options.quick else 15.0)
        seconds = 60.0 * minutes
        kills = options.soak_kills if options.soak_kills is not None else max(1, int(minutes // 10))
        sample_s = options.sample_seconds or (5.0 if options.quick else 30.0)
        life_s = 0.5 * seconds / max(1, kills)  # the shortest life (see kill_times)
        return cls(
            seconds=seconds,
            trees=options.trees or (10 if options.quick else 50),
            sample_s=sample_s,
            compact_s=10.0 if options.quick else 120.0,
            kills=kills,
            warmup_s=min(max(300.0, 0.25 * seconds), 0.5 * seconds),
            life_warmup_s=min(120.0, 0.3 * life_s),
            seed=options.seed,
        )

    def kill_times(self) -> list[float]:
        """Seconds from the start at which each life is killed.

        The kills are spread evenly (jittered) over the first half of the run,
        so that its second half is one life: the process's drift needs a long
        life to tell a slow leak from a restart's settling.
        """
        rng = random.Random(self.seed)
        step = 0.5 * self.seconds / self.kills if self.kills else 0.0
        return [step * (i + 1) + rng.uniform(-0.1, 0.1) * step for i in range(self.kills)]

    def dumps(self) -> str:
        """The plan as JSON (for a life's command line)."""
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> Plan:
        """The plan :meth:`dumps` wrote."""
        return cls(**json.loads(text))
