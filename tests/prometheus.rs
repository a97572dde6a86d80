//! An operator points Debian's Prometheus at both services' operator
//! listeners (scraped every second on loopback) and reads what happened
//! through its query API: every email sent is counted, the invocation the
//! host refused is counted once, each webhook delivery is counted, and a
//! latency quantile over the histograms is a finite number.
//!
//! Skipped with a note where `prometheus` is not installed, except under
//! `CI` (`.ci/run` installs Debian's package).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use host_sim::{Host, HostConfig};
use prometheus_fixture::Prometheus;
use serde_json::json;
use workspace_tests::{release_dir, server_binary, trusted_keys_dir};

/// Emails sent in the story (in two rounds, so the histograms move between
/// scrapes and `rate()` sees them).
const SENDS: usize = 6;
const WAIT: Duration = Duration::from_secs(60);

/// A server process, killed when dropped.
struct Server {
    child: Child,
    /// The public listener, `127.0.0.1:port`.
    public: String,
    /// The operator listener, `127.0.0.1:port`.
    metrics: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `command` and waits for the lines that name its two listeners:
/// `metrics on http://ADDR/metrics` and the public one after `public`.
fn start(mut command: Command, public: &'static str) -> Server {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the server starts");
    let (found, addresses) = mpsc::channel();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let found = found.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("metrics on http://") {
                    let _ = found.send((true, rest.trim_end_matches("/metrics").to_string()));
                } else if let Some(rest) = line.strip_prefix(public) {
                    let _ = found.send((false, rest.to_string()));
                }
            }
        });
    }
    let (mut public_address, mut metrics) = (String::new(), String::new());
    while public_address.is_empty() || metrics.is_empty() {
        let (is_metrics, address) = addresses
            .recv_timeout(WAIT)
            .expect("the server names its listeners");
        if is_metrics {
            metrics = address;
        } else {
            public_address = address;
        }
    }
    Server {
        child,
        public: public_address,
        metrics,
    }
}

