"""Bounds that were hit: :class:`LimitExceeded` (``.limit``, ``.value``, ``.path``) and its kinds.

The tree, and the names users import, are in :mod:`retinue.errors`.
"""

from __future__ import annotations

from typing import Any

from retinue.errors._root import RetinueError

__all__ = [
    "AgentLimitExceeded",
    "CompletionBacklogFull",
    "CostBudgetExceeded",
    "CrashLoop",
    "DedupKeyTooLong",
    "DepthLimitExceeded",
    "FanoutLimitExceeded",
    "LimitExceeded",
    "MailboxFull",
    "MessageTooLarge",
    "PageLimitExceeded",
    "ProviderLimitExceeded",
    "RestartLimitExceeded",
    "TokenBudgetExceeded",
    "ToolCallLimitExceeded",
]


class LimitExceeded(RetinueError):
    """A configured bound was hit; raise the limit or wait for work to finish.

    ``.limit`` is the bound in force (e.g. ``depth_cap``'s value), ``.value``
    the figure that hit it (the depth the new agent would have, the live
    children already there, the message's size in bytes...), and ``.path``
    the agent path the bound applies to, when one does (else None).
    """

    def __init__(
        self,
        message: str,
        *,
        limit: int | float | None = None,
        value: int | float | None = None,
        path: str | None = None,
    ) -> None:
        self.limit = limit
        self.value = value
        self.path = path
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with every attribute (for processes and executors), subclasses' too."""
        return (_rebuild_limit_error, (type(self), self.args, dict(self.__dict__)))


class DepthLimitExceeded(LimitExceeded):
    """The new agent would be deeper than ``depth_cap``."""


class FanoutLimitExceeded(LimitExceeded):
    """The parent already has ``fanout_cap`` live children (or a batch is larger)."""


class AgentLimitExceeded(LimitExceeded):
    """``max_tree_agents`` or ``max_agents`` live agents already exist."""


class MailboxFull(LimitExceeded):
    """The recipient already holds ``mailbox_capacity`` unread messages."""


class MessageTooLarge(LimitExceeded, ValueError):
    """The message is larger than ``message_max_bytes``."""


class DedupKeyTooLong(LimitExceeded, ValueError):
    """The deduplication key is longer than ``dedup_key_max_length``."""


class CompletionBacklogFull(LimitExceeded):
    """The agent has ``pending_completions_per_agent`` completions unreceived."""


class TokenBudgetExceeded(LimitExceeded):
    """A model token budget (``tokens_per_agent`` or ``tokens_per_tree``) is spent.

    ``budget`` names the limit, ``limit`` is its value and ``used`` the tokens
    spent when the turn stopped.
    """

    def __init__(
        self,
        message: str,
        *,
        budget: str = "",
        limit: int = 0,
        used: int = 0,
        path: str | None = None,
    ) -> None:
        self.budget = budget
        self.used = used
        super().__init__(message, limit=limit, value=used, path=path)


class CostBudgetExceeded(LimitExceeded):
    """A model cost budget (``usd_per_agent`` or ``usd_per_tree``) is spent.

    ``budget`` names the limit, ``limit`` is its value in USD and ``used``
    (also ``.value``) the cost spent when the turn stopped; ``.path`` the agent
    (None for a tree's budget).
    """

    def __init__(
        self,
        message: str,
        *,
        budget: str = "",
        limit: float = 0.0,
        used: float = 0.0,
        path: str | None = None,
    ) -> None:
        self.budget = budget
        self.used = used
        super().__init__(message, limit=limit, value=used, path=path)


class RestartLimitExceeded(LimitExceeded):
    """A restart policy gave up: one more restart would pass ``max_restarts`` within ``within_s``.

    It is the error of the ``failed`` completion that escalates to the parent
    (``RestartLimitExceeded: 3 restarts within 60 s; last error: ...``);
    ``.limit`` is ``max_restarts``, ``.value`` the restarts made, ``.path`` the agent.
    """


class CrashLoop(LimitExceeded):
    """A task was lost in a crash ``max_lost`` times in a row while it ran: it is not restarted.

    A turn its process keeps dying under (under a restart policy that answers
    ``"lost"``) would otherwise be restarted by every open, however far apart
    the crashes are. It is the error of the ``failed`` completion
    (``error_type`` ``"CrashLoop"``); ``.limit`` is ``Restart.max_lost``,
    ``.value`` the losses in a row, ``.path`` the agent.
    """


class PageLimitExceeded(LimitExceeded):
    """A page of ``agents(limit=...)`` was asked larger than ``Limits.agents_page_max``.

    ``.limit`` is ``agents_page_max``, ``.value`` the ``limit`` asked for; ask
    for a smaller page and page on with ``after=`` (or ``iter_agents``).
    """


class ToolCallLimitExceeded(LimitExceeded):
    """A turn asked for more tool calls than its ``max_tool_calls``.

    ``.limit`` is ``max_tool_calls``, ``.value`` the calls the turn asked for
    in all, ``.path`` the agent's path.
    """


class ProviderLimitExceeded(LimitExceeded):
    """A model call can never fit a provider limit (a :class:`retinue.ProviderLimit`).

    Its token estimate (prompt tokens plus ``max_tokens`` or the agent's
    largest completion) is larger than the limit's ``tokens_per_minute``, so
    waiting would never admit it: shorten the prompt, lower ``max_tokens`` or
    raise the limit. ``.limit`` is ``tokens_per_minute``, ``.value`` the
    estimate, ``.match`` the limit's ``match``.
    """

    def __init__(
        self,
        message: str,
        *,
        match: str = "",
        limit: int | float | None = None,
        value: int | float | None = None,
        path: str | None = None,
    ) -> None:
        self.match = match
        super().__init__(message, limit=limit, value=value, path=path)


def _rebuild_limit_error(
    cls: type[LimitExceeded], args: tuple[Any, ...], state: dict[str, Any]
) -> LimitExceeded:
    """Rebuild a pickled :class:`LimitExceeded` (any subclass) with its attributes."""
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error
