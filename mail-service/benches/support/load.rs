//! The API load both load benchmarks drive: concurrent `POST /emails`, and
//! the figures of the latencies.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub struct Figures {
    pub rate: f64,
    pub p99_ms: f64,
    pub p50_ms: f64,
    pub count: usize,
}

/// Latencies of completed operations over several slices of time.
#[derive(Default)]
pub struct Samples {
    latencies: Vec<Duration>,
    seconds: f64,
}

impl Samples {
    pub fn add(&mut self, latencies: Vec<Duration>, elapsed: f64) {
        self.latencies.extend(latencies);
        self.seconds += elapsed;
    }

    /// Operations per second so far (0 before any).
    pub fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.latencies.len() as f64 / self.seconds
        } else {
            0.0
        }
    }

    pub fn figures(mut self) -> Figures {
        self.latencies.sort();
        Figures {
            rate: self.latencies.len() as f64 / self.seconds,
            p99_ms: percentile(&self.latencies, 0.99),
            p50_ms: percentile(&self.latencies, 0.50),
            count: self.latencies.len(),
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx].as_secs_f64() * 1000.0
}

/// `concurrency` clients sending `POST /emails` to `to` for `seconds`: the
/// latencies of the 200s, the time taken, the number of other answers.
pub async fn load_api(
    base: &str,
    key: &str,
    to: &str,
    seconds: u64,
    concurrency: usize,
) -> (Vec<Duration>, f64, usize) {
    load_api_at(base, key, to, seconds, concurrency, None).await
}

/// [`load_api`], each client waiting for its turn so that together they
/// send at most `rate` requests per second (`None`: as fast as answered).
/// A client that falls behind goes on at once and does not catch up.
pub async fn load_api_at(
    base: &str,
    key: &str,
    to: &str,
    seconds: u64,
    concurrency: usize,
    rate: Option<f64>,
) -> (Vec<Duration>, f64, usize) {
    let interval = rate.map(|r| Duration::from_secs_f64(concurrency as f64 / r.max(1.0)));
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let body = serde_json::json!({
        "from": "Bench <bench@example.com>",
        "to": [to],
        "subject": "Load test",
        "text": "Hello from the benchmark",
    });
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|worker| {
            let (client, stop, body) = (client.clone(), stop.clone(), body.clone());
            let (url, key) = (format!("{base}/emails"), key.to_string());
            // Spread over one interval, so the clients do not send together.
            let mut turn = interval.map(|i| {
                tokio::time::Instant::now() + i.mul_f64(worker as f64 / concurrency as f64)
            });
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut errors = 0;
                while !stop.load(Ordering::Relaxed) {
                    if let (Some(at), Some(interval)) = (turn.as_mut(), interval) {
                        tokio::time::sleep_until(*at).await;
                        *at = (*at + interval).max(tokio::time::Instant::now());
                    }
                    let t = Instant::now();
                    match client.post(&url).bearer_auth(&key).json(&body).send().await {
                        Ok(r) if r.status().as_u16() == 200 => {
                            let _ = r.bytes().await;
                            latencies.push(t.elapsed());
                        }
                        Ok(r) => {
                            errors += 1;
                            if errors == 1 {
                                let status = r.status();
                                let body = r.text().await.unwrap_or_default();
                                eprintln!("a refusal: {status} {body}");
                            }
                        }
                        Err(e) => {
                            errors += 1;
                            if errors == 1 {
                                eprintln!("a failed request: {e}");
                            }
                        }
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let mut errors = 0;
    for w in workers {
        let (l, e) = w.await.unwrap();
        all.extend(l);
        errors += e;
    }
    (all, started.elapsed().as_secs_f64(), errors)
}
