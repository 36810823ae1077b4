"""The command line as a user drives it against a real server: ``quiver write`` sends large
inputs in requests cut at line ends (rejected lines keep their numbers in the input, a request
refused outright stops the command with what was written and how to go on), shows a progress
bar on a terminal; ``quiver query --verbose`` says the time and the cache verdict;
``quiver import`` loads Parquet and CSV files through the Arrow path."""

from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests

from conftest import SpawnedServer
from quiver_testlib import HTTP_TIMEOUT_S, environment_without_quiver_variables, query_json

Spawn = Callable[..., SpawnedServer]
# `quiver write` sends about 4 MiB per request (crates/quiver-client/src/cli/write.rs)
CHUNK_BYTES = 4 << 20


def cli(quiver_bin: Path, server: SpawnedServer, *args: str,
        stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(quiver_bin), args[0], "--host", server.http_url, *args[1:]],
                          capture_output=True, input=stdin, timeout=300,
                          env=environment_without_quiver_variables())


def points(count: int, start: int = 0) -> list[str]:
    return [f"cpu,host=h{i % 10} usage={i % 100},n={i}i {1_700_000_000 + i}000000000"
            for i in range(start, start + count)]


def count_rows(server: SpawnedServer, db: str, table: str = "cpu") -> int:
    return query_json(server.http_url, db, f"SELECT count(*) AS n FROM {table}")[0]["n"]


@pytest.fixture
def server(spawn_quiver: Spawn, tmp_path: Path) -> SpawnedServer:
    return spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path)


def test_write_of_a_large_file_numbers_rejected_lines_in_the_input(
        server: SpawnedServer, quiver_bin: Path, tmp_path: Path) -> None:
    lines = points(250_000)  # ~12 MiB: three requests
    bad = [120_000, 230_000]  # in the second and the third request
    for number in bad:
        lines[number - 1] = f"cpu,host=x usage=oops{number} 1"
    source = tmp_path / "big.lp"
    source.write_text("\n".join(lines) + "\n")
    assert source.stat().st_size > 2 * CHUNK_BYTES
    result = cli(quiver_bin, server, "write", "--db", "big", str(source))
    stderr = result.stderr.decode()
    assert result.returncode != 0
    for number in bad:
        located = [line for line in stderr.splitlines() if f"oops{number}" in line]
        assert len(located) == 1 and f"line {number}:" in located[0], stderr
    assert (f'wrote {len(lines) - 2} lines ({source.stat().st_size} bytes sent) to database '
            f'"big"; 2 lines rejected') in stderr, stderr
    assert count_rows(server, "big") == len(lines) - 2
    # standard input: the same numbering
    piped = cli(quiver_bin, server, "write", "--db", "piped", "-",
                stdin=source.read_bytes())
    assert piped.returncode != 0 and "line 230000:" in piped.stderr.decode()
    assert count_rows(server, "piped") == len(lines) - 2


