//! The vocabulary of permissions, below every layer that speaks of them: what a grant allows
//! ([`Verb`]: publish or subscribe) and who needs it ([`Declaration`]). The export walks the
//! topology into grants; health names the declaration a denial concerns; provisioning says
//! which grant a request that got no answer lacked.

/// Publish or subscribe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// Publishing to the subject (a JetStream API request is a publish).
    Publish,
    /// Subscribing to the subject.
    Subscribe,
}

impl Verb {
    /// `publish` or `subscribe`, as in a nats-server `permissions` block.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verb::Publish => "publish",
            Verb::Subscribe => "subscribe",
        }
    }
}

/// What needs a permission: the whole service, one stream, or one consumer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Declaration {
    /// Every replica, whatever it consumes (its inboxes, the leader watch), and what every
    /// replica serves: the micro protocol's `$SRV` subjects of its services, its endpoints
    /// and its core subscriptions (each [`Need`](crate::export::Need)'s `why` names the
    /// service, endpoint or subscription).
    Service,
    /// A stream.
    Stream(String),
    /// A queue consumer or a broadcast relay of `stream`, declared by `handler`.
    Consumer {
        /// The stream it reads.
        stream: String,
        /// The declaring handler's path.
        handler: String,
    },
}

impl std::fmt::Display for Declaration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Declaration::Service => f.write_str("every replica"),
            Declaration::Stream(name) => write!(f, "stream `{name}`"),
            Declaration::Consumer { stream, handler } => {
                write!(f, "consumer `{handler}` of stream `{stream}`")
            }
        }
    }
}
