"""InfluxQL: Quiver's ``/query`` gives InfluxDB 1.x's answers, checked against the real thing.

The same line protocol goes to Quiver (the session's server) and to InfluxDB 1.6 (Debian's
``influxdb``, started here: see ``influxdb_reference.py``); then a few hundred InfluxQL
statements, hand-written corners plus generated combinations of aggregates, groupings, fills
and conditions, go to both, and their JSON answers must be equal (floats within 1e-9
relative). The deliberate differences (docs/protocols.md, "InfluxQL") are asserted on their
own below: a failing statement keeps its own error (1.6 overwrites it with "not executed"), and
what Quiver does not support yet answers a clear per-statement error.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest
import requests

import influxdb_reference as reference

DB = "influxql_diff"
START_S = 1_600_000_000
HOSTS = ["h1", "h2", "h3", "h4"]
REGIONS = ["eu", "us"]


def dataset() -> list[str]:
    """Deterministic points over 2 hours: gaps, missing fields, four field types."""
    rng = random.Random(40)
    lines = [
        'cpu,host=a,region=eu usage=1.5,idle=90i,ok=true,note="x" 1600000000',
        'cpu,host=b,region=us usage=2.5,idle=80i,ok=false,note="y" 1600000010',
        "cpu,host=a,region=eu usage=3.5,idle=70i 1600000060",
        "cpu,host=b,region=us usage=4.5 1600000130",
        "mem,host=a used=100i 1600000000",
        "mem,host=a used=110i 1600000100",
    ]
    for i in range(600):
        t = START_S + 200 + i * 11 + rng.randrange(0, 7)
        host = HOSTS[i % len(HOSTS)]
        region = REGIONS[(i // 3) % len(REGIONS)]
        if rng.random() < 0.08:
            continue  # a gap
        fields = [f"load={rng.uniform(0, 100):.4f}"]
        if rng.random() < 0.85:
            fields.append(f"temp={rng.randrange(-20, 90)}i")
        if rng.random() < 0.3:
            fields.append(f'state="{rng.choice(["ok", "warn", "bad"])}"')
        if rng.random() < 0.5:
            fields.append(f"up={'true' if rng.random() < 0.7 else 'false'}")
        lines.append(f"sensor,host={host},region={region} {','.join(fields)} {t}")
    return lines


@pytest.fixture(scope="module")
def both(quiver_url: str, tmp_path_factory: pytest.TempPathFactory):
    """(quiver_url, influxdb_url) holding the same data."""
    base, proc = reference.start_influxdb(tmp_path_factory.mktemp("influxdb"))
    lines = dataset()
    try:
        reference.write(base, DB, lines, precision="s")
        resp = requests.post(f"{quiver_url}/write", params={"db": DB, "precision": "s"},
                             data="\n".join(lines), timeout=30)
        assert resp.status_code == 204, resp.text
        yield quiver_url, base
    finally:
        reference.stop(proc)


def ask(base: str, q: str, **params: Any) -> tuple[int, Any]:
    resp = requests.get(f"{base}/query", params={"db": DB, "q": q, **params}, timeout=60)
    try:
        return resp.status_code, resp.json()
    except ValueError:
        return resp.status_code, resp.text


def same(a: Any, b: Any) -> bool:
    """Equal JSON, numbers within 1e-9 (relative), ints and whole floats alike."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b and type(a) is type(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def comparable(body: Any) -> Any:
    """An answer with error texts reduced to their presence (their wording differs where
    Quiver explains more), everything else as is."""
    if not isinstance(body, dict) or "results" not in body:
        return body
    out = []
    for result in body["results"]:
        result = dict(result)
        if "error" in result:
            result["error"] = "<error>"
        out.append(result)
    return {"results": out}


RANGE = f"time >= {START_S}s AND time < {START_S + 7200}s"

