"""Arc-compatible MessagePack writes against the real server: Arc's own Python SDK
(``arc-tsdb-client``: columnar, row and buffered writes, gzip), Telegraf-shaped payloads
(``outputs.arc``: a top-level array of columnar records, millisecond times), zstd bodies
recognised by their magic bytes, and hostile bodies (truncated, wrong types, unequal arrays,
forged lengths, nesting bombs, invalid UTF-8, corrupt compression): each is a 400 naming what
and where, writes nothing, and leaves the server up.
"""

from __future__ import annotations

import gzip
import struct
from urllib.parse import urlparse

import msgpack
import pyarrow as pa
import pytest
import requests
import zstandard
from arc_client import ArcClient

from quiver_testlib import create_token, query_arrow, query_json, unique_name, write_lp

ENDPOINT = "/api/v1/write/msgpack"
T0_US = 1_700_000_000_000_000


def post(base_url: str, body: bytes, database: str | None = "mp", **headers: str) -> requests.Response:
    if database is not None:
        headers["x-arc-database"] = database
    headers.setdefault("Content-Type", "application/msgpack")
    return requests.post(base_url + ENDPOINT, data=body, headers=headers, timeout=60)


def count(base_url: str, db: str, table: str) -> int:
    return query_json(base_url, db, f"SELECT count(*) AS n FROM {table}")[0]["n"]


def arc_client(base_url: str, database: str) -> ArcClient:
    """Arc's SDK with a token allowed to write ``database`` (the SDK always sends one)."""
    url = urlparse(base_url)
    token = create_token(base_url, unique_name("arc"), [f"db:{database}:write"])
    return ArcClient(host=url.hostname, port=url.port, database=database, token=token)


# --------------------------------------------------------------------------
# Clients that speak Arc's format
# --------------------------------------------------------------------------

def test_arc_sdk_columnar_row_and_buffered_writes(quiver_url: str) -> None:
    with arc_client(quiver_url, "arc_sdk") as client:
        client.write.write_columnar(
            measurement="cpu",
            columns={
                "time": [T0_US, T0_US + 1_000_000, T0_US + 2_000_000],
                "host": ["server01", "server02", "server01"],
                "usage": [45.2, 47.8, 50],
                "cores": [8, 16, 8],
                "healthy": [True, False, True],
            },
        )
        client.write.write_records([
            {"measurement": "cpu", "timestamp": T0_US + 3_000_000,
             "tags": {"host": "server03"}, "fields": {"usage": 12.5, "cores": 4}},
        ])
        with client.write.buffered(batch_size=100) as buffer:
            for i in range(250):
                buffer.write({"measurement": "mem", "tags": {"host": f"h{i % 5}"},
                              "fields": {"free": float(i)}, "timestamp": T0_US + i})
    table = query_arrow(quiver_url, "arc_sdk", "SELECT * FROM cpu ORDER BY time")
    assert table.num_rows == 4
    assert pa.types.is_dictionary(table.schema.field("host").type), "string columns are tags"
    assert table.schema.field("usage").type == pa.float64(), "an integer among floats widens"
    assert table.schema.field("cores").type == pa.int64()
    assert table.schema.field("time").type == pa.timestamp("ns", tz="UTC")
    rows = table.to_pylist()
    assert [r["host"] for r in rows] == ["server01", "server02", "server01", "server03"]
    assert [r["usage"] for r in rows] == [45.2, 47.8, 50.0, 12.5]
    assert rows[3]["time"].timestamp() == pytest.approx((T0_US + 3_000_000) / 1e6)
    assert rows[1]["healthy"] is False and rows[3]["healthy"] is None
    assert count(quiver_url, "arc_sdk", "mem") == 250


