"""Agent paths: ``/root`` is the host, an agent's path is its parent's path plus its name.

A name fully matches ``[a-z0-9_]+``, is at most 40 characters and is not
``root`` (so ``.`` and ``..`` are never names). A path is at most 1024
characters, starts with ``/root``, has no empty segment and no trailing ``/``.
Depth is the number of segments below ``/root``.

Every function raises :class:`~retinue.errors.InvalidAgentPath` (a
``ValueError``) for a bad name or path and
:class:`~retinue.errors.ArgumentTypeError` (a ``TypeError``) for an argument
that is not a ``str``; nothing is converted silently.
"""

from __future__ import annotations

import hashlib
import re

from retinue.errors import ArgumentTypeError, InvalidAgentPath
from retinue.protocol.checks import preview

__all__ = [
    "MAX_NAME_LENGTH",
    "MAX_PATH_LENGTH",
    "ROOT",
    "child_path",
    "depth",
    "derive_name",
    "is_immediate_child",
    "is_sound",
    "join",
    "name_of",
    "names_sound",
    "parent_of",
    "resolve",
    "validate",
    "validate_name",
]

ROOT = "/root"
"""The host's path; every agent path starts with it."""
MAX_NAME_LENGTH = 40
"""Longest task name, in characters."""
MAX_PATH_LENGTH = 1024
"""Longest agent path, in characters."""

_ROOT_PREFIX = ROOT + "/"
_NAME_RE = re.compile(r"[a-z0-9_]+")
# A path whose every segment has a valid name's characters and length: valid unless a
# segment is reserved or it is too long (one match instead of a check per segment).
_PATH_RE = re.compile(rf"/root(?:/[a-z0-9_]{{1,{MAX_NAME_LENGTH}}})+")
_RESERVED_NAMES = frozenset({"root"})
_LINES_OF_NAMES = re.compile(r"[a-z0-9_\n]*")  # names_sound's match: names, one a line

_NAME_TOO_LONG = f"task_name must be at most {MAX_NAME_LENGTH} characters"
_NAME_BAD = "task_name must use lowercase letters, digits, and underscores"


