"""Rollups end to end (issue 39), through the README's `quiver serve` (`./quiver-data`, default
ports) and the clients users have: a rollup is declared over HTTP, backfilled, kept up with
late writes and restarts, and used by queries on the base table without their asking, over
HTTP, PostgreSQL (psycopg) and Flight SQL (ADBC): every routed answer equals the raw answer
(`use_rollups=false`, `SET quiver.use_rollups = off`, the `x-quiver-use-rollups` header).
Hostile requests get a clear 4xx and lose nothing.

Field values are multiples of 1/4, so sums are exact in any order and answers compare exactly.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Callable

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import psycopg.errors
import pytest
import requests

from conftest import SpawnedServer
from quiver_testlib import HTTP_TIMEOUT_S, write_ok
from test_first_hour import readme_server

Spawn = Callable[..., SpawnedServer]
DB = "dash"
START_NS = 1_704_067_200_000_000_000  # 2024-01-01T00:00:00Z
ROLLUP_SQL = ("SELECT date_bin(INTERVAL '10 minutes', time) AS time, host, region, "
              "max(usage) AS max_usage, avg(usage) AS avg_usage, count(*) AS n, "
              "sum(requests) AS requests FROM cpu GROUP BY 1, 2, 3")
QUERIES = [
    "SELECT date_bin(INTERVAL '1 hour', time) AS hour, host, max(usage) AS m, count(*) AS n "
    "FROM cpu GROUP BY hour, host ORDER BY hour, host",
    "SELECT region, avg(usage) AS a, sum(requests) AS r FROM cpu "
    "WHERE time >= '2024-01-01T05:00:00Z' AND time < '2024-01-02T07:33:00Z' "
    "GROUP BY region ORDER BY region",
    "SELECT date_bin(INTERVAL '1 day', time) AS day, max(usage) AS m FROM cpu "
    "WHERE host = 'h3' GROUP BY day ORDER BY day",
]
PG_ADDR = ("127.0.0.1", 5433)
DATABASE_HEADER = "adbc.flight.sql.rpc.call_header.database"
NO_ROLLUPS_HEADER = "adbc.flight.sql.rpc.call_header.x-quiver-use-rollups"


def lines(rng: random.Random, count: int, minutes: range) -> str:
    out = []
    for _ in range(count):
        minute = rng.choice(minutes)
        host, region = rng.randrange(6), rng.randrange(2)
        t = START_NS + (minute * 60 + rng.randrange(60)) * 1_000_000_000 + host * 2 + region
        out.append(f"cpu,host=h{host},region=r{region} usage={rng.randrange(400) / 4},"
                   f"requests={rng.randrange(100)}i {t}")
    return "\n".join(out) + "\n"


def http_sql(server: SpawnedServer, statement: str, **params: str) -> requests.Response:
    return requests.get(f"{server.http_url}/api/v3/query_sql",
                        params={"db": DB, "q": statement, **params}, timeout=HTTP_TIMEOUT_S)


def answer(server: SpawnedServer, statement: str, **params: str) -> list[dict[str, Any]]:
    response = http_sql(server, statement, **params)
    assert response.status_code == 200, response.text
    return response.json()


def rollups(server: SpawnedServer) -> list[dict[str, Any]]:
    response = requests.get(f"{server.http_url}/api/v3/configure/rollup",
                            params={"db": DB}, timeout=HTTP_TIMEOUT_S)
    assert response.status_code == 200, response.text
    return response.json()


def wait_caught_up(server: SpawnedServer) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        (rollup,) = rollups(server)
        if rollup["state"] == "ready" and rollup["lag_seconds"] == 0:
            return rollup
        time.sleep(0.1)
    raise AssertionError(f"the rollup did not catch up: {rollups(server)}")


def assert_routed_equals_raw(server: SpawnedServer, when: str) -> None:
    for statement in QUERIES:
        routed = http_sql(server, statement)
        assert routed.status_code == 200, routed.text
        raw = answer(server, statement, use_rollups="false")
        assert routed.json() == raw, f"{when}: {statement}"
        assert routed.headers["x-quiver-cache"] in ("MISS", "HIT")


def explain(server: SpawnedServer, statement: str) -> str:
    return "\n".join(row["plan"] for row in answer(server, f"EXPLAIN {statement}"))


def test_a_rollup_answers_dashboards_exactly_over_every_protocol(spawn_quiver: Spawn,
                                                                 tmp_path: Path) -> None:
    server = readme_server(spawn_quiver, tmp_path)
    rng = random.Random(39)
    write_ok(server.http_url, DB, lines(rng, 20_000, range(3 * 24 * 60)))
    created = requests.post(f"{server.http_url}/api/v3/configure/rollup",
                            json={"db": DB, "name": "cpu_10m", "sql": ROLLUP_SQL},
                            timeout=HTTP_TIMEOUT_S)
    assert created.status_code == 200, created.text
    assert created.json()["state"] in ("backfilling", "ready")
    # routing never waits and never changes an answer: not even while backfilling
    assert_routed_equals_raw(server, "backfilling")
    rollup = wait_caught_up(server)
    assert rollup["rows"] > 0 and rollup["bytes"] > 0 and rollup["covered_fraction"] == 1.0
    assert rollup["tags"] == ["host", "region"]
    assert_routed_equals_raw(server, "ready")
    for statement in QUERIES:
        plan = explain(server, statement)
        assert "rollup cpu_10m: used for cpu" in plan and "TableScan: rollup:cpu_10m" in plan
    assert "not used" in explain(server, "SELECT host, min(usage) FROM cpu GROUP BY host")
    # late and rewritten points land in old buckets: the answer follows at once
    write_ok(server.http_url, DB, lines(rng, 500, range(100, 103)))
    assert_routed_equals_raw(server, "after late writes")
    wait_caught_up(server)
    assert_routed_equals_raw(server, "after late writes, caught up")
    # the rollup is a read-only table of its database
    table = answer(server, "SELECT host, region, max(max_usage) AS m FROM cpu_10m "
                           "GROUP BY host, region ORDER BY host, region")
    raw = answer(server, "SELECT host, region, max(usage) AS m FROM cpu "
                         "GROUP BY host, region ORDER BY host, region", use_rollups="false")
    assert table == raw
    refused = requests.post(f"{server.http_url}/api/v3/write_lp", params={"db": DB},
                            data="cpu_10m,host=x max_usage=1 1", timeout=HTTP_TIMEOUT_S)
    assert refused.status_code == 400 and "read-only" in refused.text

    with psycopg.connect(host=PG_ADDR[0], port=PG_ADDR[1], user="u", dbname=DB,
                         autocommit=True, connect_timeout=10) as conn:
        routed = conn.execute(QUERIES[0]).fetchall()
        conn.execute("SET quiver.use_rollups = off")
        assert conn.execute("SHOW quiver.use_rollups").fetchone() == ("off",)
        assert conn.execute(QUERIES[0]).fetchall() == routed
        plan = "\n".join(r[1] for r in conn.execute(f"EXPLAIN {QUERIES[0]}").fetchall())
        assert "use_rollups is off" in plan and "TableScan: rollup" not in plan
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute("SET quiver.use_rollups = sometimes")
        assert conn.execute("SELECT count(*) FROM cpu").fetchone()[0] > 0

    routed_flight = None
    for use_rollups in ("true", "false"):
        with flight_sql.connect(server.flight_uri,
                                db_kwargs={DATABASE_HEADER: DB,
                                           NO_ROLLUPS_HEADER: use_rollups}) as conn:
            with conn.cursor() as cursor:
                cursor.execute(QUERIES[1])
                rows = cursor.fetchall()
        routed_flight = routed_flight or rows
        assert rows == routed_flight

    # a restart loads the rollup as it was; WAL replay marks what it replays
    server.stop()
    server = readme_server(spawn_quiver, tmp_path)
    (reloaded,) = rollups(server)
    assert reloaded["name"] == "cpu_10m" and reloaded["state"] == "ready"
    assert_routed_equals_raw(server, "after a restart")
    wait_caught_up(server)
    assert "rollup cpu_10m: used" in explain(server, QUERIES[0])

    dropped = requests.delete(f"{server.http_url}/api/v3/configure/rollup",
                              params={"db": DB, "name": "cpu_10m"}, timeout=HTTP_TIMEOUT_S)
    assert dropped.status_code == 200, dropped.text
    assert rollups(server) == []
    assert "TableScan: rollup" not in explain(server, QUERIES[0])
    assert not (tmp_path / "quiver-data" / "rollups" / "1").exists()


def test_hostile_rollup_requests_get_clear_errors_and_lose_nothing(spawn_quiver: Spawn,
                                                                   tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    write_ok(server.http_url, DB, "cpu,host=a,region=x usage=1,requests=1i 1\n"
                                  "cpu,host=b,region=y usage=2,requests=2i 2\n")
    url = f"{server.http_url}/api/v3/configure/rollup"
    good = {"db": DB, "name": "r", "sql": ROLLUP_SQL}
    cases: list[tuple[Any, int, str]] = [
        (b"{", 400, "invalid request body"),
        (b"", 400, "invalid request body"),
        (b"[1, 2]", 400, "invalid request body"),
        ({**good, "extra": 1}, 400, "unknown field"),
        ({"db": DB, "name": "r"}, 400, "missing field"),
        ({**good, "sql": 5}, 400, "invalid type"),
        ({**good, "sql": "SELECT 1; DROP TABLE cpu"}, 400, "single SQL statement"),
        ({**good, "sql": "SELECT date_bin(INTERVAL '1 hour', time) AS time, "
                         "percentile_cont(usage, 0.5) FROM cpu GROUP BY 1"}, 400,
         "cannot be maintained exactly"),
        ({**good, "sql": "SELECT date_bin(INTERVAL '1 hour', time) AS time, max(usage) "
                         "FROM cpu WHERE usage > 1 GROUP BY 1"}, 400, "field"),
        ({**good, "sql": "SELECT " + "(" * 5000 + "1" + ")" * 5000}, 400, "RecursionLimitExceeded"),
        ({**good, "name": ""}, 400, "invalid table name"),
        ({**good, "name": "x" * 100_000}, 400, "invalid table name"),
        ({**good, "name": "cpu"}, 409, "already exists"),
        ({**good, "db": "nowhere"}, 404, "nowhere"),
        ({**good, "sql": good["sql"].replace("FROM cpu", "FROM nothing")}, 400, "nothing"),
    ]
    for body, status, text in cases:
        if isinstance(body, bytes):
            response = requests.post(url, data=body, timeout=HTTP_TIMEOUT_S)
        else:
            response = requests.post(url, json=body, timeout=HTTP_TIMEOUT_S)
        assert response.status_code == status, (body if len(str(body)) < 300 else "long",
                                                response.text[:500])
        assert text in response.json()["error"], response.text[:500]
    assert requests.post(url, json=good, timeout=HTTP_TIMEOUT_S).status_code == 200
    assert requests.post(url, json=good, timeout=HTTP_TIMEOUT_S).status_code == 409
    for params, status in [({"db": DB, "name": "nope"}, 404), ({"db": DB}, 400),
                           ({"db": DB, "name": "r", "x": "1"}, 400)]:
        response = requests.delete(url, params=params, timeout=HTTP_TIMEOUT_S)
        assert response.status_code == status, (params, response.text)
    assert requests.get(url, params={"nope": "1"}, timeout=HTTP_TIMEOUT_S).status_code == 400
    bad_switch = http_sql(server, "SELECT count(*) FROM cpu", use_rollups="sometimes")
    assert bad_switch.status_code == 400 and "use_rollups" in bad_switch.text
    # the server is up and nothing was lost
    assert answer(server, "SELECT count(*) AS n FROM cpu") == [{"n": 2}]
    assert [r["name"] for r in rollups(server)] == ["r"]
