//! `cargo xtask layers`: host-sim's modules form layers, and a module may
//! use only modules of layers below its own (see ARCHITECTURE.md, "host-sim
//! inside"). This check reads every file of `host-sim/src`, follows each
//! path that starts at the crate root (`crate::…`, and `super::…` chains
//! that climb to it, with `use crate::{a, b}` groups), and fails on one
//! that names a module of the same or a higher layer, or a root item that
//! is not a module (the root only re-exports; naming the defining module
//! keeps the rule checkable). A file of a module that is in no layer fails
//! too, so a new module has to be placed. `main.rs` is a crate of its own
//! (the CLI) and uses the library's public API only; the modules it
//! declares (`mod cli;` → `cli/…`) belong to that crate, not to a layer,
//! and a module declared by both roots fails. Within a layer, no two
//! modules may import each other (`cycles`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

mod cycles;

/// The layers, lowest first: a name for messages and the top-level modules
/// of `host-sim/src` in it.
pub const LAYERS: &[(&str, &[&str])] = &[
    (
        "leaf types",
        &["bindings", "error", "limits", "metrics", "secret", "spec"],
    ),
    ("operator state", &["state"]),
    ("capabilities", &["capabilities"]),
    ("sandbox", &["sandbox"]),
    (
        "instance pool, release verification, tracking-domain checks",
        &["pool", "verify", "tracking"],
    ),
    ("host facade", &["host"]),
    ("surfaces", &["serve", "testing", "dev"]),
];

/// Files that are crate roots, not modules of a layer.
const ROOTS: &[&str] = &["lib.rs", "main.rs"];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// An import that breaks the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The file, relative to `host-sim/src`.
    pub file: PathBuf,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "host-sim/src/{}:{}: {}",
            self.file.display(),
            self.line,
            self.message
        )
    }
}

/// Checks the real tree and prints what it found.
pub fn run() -> Result<()> {
    let src = crate::workspace_root().join("host-sim/src");
    let files = read_tree(&src)?;
    let violations = check(&files);
    if violations.is_empty() {
        println!(
            "    host-sim: {} files, every import runs down the layers ({}), no two modules import each other",
            files.len(),
            LAYERS
                .iter()
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
                .join(" → ")
        );
        return Ok(());
    }
    for violation in &violations {
        eprintln!("{violation}");
    }
    bail!(
        "{} import(s) in host-sim run against its layers (listed above); \
         move the code down or the import up (layers: xtask/src/layers.rs, ARCHITECTURE.md)",
        violations.len()
    )
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

/// The violations in `files` (paths relative to `src`).
pub fn check(files: &[(PathBuf, String)]) -> Vec<Violation> {
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
        let own = module_path[0].clone();
        if binary.contains(&own) {
            if library.contains(&own) {
                violations.push(Violation {
                    file: file.clone(),
                    line: 1,
                    message: format!(
                        "module `{own}` is declared by both lib.rs and main.rs; \
                         a CLI module belongs to main.rs only"
                    ),
                });
            }
            // A module of the CLI crate: it reaches the library by its
            // public API (`host_sim::…`), and `crate::` names the CLI.
            continue;
        }
        library_files.push(entry);
        let Some(own_layer) = layer_of(&own) else {
            violations.push(Violation {
                file: file.clone(),
                line: 1,
                message: format!(
                    "module `{own}` is in no layer; add it to LAYERS in xtask/src/layers.rs \
                     and to the layers in ARCHITECTURE.md"
                ),
            });
            continue;
        };
        for (line, target) in root_references(&module_path, text) {
            if target == own {
                continue;
            }
            let message = match layer_of(&target) {
                Some(layer) if layer < own_layer => continue,
                Some(layer) => format!(
                    "`{own}` ({}) uses `{target}` ({}), which does not stand below it",
                    LAYERS[own_layer].0, LAYERS[layer].0
                ),
                None => format!(
                    "`{own}` uses `crate::{target}`, which is not a module of a layer; \
                     name the module that defines it"
                ),
            };
            violations.push(Violation {
                file: file.clone(),
                line,
                message,
            });
        }
    }
    violations.extend(cycles::check(&library_files));
    violations
}

