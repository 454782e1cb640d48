//! Resume points of a supervised consumer, each tied to the stream instance it came from: a
//! queue consumer's ack floor (read from the server), a relay's last handled sequence (counted
//! here, as its handlers finish). A consumer re-created after a loss starts after its resume
//! point only while the stream is that instance (see `provision::ResumePoint::start_in`).

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_nats::jetstream::consumer;

use crate::provision::{ResumePoint, StreamInstance};

/// Where a consumer records what it handled, to resume after it when re-created.
#[derive(Clone)]
pub(in crate::run) enum Record {
    /// A queue consumer: the sequences it settled above its ack floor.
    Queue(Arc<Settled>),
    /// A relay: its session's progress (started, and done with).
    Relay(Arc<Progress>),
}

/// Where one supervised consumer would resume, across its sessions.
pub(in crate::run) struct Resume {
    /// A relay's (`true`) resume point is what its handlers handled; a queue consumer's is
    /// its ack floor on the server, and what this instance settled above it since.
    relay: bool,
    /// The ack floor as last read, in the stream instance it was read in.
    floor: Mutex<Option<ResumePoint>>,
    /// A queue consumer's messages this instance settled above that floor.
    settled: Arc<Settled>,
    /// A relay's current (or last) session.
    session: Mutex<Option<Arc<Progress>>>,
}

/// The stream sequences of the messages a queue consumer's instance settled (acknowledged
/// once handled, or terminated; with confirmed acks, once the server confirmed it) and the
/// ack floor last read does not cover yet: a consumer deleted between two reads is re-created
/// after them too, where they are contiguous above the floor (a gap is a message this
/// instance does not know settled: another instance's, or one the filter skips).
#[derive(Default)]
pub(in crate::run) struct Settled(Mutex<Runs>);

impl Settled {
    pub(in crate::run) fn record(&self, sequence: u64) {
        lock(&self.0).insert(sequence);
    }
}

/// A set of sequences kept as runs: sorted, disjoint and not adjacent (`(first, last)`,
/// inclusive). What one instance settles is mostly runs in order (the next sequence, or a
/// gap where another instance took some), recorded at the end in constant time, where a
/// set of every sequence took a tree insert and a node per message until the next floor read.
#[derive(Default, Debug)]
struct Runs(VecDeque<(u64, u64)>);

impl Runs {
    fn insert(&mut self, sequence: u64) {
        match self.0.back_mut() {
            None => return self.0.push_back((sequence, sequence)),
            Some((_, last)) if last.saturating_add(1) == sequence => return *last = sequence,
            Some((_, last)) if *last < sequence => return self.0.push_back((sequence, sequence)),
            Some(_) => {}
        }
        // Out of order (handlers finishing at once): the first run that ends at most one
        // below it holds it, extends to it, or starts after it.
        let i = self
            .0
            .partition_point(|&(_, last)| last.saturating_add(1) < sequence);
        let (first, last) = self.0[i];
        if (first..=last).contains(&sequence) {
        } else if last + 1 == sequence {
            self.0[i].1 = sequence;
            if let Some(&(next_first, next_last)) = self.0.get(i + 1)
                && next_first == sequence + 1
            {
                self.0[i].1 = next_last;
                self.0.remove(i + 1);
            }
        } else if sequence + 1 == first {
            self.0[i].0 = sequence;
        } else {
            self.0.insert(i, (sequence, sequence));
        }
    }

    /// The last sequence of the run holding `sequence`, if one does.
    fn run_end(&self, sequence: u64) -> Option<u64> {
        let i = self.0.partition_point(|&(_, last)| last < sequence);
        self.0
            .get(i)
            .filter(|(first, _)| *first <= sequence)
            .map(|&(_, last)| last)
    }

