//! Where a manifest mistake is: the error every reader of `manifest.toml`
//! reports (the `manifest!` macro at build time, the development host, the
//! installer, the release builder), located by the TOML parser's spans, and
//! [`ManifestError::render`], the one function that writes it.

use std::fmt;
use std::ops::Range;
use std::path::Path;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// A place in the manifest's text: 1-based line and column (in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

/// What is wrong with a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestErrorKind {
    /// Not TOML, or TOML that does not fit the format: an unknown or
    /// missing field, a value of the wrong type.
    Syntax(String),
    /// A parsed value breaks a rule.
    Invalid { field: String, rule: String },
}

/// Why a manifest was refused, and where: the line and column, and the
/// table (`[extension]`, `[[actions]] #2 (hello_ext.count)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    kind: ManifestErrorKind,
    at: Option<Position>,
    table: Option<String>,
    /// Inside a JSON Schema field: the JSON pointer below `field` that
    /// locates the mistake (`/properties/n/type`).
    pointer: Option<String>,
}

impl ManifestError {
    /// A syntax error with no place in the text (the file is not UTF-8).
    pub fn syntax(message: impl Into<String>) -> Self {
        Self::unlocated(ManifestErrorKind::Syntax(message.into()))
    }

    /// A broken rule, located later by [`ManifestError::locate`].
    pub(crate) fn invalid(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Self::unlocated(ManifestErrorKind::Invalid {
            field: field.into(),
            rule: rule.into(),
        })
    }

    /// A broken rule inside the JSON Schema `field`, at `pointer`.
    pub(crate) fn in_schema(field: impl Into<String>, pointer: String, rule: String) -> Self {
        let mut error = Self::invalid(field, rule);
        error.pointer = Some(pointer).filter(|p| !p.is_empty());
        error
    }

    fn unlocated(kind: ManifestErrorKind) -> Self {
        Self {
            kind,
            at: None,
            table: None,
            pointer: None,
        }
    }

    pub fn kind(&self) -> &ManifestErrorKind {
        &self.kind
    }

    /// Where in the text, when the parser could tell.
    pub fn position(&self) -> Option<Position> {
        self.at
    }

    /// The table holding the mistake, e.g. `[[actions]] #2 (shop.type)`.
    pub fn table(&self) -> Option<&str> {
        self.table.as_deref()
    }

    /// The error as every tool shows it, for the manifest read from `file`:
    /// `<file>:<line>:<column>: <table>: <what is wrong>`.
    pub fn render(&self, file: &Path) -> String {
        let mut out = file.display().to_string();
        if let Some(at) = self.at {
            out.push_str(&format!(":{}:{}", at.line, at.column));
        }
        if let Some(table) = &self.table {
            out.push_str(&format!(": {table}"));
        }
        match &self.kind {
            ManifestErrorKind::Syntax(message) => out.push_str(&format!(": {message}")),
            ManifestErrorKind::Invalid { field, rule } => match &self.pointer {
                Some(pointer) => {
                    out.push_str(&format!(": field `{field}`, at `{pointer}`: {rule}"));
                }
                None => out.push_str(&format!(": field `{field}`: {rule}")),
            },
        }
        out
    }

    /// A parser error, located by its span.
    pub(crate) fn from_toml(error: &toml::de::Error, text: &str) -> Self {
        let mut located = Self::syntax(error.message().trim_end());
        let Some(span) = error.span() else {
            return located;
        };
        located.at = Some(position(text, span.start));
        if let Ok(document) = DeTable::parse(text) {
            let found = node_at(document.get_ref(), span);
            let container = if found.is_container {
                &found.path[..]
            } else {
                &found.path[..found.path.len().saturating_sub(1)]
            };
            located.table = Some(table_label(container, document.get_ref()));
        }
        located
    }

