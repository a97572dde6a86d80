//! The handoff to the upstream provider, in two halves: `prepare` builds,
//! signs and addresses the message (or refuses it, `Rejected`), `deliver`
//! offers it and returns one of three outcomes, never retrying: `Accepted`
//! (the provider answered 2xx to the message), `Rejected` (definitely not
//! accepted: unreachable, or a 4xx/5xx reply at any step), `Unknown` (the
//! message data was written but no reply came: connection lost or timeout —
//! the provider may have accepted it).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use lettre::message::header::ContentType;
use lettre::message::header::{HeaderName, HeaderValue};
use lettre::message::{Attachment, Message, MultiPart, SinglePart};

use crate::model::ValidatedEmail;

mod signers;
mod smtp;

pub use smtp::{SmtpConfig, SmtpRelay, SmtpSecurity};

#[derive(Debug, Clone)]
pub enum Transport {
    /// A relay, with its pool of open connections.
    Smtp(Arc<SmtpRelay>),
    /// Writes each accepted message to `<dir>/<email id>.eml` (the embedded
    /// default, so a first send works without an SMTP server).
    File(PathBuf),
    /// [`Transport::File`] without the DKIM signature: for the send_load
    /// benchmark only (`--bench-unsigned`), which measures the send path's
    /// CPU without the signature to compute the bound signing allows.
    /// Nothing it writes leaves the machine.
    FileUnsigned(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handoff {
    Accepted,
    Rejected(String),
    Unknown(String),
    /// Never reached the transport: every recipient is on the tenant's
    /// suppression list (decided by the service before the handoff).
    Suppressed(String),
}

/// What the transport needs besides the validated email.
#[derive(Debug, Clone)]
pub struct Envelope<'a> {
    pub email_id: i64,
    pub message_id: &'a str,
    /// Signs the message (the sending domain's key).
    pub dkim: &'a Arc<DkimSigning>,
    /// The envelope sender (`MAIL FROM`): the email's return-path address
    /// (`feedback::verp`), where reports about it come back.
    pub return_path: &'a str,
}

/// The headers a DKIM signature covers (those present in the message).
const DKIM_SIGNED_HEADERS: &[&str] = &[
    "From",
    "To",
    "Cc",
    "Reply-To",
    "Subject",
    "Date",
    "Message-ID",
    "MIME-Version",
    "Content-Type",
];

/// A sending domain's DKIM signer (RSA-SHA256: mail-auth canonicalises and
/// writes the header, `AwsLcRsaKey` signs), built once from the stored key:
/// parsing and checking an RSA key costs more than a signature, so the
/// service keeps one per stored key. Its `Debug` never shows the key.
pub struct DkimSigning {
    domain: String,
    selector: String,
    signer: mail_auth::dkim::DkimSigner<AwsLcRsaKey, mail_auth::dkim::Done>,
}

/// An RSA private key for mail-auth's DKIM signer, on aws-lc-rs: its RSA-2048
/// private operation (AVX-512 IFMA where the CPU has it) costs less than half
/// of ring's on these machines, and the signature is most of a send's CPU.
struct AwsLcRsaKey {
    key: aws_lc_rs::signature::RsaKeyPair,
    rng: aws_lc_rs::rand::SystemRandom,
}

impl mail_auth::common::crypto::SigningKey for AwsLcRsaKey {
    type Hasher = mail_auth::common::crypto::Sha256;

    fn sign(&self, input: impl mail_auth::common::headers::Writable) -> mail_auth::Result<Vec<u8>> {
        let mut data = Vec::with_capacity(512);
        input.write(&mut data);
        let mut signature = vec![0; self.key.public_modulus_len()];
        self.key
            .sign(
                &aws_lc_rs::signature::RSA_PKCS1_SHA256,
                &self.rng,
                &data,
                &mut signature,
            )
            .map_err(|_| mail_auth::Error::CryptoError("RSA signing failed".into()))?;
        Ok(signature)
    }

    fn algorithm(&self) -> mail_auth::common::crypto::Algorithm {
        mail_auth::common::crypto::Algorithm::RsaSha256
    }
}

impl fmt::Debug for DkimSigning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DkimSigning")
            .field("domain", &self.domain)
            .field("selector", &self.selector)
            .field("key", &"<redacted>")
            .finish()
    }
}

