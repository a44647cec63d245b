# Helpers shared by scripts/bench.sh and the scripts in scripts/bench/ (sourced, not run).
#
# The scripts here take their set-up from the environment (scripts/bench.sh already has
# every value; scripts/bench/standalone.sh makes them when run alone):
#   BIN           release bin dir holding `parley` and `upstream-simulator`
#   DATABASE_URL  libpq conninfo of a PostgreSQL the scripts may fill
#   PSQL          a psql command line for that database, e.g. "psql -X -A -t -h … -p … -U parley -d postgres"
#   SIM_PORT      port of a running upstream simulator on 127.0.0.1
#   KEYS          PARLEY_ENCRYPTION_KEYS for the Parley instances they start
#   TMP           a directory for their configuration and logs

say() { printf '%s\n' "$*"; }
die() { printf '%s: FAILED: %s\n' "${bench_name:-bench}" "$*" >&2; exit 1; }
now_ns() { date +%s%N; }

# N distinct free loopback ports (all held open until every one is chosen).
free_ports() {
  python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

# Polls $1 until it answers 200, at most $2 seconds; 10 ms between tries.
wait_http_200() {
  local url="$1" limit_ns=$(( $(now_ns) + $2 * 1000000000 ))
  while [ "$(now_ns)" -lt "$limit_ns" ]; do
    [ "$(curl -s -o /dev/null -m 1 -w '%{http_code}' "$url" 2>/dev/null || true)" = "200" ] && return 0
    sleep 0.01
  done
  return 1
}

# ---------------------------------------------------------------- PostgreSQL
# start_postgres DIR PORT — a throwaway cluster in DIR/postgres on 127.0.0.1:PORT (as root, run
# as `postgres`: DIR is opened to it), with pg_stat_statements loaded (registration_costs.py
# counts statements with it). Sets pg_bin, pg_data and as_pg, with which the caller's
# clean-up stops it (`$as_pg "$pg_bin/pg_ctl" -D "$pg_data" -m fast stop`).
start_postgres() {
  local dir="$1" port="$2"
  pg_bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
  pg_data="$dir/postgres"
  as_pg=""
  if [ "$(id -u)" -eq 0 ]; then
    as_pg="runuser -u postgres --"
    chmod 711 "$dir"
    mkdir -p "$pg_data" && chown postgres "$pg_data"
  fi
  $as_pg "$pg_bin/initdb" -D "$pg_data" -U parley -A trust >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; die "initdb"; }
  $as_pg "$pg_bin/pg_ctl" -D "$pg_data" -l "$pg_data/server.log" -w \
    -o "-p $port -k $pg_data -c listen_addresses=127.0.0.1 -c shared_preload_libraries=pg_stat_statements" start >/dev/null \
    || die "PostgreSQL did not start"
}

# Fails with the name of every variable of the interface that is missing.
require_bench_env() {
  local missing=() v
  for v in BIN DATABASE_URL PSQL SIM_PORT KEYS TMP; do [ -n "${!v:-}" ] || missing+=("$v"); done
  [ "${#missing[@]}" -eq 0 ] || die "missing environment: ${missing[*]} (see scripts/bench/common.sh)"
  [ -x "$BIN/parley" ] || die "no parley binary in BIN=$BIN"
}

# psql_value SQL — one value (or rows, '|'-separated) from the database.
psql_value() { $PSQL -v ON_ERROR_STOP=1 -c "$1"; }

# ---------------------------------------------------------------- Parley instances
# start_parley_instance PORT DESTINATIONS_FILE LOG — starts `parley serve` in the background,
# waits for /readyz 200 (30 s at most) and records its pid for stop_parley_instances.
# Other PARLEY_* variables of the caller's environment reach the instance.
parley_instance_pids=()
start_parley_instance() {
  local port="$1" destinations="$2" log="$3" pid
  PARLEY_DATABASE_URL="$DATABASE_URL" PARLEY_ENCRYPTION_KEYS="$KEYS" PARLEY_DESTINATIONS="$destinations" \
    PARLEY_LOG_LEVEL=warning PARLEY_LISTEN="127.0.0.1:$port" PARLEY_RATE_LIMIT_PROXY=off \
    PARLEY_RATE_LIMIT_REGISTRATIONS=off PARLEY_RATE_LIMIT_TOKEN_CALLS=off \
    "$BIN/parley" serve >"$log" 2>&1 &
  pid=$!
  parley_instance_pids+=("$pid")
  if ! wait_http_200 "http://127.0.0.1:$port/readyz" 30; then
    tail -20 "$log" >&2
    die "Parley on port $port did not become ready within 30 s"
  fi
  last_parley_pid="$pid"
}

# SIGTERM to every instance started here, then SIGKILL after 10 s.
stop_parley_instances() {
  local p
  for p in "${parley_instance_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${parley_instance_pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  parley_instance_pids=()
}

# ---------------------------------------------------------------- CPU accounting (from /proc)
# CPU clock ticks (user+system) used so far by a set of processes.
cpu_ticks() {
  local total=0 p t
  for p in "$@"; do
    t="$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)"
    total=$(( total + t ))
  done
  echo "$total"
}
# Busy and total clock ticks of the whole machine (all cores).
machine_ticks() {
  awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat
}
# Process ids of the PostgreSQL backends serving clients right now (from pg_stat_activity).
pg_backend_pids() { psql_value "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()" | tr '\n' ' '; }

# wrk's "1.23ms" / "456.00us" / "1.20s" → milliseconds.
to_ms() {
  awk -v v="$1" 'BEGIN {
    if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
    else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.3f", v }
    else if (v ~ /m$/) { sub(/m$/, "", v); printf "%.3f", v * 60000 }
    else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.3f", v * 1000 }
    else { printf "nan" } }'
}
