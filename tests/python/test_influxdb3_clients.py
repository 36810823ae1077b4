"""The InfluxDB 3 client libraries, unchanged, against Quiver's HTTP port.

They write with the HTTP API and query over Arrow Flight on the same host and port, with a JSON
ticket ``{"database", "sql_query", "query_type", "params"}``: Quiver's HTTP port answers gRPC
too. Driven here: ``influxdb3-python`` (records, points, pandas frames; pyarrow and pandas
answers; SQL with parameters and InfluxQL; tokens) and the Go client
(``github.com/InfluxCommunity/influxdb3-go``, built from ``tests/go/influxdb3client``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
import requests
from influxdb_client_3 import InfluxDBClient3, Point
from influxdb_client_3.exceptions import InfluxDB3ClientQueryError

from quiver_testlib import create_token, unique_name

REPO = Path(__file__).resolve().parents[2]


def create_database(base_url: str, db: str) -> None:
    resp = requests.post(f"{base_url}/api/v3/configure/database", json={"db": db}, timeout=30)
    assert resp.status_code in (200, 201), resp.text


def test_influxdb3_python_writes_and_queries_in_sql_and_influxql(quiver_url: str) -> None:
    db = "influxdb3_python"
    create_database(quiver_url, db)
    token = create_token(quiver_url, unique_name("py3"), [f"db:{db}:write", f"db:{db}:read"])
    with InfluxDBClient3(host=quiver_url, token=token, database=db) as client:
        client.write(record="cpu,host=a,region=eu usage=1.5,idle=90i 1600000000000000000")
        client.write(record=Point("cpu").tag("host", "b").tag("region", "us")
                     .field("usage", 2.5).field("idle", 80).time(1600000010000000000))
        frame = pd.DataFrame({"time": pd.to_datetime([1600000020, 1600000030], unit="s"),
                              "host": ["c", "a"], "usage": [3.5, 4.5]}).set_index("time")
        client.write(record=frame, data_frame_measurement_name="cpu",
                     data_frame_tag_columns=["host"])

        table = client.query("SELECT host, usage FROM cpu ORDER BY time", language="sql")
        assert isinstance(table, pa.Table)
        assert table.column("host").to_pylist() == ["a", "b", "c", "a"]
        assert table.column("usage").to_pylist() == [1.5, 2.5, 3.5, 4.5]
        # tags arrive as plain strings, as InfluxDB 3 sends them (its Go client refuses
        # dictionaries)
        assert table.schema.field("host").type == pa.string()

        df = client.query("SELECT host, usage FROM cpu WHERE usage > $min ORDER BY time",
                          language="sql", mode="pandas", query_parameters={"min": 2.0})
        assert list(df["host"]) == ["b", "c", "a"]

        influxql = client.query("SELECT mean(usage) FROM cpu GROUP BY host", language="influxql")
        rows = sorted(zip(influxql.column("host").to_pylist(),
                          influxql.column("mean").to_pylist()))
        assert rows == [("a", 3.0), ("b", 2.5), ("c", 3.5)]
        assert set(influxql.column("iox::measurement").to_pylist()) == {"cpu"}

        shown = client.query("SHOW MEASUREMENTS", language="influxql")
        assert shown.column("name").to_pylist() == ["cpu"]

        with pytest.raises(InfluxDB3ClientQueryError, match="not found"):
            client.query("SELECT * FROM nosuch", language="sql")
        with pytest.raises(InfluxDB3ClientQueryError, match="error parsing query"):
            client.query("SELECT FROM cpu", language="influxql")


def test_influxdb3_python_is_held_to_its_token(quiver_url: str) -> None:
    db = "influxdb3_tokens"
    create_database(quiver_url, db)
    with InfluxDBClient3(host=quiver_url, token="", database=db) as local:
        # no token from this machine: admitted by the default auth = loopback
        local.write(record="m,t=x v=1 1")
        assert local.query("SELECT v FROM m").column("v").to_pylist() == [1.0]
    reader = create_token(quiver_url, unique_name("py3-reader"), [f"db:{db}:read"])
    other = create_token(quiver_url, unique_name("py3-other"), ["db:somewhere_else:read"])
    with InfluxDBClient3(host=quiver_url, token=reader, database=db) as client:
        assert client.query("SELECT v FROM m").num_rows == 1
        with pytest.raises(Exception, match="403|[Pp]ermission|Forbidden"):
            client.write(record="m,t=x v=2 2")
    with InfluxDBClient3(host=quiver_url, token=other, database=db) as client:
        with pytest.raises(InfluxDB3ClientQueryError, match="PERMISSION_DENIED|permission"):
            client.query("SELECT v FROM m")
    with InfluxDBClient3(host=quiver_url, token="not-a-token", database=db) as client:
        with pytest.raises(InfluxDB3ClientQueryError, match="UNAUTHENTICATED|invalid token"):
            client.query("SELECT v FROM m")


def test_hostile_json_tickets_get_clear_errors(quiver_url: str) -> None:
    from pyarrow import flight

    client = flight.FlightClient(quiver_url.replace("http://", "grpc+tcp://"))
    for ticket, expected in [
        (b'{"database": "x"', "invalid JSON ticket"),
        (b'{"database": "x", "query_type": "sql"}', "sql_query"),
        (b'{"database": "x", "sql_query": "SELECT 1", "query_type": "flux"}', "flux"),
        (b'{"database": "nosuchdb", "sql_query": "SELECT 1"}', "nosuchdb"),
        (b'{"database": "x", "sql_query": "SELECT $1", "params": {"a": [1]}}', r"\$a must be"),
        (b'{"database": "x", "sql_query": "SELECT 1; SELECT 2", "query_type": "influxql"}',
         "error parsing query"),
    ]:
        with pytest.raises((flight.FlightError, pa.ArrowException), match=expected):
            client.do_get(flight.Ticket(ticket)).read_all()
    # the server is still up, over both protocols on the one port
    assert requests.get(f"{quiver_url}/health", timeout=10).status_code == 200


def go_binary() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    return "/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None


def test_the_go_client_writes_and_queries(quiver_url: str, tmp_path: Path) -> None:
    go = go_binary()
    if go is None:
        message = "Go is required for the InfluxDB 3 Go client test"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    db = "influxdb3_go"
    create_database(quiver_url, db)
    token = create_token(quiver_url, unique_name("go3"), [f"db:{db}:write", f"db:{db}:read"])
    binary = tmp_path / "influxdb3client"
    build = subprocess.run([go, "build", "-o", str(binary), "."],
                           cwd=REPO / "tests" / "go" / "influxdb3client",
                           capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(binary), "-host", quiver_url, "-token", token, "-database", db],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    results = {r["query"]: r for r in map(json.loads, run.stdout.splitlines())}
    assert results["sql"]["rows"] == [{"city": "oslo", "hum": 80, "temp": 3.5},
                                      {"city": "rome", "hum": 40, "temp": 21.25}]
    assert results["sql_params"]["rows"] == [{"temp": 21.25}]
    assert sorted((r["city"], r["mean"]) for r in results["influxql"]["rows"]) == [
        ("oslo", 3.5), ("rome", 21.25)]
    assert "not found" in results["missing_table"]["error"]
