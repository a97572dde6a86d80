//! The console's developer view, in a development host (`host-sim dev`)
//! only: an extension's actions, each with a form built from its input
//! schema; the recent invocations (from those forms, the HTTP API and MCP,
//! see [`invoke_listed`]) with their output or error and the guest's log
//! lines; and the project's documents.
//!
//! The forms post to the console (same origin, the session's token), which
//! converts the fields by the schema's types as the API converts a query
//! string, runs the action and shows the page again with the invocation on
//! top. Nothing here exists in an operator's host.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use serde_json::{Map, Value};

use super::console::{develop_url, escape, header_bar, page, problem_page, same_origin, signed_in};
use super::recent::{DeveloperLog, Recent, Via, invoke_listed, now};
use super::{Shared, api, host_query};
use crate::error::InvokeError;
use crate::host::{Caller, InvokeRequest};
use crate::spec::ActionInfo;

/// Longest document body shown.
const MAX_BODY: usize = 2000;

impl DeveloperLog {
    fn render(&self, key: &(String, String)) -> String {
        let all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match all.get(key) {
            Some(list) if !list.is_empty() => list.iter().map(render_recent).collect(),
            _ => "<p>No invocation yet: run an action above, or call it over HTTP or MCP.</p>\n"
                .to_owned(),
        }
    }
}

pub(super) fn routes(shared: Shared) -> Router {
    Router::new()
        .route(
            "/console/projects/{project}/extensions/{extension}/develop",
            get(view).post(run),
        )
        .with_state(shared)
}

/// The signed-in caller with access to the extension in the project, or
/// the page to answer instead.
async fn caller_for(
    shared: &Shared,
    headers: &HeaderMap,
    project: &str,
    extension: &str,
) -> Result<(Caller, String), Response> {
    if !shared.host.is_development() {
        return Err(StatusCode::NOT_FOUND.into_response());
    }
    let (caller, access) = signed_in(
        shared,
        headers,
        StatusCode::UNAUTHORIZED,
        Some("Sign in to open the developer view."),
    )
    .await?;
    let granted = access
        .projects
        .get(project)
        .is_some_and(|extensions| extensions.iter().any(|e| e == extension));
    if !granted {
        return Err(problem_page(&InvokeError::NotGranted {
            extension: extension.to_owned(),
            project: project.to_owned(),
        }));
    }
    Ok((caller, access.user))
}

async fn actions_of(shared: &Shared, extension: &str) -> Result<Vec<ActionInfo>, Response> {
    let ext = extension.to_owned();
    match host_query(
        &shared.host,
        "reading an extension's actions",
        move |host| host.actions(&ext),
    )
    .await
    {
        Ok(Some(actions)) => Ok(actions.to_vec()),
        Ok(None) => Err(problem_page(&InvokeError::NotInstalled {
            extension: extension.to_owned(),
        })),
        Err(error) => Err(problem_page(&error)),
    }
}

async fn view(
    State(shared): State<Shared>,
    Path((project, extension)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let user = match caller_for(&shared, &headers, &project, &extension).await {
        Ok((_, user)) => user,
        Err(response) => return response,
    };
    let actions = match actions_of(&shared, &extension).await {
        Ok(actions) => actions,
        Err(response) => return response,
    };
    let (p, e) = (project.clone(), extension.clone());
    let documents = match host_query(&shared.host, "reading a project's documents", move |host| {
        Ok(host.state().documents(&p)?)
    })
    .await
    {
        Ok(documents) => documents
            .into_iter()
            .filter(|d| d.extension_id == e)
            .collect::<Vec<_>>(),
        Err(error) => return problem_page(&error),
    };
    let url = escape(&develop_url(&project, &extension));
    let forms: String = actions
        .iter()
        .enumerate()
        .map(|(i, action)| action_form(i, action, &url))
        .collect();
    let recent = shared.develop.render(&(project.clone(), extension.clone()));
    let rows: String = documents
        .iter()
        .map(|d| {
            let mut body = d.document.body.clone();
            crate::limits::cut_with_ellipsis(&mut body, MAX_BODY);
            format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td><pre tabindex=\"0\">{}</pre></td></tr>\n",
                escape(&d.collection),
                escape(&d.id),
                d.document.revision,
                escape(&body)
            )
        })
        .collect();
    let documents = if rows.is_empty() {
        "<p>The extension has stored no document in this project.</p>".to_owned()
    } else {
        format!(
            "<table class=\"documents\">\n<caption>The extension's documents in {}</caption>\n\
             <thead><tr><th scope=\"col\">Collection</th><th scope=\"col\">Id</th>\
             <th scope=\"col\">Revision</th><th scope=\"col\">Body</th></tr></thead>\n\
             <tbody>\n{rows}</tbody>\n</table>",
            escape(&project)
        )
    };
    page(
        StatusCode::OK,
        &format!("{extension} · developer view"),
        &format!(
            "{bar}\n<main class=\"develop\">\n<h1>{e} in {p}: developer view</h1>\n\
             <p><a href=\"/console/projects/{p}\">Back to the project</a></p>\n\
             <section aria-labelledby=\"actions-heading\">\n<h2 id=\"actions-heading\">Actions</h2>\n\
             {forms}</section>\n\
             <section aria-labelledby=\"recent-heading\">\n<h2 id=\"recent-heading\">Recent invocations</h2>\n\
             {recent}</section>\n\
             <section aria-labelledby=\"documents-heading\">\n<h2 id=\"documents-heading\">Documents</h2>\n\
             {documents}\n</section>\n</main>",
            bar = header_bar(&user),
            e = escape(&extension),
            p = escape(&project),
        ),
    )
}

