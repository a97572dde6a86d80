//! The SMTP relay: connections set up once (TLS, authentication) and kept
//! in a small pool, so a run of sends pays the handshakes once; each
//! handoff is one SMTP transaction on a pooled or a new connection.
//!
//! Reuse never risks a second delivery: a pooled connection the relay
//! closed while it was idle fails at `MAIL FROM` (an I/O error, or the
//! relay's `421`), before any message data was written, and the handoff
//! then runs once more on a new connection. Once the data is written only
//! the relay's reply decides, as before: 2xx accepted, 4xx/5xx rejected,
//! no reply unknown (never retried).

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, Certificate, TlsParameters};
use lettre::transport::smtp::commands::{Data, Mail, Rcpt, Rset};
use lettre::transport::smtp::extension::{ClientId, Extension, MailBodyParameter, MailParameter};

use super::Handoff;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SmtpSecurity {
    /// Plain TCP: only for a relay on a loopback address (tests, a local
    /// MTA), since the password and the mail would cross the network in
    /// clear.
    None,
    /// Plain TCP upgraded with STARTTLS (required: a relay that does not
    /// offer it gets nothing).
    Starttls,
    /// TLS from the first byte (port 465).
    Tls,
}

/// Upstream SMTP server. The password never leaves this struct: `Debug`
/// redacts it and errors never quote it.
#[derive(Clone)]
pub struct SmtpConfig {
    pub host: String,
    pub port: u16,
    pub security: SmtpSecurity,
    pub username: Option<String>,
    pub password: Option<String>,
    pub hello_name: String,
    /// Bound on each SMTP step, including waiting for the reply to the data.
    pub timeout: Duration,
    /// PEM certificates trusted for the relay besides the public roots (a
    /// private relay's CA).
    pub ca_pem: Option<Vec<u8>>,
}

impl fmt::Debug for SmtpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("security", &self.security)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("hello_name", &self.hello_name)
            .field("timeout", &self.timeout)
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .finish()
    }
}

impl SmtpConfig {
    /// Refuses a configuration that would send in clear over a network:
    /// `none` is for a loopback relay only.
    pub fn check(&self) -> Result<(), String> {
        if self.security == SmtpSecurity::None && !is_loopback(&self.host) {
            return Err(format!(
                "--smtp-security none would send mail{} to {} in clear; it is allowed only \
                 for a relay on a loopback address (127.0.0.0/8, ::1, localhost): use \
                 starttls or tls",
                if self.password.is_some() {
                    " and the password"
                } else {
                    ""
                },
                self.host
            ));
        }
        if let Some(pem) = &self.ca_pem {
            Certificate::from_pem(pem)
                .map_err(|_| "--smtp-ca-file: not a PEM certificate".to_string())?;
        }
        Ok(())
    }

