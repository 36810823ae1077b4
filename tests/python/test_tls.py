"""TLS on every protocol (issue 17), against real servers with real clients: ``requests`` and
``curl`` (HTTPS), ``psql`` and psycopg (libpq, ``sslmode=verify-full``), ADBC Flight SQL and
pyarrow.flight (gRPC over TLS with the test CA as root), pgjdbc and the Flight SQL JDBC driver.

* ``tls_cert_file`` / ``tls_key_file`` put HTTP, Flight SQL and PostgreSQL behind TLS; tokens
  work through it on every protocol.
* Clients that do not trust the certificate, or reach the server under a name it does not
  carry, are refused; plain HTTP on the HTTPS port gets a 400 saying so; hostile bytes on
  every port leave the server up and the data intact.
* PostgreSQL clients on other machines must encrypt; loopback clients may still connect in
  the clear, and CancelRequests are taken in the clear (libpq's ``PQcancel``, pgjdbc).
  PostgreSQL 17's direct TLS works; the negotiation refuses bytes smuggled before the
  handshake. A remote client of HTTPS or Flight SQL over TLS is not taken for a local one.
* Bad settings (one file of the two, a missing file, a key of another certificate) refuse to
  start with a message naming the file; a renewed certificate is served without a restart.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import adbc_driver_flightsql as adbc_flight
import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pyarrow.flight as flight
import pytest
import requests
import trustme

from quiver_testlib import (HTTP_TIMEOUT_S, environment_without_quiver_variables, free_ports,
                            stop_process, wait_for_health)
from test_auth import CATALOGS
from test_jdbc import JAVA_DIR, classpath  # noqa: F401 (the fixture)

DB = "secure"
ENDLESS = "SELECT count(*) FROM generate_series(1, 1000000000000) t(v)"
HOST_NAMES = ("localhost", "127.0.0.1")


@dataclass
class TlsServer:
    """A server started with a certificate for ``localhost`` and ``127.0.0.1`` (and the
    machine's own address when it has one), issued by ``ca_file``."""

    proc: subprocess.Popen
    http_port: int
    flight_port: int
    pg_port: int
    ca_file: Path
    cert_file: Path
    key_file: Path
    admin: str
    log_path: Path

    @property
    def https(self) -> str:
        return f"https://localhost:{self.http_port}"

    @property
    def flight_uri(self) -> str:
        return f"grpc+tls://localhost:{self.flight_port}"

    def pg(self, host: str = "localhost", sslmode: str = "verify-full",
           root: Path | None = None) -> str:
        return (f"host={host} port={self.pg_port} dbname={DB} user=admin "
                f"password={self.admin} sslmode={sslmode} sslrootcert={root or self.ca_file} "
                f"connect_timeout=10")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def machine_address() -> str | None:
    """An address of this machine that is not loopback, if it has one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
            address = probe.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


def new_ca(path: Path) -> tuple[trustme.CA, Path]:
    """A new certificate authority, its certificate written to ``path``."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(path))
    return ca, path


def issue(ca: trustme.CA, directory: Path, *names: str) -> tuple[Path, Path]:
    """A certificate for ``names`` by ``ca`` and its key, as PEM files in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    issued = ca.issue_cert(*names)
    cert, key = directory / "cert.pem", directory / "key.pem"
    cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key))
    return cert, key


def offline_admin(quiver_bin: Path, data_dir: Path) -> str:
    created = subprocess.run([str(quiver_bin), "token", "create", "--admin", "--data-dir",
                              str(data_dir)], capture_output=True, text=True, timeout=60,
                             env=environment_without_quiver_variables())
    assert created.returncode == 0, created.stderr
    return created.stdout.strip()


@pytest.fixture
def start_tls(quiver_bin: Path, tmp_path: Path) -> Iterator:
    """Starts servers with TLS, bound to ``bind`` on free ports; stops them at the end."""
    started: list[TlsServer] = []

    def start(bind: str = "127.0.0.1") -> TlsServer:
        ca, ca_file = new_ca(tmp_path / f"ca-{len(started)}.pem")
        address = machine_address()
        cert, key = issue(ca, tmp_path / f"server-{len(started)}", *HOST_NAMES,
                          *([address] if address else []))
        data_dir = tmp_path / f"data-{len(started)}"
        admin = offline_admin(quiver_bin, data_dir)
        http, flight_port, pg = free_ports(3)
        log_path = tmp_path / f"quiver-tls-{len(started)}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [str(quiver_bin), "serve", "--data-dir", str(data_dir),
                 "--http-addr", f"{bind}:{http}", "--flight-addr", f"{bind}:{flight_port}",
                 "--pg-addr", f"{bind}:{pg}", "--tls-cert-file", str(cert),
                 "--tls-key-file", str(key)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=environment_without_quiver_variables(), cwd=tmp_path)
        server = TlsServer(proc, http, flight_port, pg, ca_file, cert, key, admin, log_path)
        started.append(server)
        wait_for_health(proc, server.https, log_path, verify=str(ca_file))
        return server

    yield start
    for server in started:
        stop_process(server.proc)


def write(server: TlsServer, lines: str) -> None:
    response = requests.post(f"{server.https}/api/v3/write_lp", params={"db": DB}, data=lines,
                             headers={"Authorization": f"Bearer {server.admin}"},
                             verify=str(server.ca_file), timeout=HTTP_TIMEOUT_S)
    assert response.status_code == 204, response.text


def rows_over_https(server: TlsServer, sql: str, verify: str | bool | None = None) -> list:
    response = requests.get(f"{server.https}/api/v3/query_sql", params={"db": DB, "q": sql},
                            headers={"Authorization": f"Bearer {server.admin}"},
                            verify=str(server.ca_file) if verify is None else verify,
                            timeout=HTTP_TIMEOUT_S)
    assert response.status_code == 200, response.text
    return response.json()


def adbc_rows(server: TlsServer, sql: str, root_pem: str, uri: str | None = None) -> list:
    with flight_sql.connect(
            uri or server.flight_uri,
            db_kwargs={adbc_flight.DatabaseOptions.TLS_ROOT_CERTS.value: root_pem,
                       "username": "admin", "password": server.admin},
            conn_kwargs={"adbc.flight.sql.rpc.call_header.database": DB},
            autocommit=True) as connection:
        with connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchall()


def psql(server: TlsServer, conninfo: str, sql: str) -> subprocess.CompletedProcess:
    return subprocess.run(["psql", conninfo, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                           "-c", sql], capture_output=True, text=True, timeout=60,
                          env=environment_without_quiver_variables())


def test_every_protocol_serves_tls_with_tokens(start_tls) -> None:
    server = start_tls()
    write(server, "cpu,host=a usage=1.5 1\ncpu,host=b usage=2.5 2\n")
    sql = "SELECT host, usage FROM cpu ORDER BY host"
    expected = [("a", 1.5), ("b", 2.5)]

    assert [(r["host"], r["usage"]) for r in rows_over_https(server, sql)] == expected
    curl = subprocess.run(["curl", "-sS", "--fail", "--cacert", str(server.ca_file),
                           "-H", f"Authorization: Bearer {server.admin}",
                           f"{server.https}/api/v3/query_sql?db={DB}&q=SELECT%20count(*)%20AS%20n%20FROM%20cpu"],
                          capture_output=True, text=True, timeout=60)
    assert curl.returncode == 0, curl.stderr
    assert curl.stdout.strip() == '[{"n":2}]'

    # libpq's strictest mode: the chain and the host name are both checked
    psql_run = psql(server, server.pg(), "SELECT host || '=' || usage FROM cpu ORDER BY host")
    assert psql_run.returncode == 0, psql_run.stderr
    assert psql_run.stdout.split() == ["a=1.5", "b=2.5"]
    conninfo = psql(server, server.pg(), "\\conninfo")
    assert "SSL connection (protocol: TLSv1.3" in conninfo.stdout, conninfo.stdout + conninfo.stderr
    with psycopg.connect(server.pg()) as connection:
        assert connection.pgconn.ssl_in_use
        assert connection.execute(sql).fetchall() == expected
    # through 127.0.0.1 too (an IP address the certificate carries)
    with psycopg.connect(server.pg(host="127.0.0.1")) as connection:
        assert connection.execute("SELECT count(*) FROM cpu").fetchone() == (2,)

    root_pem = server.ca_file.read_text()
    assert adbc_rows(server, sql, root_pem) == expected
    client = flight.FlightClient(server.flight_uri, tls_root_certs=root_pem.encode())
    token_pair = client.authenticate_basic_token(b"admin", server.admin.encode())
    options = flight.FlightCallOptions(headers=[token_pair])
    assert len(list(client.list_actions(options))) > 0
    client.close()


def test_influxdb3_client_queries_over_tls_on_the_https_port(start_tls) -> None:
    """The HTTP port offers `h2` as well as `http/1.1` over TLS: gRPC (the InfluxDB 3
    clients' Flight queries) and HTTP/1.1 share it."""
    from influxdb_client_3 import InfluxDBClient3, flight_client_options

    server = start_tls()
    write(server, "cpu,host=a usage=1.5 1\ncpu,host=b usage=2.5 2\n")
    root = server.ca_file.read_text()
    with InfluxDBClient3(host=server.https, token=server.admin, database=DB,
                         flight_client_options=flight_client_options(tls_root_certs=root),
                         verify_ssl=str(server.ca_file)) as client:
        table = client.query("SELECT host, usage FROM cpu ORDER BY host", language="sql")
        assert table.column("usage").to_pylist() == [1.5, 2.5]
        table = client.query("SELECT max(usage) FROM cpu", language="influxql")
        assert table.column("max").to_pylist() == [2.5]
    # and HTTP/1.1 still works beside it
    assert rows_over_https(server, "SELECT count(*) AS n FROM cpu") == [{"n": 2}]


def test_untrusted_or_misnamed_certificates_are_refused(start_tls, tmp_path: Path) -> None:
    server = start_tls()
    write(server, "cpu,host=a usage=1 1\n")
    stranger_file = new_ca(tmp_path / "stranger.pem")[1]

    with pytest.raises(requests.exceptions.SSLError):
        rows_over_https(server, "SELECT 1", verify=str(stranger_file))
    with pytest.raises(requests.exceptions.SSLError):
        rows_over_https(server, "SELECT 1", verify=True)  # the system's roots
    curl = subprocess.run(["curl", "-sS", f"{server.https}/health"], capture_output=True,
                          text=True, timeout=60)
    assert curl.returncode != 0 and "certificate" in curl.stderr, curl.stderr

    refused = psql(server, server.pg(root=stranger_file), "SELECT 1")
    assert refused.returncode != 0 and "certificate verify failed" in refused.stderr, refused.stderr
    # a name the certificate does not carry
    with pytest.raises(psycopg.OperationalError, match="does not match host name"):
        psycopg.connect(server.pg(host="quiver.invalid") + " hostaddr=127.0.0.1")

    with pytest.raises(Exception, match="certificate"):
        adbc_rows(server, "SELECT 1", stranger_file.read_text())

    # and the server serves the clients that trust it, with the data intact
    assert rows_over_https(server, "SELECT count(*) AS n FROM cpu") == [{"n": 1}]


def test_hostile_bytes_on_tls_ports_leave_the_server_up(start_tls) -> None:
    server = start_tls()
    write(server, "cpu,host=a usage=7 1\n")

    plain = requests.get(f"http://localhost:{server.http_port}/api/v3/query_sql",
                         params={"db": DB, "q": "SELECT 1"}, timeout=HTTP_TIMEOUT_S)
    assert plain.status_code == 400
    assert "https://" in plain.json()["error"]

    hostile = [
        b"\x16\x03\x01\x00\x05hello",            # a TLS record header, then nonsense
        b"\x16\x03\x01\xff\xff" + b"\x00" * 64,  # a record claiming 64 KiB, truncated
        b"\x00" * 4096,
        os.urandom(8192),
        b"\x00\x00\x00\x08\x04\xd2\x16\x2f",    # SSLRequest, then nothing (PostgreSQL)
        b"\x00\x00\x00\x08\x04\xd2\x16\x2fGARBAGE-BEFORE-HANDSHAKE",
    ]
    for port in (server.http_port, server.flight_port, server.pg_port):
        for payload in hostile:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                try:
                    raw.sendall(payload)
                    raw.shutdown(socket.SHUT_WR)
                    while raw.recv(65536):
                        pass
                except OSError:
                    pass  # the server may close (or reset) before reading it all

    # a client without TLS on the Flight SQL port gets an error, not a hang
    plain_flight = flight.FlightClient(f"grpc://localhost:{server.flight_port}")
    started = time.monotonic()
    with pytest.raises(flight.FlightUnavailableError):
        list(plain_flight.list_actions(flight.FlightCallOptions(timeout=20)))
    assert time.monotonic() - started < 15
    plain_flight.close()

    assert server.proc.poll() is None, server.log()
    assert rows_over_https(server, "SELECT usage FROM cpu") == [{"usage": 7.0}]
    metrics = requests.get(f"{server.https}/metrics", verify=str(server.ca_file),
                           headers={"Authorization": f"Bearer {server.admin}"},
                           timeout=HTTP_TIMEOUT_S).text
    for protocol in ("http", "flight", "postgres"):
        counted = [line for line in metrics.splitlines() if line.startswith(
            f'quiver_tls_handshake_failures_total{{protocol="{protocol}"}}')]
        # HTTP and Flight: each of the six payloads is a failed handshake (and the plain
        # clients above one more). PostgreSQL: the two TLS records (direct TLS) and the
        # SSLRequest followed by nothing; zeros are a protocol error, not a handshake, the
        # smuggled bytes end the connection before one, and random bytes are either
        expected = 3 if protocol == "postgres" else 6
        assert counted and float(counted[0].split()[-1]) >= expected, (protocol, counted)
    with psycopg.connect(server.pg()) as connection:
        assert connection.execute("SELECT usage FROM cpu").fetchall() == [(7.0,)]


def test_remote_clients_must_encrypt_and_are_not_local(start_tls) -> None:
    address = machine_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    server = start_tls(bind="0.0.0.0")
    write(server, "cpu,host=a usage=3 1\n")

    # auth = loopback: through TLS, the client's real address decides, on HTTP and Flight SQL
    remote = requests.get(f"https://{address}:{server.http_port}/api/v3/query_sql",
                          params={"db": DB, "q": "SELECT 1"}, verify=str(server.ca_file),
                          timeout=HTTP_TIMEOUT_S)
    assert remote.status_code == 401, remote.text
    local = requests.get(f"{server.https}/api/v3/query_sql", params={"db": DB, "q": "SELECT 1"},
                         verify=str(server.ca_file), timeout=HTTP_TIMEOUT_S)
    assert local.status_code == 200, local.text
    remote_flight = flight.FlightClient(f"grpc+tls://{address}:{server.flight_port}",
                                        tls_root_certs=server.ca_file.read_bytes())
    with pytest.raises(flight.FlightUnauthenticatedError):
        remote_flight.get_flight_info(CATALOGS)
    remote_flight.close()

    with pytest.raises(psycopg.OperationalError, match="only over TLS"):
        psycopg.connect(server.pg(host=address, sslmode="disable"))
    # prefer: TLS, since the server offers it
    with psycopg.connect(server.pg(host=address, sslmode="prefer")) as connection:
        assert connection.pgconn.ssl_in_use
        assert connection.execute("SELECT usage FROM cpu").fetchall() == [(3.0,)]
    with psycopg.connect(server.pg(host=address)) as connection:
        assert connection.pgconn.ssl_in_use
    # a loopback client may still connect in the clear
    with psycopg.connect(server.pg(sslmode="disable")) as connection:
        assert not connection.pgconn.ssl_in_use
        assert connection.execute("SELECT usage FROM cpu").fetchall() == [(3.0,)]

    # a CancelRequest from the remote client, sent in the clear as libpq's PQcancel does
    with psycopg.connect(server.pg(host=address), autocommit=True) as connection:
        # a bound, so that a refused cancel fails the timing below instead of hanging
        connection.execute("SET statement_timeout = '15s'")
        cancel = connection.pgconn.get_cancel()
        timer = threading.Timer(0.7, cancel.cancel)
        timer.start()
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            connection.execute(ENDLESS)
        timer.join()
        assert time.monotonic() - started < 10
        assert connection.execute("SELECT usage FROM cpu").fetchall() == [(3.0,)]


def pg_request(code: int) -> bytes:
    """An 8-byte SSLRequest / GSSENCRequest-style packet with ``code``."""
    return struct.pack("!II", 8, code)


def startup_packet(user: str, database: str) -> bytes:
    body = struct.pack("!I", 196608) + b"".join(
        key.encode() + b"\0" + value.encode() + b"\0"
        for key, value in (("user", user), ("database", database))) + b"\0"
    return struct.pack("!I", len(body) + 4) + body


def test_postgres_negotiation_direct_tls_gss_and_smuggled_bytes(start_tls) -> None:
    server = start_tls()
    write(server, "cpu,host=a usage=5 1\n")

    # PostgreSQL 17's direct TLS (libpq 17+): TLS first, ALPN "postgresql"
    assert psycopg.pq.version() >= 170000, psycopg.pq.version()
    with psycopg.connect(server.pg() + " sslnegotiation=direct") as connection:
        assert connection.pgconn.ssl_in_use
        assert connection.execute("SELECT usage FROM cpu").fetchall() == [(5.0,)]

    with socket.create_connection(("127.0.0.1", server.pg_port), timeout=10) as raw:
        # GSS encryption is refused, then TLS is accepted on the same connection
        raw.sendall(pg_request(80877104))
        assert raw.recv(1) == b"N"
        raw.sendall(pg_request(80877103))
        assert raw.recv(1) == b"S"

    # bytes sent after SSLRequest but before the handshake (CVE-2021-23214): the server says
    # S, then closes instead of taking them as if they had come through TLS
    with socket.create_connection(("127.0.0.1", server.pg_port), timeout=10) as raw:
        raw.sendall(pg_request(80877103) + startup_packet("admin", DB))
        assert raw.recv(1) == b"S"
        assert raw.recv(1024) == b"", "the connection must end without a handshake"

    # direct TLS without the postgresql ALPN is refused after the handshake
    context = ssl.create_default_context(cafile=str(server.ca_file))
    context.set_alpn_protocols(["http/1.1"])
    with socket.create_connection(("127.0.0.1", server.pg_port), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(startup_packet("admin", DB))
                assert tls.recv(1024) == b""
                raise ConnectionError("closed, as it should be")
    assert server.proc.poll() is None


def test_jdbc_drivers_connect_over_tls(start_tls, classpath: str) -> None:  # noqa: F811
    server = start_tls()
    write(server, "cpu,host=a usage=1.5 1\ncpu,host=b usage=2.5 2\n")
    sql = "SELECT host, usage FROM cpu ORDER BY host"
    result = subprocess.run(
        ["java", "--add-opens=java.base/java.nio=ALL-UNNAMED", "-Duser.timezone=UTC",
         "-cp", classpath, str(JAVA_DIR / "JdbcClients.java"),
         str(server.pg_port), str(server.flight_port), DB, "queries", sql],
        capture_output=True, text=True, timeout=600,
        env={**environment_without_quiver_variables(), "QUIVER_TOKEN_NAME": "admin", "QUIVER_TOKEN": server.admin,
             "QUIVER_TLS_CA": str(server.ca_file)})
    assert result.returncode == 0, f"JdbcClients failed:\n{result.stdout}\n{result.stderr}"
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert {(line["client"], line["check"]) for line in lines} == {
        (client, check) for client in ("pgjdbc", "flight-sql-jdbc")
        for check in ("statement", "prepared")}
    for line in lines:
        assert line["rows"] == [["a", 1.5], ["b", 2.5]], line


def test_bad_tls_settings_refuse_to_start(quiver_bin: Path, tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, key = issue(ca, tmp_path / "pair", "localhost")
    _, other_key = issue(ca, tmp_path / "other", "localhost")
    http, flight_port, pg = free_ports(3)
    base = [str(quiver_bin), "serve", "--data-dir", str(tmp_path / "data"),
            "--http-addr", f"127.0.0.1:{http}", "--flight-addr", f"127.0.0.1:{flight_port}",
            "--pg-addr", f"127.0.0.1:{pg}"]
    cases = [
        (["--tls-cert-file", str(cert)], "tls_cert_file and tls_key_file go together"),
        (["--tls-cert-file", str(tmp_path / "nope.pem"), "--tls-key-file", str(key)],
         f"cannot read {tmp_path / 'nope.pem'}"),
        (["--tls-cert-file", str(cert), "--tls-key-file", str(other_key)],
         "does not belong to the first certificate"),
        (["--tls-cert-file", str(key), "--tls-key-file", str(cert)], "no certificate in it"),
    ]
    for flags, message in cases:
        refused = subprocess.run([*base, *flags], capture_output=True, text=True, timeout=60,
                                 env=environment_without_quiver_variables(), stdin=subprocess.DEVNULL)
        assert refused.returncode != 0, refused.stderr
        assert message in refused.stderr, refused.stderr


def test_a_renewed_certificate_is_served_without_a_restart(start_tls, tmp_path: Path) -> None:
    server = start_tls()
    write(server, "cpu,host=a usage=4 1\n")
    renewal_ca, renewal_ca_file = new_ca(tmp_path / "renewal-ca.pem")
    staged_cert, staged_key = issue(renewal_ca, tmp_path / "renewal", *HOST_NAMES)
    # as certbot and friends do: new files moved into place
    shutil.copy(staged_key, server.key_file.with_suffix(".new"))
    os.replace(server.key_file.with_suffix(".new"), server.key_file)
    shutil.copy(staged_cert, server.cert_file.with_suffix(".new"))
    os.replace(server.cert_file.with_suffix(".new"), server.cert_file)

    deadline = time.monotonic() + 30
    while True:
        try:
            rows = rows_over_https(server, "SELECT usage FROM cpu", verify=str(renewal_ca_file))
            break
        except requests.exceptions.SSLError:
            assert time.monotonic() < deadline, "the renewed certificate was never served"
            time.sleep(0.3)
    assert rows == [{"usage": 4.0}]
    assert "TLS certificate re-read" in server.log()
    # the old CA is no longer what the server presents, on the other protocols too
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        psycopg.connect(server.pg())
    with psycopg.connect(server.pg(root=renewal_ca_file)) as connection:
        assert connection.execute("SELECT usage FROM cpu").fetchall() == [(4.0,)]
    assert server.proc.poll() is None