def _require_str(value: object, what: str) -> str:
    """Return ``value`` if it is a ``str``; raise ``ArgumentTypeError`` otherwise."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


def _check_name(name: str) -> None:
    """Raise ``InvalidAgentPath`` unless ``name`` (already a str) is a valid name."""
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidAgentPath(_NAME_TOO_LONG)
    if name in _RESERVED_NAMES or _NAME_RE.fullmatch(name) is None:
        raise InvalidAgentPath(_NAME_BAD)


def _renamed(exc: InvalidAgentPath, field: str, value: str) -> InvalidAgentPath:
    """Restate a path-rule error for the argument ``field`` the caller passed.

    ``task_name must ...`` becomes ``<field> 'Bad': every name in it must
    ...`` (or ``<field> 'Bad' must ...`` when ``field`` is a name itself),
    quoting at most a short prefix of the value.
    """
    message = str(exc)
    if message.startswith("task_name "):
        rule = message[len("task_name ") :]
        if field in ("name", "task_name"):
            return InvalidAgentPath(f"{field} {preview(value)} {rule}")
        return InvalidAgentPath(f"{field} {preview(value)}: every name in it {rule}")
    if message.startswith("agent path "):
        rule = message[len("agent path ") :]
        return InvalidAgentPath(f"{field} {preview(value)} {rule}")
    return InvalidAgentPath(f"{field} {preview(value)}: {message}")


def validate_name(name: str, *, field: str | None = None) -> str:
    """Return ``name`` unchanged if it is a valid task name.

    ``field`` names the caller's argument in the error (``name must use
    ...``, quoting a short prefix of the value); by default the message
    says ``task_name``.

    Raises:
        ArgumentTypeError: ``name`` is not a ``str``.
        InvalidAgentPath: ``task_name must be at most 40 characters`` (checked
            first), or ``task_name must use lowercase letters, digits, and
            underscores`` (empty, ``root``, ``.``, ``..``, uppercase, ``-``,
            ``/``, whitespace, ...; the whole string must match).
    """
    _require_str(name, field or "task_name")
    try:
        _check_name(name)
    except InvalidAgentPath as exc:
        if field is None:
            raise
        raise _renamed(exc, field, name) from None
    return name


def validate(path: str, *, field: str | None = None) -> str:
    """Return ``path`` unchanged if it is a valid agent path.

    ``field`` names the caller's argument in the error (``parent must start
    with /root``, quoting a short prefix of the value).

    Checks, in this order: it is ``/root`` or starts with ``/root/``; it does
    not end with ``/``; it is at most 1024 characters; it has no empty
    segment; every segment below ``/root`` is a valid name.

    Raises:
        ArgumentTypeError: ``path`` is not a ``str``.
        InvalidAgentPath: with the message of the first failed check
            (``agent path must start with /root``, ``agent path must not end
            with /``, ``agent path is too long``, ``agent path must not contain
            empty segments``, or a :func:`validate_name` message).
    """
    _require_str(path, field or "agent path")
    if field is None:
        return _validate(path)
    try:
        return _validate(path)
    except InvalidAgentPath as exc:
        raise _renamed(exc, field, path) from None


def _validate(path: str) -> str:
    """Check an agent path (already a str); see :func:`validate`."""
    if path == ROOT:
        return path
    if (
        len(path) <= MAX_PATH_LENGTH
        and _PATH_RE.fullmatch(path) is not None
        and path.find("/root/", 1) < 0
        and not path.endswith("/root")
    ):
        return path  # the common case; otherwise the checks below say what is wrong
    if not path.startswith(_ROOT_PREFIX):
        raise InvalidAgentPath("agent path must start with /root")
    if path.endswith("/"):
        raise InvalidAgentPath("agent path must not end with /")
    if len(path) > MAX_PATH_LENGTH:
        raise InvalidAgentPath("agent path is too long")
    segments = path[len(_ROOT_PREFIX) :].split("/")
    if "" in segments:
        raise InvalidAgentPath("agent path must not contain empty segments")
    for segment in segments:
        _check_name(segment)
    return path


def is_sound(path: str, name: str) -> bool:
    """Return True if ``path`` is a valid agent path below ``/root`` and ``name`` a valid name.

    One quick check for many stored records (an open decodes every agent): False
    says only that :func:`validate` or :func:`validate_name` raises, and which
    error it is they say. Never raises (a non-``str`` is not sound).
    """
    return (
        type(path) is str
        and type(name) is str
        and len(path) <= MAX_PATH_LENGTH
        and _PATH_RE.fullmatch(path) is not None
        and path.find("/root/", 1) < 0
        and not path.endswith("/root")
        and len(name) <= MAX_NAME_LENGTH
        and name != "root"
        and _NAME_RE.fullmatch(name) is not None
    )


def names_sound(names: list[str]) -> bool:
    """Return True if every one of ``names`` is a valid name (see :func:`validate_name`).

    A handful of C-level matches over the joined names instead of a call per
    name (an open checks every stored agent's): False says only that some
    name is not, and :func:`validate_name` says which and why.
    """
    if not names:
        return True
    joined = "\n" + "\n".join(names) + "\n"  # each line: a name
    return (
        max(map(len, names)) <= MAX_NAME_LENGTH
        and _LINES_OF_NAMES.fullmatch(joined) is not None
        and joined.count("\n") == len(names) + 1  # no name holds a newline
        and joined.find("\n\n") < 0  # no name is empty
        and joined.find("\nroot\n") < 0
    )


def join(parent: str, name: str) -> str:
    """Return the path of a child called ``name`` below ``parent``.

    Raises:
        ArgumentTypeError: an argument is not a ``str``.
        InvalidAgentPath: ``parent`` is not a valid path, ``name`` is not a
            valid name, or the joined path is too long.
    """
    validate(parent)
    validate_name(name)
    return validate(parent + "/" + name)


def child_path(parent: str, name: str) -> str:
    """Return the path of ``name`` below ``parent``, both already valid (no re-check).

    :func:`join` for a caller that holds a valid path and a valid name (the
    supervisor spawning below a stored agent): only the joined length can fail.

    Raises:
        InvalidAgentPath: the joined path is too long.
    """
    path = parent + "/" + name
    if len(path) > MAX_PATH_LENGTH:
        raise InvalidAgentPath("agent path is too long")
    return path


def parent_of(path: str) -> str:
    """Return the parent path of ``path``.

    Raises:
        ArgumentTypeError: ``path`` is not a ``str``.
        InvalidAgentPath: ``path`` is invalid, or it is ``/root``, which has no parent.
    """
    validate(path)
    if path == ROOT:
        raise InvalidAgentPath("/root has no parent; it is the host")
    return path.rsplit("/", 1)[0]


def name_of(path: str) -> str:
    """Return the last segment of ``path`` (its task name); ``/root`` gives ``root``.

    Raises:
        ArgumentTypeError: ``path`` is not a ``str``.
        InvalidAgentPath: ``path`` is invalid.
    """
    validate(path)
    return path.rsplit("/", 1)[1]


def depth(path: str, *, valid: bool = False) -> int:
    """Return the number of segments below ``/root`` (``/root`` is 0, ``/root/a`` is 1).

    This is the one depth rule (the depth cap and the delegation graph count
    the same way). ``valid=True`` skips the check, for a path already known
    to be valid (the supervisor's hot path).

    Raises:
        ArgumentTypeError: ``path`` is not a ``str``.
        InvalidAgentPath: ``path`` is invalid.
    """
    if not valid:
        validate(path)
    return path.count("/") - 1


def is_immediate_child(path: str, parent: str) -> bool:
    """Return whether ``path`` is a direct child of ``parent`` (``/root`` is not its own child).

    Raises:
        ArgumentTypeError: an argument is not a ``str``.
        InvalidAgentPath: either path is invalid.
    """
    validate(path)
    validate(parent)
    if path == ROOT:
        return False
    return path.rsplit("/", 1)[0] == parent


def resolve(sender_path: str, reference: str, *, field: str | None = None) -> str:
    """Resolve a path ``reference`` made by the agent at ``sender_path``.

    ``field`` names the caller's argument (``ref``, ``to``, ``parent``) in
    the error, with a short prefix of the reference.

    An absolute reference (starting with ``/``) is validated and returned as
    it is. A relative one (``child`` or ``child/grandchild``) is joined below
    the sender, each segment validated as a name, so it can only go down:
    ``..``, ``.`` and empty segments are rejected.

    Raises:
        ArgumentTypeError: an argument is not a ``str``.
        InvalidAgentPath: the sender path, the reference or the result is invalid.
    """
    validate(sender_path)
    _require_str(reference, field or "agent reference")
    try:
        if reference.startswith("/"):
            return _validate(reference)
        for segment in reference.split("/"):
            _check_name(segment)
        return _validate(sender_path + "/" + reference)
    except InvalidAgentPath as exc:
        if field is None:
            raise
        raise _renamed(exc, field, reference) from None


def derive_name(agent_id: str) -> str:
    """Return a valid task name derived from ``agent_id``.

    The name is ``agent_`` plus the first 12 hex digits of the id's SHA-256:
    deterministic, at most 40 characters, and it does not reveal the id.

    Raises:
        ArgumentTypeError: ``agent_id`` is not a ``str``.
    """
    _require_str(agent_id, "agent_id")
    digest = hashlib.sha256(agent_id.encode("utf-8", "surrogatepass")).hexdigest()
    return "agent_" + digest[:12]
