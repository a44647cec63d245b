#!/usr/bin/env bash
# Builds a release binary and installs it (it carries its migrations), plus the systemd unit.
# Writes /etc/parley/parley.env only if it does not exist yet, with placeholders to fill in.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
swift build -c release --static-swift-stdlib --product parley
bin="$(swift build -c release --static-swift-stdlib --show-bin-path)"
install -m 0755 "$bin/parley" /usr/local/bin/parley
install -m 0644 deploy/parley.service /etc/systemd/system/parley.service
id parley >/dev/null 2>&1 || useradd --system --home /var/lib/parley --shell /usr/sbin/nologin parley
install -d -o parley -g parley -m 0700 /var/lib/parley/spool
install -d -m 0750 /etc/parley
if [ ! -f /etc/parley/parley.env ]; then
  umask 077
  cat > /etc/parley/parley.env <<ENV
PARLEY_DATABASE_URL=postgresql://parley@db.example.internal/parley?target_session_attrs=read-write
PARLEY_ENCRYPTION_KEYS=k1:$(openssl rand -base64 32)
PARLEY_PUBLIC_URL=https://parley.example.com
PARLEY_LISTEN=0.0.0.0:8080
PARLEY_DESTINATIONS=/etc/parley/destinations.yaml
PARLEY_SPOOL_DIR=/var/lib/parley/spool
ENV
  echo "wrote /etc/parley/parley.env: fill in the database URL, public URL and destinations file" >&2
fi
echo "installed; start with: systemctl daemon-reload && systemctl enable --now parley" >&2
