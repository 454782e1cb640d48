//! Scenarios shared by the single-node and cluster end-to-end tests.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::ServerAddr;
use nats_topology::Runtime;
use nats_topology::testkit::eventually;
use serde::{Deserialize, Serialize};

/// One unit of work, identified by `id`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Job {
    pub id: u32,
}

/// The ids one runtime handled, in order (duplicates kept, so that they can be detected).
#[derive(Clone, Default)]
pub struct Seen(pub Arc<Mutex<Vec<u32>>>);

impl Seen {
    pub fn record(&self, id: u32) {
        self.0.lock().unwrap().push(id);
    }

    pub fn ids(&self) -> Vec<u32> {
        self.0.lock().unwrap().clone()
    }
}

/// Two runtimes on two connections share one queue consumer; `count` jobs published to
/// `subject` must each be handled exactly once across the two, and both must take part.
pub async fn two_runtimes_share_work(addrs: Vec<ServerAddr>, subject: &str, count: u32) {
    let mut seen = Vec::new();
    let mut stops = Vec::new();
    let mut runs = Vec::new();
    let mut healths = Vec::new();
    for _ in 0..2 {
        let client = async_nats::connect(addrs.clone()).await.expect("connect");
        let mine = Seen::default();
        let runtime = Runtime::builder(client)
            .state(mine.clone())
            .build()
            .expect("the registered topology is valid");
        healths.push(runtime.health());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        runs.push(tokio::spawn(runtime.run_until(async move {
            let _ = stopped.await;
        })));
        stops.push(stop);
        seen.push(mine);
    }
    for health in &healths {
        eventually(Duration::from_secs(60), "both runtimes ready", || {
            let ready = health.ready();
            async move { ready.then_some(()) }
        })
        .await;
    }

    let publisher = async_nats::connect(addrs.clone()).await.expect("connect");
    let js = async_nats::jetstream::new(publisher);
    let mut acks = Vec::with_capacity(count as usize);
    for id in 0..count {
        let body = serde_json::to_vec(&Job { id }).unwrap();
        acks.push(
            js.publish(subject.to_owned(), body.into())
                .await
                .expect("publish"),
        );
    }
    for ack in acks {
        ack.await.expect("the stream acknowledges every publish");
    }

    eventually(Duration::from_secs(60), "every job handled", || {
        let total: usize = seen.iter().map(|s| s.ids().len()).sum();
        async move { (total >= count as usize).then_some(()) }
    })
    .await;
    for stop in stops {
        stop.send(()).unwrap();
    }
    for run in runs {
        run.await.unwrap().expect("a clean drain");
    }

    let handled: Vec<Vec<u32>> = seen.iter().map(Seen::ids).collect();
    let all: Vec<u32> = handled.iter().flatten().copied().collect();
    let unique: HashSet<u32> = all.iter().copied().collect();
    let expected: HashSet<u32> = (0..count).collect();
    assert_eq!(unique, expected, "every id sent is handled");
    assert_eq!(all.len(), unique.len(), "no id is handled twice");
    for (i, ids) in handled.iter().enumerate() {
        assert!(!ids.is_empty(), "runtime {i} handled some of the work");
    }
    eprintln!(
        "split of {count} jobs: {:?}",
        handled.iter().map(Vec::len).collect::<Vec<_>>()
    );
}
