//! Sending an authorized call: the only code that reads a binding's secret
//! (for the auth header and to redact it from the answer).

use std::time::Instant;

use reqwest::header::{HeaderName, HeaderValue};

use super::client::BindingClient;
use super::request::What;
use super::{AuthorizedCall, BindingWait, binding_error_message};
use crate::bindings::platform::extension::http_binding::{BindingError, Response};
use crate::secret::{redact_bytes, redact_str};
use crate::state::AuthStyle;

/// Response headers that could carry credentials; never shown to a guest.
/// (A `HeaderName` is lowercase by construction.)
fn is_credential_header(name: &HeaderName, auth_header: &str) -> bool {
    let name = name.as_str();
    name == "set-cookie"
        || name == "set-cookie2"
        || name == "cookie"
        || name == "authorization"
        || name == "www-authenticate"
        || name == "x-umami-api-key"
        || name.starts_with("proxy-")
        || name == auth_header
}

/// Sends an authorized call: adds the secret, caps time and size, strips
/// credential headers and redacts the secret from what comes back.
pub fn send(
    call: AuthorizedCall,
    client: &BindingClient,
    request_id: &str,
    wait: Option<&dyn BindingWait>,
) -> Result<Response, BindingError> {
    let name = call.binding.name.clone();
    let what = What {
        binding: &name,
        method: &call.method,
        path: &call.path,
    };
    let fail = |failure: BindingError| {
        tracing::warn!(
            request_id,
            binding = %name,
            path = %call.path,
            "binding call failed: {}",
            binding_error_message(&failure)
        );
        failure
    };
    let mut url = format!("{}{}", call.binding.origin.trim_end_matches('/'), call.path);
    if let Some(query) = &call.query {
        url.push('?');
        url.push_str(query);
    }
    let auth_header = call.binding.auth_style.header();
    let secret = &call.binding.secret;
    let secrets = std::slice::from_ref(secret);
    let auth_value = match call.binding.auth_style {
        AuthStyle::Bearer => format!("Bearer {}", secret.expose()),
        AuthStyle::UmamiApiKey => secret.expose().to_string(),
    };
    let Ok(mut auth) = HeaderValue::from_str(&auth_value) else {
        return Err(fail(BindingError::Unavailable(format!(
            "{what}: the binding's secret cannot be sent as a header; ask the operator to set it again"
        ))));
    };
    auth.set_sensitive(true);
    let Ok(method) = reqwest::Method::from_bytes(call.method.as_bytes()) else {
        return Err(fail(BindingError::InvalidRequest(format!(
            "{what}: bad method"
        ))));
    };
    let mut request = client
        .http()
        .request(method, &url)
        .timeout(call.timeout)
        .header(auth_header, auth);
    for (name, value) in &call.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    if let Some(body) = call.body {
        request = request.body(body);
    }
    let started = Instant::now();
    let exchange = async {
        let response = request.send().await.map_err(|error| {
            if error.is_timeout() {
                Failure::NoAnswer
            } else {
                Failure::Unreachable
            }
        })?;
        let status = response.status().as_u16();
        let headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .filter(|(name, _)| !is_credential_header(name, auth_header))
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_string(), redact_str(value, secrets))
            })
            .collect();
        let body = read_body(response, call.max_bytes).await?;
        Ok((status, headers, body))
    };
    // The wait for the answer is when the embedder's work runs (see
    // [`BindingWait`]): after one yield, so that the request is on the wire
    // before the work starts.
    let exchange = client.block_on(async {
        match wait {
            Some(wait) => {
                let work = async {
                    tokio::task::yield_now().await;
                    wait.while_waiting();
                };
                tokio::join!(exchange, work).0
            }
            None => exchange.await,
        }
    });
    let (status, headers, body) = match exchange {
        Ok(exchange) => exchange,
        Err(Failure::NoAnswer) => {
            return Err(fail(BindingError::Timeout(format!(
                "{what}: no answer within {} ms",
                call.timeout.as_millis()
            ))));
        }
        Err(Failure::Unreachable) => {
            return Err(fail(BindingError::Unavailable(format!(
                "{what}: the origin could not be reached"
            ))));
        }
        Err(Failure::TooLarge) => {
            return Err(fail(BindingError::ResponseTooLarge(format!(
                "{what}: the response is larger than {} bytes",
                call.max_bytes
            ))));
        }
        Err(Failure::BodyTimedOut) => {
            return Err(fail(BindingError::Timeout(format!(
                "{what}: the response did not arrive within {} ms",
                call.timeout.as_millis()
            ))));
        }
        Err(Failure::BodyFailed) => {
            return Err(fail(BindingError::Unavailable(format!(
                "{what}: the response could not be read"
            ))));
        }
    };
    let body = redact_bytes(body, secrets);
    tracing::info!(
        request_id,
        binding = %name,
        method = %call.method,
        path = %call.path,
        status,
        bytes = body.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "binding call"
    );
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// Why an exchange with the origin did not produce a response.
enum Failure {
    NoAnswer,
    Unreachable,
    TooLarge,
    BodyTimedOut,
    BodyFailed,
}

/// The body, at most `max_bytes` of it: a declared length over the limit
/// is refused unread; otherwise the body is read until it ends or passes
/// the limit.
async fn read_body(mut response: reqwest::Response, max_bytes: usize) -> Result<Vec<u8>, Failure> {
    let declared = response.content_length();
    if declared.is_some_and(|length| length > max_bytes as u64) {
        return Err(Failure::TooLarge);
    }
    let mut body = Vec::with_capacity(declared.unwrap_or(0) as usize);
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > max_bytes {
                    return Err(Failure::TooLarge);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(error) if error.is_timeout() => return Err(Failure::BodyTimedOut),
            Err(_) => return Err(Failure::BodyFailed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_headers_are_recognised() {
        for h in [
            "Set-Cookie",
            "WWW-Authenticate",
            "Proxy-Authenticate",
            "authorization",
            "x-umami-api-key",
        ] {
            let name = HeaderName::from_bytes(h.as_bytes()).unwrap();
            assert!(is_credential_header(&name, "authorization"), "{h}");
        }
        let name = |n: &'static str| HeaderName::from_static(n);
        assert!(is_credential_header(
            &name("x-custom-auth"),
            "x-custom-auth"
        ));
        assert!(!is_credential_header(
            &name("content-type"),
            "authorization"
        ));
    }
}