def test_an_entry_with_a_line_break_is_never_cut_and_a_bom_is_dropped(
        server: SpawnedServer, quiver_bin: Path, tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    filler: list[str] = []
    size = len(bom)
    for line in points(CHUNK_BYTES // 40):
        if size + len(line) + 1 + 200 >= CHUNK_BYTES:
            break
        filler.append(line)
        size += len(line) + 1
    # a line padded so that the multi-line entry starts 10 bytes before the 4 MiB cut: a
    # reader cutting at the first line end past 4 MiB would cut it after "first"
    pad = f'pad,host={"x" * (CHUNK_BYTES - size - 10 - 17)} v=1i 1'
    assert size + len(pad) + 1 == CHUNK_BYTES - 10
    rest = points(100, start=len(filler))
    text = "\n".join(filler + [pad, 'log,host=a msg="first\nsecond" 5'] + rest) + "\n"
    source = tmp_path / "strings.lp"
    source.write_bytes(bom + text.encode())
    result = cli(quiver_bin, server, "write", "--db", "strings", str(source))
    assert result.returncode == 0, result.stderr
    assert query_json(server.http_url, "strings", "SELECT msg FROM log") == [
        {"msg": "first\nsecond"}]
    assert count_rows(server, "strings") == len(filler) + len(rest)
    assert count_rows(server, "strings", "pad") == 1


def test_a_refused_request_stops_the_write_and_says_where_to_go_on(
        spawn_quiver: Spawn, quiver_bin: Path, tmp_path: Path) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "data"), cwd=tmp_path,
                          env={"QUIVER_MAX_REQUEST_BYTES": str(CHUNK_BYTES + (1 << 19))})
    first = points(90_000)  # a little over one request's worth
    assert len("\n".join(first)) > CHUNK_BYTES
    huge = f'cpu,host=big note="{"x" * (CHUNK_BYTES + (1 << 20))}" 5'
    rest = points(10, start=90_000)
    source = tmp_path / "refused.lp"
    source.write_text("\n".join(first + [huge] + rest) + "\n")
    result = cli(quiver_bin, server, "write", "--db", "refused", str(source))
    stderr = result.stderr.decode()
    assert result.returncode != 0
    # the first request ended at the first line end past 4 MiB
    sent = next(i for i in range(len(first))
                if len("\n".join(first[:i + 1])) + 1 >= CHUNK_BYTES) + 1
    assert "413" in stderr, stderr
    assert f"stopped at line {sent + 1}: lines 1 to {sent} of {source} were sent" in stderr
    assert (f"tail -n +{sent + 1} FILE | quiver write --db refused --precision auto -"
            in " ".join(stderr.split())), stderr
    assert count_rows(server, "refused") == sent


def test_write_shows_a_progress_bar_on_a_terminal(server: SpawnedServer, quiver_bin: Path,
                                                  tmp_path: Path) -> None:
    source = tmp_path / "bar.lp"
    source.write_text("\n".join(points(200_000)) + "\n")
    main, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [str(quiver_bin), "write", "--host", server.http_url, "--db", "bar", str(source)],
            stdout=subprocess.PIPE, stderr=terminal, env=environment_without_quiver_variables())
        os.close(terminal)
        drawn = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            drawn += chunk
        assert process.wait(timeout=120) == 0
        summary = process.stdout.read().decode()
    finally:
        os.close(main)
    text = drawn.decode(errors="replace")
    assert "rows/s" in text and "ETA" in text and "MiB" in text, text[:2000]
    assert summary.startswith("wrote 200000 lines"), summary
    # without a terminal, no bar: only the summary
    plain = cli(quiver_bin, server, "write", "--db", "bar2", str(source))
    assert plain.returncode == 0 and plain.stderr == b"", plain.stderr


def test_query_verbose_says_time_and_cache_verdict(server: SpawnedServer,
                                                   quiver_bin: Path) -> None:
    written = cli(quiver_bin, server, "write", "--db", "v", "-",
                  stdin=("\n".join(points(100)) + "\n").encode())
    assert written.returncode == 0, written.stderr
    verdicts = []
    for _ in range(2):
        result = cli(quiver_bin, server, "query", "--db", "v", "--verbose", "--format", "csv",
                     "SELECT count(*) AS n FROM cpu")
        assert result.returncode == 0 and result.stdout.decode().splitlines() == ["n", "100"]
        line = result.stderr.decode().strip()
        assert line.startswith("200 OK in ") and " ms, " in line, line
        verdicts.append(line.rsplit("result cache: ", 1)[1])
    assert verdicts == ["MISS", "HIT"]
    failed = cli(quiver_bin, server, "query", "--db", "v", "-v", "SELECT nope FROM cpu")
    assert failed.returncode != 0
    assert failed.stderr.decode().startswith("400 Bad Request in ")


