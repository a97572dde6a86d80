//! A crate's layers as ARCHITECTURE.md shows them, read by the check so
//! that the reader and the check see one list. In the `## ` section whose
//! heading starts with the crate's name, the first table with the header
//! `| layer | modules | … |` has one row per layer, lowest first: the
//! layer's number (from 1) and name (`3. capabilities`), then its modules
//! in backticks separated by commas: `error`, `state/` (a directory), or
//! `feedback::listener` (a module inside another that stands on a layer of
//! its own). The third column is for the reader.

use anyhow::{Result, bail};

use super::paths::Module;

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub name: String,
    pub modules: Vec<Module>,
    /// The row's line in ARCHITECTURE.md.
    pub line: usize,
}

/// A crate's layers, lowest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layers {
    pub crate_name: String,
    pub layers: Vec<Layer>,
}

impl Layers {
    /// The layer table of `crate_name` in `markdown` (ARCHITECTURE.md).
    pub fn parse(markdown: &str, crate_name: &str) -> Result<Layers> {
        let lines: Vec<&str> = markdown.lines().collect();
        let mut in_section = false;
        let mut header = None;
        for (index, line) in lines.iter().enumerate() {
            if let Some(heading) = line.strip_prefix("## ") {
                let first = heading.split_whitespace().next().unwrap_or("");
                in_section = first.trim_end_matches(':') == crate_name;
            } else if in_section && is_header(line) {
                header = Some(index);
                break;
            }
        }
        let Some(header) = header else {
            bail!(
                "ARCHITECTURE.md: no layer table for {crate_name}: expected a table headed \
                 `| layer | modules | what it is |` in a `## {crate_name} …` section"
            );
        };
        let mut layers: Vec<Layer> = Vec::new();
        // The row after the header is the `|---|` separator.
        for (index, line) in lines.iter().enumerate().skip(header + 2) {
            if !line.trim_start().starts_with('|') {
                break;
            }
            let line_number = index + 1;
            let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
            let (Some(layer), Some(modules)) = (cells.first(), cells.get(1)) else {
                bail!("ARCHITECTURE.md:{line_number}: a layer row needs a layer and its modules");
            };
            let expected = layers.len() + 1;
            let name = match layer.trim().split_once(". ") {
                Some((number, name)) if number == expected.to_string() => name.trim(),
                _ => bail!(
                    "ARCHITECTURE.md:{line_number}: layer `{}`: must start with its number, \
                     `{expected}. ` (layers are numbered from 1, lowest first)",
                    layer.trim()
                ),
            };
            let modules = modules
                .split(',')
                .map(|entry| module(entry.trim()))
                .collect::<Option<Vec<Module>>>();
            let Some(modules) = modules.filter(|m| !m.is_empty()) else {
                bail!(
                    "ARCHITECTURE.md:{line_number}: modules of layer `{name}`: each must be a \
                     module in backticks (`name`, `dir/` or `parent::child`), separated by commas"
                );
            };
            for module in &modules {
                if let Some(other) = layers.iter().find(|l| l.modules.contains(module)) {
                    bail!(
                        "ARCHITECTURE.md:{line_number}: module `{}` is on layer `{}` already",
                        module.join("::"),
                        other.name
                    );
                }
            }
            layers.push(Layer {
                name: name.to_string(),
                modules,
                line: line_number,
            });
        }
        if layers.is_empty() {
            bail!(
                "ARCHITECTURE.md:{}: the layer table of {crate_name} has no rows",
                header + 1
            );
        }
        Ok(Layers {
            crate_name: crate_name.to_string(),
            layers,
        })
    }

    /// Where `path` stands: its layer and the module of the table that
    /// places it (the longest one `path` starts with).
    pub fn place(&self, path: &[String]) -> Option<(usize, &Module)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(index, layer)| layer.modules.iter().map(move |m| (index, m)))
            .filter(|(_, module)| path.starts_with(module))
            .max_by_key(|(_, module)| module.len())
    }

    /// The layer's name, for messages.
    pub fn name(&self, layer: usize) -> &str {
        &self.layers[layer].name
    }
}

