//! Request/reply on core NATS, declared: services and their endpoints (the NATS micro
//! protocol), and the application's other core subscriptions; with their rules.
//!
//! Every core subscription of an application is one of these, so that the topology knows all of
//! them. None can be written in the plain form that hands each message to every replica for
//! work: an endpoint is always in a queue group (the micro protocol's `q` unless declared), and
//! a [`SubscriptionDecl`] is either in a queue group or says [`Fanout::EachInstance`] in so many
//! words.
//!
//! ```
//! use topology_core::service::{check_endpoint, check_service, EndpointDecl, ServiceDecl};
//!
//! static MEMBERS: ServiceDecl = ServiceDecl::new("members", "1.2.0").description("Member lookups");
//! let get = EndpointDecl::new("app::get_member", &MEMBERS, "get_member", "members.get");
//!
//! assert_eq!(check_service(&MEMBERS), Ok(()));
//! assert_eq!(check_endpoint(&get), Ok(()));
//! assert_eq!(get.queue_group(), "q");
//! ```

use core::time::Duration;

use crate::codec::CodecId;
use crate::limits::{DESCRIPTION_TOO_LONG, description_fits};
use crate::prim::str_eq;
use crate::subject::{self, SubjectError};

/// The queue group of an endpoint that declares none, and of a service that declares none:
/// the micro protocol's default.
pub const DEFAULT_QUEUE_GROUP: &str = "q";

/// A service (`#[service]`): a name and a version that every instance answers `$SRV.PING`,
/// `$SRV.INFO` and `$SRV.STATS` with, and the endpoints that name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServiceDecl {
    /// The service's name: letters, digits, `_` and `-` (the micro protocol's rule).
    pub name: &'static str,
    /// Its version: semantic versioning 2.0 (`1.2.0`, `2.0.0-rc.1`).
    pub version: &'static str,
    /// Shown by `$SRV.INFO`.
    pub description: Option<&'static str>,
    /// The queue group of its endpoints that declare none (`None`: `q`).
    pub queue_group: Option<&'static str>,
    /// Shown by `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS`.
    pub metadata: &'static [(&'static str, &'static str)],
}

impl ServiceDecl {
    /// A service with the given name and version.
    pub const fn new(name: &'static str, version: &'static str) -> Self {
        ServiceDecl {
            name,
            version,
            description: None,
            queue_group: None,
            metadata: &[],
        }
    }
    /// Sets the description.
    pub const fn description(mut self, description: &'static str) -> Self {
        self.description = Some(description);
        self
    }
    /// Sets the queue group of the endpoints that declare none.
    pub const fn queue_group(mut self, group: &'static str) -> Self {
        self.queue_group = Some(group);
        self
    }
    /// Sets the metadata.
    pub const fn metadata(mut self, metadata: &'static [(&'static str, &'static str)]) -> Self {
        self.metadata = metadata;
        self
    }
}

/// Implemented by `#[service]` types; lets `service = Members` in `#[endpoint]` be checked by
/// the compiler.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a service",
    label = "not a `#[service]` type",
    note = "declare it with `#[service(name = \"...\", version = \"1.0.0\")]` on a unit struct"
)]
pub trait ServiceDef {
    /// The service's declaration.
    const DECL: ServiceDecl;
}

/// An endpoint (`#[endpoint]`): a subject of a service whose requests are shared by the
/// service's instances, each answered by one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndpointDecl {
    /// The handler's path (`module::function`), for reports and logs.
    pub handler: &'static str,
    /// The service it belongs to.
    pub service: &'static ServiceDecl,
    /// Its name in `$SRV.INFO` and `$SRV.STATS` (the handler's name unless declared).
    pub name: &'static str,
    /// The subject its requests are sent to (wildcards allowed).
    pub subject: &'static str,
    /// Its queue group (`None`: the service's, else `q`). There is no way to declare none.
    pub group: Option<&'static str>,
    /// Requests handled at once by this instance (default 1).
    pub concurrency: Option<u32>,
    /// How long a handler may run before the request is answered with a 504 error.
    pub timeout: Option<Duration>,
    /// Shown by `$SRV.INFO` and `$SRV.STATS`.
    pub metadata: &'static [(&'static str, &'static str)],
    /// How its requests and replies are written (JSON unless declared; raw bytes pass as
    /// they are).
    pub codec: CodecId,
}

