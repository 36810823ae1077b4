"""The PostgreSQL wire protocol against the real server with real clients: psycopg 3
(simple and extended protocol, text and binary parameters and results, pipeline mode,
transactions, cancel), ``psql`` (``\\dt``, ``\\d``, several statements in one string) and raw
sockets speaking broken protocol.

Every differential-test query returns exactly the same rows over Postgres as over HTTP
(``format=arrow``), up to Postgres' microsecond timestamps; errors carry SQLSTATE codes;
malformed messages, unknown statements and broken connections leave the server and other
sessions working.
"""

from __future__ import annotations

import datetime as dt
import decimal
import socket
import struct
import subprocess
import threading
import time
from typing import Any

import psycopg
import psycopg.errors
import pytest
import requests

from quiver_testlib import assert_rows_match, normalize_table, query_arrow, query_json, write_lp
from test_differential import DB, QUERIES, Query, dataset, loaded_quiver_url  # noqa: F401

PG_DB = "pg_basics"
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
U64_MAX = 2**64 - 1

# PostgreSQL type OIDs (pg_type.oid).
INT8, FLOAT8, TEXT, BOOL, TIMESTAMPTZ, NUMERIC = 20, 701, 25, 16, 1184, 1700
INT2, INT4, FLOAT4, BYTEA = 21, 23, 700, 17


def connect(port: int, dbname: str = PG_DB, **kwargs: Any) -> psycopg.Connection:
    kwargs.setdefault("autocommit", True)
    return psycopg.connect(host="127.0.0.1", port=port, user="alice", dbname=dbname,
                           connect_timeout=10, **kwargs)


@pytest.fixture(scope="module")
def basics(quiver_url: str) -> str:
    lp = (
        "cpu,host=a,region=eu usage=1.5,count=3i,big=18446744073709551615u,"
        "note=\"it's\",ok=true 1000000000\n"
        "cpu,host=b,region=us usage=2.5,count=4i,big=0u,note=\"o''brien\",ok=false "
        "2000000123\n"
        "cpu,host=o''brien,region=eu usage=3.5,count=5i,big=7u,ok=true 3000000000\n"
    )
    response = write_lp(quiver_url, PG_DB, lp)
    assert response.status_code == 204, response.text
    return quiver_url


# --------------------------------------------------------------------------
# Same rows as HTTP
# --------------------------------------------------------------------------

def _to_micros_ns(value: Any) -> Any:
    """Postgres timestamps have microseconds: truncate nanoseconds (floor) for comparison."""
    return value - value % 1000 if isinstance(value, int) else value


def _normalize_pg_value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        delta = value - EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return micros * 1000
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _http_rows_in_micros(base_url: str, db: str, sql: str) -> tuple[list[str], list[tuple]]:
    table = query_arrow(base_url, db, sql)
    names, rows = normalize_table(table)
    timestamp_columns = {i for i, f in enumerate(table.schema) if str(f.type).startswith("timestamp")}
    rows = [tuple(_to_micros_ns(v) if i in timestamp_columns else v for i, v in enumerate(row))
            for row in rows]
    return names, rows


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
@pytest.mark.parametrize("q", QUERIES, ids=lambda q: q.name)
def test_psycopg_returns_the_same_rows_as_http(
    q: Query, binary: bool, loaded_quiver_url: str, quiver_pg_port: int  # noqa: F811
) -> None:
    expected_names, expected_rows = _http_rows_in_micros(loaded_quiver_url, DB, q.sql)
    with connect(quiver_pg_port, DB) as conn, conn.cursor(binary=binary) as cursor:
        # The second execution is a cache hit sending the rows kept from the first.
        for execution in ("first", "repeated"):
            cursor.execute(q.sql)
            names = [column.name for column in cursor.description]
            rows = [tuple(_normalize_pg_value(v) for v in row) for row in cursor.fetchall()]
            assert_rows_match(
                names, rows, expected_names, expected_rows,
                context=f"{execution} query {q.name} over PostgreSQL "
                        f"({'binary' if binary else 'text'}):\n{q.sql}")


