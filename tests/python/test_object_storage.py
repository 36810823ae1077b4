"""Data in object storage, and query nodes beside one writer (``object_store_url``, ``role``).

Against a real S3 protocol on loopback: ``moto``'s server mode, reached through a TCP proxy
that can make the store unreachable. One writer (``role = all``) and query nodes
(``role = query``) as separate processes, each with its own data directory, over every
protocol (HTTP, Flight SQL, PostgreSQL)."""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pytest
import requests

from object_store_lib import (HOSTS, POINTS, START_NS, MotoServer, Proxy, cpu_lines,
                             mem_lines, quiver_environment, usage)
from quiver_testlib import (persist, query, query_json, unique_name, wait_until, write_lp,
                            write_ok)

DATABASE_HEADER = "adbc.flight.sql.rpc.call_header.database"
DB = "fleet"

QUERIES = [
    "SELECT count(*) AS n, sum(usage) AS total FROM cpu",
    "SELECT host, max(usage) AS peak, min(usage) AS low FROM cpu GROUP BY host ORDER BY host",
    "SELECT date_bin(INTERVAL '1 day', time) AS day, host, avg(usage) AS mean FROM cpu "
    "GROUP BY 1, 2 ORDER BY 1, 2",
    "SELECT host, time, usage FROM cpu WHERE host = 'h03' ORDER BY time DESC LIMIT 5",
    "SELECT region, count(*) AS n FROM mem GROUP BY region ORDER BY region",
]


def load_dataset(url: str) -> None:
    """Three days of cpu and mem readings, in two persists (so tables have several files)."""
    half = POINTS // 2
    write_ok(url, DB, cpu_lines(range(half), usage))
    write_ok(url, DB, mem_lines(range(half)))
    persist(url)
    write_ok(url, DB, cpu_lines(range(half, POINTS), usage))
    write_ok(url, DB, mem_lines(range(half, POINTS)))
    persist(url)


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log")
    yield server
    server.stop()


@pytest.fixture
def proxy(moto: MotoServer) -> Iterator[Proxy]:
    """A proxy to moto this test may take down."""
    p = Proxy(moto.port)
    yield p
    p.stop()


@pytest.fixture
def bucket_url(moto: MotoServer) -> str:
    """A fresh bucket and prefix for one test."""
    bucket = unique_name("quiver").replace("-", "")
    moto.create_bucket(bucket)
    return f"s3://{bucket}/cluster"


Node = Any


def start_node(spawn_quiver: Callable[..., Any], tmp_path: Path, name: str, url: str,
               endpoint: str, *extra: str, wait: bool = True) -> Node:
    data_dir = tmp_path / name
    data_dir.mkdir(exist_ok=True)
    return spawn_quiver("--data-dir", str(data_dir), "--object-store-url", url, *extra,
                        cwd=tmp_path, env=quiver_environment(endpoint), wait=wait)


def writer_and_node(spawn_quiver: Callable[..., Any], tmp_path: Path, moto: MotoServer,
                    bucket_url: str, *node_flags: str) -> tuple[Node, Node]:
    """A writer holding one persisted point of `cpu`, and a query node beside it."""
    writer = start_node(spawn_quiver, tmp_path, "writer", bucket_url, moto.endpoint)
    write_ok(writer.http_url, DB, "cpu,host=a usage=1 1")
    persist(writer.http_url)
    node = start_node(spawn_quiver, tmp_path, "query", bucket_url, moto.endpoint,
                      "--role", "query", *node_flags)
    return writer, node


def answers_http(url: str) -> list[list[dict[str, Any]]]:
    return [query_json(url, DB, sql) for sql in QUERIES]


def answers_flight(uri: str) -> list[list[tuple]]:
    with flight_sql.connect(uri, db_kwargs={DATABASE_HEADER: DB}, autocommit=True) as conn:
        out = []
        for sql in QUERIES:
            with conn.cursor() as cur:
                cur.execute(sql)
                out.append([tuple(row) for row in cur.fetchall()])
        return out


def answers_pg(port: int) -> list[list[tuple]]:
    with psycopg.connect(host="127.0.0.1", port=port, user="u", dbname=DB,
                         autocommit=True, connect_timeout=10) as conn:
        return [conn.execute(sql).fetchall() for sql in QUERIES]


