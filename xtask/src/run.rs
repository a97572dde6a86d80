//! Running external commands with clear failures.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A readable one-line form of a command, for messages.
pub fn display(cmd: &Command) -> String {
    let mut text = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Runs `cmd` with inherited output and fails unless it exits with 0.
pub fn checked(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot start `{}`", display(cmd)))?;
    if !status.success() {
        bail!("`{}` failed ({status})", display(cmd));
    }
    Ok(())
}

/// Runs `cmd` and answers its trimmed standard output, or `None` when it
/// cannot start or fails.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Runs `cmd` with its output shown, killing it after `limit`.
/// Answers whether it exited with 0 in time.
pub fn with_timeout(cmd: &mut Command, limit: Duration) -> bool {
    let Ok(mut child) = cmd.spawn() else {
        return false;
    };
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(100)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                eprintln!("    gave up on `{}` after {limit:?}", display(cmd));
                return false;
            }
        }
    }
}

/// Whether a program is on PATH.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}
