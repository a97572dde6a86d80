//! `cargo xtask demo`: the main job. Builds the signed release and the three
//! servers, keeps an operator state in `.demo/`, and runs the Umami provider
//! fake, `host-sim serve` and mail-service on loopback until Ctrl-C.
//!
//! `.demo/` (gitignored, mode 0700; `--dir` names another) holds everything
//! a rerun reuses:
//!
//! | path | what |
//! |---|---|
//! | `host/` | host-sim's state: SQLite database and `trusted-publishers/` |
//! | `provider-secret` | the provider's API key, random, made once (0600); never printed |
//! | `provider.json` | the provider fake's websites and page views |
//! | `token` | the demo user's token of this run (0600) |
//! | `mail/` | mail-service's SQLite database and `outbox/`, where each accepted email lands as `<id>.eml` |
//! | `mail-key` | the mail tenant's API key, made once (0600); never printed |
//! | `host-sim.log`, `umami-fake.log`, `mail-service.log` | the servers' output of this run |

mod mail;
mod servers;

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::toolchain::WasmToolchain;
use crate::{release, run};
use mail::Mail;
use servers::{Ready, Servers, http_get};

const EXTENSION: &str = "managed-analytics";
const PROJECT: &str = "demo-shop";
const USER: &str = "demo";
const TOKEN_TTL: &str = "24h";
/// The binaries the demo runs, built in one cargo invocation.
const SERVERS: [&str; 3] = ["host-sim", "umami-fake", "mail-service"];

#[derive(clap::Args)]
pub struct Args {
    /// Port on 127.0.0.1 for host-sim: console, extension API and MCP.
    #[arg(long, default_value_t = 8080, value_name = "PORT")]
    pub port: u16,
    /// Port on 127.0.0.1 for the Umami-compatible provider fake.
    #[arg(long, default_value_t = 3300, value_name = "PORT")]
    pub provider_port: u16,
    /// Port on 127.0.0.1 for mail-service's API.
    #[arg(long, default_value_t = 8025, value_name = "PORT")]
    pub mail_port: u16,
    /// The demo's state directory (relative paths from the workspace root).
    #[arg(long, default_value = ".demo", value_name = "DIR")]
    pub dir: PathBuf,
    /// Use the servers of the last workspace build in target/debug instead
    /// of building them (the demo's test: a `cargo test` build has the
    /// same binaries with other features, and building them again would
    /// rebuild most dependencies).
    #[arg(long, hide = true)]
    pub prebuilt: bool,
}

