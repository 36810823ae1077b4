use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::datasource::MemTable;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use proptest::prelude::*;

use super::{register_functions, GapFillRule, QuiverQueryPlanner};

const S: i64 = 1_000_000_000;

/// One row of table `m`: host, time in seconds, usage, n.
type Row = (&'static str, i64, Option<f64>, Option<i64>);

fn table(rows: &[Row]) -> MemTable {
    let schema = Arc::new(Schema::new(vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
            false,
        ),
        Field::new("host", DataType::Utf8, true),
        Field::new("usage", DataType::Float64, true),
        Field::new("n", DataType::Int64, true),
    ]));
    // three-row batches in two partitions: the sort and merge before the fill are exercised
    let batches: Vec<RecordBatch> = rows
        .chunks(3)
        .map(|chunk| {
            let time = TimestampNanosecondArray::from_iter_values(chunk.iter().map(|r| r.1 * S))
                .with_timezone("UTC");
            let host: StringArray = chunk.iter().map(|r| Some(r.0)).collect();
            let usage: Float64Array = chunk.iter().map(|r| r.2).collect();
            let n: Int64Array = chunk.iter().map(|r| r.3).collect();
            RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(time), Arc::new(host), Arc::new(usage), Arc::new(n)],
            )
            .unwrap()
        })
        .collect();
    let (odd, even): (Vec<_>, Vec<_>) = batches
        .into_iter()
        .enumerate()
        .partition(|(i, _)| i % 2 == 1);
    let strip = |v: Vec<(usize, RecordBatch)>| v.into_iter().map(|(_, b)| b).collect();
    MemTable::try_new(schema, vec![strip(even), strip(odd)]).unwrap()
}

fn context_with(rows: &[Row], memory_limit: Option<usize>) -> SessionContext {
    let config = SessionConfig::new()
        .with_target_partitions(2)
        .with_batch_size(3);
    let mut runtime = RuntimeEnvBuilder::new();
    if let Some(limit) = memory_limit {
        runtime = runtime.with_memory_limit(limit, 1.0);
    }
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime.build_arc().unwrap())
        .with_default_features()
        .with_query_planner(Arc::new(QuiverQueryPlanner))
        .build();
    let ctx = SessionContext::new_with_state(state);
    register_functions(&ctx);
    ctx.add_analyzer_rule(Arc::new(GapFillRule));
    ctx.register_table("m", Arc::new(table(rows))).unwrap();
    ctx
}

fn context(rows: &[Row]) -> SessionContext {
    context_with(rows, None)
}

async fn answer(ctx: &SessionContext, sql: &str) -> Result<Vec<String>, String> {
    let frame = ctx.sql(sql).await.map_err(|e| e.to_string())?;
    let batches = frame.collect().await.map_err(|e| e.to_string())?;
    let text = arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    Ok(text.lines().map(str::to_string).collect())
}

async fn error(ctx: &SessionContext, sql: &str) -> String {
    match answer(ctx, sql).await {
        Ok(rows) => panic!("{sql} answered {rows:#?}"),
        Err(e) => e,
    }
}

/// The time range `[from, to)` in seconds as SQL.
fn range(from: i64, to: i64) -> String {
    format!("time >= {} AND time < {}", at(from), at(to))
}

/// The instant `seconds` after the epoch as an SQL string literal.
fn at(seconds: i64) -> String {
    let instant = chrono::DateTime::from_timestamp(seconds, 0).unwrap();
    format!(
        "'{}'",
        instant.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    )
}

const ROWS: &[Row] = &[
    ("a", 0, Some(1.0), Some(10)),
    ("a", 30, Some(4.0), Some(40)),
    ("b", 10, Some(5.0), None),
    ("a", 22, None, Some(7)),
    ("b", 70, Some(9.0), Some(1)),
];

