"""``NoPublicConstructor``: a metaclass for classes only the runtime may instantiate.

The pattern is trio's (``trio._util.NoPublicConstructor``): calling the class
raises :class:`TypeError`, and the runtime makes instances through the private
classmethod ``_create``. :class:`~retinue.actors.turns._turn.Turn` uses it: a
turn is made by the supervisor for each run of a runner, never by hand.
"""

from __future__ import annotations

from typing import Any, NoReturn, TypeVar

__all__ = ["NoPublicConstructor"]

T = TypeVar("T")


class NoPublicConstructor(type):
    """A metaclass whose classes cannot be called; ``cls._create(...)`` makes an instance.

    A class may name the supported way in a class attribute ``_no_constructor``
    (the text the :class:`TypeError` ends with).
    """

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        """Refuse to make an instance.

        Raises:
            TypeError: always; it names the class and the supported way.
        """
        how = getattr(cls, "_no_constructor", "")
        raise TypeError(
            f"{cls.__qualname__} has no public constructor" + (f": {how}" if how else "")
        )

    def _create(cls: type[T], *args: Any, **kwargs: Any) -> T:
        """Make an instance (the runtime's way; user code calls nothing here)."""
        return super().__call__(*args, **kwargs)  # type: ignore[misc,no-any-return]
