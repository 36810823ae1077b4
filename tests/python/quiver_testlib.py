"""Shared helpers for Quiver's Python end-to-end tests.

* Server processes: free ports, waiting for ``/health``, stopping with SIGTERM
  then SIGKILL, the tail of a server's log.
* HTTP helpers for the InfluxDB-3-compatible API: writing line protocol and
  running SQL with ``format=arrow`` (Arrow IPC stream) or ``format=json``.
* Normalisation of query results from either engine (Quiver via Arrow, DuckDB
  via Arrow) into plain Python rows: timestamps become int nanoseconds since
  the Unix epoch (UTC), dictionary-encoded strings become ``str``, DECIMAL
  values (DuckDB's HUGEINT sums) become ``int``.
* ``assert_rows_match``: row-by-row comparison with a float tolerance.
"""

from __future__ import annotations

import decimal
import gzip as gzip_lib
import math
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import requests

ARROW_STREAM_MIME = "application/vnd.apache.arrow.stream"
FLOAT_TOLERANCE = 1e-9
HTTP_TIMEOUT_S = 120

Row = tuple[Any, ...]


# --------------------------------------------------------------------------
# Server processes
# --------------------------------------------------------------------------

STARTUP_TIMEOUT_S = 60.0
SHUTDOWN_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 80


def environment_without_quiver_variables() -> dict[str, str]:
    """This process's environment less every ``QUIVER_*`` variable (the test run's own, such as
    ``QUIVER_BIN``): a server refuses unknown ones, and a test's server gets only the settings
    the test gives it."""
    return {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}


# every port handed out in this process: never handed out twice, so a port chosen for a server
# started later (a Ballista scheduler named in a writer's flags) is not chosen again meanwhile
# for another server of the same test (the kernel may offer a just-released port again)
_HANDED_OUT: set[int] = set()


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports on 127.0.0.1 that are free right now and were never
    returned before in this process.

    All sockets are held open until every port is chosen, so the ports are
    distinct; another process may still grab one before the server binds it,
    which is an accepted (rare) race.
    """
    sockets = []
    chosen: list[int] = []
    try:
        while len(chosen) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
            port = sock.getsockname()[1]
            if port not in _HANDED_OUT:
                chosen.append(port)
            assert len(sockets) < count + 1000, "no free port left that was not handed out"
        _HANDED_OUT.update(chosen)
        return chosen
    finally:
        for sock in sockets:
            sock.close()


def reserve_ports(ports: tuple[int, ...]) -> None:
    """Never hand out ``ports`` from ``free_ports`` (a test about to start servers on fixed
    ports, such as the defaults, inside the range the kernel hands out)."""
    _HANDED_OUT.update(ports)


def port_pair() -> int:
    """A free port whose successor is free too (a Ballista executor takes both); neither is
    handed out again."""
    for _ in range(50):
        (port,) = free_ports(1)
        if port + 1 in _HANDED_OUT:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        _HANDED_OUT.add(port + 1)
        return port
    raise RuntimeError("no two consecutive free ports")


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port`` (a server without
    ``/health``, such as a Ballista scheduler or executor)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """Return the last ``lines`` lines of a log file (or a note if it is missing)."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<could not read {path}: {exc}>"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else "<server log is empty>"


def wait_for_health(proc: subprocess.Popen, base_url: str, log_path: Path,
                    verify: bool | str = True) -> None:
    """Poll ``/health`` until it answers 200; fail if the server exits or times out.
    ``verify`` is ``requests``' (the CA file of an ``https://`` server)."""
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
            resp = requests.get(f"{base_url}/health", timeout=2, verify=verify)
            if resp.status_code == 200:
                return
            last_error = f"HTTP {resp.status_code}: {resp.text[:200]}"
        except requests.RequestException as exc:
            last_error = repr(exc)
        time.sleep(0.1)
    stop_process(proc)
    pytest.fail(
        f"quiver server did not become healthy within {STARTUP_TIMEOUT_S:.0f}s "
        f"(last error: {last_error}).\n"
        f"--- server log ({log_path}) ---\n{log_tail(log_path)}",
        pytrace=False,
    )


