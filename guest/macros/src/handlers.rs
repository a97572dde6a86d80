//! Handlers without an action: the `impl … Actions for …` blocks of the
//! source that calls `manifest!`, compared with the manifest's actions, so
//! a handler the manifest does not declare is an error naming manifest.toml
//! and the `[[actions]]` entry to add, before the compiler's own
//! "not a member of trait" (E0407).

use std::path::Path;
use std::str::FromStr;

use extension_release::Manifest;
use proc_macro2::{Delimiter, TokenStream, TokenTree};

use crate::Action;

/// A handler in the source that no action of the manifest makes.
pub(crate) struct Undeclared {
    /// The handler's name, without `r#`.
    handler: String,
    /// 1-based line of its `fn` in the calling source.
    line: usize,
    /// The action name the entry would declare (`hello_ext.farewell`).
    action: String,
    /// The MCP tool name the entry would declare.
    mcp_tool: String,
}

impl Undeclared {
    /// The compile error's text.
    pub(crate) fn message(&self, manifest: &Path) -> String {
        let Self {
            handler,
            line,
            action,
            mcp_tool,
        } = self;
        format!(
            "the handler `{handler}` (line {line}, in `impl manifest::Actions`) has no action in \
             {manifest}: add an [[actions]] entry for it there, e.g.\n\n\
             [[actions]]\n\
             name = \"{action}\"\n\
             http = {{ method = \"POST\", route = \"/{route}\" }}\n\
             mcp_tool = \"{mcp_tool}\"\n\
             input_schema = {{ type = \"object\" }}\n\n\
             or remove the handler (docs/manifest.md lists every field)",
            manifest = manifest.display(),
            route = handler.replace('_', "-"),
        )
    }
}

/// The handlers `source` implements in an `impl … Actions for …` block that
/// none of `actions` makes, in source order. A source that does not
/// tokenize is left to the compiler.
pub(crate) fn undeclared(source: &str, actions: &[Action], manifest: &Manifest) -> Vec<Undeclared> {
    let Ok(tokens) = TokenStream::from_str(source) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    impl_blocks(tokens, &mut found);
    let declared: Vec<String> = actions
        .iter()
        .map(|a| unraw(&a.method.to_string()))
        .collect();
    // The entry's action name takes the manifest's first word (the
    // extension's), as its actions do.
    let prefix = manifest
        .actions
        .first()
        .and_then(|a| a.name.split_once('.'))
        .map(|(first, _)| first.to_owned())
        .unwrap_or_else(|| manifest.extension.id.replace('-', "_"));
    let tool_prefix = manifest.extension.id.replace('-', "_");
    found
        .into_iter()
        .filter(|handler| !declared.contains(handler))
        .map(|handler| Undeclared {
            line: line_of(source, &handler),
            action: format!("{prefix}.{handler}"),
            mcp_tool: format!("plugin__{tool_prefix}__{handler}"),
            handler,
        })
        .collect()
}

fn unraw(ident: &str) -> String {
    ident.strip_prefix("r#").unwrap_or(ident).to_owned()
}

/// The `fn` names of every `impl … Actions for … { … }` in `tokens`, also
/// inside modules and functions.
fn impl_blocks(tokens: TokenStream, found: &mut Vec<String>) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < trees.len() {
        if is_ident(&trees[i], "impl") {
            // The header runs to the body's brace.
            let body = trees[i + 1..]
                .iter()
                .position(|t| matches!(t, TokenTree::Group(g) if g.delimiter() == Delimiter::Brace))
                .map(|at| i + 1 + at);
            if let Some(body) = body {
                let header = &trees[i + 1..body];
                let for_actions = header
                    .windows(2)
                    .any(|pair| is_ident(&pair[0], "Actions") && is_ident(&pair[1], "for"));
                if let (true, TokenTree::Group(group)) = (for_actions, &trees[body]) {
                    found.extend(functions(group.stream()));
                    i = body + 1;
                    continue;
                }
            }
        }
        if let TokenTree::Group(group) = &trees[i] {
            impl_blocks(group.stream(), found);
        }
        i += 1;
    }
}

/// The names after `fn` at the top of an impl body.
fn functions(body: TokenStream) -> Vec<String> {
    let trees: Vec<TokenTree> = body.into_iter().collect();
    trees
        .windows(2)
        .filter(|pair| is_ident(&pair[0], "fn"))
        .filter_map(|pair| match &pair[1] {
            TokenTree::Ident(name) => Some(unraw(&name.to_string())),
            _ => None,
        })
        .collect()
}

fn is_ident(tree: &TokenTree, word: &str) -> bool {
    matches!(tree, TokenTree::Ident(ident) if ident == word)
}

/// The 1-based line of `fn <handler>` in `source` (1 if not found).
fn line_of(source: &str, handler: &str) -> usize {
    [format!("fn {handler}"), format!("fn r#{handler}")]
        .iter()
        .filter_map(|needle| {
            source.match_indices(needle.as_str()).find_map(|(at, _)| {
                let next = source[at + needle.len()..].chars().next();
                (!next.is_some_and(|c| c.is_alphanumeric() || c == '_')).then_some(at)
            })
        })
        .min()
        .map_or(1, |at| source[..at].matches('\n').count() + 1)
}