/// The form of one action: a field per top-level property of its input
/// schema, typed by the property's `type` (and `enum`).
fn action_form(index: usize, action: &ActionInfo, url: &str) -> String {
    let schema = &action.input_schema;
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let empty = Map::new();
    let properties = schema["properties"].as_object().unwrap_or(&empty);
    let mut fields = String::new();
    for (n, (name, property)) in properties.iter().enumerate() {
        let id = format!("a{index}-f{n}");
        let is_required = required.contains(&name.as_str());
        let field_name = format!("input.{name}");
        let describe = property["description"]
            .as_str()
            .map(|d| format!("<small id=\"{id}-d\">{}</small>", escape(d)));
        let described = if describe.is_some() {
            format!(" aria-describedby=\"{id}-d\"")
        } else {
            String::new()
        };
        let req = if is_required { " required" } else { "" };
        let kind = property["type"].as_str().unwrap_or("string");
        let control = if let Some(options) = property["enum"].as_array() {
            let mut html = format!(
                "<select id=\"{id}\" name=\"{}\"{req}{described}>",
                escape(&field_name)
            );
            if !is_required {
                html.push_str("<option value=\"\">(none)</option>");
            }
            for option in options {
                let text = option
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| option.to_string());
                html.push_str(&format!("<option>{}</option>", escape(&text)));
            }
            html + "</select>"
        } else {
            match kind {
                "boolean" => format!(
                    "<select id=\"{id}\" name=\"{}\"{req}{described}>\
                     <option value=\"\">(none)</option><option>true</option><option>false</option></select>",
                    escape(&field_name)
                ),
                "integer" | "number" => format!(
                    "<input id=\"{id}\" name=\"{}\" type=\"number\" step=\"{}\"{req}{described}>",
                    escape(&field_name),
                    if kind == "integer" { "1" } else { "any" }
                ),
                "object" | "array" => format!(
                    "<textarea id=\"{id}\" name=\"{}\" rows=\"3\" spellcheck=\"false\"{req}{described}></textarea>",
                    escape(&field_name)
                ),
                _ => format!(
                    "<input id=\"{id}\" name=\"{}\" type=\"text\"{req}{described}>",
                    escape(&field_name)
                ),
            }
        };
        fields.push_str(&format!(
            "<div class=\"field\"><label for=\"{id}\">{}{}</label>{control}{}</div>\n",
            escape(name),
            if is_required { " (required)" } else { "" },
            describe.unwrap_or_default()
        ));
    }
    format!(
        "<section class=\"dev-action\" aria-labelledby=\"a{index}\">\n\
         <h3 id=\"a{index}\">{name}</h3>\n<p>{description}</p>\n\
         <p class=\"route\">API <code>{method} {route}</code>, MCP tool <code>{tool}</code></p>\n\
         <form method=\"post\" action=\"{url}\">\n<input type=\"hidden\" name=\"_action\" value=\"{name}\">\n\
         {fields}<button type=\"submit\">Run {name}</button>\n</form>\n</section>\n",
        name = escape(&action.name),
        description = escape(&action.description),
        method = escape(&action.http_method),
        route = escape(&action.http_route),
        tool = escape(&action.mcp_tool),
    )
}

fn render_recent(recent: &Recent) -> String {
    let pretty = |value: &Value| serde_json::to_string_pretty(value).unwrap_or_default();
    let (class, status, result_label, result) = match &recent.outcome {
        Ok(output) => ("ok", "ok".to_owned(), "Output", pretty(output)),
        Err((code, message)) => (
            "failed",
            code.clone(),
            "Error",
            format!("{code}: {message}"),
        ),
    };
    let log = if recent.log.is_empty() {
        "<p>No log lines.</p>".to_owned()
    } else {
        let lines: String = recent
            .log
            .iter()
            .map(|line| {
                format!(
                    "<li><span class=\"level\">{}</span> {}</li>",
                    line.level,
                    escape(&line.message)
                )
            })
            .collect();
        format!("<ul class=\"log\">{lines}</ul>")
    };
    format!(
        "<article class=\"invocation {class}\">\n<h3>{action} <span class=\"status\">{status}</span></h3>\n\
         <p class=\"meta\">{at}, from the {via}, request {request}</p>\n\
         <h4>Input</h4><pre tabindex=\"0\">{input}</pre>\n<h4>{result_label}</h4><pre tabindex=\"0\">{result}</pre>\n\
         <h4>Log</h4>{log}\n</article>\n",
        action = escape(&recent.action),
        status = escape(&status),
        at = escape(&recent.at),
        via = recent.via.label(),
        request = escape(&recent.request_id),
        input = escape(&pretty(&recent.input)),
        result = escape(&result),
    )
}

