//! A `host-sim serve` process over a test's state directory, with the
//! operator listener on: where it listens, its log lines (JSON), and
//! requests to it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

pub struct ServeProcess {
    child: Child,
    /// `127.0.0.1:port` of the public listener.
    pub address: String,
    /// `127.0.0.1:port` of the operator listener (`/metrics`).
    pub metrics: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServeProcess {
    /// `host-sim serve` on free loopback ports over `state`, logging JSON
    /// at `log` (a filter).
    pub fn start(state: &Path, log: &str) -> ServeProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_host-sim"))
            .arg("--state-dir")
            .arg(state)
            .args(["--log", log, "--log-format", "json", "serve"])
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .env_remove("HOST_SIM_DB")
            .env_remove("HOST_SIM_TRUST_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("host-sim serve starts");
        let (sender, found) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        let listening = sender.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(base) = line.strip_prefix("listening http://") {
                    let _ = listening.send(("public", base.to_string()));
                }
            }
        });
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let lines = log.clone();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("metrics on http://") {
                    let _ = sender.send(("metrics", rest.trim_end_matches("/metrics").into()));
                }
                lines.lock().unwrap().push(line);
            }
        });
        let (mut address, mut metrics) = (String::new(), String::new());
        while address.is_empty() || metrics.is_empty() {
            let (which, value) = found
                .recv_timeout(Duration::from_secs(60))
                .expect("serve names both listeners within 60 s");
            match which {
                "public" => address = value,
                _ => metrics = value,
            }
        }
        ServeProcess {
            child,
            address,
            metrics,
            log,
        }
    }

    /// `method path` on the public listener: status, headers (lower-case
    /// names) and body.
    pub fn call(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
        request(&self.address, method, path, headers)
    }

    /// The exposition the operator listener serves.
    pub fn exposition(&self) -> String {
        let answer = request(&self.metrics, "GET", "/metrics", &[]);
        assert_eq!(answer.status, 200, "{}", answer.body);
        answer.body
    }

    /// The log lines so far that are JSON objects.
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One request without a body (reqwest's blocking client, no redirects
/// followed): status, headers with lower-case names, body.
pub fn request(address: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let client = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = client.request(method, format!("http://{address}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().expect("the server answers");
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    Answer {
        status,
        headers,
        body: response.text().expect("a body"),
    }
}