def test_telegraf_shaped_payloads_gzip_and_zstd(quiver_url: str) -> None:
    t0_ms = 1_700_000_000_000
    records = [
        {"m": "disk", "columns": {"time": [t0_ms, t0_ms + 10], "host": ["a", "b"],
                                  "device": ["sda", "sdb"], "used": [1.5, 2.5],
                                  "free": [2**63 + 5, 7]}},
        {"m": "net", "columns": {"time": [t0_ms], "host": ["a"], "bytes_recv": [123]}},
    ]
    body = msgpack.packb(records)
    r = post(quiver_url, gzip.compress(body), "telegraf", **{"Content-Encoding": "gzip"})
    assert r.status_code == 204, r.text
    # zstd without Content-Encoding: recognised by its magic bytes (as Arc does)
    later = [{"m": "net", "columns": {"time": [t0_ms + 20], "host": ["b"], "bytes_recv": [9]}}]
    r = post(quiver_url, zstandard.ZstdCompressor().compress(msgpack.packb(later)), "telegraf")
    assert r.status_code == 204, r.text
    disk = query_arrow(quiver_url, "telegraf", "SELECT * FROM disk ORDER BY time").to_pylist()
    assert [d["free"] for d in disk] == [2**63 + 5, 7], "u64 above i64::MAX stays exact"
    assert disk[1]["time"].timestamp() == pytest.approx((t0_ms + 10) / 1000)
    assert count(quiver_url, "telegraf", "net") == 2


def test_same_data_as_line_protocol_gives_the_same_answers(quiver_url: str) -> None:
    lines, columns = [], {"time": [], "host": [], "v": [], "n": []}
    for i in range(300):
        t_ns = 1_700_000_000_000_000_000 + i * 1_000_000_000
        lines.append(f"m,host=h{i % 7} v={i / 4},n={i}i {t_ns}")
        for k, val in (("time", t_ns), ("host", f"h{i % 7}"), ("v", i / 4), ("n", i)):
            columns[k].append(val)
    assert write_lp(quiver_url, "same_lp", "\n".join(lines)).status_code == 204
    r = post(quiver_url, msgpack.packb({"m": "m", "columns": columns}), "same_mp")
    assert r.status_code == 204, r.text
    sql = "SELECT host, count(*) AS c, sum(v) AS s, sum(n) AS t, max(time) AS last FROM m GROUP BY host ORDER BY host"
    assert query_arrow(quiver_url, "same_lp", sql).to_pylist() == \
        query_arrow(quiver_url, "same_mp", sql).to_pylist()
    schema_lp = query_arrow(quiver_url, "same_lp", "SELECT * FROM m LIMIT 1").schema
    schema_mp = query_arrow(quiver_url, "same_mp", "SELECT * FROM m LIMIT 1").schema
    assert schema_lp == schema_mp


def test_default_database_and_headers(quiver_url: str) -> None:
    body = msgpack.packb({"m": "probe", "fields": {"v": 1}, "h": "x"})
    assert post(quiver_url, body, database=None).status_code == 204
    assert count(quiver_url, "default", "probe") >= 1
    r = post(quiver_url, body, database="bad/name")
    assert r.status_code == 400 and "database" in r.json()["error"]


# --------------------------------------------------------------------------
# Bad input: 400 naming what and where, nothing written, server up
# --------------------------------------------------------------------------

GOOD = msgpack.packb({"m": "victim", "columns": {"time": [1, 2], "host": ["a", "b"], "v": [1.0, 2.0]}})

