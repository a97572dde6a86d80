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
const FILES: [(&str, &str); 9] = [
    ("Cargo.toml", include_str!("../template/Cargo.toml")),
    ("manifest.toml", include_str!("../template/manifest.toml")),
    (
        ".cargo/config.toml",
        include_str!("../template/cargo-config.toml"),
    ),
    ("src/lib.rs", include_str!("../template/src/lib.rs")),
    (
        "tests/common/mod.rs",
        include_str!("../template/tests/common/mod.rs"),
    ),
    ("tests/greet.rs", include_str!("../template/tests/greet.rs")),
    (
        "dev-upstream/salutation.json",
        include_str!("../template/dev-upstream/salutation.json"),
    ),
    ("README.md", include_str!("../template/README.md")),
    (".gitignore", include_str!("../template/gitignore")),
];

/// Crates the template depends on, which a project cannot be named after.
const TAKEN: [&str; 5] = [
    "extension-guest",
    "extension-guest-macros",
    "host-sim",
    "serde",
    "serde_json",
];

/// The values the template's `{{placeholders}}` take.
struct Names {
    /// The extension id and package name.
    name: String,
    /// The Rust crate name (`-` → `_`).
    krate: String,
    /// The first word of action names and MCP tools (`-` → `_`).
    action_prefix: String,
    /// The guest crate in this checkout, relative to the project.
    guest_path: String,
    /// host-sim in this checkout (the tests' in-process test host),
    /// relative to the project.
    host_sim_path: String,
    /// The target directory every extension project of this checkout
    /// shares (`target/extensions`), relative to the project.
    shared_target: String,
}

/// The index of manifest.toml in [`FILES`].
fn manifest_index() -> usize {
    FILES
        .iter()
        .position(|(path, _)| *path == "manifest.toml")
        .expect("the template has a manifest.toml")
}

/// Refuses a NAME that is not an extension id or that the template's
/// dependencies already use.
fn check_name(name: &str) -> Result<()> {
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
    Ok(())
}

impl Names {
    /// The names for the project `name` (checked by [`check_name`])
    /// generated in `dir` (which exists).
    fn new(name: &str, dir: &Path) -> Result<Self> {
        let dir = dir
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", dir.display()))?;
        let root = crate::workspace_root();
        let root = root
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", root.display()))?;
        // Relative, so that the project and the checkout can move together.
        let in_checkout = |path: &str| -> Result<String> {
            let absolute = root.join(path);
            if !path.starts_with("target") && !absolute.is_dir() {
                bail!("{path} is missing at {}", absolute.display());
            }
            let relative = pathdiff::diff_paths(&absolute, &dir).unwrap_or(absolute);
            Ok(relative.to_string_lossy().into_owned())
        };
        let underscored = name.replace('-', "_");
        Ok(Self {
            name: name.to_owned(),
            krate: underscored.clone(),
            action_prefix: underscored,
            guest_path: in_checkout("guest")?,
            host_sim_path: in_checkout("host-sim")?,
            shared_target: in_checkout("target/extensions")?,
        })
    }

    fn render(&self, template: &str) -> String {
        template
            .replace("{{name}}", &self.name)
            .replace("{{crate}}", &self.krate)
            .replace("{{action_prefix}}", &self.action_prefix)
            .replace("{{guest_path}}", &self.guest_path)
            .replace("{{host_sim_path}}", &self.host_sim_path)
            .replace("{{shared_target}}", &self.shared_target)
    }
}

pub fn run(args: &Args) -> Result<()> {
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
    check_name(&args.name)?;
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let names = Names::new(&args.name, &dir)?;
    let manifest = names.render(FILES[manifest_index()].1);
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
        "    builds go to {} (shared by this checkout's extensions)",
        crate::workspace_root().join("target/extensions").display()
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
