//! Shared test fixtures: a host over a temporary state directory with a
//! trusted test publisher key, signed releases of the test extension, an
//! HTTP provider on loopback, and a captured host log.

#![allow(dead_code)]

pub mod guest;
pub mod nginx;
pub mod serve;
pub mod tls;
pub mod tracking;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use extension_release::{PublisherKey, write_release};
use host_sim::{
    AuthStyle, Caller, Host, HostConfig, Invocation, InvokeRequest, SandboxLimits, Secret,
};
use serde_json::Value;

pub const EXTENSION: &str = "test-extension";
pub const MANIFEST: &str = include_str!("../../test-extension/manifest.toml");

/// The test extension's component (see [`guest`]).
pub fn guest_component() -> Vec<u8> {
    guest::test_extension()
}

// ---- captured host log ---------------------------------------------------

/// Captures every log line of this test process: everything of the host
/// and of the HTTP client (whose `log` records are captured too); the
/// compiler's trace is left out.
pub fn capture_logs() {
    log_capture::capture(
        "info,host_sim=trace,reqwest=trace,hyper=trace,hyper_util=trace,rustls=trace",
    );
}

/// Everything logged so far in this test process.
pub fn logs() -> String {
    capture_logs();
    log_capture::captured()
}

// ---- host over a temporary state directory --------------------------------

pub struct TestEnv {
    pub dir: tempfile::TempDir,
    pub key: PublisherKey,
    pub host: Arc<Host>,
    pub limits: SandboxLimits,
    releases: AtomicUsize,
}

impl TestEnv {
    pub fn new() -> Self {
        Self::with_limits(test_limits())
    }

    pub fn with_limits(limits: SandboxLimits) -> Self {
        capture_logs();
        let dir = tempfile::tempdir().unwrap();
        let key = PublisherKey::generate();
        let trust = dir.path().join("state/trusted-publishers");
        std::fs::create_dir_all(&trust).unwrap();
        std::fs::write(
            trust.join("test.pub"),
            key.public().to_line("test publisher"),
        )
        .unwrap();
        let host = Arc::new(open_host(&dir.path().join("state"), &limits));
        Self {
            dir,
            key,
            host,
            limits,
            releases: AtomicUsize::new(0),
        }
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Drops the host and opens a new one over the same state directory.
    pub fn restart(&mut self) {
        let fresh = Arc::new(open_host(&self.state_dir(), &self.limits));
        self.host = fresh;
    }

    /// Writes a release signed with `key` into a fresh directory.
    pub fn release_signed_by(
        &self,
        key: &PublisherKey,
        manifest: &str,
        component: Vec<u8>,
    ) -> PathBuf {
        let n = self.releases.fetch_add(1, Ordering::SeqCst);
        let out = self.dir.path().join(format!("releases/{n}"));
        let mut files = BTreeMap::new();
        files.insert("extension.wasm".to_string(), component);
        write_release(manifest, &files, key, &out).unwrap();
        out
    }

    pub fn release(&self, manifest: &str, component: Vec<u8>) -> PathBuf {
        self.release_signed_by(&self.key, manifest, component)
    }

    /// Installs the test extension and approves every capability.
    pub fn install(&self) {
        let dir = self.release(MANIFEST, guest_component());
        self.host.install_release(&dir, &mut |_| {}).unwrap();
        self.host.approve(EXTENSION, &[]).unwrap();
    }

    /// Installs, approves, grants to `project`, and issues a token for it.
    pub fn ready(&self, project: &str) -> String {
        self.install();
        self.host.grant(EXTENSION, project).unwrap();
        self.token("alice", &[project])
    }

    pub fn token(&self, user: &str, projects: &[&str]) -> String {
        let projects: Vec<String> = projects.iter().map(|p| p.to_string()).collect();
        self.host
            .issue_token(user, &projects, Duration::from_secs(3600))
            .unwrap()
            .token
    }

    pub fn bind(&self, project: &str, provider: &Provider) {
        self.host
            .set_binding(
                project,
                "provider",
                &provider.origin(),
                Secret::new(provider.secret.clone()),
                AuthStyle::Bearer,
                Duration::from_millis(1500),
            )
            .unwrap();
    }

    pub fn invoke(&self, token: &str, project: &str, action: &str, input: Value) -> Invocation {
        self.invoke_at(token, project, action, input, None)
    }

    pub fn invoke_at(
        &self,
        token: &str,
        project: &str,
        action: &str,
        input: Value,
        generation: Option<u64>,
    ) -> Invocation {
        self.host.invoke(
            &Caller::bearer(token),
            &InvokeRequest {
                extension: EXTENSION.into(),
                project: project.into(),
                action: action.into(),
                input,
                generation,
            },
        )
    }
}

/// Short deadlines keep the misbehaving cases fast.
pub fn test_limits() -> SandboxLimits {
    SandboxLimits {
        deadline: Duration::from_millis(1500),
        max_instances: 16,
        ..SandboxLimits::default()
    }
}

pub fn open_host(state_dir: &Path, limits: &SandboxLimits) -> Host {
    let mut config = HostConfig::new(state_dir);
    config.limits = limits.clone();
    Host::open(config).unwrap()
}

/// The error code of an invocation, or `ok`.
pub fn code(invocation: &Invocation) -> String {
    match &invocation.result {
        Ok(_) => "ok".into(),
        Err(e) => e.code().to_string(),
    }
}

// ---- a provider on loopback -------------------------------------------------

/// A recorded request: method, path (with query), headers.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
}

