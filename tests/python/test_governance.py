"""Query governance (issue 24), seen from outside with real clients: hostile queries end in a
clear error naming the limit and the setting, with the server alive, its resident memory under
its ceiling and earlier data intact; time limits and cancellation stop a query on every
protocol (HTTP parameter and client disconnect, PostgreSQL `statement_timeout` and
CancelRequest, the Flight deadline and ADBC cancel, `DELETE /api/v3/queries/{id}`); admission
queues and refuses as configured, and never holds back a result-cache hit; big answers stream
with bounded memory, and an answer that fails after rows went out is cut short, never a
silent truncated success.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pytest
import requests

from conftest import DEFAULT_PORTS, SpawnedServer
from quiver_testlib import ports_free, query_json, wait_until, write_ok

DB = "gov"
Spawn = Callable[..., SpawnedServer]
DATABASE_HEADER = "adbc.flight.sql.rpc.call_header.database"
MIB = 1 << 20
QUERY_MEMORY = 256 * MIB
SERVER_CEILING = 3 * 1024 * MIB
ENDLESS = "SELECT count(*) FROM generate_series(1, 1000000000000) t(v)"
CROSS_JOIN = ("SELECT count(*) FROM generate_series(1, 300000) a(x) "
              "CROSS JOIN generate_series(1, 300000) b(y)")
ENDLESS_RECURSION = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
                     "SELECT count(*) FROM r")


def resident_bytes(server: SpawnedServer) -> int:
    """The server process's resident memory (VmRSS)."""
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def sql(server: SpawnedServer, statement: str, **params: Any) -> requests.Response:
    return requests.get(f"{server.http_url}/api/v3/query_sql",
                        params={"db": DB, "q": statement, **params}, timeout=120)


def running(server: SpawnedServer) -> list[dict[str, Any]]:
    response = requests.get(f"{server.http_url}/api/v3/queries", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["queries"]


def wait_for_query(server: SpawnedServer, fragment: str, state: str = "running",
                   timeout_s: float = 20) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def listed() -> bool:
        found[:] = [q for q in running(server) if fragment in q["sql"] and q["state"] == state]
        return bool(found)

    wait_until(listed, timeout_s, f"a {state} query containing {fragment!r}")
    return found[0]


def wait_until_idle(server: SpawnedServer, timeout_s: float = 3) -> None:
    wait_until(lambda: not running(server), timeout_s, "no query running or queued")


@pytest.fixture
def governed(spawn_quiver: Spawn, tmp_path: Path) -> SpawnedServer:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"),
                          "--query-memory-bytes", str(QUERY_MEMORY),
                          "--max-server-memory-bytes", str(SERVER_CEILING), cwd=tmp_path)
    write_ok(server.http_url, DB, "cpu,host=a usage=1 1\ncpu,host=b usage=2 2\n")
    return server


HOSTILE = [
    # (statement, extra HTTP parameters, status, words the error must contain)
    ("SELECT array_agg(v) FROM generate_series(1, 300000000) t(v)", {}, 422,
     ["query_memory_bytes", str(QUERY_MEMORY)]),
    ("SELECT repeat('x', 2000000000)", {}, 422, ["max_value_bytes", "repeat", "for one value"]),
    ("SELECT cardinality(generate_series(1, 2000000000))", {}, 422,
     ["max_value_bytes", "generate_series"]),
    ("SELECT lpad('x', 2000000000)", {}, 422, ["max_value_bytes", "lpad"]),
    ("SELECT array_repeat(1.5, 2000000000)", {}, 422, ["max_value_bytes", "array_repeat"]),
    ("SELECT repeat(CAST(v AS VARCHAR), 100000) FROM generate_series(1, 100000) t(v)", {}, 422,
     ["query_memory_bytes", "for one batch of"]),
    # a long literal repeated per row is judged without being copied to every row (every
    # row's value is over max_value_bytes, whichever batch of generate_series's partitions is
    # judged first: with small counts in the first batch, the batch limit could speak first)
    ("SELECT repeat('" + "y" * 20_000 + "', CAST(v AS BIGINT) + 20000) "
     "FROM generate_series(1, 50000) t(v)",
     {}, 422, ["max_value_bytes"]),
    ("SELECT string_agg(repeat('x', 1000), ',') FROM generate_series(1, 2000000) t(v)", {},
     422, ["query_memory_bytes"]),
    (CROSS_JOIN, {"timeout_secs": "1"}, 504, ["time limit", "timeout_secs"]),
    (ENDLESS_RECURSION, {"timeout_secs": "1"}, 504, ["timeout_secs"]),
    ("SELECT " + "(" * 5000 + "1" + ")" * 5000, {}, 400, []),
]


