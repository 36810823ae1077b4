#!/usr/bin/env python3
"""A persist's time, binary against binary in one run: how much writing Parquet files through
storage's data store (each file encoded in memory, then stored durably: a temporary file,
fsync, rename, directory fsync) costs against the binary before it (BENCHMARKS.md, issue 43).

    .venv/bin/python scripts/persist-ab-bench.py --binaries OLD NEW [--rows 1000000]
                                                 [--partitions 4] [--rounds 3]

For each round and binary (alternating which goes first), on a fresh data directory: ROWS
rows of `cpu` (100 hosts, spread over PARTITIONS daily partitions) are written, then one
`POST /api/v3/persist` is timed (its `elapsed_ms`). Prints the median per binary and NEW / OLD.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import benchlib

DAY_NS = 86_400 * 10**9
START_NS = 1_709_251_200 * 10**9


def one_persist(binary: str, rows: int, partitions: int) -> float:
    with tempfile.TemporaryDirectory() as data_dir:
        server = benchlib.start(data_dir, binary, compaction_enabled="false")
        try:
            step = partitions * DAY_NS // rows
            for first in range(0, rows, 100_000):
                benchlib.write("bench", "\n".join(
                    f"cpu,host=h{i % 100:03d} usage={i % 1000 / 10},load={i % 7}i "
                    f"{START_NS + i * step}" for i in range(first, min(rows, first + 100_000))))
            return benchlib.persist()["elapsed_ms"]
        finally:
            benchlib.stop(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binaries", nargs=2, required=True, metavar=("OLD", "NEW"))
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    times = benchlib.alternately(args.binaries, args.rounds,
                                 lambda binary: one_persist(binary, args.rows, args.partitions))
    old, new = (statistics.median(times[b]) for b in args.binaries)
    print(f"persist of {args.rows} rows in {args.partitions} partitions, median of "
          f"{args.rounds}: OLD {old:.0f} ms, NEW {new:.0f} ms, NEW / OLD {new / old:.2f}")


if __name__ == "__main__":
    main()
