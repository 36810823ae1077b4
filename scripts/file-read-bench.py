#!/usr/bin/env python3
"""Storage's own reads of Parquet files, binary against binary in one run: last-point queries
with the chunk cache off (every file's last rows read each time) and compaction merges (every
input file read whole). Used to compare reading through the data store's object store with
reading the files directly (BENCHMARKS.md, issue 43).

    .venv/bin/python scripts/file-read-bench.py --binaries OLD NEW [--files 40] [--rows 50000]
                                                [--runs 9] [--merges 3]

For each binary, alternating which goes first, on a fresh data directory (compaction off, the
result cache and the chunk cache off): MERGES databases each get FILES files of ROWS rows (100
hosts, one partition), each written and persisted on its own; then the last-point query
`SELECT host, max(time) FROM cpu GROUP BY host` is timed on the first database (median of RUNS
after a warm-up, one point written before each so that no kept answer serves it) and every database is compacted (`POST /api/v3/compact?db=`, its
`elapsed_ms`: the merge reads all FILES files). Prints the medians and NEW / OLD.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import requests

import benchlib

QUERY = "SELECT host, max(time) AS newest FROM cpu GROUP BY host"


def measure(binary: str, args: argparse.Namespace) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as data_dir:
        server = benchlib.start(data_dir, binary, chunk_cache_bytes="0",
                                compaction_enabled="false")
        try:
            start_ns = 1_700_000_000 * 10**9
            for db in range(args.merges):
                for f in range(args.files):
                    base = f * args.rows
                    body = "".join(
                        f"cpu,host=h{i % 100} usage={i % 97}.5,n={i}i "
                        f"{start_ns + (base + i) * 10**6}\n" for i in range(args.rows))
                    benchlib.write(f"d{db}", body)
                    benchlib.persist()
            query_ms = []
            benchlib.query("d0", QUERY)
            for run in range(args.runs):
                # a new snapshot each time (one point more): its answer is not kept yet, and
                # with the chunk cache off every file's last rows are read again
                benchlib.write("d0", f"cpu,host=h0 usage=1,n=0i {start_ns + 10**15 + run}\n")
                started = time.perf_counter()
                rows = benchlib.query("d0", QUERY)
                query_ms.append((time.perf_counter() - started) * 1e3)
                assert len(rows) == 100
            merge_ms = []
            for db in range(args.merges):
                r = requests.post(f"{benchlib.URL}/api/v3/compact", params={"db": f"d{db}"},
                                  timeout=600)
                r.raise_for_status()
                merge_ms.append(r.json()["elapsed_ms"])
            return statistics.median(query_ms), statistics.median(merge_ms)
        finally:
            benchlib.stop(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binaries", nargs=2, required=True, metavar=("OLD", "NEW"))
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--merges", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results = benchlib.alternately(args.binaries, args.rounds,
                                   lambda binary: measure(binary, args))
    old, new = (results[b] for b in args.binaries)
    for label, index in (("last points (ms)", 0), ("merge (ms)", 1)):
        o = statistics.median(r[index] for r in old)
        n = statistics.median(r[index] for r in new)
        print(f"{label:18} old {o:8.1f}  new {n:8.1f}  new/old {n / o:.2f}")


if __name__ == "__main__":
    main()
