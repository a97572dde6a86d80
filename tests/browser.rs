//! The customer's flow in a real browser: Debian's chromium, driven by
//! playwright-core (`tests/browser/console.spec.mjs`), signs in to the
//! console of `host-sim serve`, sets up website analytics in the sandboxed
//! panel, sends page views to the provider fake and sees them counted; and
//! (`tests/browser/tracking_domain.spec.mjs`) a page on the customer's
//! domain loads the script from the project's tracking hostname, whose edge
//! is Debian's nginx running the exported routing, and the panel counts the
//! page view; and (`tests/browser/accessibility.spec.mjs`) the same customer
//! flow with the keyboard only, audited by axe-core on every console page and
//! panel state, with the panel's iframe sized to its content at three widths
//! (screenshots in `target/browser/panel-<width>.png`); and
//! (`tests/browser/oauth_consent.spec.mjs`) a person authorizes an MCP
//! client on the consent page and disconnects it in "Connected apps"; and
//! (`tests/browser/developer_view.spec.mjs`) a plugin developer runs an
//! action from `host-sim dev`'s developer view and sees its log line.
//!
//! Needs `node`, `/usr/bin/chromium` (or `$CHROMIUM`) and
//! `tests/browser/node_modules/{playwright-core,axe-core}`. `.ci/run`
//! installs the first two with apt-get, `cargo xtask test` runs `npm ci` for
//! the others. Without them the test fails when `CI` is set and is skipped
//! loudly otherwise.

mod support;

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dns_fixture::{DnsFixture, Record};
use host_sim::tracking::dns::DnsOptions;
use host_sim::tracking::ingress::{self, NginxOptions};
use host_sim::tracking::tls::TlsOptions;
use serde_json::json;
use support::Platform;
use workspace_tests::workspace_root;

const PROJECT: &str = "browser-shop";
const SECRET: &str = "browser-test-provider-secret-5c2e91";
const PAGE_VIEWS: usize = 3;
const NODE_LIMIT: Duration = Duration::from_secs(240);

fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// `tests/browser`: the specs and their node modules.
fn browser_dir() -> PathBuf {
    workspace_root().join("tests/browser")
}

/// What the browser test needs and this machine lacks.
fn missing_tools(browser_dir: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !node {
        missing.push("`node` (Debian package nodejs)".to_owned());
    }
    if !chromium().is_file() {
        missing.push(format!(
            "{} (Debian package chromium)",
            chromium().display()
        ));
    }
    for package in ["playwright-core", "axe-core"] {
        if !browser_dir
            .join(format!("node_modules/{package}/package.json"))
            .is_file()
        {
            missing.push(format!(
                "{}/node_modules/{package} (`npm ci` there)",
                browser_dir.display()
            ));
        }
    }
    missing
}

/// Runs `cmd` to its end (killed after `limit`); status, stdout, stderr.
fn run_with_limit(cmd: &mut Command, limit: Duration) -> (Option<i32>, String, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node starts");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for node") {
            break status.code();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (status, out.join().unwrap(), err.join().unwrap())
}

/// Runs `tests/browser/<spec>` in node with `env` (and `CHROMIUM`), from
/// the workspace root, to its end; prints its output and fails the test
/// unless it exited 0. Its stdout and stderr.
fn run_spec(spec: &str, env: &[(&str, OsString)]) -> (String, String) {
    let mut node = Command::new("node");
    node.arg(browser_dir().join(spec))
        .current_dir(workspace_root())
        .env("CHROMIUM", chromium());
    for (name, value) in env {
        node.env(name, value);
    }
    let (status, stdout, stderr) = run_with_limit(&mut node, NODE_LIMIT);
    println!("---- node tests/browser/{spec} ----\n{stdout}{stderr}");
    assert_eq!(
        status,
        Some(0),
        "tests/browser/{spec} failed (exit {status:?}, None = killed after {NODE_LIMIT:?}):\n{stderr}"
    );
    (stdout, stderr)
}

/// False (after saying so loudly) when this machine lacks what the browser
/// tests need; fails instead when `CI` is set.
fn browser_tools_present() -> bool {
    let missing = missing_tools(&browser_dir());
    if missing.is_empty() {
        return true;
    }
    let message = format!(
        "the browser test needs {}. `.ci/run` installs chromium and nodejs with apt-get; \
         `cargo xtask test` runs `npm ci` in tests/browser",
        missing.join(", ")
    );
    assert!(std::env::var_os("CI").is_none(), "CI is set: {message}");
    // Straight to stderr: the harness captures `eprintln!` of passing tests.
    let _ = writeln!(
        std::io::stderr(),
        "\n******** SKIPPED the browser test: {message} ********\n"
    );
    false
}

