//! Reading a file's paths: a small tokenizer (comments, string and
//! character literals and lifetimes left out) and the resolution of every
//! path that starts at the crate root, a `super` chain or `self` to a full
//! module path, `use a::{b, c::D}` groups included.

/// The modules a crate root declares from files: `mod name;`.
pub(super) fn declared_modules(text: &str) -> Vec<String> {
    let tokens = tokens(text);
    tokens
        .windows(3)
        .filter_map(|window| match window {
            [
                (_, Token::Ident(keyword)),
                (_, Token::Ident(name)),
                (_, Token::Punct(';')),
            ] if keyword == "mod" => Some(name.clone()),
            _ => None,
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// The tokens of `text` with their lines; comments, string and character
/// literals and lifetimes are left out.
fn tokens(text: &str) -> Vec<(usize, Token)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let skip_to = |i: &mut usize, line: &mut usize, end: usize| {
        *line += chars[*i..end.min(chars.len())]
            .iter()
            .filter(|c| **c == '\n')
            .count();
        *i = end;
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            _ if c.is_whitespace() => i += 1,
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                let (mut depth, mut j) = (0usize, i);
                while j < chars.len() {
                    if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                        depth += 1;
                        j += 2;
                    } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                        depth -= 1;
                        j += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        j += 1;
                    }
                }
                skip_to(&mut i, &mut line, j);
            }
            '"' => {
                let mut j = i + 1;
                while j < chars.len() && chars[j] != '"' {
                    j += if chars[j] == '\\' { 2 } else { 1 };
                }
                skip_to(&mut i, &mut line, j + 1);
            }
            'r' | 'b' if raw_string_start(&chars, i).is_some() => {
                let (hashes, open) = raw_string_start(&chars, i).unwrap_or((0, i));
                let close: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let rest: String = chars[open + 1..].iter().collect();
                let end = rest.find(&close).map_or(chars.len(), |at| {
                    open + 1 + rest[..at].chars().count() + close.len()
                });
                skip_to(&mut i, &mut line, end);
            }
            '\'' => {
                // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
                if next == Some('\\') {
                    let mut j = i + 2;
                    while j < chars.len() && chars[j] != '\'' {
                        j += 1;
                    }
                    i = j + 1;
                } else if chars.get(i + 2) == Some(&'\'') {
                    i += 3;
                } else {
                    i += 1;
                    while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                        i += 1;
                    }
                }
            }
            ':' if next == Some(':') => {
                out.push((line, Token::PathSep));
                i += 2;
            }
            _ if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                // `b'x'`, `b"…"` prefixes are handled by the literal arms;
                // `r#ident` is a raw identifier.
                out.push((line, Token::Ident(word)));
            }
            _ => {
                out.push((line, Token::Punct(c)));
                i += 1;
            }
        }
    }
    out
}

/// At `i`, `r"`, `r#"`, `br"`, `br#"`…: the number of `#` and the index of
/// the opening quote.
fn raw_string_start(chars: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some((hashes, j))
}

/// A module path (`["state", "error"]`).
pub(super) type Module = Vec<String>;

/// Every path in `text` (the file of module `file_module`) that starts at
/// the crate root, a `super` chain or `self`, resolved to a full path from
/// the root, with its line and the module it is written in (inline `mod
/// name { … }` blocks extend the file's module path).
pub(super) fn references(file_module: &[String], text: &str) -> Vec<(usize, Module, Module)> {
    let tokens = tokens(text);
    let mut found = Vec::new();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let is = |at: usize, token: &Token| tokens.get(at).map(|(_, t)| t) == Some(token);
    let ident = |at: usize| match tokens.get(at) {
        Some((_, Token::Ident(name))) => Some(name.as_str()),
        _ => None,
    };
    while i < tokens.len() {
        let here: Module = file_module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(name, _)| name.clone()))
            .collect();
        let after_path = i > 0 && (is(i - 1, &Token::PathSep) || is(i - 1, &Token::Punct('$')));
        match &tokens[i].1 {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth = depth.saturating_sub(1);
                while inline.last().is_some_and(|(_, inside)| *inside > depth) {
                    inline.pop();
                }
            }
            Token::Ident(word) if word == "mod" => {
                if let Some(name) = ident(i + 1)
                    && is(i + 2, &Token::Punct('{'))
                {
                    depth += 1;
                    inline.push((name.to_string(), depth));
                    i += 3;
                    continue;
                }
            }
            Token::Ident(word)
                if (word == "crate" || word == "self")
                    && !after_path
                    && is(i + 1, &Token::PathSep) =>
            {
                let base = if word == "crate" {
                    Vec::new()
                } else {
                    here.clone()
                };
                found.extend(
                    resolve(&base, &tokens, i + 2)
                        .into_iter()
                        .map(|(line, path)| (line, here.clone(), path)),
                );
                i += 2;
                continue;
            }
            Token::Ident(word) if word == "super" && !after_path => {
                let mut ups = 0;
                let mut j = i;
                while ident(j) == Some("super") && is(j + 1, &Token::PathSep) {
                    ups += 1;
                    j += 2;
                }
                if ups > 0 && ups <= here.len() {
                    found.extend(
                        resolve(&here[..here.len() - ups], &tokens, j)
                            .into_iter()
                            .map(|(line, path)| (line, here.clone(), path)),
                    );
                }
                i = j.max(i + 1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The paths at `at` (after `base::`), each as `base` plus its segments:
/// one for `a::b::C`, one per item for `a::{b, c::D}`.
fn resolve(base: &[String], tokens: &[(usize, Token)], at: usize) -> Vec<(usize, Module)> {
    let mut path = base.to_vec();
    let mut i = at;
    let mut line = tokens.get(at).map(|(line, _)| *line).unwrap_or(0);
    loop {
        match tokens.get(i) {
            Some((at_line, Token::Ident(name))) => {
                line = *at_line;
                if name != "self" {
                    path.push(name.clone());
                }
                if tokens.get(i + 1).map(|(_, t)| t) == Some(&Token::PathSep) {
                    i += 2;
                    continue;
                }
                return vec![(line, path)];
            }
            Some((_, Token::Punct('{'))) => {
                let mut out = Vec::new();
                let mut nested = 0;
                let mut item_start = true;
                for j in i + 1..tokens.len() {
                    match &tokens[j].1 {
                        Token::Punct('{') => nested += 1,
                        Token::Punct('}') if nested == 0 => break,
                        Token::Punct('}') => nested -= 1,
                        Token::Punct(',') if nested == 0 => {
                            item_start = true;
                            continue;
                        }
                        _ => {}
                    }
                    if item_start && nested == 0 {
                        out.extend(resolve(&path, tokens, j));
                    }
                    item_start = false;
                }
                return out;
            }
            _ => return vec![(line, path)],
        }
    }
}
