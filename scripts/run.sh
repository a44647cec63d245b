#!/usr/bin/env bash
# The demo: Parley with the upstream simulator behind eight destinations (Basic + CSRF + SMP,
# OAuth2 client credentials, OAuth2 authorization code, SAML2, Basic + OTP, Basic typed on
# Parley's own form, OAuth2 password grant, a client certificate), then a short walk-through
# with the real ports that ends with administration (`parley admin`) and a key rotation
# (`parley rekey`) against the running demo. Ctrl-C stops everything; SIGUSR1 restarts Parley
# (with the key ring in the demo folder, when the demo's ring is used).
#
# When PARLEY_DATABASE_URL is unset, a local PostgreSQL is created and started in the demo
# folder (as root: as the 'postgres' user, in /var/tmp/parley-demo-*). When
# PARLEY_ENCRYPTION_KEYS is unset, a demo key ring is generated there and the script says so;
# likewise an admin token when PARLEY_ADMIN_TOKENS is unset, and the demo CA, server and client
# certificates of demo-cert (openssl; never used for anything else). demo-cert's HTTPS port is
# nginx in front of the simulator, as a TLS terminator stands in front of a real SMP: it requires
# a client certificate from the demo CA (its configuration, pid and logs are in the demo folder).
#
#   PARLEY_LISTEN               Parley's host:port (default 127.0.0.1:8080)
#   PARLEY_DEMO_SIMULATOR_PORT  the simulator's port (default 8081)
#   PARLEY_DEMO_TLS_PORT        nginx's HTTPS port in front of the simulator, requiring a client certificate (default 8443)
#   PARLEY_DEMO_PG_PORT         the local PostgreSQL's port (default 54329)
#   PARLEY_DEMO_DIR             the demo folder: key ring, destinations, build log (default .local)
#   PARLEY_BINARY, PARLEY_SIMULATOR_BINARY   run these binaries instead of building (the tests do)
#   PARLEY_DESTINATIONS         your own destinations file instead of the demo's (no walk-through)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

say() { echo "parley demo: $*" >&2; }
die() { say "$*"; exit 1; }

scripts/install-deps.sh --run
command -v curl >/dev/null || say "note: the walk-through below uses curl, which is not installed (apt-get install curl)"
# nginx terminates demo-cert's TLS (install-deps --run installs Debian's nginx); /usr/sbin is
# not on every user's PATH.
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
[ -x "$nginx_bin" ] || die "nginx is not installed (apt-get install nginx); it is demo-cert's TLS front"
state="${PARLEY_DEMO_DIR:-$root/.local}"
mkdir -p "$state"
chmod 700 "$state"
state="$(cd "$state" && pwd)"

listen="${PARLEY_LISTEN:-127.0.0.1:8080}"
parley_port="${listen##*:}"
parley_host="${listen%:*}"
parley_host="${parley_host#[}"
parley_host="${parley_host%]}"
case "$parley_host" in 0.0.0.0 | "") parley_host=127.0.0.1 ;; ::) parley_host=::1 ;; esac
sim_port="${PARLEY_DEMO_SIMULATOR_PORT:-8081}"
sim="http://127.0.0.1:$sim_port"
tls_port="${PARLEY_DEMO_TLS_PORT:-8443}"
public="${PARLEY_PUBLIC_URL:-http://$listen}"
public="${public%/}"

# --- ports: refuse early and clearly when one is taken -----------------------------------

# Whether something accepts connections on host $1, port $2.
listening() { timeout 2 bash -c "exec 3<>'/dev/tcp/$1/$2'" 2>/dev/null; }

# The HTTP status of GET $3 at host $1, port $2 (empty when nothing answers).
http_status() {
  timeout 5 bash -c '
    exec 3<>"/dev/tcp/$1/$2" || exit 0
    printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$3" "$1" >&3
    IFS=" " read -r _ code _ <&3 && echo "$code"' _ "$1" "$2" "$3" 2>/dev/null || true
}

