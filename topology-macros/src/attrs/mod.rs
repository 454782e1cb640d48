//! What each attribute says, as typed values that keep their tokens: `#[stream]` gives a
//! [`StreamAttrs`], `#[queue_consumer]` a [`QueueAttrs`], `#[broadcast]` a [`BroadcastAttrs`],
//! `#[service]` a [`ServiceAttrs`], `#[endpoint]` an [`EndpointAttrs`], `#[subscription]` a
//! [`SubscriptionAttrs`], `#[kv_bucket]` and `#[object_store]` a [`BucketAttrs`], `#[kv_watch]` a [`WatchAttrs`].
//!
//! Parsing reads each key's value as the type the key takes (a string, an integer within its
//! range, a duration, one of a set of words) and reports a missing required key; it applies no
//! rule between values. The rules are in [`crate::validate`]; the code is generated from these
//! structs by [`crate::emit`].

pub(crate) mod broadcast;
pub(crate) mod bucket;
pub(crate) mod consumer;
pub(crate) mod origin;
pub(crate) mod service;
pub(crate) mod stream;
pub(crate) mod watch;

pub(crate) use broadcast::BroadcastAttrs;
pub(crate) use bucket::BucketAttrs;
pub(crate) use consumer::{ConsumerAttrs, Filters, PolicyName, PriorityAttrs, QueueAttrs};
pub(crate) use origin::OriginAttrs;
pub(crate) use service::{EndpointAttrs, ServiceAttrs, SubscriptionAttrs};
pub(crate) use stream::{PlacementAttrs, StreamAttrs};
pub(crate) use watch::WatchAttrs;
