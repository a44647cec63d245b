# Sourced by the scripts that run a Python tool from PyPI (httplint.sh, deploy-tools.sh).
#
#   pinned_venv NAME REQUIREMENTS   sets `venv` to .local/NAME, a venv holding exactly the pins of
#                                   REQUIREMENTS: made on first use, reinstalled whenever the pins
#                                   change (a copy of the file in the venv says which it holds).
# PYTHON names the interpreter that creates the venv (default python3; on Debian the
# python3-venv package, installed by scripts/install-deps.sh --test).
pinned_venv() {
  local name="$1" requirements="$2"
  local caller python stamp
  caller="$(basename "$0")"
  python="${PYTHON:-python3}"
  venv="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.local/$name"
  stamp="$venv/.requirements"
  cmp -s "$requirements" "$stamp" 2>/dev/null && return 0
  echo "$caller: installing $(grep -v '^#' "$requirements" | tr '\n' ' ')into $venv" >&2
  if ! "$venv/bin/python" -c '' 2>/dev/null; then
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    if ! "$python" -m venv "$venv"; then
      echo "$caller: '$python -m venv' failed (on Debian: apt-get install python3-venv)" >&2
      rm -rf "$venv"
      return 1
    fi
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
  cp "$requirements" "$stamp"
}
