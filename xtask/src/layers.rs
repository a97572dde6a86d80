//! `cargo xtask layers`: the modules of each crate of [`CRATES`] form
//! layers, and a module may use only modules of layers below its own. The
//! layers are the tables ARCHITECTURE.md shows (`table`), so the reader and
//! the check read one list. For each crate this reads every file of its
//! `src`, follows each path that starts at the crate root (`crate::…`, and
//! `super::…` chains that climb to it, with `use crate::{a, b}` groups:
//! `paths`), and fails on one that names a module of the same or a higher
//! layer, or a root item that is not a module (the root only re-exports;
//! naming the defining module keeps the rule checkable). A file of a module
//! that is in no layer fails too, so a new module has to be placed, and so
//! does a module of a table that the crate does not have. `main.rs` is a
//! crate of its own (the CLI) and uses the library's public API only; the
//! modules it declares (`mod cli;` → `cli/…`) belong to that crate, not to
//! a layer, and a module declared by both roots fails. No modules may import
//! one another in a circle, within a layer too (`cycles`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

mod cycles;
mod paths;
mod table;

use paths::{Module, declared_modules, references};
pub use table::Layers;

/// The crates whose modules are checked, with their `src` from the
/// workspace root; each has its layer table in ARCHITECTURE.md.
pub const CRATES: &[(&str, &str)] = &[
    ("host-sim", "host-sim/src"),
    ("mail-service", "mail-service/src"),
];

/// Files that are crate roots, not modules of a layer.
const ROOTS: &[&str] = &["lib.rs", "main.rs"];

/// An import that breaks the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The file, from the workspace root.
    pub file: PathBuf,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.message)
    }
}

/// Checks every crate of [`CRATES`] against its table and prints what it
/// found.
pub fn run() -> Result<()> {
    let root = crate::workspace_root();
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md"))
        .context("cannot read ARCHITECTURE.md, which holds the layer tables")?;
    let mut failed = 0;
    for (name, src) in CRATES {
        let layers = Layers::parse(&architecture, name)?;
        let files = read_tree(&root.join(src))?;
        let mut violations = unknown_modules(&layers, src.as_ref(), &files);
        violations.extend(check(&layers, src.as_ref(), &files));
        if violations.is_empty() {
            println!(
                "    {name}: {} files, every import runs down the layers ({}), no circles",
                files.len(),
                layers
                    .layers
                    .iter()
                    .map(|layer| layer.name.as_str())
                    .collect::<Vec<_>>()
                    .join(" → ")
            );
        }
        for violation in &violations {
            eprintln!("{violation}");
        }
        failed += violations.len();
    }
    if failed > 0 {
        bail!(
            "{failed} import(s) run against their crate's layers (listed above); move the \
             code down or the import up (the layer tables are in ARCHITECTURE.md)"
        );
    }
    Ok(())
}

/// Every `.rs` file under `src`, as (path relative to `src`, text).
pub fn read_tree(src: &Path) -> Result<Vec<(PathBuf, String)>> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                let relative = path.strip_prefix(src).unwrap_or(&path).to_path_buf();
                files.push((relative, text));
            }
        }
    }
    files.sort();
    Ok(files)
}

fn shown(module: &[String]) -> String {
    module.join("::")
}

