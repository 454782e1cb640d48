//! Duration literals: `"500ms"`, `"30s"`, `"5m"`, `"2h"`, `"7d"`, `"1h30m"`.
//!
//! A duration is one or more components `<whole number><unit>`, units `d` (days), `h`, `m`
//! (minutes), `s` and `ms`, from the largest unit to the smallest, each unit at most once, with
//! nothing between them. The total must fit in [`MAX`] (JetStream carries durations as signed
//! 64-bit nanoseconds, about 292 years).
//!
//! ```
//! use core::time::Duration;
//! use topology_core::duration::{parse, DurationError};
//!
//! assert_eq!(parse("1h30m"), Ok(Duration::from_secs(90 * 60)));
//! assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
//! assert_eq!(parse("30m1h"), Err(DurationError::OutOfOrder));
//! assert_eq!(parse("1.5h"), Err(DurationError::Fraction));
//! ```

use core::time::Duration;

/// The longest duration JetStream can represent: `i64::MAX` nanoseconds.
pub const MAX: Duration = Duration::from_nanos(i64::MAX as u64);

/// The units, from the largest to the smallest: (suffix, nanoseconds).
const UNITS: [(&str, u128); 5] = [
    ("d", 86_400_000_000_000),
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
];

/// Why a duration literal is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DurationError {
    /// The literal is the empty string.
    Empty,
    /// A unit (or other letters) without a number before it: `"h"`, `"ms"`.
    MissingNumber,
    /// A number without a unit after it: `"30"`, `"1h30"`.
    MissingUnit,
    /// Letters that are not one of `ms`, `s`, `m`, `h`, `d`: `"5sec"`, `"1H"`.
    UnknownUnit,
    /// A unit after a smaller one: `"30m1h"`.
    OutOfOrder,
    /// A unit given twice: `"1h2h"`.
    Repeated,
    /// A decimal point or comma: `"1.5h"`.
    Fraction,
    /// A sign: `"-5s"`, `"+5s"`.
    Sign,
    /// Whitespace: `"1h 30m"`, `" 5s"`.
    Whitespace,
    /// Any other character.
    UnexpectedChar,
    /// Longer than [`MAX`].
    Overflow,
    /// Zero where zero is meaningless (returned by [`parse_nonzero`] only).
    Zero,
}

impl DurationError {
    /// What is wrong, in lowercase, without naming the literal.
    pub const fn message(&self) -> &'static str {
        match self {
            DurationError::Empty => "a duration cannot be empty; write e.g. `30s`",
            DurationError::MissingNumber => "a unit needs a whole number before it, e.g. `5m`",
            DurationError::MissingUnit => {
                "a number needs a unit after it (`ms`, `s`, `m`, `h` or `d`), e.g. `30s`"
            }
            DurationError::UnknownUnit => {
                "unknown unit; the units are `ms`, `s`, `m`, `h` and `d` (lowercase)"
            }
            DurationError::OutOfOrder => {
                "units must go from the largest to the smallest, e.g. `1h30m` rather than `30m1h`"
            }
            DurationError::Repeated => "a unit can appear only once; add the parts up, e.g. `3h`",
            DurationError::Fraction => {
                "a duration takes whole numbers only; write `1h30m` rather than `1.5h`"
            }
            DurationError::Sign => "a duration cannot have a sign",
            DurationError::Whitespace => {
                "a duration cannot contain whitespace; write `1h30m` rather than `1h 30m`"
            }
            DurationError::UnexpectedChar => {
                "unexpected character; a duration is whole numbers with the units `ms`, `s`, `m`, `h`, `d`, e.g. `1h30m`"
            }
            DurationError::Overflow => {
                "the duration is too long (JetStream durations are at most about 292 years)"
            }
            DurationError::Zero => "the duration cannot be zero",
        }
    }
}

