"""Back-pressure: a write buffer that persisting cannot drain in time refuses writes with 503,
``Retry-After`` and a message naming the buffer; every acknowledged write is kept, and no
refused write is (partly) taken."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from quiver_testlib import query_json, write_lp
from test_metrics import sample

DB = "pressure"
ROWS_PER_WRITE = 200
WRITES = 240


def body(request: int) -> str:
    """``ROWS_PER_WRITE`` points of one request, each tagged with the request's number."""
    return "".join(f"load,req=r{request},host=h{i % 7} v={i}i {request * ROWS_PER_WRITE + i}\n"
                   for i in range(ROWS_PER_WRITE))


def test_a_buffer_persisting_cannot_drain_refuses_writes_and_loses_none(
        spawn_quiver, tmp_path: Path) -> None:
    # a one-byte buffer: every write after an unpersisted one needs a persist first, and
    # writes do not wait at all for it
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path,
                          env={"QUIVER_PERSIST_BUFFER_BYTES": "1",
                               "QUIVER_MAX_BUFFER_BYTES": "1",
                               "QUIVER_MAX_BUFFER_WAIT_SECS": "0"})

    def send(request: int) -> tuple[int, requests.Response]:
        return request, write_lp(server.http_url, DB, body(request))

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(send, range(WRITES)))
    accepted = {request for request, response in results if response.status_code == 204}
    refused = [(request, response) for request, response in results
               if response.status_code != 204]
    assert refused, "eight writers against a one-byte buffer were never refused"
    for _, response in refused:
        assert response.status_code == 503, response.text
        assert response.headers.get("Retry-After") == "1", response.headers
        error = response.json()["error"]
        assert "write buffer is full" in error and "max_buffer_bytes" in error, error
        assert "max_buffer_wait_secs" in error, error
    assert accepted, "no write was accepted"

    # every acknowledged write whole, no refused write at all
    counts = query_json(server.http_url, DB,
                        "SELECT req, count(*) AS n FROM load GROUP BY req")
    assert {row["req"] for row in counts} == {f"r{r}" for r in accepted}
    assert all(row["n"] == ROWS_PER_WRITE for row in counts), counts

    metrics = requests.get(f"{server.http_url}/metrics", timeout=10).text
    assert sample(metrics, "quiver_write_buffer_refusals_total") == len(refused)
    persistence = storage_persistence(server.http_url)
    assert persistence["write_refusals"] == len(refused), persistence
    # the server goes on taking writes once the buffer drains
    deadline = time.monotonic() + 30
    while storage_persistence(server.http_url)["buffered_bytes"] > 0:
        assert time.monotonic() < deadline, "the buffer never drained"
        time.sleep(0.05)
    assert write_lp(server.http_url, DB, body(WRITES)).status_code == 204


def storage_persistence(base_url: str) -> dict:
    """The ``persistence`` section of ``GET /api/v3/storage``."""
    response = requests.get(f"{base_url}/api/v3/storage", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["persistence"]
