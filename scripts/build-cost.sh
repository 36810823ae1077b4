#!/usr/bin/env bash
# What a build choice costs (BENCHMARKS.md): two builds of the server from the same source,
# alternating on the same data in the same run, so their ratio holds on a noisy machine.
#
#   governance  the default build (governed) against `--features quiver-query/ungoverned`
#               (queries on the caller's task in the engine's shared memory pool: no
#               admission, no pool of their own, no hand-over to the query runtime, no limits)
#   allocator   the default build (jemalloc, src/allocator.rs) against `--no-default-features`
#               (the system allocator)
#
# Each round runs each build (in alternating order) through quiver-govbench's `latency`
# (`SELECT 1` and two queries over 100,000 rows, cold and cached, on a fresh directory),
# `SELECT 1` and the nine TSBS shapes over ROWS persisted rows (scripts/query-latency.py:
# median of 15 per statement, result cache off), line-protocol ingest (quiver-loadgen, 4
# connections x 5,000-line batches for 10 s, on a fresh directory), and the largest query's
# memory on the govbench server once it is idle: resident memory before `array_agg` of 30 M
# values, its peak, and resident memory 10 s after it. It ends with each measure's A / B ratio of the medians over the rounds
# (ingest as seconds per million rows, so that above 1 means A costs more), and geometric means.
#
# Builds both first (release: B, then A, then the tools).
# Usage: scripts/build-cost.sh governance|allocator [ROUNDS=3] [ROWS=1000000]
set -euo pipefail
cd "$(dirname "$0")/.."
COMPARISON=${1:?usage: scripts/build-cost.sh governance|allocator [ROUNDS] [ROWS]}
ROUNDS=${2:-3}
ROWS=${3:-1000000}
case "$COMPARISON" in
    governance) A=governed B=ungoverned B_FLAGS=(--features quiver-query/ungoverned) ;;
    allocator) A=jemalloc B=system B_FLAGS=(--no-default-features) ;;
    *) echo "unknown comparison $COMPARISON (governance or allocator)" >&2; exit 2 ;;
esac
TARGET=${CARGO_TARGET_DIR:-./target}
PYTHON=${PYTHON:-python3}
# quiver_start / quiver_stop, $work and its removal at exit
source "$(dirname "$0")/quiver-server.sh"

# each server built alone (building it beside quiver-bench could unify other features into
# it), the benchmark tools last
cargo build --release -p quiver-server "${B_FLAGS[@]}"
cp "$TARGET/release/quiver" "$work/quiver-$B"
cargo build --release -p quiver-server
cp "$TARGET/release/quiver" "$work/quiver-$A"
cargo build --release -p quiver-bench

# start BINARY DATA_DIR [VAR=VALUE...]: that build on that data, on $QUIVER, once it answers
start() {
    quiver_binary=$1 quiver_data=$2
    shift 2
    quiver_start 18900 "$@"
}
stop() {
    quiver_stop
}

# the TSBS rows, written once and persisted; both builds read the same files
start "$work/quiver-$A" "$work/tsbs" QUIVER_PERSIST_BUFFER_BYTES=$((8 << 30)) \
    QUIVER_MAX_BUFFER_BYTES=$((16 << 30))
"$TARGET/release/quiver-tsbs" --quiver-url "http://$QUIVER" --rows "$ROWS" --load quiver \
    --print-statements >"$work/statements.sql"
curl -sf -X POST "http://$QUIVER/api/v3/persist" >/dev/null
stop

# status_kb PID FIELD: a line of /proc/PID/status in kB (VmRSS, VmHWM)
status_kb() { awk -v field="$2:" '$1 == field { print $2 }' "/proc/$1/status"; }

