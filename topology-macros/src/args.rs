//! Parsing `key = value` attribute arguments, and turning values into typed, spanned values.
//!
//! Each comma-separated argument is parsed on its own with `syn::meta::parser`, so that a
//! malformed argument does not hide the mistakes in the others. Values are kept as `syn::Expr`
//! and converted key by key, keeping the tokens so that every error points at its value.

use core::time::Duration;

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Path, UnOp};
use topology_core::duration::{self, DurationError};
use topology_core::rules::IntRange;

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
    /// `key(...)`: never valid here; kept to say so.
    Parens(Group),
}

/// A key that is refused with a dedicated explanation rather than "unknown key".
pub(crate) struct Refused {
    pub key: &'static str,
    pub message: fn(attr: &str, key: &str) -> String,
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
            cx.error_spanned_by(&arg.key, (refused.message)(spec.attr, name));
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

    /// A handle to convert the value of `key`.
    pub(crate) fn key<'a>(&'a self, key: &'static str, example: &'static str) -> Key<'a> {
        Key {
            attr: self.spec.attr,
            key,
            example,
            arg: self.get(key),
        }
    }
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

/// The value of one key, converted with errors that name the attribute and key.
pub(crate) struct Key<'a> {
    pub attr: &'static str,
    pub key: &'static str,
    /// How the key is written, for messages: `name = "ORDERS"`.
    pub example: &'static str,
    pub arg: Option<&'a Arg>,
}

impl<'a> Key<'a> {
    /// The `key` token, when given.
    pub(crate) fn key_span(&self) -> Option<Span> {
        self.arg.map(|arg| arg.key.span())
    }

    /// A message prefixed with the attribute and key.
    pub(crate) fn msg(&self, what: impl std::fmt::Display) -> String {
        format!("`#[{}]` key `{}`: {what}", self.attr, self.key)
    }

