//! The CLI's command groups, beside `main.rs` (its crate root): modules of
//! the `host-sim` binary, on the library's public API only.

pub(crate) mod backup;
pub(crate) mod operator;
pub(crate) mod release;
pub(crate) mod secrets;
pub(crate) mod serve;
pub(crate) mod tracking;
