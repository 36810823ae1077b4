#!/usr/bin/env python3
"""Bloom filter benchmark (BENCHMARKS.md, issue 16): do bloom filters on tag columns pay?

The same rows are written to two data directories, one server with
`parquet_bloom_filters = false` and one with `true` (result cache off, compaction off, one
persist per day of data): 100 hosts, 200 containers per host whose ids are random (so, sorted
by host then container, every row group spans nearly the whole id range and min/max statistics
cannot prune a container), `--days` days of points every `--step` seconds. Then the same
queries are timed on both (median of N runs after a warm-up, chunk cache on, warm): one
container, three containers, one host (the leading sort column, where statistics already
prune), and a full count. Also reported: Parquet bytes and persist time, off vs on.

Build first: cargo build --release -p quiver-server
Usage: .venv/bin/python scripts/bloom-bench.py [--days 3] [--step 1800] [--runs 15]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from benchlib import persist, query, start, stop, timed_all, write

DB = "bloom"
DAY_S = 86_400


def containers(seed: int = 7) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [(f"h{h:03d}", "%032x" % rng.getrandbits(128)) for h in range(100) for _ in range(200)]


def load(series: list[tuple[str, str]], days: int, step: int) -> float:
    """Writes every day and persists it; returns the seconds spent persisting."""
    persisting = 0.0
    start_s = 1_700_000_000 - 1_700_000_000 % DAY_S
    for day in range(days):
        for offset in range(0, DAY_S, step * 4):
            lines = []
            for minute in range(offset, min(offset + step * 4, DAY_S), step):
                t = (start_s + day * DAY_S + minute) * 10**9
                lines.extend(f"k,host={h},container={c} v={(hash(c) + minute) % 1000} {t}"
                             for h, c in series)
            write(DB, "\n".join(lines))
        began = time.perf_counter()
        persist()
        persisting += time.perf_counter() - began
    return persisting


def parquet_bytes(data_dir: str) -> int:
    return sum(p.stat().st_size for p in Path(data_dir).rglob("*.parquet"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--step", type=int, default=1800, help="seconds between points")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    series = containers()
    pick = random.Random(11).sample(series, 3)
    queries = {
        "one container": f"SELECT count(*) AS n, avg(v) AS a FROM k WHERE container = '{pick[0][1]}'",
        "three containers": "SELECT container, count(*) AS n FROM k WHERE container IN ("
                            + ", ".join(f"'{c}'" for _, c in pick) + ") GROUP BY container ORDER BY container",
        "one host": f"SELECT count(*) AS n, avg(v) AS a FROM k WHERE host = '{pick[0][0]}'",
        "count(*)": "SELECT count(*) AS n FROM k",
    }
    results: dict[str, dict] = {}
    answers: dict[str, list] = {}
    for bloom in ("false", "true"):
        with tempfile.TemporaryDirectory() as data_dir:
            server = start(data_dir, parquet_bloom_filters=bloom, compaction_enabled="false")
            try:
                persisting = load(series, args.days, args.step)
                times = timed_all(DB, queries, args.runs)
                answers[bloom] = [query(DB, sql) for sql in queries.values()]
                rows = query(DB, "SELECT count(*) AS n FROM k")[0]["n"]
            finally:
                stop(server)
            results[bloom] = {"times": times, "bytes": parquet_bytes(data_dir),
                              "persist_s": persisting, "rows": rows}
    assert answers["false"] == answers["true"], ("bloom filters changed an answer", answers)
    off, on = results["false"], results["true"]
    print(f"{off['rows']:,} rows, {len(series):,} series, {args.days} day files, "
          f"median of {args.runs} runs (ms)\n")
    print("| query | bloom off | bloom on | off / on |")
    print("|---|---:|---:|---:|")
    for name in queries:
        a, b = off["times"][name], on["times"][name]
        print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f}x |")
    print(f"| Parquet bytes | {off['bytes']:,} | {on['bytes']:,} | {off['bytes'] / on['bytes']:.3f}x |")
    print(f"| persist seconds | {off['persist_s']:.2f} | {on['persist_s']:.2f} | "
          f"{off['persist_s'] / on['persist_s']:.2f}x |")


if __name__ == "__main__":
    main()
