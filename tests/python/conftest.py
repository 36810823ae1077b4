"""Pytest fixtures that run the real Quiver server binary for end-to-end tests.

The session-scoped ``quiver_url`` fixture starts ``quiver serve`` once per
test session on free loopback ports with a fresh temporary data directory,
waits until ``GET /health`` answers 200 and yields the HTTP base URL
(e.g. ``http://127.0.0.1:40123``). At the end of the session the server gets
SIGTERM and, if it has not exited after 10 seconds, SIGKILL.

Environment variables:

``QUIVER_BIN``
    Path of the server binary; defaults to ``<repo>/target/debug/quiver``.
``QUIVER_URL``
    Base URL of an already running server to test instead of starting one
    (handy while debugging the server by hand).
``QUIVER_FLIGHT_URI``
    Flight SQL URI of that server (default ``grpc://127.0.0.1:8815``).
``QUIVER_PG_PORT``
    PostgreSQL wire port of that server (default ``5433``).

The ``quiver_flight_uri`` fixture yields the started server's Flight SQL URI
(``grpc://127.0.0.1:<port>``), ``quiver_pg_port`` its PostgreSQL port.

Everything the server prints (stdout and stderr) goes to ``quiver.log`` in the
session's temporary directory. When a test fails, the tail of that log is
attached to the failure report.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from dataclasses import dataclass
from typing import Callable, Iterator

import pytest

from quiver_testlib import (environment_without_quiver_variables, free_ports, log_tail,
                            stop_process, wait_for_health)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO_ROOT / "target" / "debug" / "quiver"

# Log file of the server started by this session, if any; read by the
# report hook below to attach the log tail to failing tests.
_server_log: Path | None = None


_flight_uri: str | None = None
_pg_port: int | None = None


@pytest.fixture(scope="session")
def quiver_flight_uri(quiver_url: str) -> str:
    """The Arrow Flight SQL URI of the session's server."""
    if os.environ.get("QUIVER_URL"):
        return os.environ.get("QUIVER_FLIGHT_URI", "grpc://127.0.0.1:8815")
    assert _flight_uri is not None
    return _flight_uri


@pytest.fixture(scope="session")
def quiver_pg_port(quiver_url: str) -> int:
    """The PostgreSQL wire protocol port of the session's server (on 127.0.0.1)."""
    if os.environ.get("QUIVER_URL"):
        return int(os.environ.get("QUIVER_PG_PORT", "5433"))
    assert _pg_port is not None
    return _pg_port


@pytest.fixture(scope="session")
def quiver_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start the Quiver server for the test session and yield its HTTP base URL."""
    external = os.environ.get("QUIVER_URL")
    if external:
        yield external.rstrip("/")
        return

    binary = Path(os.environ.get("QUIVER_BIN", DEFAULT_BIN))
    if not binary.is_file():
        pytest.fail(
            f"quiver binary not found at {binary}; build it first "
            "(cargo build) or set QUIVER_BIN",
            pytrace=False,
        )

    global _server_log, _flight_uri, _pg_port
    work_dir = tmp_path_factory.mktemp("quiver")
    data_dir = work_dir / "data"
    data_dir.mkdir()
    log_path = work_dir / "quiver.log"
    http_port, flight_port, pg_port = free_ports(3)
    base_url = f"http://127.0.0.1:{http_port}"
    _flight_uri = f"grpc://127.0.0.1:{flight_port}"
    _pg_port = pg_port
    cmd = [
        str(binary),
        "serve",
        "--data-dir", str(data_dir),
        "--http-addr", f"127.0.0.1:{http_port}",
        "--flight-addr", f"127.0.0.1:{flight_port}",
        "--pg-addr", f"127.0.0.1:{pg_port}",
    ]
    env = environment_without_quiver_variables()
    env.setdefault("RUST_LOG", "info")
    env.setdefault("RUST_BACKTRACE", "1")

    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )
    _server_log = log_path
    try:
        wait_for_health(proc, base_url, log_path)
        yield base_url
    finally:
        crashed = proc.poll()
        stop_process(proc)
        _server_log = None
    if crashed is not None:
        pytest.fail(
            f"quiver server died during the test session (exit code {crashed}).\n"
            f"--- server log ({log_path}) ---\n{log_tail(log_path)}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def quiver_bin() -> Path:
    """The server binary the tests run (``QUIVER_BIN``, or the debug build)."""
    binary = Path(os.environ.get("QUIVER_BIN", DEFAULT_BIN))
    if not binary.is_file():
        pytest.fail(f"quiver binary not found at {binary}; build it first or set QUIVER_BIN",
                    pytrace=False)
    return binary


@dataclass
class SpawnedServer:
    """A server started by ``spawn_quiver``: its process, addresses and log."""

    proc: subprocess.Popen
    http_url: str
    flight_uri: str
    pg_port: int
    log_path: Path

    def stop(self) -> int:
        """SIGTERM (then SIGKILL) the server and return its exit code."""
        return stop_process(self.proc)

    def log(self) -> str:
        """Everything the server printed so far."""
        return self.log_path.read_text(errors="replace")


DEFAULT_PORTS = (8086, 8815, 5433)


@pytest.fixture
def spawn_quiver(tmp_path: Path, quiver_bin: Path) -> Iterator[Callable[..., SpawnedServer]]:
    """A factory that starts ``quiver serve ARGS`` the way a user would: in ``cwd``, with the
    environment's ``QUIVER_*`` variables removed (then ``env`` added), on free ports passed as
    flags, or with no address flags at all when ``default_ports`` (the README's command).
    It waits for ``/health`` unless ``wait`` is false; every server it started is stopped at
    the end of the test."""
    started: list[SpawnedServer] = []

    def spawn(*args: str, cwd: Path, env: dict[str, str] | None = None,
              default_ports: bool = False, wait: bool = True) -> SpawnedServer:
        if default_ports:
            http_port, flight_port, pg_port = DEFAULT_PORTS
            address_flags: list[str] = []
        else:
            http_port, flight_port, pg_port = free_ports(3)
            address_flags = ["--http-addr", f"127.0.0.1:{http_port}",
                             "--flight-addr", f"127.0.0.1:{flight_port}",
                             "--pg-addr", f"127.0.0.1:{pg_port}"]
        environment = environment_without_quiver_variables()
        environment.setdefault("RUST_BACKTRACE", "1")
        environment.update(env or {})
        log_path = tmp_path / f"quiver-{len(started)}.log"
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen([str(quiver_bin), "serve", *address_flags, *args], cwd=cwd,
                                    stdin=subprocess.DEVNULL, stdout=log_file,
                                    stderr=subprocess.STDOUT, env=environment)
        server = SpawnedServer(proc, f"http://127.0.0.1:{http_port}",
                               f"grpc://127.0.0.1:{flight_port}", pg_port, log_path)
        started.append(server)
        if wait:
            wait_for_health(proc, server.http_url, log_path)
        return server

    yield spawn
    for server in started:
        server.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Attach the tail of the server log to the report of every failing test."""
    report = yield
    if report.failed and _server_log is not None:
        report.sections.append(
            (f"quiver server log tail ({_server_log})", log_tail(_server_log))
        )
    return report
