//! Counts each gRPC call and its latency by method (`DoGet`, `GetFlightInfo`, ...) and gRPC
//! status, as a tower layer around the Flight service. The status is the one the response
//! headers carry (every error Quiver returns before streaming); a call that fails while its
//! answer streams is counted by its headers, as `0`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tonic::codegen::http;

/// The layer: wrap the Flight service with it.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcMetricsLayer;

impl<S> tower::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> GrpcMetrics<S> {
        GrpcMetrics { inner }
    }
}

/// A service whose calls are counted and timed.
#[derive(Debug, Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
}

impl<S, B, R> tower::Service<http::Request<B>> for GrpcMetrics<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = method_of(request.uri().path());
        let started = Instant::now();
        let call = self.inner.call(request);
        Box::pin(async move {
            let response = call.await;
            let status = match &response {
                Ok(response) => response
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("0")
                    .to_string(),
                Err(_) => "transport_error".to_string(),
            };
            metrics::counter!("quiver_requests_total", "protocol" => "flight", "endpoint" => method, "status" => status)
                .increment(1);
            metrics::histogram!("quiver_request_duration_seconds", "protocol" => "flight", "endpoint" => method)
                .record(started.elapsed().as_secs_f64());
            response
        })
    }
}

/// The Flight method a request path names (`/arrow.flight.protocol.FlightService/DoGet`), as
/// one of a fixed set of labels (an arbitrary path must not create a new series).
fn method_of(path: &str) -> &'static str {
    const METHODS: [&str; 10] = [
        "Handshake",
        "ListFlights",
        "GetFlightInfo",
        "PollFlightInfo",
        "GetSchema",
        "DoGet",
        "DoPut",
        "DoExchange",
        "DoAction",
        "ListActions",
    ];
    let name = path.rsplit('/').next().unwrap_or_default();
    METHODS
        .into_iter()
        .find(|method| *method == name)
        .unwrap_or("unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_a_fixed_set_of_labels() {
        assert_eq!(
            method_of("/arrow.flight.protocol.FlightService/DoGet"),
            "DoGet"
        );
        assert_eq!(
            method_of("/arrow.flight.protocol.FlightService/Nope"),
            "unknown"
        );
        assert_eq!(method_of(""), "unknown");
    }
}
