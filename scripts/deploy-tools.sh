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
venv="$root/.local/deploy-tools"
stamp="$venv/.requirements"
python="${PYTHON:-python3}"

if ! cmp -s "$requirements" "$stamp" 2>/dev/null; then
  echo "deploy-tools.sh: installing $(grep -v '^#' "$requirements" | tr '\n' ' ')into $venv" >&2
  if ! "$venv/bin/python" -c '' 2>/dev/null; then
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    if ! "$python" -m venv "$venv"; then
      echo "deploy-tools.sh: '$python -m venv' failed (on Debian: apt-get install python3-venv)" >&2
      rm -rf "$venv"
      exit 1
    fi
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
  cp "$requirements" "$stamp"
fi

tool="$1"
shift
case "$tool" in
  kubernetes-validate | hadolint | python) exec "$venv/bin/$tool" "$@" ;;
  *)
    echo "deploy-tools.sh: unknown tool '$tool' (kubernetes-validate, hadolint, python)" >&2
    exit 2
    ;;
esac
