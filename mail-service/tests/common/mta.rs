//! A real MTA for the tests: Debian's Postfix as the upstream relay and
//! Debian's OpenDKIM as its verifying milter, each started under the test's
//! own directory and loopback ports (nothing of the machine's mail setup is
//! used or changed).
//!
//! - `submission_port`: STARTTLS required (a certificate of the test's own
//!   CA for `relay.test`), SASL authentication required (Cyrus sasldb),
//!   OpenDKIM in verify mode on every message, so each delivered message
//!   carries OpenDKIM's `Authentication-Results`.
//! - `cleartext_port`: offers neither STARTTLS nor AUTH (to prove that a
//!   client requiring TLS sends nothing there).
//! - Mail for `rcpt.test` is delivered to Maildirs under the test's
//!   directory; `ada@rcpt.test` exists, any other user is accepted and then
//!   bounced by Postfix itself with its own DSN to the envelope sender;
//!   `busy@rcpt.test` is deferred at RCPT (450).
//! - Mail for the return-path domains given at start goes to the feedback
//!   listener's port, over STARTTLS only (Postfix's TLS policy `encrypt`).
//!
//! Postfix and OpenDKIM need root (Postfix's master drops privileges to
//! the `postfix` user). [`Mta::start`] answers `None` (skipped, said on
//! stderr) when the packages are missing outside CI, and panics under CI.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The relay user and password (SASL).
pub const USER: &str = "sender@relay.test";
pub const PASSWORD: &str = "relay-Pa55word-MTA";

/// What the MTA is started with.
pub struct MtaOptions {
    /// The DNS server OpenDKIM asks for the DKIM keys.
    pub dns: SocketAddr,
    /// Return-path domains routed to the feedback listener at this port.
    pub feedback: Option<(Vec<String>, u16)>,
    /// Whether OpenDKIM checks each message. Off for load: OpenDKIM's
    /// libunbound reads its configuration file again in each thread, and
    /// concurrent reads of it fail ("syntax error"), so under concurrent
    /// messages the milter answers tempfail.
    pub verify_dkim: bool,
}

pub struct Mta {
    dir: tempfile::TempDir,
    pub submission_port: u16,
    pub cleartext_port: u16,
    /// The CA that signed the relay's certificate (for `--smtp-ca-file`).
    pub ca_pem: Vec<u8>,
    /// A certificate and key of the same CA for the feedback listener.
    pub listener_cert: PathBuf,
    pub listener_key: PathBuf,
    opendkim: Option<Child>,
}

const PACKAGES: &[(&str, &str)] = &[
    ("/usr/sbin/postfix", "postfix"),
    ("/usr/sbin/opendkim", "opendkim"),
    ("/usr/sbin/saslpasswd2", "sasl2-bin"),
];

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn postfix_ids() -> (u32, u32) {
    let out = Command::new("id").args(["-u", "postfix"]).output().unwrap();
    let uid = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let out = Command::new("id").args(["-g", "postfix"]).output().unwrap();
    let gid = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    (uid, gid)
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}

/// A CA, and leaves signed by it as PEM (certificate chain, key).
struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Ca {
    fn new() -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "mail-service test CA");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    fn leaf(&self, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let params = rcgen::CertificateParams::new(names).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (
            format!("{}{}", cert.pem(), self.cert.pem()),
            key.serialize_pem(),
        )
    }
}

