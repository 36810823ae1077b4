#!/usr/bin/env python3
"""Protocol benchmark (BENCHMARKS.md): end-to-end time to get a query's result into a
pyarrow Table over Arrow Flight SQL (ADBC), HTTP with format=arrow, HTTP with format=json and
the PostgreSQL wire protocol (psycopg 3, binary results), for 10,000- and 50,000-row results
with all 21 columns of a TSBS-like metrics table.

Starts a release server on a temporary directory, loads 200 hosts x 1,000 rounds (200,000
rows; 10 dictionary-encoded tags, 10 float fields) through POST /api/v3/write_arrow, then
measures each path's median over N runs, both as result-cache misses (HTTP:
Cache-Control: no-cache; Flight SQL and PostgreSQL: a fresh user, i.e. a fresh cache scope,
per run) and as hits (the same request repeated).

Build first: cargo build --release -p quiver-server
Usage: .venv/bin/python scripts/protocol-bench.py [--runs 11]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pyarrow as pa
import requests

ROOT = Path(__file__).resolve().parents[1]
# Release binaries: $CARGO_TARGET_DIR/release, else target/release.
RELEASE = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"
HTTP = "127.0.0.1:18090"
FLIGHT = "127.0.0.1:18091"
PG_PORT = 18092
URL = f"http://{HTTP}"
DB = "protobench"
HOSTS, ROUNDS = 200, 1000
START_S = 1_700_000_000


def metrics_table() -> pa.Table:
    n = HOSTS * ROUNDS
    host = [i % HOSTS for i in range(n)]
    columns: dict[str, pa.Array] = {
        "time": pa.array([(START_S + (i // HOSTS) * 10) * 1_000_000_000 for i in range(n)],
                         pa.timestamp("ns", tz="UTC")),
    }
    for t, (name, values) in enumerate([
        ("hostname", [f"host_{h}" for h in range(HOSTS)]),
        ("region", ["us-east-1", "us-west-2", "eu-west-1", "ap-southeast-2"]),
        ("datacenter", ["a", "b", "c"]), ("rack", [str(r) for r in range(100)]),
        ("os", ["Ubuntu16.10", "Ubuntu18.04LTS", "Debian12"]), ("arch", ["x64", "x86"]),
        ("team", ["SF", "NYC", "LON", "CHI"]), ("service", [str(s) for s in range(20)]),
        ("service_version", ["0", "1"]),
        ("service_environment", ["production", "staging", "test"]),
    ]):
        indices = pa.array([h % len(values) for h in host], pa.int32())
        columns[name] = pa.DictionaryArray.from_arrays(indices, pa.array(values))
    for f, name in enumerate(["usage_user", "usage_system", "usage_idle", "usage_nice",
                              "usage_iowait", "usage_irq", "usage_softirq", "usage_steal",
                              "usage_guest", "usage_guest_nice"]):
        columns[name] = pa.array([((i * 7919 + f * 104729) % 10_000) / 100 for i in range(n)],
                                 pa.float64())
    return pa.table(columns)


def load() -> None:
    table = metrics_table()
    for batch in table.to_batches(max_chunksize=50_000):
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        r = requests.post(f"{URL}/api/v3/write_arrow", params={"db": DB, "table": "cpu"},
                          data=sink.getvalue(),
                          headers={"Content-Type": "application/vnd.apache.arrow.stream"})
        assert r.status_code == 204, r.text


def window(rows: int) -> str:
    rounds = rows // HOSTS
    return (f"SELECT * FROM cpu WHERE time >= to_timestamp_seconds({START_S}) "
            f"AND time < to_timestamp_seconds({START_S + rounds * 10})")


def http_arrow(sql: str, headers: dict[str, str]) -> pa.Table:
    r = requests.get(f"{URL}/api/v3/query_sql",
                     params={"db": DB, "q": sql, "format": "arrow"}, headers=headers)
    r.raise_for_status()
    return pa.ipc.open_stream(r.content).read_all()


def http_json(sql: str, headers: dict[str, str]) -> pa.Table:
    r = requests.get(f"{URL}/api/v3/query_sql",
                     params={"db": DB, "q": sql, "format": "json"}, headers=headers)
    r.raise_for_status()
    return pa.Table.from_pylist(r.json())


def connect(user: str) -> flight_sql.Connection:
    return flight_sql.connect(f"grpc://{FLIGHT}", autocommit=True, db_kwargs={
        "username": user, "password": "x",
        "adbc.flight.sql.rpc.call_header.database": DB})


def flight(conn: flight_sql.Connection, sql: str) -> pa.Table:
    with conn.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetch_arrow_table()


def pg_connect(user: str) -> psycopg.Connection:
    return psycopg.connect(host="127.0.0.1", port=PG_PORT, user=user, dbname=DB,
                           autocommit=True)


def postgres(conn: psycopg.Connection, sql: str) -> pa.Table:
    with conn.cursor(binary=True) as cursor:
        cursor.execute(sql)
        names = [column.name for column in cursor.description]
        rows = cursor.fetchall()
    return pa.table(dict(zip(names, map(list, zip(*rows)))))


def median_ms(run: Callable[[int], pa.Table], runs: int, rows: int) -> float:
    samples = []
    for i in range(runs):
        started = time.perf_counter()
        table = run(i)
        samples.append(time.perf_counter() - started)
        assert table.num_rows == rows, (table.num_rows, rows)
    return statistics.median(samples) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, QUIVER_LOG_FILTER="warn")
        server = subprocess.Popen(
            [RELEASE / "quiver", "serve", "--data-dir", f"{tmp}/data",
             "--http-addr", HTTP, "--flight-addr", FLIGHT, "--pg-addr", f"127.0.0.1:{PG_PORT}"],
            env=env)
        try:
            for _ in range(100):
                try:
                    if requests.get(f"{URL}/health").ok:
                        break
                except requests.ConnectionError:
                    time.sleep(0.1)
            load()
            print("| rows | path | miss median (ms) | hit median (ms) |")
            print("|---:|---|---:|---:|")
            no_cache = {"Cache-Control": "no-cache"}
            for rows in (10_000, 50_000):
                sql = window(rows)
                fresh = [connect(f"miss-{rows}-{i}") for i in range(args.runs)]
                hit_conn = connect("hit")
                pg_fresh = [pg_connect(f"miss-{rows}-{i}") for i in range(args.runs)]
                pg_hit = pg_connect("hit")
                postgres(pg_hit, sql)
                flight(hit_conn, sql)
                http_arrow(sql, {})
                http_json(sql, {})
                results = {
                    "Flight SQL (ADBC)": (
                        median_ms(lambda i: flight(fresh[i], sql), args.runs, rows),
                        median_ms(lambda i: flight(hit_conn, sql), args.runs, rows)),
                    "HTTP format=arrow": (
                        median_ms(lambda i: http_arrow(sql, no_cache), args.runs, rows),
                        median_ms(lambda i: http_arrow(sql, {}), args.runs, rows)),
                    "HTTP format=json": (
                        median_ms(lambda i: http_json(sql, no_cache), args.runs, rows),
                        median_ms(lambda i: http_json(sql, {}), args.runs, rows)),
                    "PostgreSQL (psycopg, binary)": (
                        median_ms(lambda i: postgres(pg_fresh[i], sql), args.runs, rows),
                        median_ms(lambda i: postgres(pg_hit, sql), args.runs, rows)),
                }
                for conn in fresh + [hit_conn] + pg_fresh + [pg_hit]:
                    conn.close()
                for path, (miss, hit) in results.items():
                    print(f"| {rows} | {path} | {miss:.1f} | {hit:.1f} |")
                json_miss, json_hit = results["HTTP format=json"]
                flight_miss, flight_hit = results["Flight SQL (ADBC)"]
                print(f"| {rows} | JSON / Flight SQL | {json_miss / flight_miss:.1f}x | "
                      f"{json_hit / flight_hit:.1f}x |")
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
