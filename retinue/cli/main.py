"""``retinue``: parse the command line, run the command, turn every error into one line."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence

from retinue.cli.common import FAILED, INTERRUPTED, USAGE, UsageError
from retinue.cli.parser import build_parser
from retinue.cli.render import clip
from retinue.errors import RetinueError, TeamFileError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``retinue`` command; return its exit code (0, 1, 2 or 130)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = bool(getattr(args, "debug", False))
    handler: Callable[[argparse.Namespace], int] = args.handler
    if sys.stdout is None:  # started with its standard output closed (retinue tree >&-)
        print(
            "retinue: standard output is closed; redirect it (to a file, or /dev/null)",
            file=sys.stderr,
        )
        return USAGE
    try:
        return handler(args)
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print("\nretinue: interrupted", file=sys.stderr)
        return INTERRUPTED
    except (UsageError, TeamFileError) as exc:
        if debug:
            traceback.print_exc()
        print(f"retinue: {exc}", file=sys.stderr)
        return USAGE
    except RetinueError as exc:
        if debug:
            traceback.print_exc()
        print(f"retinue: {type(exc).__name__}: {exc}", file=sys.stderr)
        return USAGE
    except BrokenPipeError:  # the reader of our output went away (| head): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return FAILED
    except OSError as exc:
        if debug:
            traceback.print_exc()
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"retinue: {exc.strerror or exc}{where}", file=sys.stderr)
        return USAGE
    except Exception as exc:
        if debug:
            raise
        print(
            f"retinue: internal error: {type(exc).__name__}: {clip(str(exc), 300)} "
            "(rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return FAILED