@pytest.mark.parametrize("statement,params,status,words", HOSTILE,
                         ids=[h[0][:40] for h in HOSTILE])
def test_a_hostile_query_gets_a_clear_error_and_the_server_stays_whole(
        governed: SpawnedServer, statement: str, params: dict[str, str], status: int,
        words: list[str]) -> None:
    started = time.monotonic()
    response = sql(governed, statement, **params)
    assert response.status_code == status, response.text[:500]
    error = response.json()["error"]
    for word in words:
        assert word in error, error
    assert time.monotonic() - started < 60
    assert resident_bytes(governed) < SERVER_CEILING
    assert governed.proc.poll() is None
    wait_until_idle(governed)
    assert [r["usage"] for r in query_json(governed.http_url, DB,
                                           "SELECT usage FROM cpu ORDER BY time")] == [1, 2]


def test_errors_over_postgresql_and_flight_carry_their_codes(governed: SpawnedServer) -> None:
    with psycopg.connect(host="127.0.0.1", port=governed.pg_port, dbname=DB, user="u",
                         autocommit=True) as conn:
        with pytest.raises(psycopg.errors.ProgramLimitExceeded):  # 54000
            conn.execute("SELECT repeat('x', 2000000000)")
        with pytest.raises(psycopg.errors.OutOfMemory):  # 53200
            conn.execute("SELECT array_agg(v) FROM generate_series(1, 300000000) t(v)")
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (2,)
    with flight_sql.connect(governed.flight_uri,
                            db_kwargs={DATABASE_HEADER: DB}) as conn, conn.cursor() as cur:
        with pytest.raises(flight_sql.Error) as caught:
            cur.execute("SELECT repeat('x', 2000000000)")
            cur.fetchall()
        assert "max_value_bytes" in str(caught.value)
        assert "RESOURCE_EXHAUSTED" in str(caught.value) or "resource" in str(
            caught.value).lower()


def chained(levels: int) -> dict[str, tuple[str, Any]]:
    """Statements nested `levels` deep by chains of operators (over `cpu`: usage 1 and 2),
    and what each answers (HTTP JSON rows)."""
    return {
        "plus": ("SELECT " + "+".join(["usage"] * levels) + " AS s FROM cpu ORDER BY s",
                 [{"s": levels}, {"s": 2 * levels}]),
        "or": ("SELECT count(*) AS n FROM cpu WHERE "
               + " OR ".join(f"host = 'h{i}'" for i in range(levels - 1)) + " OR host = 'b'",
               [{"n": 1}]),
        "union": (" UNION ALL ".join(f"SELECT {i} AS v" for i in range(levels)),
                  levels),
        "cast": ("SELECT usage" + "::DOUBLE" * levels + " AS u FROM cpu ORDER BY u",
                 [{"u": 1}, {"u": 2}]),
    }


def post_sql(server: SpawnedServer, statement: str) -> requests.Response:
    return requests.post(f"{server.http_url}/api/v3/query_sql",
                         headers={"Cache-Control": "no-cache"},
                         json={"db": DB, "q": statement, "format": "json"}, timeout=120)


