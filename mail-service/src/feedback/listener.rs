//! The feedback SMTP listener: the MX of the domains' return-path
//! subdomains (`feedback-smtp.<sending host>`). It takes any message,
//! applies it through `MailService::ingest_feedback` and answers 250 once
//! it is kept (applied or quarantined), 451 when storage fails (the sender
//! keeps it and retries).
//!
//! Written on tokio rather than with an SMTP server crate: the maintained
//! embeddable one (`mailin-embedded`) serves from a fixed pool of blocking
//! threads with five-minute socket timeouts and no way to stop it, so a
//! few idle connections would hold the listener; here every read has a
//! deadline, connections are bounded, and the listener stops with the
//! service. It speaks the small part of SMTP a feedback MX needs (EHLO,
//! MAIL, RCPT, DATA, RSET, NOOP, QUIT, and STARTTLS when it has a
//! certificate, for MTAs that deliver only over TLS; no AUTH: reports are
//! public by nature and every one is checked by its return-path token).
//! After STARTTLS everything is forgotten (RFC 3207): the greeting, the
//! envelope, and any command the client pipelined behind STARTTLS, which
//! is discarded, never executed inside the encrypted session.
//!
//! Limits: `SIZE` is advertised and a larger declared size is refused at
//! `MAIL FROM` (552); a message whose data grows past it is read to its end
//! and refused (552), never stored. Each peer address may start a limited
//! number of messages per minute (450 beyond). Lines are bounded, every
//! read has a timeout, and connections beyond the bound are refused (421).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::service::{FeedbackSource, Ingested, MailService};

/// Longest command line (RFC 5321: 512 octets; some slack for parameters).
const MAX_COMMAND_LINE: u64 = 2048;
/// Longest line of message data read at once (RFC 5321: 1000 octets).
const MAX_DATA_LINE: u64 = 64 * 1024;
/// Recipients per message.
const MAX_RECIPIENTS: usize = 100;

/// The listener's bounds.
#[derive(Debug, Clone)]
pub struct ListenerLimits {
    /// Largest message accepted, in bytes.
    pub max_message_bytes: usize,
    /// Messages one peer address may start per minute.
    pub messages_per_minute: u32,
    /// How long a read may wait for the peer.
    pub read_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            max_message_bytes: 10 * 1024 * 1024,
            messages_per_minute: 60,
            read_timeout: Duration::from_secs(60),
            max_connections: 64,
        }
    }
}

/// A running listener; stops when dropped.
#[derive(Debug)]
pub struct FeedbackListener {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FeedbackListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FeedbackListener {
    /// Serves on `listener` until dropped, without TLS.
    pub fn start(
        listener: TcpListener,
        service: MailService,
        limits: ListenerLimits,
    ) -> std::io::Result<FeedbackListener> {
        Self::start_with_tls(listener, service, limits, None)
    }

    /// Serves on `listener` until dropped, offering STARTTLS with `tls`
    /// when given (see [`tls_acceptor`]).
    pub fn start_with_tls(
        listener: TcpListener,
        service: MailService,
        limits: ListenerLimits,
        tls: Option<TlsAcceptor>,
    ) -> std::io::Result<FeedbackListener> {
        let addr = listener.local_addr()?;
        let task = tokio::spawn(serve(listener, service, limits, tls));
        Ok(FeedbackListener { addr, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Per-peer message counts in fixed one-minute windows (this node's; the
/// limit is a brake on floods, not a correctness rule).
#[derive(Default)]
struct PeerRates(Mutex<HashMap<IpAddr, (Instant, u32)>>);

impl PeerRates {
    /// Counts one message of `peer`; false when it is over the limit.
    fn admit(&self, peer: IpAddr, limit: u32) -> bool {
        let now = Instant::now();
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 10_000 {
            map.retain(|_, (start, _)| now.duration_since(*start) < Duration::from_secs(60));
        }
        let entry = map.entry(peer).or_insert((now, 0));
        if now.duration_since(entry.0) >= Duration::from_secs(60) {
            *entry = (now, 0);
        }
        if entry.1 >= limit {
            return false;
        }
        entry.1 += 1;
        true
    }
}

async fn serve(
    listener: TcpListener,
    service: MailService,
    limits: ListenerLimits,
    tls: Option<TlsAcceptor>,
) {
    let limits = Arc::new(limits);
    let rates = Arc::new(PeerRates::default());
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let (mut stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "feedback listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            let _ = stream
                .write_all(b"421 4.3.2 Too many connections, try again later\r\n")
                .await;
            continue;
        };
        let (service, limits, rates) = (service.clone(), limits.clone(), rates.clone());
        let tls = tls.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let peer_ip = peer.ip();
            if let Err(e) = session(stream, peer_ip, &service, &limits, &rates, tls).await {
                tracing::debug!(peer = %peer, error = %e, "feedback session ended");
            }
        });
    }
}

/// Reads one line of at most `max` bytes within the timeout; `None` at the
/// end of the stream. A longer line is cut (the rest comes as next line).
async fn read_line<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    buf: &mut Vec<u8>,
    max: u64,
    timeout: Duration,
) -> std::io::Result<Option<()>> {
    buf.clear();
    let read = tokio::time::timeout(timeout, (&mut *reader).take(max).read_until(b'\n', buf))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "read timed out"))??;
    Ok((read > 0).then_some(()))
}

