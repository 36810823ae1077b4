#!/usr/bin/env bash
# Two builds of the server in the same run, on the benchmarks named (BENCHMARKS.md): each
# benchmark script runs once per build and round, the builds alternating A B B A ..., with
# the same benchmark clients (the `quiver-*` tools of the BASE build's release directory).
# Sequential runs measure the machine's drift between them too: for TSBS and the rolling
# windows, scripts/ab-tsbs.py and scripts/ab-window.sh run both builds at once and alternate
# every request instead (BENCHMARKS.md, "The engine's floor").
#
# A and B are release directories holding a `quiver` binary (e.g. one built from the commit
# before a change in a `git worktree`, copied aside, and this checkout's). Every output goes to
# OUT/<benchmark>-<round>-<A|B>.txt.
#
# Two checkouts building into one CARGO_TARGET_DIR share dependencies, but cargo names a
# workspace crate's artifacts by its path inside the workspace and trusts modification times:
# after building the other checkout, `touch` this one's sources (find crates -name '*.rs'
# -exec touch {} +) or its build links the other's crates.
#
# Usage: scripts/ab-bench.sh A_DIR B_DIR OUT [ROUNDS=2] [BENCHMARKS="tsbs rollup window influxql"]
#   BASE (default: B_DIR) is where the benchmark clients are taken from.
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(realpath "$1")
B=$(realpath "$2")
OUT=$3
ROUNDS=${4:-2}
BENCHMARKS=${5:-tsbs rollup window influxql}
BASE=$(realpath "${BASE:-$B}")
mkdir -p "$OUT"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# a target directory per build: its `quiver`, and the base build's clients
for build in A B; do
    dir=${!build}
    mkdir -p "$stage/$build/release"
    for tool in "$BASE"/quiver-*; do
        [[ -x "$tool" && -f "$tool" ]] && ln -s "$tool" "$stage/$build/release/"
    done
    ln -s "$dir/quiver" "$stage/$build/release/quiver"
done

run() {
    local benchmark=$1 round=$2 build=$3
    local out="$OUT/$benchmark-$round-$build.txt"
    echo "== $benchmark, round $round, build $build ($(date -u +%T))" >&2
    case $benchmark in
        tsbs) CARGO_TARGET_DIR="$stage/$build" scripts/tsbs-bench.sh 1000000 --runs 7 --rounds 2 ;;
        rollup) CARGO_TARGET_DIR="$stage/$build" scripts/rollup-bench.sh 1000000 500000 ;;
        window) CARGO_TARGET_DIR="$stage/$build" scripts/window-bench.sh 30 ;;
        influxql) CARGO_TARGET_DIR="$stage/$build" scripts/influxql-bench.sh 500000 9 ;;
        *) echo "unknown benchmark $benchmark" >&2; exit 2 ;;
    esac >"$out" 2>&1 || { echo "$benchmark failed: see $out" >&2; exit 1; }
}

for round in $(seq "$ROUNDS"); do
    # A B in odd rounds, B A in even ones: drift over the run weighs on both builds alike
    if (( round % 2 )); then order="A B"; else order="B A"; fi
    for benchmark in $BENCHMARKS; do
        for build in $order; do
            run "$benchmark" "$round" "$build"
        done
    done
done
echo "outputs in $OUT" >&2
