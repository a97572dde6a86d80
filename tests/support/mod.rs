#![allow(dead_code)] // Shared by several test binaries; each uses a part of it.

//! The operator's side of the analytics flows, shared by the flow tests and
//! the stats benchmark: the verified release installed into a fresh host
//! state directory, approved, granted to a project whose `provider` binding
//! points at an Umami fake on loopback, and a customer token for the project.

pub mod oauth;
pub mod wrk;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use host_sim::{AuthStyle, Caller, Host, HostConfig, Invocation, InvokeRequest, Secret};
use serde_json::Value;
use umami_fake::{FakeConfig, FakeHandle, UmamiFake};

/// The number in the environment variable `name`, or `default` (the
/// benchmarks' settings).
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

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

    /// Provisions the project's website: its configuration, or the test
    /// fails with the invocation's answer.
    pub fn provision(&self, name: &str, domain: &str) -> Value {
        let invocation = self.invoke(
            "analytics.provision",
            serde_json::json!({"name": name, "domain": domain}),
        );
        invocation
            .result
            .clone()
            .unwrap_or_else(|_| panic!("provisioning {domain} failed: {}", invocation.to_json()))
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

/// A provisioned website with a week of recorded traffic (the benchmarks'
/// data): 40 page views a day from 8 visitors, over the seven UTC days
/// ending with today.
pub struct Week {
    pub website: uuid::Uuid,
    /// Unix ms, inclusive.
    pub start: i64,
    /// Unix ms, exclusive: the end of today (UTC).
    pub end: i64,
}

impl Platform {
    /// Provisions `domain` for the project and records a week of traffic.
    pub fn provision_with_week(&self, name: &str, domain: &str) -> Week {
        const DAY_MS: i64 = 86_400_000;
        let website: uuid::Uuid = self.provision(name, domain)["website_id"]
            .as_str()
            .expect("a website id")
            .parse()
            .expect("a UUID");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as i64;
        let end = now - now % DAY_MS + DAY_MS;
        let start = end - 7 * DAY_MS;
        for day in 0..7 {
            for view in 0..40 {
                self.fake
                    .record_event(
                        website,
                        "/",
                        start + day * DAY_MS + view * 1_800_000,
                        &format!("Mozilla/5.0 (visitor {})", view % 8),
                        "198.51.100.1",
                    )
                    .expect("the website exists");
            }
        }
        Week {
            website,
            start,
            end,
        }
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

/// `host-sim serve`'s router for a platform's host, on a free loopback port,
/// in a runtime of its own; stopped when dropped.
pub struct Served {
    /// `http://127.0.0.1:<port>`
    pub base_url: String,
    /// `127.0.0.1:<port>` of the operator listener (`/metrics`), when on.
    pub metrics: Option<String>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Platform {
    pub fn serve(&self) -> Served {
        serve_host(self.host.clone(), false)
    }

    /// As `serve --metrics-listen`: the Prometheus recorder installed in
    /// this process (for good: every host of the process records from now
    /// on) and `/metrics` on an operator listener of its own.
    pub fn serve_with_metrics(&self) -> Served {
        serve_host(self.host.clone(), true)
    }

    /// The extension API base of the platform's project.
    pub fn api_base(&self, served: &Served) -> String {
        format!(
            "{}/v1/plugins/{EXTENSION}/projects/{}/api",
            served.base_url, self.project
        )
    }
}

/// Serves every surface of `host` on a free loopback port, and with
/// `metrics` the operator listener too.
pub fn serve_host(host: Arc<Host>, metrics: bool) -> Served {
    serve_host_with(host, metrics, host_sim::serve::ServeOptions::default())
}

/// [`serve_host`] with the server's options.
pub fn serve_host_with(
    host: Arc<Host>,
    metrics: bool,
    options: host_sim::serve::ServeOptions,
) -> Served {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready, address) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the server");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("a loopback port");
            let operator = if metrics {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("a loopback port for metrics");
                let address = listener.local_addr().expect("the bound address");
                host_sim::serve::metrics::spawn(listener, host.clone());
                Some(address.to_string())
            } else {
                None
            };
            ready
                .send((listener.local_addr().expect("the bound address"), operator))
                .expect("the test waits for the address");
            let router = host_sim::serve::router(host, options);
            host_sim::serve::run(listener, router, async {
                let _ = stopped.await;
            })
            .await
            .expect("the server runs");
        });
    });
    let (address, metrics) = address.recv().expect("the server starts");
    Served {
        base_url: format!("http://{address}"),
        metrics,
        stop: Some(stop),
        thread: Some(thread),
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