impl Mta {
    pub fn start(options: MtaOptions) -> Option<Mta> {
        let missing: Vec<&str> = PACKAGES
            .iter()
            .filter(|(path, _)| !Path::new(path).exists())
            .map(|(_, package)| *package)
            .collect();
        if !missing.is_empty() {
            assert!(
                std::env::var_os("CI").is_none(),
                "missing Debian packages {missing:?}: .ci/run installs them"
            );
            eprintln!(
                "skipped: the real-MTA test needs Debian's {} (apt-get install postfix opendkim sasl2-bin libsasl2-modules)",
                missing.join(", ")
            );
            return None;
        }
        let dir = tempfile::Builder::new().prefix("mta").tempdir().unwrap();
        // Postfix's daemons run as `postfix`: they must reach the directory.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let root = dir.path().to_path_buf();
        let (uid, gid) = postfix_ids();
        let etc = root.join("etc");
        for sub in ["etc/sasl", "spool", "data", "mail", "dkim"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        for owned in ["data", "mail"] {
            chown(&root.join(owned), uid, gid);
        }

        let ca = Ca::new();
        let (relay_chain, relay_key) = ca.leaf(&["relay.test", "127.0.0.1"]);
        std::fs::write(etc.join("cert.pem"), relay_chain).unwrap();
        std::fs::write(etc.join("key.pem"), relay_key).unwrap();
        let (listener_chain, listener_key) = ca.leaf(&["feedback-smtp.mail.test", "127.0.0.1"]);
        let listener_cert = root.join("listener-cert.pem");
        let listener_key_file = root.join("listener-key.pem");
        std::fs::write(&listener_cert, listener_chain).unwrap();
        std::fs::write(&listener_key_file, listener_key).unwrap();
        std::fs::write(etc.join("ca.pem"), ca.cert.pem()).unwrap();

        let submission_port = free_port();
        let cleartext_port = free_port();
        let milter_port = free_port();

        // OpenDKIM: verify only, every client external, keys from the
        // test's DNS server through libunbound (which otherwise answers
        // the reserved `test.` TLD itself, with NXDOMAIN).
        let dkim = root.join("dkim");
        std::fs::write(
            dkim.join("unbound.conf"),
            format!(
                "server:\n  do-not-query-localhost: no\n  module-config: \"iterator\"\n\
                 local-zone: \"test.\" nodefault\n\
                 forward-zone:\n  name: \".\"\n  forward-addr: {}@{}\n",
                options.dns.ip(),
                options.dns.port()
            ),
        )
        .unwrap();
        std::fs::write(
            dkim.join("opendkim.conf"),
            format!(
                "Mode v\nSyslog no\nSocket inet:{milter_port}@127.0.0.1\nAuthservID relay.test\n\
                 ResolverConfiguration {dkim}/unbound.conf\nPidFile {dkim}/opendkim.pid\n\
                 AlwaysAddARHeader yes\nBackground no\nInternalHosts csl:192.0.2.1\n",
                dkim = dkim.display()
            ),
        )
        .unwrap();
        let opendkim = options.verify_dkim.then(|| {
            Command::new("/usr/sbin/opendkim")
                .args(["-f", "-x"])
                .arg(dkim.join("opendkim.conf"))
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("opendkim starts")
        });

        // SASL: one user in a sasldb of the test's own, read by smtpd as
        // `postfix`; Debian's Postfix looks for `<config>/sasl/smtpd.conf`.
        let sasldb = root.join("sasldb2");
        std::fs::write(
            etc.join("sasl/smtpd.conf"),
            format!(
                "pwcheck_method: auxprop\nauxprop_plugin: sasldb\nsasldb_path: {}\nmech_list: PLAIN LOGIN\n",
                sasldb.display()
            ),
        )
        .unwrap();
        let (user, realm) = USER.split_once('@').unwrap();
        let mut saslpasswd = Command::new("/usr/sbin/saslpasswd2")
            .arg("-f")
            .arg(&sasldb)
            .args(["-c", "-p", "-u", realm, user])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        saslpasswd
            .stdin
            .take()
            .unwrap()
            .write_all(PASSWORD.as_bytes())
            .unwrap();
        assert!(saslpasswd.wait().unwrap().success(), "saslpasswd2 failed");
        chown(&sasldb, uid, gid);

        let mut transport = String::new();
        let mut tls_policy = String::new();
        if let Some((domains, port)) = &options.feedback {
            for domain in domains {
                transport.push_str(&format!("{domain} smtp:[127.0.0.1]:{port}\n"));
            }
            tls_policy.push_str(&format!("[127.0.0.1]:{port} encrypt\n"));
        }
        std::fs::write(etc.join("transport"), transport).unwrap();
        std::fs::write(etc.join("tls_policy"), tls_policy).unwrap();
        std::fs::write(etc.join("vmailbox"), "ada@rcpt.test rcpt.test/ada/\n").unwrap();
        std::fs::write(
            etc.join("rcpt_access"),
            "busy@rcpt.test 450 4.2.1 Mailbox busy, try again later\n",
        )
        .unwrap();
        let r = root.display();
        std::fs::write(
            etc.join("main.cf"),
            format!(
                "compatibility_level = 3.6
queue_directory = {r}/spool
data_directory = {r}/data
mail_owner = postfix
myhostname = relay.test
mydomain = relay.test
mydestination =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
maillog_file_prefixes = {r}
maillog_file = {r}/maillog
alias_maps =
alias_database =
smtpd_tls_cert_file = {r}/etc/cert.pem
smtpd_tls_key_file = {r}/etc/key.pem
smtpd_sasl_type = cyrus
smtpd_sasl_path = smtpd
virtual_mailbox_domains = rcpt.test
virtual_mailbox_base = {r}/mail
virtual_mailbox_maps = texthash:{r}/etc/vmailbox
virtual_uid_maps = static:{uid}
virtual_gid_maps = static:{gid}
smtpd_reject_unlisted_recipient = no
transport_maps = texthash:{r}/etc/transport
smtp_tls_policy_maps = texthash:{r}/etc/tls_policy
smtp_tls_CAfile = {r}/etc/ca.pem
milter_default_action = tempfail
smtp_tls_loglevel = 1
smtpd_tls_loglevel = 1
"
            ),
        )
        .unwrap();
        // Debian's master.cf without chroot (the test's paths are not in
        // a chroot), without the port-25 listener, plus the test's two.
        let stock = std::fs::read_to_string("/etc/postfix/master.cf").unwrap();
        let mut master = String::new();
        for line in stock.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let service = !line.starts_with('#') && !line.starts_with(' ') && fields.len() >= 8;
            if service && fields[1] == "inet" {
                continue;
            }
            if service && fields[4] == "y" {
                let mut fields = fields.clone();
                fields[4] = "n";
                master.push_str(&fields.join(" "));
            } else {
                master.push_str(line);
            }
            master.push('\n');
        }
        let milters = if options.verify_dkim {
            format!("inet:127.0.0.1:{milter_port}")
        } else {
            String::new()
        };
        master.push_str(&format!(
            "127.0.0.1:{submission_port} inet n - n - - smtpd
  -o syslog_name=postfix/submission
  -o smtpd_tls_security_level=encrypt
  -o smtpd_sasl_auth_enable=yes
  -o smtpd_tls_auth_only=yes
  -o smtpd_relay_restrictions=permit_sasl_authenticated,reject
  -o smtpd_recipient_restrictions=check_recipient_access,texthash:{r}/etc/rcpt_access,permit_sasl_authenticated,reject
  -o smtpd_milters={milters}
127.0.0.1:{cleartext_port} inet n - n - - smtpd
  -o syslog_name=postfix/cleartext
  -o smtpd_tls_security_level=none
  -o smtpd_sasl_auth_enable=no
"
        ));
        std::fs::write(etc.join("master.cf"), master).unwrap();

        let status = Command::new("/usr/sbin/postfix")
            .arg("-c")
            .arg(&etc)
            .arg("start")
            .status()
            .unwrap();
        let mta = Mta {
            dir,
            submission_port,
            cleartext_port,
            ca_pem: ca.cert.pem().into_bytes(),
            listener_cert,
            listener_key: listener_key_file,
            opendkim,
        };
        assert!(status.success(), "postfix did not start: {}", mta.log());
        for port in [submission_port, cleartext_port] {
            mta.wait_listening(port);
        }
        if options.verify_dkim {
            mta.wait_listening(milter_port);
        }
        Some(mta)
    }

