//! The demo's server processes: each in a process group of its own, its
//! output copied to a log file, stopped together on Ctrl-C or when one dies.

use std::collections::VecDeque;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::run;

/// How many lines of a server's stderr an error message shows.
const TAIL_LINES: usize = 30;
/// How long a server may take to say it listens, and to stop.
const START_LIMIT: Duration = Duration::from_secs(60);
const STOP_LIMIT: Duration = Duration::from_secs(10);

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

/// Which line says a server is up, and where it listens.
#[derive(Clone, Copy)]
pub(super) enum Ready {
    /// Its first line on stdout.
    FirstStdoutLine,
    /// The first line on stderr that starts with this text (the text after it).
    StderrPrefix(&'static str),
}

/// The servers of the demo; dropping this stops them all.
#[derive(Default)]
pub(super) struct Servers {
    running: Vec<Server>,
}

impl Servers {
    /// Starts a server in a process group of its own, copies its output to
    /// `<dir>/<name>.log`, and waits for the line that says it is up (see
    /// [`Ready`]). `None` when Ctrl-C came first.
    pub(super) fn start(
        &mut self,
        name: &'static str,
        cmd: &mut Command,
        dir: &Path,
        ready: Ready,
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
        let ready_on_stderr = first_line.clone();
        let out_log = log.clone();
        std::thread::spawn(move || {
            for (index, line) in BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .enumerate()
            {
                if index == 0 && matches!(ready, Ready::FirstStdoutLine) {
                    let _ = first_line.send(line.clone());
                }
                let _ = writeln!(out_log.lock().unwrap_or_else(|p| p.into_inner()), "{line}");
            }
        });
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let err_tail = tail.clone();
        let stderr_reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ready::StderrPrefix(prefix) = ready
                    && let Some(rest) = line.strip_prefix(prefix)
                {
                    let _ = ready_on_stderr.send(rest.to_owned());
                }
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
    pub(super) fn wait_healthy(&mut self, address: SocketAddr, stop: &AtomicBool) -> Result<bool> {
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
    pub(super) fn supervise(mut self, stop: &AtomicBool) -> Result<()> {
        while !stop.load(Ordering::SeqCst) {
            self.check_running()?;
            std::thread::sleep(Duration::from_millis(200));
        }
        self.stop_on_request()
    }

    pub(super) fn stop_on_request(mut self) -> Result<()> {
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
pub(super) fn http_get(
    address: SocketAddr,
    path: &str,
    bearer: Option<&str>,
) -> Result<(u16, String)> {
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
