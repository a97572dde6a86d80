//! `cargo xtask test`: the one command that runs every test.

use std::process::Command;

use anyhow::{Context, Result};

use crate::toolchain::WasmToolchain;
use crate::{guests, release, run};

#[derive(clap::Args)]
pub struct Args {
    /// Skip the from-scratch rebuild that checks the component is reproducible.
    #[arg(long)]
    pub skip_reproducible: bool,
    /// Extra arguments for `cargo test` (after `--`), e.g. a test name filter.
    #[arg(last = true)]
    pub cargo_test_args: Vec<String>,
}

pub fn run(args: &Args) -> Result<()> {
    let toolchain = WasmToolchain::detect()?;
    crate::step(format!("[1/5] {}", toolchain.describe()));

    crate::step("[2/5] guest components and the signed release");
    guests::build(&toolchain, &[])?;
    release::run(
        &release::Args {
            out: None,
            key: None,
        },
        &toolchain,
    )?;

    if args.skip_reproducible {
        crate::step("[3/5] reproducibility check skipped (--skip-reproducible)");
    } else {
        crate::step("[3/5] reproducibility of the plugin component");
        guests::check_reproducible(&toolchain)?;
    }

    crate::step("[4/5] the browser test's npm packages");
    browser_packages()?;

    crate::step("[5/5] cargo test --workspace");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run::checked(
        Command::new(cargo)
            .current_dir(crate::workspace_root())
            .args(["test", "--workspace", "--locked"])
            .args(&args.cargo_test_args),
    )
}

/// Installs `tests/browser/node_modules` from its lock file (`npm ci`) when
/// playwright-core is missing or not the pinned version. Without npm it says
/// so and goes on: the browser test then names what is missing (and fails
/// when `CI` is set; `.ci/run` installs nodejs and chromium).
fn browser_packages() -> Result<()> {
    let dir = crate::workspace_root().join("tests/browser");
    let version = |path: &std::path::Path| -> Option<String> {
        let text = std::fs::read_to_string(path).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        let field = json
            .pointer("/dependencies/playwright-core")
            .or_else(|| json.get("version"))?;
        field.as_str().map(str::to_owned)
    };
    let pinned = version(&dir.join("package.json"))
        .context("tests/browser/package.json pins no playwright-core version")?;
    let installed = version(&dir.join("node_modules/playwright-core/package.json"));
    if installed.as_deref() == Some(pinned.as_str()) {
        println!("    playwright-core {pinned} is installed");
        return Ok(());
    }
    if !run::on_path("npm") {
        println!("    npm is not installed; the browser test will say what it misses");
        return Ok(());
    }
    run::checked(
        Command::new("npm")
            .current_dir(&dir)
            .args(["ci", "--no-audit", "--no-fund"]),
    )
}
