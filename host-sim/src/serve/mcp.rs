//! The host's MCP server: `/mcp`, streamable HTTP, stateless.
//!
//! Every request carries `Authorization: Bearer <token>`; [`authenticate`]
//! checks it before the MCP layer sees the request and answers a missing,
//! unknown or expired token, or one minted for another resource, with HTTP
//! 401 in the one error shape and a `WWW-Authenticate` challenge naming the
//! Protected Resource Metadata and the scopes (RFC 9728), so a client can
//! discover the authorization server (`serve::oauth`). A `tools/call` that
//! needs a scope the token was not granted is HTTP 403
//! `insufficient_scope` naming the scope, before it reaches the MCP layer
//! (`Host::invoke` refuses it too). Without sessions each POST stands on
//! its own, so a revoked grant, a disconnected app or an expired token
//! takes effect on the next request.
//!
//! The tools are the caller's: one per action of every extension granted to
//! a project the token reaches, named by the manifest's `mcp_tool`, with
//! the action's input schema plus a required `project_id` (the project to
//! act on). A call runs through [`Host::invoke`] like every other surface;
//! its output is the result's `structuredContent`, a refusal or failure is
//! an `isError` result holding the error shape.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::middleware::{self, Next};
use axum::response::Response;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

use super::recent;
use super::{
    Shared, bearer, caller_access, host_query, invoke_error_response, new_request_id, oauth,
};
use crate::error::InvokeError;
use crate::host::{Caller, Host, HostError, InvokeRequest};
use crate::spec::{self, ActionInfo};
use crate::state::TokenAccess;

/// The argument every tool takes besides the action's own input.
/// The argument every tool adds to its action's input: the project to act on.
pub const PROJECT_ARGUMENT: &str = "project_id";

pub(super) fn routes(shared: Shared) -> Router {
    let host = shared.host.clone();
    let developer_log = shared.develop.clone();
    // Stateless with JSON answers: each POST is authenticated and handled
    // on its own, and nothing outlives it. The `Host` header check guards
    // unauthenticated loopback servers against DNS rebinding; here every
    // request needs a bearer token a rebinding page cannot know, and the
    // host may be served under any name, so it is off.
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .disable_allowed_hosts();
    let service = StreamableHttpService::new(
        move || {
            Ok(McpServer {
                host: host.clone(),
                develop: developer_log.clone(),
            })
        },
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Router::new()
        .route_service("/mcp", service)
        .route_layer(middleware::from_fn_with_state(shared, authenticate))
}

/// Who sent an MCP request, as [`authenticate`] found it.
#[derive(Clone)]
struct Authenticated {
    caller: Caller,
    access: TokenAccess,
}

/// Largest MCP request body read (a JSON-RPC message).
const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// Lets only requests with a valid bearer token for this resource through,
/// with the caller attached; everything else is HTTP 401 with the
/// resource's challenge, or 403 for a tool the token's scopes do not cover.
async fn authenticate(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    let request_id = new_request_id();
    let resource = oauth::mcp_resource(&shared, request.headers());
    let headers = request.headers().clone();
    let unauthenticated = |token_sent: bool| {
        let mut response = invoke_error_response(&InvokeError::Unauthenticated, &request_id);
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            oauth::mcp_challenge(&shared, &headers, token_sent),
        );
        response
    };
    let Some(token) = bearer(request.headers()) else {
        return unauthenticated(false);
    };
    let caller = Caller::at_resource(token.token(), resource);
    let access = match caller_access(&shared.host, &caller).await {
        Ok(access) => access,
        Err(InvokeError::Unauthenticated) => return unauthenticated(true),
        Err(error) => return invoke_error_response(&error, &request_id),
    };
    // An operator-issued token has every scope: its request goes on as it
    // came. An authorization-server token's `tools/call` is read first.
    let Some(granted) = access.scope.clone() else {
        let mut request = request;
        request
            .extensions_mut()
            .insert(Authenticated { caller, access });
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(bytes) => bytes,
        Err(_) => {
            let error = InvokeError::LimitExceeded {
                limit: crate::error::Limit::InputBytes,
                message: format!("an MCP request may be at most {MAX_REQUEST_BYTES} bytes"),
            };
            return invoke_error_response(&error, &request_id);
        }
    };
    if let Some(needed) = needed_scope(&shared, &access, &bytes).await
        && !spec::scope_contains(&granted, needed)
    {
        let error = InvokeError::InsufficientScope {
            scope: needed.to_string(),
        };
        let mut response = invoke_error_response(&error, &request_id);
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            oauth::insufficient_scope_challenge(&shared, &parts.headers, &granted, needed),
        );
        return response;
    }
    let mut request = Request::from_parts(parts, axum::body::Body::from(bytes));
    request
        .extensions_mut()
        .insert(Authenticated { caller, access });
    next.run(request).await
}

