//! `cargo xtask test`: the one command that runs every test.

use std::process::Command;

use anyhow::{Context, Result};

use crate::toolchain::WasmToolchain;
use crate::{guests, layers, release, run};

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
    crate::step("[1/8] module layers of host-sim and mail-service");
    layers::run()?;

    let toolchain = WasmToolchain::detect()?;
    crate::step(format!("[2/8] {}", toolchain.describe()));

    crate::step("[3/8] guest components and the signed release");
    guests::build(&toolchain, &[])?;
    release::run(
        &release::Args {
            out: None,
            key: None,
        },
        &toolchain,
    )?;

    if args.skip_reproducible {
        crate::step("[4/8] reproducibility check skipped (--skip-reproducible)");
    } else {
        crate::step("[4/8] reproducibility of the plugin component");
        guests::check_reproducible(&toolchain)?;
    }

    crate::step("[5/8] npm packages of the browser and SDK tests");
    for (dir, packages) in NPM_TESTS {
        npm_packages(dir, packages)?;
    }

    crate::step("[6/8] the Python packages of the tests (dkimpy, Resend's SDK, the MCP SDK)");
    for (venv, requirements, what) in PYTHON_TESTS {
        python_venv(venv, requirements, what)?;
    }

    crate::step("[7/8] cargo-component for the extension template's test");
    cargo_component()?;

    crate::step("[8/8] cargo test --workspace");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run::checked(
        Command::new(cargo)
            .current_dir(crate::workspace_root())
            .args(["test", "--workspace", "--locked"])
            .args(&args.cargo_test_args),
    )
}

/// The cargo-component the docs pin.
pub const CARGO_COMPONENT_VERSION: &str = "0.21.1";

/// Installs the pinned cargo-component unless it is already installed, and
/// makes the folder it looks for in Debian's rustc-web sysroot (it refuses
/// to build for a target the sysroot has no folder for; the offline recipe
/// builds std from source, so the folder stays empty).
fn cargo_component() -> Result<()> {
    let installed = run::output(Command::new("cargo-component").arg("--version"));
    let wanted = format!("cargo-component {CARGO_COMPONENT_VERSION}");
    if installed.as_deref().is_some_and(|v| v.starts_with(&wanted)) {
        println!("    {wanted} is installed");
    } else {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        run::checked(Command::new(cargo).args([
            "install",
            "cargo-component",
            "--version",
            CARGO_COMPONENT_VERSION,
            "--locked",
            // Only the template's test runs it, on one small component: an
            // unoptimised build installs in about a third of the CPU time
            // (4 instead of 12 CPU-minutes here) and runs fast enough.
            "--debug",
        ]))?;
    }
    let debian_sysroot = std::path::Path::new("/usr/lib/rustlib");
    let folder = debian_sysroot.join("wasm32-wasip1/lib");
    if debian_sysroot.is_dir() && !folder.is_dir() {
        match std::fs::create_dir_all(&folder) {
            Ok(()) => println!("    created {} for cargo-component", folder.display()),
            Err(e) => println!(
                "    cannot create {} ({e}); the offline build in the template's test will say so",
                folder.display()
            ),
        }
    }
    Ok(())
}

/// The Python venvs of the tests (mail-service's, and the MCP SDK of
/// `tests/mcp_oauth.rs`): the venv under `target/`, its pinned
/// requirements, and what it holds.
const PYTHON_TESTS: &[(&str, &str, &str)] = &[
    (
        "dkim-venv",
        "mail-service/tests/dkim/requirements.txt",
        "dkimpy (the DKIM verifier)",
    ),
    (
        "resend-python-venv",
        "mail-service/tests/sdk_python/requirements.txt",
        "Resend's Python SDK",
    ),
    (
        "mcp-python-venv",
        "tests/mcp_oauth/requirements.txt",
        "the official MCP Python SDK",
    ),
];

/// Installs `requirements` into `target/<venv>` unless that venv already
/// satisfies them. Without python3 it says so and goes on: the test then
/// names what is missing (and fails when `CI` is set; `.ci/run` installs
/// python3 and python3-venv).
fn python_venv(venv: &str, requirements: &str, what: &str) -> Result<()> {
    let venv = crate::target_root().join(venv);
    let python = venv.join("bin").join("python");
    let requirements = crate::workspace_root().join(requirements);
    let wanted = std::fs::read_to_string(&requirements)
        .with_context(|| format!("reading {}", requirements.display()))?;
    let stamp = venv.join("requirements.installed");
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        println!("    {what} is installed in {}", venv.display());
        return Ok(());
    }
    if !run::on_path("python3") {
        println!("    python3 is not installed; the test that needs {what} will say so");
        return Ok(());
    }
    run::checked(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    run::checked(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements),
    )?;
    std::fs::write(&stamp, wanted).with_context(|| format!("writing {}", stamp.display()))?;
    Ok(())
}

/// Test directories with a locked npm install, and the packages whose pinned
/// versions say whether the install is current.
const NPM_TESTS: &[(&str, &[&str])] = &[
    // The console in chromium, and its accessibility audit (tests/browser.rs).
    ("tests/browser", &["playwright-core", "axe-core"]),
    // Resend's Node SDK against mail-service (mail-service/tests/sdk.rs).
    ("mail-service/tests/sdk", &["resend"]),
];

/// Installs `<dir>/node_modules` from its lock file (`npm ci`) when one of
/// `packages` is missing or not the pinned version. Without npm it says so
/// and goes on: the tests then name what is missing (and fail when `CI` is
/// set; `.ci/run` installs nodejs).
fn npm_packages(dir: &str, packages: &[&str]) -> Result<()> {
    let dir = crate::workspace_root().join(dir);
    let version = |path: &std::path::Path, package: &str| -> Option<String> {
        let text = std::fs::read_to_string(path).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        let field = json
            .get("dependencies")
            .and_then(|d| d.get(package))
            .or_else(|| json.get("version"))?;
        field.as_str().map(str::to_owned)
    };
    let mut stale = Vec::new();
    for package in packages {
        let pinned = version(&dir.join("package.json"), package)
            .with_context(|| format!("{}/package.json pins no {package} version", dir.display()))?;
        let installed = version(
            &dir.join("node_modules").join(package).join("package.json"),
            package,
        );
        if installed.as_deref() == Some(pinned.as_str()) {
            println!("    {package} {pinned} is installed in {}", dir.display());
        } else {
            stale.push(*package);
        }
    }
    if stale.is_empty() {
        return Ok(());
    }
    let package = stale.join(", ");
    if !run::on_path("npm") {
        println!("    npm is not installed; the tests that need {package} will say so");
        return Ok(());
    }
    run::checked(
        Command::new("npm")
            .current_dir(&dir)
            .args(["ci", "--no-audit", "--no-fund"]),
    )
}
