//! Time source. Every time-based rule (replay window, rate-limit windows,
//! handoff leases) reads the clock through this trait so tests can move time
//! instead of waiting.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// Milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        time::OffsetDateTime::now_utc().unix_timestamp_nanos() as i64 / 1_000_000
    }
}

/// A clock that only moves when told to (tests).
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn starting_now() -> Self {
        Self(Arc::new(AtomicI64::new(SystemClock.now_ms())))
    }

    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A duration in milliseconds as people read it: `1.5 s`, `3 min 20 s`,
/// `2 d 4 h`.
pub fn span(ms: i64) -> String {
    let s = ms / 1000;
    match s {
        _ if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        _ if s < 3600 => format!("{} min {} s", s / 60, s % 60),
        _ if s < 86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Formats Unix milliseconds as RFC 3339 (UTC), with milliseconds when
/// they are not zero.
pub fn rfc3339(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}