def test_import_parquet_and_csv_through_the_arrow_path(server: SpawnedServer, quiver_bin: Path,
                                                       tmp_path: Path) -> None:
    rows = 150_000
    table = pa.table({
        "time": pa.array([1_700_000_000_000 + i for i in range(rows)], pa.timestamp("ms")),
        "host": pa.array([f"h{i % 7}" for i in range(rows)]).dictionary_encode(),
        "usage": pa.array([i * 0.5 for i in range(rows)], pa.float64()),
        "label": pa.array([f"l{i % 3}" for i in range(rows)]),
    })
    parquet = tmp_path / "metrics.parquet"
    pq.write_table(table, parquet, compression="snappy", row_group_size=40_000)
    imported = cli(quiver_bin, server, "import", "--db", "imp", "--batch-rows", "30000",
                   str(parquet))
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.decode().strip() == (
        f'imported {rows} rows from {parquet} into database "imp", table "metrics" '
        "(tags: host)")
    summary = query_json(server.http_url, "imp",
                         "SELECT count(*) AS n, count(DISTINCT host) AS hosts, sum(usage) AS s, "
                         "min(time) AS first, max(time) AS last FROM metrics")[0]
    assert summary["n"] == rows and summary["hosts"] == 7
    assert summary["s"] == pytest.approx(sum(i * 0.5 for i in range(rows)))
    assert summary["first"] == "2023-11-14T22:13:20Z"
    assert summary["last"] == "2023-11-14T22:15:49.999Z"
    types = {row["column_name"]: row["data_type"] for row in query_json(
        server.http_url, "imp", "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = 'metrics'")}
    assert types["host"].startswith("Dictionary") and types["label"] == "Utf8"

    csv = tmp_path / "readings.csv"
    csv.write_text("ts,site,value,ok\n"
                   "1704067200,oslo,1.5,true\n"
                   "1704067260,rome,,false\n"
                   "1704067320,oslo,3,true\n")
    loaded = cli(quiver_bin, server, "import", "--db", "imp", "--time-column", "ts",
                 "--epoch-unit", "s", "--table", "readings", str(csv))
    assert loaded.returncode == 0, loaded.stderr
    assert query_json(server.http_url, "imp",
                      "SELECT time, site, value, ok FROM readings ORDER BY time") == [
        {"time": "2024-01-01T00:00:00Z", "site": "oslo", "value": 1.5, "ok": True},
        {"time": "2024-01-01T00:01:00Z", "site": "rome", "ok": False},
        {"time": "2024-01-01T00:02:00Z", "site": "oslo", "value": 3.0, "ok": True},
    ]


@pytest.mark.parametrize("content, args, message", [
    ("when,site\n2024-01-01T00:00:00Z,a\n", (), 'the file has no column "time"'),
    ("time,site\n2024-01-01T00:00:00Z,a\n", ("--tags", "nope"), 'the tag column "nope"'),
    ("time,v\n2024-01-01T00:00:00Z,1\n", ("--tags", "v"), "tags are text"),
    ("time,v\n2024-01-01T00:00:00Z,1\nlater,2\n", (), "later"),
    ("time,v\n9223372036854775807,1\n", ("--epoch-unit", "s"), "overflows"),
    ("time,v\n1,2\n", ("--epoch-unit", "h"), "--epoch-unit must be s, ms, us or ns"),
])
def test_import_refuses_what_it_cannot_load_and_writes_nothing(
        server: SpawnedServer, quiver_bin: Path, tmp_path: Path, content: str,
        args: tuple[str, ...], message: str) -> None:
    source = tmp_path / "bad.csv"
    source.write_text(content)
    result = cli(quiver_bin, server, "import", "--db", "bad", *args, str(source))
    assert result.returncode != 0
    assert message in result.stderr.decode(), result.stderr
    listed = requests.get(f"{server.http_url}/api/v3/configure/database",
                          timeout=HTTP_TIMEOUT_S).json()
    assert "bad" not in [d["db"] for d in listed], listed


def test_import_of_an_unknown_or_broken_file_says_so(server: SpawnedServer, quiver_bin: Path,
                                                     tmp_path: Path) -> None:
    unknown = tmp_path / "data.xlsx"
    unknown.write_bytes(b"PK\x03\x04")
    result = cli(quiver_bin, server, "import", str(unknown))
    assert result.returncode != 0
    assert "--format parquet|csv" in result.stderr.decode()
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really a parquet file")
    result = cli(quiver_bin, server, "import", str(broken))
    assert result.returncode != 0 and f"cannot read {broken}" in result.stderr.decode()
    missing = cli(quiver_bin, server, "import", str(tmp_path / "missing.csv"))
    assert missing.returncode != 0 and "No such file" in missing.stderr.decode()
