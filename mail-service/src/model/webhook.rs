//! Webhooks: the event types (Resend's names), a webhook's stored row, its
//! signing secret (never shown after creation, never in Debug output), the
//! Standard Webhooks signature, and the rules an endpoint must meet before
//! anything is sent to it (scheme, host, the addresses it may resolve to).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rand::RngCore;

use crate::error::Error;
use crate::status::text_enum;

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

/// Who may be reached: the shared rules of `outbound-policy` (the host's
/// client metadata fetch applies them too).
pub use outbound_policy::{EndpointPolicy, MAX_ENDPOINT_CHARS, check_address};

/// Checks an endpoint URL as given (`field` names it in the error) by
/// [`outbound_policy::check_url`]: an absolute `https://` URL with a host
/// and no credentials; `http://` only to a loopback address when the
/// policy allows it; an address literal must be one the policy allows.
/// Host names are checked when they are resolved, at every delivery.
pub fn validate_endpoint(
    field: &str,
    text: &str,
    policy: EndpointPolicy,
) -> Result<url::Url, Error> {
    outbound_policy::check_url(text, policy).map_err(|rule| Error::validation(field, rule))
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
    fn an_endpoint_refusal_names_the_field_and_the_rule() {
        let e = validate_endpoint("endpoint", "https://127.0.0.1/x", EndpointPolicy::default())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "endpoint: points to a loopback address, which is refused"
        );
    }
}
