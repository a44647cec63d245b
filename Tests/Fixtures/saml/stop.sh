#!/usr/bin/env bash
# Stops the IdP and SP that start.sh <workdir> started (PIDs from <workdir>/pids).
#   stop.sh <workdir>
set -uo pipefail

[ $# -eq 1 ] || { echo "usage: $0 <workdir>" >&2; exit 2; }
pidfile="$1/pids"
[ -f "$pidfile" ] || exit 0

pids=()
while IFS='=' read -r name pid; do
  case "$name" in IDP_PID|SP_PID) ;; *) continue ;; esac
  [[ "$pid" =~ ^[0-9]+$ ]] || continue
  # Only our own servers: guard against a recycled PID.
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || continue
  case "$cmd" in *"php -S 127.0.0.1:"*|*"/sp.py --port "*) pids+=("$pid") ;; esac
done <"$pidfile"

for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for _ in $(seq 50); do
  alive=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
  [ $alive -eq 0 ] && break
  sleep 0.1
done
for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
rm -f "$pidfile"
exit 0
