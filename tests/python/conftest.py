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
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO_ROOT / "target" / "debug" / "quiver"

STARTUP_TIMEOUT_S = 60.0
SHUTDOWN_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 80

# Log file of the server started by this session, if any; read by the
# report hook below to attach the log tail to failing tests.
_server_log: Path | None = None


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports on 127.0.0.1 that are free right now.

    All sockets are held open until every port is chosen, so the ports are
    distinct; another process may still grab one before the server binds it,
    which is an accepted (rare) race.
    """
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """Return the last ``lines`` lines of a log file (or a note if it is missing)."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<could not read {path}: {exc}>"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else "<server log is empty>"


def _wait_for_health(proc: subprocess.Popen, base_url: str, log_path: Path) -> None:
    """Poll ``/health`` until it answers 200; fail if the server exits or times out."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    last_error = "no attempt yet"
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            pytest.fail(
                f"quiver server exited with code {code} before becoming healthy.\n"
                f"--- server log ({log_path}) ---\n{log_tail(log_path)}",
                pytrace=False,
            )
        try:
            resp = requests.get(f"{base_url}/health", timeout=2)
            if resp.status_code == 200:
                return
            last_error = f"HTTP {resp.status_code}: {resp.text[:200]}"
        except requests.RequestException as exc:
            last_error = repr(exc)
        time.sleep(0.1)
    _stop(proc)
    pytest.fail(
        f"quiver server did not become healthy within {STARTUP_TIMEOUT_S:.0f}s "
        f"(last error: {last_error}).\n"
        f"--- server log ({log_path}) ---\n{log_tail(log_path)}",
        pytrace=False,
    )


def _stop(proc: subprocess.Popen) -> int:
    """SIGTERM the server, SIGKILL it after SHUTDOWN_TIMEOUT_S; return its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


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
    env = dict(os.environ)
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
        _wait_for_health(proc, base_url, log_path)
        yield base_url
    finally:
        crashed = proc.poll()
        _stop(proc)
        _server_log = None
    if crashed is not None:
        pytest.fail(
            f"quiver server died during the test session (exit code {crashed}).\n"
            f"--- server log ({log_path}) ---\n{log_tail(log_path)}",
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Attach the tail of the server log to the report of every failing test."""
    report = yield
    if report.failed and _server_log is not None:
        report.sections.append(
            (f"quiver server log tail ({_server_log})", log_tail(_server_log))
        )
    return report
