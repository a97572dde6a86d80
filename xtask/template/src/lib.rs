//! {{name}}: an extension for the platform's extension host.
//!
//! One action, `{{action_prefix}}.greet`: it asks the `upstream` binding for
//! a salutation, counts this project's greetings in a document (with
//! compare-and-set, so concurrent calls never lose a count) and answers a
//! message.

use std::num::NonZeroU64;

use extension_guest::{ActionError, ErrorCode, Host, HttpRequest, LogLevel, documents};
use serde::{Deserialize, Serialize};

// From manifest.toml, at build time: the module `manifest` with each
// action's name (`GREET`), its input and output types (`GreetInput`,
// `GreetOutput`, from the JSON Schemas) and the trait `Actions`, one handler
// per action. A manifest and code that disagree do not compile.
extension_guest::manifest!();

pub use manifest::{GREET, GreetInput, GreetOutput};

/// The binding manifest.toml declares.
pub const UPSTREAM: &str = "upstream";
/// Where the salutation is read on the binding's origin.
pub const SALUTATION_PATH: &str = "/salutation.json";

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

/// The extension: the handlers of manifest.toml's actions.
pub struct Extension;

impl manifest::Actions for Extension {
    fn greet<H: Host + ?Sized>(host: &H, input: GreetInput) -> Result<GreetOutput, ActionError> {
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
        Ok(GreetOutput {
            message: format!("{salutation}, {name}!"),
            // The output schema's `minimum = 1` made this a NonZeroU64.
            count: NonZeroU64::new(counter.value.greetings)
                .ok_or_else(|| ActionError::internal("the greeting counter stayed at 0"))?,
        })
    }
}

extension_guest::export!(manifest::dispatch::<Extension>);
