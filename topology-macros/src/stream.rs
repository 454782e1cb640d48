//! `#[stream(..)]` on a unit struct.

use core::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::{Item, ItemStruct, LitStr};
use topology_core::names;
use topology_core::rules::{self, MAX_BYTES, MAX_MSG_SIZE, MAX_MSGS, REPLICAS};
use topology_core::subject;

use crate::args::{Args, Key, Spec};
use crate::ctxt::Ctxt;
use crate::emit;

pub(crate) static SPEC: Spec = Spec {
    attr: "stream",
    keys: &[
        "name",
        "subjects",
        "replicas",
        "storage",
        "retention",
        "max_age",
        "max_msgs",
        "max_bytes",
        "max_msg_size",
        "discard",
        "duplicate_window",
        "description",
        "external",
        "crate",
    ],
    refused: &[],
    elsewhere: &[
        ("stream", "queue_consumer"),
        ("group", "queue_consumer"),
        ("subject", "queue_consumer"),
        ("deliver", "broadcast"),
        ("delivery", "queue_consumer"),
        ("max_deliver", "queue_consumer"),
        ("ack_wait", "queue_consumer"),
        ("backoff", "queue_consumer"),
        ("concurrency", "queue_consumer"),
    ],
};

/// Keys an external stream cannot take (it is never created or changed here).
const SETTINGS: &[&str] = &[
    "replicas",
    "storage",
    "max_age",
    "max_msgs",
    "max_bytes",
    "max_msg_size",
    "discard",
    "duplicate_window",
    "description",
];

/// A validated stream declaration, with the tokens to generate it.
struct Decl {
    name: LitStr,
    subjects: Vec<LitStr>,
    /// `.builder(value)` calls, in `StreamDecl`'s field order.
    builders: Vec<TokenStream>,
}

pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut cx = Ctxt::new();
    let args = Args::parse(&SPEC, attr, &mut cx);
    let target = parse_item(&item, &mut cx);
    let krate = args.key("crate", "crate = my_facade").crate_path(&mut cx);
    let decl = validate(&args, &mut cx);

    let krate_tokens = emit::krate(krate.as_ref());
    let Some(target) = target else {
        return emit::with_errors(item, cx, "stream");
    };
    let ident = &target.ident;
    match (cx.check(), decl) {
        (Ok(()), Some(decl)) => {
            let name = &decl.name;
            let subjects = &decl.subjects;
            let builders = &decl.builders;
            quote! {
                #item
                const _: () = {
                    use #krate_tokens::__private as __nats_topology;
                    impl __nats_topology::StreamDef for #ident {
                        const DECL: __nats_topology::StreamDecl =
                            __nats_topology::StreamDecl::new(#name, &[#(#subjects),*]) #(#builders)*;
                    }
                    static __NATS_TOPOLOGY_STREAM: __nats_topology::StreamDecl =
                        <#ident as __nats_topology::StreamDef>::DECL;
                    __nats_topology::inventory::submit! {
                        __nats_topology::StreamRegistration { decl: &__NATS_TOPOLOGY_STREAM }
                    }
                };
            }
        }
        (result, _) => {
            let errors = emit::errors_or_bug(result, "stream");
            // Keep the struct, and make it a stream that checks nothing, so that consumers
            // naming it do not add "is not a stream" errors to the real ones. It is not
            // registered; the build fails anyway.
            let fallback = if krate.is_some() || args.get("crate").is_none() {
                quote! {
                    const _: () = {
                        use #krate_tokens::__private as __nats_topology;
                        impl __nats_topology::StreamDef for #ident {
                            const DECL: __nats_topology::StreamDecl =
                                __nats_topology::StreamDecl::new("", &[">"]);
                        }
                    };
                }
            } else {
                TokenStream::new()
            };
            quote! { #item #fallback #errors }
        }
    }
}

