//! The extension API: `/v1/plugins/{extension}/projects/{project}/api/{route}`.
//!
//! The route and method select the action by the manifest's `http` field.
//! `GET` input comes from the query string (values converted to the type
//! the input schema declares for that property), `POST`/`PUT`/`PATCH` input
//! from a JSON object body of at most the sandbox's input limit (an empty
//! body is the empty object: an action without input needs no `{}`). The caller
//! sends `Authorization: Bearer <token>` and may send
//! `X-Runtime-Generation: <n>`; every answer carries `X-Request-Id`, and a
//! successful one `X-Runtime-Generation`. The body of a success is the
//! action's output; of a failure the one error shape.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use axum::routing::any;
use serde_json::{Map, Value};
use tower_http::cors::{AllowOrigin, CorsLayer};

use super::recent;
use super::{
    GENERATION_HEADER, REQUEST_ID_HEADER, Shared, bearer, caller_access, error_response,
    host_query, invoke_error_response, json_response, new_request_id,
};
use crate::error::InvokeError;
use crate::host::InvokeRequest;
use crate::spec::ActionInfo;

pub(super) fn routes(shared: Shared) -> Router {
    Router::new()
        .route(
            "/v1/plugins/{extension}/projects/{project}/api/{*route}",
            any(handle),
        )
        .with_state(shared)
        .layer(cors())
}

/// Panels run in sandboxed iframes (an opaque origin) and send the bearer
/// token themselves; no cookies are involved, so any origin may call.
pub(super) fn cors() -> CorsLayer {
    CorsLayer::new()
        .allow_origin(AllowOrigin::any())
        .allow_methods([Method::GET, Method::POST, Method::PUT, Method::PATCH])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::ACCEPT,
            header::HeaderName::from_static(GENERATION_HEADER),
        ])
        .expose_headers([
            header::HeaderName::from_static(REQUEST_ID_HEADER),
            header::HeaderName::from_static(GENERATION_HEADER),
        ])
        .max_age(Duration::from_secs(600))
}

async fn handle(
    State(shared): State<Shared>,
    Path((extension, project, route)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    let request_id = new_request_id();
    let (parts, body) = request.into_parts();
    let Some(caller) = bearer(&parts.headers) else {
        return invoke_error_response(&InvokeError::Unauthenticated, &request_id);
    };
    let generation = match parts.headers.get(GENERATION_HEADER) {
        None => None,
        Some(value) => match value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            Some(generation) => Some(generation),
            None => {
                return error_response(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_input",
                    "header X-Runtime-Generation must be a non-negative integer",
                    &request_id,
                );
            }
        },
    };

    // `Host::invoke` checks the token; an answer given before it would
    // (no such route, a bad body) goes to a known token only, so an unknown
    // token learns nothing about installed extensions.
    let refuse = |response: Response| {
        let (shared, caller, request_id) = (shared.clone(), caller.clone(), request_id.clone());
        async move {
            match caller_access(&shared.host, &caller).await {
                Ok(_) => response,
                Err(error) => invoke_error_response(&error, &request_id),
            }
        }
    };
    // From memory on the async thread when it can be (every request after
    // the first at a state version); the database on a blocking thread when not.
    let actions = match shared.host.actions_in_memory(&extension) {
        Some(actions) => actions,
        None => {
            let lookup = extension.clone();
            match host_query(
                &shared.host,
                "looking up an extension's actions",
                move |host| host.actions(&lookup),
            )
            .await
            {
                Ok(actions) => actions,
                Err(error) => return invoke_error_response(&error, &request_id),
            }
        }
    };
    let action = match route_action(
        actions.as_deref(),
        &extension,
        &format!("/{route}"),
        &parts.method,
    ) {
        Ok(action) => action,
        Err((status, code, message, allow)) => {
            let mut response = error_response(status, code, &message, &request_id);
            if let Some(allow) = allow.and_then(|a| HeaderValue::from_str(&a).ok()) {
                response.headers_mut().insert(header::ALLOW, allow);
            }
            return refuse(response).await;
        }
    };

    let input = if parts.method == Method::GET {
        query_input(parts.uri.query().unwrap_or(""), &action.input_schema)
    } else {
        body_input(body, shared.host.limits().max_input_bytes).await
    };
    let input = match input {
        Ok(input) => input,
        Err((status, code, message)) => {
            return refuse(error_response(status, code, &message, &request_id)).await;
        }
    };

    let invocation = recent::invoke_listed(
        &shared.host,
        &shared.develop,
        caller,
        InvokeRequest {
            extension,
            project,
            action: action.name.clone(),
            input,
            generation,
        },
        recent::Via::Api,
    )
    .await;
    match invocation.result {
        Ok(output) => {
            let mut response = json_response(StatusCode::OK, &output, &invocation.request_id);
            if let Some(generation) = invocation.generation {
                response
                    .headers_mut()
                    .insert(GENERATION_HEADER, HeaderValue::from(generation));
            }
            response
        }
        Err(error) => invoke_error_response(&error, &invocation.request_id),
    }
}

