#!/usr/bin/env bash
# Runs every fuzz target under libFuzzer for a bounded time (docs/fuzzing.md).
#   scripts/fuzz.sh [seconds-per-target] [target…]      default 20 s, every target
# Builds `parley-fuzz` with -sanitize=fuzzer into .build-fuzz (its own scratch path, so
# the main build is untouched), then runs each target from the committed seeds
# (Tests/Fuzz/corpus, Tests/Fuzz/regressions) plus what earlier runs found
# (.build-fuzz/corpus, never committed). Fails on any crash, timeout, out-of-memory or
# broken invariant, naming the reproducer: replay it with
#   .build/debug/parley-fuzz <target> <file>   (Swift's backtrace)
# and commit it under Tests/Fuzz/regressions/<target>/ once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v swift >/dev/null || { echo "swift is not on PATH (Swift 6 toolchain needed)" >&2; exit 1; }

seconds=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(response-head set-cookie token-response proxy-path destinations callback-query saml-response userinfo)
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "usage: scripts/fuzz.sh [seconds-per-target] [target…]" >&2; exit 2; }
[ "$seconds" -gt 0 ] || { echo "fuzzing skipped (0 s per target)"; exit 0; }
toolchain="$(dirname "$(readlink -f "$(command -v swift)")")/.."
ls "$toolchain"/lib/clang/*/lib/linux/libclang_rt.fuzzer-"$(uname -m)".a >/dev/null 2>&1 || {
    echo "this Swift toolchain has no libFuzzer runtime (lib/clang/*/lib/linux/libclang_rt.fuzzer-$(uname -m).a)" >&2
    exit 1
}

scratch=.build-fuzz
# -sanitize=fuzzer instruments every Swift module for coverage and links libFuzzer;
# Parley's own main hands over to LLVMFuzzerRunDriver (libFuzzer's main is not used),
# which GNU gold cannot link beside SwiftPM's `--defsym main=…`; lld can.
flags=(-c release --product parley-fuzz -Xswiftc -sanitize=fuzzer -Xswiftc -DPARLEY_FUZZ -Xswiftc -use-ld=lld)
started=$(date +%s)
set +o pipefail
swift build --scratch-path "$scratch" "${flags[@]}" 2>&1 | grep -vE '^\[[0-9]+/[0-9]+\]|unhandled; explicitly declare'
status=${PIPESTATUS[0]}
set -o pipefail
[ "$status" -eq 0 ] || { echo "fuzz build failed (exit $status)" >&2; exit "$status"; }
binary="$(swift build --scratch-path "$scratch" "${flags[@]}" --show-bin-path)/parley-fuzz"
echo "fuzz build: $(( $(date +%s) - started )) s"

failed=0
total=0
for target in "${targets[@]}"; do
    corpus="$scratch/corpus/$target"
    crashes="$scratch/crashes/$target"
    log="$scratch/logs/$target.log"
    mkdir -p "$corpus" "$crashes" "$(dirname "$log")" "Tests/Fuzz/corpus/$target" "Tests/Fuzz/regressions/$target"
    # Swift's string comparisons are not instrumented: a dictionary tells libFuzzer the tokens.
    dict=()
    [ -f "Tests/Fuzz/dictionaries/$target.dict" ] && dict=(-dict="Tests/Fuzz/dictionaries/$target.dict")
    before=$(find "$crashes" -type f | wc -l)
    # libFuzzer, not Swift's backtracer, must see the trap to save the input.
    set +e
    SWIFT_BACKTRACE=enable=no PARLEY_FUZZ_TARGET="$target" "$binary" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 "${dict[@]}" \
        -artifact_prefix="$crashes/" "$corpus" "Tests/Fuzz/corpus/$target" "Tests/Fuzz/regressions/$target" >"$log" 2>&1
    rc=$?
    set -e
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    total=$((total + ${runs:-0}))
    after=$(find "$crashes" -type f | wc -l)
    if [ "$rc" -ne 0 ] || [ "$after" -gt "$before" ]; then
        failed=1
        echo "FAIL $target (exit $rc, ${runs:-?} executions); log: $log" >&2
        grep -E 'invariant broken|Swift runtime failure|Fatal error|ERROR: libFuzzer|SUMMARY' "$log" | head -5 >&2 || true
        sed -n 's/.*Test unit written to \(.*\)$/  reproducer: \1/p' "$log" >&2
        echo "  replay: .build/debug/parley-fuzz $target <reproducer>" >&2
    else
        echo "ok   $target: ${runs:-?} executions in ${seconds} s, corpus $(find "$corpus" -type f | wc -l) inputs"
    fi
done
echo "fuzzing: $total executions in $(( $(date +%s) - started )) s (build included)"
exit "$failed"
