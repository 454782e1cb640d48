//! The keys of `mirror = ..`, `sources = [..]` and `subject_transform = { .. }` in
//! `#[stream(..)]`: a stream given as a type path or a name, alone or in a block with what is
//! taken from it.

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, LitStr};

use crate::args::{Args, Spec, Value};
use crate::ctxt::Ctxt;
use crate::value::{Key, PathOrString, key_msg};

/// The keys of a mirror's or a source's `{ .. }` block.
static ORIGIN_SPEC: Spec = Spec {
    attr: "stream(mirror/sources = { .. })",
    keys: &["stream", "filter", "transform", "domain", "api_prefix"],
    refused: &[],
    elsewhere: &[],
};

/// The keys of `subject_transform = { .. }`.
static TRANSFORM_SPEC: Spec = Spec {
    attr: "stream(subject_transform = { .. })",
    keys: &["src", "dest"],
    refused: &[],
    elsewhere: &[],
};

/// A mirror or one source: `Orders`, `"ORDERS"` or `{ stream = Orders, filter = "..", .. }`.
pub(crate) struct OriginAttrs {
    /// `None` when missing or unreadable (reported).
    pub stream: Option<PathOrString>,
    pub filter: Option<LitStr>,
    pub transform: Option<LitStr>,
    pub domain: Option<LitStr>,
    pub api_prefix: Option<LitStr>,
}

/// `subject_transform = { src = "..", dest = ".." }`.
pub(crate) struct TransformAttrs {
    pub src: Option<LitStr>,
    pub dest: Option<LitStr>,
}

/// `mirror = ..`.
pub(crate) fn mirror(key: &Key, cx: &mut Ctxt) -> Option<OriginAttrs> {
    let arg = key.arg?;
    match &arg.value {
        Value::Expr(expr) => one(key, expr.to_token_stream(), cx),
        Value::Parens(group) if group.delimiter() == Delimiter::Brace => {
            one(key, group.to_token_stream(), cx)
        }
        _ => {
            cx.error_spanned_by(&arg.key, key.msg(format!("write `{}`", key.example)));
            None
        }
    }
}

/// `sources = [..]`: each element as a mirror is written.
pub(crate) fn sources(key: &Key, cx: &mut Ctxt) -> Option<(Vec<OriginAttrs>, Span)> {
    let arg = key.arg?;
    let (elements, span) = match &arg.value {
        Value::Expr(Expr::Array(array)) => (array.elems.to_token_stream(), array.span()),
        Value::Parens(group) if group.delimiter() == Delimiter::Bracket => {
            (group.stream(), group.span())
        }
        Value::Expr(expr) => {
            cx.error_spanned_by(
                expr,
                key.msg(format!("expected a list, as in `{}`", key.example)),
            );
            return None;
        }
        _ => {
            cx.error_spanned_by(&arg.key, key.msg(format!("write `{}`", key.example)));
            return None;
        }
    };
    let mut origins = Vec::new();
    let mut current = TokenStream::new();
    let mut chunks = Vec::new();
    for tree in elements {
        match &tree {
            TokenTree::Punct(p) if p.as_char() == ',' => chunks.push(std::mem::take(&mut current)),
            _ => current.extend([tree]),
        }
    }
    chunks.push(current);
    for chunk in chunks.into_iter().filter(|c| !c.is_empty()) {
        origins.extend(one(key, chunk, cx));
    }
    Some((origins, span))
}

/// One origin: a `{ .. }` block, or a path or string alone.
fn one(key: &Key, tokens: TokenStream, cx: &mut Ctxt) -> Option<OriginAttrs> {
    let span = tokens.span();
    let mut trees = tokens.clone().into_iter();
    if let (Some(TokenTree::Group(group)), None) = (trees.next(), trees.next())
        && group.delimiter() == Delimiter::Brace
    {
        return Some(block(&group, cx));
    }
    let stream = match syn::parse2::<Expr>(tokens) {
        Ok(Expr::Path(p)) if p.qself.is_none() && p.attrs.is_empty() => {
            Some(PathOrString::Path(p.path))
        }
        Ok(Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        })) => Some(PathOrString::String(s)),
        _ => {
            cx.error_at(
                span,
                key.msg(format!(
                    "expected a `#[stream]` type, a stream's name or a `{{ stream = .., filter = \"..\" }}` block, as in `{}`",
                    key.example
                )),
            );
            None
        }
    }?;
    Some(OriginAttrs {
        stream: Some(stream),
        filter: None,
        transform: None,
        domain: None,
        api_prefix: None,
    })
}

fn block(group: &Group, cx: &mut Ctxt) -> OriginAttrs {
    let args = Args::parse(&ORIGIN_SPEC, group.stream(), cx);
    let stream = args.key("stream", "stream = Orders").path_or_string(cx);
    if args.report_missing("stream") {
        cx.error_spanned_by(
            group,
            key_msg(
                "stream",
                "mirror",
                "the block needs `stream = ..`: the `#[stream]` type or the name of the stream taken from, as in `{ stream = Orders, filter = \"orders.eu.>\" }`",
            ),
        );
    }
    OriginAttrs {
        stream,
        filter: args.key("filter", "filter = \"orders.eu.>\"").string(cx),
        transform: args
            .key("transform", "transform = \"eu.orders.>\"")
            .string(cx),
        domain: args.key("domain", "domain = \"hub\"").string(cx),
        api_prefix: args
            .key("api_prefix", "api_prefix = \"$JS.hub.API\"")
            .string(cx),
    }
}

/// `subject_transform = { src = "..", dest = ".." }`, both required.
pub(crate) fn transform(key: &Key, cx: &mut Ctxt) -> Option<TransformAttrs> {
    let (block, group) = key.block(&TRANSFORM_SPEC, cx)?;
    let attrs = TransformAttrs {
        src: block.key("src", "src = \"in.>\"").string(cx),
        dest: block.key("dest", "dest = \"events.>\"").string(cx),
    };
    for missing in ["src", "dest"] {
        if block.report_missing(missing) {
            cx.error_spanned_by(
                &group,
                key.msg(format!(
                    "the block needs `{missing} = \"..\"`, as in `{}`",
                    key.example
                )),
            );
        }
    }
    Some(attrs)
}
