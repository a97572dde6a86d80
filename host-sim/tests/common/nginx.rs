//! Debian's nginx on loopback, running an exported tracking configuration
//! in its http block (the tests are skipped where nginx is missing, never
//! on CI: `.ci/run` installs it).

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Nginx {
    child: Child,
    prefix: String,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn nginx_binary() -> Option<&'static str> {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// Debian's nginx running `include` (the export) in its http block, with
/// its files under `prefix`; the test is skipped without nginx (not on CI).
pub fn start_nginx(prefix: &Path, include: &str, port: u16) -> Option<Nginx> {
    let Some(nginx) = nginx_binary() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "nginx is missing: .ci/run installs Debian's nginx"
        );
        eprintln!("skipped: Debian's nginx is not installed (apt-get install nginx)");
        return None;
    };
    let p = prefix.display().to_string();
    std::fs::write(prefix.join("tracking.conf"), include).unwrap();
    std::fs::write(
        prefix.join("nginx.conf"),
        format!(
            "daemon off;\nmaster_process off;\npid {p}/nginx.pid;\nerror_log {p}/error.log info;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  access_log {p}/access.log;\n  client_body_temp_path {p}/body;\n  \
             proxy_temp_path {p}/proxy;\n  fastcgi_temp_path {p}/fastcgi;\n  uwsgi_temp_path {p}/uwsgi;\n  \
             scgi_temp_path {p}/scgi;\n  include {p}/tracking.conf;\n}}\n"
        ),
    )
    .unwrap();
    test_config(nginx, &p, include);
    let started_nginx = Nginx {
        child: Command::new(nginx)
            .args(["-p", &p, "-c", &format!("{p}/nginx.conf")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        prefix: p.clone(),
    };
    let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let started = Instant::now();
    while TcpStream::connect(address).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "nginx did not start: {}",
            std::fs::read_to_string(prefix.join("error.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(started_nginx)
}

/// `nginx -t` accepts the configuration (`include` shown otherwise).
fn test_config(nginx: &str, prefix: &str, include: &str) {
    let check = Command::new(nginx)
        .args(["-t", "-p", prefix, "-c", &format!("{prefix}/nginx.conf")])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "nginx -t refuses the configuration: {}\n{include}",
        String::from_utf8_lossy(&check.stderr)
    );
}
