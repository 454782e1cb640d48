//! `tower`'s own layers around handlers and endpoints, unchanged (feature `tower`): a timeout
//! stops a slow handler and its message is redelivered; a concurrency limit bounds the handlers
//! in flight below the consumer's `concurrency`; a rate limit spaces the calls; load shedding
//! gives messages back, each handled once in the end; a tracing layer of the user's own sees
//! every message's context; a layer reads the decoded payload, which the handler then takes; a batch layer's timeout fails the whole batch, each message
//! redelivered; an endpoint's timeout is a 504 and its shed request a 503; a layer named in the
//! attribute (`layer = f`) is innermost. A name that matches nothing, or a consumer of the
//! other kind, is refused at `build`.

mod fixture;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nats_topology::codec::Json;
use nats_topology::layer::{Failed, HandlerService};
use nats_topology::{
    Batch, BatchError, Context, HandlerError, Incoming, ServiceError, State, endpoint,
    queue_consumer, service, stream,
};
use nats_topology_testkit::eventually;
use tower::ServiceBuilder;

#[stream(name = "LAYERS", subjects = ["layers.>"])]
struct Layers;

/// One call of a handler: the job, its delivery count, when it began.
type Call = (u64, u64, Instant);

/// What the handlers saw: per consumer, (job, delivery count, start) of each call; and the
/// most calls in flight at once per consumer.
#[derive(Clone, Default)]
struct Calls {
    seen: Arc<Mutex<BTreeMap<&'static str, Vec<Call>>>>,
    in_flight: Arc<Mutex<BTreeMap<&'static str, (usize, usize)>>>,
}

impl Calls {
    async fn call(&self, by: &'static str, job: u64, cx: &Context, work: Duration) {
        self.seen.lock().unwrap().entry(by).or_default().push((
            job,
            cx.delivered(),
            Instant::now(),
        ));
        {
            let mut flight = self.in_flight.lock().unwrap();
            let (now, most) = flight.entry(by).or_default();
            *now += 1;
            *most = (*most).max(*now);
        }
        tokio::time::sleep(work).await;
        self.in_flight.lock().unwrap().get_mut(by).unwrap().0 -= 1;
    }

    /// The jobs `by` finished, as (job, delivery count) of its calls, in call order.
    fn of(&self, by: &str) -> Vec<Call> {
        self.seen
            .lock()
            .unwrap()
            .get(by)
            .cloned()
            .unwrap_or_default()
    }

    fn most_in_flight(&self, by: &str) -> usize {
        self.in_flight.lock().unwrap().get(by).map_or(0, |f| f.1)
    }
}

/// The first delivery takes 30 s (a timeout layer stops it); a redelivery is quick.
#[queue_consumer(stream = Layers, group = "lay_timeout", subject = "layers.timeout", backoff = ["100ms"], concurrency = 4)]
async fn slow_once(job: u64, cx: Context, calls: State<Calls>) -> Result<(), HandlerError> {
    let work = if cx.delivered() == 1 {
        Duration::from_secs(30)
    } else {
        Duration::ZERO
    };
    calls.call("lay_timeout", job, &cx, work).await;
    Ok(())
}

#[queue_consumer(stream = Layers, group = "lay_limit", subject = "layers.limit", concurrency = 8)]
async fn limited(job: u64, cx: Context, calls: State<Calls>) -> Result<(), HandlerError> {
    calls
        .call("lay_limit", job, &cx, Duration::from_millis(50))
        .await;
    Ok(())
}

#[queue_consumer(stream = Layers, group = "lay_rate", subject = "layers.rate", concurrency = 8)]
async fn rated(job: u64, cx: Context, calls: State<Calls>) -> Result<(), HandlerError> {
    calls.call("lay_rate", job, &cx, Duration::ZERO).await;
    Ok(())
}

#[queue_consumer(stream = Layers, group = "lay_shed", subject = "layers.shed", backoff = ["100ms"], concurrency = 4)]
async fn shed(job: u64, cx: Context, calls: State<Calls>) -> Result<(), HandlerError> {
    calls
        .call("lay_shed", job, &cx, Duration::from_millis(200))
        .await;
    Ok(())
}

