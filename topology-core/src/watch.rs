//! Watches of a key-value bucket: what `#[kv_watch]` declares, and the rule for its keys.
//!
//! A watch runs on every instance (as a broadcast relay does): each one handles every change
//! of the keys it watches, in revision order, starting with the current value of each key
//! ([`WatchFrom::Current`]) or only with changes made after it starts ([`WatchFrom::Now`]).
//!
//! ```
//! use topology_core::bucket::BucketDecl;
//! use topology_core::watch::{check_keys, KeysError, WatchDecl, WatchFrom};
//!
//! static STATUS: BucketDecl = BucketDecl::kv("MEMBER_STATUS");
//! const ON_STATUS: WatchDecl = WatchDecl::new("app::on_status", &STATUS, "member.>").from(WatchFrom::Now);
//! assert_eq!(ON_STATUS.subject_len(), "$KV.MEMBER_STATUS.member.>".len());
//! assert_eq!(check_keys("member.*.status"), Ok(()));
//! assert_eq!(check_keys("member..status"), Err(KeysError::EmptyToken));
//! assert_eq!(check_keys("member.>.status"), Err(KeysError::TailNotLast));
//! ```

use crate::bucket::BucketDecl;

/// Where a watch starts the first time it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WatchFrom {
    /// The current value of every watched key (its last revision, a delete or purge
    /// included), then every change (the default).
    #[default]
    Current,
    /// Only the changes made after the watch starts (`from = "now"`).
    Now,
}

/// A watch of a key-value bucket's keys, handled by `handler`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WatchDecl {
    /// The handler's path (`module::function`), for reports and logs.
    pub handler: &'static str,
    /// The bucket watched.
    pub bucket: &'static BucketDecl,
    /// The keys watched: a key, or a pattern with `*` (one token) and `>` (the rest).
    pub keys: &'static str,
    /// Where the watch starts the first time it runs.
    pub from: WatchFrom,
    /// The version of the service declaring it (the macro sets the declaring crate's
    /// `CARGO_PKG_VERSION`).
    pub version: Option<&'static str>,
}

impl WatchDecl {
    /// A watch of `keys` in `bucket`, starting with their current values.
    pub const fn new(
        handler: &'static str,
        bucket: &'static BucketDecl,
        keys: &'static str,
    ) -> Self {
        WatchDecl {
            handler,
            bucket,
            keys,
            from: WatchFrom::Current,
            version: None,
        }
    }
    /// Sets where the watch starts.
    pub const fn from(mut self, from: WatchFrom) -> Self {
        self.from = from;
        self
    }
    /// Sets the declaring service's version.
    pub const fn version(mut self, version: &'static str) -> Self {
        self.version = Some(version);
        self
    }
    /// The length of the subject filter the watch's consumer uses, `$KV.<bucket>.<keys>`.
    pub const fn subject_len(&self) -> usize {
        "$KV.".len() + self.bucket.name.len() + 1 + self.keys.len()
    }
}

/// Why the keys of a watch are invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeysError {
    /// No keys at all.
    Empty,
    /// An empty token: a leading, trailing or doubled `.`.
    EmptyToken,
    /// A character outside `[-/_=a-zA-Z0-9]` in a token (and not a whole-token wildcard).
    Character,
    /// `*` or `>` inside a token rather than as a whole token.
    PartialWildcard,
    /// `>` before the last token.
    TailNotLast,
}

impl KeysError {
    /// What is wrong, in lowercase.
    pub const fn message(&self) -> &'static str {
        match self {
            KeysError::Empty => {
                "the keys of a watch cannot be empty; watch every key with `keys = \">\"`"
            }
            KeysError::EmptyToken => {
                "a key is dot-separated tokens, none of them empty (no leading, trailing or doubled `.`)"
            }
            KeysError::Character => {
                "a key's tokens are made of the letters a-z and A-Z, the digits 0-9 and `-`, `/`, `_`, `=` (the rule of every key-value client)"
            }
            KeysError::PartialWildcard => {
                "`*` and `>` are wildcards only as whole tokens, as in `member.*` or `member.>`"
            }
            KeysError::TailNotLast => "`>` matches the rest of a key, so it must be the last token",
        }
    }
}

/// Checks the keys of a watch: dot-separated tokens of `[-/_=a-zA-Z0-9]`, or the wildcards `*`
/// (one token) and `>` (the rest, last only) as whole tokens.
pub const fn check_keys(keys: &str) -> Result<(), KeysError> {
    let bytes = keys.as_bytes();
    if bytes.is_empty() {
        return Err(KeysError::Empty);
    }
    let mut start = 0;
    let mut i = 0;
    while i <= bytes.len() {
        if i == bytes.len() || bytes[i] == b'.' {
            let len = i - start;
            if len == 0 {
                return Err(KeysError::EmptyToken);
            }
            if len == 1 && bytes[start] == b'>' && i != bytes.len() {
                return Err(KeysError::TailNotLast);
            }
            let mut j = start;
            while j < i {
                let b = bytes[j];
                let wildcard = b == b'*' || b == b'>';
                if wildcard && len > 1 {
                    return Err(KeysError::PartialWildcard);
                }
                let plain = b.is_ascii_alphanumeric() || matches!(b, b'-' | b'/' | b'_' | b'=');
                if !plain && !wildcard {
                    return Err(KeysError::Character);
                }
                j += 1;
            }
            start = i + 1;
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        for good in [
            ">",
            "*",
            "a",
            "member.>",
            "a.*.c",
            "feature/x=1",
            "a-b_c.D9",
        ] {
            assert_eq!(check_keys(good), Ok(()), "{good}");
        }
        let cases = [
            ("", KeysError::Empty),
            (".a", KeysError::EmptyToken),
            ("a.", KeysError::EmptyToken),
            ("a..b", KeysError::EmptyToken),
            ("a b", KeysError::Character),
            ("a.é", KeysError::Character),
            ("a$", KeysError::Character),
            ("a*", KeysError::PartialWildcard),
            ("a.b>", KeysError::PartialWildcard),
            (">.a", KeysError::TailNotLast),
        ];
        for (bad, error) in cases {
            assert_eq!(check_keys(bad), Err(error), "{bad}");
        }
    }
}
