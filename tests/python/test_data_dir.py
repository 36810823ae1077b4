"""The server run the way the README runs it, and the data directory however a user names it.

Every other end-to-end test passes an absolute temporary ``--data-dir``; these start
``quiver serve`` in a fresh working directory exactly as a user would: with no flags at all
(the default ``./quiver-data`` and the default ports), with a relative ``--data-dir``,
``QUIVER_DATA_DIR`` or ``data_dir`` in ``./quiver.toml``, with spaces, ``%`` and non-ASCII in
the directory's name, through a symlink and through ``..``. Each writes, persists to Parquet,
reads the persisted rows back over HTTP, PostgreSQL and Flight SQL, restarts and reads again.

Then the server's own faults: a persisted file deleted or truncated behind its back is a 500
(PostgreSQL ``XX000``, Flight ``INTERNAL``) naming the file, logged as an error, while the
server and every other table keep working; a second server on the same data directory refuses
to start instead of destroying the first one's files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import psycopg
import pytest
import requests

from conftest import DEFAULT_PORTS, SpawnedServer
from quiver_testlib import parquet_files, ports_free, write_ok
from quiver_testlib import persist as persist_now

DB = "metrics"
DATABASE_HEADER = "adbc.flight.sql.rpc.call_header.database"
LINES = (
    "cpu,host=a,region=eu usage=12.5,cores=8i 1700000000000000000\n"
    "cpu,host=b,region=us usage=7.25,cores=4i 1700000001000000000\n"
)
ROWS = [("a", 12.5, 8), ("b", 7.25, 4)]

Spawn = Callable[..., SpawnedServer]


def sql(probe: int, table: str = "cpu") -> str:
    """The same question with a different constant, so each protocol's query is a cache
    miss that reads the files itself."""
    return f"SELECT host, usage, cores, {probe} AS probe FROM {table} ORDER BY host"


def http_rows(server: SpawnedServer, statement: str, db: str = DB) -> list[tuple[Any, ...]]:
    response = requests.get(f"{server.http_url}/api/v3/query_sql",
                            params={"db": db, "q": statement, "format": "json"}, timeout=60)
    assert response.status_code == 200, response.text
    assert response.headers["X-Quiver-Cache"] == "MISS"
    return [(r["host"], r["usage"], r["cores"]) for r in response.json()]


def pg_connect(server: SpawnedServer, db: str = DB) -> psycopg.Connection:
    return psycopg.connect(host="127.0.0.1", port=server.pg_port, user="quiver", dbname=db,
                           autocommit=True, connect_timeout=10)


def pg_rows(server: SpawnedServer, statement: str, db: str = DB) -> list[tuple[Any, ...]]:
    with pg_connect(server, db) as conn:
        return [row[:3] for row in conn.execute(statement).fetchall()]


def flight_connect(server: SpawnedServer, db: str = DB) -> flight_sql.Connection:
    return flight_sql.connect(server.flight_uri, db_kwargs={DATABASE_HEADER: db},
                              autocommit=True)


def flight_rows(server: SpawnedServer, statement: str, db: str = DB) -> list[tuple[Any, ...]]:
    with flight_connect(server, db) as conn, conn.cursor() as cursor:
        cursor.execute(statement)
        return [row[:3] for row in cursor.fetchall()]


def persist(server: SpawnedServer) -> dict[str, Any]:
    return persist_now(server.http_url)


def write(server: SpawnedServer, lines: str = LINES, db: str = DB) -> None:
    write_ok(server.http_url, db, lines)


def assert_every_protocol_reads(server: SpawnedServer, round_: int) -> None:
    """The persisted rows, read by a cache miss over each protocol."""
    assert http_rows(server, sql(3 * round_)) == ROWS
    assert pg_rows(server, sql(3 * round_ + 1)) == ROWS
    assert flight_rows(server, sql(3 * round_ + 2)) == ROWS


def write_persist_restart_read(spawn: Spawn, cwd: Path, data_dir: Path, *args: str,
                               env: dict[str, str] | None = None,
                               default_ports: bool = False) -> None:
    """Write, persist, read over every protocol, restart the same way, read again; the
    files must be in ``data_dir`` (the directory the user meant, resolved by hand here)."""
    server = spawn(*args, cwd=cwd, env=env, default_ports=default_ports)
    write(server)
    assert persist(server)["files"] == 1
    assert_every_protocol_reads(server, 0)
    assert server.stop() == 0, server.log()
    assert (data_dir / "catalog.json").is_file()
    assert len(parquet_files(data_dir)) == 1, sorted(data_dir.rglob("*"))

    again = spawn(*args, cwd=cwd, env=env, default_ports=default_ports)
    assert_every_protocol_reads(again, 1)
    # a second persist after the restart adds a file that is found too
    write(again, LINES.replace("12.5", "13.5"))
    persist(again)
    assert http_rows(again, sql(100)) == [("a", 13.5, 8), ("b", 7.25, 4)]
    assert len(parquet_files(data_dir)) == 2
    assert again.stop() == 0, again.log()


def test_the_readme_serve_command_with_nothing_but_defaults(spawn_quiver: Spawn,
                                                            tmp_path: Path) -> None:
    """`quiver serve` with no flag, no environment and no config file, in a fresh directory:
    the README's first command (the release build is the same code)."""
    if not ports_free(DEFAULT_PORTS):
        pytest.fail(f"a default port of {DEFAULT_PORTS} is taken: stop whatever holds it "
                    "(a Quiver left running?) so the README's command can be tested")
    cwd = tmp_path / "fresh"
    cwd.mkdir()
    write_persist_restart_read(spawn_quiver, cwd, cwd / "quiver-data", default_ports=True)
    server = spawn_quiver(cwd=cwd, default_ports=True)
    started = server.log()
    assert f"data_dir={cwd.resolve() / 'quiver-data'}" in started, started


