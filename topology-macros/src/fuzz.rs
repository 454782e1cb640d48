//! The macros never panic: generated and mutated attribute arguments and items, fed to the
//! six expansion functions. Each must return tokens, which either register something or
//! carry a `compile_error!`, and always start with the user's item.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::str::FromStr;

use proc_macro2::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};
use topology_core::xorshift::Rng;

use crate::attrs::{broadcast, consumer, service, stream};
use crate::expand;

/// Total inputs (each expanded by all six macros).
const CASES: usize = 12_000;

/// Keys the macros do not accept: typos, other frameworks' words, keywords, non-ASCII.
const ODD_KEYS: &[&str] = &[
    "durable_name",
    "queue",
    "replica",
    "grup",
    "x",
    "self",
    "type",
    "async",
    "_",
    "ñame",
];

/// Every key the six macros accept or refuse with an explanation (read from their specs, so
/// that a new key is fuzzed too), and [`ODD_KEYS`].
static KEYS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
    let mut keys: Vec<&'static str> = ODD_KEYS.to_vec();
    for spec in [
        &stream::SPEC,
        &consumer::QUEUE_SPEC,
        &broadcast::BROADCAST_SPEC,
        &service::SERVICE_SPEC,
        &service::ENDPOINT_SPEC,
        &service::SUBSCRIPTION_SPEC,
    ] {
        keys.extend(spec.keys);
        keys.extend(spec.refused.iter().map(|r| r.key));
    }
    keys.sort_unstable();
    keys.dedup();
    keys
});

const STRINGS: &[&str] = &[
    "",
    " ",
    "ORDERS",
    "orders.>",
    "orders.*.created",
    "orders..x",
    "a.>.b",
    "a*",
    ">",
    "*",
    "a b",
    "\u{0}",
    "\u{7f}",
    "\u{85}",
    "ünï.cödé",
    "😀",
    "30s",
    "1h30m",
    "0s",
    "0ms",
    "7d",
    "1.5h",
    "-5s",
    "5sec",
    "30m1h",
    "1h1h",
    "99999999999999999999999999d",
    "ms",
    "30",
    "file",
    "memory",
    "limits",
    "interest",
    "workqueue",
    "work_queue",
    "old",
    "new",
    "all",
    "last",
    "last_per_subject",
    "pull",
    "push",
    "sync",
    "sync workers",
    "a/b",
    "a\\b",
    "{}",
    "{0}",
    "\"",
    "nats_topology",
    "crate::x",
    "::",
    "a::b::c",
    "1 2",
    "1.2.0",
    "1.2",
    "2.0.0-rc.1+b.7",
    "members",
    "members.get",
    "$SRV.PING",
    "_INBOX.>",
    "q",
];

const IDENTS: &[&str] = &[
    "Orders",
    "DaemonSync",
    "nats_topology",
    "nt",
    "crate",
    "self",
    "super",
    "r#type",
    "true",
    "false",
    "u8",
    "Vec",
    "String",
    "a",
    "_",
    "async",
    "fn",
    "struct",
    "impl",
];

fn ident(name: &str) -> TokenTree {
    match name.strip_prefix("r#") {
        Some(raw) => TokenTree::Ident(Ident::new_raw(raw, Span::call_site())),
        None => TokenTree::Ident(Ident::new(name, Span::call_site())),
    }
}

fn punct(c: char) -> TokenTree {
    TokenTree::Punct(Punct::new(c, Spacing::Alone))
}

fn literal(rng: &mut Rng) -> TokenTree {
    let lit = match rng.below(12) {
        0..=4 => Literal::string(rng.pick(STRINGS)),
        5 => Literal::i64_unsuffixed(rng.next_u64() as i64 % 20 - 5),
        6 => Literal::u128_unsuffixed(u128::from(rng.next_u64()) << rng.below(80)),
        7 => Literal::u8_suffixed(rng.below(256) as u8),
        8 => Literal::f64_unsuffixed(rng.below(100) as f64 / 7.0),
        9 => Literal::character(rng.pick(&['a', '\'', '😀'])),
        10 => Literal::byte_string(b"orders.>"),
        _ => {
            Literal::from_str(rng.pick(&["r#\"raw.>\"#", "c\"c\"", "b'x'", "1e9", "0x10", "1_000"]))
                .expect("a valid literal")
        }
    };
    TokenTree::Literal(lit)
}

