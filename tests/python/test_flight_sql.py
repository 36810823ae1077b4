"""Arrow Flight SQL against the real server with real clients: ADBC's Flight SQL
driver (DB-API) and ``pyarrow.flight`` speaking the protocol by hand.

Every differential-test query returns exactly the same rows over Flight SQL as
over HTTP (``format=arrow``); handshakes, bad tokens, unknown statements and
broken requests get clear errors and leave the server and other sessions fine.
"""

from __future__ import annotations

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as flight
import pytest
import requests

from quiver_testlib import (assert_rows_match, create_token, normalize_table, query_arrow,
                            unique_name, write_lp)
from test_differential import DB, QUERIES, Query, dataset, loaded_quiver_url  # noqa: F401

FLIGHT_DB = "flight_basics"
DATABASE_HEADER = "adbc.flight.sql.rpc.call_header.database"


def connect(uri: str, database: str = DB, **extra: str) -> flight_sql.Connection:
    return flight_sql.connect(
        uri,
        db_kwargs={DATABASE_HEADER: database, **extra},
        autocommit=True,  # Quiver is read-only over SQL: there are no transactions
    )


@pytest.fixture(scope="module")
def basics_url(quiver_url: str) -> str:
    lp = (
        "cpu,host=a,region=eu usage=1.5,count=3i 1000000000\n"
        "cpu,host=b,region=us usage=2.5,count=4i 2000000000\n"
        "cpu,host=c,region=eu usage=3.5,count=5i 3000000000\n"
    )
    response = write_lp(quiver_url, FLIGHT_DB, lp)
    assert response.status_code == 204, response.text
    return quiver_url


@pytest.mark.parametrize("q", QUERIES, ids=lambda q: q.name)
def test_flight_sql_returns_the_same_rows_as_http(
    q: Query, loaded_quiver_url: str, quiver_flight_uri: str  # noqa: F811
) -> None:
    expected_names, expected_rows = normalize_table(query_arrow(loaded_quiver_url, DB, q.sql))
    with connect(quiver_flight_uri) as conn, conn.cursor() as cursor:
        cursor.execute(q.sql)
        table = cursor.fetch_arrow_table()
    names, rows = normalize_table(table)
    assert_rows_match(names, rows, expected_names, expected_rows,
                      context=f"query {q.name} over Flight SQL:\n{q.sql}")


def test_statements_parameters_and_empty_results(basics_url: str, quiver_flight_uri: str) -> None:
    with connect(quiver_flight_uri, FLIGHT_DB) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT host, usage FROM cpu ORDER BY host")
        assert cursor.fetchall() == [("a", 1.5), ("b", 2.5), ("c", 3.5)]

        cursor.execute("SELECT host, count FROM cpu WHERE region = $1 ORDER BY host",
                       parameters=("eu",))
        assert cursor.fetchall() == [("a", 3), ("c", 5)]
        cursor.execute("SELECT host FROM cpu WHERE count > $1 AND region = $2",
                       parameters=(3, "eu"))
        assert cursor.fetchall() == [("c",)]

        # An empty result still has the plan's schema.
        cursor.execute("SELECT host, usage, time FROM cpu WHERE usage > 100")
        empty = cursor.fetch_arrow_table()
        assert empty.num_rows == 0
        assert empty.schema.names == ["host", "usage", "time"]
        assert empty.schema.field("usage").type == pa.float64()
        assert pa.types.is_timestamp(empty.schema.field("time").type)