def stop_process(proc: subprocess.Popen) -> int:
    """SIGTERM the server, SIGKILL it after SHUTDOWN_TIMEOUT_S; return its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


# --------------------------------------------------------------------------
# HTTP API
# --------------------------------------------------------------------------

def query(base_url: str, db: str, sql: str, fmt: str = "json") -> requests.Response:
    """``GET /api/v3/query_sql`` and return the raw response (any status)."""
    return requests.get(
        f"{base_url}/api/v3/query_sql",
        params={"db": db, "q": sql, "format": fmt},
        timeout=HTTP_TIMEOUT_S,
    )


def query_arrow(base_url: str, db: str, sql: str) -> pa.Table:
    """Run ``sql`` with ``format=arrow`` and decode the Arrow IPC stream."""
    resp = query(base_url, db, sql, fmt="arrow")
    assert resp.status_code == 200, (
        f"query failed with HTTP {resp.status_code}: {resp.text[:2000]}\nSQL: {sql}"
    )
    content_type = resp.headers.get("Content-Type", "")
    assert content_type.startswith(ARROW_STREAM_MIME), (
        f"unexpected Content-Type {content_type!r} for format=arrow"
    )
    with pa.ipc.open_stream(resp.content) as reader:
        return reader.read_all()


def query_json(base_url: str, db: str, sql: str) -> list[dict[str, Any]]:
    """Run ``sql`` with ``format=json`` and return the decoded array of objects."""
    resp = query(base_url, db, sql, fmt="json")
    assert resp.status_code == 200, (
        f"query failed with HTTP {resp.status_code}: {resp.text[:2000]}\nSQL: {sql}"
    )
    rows = resp.json()
    assert isinstance(rows, list), f"expected a JSON array, got {type(rows).__name__}"
    return rows


def write_lp(
    base_url: str,
    db: str,
    body: str | bytes,
    *,
    precision: str = "ns",
    accept_partial: bool | None = None,
    compress: bool = False,
    headers: dict[str, str] | None = None,
) -> requests.Response:
    """``POST /api/v3/write_lp`` and return the raw response (any status).

    ``compress`` gzips the body and sets ``Content-Encoding: gzip``;
    ``accept_partial=None`` leaves the parameter out (server default).
    """
    params: dict[str, str] = {"db": db, "precision": precision}
    if accept_partial is not None:
        params["accept_partial"] = "true" if accept_partial else "false"
    data = body.encode() if isinstance(body, str) else body
    all_headers = {"Content-Type": "text/plain; charset=utf-8"}
    if compress:
        data = gzip_lib.compress(data)
        all_headers["Content-Encoding"] = "gzip"
    all_headers.update(headers or {})
    return requests.post(
        f"{base_url}/api/v3/write_lp",
        params=params,
        data=data,
        headers=all_headers,
        timeout=HTTP_TIMEOUT_S,
    )


def unique_name(prefix: str) -> str:
    """``prefix`` and a random suffix: a token name no other test (or fixture) uses."""
    return f"{prefix}-{secrets.token_hex(4)}"


def create_token(base_url: str, name: str, permissions: Sequence[str],
                 headers: dict[str, str] | None = None) -> str:
    """Create a token through the admin API (as the local caller, or with ``headers``) and
    return its secret."""
    resp = requests.post(f"{base_url}/api/v3/configure/token",
                         json={"name": name, "permissions": list(permissions)},
                         headers=headers or {}, timeout=HTTP_TIMEOUT_S)
    assert resp.status_code == 201, resp.text
    return resp.json()["token"]


def persist(base_url: str) -> dict[str, Any]:
    """``POST /api/v3/persist`` (must succeed); returns what it wrote."""
    response = requests.post(f"{base_url}/api/v3/persist", timeout=HTTP_TIMEOUT_S)
    assert response.status_code == 200, response.text
    return response.json()


def write_ok(base_url: str, db: str, lines: str) -> None:
    """Writes line protocol, which must be accepted whole (204)."""
    response = write_lp(base_url, db, lines)
    assert response.status_code == 204, response.text


def write_and_persist(base_url: str, db: str, lines: str) -> None:
    """Writes line protocol (must be accepted) and persists it to Parquet at once."""
    write_ok(base_url, db, lines)
    persist(base_url)


def parquet_files(data_dir: Path, db: str | None = None) -> list[Path]:
    """The Parquet files under a data directory (of one database if ``db``), sorted."""
    tables = data_dir / "tables"
    return sorted((tables / db if db else tables).rglob("*.parquet"))


def wait_until(condition: Any, timeout_s: float, what: str) -> None:
    """Polls ``condition()`` every 0.2 s until it is true; fails naming ``what`` after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.2)


def ports_free(ports: tuple[int, ...]) -> bool:
    """Whether every port in ``ports`` can be bound on 127.0.0.1 now."""
    for port in ports:
        with socket.socket() as sock:
            # as the server binds: connections of an earlier run in TIME_WAIT do not count
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def storage_stats(base_url: str) -> dict[str, Any]:
    """``GET /api/v3/storage`` (must succeed): WAL, persistence, compaction and chunk cache
    counters."""
    response = requests.get(f"{base_url}/api/v3/storage", timeout=HTTP_TIMEOUT_S)
    assert response.status_code == 200, response.text
    return response.json()


# --------------------------------------------------------------------------
# Timestamps
# --------------------------------------------------------------------------

_RFC3339_UTC = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?Z$"
)


