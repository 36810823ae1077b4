#!/usr/bin/env bash
# TSBS-shaped queries, Quiver vs QuestDB in the same run (BENCHMARKS.md, issue 25).
#
# Starts a release Quiver (result cache off, automatic persistence off so the first pass reads
# the write buffer) and QuestDB 9.3.4 from its jar (fetched with Maven if missing), each on an
# empty data directory, then runs quiver-tsbs: load ROWS rows into both, time every shape on
# fresh data, persist Quiver, time them again. Extra arguments go to quiver-tsbs (--runs,
# --rounds, --shapes a,b).
#
# Build first: cargo build --release -p quiver-server -p quiver-bench
# Usage: scripts/tsbs-bench.sh [ROWS=1000000] [quiver-tsbs arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-1000000}
shift || true
BIN=${CARGO_TARGET_DIR:-./target}/release
QUESTDB_VERSION=9.3.4
JAR=$HOME/.m2/repository/org/questdb/questdb/$QUESTDB_VERSION/questdb-$QUESTDB_VERSION.jar
if [[ ! -f "$JAR" ]]; then
    mvn -q dependency:get -Dartifact=org.questdb:questdb:$QUESTDB_VERSION
fi
QUIVER=127.0.0.1:18286
QUESTDB_HTTP=19000
work=$(mktemp -d)
quiver_pid=
questdb_pid=
cleanup() {
    [[ -n "$quiver_pid" ]] && kill "$quiver_pid" 2>/dev/null
    [[ -n "$questdb_pid" ]] && kill "$questdb_pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
wait_for() {
    local url=$1 log=$2
    for _ in $(seq 300); do curl -sf "$url" >/dev/null && return 0; sleep 0.1; done
    echo "no answer from $url" >&2; tail -50 "$log" >&2; exit 1
}
QUIVER_CACHE_ENABLED=false QUIVER_PERSIST_BUFFER_BYTES=$((8 << 30)) \
    QUIVER_MAX_BUFFER_BYTES=$((16 << 30)) QUIVER_PERSIST_MAX_AGE_SECS=86400 QUIVER_LOG_FILTER=warn \
    $BIN/quiver serve --data-dir "$work/quiver" --http-addr $QUIVER --flight-addr 127.0.0.1:18285 \
    --pg-addr 127.0.0.1:18284 2>>"$work/quiver.log" &
quiver_pid=$!
mkdir -p "$work/questdb/conf"
cat >"$work/questdb/conf/server.conf" <<EOF
http.bind.to=127.0.0.1:$QUESTDB_HTTP
http.min.enabled=false
pg.enabled=false
line.tcp.enabled=false
line.udp.enabled=false
telemetry.enabled=false
EOF
java -Xmx4g -p "$JAR" -m io.questdb/io.questdb.ServerMain -d "$work/questdb" \
    >>"$work/questdb.log" 2>&1 &
questdb_pid=$!
wait_for "http://$QUIVER/health" "$work/quiver.log"
wait_for "http://127.0.0.1:$QUESTDB_HTTP/exec?query=SELECT%201" "$work/questdb.log"
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD), $(nproc) cores, QuestDB $QUESTDB_VERSION ($(java -version 2>&1 | head -1))"
$BIN/quiver-tsbs --quiver-url "http://$QUIVER" --questdb-url "http://127.0.0.1:$QUESTDB_HTTP" \
    --rows "$ROWS" "$@"
