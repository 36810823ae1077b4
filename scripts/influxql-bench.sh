#!/usr/bin/env bash
# InfluxQL: InfluxQL against SQL on one Quiver, and Quiver against InfluxDB 1.x on the same
# InfluxQL (BENCHMARKS.md, issue 40).
#
# Starts a release Quiver (result cache off) and InfluxDB 1.6 (Debian's `influxdb` package:
# `apt-get install influxdb`) on empty data directories, and runs quiver-influxqlbench against
# both: ROWS TSBS rows written to each, then dashboard statements timed on each.
#
# Build first: cargo build --release -p quiver-server -p quiver-bench
# Usage: scripts/influxql-bench.sh [ROWS=500000] [RUNS=9]
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-500000}
RUNS=${2:-9}
BIN=${CARGO_TARGET_DIR:-./target}/release
QUIVER=127.0.0.1:18386
INFLUXDB=127.0.0.1:18387
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
wait_for() {
    for _ in $(seq 300); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done
    echo "no answer from $1" >&2; tail -50 "$work"/*.log >&2; exit 1
}
QUIVER_CACHE_ENABLED=false QUIVER_LOG_FILTER=warn $BIN/quiver serve \
    --data-dir "$work/quiver" --http-addr $QUIVER --flight-addr 127.0.0.1:18388 \
    --pg-addr 127.0.0.1:18389 2>>"$work/quiver.log" &
pids+=($!)
cat > "$work/influxdb.conf" <<CONF
reporting-disabled = true
bind-address = "127.0.0.1:0"
[meta]
  dir = "$work/influxdb/meta"
[data]
  dir = "$work/influxdb/data"
  wal-dir = "$work/influxdb/wal"
  query-log-enabled = false
[monitor]
  store-enabled = false
[http]
  bind-address = "$INFLUXDB"
  log-enabled = false
[logging]
  level = "warn"
CONF
influxd run -config "$work/influxdb.conf" >>"$work/influxdb.log" 2>&1 &
pids+=($!)
wait_for "http://$QUIVER/health"
wait_for "http://$INFLUXDB/ping"
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD), $(nproc) cores, $(influxd version)"
$BIN/quiver-influxqlbench --quiver-url "http://$QUIVER" --influxdb-url "http://$INFLUXDB" \
    --rows "$ROWS" --runs "$RUNS"
