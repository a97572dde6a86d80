//! What the host needs from a verified release's manifest, prepared once per
//! installed release: the declared capabilities, and per action the
//! capabilities it needs and its compiled input/output JSON Schemas.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use extension_release::{Manifest, PathPattern};
use serde_json::Value;

/// The capability id of the document service.
pub const DOCUMENTS: &str = "documents";

/// The capability id of an HTTP binding.
pub fn http_capability(binding: &str) -> String {
    format!("http:{binding}")
}

/// The OAuth scopes of the MCP authorization server, in the order they
/// are offered: `read` (the actions that read: configuration, stats) and
/// `write` (the actions that change something: provision).
pub const SCOPES: [&str; 2] = ["read", "write"];

/// The scope an action needs: `read` for a `GET` action, `write` for any
/// other method.
pub fn required_scope(http_method: &str) -> &'static str {
    if http_method.eq_ignore_ascii_case("GET") {
        SCOPES[0]
    } else {
        SCOPES[1]
    }
}

/// Whether a space-separated scope list holds `scope`.
pub fn scope_contains(granted: &str, scope: &str) -> bool {
    granted.split_ascii_whitespace().any(|s| s == scope)
}

/// One `allow` rule of an HTTP capability.
#[derive(Debug)]
pub struct HttpRule {
    pub method: String,
    pub pattern: PathPattern,
}

impl HttpRule {
    pub fn matches(&self, method: &str, path: &str) -> bool {
        self.method.eq_ignore_ascii_case(method) && self.pattern.matches(path)
    }
}

/// An action: the capabilities it needs, its schemas, and how the surfaces
/// present it.
#[derive(Debug)]
pub struct ActionSpec {
    pub name: String,
    pub capabilities: Vec<String>,
    pub input: jsonschema::Validator,
    pub output: Option<jsonschema::Validator>,
    pub info: ActionInfo,
}

/// An action as the surfaces present it: its HTTP route, its MCP tool, and
/// self-contained schemas (every `#/definitions/…` reference resolved).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ActionInfo {
    pub extension: String,
    pub name: String,
    pub description: String,
    /// Upper-case HTTP method of the action's route.
    pub http_method: String,
    /// The route below the project's API base, e.g. `/stats`.
    pub http_route: String,
    pub mcp_tool: String,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
}

/// The parts of a manifest the host enforces.
#[derive(Debug)]
pub struct ExtensionSpec {
    pub id: String,
    pub version: String,
    pub component: String,
    /// Declared HTTP bindings and their allow rules.
    pub http: BTreeMap<String, Vec<HttpRule>>,
    /// Declared document collections (`None`: no `documents` capability).
    pub collections: Option<BTreeSet<String>>,
    pub actions: BTreeMap<String, ActionSpec>,
    /// Every action as the surfaces present it, in name order (shared, so
    /// a surface's lookup copies nothing).
    pub action_infos: Arc<[ActionInfo]>,
}

impl ExtensionSpec {
    /// Prepares a manifest: parses the path patterns and compiles every
    /// action's schemas (with the manifest's `definitions` in scope).
    pub fn from_manifest(manifest: &Manifest) -> Result<Self, String> {
        let mut http = BTreeMap::new();
        for (binding, capability) in &manifest.capabilities.http {
            let mut rules = Vec::new();
            for rule in &capability.allow {
                let pattern = PathPattern::parse(&rule.path)
                    .map_err(|e| format!("capability http:{binding}: path {}: {e}", rule.path))?;
                rules.push(HttpRule {
                    method: rule.method.to_ascii_uppercase(),
                    pattern,
                });
            }
            http.insert(binding.clone(), rules);
        }
        let collections = manifest
            .capabilities
            .documents
            .as_ref()
            .map(|d| d.collections.iter().cloned().collect());
        let definitions =
            serde_json::to_value(&manifest.definitions).map_err(|e| format!("definitions: {e}"))?;
        let declared: BTreeSet<String> = manifest.capability_ids().into_iter().collect();
        let mut actions = BTreeMap::new();
        for action in &manifest.actions {
            for capability in &action.capabilities {
                if !declared.contains(capability) {
                    return Err(format!(
                        "action {} needs capability {capability}, which the manifest does not declare",
                        action.name
                    ));
                }
            }
            let input = compile_schema(&action.input_schema, &definitions)
                .map_err(|e| format!("action {}: input_schema: {e}", action.name))?;
            let output = match &action.output_schema {
                Value::Null => None,
                schema => Some(
                    compile_schema(schema, &definitions)
                        .map_err(|e| format!("action {}: output_schema: {e}", action.name))?,
                ),
            };
            actions.insert(
                action.name.clone(),
                ActionSpec {
                    name: action.name.clone(),
                    capabilities: action.capabilities.clone(),
                    input,
                    output,
                    info: ActionInfo {
                        extension: manifest.extension.id.clone(),
                        name: action.name.clone(),
                        description: action.description.clone(),
                        http_method: action.http.method.to_ascii_uppercase(),
                        http_route: action.http.route.clone(),
                        mcp_tool: action.mcp_tool.clone(),
                        input_schema: manifest.resolve_schema(&action.input_schema),
                        output_schema: match &action.output_schema {
                            Value::Null => None,
                            schema => Some(manifest.resolve_schema(schema)),
                        },
                    },
                },
            );
        }
        let action_infos = actions.values().map(|a| a.info.clone()).collect();
        Ok(Self {
            action_infos,
            id: manifest.extension.id.clone(),
            version: manifest.extension.version.clone(),
            component: manifest.extension.component.clone(),
            http,
            collections,
            actions,
        })
    }

