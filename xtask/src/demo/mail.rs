//! The demo's mail half: mail-service on its embedded defaults (SQLite and
//! the file transport under `.demo/mail/`), a tenant with an API key and a
//! sending domain marked verified for local use.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

pub(super) const TENANT: &str = "demo";
/// The sending domain, marked verified without DNS (local use only).
pub(super) const DOMAIN: &str = "example.com";
/// mail-service's line on stderr once it listens; the address follows.
pub(super) const LISTENING: &str = "mail-service listening on ";

/// Settings mail-service reads from the environment; the demo clears them so
/// that it always runs on its own embedded state.
const ENVIRONMENT: &[&str] = &[
    "DATABASE_URL",
    "MAIL_DATA_DIR",
    "MAIL_DATABASE_SCHEMA",
    "MAIL_DB_MAX_CONNECTIONS",
    "MAIL_SQLITE_BUSY_TIMEOUT_MS",
];

pub(super) struct Mail {
    pub(super) bin: PathBuf,
    /// `--data-dir`: the database `mail.db` and the outbox `outbox/`.
    pub(super) data_dir: PathBuf,
    /// The tenant's API key (0600), made once.
    pub(super) key_file: PathBuf,
}

impl Mail {
    pub(super) fn new(bin: PathBuf, demo_root: &Path) -> Self {
        Self {
            bin,
            data_dir: demo_root.join("mail"),
            key_file: demo_root.join("mail-key"),
        }
    }

    pub(super) fn outbox(&self) -> PathBuf {
        self.data_dir.join("outbox")
    }

    /// A mail-service command on the demo's data directory.
    pub(super) fn command(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        for name in ENVIRONMENT {
            cmd.env_remove(name);
        }
        cmd.arg("--data-dir").arg(&self.data_dir);
        cmd
    }

    /// The tenant and its key on first run (the key is kept in the key file
    /// and never printed), and the domain marked verified (again: it is
    /// idempotent). A key file without the database it belongs to is made
    /// anew.
    pub(super) fn prepare(&self, write_private: impl Fn(&Path, &str) -> Result<()>) -> Result<()> {
        std::fs::create_dir_all(&self.data_dir)
            .with_context(|| format!("cannot create {}", self.data_dir.display()))?;
        if self.key_file.exists() && self.data_dir.join("mail.db").exists() {
            println!("    tenant `{TENANT}` and its key are there already");
        } else {
            let key = self.run(&["key", "create", "--tenant", TENANT, "--name", "demo"])?;
            let key = key.trim();
            if !key.starts_with("ms_") {
                bail!("`mail-service key create` printed no key");
            }
            write_private(&self.key_file, &format!("{key}\n"))?;
            println!(
                "    created tenant `{TENANT}` and its API key in {}",
                self.key_file.display()
            );
        }
        self.run(&["domain", "mark-verified", "--tenant", TENANT, DOMAIN])?;
        println!("    {DOMAIN} marked verified for local use (no DNS check)");
        Ok(())
    }

    /// Runs a mail-service command and answers its standard output.
    fn run(&self, args: &[&str]) -> Result<String> {
        let out = self
            .command()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot start {}", self.bin.display()))?;
        if !out.status.success() {
            bail!(
                "`mail-service {}` failed ({}):\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim_end()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The `curl` that sends one email through the running service.
    pub(super) fn curl(&self, base: &str) -> String {
        format!(
            "curl -s {base}/emails -H \"Authorization: Bearer $(cat '{key}')\" \\
              -H 'Content-Type: application/json' \\
              -d '{{\"from\":\"demo@{DOMAIN}\",\"to\":\"friend@example.com\",\"subject\":\"Hello\",\"text\":\"It works\"}}'",
            key = self.key_file.display()
        )
    }
}
