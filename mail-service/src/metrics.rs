//! Prometheus metrics, served on the operator listener (`serve
//! --metrics-listen ADDR`, off by default) and never on the public port.
//!
//! The call sites record through the `metrics` facade; until [`install`]
//! puts the Prometheus recorder in place (only `serve` with the listener
//! does) every record is a no-op. Every name carries its unit (`_seconds`,
//! base units), counters end in `_total`, and every label value comes from
//! a closed set: a route template, a status code, an outcome or a result
//! class. No label carries a tenant, an address, a key, a host name or an
//! id (tests/metrics.rs checks the exposition for them).
//!
//! The queue gauges (scheduled emails due, webhook backlog) are read from
//! the database when `/metrics` is scraped (`http::metrics_listener`),
//! so every node reports the shared queues' state at the time of the
//! scrape.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use ops_metrics::{Profile, PrometheusHandle};

pub const HTTP_REQUESTS: &str = "mail_http_requests_total";
pub const HTTP_DURATION: &str = "mail_http_request_duration_seconds";
pub const EMAILS_ACCEPTED: &str = "mail_emails_accepted_total";
pub const HANDOFF_DURATION: &str = "mail_handoff_duration_seconds";
pub const SCHEDULED_DUE: &str = "mail_scheduled_emails_due";
pub const SCHEDULED_OLDEST_AGE: &str = "mail_scheduled_oldest_due_age_seconds";
pub const WEBHOOK_BACKLOG: &str = "mail_webhook_deliveries_pending";
pub const WEBHOOK_OLDEST_AGE: &str = "mail_webhook_oldest_pending_age_seconds";
pub const WEBHOOK_ATTEMPTS: &str = "mail_webhook_delivery_attempts_total";
pub const FEEDBACK_REPORTS: &str = "mail_feedback_reports_total";
pub const RATE_LIMITED: &str = "mail_rate_limited_requests_total";
pub const SQLITE_GROUP_UNITS: &str = "mail_sqlite_write_group_units";
pub const SQLITE_COMMIT_DURATION: &str = "mail_sqlite_commit_duration_seconds";

/// Units of work per SQLite group commit (the writer takes at most 256).
const GROUP_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// mail-service's metrics for the shared recorder: the latencies take
/// `ops_metrics::LATENCY_BUCKETS`, the group size its own.
const PROFILE: Profile = Profile {
    buckets: &[(SQLITE_GROUP_UNITS, GROUP_BUCKETS)],
    describe,
};

/// Installs the Prometheus recorder for this process (once; later calls
/// return the same handle) and describes every metric.
pub fn install() -> PrometheusHandle {
    ops_metrics::install(&PROFILE)
}

fn describe() {
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests answered, by route template, method and status code."
    );
    describe_histogram!(
        HTTP_DURATION,
        Unit::Seconds,
        "Time to answer an HTTP request, by route template and method."
    );
    describe_counter!(
        EMAILS_ACCEPTED,
        "Emails accepted, by the outcome of their acceptance: sent, scheduled, suppressed, failed, unknown, canceled (later items of a failed batch)."
    );
    describe_histogram!(
        HANDOFF_DURATION,
        Unit::Seconds,
        "Time to hand an email to the transport (screening, signing, SMTP), by outcome."
    );
    describe_gauge!(
        SCHEDULED_DUE,
        "Scheduled emails whose time has come and that no node has handed off yet."
    );
    describe_gauge!(
        SCHEDULED_OLDEST_AGE,
        Unit::Seconds,
        "How long the oldest due scheduled email has been due (0 when none is)."
    );
    describe_gauge!(
        WEBHOOK_BACKLOG,
        "Webhook deliveries pending in the outbox (due or waiting for a retry)."
    );
    describe_gauge!(
        WEBHOOK_OLDEST_AGE,
        Unit::Seconds,
        "Age of the oldest pending webhook delivery (0 when none is)."
    );
    describe_counter!(
        WEBHOOK_ATTEMPTS,
        "Webhook delivery attempts, by result: delivered, http_status, timeout, connect, dns, forbidden_address, request."
    );
    describe_counter!(
        FEEDBACK_REPORTS,
        "Feedback reports received, by outcome: applied, quarantined, duplicate."
    );
    describe_counter!(
        RATE_LIMITED,
        "Requests refused with 429 by the tenants' rate limits."
    );
    describe_histogram!(
        SQLITE_GROUP_UNITS,
        "Units of work the SQLite writer committed in one transaction (group commit)."
    );
    describe_histogram!(
        SQLITE_COMMIT_DURATION,
        Unit::Seconds,
        "Time the SQLite writer took to run and commit one group."
    );
}