def test_query_nodes_answer_as_the_writer_over_every_protocol(
        spawn_quiver, tmp_path: Path, moto: MotoServer, bucket_url: str) -> None:
    writer = start_node(spawn_quiver, tmp_path, "writer", bucket_url, moto.endpoint)
    load_dataset(writer.http_url)
    nodes = [start_node(spawn_quiver, tmp_path, f"query{i}", bucket_url, moto.endpoint,
                        "--role", "query") for i in range(2)]
    expected = answers_http(writer.http_url)
    # the writer's own answer holds every row written, as computed here
    total = sum(usage(host, i) for i in range(POINTS) for host in HOSTS)
    assert expected[0] == [{"n": POINTS * len(HOSTS), "total": pytest.approx(total)}]
    for node in nodes:
        assert answers_http(node.http_url) == expected
        assert answers_flight(node.flight_uri) == answers_flight(writer.flight_uri)
        assert answers_pg(node.pg_port) == answers_pg(writer.pg_port)
        health = requests.get(f"{node.http_url}/health", timeout=5).json()
        assert health["role"] == "query" and health["status"] == "pass", health
        assert health["data"] == bucket_url
    # the files are in the bucket, not in the writer's data directory
    listed = moto.client().list_objects_v2(Bucket=bucket_url[5:].split("/")[0])
    keys = [o["Key"] for o in listed.get("Contents", [])]
    assert any(k.startswith("cluster/tables/fleet/") and k.endswith(".parquet") for k in keys)
    assert any(k.startswith("cluster/catalog/") for k in keys), keys
    assert not list((tmp_path / "writer").rglob("*.parquet"))
    assert not (tmp_path / "writer" / "catalog.json").exists()


def test_a_query_node_refuses_writes_and_changes_naming_its_role(
        spawn_quiver, tmp_path: Path, moto: MotoServer, bucket_url: str) -> None:
    writer, node = writer_and_node(spawn_quiver, tmp_path, moto, bucket_url)
    refused = [
        write_lp(node.http_url, DB, "cpu,host=a usage=2 2"),
        requests.post(f"{node.http_url}/api/v2/write", params={"bucket": DB},
                      data="cpu,host=a usage=2 2", timeout=10),
        requests.post(f"{node.http_url}/api/v3/configure/database",
                      json={"db": "other"}, timeout=10),
        requests.delete(f"{node.http_url}/api/v3/configure/table",
                        params={"db": DB, "table": "cpu"}, timeout=10),
        requests.post(f"{node.http_url}/api/v3/persist", timeout=10),
    ]
    for response in refused:
        assert response.status_code == 403, (response.request.url, response.text)
        assert "role = query" in response.text, response.text
    # nothing changed, here or on the writer
    assert query_json(node.http_url, DB, "SELECT count(*) AS n FROM cpu") == [{"n": 1}]
    assert query_json(writer.http_url, DB, "SELECT count(*) AS n FROM cpu") == [{"n": 1}]


def test_persisted_writes_reach_query_nodes_and_restarted_nodes_serve_at_once(
        spawn_quiver, tmp_path: Path, moto: MotoServer, bucket_url: str) -> None:
    writer, node = writer_and_node(spawn_quiver, tmp_path, moto, bucket_url)
    count = "SELECT count(*) AS n FROM cpu"
    assert query_json(node.http_url, DB, count) == [{"n": 1}]
    # answered from the result cache on the node, then a persist changes the answer
    assert query(node.http_url, DB, count).headers.get("x-quiver-cache") == "HIT"
    for n in range(2, 6):
        write_ok(writer.http_url, DB, f"cpu,host=a usage={n} {n}")
        # buffered on the writer only: the node answers from persisted files
        assert query_json(node.http_url, DB, count) == [{"n": n - 1}]
        persist(writer.http_url)
        wait_until(lambda: query_json(node.http_url, DB, count) == [{"n": n}], 10,
                   f"the node to see persist {n}")
    # a new table and a dropped one
    write_ok(writer.http_url, DB, "disk,host=a used=5i 1")
    persist(writer.http_url)
    wait_until(lambda: query(node.http_url, DB, "SELECT * FROM disk").status_code == 200, 10,
               "the node to see the new table")
    dropped = requests.delete(f"{writer.http_url}/api/v3/configure/table",
                              params={"db": DB, "table": "disk"}, timeout=10)
    assert dropped.status_code == 200, dropped.text
    wait_until(lambda: query(node.http_url, DB, "SELECT * FROM disk").status_code == 404, 10,
               "the node to see the drop")
    # its storage stats say how it follows the writer
    following = requests.get(f"{node.http_url}/api/v3/storage", timeout=10).json()
    assert following["data"] == bucket_url and following["persistence"] is None
    assert following["following"]["catalogs_applied"] >= 6, following
    assert following["following"]["error"] is None
    # restarted, the node serves the newest catalog from its first answer on
    node.stop()
    node = start_node(spawn_quiver, tmp_path, "query", bucket_url, moto.endpoint,
                      "--role", "query")
    assert query_json(node.http_url, DB, count) == [{"n": 5}]


