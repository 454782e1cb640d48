//! Whether each declared stream takes writes ([`Writes`]), as the runtime's stream watch last
//! read it, and since when ([`StreamWrites`]).
//!
//! A replicated stream takes a write once its leader has stored it on a quorum of its
//! replicas. A stream with no leader (being elected, or its servers unreachable), or whose
//! leader hears from too few of its replicas (a partition, lost nodes), refuses nothing: a
//! publish to it waits for an acknowledgement that does not come. The consumers reading it
//! may go on meanwhile (they deliver what is stored), so nothing else shows it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// A follower not heard from for this long is counted as out of reach (the leader hears
/// from each about once a second while all is well).
pub(crate) const SILENT_REPLICA: Duration = Duration::from_secs(5);

/// Whether a stream takes writes, as its info said.
///
/// ```
/// use nats_topology::Writes;
///
/// let cut_off = Writes::NoQuorum { leader: "n1".into(), reachable: 1, replicas: 3 };
/// assert!(!cut_off.taken());
/// assert_eq!(
///     cut_off.to_string(),
///     "NO QUORUM: its leader `n1` reaches 1 of 3 replicas (itself included); writes wait"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Writes {
    /// It has a leader that reaches a quorum of its replicas.
    Taken,
    /// Its leader reaches fewer than a quorum of its replicas (itself included): a write
    /// waits until enough of them are back, or another side elects a leader.
    NoQuorum {
        /// The server that says it leads it.
        leader: String,
        /// The replicas it reaches, itself included.
        reachable: usize,
        /// All its replicas.
        replicas: usize,
    },
    /// It has no leader: one is being elected, or too few of its servers reach each other.
    NoLeader {
        /// All its replicas.
        replicas: usize,
    },
    /// Its info got no answer (no server answers for it, or JetStream is unreachable).
    NoAnswer {
        /// What the request got instead.
        error: String,
    },
}

impl Writes {
    /// Whether the stream takes writes.
    pub fn taken(&self) -> bool {
        matches!(self, Writes::Taken)
    }

    /// What a stream's info says of its writes.
    pub fn of(info: &async_nats::jetstream::stream::Info) -> Writes {
        let Some(cluster) = &info.cluster else {
            return Writes::Taken;
        };
        // A server outside a cluster names itself the leader of every stream, or no leader
        // and no replica.
        if cluster.leader.is_none() && cluster.replicas.is_empty() && info.config.num_replicas <= 1
        {
            return Writes::Taken;
        }
        Writes::from_cluster(
            cluster.leader.as_deref(),
            cluster
                .replicas
                .iter()
                .map(|peer| (peer.current, peer.offline, peer.active)),
        )
    }

    /// What a stream's cluster info says: its leader (`None` while it has none) and, for each
    /// replica it lists (every other one; all of them while there is no leader), whether it
    /// is current, offline, and how long ago its leader heard from it.
    pub(crate) fn from_cluster(
        leader: Option<&str>,
        followers: impl IntoIterator<Item = (bool, bool, Duration)>,
    ) -> Writes {
        let followers: Vec<_> = followers.into_iter().collect();
        let Some(leader) = leader else {
            return Writes::NoLeader {
                replicas: followers.len().max(1),
            };
        };
        let replicas = followers.len() + 1;
        let reachable = 1 + followers
            .iter()
            .filter(|(current, offline, seen)| !offline && (*current || *seen < SILENT_REPLICA))
            .count();
        if reachable > replicas / 2 {
            Writes::Taken
        } else {
            Writes::NoQuorum {
                leader: leader.to_owned(),
                reachable,
                replicas,
            }
        }
    }

    /// What an operator can do about it, for `stream` (empty while it takes writes).
    pub fn remedy(&self, stream: &str) -> String {
        match self {
            Writes::Taken => String::new(),
            Writes::NoQuorum { .. } => format!(
                "heal the network or bring its replicas' servers back; if the other replicas \
                 reach each other, `nats stream cluster step-down {stream}` on their side \
                 elects a leader there"
            ),
            Writes::NoLeader { .. } => "a leader is elected once a majority of its replicas' \
                 servers reach each other: bring them back or heal the network between them"
                .to_owned(),
            Writes::NoAnswer { .. } => "check that the servers holding it run and that this \
                 connection's server reaches them"
                .to_owned(),
        }
    }
}

impl fmt::Display for Writes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Writes::Taken => write!(f, "takes writes"),
            Writes::NoQuorum {
                leader,
                reachable,
                replicas,
            } => write!(
                f,
                "NO QUORUM: its leader `{leader}` reaches {reachable} of {replicas} replicas \
                 (itself included); writes wait"
            ),
            Writes::NoLeader { replicas } => {
                write!(f, "NO LEADER among its {replicas} replicas; writes wait")
            }
            Writes::NoAnswer { error } => {
                write!(f, "NO ANSWER to its info ({error}); writes may wait")
            }
        }
    }
}

/// A declared stream's [`Writes`], and for how long it has said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamWrites {
    /// The stream.
    pub stream: String,
    /// Whether it takes writes.
    pub writes: Writes,
    /// For how long it has said so (since the first read that did).
    pub lasting: Duration,
}

impl StreamWrites {
    /// What an operator can do about it (empty while it takes writes).
    pub fn remedy(&self) -> String {
        self.writes.remedy(&self.stream)
    }
}

impl fmt::Display for StreamWrites {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream {}: {}", self.stream, self.writes)?;
        if !self.writes.taken() {
            write!(f, " (for {:.1?}); {}", self.lasting, self.remedy())?;
        }
        Ok(())
    }
}