#[tokio::test]
async fn fills_every_bucket_of_the_range_per_series_with_null() {
    let ctx = context(ROWS);
    let sql = format!(
        "SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, host, avg(usage) AS a, \
         count(*) AS c FROM m WHERE {} GROUP BY 1, host ORDER BY host, t",
        range(0, 40)
    );
    assert_eq!(
        answer(&ctx, &sql).await.unwrap(),
        [
            "+----------------------+------+-----+---+",
            "| t                    | host | a   | c |",
            "+----------------------+------+-----+---+",
            "| 1970-01-01T00:00:00Z | a    | 1.0 | 1 |",
            "| 1970-01-01T00:00:10Z | a    |     |   |",
            "| 1970-01-01T00:00:20Z | a    |     | 1 |",
            "| 1970-01-01T00:00:30Z | a    | 4.0 | 1 |",
            "| 1970-01-01T00:00:00Z | b    |     |   |",
            "| 1970-01-01T00:00:10Z | b    | 5.0 | 1 |",
            "| 1970-01-01T00:00:20Z | b    |     |   |",
            "| 1970-01-01T00:00:30Z | b    |     |   |",
            "+----------------------+------+-----+---+",
        ]
    );
}

#[tokio::test]
async fn locf_and_interpolate_fill_gaps_and_nulls_within_each_series() {
    let ctx = context(ROWS);
    let sql = format!(
        "SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, host, \
         avg(usage) AS a, locf(avg(usage)) AS l, interpolate(avg(usage)) AS i, \
         interpolate(max(n)) AS n \
         FROM m WHERE {} GROUP BY host, t ORDER BY host, t",
        range(-10, 60)
    );
    assert_eq!(
        answer(&ctx, &sql).await.unwrap(),
        [
            "+----------------------+------+-----+-----+-----+----+",
            "| t                    | host | a   | l   | i   | n  |",
            "+----------------------+------+-----+-----+-----+----+",
            "| 1969-12-31T23:59:50Z | a    |     |     |     |    |",
            "| 1970-01-01T00:00:00Z | a    | 1.0 | 1.0 | 1.0 | 10 |",
            "| 1970-01-01T00:00:10Z | a    |     | 1.0 | 2.0 | 8  |",
            "| 1970-01-01T00:00:20Z | a    |     | 1.0 | 3.0 | 7  |",
            "| 1970-01-01T00:00:30Z | a    | 4.0 | 4.0 | 4.0 | 40 |",
            "| 1970-01-01T00:00:40Z | a    |     | 4.0 |     |    |",
            "| 1970-01-01T00:00:50Z | a    |     | 4.0 |     |    |",
            "| 1969-12-31T23:59:50Z | b    |     |     |     |    |",
            "| 1970-01-01T00:00:00Z | b    |     |     |     |    |",
            "| 1970-01-01T00:00:10Z | b    | 5.0 | 5.0 | 5.0 |    |",
            "| 1970-01-01T00:00:20Z | b    |     | 5.0 |     |    |",
            "| 1970-01-01T00:00:30Z | b    |     | 5.0 |     |    |",
            "| 1970-01-01T00:00:40Z | b    |     | 5.0 |     |    |",
            "| 1970-01-01T00:00:50Z | b    |     | 5.0 |     |    |",
            "+----------------------+------+-----+-----+-----+----+",
        ]
    );
}

#[tokio::test]
async fn without_series_the_whole_range_is_one_series_even_when_empty() {
    let ctx = context(ROWS);
    let sql = format!(
        "SELECT date_bin_gapfill(INTERVAL '20 seconds', time, TIMESTAMP {}) AS t, \
         locf(sum(n)) AS s FROM m WHERE {} AND host = 'none' GROUP BY t",
        at(10),
        range(0, 40)
    );
    assert_eq!(
        answer(&ctx, &sql).await.unwrap(),
        [
            "+----------------------+---+",
            "| t                    | s |",
            "+----------------------+---+",
            "| 1969-12-31T23:59:50Z |   |",
            "| 1970-01-01T00:00:10Z |   |",
            "| 1970-01-01T00:00:30Z |   |",
            "+----------------------+---+",
        ]
    );
}

#[tokio::test]
async fn bounds_in_every_spelling_and_having_apply() {
    let ctx = context(ROWS);
    // HAVING sees the filled rows: the bucket at 20 s counts 0 and goes, the gaps stay
    let sql = format!(
        "SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, count(usage) AS c FROM m \
         WHERE time BETWEEN {} AND {} AND time > {} GROUP BY 1 HAVING count(usage) IS \
         DISTINCT FROM 0 ORDER BY t",
        at(10),
        at(50),
        at(0)
    );
    assert_eq!(
        answer(&ctx, &sql).await.unwrap(),
        [
            "+----------------------+---+",
            "| t                    | c |",
            "+----------------------+---+",
            "| 1970-01-01T00:00:10Z | 1 |",
            "| 1970-01-01T00:00:30Z | 1 |",
            "| 1970-01-01T00:00:40Z |   |",
            "| 1970-01-01T00:00:50Z |   |",
            "+----------------------+---+",
        ]
    );
}

