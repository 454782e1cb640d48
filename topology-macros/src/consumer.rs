//! `#[queue_consumer(..)]` and `#[broadcast(..)]` on an `async fn`.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Item, LitStr};
use topology_core::names;
use topology_core::rules::{self, CONCURRENCY, FitError, MAX_ACK_PENDING, MAX_DELIVER};
use topology_core::subject;

use crate::args::{self, Args, PathOrString, Refused, Spec};
use crate::ctxt::Ctxt;
use crate::{emit, handler, stream};

/// Which macro.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Queue,
    Broadcast,
}

/// Why a plain durable is refused, and what to write instead: the end of every such message.
const PLAIN_DURABLE: &str = "a plain durable consumer admits one subscriber, so with a second replica the second instance is refused or receives every message again";
const FIX: &str = "write `#[queue_consumer(group = \"...\")]` for work shared by all instances (each message handled by one of them), or `#[broadcast]` for every instance to receive every message";

fn queue_durable(attr: &str, key: &str) -> String {
    format!(
        "`#[{attr}]` has no `{key}` key: {PLAIN_DURABLE}; the durable of a queue consumer is its `group`, shared by every instance; {FIX}"
    )
}

fn queue_deliver_group(attr: &str, key: &str) -> String {
    format!(
        "`#[{attr}]` has no `{key}` key: the deliver group is always the `group` (with `delivery = \"push\"`), so that every instance joins the same queue; without it, {PLAIN_DURABLE}; {FIX}"
    )
}

fn queue_name(attr: &str, key: &str) -> String {
    format!(
        "`#[{attr}]` has no `{key}` key: the durable consumer shared by all instances is named by its group; write `group = \"...\"`"
    )
}

fn broadcast_group(attr: &str, key: &str) -> String {
    format!(
        "`#[{attr}]` has no `{key}` key: a broadcast gives every instance its own ephemeral consumer, so that every instance receives every message; for work handled once by one instance, write `#[queue_consumer(group = \"...\")]` instead"
    )
}

fn broadcast_durable(attr: &str, key: &str) -> String {
    format!(
        "`#[{attr}]` has no `{key}` key: a broadcast is an ephemeral consumer on every instance, and {PLAIN_DURABLE}; {FIX}"
    )
}

pub(crate) static QUEUE_SPEC: Spec = Spec {
    attr: "queue_consumer",
    keys: &[
        "stream",
        "group",
        "subject",
        "subjects",
        "delivery",
        "max_deliver",
        "ack_wait",
        "backoff",
        "max_ack_pending",
        "concurrency",
        "dead_letter",
        "migrate_from",
        "description",
        "crate",
    ],
    refused: &[
        Refused {
            key: "durable",
            message: queue_durable,
            answers: Some("group"),
        },
        Refused {
            key: "durable_name",
            message: queue_durable,
            answers: Some("group"),
        },
        Refused {
            key: "deliver_group",
            message: queue_deliver_group,
            answers: Some("group"),
        },
        Refused {
            key: "name",
            message: queue_name,
            answers: Some("group"),
        },
    ],
    elsewhere: &[
        ("deliver", "broadcast"),
        ("replicas", "stream"),
        ("storage", "stream"),
        ("retention", "stream"),
        ("max_age", "stream"),
    ],
};

pub(crate) static BROADCAST_SPEC: Spec = Spec {
    attr: "broadcast",
    keys: &[
        "stream",
        "subject",
        "subjects",
        "deliver",
        "concurrency",
        "crate",
    ],
    refused: &[
        Refused {
            key: "group",
            message: broadcast_group,
            answers: None,
        },
        Refused {
            key: "queue",
            message: broadcast_group,
            answers: None,
        },
        Refused {
            key: "durable",
            message: broadcast_durable,
            answers: None,
        },
        Refused {
            key: "durable_name",
            message: broadcast_durable,
            answers: None,
        },
        Refused {
            key: "deliver_group",
            message: broadcast_durable,
            answers: None,
        },
    ],
    elsewhere: &[
        ("delivery", "queue_consumer"),
        ("max_deliver", "queue_consumer"),
        ("ack_wait", "queue_consumer"),
        ("backoff", "queue_consumer"),
        ("max_ack_pending", "queue_consumer"),
        ("dead_letter", "queue_consumer"),
        ("migrate_from", "queue_consumer"),
        ("description", "queue_consumer"),
        ("replicas", "stream"),
        ("retention", "stream"),
    ],
};