def _cache_stats(base_url: str) -> dict[str, Any]:
    return requests.get(f"{base_url}/api/v3/cache", timeout=10).json()


def test_hits_send_the_rows_encoded_at_the_first_execution(basics: str,
                                                            quiver_pg_port: int) -> None:
    """A cached answer keeps its rows as encoded for each result format the first time it is
    sent (the entry grows by that encoding once); repeats send them again unchanged."""
    sql = ("SELECT time, host, usage, count, big, note, ok, 'kept' AS label FROM cpu "
           "ORDER BY time")
    results, sizes = {}, []
    with connect(quiver_pg_port) as conn:
        for binary in (True, True, False, False):
            with conn.cursor(binary=binary) as cursor:
                cursor.execute(sql)
                results.setdefault(binary, []).append(cursor.fetchall())
            sizes.append(_cache_stats(basics)["bytes"])
    binary_rows, text_rows = results[True], results[False]
    assert binary_rows[0] == binary_rows[1] == text_rows[0] == text_rows[1]
    assert binary_rows[0][0] == (dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc), "a",
                                 1.5, 3, decimal.Decimal(U64_MAX), "it's", True, "kept")
    assert text_rows[0][2][5] is None, "a missing field stays NULL in a kept encoding"
    # Binary encoding kept with the answer at the first execution; the repeat adds nothing;
    # the text encoding is kept next to it at the first text execution.
    assert sizes[1] == sizes[0] and sizes[2] > sizes[1] and sizes[3] == sizes[2], sizes


def test_data_model_types_map_to_postgres_types(basics: str, quiver_pg_port: int) -> None:
    sql = "SELECT time, host, usage, count, big, note, ok FROM cpu ORDER BY time"
    for binary in (False, True):
        with connect(quiver_pg_port) as conn, conn.cursor(binary=binary) as cursor:
            cursor.execute(sql)
            types = {c.name: c.type_code for c in cursor.description}
            assert types == {"time": TIMESTAMPTZ, "host": TEXT, "usage": FLOAT8,
                             "count": INT8, "big": NUMERIC, "note": TEXT, "ok": BOOL}
            rows = cursor.fetchall()
        assert rows[0] == (dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc), "a", 1.5,
                           3, decimal.Decimal(U64_MAX), "it's", True), binary
        # u64 above i64::MAX is numeric, never an overflow; the time keeps its microseconds
        assert rows[1][0] == dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=dt.timezone.utc)
        assert rows[1][5] == "o''brien" and rows[1][6] is False
        assert rows[2][5] is None, "a missing field is NULL"


def test_narrow_and_binary_types_map_to_postgres_types(basics: str, quiver_pg_port: int) -> None:
    sql = ("SELECT CAST(-5 AS TINYINT) AS tiny, CAST(300 AS SMALLINT) AS small, "
           "CAST(70000 AS INT) AS int, CAST(1.5 AS REAL) AS real, "
           "arrow_cast(200, 'UInt8') AS u8, arrow_cast(60000, 'UInt16') AS u16, "
           "arrow_cast(4000000000, 'UInt32') AS u32, arrow_cast('ab', 'Binary') AS bin")
    for binary in (False, True):
        with connect(quiver_pg_port) as conn, conn.cursor(binary=binary) as cursor:
            cursor.execute(sql)
            types = {c.name: c.type_code for c in cursor.description}
            assert types == {"tiny": INT2, "small": INT2, "int": INT4, "real": FLOAT4,
                             "u8": INT2, "u16": INT4, "u32": INT8, "bin": BYTEA}, binary
            assert cursor.fetchone() == (-5, 300, 70000, 1.5, 200, 60000, 4000000000, b"ab"), \
                binary


# --------------------------------------------------------------------------
# Parameters, pipelining, transactions
# --------------------------------------------------------------------------

