"""A disk that fills up during a compaction: the data directory lives on a small tmpfs, filled
to the last byte before ``POST /api/v3/compact``. The merge fails with an error that says why,
leaves no partial file behind, changes no answer and loses nothing; once space is back the same
compaction succeeds, and a restart reads the same rows.

Mounting a tmpfs needs root (``CAP_SYS_ADMIN``); where that is refused the test is skipped
and says so, unless ``QUIVER_TEST_REQUIRE_TMPFS=1`` (set by CI) makes that a failure.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import requests

from conftest import SpawnedServer
from quiver_testlib import parquet_files, query_json, storage_stats, write_and_persist

Spawn = Callable[..., SpawnedServer]
DB = "full"
PERSISTS = 4
QUERIES = [
    "SELECT count(*) AS n, sum(v) AS s FROM cpu",
    "SELECT host, max(v) AS hi FROM cpu GROUP BY host ORDER BY host",
]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs mounted under the test's directory (unmounted afterwards)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        reason = f"cannot mount a tmpfs here ({mounted.stderr.strip()}): needs root"
        if os.environ.get("QUIVER_TEST_REQUIRE_TMPFS") == "1":
            pytest.fail(reason + "; QUIVER_TEST_REQUIRE_TMPFS=1 (CI) requires this test to run")
        pytest.skip(reason)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(path: Path) -> None:
    """Writes `path` until the file system has no byte left."""
    chunk = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as filler:
        while True:
            try:
                filler.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                break
        while len(chunk) > 1:
            chunk = chunk[: len(chunk) // 2]
            try:
                while True:
                    filler.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e


def answers(server: SpawnedServer) -> list[list[dict[str, Any]]]:
    return [query_json(server.http_url, DB, sql) for sql in QUERIES]


def test_a_compaction_on_a_full_disk_fails_cleanly_and_succeeds_later(
        spawn_quiver: Spawn, small_disk: Path) -> None:
    env = {"QUIVER_COMPACTION_ENABLED": "false", "QUIVER_WAL_SEGMENT_BYTES": str(1 << 20),
           "QUIVER_CACHE_ENABLED": "false"}
    server = spawn_quiver("--data-dir", "data", cwd=small_disk, env=env)
    for part in range(PERSISTS):
        lines = "".join(f"cpu,host=h{i % 20} v={part * 100_000 + i}.5 {i * 10**9}\n"
                        for i in range(20_000 + part * 1000))
        write_and_persist(server.http_url, DB, lines)
    before = answers(server)
    files = parquet_files(small_disk / "data")
    assert len(files) == PERSISTS

    filler = small_disk / "filler"
    fill(filler)
    response = requests.post(f"{server.http_url}/api/v3/compact", params={"db": DB}, timeout=120)
    assert response.status_code >= 500, response.text
    assert "No space left on device" in response.json()["error"], response.text
    stats = storage_stats(server.http_url)["compaction"]
    assert stats["failures"] >= 1 and "No space left" in stats["last_error"], stats
    assert stats["files"] == PERSISTS, stats
    assert parquet_files(small_disk / "data") == files, "no partial file is left behind"
    assert answers(server) == before
    assert requests.get(f"{server.http_url}/health", timeout=10).status_code == 200

    filler.unlink()
    response = requests.post(f"{server.http_url}/api/v3/compact", params={"db": DB}, timeout=120)
    assert response.status_code == 200, response.text
    assert response.json()["files_in"] == PERSISTS, response.text
    assert storage_stats(server.http_url)["compaction"]["files"] == 1
    assert len(parquet_files(small_disk / "data")) == 1
    assert answers(server) == before
    server.stop()
    server = spawn_quiver("--data-dir", "data", cwd=small_disk, env=env)
    assert answers(server) == before
