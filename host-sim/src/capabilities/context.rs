//! The invocation context (`platform:extension/context`): project id,
//! request id, action and the project's public settings. Not a capability
//! an operator approves: every extension gets it. It counts against the
//! host-call budget and holds no secret.

use wasmtime::component::{HasData, Linker};

use super::checks::CallChecks;
use crate::bindings::platform::extension::context::{self, Invocation, ProjectSettings};
use crate::state;

/// What the context reports besides the scope: the project's public
/// settings, set when an invocation takes its store.
#[derive(Debug, Clone, Default)]
pub struct ContextCtx {
    pub settings: state::ProjectSettings,
    /// Public origin of the project's provider binding, if bound.
    pub provider_origin: Option<String>,
}

/// The context and the checks, borrowed from the store's data.
pub struct ContextCtxView<'a> {
    pub ctx: &'a ContextCtx,
    pub checks: &'a mut CallChecks,
}

/// Store data that can lend the context capability its parts.
pub trait ContextView: Send {
    fn context(&mut self) -> ContextCtxView<'_>;
}

struct HasContext;

impl HasData for HasContext {
    type Data<'a> = ContextCtxView<'a>;
}

/// Adds `platform:extension/context` to `linker`.
pub fn add_to_linker<T: ContextView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    context::add_to_linker::<T, HasContext>(linker, T::context)
}

/// The invocation as the guest sees it.
pub fn current(view: ContextCtxView<'_>) -> wasmtime::Result<Invocation> {
    view.checks.charge_host_call()?;
    let scope = view.checks.scope();
    Ok(Invocation {
        project_id: scope.project_id.clone(),
        request_id: scope.request_id.clone(),
        action: scope.action.clone(),
        settings: ProjectSettings {
            provider_origin: view.ctx.provider_origin.clone(),
            tracking_origin: view.ctx.settings.tracking_origin.clone(),
        },
    })
}

impl context::Host for ContextCtxView<'_> {
    fn current(&mut self) -> wasmtime::Result<Invocation> {
        current(ContextCtxView {
            ctx: self.ctx,
            checks: self.checks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Fixture, PROJECT};
    use super::*;

    #[test]
    fn the_context_reports_scope_and_public_settings_and_costs_a_host_call() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks_with_budget(1);
        let ctx = ContextCtx {
            settings: state::ProjectSettings {
                tracking_origin: Some("https://t.example".into()),
            },
            provider_origin: Some("https://provider.example".into()),
        };
        let invocation = current(ContextCtxView {
            ctx: &ctx,
            checks: &mut checks,
        })
        .unwrap();
        assert_eq!(invocation.project_id, PROJECT);
        assert_eq!(invocation.request_id, "request-1");
        assert_eq!(
            invocation.settings.tracking_origin.as_deref(),
            Some("https://t.example")
        );
        let over = current(ContextCtxView {
            ctx: &ctx,
            checks: &mut checks,
        });
        assert!(over.is_err(), "the second call is over the budget of one");
    }

    #[test]
    fn a_project_without_settings_or_provider_reports_none() {
        let fixture = Fixture::unbound();
        let mut checks = fixture.checks();
        let ctx = ContextCtx::default();
        let invocation = current(ContextCtxView {
            ctx: &ctx,
            checks: &mut checks,
        })
        .unwrap();
        assert_eq!(invocation.settings.provider_origin, None);
        assert_eq!(invocation.settings.tracking_origin, None);
        assert_eq!(invocation.action, "test");
    }

    #[test]
    fn a_prepared_store_reports_the_scope_it_was_given_when_taken() {
        let fixture = Fixture::new();
        let mut checks = fixture.unseeded_checks();
        let taken = std::sync::Arc::new(crate::capabilities::InvocationScope {
            request_id: "request-2".into(),
            action: "docs.read_one".into(),
            ..(*fixture.scope(std::time::Instant::now())).clone()
        });
        checks.set_scope(taken);
        let invocation = current(ContextCtxView {
            ctx: &ContextCtx::default(),
            checks: &mut checks,
        })
        .unwrap();
        assert_eq!(invocation.request_id, "request-2");
        assert_eq!(invocation.action, "docs.read_one");
    }

    #[test]
    fn the_context_carries_the_provider_origin_never_its_secret() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        let ctx = ContextCtx {
            provider_origin: Some("http://127.0.0.1:9".into()),
            ..ContextCtx::default()
        };
        let invocation = current(ContextCtxView {
            ctx: &ctx,
            checks: &mut checks,
        })
        .unwrap();
        let shown = format!("{invocation:?}");
        assert!(!shown.contains(super::super::testing::SECRET), "{shown}");
    }
}