    /// The allow rules of a declared binding.
    pub fn http_rules(&self, binding: &str) -> Option<&[HttpRule]> {
        self.http.get(binding).map(Vec::as_slice)
    }

    /// The binding whose public origin the context reports as
    /// `provider-origin`: `provider` if declared, else the first one.
    pub fn provider_binding(&self) -> Option<&str> {
        if self.http.contains_key("provider") {
            Some("provider")
        } else {
            self.http.keys().next().map(String::as_str)
        }
    }
}

fn compile_schema(schema: &Value, definitions: &Value) -> Result<jsonschema::Validator, String> {
    let mut schema = schema.clone();
    if let (Value::Object(map), Value::Object(defs)) = (&mut schema, definitions)
        && !defs.is_empty()
        && !map.contains_key("definitions")
    {
        map.insert("definitions".into(), Value::Object(defs.clone()));
    }
    jsonschema::validator_for(&schema).map_err(|e| e.to_string())
}

/// The longest rule text of a refusal, in bytes (then cut, with `…`).
pub const MAX_RULE_BYTES: usize = 300;

/// Validates `value` against `validator`; the message names the first
/// failing location and rule.
pub fn check(validator: &jsonschema::Validator, value: &Value, what: &str) -> Result<(), String> {
    // The boolean check is the fast path; errors are collected only when
    // there is one to report.
    if validator.is_valid(value) {
        return Ok(());
    }
    match validator.iter_errors(value).next() {
        None => Ok(()),
        Some(error) => {
            let location = error.instance_path().to_string();
            let location = if location.is_empty() {
                what.to_string()
            } else {
                format!("{what} at {location}")
            };
            let mut message = error.masked().to_string();
            if message.len() > MAX_RULE_BYTES {
                // At a character boundary: the rule may quote the input's
                // property names, in any script.
                message.truncate(message.floor_char_boundary(MAX_RULE_BYTES));
                message.push('…');
            }
            Err(format!("{location}: {message}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the fuzz target `action_input`: the rule quotes property
    /// names, and a long one in a non-Latin script was cut inside a
    /// character (a panic instead of a refusal).
    #[test]
    fn a_long_rule_is_cut_at_a_character_boundary() {
        for name in ["é".repeat(200), format!("x{}", "語".repeat(150))] {
            let schema = serde_json::json!({"type": "object", "required": [name]});
            let validator = compile_schema(&schema, &Value::Null).unwrap();
            let message = check(&validator, &serde_json::json!({}), "input").unwrap_err();
            let (location, rule) = message.split_once(": ").unwrap();
            assert_eq!(location, "input");
            let first = name.chars().next().unwrap();
            assert!(rule.starts_with(&format!("\"{first}")), "{rule}");
            assert!(rule.ends_with('…'), "{rule}");
            assert!(
                rule.len() <= MAX_RULE_BYTES + '…'.len_utf8(),
                "{}",
                rule.len()
            );
        }
    }
}