/// The scope a `tools/call` message needs (see `spec::required_scope`);
/// `None` for every other message, and for a tool the caller does not have
/// (the MCP layer answers that one).
async fn needed_scope(shared: &Shared, access: &TokenAccess, body: &[u8]) -> Option<&'static str> {
    let message: Value = serde_json::from_slice(body).ok()?;
    if message.get("method")?.as_str()? != "tools/call" {
        return None;
    }
    let name = message.get("params")?.get("name")?.as_str()?.to_string();
    let access = access.clone();
    let tools = host_query(&shared.host, "listing a caller's MCP tools", move |host| {
        caller_tools(host, &access)
    })
    .await
    .ok()?;
    let tool = tools.into_iter().find(|t| t.action.mcp_tool == name)?;
    Some(spec::required_scope(&tool.action.http_method))
}

/// One tool a caller may use: an action and the caller's projects that
/// have its extension granted.
#[derive(Debug, Clone)]
struct CallerTool {
    action: ActionInfo,
    projects: Vec<String>,
}

impl CallerTool {
    fn definition(&self) -> Tool {
        let mut tool = Tool::new(
            self.action.mcp_tool.clone(),
            self.action.description.clone(),
            input_schema(&self.action, &self.projects),
        );
        if let Some(Value::Object(output)) = &self.action.output_schema
            && output.get("type") == Some(&Value::String("object".into()))
        {
            tool = tool.with_raw_output_schema(Arc::new(output.clone()));
        }
        tool
    }
}

/// The action's input schema with the required `project_id` added.
fn input_schema(action: &ActionInfo, projects: &[String]) -> JsonObject {
    let mut schema = match &action.input_schema {
        Value::Object(schema) => schema.clone(),
        // The manifest validator admits only object schemas.
        _ => Map::from_iter([("type".to_string(), json!("object"))]),
    };
    let properties = schema
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(properties) = properties {
        properties.insert(
            PROJECT_ARGUMENT.into(),
            json!({
                "type": "string",
                "description": format!(
                    "The project to act on: one of your projects that have {} granted.",
                    action.extension
                ),
                "enum": projects,
            }),
        );
    }
    let mut required = vec![Value::String(PROJECT_ARGUMENT.into())];
    if let Some(Value::Array(declared)) = schema.get("required") {
        required.extend(declared.iter().cloned());
    }
    schema.insert("required".into(), Value::Array(required));
    schema
}

/// The caller's tools, in extension and then manifest-name order. An action
/// whose input already declares `project_id` is left out (the name is the
/// host's), and so is a tool name another extension already uses.
fn caller_tools(host: &Host, access: &TokenAccess) -> Result<Vec<CallerTool>, HostError> {
    let mut projects_of: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (project, extensions) in &access.projects {
        for extension in extensions {
            projects_of
                .entry(extension.as_str())
                .or_default()
                .push(project.clone());
        }
    }
    let mut tools: Vec<CallerTool> = Vec::new();
    for (extension, projects) in projects_of {
        let Some(actions) = host.actions(extension)? else {
            continue;
        };
        for action in actions.iter().cloned() {
            let declared = action.input_schema.get("properties");
            if declared.and_then(|p| p.get(PROJECT_ARGUMENT)).is_some() {
                tracing::warn!(
                    extension = %action.extension, action = %action.name,
                    "the action's input declares project_id, which the MCP server reserves; no tool"
                );
                continue;
            }
            if tools.iter().any(|t| t.action.mcp_tool == action.mcp_tool) {
                tracing::warn!(
                    extension = %action.extension, tool = %action.mcp_tool,
                    "another extension already offers this MCP tool name; no tool"
                );
                continue;
            }
            tools.push(CallerTool {
                action,
                projects: projects.clone(),
            });
        }
    }
    Ok(tools)
}

/// The MCP handler; one per request (the service is stateless).
#[derive(Clone)]
struct McpServer {
    host: Arc<Host>,
    /// The developer view's recent invocations (listed in a development host).
    develop: Arc<recent::DeveloperLog>,
}

impl McpServer {
    /// The caller [`authenticate`] attached to the HTTP request.
    fn authenticated(context: &RequestContext<RoleServer>) -> Result<Authenticated, ErrorData> {
        context
            .extensions
            .get::<Parts>()
            .and_then(|parts| parts.extensions.get::<Authenticated>())
            .cloned()
            .ok_or_else(|| {
                tracing::error!("an MCP request arrived without an authenticated caller");
                ErrorData::internal_error("the request is not authenticated", None)
            })
    }

