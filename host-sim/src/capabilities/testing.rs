//! A capability's test bed without wasm (in the manner of Spin's
//! `factor_test.rs`): a temporary operator state with the test extension's
//! release installed, approved, granted to one project and bound to a
//! provider origin, and the per-invocation checks seeded the way an
//! invocation seeds them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::InvocationScope;
use super::checks::CallChecks;
use crate::secret::Secret;
use crate::spec::ExtensionSpec;
use crate::state::{AuthStyle, Binding, DB_FILE, NewRelease, State};

pub const EXTENSION: &str = "test-extension";
pub const PROJECT: &str = "p1";
pub const DIGEST: &str = "digest-1";
pub const SECRET: &str = "provider-secret";
const TOKEN: &str = "hst_fixture";
const MANIFEST: &str = include_str!("../../test-extension/manifest.toml");

pub struct Fixture {
    dir: tempfile::TempDir,
    pub state: Arc<State>,
    pub spec: Arc<ExtensionSpec>,
}

impl Fixture {
    /// Installed, every capability approved, granted to [`PROJECT`], whose
    /// `provider` binding points at a closed port with [`SECRET`].
    pub fn new() -> Self {
        let fixture = Self::unbound();
        fixture.bind("provider", SECRET);
        fixture
    }

    /// As [`Self::new`], without the `provider` binding.
    pub fn unbound() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = Arc::new(crate::state::tests::open_at(&dir.path().join(DB_FILE)));
        let manifest = extension_release::Manifest::from_toml(MANIFEST).unwrap();
        let spec = Arc::new(ExtensionSpec::from_manifest(&manifest).unwrap());
        state
            .store_release(
                &NewRelease {
                    extension_id: EXTENSION,
                    version: "0.1.0",
                    digest: DIGEST,
                    manifest: MANIFEST,
                    key_id: "test",
                    files: &BTreeMap::new(),
                },
                false,
            )
            .unwrap();
        let declared: Vec<String> = manifest.capability_ids().into_iter().collect();
        state
            .set_approval(EXTENSION, DIGEST, &declared, true)
            .unwrap();
        state.grant(EXTENSION, PROJECT).unwrap();
        let expires_at = crate::state::now_secs() + 600;
        state
            .store_token(TOKEN, "u", &[PROJECT.into()], expires_at)
            .unwrap();
        Self { dir, state, spec }
    }

    /// A second handle on the same state file: another process (the
    /// operator's CLI next to a running host).
    pub fn other_process(&self) -> State {
        crate::state::tests::open_at(&self.dir.path().join(DB_FILE))
    }

    pub fn bind(&self, name: &str, secret: &str) {
        self.state
            .set_binding(&Binding {
                project_id: PROJECT.into(),
                name: name.into(),
                origin: "http://127.0.0.1:9".into(),
                secret: Secret::new(secret),
                auth_style: AuthStyle::Bearer,
                timeout: Duration::from_millis(500),
            })
            .unwrap();
    }

    pub fn scope(&self, deadline: Instant) -> Arc<InvocationScope> {
        Arc::new(InvocationScope {
            extension_id: EXTENSION.into(),
            project_id: PROJECT.into(),
            request_id: "request-1".into(),
            action: "test".into(),
            release_digest: DIGEST.into(),
            spec: self.spec.clone(),
            deadline,
        })
    }

    /// Checks seeded from the invocation snapshot, with a budget of 100.
    pub fn checks(&self) -> CallChecks {
        self.checks_with_budget(100)
    }

    pub fn checks_with_budget(&self, budget: u32) -> CallChecks {
        self.checks_until(budget, Instant::now() + Duration::from_secs(5))
    }

    /// Checks as a store prepared before its invocation has them: nothing
    /// seeded, so every check and the secrets are read from the state.
    pub fn unseeded_checks(&self) -> CallChecks {
        let deadline = Instant::now() + Duration::from_secs(5);
        CallChecks::new(self.scope(deadline), self.state.clone(), 100)
    }

    pub fn checks_until(&self, budget: u32, deadline: Instant) -> CallChecks {
        let snapshot = self
            .state
            .invocation_snapshot(TOKEN, EXTENSION, PROJECT)
            .unwrap();
        let mut checks = CallChecks::new(self.scope(deadline), self.state.clone(), budget);
        checks.seed(
            snapshot.version,
            snapshot.granted,
            &snapshot.approved,
            &snapshot.bindings,
        );
        checks
    }
}