HAND_WRITTEN = [
    "SELECT * FROM cpu",
    "SELECT usage FROM cpu WHERE host = 'a'",
    "SELECT usage, host FROM cpu",
    "SELECT idle FROM cpu",
    "SELECT idle, usage FROM cpu",
    "SELECT usage AS u, host AS h FROM cpu",
    "SELECT * FROM cpu GROUP BY host",
    "SELECT * FROM cpu GROUP BY *",
    "SELECT * FROM nosuch",
    "SELECT usage FROM cpu WHERE host = 'nosuch'",
    "SELECT * FROM cpu LIMIT 1",
    "SELECT * FROM cpu ORDER BY time DESC LIMIT 2",
    "SELECT usage FROM cpu GROUP BY host SLIMIT 1",
    "SELECT usage FROM cpu GROUP BY host SLIMIT 1 SOFFSET 1",
    "SELECT usage FROM cpu GROUP BY host LIMIT 1",
    "SELECT * FROM cpu, mem",
    "SELECT * FROM /c.*/",
    "SELECT usage * 2 + 1 FROM cpu",
    "SELECT idle / 3 FROM cpu",
    "SELECT usage + idle FROM cpu",
    "SELECT * FROM cpu WHERE note = 'x'",
    "SELECT * FROM cpu WHERE usage > 2 AND host =~ /a|b/",
    "SELECT * FROM cpu WHERE ok = true",
    "SELECT * FROM cpu WHERE host = 'a' OR usage > 4",
    "SELECT * FROM cpu WHERE host != 'a'",
    "SELECT * FROM cpu WHERE host !~ /a/",
    "SELECT * FROM cpu WHERE nosuch = ''",
    "SELECT * FROM cpu WHERE nosuch = 'x'",
    "SELECT usage::integer FROM cpu",
    "SELECT usage::float, idle::integer, idle::float, note::string FROM cpu",
    'SELECT "usage" FROM "influxql_diff"."autogen"."cpu"',
    "SELECT usage FROM influxql_diff..cpu",
    "SELECT /us/ FROM cpu",
    "SELECT * FROM cpu WHERE time > '2020-09-13T12:27:00Z'",
    "SELECT * FROM cpu WHERE time = 1600000010s",
    "SELECT * FROM cpu WHERE time >= 1600000010000000000 AND time <= 1600000060000000000",
    "SELECT mean(usage) FROM cpu",
    "SELECT mean(usage) AS m FROM cpu",
    "SELECT mean(usage) FROM cpu WHERE time >= 1600000005s",
    "SELECT max(usage), min(usage) FROM cpu WHERE time >= 1600000005s",
    "SELECT mean(usage), mean(idle) FROM cpu",
    "SELECT mean(usage) FROM cpu GROUP BY host",
    "SELECT mean(usage) FROM cpu GROUP BY region, host",
    "SELECT mean(usage) FROM cpu GROUP BY *",
    "SELECT count(*) FROM cpu",
    "SELECT mean(*) FROM cpu",
    "SELECT count(idle), sum(idle), mean(idle) FROM cpu",
    "SELECT max(usage) FROM cpu",
    "SELECT min(usage) FROM cpu",
    "SELECT first(usage), last(usage) FROM cpu",
    "SELECT first(usage) FROM cpu",
    "SELECT last(usage) FROM cpu GROUP BY host",
    "SELECT max(usage), host FROM cpu",
    "SELECT max(usage), host, region, idle FROM cpu",
    "SELECT max(usage) FROM cpu GROUP BY host",
    "SELECT percentile(usage, 50) FROM cpu",
    "SELECT median(usage) FROM cpu",
    "SELECT spread(usage), stddev(usage), sum(idle), count(note) FROM cpu",
    "SELECT count(distinct(idle)) FROM cpu",
    "SELECT mean(usage) FROM cpu WHERE time >= 1600000000s AND time < 1600000200s GROUP BY time(1m)",
    "SELECT mean(usage) FROM cpu WHERE time >= 1600000030s AND time < 1600000200s GROUP BY time(1m)",
    "SELECT mean(usage) FROM cpu WHERE time >= 1600000000s AND time < 1600000200s GROUP BY time(1m, 30s)",
    "SELECT mean(usage) FROM cpu WHERE time >= 1600000000s AND time < 1600000200s GROUP BY time(1m) ORDER BY time DESC",
    "SELECT mean(usage) FROM cpu WHERE time >= 1600000000s AND time < 1600000200s GROUP BY time(1m) LIMIT 2",
    "SELECT mean(usage) FROM cpu WHERE host = 'nosuch' AND time >= 1600000000s AND time < 1600000200s GROUP BY time(1m)",
    "SELECT count(usage) FROM cpu WHERE time >= 1600000200s AND time < 1600000400s GROUP BY time(1m)",
    "SELECT mean(usage) FROM cpu GROUP BY time(1m) fill(none)",
    "SELECT mean(usage) FROM cpu WHERE time >= 1600000000s AND time < 1600000200s GROUP BY time(1m), region fill(linear)",
    "SELECT derivative(usage, 1s) FROM cpu",
    "SELECT derivative(usage) FROM cpu GROUP BY host",
    "SELECT non_negative_derivative(usage, 1m) FROM cpu",
    "SELECT difference(usage) FROM cpu",
    "SELECT non_negative_difference(usage) FROM cpu GROUP BY host",
    "SELECT cumulative_sum(usage) FROM cpu",
    "SELECT moving_average(usage, 2) FROM cpu",
    "SELECT elapsed(usage) FROM cpu",
    "SELECT elapsed(usage, 1s) FROM cpu GROUP BY host",
    "SELECT derivative(mean(usage), 1s) FROM cpu WHERE time >= 1600000000s AND time < 1600000200s GROUP BY time(1m)",
    "SELECT non_negative_derivative(max(usage)) FROM cpu WHERE time >= 1600000000s AND time < 1600000200s GROUP BY time(1m), host",
    "SELECT cumulative_sum(sum(usage)) FROM cpu WHERE time >= 1600000000s AND time < 1600000200s GROUP BY time(1m)",
    "SELECT moving_average(mean(usage), 2) FROM cpu WHERE time >= 1600000000s AND time < 1600000200s GROUP BY time(1m) fill(0)",
    "SELECT derivative(usage, 1s), difference(usage) FROM cpu",
    "SHOW MEASUREMENTS",
    "SHOW MEASUREMENTS WITH MEASUREMENT =~ /c.*/",
    "SHOW MEASUREMENTS WITH MEASUREMENT = cpu",
    "SHOW MEASUREMENTS LIMIT 1",
    "SHOW MEASUREMENTS WHERE region = 'us'",
    "SHOW TAG KEYS",
    "SHOW TAG KEYS FROM cpu",
    "SHOW TAG KEYS FROM nosuch",
    "SHOW TAG KEYS WHERE host = 'a'",
    "SHOW TAG KEYS FROM sensor WHERE region = 'eu'",
    "SHOW TAG KEYS FROM cpu WHERE host = 'nosuch'",
    "SHOW TAG KEYS WHERE host =~ /h[12]|a/ LIMIT 1 OFFSET 1",
    'SHOW TAG VALUES WITH KEY = "host"',
    'SHOW TAG VALUES FROM cpu WITH KEY IN ("host","region")',
    "SHOW TAG VALUES FROM cpu WITH KEY = \"host\" WHERE region = 'us'",
    "SHOW TAG VALUES WITH KEY =~ /.*/",
    'SHOW TAG VALUES WITH KEY = "nosuch"',
    "SHOW FIELD KEYS",
    "SHOW FIELD KEYS FROM mem",
    "SHOW SERIES",
    "SHOW SERIES FROM cpu WHERE host = 'a'",
    "SHOW SERIES FROM nosuch",
    "SHOW RETENTION POLICIES",
    "SELECT * FROM cpu LIMIT 1; SELECT * FROM mem LIMIT 1",
    # mode(): 1.x's tie rule; distinct(): each bucket's values in the order first seen
    # (mode()'s ties differ by design, see docs/protocols.md: these have none)
    "SELECT mode(state), mode(up) FROM sensor",
    "SELECT mode(up) FROM sensor GROUP BY host",
    f"SELECT mode(state) FROM sensor WHERE {RANGE} AND host = 'h3' GROUP BY time(30m) "
    "fill(previous)",
    "SELECT distinct(temp) FROM sensor",
    "SELECT distinct(state) FROM sensor GROUP BY host",
    f"SELECT distinct(up) FROM sensor WHERE {RANGE} GROUP BY time(10m), region",
    f"SELECT distinct(temp) FROM sensor WHERE {RANGE} GROUP BY host LIMIT 3 OFFSET 1",
    f"SELECT distinct(temp) FROM sensor WHERE {RANGE} AND host = 'h2' GROUP BY time(20m) "
    "fill(0) SLIMIT 1",
    "SELECT distinct(idle) FROM cpu, sensor",
    "SELECT count(distinct(state)) FROM sensor GROUP BY host",
    "SELECT distinct(temp), mean(load) FROM sensor",
    "SELECT distinct(host) FROM sensor",
    # top() / bottom(): the points themselves, earlier first among equal values
    "SELECT top(load, 3) FROM sensor",
    "SELECT bottom(temp, 2), host, state FROM sensor",
    f"SELECT top(load, 2) FROM sensor WHERE {RANGE} GROUP BY time(30m)",
    f"SELECT bottom(load, 2) FROM sensor WHERE {RANGE} GROUP BY time(30m), host",
    "SELECT top(load, host, 2) FROM sensor",
    f"SELECT bottom(temp, region, 1), host FROM sensor WHERE {RANGE} GROUP BY time(1h)",
    f"SELECT top(temp, 4) FROM sensor WHERE {RANGE} GROUP BY host SLIMIT 2 SOFFSET 1",
    "SELECT top(load, 2) FROM sensor LIMIT 1",
    "SELECT top(load, 2), mean(load) FROM sensor",
    "SELECT top(load) FROM sensor",
    f"SELECT load FROM sensor WHERE {RANGE} AND host = 'h1' LIMIT 0",
    "SELECT top(load, 2) FROM sensor LIMIT 0",
    # integral(): trapezoids, cut at bucket ends as 1.x cuts them
    f"SELECT integral(load) FROM sensor WHERE {RANGE}",
    "SELECT integral(used) FROM mem",
    # subqueries: the outer statement over the inner one's rows, its time range handed down
    f"SELECT mean(m) FROM (SELECT max(load) AS m FROM sensor GROUP BY time(10m), host) "
    f"WHERE {RANGE} GROUP BY time(30m)",
    f"SELECT max(m) FROM (SELECT mean(load) AS m FROM sensor GROUP BY time(10m), host) "
    f"WHERE {RANGE} GROUP BY host",
    f"SELECT sum(c) FROM (SELECT count(temp) AS c FROM sensor WHERE {RANGE} GROUP BY region)",
    f"SELECT m FROM (SELECT max(load) AS m FROM sensor WHERE {RANGE} GROUP BY time(30m)) "
    "WHERE m > 90",
    f"SELECT top(m, 2) FROM (SELECT mean(load) AS m FROM sensor WHERE {RANGE} "
    "GROUP BY time(10m), host)",
    f"SELECT mean(max) FROM (SELECT max(load) FROM sensor WHERE {RANGE} GROUP BY time(10m))",
    f"SELECT derivative(mean(m), 1m) FROM (SELECT max(load) AS m FROM sensor GROUP BY "
    f"time(10m)) WHERE {RANGE} GROUP BY time(10m)",
    f"SELECT max(mean) FROM (SELECT mean(load) FROM (SELECT load FROM sensor WHERE host = 'h1') "
    f"WHERE {RANGE} GROUP BY time(20m))",
    f"SELECT integral(temp, 1m) FROM sensor WHERE {RANGE} AND host = 'h2' GROUP BY time(10m)",
    f"SELECT integral(load, 1h) FROM sensor WHERE {RANGE} AND host = 'h3' GROUP BY time(7m, 2m)",
    f"SELECT integral(load) FROM sensor WHERE {RANGE} GROUP BY time(30m)",
    f"SELECT integral(temp) FROM sensor WHERE {RANGE} AND region = 'eu' GROUP BY time(1h) "
    "fill(0)",
]


