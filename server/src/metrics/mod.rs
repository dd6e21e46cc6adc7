//! Prometheus metrics: what the server counts as it serves, and the
//! listener that hands it to a Prometheus (`airlock serve --metrics
//! HOST:PORT`, no API key, `GET /metrics` in Prometheus' text format).
//!
//! Counting costs the calls nothing they would notice: every counter a call
//! touches is made when the server starts (one per label value, all of them
//! bounded: an origin, an outcome, an error reason, a status class, never a
//! sandbox or a key) and kept here, so a call adds one to an atomic, with
//! no lock and no allocation. Histograms (a create's time, a first output,
//! a refill) take a short lock, once per create at most. What is a state
//! rather than an event (sandboxes by state, the pool's depth, the memory
//! committed, the host's) is read when Prometheus scrapes (`live`).
//!
//! - `names`: the bounded label values ([`Origin`], outcomes, reasons,
//!   fronts, causes).
//! - `live`: the gauges read at each scrape from the server's state.
//! - `grpc`: the tower layer that counts the error statuses the API's
//!   listeners answer.
//! - `http`: [`MetricsEndpoint`], the listener.

pub mod error;
pub mod first_output;
mod grpc;
mod http;
pub mod live;
mod names;

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tonic::Status;

pub use error::MetricsBindError;
pub use first_output::{FirstOutput, FirstOutputClaim};
pub use grpc::StatusLayer;
pub(crate) use http::serve;
pub use http::MetricsEndpoint;
pub use names::{AuthCause, Front, Origin};

type Labels = Vec<(&'static str, &'static str)>;
type HistogramMaker = fn() -> Histogram;

/// Seconds, for a create until ready and until its first output: from a
/// pool's handout (tens of milliseconds) to a cold boot under emulation
/// (tens of seconds).
const START_BUCKETS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
/// Seconds, for a pool to be full again: a member's start and warm-up.
const REFILL_BUCKETS: [f64; 11] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// One counter per outcome: `ok`, or the API's reason of the error.
#[derive(Debug)]
struct Outcomes {
    ok: Counter,
    /// By the reason's place in [`names::REASONS`].
    failed: Vec<Counter>,
}

impl Outcomes {
    /// The counters of `family` under `labels` and each outcome.
    fn new(family: &Family<Labels, Counter>, labels: &[(&'static str, &'static str)]) -> Self {
        let with = |outcome: &'static str| {
            let mut set = labels.to_vec();
            set.push(("outcome", outcome));
            family.get_or_create_owned(&set)
        };
        Outcomes {
            ok: with("ok"),
            failed: names::REASONS.iter().map(|(_, name)| with(name)).collect(),
        }
    }

    fn count<T>(&self, result: &Result<T, Status>) {
        match result {
            Ok(_) => self.ok.inc(),
            Err(status) => self.failed[names::reason_index(status)].inc(),
        };
    }
}

/// What the server counts; `State::metrics` when it serves metrics.
#[derive(Debug)]
pub struct Metrics {
    creates: Family<Labels, Counter>,
    creates_by_origin: Vec<Outcomes>,
    ready: Family<Labels, Histogram, HistogramMaker>,
    ready_by_origin: Vec<Histogram>,
    first_output: Family<Labels, Histogram, HistogramMaker>,
    first_output_by_origin: Vec<Histogram>,
    execs_family: Family<Labels, Counter>,
    execs: Outcomes,
    file_calls_family: Family<Labels, Counter>,
    file_calls: Outcomes,
    errors_family: Family<Labels, Counter>,
    /// By the reason's place in [`names::REASONS`].
    errors: Vec<Counter>,
    auth_family: Family<Labels, Counter>,
    /// By front, then cause.
    auth: Vec<Vec<Counter>>,
    ingress_family: Family<Labels, Counter>,
    /// By status class: 1xx to 5xx.
    ingress: Vec<Counter>,
    pool_refill: Histogram,
}