def test_a_query_node_serves_the_writers_value_caches(
        spawn_quiver, tmp_path: Path, moto: MotoServer, bucket_url: str) -> None:
    writer = start_node(spawn_quiver, tmp_path, "writer", bucket_url, moto.endpoint)
    now = time.time_ns()
    write_ok(writer.http_url, DB, "\n".join(
        f"cpu,host={host} usage={i}.5 {now - (3 - i) * 1_000_000_000}"
        for i in range(3) for host in ("a", "b")))
    persist(writer.http_url)
    created = requests.post(f"{writer.http_url}/api/v3/configure/last_cache",
                            json={"db": DB, "table": "cpu", "name": "two",
                                  "key_columns": ["host"], "value_columns": ["usage"],
                                  "count": 2}, timeout=10)
    assert created.status_code == 201, created.text
    last = "SELECT host, usage FROM last_cache('cpu', 'two') ORDER BY host, usage"
    expected = query_json(writer.http_url, DB, last)
    assert expected == [{"host": h, "usage": u} for h in ("a", "b") for u in (1.5, 2.5)]
    # the cache is in the catalog: a node started now serves it like the writer
    node = start_node(spawn_quiver, tmp_path, "query", bucket_url, moto.endpoint,
                      "--role", "query")
    assert query_json(node.http_url, DB, last) == expected
    # configured on the node: refused, naming the role
    refused = requests.post(f"{node.http_url}/api/v3/configure/last_cache",
                            json={"db": DB, "table": "cpu", "name": "three"}, timeout=10)
    assert refused.status_code == 403 and "role = query" in refused.text, refused.text
    # dropped on the writer: gone on the node with the catalog it follows next
    dropped = requests.delete(f"{writer.http_url}/api/v3/configure/last_cache",
                              params={"db": DB, "table": "cpu", "name": "two"}, timeout=10)
    assert dropped.status_code == 200, dropped.text
    wait_until(lambda: query(node.http_url, DB, last).status_code == 400, 10,
               "the node to see the cache dropped")
    assert "no last cache named" in query(node.http_url, DB, last).text


def test_a_query_node_routes_to_the_writers_rollups(
        spawn_quiver, tmp_path: Path, moto: MotoServer, bucket_url: str) -> None:
    writer = start_node(spawn_quiver, tmp_path, "writer", bucket_url, moto.endpoint)
    load_dataset(writer.http_url)
    created = requests.post(
        f"{writer.http_url}/api/v3/configure/rollup",
        json={"db": DB, "name": "cpu_1d", "sql":
              "SELECT date_bin(INTERVAL '1 day', time) AS time, host, avg(usage) AS mean, "
              "max(usage) AS peak FROM cpu GROUP BY 1, 2"}, timeout=10)
    assert created.status_code == 200, created.text
    routed = ("SELECT date_bin(INTERVAL '1 day', time) AS day, host, max(usage) AS peak "
              "FROM cpu GROUP BY 1, 2 ORDER BY 1, 2")
    expected = query_json(writer.http_url, DB, routed)
    # the definition is in the catalog: a node started now routes to the rollup
    node = start_node(spawn_quiver, tmp_path, "query", bucket_url, moto.endpoint,
                      "--role", "query")
    plan = "\n".join(row["plan"] for row in query_json(node.http_url, DB, f"EXPLAIN {routed}"))
    assert "rollup cpu_1d: used for cpu" in plan, plan
    assert query_json(node.http_url, DB, routed) == expected

    # the node computes the rollup's rows from the shared files, as the writer does
    def caught_up() -> bool:
        listed = requests.get(f"{node.http_url}/api/v3/configure/rollup",
                              params={"db": DB}, timeout=10).json()
        return any(r["name"] == "cpu_1d" and r["state"] == "ready" and r["lag_seconds"] == 0
                   for r in listed)
    wait_until(caught_up, 30, "the node to compute the rollup")
    assert query_json(node.http_url, DB, routed) == expected
    # newer files on the writer make their buckets pending on the node: answers follow
    write_ok(writer.http_url, DB, f"cpu,host=h00,region=r0 usage=1000 {START_NS + 5}")
    persist(writer.http_url)
    wait_until(lambda: query_json(node.http_url, DB, routed)
               == query_json(writer.http_url, DB, routed), 10,
               "the node's routed answer to follow the persist")
    # dropped on the writer: gone on the node
    dropped = requests.delete(f"{writer.http_url}/api/v3/configure/rollup",
                              params={"db": DB, "name": "cpu_1d"}, timeout=10)
    assert dropped.status_code == 200, dropped.text
    wait_until(lambda: "rollup cpu_1d: used" not in "\n".join(
        row["plan"] for row in query_json(node.http_url, DB, f"EXPLAIN {routed}")), 10,
        "the node to see the rollup dropped")


