#!/usr/bin/env bash
# Scale: proxied p99 with 1,000,000 registrations in the database (10,000 of them active
# in the run) against the figure with 1,000 (target: within 1.1× in every one of SCALE_RUNS
# runs, by default 3).
#
# Destination `bench` (no auth) → the simulator's /echo/bench. Every measured run has a
# Parley instance of its own, started for it (empty caches). Registrations are written
# straight into the table by SQL with known client tokens (pct_bench_<i>, stored as SHA-256
# like Parley does), marked device_type = 'bench-scale' (a column without an index).
# The two cases live side by side in one PostgreSQL server, so that their runs can take
# turns:
#   - small: a database of the script's own (parley_scale_small, made afresh and dropped at
#     the end) with 1,000 rows; wrk cycles through their 1,000 tokens;
#   - large: DATABASE_URL's database with 1,000,000 rows of the script (INSERT …
#     generate_series, VACUUM ANALYZE, CHECKPOINT); wrk cycles through 10,000 of them.
# Pair i is a small run and a large run measured one after the other (odd pairs small
# first, even pairs large first), so that a machine that speeds up or slows down during
# the script weighs on both sides of every pair alike. One p99 ratio per pair (large over
# small); the target is met in a pair when its ratio is at most 1.1.
# Before each measured run a warm-up (curl, 32 requests in parallel) touches every token of
# the run once, so the first use of a token (a database lookup) is not in the figure; then
# `wrk -t2 -c32 -d10s --latency` with a Lua script that gives each request the next token.
# The large case's rows stay in DATABASE_URL's database (vacuumed, so autovacuum has nothing
# to do later); SCALE_CLEANUP=1 deletes them at the end (DELETE + VACUUM, ~25 s on 2 cores).
# Rows of an earlier run in the same database are deleted first.
#
# Environment: BIN DATABASE_URL (libpq keyword=value form) PSQL SIM_PORT KEYS TMP (see
# common.sh); knobs SCALE_SMALL (1000), SCALE_TOTAL (1000000), SCALE_ACTIVE (10000),
# SCALE_RUNS (3: pairs of measured runs), BENCH_THREADS (2), BENCH_CONNECTIONS (32),
# BENCH_DURATION (10s), SCALE_CLEANUP=1, SCALE_PROFILE=1 (perf record Parley during the
# first large run; top frames at the end).
# Exits non-zero only when something could not run (including a non-2xx answer).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bench_name=scale
# shellcheck source=common.sh
. "$here/common.sh"
require_bench_env
command -v wrk >/dev/null || die "wrk is not installed"

small="${SCALE_SMALL:-1000}"
total="${SCALE_TOTAL:-1000000}"
active="${SCALE_ACTIVE:-10000}"
threads="${BENCH_THREADS:-2}"
connections="${BENCH_CONNECTIONS:-32}"
duration="${BENCH_DURATION:-10s}"
runs="${SCALE_RUNS:-3}"
[ "$active" -le "$total" ] && [ "$small" -le "$active" ] || die "need SCALE_SMALL <= SCALE_ACTIVE <= SCALE_TOTAL"
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || die "SCALE_RUNS must be a positive number (got '$runs')"
[[ "$DATABASE_URL" != *"://"* ]] || die "DATABASE_URL must be in libpq's keyword=value form (the small case appends its own dbname)"
small_db=parley_scale_small
small_url="$DATABASE_URL dbname=$small_db"  # libpq: a keyword given twice takes its last value
# psql_small SQL — psql_value against the small case's database (psql: the last -d wins).
psql_small() { $PSQL -d "$small_db" -v ON_ERROR_STOP=1 -c "$1"; }