fn start_histogram() -> Histogram {
    Histogram::new(START_BUCKETS)
}

impl Metrics {
    /// Every counter, made now (at zero), and the host's size read.
    pub fn new() -> Self {
        let creates = Family::<Labels, Counter>::default();
        let creates_by_origin = Origin::ALL
            .iter()
            .map(|origin| Outcomes::new(&creates, &[("origin", origin.name())]))
            .collect();
        let by_origin = |family: &Family<Labels, Histogram, HistogramMaker>| {
            Origin::ALL
                .iter()
                .map(|origin| family.get_or_create_owned(&vec![("origin", origin.name())]))
                .collect::<Vec<_>>()
        };
        let ready = Family::new_with_constructor(start_histogram as HistogramMaker);
        let first_output = Family::new_with_constructor(start_histogram as HistogramMaker);
        let execs_family = Family::default();
        let file_calls_family = Family::default();
        let errors_family = Family::<Labels, Counter>::default();
        let auth_family = Family::<Labels, Counter>::default();
        let ingress_family = Family::<Labels, Counter>::default();
        Metrics {
            creates_by_origin,
            creates,
            ready_by_origin: by_origin(&ready),
            ready,
            first_output_by_origin: by_origin(&first_output),
            first_output,
            execs: Outcomes::new(&execs_family, &[]),
            execs_family,
            file_calls: Outcomes::new(&file_calls_family, &[]),
            file_calls_family,
            errors: names::REASONS
                .iter()
                .map(|(_, name)| errors_family.get_or_create_owned(&vec![("reason", *name)]))
                .collect(),
            errors_family,
            auth: Front::ALL
                .iter()
                .map(|front| {
                    AuthCause::ALL
                        .iter()
                        .map(|cause| {
                            auth_family.get_or_create_owned(&vec![
                                ("front", front.name()),
                                ("cause", cause.name()),
                            ])
                        })
                        .collect()
                })
                .collect(),
            auth_family,
            ingress: names::STATUS_CLASSES
                .iter()
                .map(|class| ingress_family.get_or_create_owned(&vec![("code_class", *class)]))
                .collect(),
            ingress_family,
            pool_refill: Histogram::new(REFILL_BUCKETS),
        }
    }

    /// A create that passed its request's checks ended: `origin` is where
    /// its sandbox came from (or would have), `took` its time until ready.
    pub fn created<T>(&self, origin: Origin, result: &Result<T, Status>, took: Duration) {
        self.creates_by_origin[origin as usize].count(result);
        if result.is_ok() {
            self.ready_by_origin[origin as usize].observe(took.as_secs_f64());
        }
    }

    /// A fork ended: each child (`Ok(children)`) is a create of origin
    /// `fork`, or the fork failed.
    pub fn forked(&self, children: Result<usize, &Status>, took: Duration) {
        match children {
            Ok(children) => {
                for _ in 0..children {
                    self.created(Origin::Fork, &Ok::<(), Status>(()), took);
                }
            }
            Err(status) => {
                self.creates_by_origin[Origin::Fork as usize].count::<()>(&Err(status.clone()))
            }
        }
    }

    /// A sandbox of `origin` created at `begun` waits for its first
    /// program's first output.
    pub fn awaiting_first_output(self: &Arc<Self>, origin: Origin, begun: Instant) -> FirstOutput {
        FirstOutput::new(self.first_output_by_origin[origin as usize].clone(), begun)
    }

    /// A program's start (`Processes.Start`) ended.
    pub fn exec<T>(&self, result: &Result<T, Status>) {
        self.execs.count(result);
    }

    /// A call of the `Files` service ended.
    pub fn file_call<T>(&self, result: &Result<T, Status>) {
        self.file_calls.count(result);
    }

    /// The API answered an error status with `reason` (its place in
    /// [`names::REASONS`]).
    fn error(&self, reason: usize) {
        self.errors[reason].inc();
    }

