//! The customer's flow in a real browser: Debian's chromium, driven by
//! playwright-core (`tests/browser/console.spec.mjs`), signs in to the
//! console of `host-sim serve`, sets up website analytics in the sandboxed
//! panel, sends page views to the provider fake and sees them counted.
//!
//! Needs `node`, `/usr/bin/chromium` (or `$CHROMIUM`) and
//! `tests/browser/node_modules/playwright-core`. `.ci/run` installs the first
//! two with apt-get, `cargo xtask test` runs `npm ci` for the third. Without
//! them the test fails when `CI` is set and is skipped loudly otherwise.

mod support;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::Platform;
use workspace_tests::workspace_root;

const PROJECT: &str = "browser-shop";
const SECRET: &str = "browser-test-provider-secret-5c2e91";
const PAGE_VIEWS: usize = 3;
const NODE_LIMIT: Duration = Duration::from_secs(240);

fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
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
    if !browser_dir
        .join("node_modules/playwright-core/package.json")
        .is_file()
    {
        missing.push(format!(
            "{}/node_modules/playwright-core (`npm ci` there)",
            browser_dir.display()
        ));
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

#[test]
fn customer_sets_up_analytics_in_the_console_and_sees_page_views() {
    let root = workspace_root();
    let browser_dir = root.join("tests/browser");
    let missing = missing_tools(&browser_dir);
    if !missing.is_empty() {
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
        return;
    }

    let platform = Platform::start(PROJECT, SECRET, Duration::from_secs(5));
    let served = platform.serve();
    let screenshot = root.join("target/browser/console.png");
    let _ = std::fs::remove_file(&screenshot);

    let (status, stdout, stderr) = run_with_limit(
        Command::new("node")
            .arg(browser_dir.join("console.spec.mjs"))
            .current_dir(root)
            .env("CONSOLE_URL", format!("{}/console", served.base_url))
            .env("TOKEN", &platform.token)
            .env("PROVIDER_URL", platform.fake.base_url())
            .env("PROJECT", &platform.project)
            .env("SCREENSHOT", &screenshot)
            .env("EVENTS", PAGE_VIEWS.to_string())
            .env("FRESH", "1")
            .env("CHROMIUM", chromium()),
        NODE_LIMIT,
    );
    println!("---- node tests/browser/console.spec.mjs ----\n{stdout}{stderr}");
    assert_eq!(
        status,
        Some(0),
        "the browser test failed (exit {status:?}, None = killed after {NODE_LIMIT:?}):\n{stderr}"
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
