//! [`CallChecks`]: what every host call of one invocation goes through,
//! whichever capability it is for: the host-call budget, the grant and the
//! capability's approval (and a binding) as they are at the call, and the
//! project's secrets that guest-visible text is redacted of.
//!
//! "As they are at the call" means against the state's version at that
//! call: what an earlier host call (or the invocation's snapshot) read is
//! reused only while no commit moved the version since; any commit (a
//! revoke, an approval change, a binding set by another process) empties
//! it and the next check reads the database again.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::InvocationScope;
use crate::error::{Limit, LimitTrap};
use crate::secret::{Secret, redact_str};
use crate::state::{Binding, CapabilityCheck, State, StateError, StateVersion};

/// The per-invocation guard shared by the capabilities.
pub struct CallChecks {
    scope: Arc<InvocationScope>,
    state: Arc<State>,
    max_host_calls: u32,
    host_calls: u32,
    /// A host call found the grant revoked; the invocation's output is void.
    grant_revoked: bool,
    /// The project's binding secrets (`None`: not read yet).
    secrets: Option<Vec<Secret>>,
    cache: Reused,
    /// The last host call this invocation's guest was refused, as the host
    /// log has it (binding, method, path and the manifest rule that would
    /// allow it): added to the guest's error for developers.
    last_refusal: Option<String>,
    /// A refused call was the extension's doing ([`CallChecks::note_refusal`]).
    extension_fault: bool,
    /// The guest's log lines of this invocation, when a development host
    /// keeps them for its developer view (`None`: not kept).
    guest_log: Option<Vec<GuestLogLine>>,
}

/// One line the guest wrote to its log, as the host logged it (redacted,
/// cut to the longest line kept).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GuestLogLine {
    pub level: &'static str,
    pub message: String,
}

/// At most this many guest log lines are kept per invocation.
const MAX_KEPT_LOG_LINES: usize = 100;

/// What the call-time checks of this invocation read, valid while the
/// state's version holds.
#[derive(Default)]
struct Reused {
    version: Option<StateVersion>,
    capabilities: HashMap<String, CapabilityCheck>,
    bindings: HashMap<String, Option<Arc<Binding>>>,
}

/// The state as a host call sees it, now.
#[derive(Debug, Clone)]
pub struct CallTime {
    pub granted: bool,
    pub approved: bool,
    /// The project's binding, when the call asked for one.
    pub binding: Option<Arc<Binding>>,
}

impl CallChecks {
    pub fn new(scope: Arc<InvocationScope>, state: Arc<State>, max_host_calls: u32) -> Self {
        Self {
            scope,
            state,
            max_host_calls,
            host_calls: 0,
            grant_revoked: false,
            secrets: None,
            cache: Reused::default(),
            last_refusal: None,
            extension_fault: false,
            guest_log: None,
        }
    }

    pub fn scope(&self) -> &InvocationScope {
        &self.scope
    }

    /// The shared scope, for a call that outlives a borrow of `self`.
    pub fn scope_arc(&self) -> Arc<InvocationScope> {
        self.scope.clone()
    }

    /// Gives a store prepared ahead of its invocation the invocation's scope.
    pub fn set_scope(&mut self, scope: Arc<InvocationScope>) {
        self.scope = scope;
    }

    /// Starts the call-time checks from the invocation's snapshot: while
    /// the state stays at the snapshot's version, a host call needs no
    /// query. The snapshot's binding secrets are what output is redacted of.
    pub fn seed(
        &mut self,
        version: Option<StateVersion>,
        granted: bool,
        approved: &BTreeSet<String>,
        bindings: &[Binding],
    ) {
        self.cache = Reused {
            version,
            capabilities: approved
                .iter()
                .map(|capability| {
                    let check = CapabilityCheck {
                        granted,
                        approved: true,
                    };
                    (capability.clone(), check)
                })
                .collect(),
            bindings: bindings
                .iter()
                .map(|binding| (binding.name.clone(), Some(Arc::new(binding.clone()))))
                .collect(),
        };
        self.secrets = Some(bindings.iter().map(|b| b.secret.clone()).collect());
    }

    /// Counts one host call; past the budget the invocation ends (the error
    /// is the trap that ends it).
    pub fn charge_host_call(&mut self) -> wasmtime::Result<()> {
        self.host_calls += 1;
        if self.host_calls > self.max_host_calls {
            return Err(wasmtime::Error::new(LimitTrap {
                limit: Limit::HostCalls,
                message: format!(
                    "the extension exceeded its budget of {} host calls",
                    self.max_host_calls
                ),
            }));
        }
        Ok(())
    }

    /// The grant, the approval of `capability` and (with `binding`) the
    /// project's binding, as they are now: reused from earlier host calls
    /// of this invocation only if nothing was committed since.
    pub fn at_call_time(
        &mut self,
        capability: &str,
        binding: Option<&str>,
    ) -> Result<CallTime, StateError> {
        // Read before the data it guards; `None` (a commit under way)
        // reuses nothing.
        let version = self.state.version();
        if version.is_none() || self.cache.version != version {
            self.cache = Reused {
                version,
                ..Reused::default()
            };
        }
        let scope = &self.scope;
        let check = match self.cache.capabilities.get(capability) {
            Some(check) => *check,
            None => {
                let check = self.state.capability_check(
                    &scope.extension_id,
                    &scope.project_id,
                    &scope.release_digest,
                    capability,
                )?;
                self.cache
                    .capabilities
                    .insert(capability.to_string(), check);
                check
            }
        };
        let binding = match binding {
            None => None,
            Some(name) => match self.cache.bindings.get(name) {
                Some(bound) => bound.clone(),
                None => {
                    let bound = self.state.binding(&scope.project_id, name)?.map(Arc::new);
                    if let (Some(secrets), Some(binding)) = (&mut self.secrets, &bound) {
                        // A secret set mid-invocation is redacted too.
                        secrets.push(binding.secret.clone());
                    }
                    self.cache.bindings.insert(name.to_string(), bound.clone());
                    bound
                }
            },
        };
        Ok(CallTime {
            granted: check.granted,
            approved: check.approved,
            binding,
        })
    }