/// The modules a crate root declares from files: `mod name;`.
fn declared_modules(text: &str) -> Vec<String> {
    let tokens = tokens(text);
    tokens
        .windows(3)
        .filter_map(|window| match window {
            [
                (_, Token::Ident(keyword)),
                (_, Token::Ident(name)),
                (_, Token::Punct(';')),
            ] if keyword == "mod" => Some(name.clone()),
            _ => None,
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

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// The tokens of `text` with their lines; comments, string and character
/// literals and lifetimes are left out.
fn tokens(text: &str) -> Vec<(usize, Token)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let skip_to = |i: &mut usize, line: &mut usize, end: usize| {
        *line += chars[*i..end.min(chars.len())]
            .iter()
            .filter(|c| **c == '\n')
            .count();
        *i = end;
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            _ if c.is_whitespace() => i += 1,
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                let (mut depth, mut j) = (0usize, i);
                while j < chars.len() {
                    if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                        depth += 1;
                        j += 2;
                    } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                        depth -= 1;
                        j += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        j += 1;
                    }
                }
                skip_to(&mut i, &mut line, j);
            }
            '"' => {
                let mut j = i + 1;
                while j < chars.len() && chars[j] != '"' {
                    j += if chars[j] == '\\' { 2 } else { 1 };
                }
                skip_to(&mut i, &mut line, j + 1);
            }
            'r' | 'b' if raw_string_start(&chars, i).is_some() => {
                let (hashes, open) = raw_string_start(&chars, i).unwrap_or((0, i));
                let close: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let rest: String = chars[open + 1..].iter().collect();
                let end = rest.find(&close).map_or(chars.len(), |at| {
                    open + 1 + rest[..at].chars().count() + close.len()
                });
                skip_to(&mut i, &mut line, end);
            }
            '\'' => {
                // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
                if next == Some('\\') {
                    let mut j = i + 2;
                    while j < chars.len() && chars[j] != '\'' {
                        j += 1;
                    }
                    i = j + 1;
                } else if chars.get(i + 2) == Some(&'\'') {
                    i += 3;
                } else {
                    i += 1;
                    while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                        i += 1;
                    }
                }
            }
            ':' if next == Some(':') => {
                out.push((line, Token::PathSep));
                i += 2;
            }
            _ if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                // `b'x'`, `b"…"` prefixes are handled by the literal arms;
                // `r#ident` is a raw identifier.
                out.push((line, Token::Ident(word)));
            }
            _ => {
                out.push((line, Token::Punct(c)));
                i += 1;
            }
        }
    }
    out
}

/// At `i`, `r"`, `r#"`, `br"`, `br#"`…: the number of `#` and the index of
/// the opening quote.
fn raw_string_start(chars: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some((hashes, j))
}

/// A module path (`["state", "error"]`).
type Module = Vec<String>;

/// The top-level modules (or root items) that paths in `text` name from
/// the crate root, with their lines: the first segment of each path
/// [`references`] resolves, once per line and module (`pool::{A, B}` is one
/// use of `pool`).
fn root_references(file_module: &[String], text: &str) -> Vec<(usize, String)> {
    let mut found: Vec<(usize, String)> = references(file_module, text)
        .into_iter()
        .filter_map(|(line, _, path)| Some((line, path.first()?.clone())))
        .collect();
    found.dedup();
    found
}

