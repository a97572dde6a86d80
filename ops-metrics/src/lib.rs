//! The operator listener both services share (`serve --metrics-listen`):
//! the process's Prometheus recorder with its histogram buckets, and
//! `GET /metrics` in the Prometheus text format 0.0.4.
//!
//! Each service keeps its own metric names, descriptions and recording
//! helpers and hands them over as a [`Profile`]. Until [`install`] runs,
//! every record through the `metrics` facade is a no-op, so a service
//! without the listener pays nothing.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

pub use metrics_exporter_prometheus::PrometheusHandle;

/// Latency buckets in seconds, for every histogram whose name ends in
/// `_seconds`: 0.5 ms to 30 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The media type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a service brings to the recorder: buckets of its histograms that
/// are not latencies (by full name) and the function that describes its
/// metrics (help text, units).
pub struct Profile {
    pub buckets: &'static [(&'static str, &'static [f64])],
    pub describe: fn(),
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder of this process once and describes the
/// profile's metrics; later calls return the same handle (one service per
/// process: the first profile is the one installed).
pub fn install(profile: &Profile) -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let mut builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .expect("the latency buckets are not empty");
            for (name, buckets) in profile.buckets {
                builder = builder
                    .set_buckets_for_metric(Matcher::Full((*name).into()), buckets)
                    .expect("a profile's bucket list is not empty");
            }
            let handle = builder
                .install_recorder()
                .expect("no other metrics recorder is installed in this process");
            (profile.describe)();
            handle
        })
        .clone()
}

/// Whether [`install`] ran in this process: before it every record is a
/// no-op, so a service need not look up (or cache) any series.
pub fn installed() -> bool {
    HANDLE.get().is_some()
}

/// `GET /metrics`: runs `refresh` (gauges read at scrape time), then
/// renders everything recorded.
pub fn router<F, Fut>(handle: PrometheusHandle, refresh: F) -> Router
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Router::new().route(
        "/metrics",
        get(move || {
            let (handle, refresh) = (handle.clone(), refresh.clone());
            async move {
                refresh().await;
                render(&handle)
            }
        }),
    )
}

fn render(handle: &PrometheusHandle) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        handle.render(),
    )
        .into_response()
}

/// Serves [`router`] on the operator listener until the runtime ends, and
/// drains the histograms' samples every few seconds between scrapes.
pub fn spawn<F, Fut>(listener: tokio::net::TcpListener, handle: PrometheusHandle, refresh: F)
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(handle, refresh)).await {
            tracing::error!(error = %e, "the metrics listener stopped");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE: Profile = Profile {
        buckets: &[("ops_test_batch_units", &[1.0, 4.0, 16.0])],
        describe,
    };

    fn describe() {
        metrics::describe_counter!("ops_test_events_total", "Events of the test.");
    }

    #[tokio::test]
    async fn metrics_are_served_with_the_buckets_and_refreshed_per_scrape() {
        let handle = install(&PROFILE);
        metrics::counter!("ops_test_events_total").increment(2);
        metrics::histogram!("ops_test_wait_seconds").record(0.003);
        metrics::histogram!("ops_test_batch_units").record(3.0);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        spawn(listener, handle, || async {
            metrics::gauge!("ops_test_queue_depth").set(7.0);
        });
        let response = reqwest::get(format!("http://{address}/metrics"))
            .await
            .unwrap();
        assert_eq!(response.headers()["content-type"], CONTENT_TYPE);
        let body = response.text().await.unwrap();
        assert!(body.contains("# HELP ops_test_events_total Events of the test."));
        assert!(body.contains("ops_test_events_total 2"), "{body}");
        assert!(body.contains("ops_test_queue_depth 7"), "{body}");
        assert!(
            body.contains(r#"ops_test_wait_seconds_bucket{le="0.005"} 1"#),
            "latency buckets: {body}"
        );
        assert!(
            body.contains(r#"ops_test_batch_units_bucket{le="4"} 1"#),
            "the profile's buckets: {body}"
        );
        assert!(
            !body.contains(r#"ops_test_batch_units_bucket{le="0.005"}"#),
            "{body}"
        );
    }
}