pub fn run(args: &Args) -> Result<()> {
    let started = Instant::now();
    let ports = [
        (args.port, "--port"),
        (args.provider_port, "--provider-port"),
        (args.mail_port, "--mail-port"),
    ];
    for (index, (port, flag)) in ports.iter().enumerate() {
        if let Some((_, other)) = ports[..index].iter().find(|(p, _)| p == port) {
            bail!("{other} and {flag} are both {port}; give them different ports");
        }
        check_port_free(*port, flag)?;
    }
    let root = crate::workspace_root();
    let dir = DemoDir::open(&root.join(&args.dir))?;

    crate::step("[1/6] the signed release (plugin component and panel bundle)");
    let toolchain = WasmToolchain::detect()?;
    let built = release::run(
        &release::Args {
            out: None,
            key: None,
        },
        &toolchain,
    )?;

    let bin_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(crate::target_root, |dir| root.join(dir))
        .join("debug");
    if args.prebuilt {
        crate::step(format!(
            "[2/6] the servers of the last build in {}",
            bin_dir.display()
        ));
        for server in SERVERS {
            let path = bin_dir.join(server);
            if !path.exists() {
                bail!(
                    "{} is missing; build it (`cargo build --bin {server}`) or leave out --prebuilt",
                    path.display()
                );
            }
        }
    } else {
        crate::step(format!(
            "[2/6] cargo build --bin {} (dev profile)",
            SERVERS.join(" --bin ")
        ));
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.current_dir(&root).arg("build");
        for server in SERVERS {
            build.args(["--bin", server]);
        }
        run::checked(&mut build)?;
    }

    crate::step(format!(
        "[3/6] operator steps in {} (project {PROJECT}, mail tenant {})",
        dir.root.display(),
        mail::TENANT
    ));
    let operator = Operator {
        host_sim: bin_dir.join("host-sim"),
        state_dir: dir.host.clone(),
    };
    operator.trust_publishers(&release::trusted_keys_dir())?;
    operator.install_or_upgrade(&built)?;
    operator.configure(args.provider_port, &dir.secret_file)?;
    let token = operator.issue_token()?;
    dir.write_private(&dir.root.join("token"), &format!("{token}\n"))?;
    let mail = Mail::new(bin_dir.join("mail-service"), &dir.root);
    mail.prepare(|path, contents| dir.write_private(path, contents))?;

    // From here on servers run; Ctrl-C stops them (they sit in process
    // groups of their own, so the terminal's SIGINT reaches only us).
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))
        .context("cannot install the Ctrl-C handler")?;
    let mut servers = Servers::default();

    crate::step(format!(
        "[4/6] the provider fake on 127.0.0.1:{}",
        args.provider_port
    ));
    // Checked again: the builds took a while.
    check_port_free(args.provider_port, "--provider-port")?;
    let provider_url = format!("http://127.0.0.1:{}", args.provider_port);
    let mut fake = Command::new(bin_dir.join("umami-fake"));
    fake.arg("--listen")
        .arg(format!("127.0.0.1:{}", args.provider_port))
        .arg("--data-file")
        .arg(dir.root.join("provider.json"))
        // The environment, not an argument: `ps` shows arguments.
        .env("UMAMI_FAKE_SECRET", dir.read_secret()?);
    let Some(first) = servers.start(
        "umami-fake",
        &mut fake,
        &dir.root,
        Ready::FirstStdoutLine,
        &stop,
    )?
    else {
        return servers.stop_on_request();
    };
    println!("    {first}");

    crate::step(format!("[5/6] host-sim serve on 127.0.0.1:{}", args.port));
    check_port_free(args.port, "--port")?;
    let mut serve = operator.command();
    serve
        .arg("serve")
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", args.port));
    let Some(first) = servers.start(
        "host-sim",
        &mut serve,
        &dir.root,
        Ready::FirstStdoutLine,
        &stop,
    )?
    else {
        return servers.stop_on_request();
    };
    let base = first
        .strip_prefix("listening ")
        .with_context(|| format!("host-sim serve said `{first}` instead of `listening URL`"))?
        .to_owned();
    let address: SocketAddr = base
        .trim_start_matches("http://")
        .parse()
        .with_context(|| format!("host-sim serve listens on `{base}`, not an address"))?;
    if !servers.wait_healthy(address, &stop)? {
        return servers.stop_on_request();
    }

    crate::step(format!(
        "[6/6] mail-service serve on 127.0.0.1:{}",
        args.mail_port
    ));
    check_port_free(args.mail_port, "--mail-port")?;
    let mut mail_serve = mail.command();
    mail_serve
        .arg("serve")
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", args.mail_port));
    let Some(mail_base) = servers.start(
        "mail-service",
        &mut mail_serve,
        &dir.root,
        Ready::StderrPrefix(mail::LISTENING),
        &stop,
    )?
    else {
        return servers.stop_on_request();
    };

    let configuration = http_get(
        address,
        &format!("/v1/plugins/{EXTENSION}/projects/{PROJECT}/api/configuration"),
        Some(&token),
    )
    .ok()
    .filter(|(status, _)| *status == 200)
    .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok());
    print_summary(
        &Urls {
            host: &base,
            provider: &provider_url,
            mail: &mail_base,
        },
        &token,
        configuration.as_ref(),
        &dir,
        &mail,
    );
    println!(
        "  Ready in {:.0?} (builds included; a rerun skips what is built).\n",
        started.elapsed()
    );

    servers.supervise(&stop)
}

/// Fails with the flag to change when something listens on the port.
fn check_port_free(port: u16, flag: &str) -> Result<()> {
    match TcpListener::bind(("127.0.0.1", port)) {
        Ok(_) => Ok(()),
        Err(e) => bail!(
            "127.0.0.1:{port} is not available ({e}); stop what uses it or pick another port with {flag} PORT"
        ),
    }
}

