//! Accepted: ordered replays, from the whole stream (the default with `ordered`) or from the
//! last message of each subject, with `concurrency = 1` allowed (it is what they do).

use nats_topology::model::{ConsumerKind, DeliverPolicy};
use nats_topology::{broadcast, stream, Context, HandlerError, Topology};

#[stream(name = "LEDGER", subjects = ["ledger.>"])]
pub struct Ledger;

#[broadcast(stream = Ledger, subject = "ledger.>", ordered)]
async fn balances(entry: String, cx: Context) -> Result<(), HandlerError> {
    let _ = (entry, cx.stream_sequence());
    Ok(())
}

#[broadcast(stream = Ledger, subject = "ledger.>", ordered, deliver = "last_per_subject", concurrency = 1)]
async fn latest(entry: String) -> Result<(), HandlerError> {
    let _ = entry;
    Ok(())
}

#[broadcast(stream = Ledger, subject = "ledger.>", ordered = false)]
async fn unordered(entry: String) -> Result<(), HandlerError> {
    let _ = entry;
    Ok(())
}

fn main() {
    let topology = Topology::from_registry();
    let relays: Vec<(&str, DeliverPolicy, bool)> = topology
        .consumers()
        .iter()
        .map(|c| {
            let ConsumerKind::Broadcast(relay) = c.decl.kind else {
                panic!("a broadcast is a relay")
            };
            let name = c.decl.handler.rsplit("::").next().unwrap();
            (name, relay.deliver, relay.ordered)
        })
        .collect();
    assert_eq!(
        relays,
        [
            ("balances", DeliverPolicy::All, true),
            ("latest", DeliverPolicy::LastPerSubject, true),
            ("unordered", DeliverPolicy::New, false),
        ]
    );
}