def test_a_garbage_catalog_or_truncated_file_is_a_500_naming_it_and_the_node_stays_up(
        spawn_quiver, tmp_path: Path, moto: MotoServer, bucket_url: str) -> None:
    writer = start_node(spawn_quiver, tmp_path, "writer", bucket_url, moto.endpoint)
    load_dataset(writer.http_url)
    node = start_node(spawn_quiver, tmp_path, "query", bucket_url, moto.endpoint,
                      "--role", "query")
    s3, bucket = moto.client(), bucket_url[5:].split("/")[0]
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    newest = max(k for k in keys if k.startswith("cluster/catalog/"))
    version = int(newest.rsplit("/", 1)[1].split(".")[0])
    garbage = f"cluster/catalog/{version + 1:020d}.json"
    s3.put_object(Bucket=bucket, Key=garbage, Body=b'{"format": 1, "databases": ')
    sql = "SELECT count(*) AS n FROM cpu"

    def refused() -> bool:
        response = query(node.http_url, DB, sql)
        return response.status_code == 500 and f"catalog/{version + 1:020d}.json" in response.text
    wait_until(refused, 10, "queries on the node to name the garbage catalog")
    health = requests.get(f"{node.http_url}/health", timeout=5)
    assert health.status_code == 503 and health.json()["status"] == "fail", health.text
    # cached answers are not served either: the node cannot know they are current
    assert query(node.http_url, DB, sql).status_code == 500
    s3.delete_object(Bucket=bucket, Key=garbage)
    wait_until(lambda: query(node.http_url, DB, sql).status_code == 200, 10,
               "the node to answer once the garbage is gone")
    assert query_json(node.http_url, DB, sql) == [{"n": POINTS * len(HOSTS)}]

    # a data file cut short: a 500 naming it, on a node that has not read it yet
    data_key = sorted(k for k in keys if k.startswith("cluster/tables/fleet/")
                      and k.endswith(".parquet"))[0]
    body = s3.get_object(Bucket=bucket, Key=data_key)["Body"].read()
    s3.put_object(Bucket=bucket, Key=data_key, Body=body[: len(body) // 2])
    fresh = start_node(spawn_quiver, tmp_path, "query2", bucket_url, moto.endpoint,
                       "--role", "query")
    table = "cpu" if "/1/" in data_key else "mem"
    # every value: the catalog's statistics answer a bare count without reading the file
    response = query(fresh.http_url, DB, f"SELECT * FROM {table}")
    assert response.status_code == 500, response.text
    assert data_key.removeprefix("cluster/") in response.text, response.text
    assert requests.get(f"{fresh.http_url}/health", timeout=5).status_code == 200
    s3.put_object(Bucket=bucket, Key=data_key, Body=body)
    assert query(fresh.http_url, DB, f"SELECT * FROM {table}").status_code == 200


def test_the_store_down_for_30_seconds_loses_no_acknowledged_write(
        spawn_quiver, tmp_path: Path, moto: MotoServer, bucket_url: str,
        proxy: Proxy) -> None:
    writer = start_node(spawn_quiver, tmp_path, "writer", bucket_url, proxy.endpoint)
    write_ok(writer.http_url, DB, "cpu,host=a usage=0 0")
    persist(writer.http_url)
    node = start_node(spawn_quiver, tmp_path, "query", bucket_url, proxy.endpoint,
                      "--role", "query")
    count = "SELECT count(*) AS n FROM cpu"
    proxy.down = True
    outage_started = time.monotonic()
    acknowledged, stale_after = 0, None
    while time.monotonic() - outage_started < 30:
        acknowledged += 1
        write_ok(writer.http_url, DB, f"cpu,host=a usage={acknowledged} {acknowledged}")
        if stale_after is None and query(node.http_url, DB, count).status_code == 503:
            stale_after = time.monotonic() - outage_started
        time.sleep(1)
    # the node stops answering once the store has been silent for 10 s, though its catalog
    # check is still waiting on retries (30 s)
    assert stale_after is not None and 9 < stale_after < 20, stale_after
    # the writer answers its queries from the WAL-backed buffer meanwhile
    assert query_json(writer.http_url, DB, count) == [{"n": acknowledged + 1}]
    failed = requests.post(f"{writer.http_url}/api/v3/persist", timeout=120)
    assert failed.status_code == 503, failed.text
    assert "object store" in failed.text, failed.text
    health = requests.get(f"{writer.http_url}/health", timeout=5).json()
    assert health["status"] == "warn" and "persistence_error" in health, health
    metrics = requests.get(f"{writer.http_url}/metrics", timeout=5).text
    assert "quiver_persist_failing 1" in metrics
    # the query node cannot know it is current: it says so instead of answering
    stale = query(node.http_url, DB, count)
    assert stale.status_code == 503, stale.text
    assert "could be stale" in stale.text
    proxy.down = False
    persist(writer.http_url)
    assert requests.get(f"{writer.http_url}/health", timeout=5).json()["status"] == "pass"
    wait_until(lambda: query(node.http_url, DB, count).status_code == 200
               and query_json(node.http_url, DB, count) == [{"n": acknowledged + 1}], 15,
               "the node to serve every acknowledged write")


def post_until_killed(url: str) -> None:
    """POSTs to a writer about to be killed: no answer is an answer."""
    try:
        requests.post(url, timeout=60)
    except requests.RequestException:
        pass


def test_a_writer_killed_while_persisting_and_compacting_leaves_a_whole_catalog(
        spawn_quiver, tmp_path: Path, moto: MotoServer, bucket_url: str) -> None:
    rng = random.Random(7)
    written = 0
    node = None
    for round_no in range(5):
        writer = start_node(spawn_quiver, tmp_path, "writer", bucket_url, moto.endpoint)
        count = query_json(writer.http_url, DB, "SELECT count(*) AS n FROM cpu") \
            if written else [{"n": 0}]
        assert count == [{"n": written}], f"round {round_no}: the restart lost writes"
        for batch in range(6):
            lines = "\n".join(f"cpu,host=h{k % 5} usage={k} {START_NS + (written + k) * 10**9}"
                              for k in range(500))
            write_ok(writer.http_url, DB, lines)
            written += 500
            requests.post(f"{writer.http_url}/api/v3/persist", timeout=60)
        # persists and merges in flight when the writer dies
        threading.Thread(target=post_until_killed, args=(f"{writer.http_url}/api/v3/compact",),
                         daemon=True).start()
        write_ok(writer.http_url, DB, "\n".join(
            f"cpu,host=h{k % 5} usage={k} {START_NS + (written + k) * 10**9}"
            for k in range(500)))
        written += 500
        threading.Thread(target=post_until_killed, args=(f"{writer.http_url}/api/v3/persist",),
                         daemon=True).start()
        time.sleep(rng.uniform(0.0, 0.3))
        writer.proc.send_signal(signal.SIGKILL)
        writer.proc.wait()
        if node is None:
            node = start_node(spawn_quiver, tmp_path, "query", bucket_url, moto.endpoint,
                              "--role", "query")
        # the node always reads a whole catalog: its answer is some persisted prefix
        response = query(node.http_url, DB, "SELECT count(*) AS n FROM cpu")
        assert response.status_code in (200, 404), response.text
    writer = start_node(spawn_quiver, tmp_path, "writer", bucket_url, moto.endpoint)
    assert query_json(writer.http_url, DB, "SELECT count(*) AS n FROM cpu") == [{"n": written}]
    persist(writer.http_url)
    wait_until(lambda: query(node.http_url, DB, "SELECT count(*) AS n FROM cpu").status_code
               == 200 and query_json(node.http_url, DB, "SELECT count(*) AS n FROM cpu")
               == [{"n": written}], 15, "the node to see every write")


def test_a_shared_directory_works_as_the_object_store(
        spawn_quiver, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    url = f"file://{shared}"
    writer = start_node(spawn_quiver, tmp_path, "writer", url, "http://unused")
    load_dataset(writer.http_url)
    node = start_node(spawn_quiver, tmp_path, "query", url, "http://unused", "--role", "query")
    assert answers_http(node.http_url) == answers_http(writer.http_url)
    assert list(shared.glob("catalog/*.json"))
    assert list(shared.rglob("tables/fleet/*/*/*.parquet"))


@pytest.mark.parametrize("args, message", [
    (["--role", "query"], "set object_store_url"),
    (["--object-store-url", "ftp://x/y"], "must start with file:// or s3://"),
    (["--object-store-url", "file://relative/dir"], "absolute directory"),
    (["--object-store-url", "s3:///prefix"], "names no bucket"),
    (["--role", "reader"], "role"),
])
def test_bad_object_storage_settings_are_clear_startup_errors(
        spawn_quiver, tmp_path: Path, args: list[str], message: str) -> None:
    server = spawn_quiver("--data-dir", str(tmp_path / "d"), *args, cwd=tmp_path, wait=False)
    assert server.proc.wait(timeout=30) != 0
    assert message in server.log(), server.log()


def test_a_writer_with_local_data_refuses_an_object_store_that_would_hide_it(
        spawn_quiver, tmp_path: Path, moto: MotoServer, bucket_url: str) -> None:
    local = spawn_quiver("--data-dir", str(tmp_path / "writer"), cwd=tmp_path)
    write_ok(local.http_url, DB, "cpu,host=a usage=1 1")
    persist(local.http_url)
    local.stop()
    server = start_node(spawn_quiver, tmp_path, "writer", bucket_url, moto.endpoint,
                        wait=False)
    assert server.proc.wait(timeout=30) != 0
    assert "would not be served" in server.log(), server.log()
    # the refused start changed nothing: the local server starts again with its data
    local = spawn_quiver("--data-dir", str(tmp_path / "writer"), cwd=tmp_path)
    assert query_json(local.http_url, DB, "SELECT count(*) AS n FROM cpu") == [{"n": 1}]


def test_query_nodes_use_the_writers_tokens(
        spawn_quiver, tmp_path: Path, moto: MotoServer, bucket_url: str) -> None:
    writer = start_node(spawn_quiver, tmp_path, "writer", bucket_url, moto.endpoint)
    created = requests.post(f"{writer.http_url}/api/v3/configure/token",
                            json={"name": "dash", "permissions": [f"db:{DB}:read"]}, timeout=10)
    assert created.status_code == 201, created.text
    secret = created.json()["token"]
    writer.stop()
    # a node that asks every client for a token starts with the writer's tokens in force
    writer, node = writer_and_node(spawn_quiver, tmp_path, moto, bucket_url,
                                   "--auth", "required")

    def status(token: str | None) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return requests.get(f"{node.http_url}/api/v3/query_sql",
                            params={"db": DB, "q": "SELECT count(*) FROM cpu"},
                            headers=headers, timeout=10).status_code
    assert status(secret) == 200
    assert status(None) == 401 and status("not-a-token") == 401
    # tokens are changed on the writer only
    refused = requests.post(f"{node.http_url}/api/v3/configure/token",
                            json={"name": "x", "admin": True},
                            headers={"Authorization": f"Bearer {secret}"}, timeout=10)
    assert refused.status_code == 403, refused.text
    revoked = requests.delete(f"{writer.http_url}/api/v3/configure/token",
                              params={"name": "dash"}, timeout=10)
    assert revoked.status_code == 200, revoked.text
    wait_until(lambda: status(secret) == 401, 10, "the revocation to reach the node")
    admin = requests.post(f"{writer.http_url}/api/v3/configure/token",
                          json={"name": "root", "admin": True}, timeout=10).json()["token"]
    wait_until(lambda: status(admin) == 200, 10, "a new token to reach the node")
    refused = requests.post(f"{node.http_url}/api/v3/configure/token",
                            json={"name": "x", "admin": True},
                            headers={"Authorization": f"Bearer {admin}"}, timeout=10)
    assert refused.status_code == 403 and "role = query" in refused.text, refused.text