/// Why no action answers a route: status, code, message and, for a
/// wrong method, the `Allow` header's value.
type RouteError = (StatusCode, &'static str, String, Option<String>);

/// The action of `extension` (`None`: not installed) for `route` and `method`.
fn route_action<'a>(
    actions: Option<&'a [ActionInfo]>,
    extension: &str,
    route: &str,
    method: &Method,
) -> Result<&'a ActionInfo, RouteError> {
    let Some(actions) = actions else {
        return Err((
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no extension {extension} is installed"),
            None,
        ));
    };
    let on_route: Vec<&ActionInfo> = actions.iter().filter(|a| a.http_route == route).collect();
    if on_route.is_empty() {
        return Err((
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{extension} has no API route {route}"),
            None,
        ));
    }
    on_route
        .iter()
        .find(|a| a.http_method == method.as_str())
        .copied()
        .ok_or_else(|| {
            let allowed: Vec<&str> = on_route.iter().map(|a| a.http_method.as_str()).collect();
            (
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                format!("{route} accepts {}", allowed.join(", ")),
                Some(allowed.join(", ")),
            )
        })
}

type InputError = (StatusCode, &'static str, String);

fn invalid(message: String) -> InputError {
    (StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", message)
}

/// The input object of a `GET`: each query parameter once, converted to
/// the type the schema declares for it (integer, number, boolean); values
/// that do not convert stay strings so the schema check names them.
pub(super) fn query_input(query: &str, schema: &Value) -> Result<Value, InputError> {
    typed_input(form_urlencoded::parse(query.as_bytes()), schema)
}

/// Name and value pairs (a query string's, the developer view's form
/// fields) as an input object, each value converted as [`query_input`]
/// converts it; a name given twice is refused.
pub(super) fn typed_input<K: AsRef<str>, V: AsRef<str>>(
    pairs: impl IntoIterator<Item = (K, V)>,
    schema: &Value,
) -> Result<Value, InputError> {
    let mut input = Map::new();
    for (name, value) in pairs {
        let (name, value) = (name.as_ref(), value.as_ref());
        let declared = schema
            .pointer(&format!("/properties/{}/type", escape_pointer(name)))
            .and_then(Value::as_str);
        let converted = match declared {
            Some("integer") => value
                .parse::<i64>()
                .map(Value::from)
                .unwrap_or_else(|_| Value::String(value.to_string())),
            Some("number") => value
                .parse::<f64>()
                .ok()
                .and_then(|n| serde_json::Number::from_f64(n).map(Value::Number))
                .unwrap_or_else(|| Value::String(value.to_string())),
            Some("boolean") => match value {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => Value::String(value.to_string()),
            },
            _ => Value::String(value.to_string()),
        };
        if input.insert(name.to_string(), converted).is_some() {
            return Err(invalid(format!(
                "query parameter {name} is given more than once"
            )));
        }
    }
    Ok(Value::Object(input))
}

fn escape_pointer(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// The input object of a `POST`: a JSON object of at most `limit` bytes; an
/// empty body is `{}` (the input schema then names any required field).
async fn body_input(body: Body, limit: usize) -> Result<Value, InputError> {
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the request body is larger than {limit} bytes"),
        )
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| invalid(format!("the request body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(invalid("the request body must be a JSON object".into()));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn query_values_take_the_declared_type() {
        let schema = json!({"properties": {
            "start_at": {"type": "integer"},
            "ratio": {"type": "number"},
            "all": {"type": "boolean"},
            "unit": {"type": "string"},
        }});
        let input =
            query_input("start_at=17&ratio=0.5&all=true&unit=day&other=1", &schema).unwrap();
        assert_eq!(
            input,
            json!({"start_at": 17, "ratio": 0.5, "all": true, "unit": "day", "other": "1"})
        );
    }

    #[test]
    fn query_values_that_do_not_convert_stay_strings_for_the_schema_to_name() {
        let schema = json!({"properties": {"start_at": {"type": "integer"}}});
        assert_eq!(
            query_input("start_at=soon", &schema).unwrap(),
            json!({"start_at": "soon"})
        );
        assert_eq!(
            query_input("start_at=1.5", &schema).unwrap(),
            json!({"start_at": "1.5"})
        );
    }

    #[test]
    fn a_repeated_query_parameter_is_refused_by_name() {
        let (status, code, message) = query_input("a=1&a=2", &json!({})).unwrap_err();
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(code, "invalid_input");
        assert!(message.contains("query parameter a"), "{message}");
    }
}