def test_result_types_native_or_portable(quiver_url: str, quiver_flight_uri: str) -> None:
    """Native types by default (tags dictionary-encoded, UInt64 as is); `portable` (what Java
    clients get) sends tags as strings and unsigned integers as types JDBC reads exactly."""
    response = write_lp(quiver_url, "flight_types",
                        "m,host=a big=18446744073709551615u,small=7u 1000\n"
                        "m,host=b big=0u,small=0u 2000\n")
    assert response.status_code == 204, response.text
    sql = "SELECT host, big, arrow_cast(small, 'UInt8') AS tiny FROM m ORDER BY time"
    header = "adbc.flight.sql.rpc.call_header.quiver-result-types"
    with connect(quiver_flight_uri, "flight_types") as conn, conn.cursor() as cursor:
        cursor.execute(sql)
        native = cursor.fetch_arrow_table()
    assert pa.types.is_dictionary(native.schema.field("host").type)
    assert native.schema.field("big").type == pa.uint64()
    assert native.column("big").to_pylist() == [2**64 - 1, 0]
    for choice in ("portable", "PORTABLE"):
        with connect(quiver_flight_uri, "flight_types", **{header: choice}) as conn, \
                conn.cursor() as cursor:
            for _ in range(2):  # the second answer is the cached portable encoding
                cursor.execute(sql)
                portable = cursor.fetch_arrow_table()
                assert portable.schema.field("host").type == pa.string()
                assert portable.schema.field("big").type == pa.decimal128(20, 0)
                assert portable.schema.field("tiny").type == pa.int16()
                assert portable.column("big").to_pylist() == [2**64 - 1, 0]
                assert portable.column("host").to_pylist() == ["a", "b"]
                assert portable.column("tiny").to_pylist() == [7, 0]
    with connect(quiver_flight_uri, "flight_types", **{header: "sometimes"}) as conn, \
            conn.cursor() as cursor:
        with pytest.raises(adbc_driver_manager.Error, match="quiver-result-types"):
            cursor.execute(sql)


def test_errors_are_clear_and_do_not_break_the_session(basics_url: str,
                                                        quiver_flight_uri: str) -> None:
    with connect(quiver_flight_uri, FLIGHT_DB) as conn, conn.cursor() as cursor:
        with pytest.raises(adbc_driver_manager.Error, match="(?i)no_such_table|not found"):
            cursor.execute("SELECT * FROM no_such_table")
        with pytest.raises(adbc_driver_manager.Error, match="(?i)sql|parser|expected"):
            cursor.execute("SELEC nonsense")
        with pytest.raises(adbc_driver_manager.Error, match="(?i)only queries"):
            cursor.execute("CREATE TABLE t (x INT)")
        cursor.execute("SELECT count(*) AS n FROM cpu")
        assert cursor.fetchall() == [(3,)]
    with connect(quiver_flight_uri, "no_such_db") as conn, conn.cursor() as cursor:
        with pytest.raises(adbc_driver_manager.Error, match="no_such_db"):
            cursor.execute("SELECT 1")


def test_metadata(basics_url: str, quiver_flight_uri: str) -> None:
    with connect(quiver_flight_uri, FLIGHT_DB) as conn:
        objects = conn.adbc_get_objects(depth="all").read_all().to_pylist()
        catalogs = {o["catalog_name"]: o for o in objects}
        assert "quiver" in catalogs
        schemas = {s["db_schema_name"]: s for s in catalogs["quiver"]["catalog_db_schemas"]}
        assert FLIGHT_DB in schemas
        tables = {t["table_name"]: t for t in schemas[FLIGHT_DB]["db_schema_tables"]}
        assert tables["cpu"]["table_type"] == "TABLE"
        columns = {c["column_name"] for c in tables["cpu"]["table_columns"]}
        assert columns == {"count", "host", "region", "time", "usage"}
        assert conn.adbc_get_table_types() == ["TABLE"]
        schema = conn.adbc_get_table_schema("cpu", db_schema_filter=FLIGHT_DB)
        assert schema.field("usage").type == pa.float64()
        info = conn.adbc_get_info()
        assert info["vendor_name"] == "Quiver"


# --------------------------------------------------------------------------
# pyarrow.flight speaking Flight SQL by hand
# --------------------------------------------------------------------------

def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    length = len(payload)
    varint = bytearray()
    while True:
        byte = length & 0x7F
        length >>= 7
        varint.append(byte | (0x80 if length else 0))
        if not length:
            break
    return bytes([number << 3 | 2]) + bytes(varint) + payload


def statement_command(sql: str) -> bytes:
    """``Any(CommandStatementQuery{query})`` as Flight SQL clients send it."""
    command = _field(1, sql.encode())
    type_url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    return _field(1, type_url) + _field(2, command)