/// The violations in `files` (paths relative to `src`, the crate's source
/// directory from the workspace root).
pub fn check(layers: &Layers, src: &Path, files: &[(PathBuf, String)]) -> Vec<Violation> {
    let mut violations = Vec::new();
    let declared_by = |root: &str| {
        files
            .iter()
            .find(|(file, _)| file == Path::new(root))
            .map(|(_, text)| declared_modules(text))
            .unwrap_or_default()
    };
    let library = declared_by("lib.rs");
    let binary = declared_by("main.rs");
    let mut library_files = Vec::new();
    for entry in files {
        let (file, text) = entry;
        if ROOTS.iter().any(|root| file == Path::new(root)) {
            continue;
        }
        let module_path = module_path(file);
        let top = module_path[0].clone();
        let at = |line: usize, message: String| Violation {
            file: src.join(file),
            line,
            message,
        };
        if binary.contains(&top) {
            if library.contains(&top) {
                violations.push(at(
                    1,
                    format!(
                        "module `{top}` is declared by both lib.rs and main.rs; \
                         a CLI module belongs to main.rs only"
                    ),
                ));
            }
            // A module of the CLI crate: it reaches the library by its
            // public API (`host_sim::…`), and `crate::` names the CLI.
            continue;
        }
        library_files.push(entry);
        let Some((own_layer, own)) = layers.place(&module_path) else {
            violations.push(at(
                1,
                format!(
                    "module `{}` is in no layer; add it to the layer table of {} in \
                     ARCHITECTURE.md",
                    shown(&module_path),
                    layers.crate_name
                ),
            ));
            continue;
        };
        let mut found: Vec<(usize, String)> = Vec::new();
        for (line, _, target) in references(&module_path, text) {
            let Some(first) = target.first() else {
                continue;
            };
            let message = match layers.place(&target) {
                Some((_, module)) if module == own => continue,
                Some((layer, _)) if layer < own_layer => continue,
                Some((layer, module)) => format!(
                    "`{}` ({}) uses `{}` ({}), which does not stand below it",
                    shown(own),
                    layers.name(own_layer),
                    shown(module),
                    layers.name(layer)
                ),
                None => format!(
                    "`{}` uses `crate::{first}`, which is not a module of a layer; \
                     name the module that defines it",
                    shown(own)
                ),
            };
            if !found.contains(&(line, message.clone())) {
                found.push((line, message));
            }
        }
        violations.extend(found.into_iter().map(|(line, message)| at(line, message)));
    }
    violations.extend(cycles::check(src, &library_files));
    violations
}

/// A module of the table that no file of the crate is: the table says
/// more than the code (a module removed or renamed).
pub fn unknown_modules(layers: &Layers, src: &Path, files: &[(PathBuf, String)]) -> Vec<Violation> {
    let modules: Vec<Module> = files.iter().map(|(file, _)| module_path(file)).collect();
    layers
        .layers
        .iter()
        .flat_map(|layer| layer.modules.iter().map(move |module| (layer, module)))
        .filter(|(_, module)| !modules.iter().any(|m| m.starts_with(module)))
        .map(|(layer, module)| Violation {
            file: PathBuf::from("ARCHITECTURE.md"),
            line: layer.line,
            message: format!(
                "the layer table of {} names `{}`, which is no module of {}",
                layers.crate_name,
                shown(module),
                src.display()
            ),
        })
        .collect()
}

