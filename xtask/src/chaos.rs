//! `cargo xtask chaos` and `cargo xtask soak`: load runs of a bounded time,
//! on loopback (issue 36). Each runs test binaries of the ordinary suite
//! for the minutes asked (the suite runs them briefly): `chaos` the ones
//! that drive traffic, inject faults and check invariants
//! (`mail-service/tests/chaos.rs`, `host-sim/tests/chaos.rs`), `soak` the
//! ones that sample memory, descriptors, disk and p99 every minute
//! (`mail-service/tests/soak.rs`, `tests/soak.rs`). Each prints its table.

use std::process::Command;

use anyhow::Result;

use crate::run;

#[derive(clap::Args)]
pub struct Args {
    /// How long the traffic lasts (settling and checks come after it).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub minutes: u64,
}

pub fn chaos(args: &Args) -> Result<()> {
    crate::step(format!(
        "chaos for {} minute(s): mail-service's two nodes on PostgreSQL under faults, then host-sim under a storm of hostile guests",
        args.minutes
    ));
    tests("chaos", "CHAOS_SECS", args.minutes)
}

pub fn soak(args: &Args) -> Result<()> {
    crate::step(format!(
        "soak for {} minute(s) each: mail-service, then host-sim, a sample a minute",
        args.minutes
    ));
    tests("soak", "SOAK_SECS", args.minutes)
}

/// Runs every test binary named `name` with `variable` set to the length.
fn tests(name: &str, variable: &str, minutes: u64) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The same package selection as `cargo xtask test`, so nothing is
    // rebuilt for another feature set.
    run::checked(
        Command::new(cargo)
            .current_dir(crate::workspace_root())
            .env(variable, (minutes * 60).to_string())
            .args(["test", "--workspace", "--locked", "--test", name, "--"])
            .args(["--nocapture", "--test-threads", "1"]),
    )
}
