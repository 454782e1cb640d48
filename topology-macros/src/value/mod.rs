//! Turning the value of one key into a typed value that keeps its tokens, so that every later
//! error can point at what the user wrote.

use core::time::Duration;

use proc_macro2::{Delimiter, Span};
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, LitStr, Path, UnOp};
use topology_core::duration::{self, DurationError};
use topology_core::rules::IntRange;

use crate::args::{Arg, Args, Value};
use crate::ctxt::Ctxt;
use crate::suggest;

mod lists;

/// An integer within its key's range, and where it was written.
#[derive(Clone, Copy)]
pub(crate) struct Int {
    pub value: i128,
    pub span: Span,
}

/// A duration, and the literal it was read from.
pub(crate) struct Dur {
    pub value: Duration,
    pub lit: LitStr,
}

/// A list of string literals (`["a", "b"]`).
pub(crate) struct StrList {
    /// The string literals found.
    pub lits: Vec<LitStr>,
    /// The brackets.
    pub brackets: Span,
    /// Whether every element was a string literal (each that was not is reported).
    pub complete: bool,
}

/// `[("key", "value"), ..]`: the pairs whose key and value are both string literals (each
/// element that is not one is reported).
pub(crate) struct Pairs {
    pub pairs: Vec<(LitStr, LitStr)>,
}

/// A stream given as a type path or a name.
pub(crate) enum PathOrString {
    Path(Path),
    String(LitStr),
}

/// The `crate = path` override.
pub(crate) enum Krate {
    /// Not given: `::nats_topology`.
    Default,
    Path(Path),
    /// Given, but not a path (reported).
    Invalid,
}

/// A message about one key of one attribute: "`#[attr]` key `key`: what".
pub(crate) fn key_msg(attr: &str, key: &str, what: impl std::fmt::Display) -> String {
    format!("`#[{attr}]` key `{key}`: {what}")
}

/// The value of one key, converted with errors that name the attribute and key.
pub(crate) struct Key<'a> {
    pub attr: &'static str,
    pub key: &'static str,
    /// How the key is written, for messages: `name = "ORDERS"`.
    pub example: &'static str,
    pub arg: Option<&'a Arg>,
}

impl Args {
    /// A handle to convert the value of `key` (here, with the conversions, so that the
    /// parser of the attribute's tokens needs nothing of them).
    pub(crate) fn key<'a>(&'a self, key: &'static str, example: &'static str) -> Key<'a> {
        Key {
            attr: self.attr(),
            key,
            example,
            arg: self.get(key),
        }
    }
}

impl<'a> Key<'a> {
    /// A message prefixed with the attribute and key.
    pub(crate) fn msg(&self, what: impl std::fmt::Display) -> String {
        key_msg(self.attr, self.key, what)
    }

