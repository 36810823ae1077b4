"""Tokens, scopes, auth modes and rate limits on every protocol (issue 17), against real
servers started the way users start them, with real clients: requests, psycopg (SCRAM-SHA-256
through libpq), ADBC Flight SQL and pyarrow.flight.

* ``quiver token create --admin`` works offline and prints the token once; only digests are
  stored.
* ``auth = required``: no token is 401 / UNAUTHENTICATED / 28P01 on every protocol; every
  credential spelling works; scoped tokens read and write only their databases (qualified
  names, ``information_schema``, ``SHOW TABLES``, ``pg_catalog``, ADBC ``get_objects``, bulk
  ingest); a cached answer never reaches a caller who may not read its tables; revocation
  stops open sessions and handles at once.
* ``auth = loopback`` (the default): a server bound to a non-loopback address with no token
  refuses to start and says how to create one.
* Rate limits (429 + ``Retry-After``, RESOURCE_EXHAUSTED, 53400), failed-login limits per
  address (a right guess is refused too once blocked), hostile credentials, and credentials
  never written to the log.
"""

from __future__ import annotations

import base64
import stat
import subprocess
import time
from pathlib import Path

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pyarrow as pa
import pyarrow.flight as flight
import pytest
import requests

from conftest import SpawnedServer
from quiver_testlib import (HTTP_TIMEOUT_S, create_token, environment_without_quiver_variables,
                            free_ports, stop_process, unique_name, wait_for_health, write_lp)

DB, OTHER = "metrics", "secrets"
DATABASE_HEADER = "adbc.flight.sql.rpc.call_header.database"
AUTHORIZATION_HEADER = "adbc.flight.sql.authorization_header"
_GET_CATALOGS = b"type.googleapis.com/arrow.flight.protocol.sql.CommandGetCatalogs"
# ``Any{type_url, value: CommandGetCatalogs{}}`` as Flight SQL clients send it
CATALOGS = flight.FlightDescriptor.for_command(
    b"\x0a" + bytes([len(_GET_CATALOGS)]) + _GET_CATALOGS + b"\x12\x00")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def run_cli(quiver_bin: Path, *args: str) -> subprocess.CompletedProcess:
    environment = environment_without_quiver_variables()
    return subprocess.run([str(quiver_bin), *args], capture_output=True, text=True,
                          env=environment, timeout=60)


def offline_admin(quiver_bin: Path, data_dir: Path) -> str:
    created = run_cli(quiver_bin, "token", "create", "--admin", "--data-dir", str(data_dir))
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("qv_") and "\n" not in token
    return token


def query(server: SpawnedServer, sql: str, headers: dict[str, str] | None = None,
          db: str = DB, **params: str) -> requests.Response:
    return requests.get(f"{server.http_url}/api/v3/query_sql",
                        params={"db": db, "q": sql, **params}, headers=headers or {},
                        timeout=HTTP_TIMEOUT_S)


@pytest.fixture
def secured(spawn_quiver, quiver_bin: Path, tmp_path: Path) -> tuple[SpawnedServer, str]:
    """A server with ``auth = required``, an admin token made offline, and data in two
    databases."""
    data_dir = tmp_path / "data"
    admin = offline_admin(quiver_bin, data_dir)
    server = spawn_quiver("--data-dir", str(data_dir), "--auth", "required", cwd=tmp_path)
    for db, lines in ((DB, "cpu,host=a usage=1 1\ncpu,host=b usage=2 2\n"),
                      (OTHER, "cpu,host=x usage=99 1\n")):
        response = write_lp(server.http_url, db, lines, headers=bearer(admin))
        assert response.status_code == 204, response.text
    return server, admin


