//! Typed actions: an action's input type reads the JSON the host passes,
//! its output type writes the JSON it answers, and [`actions!`] dispatches
//! the manifest's action names to handler functions.
//!
//! ```
//! use extension_guest::{ActionError, Host, Json};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct GreetInput { name: String }
//!
//! #[derive(Serialize)]
//! struct Greeting { message: String }
//!
//! fn greet<H: Host + ?Sized>(_host: &H, Json(input): Json<GreetInput>) -> Result<Json<Greeting>, ActionError> {
//!     Ok(Json(Greeting { message: format!("Hello, {}!", input.name) }))
//! }
//!
//! extension_guest::actions! {
//!     "hello.greet" => greet,
//! }
//!
//! assert_eq!(ACTIONS, ["hello.greet"]);
//! ```

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::ActionError;

/// An action's input, read from the JSON text the host passes (already
/// checked against the manifest's input schema by the host).
pub trait Input: Sized {
    fn from_json(input: &str) -> Result<Self, ActionError>;
}

/// An action's output, written as the JSON text the host answers (checked
/// against the manifest's output schema by the host).
pub trait Output {
    fn into_json(self) -> Result<String, ActionError>;
}

/// A serde type as an action's input or output. As an input, an error names
/// the field and serde's rule (`name: invalid type: integer `5`, expected a
/// string`; `input: missing field `name``).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Json<T>(pub T);

impl<T: DeserializeOwned> Input for Json<T> {
    fn from_json(input: &str) -> Result<Self, ActionError> {
        let mut reader = serde_json::Deserializer::from_str(input);
        let value = serde_path_to_error::deserialize(&mut reader).map_err(|e| {
            let field = if e.path().iter().next().is_none() {
                "input".to_owned()
            } else {
                e.path().to_string()
            };
            ActionError::invalid_input(format!("{field}: {}", without_position(e.inner())))
        })?;
        reader
            .end()
            .map_err(|e| ActionError::invalid_input(format!("input: {}", without_position(&e))))?;
        Ok(Json(value))
    }
}

/// serde_json's message without its " at line L column C" suffix (the
/// input is one line the caller did not write by hand).
fn without_position(error: &serde_json::Error) -> String {
    let message = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    message
        .strip_suffix(&suffix)
        .map_or_else(|| message.clone(), str::to_owned)
}

impl<T: Serialize> Output for Json<T> {
    fn into_json(self) -> Result<String, ActionError> {
        serde_json::to_string(&self.0)
            .map_err(|e| ActionError::internal(format!("the output could not be written: {e}")))
    }
}

/// The input of an action that takes no fields: `{}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoInput;

impl Input for NoInput {
    fn from_json(input: &str) -> Result<Self, ActionError> {
        object(input, &[]).map(|_| NoInput)
    }
}

/// The message for an input that is not a JSON object.
pub const NOT_AN_OBJECT: &str = "input: must be a JSON object";

/// Reads `input` as a JSON object whose keys are all in `allowed`.
pub fn object(input: &str, allowed: &[&str]) -> Result<Map<String, Value>, ActionError> {
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(input) else {
        return Err(ActionError::invalid_input(NOT_AN_OBJECT));
    };
    if let Some(unknown) = object.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(unknown_field(unknown, allowed));
    }
    Ok(object)
}

/// The error for a field an action does not take.
pub fn unknown_field(unknown: &str, allowed: &[&str]) -> ActionError {
    let expected = if allowed.is_empty() {
        "this action takes no fields".to_owned()
    } else {
        format!("allowed fields are {}", allowed.join(", "))
    };
    ActionError::invalid_input(format!("{unknown}: unknown field; {expected}"))
}

/// The error for a required field that is absent or `null`.
pub fn missing(key: &str) -> ActionError {
    ActionError::invalid_input(format!("{key}: is required"))
}