/// A batch whose messages are on their first delivery takes 30 s (a timeout layer stops it);
/// redelivered, it is quick.
#[queue_consumer(
    stream = Layers,
    group = "lay_batch",
    subject = "layers.batch",
    batch = 5,
    batch_wait = "100ms",
    backoff = ["100ms"]
)]
async fn batched(jobs: Batch<u64>, calls: State<Calls>) -> Result<(), BatchError> {
    if jobs.iter().any(|job| job.context().delivered() == 1) {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    let mut seen = calls.seen.lock().unwrap();
    for job in &jobs {
        let call = (*job.value(), job.context().delivered(), Instant::now());
        seen.entry("lay_batch").or_default().push(call);
    }
    Ok(())
}

/// How many times a `Counted` payload was decoded, in this test binary.
static DECODED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A job whose decoding is counted.
struct Counted(u64);

impl<'de> serde::Deserialize<'de> for Counted {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        DECODED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        u64::deserialize(deserializer).map(Counted)
    }
}

#[queue_consumer(stream = Layers, group = "lay_decoded", subject = "layers.decoded")]
async fn decoded(job: Counted, cx: Context, calls: State<Calls>) -> Result<(), HandlerError> {
    calls.call("lay_decoded", job.0, &cx, Duration::ZERO).await;
    Ok(())
}

#[service(name = "layered", version = "1.0.0")]
struct Layered;

/// Holds a request until the test releases it.
#[derive(Clone, Default)]
struct Gate {
    entered: Arc<std::sync::atomic::AtomicBool>,
    release: Arc<tokio::sync::Notify>,
}

/// Takes `ms` milliseconds to answer; `0` waits at the gate instead.
#[endpoint(service = Layered, subject = "layered.wait", concurrency = 4)]
async fn wait(ms: u64, gate: State<Gate>) -> Result<u64, ServiceError> {
    if ms == 0 {
        let released = gate.release.notified();
        gate.entered
            .store(true, std::sync::atomic::Ordering::SeqCst);
        released.await;
    } else {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    Ok(ms)
}

/// The layers each message of `lay_attr` passed, in order.
static PASSED: Mutex<Vec<(&'static str, u64)>> = Mutex::new(Vec::new());

fn passed(by: &'static str, incoming: &Incoming) {
    let job = std::str::from_utf8(incoming.payload())
        .unwrap()
        .parse()
        .unwrap();
    PASSED.lock().unwrap().push((by, job));
}

fn mark_declared(incoming: Incoming) -> Incoming {
    passed("declared", &incoming);
    incoming
}

fn mark_builder(incoming: Incoming) -> Incoming {
    passed("builder", &incoming);
    incoming
}

/// The layer the attribute names: the declaration's own.
fn declared_layer() -> tower::util::MapRequestLayer<fn(Incoming) -> Incoming> {
    tower::util::MapRequestLayer::new(mark_declared as fn(Incoming) -> Incoming)
}

#[queue_consumer(stream = Layers, group = "lay_attr", subject = "layers.attr", layer = declared_layer)]
async fn attributed(job: u64, cx: Context, calls: State<Calls>) -> Result<(), HandlerError> {
    calls.call("lay_attr", job, &cx, Duration::ZERO).await;
    Ok(())
}

/// Batches that passed the batch consumer's declared layer, and batches its handler ran.
static BATCHES_MARKED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static BATCHES_RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn mark_batch(input: nats_topology::BatchInput) -> nats_topology::BatchInput {
    BATCHES_MARKED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    input
}

/// A batch consumer's own layer, named in its attribute.
fn batch_marks()
-> tower::util::MapRequestLayer<fn(nats_topology::BatchInput) -> nats_topology::BatchInput> {
    tower::util::MapRequestLayer::new(
        mark_batch as fn(nats_topology::BatchInput) -> nats_topology::BatchInput,
    )
}

#[queue_consumer(
    stream = Layers,
    group = "lay_batch_attr",
    subject = "layers.batch_attr",
    batch = 5,
    batch_wait = "100ms",
    layer = batch_marks
)]
async fn batched_attr(jobs: Batch<u64>, calls: State<Calls>) -> Result<(), BatchError> {
    BATCHES_RUN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let mut seen = calls.seen.lock().unwrap();
    for job in &jobs {
        let call = (*job.value(), job.context().delivered(), Instant::now());
        seen.entry("lay_batch_attr").or_default().push(call);
    }
    Ok(())
}

