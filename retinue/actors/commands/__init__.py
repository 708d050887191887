"""The supervisor's protocol: every request it serves, as a frozen, typed command.

A command names its sender (:data:`HOST` or the :class:`TurnRef` of a running
turn), carries its arguments as typed fields and says, through
``after_close``, whether the supervisor still serves it while the runtime
closes. ``Command[R]`` is answered with an ``R``, so the runtime's and the
turn's one-line faces are checked by ``mypy --strict`` end to end. The
supervisor dispatches them in one ``match``.

Argument fields are typed as the public API declares them; the supervisor
still checks them at run time (a host may pass anything), raising
``ArgumentTypeError`` for a wrong type. A command that takes an agent
reference also carries ``field``: the name of the caller's argument that held
it (``ref`` from the host and a turn, ``to`` or ``agent`` from a coordinator
tool), which the errors about a bad reference name.

The commands live by theme, one module each: :mod:`~.base` (senders and
``Command``), :mod:`~.spawning`, :mod:`~.lifecycle`, :mod:`~.mailboxes`,
:mod:`~.waits`, :mod:`~.leases`, :mod:`~.reads`, :mod:`~.models` (a model
turn's transcript and usage), :mod:`~.upkeep` and :mod:`~.supervision`. This
module closes the protocol: :data:`SupervisorCommand` is the union of them
all, :data:`ReadCommand` the part a read-only runtime serves; import the
commands from here. :mod:`~._wire` is the one wire form of the commands a host
sends from outside the writer (:data:`REMOTE`), shared by the control socket
and a cluster's shards.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from typing import Any, ClassVar

import msgspec

from retinue.actors.commands._base import HOST, Command, Host, Sender, TurnRef
from retinue.actors.commands._leases import AckLease, Leases, ReleaseLease
from retinue.actors.commands._lifecycle import (
    Close,
    CloseTree,
    ExpireTurn,
    FollowUp,
    Interrupt,
    InterruptTree,
    Resume,
    Settle,
)
from retinue.actors.commands._mailboxes import HostMessages, Send
from retinue.actors.commands._models import LlmLoad, LlmStarted, LlmStep
from retinue.actors.commands._reads import (
    Agents,
    Children,
    CountAgents,
    CountBacklog,
    Get,
    Inspect,
)
from retinue.actors.commands._spawning import Fork, Run, Spawn, SpawnMany, SpawnRequest
from retinue.actors.commands._supervision import (
    AdmitCall,
    Approvals,
    Approve,
    AwaitApproval,
    Deny,
    ExpireApprovals,
    FireRestarts,
    Rearm,
    SupervisionCommand,
)
from retinue.actors.commands._upkeep import Barrier, Compact, Shutdown
from retinue.actors.commands._waits import GiveBack, GiveUpWait, Idle, RunMany, Wait, WaitKind
from retinue.actors.commands._wire import REMOTE, answer_type, decode_command, encode_command
from retinue.errors import RuntimeClosed

__all__ = [
    "HOST",
    "REMOTE",
    "SUPERVISOR_STOPPED",
    "AckLease",
    "AdmitCall",
    "Agents",
    "Approvals",
    "Approve",
    "AwaitApproval",
    "Barrier",
    "Children",
    "Close",
    "CloseTree",
    "Command",
    "Compact",
    "CountAgents",
    "CountBacklog",
    "Deny",
    "Envelope",
    "ExpireApprovals",
    "ExpireTurn",
    "FireRestarts",
    "FollowUp",
    "Fork",
    "Get",
    "GiveBack",
    "GiveUpWait",
    "Host",
    "HostMessages",
    "Idle",
    "Inspect",
    "Interrupt",
    "InterruptTree",
    "Leases",
    "LlmLoad",
    "LlmStarted",
    "LlmStep",
    "ReadCommand",
    "Rearm",
    "ReleaseLease",
    "Resume",
    "Run",
    "RunMany",
    "Send",
    "Sender",
    "Settle",
    "Shutdown",
    "Spawn",
    "SpawnMany",
    "SpawnRequest",
    "SupervisionCommand",
    "SupervisorCommand",
    "TurnRef",
    "Wait",
    "WaitKind",
    "answer_type",
    "decode_command",
    "encode_command",
]

SupervisorCommand = (
    Spawn
    | Run
    | SpawnMany
    | Fork
    | Send
    | FollowUp
    | Resume
    | Interrupt
    | InterruptTree
    | HostMessages
    | Close
    | CloseTree
    | Get
    | Agents
    | Inspect
    | CountBacklog
    | CountAgents
    | Children
    | Wait
    | RunMany
    | GiveUpWait
    | GiveBack
    | AckLease
    | ReleaseLease
    | Leases
    | Settle
    | ExpireTurn
    | LlmLoad
    | LlmStep
    | Compact
    | Barrier
    | Idle
    | Shutdown
    | FireRestarts
    | Rearm
    | AwaitApproval
    | Approvals
    | Approve
    | Deny
    | ExpireApprovals
    | AdmitCall
)
"""The closed protocol: every command the supervisor serves (its ``match`` is exhaustive)."""

ReadCommand = Get | Agents | Inspect | CountBacklog | CountAgents | Barrier | Idle | Approvals
"""The commands a read-only runtime serves from a store snapshot (the others are refused).

``isinstance(command, ReadCommand)`` tells them apart; the reader's ``match``
over them is exhaustive (``assert_never``), so mypy proves each is served.
"""


SUPERVISOR_STOPPED = "the runtime's supervisor has stopped"
"""Why a command sent to a supervisor that stopped is refused (``RuntimeClosed``)."""


class Envelope(msgspec.Struct, eq=False):
    """A command in the supervisor's inbox with the future its answer goes to.

    It goes into the supervisor actor's inbox as it is, without pykka's own
    envelope around it (the supervisor's loop takes it first; see
    :mod:`retinue.actors.supervisor._actor`). ``reply_to`` is None as for a
    pykka ``tell``: if the actor stops with it still in the inbox, pykka's
    teardown drops it, as it drops an unserved ``tell``. A struct, not a
    dataclass: it is built once per command, in C (a dataclass's ``__init__``
    is a Python call, about a thousand instructions more per command).
    """

    command: SupervisorCommand
    reply: concurrent.futures.Future[Any]
    trace: str | None = None
    """The sender's current span (W3C ``traceparent``) for a command that starts turns."""
    reply_to: ClassVar[None] = None
    """pykka's reply slot of an inbox item: none (what a ``tell`` puts)."""

    def refuse(self) -> None:
        """Answer the command with ``RuntimeClosed``: the supervisor stopped before serving it.

        For an envelope left in the inbox of a supervisor that stopped: without
        an answer its caller would wait for ever. A reply already answered or
        cancelled is left as it is.
        """
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            self.reply.set_exception(RuntimeClosed(SUPERVISOR_STOPPED))
