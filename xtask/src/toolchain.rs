//! Choosing a toolchain that can build WebAssembly.
//!
//! In order (see docs/toolchain.md):
//! 1. the active toolchain, when it has std for both wasm targets;
//! 2. the active toolchain after `rustup target add`, when rustup can reach
//!    its servers;
//! 3. Debian's `rustc-web`/`cargo-web` (rustc 1.96 at /usr/bin) with std
//!    built from `rust-web-src` (`-Zbuild-std`), `wasm-ld` from `lld` and
//!    `wasi-libc`, installed with apt-get when missing and allowed.
//!
//! `WASM_TOOLCHAIN=active|debian` forces a path (to test the fallback).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Result, bail};

use crate::run;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Guests that use WASI through the preview1 adapter (the test extension).
    Wasip1,
    /// No system interface at all: the panel's browser bundle, and the
    /// plugin, whose component imports only what its WIT world names.
    Bare,
}

impl Target {
    pub fn triple(self) -> &'static str {
        match self {
            Target::Wasip1 => "wasm32-wasip1",
            Target::Bare => "wasm32-unknown-unknown",
        }
    }

    /// Where cargo writes `<stem>.wasm` when it builds for this target with
    /// `profile` into `target_dir`.
    pub fn artifact(self, target_dir: &Path, profile: &str, stem: &str) -> PathBuf {
        target_dir
            .join(self.triple())
            .join(profile)
            .join(format!("{stem}.wasm"))
    }

    fn env_prefix(self) -> String {
        format!(
            "CARGO_TARGET_{}",
            self.triple().to_uppercase().replace('-', "_")
        )
    }
}

const TARGETS: [Target; 2] = [Target::Wasip1, Target::Bare];

const DEBIAN_PACKAGES: [&str; 5] = ["rustc-web", "cargo-web", "rust-web-src", "lld", "wasi-libc"];
const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_CARGO: &str = "/usr/bin/cargo";
const DEBIAN_STD_SRC: &str = "/usr/lib/rustlib/src/rust/library/Cargo.lock";
const WASI_LIBC: &str = "/usr/lib/wasm32-wasi";

#[derive(Debug, Clone)]
enum Kind {
    Active,
    Debian,
}

#[derive(Debug, Clone)]
pub struct WasmToolchain {
    kind: Kind,
    why: String,
}

impl WasmToolchain {
    /// Finds a usable toolchain, installing targets or packages when needed.
    pub fn detect() -> Result<Self> {
        let forced = std::env::var("WASM_TOOLCHAIN").ok();
        match forced.as_deref() {
            Some("debian") => return Self::debian("WASM_TOOLCHAIN=debian"),
            Some("active") | None => {}
            Some(other) => bail!("WASM_TOOLCHAIN must be `active` or `debian`, not `{other}`"),
        }
        let missing: Vec<Target> = TARGETS
            .into_iter()
            .filter(|t| !active_has_std(*t))
            .collect();
        if missing.is_empty() {
            return Ok(Self {
                kind: Kind::Active,
                why: "the active toolchain has std for wasm32-wasip1 and wasm32-unknown-unknown"
                    .into(),
            });
        }
        if run::on_path("rustup") {
            crate::step(format!(
                "the active toolchain lacks std for {}; trying `rustup target add`",
                names(&missing)
            ));
            let added = missing.iter().all(|t| {
                run::with_timeout(
                    Command::new("rustup").args(["target", "add", t.triple()]),
                    Duration::from_secs(180),
                )
            });
            if added && missing.iter().all(|t| active_has_std(*t)) {
                return Ok(Self {
                    kind: Kind::Active,
                    why: format!("added {} with rustup", names(&missing)),
                });
            }
            println!("    rustup could not add the targets (no network to its servers?)");
        }
        if forced.as_deref() == Some("active") {
            bail!(
                "WASM_TOOLCHAIN=active, but the active toolchain has no std for {}; run `rustup target add {}`",
                names(&missing),
                missing
                    .iter()
                    .map(|t| t.triple())
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        Self::debian("the active toolchain has no wasm std and rustup could not add it")
    }

    /// [`Self::detect`], or print the reason and exit with status 2.
    pub fn detect_or_exit() -> Self {
        Self::detect().unwrap_or_else(|err| {
            eprintln!("error: {err:#}");
            std::process::exit(2);
        })
    }

    fn debian(reason: &str) -> Result<Self> {
        if !debian_ready() {
            install_debian_packages()?;
        }
        let version = run::output(Command::new(DEBIAN_RUSTC).arg("--version")).unwrap_or_default();
        Ok(Self {
            kind: Kind::Debian,
            why: format!("{reason}: using Debian's {version} with -Zbuild-std and wasm-ld"),
        })
    }

    pub fn describe(&self) -> String {
        match self.kind {
            Kind::Active => format!("wasm toolchain: active rustup toolchain ({})", self.why),
            Kind::Debian => format!("wasm toolchain: Debian rustc-web ({})", self.why),
        }
    }

    /// A `cargo build` of `package` for `target` with `profile`, writing to
    /// `target_dir`, with flags that make the output independent of where the
    /// workspace and the registry live (reproducible digests).
    pub fn cargo_build(
        &self,
        target: Target,
        profile: &str,
        package: &str,
        target_dir: &Path,
    ) -> Command {
        let root = crate::workspace_root();
        let mut cmd = match self.kind {
            Kind::Active => Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())),
            Kind::Debian => Command::new(DEBIAN_CARGO),
        };
        cmd.current_dir(root)
            .args([
                "build",
                "--locked",
                "--target",
                target.triple(),
                "--profile",
                profile,
                "--package",
                package,
            ])
            .arg("--target-dir")
            .arg(target_dir);
        let mut rustflags = remap_flags(root);
        let prefix = target.env_prefix();
        if let Kind::Debian = self.kind {
            cmd.arg("-Zbuild-std=std,panic_abort")
                .env("RUSTC_BOOTSTRAP", "1")
                .env("RUSTC", DEBIAN_RUSTC)
                .env(format!("{prefix}_LINKER"), "wasm-ld")
                .env_remove("RUSTUP_TOOLCHAIN")
                .env_remove("RUSTC_WRAPPER");
            rustflags.push("--remap-path-prefix=/usr/lib/rustlib/src/rust=/rustc".to_owned());
            if target == Target::Wasip1 {
                rustflags.extend([
                    "-C".into(),
                    "link-self-contained=no".into(),
                    "-L".into(),
                    format!("native={WASI_LIBC}"),
                ]);
            }
        }
        cmd.env(format!("{prefix}_RUSTFLAGS"), rustflags.join(" "))
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR");
        cmd
    }
}