/// An endpoint's own timeout, named in its attribute.
fn endpoint_timeout() -> tower::timeout::TimeoutLayer {
    tower::timeout::TimeoutLayer::new(Duration::from_millis(300))
}

#[endpoint(service = Layered, subject = "layered.attr", layer = endpoint_timeout)]
async fn sleepy(ms: u64) -> Result<u64, ServiceError> {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(ms)
}

async fn publish(js: &async_nats::jetstream::Context, subject: &str, jobs: std::ops::Range<u64>) {
    for job in jobs {
        js.publish(subject.to_owned(), job.to_string().into())
            .await
            .unwrap()
            .await
            .expect("stored");
    }
}

/// Each job of `jobs` finished by `by`, once each counting only calls that finished.
async fn all_handled(calls: &Calls, by: &'static str, jobs: std::ops::Range<u64>) {
    eventually(Duration::from_secs(30), "every job handled", || {
        let calls = calls.clone();
        let jobs = jobs.clone();
        async move {
            let seen: std::collections::BTreeSet<u64> =
                calls.of(by).iter().map(|(job, _, _)| *job).collect();
            jobs.clone().all(|j| seen.contains(&j)).then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_layer_stops_a_slow_handler_and_its_message_is_redelivered() {
    let fx = fixture::Fixture::start().await;
    let calls = Calls::default();
    let builder = fixture::fast(fx.builder().await)
        .state(calls.clone())
        .state(Gate::default())
        .layer_for(
            "lay_timeout",
            tower::timeout::TimeoutLayer::new(Duration::from_millis(300)),
        );
    let running = fixture::Running::start(builder).await;
    let js = fx.jetstream().await;
    publish(&js, "layers.timeout", 0..3).await;

    eventually(
        Duration::from_secs(30),
        "each job finished on its redelivery",
        || {
            let calls = calls.clone();
            async move {
                let finished: Vec<(u64, u64)> = calls
                    .of("lay_timeout")
                    .iter()
                    .filter(|(_, delivered, _)| *delivered > 1)
                    .map(|(job, delivered, _)| (*job, *delivered))
                    .collect();
                (finished.len() == 3).then_some(finished)
            }
        },
    )
    .await;
    let status = running
        .health
        .consumers()
        .into_iter()
        .find(|c| c.consumer == "lay_timeout")
        .unwrap();
    assert_eq!(status.handled, 3, "{status}");
    assert!(
        status.failed >= 3,
        "each first delivery timed out: {status}"
    );
    assert_eq!(status.dead_lettered, 0, "{status}");
    fixture::settled(&js, "LAYERS", "lay_timeout", Duration::from_secs(10)).await;
    running.stop().await.expect("clean drain");
}

/// A batch layer wraps the call of a batch handler: its timeout fails every message of the
/// batch, each redelivered and handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_layers_timeout_fails_the_whole_batch_and_each_message_is_redelivered() {
    let fx = fixture::Fixture::start().await;
    let calls = Calls::default();
    let builder = fixture::fast(fx.builder().await)
        .state(calls.clone())
        .state(Gate::default())
        .batch_layer_for(
            "lay_batch",
            tower::timeout::TimeoutLayer::new(Duration::from_millis(300)),
        );
    let running = fixture::Running::start(builder).await;
    let js = fx.jetstream().await;
    publish(&js, "layers.batch", 0..5).await;
    all_handled(&calls, "lay_batch", 0..5).await;
    let handled = calls.of("lay_batch");
    assert_eq!(handled.len(), 5, "each once: {handled:?}");
    assert!(
        handled.iter().all(|(_, delivered, _)| *delivered > 1),
        "each on a redelivery: {handled:?}"
    );
    let status = running
        .health
        .consumers()
        .into_iter()
        .find(|c| c.consumer == "lay_batch")
        .unwrap();
    assert_eq!((status.handled, status.dead_lettered), (5, 0), "{status}");
    assert!(status.failed >= 5, "the first batch failed whole: {status}");
    fixture::settled(&js, "LAYERS", "lay_batch", Duration::from_secs(10)).await;
    running.stop().await.expect("clean drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_layer_bounds_the_handlers_in_flight() {
    let fx = fixture::Fixture::start().await;
    let calls = Calls::default();
    let builder = fixture::fast(fx.builder().await)
        .state(calls.clone())
        .state(Gate::default())
        .layer_for("lay_limit", tower::limit::ConcurrencyLimitLayer::new(2));
    let running = fixture::Running::start(builder).await;
    let js = fx.jetstream().await;
    publish(&js, "layers.limit", 0..20).await;
    all_handled(&calls, "lay_limit", 0..20).await;
    assert_eq!(
        calls.most_in_flight("lay_limit"),
        2,
        "concurrency 8 on the consumer, 2 through the layer"
    );
    assert_eq!(calls.of("lay_limit").len(), 20, "each job once");
    running.stop().await.expect("clean drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_layer_spaces_the_calls() {
    let fx = fixture::Fixture::start().await;
    let calls = Calls::default();
    let per = Duration::from_millis(500);
    let builder = fixture::fast(fx.builder().await)
        .state(calls.clone())
        .state(Gate::default())
        .layer_for("lay_rate", ServiceBuilder::new().rate_limit(3, per));
    let running = fixture::Running::start(builder).await;
    let js = fx.jetstream().await;
    publish(&js, "layers.rate", 0..9).await;
    all_handled(&calls, "lay_rate", 0..9).await;
    let mut starts: Vec<Instant> = calls.of("lay_rate").iter().map(|c| c.2).collect();
    starts.sort();
    // Three calls a window, each window beginning no earlier than the previous one's end.
    let slack = Duration::from_millis(50);
    for (i, start) in starts.iter().enumerate() {
        let windows = (i / 3) as u32;
        assert!(
            *start + slack >= starts[0] + per * windows,
            "call {i} began {:?} after the first, before window {windows}",
            start.duration_since(starts[0])
        );
    }
    running.stop().await.expect("clean drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_shed_layer_gives_messages_back_and_each_is_handled_once() {
    let fx = fixture::Fixture::start().await;
    let calls = Calls::default();
    let builder = fixture::fast(fx.builder().await)
        .state(calls.clone())
        .state(Gate::default())
        .layer_for(
            "lay_shed",
            ServiceBuilder::new().load_shed().concurrency_limit(1),
        );
    let running = fixture::Running::start(builder).await;
    let js = fx.jetstream().await;
    publish(&js, "layers.shed", 0..6).await;
    all_handled(&calls, "lay_shed", 0..6).await;
    let handled = calls.of("lay_shed");
    assert_eq!(handled.len(), 6, "a shed message never reaches the handler");
    assert_eq!(calls.most_in_flight("lay_shed"), 1);
    assert!(
        handled.iter().any(|(_, delivered, _)| *delivered > 1),
        "with 4 at once and room for 1, some were shed and redelivered: {handled:?}"
    );
    fixture::settled(&js, "LAYERS", "lay_shed", Duration::from_secs(10)).await;
    running.stop().await.expect("clean drain");
}

/// A layer of the user's own (`tower::layer::layer_fn`), on every consumer: it sees each
/// message's subject and delivery count before the handler runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tracing_layer_of_ones_own_sees_every_messages_context() {
    let fx = fixture::Fixture::start().await;
    let calls = Calls::default();
    let traced = Arc::new(Mutex::new(Vec::<(String, u64)>::new()));
    let record = traced.clone();
    let tracing_layer = tower::layer::layer_fn(move |inner: HandlerService| {
        let record = record.clone();
        tower::service_fn(move |incoming: Incoming| {
            let cx = incoming.context();
            let span = tracing::info_span!("message", subject = cx.subject());
            record
                .lock()
                .unwrap()
                .push((cx.subject().to_owned(), cx.delivered()));
            let mut inner = inner.clone();
            tracing::Instrument::instrument(tower::Service::call(&mut inner, incoming), span)
        })
    });
    let builder = fixture::fast(fx.builder().await)
        .state(calls.clone())
        .state(Gate::default())
        .layer(tracing_layer);
    let running = fixture::Running::start(builder).await;
    let js = fx.jetstream().await;
    publish(&js, "layers.limit", 0..5).await;
    all_handled(&calls, "lay_limit", 0..5).await;
    let traced = traced.lock().unwrap().clone();
    assert_eq!(
        traced,
        vec![("layers.limit".to_owned(), 1); 5],
        "the layer saw each message once, first delivery"
    );
    running.stop().await.expect("clean drain");
}

/// A layer reads the decoded payload (`Incoming::decode`) and refuses job 13 before the
/// handler runs; the handler takes the value the layer decoded: each payload decoded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_reads_the_decoded_payload_which_the_handler_then_takes() {
    let fx = fixture::Fixture::start().await;
    let calls = Calls::default();
    let refuse_13 = tower::layer::layer_fn(|inner: HandlerService| {
        tower::service_fn(move |mut incoming: Incoming| {
            let job = incoming.decode::<_, Counted>(Json).map(|job| job.0);
            let mut inner = inner.clone();
            async move {
                match job {
                    Ok(13) => Err(Failed(HandlerError::permanent("13 is refused")).into()),
                    Ok(_) => tower::Service::call(&mut inner, incoming).await,
                    Err(error) => Err(Failed(error).into()),
                }
            }
        })
    });
    let builder = fixture::fast(fx.builder().await)
        .state(calls.clone())
        .state(Gate::default())
        .layer_for("lay_decoded", refuse_13);
    let running = fixture::Running::start(builder).await;
    let js = fx.jetstream().await;
    let before = DECODED.load(std::sync::atomic::Ordering::SeqCst);
    publish(&js, "layers.decoded", 10..16).await;
    fixture::settled(&js, "LAYERS", "lay_decoded", Duration::from_secs(10)).await;
    let mut jobs: Vec<u64> = calls.of("lay_decoded").iter().map(|c| c.0).collect();
    jobs.sort_unstable();
    assert_eq!(
        jobs,
        [10, 11, 12, 14, 15],
        "13 refused by the layer, the rest handled"
    );
    assert_eq!(
        DECODED.load(std::sync::atomic::Ordering::SeqCst) - before,
        6,
        "each payload decoded once, by the layer"
    );
    let status = running
        .health
        .consumers()
        .into_iter()
        .find(|c| c.consumer == "lay_decoded")
        .unwrap();
    assert_eq!(
        (status.handled, status.failed, status.retried),
        (5, 1, 0),
        "{status}"
    );
    running.stop().await.expect("clean drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoints_timeout_layer_answers_504_and_its_shed_request_503() {
    let fx = fixture::Fixture::start().await;
    let gate = Gate::default();
    let builder = fixture::fast(fx.builder().await)
        .state(Calls::default())
        .state(gate.clone())
        .endpoint_layer_for(
            "wait",
            ServiceBuilder::new()
                .load_shed()
                .concurrency_limit(1)
                .timeout(Duration::from_secs(2)),
        );
    let running = fixture::Running::start(builder).await;
    let client = fx.connect().await;
    let ask = |ms: u64| {
        let client = client.clone();
        async move {
            let reply = client
                .request("layered.wait", ms.to_string().into())
                .await
                .expect("answered");
            let code = reply
                .headers
                .as_ref()
                .and_then(|h| h.get("Nats-Service-Error-Code"))
                .map(|v| v.as_str().to_owned());
            (code, String::from_utf8_lossy(&reply.payload).into_owned())
        }
    };
    assert_eq!(ask(10).await, (None, "10".to_owned()), "within the timeout");
    assert_eq!(
        ask(10_000).await.0.as_deref(),
        Some("504"),
        "past the timeout"
    );
    // A request held at the gate has the only slot (within its 2 s): the next is shed.
    let holding = tokio::spawn(ask(0));
    eventually(Duration::from_secs(5), "the request at the gate", || {
        let entered = gate.entered.load(std::sync::atomic::Ordering::SeqCst);
        async move { entered.then_some(()) }
    })
    .await;
    assert_eq!(
        ask(5).await.0.as_deref(),
        Some("503"),
        "shed while the slot is held"
    );
    gate.release.notify_one();
    let held = holding.await.unwrap();
    assert!(
        held == (None, "0".to_owned()) || held.0.as_deref() == Some("504"),
        "the held request is answered (or timed out past 2 s): {held:?}"
    );
    running.stop().await.expect("clean drain");
}

/// `layer = f` in the attribute wraps the handler inside the builder's layers (the
/// declaration's own is innermost); on an endpoint, its timeout answers 504.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_named_in_the_attribute_wraps_its_handler_inside_the_builders() {
    let fx = fixture::Fixture::start().await;
    let calls = Calls::default();
    let builder = fixture::fast(fx.builder().await)
        .state(calls.clone())
        .state(Gate::default())
        .layer_for(
            "lay_attr",
            tower::util::MapRequestLayer::new(mark_builder as fn(Incoming) -> Incoming),
        );
    let running = fixture::Running::start(builder).await;
    let js = fx.jetstream().await;
    publish(&js, "layers.attr", 0..3).await;
    all_handled(&calls, "lay_attr", 0..3).await;
    let passed = PASSED.lock().unwrap().clone();
    for job in 0..3 {
        let order: Vec<&str> = passed
            .iter()
            .filter(|(_, j)| *j == job)
            .map(|(by, _)| *by)
            .collect();
        assert_eq!(order, ["builder", "declared"], "job {job}: {passed:?}");
    }

    // A batch consumer's declared layer wraps each batch.
    publish(&js, "layers.batch_attr", 0..12).await;
    all_handled(&calls, "lay_batch_attr", 0..12).await;
    let (marked, run) = (
        BATCHES_MARKED.load(std::sync::atomic::Ordering::SeqCst),
        BATCHES_RUN.load(std::sync::atomic::Ordering::SeqCst),
    );
    assert!(run >= 3, "12 messages in batches of at most 5: {run}");
    assert_eq!(marked, run, "every batch passed the declared layer");

    let client = fx.connect().await;
    let ask = |ms: u64| {
        let client = client.clone();
        async move {
            let reply = client
                .request("layered.attr", ms.to_string().into())
                .await
                .expect("answered");
            reply
                .headers
                .as_ref()
                .and_then(|h| h.get("Nats-Service-Error-Code"))
                .map(|v| v.as_str().to_owned())
        }
    };
    assert_eq!(ask(10).await, None, "within the declared timeout");
    assert_eq!(ask(5_000).await.as_deref(), Some("504"), "past it");
    running.stop().await.expect("clean drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_for_a_name_that_matches_nothing_is_refused_at_build() {
    let fx = fixture::Fixture::start().await;
    let refused = fx
        .builder()
        .await
        .state(Calls::default())
        .state(Gate::default())
        .layer_for("lay_tmeout", tower::limit::ConcurrencyLimitLayer::new(1))
        .layer_for("lay_batch", tower::limit::ConcurrencyLimitLayer::new(1))
        .batch_layer_for("lay_limit", tower::limit::ConcurrencyLimitLayer::new(1))
        .endpoint_layer_for("wiat", tower::limit::ConcurrencyLimitLayer::new(1))
        .build()
        .err()
        .expect("refused");
    let text = refused.to_string();
    assert!(
        text.contains("\"lay_tmeout\" names no consumer") && text.contains("lay_timeout"),
        "{text}"
    );
    assert!(
        text.contains("\"wiat\" names no endpoint") && text.contains("wait"),
        "{text}"
    );
    assert!(
        text.contains("\"lay_batch\" is a batch consumer")
            && text.contains("write `batch_layer_for(\"lay_batch\", ..)`"),
        "{text}"
    );
    assert!(
        text.contains("\"lay_limit\" is not a batch consumer")
            && text.contains("write `layer_for(\"lay_limit\", ..)`"),
        "{text}"
    );
}
