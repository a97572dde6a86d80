//! {{name}}: an extension for the platform's extension host.
//!
//! One action, `{{action_prefix}}.greet`: it asks the `upstream` binding for
//! a salutation, counts this project's greetings in a document (with
//! compare-and-set, so concurrent calls never lose a count) and answers a
//! message.

use extension_guest::{ActionError, ErrorCode, Host, HttpRequest, Json, LogLevel, documents};
use serde::{Deserialize, Serialize};

/// The action, as named in manifest.toml.
pub const GREET: &str = "{{action_prefix}}.greet";
/// The binding manifest.toml declares.
pub const UPSTREAM: &str = "upstream";
/// Where the salutation is read on the binding's origin.
pub const SALUTATION_PATH: &str = "/salutation.json";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GreetInput {
    pub name: String,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Greeting {
    pub message: String,
    /// How many greetings this project has made, this one included.
    pub count: u64,
}

/// What the upstream answers.
#[derive(Deserialize)]
struct Salutation {
    salutation: String,
}

/// The project's counter document (`greetings/counter`).
#[derive(PartialEq, Serialize, Deserialize)]
struct Counter {
    greetings: u64,
}

pub fn greet<H: Host + ?Sized>(
    host: &H,
    Json(input): Json<GreetInput>,
) -> Result<Json<Greeting>, ActionError> {
    let name = input.name.trim();
    if name.is_empty() {
        return Err(ActionError::invalid_input("name: must not be blank"));
    }
    let response = host.send(HttpRequest::get(UPSTREAM, SALUTATION_PATH))?;
    if !response.is_success() {
        return Err(ActionError::new(
            ErrorCode::ProviderRejected,
            format!("GET {SALUTATION_PATH} answered {}", response.status),
        ));
    }
    let Salutation { salutation } = response.json().map_err(|_| {
        ActionError::new(
            ErrorCode::ProviderRejected,
            format!("GET {SALUTATION_PATH} answered no JSON object with a `salutation` string"),
        )
    })?;
    let counter = documents::update(
        host,
        "greetings",
        "counter",
        5,
        |current: Option<&Counter>| {
            Ok(Counter {
                greetings: current.map_or(0, |c| c.greetings) + 1,
            })
        },
    )?;
    host.log(LogLevel::Info, &format!("greeted {name}"));
    Ok(Json(Greeting {
        message: format!("{salutation}, {name}!"),
        count: counter.value.greetings,
    }))
}

extension_guest::actions! {
    GREET => greet,
}

extension_guest::export!(dispatch);
