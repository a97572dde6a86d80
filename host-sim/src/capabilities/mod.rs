//! Host capabilities, one module each, built like wasmtime-wasi's
//! interfaces and Spin's factors: each module owns its per-invocation
//! context (`*Ctx`), a view trait the store data implements to hand that
//! context out, its linker registration (`add_to_linker`), the WIT host
//! implementation, and the one function that enforces it (`authorize`).
//!
//! | module | interface | enforced in |
//! |---|---|---|
//! | [`context`] | `platform:extension/context` | every extension gets it |
//! | [`log`] | `platform:extension/log` | every extension gets it (redacted) |
//! | [`documents`] | `platform:extension/documents` | [`documents::authorize`] |
//! | [`http`] | `platform:extension/http-binding` | [`http::authorize`] |
//!
//! What every host call goes through first (the host-call budget, the
//! grant and approvals as they are at the call, the project's secrets for
//! redaction) is [`checks::CallChecks`], which the capabilities share. A
//! capability knows nothing of the sandbox or the instance pool: work the
//! embedder wants done while a guest waits on the network comes in through
//! a trait the capability defines ([`http::BindingWait`]).

pub mod checks;
pub mod context;
pub mod documents;
pub mod http;
pub mod log;

use std::sync::Arc;
use std::time::Instant;

use crate::spec::ExtensionSpec;

/// Who and what an invocation is for; fixed by the host before the guest
/// runs. Holds no secret.
#[derive(Debug, Clone)]
pub struct InvocationScope {
    pub extension_id: String,
    pub project_id: String,
    pub request_id: String,
    pub action: String,
    pub release_digest: String,
    pub spec: Arc<ExtensionSpec>,
    /// Wall-clock end of the invocation (binding timeouts never exceed it).
    pub deadline: Instant,
}

#[cfg(test)]
pub(crate) mod testing;