def test_deeply_nested_statements_are_answered_up_to_the_depth_limit_and_refused_past_it(
        governed: SpawnedServer) -> None:
    """A thousand `UNION ALL`s (25 KB) used to overflow a thread's stack and abort the server:
    statements up to `max_sql_depth` (1,000) levels deep are answered on every protocol,
    deeper or longer ones refused with the setting named, and the server stays up."""
    for name, (statement, expected) in chained(990).items():
        response = post_sql(governed, statement)
        assert response.status_code == 200, (name, response.text[:300])
        rows = response.json()
        assert (len(rows) if isinstance(expected, int) else rows) == expected, name
    with psycopg.connect(host="127.0.0.1", port=governed.pg_port, dbname=DB, user="u",
                         autocommit=True) as conn:
        # not the same text as over HTTP: no cached answer
        statement = chained(980)["plus"][0]
        assert conn.execute(statement).fetchall() == [(980.0,), (1960.0,)]
        with pytest.raises(psycopg.errors.StatementTooComplex) as too_deep:  # 54001
            conn.execute(chained(1001)["union"][0])
        assert "max_sql_depth = 1000" in str(too_deep.value)
        with pytest.raises(psycopg.errors.ProgramLimitExceeded) as too_long:  # 54000
            conn.execute("SELECT '" + "x" * (2 * MIB) + "'")
        assert "max_sql_bytes = 1048576" in str(too_long.value)
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (2,)
    with flight_sql.connect(governed.flight_uri,
                            db_kwargs={DATABASE_HEADER: DB}) as conn, conn.cursor() as cur:
        cur.execute(chained(970)["cast"][0])
        assert [row[0] for row in cur.fetchall()] == [1.0, 2.0]
        with pytest.raises(flight_sql.Error) as caught:
            cur.execute(chained(1001)["or"][0])
            cur.fetchall()
        assert "max_sql_depth" in str(caught.value)
        assert "INVALID_ARGUMENT" in str(caught.value) or "invalid" in str(caught.value).lower()
    for name, (statement, _) in chained(1001).items():
        response = post_sql(governed, statement)
        assert response.status_code == 422, (name, response.text[:300])
        assert "max_sql_depth = 1000" in response.json()["error"], name
    # far deeper than any stack could walk: measured and freed on a stack of its own
    response = post_sql(governed, "SELECT " + "+".join(["1"] * 400_000))
    assert response.status_code == 422, response.text[:300]
    assert "max_sql_depth" in response.json()["error"]
    response = post_sql(governed, "SELECT " + "+".join(["1"] * 600_000))
    assert response.status_code == 413, response.text[:300]
    assert "max_sql_bytes = 1048576" in response.json()["error"]
    assert governed.proc.poll() is None
    assert [r["usage"] for r in query_json(governed.http_url, DB,
                                           "SELECT usage FROM cpu ORDER BY time")] == [1, 2]


def test_the_readme_serve_command_bounds_statements_with_its_defaults(spawn_quiver: Spawn,
                                                                    tmp_path: Path) -> None:
    """`quiver serve` as the README runs it (./quiver-data, default ports and limits): a
    chain of 990 `UNION ALL`s is answered, one of 1,001 refused, over HTTP and psycopg."""
    if not ports_free(DEFAULT_PORTS):
        pytest.fail(f"a default port of {DEFAULT_PORTS} is taken: stop whatever holds it")
    server = spawn_quiver(cwd=tmp_path, default_ports=True)
    write_ok(server.http_url, DB, "cpu,host=a usage=1 1\ncpu,host=b usage=2 2\n")
    assert (tmp_path / "quiver-data").is_dir()
    answered = post_sql(server, chained(990)["union"][0])
    assert answered.status_code == 200, answered.text[:300]
    assert sorted(row["v"] for row in answered.json()) == list(range(990))
    refused = post_sql(server, chained(1001)["union"][0])
    assert refused.status_code == 422, refused.text[:300]
    assert "max_sql_depth = 1000" in refused.json()["error"]
    with psycopg.connect(host="127.0.0.1", port=server.pg_port, dbname=DB, user="u",
                         autocommit=True) as conn:
        assert len(conn.execute(chained(989)["union"][0]).fetchall()) == 989
        with pytest.raises(psycopg.errors.StatementTooComplex):
            conn.execute(chained(1002)["union"][0])
    assert server.proc.poll() is None


