//! Clients identified by their Client ID Metadata Document (the MCP
//! authorization chapter's preferred registration): the `client_id` is an
//! https URL, and its JSON says the client's name and redirect URIs.
//!
//! The fetch follows the same rules as mail-service's webhooks
//! (`outbound-policy`): https only (plain http to loopback only when the
//! operator allows non-public addresses, for development), no
//! credentials in the URL, every address the host name resolves to must be
//! public unless the operator allows otherwise, and the connection goes to
//! the addresses that were checked; no redirect, no proxy, a size and a
//! time bound. A document is used for [`MetadataFetch::cache_for`].

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use outbound_policy::EndpointPolicy;
use serde_json::Value;

use super::MetadataFetch;
use crate::host::{OAuthClient, OAuthError, check_redirect_uri};

/// Fetched documents by client id.
#[derive(Default)]
pub(super) struct MetadataCache {
    by_id: Mutex<HashMap<String, (OAuthClient, Instant)>>,
}

fn refused(message: impl Into<String>) -> OAuthError {
    OAuthError::new("invalid_client", message)
}

fn policy(fetch: &MetadataFetch) -> EndpointPolicy {
    EndpointPolicy {
        allow_http_loopback: fetch.allow_private_addresses,
        allow_private: fetch.allow_private_addresses,
    }
}

impl MetadataCache {
    /// The client `client_id` names, from the cache or fetched now.
    pub(super) async fn client(
        &self,
        client_id: &str,
        fetch: &MetadataFetch,
    ) -> Result<OAuthClient, OAuthError> {
        if let Some((client, fetched)) = self
            .by_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(client_id)
            && fetched.elapsed() < fetch.cache_for
        {
            return Ok(client.clone());
        }
        let client = fetch_document(client_id, fetch).await?;
        let mut cache = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        cache.retain(|_, (_, fetched)| fetched.elapsed() < fetch.cache_for);
        cache.insert(client_id.to_string(), (client.clone(), Instant::now()));
        Ok(client)
    }
}

/// Fetches and checks the document at `client_id`.
async fn fetch_document(client_id: &str, fetch: &MetadataFetch) -> Result<OAuthClient, OAuthError> {
    let policy = policy(fetch);
    let url = outbound_policy::check_url(client_id, policy)
        .map_err(|rule| refused(format!("client_id (a metadata document URL) {rule}")))?;
    if url.path() == "/" || url.fragment().is_some() {
        return Err(refused(
            "client_id (a metadata document URL) must have a path and no fragment",
        ));
    }
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(fetch.timeout)
        .connect_timeout(fetch.timeout)
        .user_agent(concat!("host-sim/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(CheckedResolver { policy }))
        .build()
        .map_err(|e| {
            OAuthError::new("server_error", format!("the metadata client failed ({e})"))
        })?;
    let seconds = fetch.timeout.as_secs_f64();
    let late = || {
        refused(format!(
            "the client metadata document did not arrive within {seconds} s"
        ))
    };
    let mut response = client
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| {
            if e.is_timeout() {
                late()
            } else {
                refused(format!(
                    "the client metadata document could not be fetched ({})",
                    error_chain(&e)
                ))
            }
        })?;
    if !response.status().is_success() {
        return Err(refused(format!(
            "the client metadata document answered HTTP {}",
            response.status().as_u16()
        )));
    }
    let too_large = || {
        refused(format!(
            "the client metadata document is larger than {} bytes",
            fetch.max_bytes
        ))
    };
    if response
        .content_length()
        .is_some_and(|length| length > fetch.max_bytes as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    loop {
        let chunk = response.chunk().await.map_err(|e| {
            if e.is_timeout() {
                late()
            } else {
                refused(format!("the client metadata document broke off ({e})"))
            }
        })?;
        let Some(chunk) = chunk else { break };
        if body.len() + chunk.len() > fetch.max_bytes {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    let document: Value = serde_json::from_slice(&body)
        .map_err(|e| refused(format!("the client metadata document is not JSON ({e})")))?;
    client_from_document(client_id, &document)
}

/// The client a document describes, checked against its URL.
fn client_from_document(client_id: &str, document: &Value) -> Result<OAuthClient, OAuthError> {
    let object = document
        .as_object()
        .ok_or_else(|| refused("the client metadata document must be a JSON object"))?;
    if object.get("client_id").and_then(Value::as_str) != Some(client_id) {
        return Err(refused(
            "the client metadata document's client_id must be exactly its own URL",
        ));
    }
    if object.contains_key("client_secret") {
        return Err(refused(
            "the client metadata document must not hold a client_secret",
        ));
    }
    match object
        .get("token_endpoint_auth_method")
        .and_then(Value::as_str)
    {
        None | Some("none") => {}
        Some(other) => {
            return Err(refused(format!(
                "token_endpoint_auth_method {other} is not supported for metadata document clients; use none"
            )));
        }
    }
    let uris = object
        .get("redirect_uris")
        .and_then(Value::as_array)
        .filter(|uris| !uris.is_empty())
        .ok_or_else(|| refused("the client metadata document needs redirect_uris"))?;
    let mut redirect_uris = Vec::new();
    for uri in uris {
        let uri = uri
            .as_str()
            .ok_or_else(|| refused("redirect_uris must hold strings"))?;
        check_redirect_uri(uri).map_err(|rule| refused(format!("redirect_uri {uri} {rule}")))?;
        redirect_uris.push(uri.to_string());
    }
    let client_name = object
        .get("client_name")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|name| !name.is_empty() && name.chars().count() <= 200)
        .map(|name| name.chars().filter(|c| !c.is_control()).collect())
        .unwrap_or_else(|| client_id.to_string());
    Ok(OAuthClient {
        client_id: client_id.to_string(),
        client_name,
        redirect_uris,
    })
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Resolves a document's host with the system resolver and refuses it
/// when any address is one the policy does not allow; the connection then
/// goes to these addresses.
struct CheckedResolver {
    policy: EndpointPolicy,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy;
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<IpAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .map(|address| address.ip())
                .collect();
            if found.is_empty() {
                return Err(format!("`{host}` has no address").into());
            }
            for address in &found {
                outbound_policy::check_address(*address, policy).map_err(|kind| {
                    format!("`{host}` resolves to {address}, a {kind} address, which is refused")
                })?;
            }
            let addresses: reqwest::dns::Addrs =
                Box::new(found.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addresses)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ID: &str = "https://app.example/oauth/client.json";

    #[test]
    fn a_document_must_name_itself_and_redirect_uris() {
        let good = json!({"client_id": ID, "client_name": "App", "redirect_uris": ["http://127.0.0.1:7/cb"]});
        let client = client_from_document(ID, &good).unwrap();
        assert_eq!(client.client_name, "App");
        let other = json!({"client_id": "https://elsewhere.example/c.json", "redirect_uris": ["https://a.example/cb"]});
        assert!(
            client_from_document(ID, &other)
                .unwrap_err()
                .message
                .contains("its own URL")
        );
        let none = json!({"client_id": ID});
        assert!(
            client_from_document(ID, &none)
                .unwrap_err()
                .message
                .contains("redirect_uris")
        );
        let secret = json!({"client_id": ID, "redirect_uris": ["https://a.example/cb"], "client_secret": "x"});
        assert!(client_from_document(ID, &secret).is_err());
    }
}
