"""An agent's ``runner`` key: its form, where it points, and importing it (or not).

A key is ``module:function`` (a dotted module on the import path) or
``file.py:function`` (a file, relative to the team file). :func:`locate_runner`
checks it without running any of the user's code: the form, then that the
module is found where Python's import system would look (its finders, not its
code) or that the file exists. :func:`import_runner` runs the same checks,
then imports. :func:`stand_in` is the runner a profile gets when the file is
only checked (``Team.check()``, ``retinue validate`` without
``--import-runners``).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any, NamedTuple

from retinue.actors.turns import Runner
from retinue.errors import ConfigurationError, TeamFileError

__all__ = ["RunnerTarget", "import_runner", "locate_runner", "stand_in"]


class RunnerTarget(NamedTuple):
    """A checked ``runner`` key: the module (or the file) and the function's name."""

    module: str
    """A dotted module name; empty when ``file`` is set."""
    file: Path | None
    """The runner's file (``file.py:function``), resolved against the team file's folder."""
    attribute: str


def locate_runner(label: str, table: str, target: str, source: Path | None) -> RunnerTarget:
    """Check a ``runner`` key's form and that what it names exists, importing nothing.

    Raises:
        TeamFileError: ``target`` is not ``module:function`` (the function a
            Python name), its file does not exist, or its module is not found.
    """
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise TeamFileError(label, table, "runner", f"{target!r} is not 'module:function'")
    if not attribute.isidentifier():
        raise TeamFileError(
            label, table, "runner", f"{target!r}: {attribute!r} is not a Python name"
        )
    if module_name.endswith(".py"):
        file = Path(module_name)
        if not file.is_absolute() and source is not None:
            file = source.parent / file
        if not file.is_file():
            raise TeamFileError(label, table, "runner", f"cannot import {target!r}: no file {file}")
        return RunnerTarget("", file, attribute)
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise TeamFileError(
            label, table, "runner", f"{target!r}: {module_name!r} is not a module name"
        )
    missing = _missing_module(module_name)
    if missing is not None:
        raise TeamFileError(
            label, table, "runner", f"cannot import {target!r}: no module named {missing!r}"
        )
    return RunnerTarget(module_name, None, attribute)


def _missing_module(dotted: str) -> str | None:
    """Return the first part of ``dotted`` the import system cannot find (None: all found).

    Each package is searched as ``import`` would search it (``sys.meta_path``
    with the parent's ``__path__``), but no module's code runs. A module
    already imported counts as found (``os.path`` too).
    """
    parts = dotted.split(".")
    path: list[str] | None = None
    for index in range(len(parts)):
        name = ".".join(parts[: index + 1])
        loaded = sys.modules.get(name)
        if loaded is not None:
            locations = getattr(loaded, "__path__", None)
        else:
            if index and path is None:
                return name  # its parent is not a package: nothing lies under it
            spec = _find(name, path)
            if spec is None:
                return name
            locations = spec.submodule_search_locations
        path = None if locations is None else list(locations)
    return None


def _find(name: str, path: list[str] | None) -> ModuleSpec | None:
    """Ask the import system's finders for ``name`` (under ``path``), running no module."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, path, None)
        except (ImportError, ValueError):
            continue
        if spec is not None:
            return spec  # type: ignore[no-any-return]
    return None


def import_runner(label: str, table: str, target: str, source: Path | None) -> Runner:
    """Import ``module:function`` or ``file.py:function`` (relative to the team file).

    The key is checked first as :func:`locate_runner` checks it (so a key that
    names nothing fails with the same words, imported or not).

    Raises:
        TeamFileError: as :func:`locate_runner`; the module does not import;
            the function is missing or not callable.
    """
    where = locate_runner(label, table, target, source)
    try:
        if where.file is not None:
            spec = importlib.util.spec_from_file_location(
                f"_retinue_team_{where.file.stem}", where.file
            )
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {where.file}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where.module)
        found = getattr(module, where.attribute)
    except Exception as exc:
        raise TeamFileError(
            label, table, "runner", f"cannot import {target!r}: {type(exc).__name__}: {exc}"
        ) from None
    if not callable(found):
        raise TeamFileError(label, table, "runner", f"{target!r} is not callable")
    runner: Runner = found
    return runner


def stand_in(target: str) -> Runner:
    """Return the runner a profile gets for a ``runner`` key that was checked, not imported.

    It is for checks only: called, it raises ``ConfigurationError``.
    """

    def not_imported(turn: Any) -> str:
        raise ConfigurationError(
            f"runner {target!r} was checked, not imported: this profile is for checks only "
            "(Team.check(import_runners=True) imports runners)"
        )

    return not_imported
