"""When litellm is imported: beside the store's opening for a model team, never on the loop.

Each case runs in a fresh interpreter (this test process has litellm loaded
already); no timing is asserted, only the order of what happened.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, tmp_path: Path) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter with a store folder; return the JSON it prints."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=300,
    ).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def test_open_of_a_model_team_returns_with_litellm_imported(tmp_path: Path) -> None:
    result = _run(
        """
        import json, sys, threading
        from retinue import Profile, Runtime
        from retinue.llm import SCRIPTED_MODEL
        from retinue.llm.model import _provider as provider
        before = "litellm" in sys.modules
        with Runtime.open(sys.argv[1], profiles=[Profile("a", model=SCRIPTED_MODEL)]) as rt:
            imported = provider._module is not None
            done = rt.wait(rt.spawn("a", "hello").id, timeout=120)
        print(json.dumps({"before": before, "imported": imported, "output": done.output}))
        """,
        tmp_path,
    )
    assert result == {"before": False, "imported": True, "output": "Done: hello"}


def test_a_runtime_without_a_model_never_imports_litellm(tmp_path: Path) -> None:
    result = _run(
        """
        import json, sys
        from retinue import Profile, Runtime
        from retinue.testing import echo
        with Runtime.open(sys.argv[1], profiles=[Profile("a", runner=echo)]) as rt:
            rt.wait(rt.spawn("a", "hello").id, timeout=120)
            print(json.dumps({"litellm": "litellm" in sys.modules}))
        """,
        tmp_path,
    )
    assert result == {"litellm": False}


def test_a_turn_waiting_for_the_import_leaves_the_event_loop_free(tmp_path: Path) -> None:
    """A model turn that starts before litellm is imported does not stall the other turns."""
    result = _run(
        """
        import json, sys, threading
        from retinue import Profile, Runtime
        from retinue.llm import SCRIPTED_MODEL, LiteLLMRunner
        from retinue.llm.model import _provider as provider

        model = LiteLLMRunner(SCRIPTED_MODEL)
        started = threading.Event()

        async def wrapped(turn):  # not a LiteLLMRunner: the open does not import litellm
            started.set()
            return await model(turn)

        async def other(turn):
            return "importing" if provider._module is None else "imported"

        profiles = [Profile("model", runner=wrapped), Profile("other", runner=other)]
        with Runtime.open(sys.argv[1], profiles=profiles) as rt:
            first = rt.spawn("model", "hello")
            started.wait(60)
            second = rt.wait(rt.spawn("other", "tick").id, timeout=120)
            done = rt.wait(first.id, timeout=120)
        print(json.dumps({"other": second.output, "model": done.output}))
        """,
        tmp_path,
    )
    assert result == {"other": "importing", "model": "Done: hello"}