/// The module path of a file: `state/access.rs` → [state, access],
/// `state/mod.rs` → [state], `error.rs` → [error].
fn module_path(file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" {
            parts.push(stem.to_string());
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, text: &str) -> (PathBuf, String) {
        (PathBuf::from(path), text.to_string())
    }

    /// host-sim's layers as ARCHITECTURE.md shows them, for planted trees
    /// (the real table is read by the tests of the real trees).
    pub(super) fn host_sim() -> Layers {
        let table = "## host-sim inside\n\n| layer | modules | what it is |\n|---|---|---|\n\
            | 1. leaf types | `bindings`, `error`, `limits`, `metrics`, `secret`, `spec` | t |\n\
            | 2. operator state | `state/` | t |\n| 3. capabilities | `capabilities/` | t |\n\
            | 4. sandbox | `sandbox/` | t |\n\
            | 5. pool, verification, tracking-domain checks | `pool/`, `verify`, `tracking/` | t |\n\
            | 6. host facade | `host/` | t |\n| 7. surfaces | `serve/`, `testing`, `dev` | t |\n";
        Layers::parse(table, "host-sim").unwrap()
    }

    fn mail_service() -> Layers {
        let table = "## mail-service\n\n| layer | modules | what it is |\n|---|---|---|\n\
            | 1. leaf types | `clock`, `metrics` | t |\n| 2. error | `error` | t |\n\
            | 3. resources | `model/` | t |\n| 4. storage, feedback mail | `store/`, `feedback/` | t |\n\
            | 5. service | `service/` | t |\n| 6. surfaces | `http/`, `feedback::listener` | t |\n";
        Layers::parse(table, "mail-service").unwrap()
    }

    fn messages(files: &[(PathBuf, String)]) -> Vec<String> {
        check(&host_sim(), Path::new("host-sim/src"), files)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn mail_messages(files: &[(PathBuf, String)]) -> Vec<String> {
        check(&mail_service(), Path::new("mail-service/src"), files)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_planted_upward_import_fails_with_file_and_line() {
        let found = messages(&[file(
            "state/access.rs",
            "use crate::secret::Secret;\n\nuse crate::host::Host;\n",
        )]);
        assert_eq!(
            found,
            [
                "host-sim/src/state/access.rs:3: `state` (operator state) uses `host` \
              (host facade), which does not stand below it"
            ]
        );
    }

    #[test]
    fn groups_inline_paths_and_super_chains_are_followed() {
        let found = messages(&[
            file(
                "capabilities/http/mod.rs",
                "use crate::{secret::Secret, pool::{Pre, PreKey}};\n\
                 fn f() { crate::sandbox::engine(); }\n",
            ),
            file("state/bindings.rs", "use super::super::serve::x;\n"),
            file("pool/mod.rs", "use crate::verify::verify;\n"),
        ]);
        assert_eq!(found.len(), 4, "{found:#?}");
        assert!(found[0].contains("capabilities/http/mod.rs:1") && found[0].contains("`pool`"));
        assert!(found[1].contains("mod.rs:2") && found[1].contains("`sandbox`"));
        assert!(found[2].contains("state/bindings.rs:1") && found[2].contains("`serve`"));
        assert!(
            found[3].contains("pool/mod.rs:1") && found[3].contains("`verify`"),
            "the same layer is not below"
        );
    }

    #[test]
    fn downward_own_and_inline_module_paths_pass() {
        let found = messages(&[
            file(
                "host/invoke.rs",
                "use super::Host;\nuse crate::state::State;\nuse crate::capabilities::{self, checks};\n\
                 pub(crate) fn f() {}\n",
            ),
            file(
                "state/mod.rs",
                "mod tests {\n    use super::*;\n    use super::super::secret::Secret;\n}\n\
                 macro_rules! m { () => { $crate::host::Host } }\n",
            ),
            file("lib.rs", "pub use host::Host;\n"),
        ]);
        assert!(found.is_empty(), "{found:#?}");
    }

    #[test]
    fn comments_and_literals_are_not_imports() {
        let found = messages(&[file(
            "state/mod.rs",
            "// use crate::host::Host;\n/* crate::serve /* nested */ crate::pool */\n\
             const A: &str = \"crate::host::x\";\nconst B: &str = r#\"crate::serve \"\"#;\n\
             const C: char = '\"';\nfn f<'a>(x: &'a str) -> &'a str { x }\n\
             use crate::secret::Secret;\n",
        )]);
        assert!(found.is_empty(), "{found:#?}");
        let after_literals = messages(&[file(
            "state/mod.rs",
            "const C: char = '\"';\nconst D: &str = \"}\";\nuse crate::host::Host;\n",
        )]);
        assert_eq!(after_literals.len(), 1, "{after_literals:#?}");
        assert!(after_literals[0].contains("mod.rs:3"));
    }

    #[test]
    fn a_module_in_no_layer_and_a_root_item_fail() {
        let found = messages(&[
            file("cache.rs", ""),
            file("state/mod.rs", "use crate::Host;\n"),
        ]);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found[0].contains("`cache` is in no layer"));
        assert!(found[1].contains("`crate::Host`, which is not a module"));
    }

    #[test]
    fn modules_of_the_cli_crate_are_in_no_layer_and_not_in_the_library() {
        let found = messages(&[
            file("main.rs", "mod cli;\nuse host_sim::Host;\n"),
            file("lib.rs", "pub mod state;\n"),
            file("cli/mod.rs", "pub(crate) mod tracking;\n"),
            file(
                "cli/tracking.rs",
                "use crate::cli::x;\nuse crate::CliError;\n",
            ),
            file("state/mod.rs", ""),
        ]);
        assert!(found.is_empty(), "{found:#?}");
        let both = messages(&[
            file("main.rs", "mod cli;\n"),
            file("lib.rs", "mod cli;\n"),
            file("cli/mod.rs", ""),
        ]);
        assert_eq!(both.len(), 1, "{both:#?}");
        assert!(both[0].contains("declared by both lib.rs and main.rs"));
        let undeclared = messages(&[file("main.rs", ""), file("cli/mod.rs", "")]);
        assert!(
            undeclared[0].contains("`cli` is in no layer"),
            "{undeclared:#?}"
        );
    }

    #[test]
    fn a_planted_upward_import_in_mail_service_fails_a_module_inside_another_too() {
        let found = mail_messages(&[
            file(
                "model/email.rs",
                "use crate::error::Error;\nuse crate::service::MailService;\n",
            ),
            file("feedback/mod.rs", "pub mod listener;\npub mod verp;\n"),
            file(
                "feedback/verp.rs",
                "use crate::model::X;\n\nuse super::listener::Limits;\n",
            ),
            file(
                "feedback/listener.rs",
                "use crate::service::MailService;\nuse super::verp::Key;\n",
            ),
            file(
                "error.rs",
                "pub enum Error { S(crate::model::email::EmailStatus) }\n",
            ),
        ]);
        assert_eq!(
            found,
            [
                "mail-service/src/model/email.rs:2: `model` (resources) uses `service` (service), \
                 which does not stand below it",
                "mail-service/src/feedback/verp.rs:3: `feedback` (storage, feedback mail) uses \
                 `feedback::listener` (surfaces), which does not stand below it",
                "mail-service/src/error.rs:1: `error` (error) uses `model` (resources), which \
                 does not stand below it",
                "mail-service/src/error.rs:1: `error` and `model::email` import each other (back \
                 at mail-service/src/model/email.rs:1); move what both need into one of them, or \
                 into a module both use",
                "mail-service/src/feedback/listener.rs:2: `feedback::listener` and `feedback::verp` \
                 import each other (back at mail-service/src/feedback/verp.rs:3); move what both \
                 need into one of them, or into a module both use",
            ]
        );
    }

    #[test]
    fn a_planted_circle_inside_mail_service_s_http_fails() {
        let found = mail_messages(&[
            file("http/mod.rs", "mod handlers;\nmod openapi;\n"),
            file(
                "http/handlers.rs",
                "fn doc() { super::openapi::ApiDoc::openapi() }\n",
            ),
            file("http/openapi.rs", "use super::{handlers, list::List};\n"),
            file("http/list.rs", "use crate::service::Page;\n"),
        ]);
        assert_eq!(
            found,
            [
                "mail-service/src/http/handlers.rs:1: `http::handlers` and `http::openapi` import \
                 each other (back at mail-service/src/http/openapi.rs:1); move what both need into \
                 one of them, or into a module both use"
            ]
        );
    }

    #[test]
    fn a_module_of_the_table_that_the_crate_lacks_fails() {
        let files = [file("clock.rs", ""), file("model/mod.rs", "")];
        let found: Vec<String> =
            unknown_modules(&mail_service(), Path::new("mail-service/src"), &files)
                .iter()
                .map(ToString::to_string)
                .collect();
        assert_eq!(found.len(), 7, "{found:#?}");
        assert_eq!(
            found[0],
            "ARCHITECTURE.md:5: the layer table of mail-service names `metrics`, which is no \
             module of mail-service/src"
        );
    }

    /// Each crate of [`CRATES`] as it is, against its table in ARCHITECTURE.md.
    #[test]
    fn every_checked_tree_keeps_the_layers_architecture_md_shows() {
        let root = crate::workspace_root();
        let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
        for (name, src) in CRATES {
            let layers = Layers::parse(&architecture, name).unwrap();
            let files = read_tree(&root.join(src)).unwrap();
            assert!(files.len() > 20, "read the tree of {name}");
            let mut violations = unknown_modules(&layers, src.as_ref(), &files);
            violations.extend(check(&layers, src.as_ref(), &files));
            assert!(violations.is_empty(), "{name}: {violations:#?}");
        }
    }
}
