//! `cargo xtask test`: the one command that runs every test.

use std::process::Command;

use anyhow::Result;

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
    crate::step(format!("[1/4] {}", toolchain.describe()));

    crate::step("[2/4] guest components and the signed release");
    guests::build(&toolchain, &[])?;
    release::run(
        &release::Args {
            out: None,
            key: None,
        },
        &toolchain,
    )?;

    if args.skip_reproducible {
        crate::step("[3/4] reproducibility check skipped (--skip-reproducible)");
    } else {
        crate::step("[3/4] reproducibility of the plugin component");
        guests::check_reproducible(&toolchain)?;
    }

    crate::step("[4/4] cargo test --workspace");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run::checked(
        Command::new(cargo)
            .current_dir(crate::workspace_root())
            .args(["test", "--workspace", "--locked"])
            .args(&args.cargo_test_args),
    )
}