#[tokio::test]
async fn misuse_is_refused_with_what_to_write_instead() {
    let ctx = context(ROWS);
    let cases = [
        (
            "SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, avg(usage) FROM m \
             WHERE time < now() GROUP BY 1"
                .to_string(),
            "needs a lower bound on time",
        ),
        (
            "SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, avg(usage) FROM m \
             WHERE time >= now() - INTERVAL '1 hour' GROUP BY 1"
                .to_string(),
            "needs an upper bound on time",
        ),
        (
            format!("SELECT locf(avg(usage)) FROM m WHERE {}", range(0, 40)),
            "locf() is allowed only around an aggregate",
        ),
        (
            format!(
                "SELECT date_bin_gapfill(INTERVAL '10 seconds', time) FROM m WHERE {}",
                range(0, 40)
            ),
            "date_bin_gapfill() is allowed only as a GROUP BY expression",
        ),
        (
            format!(
                "SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, \
                 interpolate(max(host)) FROM m WHERE {} GROUP BY 1",
                range(0, 40)
            ),
            "interpolate() needs a numeric aggregate",
        ),
        (
            format!(
                "SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, locf(host) FROM m \
                 WHERE {} GROUP BY 1, host",
                range(0, 40)
            ),
            "locf() takes an aggregate",
        ),
        (
            format!(
                "SELECT date_bin_gapfill(INTERVAL '1 nanosecond', time) AS t, avg(usage) FROM m \
                 WHERE {} GROUP BY 1",
                range(0, 3600)
            ),
            "would make 3600000000000 buckets of 1ns per series",
        ),
        (
            format!(
                "SELECT date_bin_gapfill(INTERVAL '1 month', time) AS t, avg(usage) FROM m \
                 WHERE {} GROUP BY 1",
                range(0, 3600)
            ),
            "buckets of months vary in length",
        ),
        (
            format!(
                "SELECT date_bin_gapfill(INTERVAL '10 seconds', time) + INTERVAL '1 second' AS \
                 t, avg(usage) FROM m WHERE {} GROUP BY date_bin_gapfill(INTERVAL '10 seconds', \
                 time) + INTERVAL '1 second'",
                range(0, 3600)
            ),
            "must be a GROUP BY expression by itself",
        ),
    ];
    for (sql, expected) in cases {
        let message = error(&ctx, &sql).await;
        assert!(message.contains(expected), "{sql}: {message}");
    }
}

#[tokio::test]
async fn an_answer_larger_than_the_query_memory_is_refused_before_it_is_made() {
    let hosts: Vec<&'static str> = (0..200)
        .map(|i| &*Box::leak(format!("h{i}").into_boxed_str()))
        .collect();
    let rows: Vec<Row> = hosts.iter().map(|h| (*h, 0, Some(1.0), None)).collect();
    let ctx = context_with(&rows, Some(32 << 20));
    let sql = format!(
        "SELECT date_bin_gapfill(INTERVAL '1 second', time) AS t, host, locf(avg(usage)) FROM \
         m WHERE {} GROUP BY 1, host",
        range(0, 86_400)
    );
    let message = error(&ctx, &sql).await;
    assert!(
        message.contains("would answer 17280000 rows (200 series x 86400 buckets"),
        "{message}"
    );
    // the same over a range that fits
    let sql = format!(
        "SELECT count(*) FROM (SELECT date_bin_gapfill(INTERVAL '1 second', time) AS t, host, \
         locf(avg(usage)) FROM m WHERE {} GROUP BY 1, host)",
        range(0, 60)
    );
    assert!(answer(&ctx, &sql)
        .await
        .unwrap()
        .contains(&"| 12000    |".to_string()));
}

#[tokio::test]
async fn explain_shows_the_fill() {
    let ctx = context(ROWS);
    let sql = format!(
        "EXPLAIN SELECT date_bin_gapfill(INTERVAL '10 seconds', time) AS t, host, \
         locf(avg(usage)) FROM m WHERE {} GROUP BY 1, host",
        range(0, 40)
    );
    let plan = answer(&ctx, &sql).await.unwrap().join("\n");
    assert!(plan.contains("GapFill: time="), "{plan}");
    assert!(plan.contains("fill=[locf(avg(m.usage))]"), "{plan}");
    assert!(
        plan.contains("GapFillExec: time=") && plan.contains("buckets=4 of 10s"),
        "{plan}"
    );
}

