#!/usr/bin/env bash
# Runs Python with one of the test peers' PyPI packages, from a venv of its own:
#
#   scripts/peer-python.sh mcp-sdk Tests/Fixtures/agents/mcp_check.py …        # the official MCP SDK
#   scripts/peer-python.sh authlib-as Tests/Fixtures/propagation/authlib_as.py …  # Authlib's RFC 7523 server
#   scripts/peer-python.sh dot-as Tests/Fixtures/lifecycle/dot_as.py …        # django-oauth-toolkit's server
#   scripts/peer-python.sh webhooks Tests/Fixtures/lifecycle/webhook_receiver.py …  # Standard Webhooks' verifier
#   scripts/peer-python.sh authlib-as -c 'import authlib'   # installs the venv, then checks it
#
# Installs the versions pinned in scripts/<name>-requirements.txt into .local/<name> on first
# use (and again whenever the pins change); later runs are offline. (Debian's python3-authlib
# is older, 1.2 on bookworm, with another JWT bearer API.) Environment:
#   PYTHON   the interpreter that creates the venv (default python3; on Debian the python3-venv
#            package, installed by scripts/install-deps.sh --test)
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 <mcp-sdk|authlib-as|dot-as|webhooks> [python arguments…]" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
name="$1"
shift
case "$name" in
  mcp-sdk | authlib-as | dot-as | webhooks) ;;
  *) echo "peer-python.sh: unknown peer '$name' (mcp-sdk, authlib-as, dot-as, webhooks)" >&2; exit 2 ;;
esac
# venv: .local/<name> with exactly the pins of scripts/<name>-requirements.txt
source "$root/scripts/pinned-venv.sh"
pinned_venv "$name" "$root/scripts/$name-requirements.txt"
exec "$venv/bin/python" "$@"
