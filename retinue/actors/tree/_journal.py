"""The journal: one supervisor command is one transaction in memory, as it is in the store.

A command's store writes, events and after-commit effects already travel in
its :class:`~retinue.actors.supervisor._transition.Transition` and are simply dropped if
the command fails. Its changes to the supervisor's memory (the tree's indexes,
the scheduler's queues, the waits, the parks, the pending restarts) happen as
the handler runs; the journal records how to undo each one, so a command that
raises half way is rolled back to exactly the memory it found.

Every piece of the supervisor's state is held in a journaled container
(:class:`JDict`, :class:`JSet`, :class:`JList`, :class:`JDeque`) or as an
attribute of a :class:`Journaled` object, bound to the world's one
:class:`Journal`; values inside them are immutable (frozen structs, tuples,
strings). ``tests/actors/test_journal.py`` walks a live supervisor's parts and
refuses any other mutable state, so a new part cannot bring back a half-applied
command.

Three more things a handler touches are not plain memory:

- a reply future it claims (:func:`claim`): claiming is undone;
- a lock shared with a runner's thread (a turn's cancel lock, its handover
  ledger's): the transaction holds it (:meth:`Journal.hold`) from the first
  change until it is kept or rolled back, so no other thread ever sees a
  change that is then undone;
- a signal to another thread (a turn's cancellation): it is sent only once
  the transaction is kept (:meth:`Journal.on_keep`).

Fault injection: a test may arm :attr:`Journal.fault` to raise
:class:`InjectedFault` at the n-th change of the next command (of a kind it
names), which is how the state machine proves that any command failing at any
point leaves nothing behind. Supervisor thread only (the held locks excepted).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import enum
import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, SupportsIndex, TypeVar

import msgspec
import pykka

__all__ = [
    "FaultPlan",
    "InjectedFault",
    "JDeque",
    "JDict",
    "JList",
    "JSet",
    "Journal",
    "Journaled",
    "claim",
    "own_attribute",
    "snapshot",
]

log = logging.getLogger("retinue.supervisor")

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")
_MISSING: Any = object()

Undo = tuple[Callable[..., object], tuple[Any, ...]]


class InjectedFault(Exception):
    """The fault a test armed in the journal (see :attr:`Journal.fault`)."""


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Raise :class:`InjectedFault` at change number ``at`` (1 = the first) of the next
    command whose class name is in ``commands`` (empty: any command)."""

    at: int
    commands: frozenset[str] = frozenset()


class Journal:
    """The undo log of the command being served. Supervisor thread only.

    Attributes:
        active: a command is being served: changes are recorded.
        fault: a test's plan to fail the next matching command (None: none).
    """

    __slots__ = (
        "_append",
        "_held",
        "_keep",
        "_points",
        "_undo",
        "active",
        "armed",
        "fault",
        "log",
    )

    def __init__(self) -> None:
        """Start idle, with nothing recorded."""
        self._undo: list[Undo] = []
        self._append = self._undo.append  # made once: a bound method is a new object each time
        # log((undo, args)): record one change; a plain append unless a fault is armed.
        self.log: Callable[[Undo], None] = self._append
        self._keep: list[Callable[[], None]] = []
        self._held: list[Any] = []
        self._points = 0
        self.active = False
        self.armed = False  # the current command is the fault plan's target
        self.fault: FaultPlan | None = None

    def begin(self, command: str | None) -> None:
        """Start recording the changes of one command (its class name is ``command``;
        None: the supervisor's own repair, which no fault plan targets).

        With no fault plan set, its only work is ``active = True``: a command ends
        kept or rolled back, which leaves nothing recorded and ``armed`` False, and
        ``log`` records every change (the supervisor sets ``active`` itself then).
        """
        if self._undo or self._keep:  # kept and rolled-back commands leave both empty
            self._undo.clear()
            self._keep.clear()
        plan = self.fault
        if plan is None:  # nearly every command: no test's plan to match
            self.armed = False
            self.log = self._append
        else:
            self._points = 0
            self.armed = command is not None and (not plan.commands or command in plan.commands)
            self.log = self._log_armed if self.armed else self._append
        self.active = True

    def note(self, undo: Callable[..., object], *args: Any) -> None:
        """Record ``undo(*args)``, which reverses the change about to be made.

        Raises:
            InjectedFault: the armed fault plan's point is reached.
        """
        if self.active:
            self.log((undo, args))

    def _log_armed(self, entry: Undo) -> None:
        """Record a change of the command a fault plan targets; raise at its point."""
        self._points += 1
        plan = self.fault
        if plan is not None and self._points >= plan.at:
            self.fault = None
            self.armed = False
            self.log = self._append
            raise InjectedFault(f"fault injected at change {self._points}")
        self._undo.append(entry)

    def savepoint(self) -> int:
        """Return a mark :meth:`roll_back_to` can return to (for a refusal caught inside)."""
        return len(self._undo)

    def roll_back_to(self, mark: int) -> None:
        """Undo the changes made since ``mark``, newest first."""
        undo = self._undo
        while len(undo) > mark:
            fn, args = undo.pop()
            fn(*args)

    def hold(self, lock: Any) -> None:
        """Acquire ``lock`` (reentrant) until the command is kept or rolled back.

        Another thread that takes it meanwhile waits until then, so it never
        sees a change the command may still undo.
        """
        if not self.active:
            return
        if any(held is lock for held in self._held):
            return
        lock.acquire()
        self._held.append(lock)

    def on_keep(self, action: Callable[[], None]) -> None:
        """Run ``action()`` once the command is kept (at once when no command is served)."""
        if self.active:
            self._keep.append(action)
        else:
            action()

    def keep(self) -> None:
        """The command succeeded: forget its undo log, send its signals, release its locks."""
        self.active = False
        self.armed = False
        self._undo.clear()
        if not self._keep and not self._held:  # nearly every command: nothing to do
            return
        actions, self._keep = self._keep, []
        try:
            for action in actions:
                try:
                    action()
                except Exception:  # a signal that fails must not undo a kept command
                    log.exception("a signal of a kept supervisor command failed")
        finally:
            self._release()

    def roll_back(self) -> None:
        """The command failed: undo every change it made, newest first; release its locks."""
        self.active = False
        self.armed = False
        try:
            self.roll_back_to(0)
        finally:
            self._keep.clear()
            self._release()

    def _release(self) -> None:
        held, self._held = self._held, []
        for lock in reversed(held):
            lock.release()


