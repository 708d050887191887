#!/usr/bin/env bash
# Installs what the web view's and the metrics' tests need on a fresh machine, idempotently:
# Debian's chromium (for the browser test; playwright's own browser download does not work
# here) and the 'web' and 'metrics' extras plus playwright, into ./dev's virtual environment.
# Run it after ./dev setup (it runs that first itself). Without it those tests skip, saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
./dev setup
VENV="${RETINUE_VENV:-.venv}"
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    -e '.[dev,web,metrics]' playwright==1.65.2
# playwright drives /usr/bin/chromium (executable_path); check they talk to each other.
"$VENV/bin/python" - <<'PY'
from playwright.sync_api import sync_playwright

with sync_playwright() as pw:
    browser = pw.chromium.launch(
        executable_path="/usr/bin/chromium",
        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run"],
    )
    print(f"extras-web: chromium {browser.version} driven by playwright")
    browser.close()
PY
