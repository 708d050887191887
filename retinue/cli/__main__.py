"""``python -m retinue.cli``."""

import sys

from retinue.cli.main import main

sys.exit(main())
