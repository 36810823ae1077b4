//! The planner on in-memory tables: plans are run by a plain DataFusion session and their
//! answers checked (InfluxDB 1.x's own answers are compared end to end in
//! `tests/python/test_influxql.py`).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::datasource::{provider_as_source, MemTable};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::prelude::{SessionConfig, SessionContext};

use super::*;
use crate::parser::{parse, ParseLimits};

/// Two measurements: `cpu` (tags host, region; field usage) and `mem` (tag host; field used).
struct Tables(BTreeMap<String, Arc<dyn TableSource>>);

fn tag(name: &str) -> Field {
    Field::new(
        name,
        DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
        true,
    )
}

fn time() -> Field {
    Field::new(
        "time",
        DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
        false,
    )
}

fn table(fields: Vec<Field>, columns: Vec<ArrayRef>) -> Arc<dyn TableSource> {
    let schema = Arc::new(Schema::new(fields));
    let columns = columns
        .into_iter()
        .zip(schema.fields())
        .map(|(c, f)| arrow::compute::cast(&c, f.data_type()).unwrap())
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    provider_as_source(Arc::new(
        MemTable::try_new(schema, vec![vec![batch]]).unwrap(),
    ))
}

fn seconds(s: &[i64]) -> ArrayRef {
    Arc::new(Int64Array::from(
        s.iter().map(|s| s * 1_000_000_000).collect::<Vec<_>>(),
    ))
}

fn tables() -> Tables {
    let cpu = table(
        vec![
            time(),
            tag("host"),
            tag("region"),
            Field::new("usage", DataType::Float64, true),
        ],
        vec![
            seconds(&[0, 10, 60, 130]),
            Arc::new(StringArray::from(vec!["a", "b", "a", "b"])),
            Arc::new(StringArray::from(vec!["eu", "us", "eu", "us"])),
            Arc::new(Float64Array::from(vec![1.5, 2.5, 3.5, 4.5])),
        ],
    );
    let mem = table(
        vec![
            time(),
            tag("host"),
            Field::new("used", DataType::Int64, true),
        ],
        vec![
            seconds(&[0, 100]),
            Arc::new(StringArray::from(vec!["a", "a"])),
            Arc::new(Int64Array::from(vec![100, 110])),
        ],
    );
    Tables(BTreeMap::from([("cpu".into(), cpu), ("mem".into(), mem)]))
}

