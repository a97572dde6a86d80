//! The guest log (`platform:extension/log`). Every extension gets it; each
//! line counts against the host-call budget, is redacted of the project's
//! binding secrets and cut to [`MAX_LOG_LINE`] bytes before it reaches the
//! host log (target `host_sim::guest`).

use wasmtime::component::{HasData, Linker};

use super::checks::CallChecks;
use crate::bindings::platform::extension::log::{self, Level};

/// Longest guest log line kept.
pub const MAX_LOG_LINE: usize = 4096;

/// The log has no state of its own: it writes through the checks.
pub struct LogCtxView<'a> {
    pub checks: &'a mut CallChecks,
}

/// Store data that can lend the log capability its parts.
pub trait LogView: Send {
    fn log(&mut self) -> LogCtxView<'_>;
}

struct HasLog;

impl HasData for HasLog {
    type Data<'a> = LogCtxView<'a>;
}

/// Adds `platform:extension/log` to `linker`.
pub fn add_to_linker<T: LogView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    log::add_to_linker::<T, HasLog>(linker, T::log)
}

/// The line as it goes to the host log: redacted, at most [`MAX_LOG_LINE`]
/// bytes (cut on a character boundary, marked with `…`).
pub fn line(checks: &mut CallChecks, message: String) -> String {
    let mut message = checks.redact(message);
    crate::limits::cut_with_ellipsis(&mut message, MAX_LOG_LINE);
    message
}

impl log::Host for LogCtxView<'_> {
    fn write(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        self.checks.charge_host_call()?;
        let message = line(self.checks, message);
        let name = match level {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        };
        self.checks.record_guest_log(name, &message);
        let scope = self.checks.scope();
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

#[cfg(test)]
mod tests {
    use super::super::testing::{Fixture, SECRET};
    use super::*;

    #[test]
    fn a_line_is_redacted_and_cut_on_a_character_boundary() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        assert_eq!(
            line(&mut checks, format!("token={SECRET}")),
            "token=[redacted]"
        );
        let long = "é".repeat(MAX_LOG_LINE);
        let cut = line(&mut checks, long);
        assert!(cut.len() <= MAX_LOG_LINE + '…'.len_utf8());
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn every_line_counts_against_the_host_call_budget() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks_with_budget(1);
        let mut view = LogCtxView {
            checks: &mut checks,
        };
        use log::Host as _;
        view.write(Level::Info, "one".into()).unwrap();
        let trap = view.write(Level::Info, "two".into()).unwrap_err();
        let limit = trap.downcast_ref::<crate::error::LimitTrap>().unwrap();
        assert_eq!(limit.limit, crate::error::Limit::HostCalls);
    }

    #[test]
    fn a_store_prepared_before_its_invocation_still_redacts() {
        let fixture = Fixture::new();
        let mut checks = fixture.unseeded_checks();
        assert_eq!(
            line(&mut checks, format!("{SECRET}{SECRET}")),
            "[redacted][redacted]"
        );
    }

    #[test]
    fn a_line_at_the_limit_is_kept_whole() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        let exact = "x".repeat(MAX_LOG_LINE);
        assert_eq!(line(&mut checks, exact.clone()), exact);
        let over = "x".repeat(MAX_LOG_LINE + 1);
        assert_eq!(line(&mut checks, over), format!("{exact}…"));
    }
}
