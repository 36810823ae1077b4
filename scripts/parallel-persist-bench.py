#!/usr/bin/env python3
"""Parallel persistence benchmark (BENCHMARKS.md): one persist of several tables' buffered
rows with `persist_threads = 1` (tables one after another) vs the default (one thread per
core), in one run on the same rows.

For each setting, a release server (result cache off, persisting only on request) receives
`--tables` tables of `--rows` rows each (100 hosts, 5 fields, line protocol, spread over
`--days` day partitions: a backfill when more than one); then
POST /api/v3/persist is timed (`elapsed_ms` of its answer), `--repeats` times on fresh
servers, and the median is reported.

Build first: cargo build --release -p quiver-server
Usage: .venv/bin/python scripts/parallel-persist-bench.py [--tables 4] [--rows 250000] [--days 1]
    [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import requests

from benchlib import persist, start, stop, write


def load(tables: int, rows: int, days: int) -> None:
    session = requests.Session()
    step = days * 86_400 * 10**9 // rows
    for table in range(tables):
        for first in range(0, rows, 50_000):
            body = "".join(
                f"t{table},host=h{i % 100} a={i}.5,b={i % 7}i,c={i * 3}.25,d={i % 13},e={i}i "
                f"{1_795_478_400 * 10**9 + i * step}\n"
                for i in range(first, min(first + 50_000, rows)))
            write("p", body, session)


def persist_ms(threads: str, tables: int, rows: int, days: int) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        server = start(f"{tmp}/data", persist_threads=threads)
        try:
            load(tables, rows, days)
            answer = persist()
            return answer["elapsed_ms"], answer
        finally:
            stop(server)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--days", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    medians = {}
    for threads in ["1", "0"]:
        runs = [persist_ms(threads, args.tables, args.rows, args.days)
                for _ in range(args.repeats)]
        medians[threads] = statistics.median(ms for ms, _ in runs)
        answer = runs[-1][1]
        print(f"persist_threads={threads}: {[round(ms) for ms, _ in runs]} ms; "
              f"{answer['tables']} tables, {answer['files']} files, {answer['rows']} rows")
    rows = args.tables * args.rows
    for threads, ms in medians.items():
        print(f"| {threads} | {ms:.0f} | {rows / ms / 1e3:.2f} |")
    print(f"one thread / default: {medians['1'] / medians['0']:.2f}x")


if __name__ == "__main__":
    main()
