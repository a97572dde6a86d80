//! host-sim: a wasmtime host that plays the platform's extension core.
//!
//! The modules form layers; a module uses only modules of layers below its
//! own (`cargo xtask layers` checks it, see `ARCHITECTURE.md`):
//!
//! 1. leaf types: [`error`], [`limits`], [`secret`], [`spec`], the WIT
//!    bindings, and [`metrics`] (the names and recording functions of the
//!    Prometheus metrics);
//! 2. [`state`]: the SQLite operator state, split by subject;
//! 3. [`capabilities`]: one module per host interface, each owning its
//!    per-invocation context and its one enforcing function;
//! 4. [`sandbox`]: engine, epoch ticker, linker, store data;
//! 5. [`pool`] (compiled releases, `InstancePre`s, stores and their
//!    housekeeping), [`verify`] (release verification) and [`tracking`]
//!    (a tracking domain's hostname rules, challenge and DNS checks);
//! 6. [`Host`]: the facade for operators ([`Host::install_release`],
//!    [`Host::grant`], …) and for every surface ([`Host::invoke`]). It is
//!    `Send + Sync`; share it with `Arc<Host>` and call [`Host::invoke`]
//!    from blocking tasks;
//! 7. [`serve`]: the HTTP surfaces (API, MCP, console); the only place
//!    that knows HTTP status codes; [`testing`], the in-process test
//!    host for an extension's own tests; and [`dev`], the dev loop of
//!    `host-sim dev`.

mod bindings;
pub mod capabilities;
pub mod dev;
pub mod error;
mod host;
pub mod limits;
pub mod metrics;
pub mod pool;
pub mod sandbox;
pub mod secret;
pub mod serve;
pub mod spec;
pub mod state;
pub mod testing;
pub mod tracking;
pub mod verify;

pub use error::{InvokeError, Limit};
pub use host::{
    Caller, CertificateState, DEVELOPMENT_MARKER, EdgeRemoval, Host, HostConfig, HostError,
    InvalidInput, Invocation, InvokeRequest, IssuedToken, MAX_SESSION_TTL, PanelSession,
    PoolGauges, TrackingError, TrackingRecords,
};
pub use limits::SandboxLimits;
pub use pool::{InstantiationSamples, SandboxStats};
pub use sandbox::EpochTicker;
pub use secret::Secret;
pub use spec::ActionInfo;
pub use state::{AuthStyle, TokenAccess};
pub use verify::{InstallError, ReleaseSummary, SUPPORTED_WIT_VERSIONS};
