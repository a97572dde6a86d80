//! Guest components: core modules turned into components. The plugin is a
//! bare wasm32-unknown-unknown module (its component imports only its WIT
//! world); the test extension is a wasip1 module adapted with the preview1
//! reactor adapter, so the host's WASI side stays exercised.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::run;
use crate::toolchain::{Target, WasmToolchain};

/// A crate compiled to a guest component.
pub struct Guest {
    pub package: &'static str,
    /// The cdylib's file stem, also the artifact name in target/guests.
    pub artifact: &'static str,
    /// [`Target::Bare`]: componentized as is; [`Target::Wasip1`]: with the
    /// preview1 adapter.
    pub target: Target,
    /// Cargo profile (see the workspace `Cargo.toml`).
    pub profile: &'static str,
    /// A `wasi:http/proxy` component (preview1's proxy adapter instead of
    /// the reactor), built only when named: a benchmark's, not the tests'.
    pub http_proxy: bool,
}

pub const GUESTS: [Guest; 3] = [
    Guest {
        package: "managed-analytics",
        artifact: "managed_analytics",
        target: Target::Bare,
        profile: "plugin",
        http_proxy: false,
    },
    Guest {
        package: "test-extension",
        artifact: "test_extension",
        target: Target::Wasip1,
        profile: "guest",
        http_proxy: false,
    },
    Guest {
        package: "http-hello",
        artifact: "http_hello",
        target: Target::Wasip1,
        profile: "guest",
        http_proxy: true,
    },
];

pub const PLUGIN: &Guest = &GUESTS[0];

/// Where tests and the release look for built components.
pub fn artifact_dir() -> PathBuf {
    crate::target_root().join("guests")
}

/// Builds the selected guests (all when `only` is empty) and writes their
/// components to target/guests. Answers the component paths.
pub fn build(toolchain: &WasmToolchain, only: &[String]) -> Result<Vec<PathBuf>> {
    for name in only {
        if !GUESTS.iter().any(|g| g.package == name) {
            bail!(
                "`{name}` is not a guest; the guests are {}",
                GUESTS.map(|g| g.package).join(", ")
            );
        }
    }
    let selected: Vec<&Guest> = GUESTS
        .iter()
        .filter(|g| {
            if only.is_empty() {
                !g.http_proxy
            } else {
                only.iter().any(|o| o == g.package)
            }
        })
        .collect();
    build_into(
        toolchain,
        &selected,
        &crate::target_root().join("wasm"),
        &artifact_dir(),
    )
}

fn build_into(
    toolchain: &WasmToolchain,
    guests: &[&Guest],
    target_dir: &Path,
    out_dir: &Path,
) -> Result<Vec<PathBuf>> {
    crate::step(format!(
        "building guest components ({}); {}",
        guests
            .iter()
            .map(|g| g.package)
            .collect::<Vec<_>>()
            .join(", "),
        toolchain.describe()
    ));
    for guest in guests {
        run::checked(&mut toolchain.cargo_build(
            guest.target,
            guest.profile,
            guest.package,
            target_dir,
        ))?;
    }
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let mut written = Vec::new();
    for guest in guests {
        let module_path = guest
            .target
            .artifact(target_dir, guest.profile, guest.artifact);
        let module = std::fs::read(&module_path).with_context(|| {
            format!(
                "cargo built no {} (is `{}` a cdylib?)",
                module_path.display(),
                guest.package
            )
        })?;
        let component = componentize(&module, guest.target, guest.http_proxy)
            .with_context(|| format!("cannot turn {} into a component", guest.package))?;
        let out = out_dir.join(format!("{}.wasm", guest.artifact));
        std::fs::write(&out, &component)
            .with_context(|| format!("cannot write {}", out.display()))?;
        println!(
            "    {} -> {} ({} KiB, sha256 {})",
            guest.package,
            out.display(),
            component.len() / 1024,
            extension_release::sha256_hex(&component)
        );
        written.push(out);
    }
    Ok(written)
}

/// Turns a core module (with the component type that wit-bindgen embedded)
/// into a component; a wasip1 module gets the preview1 reactor adapter, or
/// the proxy adapter for a `wasi:http/proxy` component.
pub fn componentize(module: &[u8], target: Target, http_proxy: bool) -> Result<Vec<u8>> {
    use wasi_preview1_component_adapter_provider::{
        WASI_SNAPSHOT_PREVIEW1_PROXY_ADAPTER, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
    };
    let encoder = wit_component::ComponentEncoder::default()
        .module(module)?
        .validate(true);
    let adapter = if http_proxy {
        WASI_SNAPSHOT_PREVIEW1_PROXY_ADAPTER
    } else {
        WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER
    };
    match target {
        Target::Bare => encoder,
        Target::Wasip1 => encoder.adapter("wasi_snapshot_preview1", adapter)?,
    }
    .encode()
}

/// Builds the plugin from scratch in a second target directory and compares
/// its component with the one in target/guests.
pub fn check_reproducible(toolchain: &WasmToolchain) -> Result<()> {
    let first = build(toolchain, &[PLUGIN.package.to_owned()])?;
    let scratch = crate::target_root().join("wasm-reproducible");
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch)
            .with_context(|| format!("cannot clear {}", scratch.display()))?;
    }
    crate::step("rebuilding the plugin from scratch in a second target directory");
    let second = build_into(toolchain, &[PLUGIN], &scratch, &scratch.join("guests"))?;
    let a = extension_release::sha256_hex(&std::fs::read(&first[0])?);
    let b = extension_release::sha256_hex(&std::fs::read(&second[0])?);
    if a != b {
        bail!("the plugin component is not reproducible: {a} (target/wasm) vs {b} (from scratch)");
    }
    println!("    reproducible: both builds give sha256 {a}");
    Ok(())
}
