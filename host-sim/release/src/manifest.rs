//! The model of `manifest.toml` and the rules it must follow.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::diagnostic::{ManifestError, check_schema};
use crate::pattern::PathPattern;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub extension: ExtensionInfo,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub panel: Option<PanelInfo>,
    #[serde(default)]
    pub capabilities: Capabilities,
    pub actions: Vec<Action>,
    /// Shared JSON Schema definitions that action schemas reference as
    /// `#/definitions/<name>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub definitions: BTreeMap<String, Value>,
    /// Added by the release build; absent in the source manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<ReleaseInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtensionInfo {
    pub id: String,
    pub name: String,
    pub version: String,
    /// `platform:extension@X.Y.Z`.
    pub wit: String,
    /// Path of the component inside the release.
    pub component: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PanelInfo {
    /// Path of the panel's HTML entry point inside the release.
    pub entry: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// HTTP bindings by name.
    #[serde(default)]
    pub http: BTreeMap<String, HttpCapability>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents: Option<DocumentsCapability>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpCapability {
    #[serde(default)]
    pub description: String,
    pub allow: Vec<HttpRule>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpRule {
    pub method: String,
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocumentsCapability {
    #[serde(default)]
    pub description: String,
    pub collections: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Action {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub http: ActionRoute,
    pub mcp_tool: String,
    /// Capability ids the action needs: `http:<binding>` or `documents`.
    #[serde(default)]
    pub capabilities: Vec<String>,
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub output_schema: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionRoute {
    pub method: String,
    pub route: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseInfo {
    /// Path inside the release → SHA-256 (lowercase hex).
    pub files: BTreeMap<String, String>,
}

const HTTP_METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

fn invalid(field: impl Into<String>, rule: impl Into<String>) -> ManifestError {
    ManifestError::invalid(field, rule)
}

fn is_slug(s: &str, max: usize) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && s.len() <= max
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// A relative path inside a release: `/`-separated, no empty, `.` or `..`
/// segment, no backslash.
pub(crate) fn is_release_path(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\\')
        && path
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != ".." && !s.contains(':'))
}

impl Manifest {
    /// Parses and validates a manifest. The error carries the line,
    /// column and table of the mistake ([`ManifestError::render`]).
    pub fn from_toml(text: &str) -> Result<Self, ManifestError> {
        let manifest: Manifest =
            toml::from_str(text).map_err(|e| ManifestError::from_toml(&e, text))?;
        manifest.validate().map_err(|e| e.locate(text))?;
        Ok(manifest)
    }

    /// The WIT package version the manifest declares (`0.1.0` of
    /// `platform:extension@0.1.0`).
    pub fn wit_version(&self) -> Option<&str> {
        self.extension
            .wit
            .strip_prefix(crate::WIT_PACKAGE)
            .and_then(|rest| rest.strip_prefix('@'))
    }

    /// Every capability id the manifest declares.
    pub fn capability_ids(&self) -> BTreeSet<String> {
        let mut ids: BTreeSet<String> = self
            .capabilities
            .http
            .keys()
            .map(|binding| format!("http:{binding}"))
            .collect();
        if self.capabilities.documents.is_some() {
            ids.insert("documents".to_owned());
        }
        ids
    }

    /// The files every release of this manifest must contain, with the
    /// manifest field that names each: the component and the panel entry.
    pub fn required_files(&self) -> impl Iterator<Item = (&'static str, &String)> {
        std::iter::once(("component", &self.extension.component))
            .chain(self.panel.iter().map(|p| ("panel entry", &p.entry)))
    }

    pub fn action(&self, name: &str) -> Option<&Action> {
        self.actions.iter().find(|a| a.name == name)
    }

    /// `schema` with every `#/definitions/<name>` reference replaced by the
    /// definition itself, so clients that do not resolve references (MCP
    /// tool listings) get a self-contained schema.
    pub fn resolve_schema(&self, schema: &Value) -> Value {
        self.resolve_depth(schema, 0)
    }

    fn resolve_depth(&self, schema: &Value, depth: usize) -> Value {
        match schema {
            Value::Object(map) => {
                if let (Some(Value::String(reference)), true) = (map.get("$ref"), depth < 16)
                    && let Some(def) = reference
                        .strip_prefix("#/definitions/")
                        .and_then(|name| self.definitions.get(name))
                {
                    return self.resolve_depth(def, depth + 1);
                }
                Value::Object(
                    map.iter()
                        .map(|(k, v)| (k.clone(), self.resolve_depth(v, depth + 1)))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|v| self.resolve_depth(v, depth + 1))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    fn validate(&self) -> Result<(), ManifestError> {
        let ext = &self.extension;
        if !is_slug(&ext.id, 63) || ext.id.contains('_') {
            return Err(invalid(
                "extension.id",
                "must be 1 to 63 characters of a-z, 0-9 and `-`, starting with a letter",
            ));
        }
        if ext.name.trim().is_empty() || ext.name.len() > 100 {
            return Err(invalid("extension.name", "must be 1 to 100 bytes"));
        }
        let version_ok = {
            let parts: Vec<&str> = ext.version.split('.').collect();
            parts.len() == 3
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        };
        if !version_ok {
            return Err(invalid("extension.version", "must be MAJOR.MINOR.PATCH"));
        }
        if self.wit_version().is_none_or(|v| v.is_empty()) {
            return Err(invalid(
                "extension.wit",
                format!("must be `{}@<version>`", crate::WIT_PACKAGE),
            ));
        }
        if !is_release_path(&ext.component) {
            return Err(invalid(
                "extension.component",
                "must be a relative path inside the release",
            ));
        }
        if let Some(panel) = &self.panel
            && !is_release_path(&panel.entry)
        {
            return Err(invalid(
                "panel.entry",
                "must be a relative path inside the release",
            ));
        }
        for (binding, cap) in &self.capabilities.http {
            let field = format!("capabilities.http.{binding}");
            if !is_slug(binding, 63) {
                return Err(invalid(
                    &field,
                    "binding names are a-z, 0-9, `-` and `_`, starting with a letter",
                ));
            }
            if cap.allow.is_empty() {
                return Err(invalid(
                    format!("{field}.allow"),
                    "must list at least one rule",
                ));
            }
            for (i, rule) in cap.allow.iter().enumerate() {
                if !HTTP_METHODS.contains(&rule.method.as_str()) {
                    return Err(invalid(
                        format!("{field}.allow[{i}].method"),
                        "must be one of GET, POST, PUT, PATCH, DELETE",
                    ));
                }
                PathPattern::parse(&rule.path)
                    .map_err(|e| invalid(format!("{field}.allow[{i}].path"), e.to_string()))?;
            }
        }
        if let Some(docs) = &self.capabilities.documents {
            if docs.collections.is_empty() {
                return Err(invalid(
                    "capabilities.documents.collections",
                    "must list at least one collection",
                ));
            }
            for c in &docs.collections {
                if !is_slug(c, 63) {
                    return Err(invalid(
                        "capabilities.documents.collections",
                        format!("`{c}` must be a-z, 0-9, `-` and `_`, starting with a letter"),
                    ));
                }
            }
        }
        if self.actions.is_empty() {
            return Err(invalid("actions", "must declare at least one action"));
        }
        let declared = self.capability_ids();
        let mut names = BTreeSet::new();
        let mut routes = BTreeSet::new();
        let mut tools = BTreeSet::new();
        for (i, action) in self.actions.iter().enumerate() {
            let field = format!("actions[{i}]");
            let name_ok = !action.name.is_empty()
                && action.name.len() <= 64
                && action
                    .name
                    .split('.')
                    .all(|part| is_slug(part, 64) && !part.contains('-'));
            if !name_ok {
                return Err(invalid(
                    format!("{field}.name"),
                    "must be dot-separated words of a-z, 0-9 and `_`",
                ));
            }
            if !names.insert(action.name.as_str()) {
                return Err(invalid(format!("{field}.name"), "must be unique"));
            }
            if !HTTP_METHODS.contains(&action.http.method.as_str()) {
                return Err(invalid(
                    format!("{field}.http.method"),
                    "must be one of GET, POST, PUT, PATCH, DELETE",
                ));
            }
            PathPattern::parse(&action.http.route)
                .map_err(|e| invalid(format!("{field}.http.route"), e.to_string()))?;
            if !routes.insert((action.http.method.as_str(), action.http.route.as_str())) {
                return Err(invalid(
                    format!("{field}.http"),
                    "method and route must be unique",
                ));
            }
            let tool_ok = action
                .mcp_tool
                .strip_prefix("plugin__")
                .and_then(|rest| rest.split_once("__"))
                .is_some_and(|(ext, tool)| {
                    is_slug(ext, 64)
                        && is_slug(tool, 64)
                        && !ext.contains('-')
                        && !tool.contains('-')
                });
            if !tool_ok {
                return Err(invalid(
                    format!("{field}.mcp_tool"),
                    "must be `plugin__<extension>__<tool>` of a-z, 0-9 and `_`",
                ));
            }
            // The MCP server lists every extension's tools side by side: the
            // middle part names this extension, so no extension can take
            // another one's tool names.
            let own_prefix = format!("plugin__{}__", ext.id.replace('-', "_"));
            if !action.mcp_tool.starts_with(&own_prefix) {
                return Err(invalid(
                    format!("{field}.mcp_tool"),
                    format!(
                        "`{}` must start with `{own_prefix}` (the extension id `{}` with `_` for `-`)",
                        action.mcp_tool, ext.id
                    ),
                ));
            }
            if !tools.insert(action.mcp_tool.as_str()) {
                return Err(invalid(format!("{field}.mcp_tool"), "must be unique"));
            }
            for cap in &action.capabilities {
                if !declared.contains(cap) {
                    return Err(invalid(
                        format!("{field}.capabilities"),
                        format!("`{cap}` is not declared under [capabilities]"),
                    ));
                }
            }
            check_schema(&format!("{field}.input_schema"), &action.input_schema)?;
            if action.input_schema.get("type") != Some(&Value::String("object".into())) {
                return Err(invalid(
                    format!("{field}.input_schema"),
                    "must be a JSON Schema of `type = \"object\"`",
                ));
            }
            if !action.output_schema.is_null() {
                check_schema(&format!("{field}.output_schema"), &action.output_schema)?;
            }
        }
        for (name, schema) in &self.definitions {
            check_schema(&format!("definitions.{name}"), schema)?;
        }
        if let Some(release) = &self.release {
            for path in release.files.keys() {
                if !is_release_path(path) {
                    return Err(invalid(
                        "release.files",
                        format!("`{path}` is not a relative path inside the release"),
                    ));
                }
            }
            for digest in release.files.values() {
                if digest.len() != 64
                    || !digest
                        .chars()
                        .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
                {
                    return Err(invalid(
                        "release.files",
                        "digests must be 64 lowercase hex characters",
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = include_str!("../../../manifest.toml");

    #[test]
    fn the_workspace_manifest_is_valid() {
        let m = Manifest::from_toml(SOURCE).unwrap();
        assert_eq!(m.extension.id, "managed-analytics");
        assert_eq!(m.wit_version(), Some(crate::WIT_VERSION));
        assert_eq!(m.actions.len(), 3);
        assert!(m.capability_ids().contains("http:provider"));
        let stats = m.action("analytics.stats").unwrap();
        let resolved = m.resolve_schema(&stats.output_schema);
        assert_eq!(resolved["properties"]["visitors"]["type"], "integer");
    }

    #[test]
    fn errors_name_the_field() {
        let bad = SOURCE.replace(
            "capabilities = [\"documents\"]",
            "capabilities = [\"http:other\"]",
        );
        let err = Manifest::from_toml(&bad).unwrap_err().to_string();
        assert!(err.contains("actions[1].capabilities"), "{err}");
        assert!(err.contains("http:other"), "{err}");

        let bad = SOURCE.replace("id = \"managed-analytics\"", "id = \"Managed Analytics\"");
        let err = Manifest::from_toml(&bad).unwrap_err().to_string();
        assert!(err.contains("extension.id"), "{err}");

        let bad = SOURCE.replace(
            "plugin__managed_analytics__stats",
            "plugin__other_ext__history",
        );
        let err = Manifest::from_toml(&bad).unwrap_err().to_string();
        assert_eq!(
            err,
            "manifest.toml:82:12: [[actions]] #3 (analytics.stats): field `actions[2].mcp_tool`: \
             `plugin__other_ext__history` must start with \
             `plugin__managed_analytics__` (the extension id `managed-analytics` with `_` for `-`)"
        );

        let bad = SOURCE.replace("[extension]", "[extension]\nunexpected = 1");
        assert!(matches!(
            Manifest::from_toml(&bad).unwrap_err().kind(),
            crate::ManifestErrorKind::Syntax(_)
        ));
    }

    #[test]
    fn release_paths_stay_inside_the_release() {
        for ok in ["plugin.wasm", "panel/index.html"] {
            assert!(is_release_path(ok));
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "a//b",
            "a\\b",
            "c:x",
            "./a",
        ] {
            assert!(!is_release_path(bad), "{bad}");
        }
    }
}
