//! A webhook receiver on loopback for the webhook stories: it answers as
//! planned, checks every delivery with an independent verifier (the
//! Standard Webhooks reference library) and records each one, duplicates
//! included.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::Value;

/// How the receiver answers its next delivery.
#[derive(Debug, Clone)]
pub enum Answer {
    Status(u16),
    /// Answers 200 after this long.
    Slow(Duration),
    /// 302 to this URL.
    Redirect(String),
}

#[derive(Debug, Clone)]
pub struct Delivery {
    pub id: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// Whether the reference verifier accepted it, per secret the receiver
    /// knew (in the order they were given).
    pub verified: Vec<bool>,
}

impl Delivery {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct ReceiverState {
    secrets: Vec<String>,
    plan: VecDeque<Answer>,
    seen: Vec<Delivery>,
}

/// An HTTP receiver on 127.0.0.1: answers as planned (200 when the plan is
/// empty), verifies and records every delivery.
#[derive(Clone)]
pub struct Receiver {
    pub addr: SocketAddr,
    state: Arc<Mutex<ReceiverState>>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        Self::start_on(0).await
    }

    pub async fn start_on(port: u16) -> Receiver {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("receiver binds");
        let addr = listener.local_addr().unwrap();
        let state: Arc<Mutex<ReceiverState>> = Arc::default();
        let shared = state.clone();
        let app =
            axum::Router::new().fallback(move |headers: HeaderMap, body: axum::body::Bytes| {
                let state = shared.clone();
                async move {
                    let answer = {
                        let mut s = state.lock().unwrap();
                        let verified = s
                            .secrets
                            .iter()
                            .map(|secret| {
                                standardwebhooks::Webhook::new(secret)
                                    .expect("secret")
                                    .verify(&body, &headers)
                                    .is_ok()
                            })
                            .collect();
                        let id = headers
                            .get("webhook-id")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_string();
                        s.seen.push(Delivery {
                            id,
                            headers: headers.clone(),
                            body: body.to_vec(),
                            verified,
                        });
                        s.plan.pop_front()
                    };
                    match answer {
                        None | Some(Answer::Status(200)) => {
                            (StatusCode::OK, "thanks").into_response()
                        }
                        Some(Answer::Status(code)) => {
                            (StatusCode::from_u16(code).unwrap(), "not now").into_response()
                        }
                        Some(Answer::Slow(wait)) => {
                            tokio::time::sleep(wait).await;
                            (StatusCode::OK, "late").into_response()
                        }
                        Some(Answer::Redirect(to)) => {
                            (StatusCode::FOUND, [("location", to)], "moved").into_response()
                        }
                    }
                }
            });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            addr,
            state,
            task: Arc::new(task),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub fn trust(&self, secret: &str) {
        self.state.lock().unwrap().secrets.push(secret.to_string());
    }

    pub fn plan(&self, answers: &[Answer]) {
        self.state
            .lock()
            .unwrap()
            .plan
            .extend(answers.iter().cloned());
    }

    pub fn seen(&self) -> Vec<Delivery> {
        self.state.lock().unwrap().seen.clone()
    }

    pub fn stop(&self) {
        self.task.abort();
    }
}
