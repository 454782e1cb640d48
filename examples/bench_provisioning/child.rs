//! Child: one process provisioning once, with our runtime (create-first) or with the
//! UPDATE-first sequence of async-nats.

use std::error::Error as _;
use std::time::Duration;

use async_nats::jetstream::{self, ErrorCode, context::CreateStreamErrorKind};
use nats_topology::model::Storage;
use nats_topology::retry::Failed;
use nats_topology::{RetryPolicy, Runtime};
use serde_json::json;

use crate::shape::{GROUP_A, GROUP_B, Shape};
use crate::{BoxError, Variant, epoch_ms, list, parse_storage, policy};

pub(crate) struct ChildArgs {
    pub(crate) urls: Vec<String>,
    pub(crate) stream: String,
    pub(crate) prefix: String,
    pub(crate) variant: Variant,
    pub(crate) retry: bool,
    pub(crate) storage: Storage,
    /// Where to write this process's debug log (leader-kill with `--trace`).
    pub(crate) trace: Option<std::path::PathBuf>,
}

pub(crate) fn child_args(mut it: impl Iterator<Item = String>) -> ChildArgs {
    let mut args = ChildArgs {
        urls: Vec::new(),
        stream: String::new(),
        prefix: String::new(),
        variant: Variant::CreateFirst,
        retry: true,
        storage: Storage::File,
        trace: None,
    };
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--trace" => args.trace = Some(value.into()),
            "--urls" => args.urls = list(&value, str::to_owned),
            "--stream" => args.stream = value,
            "--prefix" => args.prefix = value,
            "--variant" => args.variant = Variant::parse(&value),
            "--retry" => args.retry = value == "on",
            "--storage" => args.storage = parse_storage(&value),
            other => panic!("unknown child flag {other}"),
        }
    }
    args
}

/// Timestamps of a process's trace: ms since the epoch (the parent subtracts the start).
pub(crate) struct EpochMs;

impl tracing_subscriber::fmt::time::FormatTime for EpochMs {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(w, "{:.1}", epoch_ms())
    }
}

pub(crate) async fn child_main(args: ChildArgs) -> Result<(), BoxError> {
    if let Some(path) = &args.trace {
        let file = std::fs::File::create(path)?;
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "topology_runtime=debug,nats_topology=debug,bench_provisioning=debug",
            ))
            .with_timer(EpochMs)
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file))
            .init();
    }
    let addrs = args
        .urls
        .iter()
        .map(|u| u.parse::<async_nats::ServerAddr>())
        .collect::<Result<Vec<_>, _>>()?;
    let client = match async_nats::connect(addrs).await {
        Ok(client) => client,
        Err(e) => {
            let line = json!({"ok": false, "ms": 0.0, "attempts": 0, "timed_out": 0,
                              "error": format!("connect: {e}")});
            println!("{line}");
            return Ok(());
        }
    };
    let shape = Shape::new(&args.stream, &args.prefix, args.storage);
    let policy = policy(args.retry);
    // Everything that does not talk to the server is done before the start instant.
    let runtime = match args.variant {
        Variant::CreateFirst => Some(
            Runtime::builder(client.clone())
                .topology(shape.topology())
                .retry(policy)
                .build()?,
        ),
        Variant::UpdateFirst => None,
    };
    let js = jetstream::ContextBuilder::new()
        .timeout(policy.request_timeout)
        .build(client.clone());

    println!("ready");
    // Tokio's stdin needs a feature this workspace does not enable: read on a blocking thread.
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??;
    let start_ms: f64 = line.trim().parse()?;
    let wait = start_ms - epoch_ms();
    if wait > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(wait / 1000.0)).await;
    }

    // Requests that timed out: `None` where the runtime's failed `provision` does not say.
    let (ok, attempts, timed_out, error) = match &runtime {
        Some(runtime) => match runtime.provision().await {
            Ok(report) => (true, report.attempts, Some(report.timed_out), None),
            Err(e) => (
                false,
                e.attempts(),
                None,
                Some(format!("{:?}: {e}{}", e.kind(), causes(&e))),
            ),
        },
        None => {
            let timed_out = std::cell::Cell::new(0);
            match update_first(&js, &shape, &policy, &timed_out).await {
                Ok(attempts) => (true, attempts, Some(timed_out.get()), None),
                Err((attempts, e)) => (false, attempts, Some(timed_out.get()), Some(e)),
            }
        }
    };
    let ms = epoch_ms() - start_ms;
    tracing::debug!(ok, attempts, timed_out, ?error, "provisioning done");
    println!(
        "{}",
        json!({"ok": ok, "ms": ms, "attempts": attempts, "timed_out": timed_out, "error": error})
    );
    Ok(())
}

/// The chain of sources of an error, `": a: b"`.
pub(crate) fn causes(e: &dyn std::error::Error) -> String {
    let mut out = String::new();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!(" <- {s}"));
        source = s.source();
    }
    out
}

