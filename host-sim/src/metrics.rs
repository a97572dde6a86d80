//! Prometheus metrics of `serve`, on the operator listener (`serve
//! --metrics-listen ADDR`, off by default; never on the public port).
//!
//! The call sites record through the `metrics` facade; until [`install`]
//! puts the Prometheus recorder in place every record is a no-op. Names
//! carry their unit and counters end in `_total`. Every label value comes
//! from a closed set: an extension id and action only once the invocation
//! resolved them against an installed release (anything a caller made up
//! is `unresolved`), a binding name the release declares, a host error
//! code, a status class. No project, token, user, hostname or id.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};
use std::time::Duration;

use metrics::{Counter, Histogram, Unit, describe_counter, describe_gauge, describe_histogram};
use ops_metrics::{Profile, PrometheusHandle};

pub const INVOCATIONS: &str = "host_sim_invocations_total";
pub const INVOCATION_DURATION: &str = "host_sim_invocation_duration_seconds";
pub const REFUSALS: &str = "host_sim_invocation_refusals_total";
pub const BINDING_CALLS: &str = "host_sim_binding_calls_total";
pub const BINDING_DURATION: &str = "host_sim_binding_call_duration_seconds";
pub const SLOTS_IN_USE: &str = "host_sim_pool_slots_in_use";
pub const SLOTS: &str = "host_sim_pool_slots";
pub const PREPARED: &str = "host_sim_prepared_stores_total";
pub const PREPARED_USED: &str = "host_sim_prepared_stores_used_total";
pub const INGRESS: &str = "host_sim_tracking_ingress_requests_total";

/// `host_sim_invocation_refusals_total`'s kinds.
pub const REFUSAL_KINDS: &[&str] = &[
    "authentication",
    "access",
    "grant",
    "approval",
    "generation",
    "scope",
];
/// The outcomes of an invocation refused before its release declared the
/// extension and action (counted as `unresolved`).
pub const UNRESOLVED_OUTCOMES: &[&str] = &["unauthenticated", "forbidden", "not_found"];
/// `host_sim_tracking_ingress_requests_total`'s outcomes.
pub const INGRESS_OUTCOMES: &[&str] = &["forwarded", "failed", "refused"];

/// host-sim's metrics for the shared recorder: every histogram is a
/// latency (`ops_metrics::LATENCY_BUCKETS`).
const PROFILE: Profile = Profile {
    buckets: &[],
    describe,
};

/// Installs the Prometheus recorder for this process (once; later calls
/// return the same handle) and describes every metric.
pub fn install() -> PrometheusHandle {
    ops_metrics::install(&PROFILE)
}

fn describe() {
    describe_counter!(
        INVOCATIONS,
        "Invocations, by extension, action and outcome (ok, a host error code, or action_error for an error the extension returned)."
    );
    describe_histogram!(
        INVOCATION_DURATION,
        Unit::Seconds,
        "Time an invocation took, by extension and action."
    );
    describe_counter!(
        REFUSALS,
        "Invocations refused before the extension ran, by kind: authentication, access, grant, approval, generation."
    );
    describe_counter!(
        BINDING_CALLS,
        "Binding calls an extension made, by binding and status class (2xx to 5xx, or the error: timeout, unavailable, response_too_large, invalid_request)."
    );
    describe_histogram!(
        BINDING_DURATION,
        Unit::Seconds,
        "Time a binding call took, by binding."
    );
    describe_gauge!(
        SLOTS_IN_USE,
        "Instance slots in use: invocations under way, a prepared store and finished stores awaiting teardown."
    );
    describe_gauge!(SLOTS, "Instance slots of the pooling allocator.");
    describe_counter!(
        PREPARED,
        "Stores prepared ahead of their invocation during a binding wait."
    );
    describe_counter!(
        PREPARED_USED,
        "Invocations that ran in a store prepared ahead."
    );
    describe_counter!(
        INGRESS,
        "Requests to a tracking hostname, by outcome: forwarded (the provider answered), failed (it did not), refused (not an exposed request)."
    );
    export_from_start();
}

