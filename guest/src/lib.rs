//! The guest side of `platform:extension@0.1.0`, for extension authors.
//!
//! - `manifest!` (feature `manifest`) reads `manifest.toml` at build time
//!   and generates the action names, each action's input and output types
//!   from its JSON Schemas and a trait with one handler per action, so code
//!   and manifest that disagree do not compile.
//! - [`actions!`] dispatches the manifest's action names to typed handlers
//!   you declare yourself; inputs and outputs are JSON through serde
//!   ([`Json`]) or a reader of your own ([`Input`]).
//! - [`Host`] is what a handler gets: the invocation ([`Host::invocation`]),
//!   the host-owned HTTP bindings ([`Host::send`] with [`HttpRequest`]),
//!   the project's documents ([`documents`], with compare-and-set) and the
//!   host log ([`Host::log`]). In a component it is the WIT imports; in a
//!   native test any implementation you write.
//! - [`ActionError`] carries an [`ErrorCode`] the host answers with its
//!   HTTP status; binding and document failures convert into it with `?`.
//! - [`export!`] makes a dispatch function the component's export.
//! - [`testing::TestHost`] runs actions natively in unit tests: bindings
//!   answered by closures, documents in memory.
//!
//! ```ignore
//! extension_guest::actions! {
//!     "hello.greet" => greet,
//! }
//! extension_guest::export!(dispatch);
//! ```
//!
//! The crate builds for `wasm32-wasip1` (with `cargo component build`, which
//! adds the preview1 adapter) and for `wasm32-unknown-unknown` (a bare
//! module whose component imports only the platform interfaces it uses).

pub mod action;
pub mod documents;
pub mod error;
pub mod host;
pub mod testing;

#[cfg(target_arch = "wasm32")]
pub mod component;

pub use action::{Input, Json, NoInput, Output};
pub use error::{ActionError, ErrorCode};
#[cfg(feature = "manifest")]
pub use extension_guest_macros::manifest;
pub use host::{
    BindingError, Document, DocumentError, Host, HttpRequest, HttpResponse, Invocation, LogLevel,
    Precondition, ProjectSettings,
};

/// Exports `invoke` as the component's `extension.invoke`: a function
/// `fn(&H, &str, &str) -> Result<String, ActionError>` generic over the
/// host, usually the `dispatch` that [`actions!`] defines or a function
/// that wraps it. Expands to nothing outside wasm32, so the crate still
/// builds and tests natively. A panic in an action is written to the host
/// log before the invocation traps.
#[macro_export]
macro_rules! export {
    ($invoke:path) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            // Not `Extension`: the path may name the crate's own type of
            // that name (`manifest::dispatch::<Extension>`).
            struct __ExtensionGuestExport;

            impl $crate::component::Guest for __ExtensionGuestExport {
                fn invoke(
                    action: ::std::string::String,
                    input: ::std::string::String,
                ) -> ::core::result::Result<
                    ::std::string::String,
                    $crate::component::bindings::exports::platform::extension::extension::ActionError,
                > {
                    $crate::component::invoke(&action, &input, |host, action, input| {
                        $invoke(host, action, input)
                    })
                }
            }

            $crate::component::bindings::__export_extension_bindings!(__ExtensionGuestExport with_types_in $crate::component::bindings);
        };
    };
}