#[test]
fn customer_sets_up_analytics_in_the_console_and_sees_page_views() {
    if !browser_tools_present() {
        return;
    }
    let root = workspace_root();

    let platform = Platform::start(PROJECT, SECRET, Duration::from_secs(5));
    let served = platform.serve();
    let screenshot = root.join("target/browser/console.png");
    let _ = std::fs::remove_file(&screenshot);

    let (stdout, stderr) = run_spec(
        "console.spec.mjs",
        &[
            ("CONSOLE_URL", format!("{}/console", served.base_url).into()),
            ("TOKEN", platform.token.clone().into()),
            ("PROVIDER_URL", platform.fake.base_url().into()),
            ("PROJECT", platform.project.clone().into()),
            ("SCREENSHOT", screenshot.clone().into()),
            ("EVENTS", PAGE_VIEWS.to_string().into()),
            ("FRESH", "1".into()),
        ],
    );

    // What the browser saw matches the provider's own records.
    let websites = platform.fake.websites();
    assert_eq!(websites.len(), 1, "one website provisioned: {websites:?}");
    let events = platform.fake.events();
    assert_eq!(events.len(), PAGE_VIEWS);
    assert!(events.iter().all(|e| e.website_id == websites[0].id));
    assert!(
        stdout.contains(&websites[0].id.to_string()),
        "the panel's tracking script named the provisioned website"
    );
    // The provider's key reached neither the browser nor its output.
    assert!(!stdout.contains(&platform.secret) && !stderr.contains(&platform.secret));

    let png = std::fs::read(&screenshot).expect("the screenshot was written");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{} is a real screenshot",
        screenshot.display()
    );
}

// ---- the keyboard, axe-core and the panel's size --------------------------

const A11Y_PROJECT: &str = "browser-keyboard";
const A11Y_PAGE_VIEWS: usize = 2;
const WIDTHS: [u32; 3] = [360, 768, 1280];

#[test]
fn the_customer_flow_works_by_keyboard_passes_axe_and_the_panel_fits_its_frame() {
    if !browser_tools_present() {
        return;
    }
    let root = workspace_root();
    let platform = Platform::start(A11Y_PROJECT, SECRET, Duration::from_secs(5));
    let served = platform.serve();
    let screenshots = root.join("target/browser");
    let shot = |width: u32| screenshots.join(format!("panel-{width}.png"));
    for width in WIDTHS {
        let _ = std::fs::remove_file(shot(width));
    }

    let (stdout, stderr) = run_spec(
        "accessibility.spec.mjs",
        &[
            ("CONSOLE_URL", format!("{}/console", served.base_url).into()),
            ("TOKEN", platform.token.clone().into()),
            ("PROVIDER_URL", platform.fake.base_url().into()),
            ("PROJECT", platform.project.clone().into()),
            ("EVENTS", A11Y_PAGE_VIEWS.to_string().into()),
            ("SCREENSHOT_DIR", screenshots.clone().into()),
        ],
    );
    assert_eq!(platform.fake.events().len(), A11Y_PAGE_VIEWS);
    assert!(!stdout.contains(&platform.secret) && !stderr.contains(&platform.secret));
    for width in WIDTHS {
        let png = std::fs::read(shot(width)).expect("the screenshot was written");
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
            "{} is a real screenshot",
            shot(width).display()
        );
        // The PNG header's width: the page was laid out at this width.
        let png_width = u32::from_be_bytes(png[16..20].try_into().unwrap());
        assert_eq!(png_width, width, "{}", shot(width).display());
    }
}

// ---- an MCP client's consent and Connected apps ---------------------------

#[test]
fn a_person_authorizes_an_mcp_client_on_the_consent_page_and_disconnects_it() {
    if !browser_tools_present() {
        return;
    }
    // A person with two projects, `shop` and `blog`.
    let setup = support::oauth::default_setup();
    run_spec(
        "oauth_consent.spec.mjs",
        &[
            ("BASE_URL", setup.served.base_url.clone().into()),
            ("TOKEN", setup.person.clone().into()),
            ("PROJECT", "shop".into()),
            ("OTHER_PROJECT", "blog".into()),
        ],
    );
    // What the browser did is what the host holds: no app is left connected.
    let person = host_sim::Caller::bearer(setup.person.as_str());
    assert!(
        setup
            .platform
            .host
            .connected_apps(&person)
            .unwrap()
            .is_empty()
    );
}