/// A required string field of an [`object`].
pub fn required_string(object: &Map<String, Value>, key: &str) -> Result<String, ActionError> {
    match object.get(key) {
        None | Some(Value::Null) => Err(missing(key)),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(ActionError::invalid_input(format!(
            "{key}: must be a string"
        ))),
    }
}

/// Reads `input` with `I`, runs `handler` and writes its output: one arm of
/// the dispatch [`actions!`] writes.
pub fn run<H, I, O, F>(host: &H, input: &str, handler: F) -> Result<String, ActionError>
where
    H: ?Sized,
    I: Input,
    O: Output,
    F: FnOnce(&H, I) -> Result<O, ActionError>,
{
    handler(host, I::from_json(input)?)?.into_json()
}

/// The custom section of the component that lists the actions [`actions!`]
/// dispatches (each name followed by a newline). The host reads it at
/// install and refuses a component whose actions and manifest disagree.
pub const ACTIONS_SECTION: &str = "platform-actions";

/// The length of [`ACTIONS_SECTION`]'s contents for `names`.
#[doc(hidden)]
pub const fn section_len(names: &[&str]) -> usize {
    let mut len = 0;
    let mut i = 0;
    while i < names.len() {
        len += names[i].len() + 1;
        i += 1;
    }
    len
}

/// [`ACTIONS_SECTION`]'s contents for `names`, computed at compile time.
#[doc(hidden)]
pub const fn section_bytes<const N: usize>(names: &[&str]) -> [u8; N] {
    let mut out = [0u8; N];
    let mut at = 0;
    let mut i = 0;
    while i < names.len() {
        let name = names[i].as_bytes();
        let mut j = 0;
        while j < name.len() {
            out[at] = name[j];
            at += 1;
            j += 1;
        }
        out[at] = b'\n';
        at += 1;
        i += 1;
    }
    out
}

/// Dispatches the manifest's action names to handlers.
///
/// `actions! { "name" => handler, ... }` (names as string literals or
/// `const`s) defines, where it is written:
///
/// - `pub const ACTIONS: &[&str]`, the names in order, so a test can compare
///   them with the manifest's `[[actions]]`; in a WebAssembly build the
///   names also go into the component's [`ACTIONS_SECTION`], where the host
///   finds them (`host-sim dev` and the test host refuse a build that
///   implements an action its manifest does not declare, or the reverse);
/// - `pub fn dispatch<H: Host + ?Sized>(host: &H, action: &str, input: &str)
///   -> Result<String, ActionError>`, which reads the input with the
///   handler's input type ([`Input`]: [`Json<T>`], [`NoInput`] or your
///   own), runs the handler and writes its [`Output`]; an unknown name is
///   `invalid_input` naming the offered actions.
///
/// A handler is `fn(&H, I) -> Result<O, ActionError>`, generic over the
/// host so that it runs in the component and in native tests alike.
/// [`export!`](crate::export) makes `dispatch` (or a function wrapping it)
/// the component's `invoke`.
#[macro_export]
macro_rules! actions {
    ($($name:expr => $handler:expr),+ $(,)?) => {
        /// The action names this extension dispatches, as its manifest lists them.
        pub const ACTIONS: &[&str] = &[$($name),+];

        /// `ACTIONS` where the host reads them: a custom section of the component.
        #[cfg(target_family = "wasm")]
        #[unsafe(link_section = "platform-actions")]
        #[used]
        static __EXTENSION_GUEST_ACTIONS: [u8; $crate::action::section_len(ACTIONS)] =
            $crate::action::section_bytes(ACTIONS);

        /// Runs `action` with its JSON `input` against `host`.
        pub fn dispatch<H: $crate::Host + ?Sized>(
            host: &H,
            action: &str,
            input: &str,
        ) -> ::core::result::Result<::std::string::String, $crate::ActionError> {
            $(
                if action == $name {
                    return $crate::action::run(host, input, $handler);
                }
            )+
            ::core::result::Result::Err($crate::ActionError::unknown_action(action, ACTIONS))
        }
    };
}