def generated() -> list[str]:
    """Aggregates × groupings × fills × conditions over `sensor`, sampled deterministically."""
    aggregates = ["count(load)", "sum(temp)", "mean(load)", "median(temp)", "min(load)",
                  "max(temp)", "first(load)", "last(temp)", "spread(load)", "stddev(load)",
                  "percentile(load, 90)", "count(state)", "max(load), min(temp)",
                  "mean(load) * 2", "count(*)", "last(up)"]
    groupings = ["", "GROUP BY host", "GROUP BY region, host", "GROUP BY time(10m)",
                 "GROUP BY time(10m), host", "GROUP BY time(7m, 2m), region"]
    fills = ["", "fill(none)", "fill(0)", "fill(previous)", "fill(linear)", "fill(null)"]
    conditions = ["", "host = 'h1'", "region =~ /e.*/", "load > 50", "host != 'h2' AND temp < 50",
                  "state = 'ok' OR up = true"]
    combos = []
    for agg, group, fill, cond in itertools.product(aggregates, groupings, fills, conditions):
        if fill and "time(" not in group:
            continue
        where = f"WHERE {RANGE}" + (f" AND ({cond})" if cond else "")
        combos.append(f"SELECT {agg} FROM sensor {where} {group} {fill}".strip())
    rng = random.Random(7)
    raw = [f"SELECT load, temp, state FROM sensor WHERE {RANGE} AND ({c})" for c in conditions if c]
    raw += [f"SELECT * FROM sensor WHERE {RANGE} GROUP BY host LIMIT 5 OFFSET 3",
            f"SELECT temp FROM sensor WHERE {RANGE} GROUP BY region SLIMIT 1 SOFFSET 1",
            f"SELECT * FROM sensor WHERE {RANGE} ORDER BY time DESC LIMIT 7"]
    transforms = []
    for transform, group, fill, cond in itertools.product(
            ["derivative(mean(load), 1m)", "non_negative_derivative(max(temp), 10s)",
             "difference(count(load))", "cumulative_sum(sum(temp))",
             "moving_average(mean(load), 3)", "non_negative_difference(last(temp))"],
            ["GROUP BY time(10m)", "GROUP BY time(7m), host"],
            ["", "fill(none)", "fill(0)", "fill(previous)"],
            ["", "host != 'h2'"]):
        where = f"WHERE {RANGE}" + (f" AND ({cond})" if cond else "")
        transforms.append(f"SELECT {transform} FROM sensor {where} {group} {fill}".strip())
    raw += [f"SELECT {t}(load{', 30s' if t.endswith('derivative') else ''}) FROM sensor "
            f"WHERE {RANGE} GROUP BY host"
            for t in ["derivative", "non_negative_derivative", "difference", "cumulative_sum",
                      "elapsed"]]
    return rng.sample(combos, 260) + rng.sample(transforms, 40) + raw