/// A value: literals, paths, lists, negatives, groups, or junk.
fn value(rng: &mut Rng, depth: usize) -> TokenStream {
    let mut out = TokenStream::new();
    match rng.below(if depth > 2 { 4 } else { 9 }) {
        0 | 1 => out.extend([literal(rng)]),
        2 => {
            out.extend([ident(rng.pick(IDENTS))]);
            for _ in 0..rng.below(3) {
                out.extend([
                    TokenTree::Punct(Punct::new(':', Spacing::Joint)),
                    punct(':'),
                    ident(rng.pick(IDENTS)),
                ]);
            }
        }
        3 => out.extend([punct('-'), literal(rng)]),
        4 | 5 => {
            let mut inner = TokenStream::new();
            for i in 0..rng.below(5) {
                if i > 0 {
                    inner.extend([punct(',')]);
                }
                inner.extend(value(rng, depth + 1));
            }
            if rng.chance(20) {
                inner.extend([punct(',')]);
            }
            out.extend([TokenTree::Group(Group::new(Delimiter::Bracket, inner))]);
        }
        6 => {
            let delimiter = rng.pick(&[Delimiter::Parenthesis, Delimiter::Brace, Delimiter::None]);
            out.extend([TokenTree::Group(Group::new(
                delimiter,
                value(rng, depth + 1),
            ))]);
        }
        7 => out.extend([punct(
            rng.pick(&['#', '!', '|', '&', '<', '>', '.', '=', '?', '@']),
        )]),
        _ => {}
    }
    out
}

/// A generated attribute: random `key = value`, flags, parenthesised keys, stray punctuation.
fn attribute(rng: &mut Rng) -> TokenStream {
    let mut out = TokenStream::new();
    for i in 0..rng.below(9) {
        if i > 0 || rng.chance(3) {
            out.extend([punct(',')]);
        }
        if rng.chance(3) {
            out.extend(value(rng, 0));
            continue;
        }
        out.extend([ident(rng.pick(&KEYS))]);
        match rng.below(10) {
            0 => {}
            1 => out.extend([TokenTree::Group(Group::new(
                Delimiter::Parenthesis,
                value(rng, 1),
            ))]),
            2 => out.extend([punct('=')]),
            _ => {
                out.extend([punct('=')]);
                out.extend(value(rng, 0));
                if rng.chance(5) {
                    out.extend(value(rng, 0));
                }
            }
        }
    }
    out
}

/// Valid attributes, to mutate.
const SEEDS: &[&str] = &[
    r#"name = "DAEMON_SYNC", subjects = ["daemon.sync.>"], replicas = 3, max_age = "7d""#,
    r#"name = "A", subjects = ["a.>", "b.*"], storage = "memory", retention = "workqueue", discard = "new", duplicate_window = "2m", max_msgs = 10, max_bytes = 10, max_msg_size = 10, description = "d", crate = nt"#,
    r#"name = "EMAIL", subjects = ["email.>"], external"#,
    r#"stream = DaemonSync, group = "sync", subject = "daemon.sync.complete""#,
    r#"stream = "DAEMON_SYNC", group = "sync""#,
    r#"stream = crate::Orders, group = "g", subjects = ["a.b", "a.c"], delivery = "push", max_deliver = 5, ack_wait = "30s", backoff = ["1s", "10s"], max_ack_pending = 100, concurrency = 8, dead_letter = "dead.g", migrate_from = "g1", description = "d", ack = "confirmed", crate = ::nats_topology"#,
    r#"stream = MemberStatus, subject = "member.status.>", deliver = "last_per_subject", concurrency = 4"#,
    r#"stream = Jobs, durable = "x", deliver_group = "y", group = "z""#,
    r#"name = "members", version = "1.2.0", description = "d", queue_group = "m", metadata = [("team", "a"), ("tier", "1")], crate = nt"#,
    r#"service = Members, subject = "members.get", name = "get", group = "g", concurrency = 4, timeout = "5s", metadata = [("k", "v")]"#,
    r#"subject = "cache.invalidate", each_instance, concurrency = 2"#,
    r#"subject = "jobs.>", group = "workers", crate = ::nats_topology"#,
    r#"service = Members, subject = "m.get", queue_group = false, no_queue, each_instance"#,
    r#"stream = Jobs, group = "a", priority = "pinned_client", pinned_ttl = "10s""#,
    r#"stream = Jobs, group = "b", priority = "overflow", min_pending = 100, min_ack_pending = 5"#,
    r#"name = "P", subjects = ["p.>"], placement = { cluster = "east", tags = ["ssd", "az:1"] }"#,
];

