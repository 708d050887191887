"""What reaches an agent and the host: the host's messages (dedup keys, full mailboxes), its waits.

A wait (with a tiny timeout) receives the agent's oldest completion the host
has not received, or ends as the model says (``WaitTimeout``,
``NothingToWaitFor``, ``AgentClosed``).
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from retinue.errors import (
    AgentClosed,
    DedupKeyTooLong,
    InvalidArgument,
    MailboxFull,
    MessageTooLarge,
    NothingToWaitFor,
    WaitTimeout,
)
from stress.statemachine.data import (
    CONTENTS,
    DEDUP_KEYS,
    HOST,
    HOSTILE_CONTENTS,
    HOSTILE_KEYS,
    KEY_MAX,
    LIMITS,
    MAX,
    REF_FORMS,
    WAIT_TIMEOUTS,
    hostile,
    nbytes,
)
from stress.statemachine.model import Model
from stress.statemachine.trace import STATS, fail

__all__ = ["DeliveryRules"]


class DeliveryRules(Model):
    """The host messages agents and waits on them; each call is judged against the model."""

    @precondition(lambda self: self.live())
    @rule(
        index=st.integers(0, 63),
        form=st.sampled_from(REF_FORMS),
        content=st.sampled_from(CONTENTS + HOSTILE_CONTENTS),
        key=st.sampled_from(DEDUP_KEYS + HOSTILE_KEYS),
        repeat=st.integers(1, 4),
    )
    def send(self, index: int, form: str, content: str, key: str | None, repeat: int) -> None:
        """The host messages an agent (repeatedly), sometimes with a used or over-long dedup key."""
        for n in range(repeat):
            if n:
                self.sync()
            self._send(index, form, content, key if n == 0 else None)

    def _send(self, index: int, form: str, content: str, key: str | None) -> None:
        ref, target, expect = self.ref(index, form)
        original = None if key is None else self.dedup.get(key)
        if hostile(content) or (key is not None and hostile(key)):
            expect.add(InvalidArgument, "hostile content or key")  # refused before the ref
            original = None
        if target is not None:
            if target.closed:
                expect.add(AgentClosed, f"{target.info.path} is closed")
            if nbytes(content) > MAX:
                expect.add(MessageTooLarge, f"content of {nbytes(content)} bytes")
            if key is not None and len(key) > KEY_MAX:
                expect.add(DedupKeyTooLong, f"key of {len(key)} characters")
            if original is None and len(self.unread(target)) >= LIMITS.mailbox_capacity:
                expect.add(MailboxFull, f"{target.info.path} has a full mailbox")
        op = f"send({ref!r}, {content[:8]!r}..., dedup_key={key!r})"
        message, error = self.call("send", lambda: self.rt.send(ref, content, dedup_key=key))
        if original is not None and error is None:
            if message != original:
                fail(f"{op} with a used dedup key returned {message}, not the original {original}")
            STATS["dedup_hits"] += 1
            return
        if not self.judge(op, error, expect):
            return
        assert target is not None
        if not (
            message.kind == "message"
            and message.recipient_id == target.id
            and message.content == content
            and message.sender == HOST
            and message.dedup_key == key
        ):
            fail(f"{op} returned {message}")
        every = {m.id for a in self.agents.values() for m in self.inbox(a)}
        if message.id in every:
            fail(f"{op} returned the id of another message: {message.id}")
        target.sent.append(message)
        if key is not None:
            self.dedup[key] = message
        if len(self.unread(target)) > LIMITS.mailbox_capacity:
            fail(f"{target.info.path} holds more than mailbox_capacity unread messages")

    @precondition(lambda self: self.live())
    @rule(
        index=st.integers(0, 63),
        form=st.sampled_from(REF_FORMS),
        timeout=st.sampled_from(WAIT_TIMEOUTS),
        repeat=st.integers(1, 4),
    )
    def wait(self, index: int, form: str, timeout: float, repeat: int) -> None:
        """The host waits (with a tiny timeout) for an agent's next unreceived completions."""
        for n in range(repeat):
            if n:
                self.sync()
            if not self._wait_once(index, form, timeout):
                return

    def _wait_once(self, index: int, form: str, timeout: float) -> bool:
        ref, agent, expect = self.ref(index, form)
        due: int | None = None
        if agent is not None:
            due = self.host_due(agent)
            if due is None:
                if agent.closed:
                    expect.add(AgentClosed, f"{agent.info.path} is closed with nothing left")
                else:
                    expect.add(WaitTimeout, f"{agent.info.path} has nothing new")
                    if not agent.busy:  # unless a child's completion may still wake it
                        expect.add(NothingToWaitFor, f"{agent.info.path} is idle")
        op = f"wait({ref!r}, timeout={timeout})"
        done, error = self.call("wait", lambda: self.rt.wait(ref, timeout=timeout))
        if not self.judge(op, error, expect):
            return False
        assert agent is not None and due is not None
        self.host_received(agent, done, op, routed=self.heir(agent) is None)
        return True
