//! The bodies of the coverage-guided fuzz targets, as ordinary functions.
//!
//! Each `pub fn NAME(data: &[u8])` feeds bytes from a stranger to one
//! boundary of the products and asserts that boundary's invariant (a
//! panic is a finding): no panic anywhere; a refused request is a 422
//! naming its field, never a 500; and for the two differential targets,
//! that the check agrees with an independent statement of its rule. The
//! products expose what these need through their library crates.
//!
//! `fuzz/fuzz_targets/NAME.rs` (cargo-fuzz, nightly) calls the function
//! of the same name; `tests/corpus.rs` replays every file of
//! `fuzz/corpus/NAME/` through it on stable, so `cargo xtask test` keeps
//! the corpora (and every finding added to them) passing. See FUZZING.md.

mod console;
mod ingress;
mod mail;
mod mcp;
mod release;
mod smtp;
mod tracking;
mod webhook;

pub use console::console_session;
pub use ingress::ingress_router;
pub use mail::{email_json, feedback_report, idempotency_if_match, log_cursor, verp_token};
pub use mcp::{action_input, mcp_request};
pub use release::release_verify;
pub use smtp::smtp_session;
pub use tracking::tracking_hostname;
pub use webhook::webhook_url;

/// A fuzz target: its name (of `fuzz/fuzz_targets/NAME.rs` and
/// `fuzz/corpus/NAME/`) and its body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, in the order `cargo xtask fuzz` runs them.
pub const TARGETS: &[Target] = &[
    ("email_json", email_json),
    ("idempotency_if_match", idempotency_if_match),
    ("log_cursor", log_cursor),
    ("feedback_report", feedback_report),
    ("smtp_session", smtp_session),
    ("verp_token", verp_token),
    ("webhook_url", webhook_url),
    ("release_verify", release_verify),
    ("action_input", action_input),
    ("tracking_hostname", tracking_hostname),
    ("ingress_router", ingress_router),
    ("console_session", console_session),
    ("mcp_request", mcp_request),
];

/// Runs a future to completion on this thread's current-thread runtime
/// (with the timer, for the deadlines the code under test sets).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime");
    }
    RUNTIME.with(|runtime| runtime.block_on(future))
}

/// The input as text when it is UTF-8 (most boundaries take text).
fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}
