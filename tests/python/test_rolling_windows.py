"""Rolling-window dashboards under live ingest (issue 41), through the README's own
`quiver serve`: a window that moves with `now()` while points stream in at the newest end, late
points land in old stretches and old points are rewritten is answered in part from reused time
parts (`X-Quiver-Cache: PARTIAL`), and every answer equals the answer computed whole, over HTTP,
PostgreSQL and Flight SQL; a retention cutoff moving into the window and a dropped table are
never answered from parts they made stale; the stats and `/metrics` count what was reused.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import requests

from conftest import SpawnedServer
from quiver_testlib import HTTP_TIMEOUT_S, write_ok
from test_first_hour import readme_server
from test_metrics import sample

Spawn = Callable[..., SpawnedServer]
DB = "dash"
HOSTS = 3
MINUTE_NS = 60 * 1_000_000_000
DATABASE_HEADER = "adbc.flight.sql.rpc.call_header.database"
# the window starts on an hour (so it stays put while the test runs) and is open at the end
WINDOW = ("time >= date_bin(INTERVAL '1 hour', now()) - INTERVAL '3 hours'")
QUERIES = [
    f"SELECT date_bin(INTERVAL '1 minute', time) AS t, host, avg(usage) AS a, max(usage) AS m, "
    f"count(*) AS c FROM cpu WHERE {WINDOW} GROUP BY 1, 2 ORDER BY 1, 2",
    f"SELECT host, sum(n) AS s, min(usage) AS lo, last_value(usage ORDER BY time) AS last "
    f"FROM cpu WHERE {WINDOW} AND host <> 'h1' GROUP BY host ORDER BY s DESC LIMIT 5",
    f"SELECT date_bin(INTERVAL '10 minutes', time) AS t, count(usage) AS c FROM cpu "
    f"WHERE {WINDOW} AND usage > 40 GROUP BY 1 HAVING count(*) > 0 ORDER BY 1",
]


def points(times_ns: list[int], value: Callable[[int, int], int]) -> str:
    """A point per host at each time; integer values, so sums are exact in any order."""
    return "".join(f"cpu,host=h{h} usage={value(t, h)},n={h + 1}i {t}\n"
                   for t in times_ns for h in range(HOSTS))


def answer(server: SpawnedServer, sql: str, no_cache: bool = False) -> tuple[str, list]:
    headers = {"Cache-Control": "no-cache"} if no_cache else {}
    response = requests.get(f"{server.http_url}/api/v3/query_sql",
                            params={"db": DB, "q": sql}, headers=headers,
                            timeout=HTTP_TIMEOUT_S)
    assert response.status_code == 200, response.text
    return response.headers["X-Quiver-Cache"], response.json()


def cache_stats(server: SpawnedServer) -> dict:
    return requests.get(f"{server.http_url}/api/v3/cache", timeout=HTTP_TIMEOUT_S).json()


def assert_exact(server: SpawnedServer, sql: str, what: str) -> str:
    """The cached answer equals the answer computed whole just before or just after it (a
    retention cutoff may move between them; a stale answer equals neither). Returns the
    verdict."""
    _, before = answer(server, sql, no_cache=True)
    verdict, cached = answer(server, sql)
    _, after = answer(server, sql, no_cache=True)
    assert cached in (before, after), f"{what}: stale or wrong {verdict} answer for {sql}"
    return verdict


def settle_away_from_the_hour() -> None:
    """Waits if the wall clock is within two minutes of an hour (the window would move)."""
    into_hour = time.time() % 3600
    if into_hour > 3600 - 120:
        time.sleep(3600 - into_hour + 5)


def test_sliding_windows_reuse_parts_and_stay_exact(spawn_quiver: Spawn, tmp_path: Path):
    settle_away_from_the_hour()
    # the README's command, logging every query's verdict (as the README shows how)
    server = readme_server(spawn_quiver, tmp_path,
                           env={"QUIVER_LOG_FILTER": "quiver_service=debug,info"})
    now = time.time_ns() // MINUTE_NS * MINUTE_NS
    history = [now - m * MINUTE_NS for m in range(1, 5 * 60)]
    write_ok(server.http_url, DB, points(history, lambda t, h: (t // MINUTE_NS + h) % 100))

    verdicts: list[str] = []
    for refresh in range(12):
        stamp = time.time_ns()
        # the newest points, a late point in an old stretch, an old point rewritten
        lines = points([stamp], lambda t, h: refresh * 7 % 100)
        lines += f"cpu,host=h{refresh % HOSTS} usage=99,n=5i {now - 150 * MINUTE_NS + refresh}\n"
        lines += f"cpu,host=h0 usage={refresh},n=9i {history[60 + refresh * 5]}\n"
        write_ok(server.http_url, DB, lines)
        for sql in QUERIES:
            verdicts.append(assert_exact(server, sql, f"refresh {refresh}"))
    # the first round computes every part; every later one reuses those no write touched
    assert verdicts[:len(QUERIES)] == ["BYPASS"] * len(QUERIES), verdicts
    assert set(verdicts[len(QUERIES):]) == {"PARTIAL"}, verdicts
    # a plain scan of the window is computed whole on purpose (reusing rows measured slower)
    scan = f"SELECT time, host, usage FROM cpu WHERE {WINDOW} AND host <> 'h2' ORDER BY time, host"
    for attempt in range(2):
        assert assert_exact(server, scan, f"a plain scan, {attempt}") == "BYPASS"
    stats = cache_stats(server)
    assert stats["partial_hits"] >= verdicts.count("PARTIAL"), stats
    assert 0.5 < stats["part_rows_reused_ratio"] < 1, stats
    assert stats["parts"] > 0 and stats["part_bytes"] > 0, stats
    metrics = requests.get(f"{server.http_url}/metrics", timeout=HTTP_TIMEOUT_S).text
    assert sample(metrics, "quiver_result_cache_partial_hits_total") >= stats["partial_hits"]
    assert sample(metrics, "quiver_result_cache_part_rows_reused_total") > 0

    # PostgreSQL and Flight SQL reuse the same parts and give the same answers
    _, expected = answer(server, QUERIES[1], no_cache=True)
    partial_before = cache_stats(server)["partial_hits"]
    with psycopg.connect(host="127.0.0.1", port=5433, user="u", dbname=DB, autocommit=True,
                         connect_timeout=10) as conn:
        rows = conn.execute(QUERIES[1]).fetchall()
    assert [list(r) for r in rows] == [[r["host"], r["s"], r["lo"], r["last"]] for r in expected]
    with flight_sql.connect(server.flight_uri, db_kwargs={DATABASE_HEADER: DB}) as conn:
        with conn.cursor() as cursor:
            cursor.execute(QUERIES[1])
            flight_rows = cursor.fetchall()
    assert [list(r) for r in flight_rows] == [list(r) for r in rows]
    assert cache_stats(server)["partial_hits"] >= partial_before + 2
    # the log names the verdict whatever the protocol
    assert len(re.findall(r'verdict="?PARTIAL', server.log())) >= verdicts.count("PARTIAL") + 2

    # persisted to Parquet: the same answers, parts still reused
    assert requests.post(f"{server.http_url}/api/v3/persist",
                         timeout=HTTP_TIMEOUT_S).status_code == 200
    for sql in QUERIES:
        assert_exact(server, sql, "after a persist")
    assert assert_exact(server, QUERIES[0], "after a persist, again") == "PARTIAL"

    # a retention period whose cutoff moves into the window: parts before it are not reused
    response = requests.put(f"{server.http_url}/api/v3/configure/database",
                            json={"db": DB, "retention_period": "2h"}, timeout=HTTP_TIMEOUT_S)
    assert response.status_code in (200, 204), response.text
    for sql in QUERIES:
        assert_exact(server, sql, "after the retention period shrank")
    _, rows = answer(server, QUERIES[0])
    cutoff_s = (time.time_ns() - 2 * 3600 * 10**9) / 1e9
    oldest = min(r["t"] for r in rows)
    assert oldest >= time.strftime("%Y-%m-%dT%H:%M", time.gmtime(cutoff_s - 60)), oldest

    # the table dropped and written again: nothing of the old table is reused
    response = requests.delete(f"{server.http_url}/api/v3/configure/table",
                               params={"db": DB, "table": "cpu"}, timeout=HTTP_TIMEOUT_S)
    assert response.status_code == 200, response.text
    write_ok(server.http_url, DB, points(history[:30], lambda t, h: 1))
    for sql in QUERIES:
        assert_exact(server, sql, "after the table was dropped and written again")
    _, counted = answer(server, QUERIES[0])
    assert {r["c"] for r in counted} == {1}, counted
