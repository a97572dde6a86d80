//! The MCP server's OAuth 2.1 authorization server, without HTTP: client
//! registration (RFC 7591), a person's consent and its one-time code, the
//! code exchange with PKCE (S256 only) and the refresh with rotation. The
//! surfaces (`serve::oauth`) parse requests and render answers; every rule
//! is decided here.
//!
//! What is handed out once and stored hashed: access tokens (`hso_…`),
//! refresh tokens (`hsr_…`), codes (`hsc_…`) and client secrets (`hss_…`).
//! None of them is ever logged or put into an error message.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::{Caller, Host, HostError};
use crate::spec;
use crate::state::oauth::{
    ClaimedCode, CodeClaim, ConnectedApp, Consent, NewTokens, RefreshClaim, StoredClient,
};
use crate::state::{now_secs, token_hash};

/// How long what the authorization server issues lives.
#[derive(Debug, Clone, Copy)]
pub struct OAuthLifetimes {
    pub access_token: Duration,
    pub refresh_token: Duration,
    pub code: Duration,
}

impl Default for OAuthLifetimes {
    fn default() -> Self {
        Self {
            access_token: Duration::from_secs(900),
            refresh_token: Duration::from_secs(30 * 86400),
            code: Duration::from_secs(60),
        }
    }
}

/// A refusal of the authorization server, with its RFC 6749 / 7591 / 8707
/// error code; the message names the parameter and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OAuthError {
    /// `invalid_request`, `invalid_client`, `invalid_grant`,
    /// `unauthorized_client`, `unsupported_grant_type`, `invalid_scope`,
    /// `invalid_target`, `invalid_redirect_uri`, `invalid_client_metadata`,
    /// `access_denied`, `server_error`.
    pub code: &'static str,
    pub message: String,
}

impl OAuthError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    fn server(error: impl std::fmt::Display) -> Self {
        tracing::error!(error = %error, "the authorization server's state failed");
        Self::new(
            "server_error",
            "the authorization server's state is unavailable; see the host log",
        )
    }
}

impl From<HostError> for OAuthError {
    fn from(error: HostError) -> Self {
        Self::server(error)
    }
}

impl From<crate::state::StateError> for OAuthError {
    fn from(error: crate::state::StateError) -> Self {
        Self::server(error)
    }
}

/// A client as the authorization server uses it, registered or described
/// by its Client ID Metadata Document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthClient {
    pub client_id: String,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
}

/// The answer to a registration: the client's id, and its secret when it
/// asked to be confidential (shown once).
#[derive(Debug, Clone)]
pub struct RegisteredClient {
    pub client_id: String,
    pub client_secret: Option<String>,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    pub auth_method: String,
    pub issued_at: i64,
}

/// What a person approved on the consent page.
#[derive(Debug, Clone)]
pub struct Approval {
    pub client: OAuthClient,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub resource: String,
    pub scopes: Vec<String>,
    pub projects: Vec<String>,
}

/// Tokens handed to a client (RFC 6749 §5.1).
#[derive(Debug, Clone)]
pub struct IssuedTokens {
    pub access_token: String,
    pub refresh_token: String,
    pub expires_in: u64,
    pub scope: String,
}

/// A token request's client authentication: its id and, for a confidential
/// client, its secret.
#[derive(Debug, Clone)]
pub struct ClientCredentials {
    pub client_id: String,
    pub client_secret: Option<String>,
}

/// Longest client name, redirect URI list and URI accepted.
const MAX_NAME_CHARS: usize = 200;
const MAX_REDIRECT_URIS: usize = 10;
const MAX_URI_CHARS: usize = 2048;

/// Whether a `client_id` is a Client ID Metadata Document URL (an https
/// URL with a path) rather than an id this server registered.
pub fn is_metadata_document_id(client_id: &str) -> bool {
    client_id.starts_with("https://") || client_id.starts_with("http://")
}