/// Which request of `create_or_update_stream` failed: in async-nats 0.51 a timeout or server
/// error of the UPDATE is returned as is, while an error of the CREATE sent after the
/// UPDATE's 404 is wrapped (`with_source`), so it has a source.
pub(crate) fn stream_error(e: &jetstream::context::CreateStreamError) -> String {
    let request = if e.source().is_some() {
        "CREATE (after UPDATE answered 404)"
    } else {
        "UPDATE"
    };
    match e.kind() {
        CreateStreamErrorKind::TimedOut => format!("{request} timed out (no answer in 5 s)"),
        CreateStreamErrorKind::JetStream(_) => format!("{request}: {e}"),
        // Other kinds may carry a source from either request.
        _ => format!("{e}{}", causes(e)),
    }
}

/// The UPDATE-first sequence: `create_or_update_stream` (UPDATE, CREATE on 404), then the
/// bucket with `create_key_value` (its errors carry no code: a JetStream error is retried as a
/// timeout is) and both consumers with `create_consumer` (create-or-update) concurrently, each step under the
/// same full-jitter retry as the runtime. Returns the attempts made, or those and the error;
/// counts the requests that timed out in `timed_out`.
pub(crate) async fn update_first(
    js: &jetstream::Context,
    shape: &Shape,
    policy: &RetryPolicy,
    timed_out: &std::cell::Cell<u32>,
) -> Result<u32, (u32, String)> {
    let count = |timed: bool| {
        if timed {
            timed_out.set(timed_out.get() + 1);
        }
    };
    let config = shape.stream_config();
    // The runtime's own retry primitive: giving up when the next sleep would pass the
    // deadline, so `RetryPolicy::no_retry()` makes one attempt.
    let stream_attempts = policy
        .run(
            || js.create_or_update_stream(config.clone()),
            |e| {
                count(e.kind() == CreateStreamErrorKind::TimedOut);
                stream_transient(e)
            },
        )
        .await
        .map(|(_, n)| n)
        .map_err(|f| (f.attempts, format!("stream: {}", stream_error(&f.error))))?;
    let name = shape.stream.name;
    let a = Shape::consumer_config(GROUP_A, shape.subject_a);
    let b = Shape::consumer_config(GROUP_B, shape.subject_b);
    let bucket = shape.bucket_config();
    let (rk, ra, rb) = tokio::join!(
        policy.run(
            || js.create_key_value(bucket.clone()),
            |e| {
                count(e.kind() == jetstream::context::CreateKeyValueErrorKind::TimedOut);
                matches!(
                    e.kind(),
                    jetstream::context::CreateKeyValueErrorKind::TimedOut
                        | jetstream::context::CreateKeyValueErrorKind::JetStream
                )
            }
        ),
        policy.run(
            || js.create_consumer_on_stream(a.clone(), name),
            |e| {
                count(e.kind() == jetstream::stream::ConsumerErrorKind::TimedOut);
                consumer_transient(e)
            }
        ),
        policy.run(
            || js.create_consumer_on_stream(b.clone(), name),
            |e| {
                count(e.kind() == jetstream::stream::ConsumerErrorKind::TimedOut);
                consumer_transient(e)
            }
        ),
    );
    let mut attempts = stream_attempts;
    let mut errors = Vec::new();
    match rk {
        Ok((_, n)) => attempts += n,
        Err(Failed {
            error, attempts: n, ..
        }) => {
            attempts += n;
            errors.push(format!("bucket: {error}{}", causes(&error)));
        }
    }
    for (group, result) in [(GROUP_A, ra), (GROUP_B, rb)] {
        match result {
            Ok((_, n)) => attempts += n,
            Err(Failed {
                error, attempts: n, ..
            }) => {
                attempts += n;
                errors.push(format!("consumer {group}: {error}{}", causes(&error)));
            }
        }
    }
    if errors.is_empty() {
        Ok(attempts)
    } else {
        Err((attempts, errors.join("; ")))
    }
}

/// 10008 (cluster not available), 10009 (not leader), 10005 (no peers).
pub(crate) fn transient_code(e: &jetstream::Error) -> bool {
    let code = e.error_code();
    code == ErrorCode::CLUSTER_NOT_AVAILABLE
        || code == ErrorCode::CLUSTER_NOT_LEADER
        || code == ErrorCode::CLUSTER_NO_PEERS
}

pub(crate) fn stream_transient(e: &jetstream::context::CreateStreamError) -> bool {
    match e.kind() {
        CreateStreamErrorKind::TimedOut | CreateStreamErrorKind::JetStreamUnavailable => true,
        CreateStreamErrorKind::JetStream(e) => transient_code(&e),
        _ => false,
    }
}

pub(crate) fn consumer_transient(e: &jetstream::stream::ConsumerError) -> bool {
    use jetstream::context::{RequestError, RequestErrorKind};
    use jetstream::stream::ConsumerErrorKind;
    match e.kind() {
        ConsumerErrorKind::TimedOut => true,
        ConsumerErrorKind::JetStream(e) => transient_code(&e),
        ConsumerErrorKind::Request => e
            .source()
            .and_then(|s| s.downcast_ref::<RequestError>())
            .is_some_and(|r| r.kind() == RequestErrorKind::NoResponders),
        _ => false,
    }
}
