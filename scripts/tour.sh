#!/usr/bin/env bash
# `make tour`: the demo's whole walk-through driven in headless Chromium (scripts/tour.py), one
# line per step, with axe-core on every kind of Parley's hosted page in light and dark.
#
#   scripts/tour.sh                              # debug binaries (run.sh builds them)
#   scripts/tour.sh --screenshots docs/screenshots
#   PARLEY_BINARY=… PARLEY_SIMULATOR_BINARY=… scripts/tour.sh   # these binaries, no build
#
# Installs the demo's packages, Chromium, its driver and python3-venv when missing (Debian:
# scripts/install-deps.sh --tour), and Selenium with
# axe-selenium-python (scripts/tour-requirements.txt) into .local/tour. The demo runs on free
# ports in a temporary folder (--demo-dir DIR to choose it). Exit status 0 only when every step
# passed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

"$root/scripts/install-deps.sh" --tour

source "$root/scripts/pinned-venv.sh"
pinned_venv tour "$root/scripts/tour-requirements.txt"
exec "$venv/bin/python" "$root/scripts/tour.py" "$@"