/// Where the messages of a session go: the service when serving; a
/// recorder when a session is driven on its own ([`plain_session`]).
pub trait FeedbackSink: Sync {
    /// Keeps one message received with `DATA` (already dot-unstuffed and
    /// within the size limit).
    fn ingest(
        &self,
        message: &[u8],
        source: FeedbackSource,
    ) -> impl Future<Output = Result<Ingested, crate::error::Error>> + Send;
}

impl FeedbackSink for MailService {
    fn ingest(
        &self,
        message: &[u8],
        source: FeedbackSource,
    ) -> impl Future<Output = Result<Ingested, crate::error::Error>> + Send {
        self.ingest_feedback(message, source)
    }
}

/// Who the session is with and what it may use.
struct Peer<'a, K> {
    ip: IpAddr,
    sink: &'a K,
    limits: &'a ListenerLimits,
    rates: &'a PeerRates,
}

/// One session without STARTTLS over any byte stream: the greeting, then
/// commands until the client quits or the stream ends. The listener runs
/// the same conversation on its connections; this drives it from bytes
/// (the fuzz target `smtp_session`, tests). The peer's message rate is
/// counted for this session alone.
pub async fn plain_session<S, K>(
    stream: S,
    ip: IpAddr,
    sink: &K,
    limits: &ListenerLimits,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
    K: FeedbackSink,
{
    let rates = PeerRates::default();
    let peer = Peer {
        ip,
        sink,
        limits,
        rates: &rates,
    };
    let mut conn = BufReader::new(stream);
    conn.write_all(GREETING).await?;
    commands(&mut conn, &peer, false).await?;
    Ok(())
}

const GREETING: &[u8] = b"220 mail-service feedback ESMTP\r\n";

/// How a run of commands ended.
enum Ended {
    Closed,
    StartTls,
}

async fn session(
    stream: TcpStream,
    ip: IpAddr,
    service: &MailService,
    limits: &ListenerLimits,
    rates: &PeerRates,
    tls: Option<TlsAcceptor>,
) -> std::io::Result<()> {
    let peer = Peer {
        ip,
        sink: service,
        limits,
        rates,
    };
    let mut plain = BufReader::new(stream);
    plain.write_all(GREETING).await?;
    let Some(acceptor) = tls else {
        commands(&mut plain, &peer, false).await?;
        return Ok(());
    };
    match commands(&mut plain, &peer, true).await? {
        Ended::Closed => Ok(()),
        Ended::StartTls => {
            // Whatever the client sent behind STARTTLS is dropped with the
            // plain reader's buffer.
            let stream = plain.into_inner();
            let encrypted = tokio::time::timeout(limits.read_timeout, acceptor.accept(stream))
                .await
                .map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")
                })??;
            commands(&mut BufReader::new(encrypted), &peer, false).await?;
            Ok(())
        }
    }
}