impl EndpointDecl {
    /// The concurrency applied when none is declared.
    pub const DEFAULT_CONCURRENCY: u32 = 1;

    /// An endpoint of `service` named `name` on `subject`, handled by `handler`.
    pub const fn new(
        handler: &'static str,
        service: &'static ServiceDecl,
        name: &'static str,
        subject: &'static str,
    ) -> Self {
        EndpointDecl {
            handler,
            service,
            name,
            subject,
            group: None,
            concurrency: None,
            timeout: None,
            metadata: &[],
            codec: CodecId::Json,
        }
    }
    /// Sets the queue group.
    pub const fn group(mut self, group: &'static str) -> Self {
        self.group = Some(group);
        self
    }
    /// Sets the concurrency.
    pub const fn concurrency(mut self, concurrency: u32) -> Self {
        self.concurrency = Some(concurrency);
        self
    }
    /// Sets how long a handler may run before the request is answered with a 504 error.
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// Sets the codec of its requests and replies.
    pub const fn codec(mut self, codec: CodecId) -> Self {
        self.codec = codec;
        self
    }
    /// Sets the metadata.
    pub const fn metadata(mut self, metadata: &'static [(&'static str, &'static str)]) -> Self {
        self.metadata = metadata;
        self
    }
    /// The queue group in effect: the endpoint's, else its service's, else `q`.
    pub const fn queue_group(&self) -> &'static str {
        match (self.group, self.service.queue_group) {
            (Some(group), _) | (None, Some(group)) => group,
            (None, None) => DEFAULT_QUEUE_GROUP,
        }
    }
    /// The concurrency in effect.
    pub const fn effective_concurrency(&self) -> u32 {
        match self.concurrency {
            Some(n) => n,
            None => Self::DEFAULT_CONCURRENCY,
        }
    }
}

/// Who receives a [`SubscriptionDecl`]'s messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fanout {
    /// One instance of the queue group per message: shared work.
    Group(&'static str),
    /// Every instance receives every message (cache invalidation, presence): declared in so
    /// many words, never by leaving the group out.
    EachInstance,
}

/// A core subscription that is not an endpoint (`#[subscription]`): no reply expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubscriptionDecl {
    /// The handler's path (`module::function`), for reports and logs.
    pub handler: &'static str,
    /// The subject (wildcards allowed).
    pub subject: &'static str,
    /// A queue group, or every instance.
    pub fanout: Fanout,
    /// Messages handled at once by this instance (default 1).
    pub concurrency: Option<u32>,
    /// How its messages are written (JSON unless declared).
    pub codec: CodecId,
}

impl SubscriptionDecl {
    /// A subscription whose messages are shared by the instances in `group`.
    pub const fn group(handler: &'static str, subject: &'static str, group: &'static str) -> Self {
        SubscriptionDecl {
            handler,
            subject,
            fanout: Fanout::Group(group),
            concurrency: None,
            codec: CodecId::Json,
        }
    }
    /// A subscription whose every message reaches every instance.
    pub const fn each_instance(handler: &'static str, subject: &'static str) -> Self {
        SubscriptionDecl {
            handler,
            subject,
            fanout: Fanout::EachInstance,
            concurrency: None,
            codec: CodecId::Json,
        }
    }
    /// Sets the concurrency.
    pub const fn concurrency(mut self, concurrency: u32) -> Self {
        self.concurrency = Some(concurrency);
        self
    }
    /// Sets the codec of its messages.
    pub const fn codec(mut self, codec: CodecId) -> Self {
        self.codec = codec;
        self
    }
    /// The queue group, if any.
    pub const fn queue_group(&self) -> Option<&'static str> {
        match self.fanout {
            Fanout::Group(group) => Some(group),
            Fanout::EachInstance => None,
        }
    }
    /// The concurrency in effect (default 1).
    pub const fn effective_concurrency(&self) -> u32 {
        match self.concurrency {
            Some(n) => n,
            None => 1,
        }
    }
}

