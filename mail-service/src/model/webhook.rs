//! Webhooks: the event types (Resend's names), a webhook's stored row, its
//! signing secret (never shown after creation, never in Debug output), the
//! Standard Webhooks signature, and the rules an endpoint must meet before
//! anything is sent to it (scheme, host, the addresses it may resolve to).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rand::RngCore;

use crate::error::Error;

use super::UnknownValue;

/// What happened, in Resend's names. Every type a webhook may subscribe to;
/// the service emits each from what it observes (see the README).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    EmailSent,
    EmailScheduled,
    EmailFailed,
    EmailCanceled,
    EmailSuppressed,
    EmailDelivered,
    EmailDeliveryDelayed,
    EmailBounced,
    EmailComplained,
    DomainUpdated,
}

impl EventType {
    pub const ALL: &[EventType] = &[
        EventType::EmailSent,
        EventType::EmailScheduled,
        EventType::EmailFailed,
        EventType::EmailCanceled,
        EventType::EmailSuppressed,
        EventType::EmailDelivered,
        EventType::EmailDeliveryDelayed,
        EventType::EmailBounced,
        EventType::EmailComplained,
        EventType::DomainUpdated,
    ];

    const NAMES: &[&str] = &[
        "email.sent",
        "email.scheduled",
        "email.failed",
        "email.canceled",
        "email.suppressed",
        "email.delivered",
        "email.delivery_delayed",
        "email.bounced",
        "email.complained",
        "domain.updated",
    ];

    /// The event's `type`, as sent and stored.
    pub fn as_str(self) -> &'static str {
        let index = EventType::ALL
            .iter()
            .position(|t| *t == self)
            .unwrap_or_default();
        EventType::NAMES[index]
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for EventType {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, UnknownValue> {
        EventType::NAMES
            .iter()
            .position(|n| *n == s)
            .map(|i| EventType::ALL[i])
            .ok_or_else(|| UnknownValue {
                what: "event type",
                value: s.to_string(),
                expected: EventType::NAMES,
            })
    }
}

super::decode_from_text!([] EventType);

text_enum!(
    /// Whether a webhook is sent its events.
    WebhookStatus, "webhook status" {
        Enabled = "enabled",
        Disabled = "disabled",
    }
);

text_enum!(
    /// Where one outbox row stands: `pending` until an attempt got a 2xx
    /// (`delivered`) or the retry schedule ran out or the endpoint answered
    /// 410 (`failed`).
    DeliveryStatus, "delivery status" {
        Pending = "pending",
        Delivered = "delivered",
        Failed = "failed",
    }
);

/// Prefix of a signing secret (Standard Webhooks and Svix use it too).
pub const SECRET_PREFIX: &str = "whsec_";

/// A webhook's signing secret, `whsec_<base64 of 32 random bytes>`. Shown
/// once, when it is created; its Debug output never holds it.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningSecret(String);

impl SigningSecret {
    pub fn generate() -> SigningSecret {
        let mut key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut key);
        SigningSecret(format!("{SECRET_PREFIX}{}", STANDARD.encode(key)))
    }

    /// The text given to the customer once (and stored, to sign).
    pub fn reveal(&self) -> &str {
        &self.0
    }

    /// The HMAC key: the base64 part, decoded.
    pub fn key(&self) -> Result<Vec<u8>, Error> {
        let encoded = self.0.strip_prefix(SECRET_PREFIX).unwrap_or(&self.0);
        STANDARD
            .decode(encoded)
            .map_err(|_| Error::StoredDataInvalid {
                detail: "a webhook signing secret is not valid base64".into(),
            })
    }
}

impl std::fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningSecret(redacted)")
    }
}

impl std::str::FromStr for SigningSecret {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, UnknownValue> {
        Ok(SigningSecret(s.to_string()))
    }
}

super::decode_from_text!([] SigningSecret);

