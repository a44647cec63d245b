#!/usr/bin/env bash
# Property-based conformance run of a live Parley against its OpenAPI document, with schemathesis.
#
#   scripts/schemathesis.sh <base-url> <client-token> <admin-token>
#
# Two runs, one per API: the thin-client API (`/v1/registrations`, `/v1/flows…`, plus the
# operations paths `/healthz`, `/readyz`, `/metrics`, `/openapi.json`) with the client token,
# and the administration API (`/admin/v1/…`) with the admin token. Each token goes to the
# operations of its security scheme (`clientToken`, `adminToken`) only. Not run: `/v1/proxy…`
# and `/web/…` (they forward to upstreams), the hosted pages and callbacks (HTML for browsers),
# and `DELETE /v1/registrations/me`, which would delete the registration behind the client
# token halfway through the run.
#
# Checks: not_a_server_error, status_code_conformance, content_type_conformance,
# response_schema_conformance, response_headers_conformance, negative_data_rejection (data the
# document forbids must be refused with a 4xx), ignored_auth (the same calls without a token
# must be refused with 401), and, in the stateful phase that follows the document's links
# (createRegistration → adminGetRegistration / adminDeleteRegistration / adminApproveRegistration
# / adminRevoke, adminDeleteRegistration → adminGetRegistration, startFlow → getFlow, …),
# use_after_free (a deleted registration must be 404 afterwards) and
# ensure_resource_availability (a created one must be readable). Positive and negative data
# (`--mode all`) in the examples, coverage and fuzzing phases; valid data in the stateful
# phase, whose chains need real ids. A bounded number of examples per operation, a fixed
# seed. The admin run includes createRegistration, so its chains start from a real
# registration; the optional <destination> (a configured destination's name) fills most
# generated registrations' `destination`. Prints the operations and test cases of each run and
# in total; exits non-zero when any check fails or a run errs.
#
# Installs schemathesis (pinned in scripts/schemathesis-requirements.txt) into a venv in
# .local/schemathesis on first use. Environment (all optional):
#   SCHEMATHESIS_SCHEMA        where the document is read (default <base-url>/openapi.json;
#                              a file such as docs/openapi.json works too)
#   SCHEMATHESIS_MAX_EXAMPLES  examples per operation in the fuzzing phase (default 25)
#   SCHEMATHESIS_STATEFUL_EXAMPLES  scenarios of the stateful phase (default 60)
#   SCHEMATHESIS_SEED          the seed (default 20250501)
#   PYTHON                     the interpreter that creates the venv (default python3)
set -euo pipefail

if [ $# -lt 3 ] || [ $# -gt 4 ]; then
  echo "usage: $0 <base-url> <client-token> <admin-token> [<destination>]" >&2
  exit 2
fi
base_url="${1%/}"
root="$(cd "$(dirname "$0")/.." && pwd)"
requirements="$root/scripts/schemathesis-requirements.txt"
pinned="$(sed -n 's/^schemathesis==//p' "$requirements")"
venv="$root/.local/schemathesis"
python="${PYTHON:-python3}"
max_examples="${SCHEMATHESIS_MAX_EXAMPLES:-25}"
seed="${SCHEMATHESIS_SEED:-20250501}"
stateful_examples="${SCHEMATHESIS_STATEFUL_EXAMPLES:-60}"
case "$max_examples$stateful_examples" in *[!0-9]*) echo "schemathesis.sh: example counts are numbers" >&2; exit 2 ;; esac
schema="${SCHEMATHESIS_SCHEMA:-$base_url/openapi.json}"

# --- the venv ------------------------------------------------------------------------------
installed=""
if [ -x "$venv/bin/schemathesis" ]; then
  installed="$("$venv/bin/schemathesis" --version 2>/dev/null | sed -n 's/.*version \([0-9][0-9.]*\).*/\1/p' || true)"
fi
if [ "$installed" != "$pinned" ]; then
  echo "schemathesis.sh: installing schemathesis $pinned into $venv" >&2
  if ! "$venv/bin/python" -c '' 2>/dev/null; then
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    if ! "$python" -m venv "$venv"; then
      echo "schemathesis.sh: '$python -m venv' failed (on Debian: apt-get install python3-venv)" >&2
      rm -rf "$venv"
      exit 1
    fi
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
fi
version_line="$("$venv/bin/schemathesis" --version)"

# --- the runs ------------------------------------------------------------------------------
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The tokens reach schemathesis through the environment, never its command line. Each is
# sent only to the operations whose security scheme names it.
cat >"$work/schemathesis.toml" <<'EOF'
[auth.openapi.clientToken]
bearer = "${PARLEY_SCHEMATHESIS_CLIENT_TOKEN}"

[auth.openapi.adminToken]
bearer = "${PARLEY_SCHEMATHESIS_ADMIN_TOKEN}"