/// Why a service, endpoint or subscription declaration is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceDeclError {
    /// The service name is empty.
    NameEmpty,
    /// The service (or endpoint) name has a character other than a letter, a digit, `_`, `-`.
    NameInvalid,
    /// The version is not semantic versioning 2.0.
    VersionNotSemver,
    /// The description is too long.
    DescriptionTooLong,
    /// A queue group is empty or has whitespace or control characters.
    QueueGroupInvalid,
    /// The subject is not a valid subject or filter.
    Subject(SubjectError),
    /// The subject is one the runtime or the micro protocol answers (`$SRV.…`) or one replies
    /// travel on (`_INBOX.…`).
    SubjectReserved,
    /// Concurrency 0.
    ConcurrencyZero,
    /// A zero timeout.
    TimeoutZero,
    /// A metadata key is empty.
    MetadataKeyEmpty,
    /// A metadata key is given twice.
    MetadataKeyDuplicate,
}

impl ServiceDeclError {
    /// What is wrong, and how to fix it.
    pub const fn message(&self) -> &'static str {
        match self {
            ServiceDeclError::NameEmpty => "a service name cannot be empty",
            ServiceDeclError::NameInvalid => {
                "a service or endpoint name may only have letters, digits, `_` and `-` (the NATS micro protocol's rule)"
            }
            ServiceDeclError::VersionNotSemver => {
                "a service version must be semantic versioning 2.0, such as `1.2.0` or `2.0.0-rc.1` (the NATS micro protocol's rule)"
            }
            ServiceDeclError::DescriptionTooLong => DESCRIPTION_TOO_LONG,
            ServiceDeclError::QueueGroupInvalid => {
                "a queue group cannot be empty or contain whitespace or control characters"
            }
            ServiceDeclError::Subject(e) => e.message(),
            ServiceDeclError::SubjectReserved => {
                "subjects starting with `$SRV.` (answered by every service instance) or `_INBOX.` (where replies travel) cannot be subscribed to for work; choose an application subject"
            }
            ServiceDeclError::ConcurrencyZero => "`concurrency` must be at least 1",
            ServiceDeclError::TimeoutZero => {
                "a zero `timeout` would answer every request with an error; omit it, or give a positive duration"
            }
            ServiceDeclError::MetadataKeyEmpty => "a metadata key cannot be empty",
            ServiceDeclError::MetadataKeyDuplicate => {
                "a metadata key can be given once (the micro protocol sends metadata as a JSON object); remove the repeated key"
            }
        }
    }
}

/// Whether `name` is a valid service or endpoint name: `[A-Za-z0-9_-]+`.
pub const fn check_name(name: &str) -> Result<(), ServiceDeclError> {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return Err(ServiceDeclError::NameEmpty);
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !(b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return Err(ServiceDeclError::NameInvalid);
        }
        i += 1;
    }
    Ok(())
}

/// Whether `version` is semantic versioning 2.0: `MAJOR.MINOR.PATCH`, numbers without leading
/// zeros, then an optional `-pre.release` (identifiers of `[0-9A-Za-z-]`, numeric ones without
/// leading zeros) and an optional `+build.metadata`.
pub const fn check_version(version: &str) -> Result<(), ServiceDeclError> {
    let b = version.as_bytes();
    let mut i = 0;
    let mut part = 0;
    // MAJOR.MINOR.PATCH
    while part < 3 {
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let len = i - start;
        if len == 0 || (len > 1 && b[start] == b'0') {
            return Err(ServiceDeclError::VersionNotSemver);
        }
        part += 1;
        if part < 3 {
            if i >= b.len() || b[i] != b'.' {
                return Err(ServiceDeclError::VersionNotSemver);
            }
            i += 1;
        }
    }
    // -pre.release
    if i < b.len() && b[i] == b'-' {
        i += 1;
        match identifiers(b, i, true) {
            Some(end) => i = end,
            None => return Err(ServiceDeclError::VersionNotSemver),
        }
    }
    // +build
    if i < b.len() && b[i] == b'+' {
        i += 1;
        match identifiers(b, i, false) {
            Some(end) => i = end,
            None => return Err(ServiceDeclError::VersionNotSemver),
        }
    }
    if i == b.len() {
        Ok(())
    } else {
        Err(ServiceDeclError::VersionNotSemver)
    }
}