/// A stored webhook.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Webhook {
    pub id: i64,
    pub tenant_id: i64,
    pub endpoint: String,
    /// `,email.sent,email.failed,` (see `events_column`).
    pub events: String,
    pub secret: SigningSecret,
    /// The secret before the last rotation, signing beside the new one
    /// until `previous_secret_until`.
    pub previous_secret: Option<SigningSecret>,
    pub previous_secret_until: Option<i64>,
    pub status: WebhookStatus,
    pub disabled_reason: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Webhook {
    /// The subscribed event types, in the order of `EventType::ALL`.
    pub fn event_types(&self) -> Vec<EventType> {
        self.events
            .split(',')
            .filter_map(|name| name.parse().ok())
            .collect()
    }

    /// The keys that sign a message at `now`: the current secret, and the
    /// previous one while its grace period lasts.
    pub fn signing_keys(&self, now: i64) -> Result<Vec<Vec<u8>>, Error> {
        let mut keys = vec![self.secret.key()?];
        if let (Some(previous), Some(until)) = (&self.previous_secret, self.previous_secret_until)
            && now < until
        {
            keys.push(previous.key()?);
        }
        Ok(keys)
    }
}

/// The stored form of a subscription list: each name with a comma before
/// and after it, so `events LIKE '%,email.sent,%'` finds subscribers.
pub fn events_column(events: &[EventType]) -> String {
    let mut column = String::from(",");
    for t in EventType::ALL.iter().filter(|t| events.contains(t)) {
        column.push_str(t.as_str());
        column.push(',');
    }
    column
}

/// Checks a caller's `events` list: at least one, each a known type;
/// duplicates are ignored.
pub fn parse_events(field: &str, names: &[String]) -> Result<Vec<EventType>, Error> {
    if names.is_empty() {
        return Err(Error::validation(
            field,
            "must name at least one event type",
        ));
    }
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            name.parse::<EventType>()
                .map_err(|e| Error::validation(format!("{field}[{i}]"), e.to_string()))
        })
        .collect()
}

/// The `webhook-signature` value (Standard Webhooks): `v1,<base64
/// HMAC-SHA256 over "id.timestamp.body">` per key, separated by spaces.
pub fn signature(keys: &[Vec<u8>], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut signed = Vec::with_capacity(msg_id.len() + body.len() + 24);
    signed.extend_from_slice(msg_id.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(timestamp.to_string().as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(body);
    keys.iter()
        .map(|key| {
            let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
            let tag = ring::hmac::sign(&key, &signed);
            format!("v1,{}", STANDARD.encode(tag.as_ref()))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Who may be reached: what the operator allows beyond public HTTPS.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointPolicy {
    /// Plain `http://` to a loopback address (local development, tests).
    pub allow_http_loopback: bool,
    /// Private, loopback, link-local and other non-public addresses.
    pub allow_private: bool,
}

/// Longest endpoint URL accepted.
pub const MAX_ENDPOINT_CHARS: usize = 2048;

/// Checks an endpoint URL as given (`field` names it in the error): an
/// absolute `https://` URL with a host and no credentials; `http://` only
/// to a loopback address when the policy allows it; an address literal must
/// be one the policy allows. Host names are checked when they are resolved,
/// at every delivery.
pub fn validate_endpoint(
    field: &str,
    text: &str,
    policy: EndpointPolicy,
) -> Result<url::Url, Error> {
    if text.chars().count() > MAX_ENDPOINT_CHARS {
        return Err(Error::validation(
            field,
            format!("must be at most {MAX_ENDPOINT_CHARS} characters"),
        ));
    }
    let url = url::Url::parse(text)
        .map_err(|e| Error::validation(field, format!("is not an absolute URL ({e})")))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Error::validation(
            field,
            "must not carry credentials (user:password@)",
        ));
    }
    let host = url
        .host()
        .ok_or_else(|| Error::validation(field, "must have a host"))?;
    let literal = match host {
        url::Host::Ipv4(a) => Some(IpAddr::V4(a)),
        url::Host::Ipv6(a) => Some(IpAddr::V6(a)),
        url::Host::Domain(_) => None,
    };
    match url.scheme() {
        "https" => {}
        "http"
            if policy.allow_http_loopback
                && (literal.is_some_and(|a| a.is_loopback())
                    || url.host_str() == Some("localhost")) => {}
        "http" => {
            return Err(Error::validation(
                field,
                "must be an https:// URL (plain http is allowed only to a loopback address, when the operator enables it)",
            ));
        }
        other => {
            return Err(Error::validation(
                field,
                format!("must be an https:// URL, not `{other}:`"),
            ));
        }
    }
    if let Some(address) = literal {
        check_address(address, policy).map_err(|why| {
            Error::validation(
                field,
                format!("points to a {why} address, which is refused"),
            )
        })?;
    }
    Ok(url)
}

/// Refuses an address a webhook must not reach unless the policy allows
/// non-public addresses: what kind of address it is.
pub fn check_address(address: IpAddr, policy: EndpointPolicy) -> Result<(), &'static str> {
    match non_public(address) {
        Some(kind) if !policy.allow_private => Err(kind),
        _ => Ok(()),
    }
}

/// What kind of non-public address this is (IPv4-mapped and NAT64 IPv6
/// addresses are judged by the IPv4 address inside), or None for a public
/// one.
fn non_public(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(a) => non_public_v4(a),
        IpAddr::V6(a) => {
            if let Some(v4) = a.to_ipv4_mapped() {
                return non_public_v4(v4);
            }
            let s = a.segments();
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                let v4 =
                    Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
                return non_public_v4(v4);
            }
            non_public_v6(a)
        }
    }
}

