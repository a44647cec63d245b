#!/usr/bin/env bash
# Parley soak (make soak): three instances behind HAProxy, a real PostgreSQL and the upstream
# simulator, under a realistic mix at 70 % of the measured maximum, while instances are killed.
#
#   scripts/soak.sh                       (or: make soak; one hour)
#   SOAK_SECONDS=600 scripts/soak.sh      (ten minutes)
#
# On this machine, in a temp folder: a throwaway PostgreSQL (as root: run as 'postgres'), the
# upstream simulator (access tokens living SOAK_TOKEN_SECONDS, so they are refreshed all the
# time), three `parley serve` instances and HAProxy running deploy/haproxy/parley.cfg (only its
# certificate, bind address and servers replaced; a stats socket, an X-Soak-Id capture and
# `option dontlog-normal` added so the driver can tell which instance a failed request was on).
# The driver (scripts/soak/soak.py) registers on a Basic + CSRF + cookie destination, an OAuth2
# client-credentials one and an OAuth2 authorization-code one (signed in through Parley's flow
# pages), measures the maximum throughput with a short ramp, then paces the mix (proxied GETs and
# POSTs, registration reads, new registrations) at SOAK_LOAD_PERCENT % of it for SOAK_SECONDS.
# Meanwhile one instance is killed with SIGKILL every SOAK_KILL_INTERVAL seconds (round robin)
# and restarted, and PostgreSQL is restarted once in the middle (pg_ctl restart -m fast).
#
# It prints requests, errors (classified), tokens lost, RSS at start and end of every instance
# process, and exits 0 when every criterion holds:
#   - every request got its expected answer, except those in flight on an instance when it was
#     killed (HAProxy's log names that instance and a server-side abort) and 503s
#     (store_unavailable, or HAProxy's own with no instance ready) during the PostgreSQL restart
#     and SOAK_PG_GRACE_SECONDS after it;
#   - no token lost: every authorization-code registration that was signed in is still answered
#     200 as its user at the end, still holds its token (admin API), never answered 401
#     interaction_required, and the authorization server saw no further sign-in and no refused
#     refresh (invalid_grant);
#   - at least one kill and the PostgreSQL restart happened, and tokens were refreshed;
#   - with SOAK_MAX_RSS_GROWTH_MIB set: no process grew more than that.
# Exit 1 when a criterion fails, 2 when something could not run. The folder with every log is
# kept (and named) when the soak fails.
#
# Knobs (environment):
#   SOAK_SECONDS (3600)             length of the paced phase (the set-up and the ramp come first)
#   SOAK_LOAD_PERCENT (70)          load as a share of the measured maximum
#   SOAK_KILL_INTERVAL              seconds between SIGKILLs (default min(300, SOAK_SECONDS / 2.5))
#   SOAK_RAMP_STEP_SECONDS (5)      each step of the throughput ramp
#   SOAK_TOKEN_SECONDS (90)         lifetime of the simulator's access tokens (Parley refreshes 30 s early)
#   SOAK_PG_GRACE_SECONDS (10)      how long after PostgreSQL is back its errors are still allowed
#   SOAK_MAX_RSS_GROWTH_MIB         fail when a process grows more than this (default: no limit)
#   SOAK_SABOTAGE=revoke-refresh-tokens   a check of the soak itself: it must then fail (tokens lost)
#   PARLEY_BINARY, PARLEY_SIMULATOR_BINARY   use these binaries (make test passes its debug
#                                   builds); otherwise release builds are made here
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

case "${1:-}" in
  -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  "") ;;
  *) echo "usage: scripts/soak.sh  (no arguments; knobs are environment variables, see --help)" >&2; exit 64 ;;
esac

bench_name=soak
# say, die, free_ports, wait_http_200
source scripts/bench/common.sh
seconds="${SOAK_SECONDS:-3600}"
[[ "$seconds" =~ ^[0-9]+$ ]] && [ "$seconds" -ge 60 ] || die "SOAK_SECONDS must be a whole number of seconds, at least 60"