def test_numeric_parameters_never_overflow_silently(basics: str, quiver_pg_port: int) -> None:
    """A number bound to an unsigned 64-bit column is compared exactly, or refused (22003, or
    22023 where the driver sent a typed integer): never NULL (no rows) or a truncated value."""
    with connect(quiver_pg_port) as conn:
        for placeholder in ("%s", "%b"):
            sql = f"SELECT host FROM cpu WHERE big = {placeholder}"
            assert conn.execute(sql, (U64_MAX,)).fetchall() == [("a",)], placeholder
            assert conn.execute(sql, (decimal.Decimal(7),)).fetchall() == [("o''brien",)]
            for bad in (2**64, -1, decimal.Decimal("7.5")):
                with pytest.raises((psycopg.errors.NumericValueOutOfRange,
                                    psycopg.errors.InvalidParameterValue), match="out of range"):
                    conn.execute(sql, (bad,))
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (3,)

def test_parameters_text_and_binary(basics: str, quiver_pg_port: int) -> None:
    sql = "SELECT host, count FROM cpu WHERE region = %s AND usage > %s ORDER BY host"
    with connect(quiver_pg_port) as conn:
        assert conn.execute(sql, ("eu", 1.0)).fetchall() == [("a", 3), ("o''brien", 5)]
        binary = sql.replace("%s", "%b")
        assert conn.execute(binary, ("eu", 2.0)).fetchall() == [("o''brien", 5)]
        with conn.cursor(binary=True) as cursor:
            cursor.execute(binary, ("us", 0))
            assert cursor.fetchall() == [("b", 4)]
        # Two apostrophes in a text parameter are data, not an escape.
        for placeholder in ("%s", "%b"):
            rows = conn.execute(f"SELECT host FROM cpu WHERE host = {placeholder}",
                                ("o''brien",)).fetchall()
            assert rows == [("o''brien",)], placeholder
            note = conn.execute(f"SELECT count(*) FROM cpu WHERE note = {placeholder}",
                                ("o''brien",)).fetchone()
            assert note == (1,), placeholder
        # Integers and NULL.
        assert conn.execute("SELECT host FROM cpu WHERE count = %s", (4,)).fetchall() == [("b",)]
        assert conn.execute("SELECT count(*) FROM cpu WHERE note = %s", (None,)).fetchone() == (0,)
        # prepare=True: named statements, reused (psycopg prepares after 5 runs by default)
        for count in (3, 4, 5, 3):
            assert conn.execute("SELECT count(*) FROM cpu WHERE count >= %s", (count,),
                                prepare=True).fetchone() == (6 - count,)


def test_pipeline_mode_runs_many_queries(basics: str, quiver_pg_port: int) -> None:
    with connect(quiver_pg_port) as conn:
        with conn.pipeline():
            cursors = []
            for i in range(150):
                cursor = conn.cursor()
                cursor.execute("SELECT count(*) AS n, %s::bigint AS i FROM cpu WHERE count > %s",
                               (i, i % 6))
                cursors.append(cursor)
        results = [cursor.fetchone() for cursor in cursors]
    assert results == [(sum(1 for count in (3, 4, 5) if count > i % 6), i) for i in range(150)]


def test_transactions_follow_postgres_rules(basics: str, quiver_pg_port: int) -> None:
    with connect(quiver_pg_port, autocommit=False) as conn:
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (3,)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.commit()
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT * FROM nope")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            conn.execute("SELECT 1")
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (3,)


def test_session_commands(basics: str, quiver_pg_port: int) -> None:
    with connect(quiver_pg_port) as conn:
        assert conn.info.server_version == 150006
        assert conn.execute("SHOW search_path").fetchone() == (PG_DB,)
        assert conn.execute("SHOW server_version_num").fetchone() == ("150006",)
        conn.execute("SET application_name = 'quiver-tests'")
        assert conn.execute("SHOW application_name").fetchone() == ("quiver-tests",)
        conn.execute("RESET application_name")
        conn.execute("SET TIME ZONE 'UTC'")
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="UTC"):
            conn.execute("SET TIME ZONE 'Europe/Paris'")
        with pytest.raises(psycopg.errors.UndefinedObject):
            conn.execute("SHOW no_such_setting")
        settings = dict(conn.execute("SHOW ALL").fetchall())
        assert settings["TimeZone"] == "UTC" and settings["server_encoding"] == "UTF8"
        assert conn.execute("SELECT current_database(), current_schema()").fetchone() == \
            (PG_DB, PG_DB)
        assert conn.execute("SELECT version()").fetchone()[0].startswith("PostgreSQL 15")
        assert conn.execute("SELECT current_setting('server_version_num')").fetchone() == \
            ("150006",)


