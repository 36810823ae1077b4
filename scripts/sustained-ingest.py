#!/usr/bin/env python3
"""Sustained ingest (issue 55): minutes of writes per format against a server on its defaults
(persisting by size and age, compaction in the background), as a timeline, next to the
request path alone measured in the same run.

Per format:
  1. the request path alone: a fresh server with persisting held off (benchlib's settings),
     quiver-loadgen for ALONE seconds: decode, WAL fsync, buffer;
  2. sustained: a fresh server on its defaults, quiver-loadgen for MINUTES (the timeline
     starts with its first writes, after its in-process decode baseline); every INTERVAL
     seconds the script reads /metrics and /api/v3/storage and the server's resident memory:
     rows/s over the interval (`quiver_ingest_rows_total`), the write buffer and the persist
     lag, persists and compactions so far, Parquet files (most in one partition), RSS, and the
     writes slower than 50 ms (exact: 0.05 s is a bucket bound of the latency histogram) with
     the bucket bound that holds the interval's p99, and where persisting and compaction spent
     their time so far (seconds per step: merge, encode, store; compaction also reads).

Prints one Markdown table per format and a summary: sustained rows/s over the whole run
against the request path alone (the issue's target: >= 0.9), peak RSS against its bound
(twice max_buffer_bytes: the buffer and a persist's sorted copy; the chunk cache's capacity;
twice compaction_max_merge_bytes; 256 MiB for the rest), most files in one partition, the
share of writes over 50 ms, writes refused with 503 (quiver-loadgen retries them after
Retry-After, as a client honouring back-pressure does).

Build first: cargo build --release -p quiver-server -p quiver-bench
Usage: .venv/bin/python scripts/sustained-ingest.py [--minutes 10] [--formats lp,msgpack]
       [--connections 4] [--batch-lines 5000] [--interval 10] [--alone 10]
       [--set parquet_zstd_level=1 ...]  (server settings for the sustained run)
       [--rate 150000]  (an offered load below capacity: p99 while persists run)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
import time

import requests

from benchlib import RELEASE, URL, start, stop

DB = "sustained"
HISTOGRAM = "quiver_request_duration_seconds"


def metrics() -> str:
    return requests.get(f"{URL}/metrics", timeout=30).text


def series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of `name` in Prometheus text, with its labels."""
    found = []
    for line in text.splitlines():
        match = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        if match and match.group(1) == name:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
            found.append((labels, float(match.group(3))))
    return found


def total(text: str, name: str) -> float:
    return sum(value for _, value in series(text, name))


def write_buckets(text: str) -> dict[float, float]:
    """The HTTP write endpoints' latency histogram: requests at or under each bound."""
    buckets: dict[float, float] = {}
    for labels, value in series(text, f"{HISTOGRAM}_bucket"):
        if labels.get("protocol") == "http" and "write" in labels.get("endpoint", ""):
            bound = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
            buckets[bound] = buckets.get(bound, 0.0) + value
    return buckets


def interval_latency(before: dict[float, float], after: dict[float, float]) -> tuple[int, int, str]:
    """Writes in the interval, those over 50 ms, and the bucket bound holding their p99."""
    delta = {bound: after.get(bound, 0.0) - before.get(bound, 0.0) for bound in after}
    count = int(delta.get(float("inf"), 0.0))
    if count == 0:
        return 0, 0, "-"
    slow = count - int(delta.get(0.05, 0.0))
    p99 = next(bound for bound in sorted(delta) if delta[bound] >= 0.99 * count)
    return count, slow, "+Inf" if p99 == float("inf") else f"<= {p99 * 1e3:g} ms"


def steps(times: dict, names: tuple[str, ...]) -> str:
    """Seconds per step of writing files, as `1.2/3.4/0.5`."""
    return "/".join(f"{times[f'{name}_seconds']:.1f}" for name in names)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    return kib / 1024


def loadgen(fmt: str, seconds: int, args: argparse.Namespace) -> subprocess.Popen:
    return subprocess.Popen(
        [RELEASE / "quiver-loadgen", "--url", URL, "--db", DB, "--format", fmt,
         "--connections", str(args.connections), "--batch-lines", str(args.batch_lines),
         "--batches", "512", "--hosts", "1000", "--seconds", str(seconds),
         "--rate", str(args.rate)],
        stdout=subprocess.PIPE, text=True)


def loadgen_rate(report: str) -> float:
    return float(re.search(r"batches: (\d+) rows/s", report).group(1))