    /// This rule error with the place of its field in `text`.
    pub(crate) fn locate(mut self, text: &str) -> Self {
        let ManifestErrorKind::Invalid { field, .. } = &self.kind else {
            return self;
        };
        let Ok(document) = DeTable::parse(text) else {
            return self;
        };
        let mut path = field_path(field);
        if let Some(pointer) = &self.pointer {
            path.extend(pointer_path(pointer));
        }
        let table = document.get_ref();
        let (span, depth) = deepest(table, &path);
        if let Some(span) = span {
            self.at = Some(position(text, span.start));
        }
        // The table is the field's container; a path that stops early
        // (a missing field) names where it was looked for.
        let container = &path[..depth.min(field_path(field).len().saturating_sub(1))];
        self.table = Some(table_label(container, table));
        self
    }
}

impl fmt::Display for ManifestError {
    /// [`ManifestError::render`] for a file named `manifest.toml` (a
    /// release's, or a text with no file).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(Path::new(crate::MANIFEST_FILE)))
    }
}

impl std::error::Error for ManifestError {}

/// One step of a path into the document.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

/// `actions[1].http.method` → `actions`, 1, `http`, `method`.
fn field_path(field: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    for part in field.split('.') {
        let (key, mut indices) = match part.find('[') {
            Some(at) => (&part[..at], &part[at..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            steps.push(Step::Key(key.to_owned()));
        }
        while let Some(rest) = indices.strip_prefix('[') {
            let Some((index, after)) = rest.split_once(']') else {
                break;
            };
            match index.parse() {
                Ok(index) => steps.push(Step::Index(index)),
                Err(_) => steps.push(Step::Key(index.to_owned())),
            }
            indices = after;
        }
    }
    steps
}

/// A JSON pointer's reference tokens (`/properties/a~1b` → `properties`, `a/b`).
fn pointer_path(pointer: &str) -> Vec<Step> {
    pointer
        .split('/')
        .skip(1)
        .map(|token| {
            let token = token.replace("~1", "/").replace("~0", "~");
            match token.parse() {
                Ok(index) => Step::Index(index),
                Err(_) => Step::Key(token),
            }
        })
        .collect()
}

fn child<'a, 'i>(value: &'a DeValue<'i>, step: &Step) -> Option<&'a Spanned<DeValue<'i>>> {
    match (value, step) {
        (DeValue::Table(table), Step::Key(key)) => entry(table, key).map(|(_, v)| v),
        (DeValue::Table(table), Step::Index(index)) => {
            entry(table, &index.to_string()).map(|(_, v)| v)
        }
        (DeValue::Array(items), Step::Index(index)) => items.get(*index),
        _ => None,
    }
}

fn entry<'a, 'i>(
    table: &'a DeTable<'i>,
    key: &str,
) -> Option<(
    &'a Spanned<toml::de::DeString<'i>>,
    &'a Spanned<DeValue<'i>>,
)> {
    table.iter().find(|(k, _)| k.get_ref() == key)
}

/// The span of the deepest node of `path` present in the document, and
/// how many steps were found.
fn deepest(table: &DeTable<'_>, path: &[Step]) -> (Option<Range<usize>>, usize) {
    let Some(Step::Key(first)) = path.first() else {
        return (None, 0);
    };
    let Some((key, mut node)) = entry(table, first) else {
        return (None, 0);
    };
    let mut span = Some(key.span());
    let mut found = 1;
    for step in &path[1..] {
        match child(node.get_ref(), step) {
            Some(next) => {
                node = next;
                span = Some(next.span());
                found += 1;
            }
            None => break,
        }
    }
    // A table's own span may be its whole body: point at the value's start.
    (span, found)
}

struct Found {
    path: Vec<Step>,
    /// The span fell in a table or array itself, not in one of its keys or
    /// scalar values.
    is_container: bool,
}

/// The innermost key or value whose span holds `span`'s start.
fn node_at(table: &DeTable<'_>, span: Range<usize>) -> Found {
    fn in_table(table: &DeTable<'_>, at: usize) -> Option<Found> {
        for (key, value) in table.iter() {
            if key.span().contains(&at) {
                return Some(Found {
                    path: vec![Step::Key(key.get_ref().to_string())],
                    is_container: false,
                });
            }
            if let Some(mut found) = in_value(value, at) {
                found.path.insert(0, Step::Key(key.get_ref().to_string()));
                return Some(found);
            }
        }
        None
    }
    fn in_value(value: &Spanned<DeValue<'_>>, at: usize) -> Option<Found> {
        let inner = match value.get_ref() {
            DeValue::Table(table) => in_table(table, at),
            DeValue::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
                in_value(item, at).map(|mut found| {
                    found.path.insert(0, Step::Index(i));
                    found
                })
            }),
            _ => None,
        };
        inner.or_else(|| {
            value.span().contains(&at).then(|| Found {
                path: Vec::new(),
                is_container: matches!(value.get_ref(), DeValue::Table(_) | DeValue::Array(_)),
            })
        })
    }
    in_table(table, span.start).unwrap_or(Found {
        path: Vec::new(),
        is_container: true,
    })
}