fn names(targets: &[Target]) -> String {
    targets
        .iter()
        .map(|t| t.triple())
        .collect::<Vec<_>>()
        .join(" and ")
}

fn remap_flags(root: &Path) -> Vec<String> {
    let mut flags = vec![format!("--remap-path-prefix={}=/workspace", root.display())];
    if let Some(home) = cargo_home() {
        flags.push(format!("--remap-path-prefix={}=/cargo", home.display()));
    }
    flags
}

fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
}

fn active_has_std(target: Target) -> bool {
    let Some(sysroot) = run::output(Command::new("rustc").args(["--print", "sysroot"])) else {
        return false;
    };
    let lib = Path::new(&sysroot)
        .join("lib/rustlib")
        .join(target.triple())
        .join("lib");
    std::fs::read_dir(lib).is_ok_and(|entries| {
        entries
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().starts_with("libstd-"))
    })
}

fn debian_ready() -> bool {
    Path::new(DEBIAN_RUSTC).is_file()
        && Path::new(DEBIAN_CARGO).is_file()
        && Path::new(DEBIAN_STD_SRC).is_file()
        && Path::new(WASI_LIBC).join("libc.a").is_file()
        && run::on_path("wasm-ld")
}

fn install_debian_packages() -> Result<()> {
    let command = format!(
        "apt-get update && apt-get install -y --no-install-recommends {}",
        DEBIAN_PACKAGES.join(" ")
    );
    let is_root = run::output(Command::new("id").arg("-u")).as_deref() == Some("0");
    if !is_root || !run::on_path("apt-get") {
        bail!(
            "no toolchain can build WebAssembly here: the active toolchain has no std for the wasm targets, \
             `rustup target add wasm32-wasip1 wasm32-unknown-unknown` did not work, and Debian's packages are \
             missing. Either run `rustup target add wasm32-wasip1 wasm32-unknown-unknown` where rustup has \
             network, or install the Debian packages as root: {command}"
        );
    }
    crate::step(format!(
        "installing Debian's WebAssembly toolchain: {}",
        DEBIAN_PACKAGES.join(" ")
    ));
    run::checked(Command::new("apt-get").args(["update", "-qq"]))?;
    run::checked(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(DEBIAN_PACKAGES)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    if !debian_ready() {
        bail!(
            "installed {} but the toolchain is still incomplete",
            DEBIAN_PACKAGES.join(" ")
        );
    }
    Ok(())
}
