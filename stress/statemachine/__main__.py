"""``python -m stress.statemachine``: the long, seeded search."""

import contextlib
import sys

from stress.statemachine import _main

with contextlib.suppress(KeyboardInterrupt):
    sys.exit(_main())
