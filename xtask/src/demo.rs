//! `cargo xtask demo`: the main job. Builds the signed release and the two
//! servers, keeps an operator state in `.demo/`, and runs the Umami provider
//! fake and `host-sim serve` on loopback until Ctrl-C.
//!
//! `.demo/` (gitignored, mode 0700) holds everything a rerun reuses:
//!
//! | path | what |
//! |---|---|
//! | `host/` | host-sim's state: SQLite database and `trusted-publishers/` |
//! | `provider-secret` | the provider's API key, random, made once (0600); never printed |
//! | `provider.json` | the provider fake's websites and page views |
//! | `token` | the demo user's token of this run (0600) |
//! | `host-sim.log`, `umami-fake.log` | the servers' output of this run |

use std::collections::VecDeque;
use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::toolchain::WasmToolchain;
use crate::{release, run};

const EXTENSION: &str = "managed-analytics";
const PROJECT: &str = "demo-shop";
const USER: &str = "demo";
const TOKEN_TTL: &str = "24h";
/// How many lines of a server's stderr an error message shows.
const TAIL_LINES: usize = 30;
/// How long a server may take to say it listens, and to stop.
const START_LIMIT: Duration = Duration::from_secs(60);
const STOP_LIMIT: Duration = Duration::from_secs(10);

#[derive(clap::Args)]
pub struct Args {
    /// Port on 127.0.0.1 for host-sim: console, extension API and MCP.
    #[arg(long, default_value_t = 8080, value_name = "PORT")]
    pub port: u16,
    /// Port on 127.0.0.1 for the Umami-compatible provider fake.
    #[arg(long, default_value_t = 3300, value_name = "PORT")]
    pub provider_port: u16,
}