    /// The value expression; an error for a flag or a parenthesised list.
    fn expr(&self, cx: &mut Ctxt) -> Option<&'a Expr> {
        let arg = self.arg?;
        let (tokens, what): (&dyn ToTokens, String) = match &arg.value {
            Value::Expr(expr) => return Some(ungroup(expr)),
            Value::Flag => (&arg.key, format!("needs a value: `{}`", self.example)),
            Value::Parens(group) => {
                let message = match group.delimiter() {
                    Delimiter::Brace => {
                        format!(
                            "a `{{ .. }}` block is not a value here; write `{}`",
                            self.example
                        )
                    }
                    _ => format!("write `{}` (with `=`)", self.example),
                };
                (group, message)
            }
        };
        cx.error_spanned_by(tokens, self.msg(what));
        None
    }

    /// A `{ key = value, .. }` block, its keys parsed by `spec` (the key's own keys); the
    /// braces, for messages about the block as a whole.
    pub(crate) fn block(
        &self,
        spec: &'static crate::args::Spec,
        cx: &mut Ctxt,
    ) -> Option<(crate::args::Args, proc_macro2::Group)> {
        let arg = self.arg?;
        match &arg.value {
            Value::Parens(group) if group.delimiter() == Delimiter::Brace => Some((
                crate::args::Args::parse(spec, group.stream(), cx),
                group.clone(),
            )),
            Value::Parens(group) => {
                cx.error_spanned_by(group, self.msg(format!("write `{}`", self.example)));
                None
            }
            Value::Expr(expr) => {
                cx.error_spanned_by(
                    expr,
                    self.msg(format!(
                        "expected a `{{ .. }}` block, as in `{}`",
                        self.example
                    )),
                );
                None
            }
            Value::Flag => {
                cx.error_spanned_by(
                    &arg.key,
                    self.msg(format!("needs a value: `{}`", self.example)),
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
    pub(crate) fn int(&self, range: IntRange, hint: &str, cx: &mut Ctxt) -> Option<Int> {
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
            return Some(Int {
                value: v,
                span: expr.span(),
            });
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
    pub(crate) fn duration(&self, nonzero: bool, cx: &mut Ctxt) -> Option<Dur> {
        let lit = self.string(cx)?;
        let value = self.duration_of(&lit, nonzero, cx)?;
        Some(Dur { value, lit })
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
        let value: &dyn ToTokens = match &arg.value {
            Value::Flag => return true,
            Value::Expr(expr) => match ungroup(expr) {
                Expr::Lit(ExprLit {
                    lit: Lit::Bool(b), ..
                }) => return b.value,
                other => other,
            },
            Value::Parens(group) => group,
        };
        cx.error_spanned_by(
            value,
            self.msg(format!("takes no value; write `{}` alone", self.key)),
        );
        false
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
    pub(crate) fn crate_path(&self, cx: &mut Ctxt) -> Krate {
        if self.arg.is_none() {
            return Krate::Default;
        }
        match self.path_or_string(cx) {
            None => Krate::Invalid,
            Some(PathOrString::Path(path)) => Krate::Path(path),
            Some(PathOrString::String(lit)) => match lit.parse::<Path>() {
                Ok(path) => Krate::Path(path),
                Err(_) => {
                    cx.error_spanned_by(
                        &lit,
                        self.msg(format!(
                            "{:?} is not a path; write the path the facade is reachable at, as in `{}`",
                            lit.value(),
                            self.example
                        )),
                    );
                    Krate::Invalid
                }
            },
        }
    }

    /// One duration literal (of this key's value, or an element of its list), parsed with the
    /// core rules; zero refused when `nonzero`.
    pub(crate) fn duration_of(
        &self,
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
                    self.msg(format!(
                        "{value:?} is zero, which means nothing here; give a positive duration such as `\"30s\"`, or omit the key"
                    )),
                );
                None
            }
            Err(error) => {
                cx.error_spanned_by(
                    lit,
                    self.msg(format!("{value:?} is not a duration: {}", error.message())),
                );
                None
            }
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

/// The key's subject tokens (`"{1}"`, `"{1}.{3}"`): their positions, or what is wrong.
pub(crate) fn partition_key(key: &str) -> Result<Vec<u8>, String> {
    let mut positions = Vec::new();
    let mut rest = key.trim();
    while !rest.is_empty() {
        let Some(inner) = rest.strip_prefix('{') else {
            return Err(format!(
                "{key:?} is not a key: write the subject's `*` tokens it is made of by position from 1, in braces: `key = \"{{1}}\"`, `key = \"{{1}}.{{2}}\"`"
            ));
        };
        let Some((number, after)) = inner.split_once('}') else {
            return Err(format!(
                "{key:?} has an unclosed `{{`: write `key = \"{{1}}\"`"
            ));
        };
        match number.trim().parse::<u8>() {
            Ok(n) => positions.push(n),
            Err(_) => {
                return Err(format!(
                    "`{{{number}}}` in {key:?} is not a token position: write the position of a `*` token of the subject, from 1, e.g. `{{1}}`"
                ));
            }
        }
        rest = after.trim_start_matches(|c: char| c == '.' || c == ',' || c.is_whitespace());
    }
    Ok(positions)
}
