#!/usr/bin/env bash
# Rolling-window dashboards under live ingest: answers from reused time parts against the same
# answers computed whole (BENCHMARKS.md, issue 41).
#
# Starts a release Quiver on its defaults (result cache on, parts reused) on an empty data
# directory and runs quiver-windowbench against it: 100 hosts, then 1,000 hosts, a 6-hour
# window in 1-minute buckets per host, refreshed after every ten seconds of new points, answers
# as JSON and as Arrow IPC, and a "top 5 host-minutes" panel over the same window; every cached
# answer is checked against the answer computed whole.
#
# Build first: cargo build --release -p quiver-server -p quiver-bench
# Usage: scripts/window-bench.sh [REFRESHES=60]
set -euo pipefail
cd "$(dirname "$0")/.."
REFRESHES=${1:-60}
source scripts/quiver-server.sh
quiver_start 18386
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD), $(nproc) cores"
echo "| dashboard | computed whole p50 / p90 (ms) | reused parts p50 / p90 (ms) | speed-up p50 / p90 | rows from cached parts | answers |"
echo "|---|---|---|---|---|---|"
for hosts in 100 1000; do
    for format in json arrow; do
        $BIN/quiver-windowbench --quiver-url "http://$QUIVER" --hosts "$hosts" \
            --refreshes "$REFRESHES" --db "dashboard_$hosts" --format "$format"
    done
    $BIN/quiver-windowbench --quiver-url "http://$QUIVER" --hosts "$hosts" \
        --refreshes "$REFRESHES" --db "dashboard_$hosts" --panel top
done
