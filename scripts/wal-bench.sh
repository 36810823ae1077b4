#!/usr/bin/env bash
# WAL group-commit benchmark (BENCHMARKS.md): starts a release server on a temp dir, runs
# quiver-loadgen against it, stops it with SIGTERM and prints the WAL totals it logs.
# Build first: cargo build --release -p quiver-server --bin quiver -p quiver-bench --bin quiver-loadgen
# usage: scripts/wal-bench.sh CONNECTIONS LINES [--no-sync]
set -u
cd "$(dirname "$0")/.."
dir=$(mktemp -d); log=$dir/log
${CARGO_TARGET_DIR:-./target}/release/quiver serve --data-dir $dir/data --http-addr 127.0.0.1:18088 2> $log &
pid=$!; sleep 1
${CARGO_TARGET_DIR:-./target}/release/quiver-loadgen --url http://127.0.0.1:18088 --connections $1 --batch-lines $2 --hosts 100 --seconds 5 ${3:-} | tail -1
kill -TERM $pid; wait $pid
grep "WAL totals" $log | sed 's/.*INFO//'
rm -rf $dir
