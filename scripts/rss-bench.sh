#!/usr/bin/env bash
# Peak memory benchmark (BENCHMARKS.md, issue 16): does the server's peak RSS stay within its
# configured caches and write buffer + 15 %?
#
# A release server with small, explicit bounds (chunk cache CHUNK MiB, result cache RESULT MiB,
# write buffer BUFFER MiB, persisting at half of it, compaction on) takes line protocol from
# quiver-loadgen (4 connections x 5000-row batches, 1000 hosts) for SECONDS s while a reader
# loops over five queries (aggregates, a last-point, a wide scan) that fill both caches. At the
# end it prints VmHWM (peak resident memory) next to the configured sum, with and without the
# compaction allowance (a merge holds up to twice compaction_max_merge_bytes).
#
# Build first: cargo build --release -p quiver-server -p quiver-bench
# Usage: scripts/rss-bench.sh [SECONDS=60] [CHUNK=64] [RESULT=64] [BUFFER=256] [MERGE=64]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_=${1:-60}
CHUNK=${2:-64}
RESULT=${3:-64}
BUFFER=${4:-256}
MERGE=${5:-64}
BIN=${CARGO_TARGET_DIR:-./target}/release
ADDR=127.0.0.1:18199
URL=http://$ADDR
work=$(mktemp -d)
pid=
reader=
cleanup() {
    [[ -n "$reader" ]] && kill "$reader" 2>/dev/null
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
mib=$((1 << 20))
QUIVER_CHUNK_CACHE_BYTES=$((CHUNK * mib)) QUIVER_CACHE_CAPACITY_BYTES=$((RESULT * mib)) \
    QUIVER_MAX_BUFFER_BYTES=$((BUFFER * mib)) QUIVER_PERSIST_BUFFER_BYTES=$((BUFFER * mib / 2)) \
    QUIVER_COMPACTION_MAX_MERGE_BYTES=$((MERGE * mib)) QUIVER_COMPACTION_IDLE_SECS=5 \
    QUIVER_LOG_FILTER=warn \
    $BIN/quiver serve --data-dir "$work/data" --http-addr $ADDR --flight-addr 127.0.0.1:18198 \
    --pg-addr 127.0.0.1:18197 2>>"$work/server.log" &
pid=$!
started=
for _ in $(seq 100); do curl -sf $URL/health >/dev/null && started=1 && break; sleep 0.1; done
if [[ -z "$started" ]]; then
    echo "server did not start" >&2; cat "$work/server.log" >&2; exit 1
fi
(
    while true; do
        for q in "SELECT hostname, avg(usage_user) FROM cpu GROUP BY hostname" \
                 "SELECT count(*), max(usage_system) FROM cpu" \
                 "SELECT DISTINCT ON (hostname) hostname, time, usage_user FROM cpu ORDER BY hostname, time DESC" \
                 "SELECT * FROM cpu WHERE hostname = 'host_7' ORDER BY time DESC LIMIT 1000" \
                 "SELECT date_bin(INTERVAL '1 minute', time) AS m, avg(usage_idle) FROM cpu GROUP BY m"; do
            curl -s -o /dev/null --get $URL/api/v3/query_sql --data-urlencode "db=bench" \
                --data-urlencode "q=$q" || true
        done
    done
) &
reader=$!
$BIN/quiver-loadgen --url $URL --db bench --format lp --connections 4 --batch-lines 5000 \
    --batches 512 --hosts 1000 --seconds "$SECONDS_"
kill "$reader"; wait "$reader" 2>/dev/null || true; reader=
hwm_kib=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
storage=$(curl -sf $URL/api/v3/storage)
python3 - "$hwm_kib" "$CHUNK" "$RESULT" "$BUFFER" "$MERGE" "$storage" <<'EOF'
import json, sys
hwm_mib = int(sys.argv[1]) / 1024
chunk, result, buffer, merge = map(int, sys.argv[2:6])
storage = json.loads(sys.argv[6])
bound = (chunk + result + buffer) * 1.15
with_merge = (chunk + result + buffer + 2 * merge) * 1.15
print(f"peak RSS (VmHWM): {hwm_mib:.0f} MiB")
print(f"caches + buffer = {chunk} + {result} + {buffer} MiB; +15 %: {bound:.0f} MiB "
      f"-> {'met' if hwm_mib <= bound else 'not met'} ({hwm_mib / bound:.2f}x of the bound)")
print(f"with the compaction allowance (2 x {merge} MiB) +15 %: {with_merge:.0f} MiB "
      f"-> {'met' if hwm_mib <= with_merge else 'not met'} ({hwm_mib / with_merge:.2f}x)")
print("persistence:", storage["persistence"])
print("compaction merges:", storage["compaction"]["compactions"],
      "files now:", storage["compaction"]["files"])
print("chunk cache bytes:", storage["chunk_cache"]["bytes"])
EOF