const ITEMS: &[&str] = &[
    "pub struct Orders;",
    "struct Orders;",
    "#[derive(Debug)] pub(crate) struct Orders;",
    "pub struct Orders { id: u64 }",
    "pub struct Orders(u64);",
    "pub struct Orders<T>;",
    "enum Orders { A }",
    "async fn on_order(event: Order) -> Result<(), HandlerError> { Ok(()) }",
    "pub async fn on_order(event: Order, cx: Context) -> Result<(), HandlerError> { Ok(()) }",
    "async fn on_order(raw: Vec<u8>) -> Result<(), std::io::Error> { Ok(()) }",
    "async fn get(id: u64, cx: RequestContext, db: State<Db>) -> Result<Member, ServiceError> { Ok(m) }",
    "async fn echo(raw: Bytes) -> Result<Vec<u8>, ServiceError> { Ok(raw.to_vec()) }",
    "async fn total(items: Vec<u64>) -> Reply<u64> { Ok(0) }",
    "async fn trouvé(id: u64) -> String { x }",
    "async fn r#type(Order { id }: Order) -> HandlerResult { Ok(()) }",
    "fn on_order(event: Order) -> Result<(), HandlerError> { Ok(()) }",
    "async fn on_order<T>(event: T) -> Result<(), HandlerError> { Ok(()) }",
    "async fn on_order() -> Result<(), HandlerError> { Ok(()) }",
    "async fn on_order(self, e: E) -> Result<(), HandlerError> { Ok(()) }",
    "async fn on_order(a: A, b: B, c: C) -> Result<(), HandlerError> { Ok(()) }",
    "async fn on_order(e: impl Trait) {}",
    "unsafe extern \"C\" fn on_order(e: E, ...) {}",
    "const async fn on_order(e: E) -> R { x }",
    "async fn on_order(e: E) where E: Send -> R {}",
    "impl X { }",
    "mod m {}",
    "",
    "garbage ! tokens ( )",
];

/// Mutates a token stream: delete, duplicate, swap, replace, insert, truncate, or recurse into
/// a group.
fn mutate(rng: &mut Rng, tokens: TokenStream) -> TokenStream {
    let mut trees: Vec<TokenTree> = tokens.into_iter().collect();
    for _ in 0..1 + rng.below(4) {
        let len = trees.len();
        match rng.below(7) {
            0 if len > 0 => {
                trees.remove(rng.below(len));
            }
            1 if len > 0 => {
                let i = rng.below(len);
                let copy = trees[i].clone();
                trees.insert(i, copy);
            }
            2 if len > 1 => {
                let (i, j) = (rng.below(len), rng.below(len));
                trees.swap(i, j);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                trees[i] = match rng.below(3) {
                    0 => literal(rng),
                    1 => ident(rng.pick(&KEYS)),
                    _ => punct(rng.pick(&[',', '=', ':', '-', '#'])),
                };
            }
            4 => {
                let at = rng.below(len + 1);
                let new: Vec<TokenTree> = value(rng, 1).into_iter().collect();
                trees.splice(at..at, new);
            }
            5 if len > 0 => trees.truncate(rng.below(len)),
            _ => {
                if let Some(i) = (0..len).find(|&i| matches!(trees[i], TokenTree::Group(_)))
                    && let TokenTree::Group(g) = &trees[i]
                {
                    let inner = mutate(rng, g.stream());
                    trees[i] = TokenTree::Group(Group::new(g.delimiter(), inner));
                }
            }
        }
    }
    trees.into_iter().collect()
}

fn parse(text: &str) -> TokenStream {
    TokenStream::from_str(text).expect("seeds lex")
}

type Expand = fn(TokenStream, TokenStream) -> TokenStream;