    fn wait_listening(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nothing listens on port {port}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Postfix's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("maillog")).unwrap_or_default()
    }

    /// The messages delivered to `user`@rcpt.test.
    pub fn delivered(&self, user: &str) -> Vec<String> {
        let new = self
            .dir
            .path()
            .join("mail/rcpt.test")
            .join(user)
            .join("new");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&new)
            .map(|entries| entries.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        files.sort();
        files
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect()
    }

    /// Waits until `user` has `count` messages (at most 30 s).
    pub fn wait_delivered(&self, user: &str, count: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let delivered = self.delivered(user);
            if delivered.len() >= count {
                return delivered;
            }
            assert!(
                Instant::now() < deadline,
                "{user} has {} of {count} messages; Postfix's log:\n{}",
                delivered.len(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until Postfix's log has a line containing every part.
    pub fn wait_log(&self, parts: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = self.log();
            if let Some(line) = log
                .lines()
                .find(|line| parts.iter().all(|p| line.contains(p)))
            {
                return line.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {parts:?}:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Mta {
    fn drop(&mut self) {
        let _ = Command::new("/usr/sbin/postfix")
            .arg("-c")
            .arg(self.dir.path().join("etc"))
            .arg("stop")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Some(opendkim) = &mut self.opendkim {
            let _ = opendkim.kill();
            let _ = opendkim.wait();
        }
    }
}
