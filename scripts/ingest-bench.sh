#!/usr/bin/env bash
# Ingest benchmark (BENCHMARKS.md, "Ingest by format"): the same metrics rows over HTTP as
# line protocol, MessagePack columnar, MessagePack row and Arrow IPC, in one run on this machine:
#   - the disk's own sequential fsync'd write speed (dd oflag=dsync, same file system as the
#     WAL), before each of the two throughput phases (it drifts on a shared machine);
#   - per format, a fresh release server with default settings: quiver-loadgen with CONNS
#     connections x ROWS-row batches for SECONDS s (rows/s, and the in-process one-core decode
#     baseline), the WAL bytes per row and the WAL MB/s at the measured rate. The load cycles
#     through 512 distinct batches (2.56 M distinct points at the defaults), so the background
#     persister writes mostly new rows rather than deduplicating repeats: sustained ingest;
#   - per format, the request path alone (decode, WAL fsync, buffer) for 4 s, with persisting
#     held off (a 10 GB buffer): what ingest costs before Parquet persistence;
#   - per format, one request of BIG rows to a fresh server: the server's peak RSS growth
#     (VmHWM after - before) next to the rows' size as Arrow arrays.
#
# Build first: cargo build --release -p quiver-server -p quiver-bench
# Usage: scripts/ingest-bench.sh [CONNS=4] [ROWS=5000] [SECONDS=10] [BIG=150000] [--no-sync]
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${1:-4}
ROWS=${2:-5000}
SECONDS_=${3:-10}
BIG=${4:-150000}
NO_SYNC=${5:-}
BIN=${CARGO_TARGET_DIR:-./target}/release
ADDR=127.0.0.1:18099
URL=http://$ADDR
work=$(mktemp -d)
pid=
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

start_server() {
    rm -rf "$work/data"
    env "$@" QUIVER_LOG_FILTER=warn $BIN/quiver serve --data-dir "$work/data" --http-addr $ADDR \
        --flight-addr 127.0.0.1:18098 --pg-addr 127.0.0.1:18097 2>>"$work/server.log" &
    pid=$!
    for _ in $(seq 100); do curl -sf $URL/health >/dev/null && return; sleep 0.1; done
    echo "server did not start" >&2; cat "$work/server.log" >&2; exit 1
}
stop_server() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
wal() { curl -sf $URL/api/v3/storage | python3 -c "import json,sys; w=json.load(sys.stdin)['wal']; print(w['bytes'], w['records'])"; }
# Runs the load generator in FORMAT for SECONDS against the running server and prints the
# WAL bytes it wrote per row and the WAL write rate those make at the measured rows/s.
load_and_measure_wal() {
    local format=$1 seconds=$2
    local b0 r0 b1 r1 report
    read -r b0 r0 < <(wal)
    report=$($BIN/quiver-loadgen --url $URL --db bench --format "$format" --connections "$CONNS" \
        --batch-lines "$ROWS" --batches 512 --hosts 1000 --seconds "$seconds" $NO_SYNC)
    echo "$report"
    read -r b1 r1 < <(wal)
    REPORT="$report" python3 -c "
import os, re
b, r = $b1 - $b0, $r1 - $r0
per_row = b / max(r, 1) / $ROWS
rows_per_s = float(re.search(r'batches: (\d+) rows/s', os.environ['REPORT']).group(1))
print(f'WAL: {per_row:.0f} bytes/row ({b} bytes, {r} records): {rows_per_s * per_row / 1e6:.1f} MB/s at the measured rate')"
}
disk_speed() {
    echo "== disk: sequential writes with O_DSYNC (dd, 1 MiB blocks, 256 MiB, WAL's file system)"
    dd if=/dev/zero of="$work/dd" bs=1M count=256 oflag=dsync 2>&1 | tail -1
    rm -f "$work/dd"
}
hwm_kib() { awk '/VmHWM/ {print $2}' /proc/"$pid"/status; }

disk_speed

for format in lp msgpack msgpack-row arrow; do
    echo "== $format: $CONNS connections x $ROWS-row batches, ${SECONDS_}s ${NO_SYNC}"
    start_server
    load_and_measure_wal "$format" "$SECONDS_"
    stop_server
done

disk_speed
for format in lp msgpack msgpack-row arrow; do
    echo "== $format, request path alone (persisting held off): $CONNS connections x $ROWS-row batches, 4s"
    start_server QUIVER_PERSIST_BUFFER_BYTES=10000000000 QUIVER_MAX_BUFFER_BYTES=12000000000
    load_and_measure_wal "$format" 4 | grep -v '^baseline'
    stop_server
done

for format in lp msgpack msgpack-row arrow; do
    start_server
    before=$(hwm_kib)
    $BIN/quiver-loadgen --url $URL --db big --format "$format" --hosts 1000 --single-request "$BIG"
    after=$(hwm_kib)
    echo "peak RSS growth for that request: $(( (after - before) / 1024 )) MiB (VmHWM $((before / 1024)) -> $((after / 1024)) MiB)"
    stop_server
done
