"""JDBC, as Java applications connect: pgjdbc over the PostgreSQL wire protocol and the Arrow
Flight SQL JDBC driver over Flight SQL, both from Maven Central (``tests/java/pom.xml``), driven
by ``tests/java/JdbcClients.java`` against the real server.

Every differential-test query returns the same rows through both drivers as over HTTP, as a
plain statement and as a prepared statement executed seven times (pgjdbc moves to a named
server-side statement with binary results after five). Parameters (``?``), the drivers'
metadata calls and errors work, and the connection stays usable after an error. Tag columns
reach the Flight SQL JDBC driver as their values: it reads dictionary-encoded columns' keys
as values, so Quiver sends Java's Flight client plain columns.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from quiver_testlib import (assert_rows_match, create_token, normalize_table, query_arrow,
                            unique_name, write_lp)
from test_differential import DB, QUERIES, dataset, loaded_quiver_url  # noqa: F401

JAVA_DIR = Path(__file__).resolve().parent.parent / "java"
JDBC_DB = "jdbc_basics"
# One sub-microsecond time (PostgreSQL keeps microseconds, Flight SQL nanoseconds), a missing
# field (NULL), negative and non-ASCII values, two tags.
JDBC_LINES = (
    "cpu,host=a,region=eu usage=1.5,count=3i,ok=true,note=\"x\" 1700000000123456789\n"
    "cpu,host=b,region=us usage=2.5,count=-4i,ok=false 1700000001000000000\n"
    "cpu,host=ü,region=eu usage=-3.25,count=5i,ok=true,note=\"é \\\"q\\\"\" 1700000002000000999\n"
)


@pytest.fixture(scope="module")
def classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The drivers' jars, resolved (and on first use downloaded) by Maven."""
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is required for the JDBC tests (a JDK 17+ and Maven)",
                        pytrace=False)
    out = tmp_path_factory.mktemp("jdbc") / "classpath.txt"
    subprocess.run(["mvn", "-q", "-B", "-f", str(JAVA_DIR / "pom.xml"),
                    "dependency:build-classpath", f"-Dmdep.outputFile={out}"],
                   check=True, timeout=600)
    return out.read_text().strip()


def run_clients(classpath: str, base_url: str, pg_port: int, flight_uri: str, db: str,
                mode: str, queries: list[str]) -> list[dict[str, Any]]:
    """Runs both drivers as a token allowed to read ``db`` (pgjdbc logs in with SCRAM-SHA-256,
    the Flight SQL driver sends the token as a bearer)."""
    flight_port = flight_uri.rsplit(":", 1)[1]
    name = unique_name("jdbc")
    token = create_token(base_url, name, [f"db:{db}:read"])
    result = subprocess.run(
        ["java", "--add-opens=java.base/java.nio=ALL-UNNAMED", "-Duser.timezone=UTC",
         "-cp", classpath, str(JAVA_DIR / "JdbcClients.java"),
         str(pg_port), flight_port, db, mode, *queries],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "QUIVER_TOKEN_NAME": name, "QUIVER_TOKEN": token})
    assert result.returncode == 0, f"JdbcClients failed:\n{result.stdout}\n{result.stderr}"
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def http_rows(base_url: str, db: str, sql: str, *, micros: bool) -> tuple[list[str], list[tuple]]:
    """HTTP's answer with times as nanoseconds (floored to microseconds for PostgreSQL)."""
    table = query_arrow(base_url, db, sql)
    names, rows = normalize_table(table)
    times = {i for i, f in enumerate(table.schema) if str(f.type).startswith("timestamp")}
    floor = 1000 if micros else 1
    return names, [tuple(v - v % floor if i in times and v is not None else v
                         for i, v in enumerate(row)) for row in rows]


def assert_same_as_http(line: dict[str, Any], base_url: str, db: str) -> None:
    names, rows = http_rows(base_url, db, line["sql"], micros=line["client"] == "pgjdbc")
    assert_rows_match(line["columns"], [tuple(r) for r in line["rows"]], names, rows,
                      context=f"{line['client']} {line['check']}: {line['sql']}")


@pytest.fixture(scope="module")
def jdbc_basics(quiver_url: str) -> str:
    response = write_lp(quiver_url, JDBC_DB, JDBC_LINES)
    assert response.status_code == 204, response.text
    return quiver_url


def test_differential_queries_through_both_drivers(
    classpath: str, loaded_quiver_url: str, quiver_pg_port: int,  # noqa: F811
    quiver_flight_uri: str,
) -> None:
    lines = run_clients(classpath, loaded_quiver_url, quiver_pg_port, quiver_flight_uri, DB,
                        "queries",
                        [q.sql for q in QUERIES])
    seen = {(line["client"], line["check"]) for line in lines}
    assert seen == {(client, check) for client in ("pgjdbc", "flight-sql-jdbc")
                    for check in ("statement", "prepared")}, seen
    assert len(lines) == 4 * len(QUERIES)
    for line in lines:
        assert_same_as_http(line, loaded_quiver_url, DB)


def test_types_parameters_metadata_and_errors(
    classpath: str, jdbc_basics: str, quiver_pg_port: int, quiver_flight_uri: str,
) -> None:
    sql = "SELECT time, host, region, usage, count, ok, note FROM cpu ORDER BY time"
    lines = run_clients(classpath, jdbc_basics, quiver_pg_port, quiver_flight_uri, JDBC_DB, "all",
                        [sql])
    by_check = {(line["client"], line["check"]): line for line in lines}
    for client in ("pgjdbc", "flight-sql-jdbc"):
        for check in ("statement", "prepared", "parameter"):
            assert_same_as_http(by_check[client, check], jdbc_basics, JDBC_DB)
        rows = by_check[client, "statement"]["rows"]
        # Tags are their values (not dictionary keys), the sub-microsecond time survives where
        # the protocol can carry it, the missing field is NULL.
        assert [r[1] for r in rows] == ["a", "b", "ü"], client
        assert rows[0][0] == (1700000000123456000 if client == "pgjdbc"
                              else 1700000000123456789), client
        assert rows[1][6] is None and rows[2][6] == 'é "q"', client
        assert by_check[client, "parameter"]["rows"] == [["b", 2.5]], client

        meta = by_check[client, "metadata"]
        assert meta["product"] == ("PostgreSQL" if client == "pgjdbc" else "Quiver")
        assert "cpu" in meta["tables"], meta
        assert sorted(meta["columns"]) == sorted(
            ["time", "host", "region", "usage", "count", "ok", "note"]), meta

        error = by_check[client, "error"]
        assert "no_such_table" in error["error"], error
        assert error["count_after"] == 3, "the connection works after an error"
    assert by_check["pgjdbc", "error"]["error"].startswith("42P01"), by_check["pgjdbc", "error"]
