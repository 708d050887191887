"""The instruction bench's settle of litellm's success logging (``stress.bench.litellm_logging``).

litellm runs each call's success callbacks after the call has returned, on
the loop that made it. ``settle_logging`` waits until every callback of the
calls made so far has run, on the caller's loop or on another thread's loop
(the one ``model_call_loop`` recorded). The callback here is slow on
purpose: it is still running when each call returns, so only the settle makes
it done. Checked in a subprocess (litellm's callbacks and logging worker are
process-wide); no timing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("litellm")

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import asyncio, json, threading

from litellm.integrations.custom_logger import CustomLogger

from retinue.llm import SCRIPTED_MODEL
from retinue.llm.model import load_litellm
from stress.bench.litellm_logging import model_call_loop, settle_logging

CALLS = 3
MESSAGES = [{"role": "user", "content": "hi"}]
logged = []


class SlowLogger(CustomLogger):
    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        await asyncio.sleep(0.05)  # still running when the call has returned
        logged.append(1)


litellm = load_litellm()
litellm.callbacks = [SlowLogger()]
original = litellm.acompletion


async def calls(n):
    for _ in range(n):
        await litellm.acompletion(model=SCRIPTED_MODEL, messages=MESSAGES)


async def here():
    await calls(CALLS)
    await settle_logging()
    return len(logged)


seen = {"here": asyncio.run(here())}

loop = asyncio.new_event_loop()
thread = threading.Thread(target=loop.run_forever, daemon=True)
thread.start()
with model_call_loop() as loops:
    probed = litellm.acompletion is not original
    asyncio.run_coroutine_threadsafe(calls(CALLS), loop).result(timeout=120)


async def there():
    await settle_logging(loops[-1])
    return len(logged)


seen["there"] = asyncio.run(there())
seen["loops_recorded"] = loops == [loop] * CALLS
seen["probe_in_place"] = probed
seen["put_back"] = litellm.acompletion is original
loop.call_soon_threadsafe(loop.stop)
thread.join(timeout=60)
print(json.dumps(seen))
"""


def test_settle_waits_for_every_calls_callback_here_and_on_another_loop(tmp_path: Path) -> None:
    """Settled on the caller's loop, then on another thread's loop (as retinue's turns run),
    every call's callback has run; the loop probe records that loop and puts litellm back."""
    script = tmp_path / "settle.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT), LITELLM_LOCAL_MODEL_COST_MAP="True")
    command = [sys.executable, str(script)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "here": 3,
        "there": 6,
        "loops_recorded": True,
        "probe_in_place": True,
        "put_back": True,
    }, done.stderr[-3000:]