/// The struct, if the item is a non-generic unit struct; errors otherwise.
fn parse_item(item: &TokenStream, cx: &mut Ctxt) -> Option<ItemStruct> {
    let parsed = match syn::parse2::<Item>(item.clone()) {
        Ok(parsed) => parsed,
        Err(error) => {
            cx.syn_error(error);
            return None;
        }
    };
    let item_struct = match parsed {
        Item::Struct(s) => s,
        other => {
            cx.error_spanned_by(
                emit::item_head(&other),
                "`#[stream]` goes on a unit struct that names the stream, as in `pub struct Orders;`",
            );
            return None;
        }
    };
    let mut ok = true;
    if !item_struct.generics.params.is_empty() || item_struct.generics.where_clause.is_some() {
        ok = false;
        cx.error_spanned_by(
            &item_struct.generics,
            "`#[stream]` goes on a unit struct without generics, as in `pub struct Orders;`",
        );
    }
    if !matches!(item_struct.fields, syn::Fields::Unit) {
        ok = false;
        cx.error_spanned_by(
            &item_struct.fields,
            format!(
                "`#[stream]` goes on a unit struct: a stream type carries no data; write `struct {};`",
                item_struct.ident
            ),
        );
    }
    // A struct with a body is still kept and emitted; only the impls are skipped.
    if ok { Some(item_struct) } else { None }
}