/// How a reader finds the table at `container` in the file.
fn table_label(container: &[Step], document: &DeTable<'_>) -> String {
    let key = |i: usize| match container.get(i) {
        Some(Step::Key(key)) => Some(key.as_str()),
        _ => None,
    };
    match (key(0), container.get(1)) {
        (None, _) => "top level".to_owned(),
        (Some("actions"), Some(Step::Index(index))) => {
            let name = entry(document, "actions")
                .and_then(|(_, actions)| child(actions.get_ref(), &Step::Index(*index)))
                .and_then(|action| child(action.get_ref(), &Step::Key("name".to_owned())))
                .and_then(|name| name.get_ref().as_str().map(str::to_owned));
            match name {
                Some(name) => format!("[[actions]] #{} ({name})", index + 1),
                None => format!("[[actions]] #{}", index + 1),
            }
        }
        (Some("actions"), _) => "[[actions]]".to_owned(),
        (Some("capabilities"), _) => match (key(1), key(2)) {
            (Some("http"), Some(binding)) => format!("[capabilities.http.{binding}]"),
            (Some(kind), _) => format!("[capabilities.{kind}]"),
            (None, _) => "[capabilities]".to_owned(),
        },
        (Some(table @ ("definitions" | "release")), _) => match key(1) {
            Some(inner) => format!("[{table}.{inner}]"),
            None => format!("[{table}]"),
        },
        (Some(table), _) => format!("[{table}]"),
    }
}

/// The 1-based line and column of byte `offset` of `text`.
fn position(text: &str, offset: usize) -> Position {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |at| at + 1);
    Position {
        line: before.matches('\n').count() + 1,
        column: before[line_start..].chars().count() + 1,
    }
}

/// Checks a JSON Schema against its meta-schema (the draft its `$schema`
/// names, 2020-12 without one), as the host's validator does before it
/// compiles it: the first mistake, with its JSON pointer and, where the
/// meta-schema lists them, the allowed values.
pub(crate) fn check_schema(field: &str, schema: &serde_json::Value) -> Result<(), ManifestError> {
    let Err(error) = jsonschema::meta::validate(schema) else {
        return Ok(());
    };
    let pointer = error.instance_path().to_string();
    let found = error.instance().to_string();
    let rule = match allowed_values(&error) {
        Some(allowed) => format!("{found} is not allowed here; allowed: {allowed}"),
        None => error.to_string(),
    };
    Err(ManifestError::in_schema(field, pointer, rule))
}

