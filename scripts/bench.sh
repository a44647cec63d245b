#!/usr/bin/env bash
# Parley benchmark (a script, not a test). Prints a report; see docs/benchmarks.md.
#
#   scripts/bench.sh          (or: make bench)
#
# Builds the release binaries, then starts — all on this machine, in one run — a
# throwaway PostgreSQL, the upstream simulator, Parley, nginx and HAProxy, and measures:
#   1. small GET /echo/bench: simulator direct vs nginx proxy_pass vs HAProxy vs Parley
#      /v1/proxy (wrk: throughput, p50, p99; ratios against the baselines of the same run),
#      under load (32 connections) and one request at a time (1 connection);
#      the load run again with a second load generator (h2load --h1), so that a ratio
#      that depends on wrk alone shows up;
#      plus Parley's /healthz and /v1/registrations/me to split its cost, libcurl alone
#      as the upstream half (scripts/bench/curl_floor.c, a C client), and the server floors
#      (server-floor: the same GET on NIO alone and on Hummingbird, doing nothing but the
#      answer, with CurlTransport and without, and with libcurl driven on the loop; the three
#      that proxy also one request at a time, and the four headline targets applied to them);
#      and the proxied GET with a client-credentials token injected, and with Basic and a jar
#      of 20 cookies, each compared with the plain call in back-to-back pairs to /status/200,
#      in units of the simulator's speed during each run (the median of BENCH_PAIR_ROUNDS);
#      system calls and context switches per request of Parley, nginx, HAProxy and the
#      simulator (perf stat, first round);
#   2. Parley's resident memory and throughput during 1 GiB transfers against nginx: a
#      download, an upload with Content-Length and a chunked upload without one (destination
#      bench: they pass through, kept nowhere), and an upload that Parley spools for a replay
#      (bench-jar, Basic) with the speed of its spool (parley_spool_write_seconds on /metrics);
#   3. Parley's cold start to ready and its idle resident memory;
#   4. the scripts in scripts/bench/ (revocation propagation, refresh storm, refresh ahead, scale,
#      the broker's operations per vCPU, and what a registration costs: a cold one's first call,
#      a warm call's statements, the memory of an active one).
# The proxied GET's targets are ratios to the floor measured in the same run (Hummingbird +
# CurlTransport, and NIO + CurlTransport for one connection); nginx and HAProxy are reported as
# the limit, without a verdict (docs/decisions.md says why).
# Exits 0 when everything ran (a missed target is a finding, not a failure);
# non-zero when something could not run or answered with errors.
#
# Knobs (environment):
#   BENCH_THREADS (2), BENCH_CONNECTIONS (32), BENCH_DURATION (10s)   the load runs
#   BENCH_LATENCY_DURATION (5s)                                       the 1-connection runs
#   BENCH_WARMUP (3s)                                                 before every run (not the paired ones)
#   BENCH_PAIR_ROUNDS (5)                                             rounds of 3 s plain/token/jar pairs
#   BENCH_DOWNLOAD_MIB (1024)                                         the transfers (download, both uploads)
#   BENCH_SKIP_BUILD=1                                                use the existing release binaries
#                                                                     (.build/release; swift is not run)
#   BENCH_PARLEY_BIN (.build/release/parley)                          the parley binary under test, here and
#                                                                     in scripts/bench/ (e.g. an older build
#                                                                     against the current simulator); when set,
#                                                                     only the simulator and server-floor are built
#   BENCH_INTERNALS=0                                                 skip the package-benchmark table (Benchmarks/)
#   BENCH_EXTRAS ("propagation.py refresh_storm.py refresh_ahead.py scale.sh broker_ops.py registration_costs.py")
#                                                                     which scripts of scripts/bench/ run ("" for none)
#   BENCH_PROFILE=1                                                   perf record Parley during the proxied run;
#                                                                     the top frames are printed at the end
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

case "${1:-}" in
  -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  "") ;;
  *) echo "usage: scripts/bench.sh  (no arguments; knobs are environment variables, see --help)" >&2; exit 64 ;;
esac

threads="${BENCH_THREADS:-2}"
connections="${BENCH_CONNECTIONS:-32}"
duration="${BENCH_DURATION:-10s}"
latency_duration="${BENCH_LATENCY_DURATION:-5s}"
warmup="${BENCH_WARMUP:-3s}"
download_mib="${BENCH_DOWNLOAD_MIB:-1024}"

# say, die, now_ns, free_ports, wait_http_200, psql_value, cpu_ticks, machine_ticks, to_ms
source scripts/bench/common.sh

# ---------------------------------------------------------------- cleanup
tmp=""
pids=()
pg_data=""
as_pg=""
pg_bin=""
cleanup() {
  local rc=$?
  set +e
  if [ "$rc" -ne 0 ] && [ -n "$tmp" ]; then
    for log in "$tmp/parley.log" "$tmp/simulator.log" "$tmp/nginx/logs/error.log" "$tmp/haproxy/haproxy.log" "$tmp"/floor_*.log; do
      [ -s "$log" ] && { echo "--- last lines of $(basename "$log")" >&2; tail -20 "$log" >&2; }
    done
    if [ -n "${parley_pid:-}" ] && ! kill -0 "$parley_pid" 2>/dev/null; then
      wait "$parley_pid" 2>/dev/null
      local status=$? who=Parley
      # During a server floor's run (run_floor), parley_pid names the floor server.
      [ -n "${floor_pid:-}" ] && who=server-floor
      echo "bench: $who (pid $parley_pid) is no longer running; exit status $status" >&2
    fi
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  if [ -n "$pg_data" ] && [ -f "$pg_data/postmaster.pid" ]; then
    $as_pg "$pg_bin/pg_ctl" -D "$pg_data" -m fast stop >/dev/null 2>&1
  fi
  [ -n "$tmp" ] && rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Forget a process that has exited (so cleanup does not signal a recycled pid).
forget() {
  local keep=() p
  for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  pids=("${keep[@]}")
}

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# peak_rss_while PID START_KIB — samples Parley's VmRSS every 100 ms while process PID runs, and
# once more as it ends (a short transfer may fit between samples); prints the peak in KiB (at
# least START_KIB) and the number of samples.
peak_rss_while() {
  local peak="$2" n=0 r
  while kill -0 "$1" 2>/dev/null; do
    r="$(rss_kib "$parley_pid")"
    [ "$r" -gt "$peak" ] && peak="$r"
    n=$((n + 1))
    sleep 0.1
  done
  r="$(rss_kib "$parley_pid")"
  [ "$r" -gt "$peak" ] && peak="$r"
  echo "$peak $((n + 1))"
}
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }


# ---------------------------------------------------------------- build
scripts/install-deps.sh --test
command -v swift >/dev/null || die "swift is not on PATH (Swift 6 toolchain needed)"
for tool in wrk h2load nginx haproxy curl openssl python3 clang; do command -v "$tool" >/dev/null || die "$tool is not installed"; done
tmp="$(mktemp -d /tmp/parley-bench.XXXXXX)"
# The products to build: the simulator and the floor server always, parley unless BENCH_PARLEY_BIN
# names another binary.
products=(upstream-simulator server-floor)
[ -n "${BENCH_PARLEY_BIN:-}" ] || products=(parley upstream-simulator server-floor)
if [ "${BENCH_SKIP_BUILD:-}" = "1" ] && [ -x .build/release/upstream-simulator ] && [ -x .build/release/server-floor ] \
  && { [ -n "${BENCH_PARLEY_BIN:-}" ] || [ -x .build/release/parley ]; }; then
  bin="$root/.build/release"  # the default .build's release binaries, without asking swift
elif [ "${BENCH_SKIP_BUILD:-}" != "1" ]; then
  say "bench: building release binaries (swift build -c release --static-swift-stdlib, as shipped; several minutes on a cold .build)" >&2
  for product in "${products[@]}"; do
    swift build -c release --static-swift-stdlib --product "$product" >"$tmp/build-$product.log" 2>&1 \
      || { tail -40 "$tmp/build-$product.log" >&2; die "swift build -c release --static-swift-stdlib --product $product"; }
  done
fi
[ -n "${bin:-}" ] || bin="$(swift build -c release --static-swift-stdlib --show-bin-path)"
[ -x "$bin/upstream-simulator" ] || die "release binary upstream-simulator missing in $bin"
[ -x "$bin/server-floor" ] || die "release binary server-floor missing in $bin (swift build -c release --static-swift-stdlib --product server-floor)"
parley_bin="$(readlink -m "${BENCH_PARLEY_BIN:-$bin/parley}")"
[ -x "$parley_bin" ] || die "the parley binary under test is missing or not executable: ${BENCH_PARLEY_BIN:-$bin/parley}"
parley_sha="$(sha256sum "$parley_bin" | cut -c1-12)"
# The scripts in scripts/bench/ take `parley` and `upstream-simulator` from one directory
# (BIN): this one pairs the binary under test with the simulator just built.
mkdir -p "$tmp/bin"
ln -s "$parley_bin" "$tmp/bin/parley"
ln -s "$bin/upstream-simulator" "$tmp/bin/upstream-simulator"

# ---------------------------------------------------------------- PostgreSQL (scripts/bench/common.sh)
read -r pg_port sim_port nginx_port haproxy_port parley_port < <(free_ports 5)
start_postgres "$tmp" "$pg_port"
database_url="host=127.0.0.1 port=$pg_port user=parley dbname=postgres"
PSQL="$pg_bin/psql -X -A -t -h 127.0.0.1 -p $pg_port -U parley -d postgres"

# ---------------------------------------------------------------- simulator
"$bin/upstream-simulator" --host 127.0.0.1 --port "$sim_port" >"$tmp/simulator.log" 2>&1 &
sim_pid=$!
pids+=("$sim_pid")
wait_http_200 "http://127.0.0.1:$sim_port/echo/ready" 20 || { cat "$tmp/simulator.log" >&2; die "the simulator did not answer"; }

# ---------------------------------------------------------------- nginx
mkdir -p "$tmp/nginx/logs" "$tmp/nginx/temp"
cat >"$tmp/nginx/nginx.conf" <<NGINX
daemon off;
master_process on;
worker_processes 1;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/logs/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $tmp/nginx/temp/body;
    proxy_temp_path $tmp/nginx/temp/proxy;
    fastcgi_temp_path $tmp/nginx/temp/fastcgi;
    uwsgi_temp_path $tmp/nginx/temp/uwsgi;
    scgi_temp_path $tmp/nginx/temp/scgi;
    upstream simulator {
        server 127.0.0.1:$sim_port;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$nginx_port;
        client_max_body_size 0;
        location / {
            proxy_request_buffering off;
            proxy_pass http://simulator;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Authorization "Bearer static";
        }
    }
}
NGINX
nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/logs/error.log" >"$tmp/nginx/stdout.log" 2>&1 &
nginx_pid=$!
pids+=("$nginx_pid")
wait_http_200 "http://127.0.0.1:$nginx_port/echo/ready" 20 || { cat "$tmp/nginx/logs/error.log" >&2; die "nginx did not answer"; }

