"""``retinue mcp``'s waits acknowledge a completion only once its client is known to have it.

The tools run over a real runtime; an HTTP client is a session id, and a
client that died without the server seeing it is one whose ``gone()`` keeps
saying False (the server's disconnect check came too late): exactly the
window the end-to-end test in ``test_server_fixes`` hit under load, made
deterministic here.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from retinue import NothingToWaitFor, Profile, Runtime
from retinue.mcp.tools import Tools
from retinue.testing import Gate


async def _quiet(progress: float, total: float, message: str) -> None:
    return None


async def _never_gone() -> bool:
    return False  # the server never sees this client's connection close


def _open(tmp_path: Path, gate: Gate) -> Runtime:
    return Runtime.open(tmp_path / "s", profiles=[Profile("job", runner=gate)])


def test_an_answer_sent_to_a_client_that_died_unseen_goes_to_the_next_wait(
    tmp_path: Path,
) -> None:
    gate = Gate()
    with _open(tmp_path, gate) as rt:
        tools = Tools(rt, None)
        rt.spawn("job", "work", name="job")
        gate.wait_started(1)

        async def main() -> dict[str, object]:
            dead = asyncio.ensure_future(tools.wait("job", 30, _quiet, _never_gone, session="dead"))
            gate.release()
            sent = await dead  # written to a connection no one reads
            assert sent["status"] == "completed"
            return await tools.wait("job", 30, _quiet, _never_gone, session="next")

        done = asyncio.run(main())
        assert (done["status"], done["output"]) == ("completed", "released:work")
        assert rt.leases() != {}  # the next client holds it until it is known delivered


def test_a_session_that_goes_on_keeps_its_answer(tmp_path: Path) -> None:
    gate = Gate()
    with _open(tmp_path, gate) as rt:
        tools = Tools(rt, None)
        rt.spawn("job", "work", name="job")
        gate.release()

        async def main() -> None:
            sent = await tools.wait("job", 30, _quiet, _never_gone, session="alive")
            assert sent["status"] == "completed"
            assert await tools.confirm("alive") == 1  # its next message (or its DELETE)
            with pytest.raises(NothingToWaitFor):
                await tools.wait("job", 30, _quiet, _never_gone, session="other")

        asyncio.run(main())
        assert rt.leases() == {}


def test_a_wait_in_flight_takes_what_a_dead_clients_wait_took(tmp_path: Path) -> None:
    gate = Gate()
    with _open(tmp_path, gate) as rt:
        tools = Tools(rt, None)
        rt.spawn("job", "work", name="job")
        gate.wait_started(1)

        async def main() -> tuple[dict[str, object], dict[str, object]]:
            dead = asyncio.ensure_future(tools.wait("job", 5, _quiet, _never_gone, session="d"))
            live = asyncio.ensure_future(tools.wait("job", 30, _quiet, _never_gone, session="l"))
            while len(tools.handovers.leases) < 2:
                await asyncio.sleep(0.01)  # both waits begun (a hang guard: the test's timeout)
            gate.release()
            return await dead, await live

        _dead, live = asyncio.run(main())
        assert (live["status"], live["output"]) == ("completed", "released:work")


def test_over_stdio_the_answer_is_acknowledged_with_it(tmp_path: Path) -> None:
    gate = Gate()
    with _open(tmp_path, gate) as rt:
        tools = Tools(rt, None)
        rt.spawn("job", "work", name="job")
        gate.release()
        done = asyncio.run(tools.wait("job", 30, _quiet, None))
        assert done["status"] == "completed" and rt.leases() == {}