@pytest.mark.parametrize("q", HAND_WRITTEN + generated())
def test_answers_match_influxdb_1x(both, q: str) -> None:
    quiver, influxdb = both
    expected_status, expected = ask(influxdb, q)
    status, answer = ask(quiver, q)
    assert status == expected_status, (answer, expected)
    assert same(comparable(answer), comparable(expected)), (
        f"\nquiver:   {answer}\ninfluxdb: {expected}")


@pytest.mark.parametrize("params", [{"epoch": "ms"}, {"epoch": "s"}, {"epoch": "h"},
                                    {"epoch": "ns"}, {"pretty": "true"},
                                    {"chunked": "true", "chunk_size": "1"},
                                    {"chunked": "true", "chunk_size": "3"}])
def test_parameters_shape_the_answer_as_1x_does(both, params: dict) -> None:
    quiver, influxdb = both
    for q in ["SELECT usage FROM cpu", "SELECT usage FROM cpu GROUP BY host",
              "SELECT mean(usage) FROM cpu GROUP BY host; SHOW MEASUREMENTS"]:
        mine = requests.get(f"{quiver}/query", params={"db": DB, "q": q, **params}, timeout=30)
        theirs = requests.get(f"{influxdb}/query", params={"db": DB, "q": q, **params},
                              timeout=30)
        assert mine.status_code == theirs.status_code == 200
        if params.get("pretty"):
            assert mine.text == theirs.text.replace("\r\n", "\n"), (mine.text, theirs.text)
        elif params.get("chunked"):
            mine_docs = [requests.models.complexjson.loads(line)
                         for line in mine.text.splitlines() if line]
            their_docs = [requests.models.complexjson.loads(line)
                          for line in theirs.text.splitlines() if line]
            assert same(mine_docs, their_docs), (mine.text, theirs.text)
        else:
            assert same(mine.json(), theirs.json()), (mine.text, theirs.text)