local_pg=false
as_pg=""
if [ -z "${PARLEY_DATABASE_URL:-}" ]; then
  local_pg=true
  pg_port="${PARLEY_DEMO_PG_PORT:-54329}"
  pg_bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
  pg_data="$state/postgres"
  if [ "$(id -u)" -eq 0 ]; then
    # PostgreSQL refuses to run as root: run it as 'postgres', in a folder that user
    # can reach even when the checkout is under a private home directory.
    as_pg="runuser -u postgres --"
    key="$state"
    [ "$state" != "$root/.local" ] || key="$root"  # the folder earlier versions used
    pg_data="/var/tmp/parley-demo-$(printf %s "$key" | sha256sum | cut -c1-12)/postgres"
  fi
  if [ -f "$pg_data/postmaster.pid" ] && $as_pg "$pg_bin/pg_ctl" -D "$pg_data" status >/dev/null 2>&1; then
    say "stopping the demo's PostgreSQL that an earlier run left running"
    $as_pg "$pg_bin/pg_ctl" -D "$pg_data" -m fast stop >/dev/null
  fi
fi

check_ports() {
  local taken=""
  listening "$parley_host" "$parley_port" && taken+="  port $parley_port (Parley): set PARLEY_LISTEN, e.g. PARLEY_LISTEN=127.0.0.1:18080 make run"$'\n'
  listening 127.0.0.1 "$sim_port" && taken+="  port $sim_port (the upstream simulator): set PARLEY_DEMO_SIMULATOR_PORT, e.g. PARLEY_DEMO_SIMULATOR_PORT=18081 make run"$'\n'
  listening 127.0.0.1 "$tls_port" && taken+="  port $tls_port (nginx, the client-certificate port in front of the simulator): set PARLEY_DEMO_TLS_PORT, e.g. PARLEY_DEMO_TLS_PORT=18443 make run"$'\n'
  $local_pg && listening 127.0.0.1 "$pg_port" && taken+="  port $pg_port (the demo's PostgreSQL): set PARLEY_DEMO_PG_PORT, e.g. PARLEY_DEMO_PG_PORT=54330 make run"$'\n'
  [ -z "$taken" ] || die "a port the demo needs is taken (something already listens there; stop it or choose another port):"$'\n'"$taken"
}
check_ports

# --- build ---------------------------------------------------------------------------------

# Shows swift build's progress: one line rewritten in place on a terminal, else every 10 %.
progress() {
  local line shown=-1 tty=false cols=100
  if [ -t 2 ]; then tty=true; cols=$(($(tput cols 2>/dev/null || echo 100) - 3)); fi
  while IFS= read -r line; do
    if [[ $line =~ ^\[([0-9]+)/([0-9]+)\] ]]; then
      if $tty; then
        printf '\r\033[K  %s' "${line:0:cols}" >&2
      elif ((BASH_REMATCH[1] * 10 / BASH_REMATCH[2] != shown)); then
        shown=$((BASH_REMATCH[1] * 10 / BASH_REMATCH[2]))
        echo "  $line" >&2
      fi
    elif [[ $line =~ ^(Fetching|Fetched|Cloning|Computing|Resolving|Building|Build\ complete) ]]; then
      if $tty; then printf '\r\033[K' >&2; fi
      echo "  $line" >&2
    fi
  done
  if $tty; then printf '\r\033[K' >&2; fi
}

# A debug build serves a demo, and shares .build/debug with `make test`: what either built, the
# other reuses. (The container image and `make bench` build for release.)
build() {
  say "building $1 (debug; the first build takes several minutes; full log in $state/build.log)"
  if ! swift build --product "$1" 2>&1 | tee -a "$state/build.log" | progress; then
    # The errors with a little context, else the log's end.
    if grep -qE '(^|: )error: ' "$state/build.log"; then
      { grep -E -A4 '(^|: )error: ' "$state/build.log" | head -60 >&2; } || true
    else
      tail -30 "$state/build.log" >&2
    fi
    die "building $1 failed (full log: $state/build.log)"
  fi
}