def test_tokens_are_created_listed_and_revoked_offline(quiver_bin: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    admin = offline_admin(quiver_bin, data_dir)
    again = run_cli(quiver_bin, "token", "create", "--admin", "--data-dir", str(data_dir))
    assert again.returncode != 0 and "exists" in again.stderr
    scoped = run_cli(quiver_bin, "token", "create", "--name", "dash", "--permission",
                     "db:metrics:read", "--data-dir", str(data_dir))
    assert scoped.returncode == 0, scoped.stderr
    assert "shown only now" in scoped.stderr
    bad = run_cli(quiver_bin, "token", "create", "--name", "x", "--permission", "metrics:read",
                  "--data-dir", str(data_dir))
    assert bad.returncode != 0 and "db:<name|*>:read|write" in bad.stderr
    token_file = data_dir / "tokens.json"
    text = token_file.read_text()
    assert admin not in text and scoped.stdout.strip() not in text
    assert stat.S_IMODE(token_file.stat().st_mode) & 0o077 == 0
    listed = run_cli(quiver_bin, "token", "list", "--data-dir", str(data_dir)).stdout
    assert "admin\tadmin" in listed and "dash\tdb:metrics:read" in listed
    assert admin not in listed
    revoked = run_cli(quiver_bin, "token", "revoke", "--name", "dash", "--data-dir", str(data_dir))
    assert revoked.returncode == 0, revoked.stderr
    assert "dash" not in run_cli(quiver_bin, "token", "list", "--data-dir", str(data_dir)).stdout


def test_an_offline_token_on_the_readme_defaults_admits_its_holder(spawn_quiver, quiver_bin: Path,
                                                                    tmp_path: Path) -> None:
    """`quiver token create --admin` with no flags, in the directory the server then starts
    in with no flags either: both find the relative ./quiver-data (the binary resolves the
    directory from the configuration's defaults, the token command takes it). The data
    directory flag may follow the action or precede it."""
    created = subprocess.run([str(quiver_bin), "token", "create", "--admin"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60,
                             env=environment_without_quiver_variables())
    assert created.returncode == 0, created.stderr
    admin = created.stdout.strip()
    assert (tmp_path / "quiver-data" / "tokens.json").exists()
    listed = run_cli(quiver_bin, "token", "--data-dir", str(tmp_path / "quiver-data"), "list")
    assert listed.returncode == 0 and listed.stdout.startswith("admin\tadmin"), listed
    server = spawn_quiver("--auth", "required", cwd=tmp_path)
    written = requests.post(f"{server.http_url}/api/v3/write_lp", params={"db": DB},
                            data="cpu v=1 1", headers=bearer(admin), timeout=HTTP_TIMEOUT_S)
    assert written.status_code == 204, written.text
    assert query(server, "SELECT count(*) AS n FROM cpu").status_code == 401
    admitted = query(server, "SELECT count(*) AS n FROM cpu", bearer(admin))
    assert admitted.status_code == 200 and admitted.json() == [{"n": 1}], admitted.text


def test_http_needs_a_token_and_takes_every_spelling(secured) -> None:
    server, admin = secured
    assert requests.get(f"{server.http_url}/health", timeout=10).status_code == 200
    missing = query(server, "SELECT 1")
    assert missing.status_code == 401, missing.text
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert "auth = required" in missing.json()["error"]
    assert query(server, "SELECT 1", {"Authorization": "Bearer qv_wrong"}).status_code == 401
    for header in ("Digest abc", "Basic !!!", "Bearer a b", "Basic " + "x" * 5000):
        response = query(server, "SELECT 1", {"Authorization": header})
        assert response.status_code == 401, (header[:20], response.text)
        assert "malformed" in response.json()["error"]
    # a scheme without a token (the InfluxDB 3 clients' empty token) presents none
    for header in ("Bearer", "Token "):
        response = query(server, "SELECT 1", {"Authorization": header})
        assert response.status_code == 401, (header, response.text)
        assert "a token is required" in response.json()["error"]
    basic = base64.b64encode(f"anyone:{admin}".encode()).decode()
    for headers, params in (({"Authorization": f"Bearer {admin}"}, {}),
                            ({"Authorization": f"Token {admin}"}, {}),
                            ({"Authorization": f"Basic {basic}"}, {}),
                            ({}, {"u": "anyone", "p": admin})):
        response = query(server, "SELECT count(*) AS n FROM cpu", headers, **params)
        assert response.status_code == 200, response.text
        assert response.json() == [{"n": 2}]
    # InfluxDB 1's /write with ?p= too
    v1 = requests.post(f"{server.http_url}/write", params={"db": DB, "p": admin},
                       data="cpu,host=c usage=3 3\n", timeout=10)
    assert v1.status_code == 204, v1.text
    assert requests.get(f"{server.http_url}/health", timeout=10).status_code == 200


def test_scoped_tokens_read_and_write_only_their_databases(secured) -> None:
    server, admin = secured
    reader = create_token(server.http_url, "reader", [f"db:{DB}:read"], bearer(admin))
    writer = create_token(server.http_url, "writer", [f"db:{DB}:write"], bearer(admin))
    listed = requests.get(f"{server.http_url}/api/v3/configure/token", headers=bearer(admin),
                          timeout=10)
    assert listed.status_code == 200
    names = {t["name"]: t for t in listed.json()["tokens"]}
    assert names["reader"]["permissions"] == [f"db:{DB}:read"] and names["admin"]["admin"]
    assert reader not in listed.text and writer not in listed.text and admin not in listed.text

    assert query(server, "SELECT count(*) AS n FROM cpu", bearer(reader)).json() == [{"n": 2}]
    denied = write_lp(server.http_url, DB, "cpu usage=1 5\n", headers=bearer(reader))
    assert denied.status_code == 403 and f"db:{DB}:write" in denied.json()["error"]
    for sql, db in ((f"SELECT * FROM {OTHER}.cpu", DB), ("SELECT * FROM cpu", OTHER),
                    (f"SELECT * FROM cpu JOIN {OTHER}.cpu AS o USING (host)", DB)):
        response = query(server, sql, bearer(reader), db=db)
        assert response.status_code == 403, (sql, response.text)
        assert f"db:{OTHER}:read" in response.json()["error"]
    # what does not exist where it may not read is the same refusal: names cannot be probed
    for sql in ("SELECT * FROM nosuchdb.cpu", f"SELECT * FROM {OTHER}.nosuchtable"):
        response = query(server, sql, bearer(reader))
        assert response.status_code == 403, (sql, response.text)
    assert query(server, "SELECT * FROM nosuchtable", bearer(reader)).status_code == 404
    with psycopg.connect(host="127.0.0.1", port=server.pg_port, dbname=DB, user="reader",
                         password=reader, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM nosuchdb.cpu")
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT * FROM nosuchtable")
    schemas = query(server, "SELECT DISTINCT table_schema FROM information_schema.tables "
                    "WHERE table_schema NOT IN ('information_schema', 'pg_catalog')",
                    bearer(reader)).json()
    assert schemas == [{"table_schema": DB}]
    shown = query(server, "SHOW TABLES", bearer(reader)).json()
    assert OTHER not in {row["table_schema"] for row in shown}
    databases = requests.get(f"{server.http_url}/api/v3/configure/database",
                             headers=bearer(reader), timeout=10).json()
    assert [d["db"] for d in databases] == [DB]
    for method, path in (("get", "/api/v3/configure/token"), ("post", "/api/v3/persist"),
                         ("get", "/api/v3/cache"), ("delete", "/api/v3/cache"),
                         ("post", "/api/v3/configure/token")):
        response = requests.request(method, f"{server.http_url}{path}", headers=bearer(reader),
                                    json={"name": "x", "permissions": ["db:*:read"]}, timeout=10)
        assert response.status_code == 403, (path, response.text)
        assert "admin token" in response.json()["error"]

    assert write_lp(server.http_url, DB, "cpu,host=w usage=7 7\n",
                    headers=bearer(writer)).status_code == 204
    assert write_lp(server.http_url, OTHER, "cpu usage=7 7\n",
                    headers=bearer(writer)).status_code == 403
    assert query(server, "SELECT 1", bearer(writer)).status_code == 403

    # revoked: refused at once
    revoke = requests.delete(f"{server.http_url}/api/v3/configure/token",
                             params={"name": "reader"}, headers=bearer(admin), timeout=10)
    assert revoke.status_code == 200, revoke.text
    assert query(server, "SELECT 1", bearer(reader)).status_code == 401
    assert requests.delete(f"{server.http_url}/api/v3/configure/token",
                           params={"name": "reader"}, headers=bearer(admin),
                           timeout=10).status_code == 404


def test_cached_answers_never_cross_scopes(secured) -> None:
    server, admin = secured
    reader = create_token(server.http_url, "reader", [f"db:{DB}:read"], bearer(admin))
    other_sql = f"SELECT host, usage FROM {OTHER}.cpu"
    for _ in range(2):
        assert query(server, other_sql, bearer(admin)).status_code == 200
    assert query(server, other_sql, bearer(admin)).headers["X-Quiver-Cache"] == "HIT"
    refused = query(server, other_sql, bearer(reader))
    assert refused.status_code == 403 and "x-quiver-cache" not in refused.headers
    with psycopg.connect(host="127.0.0.1", port=server.pg_port, dbname=DB, user="reader",
                         password=reader, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=f"db:{OTHER}:read"):
            conn.execute(other_sql)
    with flight_sql.connect(server.flight_uri, db_kwargs={
            DATABASE_HEADER: DB, AUTHORIZATION_HEADER: f"Bearer {reader}"},
            autocommit=True) as conn, conn.cursor() as cursor:
        with pytest.raises(Exception, match=f"lacks db:{OTHER}:read"):
            cursor.execute(other_sql)
            cursor.fetchall()
    # what the reader may read it gets, under its own scope
    mine = "SELECT host, usage FROM cpu ORDER BY host"
    assert query(server, mine, bearer(admin)).headers["X-Quiver-Cache"] in ("MISS", "HIT")
    first = query(server, mine, bearer(reader))
    assert first.status_code == 200 and first.headers["X-Quiver-Cache"] == "MISS"
    assert query(server, mine, bearer(reader)).headers["X-Quiver-Cache"] == "HIT"


def test_postgres_logs_in_with_scram_and_checks_grants(secured) -> None:
    server, admin = secured
    reader = create_token(server.http_url, "reader", [f"db:{DB}:read"], bearer(admin))

    def connect(user: str, password: str | None, db: str = DB) -> psycopg.Connection:
        kwargs = {"password": password} if password is not None else {}
        return psycopg.connect(host="127.0.0.1", port=server.pg_port, dbname=db, user=user,
                               autocommit=True, connect_timeout=10, **kwargs)

    with connect("reader", reader) as conn:
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (2,)
        namespaces = {row[0] for row in conn.execute("SELECT nspname FROM pg_namespace")}
        assert DB in namespaces and OTHER not in namespaces
        schemata = {row[0] for row in conn.execute(
            "SELECT schema_name FROM information_schema.schemata")}
        assert DB in schemata and OTHER not in schemata
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f"SELECT * FROM {OTHER}.cpu")
        # the session goes on after a refusal
        assert conn.execute("SELECT 1").fetchone() == (1,)
    for user, password in (("reader", "qv_wrong"), ("nobody", reader), ("reader", reader + "x")):
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            connect(user, password)
    with pytest.raises(psycopg.OperationalError):
        connect("reader", None)  # libpq: no password supplied
    with connect("admin", admin, db=OTHER) as conn:
        assert conn.execute("SELECT count(*) FROM cpu").fetchone() == (1,)
    # a database it may not read is refused alike whether it exists or not
    for db in (OTHER, "nosuchdb"):
        with pytest.raises(psycopg.OperationalError, match=f"lacks db:{db}:read"):
            connect("reader", reader, db=db)

    # revoked while a session is open: its next statement fails and the session ends
    session = connect("reader", reader)
    assert session.execute("SELECT 1").fetchone() == (1,)
    assert requests.delete(f"{server.http_url}/api/v3/configure/token",
                           params={"name": "reader"}, headers=bearer(admin),
                           timeout=10).status_code == 200
    with pytest.raises(psycopg.Error, match="revoked"):
        session.execute("SELECT 1")
    session.close()


def test_flight_sql_checks_tokens_handles_and_grants(secured) -> None:
    server, admin = secured
    reader = create_token(server.http_url, "reader", [f"db:{DB}:read"], bearer(admin))

    def connect(**kwargs: str) -> flight_sql.Connection:
        return flight_sql.connect(server.flight_uri, db_kwargs={DATABASE_HEADER: DB, **kwargs},
                                  autocommit=True)

    with connect(**{AUTHORIZATION_HEADER: f"Bearer {reader}"}) as conn:
        with conn.cursor() as cursor:
            cursor.execute("SELECT count(*) AS n FROM cpu")
            assert cursor.fetchall() == [(2,)]
        objects = conn.adbc_get_objects(depth="db_schemas").read_all().to_pylist()
        schemas = {s["db_schema_name"] for c in objects for s in c["catalog_db_schemas"]}
        assert schemas == {DB}
    # the Handshake with the token as password
    with connect(username="reader", password=reader) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT count(*) AS n FROM cpu")
        assert cursor.fetchall() == [(2,)]
    with pytest.raises(Exception, match="auth = required"):
        with connect() as conn, conn.cursor() as cursor:
            cursor.execute("SELECT 1")
    with pytest.raises(Exception, match="(?i)unauthenticated|invalid token"):
        with connect(username="reader", password="qv_wrong") as conn, conn.cursor() as cursor:
            cursor.execute("SELECT 1")

    # bulk ingest needs write permission
    table = pa.table({"time": pa.array([1], pa.timestamp("ns", tz="UTC")), "v": [1.0]})
    with connect(**{AUTHORIZATION_HEADER: f"Bearer {reader}"}) as conn:
        with conn.cursor() as cursor, pytest.raises(Exception, match="(?i)lacks db:metrics:write"):
            cursor.adbc_ingest("ingested", table, mode="create")

    # an expired or made-up handle is refused without counting as a failed login: far more
    # of them than the failed-login limit (30 a minute) leave the address unblocked
    stale = flight.FlightCallOptions(headers=[(b"authorization", b"Bearer " + b"ab" * 16)])
    for _ in range(40):
        with pytest.raises(flight.FlightUnauthenticatedError, match="expired Flight SQL handle"):
            flight.FlightClient(server.flight_uri).get_flight_info(CATALOGS, stale)
    assert query(server, "SELECT 1", bearer(reader)).status_code == 200

    # a handshake handle dies with its token
    client = flight.FlightClient(server.flight_uri)
    name, value = client.authenticate_basic_token("reader", reader)
    options = flight.FlightCallOptions(headers=[(name, value), (b"database", DB.encode())])
    assert client.get_flight_info(CATALOGS, options).schema.names == ["catalog_name"]
    requests.delete(f"{server.http_url}/api/v3/configure/token", params={"name": "reader"},
                    headers=bearer(admin), timeout=10).raise_for_status()
    with pytest.raises(flight.FlightUnauthenticatedError, match="revoked"):
        client.get_flight_info(CATALOGS, options)


def test_offline_revocation_reaches_a_running_server(secured, quiver_bin: Path,
                                                    tmp_path: Path) -> None:
    server, admin = secured
    reader = create_token(server.http_url, "reader", [f"db:{DB}:read"], bearer(admin))
    session = psycopg.connect(host="127.0.0.1", port=server.pg_port, dbname=DB, user="reader",
                              password=reader, autocommit=True)
    assert session.execute("SELECT 1").fetchone() == (1,)
    client = flight.FlightClient(server.flight_uri)
    name, value = client.authenticate_basic_token("reader", reader)
    options = flight.FlightCallOptions(headers=[(name, value)])
    assert client.get_flight_info(CATALOGS, options).schema.names == ["catalog_name"]
    assert query(server, "SELECT 1", bearer(reader)).status_code == 200

    revoked = run_cli(quiver_bin, "token", "revoke", "--name", "reader",
                      "--data-dir", str(tmp_path / "data"))
    assert revoked.returncode == 0, revoked.stderr
    time.sleep(0.3)  # the server looks at the token file every 100 ms
    # each protocol sees it by itself (the open session first: nothing else has looked yet)
    with pytest.raises(psycopg.Error, match="revoked"):
        session.execute("SELECT 1")
    session.close()
    with pytest.raises(flight.FlightUnauthenticatedError, match="revoked"):
        client.get_flight_info(CATALOGS, options)
    assert query(server, "SELECT 1", bearer(reader)).status_code == 401
    assert query(server, "SELECT 1", bearer(admin)).status_code == 200


def test_an_exposed_server_needs_a_token_to_start(quiver_bin: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    http, flight_port, pg = free_ports(3)
    exposed = ("serve", "--data-dir", str(data_dir), "--http-addr", f"0.0.0.0:{http}",
               "--flight-addr", f"127.0.0.1:{flight_port}", "--pg-addr", f"127.0.0.1:{pg}")
    refused = run_cli(quiver_bin, *exposed)
    assert refused.returncode != 0
    assert "reachable from the network and no token exists" in refused.stderr
    assert f"quiver token create --admin --data-dir {data_dir}" in refused.stderr
    admin = offline_admin(quiver_bin, data_dir)
    log_path = tmp_path / "exposed.log"
    environment = environment_without_quiver_variables()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(quiver_bin), *exposed], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=environment)
    try:
        url = f"http://127.0.0.1:{http}"
        wait_for_health(proc, url, log_path)
        # loopback clients still need no token in the default mode; the token works too
        for headers in ({}, bearer(admin)):
            response = requests.get(f"{url}/api/v3/query_sql", headers=headers, timeout=10,
                                    params={"db": "x", "q": "SELECT 1 AS one"})
            assert response.status_code == 404, response.text  # past auth: no database x
        assert "auth = loopback" in log_path.read_text()
    finally:
        stop_process(proc)


def test_rate_limits_on_every_protocol(spawn_quiver, quiver_bin: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    admin = offline_admin(quiver_bin, data_dir)
    server = spawn_quiver("--data-dir", str(data_dir), "--auth", "required",
                          "--rate-limit-requests-per-sec", "5",
                          "--rate-limit-write-bytes-per-sec", "2000", cwd=tmp_path)
    assert write_lp(server.http_url, "default", "w v=1 1\n",
                    headers=bearer(admin)).status_code == 204
    statuses = [query(server, "SELECT 1", bearer(admin), db="default") for _ in range(20)]
    limited = [r for r in statuses if r.status_code == 429]
    assert limited, [r.status_code for r in statuses]
    assert int(limited[0].headers["Retry-After"]) >= 1
    assert "rate_limit_requests_per_sec" in limited[0].json()["error"]
    assert all(r.status_code in (200, 429) for r in statuses)

    with psycopg.connect(host="127.0.0.1", port=server.pg_port, dbname="default", user="admin",
                         password=admin, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.ConfigurationLimitExceeded,
                           match="rate_limit_requests_per_sec"):
            for _ in range(20):
                conn.execute("SELECT 1")
    client = flight.FlightClient(server.flight_uri)
    options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {admin}".encode())])
    # pyarrow reports RESOURCE_EXHAUSTED as ArrowInvalid
    with pytest.raises(pa.ArrowInvalid, match="resource exhausted.*rate_limit_requests_per_sec"):
        for _ in range(20):
            client.get_flight_info(CATALOGS, options)

    # written bytes: a 1,500-byte write passes, the next ones in the same second do not
    time.sleep(1.5)
    body = "".join(f"w,host=h{i:04d} v={i} {i + 1}\n" for i in range(60))
    assert len(body) > 1000
    results = [write_lp(server.http_url, "default", body, headers=bearer(admin)).status_code
               for _ in range(3)]
    assert 204 in results and 429 in results, results
    # one write larger than a second's allowance never fits: refused as too large
    huge = write_lp(server.http_url, "default", body * 3, headers=bearer(admin))
    assert huge.status_code == 413, huge.text
    assert "rate_limit_write_bytes_per_sec" in huge.json()["error"]


def test_failed_authentications_are_limited_per_address(spawn_quiver, quiver_bin: Path,
                                                        tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    admin = offline_admin(quiver_bin, data_dir)
    server = spawn_quiver("--data-dir", str(data_dir), "--auth", "required", cwd=tmp_path,
                          env={"QUIVER_LOG_FILTER": "debug"})
    statuses = [query(server, "SELECT 1", bearer(f"qv_guess{i}")).status_code for i in range(40)]
    assert statuses[:30] == [401] * 30 and set(statuses[30:]) == {429}, statuses
    # blocked: even the right token is refused from this address for now
    right = query(server, "SELECT 1", bearer(admin))
    assert right.status_code == 429 and "too many failed" in right.json()["error"]
    assert int(right.headers["Retry-After"]) >= 1
    with pytest.raises(psycopg.OperationalError, match="too many failed"):
        psycopg.connect(host="127.0.0.1", port=server.pg_port, dbname="default", user="admin",
                        password=admin, connect_timeout=10)
    assert requests.get(f"{server.http_url}/health", timeout=10).status_code == 200
    # no credential reached the log, not even at debug level
    log = server.log()
    assert admin not in log and "qv_guess" not in log


def test_credentials_are_never_logged(spawn_quiver, quiver_bin: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    admin = offline_admin(quiver_bin, data_dir)
    server = spawn_quiver("--data-dir", str(data_dir), cwd=tmp_path,
                          env={"QUIVER_LOG_FILTER": "trace"})
    reader = create_token(server.http_url, unique_name("reader"), [f"db:{DB}:read"],
                          bearer(admin))
    assert write_lp(server.http_url, DB, "cpu v=1 1\n", headers=bearer(admin)).status_code == 204
    query(server, "SELECT nonsense FROM nowhere", {}, p=admin)
    query(server, "SELECT 1", bearer(reader), db="missing")
    requests.post(f"{server.http_url}/write", params={"db": DB, "p": reader},
                  data="bad line", timeout=10)
    with psycopg.connect(host="127.0.0.1", port=server.pg_port, dbname=DB,
                         user="admin", password=admin, autocommit=True) as conn:
        conn.execute("SELECT 1")
    server.stop()
    log = server.log()
    assert "token created" in log
    assert admin not in log and reader not in log