/// Dot-separated identifiers of `[0-9A-Za-z-]` from `i`, up to a `+` or the end; `numeric`:
/// an all-digit identifier has no leading zero. The index after them, `None` if invalid.
const fn identifiers(b: &[u8], mut i: usize, numeric: bool) -> Option<usize> {
    loop {
        let start = i;
        let mut digits = true;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'-') {
            if !b[i].is_ascii_digit() {
                digits = false;
            }
            i += 1;
        }
        let len = i - start;
        if len == 0 || (numeric && digits && len > 1 && b[start] == b'0') {
            return None;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            continue;
        }
        return Some(i);
    }
}

/// Whether `group` is a valid queue group: not empty, no whitespace or control characters.
pub const fn check_queue_group(group: &str) -> Result<(), ServiceDeclError> {
    let bytes = group.as_bytes();
    if bytes.is_empty() {
        return Err(ServiceDeclError::QueueGroupInvalid);
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b <= b' ' || b == 0x7f {
            return Err(ServiceDeclError::QueueGroupInvalid);
        }
        i += 1;
    }
    Ok(())
}

/// Whether an application may subscribe to `subject` for work: a valid filter outside `$SRV.`
/// and `_INBOX.`.
pub const fn check_work_subject(subject: &str) -> Result<(), ServiceDeclError> {
    if let Err(e) = subject::check_filter(subject) {
        return Err(ServiceDeclError::Subject(e));
    }
    if starts_with(subject, "$SRV.") || starts_with(subject, "_INBOX.") {
        return Err(ServiceDeclError::SubjectReserved);
    }
    Ok(())
}