type Hook = Box<dyn Fn() + Send + Sync>;

/// The tracker script the test provider serves at `/script.js`.
pub const PROVIDER_SCRIPT: &[u8] = b"(function(){/* the provider's tracker */})();\n";

/// An HTTP/1.1 server on 127.0.0.1 that plays a provider holding `secret`:
/// `/script.js` and `/api/send` (+ its preflight) as Umami's tracker side,
/// `/api/items/{id}` answers with credential headers, `/api/echo` and
/// `/api/me` echo the caller's token (as Umami's `/api/me` does),
/// `/api/slow` answers after 3 s, `/api/big` sends 2 MiB, and
/// `/api/revoke-grant` runs a hook before answering.
pub struct Provider {
    pub secret: String,
    pub port: u16,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    hook: Arc<Mutex<Option<Hook>>>,
}

impl Provider {
    pub fn start(secret: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let hook: Arc<Mutex<Option<Hook>>> = Arc::new(Mutex::new(None));
        let secret = secret.to_string();
        {
            let (seen, hook, secret) = (seen.clone(), hook.clone(), secret.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let (seen, hook, secret) = (seen.clone(), hook.clone(), secret.clone());
                    std::thread::spawn(move || serve(stream, &seen, &hook, &secret));
                }
            });
        }
        Self {
            secret,
            port,
            seen,
            hook,
        }
    }

    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn on_revoke(&self, hook: impl Fn() + Send + Sync + 'static) {
        *self.hook.lock().unwrap() = Some(Box::new(hook));
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Vec<Seen>>, hook: &Mutex<Option<Hook>>, secret: &str) {
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.trim_end().split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
            if k == "content-length" {
                length = v.parse().unwrap_or(0);
            }
            headers.push((k, v));
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok();
    seen.lock().unwrap().push(Seen {
        method: method.clone(),
        target: target.clone(),
        headers: headers.clone(),
    });
    let authorization = headers
        .iter()
        .find(|(k, _)| k == "authorization")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let path = target.split('?').next().unwrap_or_default().to_string();
    let mut extra = vec![
        (
            "Set-Cookie".to_string(),
            format!("session={secret}; HttpOnly"),
        ),
        (
            "WWW-Authenticate".to_string(),
            format!("Bearer realm=\"{secret}\""),
        ),
        ("X-Echo-Token".to_string(), format!("token {secret}")),
    ];
    let (status, body): (u16, Vec<u8>) = match (method.as_str(), path.as_str()) {
        ("GET", "/api/echo") | ("GET", "/api/me") => (
            200,
            serde_json::json!({ "token": authorization.trim_start_matches("Bearer "), "authorization": authorization, "user": "binding-account" })
                .to_string()
                .into_bytes(),
        ),
        ("GET", "/api/slow") => {
            std::thread::sleep(Duration::from_secs(3));
            (200, b"{}".to_vec())
        }
        ("GET", "/api/big") => (200, vec![b'x'; 2 << 20]),
        // The tracker side, as Umami serves it to visitors.
        ("GET", "/script.js") => {
            extra.clear();
            (200, PROVIDER_SCRIPT.to_vec())
        }
        ("OPTIONS", "/api/send") => {
            extra = vec![
                ("Access-Control-Allow-Origin".into(), "*".into()),
                ("Access-Control-Allow-Methods".into(), "POST, OPTIONS".into()),
                ("Access-Control-Allow-Headers".into(), "content-type, x-umami-cache".into()),
            ];
            (204, Vec::new())
        }
        ("POST", "/api/send") => {
            extra = vec![("Access-Control-Allow-Origin".into(), "*".into())];
            (200, b"{\"cache\":\"c\"}".to_vec())
        }
        ("POST", "/api/revoke-grant") => {
            if let Some(hook) = hook.lock().unwrap().as_ref() {
                hook();
            }
            (200, b"{\"revoked\":true}".to_vec())
        }
        ("GET", p) if p.starts_with("/api/items/") => {
            let id = p.trim_start_matches("/api/items/");
            let ok = authorization == format!("Bearer {secret}");
            (
                if ok { 200 } else { 401 },
                serde_json::json!({ "id": id, "authorized": ok }).to_string().into_bytes(),
            )
        }
        _ => {
            extra.clear();
            (404, b"{}".to_vec())
        }
    };
    let mut out = stream;
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = out.write_all(head.as_bytes());
    let _ = out.write_all(&body);
    let _ = out.flush();
}

/// The HTTP status `host-sim serve` answers an invocation error with.
pub fn status(error: &host_sim::InvokeError) -> u16 {
    host_sim::serve::http_status(error).as_u16()
}
