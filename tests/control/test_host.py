"""``retinue.Host``: ``Runtime``, ``RemoteRuntime`` and ``Cluster`` all satisfy it, so host code
is written once.

The check is twofold: mypy (``--strict`` runs over the tests) proves each face
assignable to a ``Host``-typed name below, signatures and return types
included; at run time each face has every call of the protocol.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

import pytest

import retinue
from retinue import Host, RemoteRuntime, Runtime
from retinue.cluster import Cluster
from retinue.control import HOST_CALLS

if TYPE_CHECKING:

    def typed_as_hosts(rt: Runtime, remote: RemoteRuntime, cluster: Cluster) -> list[Host]:
        """mypy refuses this function if a face does not satisfy ``Host``."""
        writer: Host = rt
        over_the_socket: Host = remote
        sharded: Host = cluster
        return [writer, over_the_socket, sharded]


def test_the_protocol_names_the_host_calls_and_their_twins() -> None:
    calls = set(HOST_CALLS)
    sync = {
        "spawn", "run", "wait", "send", "messages", "follow_up", "resume", "interrupt",
        "interrupt_tree", "close", "close_tree", "get", "agents", "inspect", "approvals",
        "approve", "deny", "stream",
    }  # fmt: skip
    assert calls == sync | {f"{name}_async" for name in sync}
    assert retinue.Host is Host


@pytest.mark.parametrize("face", [Runtime, RemoteRuntime, Cluster])
def test_every_face_has_every_call_of_the_protocol(face: type) -> None:
    for name in HOST_CALLS:
        call = getattr(face, name, None)
        assert callable(call), f"{face.__name__} has no {name}"
        wanted = inspect.signature(getattr(Host, name))
        got = inspect.signature(call)
        # Every parameter the protocol names is there, of the same kind (extra keyword
        # options, such as Runtime.wait's lease, are allowed).
        for param in wanted.parameters.values():
            assert param.name in got.parameters, (face.__name__, name, param.name)
            assert got.parameters[param.name].kind == param.kind, (face.__name__, name, param)
        is_async = inspect.iscoroutinefunction(getattr(Host, name))
        assert inspect.iscoroutinefunction(call) == is_async, (face.__name__, name)


def test_host_code_written_once_runs_on_a_runtime(tmp_path: object) -> None:
    def lead(host: Host) -> str:
        host.spawn("echo", "hello", name="a")
        return host.wait("a", 10).output or ""

    with Runtime.open(None, profiles=[retinue.Profile("echo", runner=lambda t: t.task)]) as rt:
        assert lead(rt) == "hello"
