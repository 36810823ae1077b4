"""Fast queries on fresh and persisted data, seen from outside (issue 25): last-point queries
answered from every series' newest rows, and files' columns decoded once and then read from
memory. Each shortcut is checked against the plain plan on data with late writes, overwrites
of the newest points with some fields only, a series that appears late, several persisted
files and rows still in the buffer; over HTTP and PostgreSQL. The result cache is off in these
servers, so every query runs the engine.
"""

from __future__ import annotations

import re
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
    """A file's columns are kept decoded as it is written (by a persist or a compaction), so
    its first scan reads memory; after a restart (nothing decoded), the first scan reads the
    file and has its columns decoded for the next."""
    server = spawn_quiver("--data-dir", "data", "--cache-enabled", "false", cwd=tmp_path)
    load(server)
    # a compaction leaves files that overlap nothing, which the decoded path serves
    response = requests.post(f"{server.http_url}/api/v3/compact", timeout=60)
    assert response.ok, response.text
    queries = ["SELECT host, avg(usage) AS a, count(*) AS n FROM cpu GROUP BY host",
               "SELECT * FROM cpu WHERE host = 'h3' AND usage > 10",
               "SELECT count(*) AS n FROM cpu WHERE load IS NULL"]
    assert not any("file_groups" in plan(server, sql) for sql in queries)
    written = [sorted_rows(query_json(server.http_url, DB, sql)) for sql in queries]
    assert server.stop() == 0, server.log()
    server = spawn_quiver("--data-dir", "data", "--cache-enabled", "false", cwd=tmp_path)
    # nothing decoded yet: the first scan reads the file (and has it decoded)
    assert "file_groups" in plan(server, queries[0])
    first = [sorted_rows(query_json(server.http_url, DB, sql)) for sql in queries]
    assert first == written
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


# Time-bin grouping and series-by-series scans (both in quiver-query) against the same
# questions asked in shapes they do not recognise: `date_bin` with an explicit origin (the
# default one), `upper(host)` for `host`, `time + 0 s` for `time`.
NARROWED = [
    "SELECT date_bin(INTERVAL '1 minute', time) AS m, host, avg(usage) AS a, max(usage) AS x, "
    "count(*) AS n, min(load) AS l FROM cpu WHERE host IN ('h3', 'h17') "
    "AND time >= '1970-01-01T00:20:00Z' AND time < '1970-01-01T00:50:00Z' GROUP BY m, host",
    "SELECT date_bin(INTERVAL '1 hour', time) AS h, count(*) AS n, sum(load) AS s, "
    "avg(usage) AS a FROM cpu GROUP BY h",
    "SELECT host, date_bin(INTERVAL '5 minutes', time) AS b, min(load) AS lo, max(load) AS hi, "
    "sum(usage) AS s FROM cpu WHERE time < '1970-01-01T01:00:00Z' GROUP BY host, b",
    "SELECT * FROM cpu WHERE host = 'h5' AND time > '1970-01-01T00:30:00Z' "
    "AND time <= '1970-01-01T00:31:00Z'",
]


def unnarrowed(sql: str) -> str:
    """`sql` in a shape neither time-bin grouping nor series-by-series scans take."""
    return (sql.replace("time) AS", "time, TIMESTAMP '1970-01-01T00:00:00Z') AS")
            .replace("host IN ('h3', 'h17')", "upper(host) IN ('H3', 'H17')")
            .replace("host = 'h5'", "upper(host) = 'H5'")
            .replace("time >", "time + INTERVAL '0 seconds' >")
            .replace("time <", "time + INTERVAL '0 seconds' <"))


