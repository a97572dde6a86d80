//! Does the edge serve a tracking hostname? What a visitor's browser does,
//! over HTTPS with the certificate checked against the configured roots
//! (the ones `wait-tls` uses): `GET https://HOST/script.js` must answer the
//! provider's script, byte for byte as the provider origin serves it, and
//! the CORS preflight `OPTIONS https://HOST/api/send` must allow the
//! tracker's `POST`. `activate` needs [`probe`] to hold; `remove` needs the
//! edge to answer that it no longer serves the name ([`removal_check`]).

use std::time::Duration;

use reqwest::header::{self, HeaderValue};

use super::tls::{TlsOptions, TlsSetupError, client_config};

/// What was found at the edge, in an operator's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// The script and the preflight are served as the provider serves them.
    Served,
    /// Not (or not entirely) served: why.
    NotServed(String),
}

/// The clients of one probe: one through the edge (the hostname pinned to
/// `options.address` when given), one to the provider origin.
struct Clients {
    edge: reqwest::Client,
    provider: reqwest::Client,
    base: String,
    hostname: String,
}

fn clients(hostname: &str, options: &TlsOptions) -> Result<Clients, TlsSetupError> {
    let timeout = options.attempt_timeout.max(Duration::from_secs(1));
    let port = options.address.map_or(options.port, |a| a.port());
    let mut edge = reqwest::Client::builder()
        .use_preconfigured_tls(client_config(options)?)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout);
    if let Some(address) = options.address {
        edge = edge.resolve(hostname, address);
    }
    let provider = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout);
    let built = |builder: reqwest::ClientBuilder| {
        builder
            .build()
            .map_err(|e| TlsSetupError::Config(e.to_string()))
    };
    Ok(Clients {
        edge: built(edge)?,
        provider: built(provider)?,
        base: format!("https://{hostname}:{port}"),
        hostname: hostname.to_string(),
    })
}

/// The current-thread runtime the probe's requests run on (the host's
/// steps are called from plain threads).
fn block_on<F: std::future::Future>(future: F) -> Result<F::Output, TlsSetupError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| TlsSetupError::Config(format!("no async runtime: {e}")))?;
    Ok(runtime.block_on(future))
}

/// Whether `https://hostname` serves `provider_origin`'s script and the
/// preflight of `/api/send`.
pub fn probe(
    hostname: &str,
    provider_origin: &str,
    options: &TlsOptions,
) -> Result<Probe, TlsSetupError> {
    let clients = clients(hostname, options)?;
    block_on(async {
        let expected = match provider_script(&clients, provider_origin).await {
            Ok(bytes) => bytes,
            Err(reason) => return Probe::NotServed(reason),
        };
        if let Err(reason) = edge_script(&clients, &expected).await {
            return Probe::NotServed(reason);
        }
        match preflight(&clients).await {
            Ok(()) => Probe::Served,
            Err(reason) => Probe::NotServed(reason),
        }
    })
}

/// The edge's answer to `remove`'s question: does it still serve the
/// hostname? Only an answer counts as "no longer": "cannot tell" is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EdgeAnswer {
    /// It no longer serves it: what it answered instead.
    Stopped(String),
    /// It still answers the provider's script: what it answered.
    StillServed(String),
    /// It could not be asked (the name does not resolve, no connection, no
    /// answer): why. `remove` refuses rather than forget the domain.
    CannotTell(String),
}

/// Whether the edge still serves the provider's script for `hostname`.
/// The script is compared with the provider's; when the provider cannot be
/// asked, any success counts as served. A certificate that does not verify
/// (expired, another name, a private CA without `--roots`) does not make
/// the name unserved (a visitor can click through the warning, and the
/// tracker's requests would still go through), so the edge is asked again
/// without verifying it. A handshake the edge refuses (nginx's
/// `ssl_reject_handshake` for a name it does not serve) is an answer.
pub fn removal_check(
    hostname: &str,
    provider_origin: Option<&str>,
    options: &TlsOptions,
) -> Result<EdgeAnswer, TlsSetupError> {
    let clients = clients(hostname, options)?;
    let unverified = unverified_edge(hostname, options)?;
    block_on(async {
        if options.address.is_none() {
            if let Err(e) = tokio::net::lookup_host((hostname, options.port)).await {
                return EdgeAnswer::CannotTell(format!("{hostname} does not resolve: {e}"));
            }
        }
        let expected = match provider_origin {
            Some(origin) => provider_script(&clients, origin).await.ok(),
            None => None,
        };
        let url = format!("{}/script.js", clients.base);
        let host = host_value(&clients.hostname);
        let error = match clients
            .edge
            .get(&url)
            .header(header::HOST, host.clone())
            .send()
            .await
        {
            Ok(answer) => return judge(&clients.hostname, answer, expected.as_deref(), "").await,
            Err(error) => error,
        };
        match rustls_error(&error) {
            Some(rustls::Error::AlertReceived(alert)) => EdgeAnswer::Stopped(format!(
                "the edge refuses the TLS handshake for {hostname} ({alert:?})"
            )),
            Some(tls @ rustls::Error::InvalidCertificate(_)) => {
                let note = format!(" although its certificate does not verify ({tls})");
                match unverified.get(&url).header(header::HOST, host).send().await {
                    Ok(answer) => {
                        judge(&clients.hostname, answer, expected.as_deref(), &note).await
                    }
                    Err(error) => EdgeAnswer::CannotTell(describe(hostname, &error)),
                }
            }
            _ => EdgeAnswer::CannotTell(describe(hostname, &error)),
        }
    })
}