class Journaled:
    """An object whose attribute assignments are journaled (a part's counters and flags).

    Subclasses set ``_journal`` (never journaled itself). Names in
    ``_unjournaled`` are not state but what a command gathers for the store
    (dropped, not undone, by a rollback); names in ``_config`` are what the
    part was built with (the store, the limits, the profiles), never changed
    by a command. :func:`snapshot` reads everything else as state.
    """

    _journal: Journal
    _unjournaled: frozenset[str] = frozenset()
    _config: frozenset[str] = frozenset()

    def __setattr__(self, name: str, value: Any) -> None:
        """Record the attribute's old value, then set it.

        It never reads ``__dict__`` (nor may anything on the hot path): see
        :func:`own_attribute`.
        """
        journal = getattr(self, "_journal", None)
        if journal is not None and journal.active and name not in self._unjournaled:
            journal.log((_reset_attribute, (self, name, own_attribute(self, name))))
        object.__setattr__(self, name, value)


# Per (class, name): whether the class (or a base) defines the name as what an instance
# attribute shadows (a default, a method; not a data descriptor: a property, a slot).
_shadowed: dict[tuple[type, str], bool] = {}


def _shadows(cls: type, name: str) -> bool:
    for klass in cls.__mro__:
        held = vars(klass).get(name, _MISSING)  # (a class's namespace, not an instance's)
        if held is not _MISSING:
            shadows = _shadowed[cls, name] = not hasattr(type(held), "__set__")
            return shadows
    _shadowed[cls, name] = False
    return False


def own_attribute(owner: object, name: str) -> Any:
    """Return ``owner``'s own attribute ``name`` (not its class's), or ``_MISSING``.

    Read with ``getattr``, not through ``owner.__dict__``: in CPython 3.11 an
    instance's attributes live in its class's shared inline values until
    something asks for its ``__dict__``, which turns them into a real dict for
    good, and every attribute read of that instance then misses the
    specializing interpreter (its ``LOAD_ATTR_WITH_HINT`` deoptimizes on such a
    dict at each read): about 170 slow reads per one-call turn on the
    supervisor, when every part's ``__dict__`` was asked for. Only a name its
    class also defines (a default, a method) is read from ``__dict__``, where
    ``getattr`` could not tell the instance's value from the class's (a data
    descriptor's, a property's or a slot's, is what ``getattr`` reads).
    """
    cls = type(owner)
    shadows = _shadowed.get((cls, name))
    if shadows is None:
        shadows = _shadows(cls, name)
    if shadows:
        return owner.__dict__.get(name, _MISSING)  # (never for a part's state)
    return getattr(owner, name, _MISSING)


