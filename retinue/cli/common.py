"""What every command shares: exit codes, the store option, opening a store, loading a team."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retinue.errors import StoreLocked

if TYPE_CHECKING:
    from retinue.runtime import Runtime
    from retinue.team import Team

__all__ = [
    "DEFAULT_STORE",
    "FAILED",
    "INTERRUPTED",
    "OK",
    "RUN_FILE",
    "STORE_ENV",
    "USAGE",
    "UsageError",
    "load_team_file",
    "open_store",
    "reader",
    "store_help",
    "store_path",
]

OK, FAILED, USAGE, INTERRUPTED = 0, 1, 2, 130
"""The exit codes: completed, an agent failed, a usage or input error, interrupted."""

STORE_ENV = "RETINUE_STORE"
DEFAULT_STORE = "retinue-store"
RUN_FILE = "retinue-run.json"
"""Written next to a store by ``run``: which team (and model) ``resume`` needs."""


class UsageError(Exception):
    """A one-line input problem of the command line itself (exit code 2)."""


def store_help() -> str:
    """The help text of every command's ``--store``."""
    return f"store folder (default: ${STORE_ENV}, else ./{DEFAULT_STORE})"


def store_path(value: str | None, *, must_exist: bool) -> Path:
    """Return the store folder named by ``--store``, ``$RETINUE_STORE`` or the default.

    Raises:
        UsageError: the path is a file, or (``must_exist``) holds no store.
    """
    path = Path(value or os.environ.get(STORE_ENV) or DEFAULT_STORE)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--store {path} is a file; a store is a folder (give a folder path)")
    # A folder whose marker survives its data file is a damaged store: let the open say so.
    if must_exist and not (path / "data.mdb").is_file() and not (path / "retinue.json").exists():
        raise UsageError(
            f"no retinue store at {path} (start one with 'retinue run', or pass --store DIR)"
        )
    return path


def open_store(path: Path, **kwargs: Any) -> Runtime:
    """Open the store at ``path`` for writing, with a usage error when another process holds it.

    Raises:
        UsageError: the store is in use, or ``path`` is not a folder.
    """
    from retinue.runtime import Runtime

    try:
        return Runtime.open(path, **kwargs)
    except StoreLocked as exc:
        holder = f"process {exc.pid}" if exc.pid is not None else "another process"
        raise UsageError(
            f"store {path} is in use by {holder}; wait for it to finish or stop it "
            f"('retinue tree --store {path}' and 'retinue inspect' can read it meanwhile)"
        ) from None
    except FileExistsError:
        raise UsageError(f"--store {path} is not a folder") from None


def reader(store: Path) -> Runtime:
    """Open ``store`` read-only (safe beside its writer in another process)."""
    from retinue.runtime import Runtime

    return Runtime.open(store, readonly=True)


def load_team_file(team_file: str, model: str | None) -> Team:
    """Load a team file, every agent put on ``model`` when one is given.

    Raises:
        TeamFileError: the file is unusable.
    """
    from retinue.team import load_team

    team = load_team(team_file)
    return team.with_model(model) if model else team
