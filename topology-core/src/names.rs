//! Stream and consumer names.
//!
//! The server stores each stream and consumer under a directory named after it and routes API
//! requests on subjects that contain it (`$JS.API.STREAM.CREATE.<stream>`), so names are a single
//! subject token that is also a safe file name:
//!
//! - stream names: non-empty, at most [`MAX_NAME_LEN`] bytes, no whitespace, no control
//!   characters, none of `.` `*` `>` (subject syntax) and none of `/` `\` (path separators, server
//!   error 10128);
//! - consumer names (a queue consumer's `group`, `migrate_from`): the same; the server refuses
//!   path separators in consumer names too (error 10127).
//!
//! ```
//! use topology_core::names::{check_consumer_name, check_stream_name, NameError};
//!
//! assert_eq!(check_stream_name("DAEMON_SYNC"), Ok(()));
//! assert_eq!(check_stream_name("daemon.sync"), Err(NameError::Dot));
//! assert_eq!(check_consumer_name("sync-workers"), Ok(()));
//! assert_eq!(check_consumer_name("sync workers"), Err(NameError::Whitespace));
//! ```

/// The longest name the server accepts, in bytes.
pub const MAX_NAME_LEN: usize = 255;

/// Why a stream or consumer name is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NameError {
    /// The name is the empty string.
    Empty,
    /// Longer than [`MAX_NAME_LEN`] bytes.
    TooLong,
    /// A space, tab, newline or other whitespace.
    Whitespace,
    /// A control character.
    ControlChar,
    /// A `.`: names are one subject token.
    Dot,
    /// A `*` or `>`: names cannot contain subject wildcards.
    Wildcard,
    /// A `/` or `\`: names are also directory names on the server.
    PathSeparator,
}

impl NameError {
    /// What is wrong, in lowercase, without naming the name.
    pub const fn message(&self) -> &'static str {
        match self {
            NameError::Empty => "a name cannot be empty",
            NameError::TooLong => "a name cannot be longer than 255 bytes",
            NameError::Whitespace => "a name cannot contain whitespace",
            NameError::ControlChar => "a name cannot contain control characters",
            NameError::Dot => "a name cannot contain `.` (it is a single subject token)",
            NameError::Wildcard => "a name cannot contain the wildcards `*` or `>`",
            NameError::PathSeparator => {
                "a name cannot contain `/` or `\\` (the server also uses it as a directory name)"
            }
        }
    }
}

/// Checks a stream name.
///
/// ```
/// use topology_core::names::{check_stream_name, NameError};
///
/// assert_eq!(check_stream_name("ORDERS_v2"), Ok(()));
/// assert_eq!(check_stream_name(""), Err(NameError::Empty));
/// assert_eq!(check_stream_name("ORDERS>"), Err(NameError::Wildcard));
/// assert_eq!(check_stream_name("a/b"), Err(NameError::PathSeparator));
/// ```
pub const fn check_stream_name(name: &str) -> Result<(), NameError> {
    check_name(name)
}

/// Checks a consumer name (a queue consumer's `group`, or `migrate_from`).
///
/// ```
/// use topology_core::names::{check_consumer_name, NameError};
///
/// assert_eq!(check_consumer_name("billing"), Ok(()));
/// assert_eq!(check_consumer_name("billing.eu"), Err(NameError::Dot));
/// assert_eq!(check_consumer_name("billing*"), Err(NameError::Wildcard));
/// ```
pub const fn check_consumer_name(name: &str) -> Result<(), NameError> {
    check_name(name)
}

const fn check_name(name: &str) -> Result<(), NameError> {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return Err(NameError::Empty);
    }
    let mut i = 0;
    while i < bytes.len() {
        let (c, len) = decode_char(bytes, i);
        if c.is_whitespace() {
            return Err(NameError::Whitespace);
        }
        if is_control(c) {
            return Err(NameError::ControlChar);
        }
        match c {
            '.' => return Err(NameError::Dot),
            '*' | '>' => return Err(NameError::Wildcard),
            '/' | '\\' => return Err(NameError::PathSeparator),
            _ => {}
        }
        i += len;
    }
    if bytes.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong);
    }
    Ok(())
}