# ---------------------------------------------------------------- cleanup
tmp=""
pids=()
pg_data=""
as_pg=""
pg_bin=""
keep=false
cleanup() {
  local rc=$?
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  if [ -n "$pg_data" ] && [ -f "$pg_data/postmaster.pid" ]; then
    $as_pg "$pg_bin/pg_ctl" -D "$pg_data" -m fast stop >/dev/null 2>&1
  fi
  if [ -n "$tmp" ]; then
    if [ "$rc" -ne 0 ] || $keep; then
      echo "soak: the logs are kept in $tmp (parley*.log, haproxy.log, simulator.log, postgres/server.log)" >&2
    else
      rm -rf "$tmp"
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- tools and binaries
scripts/install-deps.sh --test
for tool in haproxy openssl python3 curl; do command -v "$tool" >/dev/null || die "$tool is not installed"; done
tmp="$(mktemp -d /tmp/parley-soak.XXXXXX)"
parley_bin="${PARLEY_BINARY:-}"
sim_bin="${PARLEY_SIMULATOR_BINARY:-}"
if [ -z "$parley_bin" ] || [ -z "$sim_bin" ]; then
  command -v swift >/dev/null || die "swift is not on PATH (Swift 6 toolchain needed)"
  for product in parley upstream-simulator; do
    say "soak: building $product (swift build -c release --static-swift-stdlib; several minutes on a cold .build)" >&2
    swift build -c release --static-swift-stdlib --product "$product" >"$tmp/build-$product.log" 2>&1 \
      || { tail -40 "$tmp/build-$product.log" >&2; die "swift build -c release --static-swift-stdlib --product $product"; }
  done
  bin="$(swift build -c release --static-swift-stdlib --show-bin-path)"
  parley_bin="${parley_bin:-$bin/parley}"
  sim_bin="${sim_bin:-$bin/upstream-simulator}"
fi
[ -x "$parley_bin" ] && [ -x "$sim_bin" ] || die "binaries missing: $parley_bin $sim_bin"

# ---------------------------------------------------------------- PostgreSQL (scripts/bench/common.sh)
read -r pg_port sim_port haproxy_port p1 p2 p3 < <(free_ports 6)
start_postgres "$tmp" "$pg_port"

# ---------------------------------------------------------------- simulator
"$sim_bin" --host 127.0.0.1 --port "$sim_port" --access-token-seconds "${SOAK_TOKEN_SECONDS:-90}" >"$tmp/simulator.log" 2>&1 &
pids+=($!)
wait_http_200 "http://127.0.0.1:$sim_port/echo/ready" 20 || { cat "$tmp/simulator.log" >&2; die "the simulator did not answer"; }

sim="http://127.0.0.1:$sim_port"
cat >"$tmp/destinations.yaml" <<YAML
destinations:
  # Basic, SAP CSRF tokens, and the upstream's SMPSESSION cookie kept in Parley's jar.
  - name: smp
    url: $sim
    basic: {}
    csrf: true
  # OAuth2 client credentials: one token for the destination, obtained by Parley.
  - name: cc
    url: $sim/oauth-api
    oauth2:
      grant: client_credentials
      tokenEndpoint: $sim/oauth/token
      clientId: parley-confidential
      clientSecret: s3cret
  # OAuth2 authorization code: signed in once per registration, then refreshed.
  - name: code
    url: $sim/oauth-api
    oauth2:
      grant: authorization_code
      authorizationEndpoint: $sim/oauth/authorize
      tokenEndpoint: $sim/oauth/token
      clientId: parley-public
YAML

# ---------------------------------------------------------------- HAProxy, from the deploy kit's example
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=127.0.0.1" \
  -addext "subjectAltName=IP:127.0.0.1" -keyout "$tmp/tls.key" -out "$tmp/tls.crt" >/dev/null 2>&1 || die "openssl req"
cat "$tmp/tls.crt" "$tmp/tls.key" >"$tmp/haproxy.pem"
python3 - "$root/deploy/haproxy/parley.cfg" "$tmp/haproxy.cfg" "$tmp" "$haproxy_port" "$p1" "$p2" "$p3" <<'PY' || die "deploy/haproxy/parley.cfg no longer has the expected shape"
import re, sys
example, out, tmp, port, *instances = sys.argv[1:]
lines, crts, servers, frontends, globals_ = [], 0, 0, 0, 0
for line in open(example).read().split("\n"):
    if re.search(r"crt\s+\S+", line):
        crts += 1
        line = re.sub(r"crt\s+\S+", f"crt {tmp}/haproxy.pem", line).replace("bind :443", f"bind 127.0.0.1:{port}")
    m = re.match(r"^(\s*server\s+\S+\s+)10\.0\.0\.\d+:8080", line)
    if m and servers < len(instances):
        line = m.group(1) + f"127.0.0.1:{instances[servers]}" + line[m.end():]
        servers += 1
    lines.append(line)
    if line.strip() == "global":
        globals_ += 1
        lines.append(f"    stats socket {tmp}/haproxy.sock mode 600 level admin   # soak only")
    if line.startswith("frontend parley_https"):
        frontends += 1
        lines.append("    # soak only: log just the abnormal requests, each with the driver's request number")
        lines.append("    option dontlog-normal")
        lines.append("    http-request capture req.hdr(X-Soak-Id) len 20")
if (crts, servers, frontends, globals_) != (1, len(instances), 1, 1):
    sys.exit(f"crt {crts}, servers {servers}, frontends {frontends}, global {globals_}")
open(out, "w").write("\n".join(lines))
PY
haproxy -c -f "$tmp/haproxy.cfg" >"$tmp/haproxy-check.log" 2>&1 || { cat "$tmp/haproxy-check.log" >&2; die "haproxy -c refused the configuration"; }
haproxy -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$tmp/haproxy.sock" ] && break; sleep 0.1; done
[ -S "$tmp/haproxy.sock" ] || { cat "$tmp/haproxy.log" >&2; die "HAProxy did not start"; }

# ---------------------------------------------------------------- the driver
say "soak: PostgreSQL $("$pg_bin/postgres" --version | awk '{print $3}'), $(haproxy -v | head -1 | awk '{print "HAProxy", $3}'), $(nproc) cores; parley: $parley_bin"
set +e
PARLEY_BIN="$parley_bin" SOAK_DIR="$tmp" SOAK_SECONDS="$seconds" \
  DATABASE_URL="host=127.0.0.1 port=$pg_port user=parley dbname=postgres" \
  KEYS="k1:$(openssl rand -base64 32)" ADMIN_TOKEN="$(openssl rand -hex 32)" \
  SIM_PORT="$sim_port" HAPROXY_PORT="$haproxy_port" HAPROXY_SOCKET="$tmp/haproxy.sock" HAPROXY_LOG="$tmp/haproxy.log" \
  CA_FILE="$tmp/tls.crt" INSTANCE_PORTS="$p1,$p2,$p3" \
  PG_CTL="$as_pg $pg_bin/pg_ctl -D $pg_data" PG_LOG="$pg_data/server.log" \
  python3 scripts/soak/soak.py
rc=$?
set -e
exit "$rc"
