#!/usr/bin/env bash
# Two builds of the server on the rolling-window dashboards (scripts/window-bench.sh),
# side by side in one run: both started on their defaults, each fed the same points and asked
# the same questions refresh by refresh, the servers alternating (quiver-windowbench
# --compare-url). Prints, per dashboard, each build's p50 computed whole and from reused parts
# and B / A (BENCHMARKS.md, "The engine's floor").
#
# Usage: scripts/ab-window.sh A_DIR B_DIR [REFRESHES=60]
#   A_DIR, B_DIR: directories holding a release `quiver` binary each; quiver-windowbench is
#   taken from B_DIR, else from $CARGO_TARGET_DIR/release (or target/release).
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(realpath "$1")
B=$(realpath "$2")
REFRESHES=${3:-60}
source scripts/quiver-server.sh
bench=$B/quiver-windowbench
[[ -x "$bench" ]] || bench=$BIN/quiver-windowbench
quiver_start_two "$A" "$B" 18586
echo "# $(date -u +%FT%TZ), $(nproc) cores, A=$A B=$B, $REFRESHES refreshes"
echo "| dashboard | A computed whole p50 (ms) | B | B / A | A reused parts p50 (ms) | B | B / A | PARTIAL answers A / B |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
for hosts in 100 1000; do
    for format in json arrow; do
        $bench --quiver-url "$a_url" --compare-url "$b_url" --hosts "$hosts" \
            --refreshes "$REFRESHES" --db "dashboard_$hosts" --format "$format"
    done
    $bench --quiver-url "$a_url" --compare-url "$b_url" --hosts "$hosts" \
        --refreshes "$REFRESHES" --db "dashboard_$hosts" --panel top
done
