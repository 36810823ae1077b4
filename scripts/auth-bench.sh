#!/usr/bin/env bash
# The cost of authentication (issue 17): result-cache hit latency over HTTP
# (quiver-cachebench) and pipelined PostgreSQL point queries (quiver-pgbench) against one
# release binary with `auth = disabled` and with `auth = required` (a token on every HTTP
# request; PostgreSQL logs in with SCRAM and every statement checks the token's grants),
# alternating in the same run (off first in odd rounds, on first in even ones). BASE=<binary> adds a third server: an older build, e.g. one
# from before authentication and /metrics existed.
#
#   cargo build --release -p quiver-server -p quiver-bench
#   scripts/auth-bench.sh [ROUNDS]        # default 2; prints everything to stdout
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/quiver}
BENCH=${BENCH:-target/release}
ROUNDS=${1:-2}
WORK=${WORK:-/tmp/quiver-auth-bench}
PORT=18286

stop() { [[ -n "${SERVER:-}" ]] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null || true; SERVER=; }
trap stop EXIT

# run CONFIG BINARY: one server, both benchmarks
run() {
    local config=$1 binary=$2 dir="$WORK/$1"
    rm -rf "$dir" && mkdir -p "$dir"
    local auth=() token_args=() pg_login="user=bench"
    if [[ $config == on ]]; then
        local admin reader
        admin=$("$BIN" token create --admin --data-dir "$dir/data" 2>/dev/null)
        reader=$("$BIN" token create --name pgreader --permission 'db:*:read' --data-dir "$dir/data" 2>/dev/null)
        auth=(--auth required)
        token_args=(--token "$admin")
        pg_login="user=pgreader password=$reader"
    elif [[ $config == off ]]; then
        auth=(--auth disabled)
    fi
    QUIVER_LOG_FILTER=warn "$binary" serve --data-dir "$dir/data" "${auth[@]}" \
        --http-addr 127.0.0.1:$PORT --flight-addr 127.0.0.1:$((PORT + 1)) \
        --pg-addr 127.0.0.1:$((PORT + 2)) > "$dir/server.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 0.1; done
    echo "### $config ($binary)"
    "$BENCH/quiver-cachebench" --url "http://127.0.0.1:$PORT" --runs 21 --seconds 5 "${token_args[@]}"
    "$BENCH/quiver-pgbench" --http-url "http://127.0.0.1:$PORT" --connections 1 --seconds 5 \
        --pg "host=127.0.0.1 port=$((PORT + 2)) $pg_login dbname=pgbench" "${token_args[@]}"
    stop
}

echo "auth-bench: $(nproc) cores, $(git rev-parse --short HEAD), $(date -u +%FT%TZ)"
for round in $(seq "$ROUNDS"); do
    echo "## round $round"
    # the order alternates, so that a drift of the machine over a round favours neither
    if (( round % 2 )); then
        run off "$BIN"
        run on "$BIN"
    else
        run on "$BIN"
        run off "$BIN"
    fi
    if [[ -n "${BASE:-}" ]]; then run base "$BASE"; fi
done
