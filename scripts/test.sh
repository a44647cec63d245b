#!/usr/bin/env bash
# Runs every test: unit, application, and live tests against a real PostgreSQL
# (started by the tests themselves in a temp folder) and the upstream simulator.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
command -v swift >/dev/null || { echo "swift is not on PATH (Swift 6 toolchain needed)" >&2; exit 1; }

# Quieter build output; the build's own exit status decides (never test a stale binary).
set +o pipefail
swift build --build-tests 2>&1 | grep -vE '^\[[0-9]+/[0-9]+\]|unhandled; explicitly declare'
status=${PIPESTATUS[0]}
set -o pipefail
[ "$status" -eq 0 ] || { echo "build failed (exit $status)" >&2; exit "$status"; }
# The live tests run the built binaries; they find them here.
export PARLEY_BINARY="$PWD/.build/debug/parley"
export PARLEY_SIMULATOR_BINARY="$PWD/.build/debug/upstream-simulator"
# Serial: the 1 GiB tests measure process-wide resident memory, which neighbours would
# inflate, and two cores are not oversubscribed by concurrent live suites.
# The output is kept, so a failure can be summed up again at the very end, after fuzzing:
# a CI log is often read from its tail.
log="$(mktemp "${TMPDIR:-/tmp}/parley-tests.XXXXXX")"
trap 'rm -f "$log"' EXIT
set +o pipefail
swift test --skip-build --no-parallel "$@" 2>&1 | tee "$log"
tests=${PIPESTATUS[0]}
set -o pipefail
summarize() {
    [ "$tests" -eq 0 ] && return 0
    echo "=== tests failed (exit $tests); the failing tests, from the output above ===" >&2
    # Swift Testing marks failures with ✘, XCTest with "error:"; a crashed test process names its signal.
    grep -E '^✘ |: error: |Fatal error|signal [0-9]+|Exited with (signal|unexpected)|crashed' "$log" | grep -v 'passed after' | tail -n 40 >&2 || true
}
# The fuzz targets under libFuzzer for a bounded time (docs/fuzzing.md): on a full run,
# or whenever PARLEY_FUZZ_SECONDS (per target; 0 skips) is set. A crash fails the run.
fuzz_seconds=${PARLEY_FUZZ_SECONDS:-$([ $# -eq 0 ] && echo 20 || echo 0)}
if [ "$fuzz_seconds" != 0 ]; then
    scripts/fuzz.sh "$fuzz_seconds" || { summarize; echo "fuzzing failed: a crash or broken invariant (reproducer above)" >&2; exit 1; }
fi
summarize
exit "$tests"
