//! A loopback SMTP server for tests and local trials. It speaks enough SMTP
//! for `lettre` and can be told how to answer the message data: accept,
//! reject (5xx), defer (4xx), drop the connection without a reply, or never
//! reply. Start it with [`SmtpSink::start`] or `mail-service smtp-sink`.

use std::net::SocketAddr;

use base64::Engine;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Recipients whose address contains this are refused at `RCPT TO` (550),
/// and users whose name contains it at `AUTH` (535), whatever the mode: a
/// way to make one item of a batch, or a login, fail.
pub const REJECTED_MAILBOX_MARK: &str = "reject-me";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SinkMode {
    /// 250 after the data: the message is accepted.
    Accept,
    /// 550 after the data.
    Reject,
    /// 451 after the data.
    Defer,
    /// Read the data, then close the connection without replying.
    DropAfterData,
    /// Read the data and never reply (the client has to time out).
    Stall,
}

/// A message the sink received in full.
#[derive(Debug, Clone)]
pub struct Received {
    pub mail_from: String,
    pub rcpt_to: Vec<String>,
    pub data: String,
    /// How the sink answered it.
    pub mode: SinkMode,
    /// When the sink accepted the connection that carried it: the start of
    /// the client's handoff as the provider sees it.
    pub connected_at: SystemTime,
    /// When its `MAIL FROM` arrived: the start of this message's
    /// transaction (later than `connected_at` on a reused connection).
    pub mail_from_at: SystemTime,
}

impl Received {
    /// The `Message-ID` header value, if present.
    pub fn message_id(&self) -> Option<String> {
        self.data.lines().find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("message-id")
                .then(|| value.trim().to_string())
        })
    }
}

#[derive(Debug, Clone)]
pub struct SmtpSink {
    addr: SocketAddr,
    mode: Arc<Mutex<SinkMode>>,
    received: Arc<Mutex<Vec<Received>>>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        if Arc::strong_count(&self.task) == 1 {
            self.task.abort();
        }
    }
}

impl SmtpSink {
    /// Listens on `127.0.0.1:port` (0 picks a free port).
    pub async fn start(port: u16, mode: SinkMode) -> std::io::Result<SmtpSink> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let mode = Arc::new(Mutex::new(mode));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (m, r) = (mode.clone(), received.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let connected_at = SystemTime::now();
                let (m, r) = (m.clone(), r.clone());
                tokio::spawn(async move {
                    let _ = session(stream, connected_at, m, r).await;
                });
            }
        });
        Ok(SmtpSink {
            addr,
            mode,
            received,
            task: Arc::new(task),
        })
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn set_mode(&self, mode: SinkMode) {
        *self.mode.lock().unwrap_or_else(|e| e.into_inner()) = mode;
    }

    /// Every message whose data arrived in full, whatever the answer.
    pub fn received(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Messages the sink accepted (answered 250) or may have accepted
    /// (dropped or stalled after the data): everything a real provider could
    /// go on to deliver.
    pub fn possibly_delivered(&self) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| !matches!(r.mode, SinkMode::Reject | SinkMode::Defer))
            .collect()
    }
}

async fn session(
    stream: TcpStream,
    connected_at: SystemTime,
    mode: Arc<Mutex<SinkMode>>,
    received: Arc<Mutex<Vec<Received>>>,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    write.write_all(b"220 smtp-sink ESMTP ready\r\n").await?;
    let mut mail_from = String::new();
    let mut mail_from_at = connected_at;
    let mut rcpt_to = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let upper = line.trim_end().to_ascii_uppercase();
        if upper.starts_with("EHLO") {
            write
                .write_all(
                    b"250-smtp-sink\r\n250-8BITMIME\r\n250-SMTPUTF8\r\n250 AUTH PLAIN LOGIN\r\n",
                )
                .await?;
        } else if upper.starts_with("HELO") || upper.starts_with("NOOP") {
            write.write_all(b"250 OK\r\n").await?;
        } else if upper.starts_with("AUTH") {
            // `AUTH PLAIN <base64 of \0user\0password>`: users carrying the
            // rejection mark are refused.
            let credentials = line
                .split_whitespace()
                .nth(2)
                .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
                .unwrap_or_default();
            if String::from_utf8_lossy(&credentials).contains(REJECTED_MAILBOX_MARK) {
                write
                    .write_all(b"535 5.7.8 Authentication credentials invalid\r\n")
                    .await?;
            } else {
                write
                    .write_all(b"235 2.7.0 Authentication successful\r\n")
                    .await?;
            }
        } else if upper.starts_with("MAIL FROM:") {
            mail_from = line.trim_end()[10..].trim().to_string();
            mail_from_at = SystemTime::now();
            rcpt_to.clear();
            write.write_all(b"250 OK\r\n").await?;
        } else if upper.starts_with("RCPT TO:") {
            let rcpt = line.trim_end()[8..].trim().to_string();
            if rcpt.contains(REJECTED_MAILBOX_MARK) {
                write
                    .write_all(b"550 5.1.1 Mailbox unavailable\r\n")
                    .await?;
            } else {
                rcpt_to.push(rcpt);
                write.write_all(b"250 OK\r\n").await?;
            }
        } else if upper == "DATA" {
            write
                .write_all(b"354 End data with <CR><LF>.<CR><LF>\r\n")
                .await?;
            let mut data = String::new();
            loop {
                line.clear();
                if lines.read_line(&mut line).await? == 0 {
                    return Ok(());
                }
                if line == ".\r\n" || line == ".\n" {
                    break;
                }
                data.push_str(line.strip_prefix('.').unwrap_or(&line));
            }
            let current = *mode.lock().unwrap_or_else(|e| e.into_inner());
            received
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Received {
                    mail_from: mail_from.clone(),
                    rcpt_to: std::mem::take(&mut rcpt_to),
                    data,
                    mode: current,
                    connected_at,
                    mail_from_at,
                });
            match current {
                SinkMode::Accept => write.write_all(b"250 2.0.0 OK queued\r\n").await?,
                SinkMode::Reject => {
                    write
                        .write_all(b"550 5.7.1 Message rejected by sink\r\n")
                        .await?
                }
                SinkMode::Defer => write.write_all(b"451 4.3.0 Try again later\r\n").await?,
                SinkMode::DropAfterData => return Ok(()),
                SinkMode::Stall => {
                    // Hold the connection open until the client gives up.
                    while lines.read_line(&mut line).await? > 0 {
                        line.clear();
                    }
                    return Ok(());
                }
            }
        } else if upper == "RSET" {
            mail_from.clear();
            rcpt_to.clear();
            write.write_all(b"250 OK\r\n").await?;
        } else if upper == "QUIT" {
            write.write_all(b"221 Bye\r\n").await?;
            return Ok(());
        } else {
            write.write_all(b"500 Command not recognized\r\n").await?;
        }
    }
}