    /// Forgets the sequences at or below `after`.
    fn forget_to(&mut self, after: u64) {
        while self.0.front().is_some_and(|&(_, last)| last <= after) {
            self.0.pop_front();
        }
        if let Some(front) = self.0.front_mut() {
            front.0 = front.0.max(after + 1);
        }
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

impl Resume {
    pub(in crate::run) fn new(relay: bool) -> Self {
        Resume {
            relay,
            floor: Mutex::new(None),
            settled: Arc::default(),
            session: Mutex::new(None),
        }
    }

    /// Where a consumer re-created now should start after (`None`: as declared).
    pub(in crate::run) fn point(&self) -> Option<ResumePoint> {
        if self.relay {
            return lock(&self.session).as_ref().map(|p| p.resume_point());
        }
        let mut point = lock(&self.floor).clone()?;
        if let Some(last) = lock(&self.settled.0).run_end(point.after + 1) {
            point.after = last;
        }
        Some(point)
    }

    /// A session begins on `info`, ensured in `stream`: its ack floor is where it stands (a
    /// consumer just created at a resume point has its floor there). Returns the floor now
    /// held, and where the session records what it handled: a queue consumer's settled
    /// sequences, a relay's progress.
    pub(in crate::run) fn begin(
        &self,
        stream: &StreamInstance,
        info: &consumer::Info,
    ) -> (u64, Record) {
        let floor = info.ack_floor.stream_sequence;
        let held = self.follow(stream, floor);
        if !self.relay {
            return (held, Record::Queue(self.settled.clone()));
        }
        // What earlier sessions handled in this stream instance stays handled, whatever the
        // server's consumer says now (restored on a restarted node from before those acks, or
        // a delivery lost with a connection and made again): kept here, not on the server.
        let handled = lock(&self.session)
            .as_ref()
            .map(|earlier| earlier.resume_point())
            .filter(|point| point.stream.same_as(stream))
            .map_or(0, |point| point.after);
        let base = floor.max(handled);
        let progress = Arc::new(Progress {
            stream: stream.clone(),
            state: Mutex::new(ProgressState {
                base,
                unsettled: BTreeSet::new(),
                handled_max: base,
            }),
        });
        *lock(&self.session) = Some(progress.clone());
        (held, Record::Relay(progress))
    }

    /// The ack floor read on the server in `stream`: it only moves forward within one stream
    /// instance, and starts again in another. Returns the floor now held.
    pub(in crate::run) fn follow(&self, stream: &StreamInstance, floor: u64) -> u64 {
        let mut held = lock(&self.floor);
        let mut settled = lock(&self.settled.0);
        match &mut *held {
            Some(point) if point.stream.same_as(stream) => {
                point.after = point.after.max(floor);
                let after = point.after;
                settled.forget_to(after);
                after
            }
            other => {
                *other = Some(ResumePoint {
                    stream: stream.clone(),
                    after: floor,
                });
                // Sequences of another stream instance say nothing about this one.
                settled.clear();
                floor
            }
        }
    }
}

/// What one relay session has handled. Its handlers may finish out of order (a concurrency
/// above one, a failure redelivered later), so the resume point is not the highest sequence
/// handled but the one below the lowest sequence started and not settled: nothing below it
/// is left unhandled. A message fetched but never started (returned when the session ended,
/// to a consumer that may be gone) has a higher sequence than every first delivery started
/// before it (the server delivers in stream order), so it is above the point too.
pub(in crate::run) struct Progress {
    stream: StreamInstance,
    state: Mutex<ProgressState>,
}

struct ProgressState {
    /// The consumer's ack floor when the session began: everything up to it was handled.
    base: u64,
    /// Started and not settled yet (running, failed and to be redelivered, or stopped).
    unsettled: BTreeSet<u64>,
    /// The highest sequence settled in this session (or `base`).
    handled_max: u64,
}

impl Progress {
    pub(in crate::run) fn started(&self, sequence: u64) {
        lock(&self.state).unsettled.insert(sequence);
    }

    /// The message is done with: handled, or failed for good (dead-lettered and terminated,
    /// or left on its last delivery): never handled here again.
    pub(in crate::run) fn settled(&self, sequence: u64) {
        let mut state = lock(&self.state);
        state.unsettled.remove(&sequence);
        state.handled_max = state.handled_max.max(sequence);
    }

    /// Whether `sequence` is at or below the highest sequence settled in this session (or
    /// where it began).
    pub(in crate::run) fn handled_past(&self, sequence: u64) -> bool {
        let state = lock(&self.state);
        sequence <= state.handled_max.max(state.base)
    }

    fn resume_point(&self) -> ResumePoint {
        let state = lock(&self.state);
        let after = match state.unsettled.first() {
            Some(lowest) => lowest.saturating_sub(1),
            None => state.handled_max.max(state.base),
        };
        ResumePoint {
            stream: self.stream.clone(),
            after,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(created: &str) -> StreamInstance {
        StreamInstance {
            name: "S".to_owned(),
            created: created.into(),
            last_sequence: 1000,
        }
    }

    fn progress(base: u64) -> Progress {
        Progress {
            stream: instance("t1"),
            state: Mutex::new(ProgressState {
                base,
                unsettled: BTreeSet::new(),
                handled_max: base,
            }),
        }
    }

    #[test]
    fn a_relay_resumes_below_its_lowest_unsettled_message() {
        let p = progress(10);
        assert_eq!(
            p.resume_point().after,
            10,
            "nothing handled yet: where it began"
        );
        for s in 11..=14 {
            p.started(s);
        }
        // Out of order: 12 and 14 finish before 11 and 13.
        p.settled(12);
        p.settled(14);
        assert_eq!(p.resume_point().after, 10);
        p.settled(11);
        assert_eq!(p.resume_point().after, 12, "13 still runs");
        p.settled(13);
        assert_eq!(p.resume_point().after, 14);
        // A failure to be redelivered holds the point below it.
        p.started(15);
        p.started(16);
        p.settled(16);
        assert_eq!(p.resume_point().after, 14);
    }

    #[test]
    fn a_queue_consumer_resumes_after_what_it_settled_above_the_floor_read() {
        let resume = Resume::new(false);
        resume.follow(&instance("t1"), 100);
        let settled = resume.settled.clone();
        for sequence in [101, 102, 103, 105] {
            settled.record(sequence);
        }
        assert_eq!(
            resume.point().unwrap().after,
            103,
            "contiguous above the floor; 104 is not known settled"
        );
        assert_eq!(resume.follow(&instance("t1"), 104), 104);
        assert_eq!(
            resume.point().unwrap().after,
            105,
            "the floor read closed the gap"
        );
        assert_eq!(resume.follow(&instance("t2"), 3), 3);
        assert_eq!(
            resume.point().unwrap().after,
            3,
            "another stream instance forgets what was settled in the first"
        );
    }

    #[test]
    fn runs_hold_every_sequence_recorded_in_any_order() {
        let mut runs = Runs::default();
        let mut all = BTreeSet::new();
        // In order, with gaps, then out of order: filling gaps, joining runs, repeats.
        let sequences = [
            5, 6, 7, 9, 10, 20, 8, 3, 1, 2, 15, 14, 16, 12, 13, 11, 21, 7, 30, 4,
        ];
        for sequence in sequences {
            runs.insert(sequence);
            all.insert(sequence);
            for s in 0..=32 {
                let expected = all
                    .contains(&s)
                    .then(|| (s..).find(|n| !all.contains(&(n + 1))).unwrap());
                assert_eq!(
                    runs.run_end(s),
                    expected,
                    "{s} after inserting {sequence}: {runs:?}"
                );
            }
            assert!(
                runs.0
                    .iter()
                    .zip(runs.0.iter().skip(1))
                    .all(|(a, b)| a.1 + 1 < b.0),
                "sorted, disjoint, not adjacent: {runs:?}"
            );
        }
        assert_eq!(runs.0, [(1, 16), (20, 21), (30, 30)]);
        runs.forget_to(18);
        assert_eq!(runs.0, [(20, 21), (30, 30)]);
        runs.forget_to(20);
        assert_eq!(runs.0, [(21, 21), (30, 30)]);
        runs.forget_to(40);
        assert!(runs.0.is_empty());
    }

    #[test]
    fn an_ack_floor_moves_forward_in_one_stream_and_starts_again_in_another() {
        let resume = Resume::new(false);
        assert_eq!(resume.point(), None);
        assert_eq!(resume.follow(&instance("t1"), 100), 100);
        assert_eq!(resume.follow(&instance("t1"), 90), 100, "never backwards");
        assert_eq!(
            resume.follow(&instance("t2"), 3),
            3,
            "a new stream instance"
        );
        assert_eq!(resume.point().unwrap().stream.created.as_ref(), "t2");
    }

    fn info(floor: u64) -> consumer::Info {
        let mut info: consumer::Info = serde_json::from_value(serde_json::json!({
            "stream_name": "S",
            "name": "relay",
            "created": "2026-01-01T00:00:00Z",
            "config": { "deliver_policy": "all", "ack_policy": "explicit", "replay_policy": "instant" },
            "delivered": { "consumer_seq": 0, "stream_seq": 0 },
            "ack_floor": { "consumer_seq": 0, "stream_seq": 0 },
            "num_ack_pending": 0,
            "num_redelivered": 0,
            "num_waiting": 0,
            "num_pending": 0,
        }))
        .expect("a consumer info");
        info.ack_floor.stream_sequence = floor;
        info
    }

    #[test]
    fn a_relay_never_hands_again_what_an_earlier_session_handled_in_the_same_stream() {
        let resume = Resume::new(true);
        let (_, first) = resume.begin(&instance("t1"), &info(0));
        let Record::Relay(first) = first else {
            panic!("a relay records its progress")
        };
        for s in 1..=200 {
            first.started(s);
            first.settled(s);
        }
        // Re-created after a loss, on a consumer whose state is from before those acks.
        let (_, again) = resume.begin(&instance("t1"), &info(0));
        let Record::Relay(again) = again else {
            panic!("a relay records its progress")
        };
        assert!(again.handled_past(1) && again.handled_past(200));
        assert!(!again.handled_past(201));
        assert_eq!(resume.point().unwrap().after, 200);
        // A stream created again is another stream: nothing of it was handled.
        let (_, fresh) = resume.begin(&instance("t2"), &info(0));
        let Record::Relay(fresh) = fresh else {
            panic!("a relay records its progress")
        };
        assert!(!fresh.handled_past(1));
    }
}