    /// The value expression; an error for a flag or a parenthesised list.
    fn expr(&self, cx: &mut Ctxt) -> Option<&'a Expr> {
        let arg = self.arg?;
        match &arg.value {
            Value::Expr(expr) => Some(ungroup(expr)),
            Value::Flag => {
                cx.error_spanned_by(
                    &arg.key,
                    self.msg(format!("needs a value: `{}`", self.example)),
                );
                None
            }
            Value::Parens(group) => {
                cx.error_spanned_by(
                    group,
                    self.msg(format!("write `{}` (with `=`)", self.example)),
                );
                None
            }
        }
    }

    /// A string literal.
    pub(crate) fn string(&self, cx: &mut Ctxt) -> Option<LitStr> {
        let expr = self.expr(cx)?;
        match expr {
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => Some(s.clone()),
            _ => {
                cx.error_spanned_by(
                    expr,
                    self.msg(format!(
                        "expected a string literal, as in `{}`",
                        self.example
                    )),
                );
                None
            }
        }
    }

    /// An integer literal (possibly negative) within `range`.
    /// `hint` (if not empty) is added to an out-of-range message.
    pub(crate) fn int(&self, range: IntRange, hint: &str, cx: &mut Ctxt) -> Option<(i128, Span)> {
        let expr = self.expr(cx)?;
        let (negative, lit) = match expr {
            Expr::Lit(ExprLit {
                lit: Lit::Int(lit), ..
            }) => (false, lit),
            Expr::Unary(unary) if matches!(unary.op, UnOp::Neg(_)) => match ungroup(&unary.expr) {
                Expr::Lit(ExprLit {
                    lit: Lit::Int(lit), ..
                }) => (true, lit),
                _ => return self.not_an_integer(expr, cx),
            },
            _ => return self.not_an_integer(expr, cx),
        };
        let value = lit
            .base10_parse::<i128>()
            .ok()
            .map(|v| if negative { -v } else { v });
        if let Some(v) = value.filter(|v| range.contains(*v)) {
            return Some((v, expr.span()));
        }
        let shown = expr.to_token_stream().to_string().replace(' ', "");
        let mut message = range_message(range, value, &shown);
        if !hint.is_empty() {
            message.push_str("; ");
            message.push_str(hint);
        }
        cx.error_spanned_by(expr, self.msg(message));
        None
    }

    fn not_an_integer<T>(&self, expr: &Expr, cx: &mut Ctxt) -> Option<T> {
        cx.error_spanned_by(
            expr,
            self.msg(format!("expected an integer, as in `{}`", self.example)),
        );
        None
    }

    /// A duration literal (`"30s"`, `"1h30m"`); zero refused when `nonzero`.
    pub(crate) fn duration(&self, nonzero: bool, cx: &mut Ctxt) -> Option<(Duration, LitStr)> {
        let lit = self.string(cx)?;
        parse_duration(self, &lit, nonzero, cx).map(|d| (d, lit))
    }

    /// An array of string literals (`["a", "b"]`): the string literals found, the span of the
    /// brackets, and whether every element was one (each that is not is reported).
    pub(crate) fn strings(&self, cx: &mut Ctxt) -> Option<(Vec<LitStr>, Span, bool)> {
        let expr = self.expr(cx)?;
        match expr {
            Expr::Array(array) => {
                let mut out = Vec::new();
                let mut complete = true;
                for elem in &array.elems {
                    match ungroup(elem) {
                        Expr::Lit(ExprLit {
                            lit: Lit::Str(s), ..
                        }) => out.push(s.clone()),
                        other => {
                            complete = false;
                            cx.error_spanned_by(
                                other,
                                self.msg(format!(
                                    "expected a string literal in the list, as in `{}`",
                                    self.example
                                )),
                            );
                        }
                    }
                }
                Some((out, array.bracket_token.span.join(), complete))
            }
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => {
                cx.error_spanned_by(
                    expr,
                    self.msg(format!(
                        "expected a list of strings; write `{} = [{:?}]`",
                        self.key,
                        s.value()
                    )),
                );
                None
            }
            _ => {
                cx.error_spanned_by(
                    expr,
                    self.msg(format!(
                        "expected a list of string literals, as in `{}`",
                        self.example
                    )),
                );
                None
            }
        }
    }

    /// One of a fixed set of string values.
    pub(crate) fn choice<T: Copy>(&self, choices: &[(&str, T)], cx: &mut Ctxt) -> Option<T> {
        let lit = self.string(cx)?;
        let value = lit.value();
        if let Some((_, t)) = choices.iter().find(|(name, _)| *name == value) {
            return Some(*t);
        }
        let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
        let expected = names
            .iter()
            .map(|n| format!("`\"{n}\"`"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut message = format!("unknown value {value:?}");
        if let Some(near) = suggest::nearest(&value, &names) {
            message.push_str(&format!(" (did you mean `\"{near}\"`?)"));
        }
        message.push_str(&format!("; expected one of: {expected}"));
        cx.error_spanned_by(&lit, self.msg(message));
        None
    }

    /// A flag: `key` alone (or `key = true` / `key = false`).
    pub(crate) fn flag(&self, cx: &mut Ctxt) -> bool {
        let Some(arg) = self.arg else {
            return false;
        };
        match &arg.value {
            Value::Flag => true,
            Value::Expr(expr) => match ungroup(expr) {
                Expr::Lit(ExprLit {
                    lit: Lit::Bool(b), ..
                }) => b.value,
                other => {
                    cx.error_spanned_by(
                        other,
                        self.msg(format!("takes no value; write `{}` alone", self.key)),
                    );
                    false
                }
            },
            Value::Parens(group) => {
                cx.error_spanned_by(
                    group,
                    self.msg(format!("takes no value; write `{}` alone", self.key)),
                );
                false
            }
        }
    }

    /// A path (`Orders`, `crate::streams::Orders`) or a string literal.
    pub(crate) fn path_or_string(&self, cx: &mut Ctxt) -> Option<PathOrString> {
        let expr = self.expr(cx)?;
        match expr {
            Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => {
                Some(PathOrString::Path(p.path.clone()))
            }
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => Some(PathOrString::String(s.clone())),
            _ => {
                cx.error_spanned_by(
                    expr,
                    self.msg(format!(
                        "expected a path or a string literal, as in `{}`",
                        self.example
                    )),
                );
                None
            }
        }
    }

    /// The `crate = path` override (a path, or a string holding one).
    pub(crate) fn crate_path(&self, cx: &mut Ctxt) -> Option<Path> {
        match self.path_or_string(cx)? {
            PathOrString::Path(path) => Some(path),
            PathOrString::String(lit) => match lit.parse::<Path>() {
                Ok(path) => Some(path),
                Err(_) => {
                    cx.error_spanned_by(
                        &lit,
                        self.msg(format!(
                            "{:?} is not a path; write the path the facade is reachable at, as in `{}`",
                            lit.value(),
                            self.example
                        )),
                    );
                    None
                }
            },
        }
    }
}

/// A stream given as a type path or a name.
pub(crate) enum PathOrString {
    Path(Path),
    String(LitStr),
}

/// Parses one duration literal with the core rules, reporting at the literal.
pub(crate) fn parse_duration(
    key: &Key<'_>,
    lit: &LitStr,
    nonzero: bool,
    cx: &mut Ctxt,
) -> Option<Duration> {
    let value = lit.value();
    let parsed = if nonzero {
        duration::parse_nonzero(&value)
    } else {
        duration::parse(&value)
    };
    match parsed {
        Ok(d) => Some(d),
        Err(DurationError::Zero) => {
            cx.error_spanned_by(
                lit,
                key.msg(format!(
                    "{value:?} is zero, which means nothing here; give a positive duration such as `\"30s\"`, or omit the key"
                )),
            );
            None
        }
        Err(error) => {
            cx.error_spanned_by(
                lit,
                key.msg(format!("{value:?} is not a duration: {}", error.message())),
            );
            None
        }
    }
}

fn range_message(range: IntRange, value: Option<i128>, shown: &str) -> String {
    let named = |v: i128| -> String {
        match v {
            v if v == i64::MAX as i128 => format!("{v} (`i64::MAX`)"),
            v if v == u32::MAX as i128 => format!("{v} (`u32::MAX`)"),
            v if v == i32::MAX as i128 => format!("{v} (`i32::MAX`)"),
            v => v.to_string(),
        }
    };
    let bounded = range.max < i32::MAX as i128;
    match value {
        _ if bounded => format!(
            "must be between {} and {}, got `{shown}`",
            range.min, range.max
        ),
        Some(v) if v < range.min => format!("must be at least {}, got `{shown}`", range.min),
        _ => format!("must be at most {}, got `{shown}`", named(range.max)),
    }
}

/// Looks through invisible groups (from `macro_rules!` fragments) and parentheses.
pub(crate) fn ungroup(expr: &Expr) -> &Expr {
    match expr {
        Expr::Group(g) => ungroup(&g.expr),
        Expr::Paren(p) => ungroup(&p.expr),
        other => other,
    }
}
