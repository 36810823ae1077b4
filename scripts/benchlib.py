"""What the server benchmarks share: the release binaries, a server started on a data directory
with settings as QUIVER_* variables (result cache off, automatic persistence effectively off),
timed queries over HTTP JSON (median of N runs after one warm-up), the fleet data set of the
object-storage benchmarks, and a process's CPU time."""

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
# The Python test helpers (moto, free ports), which some benchmarks use too.
TEST_HELPERS = ROOT / "tests" / "python"
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


def start(data_dir: str, binary: str | Path | None = None, port: int | None = None,
          persist_held_off: bool = True, **settings: str) -> subprocess.Popen:
    """A release server (or `binary`) on `data_dir` (result cache off; persisting only when
    asked unless `persist_held_off` is false: then by the defaults' size and age), with
    `settings` as QUIVER_* variables: HTTP on ADDR, or, given `port` (for a second server
    beside the first), HTTP, Flight SQL and PostgreSQL on it and the next two."""
    held_off = {"QUIVER_PERSIST_BUFFER_BYTES": str(8 << 30),
                "QUIVER_MAX_BUFFER_BYTES": str(16 << 30),
                "QUIVER_PERSIST_MAX_AGE_SECS": str(86_400)} if persist_held_off else {}
    env = dict(os.environ, **held_off,
               QUIVER_CACHE_ENABLED="false",
               QUIVER_LOG_FILTER="warn",
               **{f"QUIVER_{k.upper()}": v for k, v in settings.items()})
    addr, listeners = ADDR, []
    if port is not None:
        addr = f"127.0.0.1:{port}"
        listeners = ["--flight-addr", f"127.0.0.1:{port + 1}", "--pg-addr", f"127.0.0.1:{port + 2}"]
    server = subprocess.Popen(
        [binary or RELEASE / "quiver", "serve", "--data-dir", data_dir, "--http-addr", addr,
         *listeners],
        env=env)
    for _ in range(300):
        try:
            if requests.get(f"http://{addr}/health", timeout=1).ok:
                return server
        except requests.ConnectionError:
            time.sleep(0.1)
    stop(server)
    raise RuntimeError(f"the server did not start on {addr} (exit code {server.returncode}; "
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


# The fleet data set: FLEET_HOSTS hosts writing `cpu` every ten seconds from FLEET_START_NS.
FLEET_HOSTS = 100
FLEET_START_NS = 1_709_251_200 * 10**9
# Rows per write request while loading it.
FLEET_CHUNK = 1_000_000


def load_fleet(http: str, db: str, rows: int, files: int) -> None:
    """Writes `rows` rows of the fleet into `db` at `http`, persisting after each `rows / files`
    so that they land in `files` Parquet files."""
    per_file = rows // files
    for f in range(files):
        for part in range(0, per_file, FLEET_CHUNK):
            lines = "\n".join(
                f"cpu,host=h{i % FLEET_HOSTS:03d},region=r{i % FLEET_HOSTS % 5} "
                f"usage={(i * 37) % 1000 / 10} "
                f"{FLEET_START_NS + (f * per_file + i) // FLEET_HOSTS * 10**9}"
                for i in range(part, min(part + FLEET_CHUNK, per_file)))
            r = requests.post(f"{http}/api/v3/write_lp", params={"db": db, "precision": "ns"},
                              data=lines.encode(), timeout=TIMEOUT_S)
            assert r.status_code == 204, r.text
        requests.post(f"{http}/api/v3/persist", timeout=TIMEOUT_S).raise_for_status()


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process `pid` has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