/// An operator CLI command of mail-service on `data`; its stdout.
fn mail_cli(data: &Path, args: &[&str]) -> String {
    let out = Command::new(server_binary("mail-service"))
        .env("MAIL_DATA_DIR", data)
        .env_remove("DATABASE_URL")
        .args(args)
        .output()
        .expect("mail-service runs");
    assert!(
        out.status.success(),
        "mail-service {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A webhook receiver on loopback that answers 200 and counts requests.
fn receiver() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hooks", listener.local_addr().unwrap());
    let received = Arc::new(AtomicUsize::new(0));
    let count = received.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line.trim() != "" {
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                line.clear();
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            count.fetch_add(1, Ordering::SeqCst);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    (url, received)
}

#[test]
fn prometheus_counts_what_both_services_did() {
    let Some(prometheus_binary) = prometheus_fixture::tool("prometheus") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "prometheus is missing: .ci/run installs Debian's prometheus package"
        );
        eprintln!("skipped: prometheus is not installed (apt-get install prometheus)");
        return;
    };
    eprintln!("prometheus: {}", prometheus_binary.display());
    let dir = tempfile::tempdir().unwrap();

    // mail-service: a tenant with a key, its domain, a webhook receiver.
    let data = dir.path().join("mail");
    let key = mail_cli(&data, &["key", "create", "--tenant", "acme"]);
    mail_cli(&data, &["tenant", "set-rate-limit", "acme", "1000000"]);
    mail_cli(
        &data,
        &["domain", "mark-verified", "--tenant", "acme", "acme.test"],
    );
    let mut serve = Command::new(server_binary("mail-service"));
    serve
        .arg("serve")
        .env("MAIL_DATA_DIR", &data)
        .env_remove("DATABASE_URL")
        .env("MAIL_LISTEN", "127.0.0.1:0")
        .env("MAIL_METRICS_LISTEN", "127.0.0.1:0")
        .env("MAIL_WEBHOOK_ALLOW_PRIVATE_ADDRESSES", "true")
        .env("MAIL_WEBHOOK_ALLOW_HTTP_LOOPBACK", "true")
        .env("MAIL_WEBHOOK_POLL_MS", "50")
        .env("RUST_LOG", "warn");
    let mail = start(serve, "mail-service listening on http://");

    // host-sim: the signed release installed, approved and granted to one
    // project; a customer of another project holds a token.
    let state = dir.path().join("host");
    {
        let mut config = HostConfig::new(&state);
        config.trust_dir = Some(trusted_keys_dir());
        let host = Host::open(config).expect("the host opens");
        host.install_release(&release_dir(), &mut |_| {})
            .expect("the release installs");
        host.approve("managed-analytics", &[]).expect("approval");
        host.grant("managed-analytics", "granted-shop")
            .expect("grant");
    }
    let token = Host::open(HostConfig::new(&state))
        .unwrap()
        .issue_token(
            "customer",
            &["ungranted-shop".into()],
            Duration::from_secs(600),
        )
        .unwrap()
        .token;
    let mut serve = Command::new(server_binary("host-sim"));
    serve.arg("--state-dir").arg(&state).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    let host = start(serve, "listening http://");

    let Some(prometheus) = Prometheus::start(&[
        ("mail", mail.metrics.as_str()),
        ("host", host.metrics.as_str()),
    ]) else {
        return;
    };
    let up = prometheus.wait_for("sum(up)", |v| v == 2.0, WAIT);
    eprintln!("sum(up) = {up}");

    let client = reqwest::blocking::Client::new();
    let api = format!("http://{}", mail.public);
    let (hook, received) = receiver();
    let created = client
        .post(format!("{api}/webhooks"))
        .bearer_auth(&key)
        .json(&json!({"endpoint": hook, "events": ["email.sent"]}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 200, "{}", created.text().unwrap());
    let send = || {
        let answer = client
            .post(format!("{api}/emails"))
            .bearer_auth(&key)
            .json(&json!({
                "from": "Acme <billing@acme.test>",
                "to": ["ada@example.test"],
                "subject": "Your invoice",
                "text": "Thanks!",
            }))
            .send()
            .unwrap();
        assert_eq!(answer.status(), 200, "{}", answer.text().unwrap());
    };
    // Two rounds with a scrape between them, so the histograms' buckets
    // grow between two samples.
    for _ in 0..SENDS / 2 {
        send();
    }
    prometheus.wait_for(
        "sum(mail_emails_accepted_total)",
        |v| v == (SENDS / 2) as f64,
        WAIT,
    );
    for _ in SENDS / 2..SENDS {
        send();
    }

    // The refused invocation: the extension is not granted to this project.
    let refused = client
        .get(format!(
            "http://{}/v1/plugins/managed-analytics/projects/ungranted-shop/api/configuration",
            host.public
        ))
        .bearer_auth(&token)
        .send()
        .unwrap();
    assert_eq!(refused.status(), 403, "{}", refused.text().unwrap());

    let accepted = prometheus.wait_for(
        "sum(mail_emails_accepted_total)",
        |v| v == SENDS as f64,
        WAIT,
    );
    let sent = prometheus.wait_for(
        r#"sum(mail_emails_accepted_total{outcome="sent"})"#,
        |v| v == SENDS as f64,
        WAIT,
    );
    let refusals = prometheus.wait_for(
        "sum(host_sim_invocation_refusals_total)",
        |v| v == 1.0,
        WAIT,
    );
    let grant = prometheus.wait_for(
        r#"host_sim_invocation_refusals_total{kind="grant"}"#,
        |v| v == 1.0,
        WAIT,
    );
    let delivered = prometheus.wait_for(
        r#"sum(mail_webhook_delivery_attempts_total{result="delivered"})"#,
        |v| v == SENDS as f64,
        WAIT,
    );
    assert_eq!(
        received.load(Ordering::SeqCst),
        SENDS,
        "the receiver's count"
    );
    let backlog = prometheus.wait_for("mail_webhook_deliveries_pending", |v| v == 0.0, WAIT);
    let p90 = prometheus.wait_for(
        "histogram_quantile(0.9, sum(rate(mail_http_request_duration_seconds_bucket[1m])) by (le))",
        f64::is_finite,
        WAIT,
    );
    let handoff_p90 = prometheus.wait_for(
        "histogram_quantile(0.9, sum(rate(mail_handoff_duration_seconds_bucket[1m])) by (le))",
        f64::is_finite,
        WAIT,
    );
    eprintln!(
        "accepted {accepted}, sent {sent}, refusals {refusals} (grant {grant}), webhook deliveries {delivered}, pending {backlog}, request p90 {p90} s, handoff p90 {handoff_p90} s"
    );
    assert!(p90 > 0.0 && handoff_p90 > 0.0);
}