# The stateful phase follows the document's links (create → read, delete → read, …) with valid
# data, so that use_after_free and ensure_resource_availability see real chains; the other
# phases send negative data too.
[phases.stateful]
max-steps = 8

[phases.stateful.generation]
mode = "positive"
EOF
echo "max-examples = $stateful_examples" >>"$work/schemathesis.toml"
# A configured destination's name, when given, fills most generated registrations'
# `destination`, so that `POST /v1/registrations` creates something the linked operations
# (adminGetRegistration, adminDeleteRegistration, …) can then read, delete and read again.
if [ $# -eq 4 ]; then
  case "$4" in *[!A-Za-z0-9._-]*|"") echo "schemathesis.sh: the destination must be a plain name" >&2; exit 2 ;; esac
  cat >>"$work/schemathesis.toml" <<EOF

[dictionaries.destinations]
values = ["$4"]

[[operations]]
include-operation-id = "createRegistration"
parameters = { "body.destination" = { dictionary = "destinations", probability = 0.9 } }
EOF
fi
export PARLEY_SCHEMATHESIS_CLIENT_TOKEN="$2"
export PARLEY_SCHEMATHESIS_ADMIN_TOKEN="$3"

# A wrong token would turn every call into a documented 401 and the run into a vacuous pass:
# both tokens must work before anything is generated.
"$venv/bin/python" - "$base_url" <<'PY' || exit 1
import os, sys, time, urllib.error, urllib.request
base = sys.argv[1]
ok = True
deadline = time.monotonic() + 30  # Parley may still be starting
for name, path, variable in (("client", "/v1/registrations/me", "PARLEY_SCHEMATHESIS_CLIENT_TOKEN"),
                             ("admin", "/admin/v1/audit?limit=1", "PARLEY_SCHEMATHESIS_ADMIN_TOKEN")):
    request = urllib.request.Request(base + path, headers={"Authorization": "Bearer " + os.environ[variable]})
    while True:
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status = response.status
            break
        except urllib.error.HTTPError as error:
            status = error.code
            break
        except OSError as error:
            if time.monotonic() > deadline:
                print(f"schemathesis.sh: {base} cannot be reached: {error}", file=sys.stderr)
                sys.exit(1)
            time.sleep(1)
    if status != 200:
        print(f"schemathesis.sh: the {name} token is not accepted (GET {path} answered {status})", file=sys.stderr)
        ok = False
sys.exit(0 if ok else 1)
PY

checks=not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance,negative_data_rejection,ignored_auth,use_after_free,ensure_resource_availability
common=(
  --url "$base_url"
  --checks "$checks"
  --mode all
  --phases examples,coverage,fuzzing,stateful
  --max-examples "$max_examples"
  --seed "$seed"
  --generation-database none
  --workers 1
  --request-timeout 75
  --wait-for-schema 30
  --exclude-path-regex '^/(v1/proxy|web/|flows/|callback/)'
)

# Counts from schemathesis' NDJSON event stream: operations that sent at least one test
# case, and the test cases sent (the same number as its own "N generated").
count() {
  "$venv/bin/python" - "$1" <<'PY'
import json, sys
operations, cases = set(), 0
with open(sys.argv[1]) as events:
    for line in events:
        finished = json.loads(line).get("ScenarioFinished")
        if not finished:
            continue
        recorder = finished.get("recorder") or {}
        sent = len(recorder.get("cases") or {})
        cases += sent
        if sent:
            operations.add(recorder.get("label"))
print(len(operations), cases)
PY
}

status=0
total_operations=0
total_cases=0
summary=()
run() {
  local name="$1"
  shift
  echo "== schemathesis: $name ($version_line, $schema)"
  local rc=0
  "$venv/bin/schemathesis" --config-file "$work/schemathesis.toml" run "$schema" "${common[@]}" \
    --report ndjson --report-ndjson-path "$work/$name.ndjson" "$@" || rc=$?
  local operations=0 cases=0
  if [ -s "$work/$name.ndjson" ]; then read -r operations cases < <(count "$work/$name.ndjson") || true; fi
  operations="${operations:-0}" cases="${cases:-0}"
  total_operations=$((total_operations + operations))
  total_cases=$((total_cases + cases))
  local verdict=passed
  [ "$rc" -eq 0 ] || { verdict="FAILED (exit $rc)"; status=1; }
  if [ "$operations" -eq 0 ]; then verdict="FAILED (no operation ran)"; status=1; fi
  summary+=("$name: $operations operations, $cases test cases, $verdict")
}

run client-api --include-path-regex '^/(v1/|healthz$|readyz$|metrics$|openapi\.json$)' \
  --exclude-operation-id deleteOwnRegistration
run admin-api --include-path-regex '^/admin/v1/' --include-operation-id createRegistration

echo "== schemathesis summary (max $max_examples examples per operation, seed $seed)"
for line in "${summary[@]}"; do echo "  $line"; done
echo "  total: $total_operations operations, $total_cases test cases"
exit "$status"