/// Checks a redirect URI a client declares: absolute, no fragment; https,
/// or http only to a loopback host (native clients, RFC 8252 §7.3); or a
/// private-use scheme with a dot (RFC 8252 §7.1).
pub fn check_redirect_uri(uri: &str) -> Result<(), String> {
    if uri.chars().count() > MAX_URI_CHARS {
        return Err(format!("must be at most {MAX_URI_CHARS} characters"));
    }
    let url = reqwest::Url::parse(uri).map_err(|e| format!("is not an absolute URI ({e})"))?;
    if url.fragment().is_some() {
        return Err("must not have a fragment".into());
    }
    match url.scheme() {
        "https" => Ok(()),
        "http" => match url.host() {
            Some(url::Host::Ipv4(a)) if a.is_loopback() => Ok(()),
            Some(url::Host::Ipv6(a)) if a.is_loopback() => Ok(()),
            Some(url::Host::Domain("localhost")) => Ok(()),
            _ => Err("must be https, or http to a loopback address".into()),
        },
        scheme if scheme.contains('.') => Ok(()),
        other => Err(format!(
            "must be https, http to a loopback address or a private-use scheme like com.example.app, not `{other}:`"
        )),
    }
}

/// Whether an authorization request's `redirect_uri` is the registered
/// one: exactly, except that for `http` to a loopback IP literal the port
/// may differ (RFC 8252 §7.3: a native client listens on whatever port is
/// free when it starts). Only the port: scheme, address, path and query
/// must be the registered ones; `localhost` (a name) is matched exactly.
pub fn redirect_uri_matches(registered: &str, requested: &str) -> bool {
    if registered == requested {
        return true;
    }
    let loopback_literal = |uri: &str| {
        reqwest::Url::parse(uri).ok().filter(|url| {
            url.scheme() == "http"
                && match url.host() {
                    Some(url::Host::Ipv4(a)) => a.is_loopback(),
                    Some(url::Host::Ipv6(a)) => a.is_loopback(),
                    _ => false,
                }
        })
    };
    match (loopback_literal(registered), loopback_literal(requested)) {
        (Some(mut registered), Some(mut requested)) => {
            // Setting the port cannot fail on an http URL with a host.
            let _ = registered.set_port(None);
            let _ = requested.set_port(None);
            registered == requested
        }
        _ => false,
    }
}

/// The host part of a redirect URI, as the consent page and the connected
/// apps show it.
pub fn redirect_host(uri: &str) -> String {
    reqwest::Url::parse(uri)
        .ok()
        .and_then(|url| match url.host_str() {
            Some(host) => Some(match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_string(),
            }),
            None => Some(format!("{}:", url.scheme())),
        })
        .unwrap_or_else(|| uri.to_string())
}

/// The S256 code challenge of a verifier (RFC 7636 §4.2).
pub fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Checks a PKCE verifier's form (RFC 7636 §4.1): 43–128 unreserved
/// characters.
fn check_verifier(verifier: &str) -> Result<(), OAuthError> {
    let unreserved = verifier
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
    if !(43..=128).contains(&verifier.len()) || !unreserved {
        return Err(OAuthError::new(
            "invalid_request",
            "code_verifier must be 43 to 128 characters of A-Z a-z 0-9 - . _ ~ (RFC 7636)",
        ));
    }
    Ok(())
}

/// Checks a code challenge's form: S256 output is 43 base64url characters.
pub fn check_challenge(challenge: &str) -> Result<(), String> {
    let base64url = challenge
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if challenge.len() != 43 || !base64url {
        return Err(
            "code_challenge must be the 43-character base64url SHA-256 of the verifier".into(),
        );
    }
    Ok(())
}

/// Parses a space-separated scope list against [`spec::SCOPES`]; empty
/// means every scope.
pub fn parse_scope(scope: Option<&str>) -> Result<Vec<String>, OAuthError> {
    let requested: Vec<&str> = scope.unwrap_or_default().split_ascii_whitespace().collect();
    if let Some(unknown) = requested.iter().find(|s| !spec::SCOPES.contains(s)) {
        return Err(OAuthError::new(
            "invalid_scope",
            format!(
                "scope `{unknown}` is not offered; the scopes are {}",
                spec::SCOPES.join(" ")
            ),
        ));
    }
    Ok(spec::SCOPES
        .iter()
        .filter(|s| requested.is_empty() || requested.contains(s))
        .map(|s| s.to_string())
        .collect())
}

/// A random secret with a prefix naming what it is.
fn random_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!("{prefix}{}", hex::encode(bytes))
}

fn invalid_metadata(message: impl Into<String>) -> OAuthError {
    OAuthError::new("invalid_client_metadata", message)
}

