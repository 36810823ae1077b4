//! A panic inside a query (planning it or producing its rows) becomes that query's error
//! instead of unwinding into the protocol handler that polls it, where it would drop the
//! client's connection without an answer. DataFusion re-raises the panics of its worker
//! tasks in the task that polls the result stream, so guarding the stream's polls catches
//! them too. The error is [`DataFusionError::Internal`]: a panic is always the server's fault.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream};
use futures::{FutureExt, Stream, StreamExt};

/// Runs `future`, turning a panic into an internal error that quotes the panic's message.
pub async fn guard_future<T>(what: &str, future: impl Future<Output = Result<T>>) -> Result<T> {
    AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .unwrap_or_else(|payload| Err(panicked(what, payload.as_ref())))
}

/// `stream`, with a panic while producing a batch turned into a last, internal error.
pub fn guard_stream(stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
    Box::pin(GuardedStream {
        inner: stream,
        finished: false,
    })
}

struct GuardedStream {
    inner: SendableRecordBatchStream,
    /// Set after a panic: the inner stream is in no state to be polled again.
    finished: bool,
}

impl Stream for GuardedStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.finished {
            return Poll::Ready(None);
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.poll_next_unpin(cx))) {
            Ok(poll) => poll,
            Err(payload) => {
                self.finished = true;
                Poll::Ready(Some(Err(panicked("executing the query", payload.as_ref()))))
            }
        }
    }
}

impl RecordBatchStream for GuardedStream {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

fn panicked(what: &str, payload: &(dyn Any + Send)) -> DataFusionError {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message");
    DataFusionError::Internal(format!("the server panicked {what}: {message}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]))
    }

    fn batch(v: i64) -> Result<RecordBatch> {
        Ok(RecordBatch::try_new(
            schema(),
            vec![Arc::new(Int64Array::from(vec![v]))],
        )?)
    }

    #[tokio::test]
    async fn a_panicking_stream_ends_with_an_internal_error_after_its_good_batches() {
        let rows = futures::stream::iter(0..3).map(|i| {
            if i == 2 {
                panic!("boom at batch {i}");
            }
            batch(i)
        });
        let mut guarded = guard_stream(Box::pin(RecordBatchStreamAdapter::new(schema(), rows)));
        assert_eq!(guarded.next().await.unwrap().unwrap().num_rows(), 1);
        assert_eq!(guarded.next().await.unwrap().unwrap().num_rows(), 1);
        let error = guarded.next().await.unwrap().unwrap_err();
        assert!(matches!(error, DataFusionError::Internal(_)), "{error:?}");
        assert!(error.to_string().contains("boom at batch 2"), "{error}");
        assert!(guarded.next().await.is_none(), "a panicked stream ends");
    }

    #[tokio::test]
    async fn a_panicking_future_is_an_internal_error_and_a_good_one_passes() {
        let error = guard_future("planning", async {
            if true {
                panic!("{}", String::from("planner bug"));
            }
            Ok(1)
        })
        .await
        .unwrap_err();
        assert!(
            error.to_string().contains("planning: planner bug"),
            "{error}"
        );
        assert_eq!(guard_future("planning", async { Ok(7) }).await.unwrap(), 7);
    }
}