dir="$TMP/scale"
mkdir -p "$dir"
rows_inserted=0
cleanup() {
  local rc=$?
  set +e
  stop_parley_instances
  [ "${small_made:-0}" = 0 ] || psql_value "DROP DATABASE IF EXISTS $small_db WITH (FORCE)" >/dev/null
  if [ "$rows_inserted" -gt 0 ] && [ "${SCALE_CLEANUP:-}" = "1" ]; then
    local t0=$(now_ns) n
    n="$(psql_value "WITH d AS (DELETE FROM registrations WHERE device_type = 'bench-scale' RETURNING 1) SELECT count(*) FROM d")"
    psql_value "VACUUM ANALYZE registrations" >/dev/null
    say "scale: removed the script's $n rows again (DELETE + VACUUM ANALYZE: $(( ($(now_ns) - t0) / 1000000 )) ms)"
  elif [ "$rows_inserted" -gt 0 ]; then
    say "scale: the script's rows stay in the database (device_type = 'bench-scale'; SCALE_CLEANUP=1 deletes them)"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- Parley
cat >"$dir/destinations.yaml" <<YAML
destinations:
  - name: bench
    url: http://127.0.0.1:$SIM_PORT
YAML
# start_parley NAME — a fresh instance (empty caches) for one run, after stopping the one
# before, on the small case's database for a NAME starting with "small"; sets parley_pid
# and url.
start_parley() {
  local port
  stop_parley_instances
  read -r port < <(free_ports 1)
  case "$1" in
    small*) DATABASE_URL="$small_url" start_parley_instance "$port" "$dir/destinations.yaml" "$dir/parley-$1.log" ;;
    *) start_parley_instance "$port" "$dir/destinations.yaml" "$dir/parley-$1.log" ;;
  esac
  parley_pid="$last_parley_pid"
  url="http://127.0.0.1:$port/v1/proxy/echo/bench"
}
PGOPTIONS="-c client_min_messages=warning" psql_value "DROP DATABASE IF EXISTS $small_db WITH (FORCE)" >/dev/null  # no NOTICE when there is none
psql_value "CREATE DATABASE $small_db" >/dev/null
small_made=1
start_parley small-migrate  # runs the migrations in the new database
start_parley large-migrate  # and in DATABASE_URL's, when it is empty
stop_parley_instances

# ---------------------------------------------------------------- rows
# insert_rows FROM TO [PSQL_FUNCTION] — rows [from, to) with client tokens pct_bench_<i>, by
# psql_value (DATABASE_URL's database) or psql_small. Random ids as Parley makes them, but
# inserted in id order: four of the table's five indexes are on id or on (…, created_at,
# id) with one created_at per statement, so their inserts stay at one edge instead of
# landing on random pages; the client-token index still gets its keys in random order.
insert_rows() {
  "${3:-psql_value}" "INSERT INTO registrations (id, destination, client_token_hash, status, device_type)
    SELECT id, 'bench', hash, 'active', 'bench-scale' FROM (
      SELECT gen_random_uuid() AS id, sha256(convert_to('pct_bench_' || i, 'UTF8')) AS hash
      FROM generate_series($1, $2 - 1) AS i) AS r
    ORDER BY id" >/dev/null
}
stale="$(psql_value "SELECT count(*) FROM registrations WHERE device_type = 'bench-scale'")"
if [ "$stale" -gt 0 ]; then
  t0="$(now_ns)"
  psql_value "DELETE FROM registrations WHERE device_type = 'bench-scale'" >/dev/null
  psql_value "VACUUM registrations" >/dev/null
  say "scale: removed $stale rows left by an earlier run ($(( ($(now_ns) - t0) / 1000000 )) ms)"
fi
insert_rows 0 "$small" psql_small
psql_small "VACUUM ANALYZE registrations" >/dev/null