BAD_BODIES = {
    "truncated": (GOOD[: len(GOOD) - 5], "truncated"),
    "wrong_type_in_column": (msgpack.packb({"m": "victim", "columns": {"v": [1.0, "x"]}}),
                             "string value among float values"),
    "unequal_arrays": (msgpack.packb({"m": "victim", "columns": {"a": [1, 2], "b": [1]}}),
                       "equal lengths"),
    "forged_array_length": (b"\x81\xa1m\xa6victim\xdd\xff\xff\xff\xff", ""),
    "forged_string_length": (b"\x81\xa1m\xdb\xff\xff\xff\xf0abc", "truncated"),
    "nesting_bomb": (b"\x81\xa5extra" + b"\x91" * 200_000 + b"\xc0", "nested deeper"),
    "invalid_utf8": (b"\x82\xa1m\xa2\xff\xfe\xa6fields\x81\xa1v\x01", "UTF-8"),
    "not_a_record": (msgpack.packb(42), "payload is a record"),
    "no_measurement": (msgpack.packb({"fields": {"v": 1}}), "no measurement"),
    "nested_field": (msgpack.packb({"m": "victim", "fields": {"v": {"a": 1}}}), "nested"),
    "binary_value": (msgpack.packb({"m": "victim", "fields": {"v": b"\x00"}}), "binary"),
    "second_record_bad": (msgpack.packb([
        {"m": "victim", "fields": {"v": 9.0}},
        {"m": "victim", "fields": {"v": "x"}},
    ]), "record 1"),
    "type_conflict_with_table": (msgpack.packb({"m": "victim", "fields": {"v": "text"}}), "v"),
    "empty": (b"", "empty payload"),
}


@pytest.mark.parametrize("name", list(BAD_BODIES), ids=list(BAD_BODIES))
def test_bad_bodies_are_rejected_and_write_nothing(quiver_url: str, name: str) -> None:
    assert post(quiver_url, GOOD, "hostile").status_code == 204
    before = count(quiver_url, "hostile", "victim")
    body, expected = BAD_BODIES[name]
    r = post(quiver_url, body, "hostile")
    assert r.status_code == 400, (r.status_code, r.text)
    error = r.json()
    assert expected in error["error"], error
    assert "nothing was written" in error["error"] or name == "empty", error
    assert count(quiver_url, "hostile", "victim") == before
    assert requests.get(quiver_url + "/health", timeout=10).status_code == 200


def test_bad_records_name_their_index_and_offset(quiver_url: str) -> None:
    body = msgpack.packb({"batch": [
        {"m": "victim", "fields": {"v": 1.0}},
        {"m": "victim", "columns": {"a": [1, 2], "b": [3]}},
    ]})
    r = post(quiver_url, body, "hostile_where")
    assert r.status_code == 400
    data = r.json()["data"]
    assert data["record"] == 1 and isinstance(data["offset"], int) and 0 < data["offset"] < len(body)


@pytest.mark.parametrize("body,headers,status", [
    (b"\x1f\x8b\x08\x00garbage", {}, 400),
    (b"\x28\xb5\x2f\xfdgarbage", {}, 400),
    (b"not gzip at all", {"Content-Encoding": "gzip"}, 400),
    (GOOD, {"Content-Encoding": "br"}, 415),
], ids=["corrupt_gzip_magic", "corrupt_zstd_magic", "corrupt_gzip_header", "unknown_encoding"])
def test_corrupt_compression(quiver_url: str, body: bytes, headers: dict[str, str], status: int) -> None:
    r = post(quiver_url, body, "hostile_zip", **headers)
    assert r.status_code == status, r.text


def test_decompression_bomb_is_413(quiver_url: str) -> None:
    # One record whose string field declares and holds 80 MiB (beyond the 64 MiB limit): the
    # body is decoded as it is decompressed, so the record waits for its bytes until the limit.
    size = 80 << 20
    record = (b"\x82\xa1m\xa1x\xa6fields\x81\xa1s\xdb" + struct.pack(">I", size)
              + b"a" * size)
    r = post(quiver_url, gzip.compress(record), "hostile_zip")
    assert r.status_code == 413, r.text
    assert "exceeds the limit" in r.json()["error"]


def test_decompression_bomb_of_garbage_stops_at_the_first_bad_byte(quiver_url: str) -> None:
    # 80 MiB of zeros: not MessagePack records, found out from the first decompressed bytes
    # (the rest is never inflated).
    r = post(quiver_url, gzip.compress(b"\x00" * (80 << 20)), "hostile_zip")
    assert r.status_code == 400, r.text
    assert r.json()["data"] == {"offset": 0, "record": None}
