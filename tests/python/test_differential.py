"""Differential test: Quiver's SQL answers must match DuckDB's on the same data.

A deterministic metrics data set (``random.Random(42)``) is generated in
memory:

* ``cpu``: 120 hosts (tags ``host``, ``region``, ``dc``, ``rack``) x 36 points
  at 10 s spacing with nanosecond jitter; 8 float fields (``temp`` is missing
  on ~15 % of points, i.e. NULL), 4 integer fields (one can be negative), a
  string field with quotes, commas, backslashes and non-ASCII text, and a
  boolean field.
* ``disk``: two devices per host at the same timestamps; a float, an integer
  and two unsigned integer fields (``reads`` exceeds ``i64::MAX`` for NVMe
  devices).

The rows are written to Quiver with the official ``influxdb_client`` library
(``cpu`` as ``Point`` objects, ``disk`` as raw line-protocol strings because
``Point`` cannot express the ``u`` suffix), shuffled and split into several
batches, and loaded unchanged into an in-memory DuckDB table with the same
column names and types. Every query in ``QUERIES`` then runs unchanged on both
engines: DuckDB has no ``date_bin``, so a DuckDB macro maps DataFusion's
three-argument ``date_bin`` onto ``time_bucket``. Each query has a total
``ORDER BY`` (or returns a single row), so rows are compared positionally:
same column names, same row count, non-float values equal (timestamps as int
nanoseconds UTC, dictionary strings as ``str``), floats within 1e-9.

Quiver's results are fetched with ``format=arrow``; the queries flagged
``json_check`` are also fetched with ``format=json`` and compared against the
same expected rows.

``python test_differential.py`` runs only the generator and the DuckDB side
(no server needed) and prints a summary of each query's expected result.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Iterator

import duckdb
import pyarrow as pa
import pytest
import requests
from influxdb_client import InfluxDBClient, Point, WritePrecision
from influxdb_client.client.write_api import SYNCHRONOUS

from quiver_testlib import (
    assert_rows_match,
    create_token, unique_name,
    json_rows,
    normalize_table,
    query_arrow,
    query_json,
)

DB = "diff_metrics"
ORG = "quiver"
SEED = 42

N_HOSTS = 120
N_POINTS = 36  # per host: 6 minutes of data
INTERVAL_NS = 10 * 1_000_000_000
JITTER_NS = 2 * 1_000_000_000  # each point lands somewhere in the first 2 s of its slot
START_NS = 1_704_067_205 * 1_000_000_000  # 2024-01-01T00:00:05Z
N_BATCHES = 8

REGIONS = ["us-east", "us-west", "eu-west", "ap-south"]
DC_SUFFIXES = ["a", "b", "c"]
DEVICES = ["sda", "nvme0n1"]
STATES = [
    "ok",
    'degraded: disk "sda" slow',
    "maintenance, back at 10:00",
    r"path C:\temp\quiver",
    "état: dégradé ✓",
]
U64_HIGH = 2**63  # unsigned counters above i64::MAX

# Column names and Arrow types of each measurement as Quiver should expose
# them; the DuckDB tables are built from these schemas. Time is stored in
# DuckDB as TIMESTAMP_NS without time zone (the session time zone is UTC).
CPU_SCHEMA = pa.schema([
    ("time", pa.timestamp("ns")),
    ("host", pa.string()),
    ("region", pa.string()),
    ("dc", pa.string()),
    ("rack", pa.string()),
    ("usage_user", pa.float64()),
    ("usage_system", pa.float64()),
    ("usage_idle", pa.float64()),
    ("usage_iowait", pa.float64()),
    ("load1", pa.float64()),
    ("load5", pa.float64()),
    ("load15", pa.float64()),
    ("temp", pa.float64()),
    ("mem_used", pa.int64()),
    ("mem_total", pa.int64()),
    ("procs", pa.int64()),
    ("ctx_delta", pa.int64()),
    ("state", pa.string()),
    ("healthy", pa.bool_()),
])
CPU_TAGS = ("host", "region", "dc", "rack")

DISK_SCHEMA = pa.schema([
    ("time", pa.timestamp("ns")),
    ("host", pa.string()),
    ("device", pa.string()),
    ("used_percent", pa.float64()),
    ("free_bytes", pa.int64()),
    ("reads", pa.uint64()),
    ("writes", pa.uint64()),
])


# --------------------------------------------------------------------------
# Data set
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Dataset:
    """Generated rows per measurement; each row maps column name -> value,
    ``time`` is int nanoseconds since the epoch, absent keys are NULL."""

    cpu: list[dict[str, Any]]
    disk: list[dict[str, Any]]


def _f(value: float) -> float:
    """Round to 6 decimals: keeps ``str(value)`` out of exponent notation
    (values are 0 or >= 1e-3 in magnitude) while leaving many significant digits."""
    return round(value, 6)


def generate_dataset(seed: int = SEED) -> Dataset:
    """Generate the deterministic metrics data set."""
    rng = random.Random(seed)
    cpu: list[dict[str, Any]] = []
    disk: list[dict[str, Any]] = []
    dc_load_factor = {
        f"{region}-{suffix}": rng.uniform(0.5, 2.0)
        for region in REGIONS
        for suffix in DC_SUFFIXES
    }
    for host_index in range(N_HOSTS):
        host = f"host-{host_index:03d}"
        region = rng.choice(REGIONS)
        dc = f"{region}-{rng.choice(DC_SUFFIXES)}"
        rack = f"rack {rng.randint(1, 8)}"  # contains a space: escaped in LP tags
        base_user = rng.uniform(5.0, 60.0)
        base_system = rng.uniform(1.0, 20.0)
        base_load = rng.uniform(0.2, 4.0) * dc_load_factor[dc]
        mem_total = rng.choice([8, 16, 32, 64]) * 2**30
        disk_state = {
            device: {
                "reads": (U64_HIGH if device.startswith("nvme") else 0)
                + rng.randrange(10**9),
                "writes": rng.randrange(10**6),
                "capacity": rng.choice([256, 512, 1024]) * 2**30,
            }
            for device in DEVICES
        }
        for point_index in range(N_POINTS):
            time_ns = START_NS + point_index * INTERVAL_NS + rng.randrange(JITTER_NS)
            usage_user = _f(min(99.0, max(0.01, rng.gauss(base_user, 5.0))))
            usage_system = _f(min(40.0, max(0.01, rng.gauss(base_system, 2.0))))
            usage_iowait = _f(rng.uniform(0.01, 5.0))
            state = STATES[0] if rng.random() < 0.7 else rng.choice(STATES[1:])
            row: dict[str, Any] = {
                "time": time_ns,
                "host": host,
                "region": region,
                "dc": dc,
                "rack": rack,
                "usage_user": usage_user,
                "usage_system": usage_system,
                "usage_idle": _f(max(0.0, 100.0 - usage_user - usage_system - usage_iowait)),
                "usage_iowait": usage_iowait,
                "load1": _f(max(0.01, rng.gauss(base_load, 0.5))),
                "load5": _f(max(0.01, rng.gauss(base_load, 0.3))),
                "load15": _f(max(0.01, rng.gauss(base_load, 0.1))),
                "mem_used": int(mem_total * rng.uniform(0.2, 0.95)),
                "mem_total": mem_total,
                "procs": rng.randint(50, 400),
                "ctx_delta": rng.randint(-5000, 5000),
                "state": state,
                "healthy": state == "ok",
            }
            if rng.random() >= 0.15:
                row["temp"] = _f(rng.uniform(30.0, 90.0))
            cpu.append(row)
            for device in DEVICES:
                counters = disk_state[device]
                counters["reads"] += rng.randrange(10**6)
                counters["writes"] += rng.randrange(10**5)
                free = int(counters["capacity"] * rng.uniform(0.05, 0.9))
                disk.append({
                    "time": time_ns,
                    "host": host,
                    "device": device,
                    "used_percent": _f(100.0 * (1 - free / counters["capacity"])),
                    "free_bytes": free,
                    "reads": counters["reads"],
                    "writes": counters["writes"],
                })
    return Dataset(cpu=cpu, disk=disk)


def cpu_point(row: dict[str, Any]) -> Point:
    """Build an ``influxdb_client`` Point for a ``cpu`` row (NULL fields are omitted)."""
    point = Point("cpu")
    for tag in CPU_TAGS:
        point = point.tag(tag, row[tag])
    for name in CPU_SCHEMA.names:
        if name in CPU_TAGS or name == "time" or row.get(name) is None:
            continue
        point = point.field(name, row[name])
    return point.time(row["time"], WritePrecision.NS)


def disk_line(row: dict[str, Any]) -> str:
    """Line protocol for a ``disk`` row; unsigned fields use the ``u`` suffix."""
    return (
        f"disk,host={row['host']},device={row['device']} "
        f"used_percent={row['used_percent']!r},free_bytes={row['free_bytes']}i,"
        f"reads={row['reads']}u,writes={row['writes']}u {row['time']}"
    )


def write_batches(dataset: Dataset, seed: int = SEED) -> list[list[Point | str]]:
    """All records of both measurements, shuffled and split into N_BATCHES batches."""
    records: list[Point | str] = [cpu_point(row) for row in dataset.cpu]
    records += [disk_line(row) for row in dataset.disk]
    random.Random(seed).shuffle(records)
    size = -(-len(records) // N_BATCHES)
    return [records[i:i + size] for i in range(0, len(records), size)]


def load_duckdb(dataset: Dataset) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB holding the data set as tables ``cpu`` and ``disk``,
    plus a ``date_bin(stride, ts, origin)`` macro mirroring DataFusion's."""
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    # time_bucket has no TIMESTAMP_NS overload; casting to TIMESTAMP only drops
    # sub-microsecond digits, which cannot move a whole-minute bucket boundary.
    con.execute(
        "CREATE MACRO date_bin(stride, ts, origin) AS "
        "time_bucket(stride, CAST(ts AS TIMESTAMP), CAST(origin AS TIMESTAMP))"
    )
    for name, rows, schema in (
        ("cpu", dataset.cpu, CPU_SCHEMA),
        ("disk", dataset.disk, DISK_SCHEMA),
    ):
        source = pa.Table.from_pylist(rows, schema=schema)
        con.register(f"{name}_source", source)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_source")
        con.unregister(f"{name}_source")
    return con