def test_max_sql_depth_can_be_lowered(spawn_quiver: Spawn, tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), "--max-sql-depth", "50",
                          cwd=tmp_path)
    write_ok(server.http_url, DB, "cpu,host=a usage=1 1\ncpu,host=b usage=2 2\n")
    statement, expected = chained(45)["plus"]
    assert post_sql(server, statement).json() == expected
    response = post_sql(server, chained(60)["plus"][0])
    assert response.status_code == 422, response.text[:300]
    assert "max_sql_depth = 50" in response.json()["error"]


def test_a_big_sort_spills_to_disk_instead_of_failing(spawn_quiver: Spawn,
                                                      tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    server = spawn_quiver("--data-dir", str(data_dir), "--query-memory-bytes", str(64 * MIB),
                          cwd=tmp_path)
    write_ok(server.http_url, DB, "cpu,host=a usage=1 1\n")
    statement = ("SELECT sum(r * v) AS s FROM (SELECT v, row_number() OVER (ORDER BY v DESC) "
                 "AS r FROM generate_series(1, 6000000) t(v)) w")
    response = sql(server, statement)
    assert response.status_code == 200, response.text[:500]
    n = 6_000_000
    # row r holds v = n + 1 - r: the sum of r * (n + 1 - r)
    assert response.json()[0]["s"] == sum(r * (n + 1 - r) for r in range(1, n + 1))
    analyzed = sql(server, "EXPLAIN ANALYZE " + statement, format="jsonl").text
    spills = [int(part.split("=")[1].rstrip(",]")) for part in analyzed.split()
              if part.startswith("spill_count=")]
    assert spills and max(spills) > 0, analyzed[:3000]
    assert (data_dir / "spill").is_dir()


def test_the_spill_directory_is_emptied_at_start(spawn_quiver: Spawn, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    stale = data_dir / "spill" / "datafusion-old" / "leftover.arrow"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"x" * 1000)
    spawn_quiver("--data-dir", str(data_dir), cwd=tmp_path)
    assert not stale.exists()
    assert (data_dir / "spill").is_dir()


def test_time_limits_on_every_protocol(spawn_quiver: Spawn, tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), "--query-timeout-secs", "3",
                          cwd=tmp_path)
    write_ok(server.http_url, DB, "cpu,host=a usage=1 1\n")
    # the server's own limit
    started = time.monotonic()
    response = sql(server, ENDLESS)
    assert response.status_code == 504, response.text
    assert "query_timeout_secs" in response.json()["error"]
    assert 2.5 < time.monotonic() - started < 10
    # a request may lower it, never raise it
    started = time.monotonic()
    response = sql(server, ENDLESS, timeout_secs="0.5")
    assert response.status_code == 504 and "timeout_secs" in response.json()["error"]
    assert time.monotonic() - started < 2.5
    response = sql(server, ENDLESS, timeout_secs="60")
    assert response.status_code == 504 and "query_timeout_secs" in response.json()["error"]
    # a limit past the end of time is no limit beyond the server's
    response = sql(server, ENDLESS, timeout_secs="1e19")
    assert response.status_code == 504 and "query_timeout_secs" in response.json()["error"]
    for bad in ["0", "-1", "soon", "1e400"]:
        response = sql(server, "SELECT 1", timeout_secs=bad)
        assert response.status_code == 400, response.text
        assert "timeout_secs" in response.json()["error"]
    # PostgreSQL: statement_timeout, 57014, the session still usable
    with psycopg.connect(host="127.0.0.1", port=server.pg_port, dbname=DB, user="u",
                         autocommit=True) as conn:
        conn.execute("SET statement_timeout = '500ms'")
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled) as caught:
            conn.execute(ENDLESS)
        assert time.monotonic() - started < 2.5
        assert "statement_timeout" in str(caught.value)
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute("SET statement_timeout = 'whenever'")
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute("SET statement_timeout = '" + "9" * 40 + "'")
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (1,)
    # Flight SQL: the client's deadline
    with flight_sql.connect(server.flight_uri, db_kwargs={DATABASE_HEADER: DB}) as conn:
        with conn.cursor() as cur:
            cur.adbc_statement.set_options(
                **{"adbc.flight.sql.rpc.timeout_seconds.fetch": "1",
                   "adbc.flight.sql.rpc.timeout_seconds.query": "1"})
            started = time.monotonic()
            with pytest.raises(flight_sql.Error):
                cur.execute(ENDLESS)
                cur.fetchall()
            assert time.monotonic() - started < 3
    wait_until_idle(server, 3)


