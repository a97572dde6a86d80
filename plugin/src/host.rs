//! The host the plugin runs against: the guest crate's [`Host`] trait and
//! its types (in the component, the WIT imports; natively, test hosts).

pub use extension_guest::host::*;

/// The binding the manifest declares for the analytics provider.
pub const PROVIDER_BINDING: &str = "provider";
