//! `cargo xtask new-extension NAME [--dir D]`: a new extension project from
//! the template in `xtask/template/`: a manifest with one action and one
//! binding, the action on the `extension-guest` crate, and its tests.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use extension_release::Manifest;

#[derive(clap::Args)]
pub struct Args {
    /// The extension id: 1 to 63 characters of a-z, 0-9 and `-`, starting
    /// with a letter (also the crate's name).
    pub name: String,
    /// Where to create the project (default: ./NAME). It must not exist or
    /// be empty.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// The template's files: path in the project, contents.
const FILES: [(&str, &str); 7] = [
    ("Cargo.toml", include_str!("../template/Cargo.toml")),
    ("manifest.toml", include_str!("../template/manifest.toml")),
    ("src/lib.rs", include_str!("../template/src/lib.rs")),
    ("tests/greet.rs", include_str!("../template/tests/greet.rs")),
    (
        "dev-upstream/salutation.json",
        include_str!("../template/dev-upstream/salutation.json"),
    ),
    ("README.md", include_str!("../template/README.md")),
    (".gitignore", include_str!("../template/gitignore")),
];

/// Crates the template depends on, which a project cannot be named after.
const TAKEN: [&str; 5] = ["extension-guest", "host-sim", "serde", "serde_json", "toml"];

/// The values the template's `{{placeholders}}` take.
struct Names {
    /// The extension id and package name.
    name: String,
    /// The Rust crate name (`-` → `_`).
    krate: String,
    /// The first word of action names and MCP tools (`-` → `_`).
    action_prefix: String,
    /// The guest crate in this checkout.
    guest_path: String,
    /// host-sim in this checkout (the tests' in-process test host).
    host_sim_path: String,
}

impl Names {
    fn new(name: &str) -> Result<Self> {
        let mut chars = name.chars();
        let valid = matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
            && name.len() <= 63
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !name.ends_with('-');
        if !valid {
            bail!(
                "NAME `{name}`: must be 1 to 63 characters of a-z, 0-9 and `-`, starting with a letter and not ending with `-`"
            );
        }
        if TAKEN.contains(&name) {
            bail!("NAME `{name}`: the template depends on a crate of that name; choose another");
        }
        let guest = crate::workspace_root().join("guest");
        let guest = guest
            .canonicalize()
            .with_context(|| format!("the guest crate is missing at {}", guest.display()))?;
        let host_sim = crate::workspace_root().join("host-sim");
        let host_sim = host_sim
            .canonicalize()
            .with_context(|| format!("host-sim is missing at {}", host_sim.display()))?;
        let underscored = name.replace('-', "_");
        Ok(Self {
            name: name.to_owned(),
            krate: underscored.clone(),
            action_prefix: underscored,
            guest_path: guest.to_string_lossy().into_owned(),
            host_sim_path: host_sim.to_string_lossy().into_owned(),
        })
    }

    fn render(&self, template: &str) -> String {
        template
            .replace("{{name}}", &self.name)
            .replace("{{crate}}", &self.krate)
            .replace("{{action_prefix}}", &self.action_prefix)
            .replace("{{guest_path}}", &self.guest_path)
            .replace("{{host_sim_path}}", &self.host_sim_path)
    }
}

pub fn run(args: &Args) -> Result<()> {
    let names = Names::new(&args.name)?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
        bail!(
            "{} exists and is not empty; choose another --dir",
            dir.display()
        );
    }
    let manifest = names.render(FILES[1].1);
    Manifest::from_toml(&manifest).context("the template's manifest.toml (a bug in xtask)")?;

    crate::step(format!(
        "creating extension `{}` in {}",
        names.name,
        dir.display()
    ));
    for (path, template) in FILES {
        write(&dir.join(path), &names.render(template))?;
    }
    // The versions this workspace builds and tests with; cargo drops what
    // the project does not use on its first build.
    let lock = crate::workspace_root().join("Cargo.lock");
    std::fs::copy(&lock, dir.join("Cargo.lock"))
        .with_context(|| format!("cannot copy {}", lock.display()))?;
    println!(
        "    {}: the action {}.greet, the binding `upstream`, the collection `greetings`",
        dir.join("manifest.toml").display(),
        names.action_prefix
    );
    println!(
        "    next: cd {} && cargo component build --release && cargo test",
        dir.display()
    );
    println!(
        "    then: see {}",
        crate::workspace_root()
            .join("docs/first-extension.md")
            .display()
    );
    Ok(())
}

fn write(path: &Path, contents: &str) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(path, contents).with_context(|| format!("cannot write {}", path.display()))
}
