"""TOLD: the reply of a told command keeps nothing, and a told command is still served."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from retinue import Profile, Runtime, Turn
from retinue.actors.calls import TOLD, Engine, Told
from retinue.actors.calls._channel import Channel


def test_the_told_reply_takes_every_answer_and_keeps_none() -> None:
    assert isinstance(TOLD, Told)
    assert TOLD.set_running_or_notify_cancel() is True
    TOLD.set_result(42)
    TOLD.set_exception(ValueError("dropped"))
    assert (TOLD.done(), TOLD.running(), TOLD.cancelled(), TOLD.cancel()) == (
        False,
        False,
        False,
        False,
    )
    assert TOLD.set_running_or_notify_cancel() is True  # shared: claimed again and again
    for read in (TOLD.result, TOLD.exception):
        with pytest.raises(TypeError, match="not kept"):
            read()
    with pytest.raises(TypeError, match="not kept"):
        TOLD.add_done_callback(print)


def test_tell_hands_the_command_over_on_the_told_reply() -> None:
    channel = Channel(after_close=True)
    target = mock.Mock(return_value=TOLD)
    channel.connect(target)
    command = mock.Mock()
    Engine(channel).tell(command)
    target.assert_called_once_with(command, TOLD)


def _echo(turn: Turn) -> str:
    return turn.task


def test_a_told_settle_still_ends_its_turn(tmp_path: Path) -> None:
    """A turn's settle is told (answered on TOLD): the turn still completes, every time."""
    with Runtime.open(tmp_path / "s", profiles=[Profile("w", runner=_echo)]) as rt:
        for i in range(3):
            assert rt.run("w", f"task {i}", timeout=30).output == f"task {i}"
