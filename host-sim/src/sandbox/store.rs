//! [`StoreData`]: the data of one store. It holds each capability's
//! context and lends it out through the capability's view trait, the WASI
//! context (no preopens, environment, arguments or network; stdout and
//! stderr captured), and the memory limiter.

use std::sync::{Arc, Weak};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::capabilities::InvocationScope;
use crate::capabilities::checks::CallChecks;
use crate::capabilities::context::{ContextCtx, ContextCtxView, ContextView};
use crate::capabilities::documents::{DocumentsCtx, DocumentsCtxView, DocumentsView};
use crate::capabilities::http::{BindingClient, BindingWait, HttpCtx, HttpCtxView, HttpView};
use crate::capabilities::log::{LogCtxView, LogView};
use crate::error::{Limit, LimitTrap};
use crate::limits::SandboxLimits;
use crate::state::State;

/// The data of one store: WASI, the capabilities' contexts, the
/// invocation's checks and what the limiter observed.
pub struct StoreData {
    wasi: WasiCtx,
    table: ResourceTable,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    memory_limit: usize,
    /// The largest linear memory the guest asked for (0: it never grew).
    memory_grown_to: usize,
    checks: CallChecks,
    context: ContextCtx,
    documents: DocumentsCtx,
    http: HttpCtx,
}

impl StoreData {
    /// The data of a fresh store for `scope`.
    pub fn new(
        scope: Arc<InvocationScope>,
        state: Arc<State>,
        client: BindingClient,
        limits: &SandboxLimits,
    ) -> Self {
        let stdout = MemoryOutputPipe::new(limits.max_guest_output_bytes);
        let stderr = MemoryOutputPipe::new(limits.max_guest_output_bytes);
        // No preopens, no environment, no arguments, no network.
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            stdout,
            stderr,
            memory_limit: limits.memory_bytes,
            memory_grown_to: 0,
            checks: CallChecks::new(scope, state.clone(), limits.max_host_calls),
            context: ContextCtx::default(),
            documents: DocumentsCtx::new(state, limits.max_document_bytes),
            http: HttpCtx::new(
                client,
                limits.max_response_bytes,
                limits.max_total_response_bytes,
            ),
        }
    }

    /// Gives the store its invocation (a store may be prepared before it
    /// has one): the scope, what the context reports, and the work done
    /// while its guest waits on a binding.
    pub fn begin(
        &mut self,
        scope: Arc<InvocationScope>,
        context: ContextCtx,
        wait: Weak<dyn BindingWait>,
    ) {
        self.checks.set_scope(scope);
        self.context = context;
        self.http.set_wait(wait);
    }

    /// The invocation's checks (seeded from its snapshot; redaction).
    pub fn checks(&mut self) -> &mut CallChecks {
        &mut self.checks
    }

    /// The largest linear memory the guest asked for (0: it never grew).
    pub fn memory_grown_to(&self) -> usize {
        self.memory_grown_to
    }

    /// Guest stdout/stderr, redacted, into the host log.
    pub fn flush_guest_output(&mut self) {
        for (stream, pipe) in [
            ("stdout", self.stdout.clone()),
            ("stderr", self.stderr.clone()),
        ] {
            let bytes = pipe.contents();
            if bytes.is_empty() {
                continue;
            }
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let text = self.checks.redact(text);
            let scope = self.checks.scope();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                tracing::info!(
                    target: "host_sim::guest",
                    request_id = %scope.request_id,
                    extension = %scope.extension_id,
                    project = %scope.project_id,
                    stream,
                    "{line}"
                );
            }
        }
    }
}

impl WasiView for StoreData {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl ContextView for StoreData {
    fn context(&mut self) -> ContextCtxView<'_> {
        ContextCtxView {
            ctx: &self.context,
            checks: &mut self.checks,
        }
    }
}

impl LogView for StoreData {
    fn log(&mut self) -> LogCtxView<'_> {
        LogCtxView {
            checks: &mut self.checks,
        }
    }
}

impl DocumentsView for StoreData {
    fn documents(&mut self) -> DocumentsCtxView<'_> {
        DocumentsCtxView {
            ctx: &mut self.documents,
            checks: &mut self.checks,
        }
    }
}

impl HttpView for StoreData {
    fn http(&mut self) -> HttpCtxView<'_> {
        HttpCtxView {
            ctx: &mut self.http,
            checks: &mut self.checks,
        }
    }
}

impl ResourceLimiter for StoreData {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.memory_grown_to = self.memory_grown_to.max(desired);
        if desired > self.memory_limit {
            return Err(wasmtime::Error::new(LimitTrap {
                limit: Limit::Memory,
                message: format!(
                    "the extension exceeded its memory limit of {} MiB",
                    self.memory_limit >> 20
                ),
            }));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}
