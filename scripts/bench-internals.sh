#!/usr/bin/env bash
# Benchmarks that look inside Parley (package-benchmark, Benchmarks/): the conversation
# engine, header and URL handling, cookie matching and sealing, each with wall time,
# throughput and allocations per operation. Prints one compact markdown table.
#
#   scripts/bench-internals.sh                       # all benchmarks
#   scripts/bench-internals.sh --filter 'Cookies.*'  # extra arguments go to the plugin
#   BENCH_INTERNALS_FULL=1 scripts/bench-internals.sh  # also the plugin's own tables (all percentiles)
#
# Benchmarks/ is a package of its own (path dependency on this one), so the main build
# and CI never compile it. Its first build takes several minutes (Benchmarks/.build);
# later runs only rebuild what changed. Exit status: non-zero only when the benchmarks
# could not be built or run.
set -euo pipefail

cd "$(dirname "$0")/.."

case "${1:-}" in
  -h | --help)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac

command -v swift >/dev/null || { echo "bench-internals: swift is not on PATH" >&2; exit 1; }
command -v python3 >/dev/null || { echo "bench-internals: python3 is needed to summarise the results" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

started=$(date +%s)
if ! swift package --package-path Benchmarks benchmark --format markdown --no-progress "$@" >"$tmp/out.md" 2>"$tmp/err.txt"; then
  echo "bench-internals: the benchmark run failed; its last lines:" >&2
  tail -40 "$tmp/out.md" >&2
  tail -40 "$tmp/err.txt" >&2
  exit 1
fi
elapsed=$(( $(date +%s) - started ))

echo "-- Parley internals (package-benchmark, Benchmarks/ParleyInternals), per operation --"
echo "date:    $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- Sources 2>/dev/null || echo ' (+ uncommitted changes in Sources)')"
echo "machine: $(nproc) cores, $(swift --version 2>/dev/null | head -1 | sed 's/ (.*//'); build and run took ${elapsed} s"
echo
python3 - "$tmp/out.md" <<'PY'
import re, sys

# The plugin's markdown: "### <benchmark>" then a table whose rows are metrics and whose
# columns are percentiles (p0 p25 p50 p75 p90 p99 p100 Samples).
benchmarks, current = [], None
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.rstrip("\n")
    if line.startswith("### "):
        current = {"name": line[4:].strip(), "rows": {}}
        benchmarks.append(current)
    elif current is not None and line.startswith("|") and not line.startswith("|:") and not line.startswith("| Metric"):
        cells = [c.strip() for c in line.strip("|").split("|")]
        current["rows"][cells[0]] = cells[1:]

def pick(bench, prefix, column):
    """Percentile column: 0 p0, 1 p25, 2 p50, 3 p75, 4 p90, 5 p99, 6 p100, 7 samples."""
    for metric, values in bench["rows"].items():
        if metric.startswith(prefix):
            if "(K)" in metric or "(M)" in metric:
                return values[column] + (" K" if "(K)" in metric else " M")
            return values[column]
    return "-"

if not benchmarks:
    sys.exit("bench-internals: no benchmark results in the plugin's output")

header = ["benchmark", "time p50 ns", "time p90 ns", "ops/s p50", "mallocs", "malloc bytes", "samples"]
rows = []
for b in sorted(benchmarks, key=lambda b: ["Engine", "Headers", "URL", "Cookies", "Sealing"].index(b["name"].split(":")[0])
                if b["name"].split(":")[0] in ["Engine", "Headers", "URL", "Cookies", "Sealing"] else 99):
    rows.append([b["name"], pick(b, "Time (wall clock)", 2), pick(b, "Time (wall clock)", 4), pick(b, "Throughput", 2),
                 pick(b, "Malloc (total)", 2), pick(b, "Malloc (bytes total)", 2), pick(b, "Time (wall clock)", 7)])
widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
def show(r):
    return "| " + " | ".join(r[0].ljust(widths[0]) if i == 0 else r[i].rjust(widths[i]) for i in range(len(r))) + " |"
print(show(header))
print("|" + "|".join(("-" * (w + 2)) if i == 0 else ("-" * (w + 1) + ":") for i, w in enumerate(widths)) + "|")
for r in rows:
    print(show(r))
print()
print("mallocs and malloc bytes: p50 per operation (they rarely vary); time: wall clock per operation;")
print("the upstream, cookie rows and tokens are in memory: no socket, database or thread hop is measured.")
PY

if [ "${BENCH_INTERNALS_FULL:-}" = "1" ]; then
  echo
  sed -n '/^## Baseline/,$p' "$tmp/out.md"
fi
