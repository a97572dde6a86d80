//! README.md is the entrance: every command it gives is run by a test or by
//! CI (so none of them rots), and every file it links to exists.

use std::collections::BTreeSet;

use workspace_tests::workspace_root;

/// Each command README.md may give, and the file that runs it verbatim.
const RUN_BY: &[(&str, &str)] = &[
    ("cargo xtask demo", "tests/demo.rs"),
    ("cargo xtask test", ".ci/run"),
];

fn readme() -> String {
    std::fs::read_to_string(workspace_root().join("README.md")).unwrap()
}

/// The lines of README's `sh` blocks (commands; comments dropped).
fn commands(readme: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        let fence = line.trim_start();
        if let Some(info) = fence.strip_prefix("```") {
            in_sh = !in_sh && matches!(info.trim(), "sh" | "bash" | "shell" | "console");
            continue;
        }
        let command = line.split(" #").next().unwrap().trim();
        if in_sh && !command.is_empty() && !command.starts_with('#') {
            commands.push(command.to_owned());
        }
    }
    commands
}

#[test]
fn every_command_in_the_readme_is_run_by_a_test_or_ci() {
    let commands = commands(&readme());
    assert!(
        commands.iter().any(|c| c == "cargo xtask demo"),
        "README.md no longer gives the main job's command: {commands:?}"
    );
    for command in &commands {
        let (_, file) = RUN_BY
            .iter()
            .find(|(known, _)| known == command)
            .unwrap_or_else(|| {
                panic!(
                    "README.md gives `{command}`, which no test or CI step runs; \
                     run it in one and list it in RUN_BY of tests/readme.rs"
                )
            });
        let runner = std::fs::read_to_string(workspace_root().join(file)).unwrap();
        assert!(
            runner.contains(command),
            "{file} no longer runs `{command}`, which README.md gives"
        );
    }
}

#[test]
fn every_file_the_readme_links_to_exists() {
    let readme = readme();
    let mut links = BTreeSet::new();
    for piece in readme.split("](").skip(1) {
        let target = piece.split(')').next().unwrap();
        let path = target.split('#').next().unwrap();
        if !path.is_empty() && !path.contains("://") {
            links.insert(path.to_owned());
        }
    }
    assert!(links.contains("ARCHITECTURE.md"), "{links:?}");
    for path in links {
        assert!(
            workspace_root().join(&path).exists(),
            "README.md links to {path}, which does not exist"
        );
    }
}

#[test]
fn the_readme_stays_an_entrance() {
    let lines = readme().lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines; move reference to a crate README or docs/ (at most 200)"
    );
}