def test_cancellation_on_every_protocol_releases_the_query(governed: SpawnedServer) -> None:
    # HTTP: the client goes away
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.get(f"{governed.http_url}/api/v3/query_sql",
                     params={"db": DB, "q": ENDLESS}, timeout=1)
    wait_until_idle(governed, 2)
    # HTTP: an operator cancels it (DELETE), the caller gets 499 saying so
    outcome: dict[str, requests.Response] = {}
    caller = threading.Thread(target=lambda: outcome.update(r=sql(governed, ENDLESS)))
    caller.start()
    listed = wait_for_query(governed, "1000000000000")
    assert listed["protocol"] == "http" and listed["db"] == DB
    assert listed["elapsed_secs"] >= 0 and listed["memory_bytes"] >= 0
    deleted = requests.delete(f"{governed.http_url}/api/v3/queries/{listed['id']}", timeout=10)
    assert deleted.status_code == 204
    caller.join(5)
    assert outcome["r"].status_code == 499
    assert f"query id {listed['id']}" in outcome["r"].json()["error"]
    assert requests.delete(f"{governed.http_url}/api/v3/queries/{listed['id']}",
                           timeout=10).status_code == 404
    wait_until_idle(governed, 2)
    # PostgreSQL: CancelRequest
    with psycopg.connect(host="127.0.0.1", port=governed.pg_port, dbname=DB, user="u",
                         autocommit=True) as conn:
        timer = threading.Timer(0.7, conn.cancel)
        timer.start()
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(ENDLESS)
        wait_until_idle(governed, 2)
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (2,)
    # Flight SQL: ADBC cancel
    with flight_sql.connect(governed.flight_uri, db_kwargs={DATABASE_HEADER: DB}) as conn:
        with conn.cursor() as cur:
            timer = threading.Timer(0.7, cur.adbc_cancel)
            timer.start()
            with pytest.raises(flight_sql.Error):
                cur.execute(ENDLESS)
                cur.fetchall()
    wait_until_idle(governed, 3)


