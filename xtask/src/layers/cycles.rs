//! No two modules of host-sim import each other: within a layer, modules
//! beside each other (`state::error` and `state::tracking`) may use one
//! another one way only. Every `crate::…`, `super::…` and `self::…` path
//! (with `{…}` groups) is resolved to the deepest module of the library it
//! names; a module's own ancestors and descendants do not count (a parent
//! re-exports its children, a child uses its parent's items). An inline
//! module (`mod tests { … }`) is a module of its own: a unit test may use
//! the test bed that uses the module under test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::{Token, Violation, module_path, tokens};

/// A module path (`["state", "error"]`), shown as `state::error`.
type Module = Vec<String>;

fn shown(module: &[String]) -> String {
    module.join("::")
}

/// The violations: one per pair of library modules that import each
/// other, at the first import of the pair's first module. `library` are
/// the library's files (not the roots, not the CLI crate's).
pub(super) fn check(library: &[&(PathBuf, String)]) -> Vec<Violation> {
    let modules: BTreeSet<Module> = library.iter().map(|(file, _)| module_path(file)).collect();
    // (from, to) → the first (file, line) where `from` names `to`.
    let mut edges: BTreeMap<(Module, Module), (PathBuf, usize)> = BTreeMap::new();
    for (file, text) in library {
        for (line, from, path) in references(&module_path(file), text) {
            let Some(to) = deepest_module(&modules, &path) else {
                continue;
            };
            if to.starts_with(&from) || from.starts_with(&to) {
                continue;
            }
            edges
                .entry((from.clone(), to))
                .or_insert_with(|| (file.clone(), line));
        }
    }
    let mut violations = Vec::new();
    for ((from, to), (file, line)) in &edges {
        if from < to
            && let Some((back_file, back_line)) = edges.get(&(to.clone(), from.clone()))
        {
            violations.push(Violation {
                file: file.clone(),
                line: *line,
                message: format!(
                    "`{}` and `{}` import each other (back at host-sim/src/{}:{}); \
                     move what both need into one of them, or into a module both use",
                    shown(from),
                    shown(to),
                    back_file.display(),
                    back_line
                ),
            });
        }
    }
    violations
}

/// The longest prefix of `path` that is a module of `modules`.
fn deepest_module(modules: &BTreeSet<Module>, path: &[String]) -> Option<Module> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|prefix| modules.contains(prefix))
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
    use super::super::check as check_all;
    use super::*;

    fn file(path: &str, text: &str) -> (PathBuf, String) {
        (PathBuf::from(path), text.to_string())
    }

    #[test]
    fn two_modules_importing_each_other_fail_with_both_paths() {
        let found: Vec<String> = check_all(&[
            file(
                "state/mod.rs",
                "mod error;\nmod tracking;\npub use tracking::Step;\n",
            ),
            file(
                "state/error.rs",
                "pub enum E {\n    T(super::tracking::Refusal),\n}\n",
            ),
            file(
                "state/tracking.rs",
                "use super::error::{Result, E};\nuse super::State;\n",
            ),
        ])
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            found,
            [
                "host-sim/src/state/error.rs:2: `state::error` and `state::tracking` import each \
              other (back at host-sim/src/state/tracking.rs:1); move what both need into one of \
              them, or into a module both use"
            ]
        );
    }

    #[test]
    fn one_way_groups_crate_paths_and_parents_pass() {
        let files = [
            file("state/mod.rs", "use self::tracking::X;\n"),
            file("state/steps.rs", "use crate::state::State;\n"),
            file("state/error.rs", "use crate::state::{steps::Step, self};\n"),
            file(
                "state/tracking.rs",
                "use super::{error::E, steps::{Step, R}};\nmod tests {\n    use super::super::tests::open;\n}\n",
            ),
            // A unit test and the test bed it uses.
            file(
                "state/access.rs",
                "mod tests {\n    use super::super::testing::Bed;\n}\n",
            ),
            file("state/testing.rs", "use super::access::grant;\n"),
        ];
        let library: Vec<_> = files.iter().collect();
        assert!(check(&library).is_empty());
        let with_cycle = [
            file("state/steps.rs", "use crate::state::{error::E};\n"),
            file("state/error.rs", "fn f() { crate::state::steps::g(); }\n"),
        ];
        let library: Vec<_> = with_cycle.iter().collect();
        assert_eq!(check(&library).len(), 1);
    }
}