/// Serves commands until the client quits or leaves, or (when
/// `offer_tls`) asks for STARTTLS, which is answered here and performed by
/// the caller.
async fn commands<S: AsyncRead + AsyncWrite + Unpin, K: FeedbackSink>(
    conn: &mut BufReader<S>,
    peer: &Peer<'_, K>,
    offer_tls: bool,
) -> std::io::Result<Ended> {
    let Peer {
        ip: peer,
        sink,
        limits,
        rates,
    } = *peer;
    let mut line = Vec::new();
    let mut mail_from: Option<String> = None;
    let mut rcpt_to: Vec<String> = Vec::new();
    loop {
        if read_line(conn, &mut line, MAX_COMMAND_LINE, limits.read_timeout)
            .await?
            .is_none()
        {
            return Ok(Ended::Closed);
        }
        let text = String::from_utf8_lossy(&line);
        let command = text.trim_end_matches(['\r', '\n']);
        let upper = command.to_ascii_uppercase();
        let reply: Vec<u8> = if upper.starts_with("EHLO") {
            format!(
                "250-mail-service feedback\r\n250-SIZE {}\r\n250-8BITMIME\r\n250-SMTPUTF8\r\n{}250 ENHANCEDSTATUSCODES\r\n",
                limits.max_message_bytes,
                if offer_tls { "250-STARTTLS\r\n" } else { "" }
            )
            .into_bytes()
        } else if upper == "STARTTLS" {
            if !offer_tls {
                b"502 5.5.1 TLS is not available or already active\r\n".to_vec()
            } else if mail_from.is_some() {
                b"503 5.5.1 STARTTLS only before MAIL\r\n".to_vec()
            } else {
                conn.write_all(b"220 2.0.0 Ready to start TLS\r\n").await?;
                return Ok(Ended::StartTls);
            }
        } else if upper.starts_with("HELO") || upper == "NOOP" {
            b"250 2.0.0 OK\r\n".to_vec()
        } else if let Some(rest) = upper.strip_prefix("MAIL FROM:") {
            let declared = rest
                .split_whitespace()
                .find_map(|p| p.strip_prefix("SIZE="))
                .and_then(|n| n.parse::<u64>().ok());
            if mail_from.is_some() {
                b"503 5.5.1 Sender already given\r\n".to_vec()
            } else if declared.is_some_and(|n| n > limits.max_message_bytes as u64) {
                format!(
                    "552 5.3.4 Message size exceeds the limit of {} bytes\r\n",
                    limits.max_message_bytes
                )
                .into_bytes()
            } else if !rates.admit(peer, limits.messages_per_minute) {
                tracing::warn!(%peer, "feedback listener: peer over its message rate");
                b"450 4.7.1 Too many messages from your address, try again later\r\n".to_vec()
            } else {
                mail_from = Some(command[10..].trim().to_string());
                rcpt_to.clear();
                b"250 2.1.0 OK\r\n".to_vec()
            }
        } else if upper.starts_with("RCPT TO:") {
            if mail_from.is_none() {
                b"503 5.5.1 MAIL first\r\n".to_vec()
            } else if rcpt_to.len() >= MAX_RECIPIENTS {
                b"452 4.5.3 Too many recipients\r\n".to_vec()
            } else {
                let address = command[8..]
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string();
                rcpt_to.push(address);
                b"250 2.1.5 OK\r\n".to_vec()
            }
        } else if upper == "DATA" {
            if rcpt_to.is_empty() {
                b"503 5.5.1 RCPT first\r\n".to_vec()
            } else {
                conn.write_all(b"354 End data with <CR><LF>.<CR><LF>\r\n")
                    .await?;
                let data = read_data(conn, limits).await?;
                let rcpts = std::mem::take(&mut rcpt_to);
                mail_from = None;
                match data {
                    None => format!(
                        "552 5.3.4 Message size exceeds the limit of {} bytes\r\n",
                        limits.max_message_bytes
                    )
                    .into_bytes(),
                    Some(message) => {
                        let source = FeedbackSource::Smtp {
                            peer,
                            rcpt_to: rcpts,
                        };
                        match sink.ingest(&message, source).await {
                            Ok(Ingested::Applied { report_id, .. }) => {
                                format!("250 2.0.0 Applied as report {report_id}\r\n").into_bytes()
                            }
                            Ok(Ingested::Quarantined { report_id, .. }) => {
                                format!("250 2.0.0 Kept as report {report_id} (quarantined)\r\n")
                                    .into_bytes()
                            }
                            Ok(Ingested::Duplicate) => b"250 2.0.0 Received before\r\n".to_vec(),
                            Err(e) => {
                                tracing::warn!(error = %e, "feedback report could not be stored");
                                b"451 4.3.0 Temporary storage failure, try again later\r\n".to_vec()
                            }
                        }
                    }
                }
            }
        } else if upper == "RSET" {
            mail_from = None;
            rcpt_to.clear();
            b"250 2.0.0 OK\r\n".to_vec()
        } else if upper == "QUIT" {
            conn.write_all(b"221 2.0.0 Bye\r\n").await?;
            return Ok(Ended::Closed);
        } else {
            b"502 5.5.2 Command not recognized\r\n".to_vec()
        };
        conn.write_all(&reply).await?;
    }
}

/// The message data up to the lone dot, dot-unstuffed; `None` when it grew
/// past the size limit (the rest is read and discarded).
async fn read_data<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    limits: &ListenerLimits,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut data = Vec::new();
    let mut too_large = false;
    let mut line = Vec::new();
    loop {
        if read_line(reader, &mut line, MAX_DATA_LINE, limits.read_timeout)
            .await?
            .is_none()
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed during DATA",
            ));
        }
        if line == b".\r\n" || line == b".\n" {
            return Ok((!too_large).then_some(data));
        }
        if too_large {
            continue;
        }
        let unstuffed = line.strip_prefix(b".").unwrap_or(&line);
        if data.len() + unstuffed.len() > limits.max_message_bytes {
            too_large = true;
            data = Vec::new();
            continue;
        }
        data.extend_from_slice(unstuffed);
    }
}

/// The acceptor for STARTTLS from a PEM certificate chain and its PEM
/// private key. The errors name the file, never the key's bytes.
pub fn tls_acceptor(
    cert_file: &std::path::Path,
    key_file: &std::path::Path,
) -> Result<TlsAcceptor, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: not a PEM certificate chain: {e}", cert_file.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: holds no certificate", cert_file.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|_| {
        format!(
            "{}: not a PEM private key (PKCS#8, PKCS#1 or SEC1)",
            key_file.display()
        )
    })?;
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS setup failed: {e}"))?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .map_err(|e| {
        format!(
            "{} and {} do not make a TLS identity: {e}",
            cert_file.display(),
            key_file.display()
        )
    })?;
    Ok(TlsAcceptor::from(std::sync::Arc::new(config)))
}