impl DkimSigning {
    /// From the stored PKCS#8 DER (base64). The error never contains the key.
    pub fn from_pkcs8_base64(domain: &str, selector: &str, der_b64: &str) -> Result<Self, String> {
        use base64::Engine;
        let der = base64::engine::general_purpose::STANDARD
            .decode(der_b64)
            .map_err(|_| format!("the DKIM key of {domain} is not valid base64"))?;
        let key = AwsLcRsaKey {
            key: aws_lc_rs::signature::RsaKeyPair::from_pkcs8(&der)
                .map_err(|_| format!("the DKIM key of {domain} is not a PKCS#8 RSA key"))?,
            rng: aws_lc_rs::rand::SystemRandom::new(),
        };
        let signer = mail_auth::dkim::DkimSigner::from_key(key)
            .domain(domain.to_string())
            .selector(selector.to_string())
            .headers(DKIM_SIGNED_HEADERS.iter().copied());
        Ok(DkimSigning {
            domain: domain.to_string(),
            selector: selector.to_string(),
            signer,
        })
    }

    /// The message with a `DKIM-Signature` header in front.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, String> {
        use mail_auth::common::headers::HeaderWriter;
        let signature = self
            .signer
            .sign(message)
            .map_err(|e| format!("the message could not be DKIM-signed: {e}"))?;
        let mut signed = signature.to_header().into_bytes();
        signed.extend_from_slice(message);
        Ok(signed)
    }
}

/// `Message-ID` derived from the email id so reconciliation can match what
/// the provider saw.
pub fn message_id_for(email_id: i64, email: &ValidatedEmail) -> String {
    format!("<{email_id}@{}>", email.from.email.domain())
}

impl Transport {
    /// The relay of `config` (checked: see [`SmtpConfig::check`]).
    pub fn smtp(config: SmtpConfig) -> Result<Transport, String> {
        config.check()?;
        Ok(Transport::Smtp(Arc::new(SmtpRelay::new(config))))
    }

    pub fn describe(&self) -> String {
        match self {
            Transport::Smtp(relay) => {
                let c = relay.config();
                format!("smtp://{}:{} ({:?})", c.host, c.port, c.security)
            }
            Transport::File(dir) => format!("file:{}", dir.display()),
            Transport::FileUnsigned(dir) => format!("file:{} (unsigned, benchmark)", dir.display()),
        }
    }

    /// The first half of a handoff: the message built, signed and
    /// addressed, nothing offered to anyone yet (so it can run beside the
    /// write that reserves the email). A message that cannot be built or
    /// signed is refused here (`Rejected`).
    pub async fn prepare(
        &self,
        email: &ValidatedEmail,
        envelope: &Envelope<'_>,
    ) -> Result<Prepared, Handoff> {
        let started = std::time::Instant::now();
        let message = build_message(email, envelope.message_id).map_err(Handoff::Rejected)?;
        let bytes = match self {
            Transport::FileUnsigned(_) => message.formatted(),
            _ => signers::sign(envelope.dkim, message.formatted())
                .await
                .map_err(|detail| Handoff::Rejected(format!("not sent: {detail}")))?,
        };
        let envelope = smtp_envelope(&message, envelope.return_path).map_err(Handoff::Rejected)?;
        Ok(Prepared {
            bytes,
            envelope,
            took: started.elapsed(),
        })
    }

    /// The second half: the prepared message offered to the relay (or
    /// written to the directory).
    pub async fn deliver(&self, email_id: i64, prepared: &Prepared) -> Handoff {
        match self {
            Transport::File(dir) | Transport::FileUnsigned(dir) => {
                // As a final delivery would: the envelope sender in front.
                let mut file = match prepared.envelope.from() {
                    Some(from) => format!("Return-Path: <{from}>\r\n").into_bytes(),
                    None => Vec::new(),
                };
                file.extend_from_slice(&prepared.bytes);
                write_file(dir, email_id, &file)
            }
            Transport::Smtp(relay) => relay.handoff(&prepared.envelope, &prepared.bytes).await,
        }
    }
}

/// A message ready to leave: its signed bytes and its SMTP envelope
/// ([`Transport::prepare`]).
#[derive(Debug)]
pub struct Prepared {
    bytes: Vec<u8>,
    envelope: lettre::address::Envelope,
    /// How long building and signing it took.
    pub took: std::time::Duration,
}

/// The SMTP envelope: the message's recipients, and the return path as
/// sender.
fn smtp_envelope(message: &Message, path: &str) -> Result<lettre::address::Envelope, String> {
    let envelope = message.envelope();
    let sender: lettre::Address = path
        .parse()
        .map_err(|e| format!("return path `{path}` is not an address: {e}"))?;
    lettre::address::Envelope::new(Some(sender), envelope.to().to_vec())
        .map_err(|e| format!("envelope cannot be built: {e}"))
}

