"""``python -m stress.damage [--quick]``: the damage suite alone; ``--worker``: one worker child."""

import json
import sys
import tempfile
from pathlib import Path

from stress.damage import run
from stress.damage.worker import worker_main

if sys.argv[1:] == ["--worker"]:
    worker_main()
else:
    with tempfile.TemporaryDirectory() as tmp:
        result = run(Path(tmp), quick="--quick" in sys.argv, seed=1)
    print(json.dumps(result, indent=2))
