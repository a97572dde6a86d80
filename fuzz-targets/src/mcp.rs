//! The MCP request decoder and the action input check behind every surface.

use std::sync::OnceLock;

use extension_release::Manifest;
use host_sim::serve::{PROJECT_ARGUMENT, tool_call_input};
use host_sim::spec::{self, ActionSpec, ExtensionSpec, MAX_RULE_BYTES};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use serde_json::Value;

/// The workspace extension's actions, with their compiled schemas.
fn extension() -> &'static ExtensionSpec {
    static SPEC: OnceLock<ExtensionSpec> = OnceLock::new();
    SPEC.get_or_init(|| {
        let manifest = Manifest::from_toml(include_str!("../../manifest.toml"))
            .expect("the workspace manifest");
        ExtensionSpec::from_manifest(&manifest).expect("its schemas compile")
    })
}

/// Checks `input` as `Host::invoke` does: never a panic; a refusal names
/// where in the input and which rule, within its bound.
fn check_input(action: &ActionSpec, input: &Value) {
    if let Err(message) = spec::check(&action.input, input, "input") {
        assert!(message.starts_with("input"), "{message}");
        let (location, rule) = message.split_once(": ").expect("location: rule");
        assert!(!location.is_empty());
        assert!(
            rule.len() <= MAX_RULE_BYTES + '…'.len_utf8(),
            "a rule of {} bytes",
            rule.len()
        );
    }
}

/// An action's input (first byte picks the action, the rest is its JSON)
/// against the manifest's input schema, as every surface checks it before
/// the guest runs.
pub fn action_input(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Ok(input) = serde_json::from_slice::<Value>(rest) else {
        return;
    };
    let actions: Vec<&ActionSpec> = extension().actions.values().collect();
    check_input(actions[usize::from(pick) % actions.len()], &input);
}

/// A JSON-RPC message to `/mcp`, decoded as the MCP server decodes one; a
/// `tools/call` is split into the project and the action's input as the
/// server does (the reserved `project_id` never reaches the action), and
/// the input is checked against the tool's action.
pub fn mcp_request(data: &[u8]) {
    let Ok(message) = serde_json::from_slice::<ClientJsonRpcMessage>(data) else {
        return;
    };
    let JsonRpcMessage::Request(request) = message else {
        return;
    };
    let ClientRequest::CallToolRequest(call) = request.request else {
        return;
    };
    let name = call.params.name.to_string();
    let Ok((_project, input)) = tool_call_input(call.params.arguments) else {
        return;
    };
    let Value::Object(arguments) = &input else {
        panic!("the action input is not an object: {input}");
    };
    assert!(!arguments.contains_key(PROJECT_ARGUMENT));
    if let Some(action) = extension()
        .actions
        .values()
        .find(|a| a.info.mcp_tool == name)
    {
        check_input(action, &input);
    }
}
