//! The operator's side of the analytics flows, shared by the flow tests and
//! the stats benchmark: the verified release installed into a fresh host
//! state directory, approved, granted to a project whose `provider` binding
//! points at an Umami fake on loopback, and a customer token for the project.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use host_sim::{AuthStyle, Caller, Host, HostConfig, Invocation, InvokeRequest, Secret};
use serde_json::Value;
use umami_fake::{FakeConfig, FakeHandle, UmamiFake};

/// The extension id of the managed-analytics release.
pub const EXTENSION: &str = "managed-analytics";

/// One host with the release installed for one project, and its provider.
pub struct Platform {
    pub fake: FakeHandle,
    pub host: Arc<Host>,
    pub project: String,
    /// The provider credential the operator put into the binding.
    pub secret: String,
    /// The customer's bearer token for `project`.
    pub token: String,
    /// Holds the operator state; removed when the platform is dropped.
    _state_dir: tempfile::TempDir,
}

impl Platform {
    /// The operator's steps: trust the publisher key, install the verified
    /// release, approve every capability it declares, grant it to `project`,
    /// bind `provider` to the fake with `secret`, issue a customer token.
    pub fn start(project: &str, secret: &str, binding_timeout: Duration) -> Self {
        let fake = UmamiFake::start(FakeConfig::new(secret)).expect("the Umami fake starts");
        let state_dir = tempfile::tempdir().expect("a temporary state directory");
        trust_publishers(&state_dir.path().join("trusted-publishers"));
        let host = Host::open(HostConfig::new(state_dir.path())).expect("the host opens");

        let installed = host
            .install_release(&workspace_tests::release_dir(), &mut |_| {})
            .expect("the signed release verifies and installs");
        assert_eq!(installed.extension_id, EXTENSION);
        let approved = host.approve(EXTENSION, &[]).expect("approval");
        assert_eq!(
            approved.iter().cloned().collect::<Vec<_>>(),
            installed.capabilities
        );
        host.grant(EXTENSION, project).expect("grant");
        host.set_binding(
            project,
            "provider",
            &fake.base_url(),
            Secret::new(secret),
            AuthStyle::Bearer,
            binding_timeout,
        )
        .expect("the provider binding");
        let token = host
            .issue_token("customer", &[project.to_owned()], Duration::from_secs(3600))
            .expect("a customer token")
            .token;
        Self {
            fake,
            host: Arc::new(host),
            project: project.to_owned(),
            secret: secret.to_owned(),
            token,
            _state_dir: state_dir,
        }
    }

    /// Runs an action for the customer through the host's one invocation
    /// function, at the current generation.
    pub fn invoke(&self, action: &str, input: Value) -> Invocation {
        self.host.invoke(
            &Caller::bearer(&self.token),
            &InvokeRequest {
                extension: EXTENSION.to_owned(),
                project: self.project.clone(),
                action: action.to_owned(),
                input,
                generation: None,
            },
        )
    }
}

/// Copies the publisher keys `cargo xtask release` wrote into a host's
/// trust directory, as an operator does.
fn trust_publishers(trust_dir: &Path) {
    std::fs::create_dir_all(trust_dir).expect("trust directory");
    let keys = workspace_tests::trusted_keys_dir();
    for entry in std::fs::read_dir(&keys).expect("the trusted publishers directory") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "pub") {
            std::fs::copy(&path, trust_dir.join(path.file_name().unwrap()))
                .expect("copy a publisher key");
        }
    }
}
