#!/usr/bin/env bash
# The Ray step of CI (retinue.cluster): installs the 'ray' extra and strace, then runs the
# cluster tests and the quick cluster stress check (strace network check, benchmark, a few
# SIGKILL rounds; then provider limits held across two shards, ~60 s) as one step of their
# own, inside a network namespace that has only loopback, under a time bound
# (RETINUE_RAY_CI_BOUND_S, default 480 s: the step took 246 s on a loaded machine). Everything is installed before entering the
# namespace: nothing in it can reach the network.
# The tests and the stress check run at once (each with a Ray of its own): the step
# waits on process starts more than it computes, so together they take ~190 s where
# one after the other took ~260 s on a shared 2-core machine (CONTRIBUTING.md, Ray).
# The stress check's output is printed after the tests'.
set -euo pipefail
cd "$(dirname "$0")/.."
./dev setup
VENV="${RETINUE_VENV:-.venv}"
BOUND="${RETINUE_RAY_CI_BOUND_S:-480}"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    -e '.[dev,ray]'
if [ "$(id -u)" = 0 ]; then SUDO=""; NETNS=(unshare -n); else SUDO="sudo"; NETNS=(unshare -rn); fi
if ! command -v strace >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq strace iproute2 >/dev/null
fi
export LITELLM_LOCAL_MODEL_COST_MAP=True
started=$(date +%s)
STEP='
log=$(mktemp)
{ "$1/bin/python" -m stress --only cluster --quick &&
    "$1/bin/python" -m stress --only cluster_rate_limits; } >"$log" 2>&1 &
stress=$!
"$1/bin/python" -m pytest tests/cluster tests/actors/test_leases.py -q -p no:cacheprovider
tests=$?
wait "$stress"
checks=$?
cat "$log"
rm -f "$log"
[ "$tests" = 0 ] && [ "$checks" = 0 ]'
"${NETNS[@]}" sh -c 'ip link set lo up && exec timeout --kill-after=10 "$1" sh -c "$3" step "$2"' \
    sh "$BOUND" "$VENV" "$STEP"
echo "extras-ray: the Ray step took $(( $(date +%s) - started )) s (bound ${BOUND} s)"
