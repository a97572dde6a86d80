//! The TLS half of a tracking domain: is a certificate for the hostname
//! served, chaining to the configured roots, valid now and for a while yet?
//! One check is one TLS handshake (rustls, certificate verification by
//! webpki); [`wait`] repeats it until it holds or a deadline passes.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

/// Where and how the handshake is made.
#[derive(Debug, Clone)]
pub struct TlsOptions {
    /// Connect here instead of the hostname's own addresses.
    pub address: Option<SocketAddr>,
    pub port: u16,
    /// A PEM bundle of trusted roots; `None`: Mozilla's roots (webpki-roots).
    pub roots: Option<PathBuf>,
    /// The certificate must stay valid at least this long ("not near expiry").
    pub min_validity: Duration,
    /// How long one attempt (connect + handshake) may take.
    pub attempt_timeout: Duration,
}

impl Default for TlsOptions {
    fn default() -> Self {
        Self {
            address: None,
            port: 443,
            roots: None,
            min_validity: Duration::from_secs(7 * 86400),
            attempt_timeout: Duration::from_secs(10),
        }
    }
}

/// Why the TLS check cannot even start (the roots).
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("--roots {path}: {reason}")]
    Roots { path: String, reason: String },
    #[error("cannot set up TLS: {0}")]
    Config(String),
}

/// `wait` ran out of time: the last attempt's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no valid certificate for {hostname} after {attempts} attempt(s) in {waited_secs} s; last: {last_reason}"
)]
pub struct TlsTimeout {
    pub hostname: String,
    pub attempts: u32,
    pub waited_secs: u64,
    pub last_reason: String,
}

/// A checker for one hostname with its roots loaded.
pub struct TlsCheck {
    config: Arc<ClientConfig>,
    hostname: String,
    options: TlsOptions,
}

impl TlsCheck {
    pub fn new(hostname: &str, options: &TlsOptions) -> Result<Self, TlsSetupError> {
        let roots = roots(options)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| TlsSetupError::Config(e.to_string()))?;
        let verifier = Arc::new(NotNearExpiry {
            inner: webpki,
            margin: options.min_validity,
        });
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsSetupError::Config(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Self {
            config: Arc::new(config),
            hostname: hostname.to_string(),
            options: options.clone(),
        })
    }

    /// One handshake: `Ok` when the served certificate chains to the roots,
    /// is valid for the hostname and for `min_validity` more; otherwise the
    /// reason, in words.
    pub fn once(&self) -> Result<(), String> {
        self.handshake().map(|_| ())
    }

    /// One handshake as [`once`](Self::once); answers when the served
    /// certificate expires (its `notAfter`, seconds since the Unix epoch).
    pub fn expiry(&self) -> Result<u64, String> {
        let leaf = self.handshake()?;
        not_after(&leaf).ok_or_else(|| "the certificate's validity cannot be read".into())
    }

    /// The handshake; answers the served leaf certificate.
    fn handshake(&self) -> Result<CertificateDer<'static>, String> {
        let address = match self.options.address {
            Some(address) => address,
            None => (self.hostname.as_str(), self.options.port)
                .to_socket_addrs()
                .map_err(|e| format!("cannot resolve {}: {e}", self.hostname))?
                .next()
                .ok_or_else(|| format!("{} has no address", self.hostname))?,
        };
        let timeout = self.options.attempt_timeout;
        let mut tcp = TcpStream::connect_timeout(&address, timeout)
            .map_err(|e| format!("cannot connect to {address}: {e}"))?;
        tcp.set_read_timeout(Some(timeout)).ok();
        tcp.set_write_timeout(Some(timeout)).ok();
        let name = ServerName::try_from(self.hostname.clone())
            .map_err(|e| format!("{} is not a server name: {e}", self.hostname))?;
        let mut connection =
            rustls::ClientConnection::new(self.config.clone(), name).map_err(|e| e.to_string())?;
        let started = Instant::now();
        while connection.is_handshaking() {
            if started.elapsed() > timeout {
                return Err(format!(
                    "the handshake with {address} took longer than {timeout:?}"
                ));
            }
            connection
                .complete_io(&mut tcp)
                .map_err(|e| describe(&e, &self.options))?;
        }
        let leaf = connection
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| leaf.clone().into_owned())
            .ok_or_else(|| "the server sent no certificate".to_string())?;
        connection.send_close_notify();
        let _ = connection.complete_io(&mut tcp);
        Ok(leaf)
    }
}

