"""``GET /metrics``: Prometheus text that ``promtool check metrics`` accepts, with requests and
latencies per protocol and endpoint, ingest, WAL, persistence, caches, authentication failures
and rate-limit refusals, read from a real server after real traffic on all three protocols."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pytest
import requests

from test_auth import bearer, offline_admin, query
from quiver_testlib import persist, write_lp

DB = "metrics_db"


def sample(text: str, name: str, **labels: str) -> float:
    """The value of the series ``name`` whose labels include ``labels`` (summed over the
    others)."""
    total, found = 0.0, False
    for line in text.splitlines():
        match = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        if not match or match.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total, found = total + float(match.group(3)), True
    assert found, f"no series {name}{labels} in:\n{text[:3000]}"
    return total


def test_metrics_cover_every_layer_and_pass_promtool(spawn_quiver, quiver_bin: Path,
                                                      tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is required (Debian package prometheus; scripts/test.sh installs it)"
    data_dir = tmp_path / "data"
    admin = offline_admin(quiver_bin, data_dir)
    server = spawn_quiver("--data-dir", str(data_dir), "--auth", "required",
                          "--rate-limit-requests-per-sec", "1000", cwd=tmp_path)
    headers = bearer(admin)
    assert write_lp(server.http_url, DB, "cpu,host=a v=1 1\ncpu,host=b v=2 2\n",
                    headers=headers).status_code == 204
    for _ in range(2):
        assert query(server, "SELECT count(*) FROM cpu", headers, db=DB).status_code == 200
    assert query(server, "SELECT 1", {"Authorization": "Bearer qv_wrong"}).status_code == 401
    before_persist = requests.get(f"{server.http_url}/metrics", headers=headers, timeout=10).text
    assert sample(before_persist, "quiver_persist_lag_seconds") > 0
    assert sample(before_persist, "quiver_write_buffer_bytes") > 0
    persist_response = requests.post(f"{server.http_url}/api/v3/persist", headers=headers,
                                     timeout=60)
    assert persist_response.status_code == 200
    with psycopg.connect(host="127.0.0.1", port=server.pg_port, dbname=DB, user="admin",
                         password=admin, autocommit=True) as conn:
        conn.execute("SELECT count(*) FROM cpu").fetchall()
    with flight_sql.connect(server.flight_uri, autocommit=True, db_kwargs={
            "adbc.flight.sql.rpc.call_header.database": DB,
            "adbc.flight.sql.authorization_header": f"Bearer {admin}"}) as conn:
        with conn.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM cpu")
            cursor.fetchall()

    assert requests.get(f"{server.http_url}/metrics", timeout=10).status_code == 401
    response = requests.get(f"{server.http_url}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.text
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    assert sample(text, "quiver_requests_total", protocol="http", endpoint="/api/v3/query_sql",
                  status="200") == 2
    assert sample(text, "quiver_requests_total", protocol="http", status="401") >= 1
    assert sample(text, "quiver_request_duration_seconds_count", protocol="http",
                  endpoint="/api/v3/write_lp") == 1
    assert sample(text, "quiver_requests_total", protocol="postgres", status="ok") >= 1
    assert sample(text, "quiver_request_duration_seconds_count", protocol="postgres") >= 1
    assert sample(text, "quiver_requests_total", protocol="flight", endpoint="DoGet",
                  status="0") >= 1
    assert sample(text, "quiver_request_duration_seconds_bucket", protocol="flight",
                  endpoint="GetFlightInfo", le="+Inf") >= 1
    assert sample(text, "quiver_ingest_rows_total") == 2
    assert sample(text, "quiver_ingest_bytes_total") > 0
    assert sample(text, "quiver_wal_records_total") >= 1
    assert sample(text, "quiver_wal_group_commits_total") >= 1
    assert sample(text, "quiver_wal_fsyncs_total") >= 1
    assert sample(text, "quiver_persist_total") >= 1
    assert sample(text, "quiver_persist_rows_total") == 2
    # the buffer's fill against its thresholds, and the persist lag (nothing unpersisted now)
    assert sample(text, "quiver_write_buffer_persist_bytes") > 0
    assert (sample(text, "quiver_write_buffer_limit_bytes")
            >= sample(text, "quiver_write_buffer_persist_bytes"))
    assert sample(text, "quiver_persist_lag_seconds") == 0
    assert sample(text, "quiver_write_buffer_waits_total") == 0
    assert sample(text, "quiver_write_buffer_waited_seconds") == 0
    assert sample(text, "quiver_write_buffer_refusals_total") == 0
    # where persisting spent its time: a persist merged, encoded and stored one file
    for step in ("merge", "encode", "store"):
        assert sample(text, "quiver_persist_step_seconds", step=step) > 0, step
    assert sample(text, "quiver_persist_step_seconds", step="read") == 0
    sample(text, "quiver_compaction_step_seconds", step="encode")  # exported
    assert sample(text, "quiver_result_cache_hits_total") >= 1
    assert sample(text, "quiver_result_cache_misses_total") >= 1
    assert sample(text, "quiver_chunk_cache_bytes") >= 0
    # the statements above were planned (result-cache misses): their plans are kept
    assert sample(text, "quiver_plan_cache_misses_total") >= 1
    assert sample(text, "quiver_plan_cache_plans") >= 1
    sample(text, "quiver_plan_cache_hits_total")  # exported (sample asserts the series exists)
    assert sample(text, "quiver_auth_failures_total", reason="invalid_token") == 1
    assert sample(text, "quiver_queries_running") == 0


def test_rate_limit_refusals_are_counted(spawn_quiver, quiver_bin: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    admin = offline_admin(quiver_bin, data_dir)
    server = spawn_quiver("--data-dir", str(data_dir), "--rate-limit-requests-per-sec", "3",
                          cwd=tmp_path)
    statuses = [query(server, "SELECT 1", bearer(admin)).status_code for _ in range(10)]
    refused = statuses.count(429)
    assert refused > 0, statuses
    # the local caller (no token) has an allowance of its own: it scrapes
    text = requests.get(f"{server.http_url}/metrics", timeout=10).text
    assert sample(text, "quiver_rate_limited_total", limit="requests") == refused
    assert sample(text, "quiver_requests_total", protocol="http", status="429") == refused


def test_metrics_in_the_readme_defaults(spawn_quiver, tmp_path: Path) -> None:
    """The README's command: loopback clients scrape without a token."""
    server = spawn_quiver(cwd=tmp_path)
    assert write_lp(server.http_url, DB, "cpu v=1 1\n").status_code == 204
    persist(server.http_url)
    text = requests.get(f"{server.http_url}/metrics", timeout=10).text
    assert sample(text, "quiver_ingest_rows_total") == 1
    assert "quiver_requests_total" in text
    assert (tmp_path / "quiver-data" / "tokens.json").exists() is False