/// Creates, at 0, every series whose labels are known before anything
/// happened, so that a quiet host exports its families from the start
/// (`rate()` and absence alerts read it right): the refusal kinds, the
/// tracking ingress outcomes, and the invocations of the `unresolved`
/// extension and action with the outcomes they can have. The binding
/// families are labelled with the names releases declare, so they appear
/// with the first binding call; the pool's are read at each scrape.
fn export_from_start() {
    for kind in REFUSAL_KINDS {
        metrics::counter!(REFUSALS, "kind" => *kind).increment(0);
    }
    for outcome in INGRESS_OUTCOMES {
        metrics::counter!(INGRESS, "outcome" => *outcome).increment(0);
    }
    // A histogram registered is shown, empty, until its first observation.
    let _ = metrics::histogram!(
        INVOCATION_DURATION,
        "extension" => "unresolved",
        "action" => "unresolved"
    );
    for outcome in UNRESOLVED_OUTCOMES {
        metrics::counter!(
            INVOCATIONS,
            "extension" => "unresolved",
            "action" => "unresolved",
            "outcome" => *outcome
        )
        .increment(0);
    }
}

/// A duration histogram and its counters by one more label, of one series
/// (an extension's action, or a binding).
struct Timed {
    duration: Histogram,
    counts: HashMap<&'static str, Counter>,
}

/// The handles of the series recorded on every invocation and binding call,
/// by their label values: the registry is asked once per series, not once
/// per event (which built the key and allocated its label strings each
/// time, a measurable share of a request's CPU).
#[derive(Default)]
struct Series {
    /// Extension → action → duration and counts by outcome.
    invocations: RwLock<HashMap<String, HashMap<String, Timed>>>,
    /// Binding → duration and counts by status class.
    bindings: RwLock<HashMap<String, Timed>>,
}

fn series() -> &'static Series {
    static SERIES: OnceLock<Series> = OnceLock::new();
    SERIES.get_or_init(Series::default)
}

impl Timed {
    fn record(&self, count: &str, elapsed: Duration) -> bool {
        let Some(counter) = self.counts.get(count) else {
            return false;
        };
        self.duration.record(elapsed.as_secs_f64());
        counter.increment(1);
        true
    }
}

/// Records one finished invocation: `outcome` is `ok`, a host error code
/// or `action_error`; `refusal` the kind when the host refused it before
/// the extension ran; `resolved` whether the release declared the
/// extension and action (otherwise they are the caller's words and are
/// recorded as `unresolved`).
pub fn invocation(
    extension: &str,
    action: &str,
    outcome: &'static str,
    refusal: Option<&'static str>,
    resolved: bool,
    elapsed: Duration,
) {
    if !ops_metrics::installed() {
        return;
    }
    let (extension, action) = if resolved {
        (extension, action)
    } else {
        ("unresolved", "unresolved")
    };
    if let Some(kind) = refusal {
        metrics::counter!(REFUSALS, "kind" => kind).increment(1);
    }
    let all = &series().invocations;
    {
        let known = all.read().unwrap_or_else(|e| e.into_inner());
        if let Some(timed) = known.get(extension).and_then(|a| a.get(action))
            && timed.record(outcome, elapsed)
        {
            return;
        }
    }
    let mut known = all.write().unwrap_or_else(|e| e.into_inner());
    let timed = known
        .entry(extension.to_owned())
        .or_default()
        .entry(action.to_owned())
        .or_insert_with(|| Timed {
            duration: metrics::histogram!(
                INVOCATION_DURATION,
                "extension" => extension.to_owned(),
                "action" => action.to_owned()
            ),
            counts: HashMap::new(),
        });
    timed.counts.entry(outcome).or_insert_with(|| {
        metrics::counter!(
            INVOCATIONS,
            "extension" => extension.to_owned(),
            "action" => action.to_owned(),
            "outcome" => outcome
        )
    });
    timed.record(outcome, elapsed);
}

/// Records one binding call that went out (`binding` is declared by the
/// release: the call was authorized).
pub fn binding_call(binding: &str, class: &'static str, elapsed: Duration) {
    if !ops_metrics::installed() {
        return;
    }
    let all = &series().bindings;
    {
        let known = all.read().unwrap_or_else(|e| e.into_inner());
        if known
            .get(binding)
            .is_some_and(|timed| timed.record(class, elapsed))
        {
            return;
        }
    }
    let mut known = all.write().unwrap_or_else(|e| e.into_inner());
    let timed = known.entry(binding.to_owned()).or_insert_with(|| Timed {
        duration: metrics::histogram!(BINDING_DURATION, "binding" => binding.to_owned()),
        counts: HashMap::new(),
    });
    timed.counts.entry(class).or_insert_with(|| {
        metrics::counter!(BINDING_CALLS, "binding" => binding.to_owned(), "status_class" => class)
    });
    timed.record(class, elapsed);
}

/// The class of an HTTP status: `2xx` … `5xx`, `other`.
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    }
}

/// Counts one request to a tracking hostname.
pub fn ingress(outcome: &'static str) {
    metrics::counter!(INGRESS, "outcome" => outcome).increment(1);
}