def test_pyarrow_flight_handshake_and_statement(basics_url: str, quiver_flight_uri: str) -> None:
    client = flight.FlightClient(quiver_flight_uri)
    # on loopback, a handshake with no token is the local caller's
    name, value = client.authenticate_basic_token("bob", "")
    assert name.lower() == b"authorization" and value.startswith(b"Bearer ")
    options = flight.FlightCallOptions(headers=[(name, value), (b"database", FLIGHT_DB.encode())])
    descriptor = flight.FlightDescriptor.for_command(
        statement_command("SELECT host, usage FROM cpu ORDER BY host"))
    info = client.get_flight_info(descriptor, options)
    assert info.schema.names == ["host", "usage"]
    table = client.do_get(info.endpoints[0].ticket, options).read_all()
    expected = query_arrow(basics_url, FLIGHT_DB, "SELECT host, usage FROM cpu ORDER BY host")
    assert table.to_pylist() == expected.to_pylist()

    # A bearer token this server never issued is refused.
    forged = flight.FlightCallOptions(
        headers=[(b"authorization", b"Bearer forged"), (b"database", FLIGHT_DB.encode())])
    with pytest.raises(flight.FlightUnauthenticatedError):
        client.get_flight_info(descriptor, forged)
    catalogs = flight.FlightDescriptor.for_command(
        _field(1, b"type.googleapis.com/arrow.flight.protocol.sql.CommandGetCatalogs")
        + _field(2, b""))
    with pytest.raises(flight.FlightUnauthenticatedError):
        client.get_flight_info(catalogs, forged)
    assert client.get_flight_info(catalogs, options).schema.names == ["catalog_name"]

    # Without a database header: a clear error naming the header.
    with pytest.raises(pa.ArrowInvalid, match="database"):
        client.get_flight_info(descriptor, flight.FlightCallOptions(headers=[(name, value)]))
    # A ticket this server never issued.
    with pytest.raises((flight.FlightError, pa.ArrowException)):
        client.do_get(flight.Ticket(b"garbage"), options).read_all()
    # The connection still works.
    again = client.do_get(client.get_flight_info(descriptor, options).endpoints[0].ticket,
                          options).read_all()
    assert again.num_rows == 3


def _client(uri: str, token: str, database: str = FLIGHT_DB
            ) -> tuple[flight.FlightClient, flight.FlightCallOptions]:
    """A client that did the Handshake with ``token`` as its password ("": none)."""
    client = flight.FlightClient(uri)
    name, value = client.authenticate_basic_token("user", token)
    return client, flight.FlightCallOptions(headers=[(name, value),
                                                     (b"database", database.encode())])


def _executions(base_url: str) -> int:
    return requests.get(f"{base_url}/api/v3/cache", timeout=10).json()["executions"]


def test_flight_answers_come_from_the_result_cache_per_caller(quiver_url: str,
                                                              quiver_flight_uri: str) -> None:
    database = "flight_cache"
    assert write_lp(quiver_url, database, "m,host=a v=1 1000000000\n").status_code == 204
    # two tokens with different grants: different access scopes
    alice_token = create_token(quiver_url, unique_name("flight-alice"), [f"db:{database}:read"])
    bob_token = create_token(quiver_url, unique_name("flight-bob"),
                             [f"db:{database}:read", "db:x:read"])
    alice, alice_options = _client(quiver_flight_uri, alice_token, database)
    descriptor = flight.FlightDescriptor.for_command(
        statement_command("SELECT host, v FROM m ORDER BY host"))

    def fetch(client: flight.FlightClient, options: flight.FlightCallOptions) -> list[dict]:
        info = client.get_flight_info(descriptor, options)
        return client.do_get(info.endpoints[0].ticket, options).read_all().to_pylist()

    before = _executions(quiver_url)
    assert fetch(alice, alice_options) == [{"host": "a", "v": 1.0}]
    assert fetch(alice, alice_options) == [{"host": "a", "v": 1.0}]
    assert _executions(quiver_url) == before + 1, "the repeat is a hit"
    # Another caller never shares alice's entry.
    bob, bob_options = _client(quiver_flight_uri, bob_token, database)
    assert fetch(bob, bob_options) == [{"host": "a", "v": 1.0}]
    assert _executions(quiver_url) == before + 2
    # A write makes the cached answers unreachable: the next fetch sees it.
    assert write_lp(quiver_url, database, "m,host=b v=2 1000000000\n").status_code == 204
    assert fetch(alice, alice_options) == [{"host": "a", "v": 1.0}, {"host": "b", "v": 2.0}]
    assert _executions(quiver_url) == before + 3