# ---------------------------------------------------------------- HAProxy
# A second reverse-proxy baseline, set up like nginx above: one thread (nginx has one
# worker), keep-alive on both sides (`http-reuse always`: idle upstream connections are
# shared between client connections, as nginx's keepalive pool is), the same static
# Authorization header set on the way, no logging at all (no `log` line: nothing to syslog).
mkdir -p "$tmp/haproxy"
cat >"$tmp/haproxy/haproxy.cfg" <<HAPROXY
global
    nbthread 1
    maxconn 4096
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
frontend bench
    bind 127.0.0.1:$haproxy_port
    maxconn 4096
    default_backend simulator
backend simulator
    http-request set-header Authorization "Bearer static"
    server simulator 127.0.0.1:$sim_port
HAPROXY
haproxy -c -q -f "$tmp/haproxy/haproxy.cfg" >"$tmp/haproxy/check.log" 2>&1 \
  || { cat "$tmp/haproxy/check.log" >&2; die "haproxy -c refused the benchmark's configuration"; }
# -db: stay in the foreground (no daemon, no master process), so the pid is HAProxy's own.
haproxy -db -f "$tmp/haproxy/haproxy.cfg" >"$tmp/haproxy/haproxy.log" 2>&1 &
haproxy_pid=$!
pids+=("$haproxy_pid")
wait_http_200 "http://127.0.0.1:$haproxy_port/echo/ready" 20 || { cat "$tmp/haproxy/haproxy.log" >&2; die "HAProxy did not answer"; }

# ---------------------------------------------------------------- Parley
cat >"$tmp/destinations.yaml" <<YAML
destinations:
  - name: bench
    url: http://127.0.0.1:$sim_port
  - name: bench-cc
    url: http://127.0.0.1:$sim_port
    oauth2:
      grant: client_credentials
      tokenEndpoint: http://127.0.0.1:$sim_port/oauth/token
      clientId: parley-confidential
      clientSecret: s3cret
      scopes: [read]
  - name: bench-jar
    url: http://127.0.0.1:$sim_port
    basic: {}
YAML
keys="k1:$(openssl rand -base64 32)"
parley_pid=""
# Starts `parley serve` and waits for /readyz; sets parley_pid and start_ms.
start_parley() {
  local log="$1" t0
  t0="$(now_ns)"
  PARLEY_DATABASE_URL="$database_url" PARLEY_ENCRYPTION_KEYS="$keys" PARLEY_DESTINATIONS="$tmp/destinations.yaml" \
    PARLEY_LOG_LEVEL=warning PARLEY_LISTEN="127.0.0.1:$parley_port" PARLEY_RATE_LIMIT_PROXY="${PARLEY_RATE_LIMIT_PROXY:-off}" \
    "$parley_bin" serve >"$log" 2>&1 &
  parley_pid=$!
  pids+=("$parley_pid")
  wait_http_200 "http://127.0.0.1:$parley_port/readyz" 30 || { cat "$log" >&2; die "Parley did not become ready within 30 s"; }
  start_ms=$(( ($(now_ns) - t0) / 1000000 ))
}
stop_parley() {
  kill -TERM "$parley_pid"
  for _ in $(seq 300); do kill -0 "$parley_pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$parley_pid" 2>/dev/null && die "Parley did not stop within 30 s of SIGTERM"
  wait "$parley_pid" 2>/dev/null || true
  forget "$parley_pid"
}

# First start: empty database, so the migrations run. Then a restart against the
# migrated schema — the usual cold start — which is the instance under test.
start_parley "$tmp/parley-first.log"
first_start_ms=$start_ms
stop_parley
start_parley "$tmp/parley.log"
cold_start_ms=$start_ms
sleep 1
idle_rss_kib="$(rss_kib "$parley_pid")"

# ---------------------------------------------------------------- registration
registration="$(curl -s -f -XPOST "http://127.0.0.1:$parley_port/v1/registrations" -d '{"destination":"bench"}')" \
  || die "POST /v1/registrations failed"
token="$(printf '%s' "$registration" | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientToken"])')" \
  || die "the registration answer has no clientToken"
unset registration
[ -n "$token" ] || die "empty clientToken"
code="$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "http://127.0.0.1:$parley_port/v1/proxy/echo/bench")"
[ "$code" = "200" ] || die "GET /v1/proxy/echo/bench through Parley answered $code"
# With tokens injected: a client-credentials destination on the same upstream. One call to
# the simulator's protected API makes Parley obtain the token; afterwards every proxied
# request carries it (from the per-instance token cache).
token_cc="$(curl -s -f -XPOST "http://127.0.0.1:$parley_port/v1/registrations" -d '{"destination":"bench-cc"}' \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientToken"])')" || die "POST /v1/registrations (bench-cc) failed"
code="$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token_cc" "http://127.0.0.1:$parley_port/v1/proxy/oauth-api/data")"
[ "$code" = "200" ] || die "GET /v1/proxy/oauth-api/data through Parley (client credentials) answered $code"
echo_auth="$(curl -s -H "Authorization: Bearer $token_cc" "http://127.0.0.1:$parley_port/v1/proxy/echo/bench" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["headers"].get("authorization", [""])[0][:7])')"
[ "$echo_auth" = "Bearer " ] || die "the proxied request on bench-cc carried no bearer token"
# With a cookie jar: a Basic destination on the same upstream, registered with the simulator's
# user (alice / wonderland, SimulatorConfiguration's defaults) so that a Basic challenge would be
# answered. One proxied call to /cookies/set fills the registration's jar with 20 cookies;
# afterwards every proxied request carries them.
token_jar="$(curl -s -f -XPOST "http://127.0.0.1:$parley_port/v1/registrations" \
  -d '{"destination":"bench-jar","credentials":{"username":"alice","password":"wonderland"}}' \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientToken"])')" || die "POST /v1/registrations (bench-jar) failed"
code="$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token_jar" "http://127.0.0.1:$parley_port/v1/proxy/cookies/set?n=20")"
[ "$code" = "200" ] || die "GET /v1/proxy/cookies/set?n=20 through Parley (bench-jar) answered $code"
jar_cookies="$(curl -s -H "Authorization: Bearer $token_jar" "http://127.0.0.1:$parley_port/v1/proxy/echo/bench" \
  | python3 -c 'import json,sys; print(sum(len(v.split(";")) for v in json.load(sys.stdin)["headers"].get("cookie", [])))')" \
  || die "GET /v1/proxy/echo/bench through Parley (bench-jar) gave no echo"
[ "$jar_cookies" = "20" ] || die "the proxied request on bench-jar carried $jar_cookies cookies, expected the jar's 20"

# ---------------------------------------------------------------- load
pg_pids() {
  local main
  main="$(head -1 "$pg_data/postmaster.pid")"
  echo "$main" $(pgrep -P "$main" || true)
}
nginx_pids() { echo "$nginx_pid" $(pgrep -P "$nginx_pid" || true); }
hz="$(getconf CLK_TCK)"
# CPU ticks used by this shell's finished children so far (wrk, once it has been waited for).
# `times` must run in this shell, not in a $(…) subshell, hence the file.
children_ticks() {
  times >"$tmp/times"
  awk -v hz="$hz" 'NR == 2 {
    t = 0
    for (f = 1; f <= 2; f++) { split($f, p, "m"); sub(/s$/, "", p[2]); t += p[1] * 60 + p[2] }
    printf "%d", t * hz + 0.5 }' "$tmp/times"
}


haproxy_pids() { echo "$haproxy_pid" $(pgrep -P "$haproxy_pid" || true); }
# measure_begin / measure_end NAME — CPU ticks of every role over one measured run: Parley,
# the simulator, nginx, HAProxy, PostgreSQL, and the load generator (wrk or h2load, counted
# as this shell's finished children once it has been waited for). measure_end sets
# cpu_parley_NAME, cpu_sim_NAME, cpu_nginx_NAME, cpu_haproxy_NAME, cpu_pg_NAME, cpu_gen_NAME
# and other_pct_NAME (the share of the machine's CPU used by anything else).
measure_begin() {
  read -r mb_busy mb_all < <(machine_ticks)
  children_ticks >"$tmp/ticks"; mb_gen="$(cat "$tmp/ticks")"
  mb_parley="$(cpu_ticks "$parley_pid")"; mb_sim="$(cpu_ticks "$sim_pid")"
  mb_nginx="$(cpu_ticks $(nginx_pids))"; mb_haproxy="$(cpu_ticks $(haproxy_pids))"; mb_pg="$(cpu_ticks $(pg_pids))"
}
measure_end() {
  local name="$1" m_busy2 m_all2 ours
  printf -v "cpu_parley_$name" '%s' "$(( $(cpu_ticks "$parley_pid") - mb_parley ))"
  printf -v "cpu_sim_$name" '%s' "$(( $(cpu_ticks "$sim_pid") - mb_sim ))"
  printf -v "cpu_nginx_$name" '%s' "$(( $(cpu_ticks $(nginx_pids)) - mb_nginx ))"
  printf -v "cpu_haproxy_$name" '%s' "$(( $(cpu_ticks $(haproxy_pids)) - mb_haproxy ))"
  printf -v "cpu_pg_$name" '%s' "$(( $(cpu_ticks $(pg_pids)) - mb_pg ))"
  children_ticks >"$tmp/ticks"
  printf -v "cpu_gen_$name" '%s' "$(( $(cat "$tmp/ticks") - mb_gen ))"
  read -r m_busy2 m_all2 < <(machine_ticks)
  ours=$(( cpu_parley_$name + cpu_sim_$name + cpu_nginx_$name + cpu_haproxy_$name + cpu_pg_$name + cpu_gen_$name ))
  printf -v "other_pct_$name" '%s' "$(awk -v o=$(( m_busy2 - mb_busy - ours )) -v all=$(( m_all2 - mb_all )) \
    'BEGIN { v = all ? 100 * o / all : 0; if (v < 0) v = 0; printf "%.0f", v }')"
}

# System calls and context switches per request, by process, in the first round's runs of the
# headline paths: counts of work done, which the machine's drift (see the rounds below) does not
# move. `perf stat` counts the kernel's raw_syscalls tracepoint for the proxy under test and,
# separately, for the simulator behind it. Without perf (or without the permission to count),
# the figure reads "n/a".
syscall_subjects() {
  case "$1" in
    direct_r1) echo "" ;;
    nginx_r1) nginx_pids | tr ' ' ',' ;;
    haproxy_r1) haproxy_pids | tr ' ' ',' ;;
    parley_r1) echo "$parley_pid" ;;
    *) return 1 ;;
  esac
}
# syscall_count_begin NAME ARRAY — starts the counters for NAME's run (when it is one of the
# above), leaving their pids in ARRAY for syscall_count_end.
syscall_count_begin() {
  local name="$1" subject
  local -n started="$2"
  command -v perf >/dev/null || return 0
  subject="$(syscall_subjects "$name")" || return 0
  if [ -n "$subject" ]; then
    perf stat -x, -e raw_syscalls:sys_enter,context-switches -p "$subject" -o "$tmp/syscalls-$name-proxy.csv" >/dev/null 2>&1 &
    started+=("$!")
  fi
  perf stat -x, -e raw_syscalls:sys_enter,context-switches -p "$sim_pid" -o "$tmp/syscalls-$name-sim.csv" >/dev/null 2>&1 &
  started+=("$!")
}
syscall_count_end() {
  local p
  for p in "$@"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "$@"; do wait "$p" 2>/dev/null || true; done
}
# per_request_events NAME WHO EVENT — EVENT's count per request of NAME's run, "n/a" without one.
per_request_events() {
  local file="$tmp/syscalls-$1-$2.csv" requests="req_$1"
  [ -s "$file" ] || { echo "n/a"; return; }
  awk -F, -v e="$3" -v n="${!requests}" '$3 == e && $1 ~ /^[0-9]+$/ { printf "%.1f", $1 / n; found = 1 } END { if (!found) print "n/a" }' "$file"
}

