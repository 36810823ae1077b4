"""The first hour with Quiver, as a newcomer and an operator live it (issue 38), through the
README's own `quiver serve` where a user meets it: the repository stands on its own, memory a
big query took is given back, a sort larger than its memory spills, configuration refuses what
it would ignore, ADBC's connections end cleanly and a client's timeout is no server error in
the log, a PostgreSQL session lists its own database's tables, and the command line says what
it did.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Callable

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.ipc as ipc
import pytest
import requests

from conftest import DEFAULT_PORTS, SpawnedServer
from quiver_testlib import (HTTP_TIMEOUT_S, environment_without_quiver_variables, ports_free,
                            write_ok)
from test_metrics import sample

REPO = Path(__file__).resolve().parents[2]
Spawn = Callable[..., SpawnedServer]
MIB = 1 << 20
DATABASE_HEADER = "adbc.flight.sql.rpc.call_header.database"


def readme_server(spawn_quiver: Spawn, tmp_path: Path, *args: str,
                  env: dict[str, str] | None = None) -> SpawnedServer:
    """`quiver serve` as the README runs it: in a fresh directory (so `./quiver-data`), on the
    default ports (with `env` added to its environment)."""
    if not ports_free(DEFAULT_PORTS):
        pytest.fail(f"a default port of {DEFAULT_PORTS} is taken: stop whatever holds it")
    server = spawn_quiver(*args, cwd=tmp_path, default_ports=True, env=env)
    assert (tmp_path / "quiver-data").is_dir()
    return server


def resident_bytes(server: SpawnedServer) -> int:
    """The server process's resident memory (VmRSS)."""
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1)) * 1024


def sql(server: SpawnedServer, db: str, statement: str, **params: str) -> requests.Response:
    return requests.get(f"{server.http_url}/api/v3/query_sql",
                        params={"db": db, "q": statement, **params}, timeout=HTTP_TIMEOUT_S)


def quiver_cli(quiver_bin: Path, *args: str, stdin: str | None = None,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(quiver_bin), *args], capture_output=True, text=True, input=stdin,
                          env={**environment_without_quiver_variables(), **(env or {})},
                          timeout=60)


# --------------------------------------------------------------------------
# 1. the repository stands on its own
# --------------------------------------------------------------------------

def test_every_document_the_readme_points_to_is_in_the_repository() -> None:
    readme = (REPO / "README.md").read_text()
    assert "../shared" not in readme
    assert (REPO / "docs" / "architecture.md").is_file()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    relative = [link for link in links if "://" not in link]
    assert "docs/architecture.md" in relative
    for link in relative:
        assert (REPO / link).exists(), f"README links to {link}, which the repository lacks"
    for path in [*REPO.glob("docs/*.md"), REPO / "tests" / "conformance" / "README.md"]:
        assert "../shared" not in path.read_text(), path


# --------------------------------------------------------------------------
# 2. memory is given back
# --------------------------------------------------------------------------