/// Counts `n` accepted emails with their outcome.
pub fn emails_accepted(outcome: &'static str, n: u64) {
    metrics::counter!(EMAILS_ACCEPTED, "outcome" => outcome).increment(n);
}

/// An HTTP method as a label: the methods the API answers, any other as
/// `other` (a client can send any token as a method).
pub fn method_label(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "POST" => "POST",
        "PATCH" => "PATCH",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

/// `mail_emails_accepted_total`'s outcomes.
pub const ACCEPTED_OUTCOMES: &[&str] = &[
    "sent",
    "scheduled",
    "suppressed",
    "failed",
    "unknown",
    "canceled",
];
/// `mail_handoff_duration_seconds`' outcomes.
pub const HANDOFF_OUTCOMES: &[&str] = &["sent", "suppressed", "failed", "unknown"];
/// `mail_webhook_delivery_attempts_total`'s results.
pub const WEBHOOK_RESULTS: &[&str] = &[
    "delivered",
    "http_status",
    "timeout",
    "connect",
    "dns",
    "forbidden_address",
    "request",
];
/// `mail_feedback_reports_total`'s outcomes.
pub const FEEDBACK_OUTCOMES: &[&str] = &["applied", "quarantined", "duplicate"];

/// What `/metrics` shows from the start, before anything happened.
pub struct FromStart {
    /// The route templates and methods the API serves
    /// (`http::served_routes`).
    pub routes: Vec<(String, &'static str)>,
    /// Whether the SQLite writer runs (its histograms exist only then).
    pub sqlite: bool,
}

/// Creates every documented series whose labels are known in advance, at
/// 0, so that a quiet service exports every family from its start and
/// `rate()` and absence alerts read it right: each closed set of outcomes
/// and results, the rate-limit counter, and for every route and method the
/// API serves its latency histogram and its request counter with
/// `status="200"` (other statuses appear with their first answer). The
/// queue gauges are read at each scrape.
pub fn export_from_start(from_start: &FromStart) {
    for outcome in ACCEPTED_OUTCOMES {
        metrics::counter!(EMAILS_ACCEPTED, "outcome" => *outcome).increment(0);
    }
    for outcome in HANDOFF_OUTCOMES {
        // A histogram registered is shown, empty, until its first
        // observation.
        let _ = metrics::histogram!(HANDOFF_DURATION, "outcome" => *outcome);
    }
    for result in WEBHOOK_RESULTS {
        metrics::counter!(WEBHOOK_ATTEMPTS, "result" => *result).increment(0);
    }
    for outcome in FEEDBACK_OUTCOMES {
        metrics::counter!(FEEDBACK_REPORTS, "outcome" => *outcome).increment(0);
    }
    metrics::counter!(RATE_LIMITED).increment(0);
    for (route, method) in &from_start.routes {
        metrics::counter!(
            HTTP_REQUESTS,
            "route" => route.clone(),
            "method" => *method,
            "status" => "200"
        )
        .increment(0);
        let _ = metrics::histogram!(HTTP_DURATION, "route" => route.clone(), "method" => *method);
    }
    if from_start.sqlite {
        let _ = metrics::histogram!(SQLITE_GROUP_UNITS);
        let _ = metrics::histogram!(SQLITE_COMMIT_DURATION);
    }
}
