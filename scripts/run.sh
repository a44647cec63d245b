#!/usr/bin/env bash
# Runs Parley with the upstream simulator as the demo destination.
# When PARLEY_DATABASE_URL is unset, starts a local PostgreSQL in .local/postgres
# (as root: as the 'postgres' user, in /var/tmp/parley-demo-*/postgres). When PARLEY_ENCRYPTION_KEYS is unset,
# generates a demo key ring in .local/ and says so. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
scripts/install-deps.sh
mkdir -p .local
chmod 700 .local
for product in parley upstream-simulator; do
  echo "parley demo: building $product (release; the first build takes several minutes)" >&2
  swift build -c release --product "$product" >.local/build.log 2>&1 || { tail -30 .local/build.log >&2; exit 1; }
done
bin="$(swift build -c release --show-bin-path)"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -n "${pg_data:-}" ]; then $as_pg "$pg_bin/pg_ctl" -D "$pg_data" -m fast stop >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT INT TERM

as_pg=""
if [ -z "${PARLEY_DATABASE_URL:-}" ]; then
  pg_bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
  pg_data="$root/.local/postgres"
  pg_port="${PARLEY_DEMO_PG_PORT:-54329}"
  if [ "$(id -u)" -eq 0 ]; then
    # PostgreSQL refuses to run as root: run it as 'postgres', in a folder that user
    # can reach even when the checkout is under a private home directory.
    as_pg="runuser -u postgres --"
    pg_data="/var/tmp/parley-demo-$(printf %s "$root" | sha256sum | cut -c1-12)/postgres"
    mkdir -p "$pg_data" && chown postgres "$pg_data" "$(dirname "$pg_data")" && chmod 700 "$pg_data"
  fi
  if [ ! -f "$pg_data/PG_VERSION" ]; then
    echo "parley demo: creating a local PostgreSQL in $pg_data" >&2
    $as_pg "$pg_bin/initdb" -D "$pg_data" -U parley -A trust >/dev/null
  fi
  $as_pg "$pg_bin/pg_ctl" -D "$pg_data" -l "$pg_data/server.log" -w \
    -o "-p $pg_port -k $pg_data -c listen_addresses=127.0.0.1" start >/dev/null
  export PARLEY_DATABASE_URL="host=127.0.0.1 port=$pg_port user=parley dbname=postgres"
fi

if [ -z "${PARLEY_ENCRYPTION_KEYS:-}" ]; then
  if [ ! -f .local/demo-keys ]; then
    umask 077
    echo "demo:$(openssl rand -base64 32)" > .local/demo-keys
  fi
  echo "parley demo: PARLEY_ENCRYPTION_KEYS unset; using the generated demo key ring in .local/demo-keys (never for production)" >&2
  export PARLEY_ENCRYPTION_KEYS="$(cat .local/demo-keys)"
fi

sim_port="${PARLEY_DEMO_SIMULATOR_PORT:-8081}"
"$bin/upstream-simulator" --host 127.0.0.1 --port "$sim_port" &
pids+=($!)

if [ -z "${PARLEY_DESTINATIONS:-}" ]; then
  cat > .local/destinations.yaml <<YAML
destinations:
  - name: demo
    url: http://127.0.0.1:$sim_port
    basic: {}
    csrf: true
    smp: { appId: com.example.demo }
YAML
  export PARLEY_DESTINATIONS="$root/.local/destinations.yaml"
fi
export PARLEY_LISTEN="${PARLEY_LISTEN:-127.0.0.1:8080}"
echo "parley demo: simulator on http://127.0.0.1:$sim_port, Parley on http://$PARLEY_LISTEN" >&2
"$bin/parley" serve &
pids+=($!)
wait "${pids[-1]}"