const fn starts_with(text: &str, prefix: &str) -> bool {
    let (t, p) = (text.as_bytes(), prefix.as_bytes());
    if t.len() < p.len() {
        return false;
    }
    let mut i = 0;
    while i < p.len() {
        if t[i] != p[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Whether `metadata` is a valid metadata map: no empty key, no key twice. The last pair is
/// the one found wrong first, so that checking growing prefixes points at the offending pair.
pub const fn check_metadata(metadata: &[(&str, &str)]) -> Result<(), ServiceDeclError> {
    let mut j = 0;
    while j < metadata.len() {
        let key = metadata[j].0;
        if key.is_empty() {
            return Err(ServiceDeclError::MetadataKeyEmpty);
        }
        let mut i = 0;
        while i < j {
            if str_eq(metadata[i].0, key) {
                return Err(ServiceDeclError::MetadataKeyDuplicate);
            }
            i += 1;
        }
        j += 1;
    }
    Ok(())
}

/// Every rule of a service declaration.
pub const fn check_service(decl: &ServiceDecl) -> Result<(), ServiceDeclError> {
    if let Err(e) = check_name(decl.name) {
        return Err(e);
    }
    if let Err(e) = check_version(decl.version) {
        return Err(e);
    }
    if let Some(description) = decl.description
        && !description_fits(description)
    {
        return Err(ServiceDeclError::DescriptionTooLong);
    }
    if let Some(group) = decl.queue_group
        && let Err(e) = check_queue_group(group)
    {
        return Err(e);
    }
    check_metadata(decl.metadata)
}

/// Every rule of an endpoint declaration (its service's are [`check_service`]'s).
pub const fn check_endpoint(decl: &EndpointDecl) -> Result<(), ServiceDeclError> {
    if let Err(e) = check_name(decl.name) {
        return Err(e);
    }
    if let Err(e) = check_work_subject(decl.subject) {
        return Err(e);
    }
    if let Some(group) = decl.group
        && let Err(e) = check_queue_group(group)
    {
        return Err(e);
    }
    if let Some(0) = decl.concurrency {
        return Err(ServiceDeclError::ConcurrencyZero);
    }
    if let Some(timeout) = decl.timeout
        && timeout.is_zero()
    {
        return Err(ServiceDeclError::TimeoutZero);
    }
    check_metadata(decl.metadata)
}

/// Every rule of a subscription declaration.
pub const fn check_subscription(decl: &SubscriptionDecl) -> Result<(), ServiceDeclError> {
    if let Err(e) = check_work_subject(decl.subject) {
        return Err(e);
    }
    if let Fanout::Group(group) = decl.fanout
        && let Err(e) = check_queue_group(group)
    {
        return Err(e);
    }
    if let Some(0) = decl.concurrency {
        return Err(ServiceDeclError::ConcurrencyZero);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        for ok in [
            "0.0.0",
            "1.2.3",
            "10.20.30",
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-0.3.7",
            "1.0.0-x.7.z.92",
            "1.0.0+20130313144700",
            "1.0.0-beta+exp.sha.5114f85",
            "1.0.0-rc.1+build.1",
            "1.0.0--",
        ] {
            assert_eq!(check_version(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "1",
            "1.2",
            "1.2.3.4",
            "01.2.3",
            "1.02.3",
            "1.2.03",
            "1.2.3-",
            "1.2.3+",
            "1.2.3-01",
            "1.2.3-a..b",
            "v1.2.3",
            "1.2.3 ",
            "1.2.3-é",
            "a.b.c",
        ] {
            assert_eq!(
                check_version(bad),
                Err(ServiceDeclError::VersionNotSemver),
                "{bad}"
            );
        }
    }

    #[test]
    fn names_groups_and_subjects() {
        assert_eq!(check_name("members-v2_x"), Ok(()));
        assert_eq!(check_name(""), Err(ServiceDeclError::NameEmpty));
        assert_eq!(check_name("a.b"), Err(ServiceDeclError::NameInvalid));
        assert_eq!(check_name("a b"), Err(ServiceDeclError::NameInvalid));
        assert_eq!(check_queue_group("q"), Ok(()));
        assert_eq!(check_queue_group("workers.eu"), Ok(()));
        assert_eq!(
            check_queue_group(""),
            Err(ServiceDeclError::QueueGroupInvalid)
        );
        assert_eq!(
            check_queue_group("a b"),
            Err(ServiceDeclError::QueueGroupInvalid)
        );
        assert_eq!(check_work_subject("members.*.get"), Ok(()));
        assert_eq!(
            check_work_subject("$SRV.PING"),
            Err(ServiceDeclError::SubjectReserved)
        );
        assert_eq!(
            check_work_subject("_INBOX.x"),
            Err(ServiceDeclError::SubjectReserved)
        );
        assert!(matches!(
            check_work_subject("a..b"),
            Err(ServiceDeclError::Subject(_))
        ));
    }

    #[test]
    fn metadata() {
        assert_eq!(check_metadata(&[]), Ok(()));
        assert_eq!(check_metadata(&[("team", "a"), ("tier", "")]), Ok(()));
        assert_eq!(
            check_metadata(&[("team", "a"), ("", "b")]),
            Err(ServiceDeclError::MetadataKeyEmpty)
        );
        assert_eq!(
            check_metadata(&[("team", "a"), ("tier", "1"), ("team", "b")]),
            Err(ServiceDeclError::MetadataKeyDuplicate)
        );
        assert_eq!(check_metadata(&[("te", "a"), ("team", "b")]), Ok(()));
        static DUP: ServiceDecl =
            ServiceDecl::new("s", "1.0.0").metadata(&[("k", "1"), ("k", "2")]);
        assert_eq!(
            check_service(&DUP),
            Err(ServiceDeclError::MetadataKeyDuplicate)
        );
        let endpoint = EndpointDecl::new("h", &DUP, "e", "a").metadata(&[("", "x")]);
        assert_eq!(
            check_endpoint(&endpoint),
            Err(ServiceDeclError::MetadataKeyEmpty)
        );
    }

    #[test]
    fn queue_group_in_effect() {
        static PLAIN: ServiceDecl = ServiceDecl::new("s", "1.0.0");
        static GROUPED: ServiceDecl = ServiceDecl::new("s", "1.0.0").queue_group("svc");
        assert_eq!(EndpointDecl::new("h", &PLAIN, "e", "a").queue_group(), "q");
        assert_eq!(
            EndpointDecl::new("h", &GROUPED, "e", "a").queue_group(),
            "svc"
        );
        assert_eq!(
            EndpointDecl::new("h", &GROUPED, "e", "a")
                .group("mine")
                .queue_group(),
            "mine"
        );
    }
}