// ---- a plugin developer's view in `host-sim dev` ----------------------------

#[test]
fn a_plugin_developer_runs_an_action_from_the_developer_view_and_sees_its_log() {
    if !browser_tools_present() {
        return;
    }
    let secret = "developer-view-secret-7d41";
    let fake = umami_fake::UmamiFake::start(umami_fake::FakeConfig::new(secret)).unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("manifest.toml"),
        workspace_tests::manifest_without_panel(),
    )
    .unwrap();
    std::fs::write(work.path().join("provider.secret"), secret).unwrap();
    // A copy: nothing of a development run goes near the signed release.
    std::fs::copy(
        workspace_tests::release_dir().join("plugin.wasm"),
        work.path().join("plugin.wasm"),
    )
    .unwrap();
    let dev = workspace_tests::HostSimDev::start(
        Command::new(workspace_tests::server_binary("host-sim"))
            .current_dir(work.path())
            .args([
                "dev",
                "--manifest",
                "manifest.toml",
                "--component",
                "plugin.wasm",
            ])
            .arg("--binding")
            .arg(format!(
                "provider={},secret-file=provider.secret",
                fake.base_url()
            ))
            .args(["--listen", "127.0.0.1:0"]),
    );
    let base = dev.expect("listening", Duration::from_secs(60));
    let token = dev.expect("token", Duration::from_secs(5));
    let project = dev.expect("project", Duration::from_secs(5));
    run_spec(
        "developer_view.spec.mjs",
        &[
            ("BASE_URL", base.into()),
            ("TOKEN", token.into()),
            ("PROJECT", project.into()),
            ("EXTENSION", support::EXTENSION.into()),
        ],
    );
    drop(dev);
}

// ---- the tracking domain ----------------------------------------------------

const TRACKING_PROJECT: &str = "browser-tracking";
const TRACKING_HOST: &str = "track.shop.example";
const SHOP_HOST: &str = "www.shop.example";
const INGRESS_TARGET: &str = "ingress.provider.example";

