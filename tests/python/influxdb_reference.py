"""The reference InfluxDB 1.x server (Debian's ``influxdb`` package, 1.6) for differential tests.

Quiver's InfluxDB 1.x compatibility (``/query``, ``/write``, ``/ping``) is checked against the
real thing: ``start_influxdb`` runs ``influxd`` in the foreground on free loopback ports with a
fresh data directory, and ``write`` / ``query`` speak its 1.x HTTP API.

    base_url, proc = start_influxdb(tmp_path)
    try:
        write(base_url, "mydb", "cpu,host=a usage=1.5 1600000000", precision="s")
        status, body = query(base_url, "mydb", "SELECT * FROM cpu")
    finally:
        stop(proc)

``start_influxdb`` skips the test (``pytest.skip``) when no ``influxd`` binary is found (set
``INFLUXD_BIN`` to use another one; Debian's ``influxdb`` package provides it). Start-up takes
well under a second. The config turns off everything but HTTP: no ``_internal`` monitor
database, no usage reporting, no UDP/Graphite/collectd/OpenTSDB listeners, no continuous
queries, retention enforcement or shard pre-creation, no authentication. Everything the server
prints goes to ``influxdb/influxd.log`` under ``tmp_path``, beside its config and data.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from quiver_testlib import free_ports, log_tail, stop_process

HTTP_TIMEOUT_S = 60
STARTUP_TIMEOUT_S = 30.0

CONFIG_TEMPLATE = """\
reporting-disabled = true
# the RPC service used by backup/restore: any free port
bind-address = "127.0.0.1:0"

[meta]
  dir = "{root}/meta"
  retention-autocreate = true
  logging-enabled = false

[data]
  dir = "{root}/data"
  wal-dir = "{root}/wal"
  query-log-enabled = false

[coordinator]
  max-select-buckets = {max_select_buckets}

[retention]
  enabled = false

[shard-precreation]
  enabled = false

[monitor]
  store-enabled = false

[subscriber]
  enabled = false

[http]
  enabled = true
  bind-address = "127.0.0.1:{http_port}"
  auth-enabled = false
  log-enabled = false
  pprof-enabled = false

[logging]
  level = "warn"
  suppress-logo = true

[continuous_queries]
  enabled = false
"""


def influxd_binary() -> str | None:
    """The ``influxd`` to run: ``$INFLUXD_BIN``, else the one on ``PATH``; None if neither."""
    explicit = os.environ.get("INFLUXD_BIN")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("influxd")


def start_influxdb(tmp_path: Path, *, max_select_buckets: int = 0) -> tuple[str, subprocess.Popen]:
    """Start ``influxd`` with its data under ``tmp_path``; return ``(base_url, process)``.

    Skips the calling test when ``influxd`` is not installed. ``max_select_buckets``
    (0 = unlimited, the 1.x default) is the ``[coordinator]`` limit on GROUP BY time buckets.
    """
    binary = influxd_binary()
    if binary is None:
        missing = "influxd (InfluxDB 1.x, Debian package `influxdb`) is not installed"
        if os.environ.get("CI"):
            # scripts/test.sh installs it: in CI its absence is a broken set-up, not a skip
            pytest.fail(missing, pytrace=False)
        pytest.skip(missing)
    root = Path(tmp_path) / "influxdb"
    root.mkdir(parents=True, exist_ok=True)
    (http_port,) = free_ports(1)
    config = root / "influxdb.conf"
    config.write_text(CONFIG_TEMPLATE.format(root=root, http_port=http_port,
                                             max_select_buckets=max_select_buckets))
    log_path = root / "influxd.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFLUXDB_")}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([binary, "run", "-config", str(config)], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    base_url = f"http://127.0.0.1:{http_port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    last_error = "no attempt yet"
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            pytest.fail(f"influxd exited with code {code} before answering /ping.\n"
                        f"--- log ({log_path}) ---\n{log_tail(log_path)}", pytrace=False)
        try:
            resp = requests.get(f"{base_url}/ping", timeout=2)
            if resp.status_code == 204:
                return base_url, proc
            last_error = f"HTTP {resp.status_code}: {resp.text[:200]}"
        except requests.RequestException as exc:
            last_error = repr(exc)
        time.sleep(0.05)
    stop(proc)
    pytest.fail(f"influxd did not answer /ping within {STARTUP_TIMEOUT_S:.0f}s "
                f"(last error: {last_error}).\n--- log ({log_path}) ---\n{log_tail(log_path)}",
                pytrace=False)


def stop(proc: subprocess.Popen) -> int:
    """SIGTERM ``influxd`` (SIGKILL if it lingers); return its exit code."""
    return stop_process(proc)


def write(base_url: str, db: str, lines: str | list[str], precision: str = "ns") -> None:
    """``CREATE DATABASE db`` (a no-op if it exists), then ``POST /write`` the line protocol,
    which must be accepted whole (204). ``precision`` is one of ns, u, ms, s, m, h."""
    status, body = query(base_url, None, f'CREATE DATABASE "{db}"', method="POST")
    assert status == 200 and "error" not in json.dumps(body), body
    text = "\n".join(lines) if isinstance(lines, list) else lines
    resp = requests.post(f"{base_url}/write", params={"db": db, "precision": precision},
                         data=text.encode(), timeout=HTTP_TIMEOUT_S)
    assert resp.status_code == 204, f"write failed: HTTP {resp.status_code}: {resp.text}"


def query_raw(base_url: str, db: str | None, q: str, *, method: str = "GET",
              headers: dict[str, str] | None = None, **params: Any) -> requests.Response:
    """``/query`` with ``q`` (and ``db`` unless None) and any other parameters (``epoch``,
    ``chunked``, ``pretty``, ...); returns the raw response, any status. POST sends the
    parameters as a form body."""
    all_params: dict[str, Any] = {"q": q, **params}
    if db is not None:
        all_params["db"] = db
    if method == "POST":
        return requests.post(f"{base_url}/query", data=all_params, headers=headers or {},
                             timeout=HTTP_TIMEOUT_S)
    return requests.request(method, f"{base_url}/query", params=all_params,
                            headers=headers or {}, timeout=HTTP_TIMEOUT_S)


def query(base_url: str, db: str | None, q: str, *, method: str = "GET",
          **params: Any) -> tuple[int, Any]:
    """``/query`` and return ``(HTTP status, decoded JSON body)``; the body is None when it is
    not JSON. For ``chunked=true`` (several JSON documents) use ``query_raw``."""
    resp = query_raw(base_url, db, q, method=method, **params)
    try:
        body = resp.json()
    except ValueError:
        body = None
    return resp.status_code, body
