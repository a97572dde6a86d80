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

use super::{Module, Violation, module_path, references};

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