parley_bin="${PARLEY_BINARY:-}"
sim_bin="${PARLEY_SIMULATOR_BINARY:-}"
if [ -z "$parley_bin" ] || [ -z "$sim_bin" ]; then
  command -v swift >/dev/null || die "swift is not on PATH (a Swift 6 toolchain is needed)"
  : >"$state/build.log"
  [ -n "$parley_bin" ] || build parley
  [ -n "$sim_bin" ] || build upstream-simulator
  bin="$(swift build --show-bin-path)"
  parley_bin="${parley_bin:-$bin/parley}"
  sim_bin="${sim_bin:-$bin/upstream-simulator}"
fi
check_ports  # again: the build took a while
# Absolute: the walk-through puts the binary's folder on PATH for `parley admin` and `parley rekey`.
parley_bin="$(cd "$(dirname "$parley_bin")" && pwd)/$(basename "$parley_bin")"

# --- start ---------------------------------------------------------------------------------

pids=()
cleanup() {
  trap - INT TERM
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "${pg_started:-}" ]; then $as_pg "$pg_bin/pg_ctl" -D "$pg_data" -m fast stop >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
trap 'echo >&2; say "stopping"; exit 130' INT
trap 'say "stopping"; exit 143' TERM

if $local_pg; then
  if [ ! -f "$pg_data/PG_VERSION" ]; then
    say "creating a local PostgreSQL in $pg_data"
    mkdir -p "$pg_data"
    if [ -n "$as_pg" ]; then chown postgres "$pg_data" "$(dirname "$pg_data")"; fi
    chmod 700 "$pg_data"
    $as_pg "$pg_bin/initdb" -D "$pg_data" -U parley -A trust >/dev/null
  fi
  pg_started=1
  $as_pg "$pg_bin/pg_ctl" -D "$pg_data" -l "$pg_data/server.log" -w \
    -o "-p $pg_port -k $pg_data -c listen_addresses=127.0.0.1" start >/dev/null ||
    { tail -20 "$pg_data/server.log" >&2; die "PostgreSQL did not start (log: $pg_data/server.log)"; }
  export PARLEY_DATABASE_URL="host=127.0.0.1 port=$pg_port user=parley dbname=postgres"
fi

demo_ring=false
if [ -z "${PARLEY_ENCRYPTION_KEYS:-}" ]; then
  demo_ring=true
  if [ ! -s "$state/demo-keys" ]; then
    (umask 077 && echo "demo:$(openssl rand -base64 32)" >"$state/demo-keys")
  fi
  say "PARLEY_ENCRYPTION_KEYS unset; using the generated demo key ring in $state/demo-keys (never for production)"
  export PARLEY_ENCRYPTION_KEYS="$(cat "$state/demo-keys")"
fi
# The walk-through's `parley rekey` reads the database from here (the file is the demo's, 0600).
(umask 077 && printf '%s\n' "$PARLEY_DATABASE_URL" >"$state/database-url")

demo_admin=false
if [ -z "${PARLEY_ADMIN_TOKENS:-}" ]; then
  demo_admin=true
  if [ ! -s "$state/admin-token" ]; then
    (umask 077 && openssl rand -base64 32 | tr '+/' '-_' | tr -d '=' >"$state/admin-token")
  fi
  say "PARLEY_ADMIN_TOKENS unset; using the generated demo admin token in $state/admin-token"
  export PARLEY_ADMIN_TOKENS="$(cat "$state/admin-token")"
fi