def test_admission_queues_in_order_refuses_past_the_queue_and_never_holds_cache_hits(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), "--max-concurrent-queries", "1",
                          "--max-queued-queries", "1", cwd=tmp_path)
    write_ok(server.http_url, DB, "cpu,host=a usage=1 1\n")
    cached = sql(server, "SELECT count(*) AS n FROM cpu")
    assert cached.headers["x-quiver-cache"] == "MISS"
    outcomes: dict[str, requests.Response] = {}
    first = threading.Thread(target=lambda: outcomes.update(a=sql(server, ENDLESS + " -- a")))
    first.start()
    wait_for_query(server, "-- a")
    second = threading.Thread(
        target=lambda: outcomes.update(b=sql(server, "SELECT 42 AS answer -- b")))
    second.start()
    queued = wait_for_query(server, "-- b", state="queued")
    # the queue is full: refused at once, on every protocol
    refused = sql(server, "SELECT 1 -- c")
    assert refused.status_code == 503, refused.text
    assert refused.headers.get("retry-after") == "1"
    assert "max_concurrent_queries" in refused.json()["error"]
    with psycopg.connect(host="127.0.0.1", port=server.pg_port, dbname=DB, user="u",
                         autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientResources):  # 53000
            conn.execute("SELECT 1 -- d")
    with flight_sql.connect(server.flight_uri, db_kwargs={DATABASE_HEADER: DB}) as conn:
        with conn.cursor() as cur, pytest.raises(flight_sql.Error) as caught:
            cur.execute("SELECT 1 -- e")
            cur.fetchall()
        assert "UNAVAILABLE" in str(caught.value) or "busy" in str(caught.value)
    # a cached answer does not wait
    started = time.monotonic()
    hit = sql(server, "SELECT count(*) AS n FROM cpu")
    assert hit.status_code == 200 and hit.headers["x-quiver-cache"] == "HIT"
    assert time.monotonic() - started < 1
    # the running query leaves; the queued one runs
    deleted = requests.delete(f"{server.http_url}/api/v3/queries/"
                              f"{wait_for_query(server, '-- a')['id']}", timeout=10)
    assert deleted.status_code == 204
    first.join(10)
    second.join(10)
    assert outcomes["a"].status_code == 499
    assert outcomes["b"].status_code == 200 and outcomes["b"].json() == [{"answer": 42}]
    assert queued["state"] == "queued"
    wait_until_idle(server)


def stream_slowly(server: SpawnedServer, rows: int, headers: dict[str, str]) -> tuple[int, int]:
    """Reads a `rows`-row JSON Lines answer slowly; returns the rows read and the server's peak
    resident memory growth while it was read."""
    before = resident_bytes(server)
    started = time.monotonic()
    with requests.get(f"{server.http_url}/api/v3/query_sql",
                      params={"db": DB, "format": "jsonl",
                              "q": f"SELECT v, v * 2 AS w FROM generate_series(1, {rows}) t(v)"},
                      headers=headers, stream=True, timeout=120) as response:
        assert response.status_code == 200
        lines = response.iter_lines(chunk_size=64 << 10)
        first = json.loads(next(lines))
        assert first["w"] == 2 * first["v"]
        assert time.monotonic() - started < 5, "the first rows came late"
        count, peak = 1, before
        for count, _ in enumerate(lines, start=2):
            if count % 250_000 == 0:
                time.sleep(0.2)  # a slow reader
                peak = max(peak, resident_bytes(server))
    return count, peak - before


def test_a_big_answer_streams_with_bounded_memory(governed: SpawnedServer) -> None:
    rows = 3_000_000  # ~80 MB of JSON Lines, ~50 MB as Arrow
    # past the cache: the server holds a few batches at a time
    count, growth = stream_slowly(governed, rows, {"Cache-Control": "no-cache"})
    assert count == rows
    assert growth < 48 * MIB, growth
    # a cacheable answer is collected up to cache_max_entry_bytes (64 MiB) before it is
    # known to be too big to keep, then streams the same way: within the query's bound
    count, growth = stream_slowly(governed, rows, {})
    assert count == rows
    assert growth < QUERY_MEMORY, growth