pub fn run(args: &Args) -> Result<()> {
    if args.port == args.provider_port {
        bail!(
            "--port and --provider-port are both {}; give them different ports",
            args.port
        );
    }
    check_port_free(args.port, "--port")?;
    check_port_free(args.provider_port, "--provider-port")?;
    let root = crate::workspace_root();
    let dir = DemoDir::open(&root.join(".demo"))?;

    crate::step("[1/5] the signed release (plugin component and panel bundle)");
    let toolchain = WasmToolchain::detect()?;
    let built = release::run(
        &release::Args {
            out: None,
            key: None,
        },
        &toolchain,
    )?;

    crate::step("[2/5] cargo build --bin host-sim --bin umami-fake (dev profile)");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run::checked(Command::new(cargo).current_dir(root).args([
        "build",
        "--bin",
        "host-sim",
        "--bin",
        "umami-fake",
    ]))?;
    let bin_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(crate::target_root, |dir| root.join(dir))
        .join("debug");

    crate::step(format!(
        "[3/5] operator steps in {} (project {PROJECT})",
        dir.host.display()
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

    // From here on two servers run; Ctrl-C stops them (they sit in process
    // groups of their own, so the terminal's SIGINT reaches only us).
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))
        .context("cannot install the Ctrl-C handler")?;
    let mut servers = Servers::default();

    crate::step(format!(
        "[4/5] the provider fake on 127.0.0.1:{}",
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
    let first = servers.start("umami-fake", &mut fake, &dir.root, &stop)?;
    let Some(first) = first else {
        return servers.stop_on_request();
    };
    println!("    {first}");

    crate::step(format!("[5/5] host-sim serve on 127.0.0.1:{}", args.port));
    check_port_free(args.port, "--port")?;
    let mut serve = operator.command();
    serve
        .arg("serve")
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", args.port));
    let Some(first) = servers.start("host-sim", &mut serve, &dir.root, &stop)? else {
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

    let configuration = http_get(
        address,
        &format!("/v1/plugins/{EXTENSION}/projects/{PROJECT}/api/configuration"),
        Some(&token),
    )
    .ok()
    .filter(|(status, _)| *status == 200)
    .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok());
    print_summary(&base, &provider_url, &token, configuration.as_ref(), &dir);

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

/// A running server and what it said.
struct Server {
    name: &'static str,
    child: std::process::Child,
    log: PathBuf,
    tail: Arc<Mutex<VecDeque<String>>>,
    stderr_reader: Option<JoinHandle<()>>,
}

impl Server {
    /// Asks it to stop (SIGTERM), waits, then kills it.
    fn stop(&mut self) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let asked = Instant::now();
        while asked.elapsed() < STOP_LIMIT {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "    {} did not stop within {STOP_LIMIT:?}; killing it",
            self.name
        );
        let _ = self.child.kill();
        self.child.wait().ok()
    }

    /// The last lines of its standard error, once it has exited.
    fn stderr_tail(&mut self) -> String {
        if let Some(reader) = self.stderr_reader.take() {
            let _ = reader.join();
        }
        let tail = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        if tail.is_empty() {
            "    (it wrote nothing to stderr)".to_owned()
        } else {
            tail.iter()
                .map(|line| format!("    | {line}"))
                .collect::<Vec<_>>()
                .join("\n")
        }
    }

    fn exited(&mut self, status: ExitStatus) -> anyhow::Error {
        let tail = self.stderr_tail();
        anyhow::anyhow!(
            "{} exited unexpectedly ({status}); the end of its stderr (all of it in {}):\n{tail}",
            self.name,
            self.log.display(),
        )
    }
}

/// The servers of the demo; dropping this stops them all.
#[derive(Default)]
struct Servers {
    running: Vec<Server>,
}

impl Servers {
    /// Starts a server in a process group of its own, copies its output to
    /// `<dir>/<name>.log`, and waits for its first line on stdout (its
    /// address). `None` when Ctrl-C came first.
    fn start(
        &mut self,
        name: &'static str,
        cmd: &mut Command,
        dir: &Path,
        stop: &AtomicBool,
    ) -> Result<Option<String>> {
        let log_path = dir.join(format!("{name}.log"));
        let log = Arc::new(Mutex::new(
            fs::File::create(&log_path)
                .with_context(|| format!("cannot create {}", log_path.display()))?,
        ));
        cmd.stdin(Stdio::null())
            // Plain text in the log files.
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start `{}`", run::display(cmd)))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let stderr = child.stderr.take().context("no stderr")?;

        let (first_line, first) = mpsc::channel();
        let out_log = log.clone();
        std::thread::spawn(move || {
            for (index, line) in BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .enumerate()
            {
                if index == 0 {
                    let _ = first_line.send(line.clone());
                }
                let _ = writeln!(out_log.lock().unwrap_or_else(|p| p.into_inner()), "{line}");
            }
        });
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let err_tail = tail.clone();
        let stderr_reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = writeln!(log.lock().unwrap_or_else(|p| p.into_inner()), "{line}");
                let mut tail = err_tail.lock().unwrap_or_else(|p| p.into_inner());
                if tail.len() == TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
        self.running.push(Server {
            name,
            child,
            log: log_path,
            tail,
            stderr_reader: Some(stderr_reader),
        });
        let server = self.running.last_mut().expect("just pushed");

        let started = Instant::now();
        loop {
            if stop.load(Ordering::SeqCst) {
                return Ok(None);
            }
            match first.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => return Ok(Some(line)),
                // Its stdout closed without a line: it is exiting.
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if let Some(status) = server.child.try_wait()? {
                return Err(server.exited(status));
            }
            if started.elapsed() > START_LIMIT {
                bail!(
                    "{name} did not say where it listens within {START_LIMIT:?}; see {}",
                    server.log.display()
                );
            }
        }
    }

    /// Waits until `GET /healthz` answers 200. False when Ctrl-C came first.
    fn wait_healthy(&mut self, address: SocketAddr, stop: &AtomicBool) -> Result<bool> {
        let started = Instant::now();
        loop {
            if stop.load(Ordering::SeqCst) {
                return Ok(false);
            }
            if matches!(http_get(address, "/healthz", None), Ok((200, _))) {
                return Ok(true);
            }
            self.check_running()?;
            if started.elapsed() > START_LIMIT {
                bail!("host-sim did not answer /healthz on {address} within {START_LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Fails with the server's stderr tail when one has exited.
    fn check_running(&mut self) -> Result<()> {
        let mut dead = None;
        for (index, server) in self.running.iter_mut().enumerate() {
            if let Some(status) = server.child.try_wait()? {
                dead = Some((index, status));
                break;
            }
        }
        if let Some((index, status)) = dead {
            let mut server = self.running.remove(index);
            self.stop_all();
            return Err(server.exited(status));
        }
        Ok(())
    }

    /// Runs until Ctrl-C (then stops the servers and answers Ok) or until a
    /// server dies (then stops the other and fails with its stderr tail).
    fn supervise(mut self, stop: &AtomicBool) -> Result<()> {
        while !stop.load(Ordering::SeqCst) {
            self.check_running()?;
            std::thread::sleep(Duration::from_millis(200));
        }
        self.stop_on_request()
    }

    fn stop_on_request(mut self) -> Result<()> {
        println!();
        crate::step("stopping the servers");
        self.stop_all();
        println!(
            "    stopped; `cargo xtask demo` starts them again with the same data (`rm -rf .demo` starts over)"
        );
        Ok(())
    }

    /// Stops the servers, the last started first.
    fn stop_all(&mut self) {
        while let Some(mut server) = self.running.pop() {
            match server.stop() {
                Some(status) if status.success() => println!("    {} stopped", server.name),
                Some(status) => println!("    {} stopped ({status})", server.name),
                None => println!("    {} could not be waited for", server.name),
            }
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// `GET http://{address}{path}` on loopback: status and body.
fn http_get(address: SocketAddr, path: &str, bearer: Option<&str>) -> Result<(u16, String)> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut request = agent.get(format!("http://{address}{path}"));
    if let Some(token) = bearer {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let mut response = request.call()?;
    let status = response.status().as_u16();
    Ok((status, response.body_mut().read_to_string()?))
}

fn print_summary(
    base: &str,
    provider: &str,
    token: &str,
    configuration: Option<&Value>,
    dir: &DemoDir,
) {
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

  Logs      {root}/host-sim.log, {root}/umami-fake.log
"
    );
}