/// A validated consumer declaration, with the tokens to generate it.
struct Decl {
    stream: PathOrString,
    subjects: Vec<LitStr>,
    /// `QueueDecl::new(..).x(..)` or `BroadcastDecl::new().deliver(..)`.
    settings: TokenStream,
    /// Items the settings refer to (consts for backoff arrays).
    support: TokenStream,
    concurrency: Option<u32>,
    /// A dead-letter subject to check against the stream's subjects (queue consumers without
    /// filters, whose stream is a type).
    dead_letter: Option<LitStr>,
}

pub(crate) fn expand(kind: Kind, attr: TokenStream, item: TokenStream) -> TokenStream {
    let spec = match kind {
        Kind::Queue => &QUEUE_SPEC,
        Kind::Broadcast => &BROADCAST_SPEC,
    };
    let mut cx = Ctxt::new();
    let args = Args::parse(spec, attr, &mut cx);
    let handler = match syn::parse2::<Item>(item.clone()) {
        Ok(Item::Fn(f)) => handler::analyze(spec.attr, &f, &mut cx),
        Ok(other) => {
            cx.error_spanned_by(
                emit::item_head(&other),
                format!(
                    "`#[{}]` goes on the `async fn` that handles the messages, as in `async fn on_event(event: Event) -> Result<(), HandlerError>`",
                    spec.attr
                ),
            );
            None
        }
        Err(error) => {
            cx.syn_error(error);
            None
        }
    };
    let krate = args.key("crate", "crate = my_facade").crate_path(&mut cx);
    let decl = validate(kind, spec, &args, &mut cx);

    let result = cx.check();
    let (Ok(()), Some(decl), Some(handler)) = (&result, decl, handler) else {
        let errors = emit::errors_or_bug(result, spec.attr);
        return quote!(#item #errors);
    };
    let krate = emit::krate(krate.as_ref());
    generate(kind, spec, &krate, &item, &decl, &handler)
}

fn validate(kind: Kind, spec: &Spec, args: &Args, cx: &mut Ctxt) -> Option<Decl> {
    let attr = spec.attr;
    let mut ok = true;

    // stream
    let stream_key = args.key("stream", "stream = Orders");
    let stream = stream_key.path_or_string(cx);
    match &stream {
        Some(PathOrString::String(name)) => {
            if let Err(error) = names::check_stream_name(&name.value()) {
                ok = false;
                cx.error_spanned_by(
                    name,
                    stream_key.msg(format!(
                        "{:?} is not a valid stream name: {}",
                        name.value(),
                        error.message()
                    )),
                );
            }
        }
        Some(PathOrString::Path(_)) => {}
        None if args.report_missing("stream") => cx.error_at(
            Span::call_site(),
            format!(
                "`#[{attr}]` needs `stream = ...`: a `#[stream]` type, as in `stream = Orders`, or the name of a stream declared elsewhere, as in `stream = \"ORDERS\"`"
            ),
        ),
        None => {}
    }

    // subject / subjects
    let subject_key = args.key("subject", "subject = \"orders.created\"");
    let subjects_key = args.key(
        "subjects",
        "subjects = [\"orders.created\", \"orders.paid\"]",
    );
    let mut subjects = Vec::new();
    if let (Some(one), Some(many)) = (subject_key.arg, subjects_key.arg) {
        ok = false;
        let later = if args.position("subject") < args.position("subjects") {
            &many.key
        } else {
            &one.key
        };
        cx.error_spanned_by(
            later,
            format!(
                "`#[{attr}]` takes `subject` or `subjects`, not both; list every filter in `subjects = [..]`"
            ),
        );
    } else if subject_key.arg.is_some() {
        if let Some(lit) = subject_key.string(cx) {
            ok &= stream::check_filters(&subject_key, std::slice::from_ref(&lit), "filters", cx);
            subjects.push(lit);
        }
    } else if let Some((list, span, complete)) = subjects_key.strings(cx) {
        if list.is_empty() && complete {
            ok = false;
            cx.error_at(
                span,
                subjects_key.msg(
                    "the list is empty; list at least one filter, or omit the key to read the whole stream",
                ),
            );
        }
        ok &= stream::check_filters(&subjects_key, &list, "filters of one consumer", cx);
        subjects = list;
    }

    // concurrency
    let concurrency = args
        .key("concurrency", "concurrency = 8")
        .int(CONCURRENCY, "", cx)
        .map(|(n, _)| n as u32);

    let mut support = TokenStream::new();
    let mut dead_letter_check = None;
    let settings = match kind {
        Kind::Broadcast => {
            let deliver = args.key("deliver", "deliver = \"new\"").choice(
                &[
                    ("new", "New"),
                    ("all", "All"),
                    ("last", "Last"),
                    ("last_per_subject", "LastPerSubject"),
                ],
                cx,
            );
            let deliver = deliver.map(|v| {
                let v = syn::Ident::new(v, Span::call_site());
                quote!(.deliver(__nats_topology::DeliverPolicy::#v))
            });
            quote!(__nats_topology::BroadcastDecl::new() #deliver)
        }
        Kind::Queue => {
            let (tokens, queue_ok, dead_letter) =
                queue_settings(attr, args, &subjects, &mut support, cx);
            ok &= queue_ok;
            if subjects.is_empty() {
                dead_letter_check = dead_letter;
            }
            tokens
        }
    };

    if !ok || cx.has_errors() {
        return None;
    }
    Some(Decl {
        stream: stream?,
        subjects,
        settings,
        support,
        concurrency,
        dead_letter: dead_letter_check,
    })
}

/// The settings of a queue consumer; whether they are valid; its dead-letter subject.
fn queue_settings(
    attr: &str,
    args: &Args,
    subjects: &[LitStr],
    support: &mut TokenStream,
    cx: &mut Ctxt,
) -> (TokenStream, bool, Option<LitStr>) {
    let mut ok = true;
    let mut builders = Vec::new();

    let group_key = args.key("group", "group = \"billing\"");
    let group = group_key.string(cx);
    if let Some(group) = &group {
        if let Err(error) = names::check_consumer_name(&group.value()) {
            ok = false;
            cx.error_spanned_by(
                group,
                group_key.msg(format!(
                    "{:?} is not a valid consumer name: {}",
                    group.value(),
                    error.message()
                )),
            );
        }
    } else if args.report_missing("group") {
        ok = false;
        cx.error_at(
            Span::call_site(),
            format!(
                "`#[{attr}]` needs `group = \"...\"`, the durable consumer shared by all instances (each message is handled by one of them); without a group it would be a plain durable, and {PLAIN_DURABLE}; for every instance to receive every message, use `#[broadcast]` instead"
            ),
        );
    }

    if let Some(v) = args
        .key("delivery", "delivery = \"pull\"")
        .choice(&[("pull", "Pull"), ("push", "Push")], cx)
    {
        let v = syn::Ident::new(v, Span::call_site());
        builders.push(quote!(.delivery(__nats_topology::Delivery::#v)));
    }

    let max_deliver = args.key("max_deliver", "max_deliver = 5").int(
        MAX_DELIVER,
        "omit `max_deliver` for unlimited deliveries",
        cx,
    );
    if let Some((n, _)) = max_deliver {
        let n = n as i64;
        builders.push(quote!(.max_deliver(#n)));
    }

    let ack_wait = args
        .key("ack_wait", "ack_wait = \"30s\"")
        .duration(true, cx);
    if let Some((d, _)) = ack_wait {
        let d = emit::duration(d);
        builders.push(quote!(.ack_wait(#d)));
    }

    let backoff_key = args.key("backoff", "backoff = [\"1s\", \"10s\", \"1m\"]");
    if let Some((steps, span, complete)) = backoff_key.strings(cx) {
        if steps.is_empty() && complete {
            ok = false;
            cx.error_at(
                span,
                backoff_key.msg("the list is empty; list at least one delay, or omit the key"),
            );
        }
        let mut durations = Vec::new();
        for lit in &steps {
            match args::parse_duration(&backoff_key, lit, true, cx) {
                Some(d) => durations.push(emit::duration(d)),
                None => ok = false,
            }
        }
        if let Some((max, _)) = max_deliver
            && complete
            && !rules::backoff_fits(steps.len(), Some(max as i64))
        {
            ok = false;
            let extra = &steps[max as usize];
            let deliveries = if max == 1 { "delivery" } else { "deliveries" };
            cx.error_spanned_by(
                    extra,
                    backoff_key.msg(format!(
                        "{} delays for at most {max} {deliveries} (`max_deliver = {max}`); the server refuses more delays than deliveries: remove the delays from here on, or raise `max_deliver`",
                        steps.len()
                    )),
                );
        }
        support.extend(quote! {
            const __NATS_TOPOLOGY_BACKOFF: &[__nats_topology::Duration] = &[#(#durations),*];
        });
        builders.push(quote!(.backoff(__NATS_TOPOLOGY_BACKOFF)));
    }

    if let Some((n, _)) = args.key("max_ack_pending", "max_ack_pending = 1000").int(
        MAX_ACK_PENDING,
        "omit `max_ack_pending` for the server's default of 1000",
        cx,
    ) {
        let n = n as i64;
        builders.push(quote!(.max_ack_pending(#n)));
    }

    let dead_letter_key = args.key("dead_letter", "dead_letter = \"billing.dead\"");
    let dead_letter = dead_letter_key.string(cx);
    if let Some(lit) = &dead_letter {
        let value = lit.value();
        if let Err(error) = subject::check_subject(&value) {
            ok = false;
            cx.error_spanned_by(
                lit,
                dead_letter_key.msg(format!(
                    "{value:?} is not a valid dead-letter subject: {}",
                    error.message()
                )),
            );
        } else {
            let filters: Vec<String> = subjects.iter().map(LitStr::value).collect();
            let filters: Vec<&str> = filters.iter().map(String::as_str).collect();
            if !filters.is_empty() && rules::dead_letter_loops(&value, &filters, &[]) {
                ok = false;
                cx.error_spanned_by(
                    lit,
                    dead_letter_key.msg(format!(
                        "{value:?} matches this consumer's own filters: {}; publish dead letters to a subject it does not read",
                        rules::ConsumerError::DeadLetterLoops.message()
                    )),
                );
            }
        }
        builders.push(quote!(.dead_letter(#lit)));
    }

    let migrate_key = args.key("migrate_from", "migrate_from = \"billing_v1\"");
    if let Some(lit) = migrate_key.string(cx) {
        let value = lit.value();
        if let Err(error) = names::check_consumer_name(&value) {
            ok = false;
            cx.error_spanned_by(
                &lit,
                migrate_key.msg(format!(
                    "{value:?} is not a valid consumer name: {}",
                    error.message()
                )),
            );
        } else if group.as_ref().is_some_and(|g| g.value() == value) {
            ok = false;
            cx.error_spanned_by(
                &lit,
                migrate_key.msg(format!(
                    "{value:?} is this consumer's own group; name the previous consumer to migrate from, or remove `migrate_from`"
                )),
            );
        }
        builders.push(quote!(.migrate_from(#lit)));
    }

    let description_key = args.key("description", "description = \"bills each order\"");
    if let Some(lit) = description_key.string(cx) {
        ok &= stream::check_description(&description_key, &lit, cx);
        builders.push(quote!(.description(#lit)));
    }

    let group = group.unwrap_or_else(|| LitStr::new("", Span::call_site()));
    let tokens = quote!(__nats_topology::QueueDecl::new(#group) #(#builders)*);
    (tokens, ok, dead_letter)
}

fn generate(
    kind: Kind,
    spec: &Spec,
    krate: &TokenStream,
    item: &TokenStream,
    decl: &Decl,
    handler: &handler::Handler,
) -> TokenStream {
    let attr = spec.attr;
    let fn_name = handler.ident.to_string();
    let fn_name = fn_name.strip_prefix("r#").unwrap_or(&fn_name);
    let glue = handler::glue(handler);
    let settings = &decl.settings;
    let support = &decl.support;
    let subjects = &decl.subjects;
    let constructor = match kind {
        Kind::Queue => quote!(queue),
        Kind::Broadcast => quote!(broadcast),
    };
    let concurrency = decl.concurrency.map(|n| quote!(.concurrency(#n)));

    let mut checks = TokenStream::new();
    let (stream_item, stream_ref) = match &decl.stream {
        PathOrString::String(name) => (
            TokenStream::new(),
            quote!(__nats_topology::StreamRef::Named(#name)),
        ),
        PathOrString::Path(path) => {
            let span = path.span();
            let stream_text = emit::path_text(path);
            let stream_item = quote_spanned! {span=>
                const __NATS_TOPOLOGY_STREAM: &__nats_topology::StreamDecl =
                    &<#path as __nats_topology::StreamDef>::DECL;
            };
            for lit in subjects {
                let message = format!(
                    "`#[{attr}]` filter {:?} is not covered by the subjects of stream `{stream_text}`, so it would never receive a message; add a subject that covers it to the stream's `subjects`, or change the filter",
                    lit.value()
                );
                checks.extend(assertion(
                    lit.span(),
                    quote!(__nats_topology::covered_by(#lit, __NATS_TOPOLOGY_STREAM.subjects)),
                    &message,
                ));
            }
            if kind == Kind::Broadcast {
                let message = format!(
                    "`#[broadcast]` on stream `{stream_text}`, whose retention is `workqueue`: {}",
                    FitError::BroadcastOnWorkQueue.message()
                );
                checks.extend(assertion(
                    span,
                    quote!(__nats_topology::allows_broadcast(
                        __NATS_TOPOLOGY_STREAM.retention
                    )),
                    &message,
                ));
            }
            if let Some(lit) = &decl.dead_letter {
                let message = format!(
                    "`#[{attr}]` key `dead_letter`: {:?} is covered by the subjects of stream `{stream_text}`, and this consumer reads the whole stream, so its dead letters would be delivered to it again, forever; publish dead letters to a subject outside the stream, or give the consumer `subjects` that do not match it",
                    lit.value(),
                );
                checks.extend(assertion(
                    lit.span(),
                    quote!(!__nats_topology::dead_letter_loops(#lit, &[], __NATS_TOPOLOGY_STREAM.subjects)),
                    &message,
                ));
            }
            (
                stream_item,
                quote!(__nats_topology::StreamRef::Declared(__NATS_TOPOLOGY_STREAM)),
            )
        }
    };

    quote! {
        #item
        const _: () = {
            use #krate::__private as __nats_topology;
            #stream_item
            #support
            static __NATS_TOPOLOGY_DECL: __nats_topology::ConsumerDecl =
                __nats_topology::ConsumerDecl::#constructor(
                    ::core::concat!(::core::module_path!(), "::", #fn_name),
                    #stream_ref,
                    #settings,
                )
                .subjects(&[#(#subjects),*])
                #concurrency;
            #glue
            __nats_topology::inventory::submit! {
                __nats_topology::ConsumerRegistration {
                    decl: &__NATS_TOPOLOGY_DECL,
                    handler: __nats_topology_handler,
                }
            }
            #checks
        };
    }
}

/// `const _: () = assert!(condition, "message");`, reported at `span` when it fails.
fn assertion(span: Span, condition: TokenStream, message: &str) -> TokenStream {
    let message = LitStr::new(&emit::escape_format(message), span);
    quote_spanned! {span=>
        const _: () = ::core::assert!(#condition, #message);
    }
}
