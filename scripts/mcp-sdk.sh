#!/usr/bin/env bash
# Runs Python with the official MCP SDK (PyPI mcp) from a venv of its own:
#
#   scripts/mcp-sdk.sh Tests/Fixtures/agents/mcp_check.py …
#
# Installs the versions pinned in scripts/mcp-sdk-requirements.txt into .local/mcp-sdk on first
# use (and again whenever the pins change); later runs are offline. Environment:
#   PYTHON   the interpreter that creates the venv (default python3; on Debian the python3-venv
#            package, installed by scripts/install-deps.sh --test)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
requirements="$root/scripts/mcp-sdk-requirements.txt"
# venv: .local/mcp-sdk with exactly these pins
source "$root/scripts/pinned-venv.sh"
pinned_venv mcp-sdk "$requirements"
exec "$venv/bin/python" "$@"
