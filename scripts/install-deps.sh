#!/usr/bin/env bash
# Installs the Debian packages Parley builds, runs and tests with. Idempotent:
# only missing packages are installed. Needs root (or sudo) when something is missing.
# --run adds what `make run` needs, --tour what `make tour` adds to it, --test what the tests
# and `make bench` need (nginx and the tour's packages among them; wrk, h2load and HAProxy for
# the benchmark).
set -euo pipefail

want=(libcurl4-openssl-dev libpq-dev libssl-dev libpsl-dev libxmlsec1-dev pkg-config curl openssl ca-certificates postgresql)
# --run, for `make run` (scripts/run.sh): nginx terminates demo-cert's TLS in front of the
# simulator. Not in the base list, which deploy/install.sh installs on servers.
[ "${1:-}" != "--run" ] || want+=(nginx)
# --tour, for `make tour` (scripts/tour.sh): the demo, driven in headless Chromium by Selenium
# from a venv.
[ "${1:-}" != "--tour" ] || want+=(nginx chromium chromium-driver python3-venv)
if [ "${1:-}" = "--test" ]; then
  want+=(chromium chromium-driver nginx-light wrk)
  # make bench (scripts/bench.sh, which installs through --test): h2load (nghttp2-client) is
  # its second load generator beside wrk; HAProxy (below) its second proxy baseline beside nginx.
  want+=(nghttp2-client)
  # make bench counts system calls and context switches per request with perf stat.
  want+=(linux-perf)
  # The real SAML2 identity provider and service provider of the hosted-flow tests
  # (Tests/Fixtures/saml): SimpleSAMLphp under PHP's own server, a pysaml2 SP (behind
  # Werkzeug's ProxyFix in its proxyfix mode).
  want+=(simplesamlphp php-cli php-xml php-mbstring python3 python3-pysaml2 python3-werkzeug xmlsec1 curl)
  # Propagation's assertions checked by other implementations (Tests/Fixtures/propagation):
  # Authlib's JOSE for the JWT, xmlsec1 and pysaml2 (above) for the SAML assertion.
  want+=(python3-authlib)
  # schemathesis (PyPI) runs in a venv of its own (scripts/schemathesis.sh).
  want+=(python3-venv python3-pip)
  # The deploy kit's checks, and make bench's baseline: HAProxy validates deploy/haproxy/parley.cfg (`haproxy -c`);
  # the Kubernetes schema checker and hadolint come from PyPI (scripts/deploy-tools.sh).
  want+=(haproxy)
  # deploy/observability/alerts.yml is checked by promtool (Debian's prometheus package).
  want+=(prometheus)
  # The container image built and run (scripts/image-check.sh): podman (rootful; it builds too),
  # runc (Debian's crun refuses hybrid cgroup hosts), slirp4netns (the container reaches the host's
  # loopback), debootstrap (the bookworm base, no registry needed).
  want+=(podman runc slirp4netns debootstrap)
fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
