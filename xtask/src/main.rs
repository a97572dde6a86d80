//! `cargo xtask`: the project's automation, in Rust.
//!
//! Run `cargo xtask --help` for the commands. Each command sets up what it
//! needs (the WebAssembly toolchain included) and says what it is doing.

mod chaos;
mod demo;
mod fuzz;
mod guests;
mod layers;
mod new_extension;
mod panel;
mod release;
mod run;
mod test;
mod toolchain;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

const DEMO_ABOUT: &str = "The main job: build the signed release and the servers, \
install the release into a host-sim state in .demo/ (install on first run; on a rerun \
the same digest is kept and a new one is upgraded to), approve it, grant it to the \
project demo-shop, bind its `provider` to an Umami-compatible fake and issue a 24 h \
token for user `demo`. Then run the provider fake and `host-sim serve` on 127.0.0.1 \
and print the console URL with the token, a ready curl line for the API, the MCP \
endpoint and how to send a test page view. Ctrl-C stops both servers.

.demo/ keeps host-sim's state, the provider secret (made once, never printed), the \
provider's websites and page views (provider.json), the token and the servers' logs; \
a rerun continues with them, `rm -rf .demo` starts over.";

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Build, release and test the workspace"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Find (or install) a toolchain that can build WebAssembly and say which.
    Toolchain,
    /// Build the guest components (plugin, test extension) into target/guests.
    Guests {
        /// Only these packages (default: every guest but `http-hello`, the
        /// peer benchmark's wasi:http component, built only when named).
        packages: Vec<String>,
    },
    /// Build the panel's browser bundle into target/guests/panel.
    Panel,
    /// Build the plugin and the panel and write a signed release.
    Release(release::Args),
    /// Check that the plugin component builds to the same bytes from scratch.
    Reproducible,
    /// Check that each checked crate's modules import only modules of lower
    /// layers (the layer tables of ARCHITECTURE.md) and none in a circle.
    Layers,
    /// Run every test: build what tests need, then the whole test suite.
    Test(test::Args),
    /// Faults under load on loopback for a bounded time: two mail-service
    /// nodes on PostgreSQL killed in a loop, database connections cut, the
    /// SMTP relay and the webhook receiver failing; prints the faults, the
    /// answers and the invariant checks, and fails if any check failed.
    Chaos(chaos::Args),
    /// Both services under steady traffic for a bounded time: resident
    /// memory, descriptors, database size and p99 every minute; fails on a
    /// growing trend of memory or descriptors.
    Soak(chaos::Args),
    /// Run the coverage-guided fuzz targets of fuzz/ (cargo-fuzz on the
    /// nightly toolchain, installed if missing), each for a bounded time
    /// after replaying its corpus, and print what each did.
    Fuzz(fuzz::Args),
    /// The main job: build the release, install it into a host-sim state in
    /// .demo/ and serve the console, the extension API and MCP on loopback
    /// with an Umami-compatible provider fake, until Ctrl-C.
    #[command(long_about = DEMO_ABOUT)]
    Demo(demo::Args),
    /// Create a new extension project from the template: a manifest with
    /// one action and one binding, the action on the extension-guest crate,
    /// and its tests.
    NewExtension(new_extension::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Toolchain => toolchain::WasmToolchain::detect().map(|tc| {
            println!("{}", tc.describe());
        }),
        Command::Guests { packages } => {
            guests::build(&toolchain::WasmToolchain::detect_or_exit(), &packages).map(|_| ())
        }
        Command::Panel => panel::build(&toolchain::WasmToolchain::detect_or_exit()).map(|_| ()),
        Command::Release(args) => {
            release::run(&args, &toolchain::WasmToolchain::detect_or_exit()).map(|_| ())
        }
        Command::Reproducible => {
            guests::check_reproducible(&toolchain::WasmToolchain::detect_or_exit())
        }
        Command::Layers => layers::run(),
        Command::Test(args) => test::run(&args),
        Command::Chaos(args) => chaos::chaos(&args),
        Command::Soak(args) => chaos::soak(&args),
        Command::Fuzz(args) => fuzz::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::NewExtension(args) => new_extension::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (the parent of this crate).
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
}

/// `<workspace>/target`, where guest artifacts go whatever CARGO_TARGET_DIR
/// says, so tests find them at one known place.
pub fn target_root() -> PathBuf {
    workspace_root().join("target")
}

/// Prints a numbered step, so long commands show where they are.
pub fn step(message: impl std::fmt::Display) {
    println!("==> {message}");
}

#[cfg(test)]
mod tests {
    /// `cargo xtask` must show cargo's own waits: `--quiet` (or `-q`) on
    /// the alias hides "Blocking waiting for file lock" too.
    #[test]
    fn the_alias_lets_cargo_say_it_waits_for_a_lock() {
        let config =
            std::fs::read_to_string(super::workspace_root().join(".cargo/config.toml")).unwrap();
        let alias = config
            .lines()
            .find_map(|line| line.trim().strip_prefix("xtask = "))
            .expect("the xtask alias is in .cargo/config.toml");
        assert!(alias.contains("--package xtask"), "{alias}");
        for quiet in ["--quiet", "-q"] {
            assert!(
                !alias.split(['"', ' ']).any(|word| word == quiet),
                "the alias has {quiet}: {alias}"
            );
        }
    }
}