/// An edge client that accepts any certificate: for `remove` only, to see
/// what a visitor clicking through a certificate warning would get.
fn unverified_edge(hostname: &str, options: &TlsOptions) -> Result<reqwest::Client, TlsSetupError> {
    let mut builder = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(options.attempt_timeout.max(Duration::from_secs(1)));
    if let Some(address) = options.address {
        builder = builder.resolve(hostname, address);
    }
    builder
        .build()
        .map_err(|e| TlsSetupError::Config(e.to_string()))
}

/// What an answer from the edge says about the hostname.
async fn judge(
    hostname: &str,
    answer: reqwest::Response,
    expected: Option<&[u8]>,
    note: &str,
) -> EdgeAnswer {
    let status = answer.status();
    let body = match answer.bytes().await {
        Ok(body) => body,
        Err(e) => {
            return EdgeAnswer::CannotTell(format!(
                "https://{hostname}/script.js broke off: {}",
                e.without_url()
            ));
        }
    };
    if status.is_success() && expected.is_none_or(|e| e == body) {
        EdgeAnswer::StillServed(format!(
            "https://{hostname}/script.js still answers {status} with the provider's script{note}"
        ))
    } else if status.is_success() {
        EdgeAnswer::Stopped(format!(
            "https://{hostname}/script.js answers {status} with something else than the provider's script{note}"
        ))
    } else {
        EdgeAnswer::Stopped(format!(
            "https://{hostname}/script.js answers {status}{note}"
        ))
    }
}

async fn provider_script(clients: &Clients, origin: &str) -> Result<Vec<u8>, String> {
    let url = format!("{}/script.js", origin.trim_end_matches('/'));
    let answer = clients.provider.get(&url).send().await.map_err(|e| {
        format!(
            "the provider origin did not answer {url}: {}",
            e.without_url()
        )
    })?;
    if !answer.status().is_success() {
        return Err(format!(
            "the provider origin answers {} to {url}",
            answer.status()
        ));
    }
    answer
        .bytes()
        .await
        .map(|b| b.to_vec())
        .map_err(|e| format!("the provider's {url} broke off: {}", e.without_url()))
}

/// A request through the edge with `Host: hostname` exactly (the edge's
/// rule), whatever port the probe connects to.
async fn edge_get(clients: &Clients, url: &str) -> Result<reqwest::Response, String> {
    clients
        .edge
        .get(url)
        .header(header::HOST, host_value(&clients.hostname))
        .send()
        .await
        .map_err(|e| describe(&clients.hostname, &e))
}

fn host_value(hostname: &str) -> HeaderValue {
    HeaderValue::from_str(hostname).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

async fn edge_script(clients: &Clients, expected: &[u8]) -> Result<(), String> {
    let url = format!("https://{}/script.js", clients.hostname);
    let answer = edge_get(clients, &format!("{}/script.js", clients.base)).await?;
    let status = answer.status();
    if !status.is_success() {
        return Err(format!(
            "{url} answers {status}; the edge must forward it to the provider (tracking-domain export)"
        ));
    }
    let body = answer
        .bytes()
        .await
        .map_err(|e| format!("{url} broke off: {}", e.without_url()))?;
    if body != expected {
        return Err(format!(
            "{url} answers {} bytes that are not the provider's script ({} bytes)",
            body.len(),
            expected.len()
        ));
    }
    Ok(())
}

async fn preflight(clients: &Clients) -> Result<(), String> {
    let url = format!("https://{}/api/send", clients.hostname);
    let origin = format!("https://{}", clients.hostname);
    let answer = clients
        .edge
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/api/send", clients.base),
        )
        .header(header::HOST, host_value(&clients.hostname))
        .header(header::ORIGIN, &origin)
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
        .header(header::ACCESS_CONTROL_REQUEST_HEADERS, "content-type")
        .send()
        .await
        .map_err(|e| describe(&clients.hostname, &e))?;
    let status = answer.status();
    if !status.is_success() {
        return Err(format!(
            "the CORS preflight OPTIONS {url} answers {status}; the tracker's POST would be blocked"
        ));
    }
    let allowed = answer
        .headers()
        .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
        .and_then(|v| v.to_str().ok());
    match allowed {
        Some("*") => Ok(()),
        Some(value) if value == origin => Ok(()),
        other => Err(format!(
            "the CORS preflight OPTIONS {url} allows origin {other:?}, not a page's; the tracker's POST would be blocked"
        )),
    }
}

/// A failed request through the edge in an operator's words (the TLS
/// reason when there is one).
fn describe(hostname: &str, error: &reqwest::Error) -> String {
    if let Some(tls) = rustls_error(error) {
        return format!("the TLS connection to {hostname} failed: {tls}");
    }
    if error.is_timeout() {
        return format!("https://{hostname} did not answer in time");
    }
    if error.is_connect() {
        return format!("cannot connect to https://{hostname}");
    }
    format!("https://{hostname} failed: {error}")
}

/// The TLS error under a failed request, if that is why it failed.
fn rustls_error(error: &reqwest::Error) -> Option<&rustls::Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(inner) = source {
        // An io::Error's source skips the error it wraps (which may be
        // another io::Error wrapping the TLS error): look inside, all the
        // way down.
        let mut candidate = Some(inner);
        while let Some(error) = candidate {
            if let Some(tls) = error.downcast_ref::<rustls::Error>() {
                return Some(tls);
            }
            candidate = error
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|e| e as &(dyn std::error::Error + 'static));
        }
        source = inner.source();
    }
    None
}