/// Parses a duration literal.
///
/// ```
/// use core::time::Duration;
/// use topology_core::duration::{parse, DurationError};
///
/// const WEEK: Duration = match parse("7d") {
///     Ok(d) => d,
///     Err(_) => panic!("bad duration"),
/// };
/// assert_eq!(WEEK, Duration::from_secs(7 * 86_400));
/// assert_eq!(parse("2h5m10s250ms"), Ok(Duration::from_millis(7_510_250)));
/// assert_eq!(parse("0s"), Ok(Duration::ZERO));
/// assert_eq!(parse("30"), Err(DurationError::MissingUnit));
/// assert_eq!(parse("5sec"), Err(DurationError::UnknownUnit));
/// assert_eq!(parse("1h1h"), Err(DurationError::Repeated));
/// assert_eq!(parse("999999999999d"), Err(DurationError::Overflow));
/// ```
pub const fn parse(literal: &str) -> Result<Duration, DurationError> {
    let bytes = literal.as_bytes();
    if bytes.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total: u128 = 0;
    // Index in UNITS of the last unit seen; the next must have a greater index.
    let mut last_unit: Option<usize> = None;
    let mut i = 0;
    while i < bytes.len() {
        // The number.
        let start = i;
        let mut value: u128 = 0;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            value = match value.checked_mul(10) {
                Some(v) => match v.checked_add((bytes[i] - b'0') as u128) {
                    Some(v) => v,
                    None => return Err(DurationError::Overflow),
                },
                None => return Err(DurationError::Overflow),
            };
            i += 1;
        }
        if i == start {
            return Err(classify(bytes, i, true));
        }
        // The unit: the letters that follow.
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        if i == unit_start {
            return Err(if i == bytes.len() {
                DurationError::MissingUnit
            } else {
                classify(bytes, i, false)
            });
        }
        let unit = match find_unit(bytes, unit_start, i) {
            Some(unit) => unit,
            None => return Err(DurationError::UnknownUnit),
        };
        if let Some(last) = last_unit {
            if unit == last {
                return Err(DurationError::Repeated);
            }
            if unit < last {
                return Err(DurationError::OutOfOrder);
            }
        }
        last_unit = Some(unit);
        let nanos = match value.checked_mul(UNITS[unit].1) {
            Some(n) => n,
            None => return Err(DurationError::Overflow),
        };
        total = match total.checked_add(nanos) {
            Some(t) => t,
            None => return Err(DurationError::Overflow),
        };
        if total > i64::MAX as u128 {
            return Err(DurationError::Overflow);
        }
    }
    Ok(Duration::from_nanos(total as u64))
}

/// Parses a duration literal that must not be zero (an ack wait, a backoff step, a maximum age,
/// a duplicate window: zero would mean "none" or "immediately", never what was meant).
///
/// ```
/// use core::time::Duration;
/// use topology_core::duration::{parse_nonzero, DurationError};
///
/// assert_eq!(parse_nonzero("1s"), Ok(Duration::from_secs(1)));
/// assert_eq!(parse_nonzero("0s"), Err(DurationError::Zero));
/// assert_eq!(parse_nonzero("0h0m"), Err(DurationError::Zero));
/// ```
pub const fn parse_nonzero(literal: &str) -> Result<Duration, DurationError> {
    match parse(literal) {
        Ok(d) if d.is_zero() => Err(DurationError::Zero),
        other => other,
    }
}

/// Whether a duration fits what JetStream can carry (at most [`MAX`]).
pub const fn fits(duration: Duration) -> bool {
    duration.as_nanos() <= MAX.as_nanos()
}

/// Why the byte at `i` cannot start a number (`at_number`) or a unit.
const fn classify(bytes: &[u8], i: usize, at_number: bool) -> DurationError {
    let (c, _) = crate::names::decode_char(bytes, i);
    if c.is_whitespace() {
        DurationError::Whitespace
    } else if c == '.' || c == ',' {
        if at_number {
            DurationError::UnexpectedChar
        } else {
            DurationError::Fraction
        }
    } else if c == '-' || c == '+' {
        DurationError::Sign
    } else if at_number && c.is_ascii_alphabetic() {
        DurationError::MissingNumber
    } else {
        DurationError::UnexpectedChar
    }
}

