"""The machine's world as data: its limits, its team, the inputs rules draw, what input is valid.

The team: ``boss`` -> ``lead`` -> ``mid`` -> ``echo``/``gated`` is exactly
``depth_cap`` deep for a top-level ``boss`` (the graph check counts as the
runtime does), so no spawn the graph allows hits ``DepthLimitExceeded``; the
model still predicts it for any. ``alead`` and ``aecho`` are async runners
(``async def``) on the runtime's event loop: an async coordinator awaiting
``spawn_async`` / ``run_async`` / ``wait_async`` / ``run_many_async``, and an
async leaf (echo, tell, hold on the gate without blocking the loop). A
task's verbs are what :mod:`stress.statemachine.runners` and
:mod:`stress.statemachine.coordinators` do with it.
"""

from __future__ import annotations

from hypothesis import strategies as st

from retinue import Limits
from retinue.protocol.messages import Message

LIMITS = Limits(
    depth_cap=4,
    fanout_cap=3,
    max_tree_agents=8,
    max_agents=20,
    max_active_turns=2,
    mailbox_capacity=3,
    pending_completions_per_agent=3,
    message_max_bytes=64,
    dedup_key_max_length=8,
    wait_default_s=5.0,
    compact_interval_s=3600.0,
)
RUN_TIMEOUT_S = 0.1  # how long a coordinator's turn.run / run_many waits for its children
SETTLE_S = 10.0  # quiescence must come within this; longer is a stuck agent
GATE_POLL_S = 0.005  # how often a gated runner looks at turn.cancelled
RUNNER_EXIT_S = 10.0  # runner threads must all end this soon after the runtime closes

# The error of an interrupted turn: queued (never ran) or running when interrupted.
INTERRUPT_ERRORS = ("interrupted before execution", "interrupted")
HOST = "/root"

# -- the team ---------------------------------------------------------------------------------

SUBAGENTS: dict[str, tuple[str, ...]] = {
    "boss": ("lead", "echo", "alead"),
    "lead": ("mid", "echo", "gated", "aecho"),
    "mid": ("echo", "gated"),
    "alead": ("echo", "gated", "aecho"),
    "echo": (),
    "gated": (),
    "aecho": (),
}
WAKES = {
    "boss": True,
    "lead": True,
    "mid": False,
    "alead": True,
    "echo": True,
    "gated": True,
    "aecho": True,
}
COORDINATORS = ("boss", "lead", "mid", "alead")
ASYNC_PROFILES = ("alead", "aecho")
CHILD_TASK = {
    "boss": "echo",
    "lead": "spawn:mid",
    "mid": "spawn:echo",
    "alead": "await:aecho",
    "echo": "tell",
    "gated": "hold",
    "aecho": "tell",
}

# -- the inputs rules draw --------------------------------------------------------------------