/// The stream watch's record (in [`Shared`](super::Shared)): each declared stream's last
/// [`Writes`] and when it started saying so, with the subjects each captures (to name the
/// stream a failed publish went to).
#[derive(Default)]
pub(crate) struct WritesRecord {
    streams: Mutex<BTreeMap<String, (Writes, Instant)>>,
    /// Each watched stream's subjects.
    subjects: Vec<(String, Vec<String>)>,
    /// Wakes the stream watch: a publish got no acknowledgement.
    pub(crate) wake: Arc<tokio::sync::Notify>,
}

/// A change the record saw.
pub(crate) struct Changed {
    pub(crate) before: Writes,
    /// How long the state before lasted.
    pub(crate) lasted: Duration,
}

impl WritesRecord {
    /// A record of the streams `subjects` names (each stream with the subjects it captures).
    pub(crate) fn new(subjects: Vec<(String, Vec<String>)>) -> WritesRecord {
        WritesRecord {
            streams: Mutex::default(),
            subjects,
            wake: Arc::default(),
        }
    }

    /// The streams to watch.
    pub(crate) fn streams(&self) -> impl Iterator<Item = &str> {
        self.subjects.iter().map(|(stream, _)| stream.as_str())
    }

    /// Records what a read of `stream` said; returns what it said before, if that differs.
    pub(crate) fn record(&self, stream: &str, writes: Writes) -> Option<Changed> {
        let mut streams = self.lock();
        let now = Instant::now();
        match streams.get_mut(stream) {
            Some((before, since)) if *before != writes => {
                let before = std::mem::replace(before, writes);
                let lasted = now.duration_since(std::mem::replace(since, now));
                Some(Changed { before, lasted })
            }
            Some(_) => None,
            None => {
                let taken = writes.taken();
                streams.insert(stream.to_owned(), (writes, now));
                // The first read: a change only if it does not take writes.
                (!taken).then_some(Changed {
                    before: Writes::Taken,
                    lasted: Duration::ZERO,
                })
            }
        }
    }

    /// Forgets `stream` (it does not exist: nothing can be said of its writes).
    pub(crate) fn forget(&self, stream: &str) {
        self.lock().remove(stream);
    }

    /// Every stream read so far.
    pub(crate) fn all(&self) -> Vec<StreamWrites> {
        self.lock()
            .iter()
            .map(|(stream, (writes, since))| StreamWrites {
                stream: stream.clone(),
                writes: writes.clone(),
                lasting: since.elapsed(),
            })
            .collect()
    }

    /// The watched stream that captures `subject`, if it does not take writes now.
    pub(crate) fn refusing(&self, subject: &str) -> Option<StreamWrites> {
        let (stream, _) = self.subjects.iter().find(|(_, filters)| {
            filters
                .iter()
                .any(|filter| topology_core::subject::matches(filter, subject))
        })?;
        let streams = self.lock();
        let (writes, since) = streams.get(stream)?;
        (!writes.taken()).then(|| StreamWrites {
            stream: stream.clone(),
            writes: writes.clone(),
            lasting: since.elapsed(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (Writes, Instant)>> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEEN: Duration = Duration::from_millis(900);
    const SILENT: Duration = Duration::from_secs(12);

    #[test]
    fn a_leader_with_its_followers_takes_writes() {
        let writes = Writes::from_cluster(Some("n1"), [(true, false, SEEN), (true, false, SEEN)]);
        assert_eq!(writes, Writes::Taken);
        // One follower lost: two of three are a quorum.
        let writes = Writes::from_cluster(Some("n1"), [(true, false, SEEN), (false, true, SILENT)]);
        assert_eq!(writes, Writes::Taken);
        // A stream of one replica (or outside a cluster).
        assert_eq!(Writes::from_cluster(Some("n1"), []), Writes::Taken);
    }

    #[test]
    fn a_leader_cut_off_from_its_followers_has_no_quorum() {
        let writes =
            Writes::from_cluster(Some("n1"), [(false, false, SILENT), (false, false, SILENT)]);
        assert_eq!(
            writes,
            Writes::NoQuorum {
                leader: "n1".into(),
                reachable: 1,
                replicas: 3
            }
        );
    }

    #[test]
    fn a_follower_behind_but_heard_from_counts() {
        let writes =
            Writes::from_cluster(Some("n1"), [(false, false, SEEN), (false, false, SILENT)]);
        assert_eq!(writes, Writes::Taken);
    }

    #[test]
    fn no_leader_is_said_so() {
        // Without a leader, every replica is listed.
        let replicas = [
            (true, false, SEEN),
            (false, false, SEEN),
            (false, false, SEEN),
        ];
        let writes = Writes::from_cluster(None, replicas);
        assert_eq!(writes, Writes::NoLeader { replicas: 3 });
    }

    #[test]
    fn a_failed_publish_names_the_stream_that_refuses_it() {
        let record = WritesRecord::new(vec![
            ("ORDERS".into(), vec!["orders.>".into()]),
            ("AUDIT".into(), vec!["audit.*".into()]),
        ]);
        assert!(record.record("ORDERS", Writes::Taken).is_none());
        assert!(
            record
                .record("ORDERS", Writes::NoLeader { replicas: 3 })
                .is_some()
        );
        let refusing = record.refusing("orders.eu.paid").expect("ORDERS refuses");
        assert_eq!(refusing.stream, "ORDERS");
        assert!(record.refusing("audit.x").is_none(), "never read: unknown");
        assert!(record.refusing("other").is_none());
    }
}