@pytest.mark.parametrize(
    "how",
    ["flag", "dotted-flag", "parent-flag", "env", "toml", "odd-characters", "symlink"],
)
def test_a_relative_data_dir_however_it_is_given(spawn_quiver: Spawn, tmp_path: Path,
                                                 how: str) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    args: list[str] = []
    env: dict[str, str] = {}
    if how == "flag":
        args, data_dir = ["--data-dir", "data"], cwd / "data"
    elif how == "dotted-flag":
        args, data_dir = ["--data-dir", "./a/./b/"], cwd / "a" / "b"
    elif how == "parent-flag":
        args, data_dir = ["--data-dir", "../up/data"], tmp_path / "up" / "data"
    elif how == "env":
        env, data_dir = {"QUIVER_DATA_DIR": "./from-env"}, cwd / "from-env"
    elif how == "toml":
        (cwd / "quiver.toml").write_text('data_dir = "from toml"\n')
        data_dir = cwd / "from toml"
    elif how == "odd-characters":
        name = "my data %41 %% ünïcødé 数据 #1"
        args, data_dir = ["--data-dir", name], cwd / name
    else:
        real = tmp_path / "real disk"
        real.mkdir()
        (cwd / "linked").symlink_to(real, target_is_directory=True)
        args, data_dir = ["--data-dir", "linked"], real
    write_persist_restart_read(spawn_quiver, cwd, data_dir, *args, env=env)


def catalog_file(data_dir: Path, table: str) -> Path:
    catalog = json.loads((data_dir / "catalog.json").read_text())
    files = catalog["databases"][DB]["tables"][table]["files"]
    assert len(files) == 1, files
    return data_dir / files[0]["path"]


def test_a_damaged_persisted_file_is_the_servers_fault_and_harms_nothing_else(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    # no columns kept decoded as files are written: queries read the damaged files
    server = spawn_quiver(cwd=tmp_path, env={"QUIVER_CHUNK_CACHE_BYTES": "0"})
    for table in ("gone", "torn", "intact"):
        write(server, LINES.replace("cpu,", f"{table},"))
    persist(server)
    data_dir = tmp_path / "quiver-data"
    gone, torn = catalog_file(data_dir, "gone"), catalog_file(data_dir, "torn")
    gone.unlink()
    with open(torn, "r+b") as f:
        f.truncate(os.path.getsize(torn) // 2)

    for number, (table, path) in enumerate([("gone", gone), ("torn", torn)]):
        response = requests.get(f"{server.http_url}/api/v3/query_sql",
                                params={"db": DB, "q": sql(10 + number, table)}, timeout=60)
        assert response.status_code == 500, response.text
        message = response.json()["error"]
        assert path.name in message, message

        with pg_connect(server) as conn, pytest.raises(psycopg.Error) as pg_error:
            conn.execute(sql(20 + number, table))
        assert pg_error.value.sqlstate == "XX000", pg_error.value
        assert path.name in str(pg_error.value)

        with flight_connect(server) as conn, conn.cursor() as cursor:
            with pytest.raises(adbc_driver_manager.Error) as flight_error:
                cursor.execute(sql(30 + number, table))
                cursor.fetchall()
        assert flight_error.value.status_code == adbc_driver_manager.AdbcStatusCode.INTERNAL, (
            flight_error.value)
        assert path.name in str(flight_error.value)

    assert requests.get(f"{server.http_url}/health", timeout=10).status_code == 200
    assert http_rows(server, sql(40, "intact")) == ROWS
    assert pg_rows(server, sql(41, "intact")) == ROWS
    assert flight_rows(server, sql(42, "intact")) == ROWS
    write(server, "intact,host=c,region=eu usage=1.0,cores=1i 1700000002000000000\n")
    assert http_rows(server, sql(43, "intact")) == ROWS + [("c", 1.0, 1)]
    errors = [line for line in server.log().splitlines() if "ERROR" in line]
    assert any(gone.name in line for line in errors), server.log()
    assert any(torn.name in line for line in errors), server.log()


def test_a_second_server_on_the_same_data_directory_refuses_to_start(
        spawn_quiver: Spawn, tmp_path: Path) -> None:
    first = spawn_quiver("--data-dir", "shared", cwd=tmp_path)
    write(first)
    # the same directory by another name: absolute, through a symlink
    (tmp_path / "alias").symlink_to(tmp_path / "shared", target_is_directory=True)
    second = spawn_quiver("--data-dir", str(tmp_path / "alias"), cwd=tmp_path, wait=False)
    assert second.proc.wait(timeout=60) != 0
    assert "in use by another Quiver process" in second.log(), second.log()
    assert "shared" in second.log()
    # the first server lost nothing and still writes
    write(first, LINES.replace("12.5", "99.0"))
    persist(first)
    assert http_rows(first, sql(1)) == [("a", 99.0, 8), ("b", 7.25, 4)]
    # once the first has stopped, the directory can be opened again
    assert first.stop() == 0
    third = spawn_quiver("--data-dir", "shared", cwd=tmp_path)
    assert http_rows(third, sql(2)) == [("a", 99.0, 8), ("b", 7.25, 4)]