def test_resident_memory_returns_after_the_largest_query(spawn_quiver: Spawn,
                                                         tmp_path: Path) -> None:
    """A query that holds hundreds of megabytes (an `array_agg` of millions of values) ends;
    within 10 s the idle server's resident memory is back within 10 % (or 64 MiB) of where it
    was before it (with the system allocator it stayed hundreds of megabytes above)."""
    server = readme_server(spawn_quiver, tmp_path)
    write_ok(server.http_url, "mem", "cpu,host=a usage=1 1\n")
    # warm up what every query allocates once (sessions, plans, the runtimes' threads)
    assert sql(server, "mem", "SELECT count(*) FROM cpu").status_code == 200
    before = resident_bytes(server)
    statement = ("SELECT array_length(array_agg(v), 1) AS n "
                 "FROM generate_series(1, 30000000) t(v)")
    response = sql(server, "mem", statement)
    assert response.status_code == 200, response.text[:500]
    assert response.json() == [{"n": 30_000_000}]
    peak = int(re.search(r"^VmHWM:\s+(\d+) kB",
                         Path(f"/proc/{server.proc.pid}/status").read_text(), re.M).group(1))
    assert peak * 1024 > before + 300 * MIB, "the query did not hold much: the test proves nothing"
    allowed = before + max(before // 10, 64 * MIB)
    deadline = time.monotonic() + 10
    while resident_bytes(server) > allowed and time.monotonic() < deadline:
        time.sleep(0.2)
    after = resident_bytes(server)
    assert after <= allowed, (f"resident memory {after / MIB:.0f} MiB, {before / MIB:.0f} MiB "
                              f"before the query (peak {peak / 1024:.0f} MiB)")


# --------------------------------------------------------------------------
# 3. a sort larger than its memory spills
# --------------------------------------------------------------------------

def test_a_sort_larger_than_its_memory_answers_in_order(spawn_quiver: Spawn,
                                                        tmp_path: Path) -> None:
    server = readme_server(spawn_quiver, tmp_path, "--query-memory-bytes", str(64 * MIB))
    write_ok(server.http_url, "sorts", "cpu,host=a usage=1 1\n")
    rows = 6_000_000
    statement = (f"SELECT v FROM generate_series(1, {rows}) t(v) "
                 "ORDER BY (v * 7919) % 10000019, v")
    response = sql(server, "sorts", statement, format="arrow")
    assert response.status_code == 200, response.text[:500]
    values = ipc.open_stream(response.content).read_all().column("v").to_pylist()
    assert len(values) == rows
    keys = [(v * 7919) % 10_000_019 for v in values]
    # in order by the key (every key is distinct: 7919 is invertible modulo the prime)
    assert all(a < b for a, b in zip(keys, keys[1:]))
    # and every row of the series, once
    values.sort()
    assert values == list(range(1, rows + 1))
    analyzed = sql(server, "sorts", "EXPLAIN ANALYZE " + statement, format="jsonl").text
    spills = [int(part.split("=")[1].rstrip(",]")) for part in analyzed.split()
              if part.startswith("spill_count=")]
    assert spills and max(spills) > 0, analyzed[:3000]
    assert server.proc.poll() is None


# --------------------------------------------------------------------------
# 5. configuration says what it would ignore
# --------------------------------------------------------------------------

def test_an_unknown_quiver_variable_stops_the_start(spawn_quiver: Spawn, tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path,
                          env={"QUIVER_HTTP_ADR": "127.0.0.1:1"}, wait=False)
    assert server.proc.wait(timeout=60) != 0
    log = server.log()
    assert "unknown environment variable QUIVER_HTTP_ADR" in log, log
    assert "did you mean QUIVER_HTTP_ADDR?" in log, log
    # the client's own variable is no setting and no error
    started = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path,
                           env={"QUIVER_TOKEN": "qv_not_a_setting"})
    assert requests.get(f"{started.http_url}/health", timeout=10).status_code == 200


def test_an_unknown_key_in_the_file_names_the_nearest(quiver_bin: Path, tmp_path: Path) -> None:
    (tmp_path / "quiver.toml").write_text('query_memory_byte = 1000000\n')
    result = quiver_cli(quiver_bin, "config", "--config", str(tmp_path / "quiver.toml"))
    assert result.returncode != 0
    assert 'unknown key "query_memory_byte"' in result.stderr, result.stderr
    assert "did you mean query_memory_bytes?" in result.stderr, result.stderr


# --------------------------------------------------------------------------
# 6. clients end cleanly; logs tell faults from clients
# --------------------------------------------------------------------------

def test_adbc_connections_close_their_sessions_cleanly(spawn_quiver: Spawn,
                                                       tmp_path: Path) -> None:
    server = readme_server(spawn_quiver, tmp_path)
    write_ok(server.http_url, "adbc", "cpu,host=a usage=1 1\n")
    for _ in range(3):
        with flight_sql.connect(server.flight_uri,
                                db_kwargs={DATABASE_HEADER: "adbc"}) as conn:
            with conn.cursor() as cursor:
                cursor.execute("SELECT count(*) AS n FROM cpu")
                assert cursor.fetchall() == [(1,)]
    metrics = requests.get(f"{server.http_url}/metrics", timeout=10).text
    actions = {line for line in metrics.splitlines()
               if line.startswith("quiver_requests_total") and 'endpoint="DoAction"' in line}
    assert actions, metrics
    # every DoAction (CloseSession among them) answered OK: status 0 only
    assert all('status="0"' in line for line in actions), actions
    assert sample(metrics, "quiver_requests_total", protocol="flight", endpoint="DoAction",
                  status="0") >= 3