/// The demo's state directory.
struct DemoDir {
    root: PathBuf,
    host: PathBuf,
    secret_file: PathBuf,
}

impl DemoDir {
    /// Creates `.demo/` (0700) and the provider secret on first use.
    fn open(root: &Path) -> Result<Self> {
        let host = root.join("host");
        fs::create_dir_all(&host).with_context(|| format!("cannot create {}", host.display()))?;
        fs::set_permissions(root, fs::Permissions::from_mode(0o700))?;
        let dir = Self {
            root: root.to_owned(),
            host,
            secret_file: root.join("provider-secret"),
        };
        if !dir.secret_file.exists() {
            let mut bytes = [0u8; 32];
            fs::File::open("/dev/urandom")
                .and_then(|mut random| random.read_exact(&mut bytes))
                .context("cannot read /dev/urandom for the provider secret")?;
            let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            dir.write_private(&dir.secret_file, &format!("{secret}\n"))?;
            crate::step(format!(
                "created the provider secret {}",
                dir.secret_file.display()
            ));
        }
        Ok(dir)
    }

    /// Writes a file only its owner may read, replacing any previous one.
    fn write_private(&self, path: &Path, contents: &str) -> Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
        file.write_all(contents.as_bytes())?;
        Ok(())
    }

    fn read_secret(&self) -> Result<String> {
        let text = fs::read_to_string(&self.secret_file)
            .with_context(|| format!("cannot read {}", self.secret_file.display()))?;
        let secret = text.lines().next().unwrap_or_default().trim().to_owned();
        if secret.is_empty() {
            bail!(
                "{} is empty; delete it and a new one is made",
                self.secret_file.display()
            );
        }
        Ok(secret)
    }
}

/// The operator's steps, through host-sim's CLI as an operator runs them.
struct Operator {
    host_sim: PathBuf,
    state_dir: PathBuf,
}

impl Operator {
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.host_sim);
        cmd.arg("--state-dir").arg(&self.state_dir);
        cmd
    }

    /// Runs a host-sim command and answers its standard output; `progress`
    /// shows its standard error (the verification steps) as it goes.
    fn run(&self, args: &[&str], progress: bool) -> Result<String> {
        let mut cmd = self.command();
        cmd.args(args).stdin(Stdio::null());
        if progress {
            cmd.stderr(Stdio::inherit());
        }
        let out = cmd
            .output()
            .with_context(|| format!("cannot start {}", self.host_sim.display()))?;
        if !out.status.success() {
            bail!(
                "`host-sim {}` failed ({}):\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim_end()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn run_json(&self, args: &[&str], progress: bool) -> Result<Value> {
        let out = self.run(args, progress)?;
        serde_json::from_str(&out)
            .with_context(|| format!("`host-sim {}` printed no JSON", args.join(" ")))
    }

    /// Copies the release's publisher key into the host's trust directory.
    fn trust_publishers(&self, keys: &Path) -> Result<()> {
        let trust_dir = self.state_dir.join("trusted-publishers");
        fs::create_dir_all(&trust_dir)?;
        for entry in
            fs::read_dir(keys).with_context(|| format!("cannot read {}", keys.display()))?
        {
            let path = entry?.path();
            if let (Some("pub"), Some(name)) =
                (path.extension().and_then(|e| e.to_str()), path.file_name())
            {
                fs::copy(&path, trust_dir.join(name))?;
            }
        }
        Ok(())
    }

    /// Installs the release on first run; on a rerun keeps the installed one
    /// when its manifest digest is the same, else upgrades to the new one.
    fn install_or_upgrade(&self, built: &release::Built) -> Result<()> {
        let dir = built.dir.to_string_lossy();
        let releases = self.run_json(&["release", "list"], false)?;
        let installed = releases.as_array().and_then(|list| {
            list.iter()
                .find(|r| r["extension_id"] == EXTENSION)
                .and_then(|r| r["digest"].as_str())
        });
        match installed {
            Some(digest) if digest == built.manifest_digest => {
                println!("    release {digest} is installed already; nothing to do");
                return Ok(());
            }
            Some(digest) => {
                println!(
                    "    upgrading from {digest} to {} (verifying it first)",
                    built.manifest_digest
                );
                self.run(&["release", "upgrade", &dir], true)?;
            }
            None => {
                println!(
                    "    installing {} (verifying it first)",
                    built.manifest_digest
                );
                self.run(&["release", "install", &dir], true)?;
            }
        }
        Ok(())
    }

    /// Approves every capability, grants the project and points its
    /// `provider` binding at the fake (the secret goes by file, never by argument).
    fn configure(&self, provider_port: u16, secret_file: &Path) -> Result<()> {
        let approved = self.run_json(&["approve", EXTENSION], false)?;
        println!("    approved {}", approved["approved"]);
        self.run(
            &["grant", "--extension", EXTENSION, "--project", PROJECT],
            false,
        )?;
        println!("    granted {EXTENSION} to {PROJECT}");
        let origin = format!("http://127.0.0.1:{provider_port}");
        self.run(
            &[
                "binding",
                "set",
                "--project",
                PROJECT,
                "--name",
                "provider",
                "--origin",
                &origin,
                "--auth",
                "bearer",
                "--secret-file",
                &secret_file.to_string_lossy(),
            ],
            false,
        )?;
        println!("    bound `provider` of {PROJECT} to {origin}");
        Ok(())
    }

    fn issue_token(&self) -> Result<String> {
        let issued = self.run_json(
            &[
                "token",
                "issue",
                "--user",
                USER,
                "--project",
                PROJECT,
                "--ttl",
                TOKEN_TTL,
            ],
            false,
        )?;
        let token = issued["token"]
            .as_str()
            .context("`host-sim token issue` printed no token")?;
        println!("    issued a {TOKEN_TTL} token for user {USER}");
        Ok(token.to_owned())
    }
}

/// Where the three servers listen.
struct Urls<'a> {
    host: &'a str,
    provider: &'a str,
    mail: &'a str,
}

