#!/usr/bin/env bash
# Runs Python with Authlib (PyPI) from a venv of its own, for the RFC 7523 authorization server
# of the propagation tests:
#
#   scripts/authlib-as.sh Tests/Fixtures/propagation/authlib_as.py --port … 
#   scripts/authlib-as.sh -c 'import authlib'        # installs the venv, then checks it
#
# Installs the versions pinned in scripts/authlib-as-requirements.txt into .local/authlib-as on
# first use (and again whenever the pins change); later runs are offline. Debian's
# python3-authlib is older (1.2 on bookworm) and has another JWT bearer API. Environment:
#   PYTHON   the interpreter that creates the venv (default python3; on Debian the python3-venv
#            package, installed by scripts/install-deps.sh --test)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
requirements="$root/scripts/authlib-as-requirements.txt"
# venv: .local/authlib-as with exactly these pins
source "$root/scripts/pinned-venv.sh"
pinned_venv authlib-as "$requirements"
exec "$venv/bin/python" "$@"
