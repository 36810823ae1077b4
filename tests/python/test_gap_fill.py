"""Gap filling in SQL (``date_bin_gapfill``, ``locf``, ``interpolate``) against the real
server: over HTTP, PostgreSQL (psycopg) and the influxdb3 client's Flight query, with data
written through the write API, answers compared with what they must be; refusals that say
what to write instead; the result cache never serving a stale filled answer.
"""

from __future__ import annotations

import io
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pytest
import requests
from influxdb_client_3 import InfluxDBClient3

from quiver_testlib import query, query_json, write_ok

DB = "gapfill"
S = 1_000_000_000

# host a: 0 s and 30 s; host b: 10 s and (outside the range) 70 s; c has a null average at 20 s
LINES = "\n".join([
    f"cpu,host=a usage=1 {0 * S}",
    f"cpu,host=a usage=4 {30 * S}",
    f"cpu,host=b usage=5 {10 * S}",
    f"cpu,host=b usage=9 {70 * S}",
    f"cpu,host=c idle=1i {20 * S}",
    f"cpu,host=c usage=2 {40 * S}",
])

FILLED = (
    "SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, host, avg(usage) AS a, "
    "locf(avg(usage)) AS l, interpolate(avg(usage)) AS i FROM cpu "
    "WHERE time >= '1970-01-01T00:00:00Z' AND time < '1970-01-01T00:00:50Z' "
    "GROUP BY 1, host ORDER BY host, t"
)

# (t in seconds, host, a, l, i)
EXPECTED: list[tuple[int, str, Any, Any, Any]] = [
    (0, "a", 1.0, 1.0, 1.0),
    (10, "a", None, 1.0, 2.0),
    (20, "a", None, 1.0, 3.0),
    (30, "a", 4.0, 4.0, 4.0),
    (40, "a", None, 4.0, None),
    (0, "b", None, None, None),
    (10, "b", 5.0, 5.0, 5.0),
    (20, "b", None, 5.0, None),
    (30, "b", None, 5.0, None),
    (40, "b", None, 5.0, None),
    (0, "c", None, None, None),
    (10, "c", None, None, None),
    (20, "c", None, None, None),
    (30, "c", None, None, None),
    (40, "c", 2.0, 2.0, 2.0),
]


