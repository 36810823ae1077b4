#!/usr/bin/env python3
"""A query after each write: what a dashboard over live data costs (BENCHMARKS.md, issue 25).

`load` writes 1M rows (100 hosts with TSBS's tags, 10 s apart) to database `w`; `run` then,
40 times, writes one point per host and times single-groupby-1-1-12 on that database with
`Cache-Control: no-cache`, and prints the median and the slowest of the last 35 in ms, then
the median of the same query run 15 times with no write between. Start the server with
automatic persistence off (`QUIVER_PERSIST_BUFFER_BYTES` and `QUIVER_PERSIST_MAX_AGE_SECS`
large) to keep the rows in the write buffer.

Usage: scripts/query-after-writes.py URL load|run
"""
import statistics
import sys
import time

import requests

TAGS = ("region=us-west-1,datacenter=us-west-1a,rack=4,os=Ubuntu16.10,arch=x86,team=SF,"
        "service=6,service_version=0,service_environment=test")
QUERY = ("SELECT date_bin(INTERVAL '1 minute', time) AS minute, max(usage_user) AS u FROM cpu "
         "WHERE hostname = 'host_50' AND time >= '2023-11-14T22:13:20Z' "
         "AND time < '2023-11-15T10:13:20Z' GROUP BY minute ORDER BY minute")


def lines(start_s: int, points_per_host: int, hosts: int = 100) -> str:
    """Line protocol: `points_per_host` points of each host, 10 s apart from `start_s`."""
    out = []
    for h in range(hosts):
        for i in range(points_per_host):
            t = (start_s + i * 10) * 10**9
            out.append(f"cpu,hostname=host_{h},{TAGS} "
                       f"usage_user={(h * 7 + i) % 100},usage_system={(h + i) % 50} {t}")
    return "\n".join(out)


def main() -> None:
    url, mode = sys.argv[1], sys.argv[2]
    session = requests.Session()
    write = f"{url}/api/v3/write_lp"
    params = {"db": "w", "precision": "ns"}
    if mode == "load":
        for chunk in range(10):
            body = lines(1_700_000_000 + chunk * 10_000, 1000)
            session.post(write, params=params, data=body).raise_for_status()
        return
    def query() -> float:
        start = time.perf_counter()
        response = session.get(f"{url}/api/v3/query_sql",
                               params={"db": "w", "q": QUERY, "format": "json"},
                               headers={"Cache-Control": "no-cache"})
        elapsed = (time.perf_counter() - start) * 1000
        response.raise_for_status()
        assert len(response.json()) == 721, response.text[:200]
        return elapsed

    after_writes = []
    for step in range(40):
        session.post(write, params=params,
                     data=lines(1_700_200_000 + step * 10, 1)).raise_for_status()
        after_writes.append(query())
    between = [query() for _ in range(20)]
    print(f"query after each write: median {statistics.median(after_writes[5:]):.2f} ms, "
          f"slowest {max(after_writes[5:]):.2f} ms; the same query without writes between: "
          f"median {statistics.median(between[5:]):.2f} ms")


if __name__ == "__main__":
    main()