/// A control character: C0 (`U+0000..=U+001F`), DEL, or C1 (`U+0080..=U+009F`), as
/// `char::is_control` (not a `const fn`) defines them.
pub(crate) const fn is_control(c: char) -> bool {
    let c = c as u32;
    c <= 0x1f || (c >= 0x7f && c <= 0x9f)
}

/// Decodes the UTF-8 character starting at byte `i` of `bytes` (which come from a `&str`):
/// the character and its length in bytes.
pub(crate) const fn decode_char(bytes: &[u8], i: usize) -> (char, usize) {
    let b0 = bytes[i] as u32;
    let (len, mut code) = if b0 < 0x80 {
        (1, b0)
    } else if b0 >= 0xf0 {
        (4, b0 & 0x07)
    } else if b0 >= 0xe0 {
        (3, b0 & 0x0f)
    } else {
        (2, b0 & 0x1f)
    };
    let mut k = 1;
    while k < len && i + k < bytes.len() {
        code = (code << 6) | (bytes[i + k] as u32 & 0x3f);
        k += 1;
    }
    match char::from_u32(code) {
        Some(c) => (c, len),
        None => (char::REPLACEMENT_CHARACTER, len),
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::String;

    #[test]
    fn valid_names() {
        for ok in [
            "ORDERS",
            "a",
            "orders-v2",
            "Orders_2024",
            "ünï",
            "a:b",
            "a$b",
            "ORDERS😀",
        ] {
            assert_eq!(check_stream_name(ok), Ok(()), "{ok}");
            assert_eq!(check_consumer_name(ok), Ok(()), "{ok}");
        }
        let longest = String::from("x").repeat(MAX_NAME_LEN);
        assert_eq!(check_stream_name(&longest), Ok(()));
    }

    #[test]
    fn invalid_names() {
        use NameError::*;
        let too_long = String::from("x").repeat(MAX_NAME_LEN + 1);
        for (bad, error) in [
            ("", Empty),
            ("a b", Whitespace),
            (" a", Whitespace),
            ("a\t", Whitespace),
            ("a\r\nb", Whitespace),
            ("a\u{2003}b", Whitespace),
            ("a\u{0}b", ControlChar),
            ("a\u{1b}b", ControlChar),
            ("a\u{7f}", ControlChar),
            ("a\u{90}", ControlChar),
            ("a.b", Dot),
            (".", Dot),
            ("a*", Wildcard),
            (">", Wildcard),
            ("a/b", PathSeparator),
            ("a\\b", PathSeparator),
            (too_long.as_str(), TooLong),
        ] {
            assert_eq!(check_stream_name(bad), Err(error), "{bad:?}");
            assert_eq!(check_consumer_name(bad), Err(error), "{bad:?}");
        }
    }

    #[test]
    fn decodes_utf8() {
        for s in ["a", "é", "€", "😀", "aé€😀z"] {
            let bytes = s.as_bytes();
            let mut i = 0;
            let mut decoded = String::new();
            while i < bytes.len() {
                let (c, len) = decode_char(bytes, i);
                assert_eq!(len, c.len_utf8());
                decoded.push(c);
                i += len;
            }
            assert_eq!(decoded, s);
        }
        for c in [
            '\u{0}', '\u{1f}', '\u{7f}', '\u{80}', '\u{9f}', 'a', ' ', '\u{a0}', '😀',
        ] {
            assert_eq!(is_control(c), c.is_control(), "{c:?}");
        }
    }

    #[test]
    fn usable_in_const_context() {
        const R: Result<(), NameError> = check_stream_name("A.B");
        assert_eq!(R, Err(NameError::Dot));
        assert!(!R.unwrap_err().message().is_empty());
    }
}
