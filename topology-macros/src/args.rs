//! Parsing `key = value` attribute arguments into keys and untyped values.
//!
//! Each comma-separated argument is parsed on its own with `syn::meta::parser`, so that a
//! malformed argument does not hide the mistakes in the others. Values are kept as `syn::Expr`;
//! [`crate::value`] turns them into typed, spanned values key by key.

use proc_macro2::{Group, TokenStream, TokenTree};
use quote::ToTokens;
use syn::parse::Parser;
use syn::{Expr, Ident};

use crate::ctxt::Ctxt;
use crate::suggest;

/// One `key`, `key = value` or `key(...)` argument.
pub(crate) struct Arg {
    pub key: Ident,
    pub value: Value,
}

pub(crate) enum Value {
    /// `key` alone.
    Flag,
    /// `key = value`.
    Expr(Expr),
    /// `key(...)` or `key = { .. }`: never valid here; kept to say so.
    Parens(Group),
}

/// A key that is refused with a dedicated explanation rather than "unknown key".
pub(crate) struct Refused {
    pub key: &'static str,
    /// Why, after "`#[attr]` has no `key` key: ", in pieces written one after the other.
    pub why: &'static [&'static str],
    /// A required key whose absence this message already explains (`durable` explains the
    /// missing `group`), so that it is not reported twice.
    pub answers: Option<&'static str>,
}

/// What an attribute accepts.
pub(crate) struct Spec {
    /// The attribute's name, as users write it (`stream`, `queue_consumer`, `broadcast`).
    pub attr: &'static str,
    /// Accepted keys, in documentation order.
    pub keys: &'static [&'static str],
    /// Keys refused with an explanation.
    pub refused: &'static [Refused],
    /// Keys of the other macros, to say where a key belongs.
    pub elsewhere: &'static [(&'static str, &'static str)],
}

/// The arguments of one attribute, by key, each at most once.
pub(crate) struct Args {
    spec: &'static Spec,
    args: Vec<(&'static str, Arg)>,
    /// Whether the argument list parsed as `key = value, ...` throughout.
    pub syntax_ok: bool,
    /// Required keys whose absence an error already explains.
    answered: Vec<&'static str>,
}

impl Args {
    /// Parses the attribute's arguments. Every problem goes to `cx`; what could be parsed is kept.
    pub(crate) fn parse(spec: &'static Spec, tokens: TokenStream, cx: &mut Ctxt) -> Args {
        let mut args = Args {
            spec,
            args: Vec::new(),
            syntax_ok: true,
            answered: Vec::new(),
        };
        for chunk in split_commas(tokens, spec, cx, &mut args.syntax_ok) {
            let mut parsed = None;
            let parser = syn::meta::parser(|meta| {
                let Some(key) = meta.path.get_ident().cloned() else {
                    return Err(syn::Error::new_spanned(
                        &meta.path,
                        format!(
                            "`#[{}]` takes `key = value` arguments; `{}` is not a key",
                            spec.attr,
                            meta.path.to_token_stream().to_string().replace(' ', "")
                        ),
                    ));
                };
                let value = if meta.input.is_empty() {
                    Value::Flag
                } else if meta.input.peek(syn::Token![=]) {
                    let eq: syn::Token![=] = meta.input.parse()?;
                    if meta.input.is_empty() {
                        return Err(syn::Error::new(
                            eq.span,
                            format!("`#[{}]` key `{key}` needs a value after `=`", spec.attr),
                        ));
                    }
                    if meta.input.peek(syn::token::Brace) {
                        // `{ .. }` (a map, as in other languages) does not parse as a value.
                        let group: Group = meta.input.parse()?;
                        parsed = Some(Arg {
                            key,
                            value: Value::Parens(group),
                        });
                        return Ok(());
                    }
                    if meta.input.peek(syn::token::Bracket) && holds_block(meta.input) {
                        // `[A, { stream = B, .. }]`: a list with blocks, read by its key.
                        let group: Group = meta.input.parse()?;
                        parsed = Some(Arg {
                            key,
                            value: Value::Parens(group),
                        });
                        return Ok(());
                    }
                    let expr: Expr = meta.input.parse()?;
                    if !meta.input.is_empty() {
                        // Keep what parsed; the rest is a missing comma or stray tokens.
                        parsed = Some(Arg {
                            key,
                            value: Value::Expr(expr),
                        });
                        return Err(meta.input.error(format!(
                            "expected `,` between the arguments of `#[{}]`",
                            spec.attr
                        )));
                    }
                    Value::Expr(expr)
                } else if meta.input.peek(syn::token::Paren) {
                    Value::Parens(meta.input.parse()?)
                } else {
                    return Err(meta.input.error(format!(
                        "expected `=` after `{key}` in `#[{}]`, as in `{key} = ...`",
                        spec.attr
                    )));
                };
                parsed = Some(Arg { key, value });
                Ok(())
            });
            match parser.parse2(chunk) {
                Ok(()) => {}
                Err(error) => {
                    args.syntax_ok = false;
                    cx.syn_error(error);
                }
            }
            if let Some(arg) = parsed {
                args.accept(arg, cx);
            }
        }
        args
    }

