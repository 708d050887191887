"""A runtime shut down right after model turns lets litellm's logging finish, cleanly.

litellm runs its success callbacks (the host's ``litellm.callbacks`` among
them) as tasks on the loop that made the call, after the answer is returned.
The runtime's loop used to cancel them as it closed: the host's callbacks were
lost, and litellm's logging tasks were left pending (``Task was destroyed but
it is pending!``, ``coroutine ... was never awaited`` on stderr). Checked in a
subprocess, as a user's program meets it: several runtimes opened and shut in
turn, model turns on the OpenAI provider path and on the offline model,
streamed and not.
"""

from __future__ import annotations

import json
from pathlib import Path

from cliutil import python_script

SCRIPT = """
import asyncio, json, sys, tempfile
from pathlib import Path

from litellm.integrations.custom_logger import CustomLogger

from retinue import Profile, Runtime
from retinue.llm import LiteLLMRunner
from retinue.llm.model import load_litellm
from retinue.testing import OpenAIStub

logged = []


class SlowLogger(CustomLogger):
    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        await asyncio.sleep(0.2)  # still running when the turn's answer is in
        logged.append(kwargs.get("model"))


litellm = load_litellm()
litellm.callbacks = [SlowLogger()]
turns = 0
with OpenAIStub() as stub, tempfile.TemporaryDirectory() as tmp:
    for round_ in range(3):
        runners = {
            "http": LiteLLMRunner("openai/stub-model", api_base=stub.url, api_key="x"),
            "local": LiteLLMRunner("retinue/scripted"),
            "http_stream": LiteLLMRunner(
                "openai/stub-model", api_base=stub.url, api_key="x", stream=True
            ),
            "local_stream": LiteLLMRunner("retinue/scripted", stream=True),
        }
        profiles = [Profile(name, runner=runner) for name, runner in runners.items()]
        rt = Runtime.open(Path(tmp) / f"store{round_}", profiles=profiles)
        ids = [rt.spawn(name, f"say hi {i}").id for name in runners for i in range(2)]
        for agent_id in ids:
            done = rt.wait(agent_id, timeout=60)
            assert done.status == "completed", (done.status, done.error)
        turns += len(ids)
        rt.shutdown()  # at once: the callbacks of the last answers are still running
print(json.dumps({"turns": turns, "logged": len(logged)}))
"""


def test_shutdown_after_model_turns_leaves_no_logging_task_behind(tmp_path: Path) -> None:
    script = tmp_path / "turns.py"
    script.write_text(SCRIPT)
    done = python_script(script, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    assert counts == {"turns": 24, "logged": 24}, done.stderr[-3000:]  # every callback ran
    for sign in ("Task was destroyed", "was never awaited", "LoggingWorker"):
        assert sign not in done.stderr, done.stderr[-3000:]