def _reset_attribute(owner: object, name: str, old: Any) -> None:
    if old is _MISSING:  # __dict__.pop's work, without asking for the __dict__
        with contextlib.suppress(AttributeError):
            object.__delattr__(owner, name)
    else:
        object.__setattr__(owner, name, old)


def _restore_item(target: dict[Any, Any], key: Any, old: Any) -> None:
    if old is _MISSING:
        dict.pop(target, key, None)
    else:
        dict.__setitem__(target, key, old)


_set_new = dict.setdefault


def _refill_dict(target: dict[Any, Any], content: dict[Any, Any]) -> None:
    dict.clear(target)
    dict.update(target, content)


class JDict(dict[K, V]):
    """A dict whose changes are journaled.

    ``ordered``: its order means something (arrival, routing), so removing a
    key journals a copy of the dict (restored as it was, order included);
    otherwise an undone removal puts the key back at the end.
    """

    __slots__ = ("_journal", "_ordered")

    def __init__(self, journal: Journal, *args: Any, ordered: bool = False) -> None:
        """Create it bound to ``journal``, filled as ``dict(*args)`` would be."""
        if args:  # a new one is empty already
            dict.__init__(self, *args)
        self._journal = journal
        self._ordered = ordered

    def __setitem__(self, key: K, value: V) -> None:
        """Set ``key``, journaling its old value (or its absence)."""
        journal = self._journal
        if journal.active:
            old = dict.get(self, key, _MISSING)
            journal.log((_restore_item, (self, key, old)))
            if old is _MISSING:  # a new key: setdefault sets it (a method, where
                _set_new(self, key, value)  # dict.__setitem__ is a slot wrapper: 3x the cost)
                return
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: K) -> None:
        """Delete ``key`` (journaled)."""
        # The old value is journaled inline (no helper frame: every command removes something).
        journal = self._journal
        if journal.active and dict.__contains__(self, key):
            if self._ordered:
                journal.log((_refill_dict, (self, dict(self))))
            else:
                journal.log((dict.__setitem__, (self, key, dict.__getitem__(self, key))))
        dict.__delitem__(self, key)

    def pop(self, key: K, *default: Any) -> Any:
        """Remove and return ``key``'s value, or ``default`` (journaled)."""
        # Journaled inline, as in __delitem__; an absent key logs nothing (the supervisor
        # pops absent keys in most commands).
        journal = self._journal
        if journal.active and dict.__contains__(self, key):
            if self._ordered:
                journal.log((_refill_dict, (self, dict(self))))
            else:
                journal.log((dict.__setitem__, (self, key, dict.__getitem__(self, key))))
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[K, V]:
        """Remove and return the last item (journaled)."""
        journal = self._journal
        if journal.active and self:
            journal.log((_refill_dict, (self, dict(self))))
        return dict.popitem(self)

    def setdefault(self, key: K, default: V | None = None) -> V:
        """Return ``key``'s value, setting it to ``default`` first if absent (journaled)."""
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        self[key] = default  # type: ignore[assignment]
        return default  # type: ignore[return-value]

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Set every item of ``dict(*args, **kwargs)`` (journaled)."""
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def clear(self) -> None:
        """Remove everything (journaled)."""
        journal = self._journal
        if journal.active and self:
            journal.log((_refill_dict, (self, dict(self))))
        dict.clear(self)

    def __ior__(self, other: Any) -> JDict[K, V]:  # type: ignore[override,misc]
        """``|=`` as :meth:`update`."""
        self.update(other)
        return self

    def __reduce__(self) -> Any:
        """Pickle as a plain dict (a journal belongs to one supervisor)."""
        return (dict, (dict(self),))


def _set_add(target: set[Any], item: Any) -> None:
    set.add(target, item)


def _set_discard(target: set[Any], item: Any) -> None:
    set.discard(target, item)


def _refill_set(target: set[Any], content: frozenset[Any]) -> None:
    set.clear(target)
    set.update(target, content)


class JSet(set[T]):
    """A set whose changes are journaled."""

    __slots__ = ("_journal",)

    def __init__(self, journal: Journal, items: Iterable[T] = ()) -> None:
        """Create it bound to ``journal``, holding ``items``."""
        if items:  # a new one is empty already (and the supervisor makes one per command)
            set.__init__(self, items)
        self._journal = journal

    def add(self, item: T) -> None:
        """Add ``item`` (journaled)."""
        journal = self._journal
        if journal.active and not set.__contains__(self, item):
            journal.log((_set_discard, (self, item)))
        set.add(self, item)

    def discard(self, item: object) -> None:
        """Remove ``item`` if present (journaled)."""
        journal = self._journal
        if journal.active and set.__contains__(self, item):
            journal.log((_set_add, (self, item)))
        set.discard(self, item)

    def remove(self, item: T) -> None:
        """Remove ``item`` (journaled). Raises KeyError if absent."""
        journal = self._journal
        if journal.active and set.__contains__(self, item):
            journal.log((_set_add, (self, item)))
        set.remove(self, item)

    def pop(self) -> T:
        """Remove and return an arbitrary item (journaled). Raises KeyError if empty."""
        if not self:
            raise KeyError("pop from an empty set")
        item = next(iter(self))
        self.remove(item)
        return item

    def update(self, *others: Iterable[T]) -> None:
        """Add every item of ``others`` (journaled)."""
        for other in others:
            for item in other:
                self.add(item)

    def clear(self) -> None:
        """Remove everything (journaled)."""
        journal = self._journal
        if journal.active and self:
            journal.log((_refill_set, (self, frozenset(self))))
        set.clear(self)

    def __ior__(self, other: Any) -> JSet[T]:  # type: ignore[override,misc]
        """``|=`` as :meth:`update`."""
        self.update(other)
        return self

    def __isub__(self, other: Any) -> JSet[T]:  # type: ignore[misc]
        """``-=`` as a discard of each item."""
        for item in list(other):
            self.discard(item)
        return self

    def __reduce__(self) -> Any:
        """Pickle as a plain set."""
        return (set, (set(self),))


def _refill_list(target: list[Any], content: list[Any]) -> None:
    list.__setitem__(target, slice(None), content)


class JList(list[T]):
    """A list whose changes are journaled (small lists: a change may copy it)."""

    __slots__ = ("_journal",)

    def __init__(self, journal: Journal, items: Iterable[T] = ()) -> None:
        """Create it bound to ``journal``, holding ``items``."""
        if items:  # a new one is empty already (and the supervisor makes one per command)
            list.extend(self, items)  # list.__init__'s work here: a method, no slot wrapper
        self._journal = journal

    def _note(self) -> None:
        journal = self._journal
        if journal.active:
            journal.log((_refill_list, (self, list(self))))

    def append(self, item: T) -> None:
        """Append ``item`` (journaled)."""
        journal = self._journal
        if journal.active:
            journal.log((list.pop, (self,)))
        list.append(self, item)

    def extend(self, items: Iterable[T]) -> None:
        """Append every item (journaled)."""
        for item in items:
            self.append(item)

    def insert(self, index: SupportsIndex, item: T) -> None:
        """Insert ``item`` at ``index`` (journaled)."""
        self._note()
        list.insert(self, index, item)

    def pop(self, index: SupportsIndex = -1) -> T:
        """Remove and return the item at ``index`` (journaled)."""
        self._note()
        return list.pop(self, index)

    def remove(self, item: T) -> None:
        """Remove the first ``item`` (journaled)."""
        self._note()
        list.remove(self, item)

    def clear(self) -> None:
        """Remove everything (journaled)."""
        self._note()
        list.clear(self)

    def __setitem__(self, index: Any, value: Any) -> None:
        """Set an item or a slice (journaled)."""
        self._note()
        list.__setitem__(self, index, value)

    def __delitem__(self, index: Any) -> None:
        """Delete an item or a slice (journaled)."""
        self._note()
        list.__delitem__(self, index)

    def __iadd__(self, items: Iterable[T]) -> JList[T]:  # type: ignore[override,misc]
        """``+=`` as :meth:`extend`."""
        self.extend(items)
        return self

    def __reduce__(self) -> Any:
        """Pickle as a plain list."""
        return (list, (list(self),))


def _deque_insert(target: deque[Any], index: int, item: Any) -> None:
    deque.insert(target, index, item)


def _deque_set(target: deque[Any], index: int, item: Any) -> None:
    deque.__setitem__(target, index, item)


class JDeque(deque[T]):
    """A deque whose changes are journaled (each undo is exact and O(1) at the ends)."""

    def __init__(self, journal: Journal, items: Iterable[T] = ()) -> None:
        """Create it bound to ``journal``, holding ``items``."""
        deque.__init__(self, items)
        self._journal = journal

    def append(self, item: T) -> None:
        """Append on the right (journaled)."""
        journal = self._journal
        if journal.active:
            journal.log((deque.pop, (self,)))
        deque.append(self, item)

    def appendleft(self, item: T) -> None:
        """Append on the left (journaled)."""
        journal = self._journal
        if journal.active:
            journal.log((deque.popleft, (self,)))
        deque.appendleft(self, item)

    def popleft(self) -> T:
        """Remove and return the leftmost item (journaled)."""
        journal = self._journal
        if journal.active and self:
            journal.log((deque.appendleft, (self, self[0])))
        return deque.popleft(self)

    def pop(self) -> T:  # type: ignore[override]
        """Remove and return the rightmost item (journaled)."""
        journal = self._journal
        if journal.active and self:
            journal.log((deque.append, (self, self[-1])))
        return deque.pop(self)

    def remove(self, item: T) -> None:
        """Remove the first ``item`` (journaled). Raises ValueError if absent."""
        journal = self._journal
        if journal.active:
            journal.log((_deque_insert, (self, self.index(item), item)))
        deque.remove(self, item)

    def __setitem__(self, index: Any, item: T) -> None:  # type: ignore[override]
        """Replace the item at ``index`` (journaled)."""
        journal = self._journal
        if journal.active:
            position = index if index >= 0 else len(self) + index
            journal.log((_deque_set, (self, position, self[index])))
        deque.__setitem__(self, index, item)

    def extend(self, items: Iterable[T]) -> None:
        """Append every item on the right (journaled)."""
        for item in items:
            self.append(item)

    def clear(self) -> None:
        """Remove everything (journaled)."""
        journal = self._journal
        if journal.active and self:
            journal.log((deque.extend, (self, list(self))))
        deque.clear(self)

    def __reduce__(self) -> Any:
        """Pickle as a plain deque."""
        return (deque, (list(self),))


def _unclaim(future: Any, state: str) -> None:
    """Put a claimed future back in ``state`` (pending, or cancelled), under its own lock."""
    lock = getattr(future, "_lock", None) or getattr(future, "_condition", None)
    if lock is None:
        future._state = state
        return
    with lock:
        if future._state in ("RUNNING", "CANCELLED_AND_NOTIFIED"):
            future._state = state


def claim(journal: Journal, future: Any) -> bool:
    """Claim ``future`` for an answer, as ``set_running_or_notify_cancel`` (journaled).

    Returns False if it was cancelled (the cancel is acknowledged). A rolled
    back command leaves the future as it found it: pending, or cancelled.

    Raises:
        RuntimeError: it was claimed or answered already.
    """
    journal.note(_unclaim, future, future._state)
    claimed: bool = future.set_running_or_notify_cancel()
    return claimed


_SCALARS = (str, bytes, int, float, bool, type(None), enum.Enum)


def snapshot(value: Any, seen: set[int] | None = None) -> Any:
    """Return a deep, comparable picture of supervisor state (parts, containers, values).

    Two pictures taken before and after a rolled-back command are equal; the
    walk is also the rule every part's state obeys: anything mutable that is
    not journaled raises.

    Raises:
        TypeError: ``value`` holds mutable state the journal cannot undo.
    """
    seen = set() if seen is None else seen
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, JDict):
        items = [(key, snapshot(item, seen)) for key, item in dict.items(value)]
        return ("ordered", items) if value._ordered else ("dict", dict(items))
    if isinstance(value, JSet):
        return ("set", frozenset(set.__iter__(value)))
    if isinstance(value, JList | JDeque):
        return ("seq", [snapshot(item, seen) for item in value])
    if isinstance(value, tuple | frozenset):
        return (type(value).__name__, [snapshot(item, seen) for item in value])
    if isinstance(value, msgspec.Struct):
        if not type(value).__struct_config__.frozen:
            raise TypeError(f"{type(value).__name__} is a mutable struct held as state")
        return value
    if isinstance(value, concurrent.futures.Future):
        return ("future", id(value), value._state)
    if isinstance(value, pykka.ActorRef):
        return ("actor", id(value))
    if id(value) in seen:
        return ("seen", id(value))
    picture = getattr(value, "__journal_snapshot__", None)
    if picture is not None:
        seen.add(id(value))
        return ("object", type(value).__name__, id(value), picture())
    if isinstance(value, Journaled):
        seen.add(id(value))
        skip = {"_journal", *value._unjournaled, *value._config}
        fields = {k: snapshot(v, seen) for k, v in vars(value).items() if k not in skip}
        return ("part", type(value).__name__, fields)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if not type(value).__dataclass_params__.frozen:  # type: ignore[attr-defined]
            raise TypeError(f"{type(value).__name__} is a mutable dataclass held as state")
        seen.add(id(value))
        fields = {f.name: snapshot(getattr(value, f.name), seen) for f in dataclasses.fields(value)}
        return ("frozen", type(value).__name__, fields)
    if callable(value):
        return ("callable", id(value))
    raise TypeError(
        f"{type(value).__name__} is mutable state the journal cannot undo; hold it in a "
        "JDict, JSet, JList or JDeque, or as an attribute of a Journaled part"
    )