# ---------------------------------------------------------------- wrk scripts
# cycle.lua: every request carries the next of N tokens; thread k starts at k·N/T.
# (No response() function: wrk then does not hand bodies to Lua; it counts non-2xx itself.)
cat >"$dir/cycle.lua" <<'LUA'
local counter = 1
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end
function init(args)
  local n, t = tonumber(args[1]), tonumber(args[2])
  reqs, idx = {}, 0
  local offset = math.floor((id - 1) * n / t)
  for k = 0, n - 1 do
    reqs[#reqs + 1] = wrk.format(nil, nil, { Authorization = "Bearer pct_bench_" .. ((k + offset) % n) })
  end
end
function request()
  idx = idx % #reqs + 1
  return reqs[idx]
end
LUA

# ---------------------------------------------------------------- runs
hz="$(getconf CLK_TCK)"
# measure NAME TOKENS — warm-up over TOKENS tokens, then the measured run; sets
# rps_/p50_/p90_/p99_/req_/warm_ms_/parley_us_/pg_us_/busy_NAME.
measure() {
  local name="$1" n="$2" out="$dir/wrk-$1.txt" t0 ok
  # curl runs the warm-up (wrk cannot stop early): every token once, $connections at a time.
  seq 0 $(( n - 1 )) | awk -v url="$url" 'NR > 1 { print "next" }
    { printf "url = \"%s\"\nheader = \"Authorization: Bearer pct_bench_%d\"\noutput = \"/dev/null\"\nsilent\nwrite-out = \"%%{http_code}\\n\"\n", url, $1 }' >"$dir/warmup-$name.curl"
  t0="$(now_ns)"
  curl -Z --parallel-max "$connections" -K "$dir/warmup-$name.curl" >"$dir/warmup-$name.txt" 2>"$dir/warmup-$name.err" \
    || { tail -5 "$dir/warmup-$name.err" >&2; die "curl warm-up ($name)"; }
  printf -v "warm_ms_$name" '%s' "$(( ($(now_ns) - t0) / 1000000 ))"
  ok="$(grep -c '^200$' "$dir/warmup-$name.txt" || true)"
  [ "$ok" -eq "$n" ] || die "warm-up ($name): $ok of $n tokens answered 200 ($(sort "$dir/warmup-$name.txt" | uniq -c | tr '\n' ' '))"

  local pg_pids c_parley c_pg m_busy m_all m_busy2 m_all2
  pg_pids="$(pg_backend_pids)"
  c_parley="$(cpu_ticks "$parley_pid")"; c_pg="$(cpu_ticks $pg_pids)"
  read -r m_busy m_all < <(machine_ticks)
  local perf_pid=""
  if [ "$name" = large1 ] && [ "${SCALE_PROFILE:-}" = "1" ]; then
    perf record -F 999 -g -p "$parley_pid" -o "$dir/perf.data" -- sleep "${duration%s}" >"$dir/perf-record.log" 2>&1 &
    perf_pid=$!
  fi
  wrk -t"$threads" -c"$connections" -d"$duration" --latency -s "$dir/cycle.lua" "$url" -- "$n" "$threads" >"$out" 2>&1 \
    || { cat "$out" >&2; die "wrk ($name)"; }
  read -r m_busy2 m_all2 < <(machine_ticks)
  [ -z "$perf_pid" ] || wait "$perf_pid" || true
  local d_parley=$(( $(cpu_ticks "$parley_pid") - c_parley )) d_pg=$(( $(cpu_ticks $pg_pids) - c_pg ))

  local rps p50 p90 p99 requests non2xx
  rps="$(awk '/^Requests\/sec:/ {print $2}' "$out")"
  p50="$(awk '$1 == "50%" {print $2}' "$out")"
  p90="$(awk '$1 == "90%" {print $2}' "$out")"
  p99="$(awk '$1 == "99%" {print $2}' "$out")"
  requests="$(awk '/requests in/ {print $1}' "$out")"
  non2xx="$(awk -F: '/Non-2xx or 3xx responses/ {gsub(/ /, "", $2); print $2}' "$out")"
  [ -n "$rps" ] && [ -n "$p99" ] && [ -n "$requests" ] || { cat "$out" >&2; die "cannot parse the wrk output ($name)"; }
  [ "$requests" -gt 0 ] || die "no requests completed ($name)"
  [ -z "$non2xx" ] || [ "$non2xx" = 0 ] || { cat "$out" >&2; die "$name: $non2xx of $requests answers were not 2xx/3xx"; }
  printf -v "rps_$name" '%s' "$rps"
  printf -v "p50_$name" '%s' "$(to_ms "$p50")"
  printf -v "p90_$name" '%s' "$(to_ms "$p90")"
  printf -v "p99_$name" '%s' "$(to_ms "$p99")"
  printf -v "req_$name" '%s' "$requests"
  printf -v "err_$name" '%s' "$(grep -E '^ *Socket errors' "$out" | sed 's/^ *//' || true)"
  printf -v "parley_us_$name" '%s' "$(awk -v t="$d_parley" -v hz="$hz" -v n="$requests" 'BEGIN { printf "%.0f", t / hz / n * 1e6 }')"
  printf -v "pg_us_$name" '%s' "$(awk -v t="$d_pg" -v hz="$hz" -v n="$requests" 'BEGIN { printf "%.0f", t / hz / n * 1e6 }')"
  printf -v "busy_$name" '%s' "$(awk -v b=$(( m_busy2 - m_busy )) -v a=$(( m_all2 - m_all )) 'BEGIN { printf "%.0f", a ? 100 * b / a : 0 }')"
}

say "scale: growing DATABASE_URL's table to $total rows of this script"
t0="$(now_ns)"
rows_inserted=1
insert_rows 0 "$total"
rows_inserted="$total"
insert_ms=$(( ($(now_ns) - t0) / 1000000 ))
t0="$(now_ns)"
psql_value "VACUUM ANALYZE registrations" >/dev/null
# The bulk load leaves half a gigabyte of dirty pages: write them out now (a checkpoint,
# then the kernel's write-back) so that flushing them does not take CPU from a measured run.
psql_value "CHECKPOINT" >/dev/null
sync
vacuum_ms=$(( ($(now_ns) - t0) / 1000000 ))
rows_small="$(psql_small "SELECT count(*) FROM registrations")"
rows_large="$(psql_value "SELECT count(*) FROM registrations")"
table_mib="$(psql_value "SELECT round(pg_total_relation_size('registrations') / 1048576.0)")"
say "scale: inserted $total rows in $insert_ms ms, VACUUM ANALYZE + CHECKPOINT + sync $vacuum_ms ms; $rows_large rows, $table_mib MiB with indexes (small case: $rows_small rows in $small_db)"
# A new instance for every run, so that each starts from empty caches: entries cached in an
# earlier run would reach their 60 s safety-net lifetime during this one, all at once.
say "scale: $runs pairs of runs, each run a new Parley instance, a warm-up over its tokens ($small small, $active large), then wrk -t$threads -c$connections -d$duration --latency cycling through them"
t_start="$(now_ns)"
for i in $(seq "$runs"); do
  order=(small large); [ $(( i % 2 )) -eq 1 ] || order=(large small)
  for case_name in "${order[@]}"; do
    start_parley "$case_name$i"
    if [ "$case_name" = small ]; then measure "small$i" "$small"; else measure "large$i" "$active"; fi
  done
done
stop_parley_instances
elapsed_s=$(( ($(now_ns) - t_start) / 1000000000 ))

# One p99 ratio per pair (large run i over small run i); met_runs counts the pairs within 1.1.
ratios=() met_runs=0
for i in $(seq "$runs"); do
  a="p99_large$i" b="p99_small$i"
  ratios+=("$(awk -v a="${!a}" -v b="${!b}" 'BEGIN { printf "%.2f", a / b }')")
  awk -v r="${ratios[-1]}" 'BEGIN { exit !(r <= 1.1) }' && met_runs=$(( met_runs + 1 ))
done
say ""
say "-- scale: proxied GET /echo/bench, wrk -t$threads -c$connections -d$duration, each request with the next token --"
line() { printf '%-40s %4s %11s %8s %8s %8s %9s %10s %8s %7s %10s\n' "$@"; }
line "case" "run" "requests/s" "p50 ms" "p90 ms" "p99 ms" "requests" "parley us" "pg us" "busy %" "p99 ratio"
# case_row LABEL NAME RUN RATIO — one measured run.
case_row() {
  local r="rps_$2" a="p50_$2" b="p90_$2" c="p99_$2" n="req_$2" pu="parley_us_$2" gu="pg_us_$2" bu="busy_$2"
  line "$1" "$3" "${!r}" "${!a}" "${!b}" "${!c}" "${!n}" "${!pu}" "${!gu}" "${!bu}" "$4"
}
for i in $(seq "$runs"); do case_row "$rows_small rows, $small tokens active" "small$i" "$i" "-"; done
for i in $(seq "$runs"); do case_row "$rows_large rows, $active tokens active" "large$i" "$i" "${ratios[i - 1]}"; done
warm_list() { local i w out=""; for i in $(seq "$runs"); do w="warm_ms_$1$i"; out+="${!w} "; done; echo "${out% }"; }
say "(p99 ratio: p99 of that large run over p99 of the small run with the same number; warm-ups, not in the figures:"
say " every token once, $(warm_list small) ms (small) and $(warm_list large) ms (large); 'parley us'/'pg us': CPU per request"
say " of Parley and of the PostgreSQL backends; 'busy %': whole machine during the run, all work on it included)"
for i in $(seq "$runs"); do
  for n in "small$i" "large$i"; do e="err_$n"; [ -z "${!e}" ] || say "  $n run, wrk reported: ${!e}"; done
done
say "inserting $total registrations: $insert_ms ms, VACUUM ANALYZE $vacuum_ms ms; all $(( 2 * runs )) runs with warm-ups: ${elapsed_s} s (odd pairs ran small first, even pairs large first)"
p99_pairs="" p50_pairs="" rps_pairs=""
for i in $(seq "$runs"); do
  a="p99_large$i" b="p99_small$i"; p99_pairs+="${!a} / ${!b}, "
  a="p50_large$i" b="p50_small$i"; p50_pairs+="${!a} / ${!b}, "
  a="rps_large$i" b="rps_small$i"; rps_pairs+="${!a} / ${!b}, "
done
say "RESULT scale p99 with $rows_large registrations ($active active) / with $rows_small ($small active): ratios ${ratios[*]} (p99 ms ${p99_pairs%, }; p50 ms ${p50_pairs%, }; requests/s ${rps_pairs%, }) met in $met_runs of $runs runs (target $runs of $runs: $( [ "$met_runs" -eq "$runs" ] && echo met || echo MISSED))"
if [ "${SCALE_PROFILE:-}" = "1" ] && [ -s "$dir/perf.data" ]; then
  set +o pipefail
  say ""
  say "-- perf: Parley's top frames during the large run (self time, % of samples) --"
  perf report -i "$dir/perf.data" --no-children --sort symbol --stdio 2>/dev/null \
    | grep -E '^ +[0-9.]+%' | head -25 | swift demangle --simplified | cut -c1-160
  say "-- perf: with what they call (children) --"
  perf report -i "$dir/perf.data" --children --sort symbol --stdio -g none 2>/dev/null \
    | grep -E '^ +[0-9.]+%' | swift demangle --simplified | grep -E 'Parley|Conversation|Cache|InFlight|Cookie|Authenticator' \
    | head -25 | cut -c1-200
  set -o pipefail
fi
