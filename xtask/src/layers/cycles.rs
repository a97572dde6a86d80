//! No modules of a crate import one another in a circle, within a layer
//! too: modules beside each other (`state::error` and `state::tracking`)
//! may use one another one way only. Every `crate::…`, `super::…` and
//! `self::…` path (with `{…}` groups) is resolved to the deepest module of
//! the library it names; a module's own ancestors and descendants do not
//! count (a parent re-exports its children, a child uses its parent's
//! items). An inline module (`mod tests { … }`) is a module of its own: a
//! unit test may use the test bed that uses the module under test.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use super::paths::references;
use super::{Module, Violation, module_path, shown};

/// (from, to) → the first (file, line) where `from` names `to`.
type Edges = BTreeMap<(Module, Module), (PathBuf, usize)>;

/// The violations: one per pair of library modules that import each
/// other, at the first import of the pair's first module, and one per
/// longer circle (a → b → c → a) with no such pair in it. `library` are
/// the library's files (not the roots, not the CLI crate's), relative to
/// `src`.
pub(super) fn check(src: &Path, library: &[&(PathBuf, String)]) -> Vec<Violation> {
    let modules: BTreeSet<Module> = library.iter().map(|(file, _)| module_path(file)).collect();
    let mut edges: Edges = BTreeMap::new();
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
                file: src.join(file),
                line: *line,
                message: format!(
                    "`{}` and `{}` import each other (back at {}:{}); \
                     move what both need into one of them, or into a module both use",
                    shown(from),
                    shown(to),
                    src.join(back_file).display(),
                    back_line
                ),
            });
        }
    }
    for circle in longer_circles(&edges) {
        let at = |i: usize| &edges[&(circle[i].clone(), circle[(i + 1) % circle.len()].clone())];
        let (file, line) = at(0);
        let path: Vec<String> = circle
            .iter()
            .chain(circle.first())
            .map(|m| format!("`{}`", shown(m)))
            .collect();
        let places: Vec<String> = (1..circle.len())
            .map(|i| format!("{}:{}", src.join(&at(i).0).display(), at(i).1))
            .collect();
        violations.push(Violation {
            file: src.join(file),
            line: *line,
            message: format!(
                "{} import one another in a circle (the next imports at {}); move what \
                 they share into a module they all use",
                path.join(" → "),
                places.join(", ")
            ),
        });
    }
    violations
}

/// For every set of modules that reach one another (three or more), the
/// shortest circle through its first module, when that circle is longer
/// than a pair (a pair is reported as one).
fn longer_circles(edges: &Edges) -> Vec<Vec<Module>> {
    let mut next: BTreeMap<&Module, Vec<&Module>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
    }
    let reach = |start: &Module| {
        let mut seen: BTreeSet<&Module> = BTreeSet::new();
        let mut stack: Vec<&Module> = next.get(start).cloned().unwrap_or_default();
        while let Some(module) = stack.pop() {
            if seen.insert(module) {
                stack.extend(next.get(module).into_iter().flatten());
            }
        }
        seen
    };
    let reaches: BTreeMap<&Module, BTreeSet<&Module>> =
        next.keys().map(|module| (*module, reach(module))).collect();
    let mut placed: BTreeSet<&Module> = BTreeSet::new();
    let mut circles = Vec::new();
    for (&first, reached) in &reaches {
        if placed.contains(first) || !reached.contains(first) {
            continue;
        }
        let set: BTreeSet<&Module> = reached
            .iter()
            .copied()
            .filter(|m| reaches.get(m).is_some_and(|r| r.contains(first)))
            .collect();
        placed.extend(set.iter().copied());
        if set.len() < 3 {
            continue;
        }
        // Breadth first from `first` inside the set, back to `first`.
        let mut came_from: BTreeMap<&Module, &Module> = BTreeMap::new();
        let mut queue = VecDeque::from([first]);
        while let Some(module) = queue.pop_front() {
            for &to in next.get(module).into_iter().flatten() {
                if !set.contains(to) || came_from.contains_key(to) {
                    continue;
                }
                came_from.insert(to, module);
                if to == first {
                    queue.clear();
                    break;
                }
                queue.push_back(to);
            }
        }
        let mut circle = vec![first.clone()];
        let mut at = came_from[first];
        while at != first {
            circle.push(at.clone());
            at = came_from[at];
        }
        circle[1..].reverse();
        if circle.len() > 2 {
            circles.push(circle);
        }
    }
    circles
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
    use super::super::tests::host_sim;
    use super::*;

    fn file(path: &str, text: &str) -> (PathBuf, String) {
        (PathBuf::from(path), text.to_string())
    }

    #[test]
    fn two_modules_importing_each_other_fail_with_both_paths() {
        let found: Vec<String> = check_all(
            &host_sim(),
            Path::new("host-sim/src"),
            &[
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
            ],
        )
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
        assert!(check(Path::new("host-sim/src"), &library).is_empty());
        let with_cycle = [
            file("state/steps.rs", "use crate::state::{error::E};\n"),
            file("state/error.rs", "fn f() { crate::state::steps::g(); }\n"),
        ];
        let library: Vec<_> = with_cycle.iter().collect();
        assert_eq!(check(Path::new("host-sim/src"), &library).len(), 1);
    }

    #[test]
    fn a_longer_circle_fails_with_every_import_in_it() {
        let files = [
            file("service/send.rs", "use super::handoff::Parcel;\n"),
            file("service/handoff.rs", "\nuse super::scheduler::Slot;\n"),
            file("service/scheduler.rs", "\n\nuse super::send::update;\n"),
            file("service/page.rs", "use super::send::Outcome;\n"),
        ];
        let library: Vec<_> = files.iter().collect();
        let found: Vec<String> = check(Path::new("mail-service/src"), &library)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            found,
            [
                "mail-service/src/service/handoff.rs:2: `service::handoff` → `service::scheduler` \
                 → `service::send` → `service::handoff` import one another in a circle (the next \
                 imports at mail-service/src/service/scheduler.rs:3, mail-service/src/service/send.rs:1); \
                 move what they share into a module they all use"
            ]
        );
    }
}
