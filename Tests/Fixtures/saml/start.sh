#!/usr/bin/env bash
# Starts the SAML fixture: a SimpleSAMLphp IdP (PHP's built-in server) and a
# pysaml2 SP (wsgiref), both on 127.0.0.1, configured from files written into
# <workdir>. Installs nothing: run scripts/install-deps.sh --test first.
#
#   start.sh <workdir> <parley-public-url> <destination-name>
#
# On success prints exactly one line on stdout:
#   IDP_PORT=<n> SP_PORT=<n> IDP_PID=<pid> SP_PID=<pid>
# Logs: <workdir>/idp.log, <workdir>/sp.log. Stop with stop.sh <workdir>.
# Environment: SAML_FIXTURE_START_TIMEOUT (seconds, default 20),
#              SAML_FIXTURE_STRICT_ACS=0 to drop the strict-ACS gate (see idp/router.php),
#              SAML_FIXTURE_SP_MODE=proxyfix for an SP behind Werkzeug's ProxyFix whose session
#                cookie is scoped to the forwarded prefix (default: "default", see sp.py),
#              SAML_FIXTURE_SP_COOKIE_DOMAIN=1 (proxyfix only) to add Domain=<public host>.
set -euo pipefail

die() { echo "saml fixture: $*" >&2; exit 1; }

[ $# -eq 3 ] || die "usage: $0 <workdir> <parley-public-url> <destination-name>"
workdir_arg=$1
public_url=${2%/}
destination=$3
case "$public_url" in http://*|https://*) ;; *) die "parley-public-url must start with http:// or https://: '$2'" ;; esac
[[ "$destination" =~ ^[A-Za-z0-9._~-]+$ ]] || die "destination-name must be one URL path segment: '$destination'"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=/usr/bin/python3          # Debian's interpreter (python3-pysaml2), not a pyenv/venv one
ssp=/usr/share/simplesamlphp
timeout_s=${SAML_FIXTURE_START_TIMEOUT:-20}
sp_mode=${SAML_FIXTURE_SP_MODE:-default}
case "$sp_mode" in default|proxyfix) ;; *) die "SAML_FIXTURE_SP_MODE must be default or proxyfix: '$sp_mode'" ;; esac
sp_args=(--mode "$sp_mode")
case "${SAML_FIXTURE_SP_COOKIE_DOMAIN:-0}" in
  0) ;;
  1) [ "$sp_mode" = proxyfix ] || die "SAML_FIXTURE_SP_COOKIE_DOMAIN=1 needs SAML_FIXTURE_SP_MODE=proxyfix"
     sp_args+=(--cookie-domain) ;;
  *) die "SAML_FIXTURE_SP_COOKIE_DOMAIN must be 0 or 1: '$SAML_FIXTURE_SP_COOKIE_DOMAIN'" ;;
esac

