//! [`QuiverPhysicalCodec`]: how Quiver's own execution nodes travel in a physical plan shipped
//! to Ballista, beside Ballista's nodes (shuffles, which its own codec encodes) and
//! DataFusion's (which `datafusion-proto` encodes without a codec).
//!
//! Every encoded node starts with one byte saying whose it is ([`BALLISTA_NODE`] or
//! [`QUIVER_NODE`]); a Quiver node is then a JSON [`QuiverNode`]: the deduplicating merge
//! ([`DeduplicateExec`]) and the gap fill ([`GapFillExec`]). The scheduler and every executor
//! use the same codec (they are the same binary), so a node decodes as it was encoded.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock};

use arrow::compute::SortOptions;
use arrow::datatypes::Schema;
use ballista_core::serde::BallistaPhysicalExtensionCodec;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::ScalarUDF;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use prost::Message;
use quiver_exec::dedup_exec::DeduplicateExec;
use quiver_exec::gap_fill::{FillMethod, GapFillExec, Grid};
use quiver_exec::value_limits::is_capped;
use serde::{Deserialize, Serialize};

/// The first byte of a node Ballista's own codec encoded.
const BALLISTA_NODE: u8 = 0;
/// The first byte of a node [`QuiverPhysicalCodec`] encoded as a [`QuiverNode`].
const QUIVER_NODE: u8 = 1;

/// The physical extension codec of Quiver's scheduler, executors and query-serving nodes.
#[derive(Debug, Default)]
pub struct QuiverPhysicalCodec {
    ballista: BallistaPhysicalExtensionCodec,
}

/// One of Quiver's nodes as it travels (its input travels as the node's input).
#[derive(Debug, Serialize, Deserialize)]
enum QuiverNode {
    /// A [`DeduplicateExec`].
    Deduplicate {
        key_columns: Vec<usize>,
        field_columns: Vec<usize>,
        input_order: Vec<SortKey>,
    },
    /// A [`GapFillExec`].
    GapFill {
        /// Its output schema, as `datafusion-proto` encodes a schema.
        schema: Vec<u8>,
        time_column: usize,
        series_columns: Vec<usize>,
        /// The first bucket, how many, and their width in nanoseconds.
        grid: (i64, u64, i64),
        fills: Vec<(usize, FillMethod)>,
    },
}

/// One key of an ordering over plain columns.
#[derive(Debug, Serialize, Deserialize)]
struct SortKey {
    column: usize,
    descending: bool,
    nulls_first: bool,
}

impl PhysicalExtensionCodec for QuiverPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match buf.split_first() {
            Some((&BALLISTA_NODE, node)) => {
                self.ballista.try_decode(node, inputs, ctx, proto_converter)
            }
            Some((&QUIVER_NODE, node)) => {
                let node: QuiverNode = serde_json::from_slice(node).map_err(|e| {
                    DataFusionError::Internal(format!("a Quiver plan node cannot be read: {e}"))
                })?;
                decode(node, inputs)
            }
            _ => Err(DataFusionError::Internal(
                "a plan node of unknown origin (not encoded by Quiver's codec)".into(),
            )),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if let Some(quiver) = encode(&node)? {
            buf.push(QUIVER_NODE);
            return serde_json::to_writer(buf, &quiver)
                .map_err(|e| DataFusionError::Internal(format!("encoding a plan node: {e}")));
        }
        buf.push(BALLISTA_NODE);
        let name = node.name().to_string();
        self.ballista
            .try_encode(node, buf, proto_converter)
            .map_err(|e| {
                DataFusionError::NotImplemented(format!(
                    "{name} cannot run on Ballista ({})",
                    e.message()
                ))
            })
    }

    fn try_encode_udf(&self, node: &ScalarUDF, _buf: &mut Vec<u8>) -> Result<()> {
        // executors resolve functions by name among DataFusion's own, which would drop the
        // output caps (max_value_bytes) this server puts on some of them
        let name = node.name();
        if is_capped(name) {
            return Err(DataFusionError::NotImplemented(format!(
                "{name}() has its output capped by max_value_bytes here, which Ballista's \
                 executors would not do"
            )));
        }
        match executor_functions().contains(name) {
            true => Ok(()),
            false => Err(DataFusionError::NotImplemented(format!(
                "the function {name} is Quiver's own and does not run on Ballista's executors"
            ))),
        }
    }

    fn try_decode_udf(&self, name: &str, _buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        Err(DataFusionError::NotImplemented(format!(
            "the function {name} is not available on Ballista's executors (run the query \
             with distributed = off)"
        )))
    }
}

