#!/usr/bin/env bash
# Runs scripts of scripts/bench/ on their own: starts a throwaway PostgreSQL and the
# upstream simulator (as scripts/bench.sh does), sets the environment they expect
# (BIN, DATABASE_URL, PSQL, SIM_PORT, KEYS, TMP) and runs them one after the other.
#
#   scripts/bench/standalone.sh                      # scale.sh refresh_storm.py propagation.py (registration_costs.py, broker_ops.py, refresh_ahead.py: name them)
#   scripts/bench/standalone.sh propagation.py       # just one
#
# Uses the release binaries in BIN, or in `swift build -c release --static-swift-stdlib --show-bin-path`
# (build them first: swift build -c release --static-swift-stdlib --product parley; … --product
# upstream-simulator).
# Exits non-zero when a script fails.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bench_name=standalone
# shellcheck source=common.sh
. "$here/common.sh"

scripts=("$@")
[ "${#scripts[@]}" -gt 0 ] || scripts=(scale.sh refresh_storm.py propagation.py)

BIN="${BIN:-$(cd "$here/../.." && swift build -c release --static-swift-stdlib --show-bin-path)}"
[ -x "$BIN/parley" ] && [ -x "$BIN/upstream-simulator" ] || die "release binaries missing in $BIN"

tmp="$(mktemp -d /tmp/parley-bench-extra.XXXXXX)"
pg_bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
pg_data="$tmp/postgres"
as_pg=""
sim_pid=""
cleanup() {
  local rc=$?
  set +e
  if [ -n "$sim_pid" ]; then kill "$sim_pid" 2>/dev/null; wait "$sim_pid" 2>/dev/null; fi
  [ -f "$pg_data/postmaster.pid" ] && $as_pg "$pg_bin/pg_ctl" -D "$pg_data" -m fast stop >/dev/null 2>&1
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

read -r pg_port sim_port < <(free_ports 2)
start_postgres "$tmp" "$pg_port"

"$BIN/upstream-simulator" --host 127.0.0.1 --port "$sim_port" >"$tmp/simulator.log" 2>&1 &
sim_pid=$!
wait_http_200 "http://127.0.0.1:$sim_port/echo/ready" 20 || { cat "$tmp/simulator.log" >&2; die "the simulator did not answer"; }

export BIN
export DATABASE_URL="host=127.0.0.1 port=$pg_port user=parley dbname=postgres"
export PSQL="$pg_bin/psql -X -A -t -h 127.0.0.1 -p $pg_port -U parley -d postgres"
export SIM_PORT="$sim_port"
export KEYS="k1:$(openssl rand -base64 32)"
export TMP="$tmp"
for s in "${scripts[@]}"; do
  case "$s" in */*) ;; *) s="$here/$s" ;; esac
  "$s"
done