# --------------------------------------------------------------------------
# Errors and cancellation
# --------------------------------------------------------------------------

def test_errors_carry_sqlstate_and_leave_the_session_usable(basics: str,
                                                            quiver_pg_port: int) -> None:
    with connect(quiver_pg_port) as conn:
        cases = [
            ("SELECT * FROM no_such_table", psycopg.errors.UndefinedTable),
            ("SELEC 1", psycopg.errors.SyntaxError),
            ("SELECT no_such_column FROM cpu", psycopg.errors.UndefinedColumn),
            ("INSERT INTO cpu (host) VALUES ('x')", psycopg.errors.ReadOnlySqlTransaction),
            ("DROP TABLE cpu", psycopg.errors.ReadOnlySqlTransaction),
            ("SELECT 1/0", psycopg.errors.DivisionByZero),
        ]
        for sql, error in cases:
            with pytest.raises(error):
                conn.execute(sql)
            assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (3,), sql
    with pytest.raises(psycopg.OperationalError, match="does not exist"):
        connect(quiver_pg_port, "no_such_database")


def _slow_query(conn: psycopg.Connection, sql: str, outcome: dict[str, Any]) -> None:
    started = time.monotonic()
    try:
        conn.execute(sql).fetchall()
        outcome["error"] = None
    except psycopg.Error as e:  # the cancel arrives as QueryCanceled
        outcome["error"] = e
    outcome["seconds"] = time.monotonic() - started


@pytest.mark.parametrize("sql", [
    # cacheable: computed (collected) before any row is sent
    "SELECT count(*) FROM generate_series(1, 200000) a, generate_series(1, 200000) b",
    # random() bypasses the cache: rows are computed while they are streamed
    "SELECT random() AS r FROM generate_series(1, 200000) a, generate_series(1, 200000) b",
], ids=["while_computing", "while_streaming"])
def test_cancel_stops_the_running_query(basics: str, quiver_pg_port: int, sql: str) -> None:
    with connect(quiver_pg_port) as conn:
        outcome: dict[str, Any] = {}
        worker = threading.Thread(target=_slow_query, args=(conn, sql, outcome))
        worker.start()
        time.sleep(1.0)
        conn.cancel_safe()
        worker.join(timeout=30)
        assert not worker.is_alive(), "the cancelled query did not stop"
        assert isinstance(outcome["error"], psycopg.errors.QueryCanceled), outcome
        # The session goes on.
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (3,)


# --------------------------------------------------------------------------
# psql
# --------------------------------------------------------------------------

def psql(port: int, *commands: str, dbname: str = PG_DB) -> subprocess.CompletedProcess:
    args = ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port),
            "-U", "alice", "-d", dbname]
    for command in commands:
        args += ["-c", command]
    return subprocess.run(args, capture_output=True, text=True, timeout=60,
                          env={"PGCONNECT_TIMEOUT": "10", "PATH": "/usr/bin:/bin"})


def test_psql_lists_and_describes_tables(basics: str, quiver_pg_port: int) -> None:
    listed = psql(quiver_pg_port, "\\dt")
    assert listed.returncode == 0, listed.stderr
    lines = [line for line in listed.stdout.splitlines() if "|" in line]
    assert any(PG_DB in line and "cpu" in line and "table" in line for line in lines), \
        listed.stdout
    described = psql(quiver_pg_port, "\\d cpu")
    assert described.returncode == 0, described.stderr
    columns = {line.split("|")[0].strip(): line.split("|")[1].strip()
               for line in described.stdout.splitlines() if line.count("|") >= 2}
    assert columns["time"] == "timestamp with time zone", described.stdout
    assert columns["host"] == "text" and columns["usage"] == "double precision"
    assert columns["count"] == "bigint" and columns["big"] == "numeric"
    assert columns["ok"] == "boolean"


