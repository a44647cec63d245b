#!/usr/bin/env bash
# Builds deploy/Containerfile's runtime stage with podman on a machine that reaches Debian's
# mirrors but no container registry (ContainerImageLiveTests runs it; docs/deployment.md):
#
#   scripts/image-check.sh build localhost/parley-check:dev   # needs a debug build (swift build)
#   scripts/image-check.sh base                               # only the base image; prints its name
#   scripts/image-check.sh run localhost/parley-check:dev --name p -p 127.0.0.1:8080:8080 -e … # detached
#
# - The base: `debian:bookworm-slim` cannot be pulled, so a bookworm minbase root is made with
#   debootstrap, slimmed as the official slim image is, and imported as a local image. The root is
#   cached as a tarball in $PARLEY_IMAGE_CACHE (default /var/cache/parley-image), keyed by
#   everything that goes into it, so only the first run on a machine pays for debootstrap.
# - The build stage: `swift:6.3-bookworm` cannot be pulled either. podman's --build-context
#   build=DIR stands in for the stage named `build`, so the Containerfile's runtime stage runs
#   unchanged (its apt-get install, user, COPY --from=build, ENV, USER, HEALTHCHECK, …) on DIR,
#   which holds /out/usr/local/bin/parley and the static backtracer, as the real stage leaves them.
# - The binary: the objects of the tests' debug build, linked again with -static-stdlib as
#   `swift build --static-swift-stdlib` links (the link command is SwiftPM's own, read from
#   .build/debug.yaml), so the image holds no Swift library, as the release image does not.
#
# Needs root, podman, debootstrap (scripts/install-deps.sh --test). RUN steps use chroot isolation
# (no OCI runtime, no cgroups needed at build time). Environment: PARLEY_DEBIAN_MIRROR.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
suite=bookworm
mirror="${PARLEY_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
cache="${PARLEY_IMAGE_CACHE:-/var/cache/parley-image}"

# What debian:bookworm-slim has that debootstrap's minbase lacks: the deb822 sources with updates
# and security, and the slim image's dpkg excludes (documentation, manuals, translations).
sources="Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
excludes="path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*"

log() { echo "image-check: $*" >&2; }

