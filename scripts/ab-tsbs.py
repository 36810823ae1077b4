#!/usr/bin/env python3
"""Two builds of the server on the TSBS shapes, interleaved request by request (BENCHMARKS.md,
"The engine's floor").

Starts both builds at once (result cache off, persisting only when asked, each on its own empty
data directory and ports), loads the same TSBS rows into each with `quiver-tsbs --load quiver`,
then times every shape on both, alternating the server on every request (A B, then B A, ...),
first on fresh data (in the write buffer), then after `POST /api/v3/persist` on both. Each
shape's figure is the median of `--runs` requests per build and round; the report is each
shape's B / A and the geometric mean, per state.

Running the builds one after the other (`scripts/ab-bench.sh`) lets a shared machine's drift
between the two runs (other tenants, QuestDB's JIT and GC in the same run, thermal state) pass
for a difference of the builds; here every pair of requests is a few milliseconds apart.

Usage: scripts/ab-tsbs.py A_DIR B_DIR [--rows 1000000] [--runs 40] [--rounds 3]
  A_DIR, B_DIR: directories holding a release `quiver` binary each; `quiver-tsbs` is taken
  from B_DIR, else from $CARGO_TARGET_DIR/release (or target/release).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

import benchlib

ROOT = Path(__file__).resolve().parents[1]
RELEASE = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"
TIMEOUT_S = 600


def load(tsbs: Path, url: str, rows: int) -> list[str]:
    """Loads the TSBS rows into the server at `url`; the shapes' statements."""
    out = subprocess.run([tsbs, "--quiver-url", url, "--rows", str(rows), "--load", "quiver",
                          "--print-statements"], check=True, capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.strip()]


def timed_pair(sessions: dict[str, requests.Session], urls: dict[str, str], sql: str,
               order: list[str]) -> dict[str, float]:
    """One request to each build in `order`: milliseconds per build."""
    times = {}
    for build in order:
        started = time.perf_counter()
        r = sessions[build].get(f"{urls[build]}/api/v3/query_sql",
                                params={"db": "tsbs", "q": sql, "format": "json"},
                                headers={"Cache-Control": "no-cache"}, timeout=TIMEOUT_S)
        times[build] = (time.perf_counter() - started) * 1e3
        if r.status_code != 200:
            raise RuntimeError(f"build {build}: {sql}: {r.status_code} {r.text[:300]}")
    return times


def compare(urls: dict[str, str], statements: list[str], runs: int, rounds: int) -> list[float]:
    """Prints each shape's median per build and B / A; the ratios (medians over rounds)."""
    sessions = {build: requests.Session() for build in urls}
    print("| statement | A ms | B ms | B / A |\n|---|---:|---:|---:|")
    ratios = []
    for sql in statements:
        per_round = {"A": [], "B": []}
        for _ in range(rounds):
            samples = {"A": [], "B": []}
            timed_pair(sessions, urls, sql, ["A", "B"])  # warm-up
            for run in range(runs):
                order = ["A", "B"] if run % 2 == 0 else ["B", "A"]
                for build, ms in timed_pair(sessions, urls, sql, order).items():
                    samples[build].append(ms)
            for build in samples:
                per_round[build].append(statistics.median(samples[build]))
        a, b = statistics.median(per_round["A"]), statistics.median(per_round["B"])
        ratios.append(b / a)
        print(f"| `{sql[:90]}{'…' if len(sql) > 90 else ''}` | {a:.2f} | {b:.2f} | {b / a:.3f} |",
              flush=True)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a_dir", type=Path)
    parser.add_argument("b_dir", type=Path)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tsbs = args.b_dir / "quiver-tsbs"
    if not tsbs.exists():
        tsbs = RELEASE / "quiver-tsbs"
    ports = {"A": 18486, "B": 18496}
    urls = {build: f"http://127.0.0.1:{port}" for build, port in ports.items()}
    servers = []
    with tempfile.TemporaryDirectory() as work:
        try:
            for build, directory in (("A", args.a_dir), ("B", args.b_dir)):
                servers.append(
                    benchlib.start(f"{work}/{build}", directory / "quiver", ports[build]))
            statements = [load(tsbs, urls[build], args.rows) for build in urls]
            assert statements[0] == statements[1], "both loads give the same statements"
            shapes = [s for s in statements[0] if s != "SELECT 1"]
            print(f"# {time.strftime('%FT%TZ', time.gmtime())}, {os.cpu_count()} cores, "
                  f"{args.rows} rows, median of {args.runs} interleaved requests per build, "
                  f"median over {args.rounds} rounds")
            geomeans = {}
            for state in ("fresh", "persisted"):
                if state == "persisted":
                    for url in urls.values():
                        requests.post(f"{url}/api/v3/persist", timeout=TIMEOUT_S).raise_for_status()
                print(f"\n## {state}")
                ratios = compare(urls, shapes, args.runs, args.rounds)
                geomeans[state] = math.exp(sum(map(math.log, ratios)) / len(ratios))
                print(f"geometric mean B / A ({state}): {geomeans[state]:.3f}; "
                      f"largest {max(ratios):.3f}")
        finally:
            for server in servers:
                benchlib.stop(server)


if __name__ == "__main__":
    sys.exit(main())
