"""The chunk cache, seen from outside: Parquet metadata and column chunks read once, then
served from memory to every later scan of the same files, whatever the projection or filter;
``chunk_cache_bytes = 0`` turns it off without changing an answer; its counters are in
``GET /api/v3/storage``. The result cache is off in these servers, so every query runs the
engine and reads the files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from conftest import SpawnedServer
from quiver_testlib import query_json, storage_stats, write_and_persist

DB = "chunks"
Spawn = Callable[..., SpawnedServer]

QUERIES = [
    "SELECT count(*) AS n FROM cpu",
    "SELECT host, avg(usage) AS a FROM cpu GROUP BY host ORDER BY host",
    "SELECT time, usage FROM cpu WHERE host = 'h3' ORDER BY time",
    "SELECT max(time) AS t FROM cpu WHERE usage > 50",
]


def load(server: SpawnedServer) -> None:
    """Two persisted files of 2,000 rows each (20 hosts), so scans read several chunks."""
    for part in range(2):
        lines = "".join(
            f"cpu,host=h{i % 20} usage={(i * 7) % 100}.5,load={i}i {part * 10**12 + i * 10**9}\n"
            for i in range(2000))
        write_and_persist(server.http_url, DB, lines)


def chunk_stats(server: SpawnedServer) -> dict[str, Any]:
    return storage_stats(server.http_url)["chunk_cache"]


def answers(server: SpawnedServer) -> list[list[dict[str, Any]]]:
    return [query_json(server.http_url, DB, sql) for sql in QUERIES]


def test_repeated_scans_read_nothing_twice(spawn_quiver: Spawn, tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", "data", "--cache-enabled", "false", cwd=tmp_path)
    load(server)
    # the persists kept the written files' columns decoded: after a restart the cache is
    # empty, and the first scans read the files
    assert server.stop() == 0, server.log()
    server = spawn_quiver("--data-dir", "data", "--cache-enabled", "false", cwd=tmp_path)
    before = chunk_stats(server)
    assert before["capacity_bytes"] > 0, before
    first = answers(server)
    after_first = chunk_stats(server)
    assert after_first["misses"] > before["misses"], after_first
    assert after_first["entries"] > 0 and after_first["bytes"] > 0, after_first
    assert after_first["bytes"] <= after_first["capacity_bytes"]

    # the same questions again: every metadata and chunk lookup hits, or the files' columns,
    # decoded in the background meanwhile, are read from memory
    assert answers(server) == first
    after_second = chunk_stats(server)
    assert after_second["misses"] == after_first["misses"], (after_first, after_second)
    served = lambda stats: stats["hits"] + stats["column_hits"]  # noqa: E731
    assert served(after_second) > served(after_first), (after_first, after_second)

    # other filters and projections over the same columns share the cached chunks
    rows = query_json(server.http_url, DB,
                      "SELECT host, min(usage) AS m FROM cpu WHERE host IN ('h1', 'h2') "
                      "GROUP BY host ORDER BY host")
    assert [r["host"] for r in rows] == ["h1", "h2"]
    assert chunk_stats(server)["misses"] == after_first["misses"]

    # a column not read before is a miss for its chunks only, then a hit
    query_json(server.http_url, DB, "SELECT sum(load) AS s FROM cpu")
    with_load = chunk_stats(server)
    assert with_load["misses"] > after_first["misses"]
    query_json(server.http_url, DB, "SELECT sum(load) AS s FROM cpu")
    assert chunk_stats(server)["misses"] == with_load["misses"]


def test_a_zero_capacity_turns_it_off_and_changes_no_answer(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    on = spawn_quiver("--data-dir", "data", "--cache-enabled", "false", cwd=tmp_path)
    load(on)
    expected = answers(on)
    assert answers(on) == expected  # from the chunk cache
    assert on.stop() == 0

    off = spawn_quiver("--data-dir", "data", "--cache-enabled", "false", cwd=tmp_path,
                       env={"QUIVER_CHUNK_CACHE_BYTES": "0"})
    assert answers(off) == expected
    assert answers(off) == expected
    stats = chunk_stats(off)
    assert stats == {"hits": 0, "misses": 0, "column_hits": 0, "column_misses": 0,
                     "evictions": 0, "bytes": 0, "entries": 0, "capacity_bytes": 0}, stats


def test_a_small_cache_evicts_and_stays_within_its_capacity(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", "data", "--cache-enabled", "false", cwd=tmp_path,
                          env={"QUIVER_CHUNK_CACHE_BYTES": str(16 << 10)})
    load(server)
    expected = None
    for _ in range(3):
        got = answers(server)
        assert expected is None or got == expected
        expected = got
    stats = chunk_stats(server)
    assert stats["capacity_bytes"] == 16 << 10
    # the working set is about 34 KiB in 8 entries: some fit, the rest push others out
    assert 0 < stats["bytes"] <= 16 << 10, stats
    assert stats["entries"] > 0 and stats["evictions"] > 0, stats
    assert stats["misses"] > 0, stats
