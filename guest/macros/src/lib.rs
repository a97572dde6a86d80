//! `extension_guest::manifest!()`: reads the extension's `manifest.toml` at
//! build time and writes, in a module `manifest`:
//!
//! - a constant per action with its name (`GREET` for `hello_ext.greet`)
//!   and `ACTIONS`, every name in manifest order;
//! - the input and output types of each action, generated from its JSON
//!   Schemas (and the shared `[definitions]`) by typify: `GreetInput`,
//!   `GreetOutput`;
//! - a trait `Actions` with one handler per action,
//!   `fn greet<H: Host + ?Sized>(host: &H, input: GreetInput) ->
//!   Result<GreetOutput, ActionError>`;
//! - `dispatch::<E: Actions>`, the function `export!` takes, which also
//!   writes the names into the component's `platform-actions` section.
//!
//! So a manifest and code that disagree do not compile: an action declared
//! without its handler is a missing trait item, a handler without its
//! action (in the file calling the macro) is an error naming the
//! `[[actions]]` entry to add to manifest.toml, and a handler with the
//! wrong types does not match the signature. A manifest the host would
//! refuse does not compile either: it is read with the host's own parser,
//! and the error is the host's text, with the file, line, column and table
//! of the mistake.

use std::path::{Path, PathBuf};

use extension_release::Manifest;
use heck::ToUpperCamelCase;
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use typify_impl::{TypeSpace, TypeSpaceSettings};

mod handlers;

/// See the crate documentation. The argument, if any, is the manifest's
/// path relative to the crate's `Cargo.toml` (default `"manifest.toml"`).
#[proc_macro]
pub fn manifest(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    let relative = if input.is_empty() {
        "manifest.toml".to_owned()
    } else {
        match syn::parse::<syn::LitStr>(input) {
            Ok(path) => path.value(),
            Err(e) => return e.to_compile_error().into(),
        }
    };
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(PathBuf::new, PathBuf::from);
    let path = dir.join(&relative);
    // The file that calls the macro, where the handlers usually are.
    let caller = std::fs::read_to_string(
        proc_macro::Span::call_site()
            .local_file()
            .unwrap_or_default(),
    )
    .unwrap_or_default();
    let generated = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
        .and_then(|text| generate(&text, &path, &caller));
    match generated {
        Ok(tokens) => tokens.into(),
        Err(message) => failed(&message).into(),
    }
}

