//! host-sim: a wasmtime host that plays the platform's extension core.
//!
//! - [`Host`] opens the operator state in a directory and is the one entry
//!   point for operators (install, approve, grant, bindings, settings,
//!   tokens) and for every surface ([`Host::invoke`]). It is `Send + Sync`;
//!   share it with `Arc<Host>` and call [`Host::invoke`] from blocking tasks.
//! - [`capabilities`]: one module per host capability; each has the one
//!   function that decides whether a guest's call may proceed.
//! - [`runtime`]: the sandbox (pooled engine, epoch ticker, limits).
//! - [`state`]: the SQLite operator state.
//! - [`error::InvokeError`]: the error of an invocation, with its code and
//!   HTTP status.

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "managed-extension",
        imports: { default: trappable },
    });
}

pub mod capabilities;
pub mod error;
mod host;
mod housekeeping;
mod install;
mod invoke;
pub mod runtime;
pub mod secret;
pub mod serve;
pub mod spec;
pub mod state;
mod surface;

pub use error::{InvokeError, Limit};
pub use host::{Host, HostConfig, HostError, IssuedToken};
pub use housekeeping::SandboxStats;
pub use install::{InstallError, ReleaseSummary, SUPPORTED_WIT_VERSIONS};
pub use invoke::{Caller, InstantiationSamples, Invocation, InvokeRequest};
pub use runtime::{EpochTicker, SandboxLimits};
pub use secret::Secret;
pub use spec::ActionInfo;
pub use state::{AuthStyle, TokenAccess};
pub use surface::{MAX_SESSION_TTL, PanelSession};
