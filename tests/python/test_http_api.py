"""HTTP API behaviour tests: line-protocol writes, error responses, robustness.

Covers, against the real server started by ``conftest.py``:

* ``/api/v3/write_lp`` partial writes: with ``accept_partial`` defaulted or
  ``true``, a bad line in the middle yields 400 with InfluxDB 3's JSON error
  body and the good lines are stored; with ``accept_partial=false`` nothing
  is stored.
* ``Content-Encoding: gzip`` bodies (raw and via ``influxdb_client`` with
  ``enable_gzip=True``), corrupt gzip -> 400.
* ``/api/v2/write`` precision handling.
* Query errors: unknown database -> 404, SQL syntax error -> 400.
* After a barrage of bad requests ``/health`` still answers 200 and data
  written before is unchanged.

Each test writes to its own table so the tests do not depend on their order.
Results are read back with ``format=json`` (timestamps as RFC 3339 strings).
"""

from __future__ import annotations

import gzip
from typing import Any, Sequence

import pytest
import requests
from influxdb_client import InfluxDBClient, Point, WritePrecision
from influxdb_client.client.write_api import SYNCHRONOUS

from quiver_testlib import (HTTP_TIMEOUT_S, create_token, json_rows, query, query_json,
                            unique_name, write_lp)

DB = "http_api"
ORG = "quiver"
BASE_NS = 1_704_067_200_000_000_000  # 2024-01-01T00:00:00Z
PARTIAL_WRITE_ERROR = "partial write of line protocol occurred"

Row = tuple[Any, ...]


def select_rows(base_url: str, table: str, columns: Sequence[str]) -> list[Row]:
    """``SELECT columns FROM table ORDER BY time`` via ``format=json`` as tuples."""
    sql = f"SELECT {', '.join(columns)} FROM {table} ORDER BY time"
    return json_rows(query_json(base_url, DB, sql), columns, timestamp_columns=["time"])


def count_rows(base_url: str, table: str) -> int:
    return query_json(base_url, DB, f"SELECT count(*) AS n FROM {table}")[0]["n"]


BASELINE_ROWS: list[Row] = [
    (f"h{i}", i + 0.5, i * 10, BASE_NS + i * 1_000_000_001) for i in range(5)
]


@pytest.fixture(scope="module")
def baseline(quiver_url: str) -> list[Row]:
    """Write a small known table ``baseline`` and return its expected rows
    as ``(host, value, count, time_ns)`` tuples."""
    body = "\n".join(
        f"baseline,host={host} value={value},count={count}i {time_ns}"
        for host, value, count, time_ns in BASELINE_ROWS
    )
    resp = write_lp(quiver_url, DB, body)
    assert resp.status_code == 204, f"HTTP {resp.status_code}: {resp.text}"
    return BASELINE_ROWS


def test_write_lp_then_query(quiver_url: str, baseline: list[Row]) -> None:
    assert select_rows(quiver_url, "baseline", ["host", "value", "count", "time"]) == baseline


@pytest.mark.parametrize("accept_partial", [None, True], ids=["default", "true"])
def test_partial_write_keeps_good_lines(quiver_url: str, accept_partial: bool | None) -> None:
    table = f"partial_{'default' if accept_partial is None else 'true'}"
    lines = [
        f"{table},host=a value=1 {BASE_NS}",
        f"{table},host=b value=oops {BASE_NS + 1}",
        f"{table},host=c value=3 {BASE_NS + 2}",
    ]
    resp = write_lp(quiver_url, DB, "\n".join(lines), accept_partial=accept_partial)

    assert resp.status_code == 400, f"HTTP {resp.status_code}: {resp.text}"
    body = resp.json()
    assert body["error"] == PARTIAL_WRITE_ERROR
    assert len(body["data"]) == 1, body
    line_error = body["data"][0]
    assert line_error["line_number"] == 2
    assert line_error["original_line"] == lines[1]
    assert isinstance(line_error["error_message"], str) and line_error["error_message"]

    assert select_rows(quiver_url, table, ["host", "value", "time"]) == [
        ("a", 1.0, BASE_NS),
        ("c", 3.0, BASE_NS + 2),
    ]


def test_accept_partial_false_writes_nothing(quiver_url: str) -> None:
    table = "strict_write"
    seed = f"{table},host=seed value=0 {BASE_NS}"
    assert write_lp(quiver_url, DB, seed).status_code == 204

    lines = [
        f"{table},host=a value=1 {BASE_NS + 1}",
        f"{table},host=b value=oops {BASE_NS + 2}",
        f"{table},host=c value=3 {BASE_NS + 3}",
    ]
    resp = write_lp(quiver_url, DB, "\n".join(lines), accept_partial=False)
    assert resp.status_code == 400, f"HTTP {resp.status_code}: {resp.text}"

    assert select_rows(quiver_url, table, ["host", "value", "time"]) == [
        ("seed", 0.0, BASE_NS),
    ]


def test_gzip_body(quiver_url: str) -> None:
    table = "gzip_raw"
    body = "\n".join(f"{table},host=h{i} value={i}i {BASE_NS + i}" for i in range(100))
    resp = write_lp(quiver_url, DB, body, compress=True)
    assert resp.status_code == 204, f"HTTP {resp.status_code}: {resp.text}"
    rows = select_rows(quiver_url, table, ["host", "value", "time"])
    assert rows == [(f"h{i}", i, BASE_NS + i) for i in range(100)]