# demo-cert's TLS: a demo CA, nginx's server certificate (127.0.0.1, localhost) and the client
# certificate Parley presents (PKCS#12, password "demo"); made once, kept in the demo folder.
tls="$state/tls"
if [ ! -s "$tls/client.p12" ]; then
  say "making the demo CA and certificates of demo-cert in $tls"
  rm -rf "$tls"
  (
    umask 077
    mkdir -p "$tls"
    cd "$tls"
    ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -days 3650 -subj "/CN=Parley demo CA"
    openssl req "${ec[@]}" -keyout server.key -out server.csr -subj "/CN=localhost"
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 -out server.pem \
      -extfile <(printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n')
    openssl req "${ec[@]}" -keyout client.key -out client.csr -subj "/CN=parley-demo-client"
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 -out client.pem \
      -extfile <(printf 'extendedKeyUsage=clientAuth\n')
    openssl pkcs12 -export -inkey client.key -in client.pem -out client.p12 -passout pass:demo
  ) 2>"$state/openssl.log" || { cat "$state/openssl.log" >&2; die "making the demo certificates failed"; }
fi

demo=false
if [ -z "${PARLEY_DESTINATIONS:-}" ]; then
  demo=true
  # Parley's URL as the demo web app's page puts it in its return URL (encodeURIComponent).
  public_encoded="$(printf %s "$public" | sed 's/%/%25/g; s/:/%3A/g; s#/#%2F#g')"
  cat >"$state/destinations.yaml" <<YAML
# Written by scripts/run.sh for the simulator on port $sim_port (docs/api.md, "Destinations file").
# Whose identity tokens a registration may carry: the simulator's demo identity provider
# (POST $sim/control/identity-token mints one). With a provider listed, a destination where a
# person signs in requires a verified user unless it says identity: optional; the demo's
# sign-in destinations say so, so that the walk-through needs no token (Parley warns at start).
identityProviders:
  - issuer: $sim
    jwksUri: $sim/idp/jwks
    audiences: [parley]
# A web app on the simulator's origin ($sim/demo/shop.html): its registrations' client token is
# an HttpOnly cookie no script reads; it calls demo-oauth through Parley's ES module.
browserApps:
  - name: demo-shop
    origins: ["$sim"]
    destinations: [demo-oauth]
    returnUrls: ["$sim/demo/shop.html?parley=$public_encoded"]
destinations:
  # Basic, SAP CSRF tokens and SMP registration (APPCID).
  - name: demo
    url: $sim
    basic: {}
    csrf: true
    smp: { appId: com.example.demo }
  # OAuth2 client credentials: Parley obtains the token itself. Registration is open, so
  # Parley warns at start that anyone who reaches it may use this client: fine on 127.0.0.1.
  - name: demo-client
    url: $sim/oauth-api
    oauth2:
      grant: client_credentials
      tokenEndpoint: $sim/oauth/token
      clientId: parley-confidential
      clientSecret: s3cret
  # OAuth2 authorization code (PKCE, public client): a person signs in in a browser; the
  # simulator's id_token says who (issuer and jwksUri), and binds the registration to them.
  - name: demo-oauth
    url: $sim/oauth-api
    registration: { identity: optional }
    oauth2:
      grant: authorization_code
      authorizationEndpoint: $sim/oauth/authorize
      tokenEndpoint: $sim/oauth/token
      revocationEndpoint: $sim/oauth/revoke
      clientId: parley-public
      issuer: $sim
      jwksUri: $sim/oauth/jwks
  # SAML2: the simulator's service provider, signed in at its identity provider.
  - name: demo-saml
    url: $sim/sp
    registration: { identity: optional }
    saml2: {}
  # Basic, then a one-time passcode typed in a browser.
  - name: demo-otp
    url: $sim/basic-otp
    registration: { identity: optional }
    basic: {}
    otp: {}
  # Basic typed by a person on Parley's own credentials form: the registration holds none.
  - name: demo-form
    url: $sim
    registration: { identity: optional }
    displayName: Demo SMP
    # How Parley's pages look for it (a PNG or JPEG logo file may be named too: branding.logo).
    branding: { accent: "#00796b" }
    basic: { form: true }
  # OAuth2 password grant: Parley obtains the token itself with the registration's credentials.
  - name: demo-password
    url: $sim/oauth-api
    oauth2:
      grant: password
      tokenEndpoint: $sim/oauth/token
      clientId: parley-confidential
      clientSecret: s3cret
  # A client certificate: nginx on this HTTPS port, in front of the simulator, refuses a client
  # without one issued by the demo CA (in $tls); Parley presents this PKCS#12 for every registration.
  - name: demo-cert
    url: https://127.0.0.1:$tls_port
    clientCertificate: { pkcs12: "$(base64 -w0 "$tls/client.p12")", password: demo }
    caCertificate: |
$(sed 's/^/      /' "$tls/ca.pem")
YAML
  export PARLEY_DESTINATIONS="$state/destinations.yaml"
fi
export PARLEY_LISTEN="$listen"

# SIGUSR1 restarts Parley (below; not SIGHUP, which nohup makes ignored); the trap only sets this.
restart_requested=false
trap 'restart_requested=true' USR1

# The identity provider accepts the ACS URL of demo-saml as Parley shows it to browsers.
"$sim_bin" --host 127.0.0.1 --port "$sim_port" --acs-url "$public/web/demo-saml/saml/acs" &
sim_pid=$!
pids+=("$sim_pid")

# demo-cert's HTTPS port: nginx terminating TLS in front of the simulator, as in front of a real
# SMP. It requires a client certificate from the demo CA: without one it closes the connection
# unanswered (a 495/496 becomes 444), which is what a refused handshake looks like to a client.
# The simulator sees X-Client-Verify and X-Client-Subject (its /echo shows them). Config, pid,
# logs and temp files stay in $state/nginx; as root the workers stay root (not "nobody", who
# could not read the demo folder).
ngx="$state/nginx"
mkdir -p "$ngx"/{client_body,proxy,fastcgi,uwsgi,scgi}
ngx_user=""
[ "$(id -u)" -ne 0 ] || ngx_user="user root;"
cat >"$ngx/nginx.conf" <<NGINX
# Written by scripts/run.sh: demo-cert's TLS front for the simulator on port $sim_port.
$ngx_user
daemon off;
worker_processes 1;
pid "$ngx/nginx.pid";
error_log "$ngx/error.log" notice;
events { worker_connections 512; }
http {
    access_log off;
    client_body_temp_path "$ngx/client_body";
    proxy_temp_path "$ngx/proxy";
    fastcgi_temp_path "$ngx/fastcgi";
    uwsgi_temp_path "$ngx/uwsgi";
    scgi_temp_path "$ngx/scgi";
    client_max_body_size 0;

    server {
        listen 127.0.0.1:$tls_port ssl;
        server_name localhost;
        ssl_certificate "$tls/server.pem";
        ssl_certificate_key "$tls/server.key";
        ssl_client_certificate "$tls/ca.pem";
        ssl_verify_client on;
        ssl_verify_depth 2;

        error_page 495 496 = @refused;
        location @refused { return 444; }

        location / {
            proxy_pass http://127.0.0.1:$sim_port;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$http_host;
            proxy_set_header X-Client-Verify \$ssl_client_verify;
            proxy_set_header X-Client-Subject \$ssl_client_s_dn;
            proxy_request_buffering off;
            proxy_buffering off;
        }
    }
}
NGINX
"$nginx_bin" -p "$ngx/" -c "$ngx/nginx.conf" -e "$ngx/error.log" </dev/null &
nginx_pid=$!
pids+=("$nginx_pid")

start_parley() {
  rm -f "$state/parley-ready"
  "$parley_bin" serve &
  parley_pid=$!
  pids+=("$parley_pid")
}
# Ready when the simulator and nginx listen and Parley's /readyz says 200 (migrations
# applied); then $state/parley-ready exists (the walk-through's key rotation waits for it).
wait_ready() {
  local deadline=$((SECONDS + 90))
  until listening 127.0.0.1 "$sim_port" && listening 127.0.0.1 "$tls_port" &&
    [ "$(http_status "$parley_host" "$parley_port" /readyz)" = 200 ]; do
    if ! kill -0 "$nginx_pid" 2>/dev/null; then
      tail -5 "$ngx/error.log" >&2 2>/dev/null || true
      die "nginx (demo-cert's TLS front) stopped during start (its log: $ngx/error.log)"
    fi
    kill -0 "$sim_pid" 2>/dev/null && kill -0 "$parley_pid" 2>/dev/null ||
      die "the simulator or Parley stopped during start (see its lines above)"
    ((SECONDS < deadline)) || die "Parley was not ready on $listen within 90 s"
    sleep 0.2
  done
  : >"$state/parley-ready"
}
# SIGUSR1: Parley stopped and started again, with the ring in demo-keys when the demo's ring is used.
restart_parley() {
  say "SIGUSR1: restarting Parley$($demo_ring && echo " with the key ring in $state/demo-keys")"
  rm -f "$state/parley-ready"
  kill "$parley_pid" 2>/dev/null || true
  while kill -0 "$parley_pid" 2>/dev/null; do wait "$parley_pid" 2>/dev/null || true; done
  pids=("$sim_pid" "$nginx_pid")
  if $demo_ring; then
    PARLEY_ENCRYPTION_KEYS="$(cat "$state/demo-keys")"
    export PARLEY_ENCRYPTION_KEYS
  fi
  start_parley
  wait_ready
  say "Parley restarted$($demo_ring && echo "; key ids in its ring: $(sed 's/:[^,]*//g' "$state/demo-keys")")"
}
start_parley
wait_ready

if $demo; then
  reg="curl -s -XPOST $public/v1/registrations -d"
  pick="| grep -o 'pct_[^\"]*')"
  auth='-H "Authorization: Bearer $T"'
  alice='"credentials":{"username":"alice","password":"wonderland"}'
  bin_dir="$(dirname "$parley_bin")"
  parley="$(basename "$parley_bin")"
  if $demo_admin; then admin_token="\$(cat $state/admin-token)"; else admin_token="<one of your PARLEY_ADMIN_TOKENS>"; fi
  cat <<TEXT

──────────────────────────────────────────────────────────────────────────────
Parley is ready on $public (simulator: $sim, and behind nginx on https://127.0.0.1:$tls_port with a client certificate).
Demo destinations in ${PARLEY_DESTINATIONS#"$root/"}; user alice, password wonderland.
In another terminal, paste a block: it registers, keeps the client token in T,
then calls through Parley.

demo: Basic + SAP CSRF + SMP registration
  T=\$($reg '{"destination":"demo",$alice}' $pick
  curl -s $public/v1/proxy/api/data $auth
  curl -s -XPOST $public/v1/proxy/csrf/items $auth -d '{"name":"pen"}'

demo-client: OAuth2 client credentials (Parley gets the token itself)
  T=\$($reg '{"destination":"demo-client"}' $pick
  curl -s $public/v1/proxy/hello $auth

demo-oauth: OAuth2 authorization code (a person signs in in a browser)
  T=\$($reg '{"destination":"demo-oauth"}' $pick
  curl -s $public/v1/proxy/hello $auth
  # → 401 interaction_required. Open its flow.url in a browser, press "Continue",
  #   sign in as alice / wonderland; when the page says "Signed in", run the call again.
  #   The registration's user is alice from then on: bob / builder on it fails (identity_mismatch).

demo-saml: SAML2 (the simulator's identity provider, back through /web/demo-saml/)
  T=\$($reg '{"destination":"demo-saml"}' $pick
  curl -s $public/v1/proxy/api/data $auth
  # → 401 interaction_required. Open its flow.url in a browser, press "Continue",
  #   sign in as alice / wonderland; when the page says "Signed in", run the call again.

demo-otp: Basic, then a one-time passcode
  T=\$($reg '{"destination":"demo-otp",$alice}' $pick
  curl -s $public/v1/proxy/api/data $auth
  # → 401 interaction_required. Open its flow.url in a browser, press "Continue"
  #   and type the passcode this prints (it changes every 30 s):
  curl -s '$sim/control/otp/code?user=alice'
  #   When the page says "Signed in", run the call again.

demo-form: Basic, typed by a person on Parley's own credentials form
  T=\$($reg '{"destination":"demo-form","deviceType":"iPhone","deviceModel":"iPhone15,3"}' $pick
  curl -s $public/v1/proxy/api/data $auth
  # → 401 interaction_required. Open its flow.url in a browser, press "Continue"
  #   and type alice / wonderland on Parley's form (a wrong password shows the form again
  #   with an error); when the page says "Signed in", run the call again.

demo-password: OAuth2 password grant (Parley gets the token with the registration's credentials)
  T=\$($reg '{"destination":"demo-password",$alice}' $pick
  curl -s $public/v1/proxy/hello $auth

demo-cert: a client certificate (Parley presents the destination's PKCS#12 in the TLS handshake)
  T=\$($reg '{"destination":"demo-cert"}' $pick
  curl -s $public/v1/proxy/echo/hello $auth
  # → the simulator's echo of the request nginx passed on, with "x-client-verify":["SUCCESS"]
  #   and "x-client-subject":["CN=parley-demo-client"]: the certificate Parley presented.
  # Without a certificate nginx closes the connection unanswered (curl error 52):
  curl -sS --cacert $tls/ca.pem https://127.0.0.1:$tls_port/echo/hello

Browser app: a web page on another origin (the simulator's) that never holds a token
  open '$sim/demo/shop.html?parley=$public'
  # It registers this browser with demo-oauth (its client token is an HttpOnly cookie), calls
  # /hello through Parley's module, is sent to sign in (alice / wonderland), comes back, and
  # shows the answer. document.cookie and the page's storage hold nothing of Parley's.

Verified users: the file's identityProviders lists the simulator's demo identity
provider; a registration that carries one of its tokens has a verified user.
  I=\$(curl -s -XPOST $sim/control/identity-token -d '{"sub":"alice","aud":"parley"}' | grep -o 'eyJ[^"]*')
  T=\$($reg '{"destination":"demo",$alice,"identityToken":"'"\$I"'"}' $pick
  curl -s $public/v1/registrations/me $auth
  # → "user":{"issuer":"$sim","subject":"alice","verified":true}

Administration: \`parley admin\` calls the admin API of the running demo (docs/api.md).
  export PATH="$bin_dir:\$PATH" PARLEY_URL=$public PARLEY_ADMIN_TOKEN=$admin_token
  $parley admin registrations --destination demo-password
  $parley admin revoke --destination demo-password
  # → {"revoked":1,…}: demo-password's next call gets a new token with the password by itself.
  $parley admin audit --limit 5
TEXT
  if $demo_ring; then
    cat <<TEXT

Key rotation: a new key first in the demo's ring, Parley restarted with it (SIGUSR1),
every stored secret re-sealed under it, the old key dropped (docs/operations.md#key-rotation).
  export PATH="$bin_dir:\$PATH" PARLEY_DATABASE_URL=\$(cat $state/database-url)
  N=k\$(date +%s); echo "\$N:\$(openssl rand -base64 32),\$(cat $state/demo-keys)" > $state/demo-keys
  rm $state/parley-ready; kill -USR1 $$; until [ -e $state/parley-ready ]; do sleep 0.2; done
  PARLEY_ENCRYPTION_KEYS=\$(cat $state/demo-keys) $parley rekey
  # → "no longer in use: <the old key id>": it can leave the ring.
  echo "\$(cut -d, -f1 $state/demo-keys)" > $state/demo-keys
  rm $state/parley-ready; kill -USR1 $$; until [ -e $state/parley-ready ]; do sleep 0.2; done
TEXT
  else
    cat <<TEXT

Key rotation: PARLEY_ENCRYPTION_KEYS is yours, so the demo shows none; see
docs/operations.md#key-rotation for \`parley rekey\`.
TEXT
  fi
  cat <<TEXT

The flow URL is also in the 401's Parley-Flow header; a client waits for the
flow with GET /v1/flows/{id}?wait=30. Ctrl-C stops everything. Parley's log follows.
──────────────────────────────────────────────────────────────────────────────
TEXT
else
  say "Parley is ready on $public with your destinations ($PARLEY_DESTINATIONS); the simulator is on $sim. Ctrl-C stops everything."
fi

while :; do
  if $restart_requested; then
    restart_requested=false
    restart_parley
    continue
  fi
  set +e
  wait -n "$sim_pid" "$nginx_pid" "$parley_pid"
  status=$?
  set -e
  # A SIGUSR1 ends the wait early (status > 128) and sets restart_requested.
  $restart_requested || die "$( ((status == 0)) && echo "a process ended" || echo "a process ended with status $status"); stopping the demo"
done
