"""Fast queries on fresh and persisted data, seen from outside (issue 25): last-point queries
answered from every series' newest rows, and files' columns decoded once and then read from
memory. Each shortcut is checked against the plain plan on data with late writes, overwrites
of the newest points with some fields only, a series that appears late, several persisted
files and rows still in the buffer; over HTTP and PostgreSQL. The result cache is off in these
servers, so every query runs the engine.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pytest
import requests

from conftest import DEFAULT_PORTS, SpawnedServer
from quiver_testlib import (parquet_files, ports_free, query_json, storage_stats, wait_until,
                            write_and_persist, write_ok)

DB = "fast"
Spawn = Callable[..., SpawnedServer]
SECOND = 10**9
DATABASE_HEADER = "adbc.flight.sql.rpc.call_header.database"

LAST_POINT = [
    "SELECT DISTINCT ON (host, region) * FROM cpu ORDER BY host, region, time DESC",
    "SELECT DISTINCT ON (host) host, time, usage FROM cpu WHERE host <> 'h3' "
    "ORDER BY host, time DESC, region",
    "SELECT host, region, max(time) AS newest, first_value(usage ORDER BY time DESC) AS u, "
    "last_value(load ORDER BY time) AS l FROM cpu GROUP BY host, region",
    "SELECT host, region, max(time) AS newest FROM cpu "
    "WHERE time >= '1970-01-01T00:00:30Z' GROUP BY host, region",
    "SELECT region, max(time) AS newest FROM cpu GROUP BY region",
]


def plain(sql: str) -> str:
    """The same question in a shape the shortcut does not recognise (a projection between the
    statement and the table), so it runs the plain plan."""
    return sql.replace("FROM cpu", "FROM (SELECT * FROM cpu) cpu")


def load(server: SpawnedServer) -> None:
    """Ten hosts over three persists and the buffer: later files hold late writes (older
    points), overwrites of each host's newest point with one field only, and a series
    (`region=r1`) that appears late; the last writes stay buffered."""
    url = server.http_url
    write_and_persist(url, DB, "".join(
        f"cpu,host=h{h} usage={h + t},load={t}i {t * SECOND}\n"
        for h in range(10) for t in range(0, 40)))
    write_and_persist(url, DB, "".join(
        f"cpu,host=h{h} usage={100 + h} {39 * SECOND}\n" for h in range(0, 10, 2)) + "".join(
        f"cpu,host=h{h} usage=-1,load=-1i {5 * SECOND}\n" for h in range(10)))
    write_and_persist(url, DB, "".join(
        f"cpu,host=h{h},region=r1 usage={h} {50 * SECOND}\n" for h in range(3)))
    write_ok(url, DB, "cpu,host=h1 load=7i 39000000000\ncpu,host=h9 usage=9.5 60000000000\n")


def sorted_rows(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(repr(sorted(row.items())) for row in rows)


def test_last_point_queries_equal_the_plain_plan_over_http_and_postgres(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", "data", "--cache-enabled", "false", cwd=tmp_path)
    load(server)
    for sql in LAST_POINT:
        shortcut = query_json(server.http_url, DB, sql)
        assert shortcut, sql
        plain_rows = query_json(server.http_url, DB, plain(sql))
        assert sorted_rows(shortcut) == sorted_rows(plain_rows), sql
    newest = {(r["host"], r.get("region")): r
              for r in query_json(server.http_url, DB, LAST_POINT[0])}
    # an overwrite of the newest point with one field keeps the other field of the point
    assert newest[("h0", None)]["usage"] == 100.0 and newest[("h0", None)]["load"] == 39
    assert newest[("h1", None)]["usage"] == 40.0 and newest[("h1", None)]["load"] == 7
    assert newest[("h9", None)]["time"] == "1970-01-01T00:01:00Z"
    assert newest[("h2", "r1")]["time"] == "1970-01-01T00:00:50Z"
    with psycopg.connect(host="127.0.0.1", port=server.pg_port, user="quiver", dbname=DB,
                         connect_timeout=10, autocommit=True) as conn:
        for sql in LAST_POINT:
            shortcut = sorted(map(repr, conn.execute(sql).fetchall()))
            assert shortcut == sorted(map(repr, conn.execute(plain(sql)).fetchall())), sql
    # Flight SQL through the ADBC driver as published: the shortcut's rows equal the plain
    # plan's, and as many as over HTTP
    with flight_sql.connect(server.flight_uri, db_kwargs={DATABASE_HEADER: DB},
                            autocommit=True) as conn, conn.cursor() as cursor:
        def flight_rows(sql: str) -> list[str]:
            cursor.execute(sql)
            return sorted(map(repr, cursor.fetch_arrow_table().to_pylist()))
        for sql in LAST_POINT:
            shortcut = flight_rows(sql)
            assert shortcut == flight_rows(plain(sql)), sql
            assert len(shortcut) == len(query_json(server.http_url, DB, sql)), sql


def test_last_point_queries_see_writes_and_retention_at_once(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", "data", "--cache-enabled", "false", cwd=tmp_path)
    url = server.http_url
    now = time.time_ns()
    response = requests.post(f"{url}/api/v3/configure/database",
                             json={"db": DB, "retention_period": "1h"}, timeout=10)
    assert response.status_code in (200, 201), response.text
    # `old` has only rows past the retention period; `live` has both
    write_and_persist(url, DB, f"cpu,host=old usage=1 {now - 7200 * SECOND}\n"
                               f"cpu,host=live usage=2 {now - 7200 * SECOND}\n"
                               f"cpu,host=live usage=3 {now - 60 * SECOND}\n")
    sql = "SELECT DISTINCT ON (host) host, usage FROM cpu ORDER BY host, time DESC"
    assert query_json(url, DB, sql) == [{"host": "live", "usage": 3.0}]
    write_ok(url, DB, f"cpu,host=live usage=4 {now - 30 * SECOND}\n")
    assert query_json(url, DB, sql) == [{"host": "live", "usage": 4.0}]
    write_ok(url, DB, f"cpu,host=old usage=5 {now}\n")
    assert query_json(url, DB, sql) == [{"host": "live", "usage": 4.0},
                                        {"host": "old", "usage": 5.0}]


def plan(server: SpawnedServer, sql: str) -> str:
    return "\n".join(row["plan"] for row in query_json(server.http_url, DB, f"EXPLAIN {sql}"))


def test_scans_read_decoded_columns_after_the_first(spawn_quiver: Spawn, tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", "data", "--cache-enabled", "false", cwd=tmp_path)
    load(server)
    # a compaction leaves files that overlap nothing, which the decoded path serves
    response = requests.post(f"{server.http_url}/api/v3/compact", timeout=60)
    assert response.ok, response.text
    queries = ["SELECT host, avg(usage) AS a, count(*) AS n FROM cpu GROUP BY host",
               "SELECT * FROM cpu WHERE host = 'h3' AND usage > 10",
               "SELECT count(*) AS n FROM cpu WHERE load IS NULL"]
    # nothing decoded yet: the first scan reads the file (and has it decoded)
    assert "file_groups" in plan(server, queries[0])
    first = [sorted_rows(query_json(server.http_url, DB, sql)) for sql in queries]
    wait_until(lambda: not any("file_groups" in plan(server, sql) for sql in queries), 20,
               "scans reading decoded columns instead of the files")
    before = storage_stats(server.http_url)["chunk_cache"]
    assert [sorted_rows(query_json(server.http_url, DB, sql)) for sql in queries] == first
    after = storage_stats(server.http_url)["chunk_cache"]
    assert after["column_hits"] > before["column_hits"], (before, after)
    assert after["bytes"] <= after["capacity_bytes"]


def test_no_decoded_columns_when_the_chunk_cache_is_off(spawn_quiver: Spawn,
                                                        tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", "data", "--cache-enabled", "false",
                          cwd=tmp_path, env={"QUIVER_CHUNK_CACHE_BYTES": "0"})
    load(server)
    sql = "SELECT host, avg(usage) AS a FROM cpu GROUP BY host"
    first = sorted_rows(query_json(server.http_url, DB, sql))
    time.sleep(0.5)
    assert "file_groups" in plan(server, sql)
    assert sorted_rows(query_json(server.http_url, DB, sql)) == first
    stats = storage_stats(server.http_url)["chunk_cache"]
    assert stats["column_hits"] == 0 and stats["entries"] == 0, stats


def test_the_readme_serve_command_answers_last_points_and_decodes_hot_files(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    """The README's command (no flags: ./quiver-data, default ports, the result cache and the
    chunk cache at their defaults): last-point answers equal the plain plan after a persist
    and a restart, and a scanned file's columns get decoded."""
    if not ports_free(DEFAULT_PORTS):
        pytest.fail(f"a default port of {DEFAULT_PORTS} is taken: stop whatever holds it")
    server = spawn_quiver(cwd=tmp_path, default_ports=True)
    load(server)
    assert parquet_files(tmp_path / "quiver-data", DB)
    expected = {sql: sorted_rows(query_json(server.http_url, DB, plain(sql)))
                for sql in LAST_POINT}
    for sql in LAST_POINT:
        assert sorted_rows(query_json(server.http_url, DB, sql)) == expected[sql], sql
    sql = "SELECT host, avg(usage) AS a FROM cpu GROUP BY host"
    query_json(server.http_url, DB, sql)
    wait_until(lambda: "file_groups" not in plan(server, sql), 20,
               "the scanned files' columns decoded")
    assert storage_stats(server.http_url)["chunk_cache"]["column_misses"] > 0
    assert server.stop() == 0, server.log()
    server = spawn_quiver(cwd=tmp_path, default_ports=True)
    for sql in LAST_POINT:
        assert sorted_rows(query_json(server.http_url, DB, sql)) == expected[sql], sql