/// The scalar functions an executor knows: DataFusion's defaults.
fn executor_functions() -> &'static HashSet<String> {
    static NAMES: LazyLock<HashSet<String>> = LazyLock::new(|| {
        let state = SessionStateBuilder::new().with_default_features().build();
        state.scalar_functions().keys().cloned().collect()
    });
    &NAMES
}

/// `node` as a [`QuiverNode`], if it is one of Quiver's.
fn encode(node: &Arc<dyn ExecutionPlan>) -> Result<Option<QuiverNode>> {
    if let Some(dedup) = node.downcast_ref::<DeduplicateExec>() {
        return Ok(Some(QuiverNode::Deduplicate {
            key_columns: dedup.key_columns().to_vec(),
            field_columns: dedup.field_columns().to_vec(),
            input_order: sort_keys(dedup.input_order())?,
        }));
    }
    if let Some(fill) = node.downcast_ref::<GapFillExec>() {
        let schema = datafusion_proto::protobuf::Schema::try_from(fill.schema().as_ref())
            .map_err(|e| DataFusionError::Internal(format!("encoding a schema: {e}")))?;
        return Ok(Some(QuiverNode::GapFill {
            schema: schema.encode_to_vec(),
            time_column: fill.time_column(),
            series_columns: fill.series_columns().to_vec(),
            grid: fill.grid().parts(),
            fills: fill.fills().to_vec(),
        }));
    }
    Ok(None)
}

/// The node `node` describes over `inputs`.
fn decode(node: QuiverNode, inputs: &[Arc<dyn ExecutionPlan>]) -> Result<Arc<dyn ExecutionPlan>> {
    let [input] = inputs else {
        return Err(DataFusionError::Internal(format!(
            "a Quiver plan node with {} inputs (one expected)",
            inputs.len()
        )));
    };
    let columns = input.schema().fields().len();
    match node {
        QuiverNode::Deduplicate {
            key_columns,
            field_columns,
            input_order,
        } => {
            within(key_columns.iter().chain(&field_columns), columns)?;
            let order = ordering(&input_order, &input.schema())?;
            Ok(Arc::new(DeduplicateExec::new(
                input.clone(),
                key_columns,
                field_columns,
                order,
            )))
        }
        QuiverNode::GapFill {
            schema,
            time_column,
            series_columns,
            grid,
            fills,
        } => {
            let schema = datafusion_proto::protobuf::Schema::decode(schema.as_slice())
                .map_err(|e| DataFusionError::Internal(format!("decoding a schema: {e}")))?;
            let schema = Schema::try_from(&schema)
                .map_err(|e| DataFusionError::Internal(format!("decoding a schema: {e}")))?;
            within(
                series_columns.iter().chain([&time_column]),
                columns.min(schema.fields().len()),
            )?;
            within(fills.iter().map(|(column, _)| column), columns)?;
            if schema.fields().len() != columns + fills.len() {
                return Err(DataFusionError::Internal(format!(
                    "a gap fill of {columns} columns and {} fills with {} output columns",
                    fills.len(),
                    schema.fields().len()
                )));
            }
            Ok(Arc::new(GapFillExec::try_new(
                input.clone(),
                Arc::new(schema),
                time_column,
                series_columns,
                Grid::from_parts(grid)?,
                fills,
            )?))
        }
    }
}

/// Fails unless every one of `indices` is below `columns`.
fn within<'a>(indices: impl IntoIterator<Item = &'a usize>, columns: usize) -> Result<()> {
    match indices.into_iter().find(|&&i| i >= columns) {
        Some(i) => Err(DataFusionError::Internal(format!(
            "column {i} of a plan node whose input has {columns}"
        ))),
        None => Ok(()),
    }
}

/// `ordering`'s keys, which must be plain columns.
fn sort_keys(ordering: &LexOrdering) -> Result<Vec<SortKey>> {
    ordering
        .iter()
        .map(|key| {
            let column = key.expr.downcast_ref::<Column>().ok_or_else(|| {
                DataFusionError::NotImplemented(format!(
                    "an ordering by {} cannot run on Ballista",
                    key.expr
                ))
            })?;
            Ok(SortKey {
                column: column.index(),
                descending: key.options.descending,
                nulls_first: key.options.nulls_first,
            })
        })
        .collect()
}