/// The action's input from the form's `input.<property>` fields: empty
/// fields left out, objects and arrays read as JSON, the rest converted by
/// the schema's types as the API converts a query string.
fn form_input(fields: &[(String, String)], schema: &Value) -> Result<Value, String> {
    let mut scalars = Vec::new();
    let mut structured = Map::new();
    for (name, value) in fields {
        let Some(property) = name.strip_prefix("input.") else {
            continue;
        };
        if value.trim().is_empty() {
            continue;
        }
        let kind = schema["properties"][property]["type"].as_str();
        if matches!(kind, Some("object" | "array")) {
            let parsed: Value = serde_json::from_str(value)
                .map_err(|e| format!("{property}: is not valid JSON: {e}"))?;
            structured.insert(property.to_owned(), parsed);
        } else {
            scalars.push((property, value.as_str()));
        }
    }
    let mut input = api::typed_input(scalars, schema).map_err(|(_, _, m)| m)?;
    if let Value::Object(object) = &mut input {
        object.extend(structured);
    }
    Ok(input)
}

async fn run(
    State(shared): State<Shared>,
    Path((project, extension)): Path<(String, String)>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let caller = match caller_for(&shared, &headers, &project, &extension).await {
        Ok((caller, _)) => caller,
        Err(response) => return response,
    };
    if !same_origin(&headers) {
        return (StatusCode::FORBIDDEN, "cross-site form posts are refused\n").into_response();
    }
    let fields: Vec<(String, String)> = form_urlencoded::parse(body.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let Some(name) = fields
        .iter()
        .find(|(k, _)| k == "_action")
        .map(|(_, v)| v.clone())
    else {
        return (StatusCode::UNPROCESSABLE_ENTITY, "_action: is required\n").into_response();
    };
    let actions = match actions_of(&shared, &extension).await {
        Ok(actions) => actions,
        Err(response) => return response,
    };
    let Some(action) = actions.iter().find(|a| a.name == name) else {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("_action: {extension} has no action {name}\n"),
        )
            .into_response();
    };
    match form_input(&fields, &action.input_schema) {
        Err(message) => shared.develop.push(
            (project.clone(), extension.clone()),
            Recent {
                at: now(),
                via: Via::DeveloperView,
                action: name,
                input: Value::Object(Map::new()),
                request_id: "(not run)".to_owned(),
                outcome: Err(("invalid_input".to_owned(), message)),
                log: Vec::new(),
            },
        ),
        Ok(input) => {
            invoke_listed(
                &shared.host,
                &shared.develop,
                caller,
                InvokeRequest {
                    extension: extension.clone(),
                    project: project.clone(),
                    action: name,
                    input,
                    generation: None,
                },
                Via::DeveloperView,
            )
            .await;
        }
    }
    Redirect::to(&format!(
        "{}#recent-heading",
        develop_url(&project, &extension)
    ))
    .into_response()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn form_fields_become_the_schema_s_types() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": { "type": "string" },
                "count": { "type": "integer" },
                "loud": { "type": "boolean" },
                "tags": { "type": "array" }
            }
        });
        let fields = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let input = form_input(
            &fields(&[
                ("_action", "x.y"),
                ("input.name", "Ada"),
                ("input.count", "3"),
                ("input.loud", "true"),
                ("input.tags", "[\"a\"]"),
                ("input.unused", ""),
            ]),
            &schema,
        )
        .unwrap();
        assert_eq!(
            input,
            json!({ "name": "Ada", "count": 3, "loud": true, "tags": ["a"] })
        );
        let bad = form_input(&fields(&[("input.tags", "[")]), &schema).unwrap_err();
        assert!(bad.starts_with("tags: is not valid JSON"), "{bad}");
    }

    #[test]
    fn a_form_has_a_typed_field_per_property() {
        let action = ActionInfo {
            extension: "e".into(),
            name: "e.greet".into(),
            description: "Greets <you>.".into(),
            http_method: "POST".into(),
            http_route: "/greet".into(),
            mcp_tool: "plugin__e__greet".into(),
            input_schema: json!({
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": { "type": "string", "description": "Who." },
                    "times": { "type": "integer" },
                    "unit": { "type": "string", "enum": ["day"] }
                }
            }),
            output_schema: None,
        };
        let html = action_form(0, &action, "/u");
        assert!(html.contains("Greets &lt;you&gt;."), "{html}");
        assert!(html.contains(
            "<label for=\"a0-f0\">name (required)</label><input id=\"a0-f0\" name=\"input.name\" \
             type=\"text\" required aria-describedby=\"a0-f0-d\"><small id=\"a0-f0-d\">Who.</small>"
        ), "{html}");
        assert!(
            html.contains("name=\"input.times\" type=\"number\" step=\"1\""),
            "{html}"
        );
        assert!(
            html.contains("<option value=\"\">(none)</option><option>day</option>"),
            "{html}"
        );
        assert!(
            html.contains("<button type=\"submit\">Run e.greet</button>"),
            "{html}"
        );
    }
}