fn validate(args: &Args, cx: &mut Ctxt) -> Option<Decl> {
    let mut ok = true;
    let mut builders = Vec::new();

    let name_key = args.key("name", "name = \"ORDERS\"");
    let name = name_key.string(cx);
    if let Some(name) = &name {
        if let Err(error) = names::check_stream_name(&name.value()) {
            ok = false;
            cx.error_spanned_by(
                name,
                name_key.msg(format!(
                    "{:?} is not a valid stream name: {}",
                    name.value(),
                    error.message()
                )),
            );
        }
    } else if args.report_missing("name") {
        cx.error_at(
            Span::call_site(),
            "`#[stream]` needs `name = \"...\"`: the stream's name on the server, as in `#[stream(name = \"ORDERS\", subjects = [\"orders.>\"])]`",
        );
    }

    let subjects_key = args.key("subjects", "subjects = [\"orders.>\"]");
    let subjects = subjects_key
        .strings(cx)
        .and_then(|(s, _, complete)| complete.then_some(s));
    if let Some(subjects) = &subjects {
        if subjects.is_empty() {
            ok = false;
            if let Some(span) = subjects_key.key_span() {
                cx.error_at(
                    span,
                    subjects_key.msg(
                        "a stream needs at least one subject, as in `subjects = [\"orders.>\"]`",
                    ),
                );
            }
        }
        ok &= check_filters(&subjects_key, subjects, "stream's subjects", cx);
    } else if args.report_missing("subjects") {
        cx.error_at(
            Span::call_site(),
            "`#[stream]` needs `subjects = [\"...\"]`: the subjects the stream captures, as in `subjects = [\"orders.>\"]`",
        );
    }

    let external_key = args.key("external", "external");
    let external = external_key.flag(cx);
    if external {
        for key in SETTINGS {
            if let Some(arg) = args.get(key) {
                ok = false;
                cx.error_spanned_by(
                    &arg.key,
                    format!(
                        "`#[stream]` key `{key}` cannot be set on an `external` stream: it is owned elsewhere, never created or changed here (only its `name`, `subjects` and `retention` are declared, for checks); remove `{key}`"
                    ),
                );
            }
        }
    }

    let replicas = args.key("replicas", "replicas = 3");
    if let Some((n, span)) = replicas.int(
        REPLICAS,
        "JetStream keeps a stream on at most 5 servers",
        cx,
    ) {
        let n = n as u8;
        builders.push(quote_spanned!(span=> .replicas(#n)));
    }
    let storage = args.key("storage", "storage = \"file\"");
    if let Some(v) = storage.choice(&[("file", "File"), ("memory", "Memory")], cx) {
        let v = syn::Ident::new(v, Span::call_site());
        builders.push(quote!(.storage(__nats_topology::Storage::#v)));
    }
    let retention = args.key("retention", "retention = \"limits\"");
    if let Some(v) = retention.choice(
        &[
            ("limits", "Limits"),
            ("interest", "Interest"),
            ("workqueue", "WorkQueue"),
        ],
        cx,
    ) {
        let v = syn::Ident::new(v, Span::call_site());
        builders.push(quote!(.retention(__nats_topology::Retention::#v)));
    }
    let max_age = args
        .key("max_age", "max_age = \"7d\"")
        .duration(true, cx)
        .map(|(d, _)| d);
    if let Some(d) = max_age {
        builders.push(emit_duration_builder("max_age", d));
    }
    for (key, range, example, hint) in [
        (
            "max_msgs",
            MAX_MSGS,
            "max_msgs = 1000000",
            "omit `max_msgs` for no limit",
        ),
        (
            "max_bytes",
            MAX_BYTES,
            "max_bytes = 1073741824",
            "omit `max_bytes` for no limit",
        ),
    ] {
        if let Some((n, _)) = args.key(key, example).int(range, hint, cx) {
            let n = n as i64;
            let method = syn::Ident::new(key, Span::call_site());
            builders.push(quote!(.#method(#n)));
        }
    }
    if let Some((n, _)) = args.key("max_msg_size", "max_msg_size = 1048576").int(
        MAX_MSG_SIZE,
        "omit `max_msg_size` for the server's limit",
        cx,
    ) {
        let n = n as i32;
        builders.push(quote!(.max_msg_size(#n)));
    }
    let discard = args.key("discard", "discard = \"old\"");
    if let Some(v) = discard.choice(&[("old", "Old"), ("new", "New")], cx) {
        let v = syn::Ident::new(v, Span::call_site());
        builders.push(quote!(.discard(__nats_topology::Discard::#v)));
    }
    let window_key = args.key("duplicate_window", "duplicate_window = \"2m\"");
    if let Some((window, lit)) = window_key.duration(true, cx) {
        if !rules::duplicate_window_fits(window, max_age) {
            ok = false;
            cx.error_spanned_by(
                &lit,
                window_key.msg(format!(
                    "{:?} is longer than `max_age`; the server refuses a duplicate window longer than the messages are kept; shorten it or raise `max_age`",
                    lit.value()
                )),
            );
        }
        builders.push(emit_duration_builder("duplicate_window", window));
    }
    let description_key = args.key(
        "description",
        "description = \"orders placed by customers\"",
    );
    if let Some(description) = description_key.string(cx) {
        ok &= check_description(&description_key, &description, cx);
        builders.push(quote!(.description(#description)));
    }
    if external {
        builders.push(quote!(.external()));
    }

    if !ok || cx.has_errors() {
        return None;
    }
    Some(Decl {
        name: name?,
        subjects: subjects?,
        builders,
    })
}

/// Checks each filter, and that no two overlap. `whose` names the list in messages.
pub(crate) fn check_filters(key: &Key<'_>, filters: &[LitStr], whose: &str, cx: &mut Ctxt) -> bool {
    let mut ok = true;
    let values: Vec<String> = filters.iter().map(LitStr::value).collect();
    for (lit, value) in filters.iter().zip(&values) {
        if let Err(error) = subject::check_filter(value) {
            ok = false;
            cx.error_spanned_by(
                lit,
                key.msg(format!(
                    "{value:?} is not a valid subject: {}",
                    error.message()
                )),
            );
        }
    }
    if !ok {
        return false;
    }
    for (j, later) in values.iter().enumerate() {
        if let Some(earlier) = values[..j].iter().find(|v| subject::overlaps(v, later)) {
            ok = false;
            let what = if earlier == later {
                format!("{later:?} is given twice; remove one")
            } else {
                format!(
                    "{later:?} overlaps {earlier:?}: the {whose} cannot overlap (the server refuses it); keep the wider one"
                )
            };
            cx.error_spanned_by(&filters[j], key.msg(what));
        }
    }
    ok
}

pub(crate) fn check_description(key: &Key<'_>, lit: &LitStr, cx: &mut Ctxt) -> bool {
    if rules::description_fits(&lit.value()) {
        return true;
    }
    cx.error_spanned_by(
        lit,
        key.msg(format!(
            "the description is {} bytes long; the server accepts at most {}",
            lit.value().len(),
            rules::MAX_DESCRIPTION_LEN
        )),
    );
    false
}

fn emit_duration_builder(method: &str, d: Duration) -> TokenStream {
    let method = syn::Ident::new(method, Span::call_site());
    let d = emit::duration(d);
    quote!(.#method(#d))
}