    fn tls(&self) -> Result<TlsParameters, String> {
        let mut builder = TlsParameters::builder(self.host.clone());
        if let Some(pem) = &self.ca_pem {
            let roots = Certificate::from_pem(pem)
                .map_err(|_| "--smtp-ca-file: not a PEM certificate".to_string())?;
            builder = builder.add_root_certificate(roots);
        }
        builder
            .build_rustls()
            .map_err(|e| format!("TLS setup failed: {e}"))
    }
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Idle connections kept for reuse.
const POOL_SIZE: usize = 8;
/// An idle connection older than this is closed rather than reused
/// (relays close idle sessions after a minute or more).
const IDLE_FOR: Duration = Duration::from_secs(30);
/// Messages sent on one connection before it is closed (relays bound
/// the transactions of a session).
const REUSE_LIMIT: u32 = 100;

struct Idle {
    conn: AsyncSmtpConnection,
    since: Instant,
    sent: u32,
}

/// The relay and its idle connections.
pub struct SmtpRelay {
    config: SmtpConfig,
    idle: Mutex<Vec<Idle>>,
}

impl fmt::Debug for SmtpRelay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpRelay")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Why a transaction stopped before the relay had the message.
enum Stopped {
    /// The relay answered 4xx or 5xx.
    Refused(String),
    /// The connection failed (I/O, timeout, TLS).
    Broken(String),
}

impl Stopped {
    fn detail(self) -> String {
        match self {
            Stopped::Refused(d) | Stopped::Broken(d) => d,
        }
    }
}

async fn step<T>(
    timeout: Duration,
    what: &str,
    f: impl Future<Output = Result<T, lettre::transport::smtp::Error>>,
) -> Result<T, Stopped> {
    match tokio::time::timeout(timeout, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(match smtp_reply(&e) {
            Some(reply) => Stopped::Refused(reply),
            None => Stopped::Broken(format!("upstream {what} failed: {e}")),
        }),
        Err(_) => Err(Stopped::Broken(format!(
            "upstream {what} timed out after {timeout:?}"
        ))),
    }
}

/// The relay's own words for a 4xx/5xx reply (never the password: lettre
/// quotes the reply, not the command).
fn smtp_reply(e: &lettre::transport::smtp::Error) -> Option<String> {
    if e.is_permanent() || e.is_transient() {
        let kind = if e.is_permanent() {
            "rejected"
        } else {
            "deferred"
        };
        Some(format!("upstream {kind} it: {e}"))
    } else {
        None
    }
}

impl SmtpRelay {
    pub fn new(config: SmtpConfig) -> SmtpRelay {
        SmtpRelay {
            config,
            idle: Mutex::new(Vec::new()),
        }
    }

    pub fn config(&self) -> &SmtpConfig {
        &self.config
    }

    fn take_idle(&self) -> Option<Idle> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(candidate) = idle.pop() {
            if candidate.since.elapsed() < IDLE_FOR && !candidate.conn.has_broken() {
                return Some(candidate);
            }
        }
        None
    }

    fn put_back(&self, conn: AsyncSmtpConnection, sent: u32) {
        if sent >= REUSE_LIMIT || conn.has_broken() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < POOL_SIZE {
            idle.push(Idle {
                conn,
                since: Instant::now(),
                sent,
            });
        }
    }

    /// A new connection, with TLS and authentication as configured.
    async fn connect(&self) -> Result<AsyncSmtpConnection, Stopped> {
        let config = &self.config;
        let hello = ClientId::Domain(config.hello_name.clone());
        let wrapper_tls = match config.security {
            SmtpSecurity::Tls => Some(config.tls().map_err(Stopped::Broken)?),
            _ => None,
        };
        let mut conn = step(
            config.timeout,
            "connection",
            AsyncSmtpConnection::connect_tokio1(
                (config.host.as_str(), config.port),
                Some(config.timeout),
                &hello,
                wrapper_tls,
                None,
            ),
        )
        .await?;
        if config.security == SmtpSecurity::Starttls {
            if !conn.can_starttls() {
                conn.abort().await;
                return Err(Stopped::Broken(
                    "upstream does not offer STARTTLS, which --smtp-security starttls requires; \
                     nothing was sent"
                        .to_string(),
                ));
            }
            let params = config.tls().map_err(Stopped::Broken)?;
            step(config.timeout, "STARTTLS", conn.starttls(params, &hello)).await?;
        }
        if let (Some(user), Some(password)) = (&config.username, &config.password) {
            let credentials = Credentials::new(user.clone(), password.clone());
            step(
                config.timeout,
                "authentication",
                conn.auth(&[Mechanism::Plain, Mechanism::Login], &credentials),
            )
            .await?;
        }
        Ok(conn)
    }

    /// Hands the message over: on a pooled connection when one is idle
    /// (once more on a new one if the pooled one turns out closed), else on
    /// a new connection.
    pub async fn handoff(&self, envelope: &lettre::address::Envelope, bytes: &[u8]) -> Handoff {
        if let Some(Idle { mut conn, sent, .. }) = self.take_idle() {
            match self.transaction(&mut conn, envelope, bytes).await {
                Err(Attempt::Stale) => conn.abort().await,
                Err(Attempt::Done(handoff)) => return self.settle(conn, sent, handoff).await,
                Ok(handoff) => return self.settle(conn, sent, handoff).await,
            }
        }
        let mut conn = match self.connect().await {
            Ok(conn) => conn,
            Err(stopped) => return Handoff::Rejected(stopped.detail()),
        };
        let handoff = match self.transaction(&mut conn, envelope, bytes).await {
            Ok(handoff) | Err(Attempt::Done(handoff)) => handoff,
            Err(Attempt::Stale) => Handoff::Rejected(
                "upstream closed the new connection before MAIL FROM; nothing was sent".into(),
            ),
        };
        self.settle(conn, 0, handoff).await
    }

