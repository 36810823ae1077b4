#!/usr/bin/env bash
# Two builds of the server on the rollup benchmark (scripts/rollup-bench.sh), side by side in
# one run: both started on their defaults, each loaded with the same rows and the same rollup,
# then every dashboard query asked routed and raw of both, request by request in turn
# (quiver-rollupbench --compare-url), fresh and after a persist. Prints each query's times on
# both and B / A, with the geometric means (BENCHMARKS.md, "The engine's floor").
#
# Usage: scripts/ab-rollup.sh A_DIR B_DIR [ROWS=1000000] [RUNS=15]
#   A_DIR, B_DIR: directories holding a release `quiver` binary each; quiver-rollupbench is
#   taken from B_DIR, else from $CARGO_TARGET_DIR/release (or target/release).
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(realpath "$1")
B=$(realpath "$2")
ROWS=${3:-1000000}
RUNS=${4:-15}
source scripts/quiver-server.sh
bench=$B/quiver-rollupbench
[[ -x "$bench" ]] || bench=$BIN/quiver-rollupbench
quiver_start_two "$A" "$B" 18686
echo "# $(date -u +%FT%TZ), $(nproc) cores, A=$A B=$B, $ROWS rows, $RUNS runs"
$bench --quiver-url "$a_url" --compare-url "$b_url" --rows "$ROWS" --runs "$RUNS"
