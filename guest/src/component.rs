//! The component side (wasm32 only): the generated bindings of
//! `platform:extension@0.1.0`, [`WitHost`] (the imports as a [`Host`]) and
//! what [`export!`](crate::export) expands to.

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        // The platform contract, then the guest world (contract + wall clock).
        path: ["../wit", "wit"],
        world: "platform:guest/extension",
        generate_all,
        pub_export_macro: true,
        export_macro_name: "__export_extension_bindings",
        default_bindings_module: "extension_guest::component::bindings",
    });
}

use bindings::exports::platform::extension::extension::ActionError as WitActionError;
use bindings::platform::extension::{context, documents, http_binding, log};
use bindings::wasi::clocks::wall_clock;

#[doc(hidden)]
pub use bindings::exports::platform::extension::extension::Guest;

use crate::error::ActionError;
use crate::host::{
    BindingError, Document, DocumentError, Host, HttpRequest, HttpResponse, Invocation, LogLevel,
    Precondition, ProjectSettings,
};

/// The host as the component sees it through its imports.
pub struct WitHost;

fn binding_error(error: http_binding::BindingError) -> BindingError {
    use http_binding::BindingError as E;
    match error {
        E::NotGranted(m) => BindingError::NotGranted(m),
        E::NotBound(m) => BindingError::NotBound(m),
        E::CapabilityDenied(m) => BindingError::CapabilityDenied(m),
        E::InvalidRequest(m) => BindingError::InvalidRequest(m),
        E::Timeout(m) => BindingError::Timeout(m),
        E::Unavailable(m) => BindingError::Unavailable(m),
        E::ResponseTooLarge(m) => BindingError::ResponseTooLarge(m),
        E::LimitExceeded(m) => BindingError::LimitExceeded(m),
    }
}

fn document_error(error: documents::DocumentError) -> DocumentError {
    use documents::DocumentError as E;
    match error {
        E::Conflict(revision) => DocumentError::Conflict(revision),
        E::Invalid(m) => DocumentError::Invalid(m),
        E::Denied(m) => DocumentError::Denied(m),
        E::LimitExceeded(m) => DocumentError::LimitExceeded(m),
        E::Unavailable(m) => DocumentError::Unavailable(m),
    }
}

fn precondition(condition: Precondition) -> documents::Precondition {
    match condition {
        Precondition::None => documents::Precondition::None,
        Precondition::Absent => documents::Precondition::Absent,
        Precondition::Revision(revision) => documents::Precondition::Revision(revision),
    }
}

impl Host for WitHost {
    fn invocation(&self) -> Invocation {
        let current = context::current();
        Invocation {
            project_id: current.project_id,
            request_id: current.request_id,
            action: current.action,
            settings: ProjectSettings {
                provider_origin: current.settings.provider_origin,
                tracking_origin: current.settings.tracking_origin,
            },
        }
    }

    fn send(&self, request: HttpRequest) -> Result<HttpResponse, BindingError> {
        let request = http_binding::Request {
            binding: request.binding,
            method: request.method,
            path: request.path,
            query: request.query,
            headers: request.headers,
            body: request.body,
        };
        http_binding::send(&request)
            .map(|response| HttpResponse {
                status: response.status,
                headers: response.headers,
                body: response.body,
            })
            .map_err(binding_error)
    }

    fn get_document(&self, collection: &str, id: &str) -> Result<Option<Document>, DocumentError> {
        documents::get(collection, id)
            .map(|document| {
                document.map(|d| Document {
                    collection: d.collection,
                    id: d.id,
                    revision: d.revision,
                    body: d.body,
                })
            })
            .map_err(document_error)
    }

    fn put_document(
        &self,
        collection: &str,
        id: &str,
        body: &str,
        condition: Precondition,
    ) -> Result<u64, DocumentError> {
        documents::put(collection, id, body, precondition(condition)).map_err(document_error)
    }

    fn delete_document(
        &self,
        collection: &str,
        id: &str,
        condition: Precondition,
    ) -> Result<bool, DocumentError> {
        documents::delete(collection, id, precondition(condition)).map_err(document_error)
    }

    fn log(&self, level: LogLevel, message: &str) {
        let level = match level {
            LogLevel::Debug => log::Level::Debug,
            LogLevel::Info => log::Level::Info,
            LogLevel::Warn => log::Level::Warn,
            LogLevel::Error => log::Level::Error,
        };
        log::write(level, message);
    }

    fn now_ms(&self) -> i64 {
        let now = wall_clock::now();
        let ms = u128::from(now.seconds) * 1000 + u128::from(now.nanoseconds / 1_000_000);
        i64::try_from(ms).unwrap_or(i64::MAX)
    }
}

/// The exported `invoke`: runs `invoke` against the imports and turns its
/// error into the WIT `action-error`.
#[doc(hidden)]
pub fn invoke(
    action: &str,
    input: &str,
    invoke: impl FnOnce(&WitHost, &str, &str) -> Result<String, ActionError>,
) -> Result<String, WitActionError> {
    // A bare module has no stderr, and a wasip1 one's goes to the host log
    // line by line: the panic's message goes to the host log (redacted
    // there like every guest log line) in one piece before the trap.
    std::panic::set_hook(Box::new(|panic| {
        log::write(
            log::Level::Error,
            &format!("the extension panicked: {panic}"),
        );
    }));
    invoke(&WitHost, action, input).map_err(|e| WitActionError {
        code: e.code.as_str().to_owned(),
        message: e.message,
    })
}
