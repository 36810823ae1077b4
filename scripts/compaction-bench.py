#!/usr/bin/env python3
"""Compaction benchmark (BENCHMARKS.md): files per partition and query latency after many
small persists, without compaction, with the background compactor's tiers, and settled, each
against the same rows persisted as one file, measured in one run.

1. A release server with compaction off, the result cache off and persistence only on
   request: `--persists` small writes (100 hosts, `--points` points each, 1 s apart, later
   writes later in time, as a stream) each followed by POST /api/v3/persist into database
   `many`; the very same rows as one write and one persist into database `single`. Every
   query is timed on both (median of `--runs` after a warm-up).
2. Restart with the background compactor on (default fanout, idle wait longer than the run,
   so only tiers run); wait until it is done; files per partition and times again.
3. POST /api/v3/compact?db=many (what an idle partition gets from the background
   compactor); files per partition and times again.

Build first: cargo build --release -p quiver-server
Usage: .venv/bin/python scripts/compaction-bench.py [--persists 1000] [--points 10] [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import requests

from benchlib import URL, persist, query, start, stop, storage, timed_all, write

T0 = 1_795_478_400 * 10**9  # 2026-11-24T00:00:00Z: every row in one day partition
QUERIES = {
    "count(*)": "SELECT count(*) FROM cpu",
    "avg by host": "SELECT host, avg(usage) FROM cpu GROUP BY host",
    "one host, 1-min buckets": "SELECT date_bin(INTERVAL '1 minute', time) AS b, avg(usage) "
        "FROM cpu WHERE host = 'h7' GROUP BY b",
    "last point of one host": "SELECT * FROM cpu WHERE host = 'h42' ORDER BY time DESC LIMIT 1",
    "10-minute range": "SELECT count(*), max(usage) FROM cpu WHERE time >= "
        "'2026-11-24T01:00:00Z' AND time < '2026-11-24T01:10:00Z'",
}


def lines(first_point: int, points: int) -> str:
    return "".join(
        f"cpu,host=h{h} usage={(p * 7 + h) % 100}.5,load={p}i {T0 + p * 10**9}\n"
        for p in range(first_point, first_point + points) for h in range(100))


def layout() -> dict:
    return storage()["compaction"]


def chunk_misses() -> int:
    return storage()["chunk_cache"]["misses"]


def times(db: str, runs: int) -> dict[str, float]:
    return timed_all(db, QUERIES, runs)


def settle() -> dict:
    """Waits until the background compactor has made no merge for 3 s."""
    last, quiet_since = None, time.monotonic()
    while time.monotonic() - quiet_since < 3:
        now = layout()["compactions"]
        if now != last:
            last, quiet_since = now, time.monotonic()
        time.sleep(0.2)
    return layout()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--persists", type=int, default=1000)
    parser.add_argument("--points", type=int, default=10)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    results: dict[str, tuple[int, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = f"{tmp}/data"
        server = start(data_dir, compaction_enabled="false")
        try:
            session = requests.Session()
            started = time.perf_counter()
            for i in range(args.persists):
                write("many", lines(i * args.points, args.points), session)
                persist()
            load_secs = time.perf_counter() - started
            for i in range(0, args.persists, 100):
                write("single", lines(i * args.points, args.points * 100), session)
            persist()
            results["single file"] = (1, times("single", args.runs))
            files = layout()["max_files_per_partition"]
            before = chunk_misses()
            for sql in QUERIES.values():
                query("many", sql)
            warm = chunk_misses()
            results["no compaction"] = (files, times("many", args.runs))
            misses = (warm - before, chunk_misses() - warm)
        finally:
            stop(server)
        server = start(data_dir, compaction_idle_secs=str(86_400))
        try:
            tiers = settle()
            results["tiers (background)"] = (
                tiers["max_files_per_partition"], times("many", args.runs))
            started = time.perf_counter()
            done = requests.post(f"{URL}/api/v3/compact", params={"db": "many"}).json()
            compact_secs = time.perf_counter() - started
            settled = layout()
            results["settled"] = (settled["max_files_per_partition"], times("many", args.runs))
        finally:
            stop(server)
    rows = args.persists * args.points * 100
    print(f"{args.persists} persists of {args.points * 100} rows ({rows} rows) in "
          f"{load_secs:.1f} s; background tiers: {tiers['compactions']} merges, "
          f"{tiers['bytes_out'] / 2**20:.1f} MiB written; settling: {done['compactions']} "
          f"merges of {done['files_in']} files in {compact_secs:.2f} s; chunk cache misses "
          f"over {files} files: {misses[0]} in the first run of each query, {misses[1]} in "
          f"the {args.runs + 1} runs after it")
    single = results["single file"][1]
    names = list(QUERIES)
    print("| layout | files in the partition | " + " | ".join(f"{n} (ms)" for n in names)
          + " | geomean vs single file |")
    print("|---|---|" + "---|" * len(names) + "---|")
    for label, (files, measured) in results.items():
        ratio = statistics.geometric_mean([measured[n] / single[n] for n in names])
        cells = " | ".join(f"{measured[n]:.1f}" for n in names)
        print(f"| {label} | {files} | {cells} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