def duckdb_arrow(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    """Run ``sql`` on DuckDB and return the result as an Arrow table."""
    return con.sql(sql).to_arrow_table()


# --------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Query:
    """A query run unchanged on Quiver and DuckDB."""

    name: str
    sql: str
    json_check: bool = False  # also compare Quiver's format=json output


BUCKET_1M = "date_bin(INTERVAL '1 minute', time, TIMESTAMP '1970-01-01T00:00:00Z')"

QUERIES = [
    Query("totals", """
        SELECT count(*) AS n, count(DISTINCT host) AS hosts, count(temp) AS n_temp,
               min(time) AS first_time, max(time) AS last_time,
               sum(procs) AS sum_procs, sum(ctx_delta) AS sum_ctx, avg(usage_idle) AS avg_idle
        FROM cpu
    """),
    Query("bucket_1m_by_region", f"""
        SELECT {BUCKET_1M} AS bucket, region,
               avg(usage_user) AS avg_user, min(usage_system) AS min_system,
               max(load1) AS max_load1, count(*) AS n, count(temp) AS n_temp,
               sum(mem_used) AS sum_mem_used
        FROM cpu
        GROUP BY 1, region
        ORDER BY bucket, region
    """),
    Query("bucket_1m_by_host_filtered", f"""
        SELECT {BUCKET_1M} AS bucket, host, dc,
               avg(usage_user) AS avg_user, max(usage_user) AS max_user,
               min(mem_used) AS min_mem, avg(mem_used) AS avg_mem, avg(temp) AS avg_temp,
               count(*) AS n
        FROM cpu
        WHERE region = 'us-west'
          AND time >= TIMESTAMP '2024-01-01T00:01:00Z'
          AND time < TIMESTAMP '2024-01-01T00:04:00Z'
        GROUP BY 1, host, dc
        ORDER BY host, bucket
    """),
    Query("raw_rows_tag_and_time_filter", """
        SELECT time, host, region, rack, usage_user, usage_idle, temp, mem_used,
               ctx_delta, state, healthy
        FROM cpu
        WHERE host IN ('host-007', 'host-042', 'host-099')
          AND time >= TIMESTAMP '2024-01-01T00:01:30Z'
          AND time <= TIMESTAMP '2024-01-01T00:04:30Z'
        ORDER BY host, time
    """, json_check=True),
    Query("lastpoint_row_number", """
        SELECT host, time, usage_idle, mem_used, state
        FROM (
            SELECT host, time, usage_idle, mem_used, state,
                   row_number() OVER (PARTITION BY host ORDER BY time DESC) AS rn
            FROM cpu
        ) AS ranked
        WHERE rn = 1
        ORDER BY host
    """),
    Query("lastpoint_max_time_join", """
        SELECT c.host AS host, c.region AS region, c.time AS time, c.load1 AS load1
        FROM cpu AS c
        JOIN (SELECT host, max(time) AS max_time FROM cpu GROUP BY host) AS latest
          ON c.host = latest.host AND c.time = latest.max_time
        ORDER BY host
    """),
    Query("topk_busiest_hosts", """
        SELECT host, region, avg(usage_user + usage_system) AS avg_busy, count(*) AS n
        FROM cpu
        GROUP BY host, region
        ORDER BY avg_busy DESC, host
        LIMIT 10
    """),
    Query("count_distinct_per_region", """
        SELECT region, count(DISTINCT host) AS hosts, count(DISTINCT dc) AS dcs,
               count(DISTINCT rack) AS racks, count(*) AS n
        FROM cpu
        GROUP BY region
        ORDER BY region
    """),
    Query("having_high_load_dcs", """
        SELECT dc, avg(load1) AS avg_load1, max(usage_iowait) AS max_iowait, count(*) AS n
        FROM cpu
        GROUP BY dc
        HAVING avg(load1) > 2.5
        ORDER BY dc
    """),
    Query("order_by_limit_offset", """
        SELECT time, host, usage_system
        FROM cpu
        WHERE region = 'eu-west'
        ORDER BY usage_system DESC, host, time
        LIMIT 25 OFFSET 5
    """),
    Query("like_tag_filter", """
        SELECT host, dc, count(*) AS n, min(time) AS first_seen, max(time) AS last_seen,
               avg(temp) AS avg_temp
        FROM cpu
        WHERE host LIKE 'host-0_%' AND dc LIKE '%-b'
        GROUP BY host, dc
        ORDER BY host
    """),
    Query("window_moving_avg_and_lag", """
        SELECT host, time, usage_user,
               avg(usage_user) OVER (PARTITION BY host ORDER BY time
                                     ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS moving_avg,
               usage_user - lag(usage_user) OVER (PARTITION BY host ORDER BY time) AS delta
        FROM cpu
        WHERE host IN ('host-003', 'host-057')
        ORDER BY host, time
    """),
    Query("null_field_filter", """
        SELECT region, count(*) AS missing_temp, avg(usage_user) AS avg_user
        FROM cpu
        WHERE temp IS NULL
        GROUP BY region
        ORDER BY region
    """),
    Query("string_and_bool_fields", """
        SELECT state, healthy, count(*) AS n, avg(load5) AS avg_load5
        FROM cpu
        GROUP BY state, healthy
        ORDER BY state, healthy
    """, json_check=True),
    Query("unsigned_fields_per_device", """
        SELECT device, count(*) AS n, min(reads) AS min_reads, max(reads) AS max_reads,
               sum(writes) AS sum_writes, avg(used_percent) AS avg_used,
               max(free_bytes) AS max_free
        FROM disk
        GROUP BY device
        ORDER BY device
    """, json_check=True),
    Query("join_cpu_disk_by_region", """
        SELECT c.region AS region, d.device AS device, count(*) AS n,
               avg(d.used_percent) AS avg_used, avg(c.usage_iowait) AS avg_iowait
        FROM cpu AS c
        JOIN disk AS d ON c.host = d.host AND c.time = d.time
        GROUP BY c.region, d.device
        ORDER BY region, device
    """),
]


# --------------------------------------------------------------------------
# Fixtures and tests
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dataset() -> Dataset:
    return generate_dataset()


@pytest.fixture(scope="module")
def duck(dataset: Dataset) -> Iterator[duckdb.DuckDBPyConnection]:
    con = load_duckdb(dataset)
    yield con
    con.close()


@pytest.fixture(scope="module")
def loaded_quiver_url(quiver_url: str, dataset: Dataset) -> str:
    """Write the data set to Quiver with influxdb_client (with a token allowed to write it, as
    InfluxDB clients always present one); return the base URL."""
    token = create_token(quiver_url, unique_name("differential-writer"), [f"db:{DB}:write"])
    with InfluxDBClient(url=quiver_url, token=token, org=ORG, timeout=120_000) as client:
        write_api = client.write_api(write_options=SYNCHRONOUS)
        for batch in write_batches(dataset):
            write_api.write(bucket=DB, org=ORG, record=batch,
                            write_precision=WritePrecision.NS)
    return quiver_url


def test_expected_results_are_meaningful(duck: duckdb.DuckDBPyConnection) -> None:
    """Guard the test itself: every query returns rows on the reference engine,
    and the filters (HAVING, LIMIT, ...) actually filter something."""
    for q in QUERIES:
        assert duck.sql(q.sql).fetchall(), f"{q.name}: DuckDB returned no rows"
    n_dcs = duck.sql("SELECT count(DISTINCT dc) FROM cpu").fetchall()[0][0]
    n_kept = len(duck.sql(_sql("having_high_load_dcs")).fetchall())
    assert 0 < n_kept < n_dcs, f"HAVING keeps {n_kept} of {n_dcs} dcs"


def test_column_types(loaded_quiver_url: str) -> None:
    """Quiver exposes the documented Arrow types for time, tags and each field type."""
    cpu = query_arrow(loaded_quiver_url, DB, """
        SELECT time, host, region, dc, usage_user, mem_used, state, healthy
        FROM cpu ORDER BY host, time LIMIT 1
    """).schema
    time_type = cpu.field("time").type
    assert (
        pa.types.is_timestamp(time_type)
        and time_type.unit == "ns"
        and time_type.tz in ("UTC", "+00:00")
    ), f"time should be Timestamp(ns, UTC), got {time_type}"
    for tag in ("host", "region", "dc"):
        dtype = cpu.field(tag).type
        assert pa.types.is_dictionary(dtype) and _is_string_type(dtype.value_type), (
            f"tag {tag} should be dictionary-encoded strings, got {dtype}"
        )
    assert cpu.field("usage_user").type == pa.float64()
    assert cpu.field("mem_used").type == pa.int64()
    assert _is_string_type(cpu.field("state").type)
    assert cpu.field("healthy").type == pa.bool_()
    disk = query_arrow(loaded_quiver_url, DB, "SELECT reads FROM disk ORDER BY reads LIMIT 1").schema
    assert disk.field("reads").type == pa.uint64()


@pytest.mark.parametrize("q", QUERIES, ids=lambda q: q.name)
def test_query_matches_duckdb(q: Query, loaded_quiver_url: str,
                              duck: duckdb.DuckDBPyConnection) -> None:
    expected_names, expected_rows = normalize_table(duckdb_arrow(duck, q.sql))
    assert expected_rows, f"{q.name}: reference result is empty"
    actual_names, actual_rows = normalize_table(query_arrow(loaded_quiver_url, DB, q.sql))
    assert_rows_match(actual_names, actual_rows, expected_names, expected_rows,
                      context=f"query {q.name}:\n{q.sql}")


@pytest.mark.parametrize("q", [q for q in QUERIES if q.json_check], ids=lambda q: q.name)
def test_json_format_matches_duckdb(q: Query, loaded_quiver_url: str,
                                    duck: duckdb.DuckDBPyConnection) -> None:
    expected = duckdb_arrow(duck, q.sql)
    expected_names, expected_rows = normalize_table(expected)
    ts_columns = [f.name for f in expected.schema if pa.types.is_timestamp(f.type)]
    records = query_json(loaded_quiver_url, DB, q.sql)
    actual_rows = json_rows(records, expected_names, ts_columns)
    assert_rows_match(expected_names, actual_rows, expected_names, expected_rows,
                      context=f"query {q.name} (format=json):\n{q.sql}")


@pytest.fixture(scope="module")
def persisted_quiver_url(loaded_quiver_url: str) -> str:
    """Persist the whole write buffer to Parquet (after the buffer-only tests ran)."""
    response = requests.post(f"{loaded_quiver_url}/api/v3/persist", timeout=120)
    assert response.status_code == 200, response.text
    summary = response.json()
    assert summary["files"] > 0 and summary["rows"] > 0, summary
    stats = requests.get(f"{loaded_quiver_url}/api/v3/storage", timeout=30).json()
    assert stats["persistence"]["buffered_bytes"] == 0, stats
    return loaded_quiver_url


@pytest.mark.parametrize("q", QUERIES, ids=lambda q: q.name)
def test_query_matches_duckdb_after_persist(q: Query, persisted_quiver_url: str,
                                            duck: duckdb.DuckDBPyConnection) -> None:
    """The same answers when the data is read from Parquet files instead of the buffer."""
    expected_names, expected_rows = normalize_table(duckdb_arrow(duck, q.sql))
    actual_names, actual_rows = normalize_table(query_arrow(persisted_quiver_url, DB, q.sql))
    assert_rows_match(actual_names, actual_rows, expected_names, expected_rows,
                      context=f"query {q.name} over Parquet:\n{q.sql}")


def _is_string_type(dtype: pa.DataType) -> bool:
    return (pa.types.is_string(dtype) or pa.types.is_large_string(dtype)
            or pa.types.is_string_view(dtype))


def _sql(name: str) -> str:
    return next(q.sql for q in QUERIES if q.name == name)


def main() -> None:
    """Run the DuckDB side only and summarise each query's expected result."""
    data = generate_dataset()
    batches = write_batches(data)
    print(f"cpu rows: {len(data.cpu)}, disk rows: {len(data.disk)}, "
          f"batches: {[len(b) for b in batches]}")
    print("sample line protocol:")
    print("  " + cpu_point(data.cpu[0]).to_line_protocol())
    print("  " + disk_line(data.disk[1]))
    con = load_duckdb(data)
    for q in QUERIES:
        names, rows = normalize_table(duckdb_arrow(con, q.sql))
        print(f"{q.name}: {len(rows)} rows; columns {names}")
        print(f"    first row: {rows[0] if rows else None}")


if __name__ == "__main__":
    main()
