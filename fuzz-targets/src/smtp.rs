//! The feedback SMTP listener's conversation, driven as one byte stream.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;
use std::time::Duration;

use mail_service::error::Error;
use mail_service::feedback::listener::{FeedbackSink, ListenerLimits, plain_session};
use mail_service::service::{FeedbackSource, Ingested};

/// The bounds of the fuzzed session: small, so the size limit is reached.
const MAX_MESSAGE: usize = 1024;
const MAX_RECIPIENTS: usize = 100;

/// Keeps what the session hands over instead of storing it.
#[derive(Default)]
struct Recorder(Mutex<Vec<(Vec<u8>, usize)>>);

impl FeedbackSink for Recorder {
    async fn ingest(&self, message: &[u8], source: FeedbackSource) -> Result<Ingested, Error> {
        let FeedbackSource::Smtp { rcpt_to, .. } = source else {
            panic!("the listener named another source: {source:?}");
        };
        self.0
            .lock()
            .expect("not poisoned")
            .push((message.to_vec(), rcpt_to.len()));
        Ok(Ingested::Duplicate)
    }
}

/// The client's side of a session (commands, pipelining, `DATA` with
/// dot-stuffing, long lines, sizes): never a panic; every reply line is a
/// three-digit code and a separator; a message reaches the service only
/// after `MAIL`, `RCPT` and `DATA`, whole lines of at most the size limit,
/// with 1 to 100 recipients; each one is acknowledged with a 250.
pub fn smtp_session(data: &[u8]) {
    let limits = ListenerLimits {
        max_message_bytes: MAX_MESSAGE,
        messages_per_minute: 10_000,
        read_timeout: Duration::from_secs(5),
        max_connections: 1,
    };
    let recorder = Recorder::default();
    let mut stream = tokio::io::join(data, Vec::new());
    let peer = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    // An error is the client leaving mid-message (the end of the input).
    let _ = crate::block_on(plain_session(&mut stream, peer, &recorder, &limits));
    let replies = stream.into_inner().1;
    assert!(replies.starts_with(b"220 "), "no greeting");
    for line in replies.split_inclusive(|b| *b == b'\n') {
        let line = line
            .strip_suffix(b"\r\n")
            .unwrap_or_else(|| panic!("a reply without CRLF: {}", String::from_utf8_lossy(line)));
        let well_formed = line.len() >= 4
            && line[..3].iter().all(u8::is_ascii_digit)
            && matches!(line[3], b' ' | b'-');
        assert!(well_formed, "reply `{}`", String::from_utf8_lossy(line));
    }
    let received = recorder.0.into_inner().expect("not poisoned");
    // Every place a `DATA` command could start (a long line is read in
    // pieces, so any occurrence counts).
    let data_commands = data
        .windows(4)
        .filter(|w| w.eq_ignore_ascii_case(b"DATA"))
        .count();
    assert!(
        received.len() <= data_commands,
        "more messages than DATA commands"
    );
    let acknowledged = replies
        .windows(b"250 2.0.0 Received before".len())
        .filter(|w| *w == b"250 2.0.0 Received before")
        .count();
    assert_eq!(
        acknowledged,
        received.len(),
        "a message kept without its 250"
    );
    for (message, recipients) in received {
        assert!(message.len() <= MAX_MESSAGE, "{} bytes kept", message.len());
        assert!(
            (1..=MAX_RECIPIENTS).contains(&recipients),
            "{recipients} recipients"
        );
        assert!(
            message.is_empty() || message.ends_with(b"\n"),
            "a message ending in a cut line"
        );
    }
}
