"""Distributed queries on DataFusion Ballista (``role = scheduler | executor``,
``distributed = off | auto | on``).

A real cluster on loopback, every node the one ``quiver`` binary: a writer whose data is in
an S3-compatible store (``moto``), Ballista's scheduler, and two executors reading the same
store. Answers run distributed must equal the same queries run on the writer alone, over
HTTP, PostgreSQL and Flight SQL; a scheduler that is down makes ``auto`` answer locally and
``on`` fail clearly; an executor killed mid-query never yields a wrong answer."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pyarrow as pa
import pytest
import requests

from object_store_lib import (HOSTS, POINTS, MotoServer, cpu_lines, mem_lines,
                             quiver_environment, usage)
from quiver_testlib import (assert_rows_match, free_ports, listening, normalize_table,
                            persist, port_pair, ports_free, reserve_ports, unique_name,
                            values_equal, wait_until, write_ok)
from test_differential import DB as DIFFERENTIAL_DB
from test_differential import QUERIES as DIFFERENTIAL_QUERIES
from test_differential import generate_dataset, write_batches

DB = "fleet"
DATABASE_HEADER = "adbc.flight.sql.rpc.call_header.database"
DISTRIBUTED_HEADER = "adbc.flight.sql.rpc.call_header.x-quiver-distributed"

# TSBS-shaped questions and the shapes the differential tests use: aggregates by time bucket
# and tag, tag filters, last point per series, ORDER BY / LIMIT, gap filling, a join
QUERIES = [
    "SELECT count(*) AS n, sum(usage) AS total, min(usage) AS low, max(usage) AS high FROM cpu",
    "SELECT host, max(usage) AS peak FROM cpu GROUP BY host ORDER BY host",
    "SELECT date_bin(INTERVAL '1 hour', time) AS hour, host, avg(usage) AS mean FROM cpu "
    "WHERE host IN ('h01', 'h05', 'h07') AND time >= '2024-03-01T12:00:00Z' "
    "AND time < '2024-03-02T12:00:00Z' GROUP BY 1, 2 ORDER BY 1, 2",
    "SELECT date_bin(INTERVAL '1 day', time) AS day, region, count(*) AS n, "
    "avg(usage) AS mean FROM cpu GROUP BY 1, 2 ORDER BY 1, 2",
    "SELECT host, time, usage FROM cpu WHERE usage > 60 ORDER BY usage DESC, host, time "
    "LIMIT 7",
    "SELECT DISTINCT ON (host) host, time, usage FROM cpu ORDER BY host, time DESC",
    "SELECT host, usage, time FROM cpu WHERE host = 'h03' ORDER BY time DESC LIMIT 5",
    "SELECT date_bin_gapfill(INTERVAL '1 hour', time) AS hour, host, locf(avg(usage)) AS u "
    "FROM cpu WHERE host = 'h02' AND time >= '2024-03-03T20:00:00Z' "
    "AND time < '2024-03-04T04:00:00Z' GROUP BY 1, 2 ORDER BY 1, 2",
    "SELECT c.region, count(*) AS n, sum(m.free) AS free FROM cpu c JOIN mem m "
    "ON c.host = m.host AND c.time = m.time GROUP BY c.region ORDER BY c.region",
]


def load_dataset(url: str) -> None:
    """Three days of readings in two persisted halves, then rewrites of persisted points and
    new points still in the writer's buffer (a later write wins; the buffer travels with the
    plan)."""
    half = POINTS // 2
    write_ok(url, DB, cpu_lines(range(half), usage))
    write_ok(url, DB, mem_lines(range(half)))
    persist(url)
    write_ok(url, DB, cpu_lines(range(half, POINTS - 40), usage))
    write_ok(url, DB, mem_lines(range(half, POINTS)))
    persist(url)
    # buffered: the last 40 steps, and rewritten readings of persisted ones
    write_ok(url, DB, cpu_lines(range(POINTS - 40, POINTS), usage))
    write_ok(url, DB, cpu_lines(range(0, POINTS, 37), lambda host, i: 1000.0 + i))


# 72 million joined rows: seconds of work, spread over the executors
HEAVY = ("SELECT a.region, count(*) AS n, sum(a.usage * b.usage + k) AS s "
         "FROM (VALUES (1), (2), (3), (4), (5), (6), (7), (8)) AS v(k) CROSS JOIN cpu a "
         "JOIN cpu b ON a.region = b.region GROUP BY a.region ORDER BY a.region")


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log")
    yield server
    server.stop()


class Cluster:
    """A writer over a fresh bucket, and (unless told otherwise) a scheduler and two
    executors."""

    def __init__(self, spawn: Callable[..., Any], tmp_path: Path, moto: MotoServer,
                 writer_flags: tuple[str, ...] = (), executors: int = 2,
                 scheduler: bool = True):
        bucket = unique_name("quiver").replace("-", "")
        moto.create_bucket(bucket)
        self.url = f"s3://{bucket}/cluster"
        self.env = quiver_environment(moto.endpoint)
        self.spawn, self.tmp_path = spawn, tmp_path
        (self.scheduler_port,) = free_ports(1)
        self.scheduler_addr = f"127.0.0.1:{self.scheduler_port}"
        self.writer = self.node("writer", *writer_flags)
        load_dataset(self.writer.http_url)
        self.scheduler = self.node("scheduler", "--role", "scheduler", wait=False) \
            if scheduler else None
        if scheduler:
            wait_until(lambda: listening(self.scheduler_port), 30, "the scheduler listening")
        self.executors = [self.executor(i) for i in range(executors)]

    def node(self, name: str, *flags: str, wait: bool = True) -> Any:
        data_dir = self.tmp_path / name
        data_dir.mkdir(exist_ok=True)
        return self.spawn("--data-dir", str(data_dir), "--object-store-url", self.url,
                          "--scheduler-addr", self.scheduler_addr, *flags,
                          cwd=self.tmp_path, env=self.env, wait=wait)

    def executor(self, index: int) -> Any:
        port = port_pair()
        node = self.node(f"executor{index}", "--role", "executor",
                         "--executor-addr", f"127.0.0.1:{port}", wait=False)
        wait_until(lambda: listening(port), 60, f"executor {index} listening")
        return node


def ask(url: str, sql: str, distributed: str | None = None) -> requests.Response:
    params = {"db": DB, "q": sql, "format": "json"}
    if distributed is not None:
        params["distributed"] = distributed
    # no result cache: every answer is computed (here or on Ballista)
    return requests.get(f"{url}/api/v3/query_sql", params=params,
                        headers={"Cache-Control": "no-cache"}, timeout=120)


def rows(url: str, sql: str, distributed: str | None = None) -> list[dict[str, Any]]:
    response = ask(url, sql, distributed)
    assert response.status_code == 200, f"{response.status_code} {response.text}\n{sql}"
    return response.json()


def same_rows(actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> bool:
    """Equal answers, floats within rounding (partial sums add up in another order when
    executors compute them)."""
    return len(actual) == len(expected) and all(
        a.keys() == e.keys() and all(values_equal(a[k], e[k]) for k in e)
        for a, e in zip(actual, expected))


def explain(url: str, sql: str, distributed: str) -> str:
    plans = rows(url, f"EXPLAIN {sql}", distributed)
    return "\n".join(row["plan"] for row in plans)


@pytest.fixture
def cluster(spawn_quiver, tmp_path: Path, moto: MotoServer) -> Cluster:
    return Cluster(spawn_quiver, tmp_path, moto)


def test_distributed_answers_equal_local_ones_over_every_protocol(cluster: Cluster) -> None:
    url = cluster.writer.http_url
    local = [rows(url, sql, "off") for sql in QUERIES]
    assert local[0][0]["n"] == POINTS * len(HOSTS)
    assert local[0][0]["high"] == 1000.0 + 37 * (POINTS // 37), "rewrites must win"
    for sql, expected in zip(QUERIES, local):
        distributed = rows(url, sql, "on")
        assert same_rows(distributed, expected), f"{sql}\n{distributed}\n{expected}"
    # the plan ran on Ballista: EXPLAIN names its stages, and the executors' shuffle files
    plan = explain(url, QUERIES[3], "on")
    assert "Distributed execution: on Ballista" in plan, plan
    assert plan.count("Ballista stage") >= 2, plan
    assert "DeduplicateExec" in plan, "overlapping sources are merged on the executors"
    for executor in cluster.executors:
        assert "Finished task" in executor.log(), "an executor ran no task"

    # the jobs' shuffle files are removed once their answers were read
    def shuffle_files() -> list[Path]:
        return [path for e in range(2)
                for path in (cluster.tmp_path / f"executor{e}" / "shuffle").rglob("*")
                if path.is_file()]
    wait_until(lambda: not shuffle_files(), 10, "the executors' shuffle files removed")

    with psycopg.connect(host="127.0.0.1", port=cluster.writer.pg_port, user="u", dbname=DB,
                         autocommit=True, connect_timeout=10) as conn:
        conn.execute("SET quiver.distributed = on")
        assert conn.execute("SHOW quiver.distributed").fetchone()[0] == "on"
        pg_plan = "\n".join(r[1] for r in conn.execute(f"EXPLAIN {QUERIES[1]}").fetchall())
        assert "Ballista stage" in pg_plan, pg_plan
        pg_rows = conn.execute(QUERIES[1]).fetchall()
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="off, auto or on"):
            conn.execute("SET quiver.distributed = sometimes")
    assert [{"host": h, "peak": p} for h, p in pg_rows] == local[1]

    with flight_sql.connect(cluster.writer.flight_uri, autocommit=True,
                            db_kwargs={DATABASE_HEADER: DB, DISTRIBUTED_HEADER: "on"}) as conn:
        with conn.cursor() as cur:
            cur.execute(f"EXPLAIN {QUERIES[1]}")
            assert "Ballista stage" in "\n".join(str(r) for r in cur.fetchall())
            cur.execute(QUERIES[1])
            flight_rows = cur.fetchall()
    assert [{"host": h, "peak": p} for h, p in flight_rows] == local[1]

    bad = ask(url, QUERIES[0], "sometimes")
    assert bad.status_code == 400 and "off, auto or on" in bad.text, bad.text


def test_auto_sends_only_large_scans_and_explain_says_why(
        spawn_quiver, tmp_path: Path, moto: MotoServer) -> None:
    cluster = Cluster(spawn_quiver, tmp_path, moto,
                      writer_flags=("--distributed", "auto"), executors=1)
    url = cluster.writer.http_url
    # the default threshold (1 GiB) keeps this small data set here
    small = explain(url, QUERIES[1], "auto")
    assert "Distributed execution: none, this server" in small, small
    assert "under distributed_min_scan_bytes" in small, small
    assert "Ballista stage" not in small
    forced = explain(url, QUERIES[1], "on")
    assert "Ballista stage" in forced, forced
    off = explain(url, QUERIES[1], "off")
    # off is the engine as ever: EXPLAIN says nothing of distribution
    assert "Distributed execution" not in off and "Ballista" not in off, off
    assert same_rows(rows(url, QUERIES[1]), rows(url, QUERIES[1], "off"))


def test_a_low_threshold_sends_auto_queries_to_ballista(
        spawn_quiver, tmp_path: Path, moto: MotoServer) -> None:
    cluster_env_threshold = {"QUIVER_DISTRIBUTED_MIN_SCAN_BYTES": "1"}
    cluster = Cluster(spawn_quiver, tmp_path, moto, executors=1)
    writer = cluster.writer
    writer.stop()
    cluster.env = {**cluster.env, **cluster_env_threshold}
    writer = cluster.node("writer", "--distributed", "auto")
    plan = explain(writer.http_url, QUERIES[2], "auto")
    assert "Distributed execution: on Ballista (distributed = auto" in plan, plan
    assert "at least distributed_min_scan_bytes (1)" in plan, plan
    assert same_rows(rows(writer.http_url, QUERIES[2]), rows(writer.http_url, QUERIES[2], "off"))


# the cluster's default addresses: the scheduler, and an executor's two ports
DEFAULT_CLUSTER_PORTS = (50050, 50051, 50052)


def test_the_readme_cluster_commands_answer_on_their_default_addresses(
        spawn_quiver, tmp_path: Path, moto: MotoServer) -> None:
    """The README's cluster commands as written: a scheduler and an executor given no
    address, and a writer told only `--distributed on`, find each other on the defaults."""
    reserve_ports(DEFAULT_CLUSTER_PORTS)
    # they lie in the range the kernel gives client connections: one that just closed holds
    # its port for a minute (TIME_WAIT); anything holding one longer fails the test
    wait_until(lambda: ports_free(DEFAULT_CLUSTER_PORTS), 90,
               f"the default cluster ports {DEFAULT_CLUSTER_PORTS} free (stop whatever holds "
               "them)")
    bucket = unique_name("quiver").replace("-", "")
    moto.create_bucket(bucket)
    env = quiver_environment(moto.endpoint)

    def node(name: str, *flags: str, wait: bool = True) -> Any:
        (tmp_path / name).mkdir()
        return spawn_quiver("--data-dir", str(tmp_path / name), "--object-store-url",
                            f"s3://{bucket}/cluster", *flags, cwd=tmp_path, env=env, wait=wait)

    writer = node("writer", "--distributed", "on")
    load_dataset(writer.http_url)
    node("scheduler", "--role", "scheduler", wait=False)
    wait_until(lambda: listening(50050), 30, "the scheduler listening on 50050")
    executor = node("executor", "--role", "executor", wait=False)
    wait_until(lambda: listening(50051), 60, "the executor listening on 50051")
    distributed = rows(writer.http_url, QUERIES[1])
    assert same_rows(distributed, rows(writer.http_url, QUERIES[1], "off")), distributed
    assert "Finished task" in executor.log(), "the executor ran no task"


def test_a_scheduler_that_is_down_makes_auto_local_and_on_fail_clearly(
        spawn_quiver, tmp_path: Path, moto: MotoServer) -> None:
    cluster = Cluster(spawn_quiver, tmp_path, moto, executors=0, scheduler=False)
    url = cluster.writer.http_url
    expected = rows(url, QUERIES[1], "off")
    started = time.monotonic()
    assert rows(url, QUERIES[1], "auto") == expected
    assert time.monotonic() - started < 10
    failed = ask(url, QUERIES[1], "on")
    assert failed.status_code == 503, failed.text
    assert "scheduler" in failed.text and cluster.scheduler_addr in failed.text, failed.text
    with psycopg.connect(host="127.0.0.1", port=cluster.writer.pg_port, user="u", dbname=DB,
                         autocommit=True, connect_timeout=10) as conn:
        conn.execute("SET quiver.distributed = on")
        with pytest.raises(psycopg.OperationalError) as refused:
            conn.execute(QUERIES[1])
        assert refused.value.sqlstate == "57P03"
    # the server is still up and answers
    assert same_rows(rows(url, QUERIES[0]), rows(url, QUERIES[0], "off"))


def test_data_in_data_dir_cannot_run_on_ballista(spawn_quiver, tmp_path: Path) -> None:
    writer = spawn_quiver("--data-dir", str(tmp_path / "local"), cwd=tmp_path)
    write_ok(writer.http_url, DB, cpu_lines(range(3), usage))
    refused = ask(writer.http_url, QUERIES[0], "on")
    assert refused.status_code == 400, refused.text
    assert "object_store_url" in refused.text, refused.text
    assert ask(writer.http_url, QUERIES[0], "auto").status_code == 200


def test_an_executor_killed_mid_query_never_gives_a_wrong_answer(cluster: Cluster) -> None:
    url = cluster.writer.http_url
    expected = rows(url, HEAVY, "off")
    outcome: dict[str, requests.Response] = {}
    asking = threading.Thread(target=lambda: outcome.update(r=ask(url, HEAVY, "on")))
    started = time.monotonic()
    asking.start()
    time.sleep(0.5)
    cluster.executors[0].proc.send_signal(signal.SIGKILL)
    asking.join(timeout=150)
    assert not asking.is_alive(), "the query neither finished nor failed"
    assert time.monotonic() - started > 0.5, "the query ended before the executor was killed"
    print(f"\nkilled mid-query: HTTP {outcome['r'].status_code} after "
          f"{time.monotonic() - started:.1f} s: {outcome['r'].text[:300]}")
    response = outcome["r"]
    if response.status_code == 200:
        assert same_rows(response.json(), expected)
    else:
        assert response.status_code >= 500, response.text
        assert "Ballista" in response.text or "executor" in response.text, response.text
    # the remaining executor answers the next query, exactly
    assert same_rows(rows(url, HEAVY, "on"), expected)


def test_a_timeout_or_a_cancel_cancels_the_ballista_job(cluster: Cluster) -> None:
    url = cluster.writer.http_url
    response = requests.get(f"{url}/api/v3/query_sql", timeout=60,
                            headers={"Cache-Control": "no-cache"},
                            params={"db": DB, "q": HEAVY, "distributed": "on",
                                    "timeout_secs": "1"})
    assert response.status_code == 504, (response.status_code, response.text)
    assert "timeout_secs" in response.text, response.text
    wait_until(lambda: "Received cancellation request" in cluster.scheduler.log(), 10,
               "the scheduler told to cancel the timed-out job")

    # a client that goes away: the query is cancelled when its connection drops
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.get(f"{url}/api/v3/query_sql", timeout=0.8,
                     headers={"Cache-Control": "no-cache"},
                     params={"db": DB, "q": HEAVY.replace("(8)", "(9)"), "distributed": "on"})
    wait_until(lambda: cluster.scheduler.log().count("Received cancellation request") >= 2, 15,
               "the scheduler told to cancel the abandoned job")
    # the cluster still answers
    assert same_rows(rows(url, QUERIES[1], "on"), rows(url, QUERIES[1], "off"))


def arrow_answer(url: str, db: str, sql: str, distributed: str) -> pa.Table:
    response = requests.get(f"{url}/api/v3/query_sql", timeout=120,
                            headers={"Cache-Control": "no-cache"},
                            params={"db": db, "q": sql, "format": "arrow",
                                    "distributed": distributed})
    assert response.status_code == 200, f"{response.status_code} {response.text}\n{sql}"
    with pa.ipc.open_stream(response.content) as reader:
        return reader.read_all()


def test_the_differential_query_set_answers_alike_distributed(cluster: Cluster) -> None:
    """The differential test's data set (nulls, unsigned and string fields, four tags), half
    persisted and half still buffered: every query of its set, in Arrow, distributed and
    local."""
    url = cluster.writer.http_url
    batches = write_batches(generate_dataset())
    for k, batch in enumerate(batches):
        write_ok(url, DIFFERENTIAL_DB, "\n".join(
            record if isinstance(record, str) else record.to_line_protocol()
            for record in batch))
        if k == len(batches) // 2:
            persist(url)
    for q in DIFFERENTIAL_QUERIES:
        local_names, local_rows = normalize_table(arrow_answer(url, DIFFERENTIAL_DB, q.sql, "off"))
        names, got = normalize_table(arrow_answer(url, DIFFERENTIAL_DB, q.sql, "on"))
        assert_rows_match(names, got, local_names, local_rows,
                          context=f"query {q.name} distributed:\n{q.sql}")


@pytest.mark.parametrize("args, message", [
    (["--role", "executor"], "role = executor works on the files of object_store_url"),
    (["--role", "scheduler"], "role = scheduler works on the files of object_store_url"),
    (["--role", "executor", "--object-store-url", "file:///tmp/quiver-cluster-test",
      "--executor-addr", "0.0.0.0:50151"], "not an unspecified address"),
    (["--role", "scheduler", "--object-store-url", "file:///tmp/quiver-cluster-test",
      "--scheduler-addr", "no-port-here"], "scheduler_addr \"no-port-here\" is not HOST:PORT"),
    (["--distributed", "sometimes"], "distributed"),
])
def test_bad_cluster_settings_are_clear_startup_errors(
        spawn_quiver, tmp_path: Path, args: list[str], message: str) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "d"), *args, cwd=tmp_path, wait=False)
    assert server.proc.wait(timeout=30) != 0
    assert message in server.log(), server.log()


def test_retention_and_the_buffer_decide_a_distributed_answer(cluster: Cluster) -> None:
    """A database whose retention hides older rows, some rows persisted and some buffered:
    the plan carries the cutoff and the buffered rows, so Ballista answers as the writer."""
    url = cluster.writer.http_url
    response = requests.post(f"{url}/api/v3/configure/database", timeout=30,
                             json={"db": "recent", "retention_period": "1h"})
    assert response.status_code in (200, 201, 204), response.text
    now_ns = time.time_ns()
    minute = 60 * 10**9

    def lines(minutes_ago: range) -> str:
        # half a minute off the minute: no row is near the cutoff while the test runs
        return "\n".join(f"cpu,host=h{m % 4} usage={m} {now_ns - m * minute - minute // 2}"
                         for m in minutes_ago)

    write_ok(url, "recent", lines(range(30, 180)))   # 2.5 h back to 30 min ago
    persist(url)
    write_ok(url, "recent", lines(range(0, 30)))     # the last half hour, buffered
    sql = "SELECT host, count(*) AS n, min(usage) AS low, max(usage) AS high FROM cpu " \
          "GROUP BY host ORDER BY host"
    local = rows_in(url, "recent", sql, "off")
    # rows older than the hour are hidden: 0.5 to 59.5 minutes old are left
    assert sum(r["n"] for r in local) == 60, local
    assert max(r["high"] for r in local) == 59, local
    assert rows_in(url, "recent", sql, "on") == local


def rows_in(url: str, db: str, sql: str, distributed: str) -> list[dict[str, Any]]:
    response = requests.get(f"{url}/api/v3/query_sql", timeout=60,
                            headers={"Cache-Control": "no-cache"},
                            params={"db": db, "q": sql, "distributed": distributed})
    assert response.status_code == 200, f"{response.status_code} {response.text}"
    return response.json()


def test_a_scheduler_killed_mid_job_is_a_503_and_the_node_stays_up(cluster: Cluster) -> None:
    url = cluster.writer.http_url
    outcome: dict[str, requests.Response] = {}
    asking = threading.Thread(target=lambda: outcome.update(r=ask(url, HEAVY, "on")))
    started = time.monotonic()
    asking.start()
    time.sleep(0.5)
    assert cluster.scheduler is not None
    cluster.scheduler.proc.send_signal(signal.SIGKILL)
    asking.join(timeout=60)
    assert not asking.is_alive(), "the query neither finished nor failed"
    response = outcome["r"]
    assert time.monotonic() - started > 0.5, "the query ended before the scheduler was killed"
    assert response.status_code == 503, (response.status_code, response.text)
    assert "Ballista scheduler" in response.text, response.text
    # the node answers locally, and under auto (the scheduler is gone: it falls back)
    expected = rows(url, QUERIES[1], "off")
    assert same_rows(rows(url, QUERIES[1], "auto"), expected)