fn is_header(line: &str) -> bool {
    let cells: Vec<&str> = line
        .trim()
        .trim_matches('|')
        .split('|')
        .map(str::trim)
        .collect();
    cells.len() >= 2 && cells[0] == "layer" && cells[1] == "modules"
}

/// `` `state/` `` → [state]; `` `feedback::listener` `` → [feedback,
/// listener]; anything else → None.
fn module(entry: &str) -> Option<Module> {
    let inner = entry.strip_prefix('`')?.strip_suffix('`')?;
    let segments: Module = inner
        .trim_end_matches('/')
        .split("::")
        .flat_map(|part| part.split('/'))
        .map(str::to_string)
        .collect();
    segments
        .iter()
        .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some(segments)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "# Architecture\n\n## host-sim inside: layers\n\n\
        | layer | modules | what it is |\n|---|---|---|\n\
        | 1. leaf types | `error`, `spec` | types |\n\
        | 2. operator state | `state/` | SQLite |\n\n\
        ## The surfaces (`host-sim serve`)\n\n\
        | layer | modules | what it is |\n|---|---|---|\n| 1. other | `x` | not ours |\n\n\
        ## mail-service\n\ntext\n\n### inside\n\n\
        | layer | modules | what it is |\n|---|---|---|\n\
        | 1. leaf | `clock` | time |\n\
        | 2. resources | `model/`, `feedback` | types |\n\
        | 3. surfaces | `http/`, `feedback::listener`, `feedback/report` | HTTP |\n";

    fn strings(path: &[&str]) -> Module {
        path.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_crate_reads_the_table_of_its_own_section() {
        let host = Layers::parse(DOC, "host-sim").unwrap();
        assert_eq!(host.layers.len(), 2);
        assert_eq!(
            host.layers[0].modules,
            [strings(&["error"]), strings(&["spec"])]
        );
        assert_eq!(host.layers[1].name, "operator state");
        assert_eq!(host.layers[1].line, 8);
        let mail = Layers::parse(DOC, "mail-service").unwrap();
        assert_eq!(mail.layers.len(), 3);
        assert_eq!(
            mail.layers[2].modules,
            [
                strings(&["http"]),
                strings(&["feedback", "listener"]),
                strings(&["feedback", "report"])
            ]
        );
    }

    #[test]
    fn the_longest_module_places_a_path() {
        let mail = Layers::parse(DOC, "mail-service").unwrap();
        let place = |path: &[&str]| {
            mail.place(&strings(path))
                .map(|(layer, m)| (layer, m.join("::")))
        };
        assert_eq!(
            place(&["feedback", "verp", "Key"]),
            Some((1, "feedback".into()))
        );
        assert_eq!(
            place(&["feedback", "listener", "Limits"]),
            Some((2, "feedback::listener".into()))
        );
        assert_eq!(place(&["clock"]), Some((0, "clock".into())));
        assert_eq!(place(&["serve"]), None);
    }

    #[test]
    fn a_missing_or_malformed_table_is_refused_naming_the_line_and_rule() {
        let missing = Layers::parse(DOC, "panel").unwrap_err().to_string();
        assert!(missing.contains("no layer table for panel"), "{missing}");
        let row = |row: &str| {
            let doc = format!(
                "## mail-service\n\n| layer | modules | what |\n|---|---|---|\n| 1. leaf | `clock` | t |\n{row}\n"
            );
            Layers::parse(&doc, "mail-service").unwrap_err().to_string()
        };
        let numbered = row("| 3. resources | `model` | t |");
        assert!(
            numbered.contains("ARCHITECTURE.md:6") && numbered.contains("`2. `"),
            "{numbered}"
        );
        let loose = row("| 2. resources | `model` (and the CLI) | t |");
        assert!(loose.contains("modules of layer `resources`"), "{loose}");
        let twice = row("| 2. resources | `clock/` | t |");
        assert!(
            twice.contains("`clock` is on layer `leaf` already"),
            "{twice}"
        );
    }
}