/// Expands `attr` on `item` with every macro, asserting the properties of the output; counts
/// the clean expansions and the failed ones.
fn check_all(attr: &TokenStream, item: &TokenStream, tally: &mut [usize; 2]) {
    let expanders: [(&str, Expand); 6] = [
        ("stream", expand::stream),
        ("queue_consumer", expand::queue_consumer),
        ("broadcast", expand::broadcast),
        ("service", expand::service),
        ("endpoint", expand::endpoint),
        ("subscription", expand::subscription),
    ];
    for (name, expand) in expanders {
        let result = catch_unwind(AssertUnwindSafe(|| expand(attr.clone(), item.clone())));
        let output = match result {
            Ok(output) => output.to_string(),
            Err(_) => panic!("#[{name}({attr})] on `{item}` panicked"),
        };
        assert!(
            output.starts_with(&item.to_string()),
            "#[{name}({attr})] on `{item}` did not keep the item: {output}"
        );
        let failed = output.contains("compile_error");
        assert!(
            failed || output.contains("submit"),
            "#[{name}({attr})] on `{item}` neither registered anything nor failed: {output}"
        );
        tally[usize::from(failed)] += 1;
    }
}

#[test]
fn expansion_never_panics() {
    let mut rng = Rng(0x5eed_cafe_f00d_d00d);
    let seeds: Vec<TokenStream> = SEEDS.iter().map(|s| parse(s)).collect();
    let items: Vec<TokenStream> = ITEMS.iter().map(|s| parse(s)).collect();
    let mut inputs = 0;
    let mut tally = [0, 0];
    for case in 0..CASES {
        let attr = match case % 3 {
            0 => attribute(&mut rng),
            _ => {
                let seed = seeds[rng.below(seeds.len())].clone();
                mutate(&mut rng, seed)
            }
        };
        let item = items[rng.below(items.len())].clone();
        let item = if rng.chance(25) {
            mutate(&mut rng, item)
        } else {
            item
        };
        check_all(&attr, &item, &mut tally);
        inputs += 1;
    }
    // Every seed, unmutated, on every item.
    for attr in &seeds {
        for item in &items {
            check_all(attr, item, &mut tally);
            inputs += 1;
        }
    }
    assert!(inputs >= 10_000, "only {inputs} inputs");
    // Both paths are exercised: some mutations stay valid, most do not.
    let [clean, failed] = tally;
    assert!(
        clean >= 50 && failed >= 10_000,
        "{clean} clean, {failed} failed"
    );
}

/// The valid seeds do expand without errors on a fitting item.
#[test]
fn seeds_expand() {
    let output = expand::stream(parse(SEEDS[0]), parse(ITEMS[0])).to_string();
    assert!(!output.contains("compile_error"), "{output}");
    let placed = SEEDS
        .iter()
        .find(|s| s.contains("placement"))
        .expect("a placement seed");
    let output = expand::stream(parse(placed), parse(ITEMS[0])).to_string();
    assert!(!output.contains("compile_error"), "{output}");
    let output = expand::queue_consumer(parse(SEEDS[5]), parse(ITEMS[8])).to_string();
    assert!(!output.contains("compile_error"), "{output}");
    let output = expand::broadcast(parse(SEEDS[6]), parse(ITEMS[9])).to_string();
    assert!(!output.contains("compile_error"), "{output}");
    let output = expand::service(parse(SEEDS[8]), parse(ITEMS[0])).to_string();
    assert!(!output.contains("compile_error"), "{output}");
    for (seed, item) in [(9, 10), (9, 11), (9, 12)] {
        let output = expand::endpoint(parse(SEEDS[seed]), parse(ITEMS[item])).to_string();
        assert!(!output.contains("compile_error"), "{output}");
    }
    for seed in [13, 14] {
        let output = expand::queue_consumer(parse(SEEDS[seed]), parse(ITEMS[8])).to_string();
        assert!(!output.contains("compile_error"), "{output}");
    }
    for seed in [10, 11] {
        let output = expand::subscription(parse(SEEDS[seed]), parse(ITEMS[9])).to_string();
        assert!(!output.contains("compile_error"), "{output}");
    }
    // The plain shapes are refused, and the endpoint named after a non-ASCII function too.
    let output = expand::endpoint(parse(SEEDS[12]), parse(ITEMS[10])).to_string();
    assert_eq!(output.matches("compile_error").count(), 3, "{output}");
    let unnamed = parse(r#"service = Members, subject = "members.find""#);
    let output = expand::endpoint(unnamed, parse(ITEMS[13])).to_string();
    assert!(output.contains("named after its function"), "{output}");
}
