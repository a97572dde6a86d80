//! Certificates made in the tests (rcgen: a CA and leaves) and a TLS
//! server on loopback whose certificate can be swapped while it runs.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use time::OffsetDateTime;

pub struct Ca {
    pub cert: rcgen::Certificate,
    pub key: KeyPair,
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    pub fn pem_file(&self, dir: &Path) -> std::path::PathBuf {
        let path = dir.join("roots.pem");
        std::fs::write(&path, self.cert.pem()).unwrap();
        path
    }

    /// A leaf for `name`, valid from `not_before` to `not_after`.
    pub fn leaf(
        &self,
        name: &str,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Arc<CertifiedKey> {
        let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
        params.not_before = not_before;
        params.not_after = not_after;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing = rustls::crypto::ring::sign::any_supported_type(&der).unwrap();
        Arc::new(CertifiedKey::new(
            vec![
                cert.der().clone(),
                CertificateDer::from(self.cert.der().to_vec()),
            ],
            signing,
        ))
    }

    /// A leaf for `name` valid for 90 days as PEM files for nginx:
    /// `dir/name/fullchain.pem` (leaf and CA) and `dir/name/privkey.pem`.
    pub fn leaf_files(&self, dir: &Path, name: &str) {
        let now = OffsetDateTime::now_utc();
        let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
        params.not_before = now - time::Duration::days(1);
        params.not_after = now + time::Duration::days(90);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let dir = dir.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("fullchain.pem"),
            format!("{}{}", cert.pem(), self.cert.pem()),
        )
        .unwrap();
        std::fs::write(dir.join("privkey.pem"), key.serialize_pem()).unwrap();
    }

    pub fn valid_leaf(&self, name: &str) -> Arc<CertifiedKey> {
        let now = OffsetDateTime::now_utc();
        self.leaf(
            name,
            now - time::Duration::days(1),
            now + time::Duration::days(90),
        )
    }
}

/// Serves whatever certificate is current, swappable while it runs.
#[derive(Debug)]
pub struct Current(pub Mutex<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.lock().unwrap().clone())
    }
}

/// A TLS server on 127.0.0.1 that completes handshakes and plays an edge
/// that serves a tracking hostname: `GET /script.js` answers the test
/// provider's script, `OPTIONS /api/send` allows any origin, anything else
/// is 404 (a client that only handshakes, as `wait-tls`, just hangs up).
pub fn tls_server(first: Arc<CertifiedKey>) -> (SocketAddr, Arc<Current>) {
    let current = Arc::new(Current(Mutex::new(first)));
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(current.clone()),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                let mut stream = stream;
                stream.set_read_timeout(Some(Duration::from_secs(5))).ok();
                let Ok(mut connection) = rustls::ServerConnection::new(config) else {
                    return;
                };
                while connection.is_handshaking() {
                    if connection.complete_io(&mut stream).is_err() {
                        return;
                    }
                }
                answer(&mut rustls::Stream::new(&mut connection, &mut stream));
            });
        }
    });
    (address, current)
}

/// Reads one HTTP/1.1 request head and answers it as the fake edge.
fn answer(stream: &mut impl ReadWrite) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head);
    let mut first = head.split_whitespace();
    let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let (status, extra, body): (&str, &str, &[u8]) = match (method, path) {
        ("GET", "/script.js") => ("200 OK", "", super::PROVIDER_SCRIPT),
        ("OPTIONS", "/api/send") => (
            "204 No Content",
            "Access-Control-Allow-Origin: *\r\nAccess-Control-Allow-Methods: POST\r\n",
            b"",
        ),
        _ => ("404 Not Found", "", b""),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(body);
    let _ = stream.flush();
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}