impl Host {
    /// Registers a client (RFC 7591): `redirect_uris` (required, each
    /// checked by [`check_redirect_uri`]), `client_name`, and
    /// `token_endpoint_auth_method` (`none`, the default for public
    /// clients, or `client_secret_post`/`client_secret_basic`, which get a
    /// secret); only the `authorization_code` and `refresh_token` grants
    /// and the `code` response type.
    pub fn register_client(
        &self,
        metadata: &serde_json::Value,
    ) -> Result<RegisteredClient, OAuthError> {
        let object = metadata
            .as_object()
            .ok_or_else(|| invalid_metadata("the registration must be a JSON object"))?;
        let uris = object
            .get("redirect_uris")
            .and_then(|v| v.as_array())
            .filter(|uris| !uris.is_empty())
            .ok_or_else(|| {
                OAuthError::new(
                    "invalid_redirect_uri",
                    "redirect_uris is required: a non-empty array of URIs",
                )
            })?;
        if uris.len() > MAX_REDIRECT_URIS {
            return Err(OAuthError::new(
                "invalid_redirect_uri",
                format!("redirect_uris may hold at most {MAX_REDIRECT_URIS} URIs"),
            ));
        }
        let mut redirect_uris = Vec::new();
        for uri in uris {
            let uri = uri.as_str().ok_or_else(|| {
                OAuthError::new("invalid_redirect_uri", "redirect_uris must hold strings")
            })?;
            check_redirect_uri(uri).map_err(|rule| {
                OAuthError::new("invalid_redirect_uri", format!("redirect_uri {uri} {rule}"))
            })?;
            redirect_uris.push(uri.to_string());
        }
        let client_name = match object.get("client_name") {
            None => "Unnamed client".to_string(),
            Some(serde_json::Value::String(name))
                if !name.trim().is_empty()
                    && name.chars().count() <= MAX_NAME_CHARS
                    && !name.chars().any(char::is_control) =>
            {
                name.trim().to_string()
            }
            Some(_) => {
                return Err(invalid_metadata(format!(
                    "client_name must be a string of 1 to {MAX_NAME_CHARS} characters without control characters"
                )));
            }
        };
        let auth_method = match object.get("token_endpoint_auth_method") {
            None => "none",
            Some(v) => match v.as_str() {
                Some(m @ ("none" | "client_secret_post" | "client_secret_basic")) => m,
                _ => {
                    return Err(invalid_metadata(
                        "token_endpoint_auth_method must be none, client_secret_post or client_secret_basic",
                    ));
                }
            },
        };
        if let Some(grants) = object.get("grant_types") {
            let allowed = grants.as_array().is_some_and(|g| {
                g.iter()
                    .all(|g| matches!(g.as_str(), Some("authorization_code" | "refresh_token")))
            });
            if !allowed {
                return Err(invalid_metadata(
                    "grant_types may hold only authorization_code and refresh_token",
                ));
            }
        }
        if let Some(types) = object.get("response_types") {
            let allowed = types
                .as_array()
                .is_some_and(|t| t.iter().all(|t| t.as_str() == Some("code")));
            if !allowed {
                return Err(invalid_metadata("response_types may hold only code"));
            }
        }
        let client_id = uuid::Uuid::new_v4().simple().to_string();
        let client_secret = (auth_method != "none").then(|| random_secret("hss_"));
        let stored = StoredClient {
            client_id: client_id.clone(),
            client_name: client_name.clone(),
            redirect_uris: redirect_uris.clone(),
            secret_hash: client_secret.as_deref().map(token_hash),
            auth_method: auth_method.to_string(),
            metadata: metadata.to_string(),
        };
        self.state.register_oauth_client(&stored)?;
        tracing::info!(client_id = %client_id, auth_method, "an OAuth client registered");
        Ok(RegisteredClient {
            client_id,
            client_secret,
            client_name,
            redirect_uris,
            auth_method: auth_method.to_string(),
            issued_at: now_secs(),
        })
    }

    /// A registered client by its id (`None`: unknown).
    pub fn registered_client(&self, client_id: &str) -> Result<Option<OAuthClient>, OAuthError> {
        Ok(self
            .state
            .oauth_client(client_id)?
            .map(|client| OAuthClient {
                client_id: client.client_id,
                client_name: client.client_name,
                redirect_uris: client.redirect_uris,
            }))
    }