# Prints the local base image's name, making it (and the cached root) first when missing.
base() {
  local key tarball image
  key="$(printf '%s\n' "$suite" minbase "$mirror" "$sources" "$excludes" | sha256sum | cut -c1-12)"
  tarball="$cache/$suite-minbase-$key.tar"
  image="localhost/parley-base:$suite-$key"
  if podman image exists "$image"; then echo "$image"; return; fi
  if [ ! -s "$tarball" ]; then
    local work start=$SECONDS
    work="$(mktemp -d /var/tmp/parley-debootstrap.XXXXXX)"
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" EXIT
    log "debootstrap --variant=minbase $suite (once per machine; cached in $cache)"
    debootstrap --variant=minbase "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 \
      || { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
    rm -f "$work/root/etc/apt/sources.list"
    printf '%s\n' "$sources" >"$work/root/etc/apt/sources.list.d/debian.sources"
    printf '%s\n' "$excludes" >"$work/root/etc/dpkg/dpkg.cfg.d/docker"
    (cd "$work/root" && rm -rf usr/share/groff/* usr/share/info/* usr/share/linda/* usr/share/lintian/overrides/* \
      usr/share/locale/* usr/share/man/* var/lib/apt/lists/* var/cache/apt/*.bin var/cache/apt/archives/*.deb \
      && find usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete)
    mkdir -p "$cache"
    tar -C "$work/root" --numeric-owner -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
    rm -rf "$work"
    trap - EXIT
    log "root made in $((SECONDS - start)) s: $tarball"
  fi
  podman import --quiet --change 'CMD ["bash"]' "$tarball" "$image" >/dev/null
  echo "$image"
}

# Links the debug build's parley again with -static-stdlib into $1/usr/local/bin/parley.
static_parley() {
  local out="$1" manifest="$root/.build/debug.yaml"
  [ -f "$manifest" ] || { log "no $manifest: run swift build first"; exit 1; }
  local -a link
  # The args of SwiftPM's link step for the parley executable (JSON in the YAML), -o pointed at $out.
  mapfile -t link < <(python3 - "$manifest" "$out/usr/local/bin/parley" <<'EOF'
import json, re, sys
for line in re.findall(r'^    args: (\[.*\])$', open(sys.argv[1]).read(), re.M):
    args = json.loads(line)
    if "-emit-executable" in args and "-module-name" in args and args[args.index("-module-name") + 1] == "parley":
        args[args.index("-o") + 1] = sys.argv[2]
        print("\n".join(args))
        sys.exit(0)
sys.exit("no link step for parley in " + sys.argv[1])
EOF
  )
  mkdir -p "$out/usr/local/bin" "$out/usr/local/libexec"
  # Objects compiled for the shared runtime name Foundation's libraries but not the C parts that the
  # static Foundation archives need (the static modules' own link entries would): CoreFoundation and ICU.
  "${link[@]}" -static-stdlib -lCoreFoundation -l_FoundationICU -l_FoundationCShims -l_FoundationCollections 2>&1 \
    | grep -v "the use of \`mktemp' is dangerous" >&2 || true
  [ -x "$out/usr/local/bin/parley" ] || { log "static link failed"; exit 1; }
  "$out/usr/local/bin/parley" version >&2
  if ldd "$out/usr/local/bin/parley" | grep -i swift >&2; then log "the binary still links a Swift library"; exit 1; fi
  local toolchain
  toolchain="$(dirname "$(dirname "$(readlink -f "$(command -v swift)")")")"
  install -m 0755 "$toolchain/libexec/swift/linux/swift-backtrace-static" "$out/usr/local/libexec/swift-backtrace-static"
}

case "${1:-}" in
  base) base ;;
  build)
    tag="${2:?usage: $0 build <tag>}"
    start=$SECONDS
    image="$(base)"
    log "base image $image ready after $((SECONDS - start)) s"
    work="$(mktemp -d /var/tmp/parley-image.XXXXXX)"
    trap 'rm -rf "$work"' EXIT
    static_parley "$work/build/out"
    log "static parley linked after $((SECONDS - start)) s"
    mkdir -p "$work/context"  # the build stage's COPY . . is not run: the context stays empty
    # --format docker keeps HEALTHCHECK (the OCI format has no field for it).
    podman build --isolation chroot --format docker --pull=never \
      -f "$root/deploy/Containerfile" --build-context build="$work/build" \
      --build-arg RUNTIME_IMAGE="$image" -t "$tag" "$work/context" >"$work/build.log" 2>&1 \
      || { tail -n 30 "$work/build.log" >&2; exit 1; }
    grep -E '^\[[0-9]+/[0-9]+\] STEP' "$work/build.log" | cut -c1-120 >&2
    log "$tag built in $((SECONDS - start)) s"
    ;;
  run)
    # As the Containerfile says to run it (read-only root, a tmpfs on /tmp), detached, with what a
    # sandbox without CAP_SYS_RESOURCE and with hybrid cgroups needs (harmless elsewhere):
    # - runc: Debian 12's crun refuses a cgroup v2 hierarchy with controllers beside cgroup v1;
    # - limits no higher than this shell's: podman's defaults (1048576 files, 4194304 processes)
    #   cannot be raised to without CAP_SYS_RESOURCE;
    # - slirp4netns with the host's loopback as 10.0.2.2 (PostgreSQL and upstreams on 127.0.0.1).
    tag="${2:?usage: $0 run <tag> [podman run options…]}"
    shift 2
    nofile="$(ulimit -Hn)"; [ "$nofile" = unlimited ] && nofile=65536
    # The helpers podman leaves running (conmon, slirp4netns, the port forwarder) inherit open
    # descriptors and keep them open: a caller waiting for their end (Foundation's Process waits
    # for one to close before it reaps the child) would wait forever. So only 0-2 go on, and
    # podman's output goes through a file.
    for fd in /proc/$$/fd/*; do
      fd="${fd##*/}"
      if [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
    done
    out="$(mktemp)"
    trap 'rm -f "$out"' EXIT
    status=0
    podman --runtime runc run -d --read-only --tmpfs /tmp \
      --ulimit "nofile=$nofile:$nofile" --ulimit nproc=4096:4096 \
      --network slirp4netns:allow_host_loopback=true "$@" "$tag" >"$out" 2>&1 </dev/null || status=$?
    cat "$out"
    exit "$status"
    ;;
  *) echo "usage: $0 base | build <tag> | run <tag> [podman run options…]" >&2; exit 2 ;;
esac