fn non_public_v4(a: Ipv4Addr) -> Option<&'static str> {
    let o = a.octets();
    if a.is_loopback() {
        Some("loopback")
    } else if a.is_private() {
        Some("private")
    } else if a.is_link_local() {
        // 169.254.169.254 is the cloud metadata service.
        Some("link-local (metadata)")
    } else if a.is_unspecified() || o[0] == 0 {
        Some("unspecified")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Some("shared (carrier-grade NAT)")
    } else if a.is_multicast() || a.is_broadcast() || o[0] >= 240 {
        Some("multicast or reserved")
    } else if (o[0] == 192 && o[1] == 0 && o[2] == 0) || (o[0] == 198 && (o[1] & 0xfe) == 18) {
        Some("special-purpose")
    } else {
        None
    }
}

fn non_public_v6(a: Ipv6Addr) -> Option<&'static str> {
    let first = a.segments()[0];
    if a.is_loopback() {
        Some("loopback")
    } else if a.is_unspecified() {
        Some("unspecified")
    } else if (first & 0xfe00) == 0xfc00 {
        // Includes fd00:ec2::254, a cloud metadata address.
        Some("private (unique local)")
    } else if (first & 0xffc0) == 0xfe80 {
        Some("link-local")
    } else if a.is_multicast() {
        Some("multicast or reserved")
    } else if a.segments()[..6] == [0, 0, 0, 0, 0, 0] {
        Some("IPv4-compatible (deprecated)")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test vector of the Standard Webhooks specification (and Svix's
    /// libraries).
    #[test]
    fn signs_the_standard_webhooks_test_vector() {
        let secret: SigningSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse().unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature(
                &[secret.key().unwrap()],
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                body
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn a_secret_never_shows_in_debug_output() {
        let secret = SigningSecret::generate();
        assert!(secret.reveal().starts_with("whsec_"));
        assert_eq!(secret.key().unwrap().len(), 32);
        assert!(!format!("{secret:?}").contains(&secret.reveal()[6..]));
    }

    #[test]
    fn event_names_round_trip() {
        for t in EventType::ALL {
            assert_eq!(t.as_str().parse::<EventType>().unwrap(), *t);
        }
        assert_eq!(
            events_column(&[EventType::EmailFailed, EventType::EmailSent]),
            ",email.sent,email.failed,"
        );
    }

    #[test]
    fn endpoints_must_be_public_https() {
        let strict = EndpointPolicy::default();
        assert!(validate_endpoint("endpoint", "https://hooks.example.com/x", strict).is_ok());
        for refused in [
            "http://hooks.example.com/x",
            "ftp://hooks.example.com/x",
            "https://user:pw@hooks.example.com/x",
            "https://10.0.0.5/x",
            "https://127.0.0.1/x",
            "https://169.254.169.254/latest/meta-data",
            "https://[::1]/x",
            "https://[::ffff:10.0.0.1]/x",
            "https://[::ffff:127.0.0.1]/x",
            "https://[64:ff9b::a00:1]/x",
            "https://[fd00:ec2::254]/x",
            "https://[fe80::1]/x",
            "https://0.0.0.0/x",
            "not a url",
        ] {
            let e = validate_endpoint("endpoint", refused, strict).unwrap_err();
            assert!(e.to_string().starts_with("endpoint: "), "{refused}: {e}");
        }
        let local = EndpointPolicy {
            allow_http_loopback: true,
            allow_private: true,
        };
        assert!(validate_endpoint("endpoint", "http://127.0.0.1:9/x", local).is_ok());
        assert!(validate_endpoint("endpoint", "http://10.0.0.1/x", local).is_err());
    }
}
