#!/usr/bin/env python3
"""Query nodes over object storage (issue 43), in one run against moto's S3 server on loopback
with a proxy adding a fixed delay to every request between the query nodes and the store:

1. A repeated cold query (the result cache off, so every run executes) on a query node with
   the chunk cache on and on one with it off (`chunk_cache_bytes = 0`): median of RUNS after
   one warm-up, and the store requests per run.
2. The first query after a new persist: the bytes the node fetched from the store while
   answering it, against the new file's size and the table's.
3. How soon a persist is visible on a query node (10 persists).
4. A dashboard mix (the result cache off) from CLIENTS threads for SECONDS against one query
   node, then round-robin against two: queries per second, and the nodes' CPU seconds per
   query (what more cores or machines would divide).

    .venv/bin/python scripts/object-store-bench.py [--rows 2000000] [--files 8]
        [--delay-ms 10] [--runs 7] [--clients 4] [--seconds 20]

Uses the release binary ($CARGO_TARGET_DIR/release/quiver) and the test virtualenv's
moto_server; prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

from benchlib import FLEET_HOSTS as HOSTS, FLEET_START_NS as START_NS, RELEASE as RELEASE_DIR
from benchlib import TEST_HELPERS, cpu_seconds, load_fleet

sys.path.insert(0, str(TEST_HELPERS))
from object_store_lib import MotoServer, Proxy, quiver_environment  # noqa: E402
from quiver_testlib import free_ports  # noqa: E402

RELEASE = RELEASE_DIR / "quiver"
DB = "bench"
MIX = [
    "SELECT host, avg(usage) AS mean, max(usage) AS peak FROM cpu GROUP BY host",
    "SELECT date_bin(INTERVAL '1 hour', time) AS hour, avg(usage) AS mean FROM cpu "
    "GROUP BY 1 ORDER BY 1",
    "SELECT time, usage FROM cpu WHERE host = 'h042' ORDER BY time DESC LIMIT 100",
    "SELECT region, count(*) AS n, sum(usage) AS total FROM cpu GROUP BY region",
]


class Node:
    def __init__(self, data_dir: Path, url: str, endpoint: str, *, role: str = "all",
                 **settings: str):
        http, flight, pg = free_ports(3)
        self.url = f"http://127.0.0.1:{http}"
        env = dict(os.environ, **quiver_environment(endpoint),
                   QUIVER_CACHE_ENABLED="false", QUIVER_LOG_FILTER="warn",
                   QUIVER_PERSIST_BUFFER_BYTES=str(8 << 30),
                   QUIVER_MAX_BUFFER_BYTES=str(16 << 30),
                   QUIVER_PERSIST_MAX_AGE_SECS="86400",
                   **{f"QUIVER_{k.upper()}": v for k, v in settings.items()})
        self.proc = subprocess.Popen(
            [str(RELEASE), "serve", "--data-dir", str(data_dir), "--object-store-url", url,
             "--role", role, "--http-addr", f"127.0.0.1:{http}",
             "--flight-addr", f"127.0.0.1:{flight}", "--pg-addr", f"127.0.0.1:{pg}"], env=env)
        for _ in range(300):
            try:
                if requests.get(f"{self.url}/health", timeout=1).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{role} node did not start")

    def query(self, sql: str) -> list:
        r = requests.get(f"{self.url}/api/v3/query_sql", params={"db": DB, "q": sql},
                         timeout=600)
        r.raise_for_status()
        return r.json()

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.proc.pid)

    def catalog_version(self) -> int:
        return requests.get(f"{self.url}/health", timeout=5).json()["catalog_version"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def timed(node: Node, proxy: Proxy, sql: str, runs: int) -> tuple[float, float]:
    """Median ms of `runs` runs after a warm-up, and store requests per run."""
    node.query(sql)
    samples, before = [], proxy.requests
    for _ in range(runs):
        started = time.perf_counter()
        node.query(sql)
        samples.append((time.perf_counter() - started) * 1e3)
    return statistics.median(samples), (proxy.requests - before) / runs


def throughput(nodes: list[Node], clients: int, seconds: float) -> tuple[float, float]:
    """Queries per second of the mix, and CPU seconds per query summed over `nodes`."""
    done = [0] * clients
    deadline = time.monotonic() + seconds
    cpu_before = sum(n.cpu_seconds() for n in nodes)

    def client(k: int) -> None:
        for i in itertools.count(k):
            if time.monotonic() >= deadline:
                return
            nodes[i % len(nodes)].query(MIX[i % len(MIX)])
            done[k] += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    total = sum(done)
    cpu = sum(n.cpu_seconds() for n in nodes) - cpu_before
    return total / elapsed, cpu / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        moto = MotoServer(tmp_path / "moto.log")
        proxy = Proxy(moto.port)
        nodes: list[Node] = []
        try:
            moto.create_bucket("bench")
            url = "s3://bench/quiver"
            writer = Node(tmp_path / "writer", url, moto.endpoint)
            nodes.append(writer)
            load_fleet(writer.url, DB, args.rows, args.files)
            cached = Node(tmp_path / "q1", url, proxy.endpoint, role="query")
            uncached = Node(tmp_path / "q2", url, proxy.endpoint, role="query",
                            chunk_cache_bytes="0")
            nodes += [cached, uncached]
            proxy.delay_s = args.delay_ms / 1e3
            print(f"{args.rows} rows in {args.files} files; {args.delay_ms} ms added per store "
                  f"request\n")
            print("| query | chunk cache on: ms (requests/run) | off: ms (requests/run) | off / on |")
            print("|---|---|---|---|")
            for sql in MIX:
                on, on_requests = timed(cached, proxy, sql, args.runs)
                off, off_requests = timed(uncached, proxy, sql, args.runs)
                print(f"| `{sql[:60]}…` | {on:.1f} ({on_requests:.1f}) | {off:.1f} "
                      f"({off_requests:.1f}) | {off / on:.1f}x |")

            # the first query after a persist
            cached.query(MIX[0])
            version = cached.catalog_version()
            lines = "\n".join(f"cpu,host=h{h:03d},region=r{h % 5} usage=1 "
                              f"{START_NS + 10**18 + h}" for h in range(HOSTS))
            requests.post(f"{writer.url}/api/v3/write_lp", params={"db": DB},
                          data=lines, timeout=60).raise_for_status()
            persisted = requests.post(f"{writer.url}/api/v3/persist", timeout=60).json()
            while cached.catalog_version() == version:
                time.sleep(0.05)
            before = proxy.bytes_from_store
            cached.query(MIX[0])
            fetched = proxy.bytes_from_store - before
            stats = requests.get(f"{writer.url}/api/v3/storage", timeout=60).json()
            table_bytes = sum(t["bytes"] for t in stats["compaction"]["tables"]
                              if t["db"] == DB)
            print(f"\nfirst query after a persist: fetched {fetched} bytes from the store; the "
                  f"new file has {persisted['parquet_bytes']} bytes, the table {table_bytes}")

            # how soon a persist is visible on a query node (10 persists, no added delay)
            proxy.delay_s = 0.0
            lags = []
            for k in range(10):
                version = cached.catalog_version()
                requests.post(f"{writer.url}/api/v3/write_lp", params={"db": DB},
                              data=f"cpu,host=h000,region=r0 usage={k} {START_NS + 2 * 10**18 + k}",
                              timeout=60).raise_for_status()
                requests.post(f"{writer.url}/api/v3/persist", timeout=60).raise_for_status()
                persisted_at = time.perf_counter()
                while cached.catalog_version() == version:
                    time.sleep(0.005)
                lags.append((time.perf_counter() - persisted_at) * 1e3)
            print(f"\npersist to visible on a query node: median {statistics.median(lags):.0f} ms, "
                  f"max {max(lags):.0f} ms (10 persists; the node lists the catalog every 250 ms)")

            second = Node(tmp_path / "q3", url, proxy.endpoint, role="query")
            nodes.append(second)
            for sql in MIX:
                second.query(sql)
            one_qps, one_cpu = throughput([cached], args.clients, args.seconds)
            two_qps, two_cpu = throughput([cached, second], args.clients, args.seconds)
            print(f"\ndashboard mix, {args.clients} clients, {args.seconds:.0f} s each (no "
                  "added delay):")
            print("| query nodes | queries/s | CPU ms per query |")
            print("|---|---|---|")
            print(f"| 1 | {one_qps:.1f} | {one_cpu * 1e3:.1f} |")
            print(f"| 2 | {two_qps:.1f} | {two_cpu * 1e3:.1f} |")
            print(f"two / one: {two_qps / one_qps:.2f}x")
        finally:
            for node in nodes:
                node.stop()
            proxy.stop()
            moto.stop()


if __name__ == "__main__":
    main()
