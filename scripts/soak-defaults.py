#!/usr/bin/env python3
"""Runs Quiver exactly as the README's first command does, with nothing but its defaults, and
keeps it running past the point where each default matters; checks every protocol's answers
at each step. Takes about 12 minutes (the persist age is 600 s). Not part of the test suite
(too long for CI): run it by hand after changes to storage, start-up or configuration.

    .venv/bin/python scripts/soak-defaults.py [--binary target/release/quiver]

Without --binary it runs the README's command verbatim (`cargo run --release -p
quiver-server -- serve`). The server runs in a fresh temporary working directory, so its data
lands in the default relative `./quiver-data`, on the default ports (8086, 8815, 5433).

Steps, each followed by `count(*)` and a checksum over HTTP, PostgreSQL and Flight SQL:
1. write about 80 MiB of WAL: the log rolls over its 64 MiB segment (`wal_segment_bytes`);
2. keep writing until the buffer passes `persist_buffer_bytes` (256 MiB) and the server
   persists by itself; reads now span Parquet and the buffer;
3. write a little and wait for `persist_max_age_secs` (600 s) to persist it, querying every
   minute meanwhile;
4. stop with SIGTERM and start again: everything is read back from Parquet and the WAL, and
   the segments the catalog covers are gone;
5. the result cache answers a repeat (HIT) and never a stale answer after a write.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

import adbc_driver_flightsql.dbapi as flight_sql  # noqa: E402
import psycopg  # noqa: E402
import requests  # noqa: E402

HTTP = "http://127.0.0.1:8086"
FLIGHT = "grpc://127.0.0.1:8815"
PG_PORT = 5433
DB = "soak"
ROWS_PER_REQUEST = 10_000
FIELDS = 10
# Bounds of each write loop: the default that step waits for must act well before them
# (64 MiB of WAL is about 0.5 M rows of this shape, 256 MiB of buffer about 2 M rows).
MAX_ROWS_FOR_ROLLOVER = 2_000_000
MAX_ROWS_FOR_SIZE_PERSIST = 8_000_000


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class Server:
    def __init__(self, command: list[str], cwd: Path) -> None:
        self.command, self.cwd = command, cwd
        self.log_path = cwd / "quiver.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.command, cwd=self.cwd, env=env,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        deadline = time.monotonic() + 1800  # the first `cargo run --release` builds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"the server exited with {self.proc.returncode}; see {self.log_path}")
            try:
                if requests.get(f"{HTTP}/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        sys.exit("the server did not become healthy")

    def stop(self) -> None:
        assert self.proc is not None
        # `cargo run` execs the binary on Unix: the process is the server either way
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=120)
        if code != 0:
            sys.exit(f"the server stopped with exit code {code}; see {self.log_path}")


def lines(start: int, count: int, base_ns: int) -> str:
    out = []
    for i in range(start, start + count):
        fields = ",".join(f"f{k}={(i * 7 + k) % 1000 / 10}" for k in range(FIELDS))
        out.append(f"cpu,host=h{i % 100},region=r{i % 5} {fields},seq={i}i {base_ns + i * 1000}")
    return "\n".join(out) + "\n"


def write(start: int, count: int, base_ns: int) -> None:
    response = requests.post(f"{HTTP}/api/v3/write_lp", params={"db": DB, "precision": "ns"},
                             data=lines(start, count, base_ns), timeout=300)
    if response.status_code != 204:
        sys.exit(f"write failed: {response.status_code} {response.text[:500]}")


def storage() -> dict:
    return requests.get(f"{HTTP}/api/v3/storage", timeout=30).json()


def check(expected_rows: int, probe: int) -> None:
    """count(*) and sum(seq) over all three protocols, each a cache miss (distinct probe)."""
    want = (expected_rows, expected_rows * (expected_rows - 1) // 2)

    def q(offset: int) -> str:
        return f"SELECT count(*) AS n, sum(seq) AS s, {probe * 3 + offset} AS p FROM cpu"

    response = requests.get(f"{HTTP}/api/v3/query_sql", params={"db": DB, "q": q(0)},
                            timeout=300)
    if response.status_code != 200:
        sys.exit(f"HTTP query failed: {response.status_code} {response.text[:500]}")
    row = response.json()[0]
    got = {"http": (row["n"], row["s"])}
    with psycopg.connect(host="127.0.0.1", port=PG_PORT, user="soak", dbname=DB,
                         autocommit=True) as conn:
        n, s, _ = conn.execute(q(1)).fetchone()
        got["postgres"] = (n, int(s))
    with flight_sql.connect(FLIGHT, db_kwargs={
            "adbc.flight.sql.rpc.call_header.database": DB}, autocommit=True) as conn:
        with conn.cursor() as cursor:
            cursor.execute(q(2))
            n, s, _ = cursor.fetchone()
            got["flight"] = (n, s)
    for protocol, value in got.items():
        if value != want:
            sys.exit(f"{protocol} answered {value}, expected {want}")
    log(f"  {expected_rows} rows, the same over HTTP, PostgreSQL and Flight SQL")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", help="run this quiver binary instead of cargo run")
    args = parser.parse_args()
    command = ([str(Path(args.binary).resolve()), "serve"] if args.binary else
               ["cargo", "run", "--release", "--manifest-path", str(REPO / "Cargo.toml"),
                "-p", "quiver-server", "--", "serve"])
    cwd = Path(tempfile.mkdtemp(prefix="quiver-soak-"))
    data = cwd / "quiver-data"
    log(f"working directory {cwd}; command: {' '.join(command)}")
    server = Server(command, cwd)
    server.start()
    base_ns = time.time_ns() - 3_600_000_000_000  # an hour ago: one daily partition
    rows = 0

    log("1. WAL segment rollover at the default 64 MiB")
    while len(list((data / "wal").glob("*"))) < 2:
        if rows >= MAX_ROWS_FOR_ROLLOVER:
            sys.exit(f"no second WAL segment after {rows} rows (wal_segment_bytes is 64 MiB)")
        write(rows, ROWS_PER_REQUEST, base_ns)
        rows += ROWS_PER_REQUEST
    log(f"  {len(list((data / 'wal').glob('*')))} WAL segments after {rows} rows; "
        f"WAL bytes {storage()['wal']['bytes']}")
    check(rows, 1)

    log("2. the buffer passes persist_buffer_bytes (256 MiB) and persists by itself")
    while storage()["persistence"]["persists"] == 0:
        if rows >= MAX_ROWS_FOR_SIZE_PERSIST:
            sys.exit(f"no persist after {rows} rows (persist_buffer_bytes is 256 MiB)")
        write(rows, ROWS_PER_REQUEST, base_ns)
        rows += ROWS_PER_REQUEST
    stats = storage()["persistence"]
    log(f"  persisted after {rows} rows: {stats}")
    check(rows, 2)

    log("3. persist_max_age_secs (600 s) persists a small write by itself")
    write(rows, 1000, base_ns)
    rows += 1000
    written = time.monotonic()
    persists = storage()["persistence"]["persists"]
    minute = 0
    while storage()["persistence"]["persists"] == persists:
        if time.monotonic() - written > 700:
            sys.exit("no persist 700 s after the last write (persist_max_age_secs is 600)")
        time.sleep(5)
        if time.monotonic() - written > 60 * (minute + 1):
            minute += 1
            check(rows, 10 + minute)
    log(f"  persisted {time.monotonic() - written:.0f} s after the write; "
        f"buffered bytes now {storage()['persistence']['buffered_bytes']}")
    check(rows, 30)

    log("4. restart: everything read back, covered WAL segments gone")
    server.stop()
    server.start()
    check(rows, 40)
    segments = sorted(p.name for p in (data / "wal").glob("*"))
    files = sorted(str(p.relative_to(data)) for p in data.rglob("*.parquet"))
    log(f"  WAL segments now {segments}; Parquet files {files}")

    log("5. the result cache: a repeat is a hit, a write is never answered stale")
    q = {"db": DB, "q": "SELECT count(*) AS n FROM cpu"}
    first = requests.get(f"{HTTP}/api/v3/query_sql", params=q, timeout=60)
    again = requests.get(f"{HTTP}/api/v3/query_sql", params=q, timeout=60)
    assert again.headers["X-Quiver-Cache"] == "HIT", again.headers
    write(rows, 1, base_ns)
    rows += 1
    after = requests.get(f"{HTTP}/api/v3/query_sql", params=q, timeout=60)
    assert after.headers["X-Quiver-Cache"] == "MISS", after.headers
    assert after.json()[0]["n"] == rows == first.json()[0]["n"] + 1
    server.stop()
    log(f"passed: {rows} rows, data in {data} (remove {cwd} when done)")


if __name__ == "__main__":
    main()