/// The ordering `keys` describe over columns of `schema`.
fn ordering(keys: &[SortKey], schema: &Schema) -> Result<LexOrdering> {
    let exprs = keys.iter().map(|key| {
        let field = schema.fields().get(key.column).ok_or_else(|| {
            DataFusionError::Internal(format!("sort column {} out of range", key.column))
        })?;
        Ok(PhysicalSortExpr::new(
            Arc::new(Column::new(field.name(), key.column)),
            SortOptions {
                descending: key.descending,
                nulls_first: key.nulls_first,
            },
        ))
    });
    LexOrdering::new(exprs.collect::<Result<Vec<_>>>()?)
        .ok_or_else(|| DataFusionError::Internal("an empty ordering".into()))
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::{DataType, Field, TimeUnit};
    use datafusion::execution::FunctionRegistry;
    use datafusion::physical_plan::displayable;
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::prelude::SessionContext;
    use datafusion_proto::physical_plan::AsExecutionPlan;
    use datafusion_proto::protobuf::PhysicalPlanNode;

    use super::*;

    fn input() -> Arc<dyn ExecutionPlan> {
        let schema = Schema::new(vec![
            Field::new("host", quiver_model::schema::tag_data_type(), true),
            Field::new(
                "time",
                DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
                false,
            ),
            Field::new("usage", DataType::Float64, true),
            Field::new("__quiver_source", DataType::UInt64, false),
        ]);
        Arc::new(EmptyExec::new(Arc::new(schema)))
    }

    /// `plan` after a trip through the wire format.
    fn round_trip(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        let codec = QuiverPhysicalCodec::default();
        let bytes = PhysicalPlanNode::try_from_physical_plan(plan, &codec)?.encode_to_vec();
        let ctx = SessionContext::new();
        PhysicalPlanNode::decode(bytes.as_slice())
            .map_err(|e| DataFusionError::Internal(e.to_string()))?
            .try_into_physical_plan(&ctx.task_ctx(), &codec)
    }

    #[test]
    fn the_deduplicating_merge_travels_whole() {
        let input = input();
        let order = ordering(
            &[0, 1, 3].map(|column| SortKey {
                column,
                descending: false,
                nulls_first: column == 0,
            }),
            &input.schema(),
        )
        .unwrap();
        let dedup: Arc<dyn ExecutionPlan> =
            Arc::new(DeduplicateExec::new(input, vec![0, 1], vec![2], order));
        let back = round_trip(dedup.clone()).unwrap();
        let back_dedup = back.downcast_ref::<DeduplicateExec>().unwrap();
        assert_eq!(back_dedup.key_columns(), [0, 1]);
        assert_eq!(back_dedup.field_columns(), [2]);
        assert_eq!(
            back_dedup.input_order().to_string(),
            dedup
                .downcast_ref::<DeduplicateExec>()
                .unwrap()
                .input_order()
                .to_string()
        );
        assert_eq!(
            displayable(back.as_ref()).indent(true).to_string(),
            displayable(dedup.as_ref()).indent(true).to_string()
        );
    }

    #[test]
    fn garbage_and_foreign_nodes_are_errors_not_panics() {
        let codec = QuiverPhysicalCodec::default();
        let ctx = SessionContext::new();
        let task = ctx.task_ctx();
        let converter = datafusion_proto::physical_plan::DefaultPhysicalProtoConverter {};
        let outside = br#"{"Deduplicate":{"key_columns":[9],"field_columns":[],"input_order":[]}}"#;
        let outside = [&[QUIVER_NODE][..], outside].concat();
        for bytes in [
            &b""[..],
            b"\x07xyz",
            b"\x01{not json",
            b"\x01\"Deduplicate\"",
            &outside,
        ] {
            assert!(codec
                .try_decode(bytes, &[input()], &task, &converter)
                .is_err());
        }
        // a Quiver node whose grid has no width
        let gap_fill = serde_json::to_vec(&QuiverNode::GapFill {
            schema: Vec::new(),
            time_column: 1,
            series_columns: vec![0],
            grid: (0, 3, 0),
            fills: Vec::new(),
        })
        .unwrap();
        let mut bytes = vec![QUIVER_NODE];
        bytes.extend(gap_fill);
        assert!(codec
            .try_decode(&bytes, &[input()], &task, &converter)
            .is_err());
    }

    #[test]
    fn only_functions_executors_know_travel() {
        let codec = QuiverPhysicalCodec::default();
        let ctx = SessionContext::new();
        let abs = ctx.udf("abs").unwrap();
        assert!(codec.try_encode_udf(&abs, &mut Vec::new()).is_ok());
        let ours = datafusion::logical_expr::create_udf(
            "quiver_only",
            vec![DataType::Float64],
            DataType::Float64,
            datafusion::logical_expr::Volatility::Immutable,
            Arc::new(|args: &[datafusion::logical_expr::ColumnarValue]| Ok(args[0].clone())),
        );
        let refused = codec.try_encode_udf(&ours, &mut Vec::new()).unwrap_err();
        assert!(refused.to_string().contains("Quiver's own"), "{refused}");
    }
}