def request_path_alone(fmt: str, args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory() as data:
        server = start(data)
        try:
            report, _ = loadgen(fmt, args.alone, args).communicate()
        finally:
            stop(server)
    return loadgen_rate(report)


def sustained(fmt: str, args: argparse.Namespace) -> dict:
    """Runs the load on a server on its defaults; prints the timeline; returns the summary."""
    print(f"\n## {fmt}: {args.minutes} min on the defaults, {args.connections} connections x "
          f"{args.batch_lines}-row batches, every {args.interval} s")
    print("| s | rows/s | buffer MiB | persist lag s | persists | compactions | files "
          "| most in a partition | RSS MiB | writes | over 50 ms | p99 "
          "| persist s merge/encode/store | compaction s read/merge/encode/store |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|")
    summary = {"rss": 0.0, "most_files": 0, "writes": 0, "slow": 0, "bound": 0.0}
    with tempfile.TemporaryDirectory() as data:
        server = start(data, persist_held_off=False, **args.settings)
        try:
            started = time.monotonic()
            load = loadgen(fmt, args.minutes * 60, args)
            before_text, before_at = metrics(), time.monotonic()
            while load.poll() is None:
                time.sleep(args.interval)
                text, at = metrics(), time.monotonic()
                rows = total(text, "quiver_ingest_rows_total") - total(
                    before_text, "quiver_ingest_rows_total")
                writes, slow, p99 = interval_latency(write_buckets(before_text),
                                                     write_buckets(text))
                if writes == 0 and summary["writes"] == 0:
                    # quiver-loadgen times its in-process decode baseline before it sends
                    before_text, before_at, started = text, at, at
                    continue
                store = requests.get(f"{URL}/api/v3/storage", timeout=30).json()
                persistence, compaction = store["persistence"], store["compaction"]
                rss = rss_mib(server.pid)
                summary["rss"] = max(summary["rss"], rss)
                summary["most_files"] = max(summary["most_files"],
                                            compaction["max_files_per_partition"])
                summary["writes"] += writes
                summary["slow"] += slow
                summary["bound"] = (2 * persistence["buffer_limit_bytes"]
                                    + store["chunk_cache"]["capacity_bytes"]
                                    + 2 * compaction["max_merge_bytes"] + (256 << 20)) / 2**20
                summary["persist_times"] = persistence["times"]
                summary["persisted"] = (persistence["rows"], persistence["parquet_bytes"])
                summary["compaction_times"] = compaction["times"]
                print(f"| {at - started:.0f} | {rows / (at - before_at):,.0f} "
                      f"| {persistence['buffered_bytes'] / 2**20:.0f} "
                      f"| {persistence['lag_seconds']:.1f} | {persistence['persists']} "
                      f"| {compaction['compactions']} | {compaction['files']} "
                      f"| {compaction['max_files_per_partition']} | {rss:.0f} | {writes} "
                      f"| {slow} | {p99} "
                      f"| {steps(persistence['times'], ('merge', 'encode', 'store'))} "
                      f"| {steps(compaction['times'], ('read', 'merge', 'encode', 'store'))} |",
                      flush=True)
                before_text, before_at = text, at
            report = load.stdout.read()
        finally:
            stop(server)
    summary["rate"] = loadgen_rate(report)
    summary["refused"] = int(re.search(r"(\d+) refused with 503", report).group(1))
    print(report.strip().splitlines()[-1])
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--formats", default="lp,msgpack")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--batch-lines", type=int, default=5000)
    parser.add_argument("--interval", type=int, default=10)
    parser.add_argument("--alone", type=int, default=10,
                        help="seconds of the request path alone, per format")
    parser.add_argument("--rate", type=int, default=0,
                        help="rows/s offered in all (0: as fast as the connections go); "
                             "latency then counts from each request's scheduled time")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a server setting for the sustained run (repeatable)")
    args = parser.parse_args()
    args.settings = dict(setting.split("=", 1) for setting in args.set)
    results = {}
    for fmt in args.formats.split(","):
        alone = request_path_alone(fmt, args)
        results[fmt] = (alone, sustained(fmt, args))
    print("\n| format | request path alone rows/s | sustained rows/s | sustained / alone "
          "| peak RSS MiB (bound) | most files in a partition | writes over 50 ms "
          "| refused (503, retried) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for fmt, (alone, s) in results.items():
        share = s["slow"] / max(s["writes"], 1)
        print(f"| {fmt} | {alone:,.0f} | {s['rate']:,.0f} | {s['rate'] / alone:.2f} "
              f"| {s['rss']:.0f} ({s['bound']:.0f}) | {s['most_files']} "
              f"| {share:.2%} ({s['slow']} of {s['writes']}) | {s['refused']} |")
    for fmt, (_, s) in results.items():
        rows, parquet_bytes = s["persisted"]
        print(f"{fmt}: persisted {rows:,} rows as {parquet_bytes:,} Parquet bytes "
              f"({parquet_bytes / max(rows, 1):.1f} bytes/row); persist seconds "
              f"{s['persist_times']}, compaction seconds {s['compaction_times']}")


if __name__ == "__main__":
    main()
