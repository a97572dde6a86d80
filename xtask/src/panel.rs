//! The panel's browser bundle: the Leptos app compiled to
//! wasm32-unknown-unknown and bound with wasm-bindgen (`--target web`).

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::run;
use crate::toolchain::{Target, WasmToolchain};

/// Static files of the panel crate copied next to the generated bindings.
const STATIC_FILES: [&str; 2] = ["index.html", "style.css"];

pub fn bundle_dir() -> PathBuf {
    crate::target_root().join("guests").join("panel")
}

/// Builds the bundle into target/guests/panel: index.html, style.css,
/// panel.js and panel_bg.wasm.
pub fn build(toolchain: &WasmToolchain) -> Result<PathBuf> {
    crate::step(format!(
        "building the panel bundle; {}",
        toolchain.describe()
    ));
    let target_dir = crate::target_root().join("wasm");
    run::checked(&mut toolchain.cargo_build(Target::Bare, "guest", "panel", &target_dir))?;
    let wasm = Target::Bare.artifact(&target_dir, "guest", "panel");
    let out = bundle_dir();
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("cannot clear {}", out.display()))?;
    }
    std::fs::create_dir_all(&out)?;
    wasm_bindgen_cli_support::Bindgen::new()
        .input_path(&wasm)
        .web(true)?
        .typescript(false)
        // index.html calls `init()` without arguments: the bindings must
        // default to `new URL('panel_bg.wasm', import.meta.url)` as the CLI's
        // do (the library omits that default unless told not to).
        .omit_default_module_path(false)
        // The guest profile keeps symbol names (wasm-bindgen needs the
        // `target_features` section that a full strip would drop); the
        // shipped bundle does not need them.
        .remove_name_section(true)
        .remove_producers_section(true)
        .out_name("panel")
        .generate(&out)
        .with_context(|| format!("wasm-bindgen failed on {}", wasm.display()))?;
    let source = crate::workspace_root().join("panel");
    for file in STATIC_FILES {
        std::fs::copy(source.join(file), out.join(file))
            .with_context(|| format!("cannot copy panel/{file}"))?;
    }
    println!("    panel bundle -> {}", out.display());
    Ok(out)
}