/// The module `manifest` holding only the error: paths into a module whose
/// expansion failed are not reported as unresolved, so the developer sees
/// this message alone (no `unresolved import manifest`, no `cargo add`).
fn failed(message: &str) -> TokenStream {
    quote! {
        #[allow(dead_code, missing_docs)]
        pub mod manifest {
            ::core::compile_error!(#message);
        }
    }
}

/// One action as the generated code names it.
struct Action {
    /// The manifest's name (`hello_ext.greet`).
    name: String,
    description: String,
    /// The handler (`greet`).
    method: syn::Ident,
    /// The name constant (`GREET`).
    constant: syn::Ident,
    input: TokenStream,
    output: TokenStream,
}

/// The module for the manifest `text` read from `path` (which the module
/// includes, so that a change to the file rebuilds the crate), or why not.
/// `caller` is the source calling the macro: a handler it implements for
/// an action `path` does not declare is an error naming the entry to add.
pub(crate) fn generate(text: &str, path: &Path, caller: &str) -> Result<TokenStream, String> {
    let manifest = Manifest::from_toml(text).map_err(|e| e.render(path))?;
    let mut settings = TypeSpaceSettings::default();
    settings
        .with_struct_builder(false)
        .with_derive("PartialEq".to_owned());
    let mut types = TypeSpace::new(&settings);
    let definitions = manifest
        .definitions
        .iter()
        .map(|(name, schema)| {
            serde_json::from_value::<schemars::schema::Schema>(schema.clone())
                .map(|schema| (name.clone(), schema))
                .map_err(|e| format!("{}: [definitions.{name}]: {e}", path.display()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    types.add_ref_types(definitions).map_err(|e| {
        format!(
            "{}: [definitions]: no Rust type for it: {e}",
            path.display()
        )
    })?;

    let mut actions: Vec<Action> = Vec::new();
    for action in &manifest.actions {
        let handler = handler_name(&action.name);
        // A Rust keyword becomes a raw identifier (`r#type`).
        let method = syn::parse_str::<syn::Ident>(&handler)
            .unwrap_or_else(|_| syn::Ident::new_raw(&handler, Span::call_site()));
        if let Some(other) = actions.iter().find(|a| a.method == method) {
            return Err(format!(
                "{}: the actions `{}` and `{}` both make the handler `{method}`; rename one",
                path.display(),
                other.name,
                action.name
            ));
        }
        let camel = handler.to_upper_camel_case();
        let mut typed = |schema: &serde_json::Value,
                         field: &str,
                         suffix: &str|
         -> Result<TokenStream, String> {
            let what = || format!("{}: action {}: {field}", path.display(), action.name);
            let schema: schemars::schema::Schema =
                serde_json::from_value(schema.clone()).map_err(|e| format!("{}: {e}", what()))?;
            let id = types
                .add_type_with_name(&schema, Some(format!("{camel}{suffix}")))
                .map_err(|e| format!("{}: no Rust type for it: {e}", what()))?;
            Ok(types
                .get_type(&id)
                .map_err(|e| format!("{}: {e}", what()))?
                .ident())
        };
        let input = typed(&action.input_schema, "input_schema", "Input")?;
        let output = if action.output_schema.is_null() {
            quote!(::serde_json::Value)
        } else {
            typed(&action.output_schema, "output_schema", "Output")?
        };
        actions.push(Action {
            name: action.name.clone(),
            description: action.description.clone(),
            constant: format_ident!("{}", handler.to_uppercase()),
            method,
            input,
            output,
        });
    }
    let mut tokens = TokenStream::new();
    for undeclared in handlers::undeclared(caller, &actions, &manifest) {
        let message = undeclared.message(path);
        tokens.extend(quote!(::core::compile_error!(#message);));
    }
    tokens.extend(module(path, &actions, types.to_stream()));
    Ok(tokens)
}

/// The handler for an action name: the words after the first (the
/// extension's), joined with `_` (`hello_ext.greet` → `greet`,
/// `shop.orders.list` → `orders_list`); a one-word name is itself.
fn handler_name(action: &str) -> String {
    match action.split_once('.') {
        Some((_, rest)) => rest.replace('.', "_"),
        None => action.to_owned(),
    }
}

fn module(path: &Path, actions: &[Action], types: TokenStream) -> TokenStream {
    let tracked = path.to_string_lossy().into_owned();
    let names: Vec<&str> = actions.iter().map(|a| a.name.as_str()).collect();
    let constants = actions.iter().map(|a| {
        let (constant, name) = (&a.constant, &a.name);
        let doc = format!("The action `{name}`.");
        quote! { #[doc = #doc] pub const #constant: &str = #name; }
    });
    let handlers = actions.iter().map(|a| {
        let (method, input, output) = (&a.method, &a.input, &a.output);
        let doc = if a.description.is_empty() {
            format!("`{}`.", a.name)
        } else {
            format!("`{}`: {}", a.name, a.description)
        };
        quote! {
            #[doc = #doc]
            fn #method<H: ::extension_guest::Host + ?Sized>(
                host: &H,
                input: #input,
            ) -> ::core::result::Result<#output, ::extension_guest::ActionError>;
        }
    });
    let arms = actions.iter().map(|a| {
        let (method, constant) = (&a.method, &a.constant);
        quote! {
            if action == #constant {
                return ::extension_guest::action::run(
                    host,
                    input,
                    |host, ::extension_guest::Json(input)| {
                        E::#method(host, input).map(::extension_guest::Json)
                    },
                );
            }
        }
    });
    quote! {
        /// Generated from manifest.toml by `extension_guest::manifest!`:
        /// the action names, their input and output types and the
        /// [`Actions`](manifest::Actions) trait.
        #[allow(dead_code, missing_docs, clippy::all, clippy::pedantic)]
        pub mod manifest {
            // Rebuild when the manifest changes.
            const _: &[u8] = include_bytes!(#tracked);

            #(#constants)*

            /// Every action name, in manifest order.
            pub const ACTIONS: &[&str] = &[#(#names),*];

            /// `ACTIONS` where the host reads them: a custom section of the component.
            #[cfg(target_family = "wasm")]
            #[unsafe(link_section = "platform-actions")]
            #[used]
            static __EXTENSION_GUEST_ACTIONS: [u8; ::extension_guest::action::section_len(ACTIONS)] =
                ::extension_guest::action::section_bytes(ACTIONS);

            /// One handler per action of manifest.toml, with its types.
            pub trait Actions {
                #(#handlers)*
            }

            /// Runs `action` with its JSON `input` on `E`'s handler:
            /// `extension_guest::export!(manifest::dispatch::<E>)`.
            pub fn dispatch<E: Actions>(
                host: &(impl ::extension_guest::Host + ?Sized),
                action: &str,
                input: &str,
            ) -> ::core::result::Result<::std::string::String, ::extension_guest::ActionError> {
                #(#arms)*
                ::core::result::Result::Err(::extension_guest::ActionError::unknown_action(action, ACTIONS))
            }

            #types
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r##"
[extension]
id = "shop"
name = "Shop"
version = "0.1.0"
wit = "platform:extension@0.1.0"
component = "shop.wasm"

[definitions.sku]
type = "string"
minLength = 3

[[actions]]
name = "shop.orders.list"
description = "The project's orders."
http = { method = "GET", route = "/orders" }
mcp_tool = "plugin__shop__orders"
input_schema = { type = "object", additionalProperties = false, properties = { sku = { "$ref" = "#/definitions/sku" } } }
output_schema = { type = "array", items = { type = "string" } }

[[actions]]
name = "shop.type"
http = { method = "POST", route = "/type" }
mcp_tool = "plugin__shop__type"
input_schema = { type = "object" }
"##;

    fn generated(text: &str) -> Result<String, String> {
        generate(text, Path::new("/p/manifest.toml"), "").map(|tokens| tokens.to_string())
    }

    #[test]
    fn each_action_gets_a_constant_a_handler_and_its_types() {
        let code = generated(MANIFEST).unwrap();
        for expected in [
            "pub const ORDERS_LIST : & str = \"shop.orders.list\"",
            "pub const TYPE : & str = \"shop.type\"",
            "fn orders_list < H : :: extension_guest :: Host + ? Sized > (host : & H , input : OrdersListInput ,) -> :: core :: result :: Result < :: std :: vec :: Vec < :: std :: string :: String > , :: extension_guest :: ActionError >",
            // A keyword as a handler name; an open object is a map; without
            // an output schema, any JSON.
            "fn r#type < H : :: extension_guest :: Host + ? Sized > (host : & H , input : :: serde_json :: Map < :: std :: string :: String , :: serde_json :: Value > ,) -> :: core :: result :: Result < :: serde_json :: Value ,",
            "pub const ACTIONS : & [& str] = & [\"shop.orders.list\" , \"shop.type\"]",
            "pub struct OrdersListInput",
            "pub struct Sku",
            "include_bytes ! (\"/p/manifest.toml\")",
        ] {
            assert!(code.contains(expected), "missing `{expected}` in {code}");
        }
    }

    #[test]
    fn a_manifest_the_host_refuses_does_not_compile() {
        let bad = MANIFEST.replace("name = \"shop.type\"", "name = \"Shop.Type\"");
        let error = generated(&bad).unwrap_err();
        assert!(
            error.starts_with(
                "/p/manifest.toml:22:8: [[actions]] #2 (Shop.Type): field `actions[1].name`: \
                 must be dot-separated words"
            ),
            "{error}"
        );
    }

    /// The fixture of extension-release's located errors: the build
    /// refuses each mistake with the host's text (`ManifestError::render`).
    const TWO_ACTIONS: &str = include_str!("../../../host-sim/release/testdata/two-actions.toml");

    #[test]
    fn a_manifest_mistake_is_the_host_s_located_message_alone() {
        for (from, to, located) in [
            (
                "mcp_tool = \"plugin__hello_ext__count\"",
                "mcp_tol = \"plugin__hello_ext__count\"",
                "/p/manifest.toml:29:1: [[actions]] #2 (hello_ext.count): unknown field `mcp_tol`",
            ),
            (
                "n = { type = \"integer\" }",
                "n = { type = \"integr\" }",
                "/p/manifest.toml:35:25: [[actions]] #2 (hello_ext.count): field \
                 `actions[1].input_schema`, at `/properties/n/type`: \"integr\" is not allowed here; \
                 allowed: array, boolean, integer, null, number, object, string",
            ),
            (
                "collections = [\"greetings\"]",
                "collections = \"greetings\"",
                "/p/manifest.toml:12:15: [capabilities.documents]: invalid type: string \
                 \"greetings\", expected a sequence",
            ),
        ] {
            let bad = TWO_ACTIONS.replace(from, to);
            assert_ne!(bad, TWO_ACTIONS, "{from}");
            let message = generated(&bad).unwrap_err();
            let host = Manifest::from_toml(&bad)
                .unwrap_err()
                .render(Path::new("/p/manifest.toml"));
            assert_eq!(message, host, "one text at build time and in the host");
            assert!(message.starts_with(located), "{message}");
            // Only the error, inside the module the crate imports from.
            assert_eq!(
                failed(&message).to_string(),
                format!(
                    "# [allow (dead_code , missing_docs)] pub mod manifest {{ :: core :: compile_error ! ({message:?}) ; }}"
                )
            );
        }
    }

    #[test]
    fn a_handler_without_an_action_names_the_entry_to_add() {
        let caller = "struct E;\n\
            impl manifest::Actions for E {\n\
                fn greet<H: Host + ?Sized>(host: &H, input: GreetInput) -> R { todo() }\n\
                fn count<H: Host + ?Sized>(host: &H, input: CountInput) -> R { todo() }\n\
                fn say_goodbye<H: Host + ?Sized>(host: &H, input: X) -> R { todo() }\n\
            }\n\
            impl Other for E { fn elsewhere() {} }\n";
        let code = generate(TWO_ACTIONS, Path::new("/p/manifest.toml"), caller)
            .unwrap()
            .to_string();
        let expected = "the handler `say_goodbye` (line 5, in `impl manifest::Actions`) has no \
             action in /p/manifest.toml: add an [[actions]] entry for it there, e.g.\n\n\
             [[actions]]\n\
             name = \"hello_ext.say_goodbye\"\n\
             http = { method = \"POST\", route = \"/say-goodbye\" }\n\
             mcp_tool = \"plugin__hello_ext__say_goodbye\"\n\
             input_schema = { type = \"object\" }\n\n\
             or remove the handler (docs/manifest.md lists every field)";
        // The error comes first, then the module (so the compiler's
        // "not a member of trait" follows it).
        assert!(
            code.starts_with(&format!(":: core :: compile_error ! ({expected:?}) ;")),
            "{code}"
        );
        assert_eq!(code.matches("compile_error").count(), 1, "{code}");
        assert!(code.contains("pub mod manifest"), "{code}");
    }

    #[test]
    fn two_actions_with_one_handler_name_are_refused() {
        let clash = MANIFEST.replace("name = \"shop.type\"", "name = \"shop.orders_list\"");
        assert_eq!(
            generated(&clash).unwrap_err(),
            "/p/manifest.toml: the actions `shop.orders.list` and `shop.orders_list` both make the handler `orders_list`; rename one"
        );
    }
}