# ---- prerequisites (scripts/install-deps.sh --test installs them) ----------------------------
missing=()
command -v php >/dev/null || missing+=(php-cli)
[ -f "$ssp/www/saml2/idp/SSOService.php" ] || missing+=(simplesamlphp)
php -r 'exit(extension_loaded("dom") && extension_loaded("mbstring") ? 0 : 1);' 2>/dev/null || missing+=(php-xml/php-mbstring)
[ -x "$py" ] && "$py" -c 'import saml2' 2>/dev/null || missing+=(python3-pysaml2)
[ -x "$py" ] && "$py" -c 'import werkzeug.middleware.proxy_fix' 2>/dev/null || missing+=(python3-werkzeug)
[ -x /usr/bin/xmlsec1 ] || missing+=(xmlsec1)
command -v openssl >/dev/null || missing+=(openssl)
command -v curl >/dev/null || missing+=(curl)
[ ${#missing[@]} -eq 0 ] || die "missing: ${missing[*]} (run scripts/install-deps.sh --test)"

mkdir -p "$workdir_arg"
workdir=$(cd "$workdir_arg" && pwd)
if [ -f "$workdir/pids" ]; then
  "$here/stop.sh" "$workdir" >/dev/null 2>&1 || true
fi
idp_dir=$workdir/idp
rm -rf "$idp_dir"
mkdir -p "$idp_dir"/{config,metadata,cert,log,data,tmp,sessions}
: >"$workdir/idp.log"
: >"$workdir/sp.log"

idp_pid=""
sp_pid=""
fail() {
  echo "saml fixture: $*" >&2
  for f in idp sp; do
    if [ -s "$workdir/$f.log" ]; then
      echo "--- last lines of $workdir/$f.log ---" >&2
      tail -n 20 "$workdir/$f.log" >&2
    fi
  done
  [ -n "$sp_pid" ] && kill "$sp_pid" 2>/dev/null || true
  [ -n "$idp_pid" ] && kill "$idp_pid" 2>/dev/null || true
  rm -f "$workdir/pids"
  exit 1
}

# ---- two free loopback ports ---------------------------------------------
read -r idp_port sp_port < <("$py" - <<'EOF'
import socket
socks = []
for _ in range(2):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(*(s.getsockname()[1] for s in socks))
EOF
)
[ -n "${sp_port:-}" ] || fail "could not pick free ports"

# ---- keys and self-signed certificates -----------------------------------
for who in idp sp; do
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 30 \
    -subj "/CN=parley-test-$who" \
    -keyout "$workdir/$who.key" -out "$workdir/$who.crt" >/dev/null 2>&1 \
    || fail "openssl could not make the $who key"
  chmod 600 "$workdir/$who.key"
done
cp "$workdir/idp.key" "$workdir/idp.crt" "$idp_dir/cert/"

# ---- SimpleSAMLphp configuration -----------------------------------------
idp_base="http://127.0.0.1:$idp_port"
sp_entity_id="$public_url/web/$destination/metadata"
registered_acs="$public_url/web/$destination/saml/acs"
"$py" - "$idp_dir/params.json" "$workdir/sp.crt" "$idp_base" "$idp_dir" \
  "$sp_entity_id" "$registered_acs" <<'EOF' || fail "could not write params.json"
import json, secrets, sys
out, sp_crt, idp_base, idp_dir, sp_entity_id, registered_acs = sys.argv[1:]
pem = open(sp_crt).read()
cert_data = "".join(l for l in pem.splitlines() if l and not l.startswith("-----"))
json.dump({
    "idp_base": idp_base,
    "idp_dir": idp_dir,
    "idp_entity_id": idp_base + "/saml2/idp/metadata.php",
    "sp_entity_id": sp_entity_id,
    "registered_acs": registered_acs,
    "sp_cert_data": cert_data,
    "secretsalt": secrets.token_hex(24),
    "adminpassword": secrets.token_hex(12),
}, open(out, "w"), indent=2)
EOF
cp "$here/idp/config.php" "$here/idp/authsources.php" "$here/idp/error-page.php" "$idp_dir/config/"
cp "$here/idp/saml20-idp-hosted.php" "$here/idp/saml20-sp-remote.php" "$idp_dir/metadata/"
cp "$here/idp/router.php" "$idp_dir/"

# ---- start the IdP ----------------------------------------------------------
wait_http() { # url deadline -> 0 when the URL answers 200
  local url=$1 deadline=$2
  while [ "$(date +%s)" -lt "$deadline" ]; do
    if curl -fsS -o /dev/null --max-time 2 "$url" 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  return 1
}
deadline=$(( $(date +%s) + timeout_s ))

cd "$idp_dir"
SIMPLESAMLPHP_CONFIG_DIR="$idp_dir/config" \
  php -S "127.0.0.1:$idp_port" -t "$ssp/www" \
    -d display_errors=stderr -d log_errors=On -d error_log= \
    -d session.save_path="$idp_dir/sessions" -d date.timezone=UTC \
    "$idp_dir/router.php" </dev/null >>"$workdir/idp.log" 2>&1 &
idp_pid=$!
cd - >/dev/null

wait_http "$idp_base/saml2/idp/metadata.php" "$deadline" \
  || fail "IdP did not answer on $idp_base within ${timeout_s}s"
curl -fsS --max-time 5 -o "$workdir/idp-metadata.xml" "$idp_base/saml2/idp/metadata.php" \
  || fail "could not fetch the IdP metadata"

# ---- start the SP -----------------------------------------------------------
"$py" -u "$here/sp.py" --port "$sp_port" --workdir "$workdir" --entity-id "$sp_entity_id" "${sp_args[@]}" \
  </dev/null >>"$workdir/sp.log" 2>&1 &
sp_pid=$!

wait_http "http://127.0.0.1:$sp_port/metadata" "$deadline" \
  || fail "SP did not answer on http://127.0.0.1:$sp_port within ${timeout_s}s"
kill -0 "$idp_pid" 2>/dev/null || fail "IdP exited"

cat >"$workdir/pids" <<EOF
IDP_PID=$idp_pid
SP_PID=$sp_pid
EOF
cat >"$workdir/fixture.env" <<EOF
IDP_PORT=$idp_port
SP_PORT=$sp_port
IDP_PID=$idp_pid
SP_PID=$sp_pid
IDP_BASE=$idp_base
IDP_ENTITY_ID=$idp_base/saml2/idp/metadata.php
IDP_SSO_URL=$idp_base/saml2/idp/SSOService.php
SP_ENTITY_ID=$sp_entity_id
REGISTERED_ACS=$registered_acs
SP_MODE=$sp_mode
EOF
echo "IDP_PORT=$idp_port SP_PORT=$sp_port IDP_PID=$idp_pid SP_PID=$sp_pid"