impl SchemaSource for Tables {
    fn measurements(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
    fn table(&self, name: &str) -> Option<Arc<dyn TableSource>> {
        self.0.get(name).cloned()
    }
    fn databases(&self) -> Vec<String> {
        vec!["db".into()]
    }
    fn retention_ns(&self) -> Option<i64> {
        Some(7 * 24 * 3600 * 1_000_000_000)
    }
}

fn statement(text: &str) -> Statement {
    parse(text, ParseLimits::default()).unwrap().remove(0)
}

fn plan_of(text: &str) -> Result<LogicalPlan, PlanError> {
    let tables = tables();
    let ctx = PlanContext {
        schemas: &tables,
        now_ns: 200 * 1_000_000_000,
        max_buckets: 1_000,
    };
    plan(&statement(text), &ctx)
}

/// The answer's rows as text, one line per row (columns joined by `|`).
fn rows(text: &str) -> Vec<String> {
    let plan = plan_of(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    let runtime = tokio_runtime();
    runtime.block_on(async {
        let frame = context().execute_logical_plan(plan).await.unwrap();
        let batches = frame.collect().await.unwrap();
        let mut out = Vec::new();
        for batch in &batches {
            for row in 0..batch.num_rows() {
                let cells: Vec<String> = batch
                    .columns()
                    .iter()
                    .map(|c| arrow::util::display::array_value_to_string(c, row).unwrap())
                    .collect();
                out.push(cells.join("|"));
            }
        }
        out
    })
}

/// The session the engine runs InfluxQL in: DataFusion's, with Quiver's operators (gap
/// filling among them) and SQL's gap-filling functions.
fn context() -> SessionContext {
    let state =
        quiver_exec::session::state_builder(SessionConfig::new(), Arc::new(RuntimeEnv::default()))
            .build();
    let ctx = SessionContext::new_with_state(state);
    quiver_exec::gap_fill::register_functions(&ctx);
    ctx.add_analyzer_rule(Arc::new(quiver_exec::gap_fill::GapFillRule));
    ctx
}

/// The gap-fill node of `plan`, if it has one.
fn gap_fill_node(plan: &LogicalPlan) -> Option<quiver_exec::gap_fill::GapFill> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut found = None;
    plan.apply(|node| {
        if let LogicalPlan::Extension(extension) = node {
            if let Some(gap_fill) = extension
                .node
                .as_any()
                .downcast_ref::<quiver_exec::gap_fill::GapFill>()
            {
                found = Some(gap_fill.clone());
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    found
}

fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

#[test]
fn raw_points_are_series_then_time_ordered() {
    assert_eq!(
        rows("SELECT usage FROM cpu GROUP BY host"),
        [
            "cpu|1970-01-01T00:00:00Z|a|1.5",
            "cpu|1970-01-01T00:01:00Z|a|3.5",
            "cpu|1970-01-01T00:00:10Z|b|2.5",
            "cpu|1970-01-01T00:02:10Z|b|4.5",
        ]
    );
    assert_eq!(
        rows("SELECT usage FROM cpu GROUP BY host LIMIT 1 SLIMIT 1 SOFFSET 1"),
        ["cpu|1970-01-01T00:00:10Z|b|2.5"]
    );
}

#[test]
fn buckets_are_filled_as_influxdb_fills_them() {
    let range = "WHERE time >= 0s AND time < 180s GROUP BY time(1m)";
    assert_eq!(
        rows(&format!("SELECT count(usage) FROM cpu {range}")),
        [
            "cpu|1970-01-01T00:00:00Z|2",
            "cpu|1970-01-01T00:01:00Z|1",
            "cpu|1970-01-01T00:02:00Z|1",
        ]
    );
    assert_eq!(
        rows("SELECT max(usage) FROM cpu WHERE host = 'a' AND time >= 0s AND time < 180s GROUP BY time(1m) fill(previous)"),
        [
            "cpu|1970-01-01T00:00:00Z|1.5",
            "cpu|1970-01-01T00:01:00Z|3.5",
            "cpu|1970-01-01T00:02:00Z|3.5",
        ]
    );
    // count fills 0 by default, nothing with fill(none)
    assert_eq!(
        rows("SELECT count(usage) FROM cpu WHERE host = 'b' AND time >= 0s AND time < 180s GROUP BY time(1m)"),
        [
            "cpu|1970-01-01T00:00:00Z|1",
            "cpu|1970-01-01T00:01:00Z|0",
            "cpu|1970-01-01T00:02:00Z|1",
        ]
    );
    assert_eq!(
        rows("SELECT count(usage) FROM cpu WHERE host = 'b' AND time >= 0s AND time < 180s GROUP BY time(1m) fill(none)").len(),
        2
    );
}

#[test]
fn fill_plans_onto_the_gap_fill_node_of_sql_date_bin_gapfill() {
    let influxql = plan_of(
        "SELECT max(usage) FROM cpu WHERE time >= 0s AND time < 180s GROUP BY time(1m), host \
         fill(previous)",
    )
    .unwrap();
    let influxql = gap_fill_node(&influxql).expect("InfluxQL's fill() plans a GapFill node");
    let runtime = tokio_runtime();
    let sql = runtime.block_on(async {
        let ctx = context();
        let Tables(tables) = tables();
        let cpu = datafusion::datasource::source_as_provider(&tables["cpu"]).unwrap();
        ctx.register_table("cpu", cpu).unwrap();
        let frame = ctx
            .sql(
                "SELECT date_bin_gapfill(INTERVAL '1 minute', time) AS t, host, locf(max(usage)) \
                 FROM cpu WHERE time >= to_timestamp(0) AND time < to_timestamp(180) GROUP BY 1, 2",
            )
            .await
            .unwrap();
        frame.into_optimized_plan().unwrap()
    });
    let sql = gap_fill_node(&sql).expect("SQL's date_bin_gapfill() plans a GapFill node");
    use datafusion::logical_expr::UserDefinedLogicalNodeCore;
    assert_eq!(influxql.name(), sql.name());
    let describe = |node: &quiver_exec::gap_fill::GapFill| {
        struct Explain<'a>(&'a quiver_exec::gap_fill::GapFill);
        impl std::fmt::Display for Explain<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                self.0.fmt_for_explain(f)
            }
        }
        Explain(node).to_string()
    };
    // the same bucket and the same fill: locf of the aggregate
    for node in [&influxql, &sql] {
        let text = describe(node);
        assert!(text.contains("stride=60000000000ns, origin=0"), "{text}");
        assert!(text.contains("fill=[locf("), "{text}");
    }
}

#[test]
fn fill_without_a_start_fills_the_rows_there_are_and_adds_no_bucket() {
    // host a has points in buckets 0 and 1 only: nothing is added after them
    assert_eq!(
        rows("SELECT max(usage) FROM cpu WHERE host = 'a' AND time < 180s GROUP BY time(1m) fill(previous)"),
        [
            "cpu|1970-01-01T00:00:00Z|1.5",
            "cpu|1970-01-01T00:01:00Z|3.5",
        ]
    );
    let plan =
        plan_of("SELECT max(usage) FROM cpu WHERE time < 180s GROUP BY time(1m) fill(linear)")
            .unwrap();
    assert!(gap_fill_node(&plan).is_some());
}

#[test]
fn a_selector_alone_answers_with_its_point() {
    assert_eq!(
        rows("SELECT max(usage), host FROM cpu"),
        ["cpu|1970-01-01T00:02:10Z|4.5|b"]
    );
    assert_eq!(
        rows("SELECT percentile(usage, 50) FROM cpu"),
        ["cpu|1970-01-01T00:00:10Z|2.5"]
    );
    // with another call the time is the range's start
    assert_eq!(
        rows("SELECT max(usage), min(usage) FROM cpu WHERE time >= 5s"),
        ["cpu|1970-01-01T00:00:05Z|4.5|2.5"]
    );
}

#[test]
fn several_measurements_share_one_column_list() {
    assert_eq!(
        rows("SELECT * FROM /.*/ WHERE time > 90s"),
        [
            "cpu|1970-01-01T00:02:10Z|b|us|4.5|",
            "mem|1970-01-01T00:01:40Z|a|||110",
        ]
    );
}

#[test]
fn show_statements_list_the_catalog_and_the_data() {
    assert_eq!(
        rows("SHOW MEASUREMENTS"),
        ["measurements|cpu", "measurements|mem"]
    );
    assert_eq!(rows("SHOW TAG KEYS FROM cpu"), ["cpu|host", "cpu|region"]);
    assert_eq!(
        rows("SHOW TAG VALUES FROM cpu WITH KEY = \"host\" WHERE region = 'us'"),
        ["cpu|host|b"]
    );
    assert_eq!(rows("SHOW FIELD KEYS FROM mem"), ["mem|used|integer"]);
    assert_eq!(
        rows("SHOW SERIES"),
        [
            "|cpu,host=a,region=eu",
            "|cpu,host=b,region=us",
            "|mem,host=a"
        ]
    );
    assert_eq!(
        rows("SHOW RETENTION POLICIES"),
        ["|autogen|168h0m0s|168h0m0s|1|true"]
    );
}

#[test]
fn hostile_statements_are_refused_before_anything_runs() {
    let error =
        plan_of("SELECT mean(usage) FROM cpu WHERE time >= 0s AND time < 365d GROUP BY time(1ns)")
            .unwrap_err();
    assert!(
        error.0.contains("max-select-buckets limit exceeded"),
        "{error}"
    );
    let regex = format!(
        "SELECT usage FROM cpu WHERE host =~ /{}/",
        "(a|b){1000}".repeat(50)
    );
    assert!(plan_of(&regex)
        .unwrap_err()
        .0
        .contains("regular expression"));
    let wide = format!("SELECT {}usage FROM cpu", "usage,".repeat(3000));
    assert!(plan_of(&wide).unwrap_err().0.contains("at most 2048"));
    assert!(plan_of("SELECT usage FROM cpu WHERE time > 1s OR host = 'a'").is_err());
    assert!(plan_of("SELECT mean(usage), usage FROM cpu").is_err());
    assert!(plan_of("SELECT sample(usage, 2) FROM cpu")
        .unwrap_err()
        .0
        .contains("not supported yet"));
    assert!(plan_of("SELECT derivative(mean(usage)) FROM cpu")
        .unwrap_err()
        .0
        .contains("requires a GROUP BY interval"));
}

#[test]
fn transformations_run_along_each_series() {
    assert_eq!(
        rows("SELECT derivative(usage, 10s) FROM cpu GROUP BY host"),
        [
            "cpu|1970-01-01T00:01:00Z|a|0.3333333333333333",
            "cpu|1970-01-01T00:02:10Z|b|0.16666666666666666"
        ]
    );
    assert_eq!(
        rows("SELECT cumulative_sum(usage) FROM cpu"),
        [
            "cpu|1970-01-01T00:00:00Z|1.5",
            "cpu|1970-01-01T00:00:10Z|4.0",
            "cpu|1970-01-01T00:01:00Z|7.5",
            "cpu|1970-01-01T00:02:10Z|12.0",
        ]
    );
    // over buckets, the range's first one is computed from the one before it
    assert_eq!(
        rows("SELECT difference(count(usage)) FROM cpu WHERE time >= 0s AND time < 180s GROUP BY time(1m)"),
        [
            "cpu|1970-01-01T00:00:00Z|2",
            "cpu|1970-01-01T00:01:00Z|-1",
            "cpu|1970-01-01T00:02:00Z|0",
        ]
    );
}

#[test]
fn what_a_statement_reads_and_whether_it_depends_on_the_clock() {
    let all = vec!["cpu".to_string(), "mem".to_string(), "disk".to_string()];
    assert_eq!(
        measurements_read(&statement("SELECT * FROM /^(c|m)/, nosuch"), &all).unwrap(),
        ["cpu", "mem"]
    );
    assert!(uses_clock(&statement(
        "SELECT usage FROM cpu WHERE time > now() - 1h"
    )));
    assert!(uses_clock(&statement(
        "SELECT mean(usage) FROM cpu WHERE time > 0s GROUP BY time(1m)"
    )));
    assert!(!uses_clock(&statement(
        "SELECT mean(usage) FROM cpu WHERE time > 0s AND time < 1h GROUP BY time(1m)"
    )));
    assert_eq!(
        database_of(&statement("SELECT usage FROM other..cpu"))
            .unwrap()
            .as_deref(),
        Some("other")
    );
    assert!(database_of(&statement("SELECT usage FROM other.nosuch.cpu")).is_err());
    assert!(database_of(&statement("SELECT usage FROM a..cpu, b..cpu")).is_err());
}