    /// Records what the signed-in person approved and answers the one-time
    /// code. Only projects the person reaches now may be consented.
    pub fn authorize_app(
        &self,
        person: &Caller,
        approval: &Approval,
        lifetimes: &OAuthLifetimes,
    ) -> Result<String, OAuthError> {
        let access = self
            .caller_access(person)?
            .ok_or_else(|| OAuthError::new("access_denied", "the sign-in has expired"))?;
        if approval.projects.is_empty() {
            return Err(OAuthError::new(
                "invalid_request",
                "choose at least one project the app may use",
            ));
        }
        if let Some(project) = approval
            .projects
            .iter()
            .find(|p| !access.projects.contains_key(*p))
        {
            return Err(OAuthError::new(
                "invalid_request",
                format!("project {project} is not one of yours"),
            ));
        }
        if approval.scopes.is_empty() {
            return Err(OAuthError::new(
                "invalid_scope",
                "choose at least one scope the app may use",
            ));
        }
        let code = random_secret("hsc_");
        let code_hash = token_hash(&code);
        let scope = approval.scopes.join(" ");
        let app_id = self.state.consent(&Consent {
            user: &access.user,
            client_id: &approval.client.client_id,
            client_name: &approval.client.client_name,
            redirect_host: &redirect_host(&approval.redirect_uri),
            scope: &scope,
            projects: &approval.projects,
            code_hash: &code_hash,
            redirect_uri: &approval.redirect_uri,
            code_challenge: &approval.code_challenge,
            resource: &approval.resource,
            code_expires_at: now_secs() + lifetimes.code.as_secs() as i64,
        })?;
        tracing::info!(
            user = %access.user, client_id = %approval.client.client_id, app_id = %app_id,
            scope = %scope, projects = approval.projects.len(),
            "an app was authorized"
        );
        Ok(code)
    }

    /// Checks a token request's client authentication: a registered
    /// client's secret when it has one; a public client (registered
    /// without a secret, or a metadata document's) must send none.
    fn authenticate_client(&self, credentials: &ClientCredentials) -> Result<(), OAuthError> {
        let refused = |message: &str| OAuthError::new("invalid_client", message);
        if is_metadata_document_id(&credentials.client_id) {
            return match credentials.client_secret {
                None => Ok(()),
                Some(_) => Err(refused(
                    "a client identified by its metadata document is public and sends no client_secret",
                )),
            };
        }
        let client = self
            .state
            .oauth_client(&credentials.client_id)?
            .ok_or_else(|| refused("client_id is not a registered client"))?;
        match (&client.secret_hash, &credentials.client_secret) {
            (None, None) => Ok(()),
            (None, Some(_)) => Err(refused(
                "this client is public (token_endpoint_auth_method none) and sends no client_secret",
            )),
            (Some(_), None) => Err(refused("client_secret is required for this client")),
            (Some(hash), Some(secret)) if *hash == token_hash(secret) => Ok(()),
            (Some(_), Some(_)) => Err(refused("client_secret is wrong")),
        }
    }

    /// The `authorization_code` grant: the code (once, before it expires),
    /// the client it was issued to, the exact redirect URI, the PKCE
    /// verifier and, when given, the resource it was issued for.
    pub fn exchange_code(
        &self,
        credentials: &ClientCredentials,
        code: &str,
        redirect_uri: Option<&str>,
        verifier: Option<&str>,
        resource: Option<&str>,
        lifetimes: &OAuthLifetimes,
    ) -> Result<IssuedTokens, OAuthError> {
        self.authenticate_client(credentials)?;
        let verifier = verifier.ok_or_else(|| {
            OAuthError::new(
                "invalid_request",
                "code_verifier is required (PKCE, RFC 7636)",
            )
        })?;
        check_verifier(verifier)?;
        let family = uuid::Uuid::new_v4().simple().to_string();
        let code = match self.state.claim_code(&token_hash(code), &family)? {
            CodeClaim::Unknown => {
                return Err(OAuthError::new("invalid_grant", "the code is unknown"));
            }
            CodeClaim::Reused => {
                tracing::warn!(
                    client_id = %credentials.client_id,
                    "an authorization code was presented twice; the tokens issued for it are revoked"
                );
                return Err(OAuthError::new(
                    "invalid_grant",
                    "the code was already used; the tokens issued for it are revoked",
                ));
            }
            CodeClaim::Claimed(code) => code,
        };
        check_claimed_code(&code, credentials, redirect_uri, verifier, resource)?;
        self.issue_tokens(
            &code.app_id,
            &family,
            credentials,
            &code.resource,
            &code.scope,
            lifetimes,
        )
    }