    /// A key (or the E2B front's access token) was refused.
    pub fn auth_failed(&self, front: Front, cause: AuthCause) {
        self.auth[front as usize][cause as usize].inc();
    }

    /// The ingress answered `status`.
    pub fn ingress_answered(&self, status: ::http::StatusCode) {
        let class = usize::from(status.as_u16() / 100).clamp(1, 5) - 1;
        self.ingress[class].inc();
    }

    /// The warm pool is full again, `took` after the handout that left it
    /// short.
    pub fn pool_refilled(&self, took: Duration) {
        self.pool_refill.observe(took.as_secs_f64());
    }

    /// A registry of every metric, with `live`: the gauges read at each
    /// scrape (`live::Live` on a server's state).
    pub fn registry(&self, live: Box<dyn Collector>) -> Registry {
        let mut registry = Registry::default();
        registry.register(
            "airlock_creates",
            "Sandbox creates that passed their request's checks, by where the sandbox came from and outcome (ok, or the API's error reason)",
            self.creates.clone(),
        );
        registry.register(
            "airlock_create_ready_seconds",
            "Seconds from a create's arrival until its sandbox was ready, by origin",
            self.ready.clone(),
        );
        registry.register(
            "airlock_first_output_seconds",
            "Seconds from a create's arrival until the first output of the sandbox's first program, by origin (once per sandbox)",
            self.first_output.clone(),
        );
        registry.register(
            "airlock_execs",
            "Program starts (Processes.Start), by outcome (ok, or the API's error reason)",
            self.execs_family.clone(),
        );
        registry.register(
            "airlock_file_calls",
            "Calls of the Files service, by outcome (ok, or the API's error reason)",
            self.file_calls_family.clone(),
        );
        registry.register(
            "airlock_errors",
            "Error statuses the API's listeners answered, by the API's error reason",
            self.errors_family.clone(),
        );
        registry.register(
            "airlock_auth_failures",
            "Refused API keys and access tokens, by front (api, e2b) and cause",
            self.auth_family.clone(),
        );
        registry.register(
            "airlock_ingress_requests",
            "HTTP requests the ingress answered, by status class",
            self.ingress_family.clone(),
        );
        registry.register(
            "airlock_pool_refill_seconds",
            "Seconds from a handout that left the warm pool short until it was full again",
            self.pool_refill.clone(),
        );
        registry.register_collector(live);
        registry
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use airlock_api::reason;
    use airlock_api::v1::ErrorReason;
    use prometheus_client::encoding::prometheus_text::encode;

    fn text(metrics: &Metrics) -> String {
        let mut text = String::new();
        encode(
            &mut text,
            &metrics.registry(Box::new(live::Live::new(std::sync::Weak::new()))),
        )
        .unwrap();
        text
    }

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn outcomes_are_counted_by_the_apis_reason() {
        let metrics = Metrics::new();
        metrics.exec(&Ok::<(), Status>(()));
        metrics.exec(&Ok::<(), Status>(()));
        metrics.exec::<()>(&Err(reason::status(ErrorReason::SandboxNotFound, "x")));
        metrics.file_call::<()>(&Err(reason::invalid("path", "relative")));
        metrics.file_call::<()>(&Err(Status::internal("no reason")));
        let text = text(&metrics);
        assert_eq!(value(&text, r#"airlock_execs_total{outcome="ok"}"#), 2.0);
        assert_eq!(
            value(&text, r#"airlock_execs_total{outcome="SANDBOX_NOT_FOUND"}"#),
            1.0
        );
        assert_eq!(
            value(&text, r#"airlock_execs_total{outcome="TIMEOUT"}"#),
            0.0
        );
        assert_eq!(
            value(
                &text,
                r#"airlock_file_calls_total{outcome="INVALID_ARGUMENT"}"#
            ),
            1.0
        );
        assert_eq!(
            value(&text, r#"airlock_file_calls_total{outcome="UNSPECIFIED"}"#),
            1.0
        );
    }

    #[test]
    fn creates_are_counted_by_origin_and_timed_when_they_succeed() {
        let metrics = Metrics::new();
        metrics.created(
            Origin::Pool,
            &Ok::<(), Status>(()),
            Duration::from_millis(20),
        );
        metrics.created::<()>(
            Origin::Cold,
            &Err(reason::status(ErrorReason::QuotaExceeded, "x")),
            Duration::from_secs(1),
        );
        let text = text(&metrics);
        assert_eq!(
            value(
                &text,
                r#"airlock_creates_total{origin="pool",outcome="ok"}"#
            ),
            1.0
        );
        assert_eq!(
            value(
                &text,
                r#"airlock_creates_total{origin="cold",outcome="QUOTA_EXCEEDED"}"#
            ),
            1.0
        );
        assert_eq!(
            value(
                &text,
                r#"airlock_create_ready_seconds_count{origin="pool"}"#
            ),
            1.0
        );
        assert_eq!(
            value(
                &text,
                r#"airlock_create_ready_seconds_bucket{origin="pool",le="0.025"}"#
            ),
            1.0
        );
        assert_eq!(
            value(
                &text,
                r#"airlock_create_ready_seconds_count{origin="cold"}"#
            ),
            0.0
        );
    }

    #[test]
    fn the_first_output_is_observed_once_per_sandbox() {
        let metrics = Arc::new(Metrics::new());
        let first = metrics.awaiting_first_output(Origin::Clone, Instant::now());
        let claim = first.claim().unwrap();
        assert!(first.claim().is_none(), "a second program's start");
        claim.observe();
        assert!(first.clone().claim().is_none());
        let text = text(&metrics);
        assert_eq!(
            value(
                &text,
                r#"airlock_first_output_seconds_count{origin="clone"}"#
            ),
            1.0
        );
    }

    #[test]
    fn refusals_and_ingress_answers_fall_in_bounded_series() {
        let metrics = Metrics::new();
        metrics.auth_failed(Front::Api, AuthCause::Unknown);
        metrics.auth_failed(Front::E2b, AuthCause::Throttled);
        metrics.ingress_answered(::http::StatusCode::OK);
        metrics.ingress_answered(::http::StatusCode::BAD_GATEWAY);
        metrics.ingress_answered(::http::StatusCode::SWITCHING_PROTOCOLS);
        metrics.pool_refilled(Duration::from_secs(3));
        let text = text(&metrics);
        assert_eq!(
            value(
                &text,
                r#"airlock_auth_failures_total{front="api",cause="unknown"}"#
            ),
            1.0
        );
        assert_eq!(
            value(
                &text,
                r#"airlock_auth_failures_total{front="e2b",cause="throttled"}"#
            ),
            1.0
        );
        assert_eq!(
            value(&text, r#"airlock_ingress_requests_total{code_class="5xx"}"#),
            1.0
        );
        assert_eq!(
            value(&text, r#"airlock_ingress_requests_total{code_class="1xx"}"#),
            1.0
        );
        assert_eq!(value(&text, "airlock_pool_refill_seconds_sum"), 3.0);
    }

    #[test]
    fn every_name_follows_prometheus_conventions() {
        let text = text(&Metrics::new());
        for line in text.lines().filter(|line| line.starts_with("# TYPE ")) {
            let mut words = line.split(' ').skip(2);
            let (name, kind) = (words.next().unwrap(), words.next().unwrap());
            assert!(name.starts_with("airlock_"), "{line}");
            match kind {
                "counter" => assert!(name.ends_with("_total"), "{line}"),
                "histogram" => assert!(name.ends_with("_seconds"), "{line}"),
                _ => assert!(!name.ends_with("_total"), "{line}"),
            }
        }
    }
}