# largest_query_memory: on the running server (idle, its data written), resident memory
# before `array_agg` of 30 M values, its peak, and resident memory 10 s after it ended
largest_query_memory() {
    local before peak
    before=$(status_kb "$quiver_pid" VmRSS)
    curl -sf "http://$QUIVER/api/v3/query_sql" -G --data-urlencode db=govbench \
        --data-urlencode "q=SELECT array_length(array_agg(v), 1) FROM generate_series(1, 30000000) t(v)" \
        >/dev/null
    peak=$(status_kb "$quiver_pid" VmHWM)
    sleep 10
    echo "memory: before $((before / 1024)) MiB, peak $((peak / 1024)) MiB," \
        "10 s after $(($(status_kb "$quiver_pid" VmRSS) / 1024)) MiB"
}

echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD), $(nproc) cores, $ROWS TSBS rows," \
    "$COMPARISON: $A against $B"
for round in $(seq "$ROUNDS"); do
    builds="$A $B"
    ((round % 2 == 0)) && builds="$B $A"
    for build in $builds; do
        out="$work/out.$build.$round"
        echo "## round $round: $build"
        rm -rf "$work/probe"
        start "$work/quiver-$build" "$work/probe"
        "$TARGET/release/quiver-govbench" --url "http://$QUIVER" latency --runs 300 | tee "$out"
        largest_query_memory | tee -a "$out"
        stop
        start "$work/quiver-$build" "$work/tsbs" QUIVER_CACHE_ENABLED=false
        for _ in 1 2; do
            "$PYTHON" scripts/query-latency.py "http://$QUIVER" tsbs <"$work/statements.sql" >/dev/null
        done
        "$PYTHON" scripts/query-latency.py "http://$QUIVER" tsbs <"$work/statements.sql" |
            tee -a "$out" | cut -c1-100
        stop
        rm -rf "$work/ingest"
        start "$work/quiver-$build" "$work/ingest"
        "$TARGET/release/quiver-loadgen" --url "http://$QUIVER" --db ingest --connections 4 \
            --batch-lines 5000 --batches 512 --hosts 1000 --seconds 10 |
            grep -o '[0-9]* rows/s' | head -1 | sed 's/^/ingest: /' | tee -a "$out"
        stop
    done
done

"$PYTHON" - "$work" "$ROUNDS" "$A" "$B" <<'EOF'
"""Each measure's A / B ratio of the medians over the rounds."""
import math
import re
import statistics
import sys
from pathlib import Path

work, rounds, a, b = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]


def measures(build: str) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for round_ in range(1, rounds + 1):
        for line in (work / f"out.{build}.{round_}").read_text().splitlines():
            if line.startswith("| `"):  # govbench: | `sql` | cold | cached |
                cells = [c.strip() for c in line.strip("|").split("|")]
                found.setdefault("cold " + cells[0], []).append(float(cells[1]))
                found.setdefault("cached " + cells[0], []).append(float(cells[2]))
            elif " ms " in line:  # query-latency: 1.23 ms 4 rows  SQL
                found.setdefault("tsbs " + line.split("  ", 1)[1], []).append(
                    float(line.split()[0]))
            elif line.startswith("ingest: "):  # rows/s, as a cost: seconds per million rows
                found.setdefault("ingest (s per 10^6 rows)", []).append(
                    1e6 / float(line.split()[1]))
            elif line.startswith("memory: "):
                before, peak, after = map(float, re.findall(r"(\d+) MiB", line))
                found.setdefault("memory peak (MiB)", []).append(peak)
                found.setdefault("memory 10 s after, above before (MiB)", []).append(
                    max(after - before, 1.0))
    return found


first, second = measures(a), measures(b)
print(f"\n| measure | {a} | {b} | {a} / {b} |")
print("|---|---:|---:|---:|")
ratios: dict[str, list[float]] = {}
for name, values in first.items():
    one, other = statistics.median(values), statistics.median(second[name])
    ratios.setdefault(name.split()[0], []).append(one / other)
    print(f"| {name[:90]} | {one:.3f} | {other:.3f} | {one / other:.3f} |")
for kind, values in ratios.items():
    geomean = math.exp(sum(map(math.log, values)) / len(values))
    print(f"geometric mean of the {kind} ratios: {geomean:.3f} ({len(values)} measures)")
EOF