    /// Keeps this invocation's guest log lines (see [`CallChecks::take_guest_log`]).
    pub fn keep_guest_log(&mut self) {
        self.guest_log = Some(Vec::new());
    }

    /// Records a guest log line if they are kept (the first
    /// [`MAX_KEPT_LOG_LINES`]).
    pub fn record_guest_log(&mut self, level: &'static str, message: &str) {
        if let Some(lines) = &mut self.guest_log
            && lines.len() < MAX_KEPT_LOG_LINES
        {
            lines.push(GuestLogLine {
                level,
                message: message.to_owned(),
            });
        }
    }

    /// The kept guest log lines (empty when none were kept).
    pub fn take_guest_log(&mut self) -> Vec<GuestLogLine> {
        self.guest_log.take().unwrap_or_default()
    }

    /// Notes a refused host call (see [`CallChecks::last_refusal`]);
    /// `by_extension` when the extension's code or manifest caused it
    /// (see [`CallChecks::extension_fault`]).
    pub fn note_refusal(&mut self, message: &str, by_extension: bool) {
        self.last_refusal = Some(message.to_owned());
        self.extension_fault |= by_extension;
    }

    /// Whether the host refused a call of this invocation because of the
    /// extension itself: an error it answers after that is its own fault,
    /// not the caller's.
    pub fn extension_fault(&self) -> bool {
        self.extension_fault
    }

    /// The host's words for the last host call it refused in this
    /// invocation: what a development host adds to the guest's error.
    pub fn last_refusal(&self) -> Option<&str> {
        self.last_refusal.as_deref()
    }

    /// A host call found the grant revoked: the whole invocation is refused.
    pub fn revoke(&mut self) {
        self.grant_revoked = true;
    }

    pub fn grant_revoked(&self) -> bool {
        self.grant_revoked
    }

    /// `text` with every binding secret of the project redacted. If the
    /// secrets cannot be read, the text is withheld (fail closed).
    pub fn redact(&mut self, text: String) -> String {
        if self.secrets.is_none() {
            match self.state.project_secrets(&self.scope.project_id) {
                Ok(secrets) => self.secrets = Some(secrets),
                Err(e) => {
                    tracing::error!(request_id = %self.scope.request_id, error = %e, "cannot read binding secrets for redaction");
                    return "[withheld: the host could not redact this text]".into();
                }
            }
        }
        redact_str(text, self.secrets.as_deref().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{EXTENSION, Fixture, PROJECT};
    use super::*;

    #[test]
    fn the_budget_ends_the_invocation_with_a_limit_trap() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks_with_budget(2);
        checks.charge_host_call().unwrap();
        checks.charge_host_call().unwrap();
        let trap = checks.charge_host_call().unwrap_err();
        let limit = trap.downcast_ref::<LimitTrap>().unwrap();
        assert_eq!(limit.limit, Limit::HostCalls);
    }

    #[test]
    fn a_seeded_check_is_reused_until_a_commit_moves_the_version() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        assert!(checks.at_call_time("documents", None).unwrap().granted);
        fixture.state.revoke(EXTENSION, PROJECT).unwrap();
        let now = checks.at_call_time("documents", None).unwrap();
        assert!(!now.granted, "the revoke is seen at the next call");
        assert!(now.approved);
    }

    #[test]
    fn a_secret_set_mid_invocation_is_redacted_too() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        fixture.bind("second", "late-secret");
        let bound = checks.at_call_time("http:second", Some("second")).unwrap();
        assert!(bound.binding.is_some());
        assert_eq!(
            checks.redact("x late-secret y provider-secret".into()),
            "x [redacted] y [redacted]"
        );
    }

    #[test]
    fn unseeded_checks_read_the_grant_approvals_and_secrets_from_the_state() {
        let fixture = Fixture::new();
        let mut checks = fixture.unseeded_checks();
        let now = checks
            .at_call_time("http:provider", Some("provider"))
            .unwrap();
        assert!(now.granted && now.approved);
        assert_eq!(now.binding.unwrap().origin, "http://127.0.0.1:9");
        let undeclared = checks.at_call_time("http:other", None).unwrap();
        assert!(
            !undeclared.approved,
            "only declared capabilities are approved"
        );
        assert_eq!(
            checks.redact("a provider-secret b".into()),
            "a [redacted] b",
            "the project's secrets are read before the first redaction"
        );
    }

    #[test]
    fn a_revoke_by_another_process_is_seen_at_the_next_call() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        assert!(checks.at_call_time("documents", None).unwrap().granted);
        fixture.other_process().revoke(EXTENSION, PROJECT).unwrap();
        assert!(!checks.at_call_time("documents", None).unwrap().granted);
    }
}