/// Every path in `text` (the file of module `file_module`) that starts at
/// the crate root, a `super` chain or `self`, resolved to a full path from
/// the root, with its line and the module it is written in (inline `mod
/// name { … }` blocks extend the file's module path).
fn references(file_module: &[String], text: &str) -> Vec<(usize, Module, Module)> {
    let tokens = tokens(text);
    let mut found = Vec::new();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let is = |at: usize, token: &Token| tokens.get(at).map(|(_, t)| t) == Some(token);
    let ident = |at: usize| match tokens.get(at) {
        Some((_, Token::Ident(name))) => Some(name.as_str()),
        _ => None,
    };
    while i < tokens.len() {
        let here: Module = file_module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(name, _)| name.clone()))
            .collect();
        let after_path = i > 0 && (is(i - 1, &Token::PathSep) || is(i - 1, &Token::Punct('$')));
        match &tokens[i].1 {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth = depth.saturating_sub(1);
                while inline.last().is_some_and(|(_, inside)| *inside > depth) {
                    inline.pop();
                }
            }
            Token::Ident(word) if word == "mod" => {
                if let Some(name) = ident(i + 1)
                    && is(i + 2, &Token::Punct('{'))
                {
                    depth += 1;
                    inline.push((name.to_string(), depth));
                    i += 3;
                    continue;
                }
            }
            Token::Ident(word)
                if (word == "crate" || word == "self")
                    && !after_path
                    && is(i + 1, &Token::PathSep) =>
            {
                let base = if word == "crate" {
                    Vec::new()
                } else {
                    here.clone()
                };
                found.extend(
                    resolve(&base, &tokens, i + 2)
                        .into_iter()
                        .map(|(line, path)| (line, here.clone(), path)),
                );
                i += 2;
                continue;
            }
            Token::Ident(word) if word == "super" && !after_path => {
                let mut ups = 0;
                let mut j = i;
                while ident(j) == Some("super") && is(j + 1, &Token::PathSep) {
                    ups += 1;
                    j += 2;
                }
                if ups > 0 && ups <= here.len() {
                    found.extend(
                        resolve(&here[..here.len() - ups], &tokens, j)
                            .into_iter()
                            .map(|(line, path)| (line, here.clone(), path)),
                    );
                }
                i = j.max(i + 1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The paths at `at` (after `base::`), each as `base` plus its segments:
/// one for `a::b::C`, one per item for `a::{b, c::D}`.
fn resolve(base: &[String], tokens: &[(usize, Token)], at: usize) -> Vec<(usize, Module)> {
    let mut path = base.to_vec();
    let mut i = at;
    let mut line = tokens.get(at).map(|(line, _)| *line).unwrap_or(0);
    loop {
        match tokens.get(i) {
            Some((at_line, Token::Ident(name))) => {
                line = *at_line;
                if name != "self" {
                    path.push(name.clone());
                }
                if tokens.get(i + 1).map(|(_, t)| t) == Some(&Token::PathSep) {
                    i += 2;
                    continue;
                }
                return vec![(line, path)];
            }
            Some((_, Token::Punct('{'))) => {
                let mut out = Vec::new();
                let mut nested = 0;
                let mut item_start = true;
                for j in i + 1..tokens.len() {
                    match &tokens[j].1 {
                        Token::Punct('{') => nested += 1,
                        Token::Punct('}') if nested == 0 => break,
                        Token::Punct('}') => nested -= 1,
                        Token::Punct(',') if nested == 0 => {
                            item_start = true;
                            continue;
                        }
                        _ => {}
                    }
                    if item_start && nested == 0 {
                        out.extend(resolve(&path, tokens, j));
                    }
                    item_start = false;
                }
                return out;
            }
            _ => return vec![(line, path)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, text: &str) -> (PathBuf, String) {
        (PathBuf::from(path), text.to_string())
    }

    fn messages(files: &[(PathBuf, String)]) -> Vec<String> {
        check(files).iter().map(ToString::to_string).collect()
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
    fn the_host_sim_tree_keeps_its_layers() {
        let src = crate::workspace_root().join("host-sim/src");
        let files = read_tree(&src).unwrap();
        assert!(files.len() > 20, "read the tree");
        let violations = check(&files);
        assert!(violations.is_empty(), "{violations:#?}");
    }
}