def test_psql_runs_queries_and_several_statements(basics: str, quiver_pg_port: int) -> None:
    result = psql(quiver_pg_port, "SELECT host, count FROM cpu ORDER BY host; SELECT 42 AS answer")
    assert result.returncode == 0, result.stderr
    assert "o''brien" in result.stdout and "42" in result.stdout
    failed = psql(quiver_pg_port, "SELECT 1 AS first; SELECT * FROM nope; SELECT 3")
    assert failed.returncode != 0
    assert "first" in failed.stdout and "nope" in failed.stderr


# --------------------------------------------------------------------------
# Broken and hostile input
# --------------------------------------------------------------------------

def _startup_message(user: str, database: str) -> bytes:
    body = struct.pack("!I", 196608)
    for key, value in (("user", user), ("database", database)):
        body += key.encode() + b"\0" + value.encode() + b"\0"
    body += b"\0"
    return struct.pack("!I", len(body) + 4) + body


def _read_until_ready(sock: socket.socket) -> bytes:
    """Reads backend messages until ReadyForQuery (or the connection closes)."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
        offset = 0
        while offset + 5 <= len(data):
            kind = data[offset:offset + 1]
            (length,) = struct.unpack("!I", data[offset + 1:offset + 5])
            if offset + 1 + length > len(data):
                break
            if kind == b"Z":
                return data
            offset += 1 + length


def _raw_session(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(_startup_message("mallory", PG_DB))
    assert b"Z" in _read_until_ready(sock)
    return sock


@pytest.mark.parametrize("payload", [
    b"\x00\x00\x00\x08\x04\xd2\x16\x2fgarbage after an SSL request",
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x00\x00\x00\x03",
    b"\xff" * 64,
], ids=["ssl_then_garbage", "http", "short_length", "junk"])
def test_garbage_before_startup_only_ends_that_connection(basics: str, quiver_pg_port: int,
                                                          payload: bytes) -> None:
    with socket.create_connection(("127.0.0.1", quiver_pg_port), timeout=10) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        try:
            while sock.recv(4096):
                pass
        except (ConnectionResetError, TimeoutError):
            pass
    with connect(quiver_pg_port) as conn:
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (3,)


def test_malformed_messages_in_a_session(basics: str, quiver_pg_port: int) -> None:
    # A message declaring a 2 GiB body: refused, nothing allocated from it.
    with _raw_session(quiver_pg_port) as sock:
        sock.sendall(b"Q" + struct.pack("!I", 0x7FFFFFF0) + b"SELECT 1")
        try:
            reply = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            reply = b""
        assert reply == b"" or reply[:1] == b"E", reply[:80]
    # A Bind to a statement that does not exist: an error, then the session recovers at Sync.
    with _raw_session(quiver_pg_port) as sock:
        bind = b"\0nope\0" + struct.pack("!hhh", 0, 0, 0)
        sock.sendall(b"B" + struct.pack("!I", len(bind) + 4) + bind + b"S\x00\x00\x00\x04")
        reply = _read_until_ready(sock)
        assert reply[:1] == b"E" and b"Z" in reply, reply[:200]
        query = b"SELECT count(*) FROM cpu\0"
        sock.sendall(b"Q" + struct.pack("!I", len(query) + 4) + query)
        reply = _read_until_ready(sock)
        assert b"D" in reply and b"3" in reply, reply
    # A truncated message, then the client vanishes mid-message.
    with _raw_session(quiver_pg_port) as sock:
        sock.sendall(b"Q" + struct.pack("!I", 100) + b"SELECT")
    with connect(quiver_pg_port) as conn:
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (3,)


def test_a_client_that_disappears_mid_result_does_not_hurt_others(basics: str,
                                                                  quiver_pg_port: int) -> None:
    with connect(quiver_pg_port) as bystander:
        assert bystander.execute("SELECT count(*) FROM cpu").fetchone() == (3,)
        with _raw_session(quiver_pg_port) as sock:
            query = b"SELECT * FROM generate_series(1, 5000000)\0"
            sock.sendall(b"Q" + struct.pack("!I", len(query) + 4) + query)
            sock.recv(1024)
        # The session that was open all along, and a new one, both go on.
        assert bystander.execute("SELECT count(*) FROM cpu").fetchone() == (3,)
    with connect(quiver_pg_port) as conn:
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (3,)
    assert query_json(basics, PG_DB, "SELECT count(*) AS n FROM cpu") == [{"n": 3}]


# --------------------------------------------------------------------------
# The extended protocol message by message
# --------------------------------------------------------------------------

def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def _parse(statement: str, sql: str) -> bytes:
    return _message(b"P", statement.encode() + b"\0" + sql.encode() + b"\0" + struct.pack("!h", 0))


def _bind(portal: str, statement: str) -> bytes:
    return _message(b"B", portal.encode() + b"\0" + statement.encode() + b"\0"
                    + struct.pack("!hhh", 0, 0, 0))


def _execute(portal: str, max_rows: int = 0) -> bytes:
    return _message(b"E", portal.encode() + b"\0" + struct.pack("!i", max_rows))


SYNC = _message(b"S", b"")


def _replies(sock: socket.socket) -> list[tuple[bytes, bytes]]:
    """The backend messages up to and including ReadyForQuery, as (kind, body)."""
    data = _read_until_ready(sock)
    messages, offset = [], 0
    while offset < len(data):
        kind = data[offset:offset + 1]
        (length,) = struct.unpack("!I", data[offset + 1:offset + 5])
        messages.append((kind, data[offset + 5:offset + 1 + length]))
        offset += 1 + length
    return messages


def _data_rows(messages: list[tuple[bytes, bytes]]) -> list[str]:
    """The first column of every DataRow, as text."""
    rows = []
    for kind, body in messages:
        if kind == b"D":
            (length,) = struct.unpack("!i", body[2:6])
            rows.append(body[6:6 + length].decode())
    return rows


def test_named_portals_resume_after_a_row_limit(basics: str, quiver_pg_port: int) -> None:
    with _raw_session(quiver_pg_port) as sock:
        sock.sendall(_parse("by_host", "SELECT host FROM cpu ORDER BY host")
                     + _bind("cursor", "by_host") + _execute("cursor", 2)
                     + _execute("cursor", 0) + SYNC)
        replies = _replies(sock)
        kinds = [kind for kind, _ in replies]
        assert kinds == [b"1", b"2", b"D", b"D", b"s", b"D", b"C", b"Z"], kinds
        assert _data_rows(replies) == ["a", "b", "o''brien"]
        # The named statement outlives the portal: bind it again.
        sock.sendall(_bind("", "by_host") + _execute("") + SYNC)
        replies = _replies(sock)
        assert _data_rows(replies) == ["a", "b", "o''brien"], replies


def test_an_error_in_a_pipeline_skips_to_sync(basics: str, quiver_pg_port: int) -> None:
    with _raw_session(quiver_pg_port) as sock:
        pipeline = b"".join([
            _parse("", "SELECT count(*) FROM cpu"), _bind("", ""), _execute(""),
            _parse("", "SELECT * FROM no_such_table"), _bind("", ""), _execute(""),
            _parse("", "SELECT 42"), _bind("", ""), _execute(""),
            SYNC,
        ])
        sock.sendall(pipeline)
        replies = _replies(sock)
        kinds = [kind for kind, _ in replies]
        # The first query's answer, the error, nothing of the third, then ready again.
        assert kinds == [b"1", b"2", b"D", b"C", b"E", b"Z"], kinds
        assert _data_rows(replies) == ["3"]
        assert b"42P01" in replies[4][1]
        sock.sendall(_parse("", "SELECT 42") + _bind("", "") + _execute("") + SYNC)
        assert _data_rows(_replies(sock)) == ["42"]


# --------------------------------------------------------------------------
# What BI tools and drivers run on connect (Grafana, DBeaver / pgjdbc)
# --------------------------------------------------------------------------

CLIENT_CHECKS = [
    # Grafana: "Save & test" (lib/pq pings with ";", pgx with "-- ping") and feature detection
    ("grafana_ping_pgx", "-- ping", None),
    ("grafana_version", "SELECT current_setting('server_version_num')::int/100 AS version", 1),
    ("grafana_timescaledb", "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'", 0),
    ("grafana_schemas", "SELECT schema_name AS \"name\" FROM information_schema.schemata "
                        "WHERE schema_name NOT IN ('information_schema', 'pg_catalog', 'pg_toast') "
                        "ORDER BY schema_name", None),
    ("grafana_tables", "SELECT quote_ident(table_name) AS \"table\" FROM information_schema.tables "
                       f"WHERE quote_ident(table_schema) = '{PG_DB}' ORDER BY 1", 1),
    ("grafana_columns", "SELECT quote_ident(column_name) AS \"column\", data_type AS \"type\" "
                        "FROM information_schema.columns WHERE table_name = 'cpu' "
                        f"AND table_schema = '{PG_DB}' ORDER BY ordinal_position", 8),
    # DBeaver / pgjdbc
    ("dbeaver_schema_user", "SELECT current_schema(), session_user", 1),
    ("dbeaver_search_path", "SHOW search_path", 1),
    ("dbeaver_version", "SELECT version()", 1),
    ("dbeaver_namespaces", "SELECT n.oid, n.*, d.description FROM pg_catalog.pg_namespace n "
                           "LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid = n.oid "
                           "AND d.objsubid = 0 AND d.classoid = 'pg_namespace'::regclass "
                           "ORDER BY nspname", None),
    ("dbeaver_database", f"SELECT db.oid, db.* FROM pg_catalog.pg_database db "
                         f"WHERE datname = '{PG_DB}'", None),
    ("pgjdbc_type_by_oid", "SELECT n.nspname = ANY(current_schemas(true)), n.nspname, t.typname "
                           "FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n "
                           "ON t.typnamespace = n.oid WHERE t.oid = 1184", 1),
    ("pgjdbc_keywords", "SELECT string_agg(word, ',') FROM pg_catalog.pg_get_keywords() "
                        "WHERE word <> ALL ('{a,abs,absolute}'::text[])", 1),
]


@pytest.mark.parametrize("name,sql,rows", CLIENT_CHECKS, ids=[c[0] for c in CLIENT_CHECKS])
def test_tool_connection_checks(basics: str, quiver_pg_port: int, name: str, sql: str,
                                rows: int | None) -> None:
    with connect(quiver_pg_port) as conn:
        cursor = conn.execute(sql)
        if cursor.description is None:
            assert rows is None, f"{name}: no result"
            return
        result = cursor.fetchall()
        if rows is not None:
            assert len(result) == rows, f"{name}: {result}"
        # the session still works
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (3,)


def test_grafana_and_jdbc_values(basics: str, quiver_pg_port: int) -> None:
    with connect(quiver_pg_port) as conn:
        assert conn.execute(CLIENT_CHECKS[1][1]).fetchone() == (1500,)
        tables = conn.execute(CLIENT_CHECKS[4][1]).fetchall()
        assert tables == [("cpu",)]
        columns = dict(conn.execute(CLIENT_CHECKS[5][1]).fetchall())
        assert set(columns) == {"time", "host", "region", "usage", "count", "big", "note", "ok"}
        assert conn.execute(CLIENT_CHECKS[6][1]).fetchone()[0] == PG_DB
        assert conn.execute(CLIENT_CHECKS[11][1]).fetchone() == (True, "pg_catalog", "timestamptz")