def test_a_client_that_stops_reading_loses_its_slot(spawn_quiver: Spawn, tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), "--max-concurrent-queries", "1",
                          "--query-stall-timeout-secs", "2", cwd=tmp_path)
    write_ok(server.http_url, DB, "cpu,host=a usage=1 1\n")
    port = int(server.http_url.rsplit(":", 1)[1])
    statement = "SELECT v, repeat('x', 100) AS pad FROM generate_series(1, 100000000) t(v)"
    request = (f"GET /api/v3/query_sql?db={DB}&format=jsonl&q={quote(statement)} HTTP/1.1\r\n"
               f"Host: localhost\r\nCache-Control: no-cache\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as stalled:
        # a small receive buffer, never read: the server's sends back up within a few batches
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.sendall(request)
        wait_for_query(server, "repeat('x', 100)")
        started = time.monotonic()
        # the only slot is taken until the stall limit frees it; then the next query runs
        wait_until(lambda: not running(server), 15, "the stalled query stopped")
        assert time.monotonic() - started >= 1, "stopped before its client had stalled"
        response = sql(server, "SELECT count(*) AS n FROM cpu", timeout_secs="10")
        assert response.status_code == 200, response.text
        assert response.json() == [{"n": 1}]
    assert server.proc.poll() is None


def test_an_answer_that_fails_after_rows_went_out_is_cut_short(governed: SpawnedServer) -> None:
    statement = "SELECT 10 / (v - 200000) AS x FROM generate_series(1, 400000) t(v)"
    for fmt in ["jsonl", "csv", "json", "arrow"]:
        received = bytearray()
        with pytest.raises(requests.exceptions.ChunkedEncodingError):
            # past the cache, which would collect the answer and find the error before
            # sending anything (a 400)
            with requests.get(f"{governed.http_url}/api/v3/query_sql",
                              params={"db": DB, "q": statement, "format": fmt},
                              headers={"Cache-Control": "no-cache"},
                              stream=True, timeout=60) as response:
                assert response.status_code == 200
                for chunk in response.iter_content(chunk_size=None):
                    received.extend(chunk)
        assert len(received) > 1000, fmt
        if fmt == "jsonl":
            last = bytes(received).rstrip(b"\n").rsplit(b"\n", 1)[-1]
            assert b'"error"' in last and b"zero" in last.lower(), last
    assert governed.proc.poll() is None


def test_the_server_memory_ceiling_stops_the_query_not_the_server(spawn_quiver: Spawn,
                                                                 tmp_path: Path) -> None:
    ceiling = 400 * MIB
    server = spawn_quiver("--data-dir", str(tmp_path / "data"),
                          "--query-memory-bytes", str(2048 * MIB),
                          "--max-server-memory-bytes", str(ceiling), cwd=tmp_path)
    write_ok(server.http_url, DB, "cpu,host=a usage=1 1\n")
    response = sql(server, "SELECT array_agg(v) FROM generate_series(1, 300000000) t(v)")
    assert response.status_code == 422, response.text[:500]
    assert "max_server_memory_bytes" in response.json()["error"]
    assert server.proc.poll() is None
    wait_until_idle(server)
    assert query_json(server.http_url, DB, "SELECT count(*) AS n FROM cpu") == [{"n": 1}]


def test_the_readmes_command_governs_with_its_defaults(spawn_quiver: Spawn,
                                                       tmp_path: Path) -> None:
    """`quiver serve` as the README runs it: ./quiver-data, default ports and limits."""
    if not ports_free(DEFAULT_PORTS):
        pytest.fail(f"the default ports {DEFAULT_PORTS} are taken", pytrace=False)
    server = spawn_quiver(cwd=tmp_path, default_ports=True)
    assert (tmp_path / "quiver-data" / "spill").is_dir()
    write_ok(server.http_url, DB, "cpu,host=a usage=1 1\n")
    response = sql(server, "SELECT repeat('x', 2000000000)")
    assert response.status_code == 422
    assert "268435456" in response.json()["error"]  # the default max_value_bytes
    response = sql(server, ENDLESS, timeout_secs="0.5")
    assert response.status_code == 504, response.text
    assert running(server) == []
    with psycopg.connect(host="127.0.0.1", port=DEFAULT_PORTS[2], dbname=DB, user="u",
                         autocommit=True) as conn:
        conn.execute("SET statement_timeout = 300")
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(ENDLESS)
    wait_until_idle(server)