/// The values the meta-schema allows where `error` happened, when it lists
/// them (an `enum`, also one reached through `anyOf`/`oneOf`, such as
/// `type`'s simple types).
fn allowed_values(error: &jsonschema::ValidationError<'_>) -> Option<String> {
    use jsonschema::error::ValidationErrorKind as Kind;
    match error.kind() {
        Kind::Enum { options } => options.as_array().map(|options| {
            options
                .iter()
                .map(|option| match option {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        }),
        Kind::AnyOf { context } | Kind::OneOfNotValid { context } => context
            .iter()
            .flatten()
            .filter(|inner| inner.instance_path() == error.instance_path())
            .find_map(allowed_values),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Manifest;

    /// Two actions; the mistakes below are made in the second.
    pub(crate) const TWO_ACTIONS: &str = include_str!("../testdata/two-actions.toml");

    fn refused(text: &str) -> String {
        Manifest::from_toml(text)
            .unwrap_err()
            .render(Path::new("/p/manifest.toml"))
    }

    #[test]
    fn the_fixture_is_valid() {
        assert_eq!(Manifest::from_toml(TWO_ACTIONS).unwrap().actions.len(), 2);
    }

    #[test]
    fn a_misspelt_field_names_its_line_and_action() {
        let bad = TWO_ACTIONS.replace(
            "mcp_tool = \"plugin__hello_ext__count\"",
            "mcp_tol = \"plugin__hello_ext__count\"",
        );
        assert_eq!(
            refused(&bad),
            "/p/manifest.toml:29:1: [[actions]] #2 (hello_ext.count): unknown field `mcp_tol`, \
             expected one of `name`, `description`, `http`, `mcp_tool`, `capabilities`, \
             `input_schema`, `output_schema`"
        );
    }

    #[test]
    fn a_wrong_schema_type_names_the_property_and_the_allowed_types() {
        let bad = TWO_ACTIONS.replace("n = { type = \"integer\" }", "n = { type = \"integr\" }");
        assert_eq!(
            refused(&bad),
            "/p/manifest.toml:35:25: [[actions]] #2 (hello_ext.count): field \
             `actions[1].input_schema`, at `/properties/n/type`: \"integr\" is not allowed here; \
             allowed: array, boolean, integer, null, number, object, string"
        );
    }

    #[test]
    fn a_string_where_a_list_belongs_names_the_field() {
        let bad = TWO_ACTIONS.replace(
            "collections = [\"greetings\"]",
            "collections = \"greetings\"",
        );
        assert_eq!(
            refused(&bad),
            "/p/manifest.toml:12:15: [capabilities.documents]: invalid type: string \"greetings\", \
             expected a sequence"
        );
    }

    #[test]
    fn a_broken_rule_names_its_line_and_table() {
        let bad = TWO_ACTIONS.replace("route = \"/count\"", "route = \"count\"");
        let message = refused(&bad);
        assert!(
            message.starts_with(
                "/p/manifest.toml:28:34: [[actions]] #2 (hello_ext.count): field \
                 `actions[1].http.route`: path pattern `count`: must start with `/`"
            ),
            "{message}"
        );
    }

    #[test]
    fn text_that_is_not_toml_has_a_position() {
        let message = refused("[extension\nid = 1\n");
        assert!(message.starts_with("/p/manifest.toml:1:"), "{message}");
    }

    #[test]
    fn positions_count_lines_and_characters() {
        let text = "a = 1\nbé = \"x\"\n";
        assert_eq!(position(text, 0), Position { line: 1, column: 1 });
        assert_eq!(position(text, 6), Position { line: 2, column: 1 });
        // After `bé = `: 5 characters, 6 bytes.
        assert_eq!(position(text, 12), Position { line: 2, column: 6 });
        // Inside `é`, past the end: the nearest boundary, the last position.
        assert_eq!(position(text, 8), Position { line: 2, column: 2 });
        assert_eq!(position(text, 99), Position { line: 3, column: 1 });
    }

    #[test]
    fn field_paths_and_pointers_become_steps() {
        assert_eq!(
            field_path("capabilities.http.provider.allow[0].path"),
            [
                Step::Key("capabilities".into()),
                Step::Key("http".into()),
                Step::Key("provider".into()),
                Step::Key("allow".into()),
                Step::Index(0),
                Step::Key("path".into()),
            ]
        );
        assert_eq!(
            pointer_path("/properties/a~1b/items/0"),
            [
                Step::Key("properties".into()),
                Step::Key("a/b".into()),
                Step::Key("items".into()),
                Step::Index(0),
            ]
        );
    }
}
