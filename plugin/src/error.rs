//! The one error shape of every action, from the guest crate: a stable code
//! and a sentence for people. Messages name the field and the rule; they
//! never carry a provider body, a secret or a stack trace.

pub use extension_guest::{ActionError, ErrorCode};
