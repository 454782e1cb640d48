//! `health`: each declared stream and queue consumer as the server has it, provisioning
//! nothing.

use std::fmt;

use async_nats::jetstream::{self, ErrorCode, response::Response};
use topology_core::model::ConsumerKind;
use topology_core::subject::covered_by;

use crate::Runtime;
use crate::report::ConsumerReport;

/// What `health` found.
pub(super) struct Report {
    streams: Vec<StreamLine>,
    consumers: Vec<ConsumerReport>,
    /// Each relay's stream, handler, and what it is called (`BroadcastDecl::noun`).
    relays: Vec<(String, String, &'static str)>,
}

struct StreamLine {
    name: String,
    /// The key-value bucket or object store the stream is, if it is one.
    bucket: Option<String>,
    external: bool,
    /// `Err` with what is wrong.
    state: Result<String, String>,
}

impl Report {
    /// Every stream exists (an external one covering what is consumed from it) and every
    /// queue consumer exists and is consumed by someone.
    pub(super) fn healthy(&self) -> bool {
        self.streams.iter().all(|s| s.state.is_ok())
            && self
                .consumers
                .iter()
                .all(|c| c.server.as_ref().is_some_and(|s| s.active))
    }
}

pub(super) async fn read(runtime: &Runtime) -> Result<Report, String> {
    let topology = runtime.topology();
    // The runtime's JetStream: its domain or API prefix.
    let js = runtime.jetstream();
    let mut streams = Vec::new();
    for decl in topology.streams() {
        let consumed = topology.consumed_subjects(decl.name);
        let answer: Result<Response<jetstream::stream::Info>, _> =
            js.request(format!("STREAM.INFO.{}", decl.name), &()).await;
        let state = match answer {
            Ok(Response::Ok(info)) => {
                let carried: Vec<&str> = info.config.subjects.iter().map(String::as_str).collect();
                let uncovered: Vec<&str> = consumed
                    .iter()
                    .copied()
                    .filter(|s| !covered_by(s, &carried))
                    .collect();
                let writes = crate::Writes::of(&info);
                if !writes.taken() {
                    Err(format!(
                        "exists, {} message(s), {} consumer(s); {writes}",
                        info.state.messages, info.state.consumer_count
                    ))
                } else if uncovered.is_empty() {
                    Ok(format!(
                        "exists; {} message(s), {} consumer(s)",
                        info.state.messages, info.state.consumer_count
                    ))
                } else {
                    Err(format!(
                        "exists, but its subjects {:?} do not cover {uncovered:?}, consumed from it",
                        info.config.subjects
                    ))
                }
            }
            Ok(Response::Err { error }) if error.error_code() == ErrorCode::STREAM_NOT_FOUND => {
                Err("DOES NOT EXIST".to_owned())
            }
            Ok(Response::Err { error }) => {
                return Err(format!("reading stream `{}`: {error}", decl.name));
            }
            Err(e) => {
                return Err(format!(
                    "reading stream `{}`: {e} (is the server at the given address, with JetStream enabled?)",
                    decl.name
                ));
            }
        };
        streams.push(StreamLine {
            name: decl.name.to_owned(),
            bucket: topology
                .bucket_of_stream(decl.name)
                .map(|b| format!("{} `{}`", b.kind.noun(), b.name)),
            external: decl.external,
            state,
        });
    }
    let inspection = runtime.inspect().await.map_err(|e| e.to_string())?;
    let consumers = inspection.consumers;
    let relays = topology
        .consumers()
        .iter()
        .filter_map(|c| match c.decl.kind {
            ConsumerKind::Broadcast(relay) => Some((
                c.decl.stream.name().to_owned(),
                c.decl.handler.to_owned(),
                relay.noun(),
            )),
            ConsumerKind::Queue(_) => None,
        })
        .collect();
    Ok(Report {
        streams,
        consumers,
        relays,
    })
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.streams {
            let kind = if s.external { " (external)" } else { "" };
            match &s.bucket {
                Some(bucket) => write!(f, "{bucket}{kind} (stream `{}`): ", s.name)?,
                None => write!(f, "stream `{}`{kind}: ", s.name)?,
            }
            match &s.state {
                Ok(state) => writeln!(f, "{state}")?,
                Err(problem) => writeln!(f, "{problem}")?,
            }
        }
        for c in &self.consumers {
            write!(
                f,
                "consumer `{}` on `{}` ({}): ",
                c.consumer, c.stream, c.handler
            )?;
            match &c.server {
                None => writeln!(f, "DOES NOT EXIST")?,
                Some(s) => writeln!(f, "{s}")?,
            }
        }
        for (stream, handler, noun) in &self.relays {
            writeln!(
                f,
                "{noun} of `{handler}` on `{stream}`: an ephemeral consumer per running instance (not checked)"
            )?;
        }
        writeln!(
            f,
            "{}",
            if self.healthy() {
                "healthy"
            } else {
                "NOT HEALTHY"
            }
        )
    }
}