    /// The `refresh_token` grant: the token is spent and a new pair issued
    /// in its family; a spent token presented again revokes the family.
    /// `scope` may narrow the grant, never widen it.
    pub fn refresh(
        &self,
        credentials: &ClientCredentials,
        refresh_token: &str,
        scope: Option<&str>,
        resource: Option<&str>,
        lifetimes: &OAuthLifetimes,
    ) -> Result<IssuedTokens, OAuthError> {
        self.authenticate_client(credentials)?;
        let stored = match self.state.claim_refresh(&token_hash(refresh_token))? {
            RefreshClaim::Unknown => {
                return Err(OAuthError::new(
                    "invalid_grant",
                    "the refresh token is unknown or revoked",
                ));
            }
            RefreshClaim::Reused => {
                tracing::warn!(
                    client_id = %credentials.client_id,
                    "a spent refresh token was presented again; its family is revoked"
                );
                return Err(OAuthError::new(
                    "invalid_grant",
                    "the refresh token was already used; every token of this authorization is revoked",
                ));
            }
            RefreshClaim::Claimed(stored) => stored,
        };
        if stored.client_id != credentials.client_id {
            return Err(OAuthError::new(
                "invalid_grant",
                "the refresh token was issued to another client",
            ));
        }
        if stored.expires_at <= now_secs() {
            return Err(OAuthError::new(
                "invalid_grant",
                "the refresh token has expired",
            ));
        }
        if resource.is_some_and(|r| r != stored.resource) {
            return Err(OAuthError::new(
                "invalid_target",
                format!(
                    "resource must be {}, the resource of this grant",
                    stored.resource
                ),
            ));
        }
        let scope = match scope {
            None => stored.scope.clone(),
            Some(requested) => {
                let requested = parse_scope(Some(requested))?;
                if let Some(wider) = requested
                    .iter()
                    .find(|s| !spec::scope_contains(&stored.scope, s))
                {
                    return Err(OAuthError::new(
                        "invalid_scope",
                        format!(
                            "scope {wider} was not granted; a refresh may only narrow the scope"
                        ),
                    ));
                }
                requested.join(" ")
            }
        };
        self.issue_tokens(
            &stored.app_id,
            &stored.family_id,
            credentials,
            &stored.resource,
            &scope,
            lifetimes,
        )
    }

    fn issue_tokens(
        &self,
        app_id: &str,
        family: &str,
        credentials: &ClientCredentials,
        resource: &str,
        scope: &str,
        lifetimes: &OAuthLifetimes,
    ) -> Result<IssuedTokens, OAuthError> {
        let access_token = random_secret("hso_");
        let refresh_token = random_secret("hsr_");
        let now = now_secs();
        let stored = self.state.store_oauth_tokens(&NewTokens {
            app_id,
            family_id: family,
            client_id: &credentials.client_id,
            resource,
            scope,
            access_hash: &token_hash(&access_token),
            access_expires_at: now + lifetimes.access_token.as_secs() as i64,
            refresh_hash: &token_hash(&refresh_token),
            refresh_expires_at: now + lifetimes.refresh_token.as_secs() as i64,
        })?;
        if !stored {
            return Err(OAuthError::new(
                "invalid_grant",
                "the app was disconnected in the console",
            ));
        }
        let _ = self.state.prune_oauth();
        Ok(IssuedTokens {
            access_token,
            refresh_token,
            expires_in: lifetimes.access_token.as_secs(),
            scope: scope.to_string(),
        })
    }

    /// The signed-in person's connected apps.
    pub fn connected_apps(&self, person: &Caller) -> Result<Vec<ConnectedApp>, OAuthError> {
        let access = self
            .caller_access(person)?
            .ok_or_else(|| OAuthError::new("access_denied", "the sign-in has expired"))?;
        Ok(self.state.connected_apps(&access.user)?)
    }

    /// Disconnects one of the signed-in person's apps; `false` if they
    /// have no such app.
    pub fn disconnect_app(&self, person: &Caller, app_id: &str) -> Result<bool, OAuthError> {
        let access = self
            .caller_access(person)?
            .ok_or_else(|| OAuthError::new("access_denied", "the sign-in has expired"))?;
        let removed = self.state.revoke_app(&access.user, app_id)?;
        if removed {
            tracing::info!(user = %access.user, app_id, "an app was disconnected");
        }
        Ok(removed)
    }
}

