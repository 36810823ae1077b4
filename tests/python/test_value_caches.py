"""InfluxDB 3's last-value and distinct-value caches on Quiver (issue 39): the configure API in
InfluxDB 3's request shapes, `last_cache()` / `distinct_cache()` in SQL with nothing configured
(InfluxDB 3's defaults) and with configured settings, answers that follow every write at once,
settings that survive a restart (InfluxDB 3 Core empties its caches), and clear errors.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import requests

from conftest import SpawnedServer
from quiver_testlib import HTTP_TIMEOUT_S, write_ok

Spawn = Callable[..., SpawnedServer]
DB = "lvc"


def sql(server: SpawnedServer, statement: str) -> requests.Response:
    return requests.get(f"{server.http_url}/api/v3/query_sql",
                        params={"db": DB, "q": statement}, timeout=HTTP_TIMEOUT_S)


def rows(server: SpawnedServer, statement: str) -> list[dict[str, Any]]:
    response = sql(server, statement)
    assert response.status_code == 200, response.text
    assert response.headers["x-quiver-cache"] == "BYPASS" or "_cache(" not in statement
    return response.json()


def configure(server: SpawnedServer, kind: str, body: Any) -> requests.Response:
    url = f"{server.http_url}/api/v3/configure/{kind}_cache"
    if isinstance(body, bytes):
        return requests.post(url, data=body, timeout=HTTP_TIMEOUT_S)
    return requests.post(url, json=body, timeout=HTTP_TIMEOUT_S)


def recent_lines(points_per_series: int) -> str:
    now = time.time_ns()
    lines = []
    for i in range(points_per_series):
        t = now - (points_per_series - i) * 1_000_000_000
        for host in ("a", "b", "c"):
            for region in ("eu", "us"):
                lines.append(f"cpu,host={host},region={region} usage={i}.5,count={i}i {t}")
    return "\n".join(lines) + "\n"


def test_caches_answer_from_what_quiver_keeps_and_survive_a_restart(spawn_quiver: Spawn,
                                                                    tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    server = spawn_quiver("--data-dir", data, cwd=tmp_path)
    write_ok(server.http_url, DB, recent_lines(5))
    # nothing configured: InfluxDB 3's defaults (tags as keys, one row each)
    newest = rows(server, "SELECT host, region, usage, count, time FROM last_cache('cpu') "
                          "ORDER BY host, region")
    expected = rows(server, "SELECT DISTINCT ON (host, region) host, region, usage, count, time "
                            "FROM cpu ORDER BY host, region, time DESC")
    assert newest == expected and len(newest) == 6 and newest[0]["count"] == 4
    assert rows(server, "SELECT * FROM distinct_cache('cpu')") == [
        {"host": h, "region": r} for h in ("a", "b", "c") for r in ("eu", "us")]

    created = configure(server, "last", {"db": DB, "table": "cpu", "name": "two",
                                         "key_columns": ["host"], "value_columns": ["usage"],
                                         "count": 2, "ttl": 3600})
    assert created.status_code == 201, created.text
    assert configure(server, "last", {"db": DB, "table": "cpu", "name": "two",
                                      "key_columns": ["host"], "value_columns": ["usage"],
                                      "count": 2, "ttl": 3600}).status_code == 409
    created = configure(server, "distinct", {"db": DB, "table": "cpu", "columns": ["region", "host"],
                                             "max_cardinality": 4, "max_age": 3600})
    assert created.status_code == 201, created.text
    assert created.json()["name"] == "cpu_region_host_distinct_cache"

    def configured() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        last = rows(server, "SELECT host, usage FROM last_cache('cpu', 'two') ORDER BY host, usage")
        distinct = rows(server, "SELECT * FROM distinct_cache('cpu')")
        return last, distinct

    last, distinct = configured()
    # the two newest rows of each host: its two regions' newest points
    assert last == [{"host": h, "usage": 4.5} for h in ("a", "b", "c") for _ in range(2)]
    assert distinct == [{"region": "eu", "host": h} for h in ("a", "b", "c")] + [
        {"region": "us", "host": "a"}]
    # a write is in the next answer: no cache to refresh
    write_ok(server.http_url, DB, f"cpu,host=d,region=ap usage=9.5,count=9i {time.time_ns()}\n")
    last, distinct = configured()
    assert {"host": "d", "usage": 9.5} in last and distinct[0] == {"region": "ap", "host": "d"}

    server.stop()
    server = spawn_quiver("--data-dir", data, cwd=tmp_path)
    assert configured() == (last, distinct)

    url = f"{server.http_url}/api/v3/configure/last_cache"
    gone = requests.delete(url, params={"db": DB, "table": "cpu", "name": "two"},
                           timeout=HTTP_TIMEOUT_S)
    assert gone.status_code == 200, gone.text
    again = requests.delete(url, params={"db": DB, "table": "cpu", "name": "two"},
                            timeout=HTTP_TIMEOUT_S)
    assert again.status_code == 404, again.text
    missing = sql(server, "SELECT * FROM last_cache('cpu', 'two')")
    assert missing.status_code == 400 and "no last cache named" in missing.text


def test_bad_cache_requests_get_clear_errors(spawn_quiver: Spawn, tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    write_ok(server.http_url, DB, "cpu,host=a usage=1.5,note=\"x\" 1\n")
    last = {"db": DB, "table": "cpu"}
    cases = [
        ("last", b"{", 400, "invalid request body"),
        ("last", {**last, "count": 11}, 400, "count must be 1 to 10"),
        ("last", {**last, "key_columns": ["usage"]}, 400, "cannot key"),
        ("last", {**last, "key_columns": ["nope"]}, 400, "no column"),
        ("last", {**last, "table": "nope"}, 404, "not found"),
        ("last", {**last, "surprise": 1}, 400, "unknown field"),
        ("distinct", {**last, "columns": []}, 400, "needs columns"),
        ("distinct", {**last, "columns": ["usage"]}, 400, "cannot key"),
        ("distinct", {**last}, 400, "missing field"),
    ]
    for kind, body, status, text in cases:
        response = configure(server, kind, body)
        assert response.status_code == status, (body, response.text)
        assert text in response.json()["error"], response.text
    for statement, text in [("SELECT * FROM last_cache('nope')", "not found"),
                            ("SELECT * FROM last_cache(1)", "takes a table name"),
                            ("SELECT * FROM distinct_cache()", "takes a table name")]:
        response = sql(server, statement)
        assert response.status_code == 400 and text in response.text, response.text
    # a table's caches of one kind are bounded
    for i in range(16):
        made = configure(server, "distinct", {**last, "name": f"d{i}", "columns": ["host"]})
        assert made.status_code == 201, made.text
    over = configure(server, "distinct", {**last, "name": "one_more", "columns": ["host"]})
    assert over.status_code == 422 and "limit of 16 distinct caches" in over.text, over.text
    bad = requests.delete(f"{server.http_url}/api/v3/configure/distinct_cache",
                          params={"db": DB}, timeout=HTTP_TIMEOUT_S)
    assert bad.status_code == 400
    assert rows(server, "SELECT count(*) AS n FROM cpu") == [{"n": 1}]