    async fn tools(&self, access: TokenAccess) -> Result<Vec<CallerTool>, ErrorData> {
        host_query(&self.host, "listing a caller's MCP tools", move |host| {
            caller_tools(host, &access)
        })
        .await
        .map_err(|error| ErrorData::internal_error(error.to_string(), None))
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("host-sim", env!("CARGO_PKG_VERSION"))
                    .with_title("host-sim extension host"),
            )
            .with_instructions(
                "Tools of the extensions granted to your projects. Every tool takes \
                 `project_id`, the project to act on; the other arguments are the \
                 extension action's input. A refused or failed call is an isError \
                 result with {\"error\":{\"code\",\"message\"},\"request_id\"}.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let authenticated = Self::authenticated(&context)?;
        let tools = self.tools(authenticated.access).await?;
        let mut result =
            ListToolsResult::with_all_items(tools.iter().map(CallerTool::definition).collect());
        // The list is the caller's and changes with every grant or revoke.
        result.ttl_ms = Some(0);
        result.cache_scope = Some(CacheScope::Private);
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let authenticated = Self::authenticated(&context)?;
        let tools = self.tools(authenticated.access).await?;
        let Some(tool) = tools
            .into_iter()
            .find(|t| t.action.mcp_tool == request.name)
        else {
            return Err(ErrorData::invalid_params(
                format!("no tool {} is available to this token", request.name),
                None,
            ));
        };
        let (project, input) = tool_call_input(request.arguments)?;
        let invocation = recent::invoke_listed(
            &self.host,
            &self.develop,
            authenticated.caller,
            InvokeRequest {
                extension: tool.action.extension,
                project,
                action: tool.action.name,
                input,
                generation: None,
            },
            recent::Via::Mcp,
        )
        .await;
        let result = match invocation.result {
            Ok(output) => CallToolResult::structured(output),
            Err(error) => {
                let mut body = error.to_json();
                body["request_id"] = Value::String(invocation.request_id);
                CallToolResult::structured_error(body)
            }
        };
        Ok(result.into())
    }
}

/// A tool call's arguments split into the project to act on (the
/// reserved `project_id`, a string) and the action's input (every other
/// argument, as an object).
pub fn tool_call_input(arguments: Option<JsonObject>) -> Result<(String, Value), ErrorData> {
    let mut arguments = arguments.unwrap_or_default();
    match arguments.remove(PROJECT_ARGUMENT) {
        Some(Value::String(project)) => Ok((project, Value::Object(arguments))),
        Some(_) => Err(ErrorData::invalid_params(
            "argument project_id must be a string: the project to act on",
            None,
        )),
        None => Err(ErrorData::invalid_params(
            "argument project_id is required: the project to act on",
            None,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(input_schema: Value) -> ActionInfo {
        ActionInfo {
            extension: "managed-analytics".into(),
            name: "analytics.stats".into(),
            description: "Stats.".into(),
            http_method: "GET".into(),
            http_route: "/stats".into(),
            mcp_tool: "plugin__managed_analytics__stats".into(),
            input_schema,
            output_schema: None,
        }
    }

    #[test]
    fn the_input_schema_gains_a_required_project_id_of_the_callers_projects() {
        let stats = action(json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["start_at", "end_at"],
            "properties": {"start_at": {"type": "integer"}, "end_at": {"type": "integer"}},
        }));
        let schema = Value::Object(input_schema(&stats, &["shop".into(), "blog".into()]));
        assert_eq!(
            schema["required"],
            json!(["project_id", "start_at", "end_at"])
        );
        assert_eq!(schema["properties"]["project_id"]["type"], "string");
        assert_eq!(
            schema["properties"]["project_id"]["enum"],
            json!(["shop", "blog"])
        );
        assert_eq!(schema["properties"]["start_at"], json!({"type": "integer"}));
        assert_eq!(schema["additionalProperties"], false);
    }

    #[test]
    fn an_input_without_properties_still_gets_project_id() {
        let schema = Value::Object(input_schema(
            &action(json!({"type": "object"})),
            &["shop".into()],
        ));
        assert_eq!(schema["required"], json!(["project_id"]));
        assert_eq!(schema["properties"]["project_id"]["enum"], json!(["shop"]));
    }

    #[test]
    fn only_object_output_schemas_become_the_tools_output_schema() {
        let mut tool = CallerTool {
            action: action(json!({"type": "object"})),
            projects: vec!["shop".into()],
        };
        tool.action.output_schema = Some(json!({"type": "object", "properties": {}}));
        assert!(tool.definition().output_schema.is_some());
        tool.action.output_schema = Some(json!({"type": "array"}));
        assert!(tool.definition().output_schema.is_none());
    }
}