def test_gzip_via_influxdb_client(quiver_url: str) -> None:
    """The official client's gzip mode (``/api/v2/write`` + Content-Encoding: gzip)."""
    table = "gzip_client"
    points = [
        Point(table).tag("host", f"h{i}").field("value", i + 0.25)
        .time(BASE_NS + i, WritePrecision.NS)
        for i in range(10)
    ]
    token = create_token(quiver_url, unique_name("gzip-writer"), ["db:*:write"])
    with InfluxDBClient(url=quiver_url, token=token, org=ORG, enable_gzip=True) as client:
        client.write_api(write_options=SYNCHRONOUS).write(
            bucket=DB, org=ORG, record=points, write_precision=WritePrecision.NS
        )
    rows = select_rows(quiver_url, table, ["host", "value", "time"])
    assert rows == [(f"h{i}", i + 0.25, BASE_NS + i) for i in range(10)]


def test_corrupt_gzip_rejected(quiver_url: str) -> None:
    corrupt = gzip.compress(b"gzip_corrupt,host=a value=1 1704067200000000000")[:-12]
    corrupt += b"\x00not-gzip\xff"
    resp = write_lp(quiver_url, DB, corrupt, headers={"Content-Encoding": "gzip"})
    assert resp.status_code == 400, f"HTTP {resp.status_code}: {resp.text}"


@pytest.mark.parametrize(
    ("precision", "timestamp"),
    [
        ("s", 1_704_067_200),
        ("ms", 1_704_067_200_123),
        ("us", 1_704_067_200_123_456),
        ("ns", 1_704_067_200_123_456_789),
    ],
)
def test_v2_write_precision(quiver_url: str, precision: str, timestamp: int) -> None:
    table = f"precision_{precision}"
    resp = requests.post(
        f"{quiver_url}/api/v2/write",
        params={"bucket": DB, "org": ORG, "precision": precision},
        data=f"{table},host=a value=1i {timestamp}",
        timeout=HTTP_TIMEOUT_S,
    )
    assert resp.status_code == 204, f"HTTP {resp.status_code}: {resp.text}"
    scale = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[precision]
    assert select_rows(quiver_url, table, ["host", "value", "time"]) == [
        ("a", 1, timestamp * scale),
    ]


def test_query_unknown_database_is_404(quiver_url: str) -> None:
    resp = query(quiver_url, "no_such_database_xyz", "SELECT 1")
    assert resp.status_code == 404, f"HTTP {resp.status_code}: {resp.text}"


def test_sql_syntax_error_is_400(quiver_url: str, baseline: list[Row]) -> None:
    resp = query(quiver_url, DB, "SELEC host FRM baseline")
    assert resp.status_code == 400, f"HTTP {resp.status_code}: {resp.text}"


def test_server_survives_bad_requests(quiver_url: str, baseline: list[Row]) -> None:
    """Hammer the API with malformed requests, then check health and old data."""
    bad_gzip = b"\x1f\x8b\x08\x00garbage that is not deflate data"
    # (description, callable returning a response, exact status or None for any 4xx)
    attempts = [
        ("all lines invalid", lambda: write_lp(quiver_url, DB, "this is not\nline protocol"), 400),
        ("bad line into baseline, accept_partial=false",
         lambda: write_lp(quiver_url, DB,
                          f"baseline,host=zz value=9 {BASE_NS + 99}\nbaseline,host=zz value=",
                          accept_partial=False), 400),
        ("corrupt gzip", lambda: write_lp(quiver_url, DB, bad_gzip,
                                          headers={"Content-Encoding": "gzip"}), 400),
        ("plain body labelled gzip", lambda: write_lp(
            quiver_url, DB, "baseline,host=zz value=1", headers={"Content-Encoding": "gzip"}), 400),
        ("invalid UTF-8", lambda: write_lp(quiver_url, DB, b"bad\xff\xfe,host=a value=1"), None),
        ("unknown precision", lambda: write_lp(quiver_url, DB, "baseline,host=zz value=1",
                                               precision="fortnight"), None),
        ("write without db", lambda: requests.post(
            f"{quiver_url}/api/v3/write_lp", data="baseline,host=zz value=1",
            timeout=HTTP_TIMEOUT_S), None),
        ("unknown database", lambda: query(quiver_url, "no_such_database_xyz", "SELECT 1"), 404),
        ("SQL syntax error", lambda: query(quiver_url, DB, "SELECT FROM WHERE ((("), 400),
        ("unknown table", lambda: query(quiver_url, DB, "SELECT * FROM no_such_table"), None),
        ("unknown format", lambda: query(quiver_url, DB, "SELECT 1", fmt="xml"), None),
        ("query without q", lambda: requests.get(
            f"{quiver_url}/api/v3/query_sql", params={"db": DB}, timeout=HTTP_TIMEOUT_S), None),
    ]
    failures = []
    for description, send, expected_status in attempts:
        resp = send()
        ok = (resp.status_code == expected_status if expected_status is not None
              else 400 <= resp.status_code < 500)
        if not ok:
            wanted = expected_status or "4xx"
            failures.append(f"{description}: HTTP {resp.status_code} (wanted {wanted}): "
                            f"{resp.text[:300]}")

    health = requests.get(f"{quiver_url}/health", timeout=HTTP_TIMEOUT_S)
    assert health.status_code == 200, f"/health answered {health.status_code}"
    # the role the server was started with (the default), not one guessed from its store
    assert health.json()["role"] == "all", health.json()
    assert select_rows(quiver_url, "baseline", ["host", "value", "count", "time"]) == baseline
    assert count_rows(quiver_url, "baseline") == len(baseline)
    assert not failures, "unexpected status codes:\n" + "\n".join(failures)
