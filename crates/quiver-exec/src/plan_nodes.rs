//! What Quiver's own plan nodes (the operators and expressions its physical rules put into
//! DataFusion's plans) share: the rules' bottom-up rewrite, taking their one child, and, for
//! their tests, running a statement and telling whether a node was used. (Showing their
//! expressions to DataFusion's tree walks is DataFusion's `apply_expression_roots`.)

use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_plan::ExecutionPlan;

/// `plan` with every node of type `N` for which `rewrite` gives a replacement replaced,
/// bottom up (what each of Quiver's physical rules does).
pub fn rewrite_nodes<N: ExecutionPlan + 'static>(
    plan: Arc<dyn ExecutionPlan>,
    rewrite: impl Fn(&N, &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let replacement = match node.downcast_ref::<N>() {
            Some(typed) => rewrite(typed, &node)?,
            None => None,
        };
        Ok(match replacement {
            Some(new) => Transformed::yes(new),
            None => Transformed::no(node),
        })
    })
    .map(|rewritten| rewritten.data)
}

/// Refuses a partition other than 0 of `node`, an operator with one output partition.
pub fn only_partition(partition: usize, node: &str) -> Result<()> {
    if partition != 0 {
        return Err(DataFusionError::Internal(format!(
            "{node} has one partition, asked for {partition}"
        )));
    }
    Ok(())
}

/// The one element of `children` given to `node`'s `with_new_children`.
pub fn only_child<T>(children: Vec<T>, node: &str) -> Result<T> {
    let count = children.len();
    let [child]: [T; 1] = children.try_into().map_err(|_| {
        DataFusionError::Internal(format!("{node} has exactly one child, was given {count}"))
    })?;
    Ok(child)
}

/// `columns` (of `rows` rows, which may be none) as a batch of `schema`.
pub fn batch_of(
    schema: &SchemaRef,
    columns: Vec<arrow::array::ArrayRef>,
    rows: usize,
) -> Result<RecordBatch> {
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &options,
    )?)
}

#[cfg(test)]
pub mod testing {
    use std::sync::Arc;

    use datafusion::physical_plan::{collect, displayable, ExecutionPlan};
    use datafusion::prelude::SessionContext;

    /// The physical plan of `sql` in `ctx`.
    pub async fn physical_plan(ctx: &SessionContext, sql: &str) -> Arc<dyn ExecutionPlan> {
        ctx.sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap()
    }

    /// The answer to `sql` in `ctx` as lines of a table, in its order, and whether its plan
    /// has a node named `node`.
    pub async fn answer_and_use(
        ctx: &SessionContext,
        sql: &str,
        node: &str,
    ) -> (Vec<String>, bool) {
        let plan = physical_plan(ctx, sql).await;
        let used = displayable(plan.as_ref())
            .indent(false)
            .to_string()
            .contains(node);
        let batches = collect(plan, ctx.task_ctx()).await.unwrap();
        let text = arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        (text.lines().map(str::to_string).collect(), used)
    }
}