def test_flight_info_schemas_and_schema_changes(quiver_url: str, quiver_flight_uri: str) -> None:
    database = "flight_schema"
    assert write_lp(quiver_url, database, "m,host=a v=1 1000000000\n").status_code == 204
    client, options = _client(quiver_flight_uri, "", database)
    empty = flight.FlightDescriptor.for_command(
        statement_command("SELECT host, v, time FROM m WHERE v > 100"))
    info = client.get_flight_info(empty, options)
    assert info.schema.names == ["host", "v", "time"]
    assert info.schema.field("v").type == pa.float64()
    table = client.do_get(info.endpoints[0].ticket, options).read_all()
    assert table.num_rows == 0 and table.schema.names == ["host", "v", "time"]

    # The table gains a column between GetFlightInfo and DoGet: `SELECT *` no longer has the
    # announced schema, and DoGet says so instead of sending other columns.
    star = flight.FlightDescriptor.for_command(statement_command("SELECT * FROM m"))
    ticket = client.get_flight_info(star, options).endpoints[0].ticket
    assert write_lp(quiver_url, database, "m,host=a v=1,w=2 2000000000\n").status_code == 204
    with pytest.raises(pa.ArrowException, match="changed since GetFlightInfo"):
        client.do_get(ticket, options).read_all()
    fresh = client.get_flight_info(star, options)
    assert "w" in fresh.schema.names
    assert client.do_get(fresh.endpoints[0].ticket, options).read_all().num_rows == 2


def test_broken_requests_leave_other_sessions_working(loaded_quiver_url: str,  # noqa: F811
                                                      quiver_flight_uri: str) -> None:
    bystander, bystander_options = _client(quiver_flight_uri, "", DB)
    count = flight.FlightDescriptor.for_command(
        statement_command("SELECT count(*) AS n FROM cpu"))

    def bystander_count() -> int:
        info = bystander.get_flight_info(count, bystander_options)
        return bystander.do_get(info.endpoints[0].ticket, bystander_options).read_all()[0][0].as_py()

    expected = bystander_count()
    client, options = _client(quiver_flight_uri, "", DB)
    # A command that is not valid protobuf, and an unknown command type.
    for command in (b"\xff\xff\xff garbage", _field(1, b"type.googleapis.com/nope") + _field(2, b"")):
        with pytest.raises((flight.FlightError, pa.ArrowException)):
            client.get_flight_info(flight.FlightDescriptor.for_command(command), options)
    # A prepared statement handle this server never issued.
    prepared = _field(1, b"type.googleapis.com/arrow.flight.protocol.sql."
                         b"CommandPreparedStatementQuery") + _field(2, _field(1, b"0" * 32))
    with pytest.raises(pa.ArrowException, match="(?i)unknown prepared statement"):
        client.get_flight_info(flight.FlightDescriptor.for_command(prepared), options)
    # A client that goes away in the middle of a large result.
    wide = flight.FlightDescriptor.for_command(statement_command(
        "SELECT * FROM cpu a CROSS JOIN (SELECT 1 AS k FROM cpu LIMIT 50) b"))
    info = client.get_flight_info(wide, options)
    reader = client.do_get(info.endpoints[0].ticket, options)
    reader.read_chunk()
    client.close()
    assert bystander_count() == expected
    assert _client(quiver_flight_uri, "", DB)[0] is not None


# --------------------------------------------------------------------------
# Bulk ingest (adbc_ingest → CommandStatementIngest)
# --------------------------------------------------------------------------

INGEST_DB = "flight_ingest"