def test_the_readme_serve_command_groups_by_time_bins_and_narrows_scans(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    """The README's command (./quiver-data, default ports, caches on): grouping by a time bin
    (with and without a tag) and scans narrowed to the series and times asked for answer as
    the plain plan does, over the write buffer, over persisted files with a late write
    overlapping them, from decoded columns, and after a restart."""
    if not ports_free(DEFAULT_PORTS):
        pytest.fail(f"a default port of {DEFAULT_PORTS} is taken: stop whatever holds it")
    server = spawn_quiver(cwd=tmp_path, default_ports=True)
    url = server.http_url
    # 40 hosts, 10 s apart for 100 minutes: 24,000 rows, more than one batch of 8,192, so the
    # aggregates run in two stages (the partial one is what time-bin grouping replaces);
    # floats hold whole numbers, so sums are exact in any order
    lines = "".join(f"cpu,host=h{h},region=r{h % 3} usage={(h * 7 + t) % 97},load={t % 13}i "
                    f"{t * 10 * SECOND}\n" for h in range(40) for t in range(600))

    def answers() -> None:
        for sql in NARROWED:
            expected = sorted_rows(query_json(url, DB, unnarrowed(sql)))
            assert expected, unnarrowed(sql)
            assert sorted_rows(query_json(url, DB, sql)) == expected, sql

    write_ok(url, DB, lines)
    assert "DictionaryGroupExec: gby=[date_bin(60000000000ns, time), host]" in plan(
        server, NARROWED[0])
    assert "DictionaryGroupExec: gby=[host, date_bin(300000000000ns, time)]" in plan(
        server, NARROWED[2])
    answers()
    # the rows in files, then late writes into their range (an overlapping source) and new
    # ones in the buffer
    requests.post(f"{url}/api/v3/persist", timeout=60).raise_for_status()
    write_ok(url, DB, "cpu,host=h3,region=r0 usage=500,load=99i 1500000000000\n"
                      "cpu,host=h17,region=r2 usage=1 6100000000000\n")
    answers()
    requests.post(f"{url}/api/v3/compact", timeout=60).raise_for_status()
    query_json(url, DB, NARROWED[1])
    wait_until(lambda: "file_groups" not in plan(server, NARROWED[1]), 20,
               "the compacted file's columns decoded")
    answers()
    assert server.stop() == 0, server.log()
    server = spawn_quiver(cwd=tmp_path, default_ports=True)
    answers()


def uncached(url: str, sql: str) -> list[dict[str, Any]]:
    """`sql`'s rows, computed by the engine: the result cache is asked not to answer."""
    response = requests.get(f"{url}/api/v3/query_sql",
                            params={"db": DB, "q": sql, "format": "json"},
                            headers={"Cache-Control": "no-cache"}, timeout=60)
    assert response.status_code == 200, f"{sql}: {response.text[:2000]}"
    return response.json()


def uncached_rows(url: str, sql: str) -> list[str]:
    """`uncached`, sorted for comparing."""
    return sorted_rows(uncached(url, sql))


def physical_plan_hits(url: str) -> float:
    """Queries run from a kept physical plan so far (`/metrics`, a loopback client)."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    match = re.search(r"^quiver_plan_cache_physical_hits_total (\S+)$", text, re.MULTILINE)
    assert match, text[:2000]
    return float(match.group(1))


KEPT = NARROWED + ["SELECT count(*) AS n, sum(load) AS l, max(usage) AS u FROM cpu"]

# Time-ordered limits, which read each series' newest (oldest) rows only; ties broken by the
# series, so the rows asked for are the same in any plan.
TIME_ORDERED = [
    "SELECT host, region, time, load FROM cpu ORDER BY time DESC, host LIMIT 7",
    "SELECT host, time, usage FROM cpu WHERE host IN ('h3', 'h99') "
    "AND time < '1970-01-01T01:10:00Z' ORDER BY time DESC, host LIMIT 4",
    "SELECT host, time, usage FROM cpu ORDER BY time, host LIMIT 3 OFFSET 2",
]


def by_time_plainly(sql: str) -> str:
    """A time-ordered limit in a shape the shortcut does not take (the same order)."""
    return sql.replace("ORDER BY time", "ORDER BY time + INTERVAL '0 seconds'")


def test_the_readme_serve_command_reuses_plans_until_a_write_and_sees_every_write(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    """The README's command (./quiver-data, default ports, caches on, queries asked not to
    use the result cache): a statement asked again with nothing written between runs its kept
    physical plan (counted in `/metrics`) with the same answer; the first query after each of
    60 small writes (new points, late points, rewrites of a point's one field, a new series)
    sees it, as the plain shapes do, although the buffer it reads is now many sorted runs;
    and so after a persist and a restart."""
    if not ports_free(DEFAULT_PORTS):
        pytest.fail(f"a default port of {DEFAULT_PORTS} is taken: stop whatever holds it")
    server = spawn_quiver(cwd=tmp_path, default_ports=True)
    url = server.http_url
    points: dict[tuple[str, int], int] = {}  # (host, time) -> load
    lines = []
    for h in range(20):
        for t in range(300):
            points[(f"h{h}", t)] = t % 13
            lines.append(f"cpu,host=h{h},region=r{h % 3} usage={(h * 7 + t) % 97},"
                         f"load={t % 13}i {t * 10 * SECOND}\n")
    write_ok(url, DB, "".join(lines))

    def answers() -> None:
        for sql in KEPT:
            assert uncached_rows(url, sql) == uncached_rows(url, unnarrowed(sql)), sql
        for sql in TIME_ORDERED:
            assert uncached_rows(url, sql) == uncached_rows(url, by_time_plainly(sql)), sql

    answers()
    hits = physical_plan_hits(url)
    first = {sql: uncached_rows(url, sql) for sql in KEPT}
    again = {sql: uncached_rows(url, sql) for sql in KEPT}
    assert again == first
    assert physical_plan_hits(url) >= hits + len(KEPT), "nothing changed: kept plans ran"

    for step in range(60):
        host = f"h{step % 20}"
        region = f"r{step % 20 % 3}"
        if step % 4 == 1:  # late: an older point the buffer did not hold
            t = 300 + step
        elif step % 4 == 2:  # a rewrite of an existing point's load only
            t = step * 3
        else:  # newer than everything
            t = 400 + step
        if step == 30:
            host, region = "h99", "r9"  # a series none of the runs holds
        load = 100 + step
        write_ok(url, DB, f"cpu,host={host},region={region} load={load}i {t * 10 * SECOND}\n")
        points[(host, t)] = load
        [row] = uncached(url, KEPT[-1])
        assert (row["n"], row["l"]) == (len(points), sum(points.values())), (step, row)
        if t == 400 + step:  # the newest point of all: the first of a time-ordered limit
            [newest] = uncached(url, "SELECT host, load FROM cpu ORDER BY time DESC LIMIT 1")
            assert newest == {"host": host, "load": load}, (step, newest)
        if step % 6 == 5:
            answers()
    requests.post(f"{url}/api/v3/persist", timeout=60).raise_for_status()
    answers()
    assert server.stop() == 0, server.log()
    server = spawn_quiver(cwd=tmp_path, default_ports=True)
    url = server.http_url
    answers()
    # the same over PostgreSQL, as psycopg sends it
    with psycopg.connect(host="127.0.0.1", port=server.pg_port, user="quiver", dbname=DB,
                         connect_timeout=10, autocommit=True) as conn:
        for sql in TIME_ORDERED:
            rows = sorted(map(repr, conn.execute(sql).fetchall()))
            assert rows == sorted(map(repr, conn.execute(by_time_plainly(sql)).fetchall())), sql
            assert rows, sql
