#!/usr/bin/env python3
"""Persistence benchmark (BENCHMARKS.md): query latency on buffered vs persisted data, with
and without the chunk cache, and persistence throughput.

Starts a release server on a temporary directory with automatic persistence effectively off
and the result cache off (every query runs the engine), loads it with quiver-loadgen, times
each query (median of N runs after one warm-up) while the data is in the write buffer,
persists with POST /api/v3/persist (timing it), and times the same queries again over the
Parquet files. Then it restarts the server on the same directory twice, with
`chunk_cache_bytes = 0` and with the default chunk cache, and times them once more over the
very same files; DuckDB (in process, no HTTP) times the same questions over those very files
too. Prints a Markdown table.

Build first: cargo build --release -p quiver-server -p quiver-bench
Usage: .venv/bin/python scripts/persist-bench.py [--seconds 3] [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time

import duckdb
import requests

from benchlib import RELEASE, URL, start, stop, timed_on
from benchlib import query as query_in
from benchlib import timed as timed_in

DB = "bench"


def query(sql: str) -> list[dict]:
    return query_in(DB, sql)


def timed(sql: str, runs: int) -> float:
    return timed_in(DB, sql, runs)


def duckdb_times(data_dir: str, queries: dict[str, str], runs: int) -> dict[str, float]:
    """Each query's median time in DuckDB over the table's Parquet files (a view named cpu;
    `date_bin` is spelled `time_bucket` there, which takes microsecond timestamps). Two
    threads, as the machine has."""
    con = duckdb.connect(":memory:", config={"threads": 2})
    files = f"{data_dir}/tables/{DB}/*/*/*.parquet"
    con.execute(f"CREATE VIEW cpu AS SELECT * FROM read_parquet('{files}')")
    times = {}
    for name, sql in queries.items():
        sql = sql.replace("date_bin(INTERVAL '1 minute', time)",
                          "time_bucket(INTERVAL '1 minute', make_timestamp(epoch_ns(time) // 1000))")
        con.sql(sql).to_arrow_table()
        samples = []
        for _ in range(runs):
            started = time.perf_counter()
            con.sql(sql).to_arrow_table()
            samples.append(time.perf_counter() - started)
        times[name] = statistics.median(samples) * 1e3
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = f"{tmp}/data"
        server = start(data_dir)
        try:
            subprocess.run(
                [RELEASE / "quiver-loadgen", "--url", URL, "--db", DB,
                 "--connections", "4", "--batch-lines", "5000", "--batches", "200",
                 "--hosts", "1000", "--seconds", str(args.seconds)],
                check=True, stdout=subprocess.DEVNULL)
            rows = query("SELECT count(*) AS n, min(time) AS t0 FROM cpu")[0]
            t0 = rows["t0"]
            queries = {
                "count(*)": "SELECT count(*) FROM cpu",
                "avg by region": "SELECT region, avg(usage_user) FROM cpu GROUP BY region",
                "one host, 1-min buckets": "SELECT date_bin(INTERVAL '1 minute', time) AS b, "
                    "avg(usage_user) FROM cpu WHERE hostname = 'host_7' GROUP BY b",
                "last point of one host": "SELECT * FROM cpu WHERE hostname = 'host_42' "
                    "ORDER BY time DESC LIMIT 1",
                "10-minute time range": "SELECT count(*), max(usage_idle) FROM cpu "
                    f"WHERE time >= '{t0}' AND time < TIMESTAMP '{t0}' + INTERVAL '10 minutes'",
                "full scan, 3 columns": "SELECT hostname, time, usage_user FROM cpu "
                    "WHERE usage_user > 99.9",
            }
            buffered = {name: timed(sql, args.runs) for name, sql in queries.items()}
            started = time.perf_counter()
            summary = requests.post(f"{URL}/api/v3/persist").json()
            elapsed = time.perf_counter() - started
            persisted = {name: timed(sql, args.runs) for name, sql in queries.items()}
        finally:
            stop(server)
        uncached = timed_on(data_dir, DB, queries, args.runs, chunk_cache_bytes="0")
        cached = timed_on(data_dir, DB, queries, args.runs)
        duck = duckdb_times(data_dir, queries, args.runs)
        print(f"rows: {rows['n']}; persist: {summary['rows']} rows, {summary['files']} files, "
              f"{summary['parquet_bytes'] / 2**20:.1f} MiB Parquet from "
              f"{summary['buffer_bytes_released'] / 2**20:.1f} MiB buffer in {elapsed:.2f} s "
              f"= {summary['rows'] / elapsed / 1e6:.2f} M rows/s")
        print("| query | buffered (ms) | persisted (ms) | persisted / buffered "
              "| restarted, chunk cache off (ms) | restarted, chunk cache on (ms) | off / on "
              "| DuckDB, same files (ms) | on / DuckDB |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name in queries:
            b, p, off, on = buffered[name], persisted[name], uncached[name], cached[name]
            print(f"| {name} | {b:.1f} | {p:.1f} | {p / b:.2f} | {off:.1f} | {on:.1f} "
                  f"| {off / on:.2f} | {duck[name]:.1f} | {on / duck[name]:.2f} |")
        ratios = [uncached[name] / cached[name] for name in queries]
        print(f"geometric mean off / on: {statistics.geometric_mean(ratios):.2f}")
        ratios = [cached[name] / duck[name] for name in queries]
        print(f"geometric mean Quiver (chunk cache on, over HTTP) / DuckDB (in process): "
              f"{statistics.geometric_mean(ratios):.2f}")


if __name__ == "__main__":
    main()