fn print_summary(
    urls: &Urls,
    token: &str,
    configuration: Option<&Value>,
    dir: &DemoDir,
    mail: &Mail,
) {
    let Urls {
        host: base,
        provider,
        mail: mail_base,
    } = *urls;
    let api = format!("{base}/v1/plugins/{EXTENSION}/projects/{PROJECT}/api");
    let root = dir.root.display();
    println!();
    crate::step("the demo is running; Ctrl-C stops it");
    println!(
        "
  Console   {base}/console
            sign in with the token of user `{USER}` (project {PROJECT}, valid {TOKEN_TTL}; also in {root}/token):
            {token}
            then set up the website (name, public domain) and copy the tracking script.

  API       {api}/{{site,configuration,stats}}
            export TOKEN=$(cat {root}/token)
            curl -H \"Authorization: Bearer $TOKEN\" {api}/configuration

  MCP       {base}/mcp

  Provider  {provider}  (Umami-compatible fake; data in {root}/provider.json)"
    );
    let website =
        configuration.and_then(|c| Some((c["website_id"].as_str()?, c["domain"].as_str()?)));
    let (website, hostname, note) = match website {
        Some((id, domain)) => (
            id,
            domain,
            "send a test page view of the provisioned website",
        ),
        None => (
            "WEBSITE_ID",
            "DOMAIN",
            "after setting up the website, send a test page view (WEBSITE_ID is data-website-id of the tracking script)",
        ),
    };
    println!(
        "            {note}, then press Refresh in the panel:
            curl -H 'User-Agent: Mozilla/5.0 (X11; Linux x86_64) demo' -H 'Content-Type: application/json' \\
              -d '{{\"type\":\"event\",\"payload\":{{\"website\":\"{website}\",\"hostname\":\"{hostname}\",\"url\":\"/\"}}}}' \\
              {provider}/api/send

  Mail      {mail_base}  (mail-service: tenant {tenant}, SQLite in {mail_dir}, file transport)
            send an email from {domain} (marked verified for local use); the answer is its id:
            {curl}
            each accepted email is written to {outbox}/<id>.eml

  Logs      {root}/host-sim.log, {root}/umami-fake.log, {root}/mail-service.log
",
        tenant = mail::TENANT,
        mail_dir = mail.data_dir.display(),
        domain = mail::DOMAIN,
        curl = mail.curl(mail_base),
        outbox = mail.outbox().display(),
    );
}