def parse_rfc3339_ns(text: str) -> int:
    """Parse an RFC 3339 UTC timestamp (``Z`` suffix, up to 9 fractional
    digits) into integer nanoseconds since the Unix epoch.

    Python's ``datetime`` stops at microseconds, so the fraction is handled
    separately to keep nanosecond precision.
    """
    match = _RFC3339_UTC.match(text)
    if not match:
        raise ValueError(f"not an RFC 3339 UTC timestamp with 'Z' suffix: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    days = _days_from_civil(year, month, day)
    seconds = ((days * 24 + hour) * 60 + minute) * 60 + second
    fraction = (match.group(7) or "").ljust(9, "0")
    return seconds * 1_000_000_000 + int(fraction or "0")


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 for a proleptic Gregorian date (H. Hinnant's algorithm)."""
    year -= month <= 2
    era = (year if year >= 0 else year - 399) // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


# --------------------------------------------------------------------------
# Result normalisation and comparison
# --------------------------------------------------------------------------

def _normalize_column(column: pa.ChunkedArray) -> list[Any]:
    """Convert one Arrow column into engine-independent Python values."""
    dtype = column.type
    if pa.types.is_dictionary(dtype):
        column = pc.cast(column, dtype.value_type)
        dtype = dtype.value_type
    if pa.types.is_timestamp(dtype):
        if dtype.unit != "ns":
            column = pc.cast(column, pa.timestamp("ns", dtype.tz))
        return pc.cast(column, pa.int64()).to_pylist()
    values = column.to_pylist()
    if pa.types.is_decimal(dtype):
        return [_decimal_to_number(v) for v in values]
    return values


def _decimal_to_number(value: decimal.Decimal | None) -> int | float | None:
    if value is None:
        return None
    return int(value) if value == value.to_integral_value() else float(value)


def normalize_table(table: pa.Table) -> tuple[list[str], list[Row]]:
    """Return ``(column names, rows)`` with values normalised for comparison."""
    columns = [_normalize_column(col) for col in table.columns]
    rows = list(zip(*columns)) if columns else []
    return list(table.column_names), rows


def values_equal(actual: Any, expected: Any, tol: float = FLOAT_TOLERANCE) -> bool:
    """Compare two normalised values: floats with tolerance, everything else exactly."""
    if actual is None or expected is None:
        return actual is None and expected is None
    if isinstance(actual, bool) or isinstance(expected, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(actual, float) or isinstance(expected, float):
        if not isinstance(actual, (int, float)) or not isinstance(expected, (int, float)):
            return False
        if math.isnan(actual) or math.isnan(expected):
            return math.isnan(actual) and math.isnan(expected)
        return math.isclose(actual, expected, rel_tol=tol, abs_tol=tol)
    return type(actual) is type(expected) and actual == expected


def assert_rows_match(
    actual_names: Sequence[str],
    actual_rows: Sequence[Row],
    expected_names: Sequence[str],
    expected_rows: Sequence[Row],
    *,
    context: str = "",
    max_reported: int = 10,
) -> None:
    """Assert identical column names, row count and values (floats within tolerance)."""
    __tracebackhide__ = True
    prefix = f"{context}\n" if context else ""
    assert [n.lower() for n in actual_names] == [n.lower() for n in expected_names], (
        f"{prefix}column names differ: {list(actual_names)} != {list(expected_names)}"
    )
    assert len(actual_rows) == len(expected_rows), (
        f"{prefix}row count differs: quiver={len(actual_rows)} "
        f"expected={len(expected_rows)}\n"
        f"first quiver rows:   {list(actual_rows[:3])}\n"
        f"first expected rows: {list(expected_rows[:3])}"
    )
    mismatches = []
    for index, (got, want) in enumerate(zip(actual_rows, expected_rows)):
        bad_columns = [
            name
            for name, a, e in zip(expected_names, got, want)
            if not values_equal(a, e)
        ]
        if bad_columns:
            mismatches.append(
                f"row {index}: columns {bad_columns}\n  quiver:   {got}\n  expected: {want}"
            )
    assert not mismatches, (
        f"{prefix}{len(mismatches)} of {len(expected_rows)} rows differ "
        f"(showing {min(len(mismatches), max_reported)}):\n"
        + "\n".join(mismatches[:max_reported])
    )


def json_rows(records: Iterable[dict[str, Any]], columns: Sequence[str],
              timestamp_columns: Iterable[str] = ()) -> list[Row]:
    """Turn ``format=json`` records into rows in ``columns`` order.

    Keys missing from an object are treated as NULL (a JSON writer may omit
    null values); RFC 3339 strings in ``timestamp_columns`` become int ns.
    Unknown keys are an error.
    """
    ts_cols = set(timestamp_columns)
    rows = []
    for record in records:
        unknown = set(record) - set(columns)
        assert not unknown, f"unexpected keys {sorted(unknown)} in JSON row {record}"
        row = []
        for name in columns:
            value = record.get(name)
            if name in ts_cols and value is not None:
                value = parse_rfc3339_ns(value)
            row.append(value)
        rows.append(tuple(row))
    return rows