# run_wrk NAME URL [header] — wrk with $w_threads, $w_connections, $w_duration; sets rps_NAME, p50_NAME, p90_NAME, p99_NAME, req_NAME, CPU deltas and other_pct_NAME.
run_wrk() {
  local name="$1" url="$2" header="${3:-}" out="$tmp/wrk-$1.txt" args=()
  [ -n "$header" ] && args=(-H "$header")
  # An empty $warmup skips the warm-up (the paired runs, whose paths are warm already).
  if [ -n "$warmup" ]; then
    wrk -t"$w_threads" -c"$w_connections" -d"$warmup" "${args[@]}" "$url" >"$tmp/wrk-$name-warmup.txt" 2>&1 \
      || { cat "$tmp/wrk-$name-warmup.txt" >&2; die "wrk warm-up against $name"; }
  fi
  # PostgreSQL reports a backend's transaction counts up to 10 s late once it goes idle,
  # so the count is taken (for Parley only) after 11 s of quiet on both sides.
  local xact_before=0 xact_after=0 xact_query="SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'postgres'"
  if [ "$name" = parley_r1 ]; then sleep 11; xact_before="$(psql_value "$xact_query")"; fi
  measure_begin
  local stat_pids=()
  syscall_count_begin "$name" stat_pids
  local perf_pid=""
  if [ "$name" = parley_r1 ] && [ "${BENCH_PROFILE:-}" = "1" ]; then
    # Samples Parley's threads (call graphs) for the length of the proxied run.
    perf record -F 999 -g -p "$parley_pid" -o "$tmp/perf.data" -- sleep "${w_duration%s}" >"$tmp/perf-record.log" 2>&1 &
    perf_pid=$!
  fi
  # Upstream connections open to the simulator halfway through the run, by process.
  ( sleep "$(awk -v d="${w_duration%s}" 'BEGIN { print d / 2 }')"
    ss -Htnp state established "( dport = :$sim_port )" 2>/dev/null >"$tmp/conns-$name.txt" || true ) &
  local ss_pid=$!
  wrk -t"$w_threads" -c"$w_connections" -d"$w_duration" --latency "${args[@]}" "$url" >"$out" 2>&1 \
    || { cat "$out" >&2; die "wrk against $name"; }
  wait "$ss_pid" || true
  if [ -n "$perf_pid" ]; then wait "$perf_pid" || true; fi
  syscall_count_end "${stat_pids[@]}"
  measure_end "$name"
  if [ "$name" = parley_r1 ]; then sleep 11; xact_after="$(psql_value "$xact_query")"; fi
  printf -v "xact_$name" '%s' "$(( xact_after - xact_before ))"

  local rps p50 p90 p99 requests non2xx errors
  rps="$(awk '/^Requests\/sec:/ {print $2}' "$out")"
  p50="$(awk '$1 == "50%" {print $2}' "$out")"
  p90="$(awk '$1 == "90%" {print $2}' "$out")"
  p99="$(awk '$1 == "99%" {print $2}' "$out")"
  requests="$(awk '/requests in/ {print $1}' "$out")"
  non2xx="$(awk -F: '/Non-2xx or 3xx responses/ {gsub(/ /, "", $2); print $2}' "$out")"
  errors="$(grep -E '^ *Socket errors' "$out" || true)"
  [ -n "$rps" ] && [ -n "$p50" ] && [ -n "$p99" ] && [ -n "$requests" ] || { cat "$out" >&2; die "cannot parse the wrk output for $name"; }
  [ "$requests" -gt 0 ] || die "no requests completed against $name"
  if [ -n "$non2xx" ] && [ "$non2xx" != "0" ]; then
    cat "$out" >&2
    die "$name: $non2xx of $requests responses were not 2xx/3xx"
  fi
  printf -v "rps_$name" '%s' "$rps"
  printf -v "p50_$name" '%s' "$(to_ms "$p50")"
  printf -v "p90_$name" '%s' "$(to_ms "$p90")"
  printf -v "p99_$name" '%s' "$(to_ms "$p99")"
  printf -v "req_$name" '%s' "$requests"
  printf -v "err_$name" '%s' "${errors:-}"
}

# h2load_bounded DURATION ARGS… — h2load --h1 for DURATION ("10s"), ended with exit 124 when it
# is still running 30 s after that: h2load 1.52 now and then keeps one thread's clients sending
# past -D (seen once in a dozen runs, against nginx; the other thread had stopped on time).
h2load_stuck=()
h2load_stuck_warmup=()
h2load_bounded() {
  local duration="$1" seconds; shift
  seconds="${duration%s}"; [[ "$seconds" =~ ^[0-9]+$ ]] || seconds=600  # "1m" and the like: a generous bound
  timeout -s TERM -k 5 "$(( seconds + 30 ))" h2load --h1 -t"$w_threads" -c"$w_connections" -D "$duration" "$@"
}

# run_h2load NAME URL [header] — the second load generator on the same load: h2load in
# HTTP/1.1 mode (--h1: keep-alive, one request at a time per connection, as wrk), with
# wrk's threads and connections, for $w_duration after a warm-up run of $warmup, as wrk
# (a separate run, not h2load's --warm-up-time, so that the CPU deltas cover the measured
# run only). h2load reports no percentiles: sets rps_NAME, mean_NAME, sd_NAME, max_NAME
# (ms, its "time for request"), req_NAME (succeeded), failed_NAME (failed + errored +
# timed out), the CPU deltas and other_pct_NAME.
run_h2load() {
  local name="$1" url="$2" header="${3:-}" out="$tmp/h2load-$1.txt" args=()
  [ -n "$header" ] && args=(-H "$header")
  local attempt rc=0
  # A warm-up is not measured: one that ran on past its duration and was stopped (124) is
  # named in the report, and the measured run goes ahead.
  h2load_bounded "$warmup" "${args[@]}" "$url" >"$tmp/h2load-$name-warmup.txt" 2>&1 || rc=$?
  if [ "$rc" -eq 124 ]; then
    h2load_stuck_warmup+=("$name")
  elif [ "$rc" -ne 0 ]; then
    cat "$tmp/h2load-$name-warmup.txt" >&2; die "h2load warm-up against $name (exit $rc)"
  fi
  for attempt in 1 2; do
    measure_begin
    rc=0
    h2load_bounded "$w_duration" "${args[@]}" "$url" >"$out" 2>&1 || rc=$?
    measure_end "$name"
    [ "$rc" -eq 124 ] && [ "$attempt" -eq 1 ] || break
    h2load_stuck+=("$name")  # measured again; the report names the run
  done
  [ "$rc" -eq 0 ] || { cat "$out" >&2; die "h2load against $name (exit $rc)"; }
  local rps requests failed errored timedout s4 s5 mean sd max
  rps="$(awk '/^finished in/ { print $4 }' "$out")"
  read -r requests failed errored timedout < <(awk '/^requests:/ { print $8, $10, $12, $14 }' "$out")
  read -r s4 s5 < <(awk '/^status codes:/ { print $7, $9 }' "$out")
  read -r mean sd max < <(awk '/^time for request:/ { print $6, $7, $5 }' "$out")
  [ -n "$rps" ] && [ -n "${requests:-}" ] && [ -n "${s5:-}" ] && [ -n "${max:-}" ] || { cat "$out" >&2; die "cannot parse the h2load output for $name"; }
  [ "$requests" -gt 0 ] || { cat "$out" >&2; die "no requests succeeded against $name (h2load)"; }
  if [ "$(( s4 + s5 ))" -ne 0 ]; then
    cat "$out" >&2
    die "$name: $(( s4 + s5 )) of the responses h2load counted were 4xx/5xx"
  fi
  printf -v "rps_$name" '%s' "$rps"
  printf -v "mean_$name" '%s' "$(to_ms "$mean")"
  printf -v "sd_$name" '%s' "$(to_ms "$sd")"
  printf -v "max_$name" '%s' "$(to_ms "$max")"
  printf -v "req_$name" '%s' "$requests"
  printf -v "failed_$name" '%s' "$(( failed + errored + timedout ))"
}

# How busy the machine is with other work just before the load runs (our servers are idle now).
cpu_busy_pct() {
  local a b
  a=($(head -1 /proc/stat)); sleep 2; b=($(head -1 /proc/stat))
  awk -v u=$(( (b[1]+b[2]+b[3]+b[6]+b[7]+b[8]) - (a[1]+a[2]+a[3]+a[6]+a[7]+a[8]) )) \
      -v i=$(( (b[4]+b[5]) - (a[4]+a[5]) )) 'BEGIN { printf "%.0f", (u + i) ? 100 * u / (u + i) : 0 }'
}
busy_before="$(cpu_busy_pct)"
say "bench: load runs (wrk -t$threads -c$connections -d$duration --latency, and h2load --h1 -t$threads -c$connections -D $duration, after a $warmup warm-up each)" >&2
w_threads="$threads" w_connections="$connections" w_duration="$duration"
# The machine's speed drifts between 10-second runs (a VM's neighbours; the same wrk work
# costs 10-14 us a request from one run to the next), so the compared paths run twice,
# interleaved, and the faster run of each is the one reported (both are printed).
# The headline paths are measured by a second load generator, h2load (HTTP/1.1), in the
# same rounds, so both tools meet the same drift: a ratio that holds for wrk alone shows up.
for round in 1 2; do
  run_wrk "direct_r$round" "http://127.0.0.1:$sim_port/echo/bench"
  run_wrk "nginx_r$round" "http://127.0.0.1:$nginx_port/echo/bench"
  run_wrk "haproxy_r$round" "http://127.0.0.1:$haproxy_port/echo/bench"
  run_wrk "parley_r$round" "http://127.0.0.1:$parley_port/v1/proxy/echo/bench" "Authorization: Bearer $token"
  run_wrk "parleycc_r$round" "http://127.0.0.1:$parley_port/v1/proxy/echo/bench" "Authorization: Bearer $token_cc"
  run_wrk "parleyjar_r$round" "http://127.0.0.1:$parley_port/v1/proxy/echo/bench" "Authorization: Bearer $token_jar"
  run_h2load "h2direct_r$round" "http://127.0.0.1:$sim_port/echo/bench"
  run_h2load "h2nginx_r$round" "http://127.0.0.1:$nginx_port/echo/bench"
  run_h2load "h2haproxy_r$round" "http://127.0.0.1:$haproxy_port/echo/bench"
  run_h2load "h2parley_r$round" "http://127.0.0.1:$parley_port/v1/proxy/echo/bench" "Authorization: Bearer $token"
