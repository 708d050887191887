#!/usr/bin/env bash
# Installs the benchmarks' peers (the 'bench' extra: AutoGen core, DBOS Transact, LangGraph
# with its SQLite checkpointer) into ./dev's virtual environment, idempotently, so that CI runs
# tests/test_durable_steps.py's DBOS and LangGraph contenders and `python -m stress --quick`
# measures AutoGen beside lifecycles and trees. Without it those say "not installed" or skip,
# saying why. Run it after ./dev setup (it runs that first itself).
set -euo pipefail
cd "$(dirname "$0")/.."
./dev setup
VENV="${RETINUE_VENV:-.venv}"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    -e '.[dev,bench]'
"$VENV/bin/python" -c "import autogen_core, dbos, langgraph.checkpoint.sqlite; print('extras-bench: autogen-core, dbos and langgraph installed')"
