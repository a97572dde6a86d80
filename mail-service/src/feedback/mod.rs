//! Feedback mail: what happens to a message after the upstream accepted it.
//! Every outgoing message carries a return path naming it (`verp`); delivery
//! status notifications and complaint reports come back to it, through the
//! SMTP listener (`listener`) or `mail-service feedback ingest` on standard
//! input, and are read here (`report`). Applying them (events, suppressions,
//! analytics, quarantine) is the service's `ingest_feedback`.

pub mod listener;
pub mod report;
pub mod verp;