done
# best_of NAME FIGURE… — the figures of the faster of NAME_r1 and NAME_r2, as NAME.
best_of() {
  local name="$1" a="rps_${1}_r1" b="rps_${1}_r2" pick="${1}_r1" v src
  shift
  awk -v x="${!b}" -v y="${!a}" 'BEGIN { exit !(x > y) }' && pick="${name}_r2"
  for v in rps req cpu_parley cpu_sim cpu_nginx cpu_haproxy cpu_pg cpu_gen other_pct "$@"; do
    src="${v}_$pick"
    printf -v "${v}_$name" '%s' "${!src:-}"
  done
  cp "$tmp/conns-$pick.txt" "$tmp/conns-$name.txt" 2>/dev/null || true
  printf -v "rounds_$name" '%s' "${!a} / ${!b}"
}
for n in direct nginx haproxy parley parleycc parleyjar; do best_of "$n" p50 p90 p99 err; done
for n in h2direct h2nginx h2haproxy h2parley; do best_of "$n" mean sd max failed; done
xact_parley="$xact_parley_r1" xact_req_parley="$req_parley_r1"
# The token and cookie-jar comparisons, measured against the machine's drift. Its speed moves
# by up to 30 % between runs a few seconds apart, every process with it: the simulator's CPU per
# answer moves as much as Parley's. So plain, token and jar calls run back to back for 3 s
# each, $pair_rounds times, the order reversed every other time, to the simulator's
# /status/200 (the same fixed answer for all three, where /echo/bench would echo the jar's 20
# cookies back and make the upstream's work differ), and each run's figures are taken in units
# of the simulator's speed during that run: Parley's CPU per request divided by the
# simulator's, and requests/s multiplied by the simulator's CPU per request. Each comparison is
# the median of its per-round ratios against the plain call.
pair_rounds="${BENCH_PAIR_ROUNDS:-5}"
say "bench: paired runs of plain, token and cookie-jar calls to /status/200 ($pair_rounds rounds of wrk -t$threads -c$connections -d3s each)" >&2
w_duration=3s
for round in $(seq "$pair_rounds"); do
  order=(parley parleycc parleyjar)
  [ $(( round % 2 )) -eq 0 ] && order=(parleyjar parleycc parley)
  for n in "${order[@]}"; do
    case "$n" in parley) t="$token" ;; parleycc) t="$token_cc" ;; parleyjar) t="$token_jar" ;; esac
    warmup="" run_wrk "pair${n}_$round" "http://127.0.0.1:$parley_port/v1/proxy/status/200" "Authorization: Bearer $t"
  done
done
w_duration="$duration"
# Breakdown of Parley's own cost: the HTTP stack and middleware alone (/healthz: no
# database, no upstream), then with the client-token lookup (/v1/registrations/me:
# one query, no upstream). The proxied GET adds the cookie-jar read and the upstream call.
run_wrk healthz "http://127.0.0.1:$parley_port/healthz"
run_wrk me "http://127.0.0.1:$parley_port/v1/registrations/me" "Authorization: Bearer $token"
# The libcurl floor: the upstream half of a proxied GET done by libcurl alone, a C client
# (scripts/bench/curl_floor.c) with as many transfers in flight as the load runs have
# connections, a new easy handle each. With /healthz (the server half) it is the least a
# proxied request on Hummingbird and libcurl can cost, whatever Parley does between them.
floor_requests=50000
say "bench: the libcurl floor ($floor_requests GETs to the simulator, $connections in flight)" >&2
clang -O2 -o "$tmp/curl_floor" scripts/bench/curl_floor.c -lcurl >"$tmp/curl_floor-build.log" 2>&1 \
  || { cat "$tmp/curl_floor-build.log" >&2; die "could not build scripts/bench/curl_floor.c"; }
curl_floor_us="$("$tmp/curl_floor" "http://127.0.0.1:$sim_port/echo/bench" "$floor_requests" "$connections")" \
  || die "the libcurl floor client failed"
# The server floors: the same GET answered by `server-floor` (a bench tool of this package), a
# server that does nothing else, on NIO alone and on Hummingbird as Parley serves, once with a
# fixed answer and once with the simulator's, fetched through CurlTransport (Parley's libcurl
# transport: its thread and the hand-back to the loop); and once on NIO with libcurl driven on
# the connection's own loop instead (curl_multi_socket_action, a thread that only waits for the
# sockets), the design CurlTransport does not use. Measured in Parley's column of run_wrk.
run_floor() { # NAME nio|hummingbird [UPSTREAM_URL [transport|loop]]
  local name="$1" server="$2" port floor_pid
  shift 2
  port="$(free_ports 1)"
  "$bin/server-floor" "$server" "$port" "$@" >"$tmp/$name.log" 2>&1 &
  floor_pid=$!
  pids+=("$floor_pid")  # stopped by cleanup if a run below fails
  # On failure the cleanup shows the floor server's log.
  wait_http_200 "http://127.0.0.1:$port/floor" 20 || die "server-floor $server did not answer"
  parley_pid="$floor_pid" run_wrk "$name" "http://127.0.0.1:$port/floor"
  kill "$floor_pid" 2>/dev/null || true
  wait "$floor_pid" 2>/dev/null || true
  local kept=() p
  for p in "${pids[@]}"; do [ "$p" = "$floor_pid" ] || kept+=("$p"); done
  pids=("${kept[@]}")
}
say "bench: the server floors (server-floor: NIO alone and Hummingbird, without and with CurlTransport; libcurl on the loop)" >&2
run_floor floor_nio nio
run_floor floor_hb hummingbird
run_floor floor_nio_curl nio "http://127.0.0.1:$sim_port/echo/bench"
# The Hummingbird + CurlTransport floor is what Parley's proxied GET is measured against: two
# rounds, the better taken, as for Parley itself.
run_floor floor_hb_curl_r1 hummingbird "http://127.0.0.1:$sim_port/echo/bench"
run_floor floor_hb_curl_r2 hummingbird "http://127.0.0.1:$sim_port/echo/bench"
best_of floor_hb_curl p50 p90 p99 err
run_floor floor_nio_loopcurl nio "http://127.0.0.1:$sim_port/echo/bench" loop
floor_runs=(floor_nio floor_hb floor_nio_curl floor_hb_curl floor_nio_loopcurl)
# Latency without queueing: one connection, one request at a time. Under the saturating
# load above, latency is mostly time spent waiting for a CPU (Little's law: connections / throughput).
say "bench: single-connection latency runs (wrk -t1 -c1 -d$latency_duration)" >&2
w_threads=1 w_connections=1 w_duration="$latency_duration"
run_wrk direct1 "http://127.0.0.1:$sim_port/echo/bench"
run_wrk nginx1 "http://127.0.0.1:$nginx_port/echo/bench"
run_wrk haproxy1 "http://127.0.0.1:$haproxy_port/echo/bench"
run_wrk parley1 "http://127.0.0.1:$parley_port/v1/proxy/echo/bench" "Authorization: Bearer $token"
run_wrk parleycc1 "http://127.0.0.1:$parley_port/v1/proxy/echo/bench" "Authorization: Bearer $token_cc"
run_wrk parleyjar1 "http://127.0.0.1:$parley_port/v1/proxy/echo/bench" "Authorization: Bearer $token_jar"
run_wrk healthz1 "http://127.0.0.1:$parley_port/healthz"
run_wrk me1 "http://127.0.0.1:$parley_port/v1/registrations/me" "Authorization: Bearer $token"
# The proxying floors one request at a time as well: what the added-p50 target meets before
# any of Parley's code runs, with CurlTransport's hand-overs and with libcurl on the loop.
run_floor floor_nio_curl1 nio "http://127.0.0.1:$sim_port/echo/bench"
run_floor floor_hb_curl1 hummingbird "http://127.0.0.1:$sim_port/echo/bench"
run_floor floor_nio_loopcurl1 nio "http://127.0.0.1:$sim_port/echo/bench" loop
floor_runs1=(floor_nio_curl1 floor_hb_curl1 floor_nio_loopcurl1)

# ---------------------------------------------------------------- memory during a big download
say "bench: ${download_mib} MiB proxied download" >&2
sleep 1
rss_before_kib="$(rss_kib "$parley_pid")"
curl -s -o /dev/null -w '%{http_code} %{size_download} %{time_total} %{speed_download}\n' \
  -H "Authorization: Bearer $token" "http://127.0.0.1:$parley_port/v1/proxy/files/big?mb=$download_mib" >"$tmp/download.txt" &
curl_pid=$!
pids+=("$curl_pid")
read -r rss_peak_kib samples < <(peak_rss_while "$curl_pid" "$rss_before_kib")
wait "$curl_pid" || die "the proxied download failed (curl exit $?)"
forget "$curl_pid"
read -r dl_code dl_bytes dl_seconds dl_speed <"$tmp/download.txt"
[ "$dl_code" = "200" ] || die "the proxied download answered $dl_code"
[ "$dl_bytes" = "$(( download_mib << 20 ))" ] || die "the proxied download delivered $dl_bytes bytes, expected $(( download_mib << 20 ))"
sleep 1
rss_after_kib="$(rss_kib "$parley_pid")"

# The same download through nginx, for the throughput ratio.
read -r ngdl_code ngdl_bytes ngdl_seconds ngdl_speed < <(curl -s -o /dev/null \
  -w '%{http_code} %{size_download} %{time_total} %{speed_download}\n' "http://127.0.0.1:$nginx_port/files/big?mb=$download_mib")
[ "$ngdl_code" = "200" ] || die "the download through nginx answered $ngdl_code"

# parley_metric NAME — the value of one unlabelled series on Parley's /metrics ("nan" when absent).
parley_metric() {
  curl -s -f "http://127.0.0.1:$parley_port/metrics" | awk -v name="$1" '$1 == name { print $2; found = 1 } END { if (!found) print "nan" }'
}
# spool_seconds — Parley's running total of seconds spent writing request bodies into spool
# files. Read around each upload through Parley, so that a slow upload can be told from a
# slow spool (the page cache; on a virtual machine whose host takes freed memory back, fresh
# memory costs a fault on the host).
spool_seconds() { parley_metric parley_spool_write_seconds; }
# spool_mibps BEFORE AFTER — the upload's size over the spool's write seconds between two readings.
spool_mibps() { awk -v a="$1" -v b="$2" -v m="$download_mib" 'BEGIN { printf "%.0f", (b - a > 0 ? m / (b - a) : 0) }'; }
# spooled_bytes — Parley's running total of bytes written into spool files.
spooled_bytes() { parley_metric parley_spool_written_bytes; }

# ---------------------------------------------------------------- memory during a big upload
# PUT of a ${download_mib} MiB file to the simulator's echo (which hashes the body), through
# Parley and through nginx (request buffering off). The destination (bench) has no filter that
# could send a request twice, so Parley keeps no copy: the body passes through as it arrives.
say "bench: ${download_mib} MiB proxied upload" >&2
upload_file="$tmp/upload.bin"
head -c "$(( download_mib << 20 ))" /dev/zero >"$upload_file"
ul_rss_before_kib="$(rss_kib "$parley_pid")"
spooled_before="$(spooled_bytes)"
curl -s -o "$tmp/upload-answer.json" -w '%{http_code} %{size_upload} %{time_total} %{speed_upload}\n' -T "$upload_file" \
  -H "Authorization: Bearer $token" "http://127.0.0.1:$parley_port/v1/proxy/echo/upload" >"$tmp/upload.txt" &