/// A certificate's `notAfter`, in seconds since the Unix epoch.
fn not_after(der: &CertificateDer<'_>) -> Option<u64> {
    use x509_cert::der::Decode;
    let certificate = x509_cert::Certificate::from_der(der.as_ref()).ok()?;
    Some(
        certificate
            .tbs_certificate
            .validity
            .not_after
            .to_unix_duration()
            .as_secs(),
    )
}

/// Repeats [`TlsCheck::once`] every `interval` until it holds or `timeout`
/// passed; `progress` hears each failed attempt (number, reason).
pub fn wait(
    check: &TlsCheck,
    timeout: Duration,
    interval: Duration,
    progress: &mut dyn FnMut(u32, &str),
) -> Result<u32, TlsTimeout> {
    let started = Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let reason = match check.once() {
            Ok(()) => return Ok(attempts),
            Err(reason) => reason,
        };
        progress(attempts, &reason);
        let elapsed = started.elapsed();
        if elapsed + interval > timeout {
            return Err(TlsTimeout {
                hostname: check.hostname.clone(),
                attempts,
                waited_secs: elapsed.as_secs(),
                last_reason: reason,
            });
        }
        std::thread::sleep(interval);
    }
}

/// A client configuration that verifies certificates as browsers do
/// (webpki, against the roots of `options`), for the edge's HTTPS checks.
pub(crate) fn client_config(options: &TlsOptions) -> Result<ClientConfig, TlsSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError::Config(e.to_string()))?
        .with_root_certificates(roots(options)?)
        .with_no_client_auth())
}

fn roots(options: &TlsOptions) -> Result<RootCertStore, TlsSetupError> {
    let mut store = RootCertStore::empty();
    let Some(path) = &options.roots else {
        store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        return Ok(store);
    };
    let error = |reason: String| TlsSetupError::Roots {
        path: path.display().to_string(),
        reason,
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|e| error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(e.to_string()))?;
    let (added, _) = store.add_parsable_certificates(certificates);
    if added == 0 {
        return Err(error("holds no usable certificate".into()));
    }
    Ok(store)
}

/// A handshake failure in an operator's words.
fn describe(error: &std::io::Error, options: &TlsOptions) -> String {
    let Some(tls) = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return format!("the TLS connection failed: {error}");
    };
    match tls {
        rustls::Error::InvalidCertificate(certificate) => match certificate {
            CertificateError::NotValidForName => {
                "the certificate is not valid for this hostname".into()
            }
            CertificateError::NotValidForNameContext { presented, .. } => format!(
                "the certificate is not valid for this hostname; it covers {}",
                if presented.is_empty() {
                    "no DNS name".to_string()
                } else {
                    presented
                        .iter()
                        .map(|name| {
                            name.strip_prefix("DnsName(\"")
                                .and_then(|n| n.strip_suffix("\")"))
                                .unwrap_or(name)
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the certificate has expired".into()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the certificate is not valid yet".into()
            }
            CertificateError::UnknownIssuer => {
                "the certificate does not chain to a trusted root".into()
            }
            CertificateError::Other(other) if other.to_string().contains(EXPIRES_SOON) => format!(
                "the certificate expires within {} days",
                options.min_validity.as_secs() / 86400
            ),
            other => format!("the certificate is refused: {other:?}"),
        },
        other => format!("the TLS handshake failed: {other}"),
    }
}

const EXPIRES_SOON: &str = "expires within the required validity";

/// webpki's verification, once at the handshake's time and once at
/// `margin` later: a certificate that would have expired by then is
/// refused as near expiry.
#[derive(Debug)]
struct NotNearExpiry {
    inner: Arc<WebPkiServerVerifier>,
    margin: Duration,
}

#[derive(Debug)]
struct ExpiresSoon;

impl std::fmt::Display for ExpiresSoon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(EXPIRES_SOON)
    }
}

impl std::error::Error for ExpiresSoon {}

impl ServerCertVerifier for NotNearExpiry {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        let later = UnixTime::since_unix_epoch(Duration::from_secs(
            now.as_secs().saturating_add(self.margin.as_secs()),
        ));
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            later,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::Expired | CertificateError::ExpiredContext { .. },
            )) => Err(rustls::Error::InvalidCertificate(CertificateError::Other(
                rustls::OtherError(Arc::new(ExpiresSoon)),
            ))),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
