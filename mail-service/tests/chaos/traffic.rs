//! The chaos run's clients: each sends a fixed mix (single keyed sends,
//! unkeyed sends, keyed batches of three, keyed scheduled sends) round robin
//! over the nodes, records every answer (no answer at all included), and
//! retries a keyed request that got no definite answer with the same key
//! and body, as a careful client would.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mail_service::clock::{Clock, SystemClock, rfc3339};
use serde_json::{Value, json};

use super::Nodes;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Send,
    Unkeyed,
    Batch,
    Scheduled,
}

/// One request as sent: every email in it has a subject no other request
/// body has, so the relay's log tells which request each message came from.
#[derive(Debug, Clone)]
pub struct Request {
    pub kind: Kind,
    pub key: Option<String>,
    pub body: Value,
    pub scheduled_at: Option<i64>,
    /// Earlier attempts with the same key and body.
    pub attempt: u32,
}

/// A request and the answer it got.
#[derive(Debug, Clone)]
pub struct Record {
    pub request: Request,
    /// 0: no answer (the node died, the connection was cut).
    pub status: u16,
    pub body: Value,
    /// When it was sent and when its answer (or the failure) came.
    pub sent_at: Instant,
    pub answered_at: Instant,
}

impl Record {
    pub fn name(&self) -> &str {
        self.body["name"].as_str().unwrap_or_default()
    }
}

#[derive(Clone, Default)]
pub struct Records(Arc<Mutex<Vec<Record>>>);

impl Records {
    pub fn all(&self) -> Vec<Record> {
        self.0.lock().unwrap().clone()
    }
}

fn email(subject: &str) -> Value {
    json!({
        "from": "Acme <billing@acme.test>",
        "to": ["ada@example.test"],
        "subject": subject,
        "text": "chaos",
    })
}

impl Request {
    fn new(kind: Kind, name: &str) -> Request {
        let key = (kind != Kind::Unkeyed).then(|| name.to_string());
        let subject = format!("chaos {name}");
        let (body, scheduled_at) = match kind {
            Kind::Batch => {
                let items = (0..3).map(|i| email(&format!("{subject} #{i}"))).collect();
                (Value::Array(items), None)
            }
            Kind::Scheduled => {
                let at = SystemClock.now_ms() + 1_000 + (name.len() as i64 % 7) * 300;
                let mut body = email(&subject);
                body["scheduled_at"] = json!(rfc3339(at));
                (body, Some(at))
            }
            Kind::Send | Kind::Unkeyed => (email(&subject), None),
        };
        Request {
            kind,
            key,
            body,
            scheduled_at,
            attempt: 0,
        }
    }

    fn path(&self) -> &'static str {
        match self.kind {
            Kind::Batch => "/emails/batch",
            _ => "/emails",
        }
    }
}

pub struct Client {
    pub id: usize,
    pub http: reqwest::Client,
    pub key: String,
    pub nodes: Arc<Nodes>,
    pub records: Records,
    pub stop: Arc<AtomicBool>,
}

impl Client {
    pub async fn run(self) {
        let mut to_retry: Vec<Request> = Vec::new();
        for n in 0.. {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            let name = format!("c{}-{n}", self.id);
            let request = match n % 10 {
                0..=3 => Request::new(Kind::Send, &name),
                4 | 5 => Request::new(Kind::Unkeyed, &name),
                6 | 7 => Request::new(Kind::Batch, &name),
                8 => Request::new(Kind::Scheduled, &name),
                _ => match to_retry.pop() {
                    Some(earlier) => Request {
                        attempt: earlier.attempt + 1,
                        ..earlier
                    },
                    None => continue,
                },
            };
            let record = self.send(&request, n).await;
            // No definite answer: the same key and body again later (a
            // 409 in flight means another attempt is still under way).
            let retry = request.key.is_some()
                && request.attempt < 3
                && (matches!(record.status, 0 | 500 | 503)
                    || record.name() == "concurrent_idempotent_requests");
            if retry {
                to_retry.push(request);
            }
            if record.status == 429 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            self.records.0.lock().unwrap().push(record);
        }
    }

    async fn send(&self, request: &Request, n: usize) -> Record {
        let base = self.nodes.pick(self.id + n);
        let mut post = self
            .http
            .post(format!("{base}{}", request.path()))
            .bearer_auth(&self.key)
            .json(&request.body);
        if let Some(key) = &request.key {
            post = post.header("idempotency-key", key);
        }
        let sent_at = Instant::now();
        let (status, body) = match post.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                (status, resp.json().await.unwrap_or(Value::Null))
            }
            Err(_) => (0, Value::Null),
        };
        Record {
            request: request.clone(),
            status,
            body,
            sent_at,
            answered_at: Instant::now(),
        }
    }
}
