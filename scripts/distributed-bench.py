#!/usr/bin/env python3
"""Distributed queries on Ballista (issue 44) against the same queries run on the writer alone,
in one run on this machine: moto's S3 server on loopback holds the data, the writer
(`distributed` per query), a Ballista scheduler and EXECUTORS executors, all the release
binary.

1. The fixed cost of a distributed query: a query that reads almost nothing, local vs on
   Ballista (median of RUNS, alternating).
2. Scans of ROWS rows (aggregates by host, by hour, by region; a top-k), the result cache
   off, alternating: on the writer as a user gets it (its chunk cache holds the files
   decoded), on a query node with the chunk cache off (`chunk_cache_bytes = 0`: it reads the
   Parquet files from the store every time, as the executors do: the baseline that isolates
   what Ballista adds), and on Ballista.
3. Per query on Ballista: its stages and their tasks' times as the executors logged them
   ("Finished task ... in X ms"), and the executors' CPU time, from which a larger cluster's
   time is projected (a paper projection: the fixed cost of 1 plus the executors' CPU time
   divided among the cluster's cores; the scan stage, nearly all of it, splits by file).

    .venv/bin/python scripts/distributed-bench.py [--rows 10000000] [--files 10]
        [--executors 1] [--runs 5] [--partitions 0]

Uses $CARGO_TARGET_DIR/release/quiver and the test virtualenv's moto_server; prints Markdown
for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from benchlib import FLEET_HOSTS as HOSTS, RELEASE as RELEASE_DIR, TEST_HELPERS, cpu_seconds
from benchlib import load_fleet

sys.path.insert(0, str(TEST_HELPERS))
from object_store_lib import MotoServer, quiver_environment  # noqa: E402
from quiver_testlib import free_ports, listening, port_pair  # noqa: E402

RELEASE = RELEASE_DIR / "quiver"
DB = "bench"

TINY = "SELECT count(*) AS n FROM cpu WHERE host = 'h001' AND time < '2024-03-01T00:00:10Z'"
SCANS = [
    "SELECT host, avg(usage) AS mean, max(usage) AS peak FROM cpu GROUP BY host ORDER BY host",
    "SELECT date_bin(INTERVAL '1 hour', time) AS hour, avg(usage) AS mean FROM cpu "
    "GROUP BY 1 ORDER BY 1",
    "SELECT region, count(*) AS n, sum(usage) AS total FROM cpu GROUP BY region ORDER BY region",
    "SELECT host, time, usage FROM cpu ORDER BY usage DESC, time LIMIT 10",
]
TASK = re.compile(r"Finished task : \[TID (\S+?)/(\d+)\.\d+/\d+\.\d+\] in ([\d.]+)(µs|ms|s)")
UNIT_MS = {"µs": 1e-3, "ms": 1.0, "s": 1e3}


def wait_listening(port: int, what: str) -> None:
    for _ in range(600):
        if listening(port):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not start")


def serve(tmp: Path, name: str, url: str, env: dict[str, str], *flags: str) -> subprocess.Popen:
    (tmp / name).mkdir()
    log = open(tmp / f"{name}.log", "wb")
    return subprocess.Popen([str(RELEASE), "serve", "--data-dir", str(tmp / name),
                             "--object-store-url", url, *flags], env=env, stdout=log,
                            stderr=subprocess.STDOUT)


def query(http: str, sql: str, distributed: str) -> float:
    """Milliseconds to answer `sql` (the answer read whole)."""
    started = time.perf_counter()
    r = requests.get(f"{http}/api/v3/query_sql", timeout=1200,
                     params={"db": DB, "q": sql, "distributed": distributed})
    r.raise_for_status()
    return (time.perf_counter() - started) * 1e3


def stage_times(logs: list[Path], offsets: list[int]) -> dict[int, list[float]]:
    """Task times (ms) per stage of the one job the executors' logs gained past `offsets`."""
    stages: dict[int, list[float]] = collections.defaultdict(list)
    for log, offset in zip(logs, offsets):
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        for _job, stage, amount, unit in TASK.findall(text):
            stages[int(stage)].append(float(amount) * UNIT_MS[unit])
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--executors", type=int, default=1)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=0,
                        help="the writer's distributed_partitions (0: its default)")
    parser.add_argument("--explain", action="store_true",
                        help="print the distributed EXPLAIN of the first scan and stop")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        moto = MotoServer(tmp / "moto.log")
        procs: list[subprocess.Popen] = []
        try:
            moto.create_bucket("bench")
            url = "s3://bench/quiver"
            (scheduler_port,) = free_ports(1)
            scheduler = f"127.0.0.1:{scheduler_port}"
            env = dict(os.environ, **quiver_environment(moto.endpoint),
                       QUIVER_CACHE_ENABLED="false", QUIVER_LOG_FILTER="info",
                       QUIVER_SCHEDULER_ADDR=scheduler,
                       QUIVER_PERSIST_BUFFER_BYTES=str(8 << 30),
                       QUIVER_MAX_BUFFER_BYTES=str(16 << 30),
                       QUIVER_PERSIST_MAX_AGE_SECS="86400",
                       QUIVER_COMPACTION_ENABLED="false")
            http_port, flight_port, pg_port = free_ports(3)
            http = f"http://127.0.0.1:{http_port}"
            writer_env = dict(env, QUIVER_DISTRIBUTED_PARTITIONS=str(args.partitions))
            procs.append(serve(tmp, "writer", url, writer_env, "--http-addr", f"127.0.0.1:{http_port}",
                               "--flight-addr", f"127.0.0.1:{flight_port}",
                               "--pg-addr", f"127.0.0.1:{pg_port}"))
            wait_listening(http_port, "the writer")
            started = time.monotonic()
            load_fleet(http, DB, args.rows, args.files)
            print(f"{args.rows} rows ({HOSTS} hosts) in {args.files} Parquet files in moto, "
                  f"loaded in {time.monotonic() - started:.0f} s; {args.executors} executor(s), "
                  f"{os.cpu_count()} cores\n")
            node_http, node_flight, node_pg = free_ports(3)
            node_url = f"http://127.0.0.1:{node_http}"
            procs.append(serve(tmp, "node", url, dict(env, QUIVER_CHUNK_CACHE_BYTES="0"),
                               "--role", "query", "--http-addr", f"127.0.0.1:{node_http}",
                               "--flight-addr", f"127.0.0.1:{node_flight}",
                               "--pg-addr", f"127.0.0.1:{node_pg}"))
            wait_listening(node_http, "the query node")
            node = procs[-1]
            procs.append(serve(tmp, "scheduler", url, env, "--role", "scheduler"))
            wait_listening(scheduler_port, "the scheduler")
            logs, executors = [], []
            for e in range(args.executors):
                port = port_pair()
                procs.append(serve(tmp, f"executor{e}", url, env, "--role", "executor",
                                   "--executor-addr", f"127.0.0.1:{port}"))
                wait_listening(port, f"executor {e}")
                logs.append(tmp / f"executor{e}.log")
                executors.append(procs[-1])
            query(http, TINY, "on")  # executors registered and warm
            if args.explain:
                r = requests.get(f"{http}/api/v3/query_sql", timeout=600,
                                 params={"db": DB, "q": f"EXPLAIN {SCANS[0]}",
                                         "distributed": "on"})
                print("\n".join(row["plan"] for row in r.json()))
                return

            print("| query | writer ms | query node, chunk cache off, ms (CPU ms) | "
                  "Ballista ms (executor CPU ms) | Ballista / node | stage: task ms |")
            print("|---|---:|---:|---:|---:|---|")
            projections = []
            fixed = None
            for sql in [TINY, *SCANS]:
                query(http, sql, "off")
                query(node_url, sql, "off")
                local, uncached, distributed, stages = [], [], [], {}
                node_cpu = executor_cpu = 0.0
                for _ in range(args.runs):
                    local.append(query(http, sql, "off"))
                    before = cpu_seconds(node.pid)
                    uncached.append(query(node_url, sql, "off"))
                    node_cpu += cpu_seconds(node.pid) - before
                    offsets = [log.stat().st_size for log in logs]
                    before = sum(cpu_seconds(e.pid) for e in executors)
                    distributed.append(query(http, sql, "on"))
                    time.sleep(0.3)  # the executors' last lines
                    executor_cpu += sum(cpu_seconds(e.pid) for e in executors) - before
                    stages = stage_times(logs, offsets)
                l_ms, u_ms, d_ms = (statistics.median(local), statistics.median(uncached),
                                    statistics.median(distributed))
                n_cpu, e_cpu = node_cpu * 1e3 / args.runs, executor_cpu * 1e3 / args.runs
                if sql == TINY:
                    fixed = d_ms - u_ms
                described = "; ".join(f"{s}: {', '.join(f'{x:.0f}' for x in t)}"
                                      for s, t in sorted(stages.items()))
                print(f"| `{sql[:70]}` | {l_ms:.1f} | {u_ms:.1f} ({n_cpu:.0f}) | "
                      f"{d_ms:.1f} ({e_cpu:.0f}) | {d_ms / u_ms:.2f}x | {described} |")
                projections.append((sql, d_ms, e_cpu))

            print(f"\nfixed cost of a distributed query (the tiny query, Ballista - query "
                  f"node): {fixed:.1f} ms")
            print("\nPaper projection (not measured): the fixed cost plus the executors' CPU "
                  "time spread over the cluster's cores")
            print("\n| query | measured on Ballista ms (executor CPU ms) | 4 executors x 8 "
                  "cores | 16 executors x 8 cores |")
            print("|---|---:|---:|---:|")
            for sql, d_ms, e_cpu in projections[1:]:
                print(f"| `{sql[:70]}` | {d_ms:.0f} ({e_cpu:.0f}) | {fixed + e_cpu / 32:.0f} | "
                      f"{fixed + e_cpu / 128:.0f} |")
        finally:
            for proc in reversed(procs):
                proc.terminate()
                proc.wait()
            moto.stop()


if __name__ == "__main__":
    main()