/// The MIME message of a validated email under `message_id` (see
/// [`message_id_for`]), as the handoff builds it before signing; the error
/// says what cannot be encoded.
pub fn build_message(email: &ValidatedEmail, message_id: &str) -> Result<Message, String> {
    let fields = &email.payload.message;
    let mut builder = Message::builder()
        .from(email.from.clone())
        .subject(fields.subject.clone())
        .message_id(Some(message_id.to_string()))
        .date_now();
    for m in &email.to {
        builder = builder.to(m.clone());
    }
    for m in &email.cc {
        builder = builder.cc(m.clone());
    }
    for m in &email.bcc {
        builder = builder.bcc(m.clone());
    }
    for m in &email.reply_to {
        builder = builder.reply_to(m.clone());
    }
    for (name, value) in fields.headers.iter().flatten() {
        let name = HeaderName::new_from_ascii(name.clone())
            .map_err(|_| format!("header `{name}` cannot be encoded"))?;
        builder = builder.raw_header(HeaderValue::new(name, value.clone()));
    }

    enum Body {
        Single(SinglePart),
        Alternative(MultiPart),
    }
    let body = match (fields.text.clone(), fields.html.clone()) {
        (Some(t), Some(h)) => Body::Alternative(MultiPart::alternative_plain_html(t, h)),
        (None, Some(h)) => Body::Single(SinglePart::html(h)),
        (t, None) => Body::Single(SinglePart::plain(t.unwrap_or_default())),
    };
    let message = if email.attachments.is_empty() {
        match body {
            Body::Single(part) => builder.singlepart(part),
            Body::Alternative(parts) => builder.multipart(parts),
        }
    } else {
        let domain = email.from.email.domain().to_string();
        let mut mixed = match body {
            Body::Single(part) => MultiPart::mixed().singlepart(part),
            Body::Alternative(parts) => MultiPart::mixed().multipart(parts),
        };
        for a in &email.attachments {
            let content_type = a
                .content_type
                .as_deref()
                .and_then(|ct| ContentType::parse(ct).ok())
                .unwrap_or_else(|| {
                    ContentType::parse("application/octet-stream").expect("static MIME type")
                });
            let attachment = match (&a.content_id, &a.filename) {
                (Some(cid), Some(name)) => {
                    Attachment::new_inline_with_name(format!("{cid}@{domain}"), name.clone())
                }
                (Some(cid), None) => Attachment::new_inline(format!("{cid}@{domain}")),
                (None, name) => {
                    Attachment::new(name.clone().unwrap_or_else(|| "attachment".into()))
                }
            };
            mixed = mixed.singlepart(attachment.body(a.bytes.clone(), content_type));
        }
        builder.multipart(mixed)
    };
    message.map_err(|e| format!("message cannot be built: {e}"))
}

/// Writes the message under a temporary name and renames it into place, so
/// a reader never sees half a message. The calls run on the request's own
/// thread: two file-system calls on a small file (no fsync) cost less than
/// the two context switches of a hop to the blocking pool and back. The
/// directory is created when it is missing (first message, or removed
/// since), not checked on every message.
fn write_file(dir: &std::path::Path, email_id: i64, bytes: &[u8]) -> Handoff {
    let tmp = dir.join(format!(".{email_id}.eml.tmp"));
    let write = || {
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, dir.join(format!("{email_id}.eml")))
    };
    let written = match write() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).and_then(|()| write())
        }
        written => written,
    };
    match written {
        Ok(()) => Handoff::Accepted,
        Err(e) => Handoff::Rejected(format!("file transport could not write the message: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use rsa::pkcs8::EncodePrivateKey;

    /// A fresh RSA-2048 private key as a domain stores it (PKCS#8 DER,
    /// base64).
    pub(super) fn generated_key() -> String {
        let key = rsa::RsaPrivateKey::new(&mut rand::rngs::OsRng, 2048).unwrap();
        let der = key.to_pkcs8_der().unwrap();
        base64::engine::general_purpose::STANDARD.encode(der.as_bytes())
    }

    #[test]
    fn a_signing_key_never_shows_in_debug_or_errors() {
        // ring signs with RSA keys of 2048 bits and more.
        let b64 = generated_key();
        let signing = DkimSigning::from_pkcs8_base64("shop.example", "mailservice", &b64).unwrap();
        let shown = format!("{signing:?}");
        assert!(
            shown.contains("<redacted>") && !shown.contains(&b64[..40]),
            "{shown}"
        );
        // A broken key is named by its domain, never echoed.
        let broken = format!("{}AAAA", &b64[..b64.len() / 2]);
        let err =
            DkimSigning::from_pkcs8_base64("shop.example", "mailservice", &broken).unwrap_err();
        assert!(
            err.contains("shop.example") && !err.contains(&broken[..40]),
            "{err}"
        );
    }
}
