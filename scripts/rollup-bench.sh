#!/usr/bin/env bash
# Rollups: routed vs raw answers, and the ingest cost of keeping 1 and 5 rollups
# (BENCHMARKS.md, issue 39).
#
# Starts a release Quiver (result cache off, automatic persistence off so that the first pass
# reads the write buffer) on an empty data directory and runs quiver-rollupbench against it:
# load ROWS TSBS rows, declare a 10-minute rollup by host, time dashboard queries routed and
# raw on fresh and on persisted data, then the ingest benchmark. Then restarts the server
# with the chunk cache off (every query reads Parquet) and times the queries again.
#
# Build first: cargo build --release -p quiver-server -p quiver-bench
# Usage: scripts/rollup-bench.sh [ROWS=1000000] [INGEST_ROWS=500000]
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-1000000}
INGEST_ROWS=${2:-500000}
source scripts/quiver-server.sh
start() {
    quiver_start 18286 "$@" QUIVER_CACHE_ENABLED=false QUIVER_PERSIST_BUFFER_BYTES=$((8 << 30)) \
        QUIVER_MAX_BUFFER_BYTES=$((16 << 30)) QUIVER_PERSIST_MAX_AGE_SECS=86400
}
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD), $(nproc) cores"
start
$BIN/quiver-rollupbench --quiver-url "http://$QUIVER" --rows "$ROWS" \
    --ingest-rows "$INGEST_ROWS"
quiver_stop
echo
echo "## restarted with chunk_cache_bytes = 0: every query reads Parquet"
start QUIVER_CHUNK_CACHE_BYTES=0
$BIN/quiver-rollupbench --quiver-url "http://$QUIVER" --rows "$ROWS" --no-load
