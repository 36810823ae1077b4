"""Compaction, seen from outside: many persists of overlapping data leave many files; a
compaction (``POST /api/v3/compact``, or the background compactor once a partition is idle)
merges them into sorted, deduplicated files that do not overlap, and every answer stays the
same, before and after a restart. Queries over the compacted partition have no deduplicating
merge in their plan. Bad requests get clear errors and change nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
import requests

from conftest import DEFAULT_PORTS, SpawnedServer
from quiver_testlib import (parquet_files, ports_free, query_json, storage_stats, wait_until,
                            write_and_persist)

DB = "compact"
Spawn = Callable[..., SpawnedServer]
PERSISTS = 6

QUERIES = [
    "SELECT count(*) AS n FROM cpu",
    "SELECT host, min(usage) AS lo, max(usage) AS hi, sum(load) AS l FROM cpu GROUP BY host ORDER BY host",
    "SELECT time, usage FROM cpu WHERE host = 'h3' ORDER BY time",
    "SELECT host, usage FROM cpu WHERE time = '1970-01-01T00:10:00Z' ORDER BY host",
]


def load(server: SpawnedServer) -> None:
    """PERSISTS persisted files over the same hour: each rewrites every point's usage (later
    writes win) and some add points, so the files overlap in time."""
    for part in range(PERSISTS):
        lines = "".join(
            f"cpu,host=h{i % 10} usage={part * 1000 + i}.5,load={i}i {i * 10**9}\n"
            for i in range(1000 + part * 100))
        write_and_persist(server.http_url, DB, lines)


def storage(server: SpawnedServer) -> dict[str, Any]:
    return storage_stats(server.http_url)["compaction"]


def answers(server: SpawnedServer) -> list[list[dict[str, Any]]]:
    return [query_json(server.http_url, DB, sql) for sql in QUERIES]


def plan(server: SpawnedServer, sql: str) -> str:
    return "\n".join(str(row) for row in query_json(server.http_url, DB, f"EXPLAIN {sql}"))


def loaded(spawn_quiver: Spawn, tmp_path: Path,
           env: dict[str, str] | None = None) -> tuple[SpawnedServer, list[list[dict[str, Any]]]]:
    """A server on ``data`` (result cache off) with ``load``'s overlapping files, and its
    answers before any compaction."""
    server = spawn_quiver("--data-dir", "data", "--cache-enabled", "false", cwd=tmp_path, env=env)
    load(server)
    return server, answers(server)


def test_compact_merges_overlapping_files_and_answers_the_same(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    env = {"QUIVER_COMPACTION_ENABLED": "false"}
    server, before = loaded(spawn_quiver, tmp_path, env)
    assert before[0] == [{"n": 1000 + (PERSISTS - 1) * 100}], before[0]
    layout = storage(server)
    assert layout["files"] == PERSISTS and layout["max_files_per_partition"] == PERSISTS, layout
    assert "DeduplicateExec" in plan(server, QUERIES[1])

    response = requests.post(f"{server.http_url}/api/v3/compact", params={"db": DB}, timeout=60)
    assert response.status_code == 200, response.text
    done = response.json()
    assert done["compactions"] >= 1 and done["files_in"] == PERSISTS, done
    assert done["rows_out"] == 1000 + (PERSISTS - 1) * 100, done
    layout = storage(server)
    assert layout["files"] == 1 and layout["max_files_per_partition"] == 1, layout
    assert layout["files_deleted"] == PERSISTS and layout["files_awaiting_deletion"] == 0, layout
    assert len(parquet_files(tmp_path / "data")) == 1
    assert answers(server) == before
    assert "DeduplicateExec" not in plan(server, QUERIES[1])

    # nothing left to do: a second request merges nothing
    again = requests.post(f"{server.http_url}/api/v3/compact", params={"db": DB, "table": "cpu"},
                          timeout=60)
    assert again.status_code == 200 and again.json()["compactions"] == 0, again.text

    assert server.stop() == 0
    server = spawn_quiver("--data-dir", "data", "--cache-enabled", "false", cwd=tmp_path, env=env)
    assert answers(server) == before
    assert storage(server)["files"] == 1


def test_compact_rejects_bad_requests_and_keeps_the_data(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    server, before = loaded(spawn_quiver, tmp_path)
    url = f"{server.http_url}/api/v3/compact"
    cases = [
        ({"db": "missing"}, 404, 'database "missing" does not exist'),
        ({"db": DB, "table": "missing"}, 404, 'table "missing" in database "compact"'),
        ({"table": "cpu"}, 400, "table needs db"),
        ({"db": DB, "tabel": "cpu"}, 400, 'unknown parameter "tabel"'),
        ({"db": "x" * 2000}, 400, "invalid database name"),
        ({"db": DB, "table": "t" * 2000}, 400, "invalid table name"),
    ]
    for params, status, message in cases:
        response = requests.post(url, params=params, timeout=30)
        assert response.status_code == status, (params, response.text)
        assert message in response.json()["error"], (params, response.text)
    assert requests.get(url, timeout=10).status_code == 405
    assert answers(server) == before
    assert storage(server)["failures"] == 0


def test_background_compaction_settles_an_idle_partition(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    server, before = loaded(spawn_quiver, tmp_path, {"QUIVER_COMPACTION_IDLE_SECS": "1"})
    wait_until(lambda: storage(server)["max_files_per_partition"] <= 1, 30,
               "the idle partition to be settled")
    layout = storage(server)
    assert layout["max_files_per_partition"] == 1, layout
    assert layout["compactions"] >= 1 and layout["failures"] == 0, layout
    assert answers(server) == before
    assert "compacted files" in server.log()


def test_the_readme_serve_command_compacts_in_the_background(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    """`quiver serve` with nothing but defaults (relative ./quiver-data, default ports and
    compaction settings), kept writing past the point where compaction starts: after more
    persists than `compaction_fanout`, the background compactor merges files without being
    asked, the files on disk are exactly those the catalog names, and answers survive a
    restart."""
    if not ports_free(DEFAULT_PORTS):
        pytest.fail(f"a default port of {DEFAULT_PORTS} is taken: stop whatever holds it")
    cwd = tmp_path / "fresh"
    cwd.mkdir()
    server = spawn_quiver(cwd=cwd, default_ports=True)
    for part in range(12):
        lines = "".join(f"cpu,host=h{i % 10} usage={i}.5,load={part}i {(part * 1000 + i) * 10**9}\n"
                        for i in range(1000))
        write_and_persist(server.http_url, DB, lines)
    wait_until(lambda: storage(server)["compactions"] > 0, 30, "a background compaction")
    layout = storage(server)
    assert layout["compactions"] >= 1 and layout["failures"] == 0, layout
    assert layout["max_files_per_partition"] <= 10, layout
    before = answers(server)
    assert before[0] == [{"n": 12_000}], before[0]
    data_dir = cwd / "quiver-data"
    wait_until(lambda: len(parquet_files(data_dir)) == storage(server)["files"], 10,
               "replaced files to be deleted")
    assert server.stop() == 0, server.log()
    server = spawn_quiver(cwd=cwd, default_ports=True)
    assert answers(server) == before
