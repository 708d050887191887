#!/usr/bin/env bash
# The Ray step of CI (retinue.cluster): installs the 'ray' extra and strace, then runs the
# cluster tests and the quick cluster stress check (strace network check, benchmark, a few
# SIGKILL rounds) as one step of their own, inside a network namespace that has only
# loopback, under a time bound (RETINUE_RAY_CI_BOUND_S, default 300 s). Everything is
# installed before entering the namespace: nothing in it can reach the network.
set -euo pipefail
cd "$(dirname "$0")/.."
./dev setup
VENV="${RETINUE_VENV:-.venv}"
BOUND="${RETINUE_RAY_CI_BOUND_S:-300}"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    -e '.[dev,ray]'
if [ "$(id -u)" = 0 ]; then SUDO=""; NETNS=(unshare -n); else SUDO="sudo"; NETNS=(unshare -rn); fi
if ! command -v strace >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq strace iproute2 >/dev/null
fi
export LITELLM_LOCAL_MODEL_COST_MAP=True
started=$(date +%s)
"${NETNS[@]}" sh -c '
    ip link set lo up &&
    exec timeout --kill-after=10 "$1" sh -c "
        \"$2/bin/python\" -m pytest tests/cluster tests/actors/test_leases.py -q -p no:cacheprovider &&
        \"$2/bin/python\" -m stress --only cluster --quick"
' sh "$BOUND" "$VENV"
echo "extras-ray: the Ray step took $(( $(date +%s) - started )) s (bound ${BOUND} s)"