const fn find_unit(bytes: &[u8], start: usize, end: usize) -> Option<usize> {
    let mut u = 0;
    while u < UNITS.len() {
        let suffix = UNITS[u].0.as_bytes();
        if suffix.len() == end - start {
            let mut k = 0;
            while k < suffix.len() && suffix[k] == bytes[start + k] {
                k += 1;
            }
            if k == suffix.len() {
                return Some(u);
            }
        }
        u += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;

    #[test]
    fn parses_each_unit() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse("0ms"), Ok(Duration::ZERO));
        assert_eq!(parse("007s"), Ok(Duration::from_secs(7)));
        assert_eq!(parse("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("90m"), Ok(Duration::from_secs(5400)));
    }

    #[test]
    fn parses_compounds() {
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1d12h"), Ok(Duration::from_secs(36 * 3600)));
        assert_eq!(parse("1m1s1ms"), Ok(Duration::from_millis(61_001)));
        assert_eq!(parse("1d1h1m1s1ms"), Ok(Duration::from_millis(90_061_001)));
        assert_eq!(parse("1h0m"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1m500ms"), Ok(Duration::from_millis(60_500)));
    }

    #[test]
    fn rejects() {
        use DurationError::*;
        for (bad, error) in [
            ("", Empty),
            ("h", MissingNumber),
            ("ms", MissingNumber),
            ("1h30", MissingUnit),
            ("30", MissingUnit),
            ("5sec", UnknownUnit),
            ("5S", UnknownUnit),
            ("5us", UnknownUnit),
            ("5mss", UnknownUnit),
            ("1hm", UnknownUnit),
            ("30m1h", OutOfOrder),
            ("1ms1s", OutOfOrder),
            ("1s1m", OutOfOrder),
            ("1h2h", Repeated),
            ("1m1m", Repeated),
            ("1.5h", Fraction),
            ("1,5h", Fraction),
            (".5h", UnexpectedChar),
            ("-5s", Sign),
            ("+5s", Sign),
            ("1h 30m", Whitespace),
            (" 5s", Whitespace),
            ("5s ", Whitespace),
            ("5 s", Whitespace),
            ("5s!", UnexpectedChar),
            ("5_000ms", UnexpectedChar),
            ("5é", UnexpectedChar),
            ("é", UnexpectedChar),
        ] {
            assert_eq!(parse(bad), Err(error), "{bad:?}");
        }
    }

    #[test]
    fn overflow() {
        // The largest representable number of whole days, and one more.
        let days = i64::MAX as u128 / 86_400_000_000_000;
        assert!(parse(&format!("{days}d")).is_ok());
        assert_eq!(
            parse(&format!("{}d", days + 1)),
            Err(DurationError::Overflow)
        );
        assert_eq!(
            parse(&format!("{}ms", i64::MAX as u128 / 1_000_000)).map(fits),
            Ok(true)
        );
        assert_eq!(
            parse(&format!("{}ms", i64::MAX as u128 / 1_000_000 + 1)),
            Err(DurationError::Overflow)
        );
        assert_eq!(
            parse("999999999999999999999999999999999999999999999999999s"),
            Err(DurationError::Overflow)
        );
        assert_eq!(
            parse(&format!("{days}d23h59m")),
            Err(DurationError::Overflow)
        );
        assert!(fits(MAX));
        assert!(!fits(MAX + Duration::from_nanos(1)));
    }

    #[test]
    fn nonzero() {
        assert_eq!(parse_nonzero("0s"), Err(DurationError::Zero));
        assert_eq!(parse_nonzero("0d0ms"), Err(DurationError::Zero));
        assert_eq!(parse_nonzero("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_nonzero("x"), Err(DurationError::MissingNumber));
    }

    #[test]
    fn usable_in_const_context() {
        const D: Result<Duration, DurationError> = parse("1h30m");
        assert_eq!(D, Ok(Duration::from_secs(5400)));
    }
}
