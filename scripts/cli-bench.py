#!/usr/bin/env python3
"""`quiver write` and `quiver import` against one `curl` request of the same data, same run.

    cargo build --release -p quiver-server
    .venv/bin/python scripts/cli-bench.py [--rows 1000000] [--repeats 5]

Writes ROWS rows (10 hosts, a float and an integer field) once as a line-protocol file and once
as a Parquet file (plus the same rows as one Arrow IPC stream), then, REPEATS times in
alternating order, each into a fresh database of a release server (result cache off):

- `curl` of the whole line-protocol file in one request (the baseline of `quiver write`);
- `quiver write FILE` (4 MiB requests cut between entries, the progress bar hidden: not a
  terminal);
- `curl` of the whole Arrow IPC stream in one request to `/api/v3/write_arrow` (the baseline
  of `quiver import`);
- `quiver import FILE.parquet` (Parquet read, shaped and sent in 65,536-row Arrow requests).

Prints each one's median wall time and rows/s, and the ratios to their baselines.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

import benchlib

QUIVER = benchlib.RELEASE / "quiver"


def data(directory: Path, rows: int) -> tuple[Path, Path, Path]:
    start = 1_700_000_000 * 10**9
    hosts = [f"h{i % 10}" for i in range(rows)]
    table = pa.table({
        "time": pa.array([start + i * 10**6 for i in range(rows)], pa.timestamp("ns", "UTC")),
        "host": pa.array(hosts).dictionary_encode(),
        "usage": pa.array([(i % 1000) * 0.1 for i in range(rows)], pa.float64()),
        "n": pa.array(range(rows), pa.int64()),
    })
    lp = directory / "rows.lp"
    with lp.open("w") as out:
        for i in range(rows):
            out.write(f"rows,host={hosts[i]} usage={(i % 1000) * 0.1},n={i}i {start + i * 10**6}\n")
    parquet = directory / "rows.parquet"
    pq.write_table(table, parquet, compression="zstd")
    arrow = directory / "rows.arrow"
    with ipc.new_stream(arrow, table.schema) as writer:
        writer.write_table(table)
    return lp, parquet, arrow


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    finished = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if finished.returncode != 0 or "error" in finished.stdout.lower():
        raise SystemExit(f"{command[:3]} failed: {finished.stdout}{finished.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        lp, parquet, arrow = data(Path(work), args.rows)
        print(f"rows={args.rows}: line protocol {lp.stat().st_size / 2**20:.1f} MiB, Parquet "
              f"{parquet.stat().st_size / 2**20:.1f} MiB, Arrow IPC {arrow.stat().st_size / 2**20:.1f} MiB")
        server = benchlib.start(str(Path(work) / "data"))
        try:
            runs: dict[str, list[float]] = {k: [] for k in ("curl lp", "quiver write",
                                                            "curl arrow", "quiver import")}
            for repeat in range(args.repeats):
                commands = {
                    "curl lp": ["curl", "-sf", "-XPOST", "--data-binary", f"@{lp}",
                                f"{benchlib.URL}/api/v3/write_lp?db=c{repeat}"],
                    "quiver write": [str(QUIVER), "write", "--host", benchlib.URL,
                                     "--db", f"w{repeat}", str(lp)],
                    "curl arrow": ["curl", "-sf", "-XPOST", "--data-binary", f"@{arrow}",
                                   "-H", "Content-Type: application/vnd.apache.arrow.stream",
                                   f"{benchlib.URL}/api/v3/write_arrow?db=a{repeat}&table=rows"],
                    "quiver import": [str(QUIVER), "import", "--host", benchlib.URL,
                                      "--db", f"i{repeat}", str(parquet)],
                }
                order = list(commands) if repeat % 2 == 0 else list(reversed(commands))
                for name in order:
                    runs[name].append(timed(commands[name]))
            for db in ("c0", "w0", "a0", "i0"):
                counted = benchlib.query(db, "SELECT count(*) AS n FROM rows")[0]["n"]
                assert counted == args.rows, (db, counted)
        finally:
            benchlib.stop(server)
    medians = {name: statistics.median(samples) for name, samples in runs.items()}
    print(f"medians of {args.repeats} runs, alternating order")
    for name, seconds in medians.items():
        print(f"{name:14} {seconds:7.3f} s  {args.rows / seconds / 1e6:5.2f} M rows/s")
    print(f"quiver write / curl lp     {medians['quiver write'] / medians['curl lp']:.2f}")
    print(f"quiver import / curl arrow {medians['quiver import'] / medians['curl arrow']:.2f}")


if __name__ == "__main__":
    main()
