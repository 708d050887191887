"""Usage errors: bad input, an unknown name, a call outside what the sender may do.

A bad argument, agent path, limit, profile set, team file, delegation graph
or structured result; an unknown profile, agent or approval; an approval
answered twice; a name a live sibling holds; a refused permission.

The tree, and the names users import, are in :mod:`retinue.errors`.
"""

from __future__ import annotations

from retinue.errors._root import RetinueError

__all__ = [
    "ApprovalAlreadyAnswered",
    "ArgumentTypeError",
    "ConfigurationError",
    "DelegationCycleError",
    "DelegationDepthError",
    "DelegationGraphError",
    "DuplicateAgentPath",
    "InvalidAgentPath",
    "InvalidArgument",
    "InvalidLimits",
    "NotPermitted",
    "ResultContractError",
    "TeamFileError",
    "ToolsNotPermitted",
    "UnknownAgent",
    "UnknownApproval",
    "UnknownProfile",
]


class InvalidAgentPath(RetinueError, ValueError):
    """An agent name or path breaks the path rules."""


class InvalidLimits(RetinueError, ValueError):
    """A Limits field, or the environment variable that sets it, is invalid."""


class InvalidArgument(RetinueError, ValueError):
    """An argument is out of range or of the wrong shape."""


class ArgumentTypeError(RetinueError, TypeError):
    """An argument has the wrong type (a number where a string belongs, say)."""


class ConfigurationError(RetinueError, ValueError):
    """The profiles or options given to ``Runtime.open`` cannot work."""


class TeamFileError(ConfigurationError):
    """A team file is unusable; ``.source``, ``.table`` and ``.key`` say where.

    The message reads ``<file>: [<table>] key '<key>': <what is wrong>``.
    """

    def __init__(self, source: str, table: str, key: str, problem: str) -> None:
        self.source = source
        self.table = table
        self.key = key
        self.problem = problem
        where = f"[{table}] " if table else ""
        if key:
            where += f"key {key!r}: "
        super().__init__(f"{source}: {where}{problem}")


class DelegationGraphError(RetinueError, ValueError):
    """The profiles' delegation graph is unusable."""


class DelegationCycleError(DelegationGraphError):
    """Profiles delegate to each other in a cycle; ``.cycle`` lists it."""

    def __init__(self, cycle: list[str]) -> None:
        self.cycle = list(cycle)
        super().__init__("subagent cycle detected: " + " -> ".join(self.cycle))


class DelegationDepthError(DelegationGraphError):
    """A delegation chain is deeper than the depth cap."""

    def __init__(self, depth: int, cap: int) -> None:
        self.depth = depth
        self.cap = cap
        super().__init__(f"subagent depth {depth} exceeds cap {cap}")


class ResultContractError(RetinueError, ValueError):
    """A structured result breaks the contract; ``.field`` names where."""

    def __init__(self, message: str, field: str = "") -> None:
        self.field = field
        super().__init__(message)


class UnknownProfile(RetinueError, LookupError):
    """No profile of that name is defined."""


class UnknownAgent(RetinueError, LookupError):
    """No agent has that id or live path."""


class UnknownApproval(RetinueError, LookupError):
    """No approval request has that id (see ``Runtime.approvals``)."""


class ApprovalAlreadyAnswered(RetinueError):
    """The approval request was approved, denied or timed out before; it takes one answer."""


class DuplicateAgentPath(RetinueError, ValueError):
    """A live sibling already holds that name."""


class NotPermitted(RetinueError):
    """The sender may not do that (spawn that profile, message that agent)."""


class ToolsNotPermitted(NotPermitted, ConfigurationError):
    """A child's tools exceed its parent's (the capability ceiling); ``.extra`` names them.

    Raised when the profiles are checked (``Runtime.open``, ``retinue
    validate``), so it is also a :class:`ConfigurationError`: with the
    ceilings checked there, no spawn can exceed them.
    """

    def __init__(self, message: str, extra: tuple[str, ...] = ()) -> None:
        self.extra = tuple(extra)
        super().__init__(message)