def test_session_actions_answer_as_flight_defines_them(spawn_quiver: Spawn,
                                                       tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    client = flight.FlightClient(server.flight_uri)
    listed = {action.type for action in client.list_actions()}
    assert {"CloseSession", "GetSessionOptions", "SetSessionOptions"} <= listed
    # CloseSessionResult { status: CLOSED (1) }
    (closed,) = list(client.do_action(flight.Action("CloseSession", b"")))
    assert closed.body.to_pybytes() == b"\x08\x01"
    # GetSessionOptionsResult {}: no options
    (options,) = list(client.do_action(flight.Action("GetSessionOptions", b"")))
    assert options.body.to_pybytes() == b""
    # SetSessionOptionsRequest { "x": { string_value: "y" } } → errors { "x": INVALID_NAME }
    option = b"\x0a\x01x" + b"\x12\x03" + b"\x0a\x01y"
    request = b"\x0a" + bytes([len(option)]) + option
    (refused,) = list(client.do_action(flight.Action("SetSessionOptions", request)))
    error = b"\x0a\x01x" + b"\x12\x02\x08\x01"
    assert refused.body.to_pybytes() == b"\x0a" + bytes([len(error)]) + error
    with pytest.raises(pa.ArrowInvalid, match="not a SetSessionOptionsRequest"):
        list(client.do_action(flight.Action("SetSessionOptions", b"\xff\xff\xff")))
    with pytest.raises(pa.ArrowNotImplementedError, match="not supported"):
        list(client.do_action(flight.Action("NoSuchAction", b"")))
    # a handshake handle is forgotten once its session is closed
    token_pair = client.authenticate_basic_token("", "")
    options = flight.FlightCallOptions(headers=[token_pair])
    list(client.do_action(flight.Action("GetSessionOptions", b""), options))
    list(client.do_action(flight.Action("CloseSession", b""), options))
    with pytest.raises(flight.FlightUnauthenticatedError, match="Handshake again"):
        list(client.do_action(flight.Action("GetSessionOptions", b""), options))
    assert server.proc.poll() is None


def test_a_clients_timeout_is_logged_as_a_warning_not_an_error(spawn_quiver: Spawn,
                                                               tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    write_ok(server.http_url, "logs", "cpu,host=a usage=1 1\n")
    endless = "SELECT count(*) FROM generate_series(1, 1000000000000) t(v)"
    response = sql(server, "logs", endless, timeout_secs="0.3")
    assert response.status_code == 504, response.text
    missing = sql(server, "logs", "SELECT * FROM no_such_table")
    assert missing.status_code == 404
    wait_for_log = time.monotonic() + 5
    while "request stopped by a limit" not in server.log() and time.monotonic() < wait_for_log:
        time.sleep(0.1)
    log = server.log()
    timeout_lines = [line for line in log.splitlines() if "request stopped by a limit" in line]
    assert timeout_lines and all(" WARN " in line for line in timeout_lines), log[-3000:]
    assert " ERROR " not in log, log[-3000:]


# --------------------------------------------------------------------------
# 7. each database sees itself
# --------------------------------------------------------------------------

def psql(port: int, dbname: str, *commands: str) -> subprocess.CompletedProcess:
    args = ["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port),
            "-U", "u", "-d", dbname]
    for command in commands:
        args += ["-c", command]
    return subprocess.run(args, capture_output=True, text=True, timeout=60,
                          env={"PGCONNECT_TIMEOUT": "10", "PATH": "/usr/bin:/bin"})


def listed_tables(result: subprocess.CompletedProcess) -> set[tuple[str, str]]:
    assert result.returncode == 0, result.stderr
    return {tuple(line.split("|")[:2]) for line in result.stdout.splitlines() if "|" in line}


def test_psql_lists_the_connected_databases_tables(spawn_quiver: Spawn, tmp_path: Path) -> None:
    server = readme_server(spawn_quiver, tmp_path)
    write_ok(server.http_url, "alpha", "cpu,host=a usage=1 1\nmem,host=a used=2 1\n")
    write_ok(server.http_url, "beta", "disk,host=b free=3 1\n")
    assert listed_tables(psql(server.pg_port, "alpha", "\\dt")) == {("alpha", "cpu"),
                                                                    ("alpha", "mem")}
    assert listed_tables(psql(server.pg_port, "beta", "\\dt")) == {("beta", "disk")}
    # another database's tables by qualified name, as in PostgreSQL
    assert listed_tables(psql(server.pg_port, "alpha", "\\dt beta.*")) == {("beta", "disk")}
    described = psql(server.pg_port, "alpha", "\\d disk")
    assert "Did not find any relation" in described.stderr + described.stdout
    described = psql(server.pg_port, "alpha", "\\d cpu")
    assert described.returncode == 0 and "usage" in described.stdout, described.stderr
    counted = psql(server.pg_port, "alpha", "SELECT count(*) FROM beta.disk")
    assert counted.stdout.strip() == "1", counted.stderr


# --------------------------------------------------------------------------
# 8. messages and command-line feedback
# --------------------------------------------------------------------------

def test_a_bad_line_names_the_endpoint_it_was_sent_to(spawn_quiver: Spawn,
                                                      tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    bad = "cpu,host=a usage=1 1\ncpu,host=a usage= 2\n"
    for path, params, endpoint in [("/write", {"db": "m"}, "/write"),
                                   ("/api/v2/write", {"bucket": "m"}, "/api/v2/write"),
                                   ("/api/v3/write_lp", {"db": "m", "accept_partial": "false"},
                                    "write_lp")]:
        response = requests.post(f"{server.http_url}{path}", params=params, data=bad,
                                 timeout=HTTP_TIMEOUT_S)
        assert response.status_code == 400, response.text
        assert response.json()["error"] == (f"parsing failed for {endpoint} endpoint; "
                                            "no lines were written")
        assert response.headers["x-quiver-lines-written"] == "0"
        assert response.headers["x-quiver-lines-rejected"] == "1"


def test_quiver_write_and_query_say_what_they_did(spawn_quiver: Spawn, quiver_bin: Path,
                                                  tmp_path: Path) -> None:
    server = readme_server(spawn_quiver, tmp_path)
    lines = "cpu,host=a usage=1 1\ncpu,host=b usage=2 2\n"
    written = quiver_cli(quiver_bin, "write", "--db", "cli", "-", stdin=lines)
    assert written.returncode == 0, written.stderr
    assert written.stdout.strip() == (f'wrote 2 lines ({len(lines)} bytes sent) to database '
                                       '"cli"')
    partial = "cpu,host=c usage=3 3\ncpu,host=c usage= 4\ncpu,host=d usage=5 5\n"
    rejected = quiver_cli(quiver_bin, "write", "--db", "cli", "-", stdin=partial)
    assert rejected.returncode != 0
    assert (f'wrote 2 lines ({len(partial)} bytes sent) to database "cli"; 1 line rejected'
            in rejected.stderr), rejected.stderr
    located = [line for line in rejected.stderr.splitlines() if "line 2" in line]
    assert len(located) == 1 and located[0].count("line 2") == 1, rejected.stderr
    counted = quiver_cli(quiver_bin, "query", "--db", "cli", "--format", "csv",
                         "SELECT count(*) AS n FROM cpu")
    assert counted.stdout.splitlines() == ["n", "4"], counted.stderr
    # no --db: the default database, and what to do when it does not exist
    nameless = quiver_cli(quiver_bin, "query", "SELECT 1")
    assert nameless.returncode != 0
    assert 'database "default" not found' in nameless.stderr, nameless.stderr
    assert 'unless --db names one: quiver query --db NAME "SQL"' in nameless.stderr
    assert "databases on the server: cli" in nameless.stderr, nameless.stderr
    # a missing table of an existing default database gets no database hint
    write_ok(server.http_url, "default", "mem,host=a used=1 1\n")
    tableless = quiver_cli(quiver_bin, "query", "SELECT * FROM nope")
    assert tableless.returncode != 0 and "nope" in tableless.stderr, tableless.stderr
    assert "unless --db names one" not in tableless.stderr, tableless.stderr


def test_token_list_prints_times_in_rfc3339(quiver_bin: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    created = quiver_cli(quiver_bin, "token", "create", "--admin", "--data-dir", str(data_dir))
    assert created.returncode == 0, created.stderr
    listed = quiver_cli(quiver_bin, "token", "list", "--data-dir", str(data_dir))
    assert listed.returncode == 0, listed.stderr
    (line,) = listed.stdout.splitlines()
    name, grants, created_at = line.split("\t")
    assert (name, grants) == ("admin", "admin")
    stamp = created_at.removeprefix("created_at=")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp), line
    assert abs(time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) - time.mktime(
        time.gmtime())) < 600
    revoked = quiver_cli(quiver_bin, "token", "revoke", "--name", "admin", "--data-dir",
                         str(data_dir))
    assert revoked.returncode == 0 and "within 100 ms" in revoked.stderr, revoked.stderr


def test_a_token_revoked_offline_is_refused_within_its_interval(spawn_quiver: Spawn,
                                                                quiver_bin: Path,
                                                                tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    created = quiver_cli(quiver_bin, "token", "create", "--name", "w", "--permission",
                         "db:*:write", "--data-dir", str(data_dir))
    token = created.stdout.strip()
    server = spawn_quiver("--data-dir", str(data_dir), "--auth", "required", cwd=tmp_path)

    def write() -> int:
        return requests.post(f"{server.http_url}/api/v3/write_lp", params={"db": "t"},
                             data="cpu v=1 1", headers={"Authorization": f"Bearer {token}"},
                             timeout=10).status_code

    assert write() == 204
    assert quiver_cli(quiver_bin, "token", "revoke", "--name", "w", "--data-dir",
                      str(data_dir)).returncode == 0
    time.sleep(0.25)  # the documented 100 ms, with room for a loaded machine
    assert write() == 401
