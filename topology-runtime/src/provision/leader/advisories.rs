//! Which leader advisories a watch listens to: the subjects (the meta leader's, and those of
//! the streams and consumers its retries wait on) and which payloads it takes as its
//! JetStream's.

/// Where the server publishes JetStream advisories, in every domain
/// (`$JS.<domain>.EVENT.ADVISORY` is not a thing: advisories keep this prefix and carry the
/// domain in their payload; an account import may map them elsewhere).
pub(crate) const ADVISORY_PREFIX: &str = "$JS.EVENT.ADVISORY";

/// The meta leader's elections: one subject per JetStream, naming no stream (the meta group
/// is the whole JetStream's, every account's), so it cannot be narrowed to a service.
pub(crate) fn meta_elected() -> String {
    format!("{ADVISORY_PREFIX}.DOMAIN.LEADER_ELECTED")
}

/// The elections of `stream`'s leader.
pub(crate) fn stream_elected(stream: &str) -> String {
    format!("{ADVISORY_PREFIX}.STREAM.LEADER_ELECTED.{stream}")
}

/// The elections of the leader of consumer `consumer` of `stream` (`*`: any of its
/// consumers).
pub(crate) fn consumer_elected(stream: &str, consumer: &str) -> String {
    format!("{ADVISORY_PREFIX}.CONSUMER.LEADER_ELECTED.{stream}.{consumer}")
}

/// Which leader advisories the watch listens to.
///
/// A JetStream domain's servers publish their advisories in their own account, on their own
/// servers. Across a leaf node connection they reach this connection only when the account's
/// interest crosses it (it does when both ends bind the same account, as the test kit's leaf
/// topology does; an edge whose leaf connection binds another account keeps them), and then
/// mixed with the local domain's own advisories under the same subjects. So in a domain the
/// watch keeps only advisories whose payload names that domain, and relies on the `INFO`
/// probe, which goes through the domain's prefix, for the rest. Behind an arbitrary API prefix
/// (an account import) nothing says which JetStream an advisory came from: the watch probes
/// only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Advisories {
    /// The connection's own JetStream: every advisory is ours.
    All,
    /// Only those whose payload's `domain` is this one.
    Domain(String),
    /// None: probe only.
    None,
}

impl Advisories {
    /// What a runtime talking to `api` listens to.
    pub(crate) fn of(api: &crate::jsapi::JetStreamApi) -> Self {
        use crate::jsapi::JetStreamApi;
        match api {
            JetStreamApi::Local => Advisories::All,
            JetStreamApi::Domain(domain) => Advisories::Domain(domain.clone()),
            JetStreamApi::Prefix(_) => Advisories::None,
        }
    }

    /// The subjects the watch listens to whatever waits: the meta leader's elections (none
    /// behind an arbitrary API prefix).
    pub(crate) fn always(&self) -> Vec<String> {
        match self {
            Advisories::None => Vec::new(),
            Advisories::All | Advisories::Domain(_) => vec![meta_elected()],
        }
    }

    /// The subjects a retry on `stream` (for its consumer `consumer`, when it is for one)
    /// adds while it waits: its stream's elections, and its consumer's. Only those: the
    /// watch wakes a retry for an election of its own stream or one of its consumers
    /// ([`Election::concerns`](super::Election)), so the elections of other streams of the
    /// account are not its business (nor, with least-privilege permissions, its user's).
    pub(crate) fn of_retry(&self, stream: &str, consumer: Option<&str>) -> Vec<String> {
        if *self == Advisories::None || stream.is_empty() {
            return Vec::new();
        }
        let mut subjects = vec![stream_elected(stream)];
        subjects.extend(consumer.map(|consumer| consumer_elected(stream, consumer)));
        subjects
    }

    /// Whether an advisory with this payload concerns the watched JetStream.
    pub(crate) fn accepts(&self, payload: &[u8]) -> bool {
        match self {
            Advisories::All => true,
            Advisories::None => false,
            Advisories::Domain(domain) => serde_json::from_slice::<serde_json::Value>(payload)
                .ok()
                .and_then(|v| v.get("domain")?.as_str().map(|d| d == domain))
                .unwrap_or(false),
        }
    }
}