def test_csv_answers_match_1x(both) -> None:
    quiver, influxdb = both
    for q in ["SELECT * FROM cpu", "SELECT usage FROM cpu GROUP BY host",
              "SELECT * FROM cpu LIMIT 1; SELECT * FROM mem LIMIT 1", "SELECT * FROM nosuch"]:
        for accept in ["application/csv", "text/csv"]:
            mine = requests.get(f"{quiver}/query", params={"db": DB, "q": q},
                                headers={"Accept": accept}, timeout=30)
            theirs = requests.get(f"{influxdb}/query", params={"db": DB, "q": q},
                                  headers={"Accept": accept}, timeout=30)
            assert mine.status_code == theirs.status_code == 200
            assert mine.headers["content-type"].startswith("text/csv")
            assert mine.text == theirs.text, (q, mine.text, theirs.text)


def test_request_errors_are_1x_shaped(both) -> None:
    quiver, influxdb = both
    for params in [{"q": "SELECT FROM cpu"}, {"q": ""}, {},
                   {"q": "SELECT * FROM cpu LIMIT 1; SELECT FROM cpu"}]:
        mine = requests.get(f"{quiver}/query", params={"db": DB, **params}, timeout=30)
        theirs = requests.get(f"{influxdb}/query", params={"db": DB, **params}, timeout=30)
        assert mine.status_code == theirs.status_code == 400
        assert mine.json() == theirs.json()
        assert mine.headers.get("x-influxdb-error") == theirs.headers.get("x-influxdb-error")
    # a form body, as 1.x clients POST it
    mine = requests.post(f"{quiver}/query", data={"db": DB, "q": "SELECT max(usage) FROM cpu"},
                         timeout=30)
    theirs = requests.post(f"{influxdb}/query", data={"db": DB, "q": "SELECT max(usage) FROM cpu"},
                           timeout=30)
    assert same(mine.json(), theirs.json())