def rfc3339(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@pytest.fixture(scope="module")
def filled_db(quiver_url: str) -> str:
    write_ok(quiver_url, DB, LINES)
    return quiver_url


def as_tuples(rows: list[dict[str, Any]]) -> list[tuple[str, str, Any, Any, Any]]:
    return [(r["t"], r["host"], r.get("a"), r.get("l"), r.get("i")) for r in rows]


def expected_with(time_text) -> list[tuple[Any, ...]]:
    return [(time_text(t), h, a, l, i) for (t, h, a, l, i) in EXPECTED]


def test_http_answers_every_bucket_of_every_series_filled(filled_db: str) -> None:
    rows = query_json(filled_db, DB, FILLED)
    assert as_tuples(rows) == expected_with(rfc3339)


def test_postgres_and_influxdb3_flight_give_the_same_answer(
        filled_db: str, quiver_pg_port: int) -> None:
    with psycopg.connect(host="127.0.0.1", port=quiver_pg_port, user="alice", dbname=DB,
                         autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(FILLED).fetchall()
    got = [(t.timestamp(), h, a, l, i) for (t, h, a, l, i) in rows]
    assert got == expected_with(float)

    with InfluxDBClient3(host=filled_db, token="", database=DB) as client:
        table = client.query(FILLED, language="sql")
    flight = list(zip(*[table.column(c).to_pylist() for c in ("t", "host", "a", "l", "i")]))
    assert [(t.timestamp(), *rest) for (t, *rest) in flight] == expected_with(float)


def test_a_range_relative_to_now_fills_up_to_the_present(quiver_url: str) -> None:
    db = "gapfill_now"
    now = time.time_ns()
    write_ok(quiver_url, db, f"cpu,host=x usage=7 {now - 45 * S}\ncpu,host=x usage=9 {now - 5 * S}")
    sql = ("SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, locf(max(usage)) AS m "
           "FROM cpu WHERE time >= now() - INTERVAL '1 minute' AND time <= now() GROUP BY 1 "
           "ORDER BY t")
    rows = query_json(quiver_url, db, sql)
    # the buckets holding now() - 1 minute to the one holding now(): seven
    assert len(rows) == 7, rows
    values = [r.get("m") for r in rows]
    first_seven = values.index(7.0)
    assert all(v is None for v in values[:first_seven]), values
    assert values[-1] == 9.0 and values.count(9.0) in (1, 2), values
    assert all(v == 7.0 for v in values[first_seven:values.index(9.0)]), values


def test_misuse_is_refused_with_what_to_write_instead(filled_db: str) -> None:
    cases = [
        ("SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, avg(usage) FROM cpu "
         "WHERE time >= '1970-01-01T00:00:00Z' GROUP BY 1", "needs an upper bound on time"),
        ("SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, avg(usage) FROM cpu "
         "GROUP BY 1", "needs a lower bound on time"),
        ("SELECT locf(usage) FROM cpu", "locf() is allowed only around an aggregate"),
        ("SELECT interpolate(host) FROM cpu",
         "interpolate() is allowed only around an aggregate"),
        ("SELECT date_bin_gapfill(INTERVAL '1 millisecond', time) AS t, avg(usage) FROM cpu "
         "WHERE time >= '1970-01-01T00:00:00Z' AND time < '1970-01-02T00:00:00Z' GROUP BY 1",
         "would make 86400000 buckets of 1ms per series"),
        ("SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, interpolate(max(host)) "
         "FROM cpu WHERE time >= '1970-01-01T00:00:00Z' AND time < '1970-01-01T00:01:00Z' "
         "GROUP BY 1", "interpolate() needs a numeric aggregate"),
    ]
    for sql, message in cases:
        response = query(filled_db, DB, sql)
        assert response.status_code == 400, (sql, response.status_code, response.text)
        error = response.json()["error"]
        assert message in error, (sql, error)
        assert "caused by" not in error, error
    # still up, the data intact
    assert as_tuples(query_json(filled_db, DB, FILLED)) == expected_with(rfc3339)


def test_an_answer_past_the_query_memory_is_refused_not_made(quiver_url: str) -> None:
    db = "gapfill_big"
    write_ok(quiver_url, db, "\n".join(f"cpu,host=h{i} usage=1 0" for i in range(2000)))
    sql = ("SELECT date_bin_gapfill(INTERVAL '1 second', time) AS t, host, locf(avg(usage)) "
           "FROM cpu WHERE time >= '1970-01-01T00:00:00Z' AND time < '1970-01-12T00:00:00Z' "
           "GROUP BY 1, host")
    started = time.monotonic()
    response = query(quiver_url, db, sql)
    assert response.status_code == 422, (response.status_code, response.text[:500])
    assert "would answer 1900800000 rows (2000 series x 950400 buckets" in response.text
    assert time.monotonic() - started < 30
    assert requests.get(f"{quiver_url}/health", timeout=10).status_code == 200


def test_the_result_cache_serves_a_filled_answer_until_a_write_changes_it(
        quiver_url: str) -> None:
    db = "gapfill_cache"
    write_ok(quiver_url, db, f"cpu,host=a usage=1 0\ncpu,host=a usage=3 {20 * S}")
    sql = ("SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, interpolate(avg(usage)) "
           "AS i FROM cpu WHERE time >= '1970-01-01T00:00:00Z' AND time < "
           "'1970-01-01T00:00:30Z' GROUP BY 1 ORDER BY t")
    first = query(quiver_url, db, sql)
    second = query(quiver_url, db, sql)
    assert second.headers["X-Quiver-Cache"] == "HIT"
    assert [r["i"] for r in first.json()] == [1.0, 2.0, 3.0] == [r["i"] for r in second.json()]
    write_ok(quiver_url, db, f"cpu,host=a usage=10 {10 * S}")
    third = query(quiver_url, db, sql)
    assert third.headers["X-Quiver-Cache"] == "MISS"
    assert [r["i"] for r in third.json()] == [1.0, 10.0, 3.0]


def test_gaps_stay_null_in_arrow_flight_and_parquet_answers(
        filled_db: str, quiver_flight_uri: str) -> None:
    """`count(*)` is never null in SQL, but it is in a gap: every format says so."""
    sql = ("SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, count(*) AS c FROM cpu "
           "WHERE host = 'b' AND time >= '1970-01-01T00:00:00Z' AND "
           "time < '1970-01-01T00:00:40Z' GROUP BY 1 ORDER BY t")
    arrow = query(filled_db, DB, sql, fmt="arrow")
    assert arrow.status_code == 200, arrow.text
    table = pa.ipc.open_stream(arrow.content).read_all()
    assert table.schema.field("c").nullable
    assert table.column("c").to_pylist() == [None, 1, None, None]
    # Flight SQL announces the schema it streams (ADBC checks)
    with flight_sql.connect(quiver_flight_uri,
                            db_kwargs={"adbc.flight.sql.rpc.call_header.database": DB},
                            autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(sql)
        assert cursor.fetch_arrow_table().column("c").to_pylist() == [None, 1, None, None]
    parquet = query(filled_db, DB, sql, fmt="parquet")
    assert parquet.status_code == 200, parquet.text
    assert pq.read_table(io.BytesIO(parquet.content)).column("c").to_pylist() == [None, 1, None,
                                                                                  None]


def test_any_order_asked_of_the_filled_rows_is_kept(filled_db: str) -> None:
    base = FILLED.rsplit(" ORDER BY ", 1)[0]
    rows = query_json(filled_db, DB, base + " ORDER BY host NULLS FIRST, t DESC")
    assert [(r["host"], r["t"]) for r in rows] == [
        (h, rfc3339(t)) for h in "abc" for t in (40, 30, 20, 10, 0)]
    rows = query_json(filled_db, DB, base + " ORDER BY i DESC NULLS LAST, host, t LIMIT 3")
    assert [(r["host"], r["t"], r["i"]) for r in rows] == [
        ("b", rfc3339(10), 5.0), ("a", rfc3339(30), 4.0), ("a", rfc3339(20), 3.0)]