    /// Keeps the connection for the next handoff when it is still in a
    /// known state (the message accepted, or refused before its data).
    async fn settle(&self, mut conn: AsyncSmtpConnection, sent: u32, handoff: Handoff) -> Handoff {
        match &handoff {
            Handoff::Accepted => self.put_back(conn, sent + 1),
            Handoff::Rejected(_)
                if tokio::time::timeout(self.config.timeout, conn.command(Rset))
                    .await
                    .is_ok_and(|r| r.is_ok()) =>
            {
                self.put_back(conn, sent + 1)
            }
            _ => {
                let _ = tokio::time::timeout(Duration::from_millis(200), conn.abort()).await;
            }
        }
        handoff
    }

    /// One transaction. `Stale` only when the very first command found the
    /// connection closed, so nothing of this message reached the relay.
    async fn transaction(
        &self,
        conn: &mut AsyncSmtpConnection,
        envelope: &lettre::address::Envelope,
        bytes: &[u8],
    ) -> Result<Handoff, Attempt> {
        let timeout = self.config.timeout;
        let mut options = Vec::new();
        let non_ascii_address = envelope
            .from()
            .into_iter()
            .chain(envelope.to())
            .any(|a: &lettre::Address| !AsRef::<str>::as_ref(a).is_ascii());
        if non_ascii_address {
            if !conn.server_info().supports_feature(Extension::SmtpUtfEight) {
                return Err(Attempt::Done(Handoff::Rejected(
                    "upstream does not support SMTPUTF8 for non-ASCII addresses".to_string(),
                )));
            }
            options.push(MailParameter::SmtpUtfEight);
        }
        if !bytes.is_ascii() && conn.server_info().supports_feature(Extension::EightBitMime) {
            options.push(MailParameter::Body(MailBodyParameter::EightBitMime));
        }
        let mail = Mail::new(envelope.from().cloned(), options);
        match step(timeout, "MAIL FROM", conn.command(mail)).await {
            Ok(_) => {}
            Err(Stopped::Broken(_)) => return Err(Attempt::Stale),
            Err(Stopped::Refused(reply)) if reply.contains("(421)") => {
                return Err(Attempt::Stale);
            }
            Err(Stopped::Refused(reply)) => return Err(Attempt::Done(Handoff::Rejected(reply))),
        }
        let before_data = async {
            for rcpt in envelope.to() {
                step(
                    timeout,
                    "RCPT TO",
                    conn.command(Rcpt::new(rcpt.clone(), vec![])),
                )
                .await?;
            }
            step(timeout, "DATA", conn.command(Data)).await
        };
        if let Err(stopped) = before_data.await {
            return Ok(Handoff::Rejected(stopped.detail()));
        }
        // From here on the relay may have the message: only an explicit
        // reply code proves it was not accepted.
        Ok(
            match tokio::time::timeout(timeout, conn.message(bytes)).await {
                Ok(Ok(_)) => Handoff::Accepted,
                Ok(Err(e)) => match smtp_reply(&e) {
                    Some(detail) => Handoff::Rejected(detail),
                    None => Handoff::Unknown(format!(
                        "connection lost after the message data was sent: {e}"
                    )),
                },
                Err(_) => {
                    Handoff::Unknown(format!("no reply to the message data within {timeout:?}"))
                }
            },
        )
    }
}

/// A transaction that could not run to its end on this connection.
enum Attempt {
    /// The connection was closed before this message's first command.
    Stale,
    /// Decided before the data (e.g. the relay refused the sender).
    Done(Handoff),
}
