#!/usr/bin/env python3
"""Median latency of SQL statements over Quiver's HTTP API (BENCHMARKS.md, A/B runs).

Reads one statement per line on stdin; for each, sends it 17 times on one keep-alive
connection (`GET /api/v3/query_sql`, `format=json`), drops the first two and prints the
median of the other 15 in ms, the rows answered and the statement. The Python client adds
about 0.4 ms to every figure: compare builds with it, not with other clients.

Usage: scripts/query-latency.py [URL=http://127.0.0.1:18286] [DB=tsbs] < statements.sql
"""
import statistics
import sys
import time

import requests


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:18286"
    db = sys.argv[2] if len(sys.argv) > 2 else "tsbs"
    session = requests.Session()
    for sql in filter(None, (line.strip() for line in sys.stdin)):
        times = []
        for _ in range(17):
            start = time.perf_counter()
            response = session.get(f"{url}/api/v3/query_sql",
                                   params={"db": db, "q": sql, "format": "json"})
            times.append((time.perf_counter() - start) * 1000)
            response.raise_for_status()
        print(f"{statistics.median(times[2:]):.2f} ms {len(response.json())} rows  {sql}")


if __name__ == "__main__":
    main()
