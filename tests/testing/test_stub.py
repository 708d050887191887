"""The OpenAI-compatible stub server of retinue.testing."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from retinue.testing import OpenAIStub


def test_a_client_that_hangs_up_mid_request_prints_no_traceback(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A caller killed mid-request (a SIGKILLed child, a cancelled call) is dropped quietly.

    socketserver prints a traceback for any error in a handler; a connection
    reset by the client is what crash tests cause on purpose, and must not
    bury a run's output in tracebacks.
    """
    with OpenAIStub() as stub:
        host, port = stub.url.removeprefix("http://").split("/")[0].split(":")
        sock = socket.create_connection((host, int(port)))
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
        )
        # SO_LINGER with a zero timeout: close sends a reset, as a killed process's socket does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        time.sleep(0.5)  # let the handler's thread meet the reset before the stub stops
    err = capfd.readouterr().err
    assert "Traceback" not in err, err