def test_statement_errors_keep_their_own_message(both) -> None:
    """Deliberate difference: 1.6 overwrites a failed statement's error with "not executed"
    when statements follow; Quiver keeps it and marks only the later ones."""
    quiver, _ = both
    status, body = ask(quiver, "SELECT * FROM cpu LIMIT 1; SELECT mean(usage), usage FROM cpu; "
                               "SHOW MEASUREMENTS")
    assert status == 200
    first, second, third = body["results"]
    assert first["statement_id"] == 0 and "series" in first
    assert second == {"statement_id": 1,
                      "error": "mixing aggregate and non-aggregate queries is not supported"}
    assert third == {"statement_id": 2, "error": "not executed"}
    response = requests.get(f"{quiver}/query", params={"q": "SELECT * FROM cpu"}, timeout=30)
    assert response.status_code == 200
    body = response.json()
    assert body == {"results": [{"statement_id": 0, "error": "database name required"}]}
    body = requests.get(f"{quiver}/query", params={"db": "nosuchdb", "q": "SELECT * FROM cpu"},
                        timeout=30).json()
    assert body == {"results": [{"statement_id": 0, "error": "database not found: nosuchdb"}]}


@pytest.mark.parametrize("q", [
    "SELECT sample(usage, 2) FROM cpu",
    "SELECT integral(usage), mean(usage) FROM cpu",
    "SELECT difference(distinct(usage)) FROM cpu WHERE time >= 1600000000s AND "
    "time < 1600000200s GROUP BY time(1m)",
    "SELECT holt_winters(mean(usage), 2, 1) FROM cpu "
    "WHERE time >= 1600000000s AND time < 1600000200s GROUP BY time(1m)",
    "SELECT mean(usage) FROM (SELECT usage FROM cpu), mem",
    "SELECT usage FROM cpu tz('Europe/Paris')",
])
def test_what_is_not_supported_yet_says_so(both, q: str) -> None:
    quiver, _ = both
    status, body = ask(quiver, q)
    assert status == 200
    (result,) = body["results"]
    assert "not supported yet" in result["error"], result


def test_hostile_statements_are_refused_and_the_server_stays_up(both) -> None:
    quiver, _ = both
    year = f"time >= {START_S}s AND time < {START_S + 366 * 86400}s"
    status, body = ask(quiver, f"SELECT mean(usage) FROM cpu WHERE {year} GROUP BY time(1ns)")
    assert status == 200
    assert "max-select-buckets limit exceeded" in body["results"][0]["error"]
    # without fill the buckets are those with points: answered
    status, body = ask(quiver,
                       f"SELECT mean(usage) FROM cpu WHERE {year} GROUP BY time(1ns) fill(none)")
    assert status == 200 and len(body["results"][0]["series"][0]["values"]) == 4
    deep = "SELECT usage FROM cpu WHERE " + "(" * 5000 + "usage > 1" + ")" * 5000
    status, body = ask(quiver, deep)
    assert status == 400 and "error parsing query" in body["error"]
    huge = "SELECT usage FROM cpu WHERE host =~ /" + "(a|b){1000}" * 50 + "/"
    status, body = ask(quiver, huge)
    assert status == 200 and "regular expression" in body["results"][0]["error"]
    status, body = ask(quiver, "SELECT usage FROM cpu WHERE time > 'yesterday'")
    assert status == 200 and "invalid time" in body["results"][0]["error"]
    for garbage in ["\x00\x01", "SELECT * FROM", "SELECT " + "a," * 100_000 + "b FROM cpu",
                    "SHOW", "DROP DATABASE " + DB, "SELECT * INTO x FROM cpu"]:
        resp = requests.post(f"{quiver}/query", data={"db": DB, "q": garbage}, timeout=60)
        assert resp.status_code in (200, 400), resp.text[:500]
    # everything written is still there
    status, body = ask(quiver, "SELECT count(usage) FROM cpu")
    assert body["results"][0]["series"][0]["values"][0][1] == 4