/// Debian's nginx, stopped when dropped.
struct Nginx(std::process::Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs nginx with `server_blocks` in its http block, in `prefix`.
fn nginx(prefix: &Path, server_blocks: &str, port: u16) -> Nginx {
    let p = prefix.display().to_string();
    std::fs::write(prefix.join("tracking.conf"), server_blocks).unwrap();
    std::fs::write(
        prefix.join("nginx.conf"),
        format!(
            "daemon off;\nmaster_process off;\npid {p}/nginx.pid;\nerror_log {p}/error.log info;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  access_log {p}/access.log;\n  client_body_temp_path {p}/body;\n  \
             proxy_temp_path {p}/proxy;\n  fastcgi_temp_path {p}/fastcgi;\n  uwsgi_temp_path {p}/uwsgi;\n  \
             scgi_temp_path {p}/scgi;\n  include {p}/tracking.conf;\n}}\n"
        ),
    )
    .unwrap();
    let child = Command::new("/usr/sbin/nginx")
        .args(["-p", &p, "-c", &format!("{p}/nginx.conf")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx starts");
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let started = Instant::now();
    while TcpStream::connect(address).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "nginx did not start: {}",
            std::fs::read_to_string(prefix.join("error.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Nginx(child)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The customer's site: every GET answers a page holding `tag`.
fn customer_page(tag: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let body = format!(
                "<!doctype html><html><head><title>Shop</title>{tag}</head><body><h1>Shop</h1></body></html>"
            );
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// A CA and a certificate for the tracking hostname signed by it, as nginx
/// wants them: `<dir>/<hostname>/fullchain.pem` and `privkey.pem`; answers
/// the CA's PEM file (the roots for `wait-tls`).
fn certificates(dir: &Path) -> PathBuf {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Browser test root");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec![TRACKING_HOST.to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let host_dir = dir.join(TRACKING_HOST);
    std::fs::create_dir_all(&host_dir).unwrap();
    std::fs::write(
        host_dir.join("fullchain.pem"),
        format!("{}{}", leaf.pem(), ca.pem()),
    )
    .unwrap();
    std::fs::write(host_dir.join("privkey.pem"), leaf_key.serialize_pem()).unwrap();
    let roots = dir.join("roots.pem");
    std::fs::write(&roots, ca.pem()).unwrap();
    roots
}

#[test]
fn a_page_view_through_the_tracking_hostname_is_counted_in_the_panel() {
    let mut missing = missing_tools(&browser_dir());
    if !Path::new("/usr/sbin/nginx").is_file() {
        missing.push("/usr/sbin/nginx (Debian package nginx)".to_owned());
    }
    if !missing.is_empty() {
        let message = format!(
            "the tracking-domain browser test needs {}. `.ci/run` installs chromium, nodejs and \
             nginx with apt-get; `cargo xtask test` runs `npm ci` in tests/browser",
            missing.join(", ")
        );
        assert!(std::env::var_os("CI").is_none(), "CI is set: {message}");
        let _ = writeln!(
            std::io::stderr(),
            "\n******** SKIPPED the tracking-domain browser test: {message} ********\n"
        );
        return;
    }

    let platform = Platform::start(TRACKING_PROJECT, SECRET, Duration::from_secs(5));
    let served = platform.serve();
    let host = &platform.host;
    platform.provision("Shop", SHOP_HOST);

    // The operator's flow: add, verify (DNS on loopback), plan and apply.
    host.configure_tracking(Some(INGRESS_TARGET), None, None)
        .unwrap();
    let records = host
        .add_tracking_domain(TRACKING_PROJECT, TRACKING_HOST)
        .unwrap();
    let dns = DnsFixture::start().unwrap();
    dns.set(&records.txt_name, [Record::txt(&records.txt_value)]);
    dns.set(TRACKING_HOST, [Record::cname(INGRESS_TARGET)]);
    let (_, report) = host
        .verify_tracking_domain(
            TRACKING_PROJECT,
            TRACKING_HOST,
            &DnsOptions {
                nameservers: vec![dns.addr()],
                timeout: Duration::from_secs(2),
            },
        )
        .unwrap();
    assert!(report.verified(), "{report:?}");
    let plan = host.tracking_plan().unwrap();
    host.apply_tracking_plan(true, Some(&plan.id)).unwrap();

    // The edge: nginx with the exported routing, TLS from the test's CA.
    let edge = tempfile::tempdir().unwrap();
    let roots = certificates(edge.path());
    let edge_port = free_port();
    let exported = ingress::nginx(
        &host.tracking_routes().unwrap(),
        &NginxOptions {
            listen: format!("127.0.0.1:{edge_port} ssl"),
            certificate_dir: edge.path().display().to_string(),
            ..NginxOptions::default()
        },
    );
    let _nginx = nginx(edge.path(), &exported, edge_port);
    let edge_options = TlsOptions {
        address: Some(SocketAddr::from(([127, 0, 0, 1], edge_port))),
        roots: Some(roots),
        ..TlsOptions::default()
    };
    host.wait_tls(
        TRACKING_PROJECT,
        TRACKING_HOST,
        &edge_options,
        Duration::from_secs(10),
        Duration::from_millis(200),
        &mut |_, _| {},
    )
    .expect("the edge serves the certificate");
    let origin = host
        .activate_tracking_domain(TRACKING_PROJECT, TRACKING_HOST, &edge_options)
        .expect("the edge serves the provider's script");
    assert_eq!(origin, format!("https://{TRACKING_HOST}"));

    let configuration = platform.invoke("analytics.configuration", json!({}));
    let tag = configuration.result.as_ref().expect("the configuration")["tracking_script"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        tag.contains(&format!("src=\"{origin}/script.js\"")),
        "{tag}"
    );
    let page_port = customer_page(tag);

    let (stdout, stderr) = run_spec(
        "tracking_domain.spec.mjs",
        &[
            (
                "PAGE_URL",
                format!("http://{SHOP_HOST}:{page_port}/").into(),
            ),
            ("TRACKING_ORIGIN", origin.clone().into()),
            (
                "RESOLVER_RULES",
                format!("MAP {SHOP_HOST} 127.0.0.1, MAP {TRACKING_HOST} 127.0.0.1:{edge_port}")
                    .into(),
            ),
            ("CONSOLE_URL", format!("{}/console", served.base_url).into()),
            ("TOKEN", platform.token.clone().into()),
            ("PROJECT", platform.project.clone().into()),
            ("EXPECTED", "1".into()),
        ],
    );
    let events = platform.fake.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].url, "/");
    assert!(!stdout.contains(&platform.secret) && !stderr.contains(&platform.secret));
    let access_log = std::fs::read_to_string(edge.path().join("access.log")).unwrap();
    assert!(
        access_log.contains("GET /script.js") && access_log.contains("POST /api/send"),
        "the browser went through the edge: {access_log}"
    );
}