    fn accept(&mut self, arg: Arg, cx: &mut Ctxt) {
        let spec = self.spec;
        let name = arg.key.to_string();
        let name = name.strip_prefix("r#").unwrap_or(&name);
        if let Some(refused) = spec.refused.iter().find(|r| r.key == name) {
            cx.error_spanned_by(
                &arg.key,
                format!(
                    "`#[{}]` has no `{name}` key: {}",
                    spec.attr,
                    refused.why.concat()
                ),
            );
            self.answered.extend(refused.answers);
            return;
        }
        let Some(key) = spec.keys.iter().copied().find(|k| *k == name) else {
            let (message, near) = unknown_key_message(spec, name);
            cx.error_spanned_by(&arg.key, message);
            self.answered.extend(near);
            return;
        };
        if self.args.iter().any(|(k, _)| *k == key) {
            cx.error_spanned_by(
                &arg.key,
                format!(
                    "duplicate key `{key}` in `#[{}]`; give each key once",
                    spec.attr
                ),
            );
            return;
        }
        self.args.push((key, arg));
    }

    /// The argument given for `key`, if any.
    pub(crate) fn get(&self, key: &str) -> Option<&Arg> {
        debug_assert!(self.spec.keys.contains(&key), "{key} is not a key");
        self.args
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, arg)| arg)
    }

    /// Whether the absence of a required key should be reported: not after a syntax error
    /// (the key may be in the part that did not parse), nor when another error explains it.
    pub(crate) fn report_missing(&self, key: &str) -> bool {
        self.syntax_ok && self.get(key).is_none() && !self.answered.contains(&key)
    }

    /// Where `key` was given among the accepted arguments.
    pub(crate) fn position(&self, key: &str) -> Option<usize> {
        self.args.iter().position(|(k, _)| *k == key)
    }

    /// The attribute's name, for messages.
    pub(crate) fn attr(&self) -> &'static str {
        self.spec.attr
    }

    /// The keys given and accepted, in order: each by name, and as written.
    pub(crate) fn given(&self) -> Vec<(&'static str, Ident)> {
        self.args
            .iter()
            .map(|(key, arg)| (*key, arg.key.clone()))
            .collect()
    }

    /// Reports the absence of a required key at the call site, unless [`Args::report_missing`]
    /// says not to.
    pub(crate) fn require(&self, key: &str, message: impl std::fmt::Display, cx: &mut Ctxt) {
        if self.report_missing(key) {
            cx.error_at(proc_macro2::Span::call_site(), message);
        }
    }
}

/// Whether the `[..]` next in `input` has a `{ .. }` block among its elements.
fn holds_block(input: syn::parse::ParseStream) -> bool {
    input.fork().parse::<Group>().is_ok_and(|group| {
        group.stream().into_iter().any(|tree| {
            matches!(&tree, TokenTree::Group(g) if g.delimiter() == proc_macro2::Delimiter::Brace)
        })
    })
}

/// The message for an unknown key, and the key it is probably a typo of.
fn unknown_key_message(spec: &Spec, name: &str) -> (String, Option<&'static str>) {
    let expected = spec
        .keys
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut message = format!("unknown key `{name}` in `#[{}]`", spec.attr);
    let near = suggest::nearest(name, spec.keys);
    if let Some((_, other)) = spec.elsewhere.iter().find(|(k, _)| *k == name) {
        message.push_str(&format!(" (`{name}` is a key of `#[{other}]`)"));
    } else if let Some(near) = near {
        message.push_str(&format!(" (did you mean `{near}`?)"));
    }
    message.push_str(&format!("; expected one of: {expected}"));
    (message, near)
}

/// Splits at top-level commas. An empty argument between two commas is an error; a trailing
/// comma is fine.
fn split_commas(
    tokens: TokenStream,
    spec: &Spec,
    cx: &mut Ctxt,
    syntax_ok: &mut bool,
) -> Vec<TokenStream> {
    let mut chunks = Vec::new();
    let mut current = TokenStream::new();
    for tree in tokens {
        match &tree {
            TokenTree::Punct(p) if p.as_char() == ',' => {
                if current.is_empty() {
                    *syntax_ok = false;
                    cx.error_at(
                        p.span(),
                        format!(
                            "unexpected `,` in `#[{}]`: expected `key = value`",
                            spec.attr
                        ),
                    );
                } else {
                    chunks.push(std::mem::take(&mut current));
                }
            }
            _ => current.extend([tree]),
        }
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}
