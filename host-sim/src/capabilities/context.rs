//! The invocation context and the guest log. Not capabilities an operator
//! approves: every extension gets them. Both count against the host-call
//! budget; the context holds no secret, and every log line is redacted
//! against the project's binding secrets before it reaches the host log.

use crate::bindings::platform::extension::context::{self, Invocation, ProjectSettings};
use crate::bindings::platform::extension::log::{self, Level};
use crate::runtime::InvocationState;

/// Longest guest log line kept.
const MAX_LOG_LINE: usize = 4096;

impl context::Host for InvocationState {
    fn current(&mut self) -> wasmtime::Result<Invocation> {
        self.charge_host_call()?;
        let scope = &self.scope;
        Ok(Invocation {
            project_id: scope.project_id.clone(),
            request_id: scope.request_id.clone(),
            action: scope.action.clone(),
            settings: ProjectSettings {
                provider_origin: scope.provider_origin.clone(),
                tracking_origin: scope.settings.tracking_origin.clone(),
            },
        })
    }
}

impl log::Host for InvocationState {
    fn write(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        self.charge_host_call()?;
        let mut message = self.redact(message);
        if message.len() > MAX_LOG_LINE {
            let mut cut = MAX_LOG_LINE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let scope = &self.scope;
        let (request_id, extension, project) =
            (&scope.request_id, &scope.extension_id, &scope.project_id);
        match level {
            Level::Debug => {
                tracing::debug!(target: "host_sim::guest", %request_id, %extension, %project, "{message}")
            }
            Level::Info => {
                tracing::info!(target: "host_sim::guest", %request_id, %extension, %project, "{message}")
            }
            Level::Warn => {
                tracing::warn!(target: "host_sim::guest", %request_id, %extension, %project, "{message}")
            }
            Level::Error => {
                tracing::error!(target: "host_sim::guest", %request_id, %extension, %project, "{message}")
            }
        }
        Ok(())
    }
}