/// What gap filling should answer, computed from the rows by hand: per host and bucket
/// `[from, to)` of one second, `min(n)`, `locf(max(n))`, `interpolate(sum(n))`.
fn expected(rows: &[(usize, i64, Option<i64>)], from: i64, to: i64) -> Vec<String> {
    let mut groups: BTreeMap<usize, BTreeMap<i64, Vec<Option<i64>>>> = BTreeMap::new();
    for &(host, t, n) in rows.iter().filter(|r| r.1 >= from && r.1 < to) {
        groups
            .entry(host)
            .or_default()
            .entry(t)
            .or_default()
            .push(n);
    }
    let mut lines = Vec::new();
    for (host, buckets) in groups {
        let stat = |f: fn(&[i64]) -> i64| -> BTreeMap<i64, Option<i64>> {
            buckets
                .iter()
                .map(|(t, ns)| {
                    let values: Vec<i64> = ns.iter().flatten().copied().collect();
                    (*t, (!values.is_empty()).then(|| f(&values)))
                })
                .collect()
        };
        let (mins, maxs, sums) = (
            stat(|v| *v.iter().min().unwrap()),
            stat(|v| *v.iter().max().unwrap()),
            stat(|v| v.iter().sum()),
        );
        let sum_points: Vec<(i64, i64)> = sums
            .iter()
            .filter_map(|(t, s)| s.map(|s| (*t, s)))
            .collect();
        let mut last_max = None;
        for t in from..to {
            let min = mins.get(&t).copied().flatten();
            if let Some(Some(m)) = maxs.get(&t) {
                last_max = Some(*m);
            }
            let sum = match sums.get(&t).copied().flatten() {
                Some(s) => Some(s),
                None => {
                    let before = sum_points.iter().rev().find(|p| p.0 < t);
                    let after = sum_points.iter().find(|p| p.0 > t);
                    match (before, after) {
                        (Some(&(t0, v0)), Some(&(t1, v1))) => {
                            let (v0, v1) = (v0 as f64, v1 as f64);
                            let share = (t * S) as f64 - (t0 * S) as f64;
                            let share = share / ((t1 * S) as f64 - (t0 * S) as f64);
                            Some((v0 + (v1 - v0) * share) as i64)
                        }
                        _ => None,
                    }
                }
            };
            let show = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
            lines.push(format!(
                "{host} {t} {} {} {}",
                show(min),
                show(last_max),
                show(sum)
            ));
        }
    }
    lines
}

const HOSTS: [&str; 3] = ["h0", "h1", "h2"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The fill agrees with a by-hand computation on any rows, range and batch layout.
    #[test]
    fn gap_fill_matches_a_by_hand_fill(
        rows in proptest::collection::vec((0usize..3, 0i64..20, proptest::option::of(-5i64..5)), 0..30),
        from in -3i64..10,
        length in 0i64..15,
    ) {
        let to = from + length;
        let table: Vec<Row> = rows.iter().map(|&(h, t, n)| (HOSTS[h], t, None, n)).collect();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let sql = format!(
            "SELECT host, CAST(t AS BIGINT) / 1000000000 AS s, mn, mx, sm FROM (SELECT \
             date_bin_gapfill(INTERVAL '1 second', time) AS t, host, min(n) AS mn, \
             locf(max(n)) AS mx, interpolate(sum(n)) AS sm FROM m WHERE {} GROUP BY 1, host) \
             ORDER BY host, t",
            range(from, to)
        );
        let ctx = context(&table);
        let batches = runtime.block_on(async { ctx.sql(&sql).await?.collect().await }).unwrap();
        let mut got = Vec::new();
        for batch in &batches {
            let text = |c: usize, i: usize| {
                let column = batch.column(c);
                if column.is_null(i) {
                    "-".to_string()
                } else {
                    arrow::util::display::array_value_to_string(column, i).unwrap()
                }
            };
            for i in 0..batch.num_rows() {
                let host = text(0, i);
                let host = HOSTS.iter().position(|h| *h == host).unwrap();
                got.push(format!("{host} {} {} {} {}", text(1, i), text(2, i), text(3, i), text(4, i)));
            }
        }
        prop_assert_eq!(got, expected(&rows, from, to));
    }
}