curl_pid=$!
pids+=("$curl_pid")
read -r ul_rss_peak_kib _ < <(peak_rss_while "$curl_pid" "$ul_rss_before_kib")
wait "$curl_pid" || die "the proxied upload failed (curl exit $?)"
forget "$curl_pid"
read -r ul_code ul_bytes ul_seconds ul_speed <"$tmp/upload.txt"
[ "$ul_code" = "200" ] || die "the proxied upload answered $ul_code"
ul_seen="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bodyBytes"])' "$tmp/upload-answer.json")"
[ "$ul_seen" = "$(( download_mib << 20 ))" ] || die "the upstream received $ul_seen bytes of the proxied upload"
read -r ngul_code ngul_bytes ngul_seconds ngul_speed < <(curl -s -o /dev/null \
  -w '%{http_code} %{size_upload} %{time_total} %{speed_upload}\n' -T "$upload_file" "http://127.0.0.1:$nginx_port/echo/upload")
[ "$ngul_code" = "200" ] || die "the upload through nginx answered $ngul_code"
# One transfer of a gigabyte on two shared cores varies by a factor of 1.5 between runs:
# two more of each, alternating, and the throughputs reported are the medians of three.
# transfer up|chunked|down URL [header] — one transfer of the test file; prints the speed
# (bytes/s). A chunked upload has no size to count against, so its bytes are the ones the
# simulator's echo counted (its answer stays in $tmp/chunked-answer.json).
transfer() {
  local direction="$1" url="$2"; shift 2
  local extra=() out
  [ "$#" -gt 0 ] && extra=(-H "$1")
  case "$direction" in
    up) out="$(curl -s -o /dev/null -w '%{http_code} %{size_upload} %{speed_upload}' -T "$upload_file" "${extra[@]}" "$url")" ;;
    chunked)
      out="$(curl -s -o "$tmp/chunked-answer.json" -w '%{http_code} %{size_upload} %{speed_upload}' -T "$upload_file" \
        -H 'Transfer-Encoding: chunked' "${extra[@]}" "$url")"
      set -- $out
      out="$1 $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("bodyBytes"))' "$tmp/chunked-answer.json" 2>/dev/null) $3" ;;
    down) out="$(curl -s -o /dev/null -w '%{http_code} %{size_download} %{speed_download}' "${extra[@]}" "$url")" ;;
  esac
  set -- $out
  [ "$1" = 200 ] && [ "$2" = "$(( download_mib << 20 ))" ] || die "a ${direction} transfer answered $1 with $2 bytes ($url)"
  echo "$3"
}
# median VALUE… — the middle value; of an even count, the mean of the two middle ones.
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
ul_runs=("$ul_speed") ngul_runs=("$ngul_speed") dl_runs=("$dl_speed") ngdl_runs=("$ngdl_speed")
for _ in 2 3; do
  ul_runs+=("$(transfer up "http://127.0.0.1:$parley_port/v1/proxy/echo/upload" "Authorization: Bearer $token")")
  ngul_runs+=("$(transfer up "http://127.0.0.1:$nginx_port/echo/upload")")
  dl_runs+=("$(transfer down "http://127.0.0.1:$parley_port/v1/proxy/files/big?mb=$download_mib" "Authorization: Bearer $token")")
  ngdl_runs+=("$(transfer down "http://127.0.0.1:$nginx_port/files/big?mb=$download_mib")")
done
ul_speed="$(median "${ul_runs[@]}")" ngul_speed="$(median "${ngul_runs[@]}")"
dl_speed="$(median "${dl_runs[@]}")" ngdl_speed="$(median "${ngdl_runs[@]}")"
mibps_list() { local v out=""; for v in "$@"; do out+="$(awk -v s="$v" 'BEGIN { printf "%.0f", s / 1048576 }') "; done; echo "${out% }"; }

# ---------------------------------------------------------------- a chunked upload
# The same file as a PUT without Content-Length (Transfer-Encoding: chunked), as a client sends
# a body whose size it does not know: Parley learns the length only at the body's end. nginx
# takes it in the same location as the upload above (HTTP/1.1 to the simulator, request
# buffering off, so it streams the chunks on). Three transfers each way, alternating; medians;
# the RSS figures are from the first transfer through Parley.
say "bench: ${download_mib} MiB proxied chunked upload" >&2
seen_framing() {  # the echo answer FILE -> the Transfer-Encoding and Content-Length headers the upstream saw
  python3 -c 'import json,sys; h = json.load(open(sys.argv[1]))["headers"]
print("; ".join(f"{n}: {v}" for n in ("Transfer-Encoding", "Content-Length") for v in h.get(n.lower(), [])) or "neither")' "$1"
}
# curl sends chunked when told to: checked with a small body straight at the simulator, whose
# echo lists the request headers it received.
head -c 65536 /dev/zero >"$tmp/chunked-check.bin"
curl -s -f -o "$tmp/chunked-check.json" -T "$tmp/chunked-check.bin" -H 'Transfer-Encoding: chunked' \
  "http://127.0.0.1:$sim_port/echo/chunked" || die "a chunked upload straight to the simulator failed"
[ "$(seen_framing "$tmp/chunked-check.json")" = "Transfer-Encoding: chunked" ] \
  || die "curl did not send the upload chunked (the simulator saw $(seen_framing "$tmp/chunked-check.json"))"
ch_rss_before_kib="$(rss_kib "$parley_pid")"
transfer chunked "http://127.0.0.1:$parley_port/v1/proxy/echo/chunked" "Authorization: Bearer $token" >"$tmp/chunked.txt" &
curl_pid=$!
pids+=("$curl_pid")
read -r ch_rss_peak_kib _ < <(peak_rss_while "$curl_pid" "$ch_rss_before_kib")
wait "$curl_pid" || die "the proxied chunked upload failed"
forget "$curl_pid"
# How Parley framed the body towards the upstream: chunked, or with a Content-Length.
ch_upstream_framing="$(seen_framing "$tmp/chunked-answer.json")"
ch_runs=("$(cat "$tmp/chunked.txt")")
ngch_runs=("$(transfer chunked "http://127.0.0.1:$nginx_port/echo/chunked")")
for _ in 2 3; do
  ch_runs+=("$(transfer chunked "http://127.0.0.1:$parley_port/v1/proxy/echo/chunked" "Authorization: Bearer $token")")
  ngch_runs+=("$(transfer chunked "http://127.0.0.1:$nginx_port/echo/chunked")")
done
ch_speed="$(median "${ch_runs[@]}")" ngch_speed="$(median "${ngch_runs[@]}")"
# What the six uploads on bench left in the spool: nothing, since their bodies pass through.
passed_spooled="$(awk -v a="$spooled_before" -v b="$(spooled_bytes)" 'BEGIN { printf "%.0f", b - a }')"

# ---------------------------------------------------------------- an upload kept for a replay
# The same PUT with Content-Length on bench-jar, whose Basic filter can answer a 401 by sending
# the request again: Parley spools the body (a nameless file) while it streams it on. Three
# transfers; nginx keeps no body for a replay, so its figure is the sized upload's above and
# the ratio is reported without a target. The speed of the spool's writes is printed beside it.
say "bench: ${download_mib} MiB proxied upload kept for a replay (bench-jar)" >&2
sp_runs=() sp_spool_runs=()
for _ in 1 2 3; do
  spool_before="$(spool_seconds)"
  sp_runs+=("$(transfer up "http://127.0.0.1:$parley_port/v1/proxy/echo/upload" "Authorization: Bearer $token_jar")")
  sp_spool_runs+=("$(spool_mibps "$spool_before" "$(spool_seconds)")")
done
sp_speed="$(median "${sp_runs[@]}")"
rm -f "$upload_file"
unset token token_cc token_jar

# ---------------------------------------------------------------- scale, refresh storm, revocation propagation
# Own instances and registrations (scripts/bench/*); scale last, since it leaves 1,000,000 rows.
extra_env=(BIN="$tmp/bin" DATABASE_URL="$database_url" SIM_PORT="$sim_port" KEYS="$keys" TMP="$tmp"
  PSQL="$PSQL")
# BENCH_EXTRAS: which of scripts/bench/ run (all six by default; "" for none).
extras="${BENCH_EXTRAS-propagation.py refresh_storm.py refresh_ahead.py scale.sh broker_ops.py registration_costs.py}"
for extra in $extras; do
  say "bench: scripts/bench/$extra" >&2
  env "${extra_env[@]}" "scripts/bench/$extra" >"$tmp/extra-$extra.txt" 2>"$tmp/extra-$extra.log" \
    || { cat "$tmp/extra-$extra.txt" "$tmp/extra-$extra.log" >&2; die "scripts/bench/$extra"; }
done

# ---------------------------------------------------------------- report
header_row() { printf '%-34s %11s %8s %8s %8s %9s %8s\n' "path" "requests/s" "p50 ms" "p90 ms" "p99 ms" "requests" "other %"; }
row() {
  local r="rps_$2" a="p50_$2" b="p90_$2" c="p99_$2" n="req_$2" o="other_pct_$2"
  printf '%-34s %11s %8s %8s %8s %9s %8s\n' "$1" "${!r}" "${!a}" "${!b}" "${!c}" "${!n}" "${!o}"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
diff_ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }
per_req_us() { awk -v t="$1" -v hz="$hz" -v n="$2" 'BEGIN { printf "%.1f", t / hz / n * 1e6 }'; }
verdict() { awk -v ok="$1" 'BEGIN { print (ok ? "met" : "MISSED") }'; }
# reach 1|0 — whether a floor meets a target (said apart from Parley's own verdicts).
reach() { awk -v ok="$1" 'BEGIN { print (ok ? "meets" : "misses") }'; }

tp_parley_nginx="$(ratio "$rps_parley" "$rps_nginx")"
tp_parley_direct="$(ratio "$rps_parley" "$rps_direct")"
tp_nginx_direct="$(ratio "$rps_nginx" "$rps_direct")"
tp_parley_haproxy="$(ratio "$rps_parley" "$rps_haproxy")"
tp_haproxy_direct="$(ratio "$rps_haproxy" "$rps_direct")"
tp_haproxy_nginx="$(ratio "$rps_haproxy" "$rps_nginx")"
add_p99_haproxy="$(diff_ms "$p99_haproxy" "$p99_direct")"
add_p50_haproxy="$(diff_ms "$p50_haproxy" "$p50_direct")"
# The same ratios as h2load measured them (its runs of the same rounds, faster of two).
h2_parley_nginx="$(ratio "$rps_h2parley" "$rps_h2nginx")"
h2_parley_haproxy="$(ratio "$rps_h2parley" "$rps_h2haproxy")"
h2_parley_direct="$(ratio "$rps_h2parley" "$rps_h2direct")"
h2_nginx_direct="$(ratio "$rps_h2nginx" "$rps_h2direct")"
h2_haproxy_direct="$(ratio "$rps_h2haproxy" "$rps_h2direct")"
# How far apart the two tools put Parley against nginx: the larger ratio over the smaller,
# minus one, in %, from the unrounded requests/s. Above 15 % the figure depends on the tool.
gen_gap_pct="$(awk -v a="$rps_parley" -v b="$rps_nginx" -v c="$rps_h2parley" -v d="$rps_h2nginx" 'BEGIN {
  w = a / b; h = c / d; hi = (w > h) ? w : h; lo = (w > h) ? h : w; printf "%.1f", 100 * (hi / lo - 1) }')"
gen_verdict="$(awk -v g="$gen_gap_pct" 'BEGIN { print (g > 15) ? "DEPENDS ON THE LOAD GENERATOR" : "consistent (within 15 %)" }')"
add_p99_parley="$(diff_ms "$p99_parley" "$p99_direct")"
add_p99_nginx="$(diff_ms "$p99_nginx" "$p99_direct")"
add_p99_parley1="$(diff_ms "$p99_parley1" "$p99_direct1")"
add_p50_parley="$(diff_ms "$p50_parley" "$p50_direct")"
add_p50_nginx="$(diff_ms "$p50_nginx" "$p50_direct")"
growth_kib=$(( rss_peak_kib - rss_before_kib ))
dl_mibps="$(awk -v s="$dl_speed" 'BEGIN { printf "%.0f", s / 1048576 }')"
ngdl_mibps="$(awk -v s="$ngdl_speed" 'BEGIN { printf "%.0f", s / 1048576 }')"
ul_mibps="$(awk -v s="$ul_speed" 'BEGIN { printf "%.0f", s / 1048576 }')"
ngul_mibps="$(awk -v s="$ngul_speed" 'BEGIN { printf "%.0f", s / 1048576 }')"
ul_growth_kib=$(( ul_rss_peak_kib - ul_rss_before_kib ))
ch_mibps="$(awk -v s="$ch_speed" 'BEGIN { printf "%.0f", s / 1048576 }')"
ngch_mibps="$(awk -v s="$ngch_speed" 'BEGIN { printf "%.0f", s / 1048576 }')"
sp_mibps="$(awk -v s="$sp_speed" 'BEGIN { printf "%.0f", s / 1048576 }')"
ch_growth_kib=$(( ch_rss_peak_kib - ch_rss_before_kib ))
conns() { [ -s "$tmp/conns-$1.txt" ] && grep -c "\"$2" "$tmp/conns-$1.txt" || echo 0; }
conns_nginx="$(conns nginx nginx)"; conns_haproxy="$(conns haproxy haproxy)"; conns_parley="$(conns parley parley)"; conns_parleycc="$(conns parleycc parley)"; conns_parleyjar="$(conns parleyjar parley)"
cpu_us() { per_req_us "$(eval echo "\$cpu_$1_$2")" "$(eval echo "\$req_$2")"; }
add_p50_parley1="$(diff_ms "$p50_parley1" "$p50_direct1")"
add_p50_parleycc1="$(diff_ms "$p50_parleycc1" "$p50_direct1")"
add_p99_parleycc="$(diff_ms "$p99_parleycc" "$p99_direct")"
tp_parleycc_nginx="$(ratio "$rps_parleycc" "$rps_nginx")"
add_p50_parleyjar1="$(diff_ms "$p50_parleyjar1" "$p50_direct1")"
add_p99_parleyjar="$(diff_ms "$p99_parleyjar" "$p99_direct")"
tp_parleyjar_nginx="$(ratio "$rps_parleyjar" "$rps_nginx")"
# Parley's CPU per proxied request over nginx's, both from the same round's load runs.
us_healthz="$(cpu_us parley healthz)" us_nginx="$(cpu_us nginx nginx)" us_parley="$(cpu_us parley parley)"
cpu_parley_over_nginx="$(ratio "$us_parley" "$us_nginx")"
# The paired runs: each round's ratios against the plain call of the same round, and their medians.
# pair_table KIND — one line per round, KIND's (parleycc, parleyjar) ratios over plain: requests/s
# and CPU per request as measured, then in units of the simulator's speed (requests/s times the
# simulator's CPU per request; Parley's CPU per request over the simulator's).
pair_table() {
  local kind="$1" round x p rx rp
  for round in $(seq "$pair_rounds"); do
    x="pair${kind}_$round" p="pairparley_$round"
    rx="rps_$x" rp="rps_$p"
    awk -v rx="${!rx}" -v rp="${!rp}" -v cx="$(cpu_us parley "$x")" -v cp="$(cpu_us parley "$p")" \
      -v sx="$(cpu_us sim "$x")" -v sp="$(cpu_us sim "$p")" 'BEGIN {
        if (rp <= 0 || cp <= 0 || sx <= 0 || sp <= 0) { print "0 0 0 0"; exit }
        printf "%.3f %.3f %.3f %.3f\n", rx / rp, cx / cp, (rx * sx) / (rp * sp), (cx / sx) / (cp / sp) }'
  done
}
# pct_from_ratio R — "+3.1 %" for 1.031.
pct_from_ratio() { awk -v r="$1" 'BEGIN { printf "%+.1f %%", (r - 1) * 100 }'; }
# pair_KIND_FIGURE: the rounds' ratios ("r1 r2 …"); med_KIND_FIGURE: their median.
for kind in cc jar; do
  table="$(pair_table "parley$kind")"
  column=1
  for figure in rps cpu tp work; do
    printf -v "pair_${kind}_$figure" '%s' "$(awk -v c="$column" '{ printf "%s%s", (NR > 1 ? " " : ""), $c }' <<<"$table")"
    v="pair_${kind}_$figure"
    # shellcheck disable=SC2086
    printf -v "med_${kind}_$figure" '%s' "$(median ${!v})"
    column=$(( column + 1 ))
  done
done
# within_ratio PCT R — 1 when R is within PCT % of 1, either way.
within_ratio() { awk -v p="$1" -v r="$2" 'BEGIN { print (r <= 1 + p / 100 && r >= 1 - p / 100) }'; }

say ""
say "================ Parley benchmark ================"
say "date:      $(date -u '+%Y-%m-%d %H:%M UTC')"
say "machine:   $(nproc) cores ($(lscpu 2>/dev/null | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}')), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r)"
say "commit:    $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- Sources 2>/dev/null || echo ' (+ uncommitted changes in Sources)')${BENCH_PARLEY_BIN:+ (the simulator and the scripts; Parley is the binary below)}"
say "parley bin: $parley_bin (sha256 $parley_sha)${BENCH_PARLEY_BIN:+, from BENCH_PARLEY_BIN}"
say "tools:     $(wrk -v 2>&1 | head -1 | awk '{print "wrk", $2}'), h2load $(h2load --version 2>&1 | head -1 | awk '{print $2}'), $(nginx -v 2>&1 | sed 's/.*: //'), HAProxy $(haproxy -v 2>&1 | head -1 | awk '{print $3}'), PostgreSQL $("$pg_bin/postgres" --version | awk '{print $3}'), $(swift --version 2>/dev/null | head -1 | sed 's/ (.*//')"
say "other work: the machine was ${busy_before}% busy (2 s sample) just before the load runs, with our servers idle"
inherited="$(env | awk -F= '/^PARLEY_/ && $1 !~ /^PARLEY_(DATABASE_URL|ENCRYPTION_KEYS|DESTINATIONS|MIGRATIONS_DIR|LOG_LEVEL|LISTEN)$/ {
  print ($1 ~ /TOKEN|KEY|SECRET|PASSWORD|URL/) ? $1 "=(set)" : $0 }' | sort | tr '\n' ' ')"
say "parley:    PARLEY_LOG_LEVEL=warning; destinations bench (no auth blocks), bench-cc (client credentials), bench-jar (Basic, a jar of 20 cookies)${inherited:+; inherited from the environment: $inherited}"
say "NOTE:      wrk (or h2load), Parley, the simulator, nginx, HAProxy and PostgreSQL share these $(nproc) cores;"
say "           every figure below includes that contention (the load generator competes with the server)."
say ""
say "-- small GET /echo/bench, wrk -t$threads -c$connections -d$duration (keep-alive) --"
header_row
row "simulator direct" direct
row "nginx proxy_pass -> simulator" nginx
row "HAProxy -> simulator" haproxy
row "Parley /v1/proxy -> simulator" parley
row "Parley, client-credentials token" parleycc
row "Parley, Basic + jar of 20 cookies" parleyjar
for n in direct nginx haproxy parley parleycc parleyjar; do
  e="err_$n"
  [ -n "${!e}" ] && say "  $n: wrk reported${!e}"
done
say "(each path ran twice, interleaved; the faster run is shown. requests/s of both rounds: direct $rounds_direct,"
say " nginx $rounds_nginx, HAProxy $rounds_haproxy, Parley $rounds_parley, Parley with token $rounds_parleycc, Parley with cookies $rounds_parleyjar)"
say "(nginx: 1 worker, upstream keepalive 64; HAProxy $(haproxy -v 2>&1 | head -1 | awk '{print $3}'): nbthread 1, http-reuse always, no logging)"
say "('other %': share of the machine's CPU time during that run used by processes outside this benchmark;"
say " above a few % the run was disturbed by other work)"
say "all responses 2xx (wrk 'Non-2xx or 3xx responses' absent or 0) on every path"
say ""
say "-- the same GET one request at a time, wrk -t1 -c1 -d$latency_duration (no queueing) --"
header_row
row "simulator direct" direct1
row "nginx proxy_pass -> simulator" nginx1
row "HAProxy -> simulator" haproxy1
row "Parley /v1/proxy -> simulator" parley1
row "Parley, client-credentials token" parleycc1
row "Parley, Basic + jar of 20 cookies" parleyjar1
row "Parley GET /healthz (no DB)" healthz1
row "Parley GET /v1/registrations/me" me1
row "floor: NIO + CurlTransport -> sim" floor_nio_curl1
row "floor: Hummingbird + CurlTransport" floor_hb_curl1
row "floor: NIO + libcurl on the loop" floor_nio_loopcurl1
say "added p50 at 1 connection: parley - direct = $(diff_ms "$p50_parley1" "$p50_direct1") ms, nginx - direct = $(diff_ms "$p50_nginx1" "$p50_direct1") ms, haproxy - direct = $(diff_ms "$p50_haproxy1" "$p50_direct1") ms"
say "added p99 at 1 connection: parley - direct = $add_p99_parley1 ms, nginx - direct = $(diff_ms "$p99_nginx1" "$p99_direct1") ms, haproxy - direct = $(diff_ms "$p99_haproxy1" "$p99_direct1") ms"
say "(a 1-connection p99 rests on a few thousand requests and is easily moved by other work on the machine)"
say ""
say "Parley breakdown (same wrk settings as the load runs; no upstream involved):"
row "Parley GET /healthz (no DB)" healthz
row "Parley GET /v1/registrations/me" me
say "Server floors (server-floor: nothing but the answer; the 'parley' CPU column is the floor server's):"
row "NIO alone, fixed answer" floor_nio
row "Hummingbird, fixed answer" floor_hb
row "NIO + CurlTransport -> simulator" floor_nio_curl
row "Hummingbird + CurlTransport -> sim" floor_hb_curl
row "NIO + libcurl on the loop -> sim" floor_nio_loopcurl
for n in healthz me "${floor_runs[@]}" direct1 nginx1 haproxy1 parley1 parleycc1 parleyjar1 healthz1 me1 "${floor_runs1[@]}"; do
  e="err_$n"
  [ -n "${!e}" ] && say "  $n: wrk reported${!e}"
done
say ""
say "throughput   parley/nginx   = $tp_parley_nginx"
say "throughput   parley/haproxy = $tp_parley_haproxy"
say "throughput   parley/direct  = $tp_parley_direct"
say "throughput   nginx/direct   = $tp_nginx_direct"
say "throughput   haproxy/direct = $tp_haproxy_direct"
say "added p50    parley - direct = $add_p50_parley ms, nginx - direct = $add_p50_nginx ms, haproxy - direct = $add_p50_haproxy ms"
say "added p99    parley - direct = $add_p99_parley ms, nginx - direct = $add_p99_nginx ms, haproxy - direct = $add_p99_haproxy ms"
say "(wrk keeps $connections requests in flight, so under load latency is about connections / throughput:"
say " $connections / $rps_parley = $(awk -v c="$connections" -v r="$rps_parley" 'BEGIN { printf "%.1f", 1000 * c / r }') ms for Parley — mostly waiting for a CPU, not work)"
say ""
say "-- the headline GET with a second load generator: h2load --h1 -t$threads -c$connections -D $duration (keep-alive) --"
printf '%-34s %11s %8s %8s %8s %9s %7s %8s\n' "path" "requests/s" "mean ms" "sd ms" "max ms" "requests" "failed" "other %"
h2row() {
  local r="rps_$2" a="mean_$2" b="sd_$2" c="max_$2" n="req_$2" f="failed_$2" o="other_pct_$2"
  printf '%-34s %11s %8s %8s %8s %9s %7s %8s\n' "$1" "${!r}" "${!a}" "${!b}" "${!c}" "${!n}" "${!f}" "${!o}"
}
h2row "simulator direct" h2direct
h2row "nginx proxy_pass -> simulator" h2nginx
h2row "HAProxy -> simulator" h2haproxy
h2row "Parley /v1/proxy -> simulator" h2parley
say "(same rounds as wrk's, the faster of two shown; requests/s of both rounds: direct $rounds_h2direct, nginx $rounds_h2nginx,"
say " HAProxy $rounds_h2haproxy, Parley $rounds_h2parley. h2load reports no percentiles: shown are the mean, sd and max of its 'time for request';"
say " 'failed' = failed + errored + timed out; no 4xx/5xx on any path)"
say "throughput (h2load) parley/nginx = $h2_parley_nginx, parley/haproxy = $h2_parley_haproxy, parley/direct = $h2_parley_direct; nginx/direct = $h2_nginx_direct, haproxy/direct = $h2_haproxy_direct"
say "load generators: parley/nginx is $tp_parley_nginx with wrk, $h2_parley_nginx with h2load; the larger is $gen_gap_pct % above the smaller: $gen_verdict"
[ "${#h2load_stuck[@]}" -eq 0 ] || say "h2load ran on past its duration and was stopped, then measured again, in: ${h2load_stuck[*]}"
[ "${#h2load_stuck_warmup[@]}" -eq 0 ] || say "h2load ran on past its warm-up's duration and was stopped (a warm-up is not measured) before: ${h2load_stuck_warmup[*]}"
say ""
say "-- CPU time per request during each measured run (user+system, all processes of that role) --"
printf '%-22s %10s %10s %10s %11s %12s %12s\n' "run" "parley us" "sim us" "nginx us" "haproxy us" "postgres us" "load gen us"
for n in direct nginx haproxy parley parleycc parleyjar healthz me "${floor_runs[@]}" h2direct h2nginx h2haproxy h2parley; do
  r="req_$n"; cp="cpu_parley_$n"; cs="cpu_sim_$n"; cn="cpu_nginx_$n"; ch="cpu_haproxy_$n"; cg="cpu_pg_$n"; cw="cpu_gen_$n"
  printf '%-22s %10s %10s %10s %11s %12s %12s\n' "$n" "$(per_req_us "${!cp}" "${!r}")" "$(per_req_us "${!cs}" "${!r}")" \
    "$(per_req_us "${!cn}" "${!r}")" "$(per_req_us "${!ch}" "${!r}")" "$(per_req_us "${!cg}" "${!r}")" "$(per_req_us "${!cw}" "${!r}")"
done
say "(load gen: wrk, or h2load on the h2… rows)"
say "(clock ticks of $((1000 / hz)) ms, so small figures are coarse)"
say "PostgreSQL transactions per proxied GET: $(ratio "$xact_parley" "$xact_req_parley") ($xact_parley for $xact_req_parley requests of the first round, warm-up excluded)"
say ""
say "-- upstream connections open to the simulator halfway through each load run (ss) --"
say "nginx: $conns_nginx (keepalive 64); HAProxy: $conns_haproxy (http-reuse always); Parley: $conns_parley (libcurl, at most ${PARLEY_UPSTREAM_CONNECTIONS_PER_HOST:-32} per host: PARLEY_UPSTREAM_CONNECTIONS_PER_HOST); Parley with tokens: $conns_parleycc; Parley with cookies: $conns_parleyjar"
say ""
say "-- resident memory and start-up --"
say "first start, empty database (runs migrations): $first_start_ms ms to /readyz 200"
say "cold start to ready (schema current):          $cold_start_ms ms"
say "idle RSS after start:                          $(mib "$idle_rss_kib") MiB"
say "${download_mib} MiB proxied download: HTTP $dl_code, $dl_bytes bytes in ${dl_seconds}s (first of three); median $dl_mibps MiB/s of $(mibps_list "${dl_runs[@]}")"
say "  RSS before $(mib "$rss_before_kib") MiB, peak $(mib "$rss_peak_kib") MiB ($samples samples at 100 ms), growth $(mib "$growth_kib") MiB, after $(mib "$rss_after_kib") MiB"
say "  the same download through nginx: median $ngdl_mibps MiB/s of $(mibps_list "${ngdl_runs[@]}")"
say "${download_mib} MiB proxied upload (PUT, Content-Length): HTTP $ul_code in ${ul_seconds}s (first of three); median $ul_mibps MiB/s of $(mibps_list "${ul_runs[@]}"); through nginx $ngul_mibps MiB/s of $(mibps_list "${ngul_runs[@]}")"
say "  RSS before $(mib "$ul_rss_before_kib") MiB, peak $(mib "$ul_rss_peak_kib") MiB, growth $(mib "$ul_growth_kib") MiB"
say "  (destination bench, without a filter that could send it twice: the body passes through, kept nowhere)"
say "${download_mib} MiB proxied chunked upload (PUT, Transfer-Encoding: chunked, no Content-Length): median $ch_mibps MiB/s of $(mibps_list "${ch_runs[@]}"); through nginx $ngch_mibps MiB/s of $(mibps_list "${ngch_runs[@]}")"
say "  RSS before $(mib "$ch_rss_before_kib") MiB, peak $(mib "$ch_rss_peak_kib") MiB, growth $(mib "$ch_growth_kib") MiB (first transfer); the upstream received it with $ch_upstream_framing"
say "  bytes the six uploads on bench wrote into Parley's spool: $passed_spooled (parley_spool_written_bytes; expected 0)"
say "${download_mib} MiB proxied upload kept for a replay (PUT, Content-Length, bench-jar with Basic): median $sp_mibps MiB/s of $(mibps_list "${sp_runs[@]}")"
say "  Parley's spool took the body at ${sp_spool_runs[*]} MiB/s in the three uploads (bytes over the seconds its writes took, parley_spool_write_seconds)"
say ""
for extra in $extras; do grep -v '^RESULT' "$tmp/extra-$extra.txt" || true; say ""; done
say ""
# Parley against its own floor, in the same run: the same GET served by Hummingbird and fetched
# through CurlTransport with none of Parley's code (server-floor), and for one connection NIO
# with CurlTransport. These targets hold on any machine; nginx and HAProxy are the limit, reported.
above_floor() { awk -v a="$1" -v b="$2" 'BEGIN { if (b <= 0.005) print "n/a"; else printf "%.2f", a / b }'; }
tp_parley_floor="$(ratio "$rps_parley" "$rps_floor_hb_curl")"
cpu_parley_floor="$(ratio "$(cpu_us parley parley)" "$(cpu_us parley floor_hb_curl)")"
add_p99_floor="$(diff_ms "$p99_floor_hb_curl" "$p99_direct")" add_p50_floor1="$(diff_ms "$p50_floor_nio_curl1" "$p50_direct1")"
p99_parley_floor="$(above_floor "$add_p99_parley" "$add_p99_floor")" p50_parley_floor="$(above_floor "$add_p50_parley1" "$add_p50_floor1")"
say "RESULT throughput parley/floor = $tp_parley_floor (target >= 0.9 of Hummingbird + CurlTransport's: $(verdict "$(awk -v r="$tp_parley_floor" 'BEGIN{print (r >= 0.9)}')")); $rps_parley vs $rps_floor_hb_curl requests/s"
say "RESULT CPU per proxied request parley/floor = $cpu_parley_floor (target <= 1.15: $(verdict "$(awk -v r="$cpu_parley_floor" 'BEGIN{print (r <= 1.15)}')")); Parley $(cpu_us parley parley) us, Hummingbird + CurlTransport $(cpu_us parley floor_hb_curl) us"
say "RESULT added p99 under load parley/floor = $p99_parley_floor (target <= 1.2: $(verdict "$(awk -v r="$p99_parley_floor" 'BEGIN{print (r != "n/a" && r <= 1.2)}')")); over direct: Parley $add_p99_parley ms, Hummingbird + CurlTransport $add_p99_floor ms"
say "RESULT added p50 at 1 connection parley/NIO floor = $p50_parley_floor (target <= 1.2: $(verdict "$(awk -v r="$p50_parley_floor" 'BEGIN{print (r != "n/a" && r <= 1.2)}')")); over direct: Parley $add_p50_parley1 ms, NIO + CurlTransport $add_p50_floor1 ms"
say "RESULT throughput parley/nginx = $tp_parley_nginx (reported: nginx is the limit, not a target)"
say "RESULT throughput parley/haproxy = $tp_parley_haproxy (haproxy/nginx = $tp_haproxy_nginx)"
say "RESULT throughput parley/direct = $tp_parley_direct (nginx/direct = $tp_nginx_direct, haproxy/direct = $tp_haproxy_direct)"
say "RESULT load generators: parley/nginx wrk $tp_parley_nginx, h2load $h2_parley_nginx ($gen_gap_pct % apart: $gen_verdict); parley/haproxy wrk $tp_parley_haproxy, h2load $h2_parley_haproxy"
say "RESULT added p99 under load parley - direct = $add_p99_parley ms (reported); nginx - direct = $add_p99_nginx ms, haproxy - direct = $add_p99_haproxy ms"
say "RESULT CPU per proxied request parley/nginx = $cpu_parley_over_nginx (reported); Parley $(cpu_us parley parley) us, nginx $(cpu_us nginx nginx) us, HAProxy $(cpu_us haproxy haproxy) us"
# The floor under the CPU target: what the same HTTP server, router and middleware cost for an
# answer that does nothing (/healthz), against nginx's whole proxied request. A Hummingbird
# application of its own (the simulator answering /echo) is the second view of the same floor.
floor_over_nginx="$(ratio "$us_healthz" "$us_nginx")"
floor_room_us="$(awk -v n="$us_nginx" -v h="$us_healthz" 'BEGIN { printf "%.1f", 3 * n - h }')"
say "RESULT framework floor: Parley's GET /healthz costs $us_healthz us of CPU = $floor_over_nginx of nginx's whole proxied request ($us_nginx us); the simulator, a Hummingbird application, $(cpu_us sim direct) us per /echo answer; the CPU target (<= 3x nginx) leaves a proxied request $floor_room_us us above /healthz, the measured one takes $(awk -v p="$us_parley" -v h="$us_healthz" 'BEGIN { printf "%.1f", p - h }') us"
floor_sum_us="$(awk -v h="$us_healthz" -v c="$curl_floor_us" 'BEGIN { printf "%.1f", h + c }')"
say "RESULT libcurl floor: libcurl alone (scripts/bench/curl_floor.c, $floor_requests GETs to the simulator, $connections in flight) costs $curl_floor_us us of CPU per request; with /healthz that is $floor_sum_us us = $(ratio "$floor_sum_us" "$us_nginx") of nginx's whole proxied request (the CPU target: 3), and Parley's proxied request takes $(awk -v p="$us_parley" -v f="$floor_sum_us" 'BEGIN { printf "%.1f", p - f }') us more than both"
us_floor_nio="$(cpu_us parley floor_nio)" us_floor_hb="$(cpu_us parley floor_hb)"
us_floor_nio_curl="$(cpu_us parley floor_nio_curl)" us_floor_hb_curl="$(cpu_us parley floor_hb_curl)" us_floor_loopcurl="$(cpu_us parley floor_nio_loopcurl)"
say "RESULT server floors (server-floor, nothing but the answer): a fixed answer costs $us_floor_nio us of CPU on NIO alone, $us_floor_hb us on Hummingbird; the simulator's answer through CurlTransport $us_floor_nio_curl us on NIO alone = $(ratio "$us_floor_nio_curl" "$us_nginx") of nginx's whole proxied request, $us_floor_hb_curl us on Hummingbird = $(ratio "$us_floor_hb_curl" "$us_nginx") (the CPU target: 3); Parley's proxied request takes $(awk -v p="$us_parley" -v f="$us_floor_hb_curl" 'BEGIN { printf "%.1f", p - f }') us more than the Hummingbird floor, of which Hummingbird itself accounts for $(awk -v h="$us_floor_hb_curl" -v n="$us_floor_nio_curl" 'BEGIN { printf "%.1f", h - n }') us; libcurl driven on the loop instead of CurlTransport's thread, on NIO: $us_floor_loopcurl us ($(ratio "$us_floor_loopcurl" "$us_floor_nio_curl") of CurlTransport's; the simulator behind it $(cpu_us sim floor_nio_loopcurl) against $(cpu_us sim floor_nio_curl) us per answer)"
say "RESULT system calls per request (context switches), first round: Parley $(per_request_events parley_r1 proxy raw_syscalls:sys_enter) ($(per_request_events parley_r1 proxy context-switches)), nginx $(per_request_events nginx_r1 proxy raw_syscalls:sys_enter) ($(per_request_events nginx_r1 proxy context-switches)), HAProxy $(per_request_events haproxy_r1 proxy raw_syscalls:sys_enter) ($(per_request_events haproxy_r1 proxy context-switches)); the simulator behind each: direct $(per_request_events direct_r1 sim raw_syscalls:sys_enter), under nginx $(per_request_events nginx_r1 sim raw_syscalls:sys_enter), under Parley $(per_request_events parley_r1 sim raw_syscalls:sys_enter)"
say "RESULT added p50 at 1 connection parley - direct = $add_p50_parley1 ms (reported); p99 $add_p99_parley1 ms"
# The four headline targets applied to the proxying floors, which run none of Parley's code: a
# target a floor misses is out of reach of any change inside Parley on this machine and this run.
floor_against_targets() { # LABEL LOAD_RUN ONE_CONNECTION_RUN
  local r="rps_$2" q99="p99_$2" q50="p50_$3" tp add99 cpu add50
  tp="$(ratio "${!r}" "$rps_nginx")" add99="$(diff_ms "${!q99}" "$p99_direct")"
  cpu="$(ratio "$(cpu_us parley "$2")" "$us_nginx")" add50="$(diff_ms "${!q50}" "$p50_direct1")"
  printf '%s: throughput %s of nginx (%s >= 0.8), added p99 %s ms (%s <= 1), CPU %s of nginx (%s <= 3), added p50 at 1 connection %s ms (%s <= 0.15)' \
    "$1" "$tp" "$(reach "$(awk -v r="$tp" 'BEGIN{print (r >= 0.8)}')")" "$add99" "$(reach "$(awk -v d="$add99" 'BEGIN{print (d <= 1)}')")" \
    "$cpu" "$(reach "$(awk -v r="$cpu" 'BEGIN{print (r <= 3)}')")" "$add50" "$(reach "$(awk -v d="$add50" 'BEGIN{print (d <= 0.15)}')")"
}
say "RESULT the headline targets on the proxying floors (server-floor, none of Parley's code; one run each): $(floor_against_targets "NIO + CurlTransport" floor_nio_curl floor_nio_curl1); $(floor_against_targets "Hummingbird + CurlTransport" floor_hb_curl floor_hb_curl1); $(floor_against_targets "NIO + libcurl on the loop" floor_nio_loopcurl floor_nio_loopcurl1)"
say "RESULT tokens injected (client credentials, cached), $pair_rounds paired rounds, in units of the simulator's speed: throughput $(pct_from_ratio "$med_cc_tp") against plain ($(verdict "$(within_ratio 10 "$med_cc_tp")") within 10 %; median of $pair_cc_tp), CPU per request $(pct_from_ratio "$med_cc_work") ($(verdict "$(within_ratio 10 "$med_cc_work")"); median of $pair_cc_work); as measured: requests/s $(pct_from_ratio "$med_cc_rps"), CPU $(pct_from_ratio "$med_cc_cpu") (medians of $pair_cc_rps and $pair_cc_cpu); the rounds above (/echo/bench): $rps_parleycc vs $rps_parley req/s, CPU $(cpu_us parley parleycc) vs $(cpu_us parley parley) us, parley/nginx $tp_parleycc_nginx; added p99 $add_p99_parleycc vs $add_p99_parley ms; added p50 at 1 connection $add_p50_parleycc1 vs $add_p50_parley1 ms"
say "RESULT cookie jar (Basic, 20 cookies), $pair_rounds paired rounds, in units of the simulator's speed: throughput $(pct_from_ratio "$med_jar_tp") against plain ($(verdict "$(within_ratio 15 "$med_jar_tp")") within 15 %; median of $pair_jar_tp), CPU per request $(pct_from_ratio "$med_jar_work") ($(verdict "$(within_ratio 15 "$med_jar_work")"); median of $pair_jar_work); as measured: requests/s $(pct_from_ratio "$med_jar_rps"), CPU $(pct_from_ratio "$med_jar_cpu") (medians of $pair_jar_rps and $pair_jar_cpu); the rounds above (/echo/bench, which echoes the 20 cookies back): $rps_parleyjar vs $rps_parley req/s, CPU $(cpu_us parley parleyjar) vs $(cpu_us parley parley) us, parley/nginx $tp_parleyjar_nginx; added p99 $add_p99_parleyjar vs $add_p99_parley ms; added p50 at 1 connection $add_p50_parleyjar1 vs $add_p50_parley1 ms"
say "RESULT ${download_mib} MiB download: RSS growth $(mib "$growth_kib") MiB (target <= 32 MiB: $(verdict "$(( growth_kib <= 32768 ))")); throughput $dl_mibps MiB/s = $(ratio "$dl_mibps" "$ngdl_mibps") of nginx (target >= 0.8: $(verdict "$(awk -v a="$dl_mibps" -v b="$ngdl_mibps" 'BEGIN{print (a >= 0.8 * b)}')"))"
say "RESULT ${download_mib} MiB upload: RSS growth $(mib "$ul_growth_kib") MiB (target <= 32 MiB: $(verdict "$(( ul_growth_kib <= 32768 ))")); throughput $ul_mibps MiB/s = $(ratio "$ul_mibps" "$ngul_mibps") of nginx (target >= 0.8: $(verdict "$(awk -v a="$ul_mibps" -v b="$ngul_mibps" 'BEGIN{print (a >= 0.8 * b)}')")); bytes the uploads on bench spooled: $passed_spooled"
say "RESULT ${download_mib} MiB chunked upload: RSS growth $(mib "$ch_growth_kib") MiB (target <= 32 MiB: $(verdict "$(( ch_growth_kib <= 32768 ))")); throughput $ch_mibps MiB/s = $(ratio "$ch_mibps" "$ngch_mibps") of nginx (target >= 0.8: $(verdict "$(awk -v a="$ch_mibps" -v b="$ngch_mibps" 'BEGIN{print (a >= 0.8 * b)}')"))"
say "RESULT ${download_mib} MiB upload kept for a replay (bench-jar, spooled): $sp_mibps MiB/s = $(ratio "$sp_mibps" "$ngul_mibps") of nginx's sized upload (reported; nginx keeps no body); Parley's spool wrote at ${sp_spool_runs[*]} MiB/s"
for extra in $extras; do grep '^RESULT' "$tmp/extra-$extra.txt" || true; done
say "RESULT idle rss = $(mib "$idle_rss_kib") MiB (target <= 48 MiB: $(verdict "$(( idle_rss_kib <= 49152 ))"))"
say "RESULT cold start to ready = $cold_start_ms ms (target <= 300 ms: $(verdict "$(( cold_start_ms <= 300 ))")); first start with migrations = $first_start_ms ms"
if [ "${BENCH_PROFILE:-}" = "1" ] && [ -s "$tmp/perf.data" ]; then
  set +o pipefail
  say ""
  say "-- perf: Parley's top frames during the proxied run (self time, % of samples) --"
  perf report -i "$tmp/perf.data" --no-children --sort symbol --stdio 2>/dev/null \
    | grep -E '^ +[0-9.]+%' | head -30 | swift demangle --simplified | cut -c1-160
  say ""
  say "-- perf: Parley's own frames with what they call (children, % of samples) --"
  perf report -i "$tmp/perf.data" --children --sort symbol --stdio -g none 2>/dev/null \
    | grep -E '^ +[0-9.]+%' | swift demangle --simplified \
    | grep -E 'ParleyServer|Conversation|CurlTransport|AuthFlows|ProxyController|Metrics|Middleware|Authenticator|Cookie|Logger' \
    | head -40 | cut -c1-200
  say ""
  say "-- perf: by shared object --"
  perf report -i "$tmp/perf.data" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9.]+%' | head -12
  [ -n "${BENCH_PROFILE_OUT:-}" ] && cp "$tmp/perf.data" "$BENCH_PROFILE_OUT"
  set -o pipefail
fi

# ---------------------------------------------------------------- inside the process
# package-benchmark (Benchmarks/): time and allocations of the engine, header and URL
# handling, cookie matching and sealing. BENCH_INTERNALS=0 skips it (its first build
# takes about 4–5 minutes).
if [ "${BENCH_INTERNALS:-1}" != "0" ]; then
  say ""
  scripts/bench-internals.sh || say "bench: scripts/bench-internals.sh failed (the figures above stand)"
fi
