//! Every kept fuzz input, replayed on the stable toolchain: each file of
//! `fuzz/corpus/TARGET/` through the target's function, so the corpora and
//! every finding added to them keep passing in `cargo xtask test`.

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

#[test]
fn every_kept_input_passes_its_target() {
    let mut failures = Vec::new();
    let mut replayed = 0;
    for (name, target) in fuzz_targets::TARGETS {
        let dir = fuzz_dir().join("corpus").join(name);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (every target keeps a corpus)", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}: no input", dir.display());
        for file in files {
            let bytes = std::fs::read(&file).expect("a corpus file");
            if catch_unwind(AssertUnwindSafe(|| target(&bytes))).is_err() {
                failures.push(file.display().to_string());
            }
            replayed += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {replayed} inputs fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_target_has_its_cargo_fuzz_binary_corpus_and_nothing_else() {
    let named: BTreeSet<&str> = fuzz_targets::TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(named.len(), fuzz_targets::TARGETS.len(), "a name twice");
    let stems = |dir: &str, suffix: &str| -> BTreeSet<String> {
        std::fs::read_dir(fuzz_dir().join(dir))
            .expect("a fuzz directory")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter_map(|n| n.strip_suffix(suffix).map(str::to_owned))
            .collect()
    };
    let named: BTreeSet<String> = named.into_iter().map(str::to_owned).collect();
    assert_eq!(stems("fuzz_targets", ".rs"), named, "fuzz/fuzz_targets/");
    assert_eq!(stems("corpus", ""), named, "fuzz/corpus/");
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for name in &named {
        let source = std::fs::read_to_string(fuzz_dir().join(format!("fuzz_targets/{name}.rs")))
            .expect("a target file");
        assert!(
            source.contains(&format!("fuzz_targets::{name}(data)")),
            "fuzz/fuzz_targets/{name}.rs does not call fuzz_targets::{name}"
        );
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "fuzz/Cargo.toml has no [[bin]] {name}"
        );
    }
}
