//! What each kind of declaration in a [`Topology`](super::Topology) is kept in order by: the
//! order iteration, provisioning and reports follow.

use super::sorted::Keyed;
use super::{Consumer, Endpoint, Subscription};
use topology_core::bucket::BucketDecl;
use topology_core::model::StreamDecl;
use topology_core::service::ServiceDecl;

impl Keyed for StreamDecl {
    type Key = &'static str;
    fn key(&self) -> &'static str {
        self.name
    }
}

impl Keyed for BucketDecl {
    type Key = (&'static str, &'static str);
    fn key(&self) -> Self::Key {
        (self.name, self.kind.stream_prefix())
    }
}

impl Keyed for Consumer {
    type Key = (&'static str, &'static str);
    fn key(&self) -> Self::Key {
        (self.decl.stream.name(), self.decl.handler)
    }
}

impl Keyed for ServiceDecl {
    type Key = (&'static str, &'static str);
    fn key(&self) -> Self::Key {
        (self.name, self.version)
    }
}

impl Keyed for Endpoint {
    type Key = (&'static str, &'static str, &'static str);
    fn key(&self) -> Self::Key {
        (self.decl.service.name, self.decl.subject, self.decl.handler)
    }
}

impl Keyed for Subscription {
    type Key = (&'static str, &'static str);
    fn key(&self) -> Self::Key {
        (self.decl.subject, self.decl.handler)
    }
}
