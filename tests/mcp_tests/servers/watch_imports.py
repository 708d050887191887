"""Run ``retinue ARGS...`` with an audit hook that notes litellm's import in $IMPORT_LOG.

The line ``import litellm`` is appended to the log when the process first
imports litellm, so a test that appends its own lines to the same log learns
what happened first.
"""

from __future__ import annotations

import os
import sys
from typing import Any

LOG = os.environ["IMPORT_LOG"]
_seen: list[bool] = []


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "import" and args and args[0] == "litellm" and not _seen:
        _seen.append(True)
        with open(LOG, "a", encoding="utf-8") as log:
            log.write("import litellm\n")


sys.addaudithook(_hook)

from retinue.cli import main  # noqa: E402 (after the hook: every import is seen)

sys.exit(main(sys.argv[1:]))
