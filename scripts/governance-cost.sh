#!/usr/bin/env bash
# What query governance costs (BENCHMARKS.md, issue 24): query latency of the default build
# against one built with `--features quiver-query/ungoverned` (queries run on the caller's
# task in the engine's shared memory pool: no admission, no pool of their own, no hand-over to
# the query runtime, no limits), the two alternating on the same data in the same run.
#
# Each round runs each build (in alternating order) through quiver-govbench's `latency`
# (`SELECT 1` and two queries over 100,000 rows, cold and cached, on a fresh directory), then
# `SELECT 1` and the nine TSBS shapes over ROWS persisted rows (scripts/query-latency.py:
# median of 15 per statement, result cache off). It ends with each statement's governed /
# ungoverned ratio of the medians over the rounds, and their geometric mean.
#
# Builds both first (release: the ungoverned server, the default one, then the tools).
# Usage: scripts/governance-cost.sh [ROUNDS=3] [ROWS=1000000]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
ROWS=${2:-1000000}
TARGET=${CARGO_TARGET_DIR:-./target}
PYTHON=${PYTHON:-python3}
ADDR=127.0.0.1:18900
work=$(mktemp -d)
pid=
cleanup() {
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

# each server built alone (building it beside quiver-bench could unify other features into
# it), the benchmark tools last
cargo build --release -p quiver-server --features quiver-query/ungoverned
cp "$TARGET/release/quiver" "$work/quiver-ungoverned"
cargo build --release -p quiver-server
cp "$TARGET/release/quiver" "$work/quiver-governed"
cargo build --release -p quiver-bench

# start BINARY DATA_DIR [VAR=VALUE...]: a server on $ADDR, once it answers
start() {
    local bin=$1 dir=$2
    shift 2
    env "$@" QUIVER_LOG_FILTER=warn "$bin" serve --data-dir "$dir" --http-addr $ADDR \
        --flight-addr 127.0.0.1:18901 --pg-addr 127.0.0.1:18902 >>"$work/log" 2>&1 &
    pid=$!
    for _ in $(seq 300); do curl -sf "http://$ADDR/health" >/dev/null && return 0; sleep 0.1; done
    echo "no answer from $bin" >&2
    tail -30 "$work/log" >&2
    exit 1
}
stop() {
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
}

# the TSBS rows, written once and persisted; both builds read the same files
start "$work/quiver-governed" "$work/tsbs" QUIVER_PERSIST_BUFFER_BYTES=$((8 << 30)) \
    QUIVER_MAX_BUFFER_BYTES=$((16 << 30))
"$TARGET/release/quiver-tsbs" --quiver-url "http://$ADDR" --rows "$ROWS" --load quiver \
    --print-statements >"$work/statements.sql"
curl -sf -X POST "http://$ADDR/api/v3/persist" >/dev/null
stop

echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD), $(nproc) cores, $ROWS TSBS rows"
for round in $(seq "$ROUNDS"); do
    builds="governed ungoverned"
    ((round % 2 == 0)) && builds="ungoverned governed"
    for build in $builds; do
        out="$work/out.$build.$round"
        echo "## round $round: $build"
        rm -rf "$work/probe"
        start "$work/quiver-$build" "$work/probe"
        "$TARGET/release/quiver-govbench" --url "http://$ADDR" latency --runs 300 | tee "$out"
        stop
        start "$work/quiver-$build" "$work/tsbs" QUIVER_CACHE_ENABLED=false
        for _ in 1 2; do
            "$PYTHON" scripts/query-latency.py "http://$ADDR" tsbs <"$work/statements.sql" >/dev/null
        done
        "$PYTHON" scripts/query-latency.py "http://$ADDR" tsbs <"$work/statements.sql" |
            tee -a "$out" | cut -c1-100
        stop
    done
done

"$PYTHON" - "$work" "$ROUNDS" <<'EOF'
"""Each statement's governed / ungoverned ratio of the medians over the rounds."""
import math
import statistics
import sys
from pathlib import Path

work, rounds = Path(sys.argv[1]), int(sys.argv[2])


def timings(build: str) -> dict[str, list[float]]:
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
    return found


governed, ungoverned = timings("governed"), timings("ungoverned")
print("\n| statement | governed (ms) | ungoverned (ms) | governed / ungoverned |")
print("|---|---:|---:|---:|")
ratios: dict[str, list[float]] = {}
for name, times in governed.items():
    on, off = statistics.median(times), statistics.median(ungoverned[name])
    ratios.setdefault(name.split()[0], []).append(on / off)
    print(f"| {name[:90]} | {on:.3f} | {off:.3f} | {on / off:.3f} |")
for kind, values in ratios.items():
    geomean = math.exp(sum(map(math.log, values)) / len(values))
    print(f"geometric mean of the {kind} ratios: {geomean:.3f} ({len(values)} statements)")
EOF
