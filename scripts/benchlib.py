"""What the server benchmarks share: the release binaries, a server started on a data directory
with settings as QUIVER_* variables (result cache off, automatic persistence effectively off),
and timed queries over HTTP JSON (median of N runs after one warm-up)."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
# Release binaries: $CARGO_TARGET_DIR/release, else target/release.
RELEASE = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"
ADDR = "127.0.0.1:18089"
URL = f"http://{ADDR}"
TIMEOUT_S = 600


def query(db: str, sql: str) -> list[dict]:
    r = requests.get(f"{URL}/api/v3/query_sql", params={"db": db, "q": sql, "format": "json"},
                     timeout=TIMEOUT_S)
    r.raise_for_status()
    return r.json()


def write(db: str, body: str, session: requests.Session | None = None) -> None:
    """Writes line protocol (nanosecond times), which must be accepted whole."""
    r = (session or requests).post(f"{URL}/api/v3/write_lp", params={"db": db, "precision": "ns"},
                                   data=body.encode(), timeout=TIMEOUT_S)
    assert r.status_code == 204, r.text


def persist() -> dict:
    """Persists the write buffer now; returns what the server says it wrote."""
    r = requests.post(f"{URL}/api/v3/persist", timeout=TIMEOUT_S)
    r.raise_for_status()
    return r.json()


def storage() -> dict:
    """The server's storage counters (WAL, persistence, compaction, chunk cache)."""
    r = requests.get(f"{URL}/api/v3/storage", timeout=TIMEOUT_S)
    r.raise_for_status()
    return r.json()


def timed_all(db: str, queries: dict[str, str], runs: int) -> dict[str, float]:
    """Each query's median milliseconds (see `timed`)."""
    return {name: timed(db, sql, runs) for name, sql in queries.items()}


def timed(db: str, sql: str, runs: int) -> float:
    """Median milliseconds of `runs` runs after one warm-up run."""
    query(db, sql)
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        query(db, sql)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e3


def alternately(binaries: list[str], rounds: int, measure) -> dict[str, list]:
    """`measure(binary)` for each binary in each of `rounds` rounds, the order reversed every
    other round (so neither build always runs first on a warming machine); the results per
    binary, in round order."""
    results: dict[str, list] = {b: [] for b in binaries}
    for round_no in range(rounds):
        for binary in binaries if round_no % 2 == 0 else binaries[::-1]:
            results[binary].append(measure(binary))
            print(f"round {round_no + 1} {binary}: {results[binary][-1]}", flush=True)
    return results


def start(data_dir: str, binary: str | Path | None = None, **settings: str) -> subprocess.Popen:
    """A release server (or `binary`) on `data_dir` (result cache off, persisting only when
    asked), with `settings` as QUIVER_* variables."""
    env = dict(os.environ,
               QUIVER_PERSIST_BUFFER_BYTES=str(8 << 30),
               QUIVER_MAX_BUFFER_BYTES=str(16 << 30),
               QUIVER_PERSIST_MAX_AGE_SECS=str(86_400),
               QUIVER_CACHE_ENABLED="false",
               QUIVER_LOG_FILTER="warn",
               **{f"QUIVER_{k.upper()}": v for k, v in settings.items()})
    server = subprocess.Popen(
        [binary or RELEASE / "quiver", "serve", "--data-dir", data_dir, "--http-addr", ADDR],
        env=env)
    for _ in range(100):
        try:
            if requests.get(f"{URL}/health", timeout=1).ok:
                return server
        except requests.ConnectionError:
            time.sleep(0.1)
    stop(server)
    raise RuntimeError(f"the server did not start on {ADDR} (exit code {server.returncode}; "
                       "its errors are above)")


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    server.wait()


def timed_on(data_dir: str, db: str, queries: dict[str, str], runs: int,
             **settings: str) -> dict:
    """Each query's median time on a server started on `data_dir` with `settings`."""
    server = start(data_dir, **settings)
    try:
        return timed_all(db, queries, runs)
    finally:
        stop(server)