MAX = LIMITS.message_max_bytes
KEY_MAX = LIMITS.dedup_key_max_length
TASKS = [
    "echo",
    "tell",
    "tell2",
    "fail",
    "cancel",  # raises a CancelledError nobody asked for: the turn fails, not interrupted
    "bad",
    "spawn:echo",
    "spawn:echo:a",
    "spawn:gated",
    "spawn:mid",
    "spawn:lead",
    "spawn:ghost",
    "run:echo",
    "run:gated",
    "run:mid",
    "many",
    "many:gated",
    "many::wide",
    "tellhost",  # message the host's inbox (/root): only a top-level agent may
    "aspawn:aecho",  # the async coordinator's verbs (a sync one just echoes them)
    "arun:aecho",
    "arun:gated",
    "await:aecho",
    "await:echo",
    "await:gated",
    "amany",
    "amany:gated",
    "many2",  # a batch with two real waits (sync), and its async twin
    "abatch",
    "twice:echo",  # a retried spawn with the same idempotency key: the same child
    "blocking",  # a blocking turn call from an async runner is refused
    "itree:gated",  # the async coordinator interrupts a child's subtree, then waits on it
    "itree:aecho",
    "x" * MAX,  # exactly at the bound: allowed
    "é" * (MAX // 2 + 1),  # few characters, too many bytes
]
CONTENTS = ["hi", "hi", "hello", "y" * MAX, "ü" * (MAX // 2 + 1), "z" * (MAX + 1)]
DEDUP_KEYS: list[str | None] = [None, None, "k1", "k2", "k3", "k" * KEY_MAX, "k" * (KEY_MAX + 1)]
# Hostile input the runtime must refuse at the boundary (InvalidArgument), changing nothing:
# blank text, and lone surrogates (what surrogateescape makes of a stray byte).
HOSTILE_TASKS = ["   ", "scan \ud800"]
HOSTILE_CONTENTS = ["", "hi \ud800"]
HOSTILE_KEYS: list[str | None] = ["k\ud800"]
VALID_NAMES = ["a", "b", "c"]
INVALID_NAMES = ["", "A", "a-b", "root", ".", "..", "a/b", "x" * 41, " a"]
PROFILES = ["boss", "lead", "mid", "alead", "echo", "gated", "aecho", "ghost"]
NAMES = st.one_of(
    st.none(),
    st.none(),
    st.sampled_from(VALID_NAMES),
    st.sampled_from(VALID_NAMES),
    st.sampled_from(INVALID_NAMES),
)
REF_FORMS = ["live", "live", "busy", "busy", "id", "path", "relative", "unknown", "invalid"]
UNKNOWN_REF = "nobody"  # a valid name no agent ever gets
INVALID_REF = "/root/No-Such"
WAIT_TIMEOUTS = [0, 0.001, 0.01]
ON_PURPOSE = "failed on purpose"

# -- the race rules' tasks --------------------------------------------------------------------

SHUTDOWN = "shutdown"  # an echo task that closes the runtime from its runner (race rules only)
# The hand-over race (race rules only): an ``alead`` turn waits (wait_async) on an ``echo``
# child held on the latch; an ``aecho`` turn blocks the event loop, the child settles (its
# completion is handed to the parent's wait, whose task cannot resume), then the blocker
# closes the runtime from the loop.
HANDOVER_TASK = "await:echo:latch"
BATCH_TASK = "abatch::latch"  # the same race with a batch: run_many_async's second wait
LATCH = "latch"
LOOP_SHUTDOWN = "loopshut"
# An ``aecho`` task that blocks the runtime's event loop while the loop races rule holds it
# armed (race rules only): turns whose start is handed to the loop meanwhile wait behind it.
LOOP_HOLD = "loophold"
# An ``aecho`` task that awaits the gate and, cancelled, cleans up for SLOW_CANCEL_S before it
# ends: a close awaiting the cancelled tasks keeps the loop running meanwhile (race rules only).
SLOW_HOLD = "slowhold"
SLOW_CANCEL_S = 0.1
# The error of an async turn whose task the loop's close cancelled, not its interrupt (a
# close whose Shutdown command failed interrupted nothing): its runner may never have run.
CUT_BY_CLOSE = "CancelledError: the turn's task was cancelled, and not by its interrupt"
TURN_KEY = "c"  # the idempotency key the async coordinator's "twice" task uses
PARK_S = 10.0  # how long the race rules' blocked calls may take (a close answers them)

# -- what input is valid ----------------------------------------------------------------------


def nbytes(text: str) -> int:
    """The size of ``text`` in UTF-8 (a lone surrogate counted as it would be encoded)."""
    return len(text.encode("utf-8", "surrogatepass"))


def hostile(text: str) -> bool:
    """True for text the runtime refuses to store: blank, or with a lone surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return not text.strip()


def seq(message: Message) -> int:
    """A message's arrival number (its id is ``<recipient id>:<seq>``)."""
    return int(message.id.rsplit(":", 1)[1])


def valid_name(name: str) -> bool:
    """True for a name the runtime accepts for an agent."""
    return (
        0 < len(name) <= 40
        and name != "root"
        and all(ch in "abcdefghijklmnopqrstuvwxyz0123456789_" for ch in name)
    )


def error_text(exc: BaseException) -> str:
    """A runner's exception as the runtime reports it: ``"Type: message"``."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
