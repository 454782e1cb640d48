//! Per-message stream features: a time to live carried by a message (`Nats-TTL`, nats-server
//! 2.11, ADR-43) and messages scheduled for later (`Nats-Schedule`, 2.12, ADR-51). A stream
//! allows them once; the server refuses to turn them off again.

use crate::model::StreamDecl;

/// The first nats-server that honours `allow_msg_ttl` (an older one ignores the field, and the
/// `Nats-TTL` header with it: the message would live as long as the stream's limits say).
pub const MSG_TTL_SINCE: (u64, u64, u64) = (2, 11, 0);

/// The first nats-server that honours `allow_msg_schedules` (an older one would store a
/// scheduled message as an ordinary one, delivered at once).
pub const MSG_SCHEDULES_SINCE: (u64, u64, u64) = (2, 12, 0);

impl StreamDecl {
    /// Lets a message carry its own time to live (the `Nats-TTL` header, set with
    /// `Publish::ttl` in a handler): it is removed when that runs out, whatever the stream's
    /// limits. Needs nats-server 2.11 (refused at start-up on an older one, naming it). Once
    /// allowed on the server it cannot be disallowed there.
    ///
    /// ```
    /// use topology_core::model::StreamDecl;
    ///
    /// static SESSIONS: StreamDecl = StreamDecl::new("SESSIONS", &["sessions.>"]).allow_msg_ttl();
    /// assert!(SESSIONS.allow_msg_ttl);
    /// ```
    pub const fn allow_msg_ttl(mut self) -> Self {
        self.allow_msg_ttl = true;
        self
    }

    /// Lets a message be scheduled: published to a subject of the stream with `Nats-Schedule`
    /// (`Publish::schedule_at` in a handler), it is published by the server to its target
    /// subject, in the same stream, at the time given. Needs nats-server 2.12 (refused at
    /// start-up on an older one, naming it). Once allowed on the server it cannot be
    /// disallowed there.
    pub const fn allow_msg_schedules(mut self) -> Self {
        self.allow_msg_schedules = true;
        self
    }

    /// The first per-message feature this stream allows that `version` (a server's, parsed)
    /// lacks, as `(key, the version it needs)`.
    pub fn message_feature_missing(
        &self,
        version: (u64, u64, u64),
    ) -> Option<(&'static str, (u64, u64, u64))> {
        [
            (self.allow_msg_ttl, "allow_msg_ttl", MSG_TTL_SINCE),
            (
                self.allow_msg_schedules,
                "allow_msg_schedules",
                MSG_SCHEDULES_SINCE,
            ),
        ]
        .into_iter()
        .find(|(on, _, since)| *on && version < *since)
        .map(|(_, key, since)| (key, since))
    }
}

#[cfg(test)]
mod tests {
    use crate::model::StreamDecl;

    #[test]
    fn each_feature_names_the_version_it_needs() {
        let both = StreamDecl::new("S", &["s.>"])
            .allow_msg_ttl()
            .allow_msg_schedules();
        assert_eq!(
            both.message_feature_missing((2, 10, 26)),
            Some(("allow_msg_ttl", (2, 11, 0)))
        );
        assert_eq!(
            both.message_feature_missing((2, 11, 9)),
            Some(("allow_msg_schedules", (2, 12, 0)))
        );
        assert_eq!(both.message_feature_missing((2, 12, 0)), None);
        let plain = StreamDecl::new("S", &["s.>"]);
        assert_eq!(plain.message_feature_missing((2, 2, 0)), None);
    }
}