def ingest_table(start_s: int, n: int) -> pa.Table:
    return pa.table({
        "time": pa.array([(start_s + i) * 1_000_000 for i in range(n)],
                         pa.timestamp("us", tz="UTC")),
        "host": pa.array([f"h{i % 3}" for i in range(n)]).dictionary_encode(),
        "usage": pa.array([i / 2 for i in range(n)], pa.float64()),
        "count": pa.array(list(range(n)), pa.int32()),
    })


def test_adbc_ingest_writes_through_the_wal_and_reads_back(quiver_url: str,
                                                             quiver_flight_uri: str) -> None:
    with connect(quiver_flight_uri, INGEST_DB) as conn, conn.cursor() as cursor:
        assert cursor.adbc_ingest("metrics", ingest_table(0, 1000), mode="create") == 1000
        with pytest.raises(adbc_driver_manager.Error, match="exists"):
            cursor.adbc_ingest("metrics", ingest_table(0, 10), mode="create")
        assert cursor.adbc_ingest("metrics", ingest_table(1000, 500), mode="append") == 500
        with pytest.raises(adbc_driver_manager.Error, match="does not exist"):
            cursor.adbc_ingest("nowhere", ingest_table(0, 10), mode="append")

        no_time = pa.table({"v": [1, 2]})
        with pytest.raises(adbc_driver_manager.Error, match="time"):
            cursor.adbc_ingest("metrics", no_time, mode="append")
        nested = ingest_table(5000, 2).append_column("xs", pa.array([[1], [2]]))
        with pytest.raises(adbc_driver_manager.Error, match='"xs"'):
            cursor.adbc_ingest("metrics", nested, mode="append")
        conflicting = ingest_table(6000, 2).set_column(
            2, "usage", pa.array(["a", "b"]))
        with pytest.raises(adbc_driver_manager.Error, match="usage"):
            cursor.adbc_ingest("metrics", conflicting, mode="append")

        cursor.execute("SELECT count(*) AS n, sum(count) AS s, count(DISTINCT host) AS hosts "
                       "FROM metrics")
        assert cursor.fetchall() == [(1500, sum(range(1000)) + sum(range(500)), 3)]
    # The same rows over HTTP, with the data model's types.
    table = query_arrow(quiver_url, INGEST_DB, "SELECT * FROM metrics ORDER BY time")
    assert table.num_rows == 1500
    assert pa.types.is_dictionary(table.schema.field("host").type)
    assert table.schema.field("count").type == pa.int64()
    assert table.schema.field("time").type == pa.timestamp("ns", tz="UTC")
    assert table.column("time")[1].value == 1_000_000_000


def _ingest_descriptor(table: str) -> flight.FlightDescriptor:
    """``Any(CommandStatementIngest{table})``, as ADBC sends it for ``adbc_ingest``."""
    type_url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementIngest"
    return flight.FlightDescriptor.for_command(_field(1, type_url) + _field(2, _field(2, table.encode())))


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_flight_ingest_of_compressed_batches(quiver_url: str, quiver_flight_uri: str,
                                             compression: str) -> None:
    client = flight.FlightClient(quiver_flight_uri)
    name, value = client.authenticate_basic_token("frank", "")
    call = flight.FlightCallOptions(
        headers=[(name, value), (b"database", INGEST_DB.encode())],
        write_options=pa.ipc.IpcWriteOptions(compression=compression))
    table = ingest_table(0, 100)
    target = f"compressed_{compression}"

    def put() -> None:
        writer, _ = client.do_put(_ingest_descriptor(target), table.schema, options=call)
        writer.write_table(table)
        writer.close()

    if compression == "zstd":
        put()
        rows = query_arrow(quiver_url, INGEST_DB, f"SELECT count(*) AS n FROM {target}")
        assert rows.to_pylist() == [{"n": 100}]
    else:
        # Arrow's LZ4 decoder does not bound its output: refused, nothing written.
        with pytest.raises(pa.ArrowException, match="Arrow IPC message 1: LZ4"):
            put()
        response = requests.get(f"{quiver_url}/api/v3/query_sql", timeout=10, params={
            "db": INGEST_DB, "q": f"SELECT count(*) FROM {target}"})
        assert response.status_code == 404, response.text
