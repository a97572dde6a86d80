//! The managed website analytics extension.
//!
//! The logic is a plain Rust library on the guest crate (`extension-guest`):
//! [`actions::invoke`] dispatches an action against a [`host::Host`], the
//! trait that mirrors the WIT imports of `platform:extension@0.1.0`
//! (invocation context, the `provider` HTTP binding, project documents,
//! log). Natively it is unit-tested with in-memory hosts; on `wasm32` the
//! guest crate's `export!` makes [`invoke`] the component's export, and
//! `heap` is its allocator.

pub mod actions;
mod answers;
pub mod calendar;
pub mod domain;
pub mod error;
pub mod host;
pub mod provider;
pub mod website_id;

#[cfg(target_arch = "wasm32")]
mod heap;

pub use actions::invoke;
pub use error::{ActionError, ErrorCode};
pub use host::Host;

extension_guest::export!(actions::invoke);