/// The checks of a claimed code against the token request, in order.
fn check_claimed_code(
    code: &ClaimedCode,
    credentials: &ClientCredentials,
    redirect_uri: Option<&str>,
    verifier: &str,
    resource: Option<&str>,
) -> Result<(), OAuthError> {
    if code.expires_at <= now_secs() {
        return Err(OAuthError::new("invalid_grant", "the code has expired"));
    }
    if code.client_id != credentials.client_id {
        return Err(OAuthError::new(
            "invalid_grant",
            "the code was issued to another client",
        ));
    }
    if redirect_uri != Some(code.redirect_uri.as_str()) {
        return Err(OAuthError::new(
            "invalid_grant",
            "redirect_uri must be exactly the one of the authorization request",
        ));
    }
    if s256(verifier) != code.code_challenge {
        return Err(OAuthError::new(
            "invalid_grant",
            "code_verifier does not match the code_challenge (S256)",
        ));
    }
    if resource.is_some_and(|r| r != code.resource) {
        return Err(OAuthError::new(
            "invalid_target",
            format!(
                "resource must be {}, the resource the code was issued for",
                code.resource
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s256_matches_the_rfc_7636_example() {
        assert_eq!(
            s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn a_loopback_redirect_uri_may_come_back_on_another_port_and_nothing_else_may_differ() {
        let registered = "http://127.0.0.1:4000/cb";
        assert!(redirect_uri_matches(registered, "http://127.0.0.1:4000/cb"));
        assert!(redirect_uri_matches(registered, "http://127.0.0.1:5001/cb"));
        assert!(redirect_uri_matches(registered, "http://127.0.0.1/cb"));
        assert!(redirect_uri_matches(
            "http://[::1]:4000/cb",
            "http://[::1]:61000/cb"
        ));
        for other in [
            "http://127.0.0.1:5001/other",
            "http://127.0.0.1:5001/cb?x=1",
            "http://127.0.0.2:5001/cb",
            "https://127.0.0.1:5001/cb",
            "http://localhost:4000/cb",
            "http://[::1]:4000/cb",
        ] {
            assert!(!redirect_uri_matches(registered, other), "{other}");
        }
        // Names and https are matched exactly, port included.
        assert!(!redirect_uri_matches(
            "http://localhost:4000/cb",
            "http://localhost:5001/cb"
        ));
        assert!(!redirect_uri_matches(
            "https://app.example/cb",
            "https://app.example:8443/cb"
        ));
    }

    #[test]
    fn redirect_uris_must_be_https_loopback_http_or_a_private_scheme() {
        assert!(check_redirect_uri("https://app.example/cb").is_ok());
        assert!(check_redirect_uri("http://127.0.0.1:3000/cb").is_ok());
        assert!(check_redirect_uri("http://localhost/cb").is_ok());
        assert!(check_redirect_uri("com.example.app:/cb").is_ok());
        assert!(check_redirect_uri("http://app.example/cb").is_err());
        assert!(check_redirect_uri("https://app.example/cb#x").is_err());
        assert!(check_redirect_uri("javascript:alert(1)").is_err());
        assert!(check_redirect_uri("/cb").is_err());
    }

    #[test]
    fn scopes_parse_against_the_offered_ones() {
        assert_eq!(parse_scope(None).unwrap(), ["read", "write"]);
        assert_eq!(parse_scope(Some("write")).unwrap(), ["write"]);
        assert_eq!(parse_scope(Some("write read")).unwrap(), ["read", "write"]);
        let unknown = parse_scope(Some("read admin")).unwrap_err();
        assert_eq!(unknown.code, "invalid_scope");
        assert!(unknown.message.contains("admin"), "{}", unknown.message);
    }

    #[test]
    fn a_verifier_must_have_the_rfc_7636_form() {
        assert!(check_verifier(&"a".repeat(43)).is_ok());
        assert!(check_verifier(&"a".repeat(42)).is_err());
        assert!(check_verifier(&"a".repeat(129)).is_err());
        assert!(check_verifier(&format!("{}!", "a".repeat(43))).is_err());
        assert!(check_challenge(&s256(&"a".repeat(43))).is_ok());
        assert!(check_challenge("plain-verifier").is_err());
    }
}
