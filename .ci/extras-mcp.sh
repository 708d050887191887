#!/usr/bin/env bash
# Installs what the MCP tests need on a fresh machine (idempotent): the mcp extra and
# mcp-server-time into .venv, and the npm servers into .mcp-npm/ (git-ignored), pinned.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || ./dev setup
.venv/bin/python -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    -e '.[mcp]' 'mcp-server-time==2026.10.19'
if command -v npm >/dev/null 2>&1; then
    want='"@modelcontextprotocol/server-filesystem": "2026.8.31"'
    if ! grep -q "$want" .mcp-npm/package.json 2>/dev/null || [ ! -x .mcp-npm/node_modules/.bin/mcp-server-filesystem ]; then
        mkdir -p .mcp-npm
        npm install --silent --no-audit --no-fund --save-exact --prefix .mcp-npm \
            @modelcontextprotocol/server-filesystem@2026.8.31 \
            @modelcontextprotocol/server-everything@2026.8.31
    fi
else
    echo "extras-mcp: npm not found; the server-filesystem test will skip" >&2
fi
