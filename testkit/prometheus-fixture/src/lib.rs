//! Debian's Prometheus tools for tests: `promtool check metrics` on an
//! exposition, and a real `prometheus` server that scrapes loopback targets
//! and answers instant queries over its HTTP API.
//!
//! A tool that is missing skips the test (with one line saying which
//! package installs it) except under `CI`, where it fails: `.ci/run`
//! installs Debian's `prometheus` package, which brings both binaries.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Where Debian (or a local install) puts `name`; `None` when absent.
pub fn tool(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/usr/local/bin"]
        .into_iter()
        .map(|dir| PathBuf::from(dir).join(name))
        .find(|path| path.is_file())
}

/// `name`, or `None` after a note that the test is skipped; fails under
/// `CI`.
fn required(name: &str) -> Option<PathBuf> {
    let found = tool(name);
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is missing: .ci/run installs Debian's prometheus package"
        );
        eprintln!("skipped: {name} is not installed (apt-get install prometheus)");
    }
    found
}

/// A free TCP port on 127.0.0.1 (free when asked; the caller binds it soon).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a loopback port")
        .local_addr()
        .expect("its address")
        .port()
}

/// `promtool check metrics` on `exposition`: `""` when it says nothing,
/// otherwise its exit status and what it printed. `None` when promtool
/// is missing outside CI (the test is skipped).
pub fn promtool_problems(exposition: &str) -> Option<String> {
    let promtool = required("promtool")?;
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child
        .stdin
        .take()
        .expect("promtool's stdin")
        .write_all(exposition.as_bytes())
        .expect("promtool reads the exposition");
    let out = child.wait_with_output().expect("promtool finishes");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(if out.status.success() && said.trim().is_empty() {
        String::new()
    } else {
        format!("exit {:?}: {said}", out.status.code())
    })
}

/// A `prometheus` server of the test's own: its configuration and TSDB in
/// a temporary directory, its web listener on a free loopback port; killed
/// when dropped.
pub struct Prometheus {
    child: Child,
    /// `http://127.0.0.1:port`
    pub base: String,
    address: String,
    dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts Debian's `prometheus` scraping each `(job, "host:port")`
    /// target's `/metrics` every second, and waits until it is ready.
    /// `None` when prometheus is missing outside CI (the test is skipped).
    pub fn start(targets: &[(&str, &str)]) -> Option<Prometheus> {
        let binary = required("prometheus")?;
        let mut dir = tempfile::tempdir().expect("a directory for prometheus");
        let mut config = String::from(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n",
        );
        for (job, target) in targets {
            config.push_str(&format!(
                "  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
            ));
        }
        let config_file = dir.path().join("prometheus.yml");
        std::fs::write(&config_file, config).expect("the configuration is written");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("a log file");
        // The port is free when asked; another process may take it before
        // prometheus binds it, so a start that exits is tried again.
        for _ in 0..3 {
            let address = format!("127.0.0.1:{}", free_port());
            let child = Command::new(&binary)
                .arg(format!("--config.file={}", config_file.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address={address}"))
                .arg("--log.level=warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log.try_clone().expect("the log file"))
                .spawn()
                .expect("prometheus starts");
            let mut prometheus = Prometheus {
                child,
                base: format!("http://{address}"),
                address,
                dir,
            };
            if prometheus.wait_ready() {
                return Some(prometheus);
            }
            let _ = prometheus.child.kill();
            let _ = prometheus.child.wait();
            dir = std::mem::replace(&mut prometheus.dir, tempfile::tempdir().expect("dir"));
        }
        panic!(
            "prometheus did not start: {}",
            std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default()
        );
    }

    /// Waits for `/-/ready`; false when the process ended first.
    fn wait_ready(&mut self) -> bool {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok((200, _)) = get(&self.address, "/-/ready", &[]) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// What prometheus logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// One instant query: each series' labels and value (`NaN`, `+Inf`
    /// as Prometheus writes them, parsed).
    pub fn query(&self, expr: &str) -> Result<Vec<(Value, f64)>, String> {
        let (status, body) = get(&self.address, "/api/v1/query", &[("query", expr)])
            .map_err(|e| format!("the query API did not answer: {e}"))?;
        let answer: Value =
            serde_json::from_str(&body).map_err(|e| format!("{status}: {e}: {body}"))?;
        if answer["status"] != "success" {
            return Err(format!("{status}: {body}"));
        }
        let result = &answer["data"]["result"];
        let series = match answer["data"]["resultType"].as_str() {
            Some("vector") => result.as_array().cloned().unwrap_or_default(),
            Some("scalar") => vec![serde_json::json!({"metric": {}, "value": result})],
            _ => return Err(format!("not a vector or a scalar: {body}")),
        };
        series
            .iter()
            .map(|s| {
                let value = s["value"][1]
                    .as_str()
                    .and_then(|v| v.parse::<f64>().ok())
                    .ok_or_else(|| format!("no value in {s}"))?;
                Ok((s["metric"].clone(), value))
            })
            .collect()
    }

    /// Polls `expr` until its first series' value is `accept`ed, and
    /// returns it; panics after `timeout` with the last answer and the
    /// scrape targets' health.
    pub fn wait_for(&self, expr: &str, accept: impl Fn(f64) -> bool, timeout: Duration) -> f64 {
        let started = Instant::now();
        let mut last = Err("not asked yet".to_string());
        while started.elapsed() < timeout {
            last = self.query(expr);
            if let Ok(series) = &last
                && let Some((_, value)) = series.first()
                && accept(*value)
            {
                return *value;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!(
            "`{expr}` did not reach the expected value within {timeout:?}: last answer {last:?}\ntargets: {:?}\nlog: {}",
            self.query("up"),
            self.log()
        );
    }
}

/// `GET path` on `address` with `query`: status and body.
fn get(address: &str, path: &str, query: &[(&str, &str)]) -> reqwest::Result<(u16, String)> {
    let response = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?
        .get(format!("http://{address}{path}"))
        .query(query)
        .send()?;
    Ok((response.status().as_u16(), response.text()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promtool_flags_a_counter_without_total_and_passes_a_clean_one() {
        let Some(clean) = promtool_problems(
            "# HELP jobs_total Jobs done.\n# TYPE jobs_total counter\njobs_total 3\n",
        ) else {
            return;
        };
        assert_eq!(clean, "");
        let flagged = promtool_problems("# HELP jobs Jobs done.\n# TYPE jobs counter\njobs 3\n")
            .expect("promtool ran before");
        assert!(flagged.contains("_total"), "{flagged}");
    }
}

/// The metric families a README documents: the names in backquotes in the
/// first column of its `| Metric | Type | Labels |` table, so that a test
/// of what a service exports from its start reads the very list operators
/// read.
pub fn documented_families(readme: &str) -> Vec<String> {
    let table = readme
        .split_once("| Metric | Type | Labels |")
        .expect("the README's metrics table")
        .1;
    table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .flat_map(|line| {
            let first = line.split('|').nth(1).unwrap_or_default();
            first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}
