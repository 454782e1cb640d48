//! Subject transforms (a stream's `subject_transform`, a mirror's or a source's `transform`)
//! checked as nats-server checks them when a stream is created, so that a transform the server
//! would refuse at start-up is refused where it is written.
//!
//! A transform maps a source filter (`src`; empty means `>`) to a destination subject. The
//! destination names the source's `*` wildcards by position (`$1`, `{{wildcard(1)}}`) or applies
//! a function to them (`{{partition(16,1)}}`, `{{split(1,-)}}`, `{{splitFromLeft(1,3)}}`,
//! `{{sliceFromRight(1,2)}}`, `{{left(1,4)}}`, `{{right(1,4)}}`, `{{random(8)}}`). The server
//! refuses a destination that is not a subject, one with a `*` of its own, a `>` on one side and
//! not the other, a wildcard position past the source's wildcards, an unknown function, and a
//! function with missing, extra or non-numeric arguments.
//!
//! ```
//! use topology_core::transform::{check_transform, TransformError};
//!
//! assert!(check_transform("billing.*.paid", "ledger.{{wildcard(1)}}.paid").is_ok());
//! assert!(check_transform("orders.*.>", "orders.{{partition(16,1)}}.$1.>").is_ok());
//! assert_eq!(
//!     check_transform("billing.*.paid", "ledger.*.paid"),
//!     Err(TransformError::WildcardInDestination)
//! );
//! ```

/// Why nats-server refuses a subject transform. Errors about one destination token carry its
/// byte range in the destination ([`TransformError::token`] gives it back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransformError {
    /// The source is not a subject filter the server takes (an empty token, something after
    /// `>`).
    Source,
    /// The destination is not a subject the server takes.
    Destination,
    /// The destination has a `*` token.
    WildcardInDestination,
    /// A `>` ends the source and not the destination, or the reverse.
    FullWildcard {
        /// Whether the source ends with `>`.
        in_source: bool,
    },
    /// A destination token names a wildcard position past the source's `*` tokens.
    PositionOutOfRange {
        /// The token's byte range in the destination.
        token: (usize, usize),
        /// The position named.
        position: i64,
        /// How many `*` the source has.
        wildcards: usize,
    },
    /// A destination token applies a function to the wildcards of a source that has none.
    NoWildcards {
        /// The token's byte range in the destination.
        token: (usize, usize),
    },
    /// A destination token `{{...}}` names no function the server knows.
    UnknownFunction {
        /// The token's byte range in the destination.
        token: (usize, usize),
    },
    /// A function's arguments are missing, too many, or not numbers.
    Arguments {
        /// The token's byte range in the destination.
        token: (usize, usize),
    },
}

impl TransformError {
    /// What is wrong, in lowercase, without naming the token.
    pub const fn message(&self) -> &'static str {
        match self {
            TransformError::Source => "the source is not a valid subject filter",
            TransformError::Destination => {
                "the destination is not a valid subject (an empty token, or something after `>`)"
            }
            TransformError::WildcardInDestination => {
                "a destination takes no `*`: name the source's wildcards by position instead, `{{wildcard(1)}}` (or `$1`) for the first `*`"
            }
            TransformError::FullWildcard { in_source: true } => {
                "the source ends with `>` and the destination does not: end both with `>`, or neither"
            }
            TransformError::FullWildcard { in_source: false } => {
                "the destination ends with `>` and the source does not: end both with `>`, or neither"
            }
            TransformError::PositionOutOfRange { .. } => {
                "it names a wildcard position the source does not have: count the source's `*` tokens from 1, or add the wildcard to the source"
            }
            TransformError::NoWildcards { .. } => {
                "it reads a wildcard and the source has none: give the source the `*` it reads, or use `{{partition(n)}}` or `{{random(n)}}`, which need none"
            }
            TransformError::UnknownFunction { .. } => {
                "it names no transform function the server knows: `wildcard`, `partition`, `split`, `splitFromLeft`, `splitFromRight`, `sliceFromLeft`, `sliceFromRight`, `left`, `right`, `random`"
            }
            TransformError::Arguments { .. } => {
                "its arguments are missing, too many or not numbers (a count at most 2147483647): as in `{{wildcard(1)}}`, `{{partition(16,1)}}`, `{{split(1,-)}}`, `{{left(1,4)}}`, `{{random(8)}}`"
            }
        }
    }

    /// The destination token the error is about, if it is about one.
    pub fn token<'a>(&self, dest: &'a str) -> Option<&'a str> {
        match *self {
            TransformError::PositionOutOfRange { token, .. }
            | TransformError::NoWildcards { token }
            | TransformError::UnknownFunction { token }
            | TransformError::Arguments { token } => dest.get(token.0..token.1),
            _ => None,
        }
    }
}

/// Checks the transform of `src` (a subject filter; empty means `>`) to `dest` as nats-server
/// does when it creates a stream (`NewSubjectTransform`, not the stricter import rules).
pub const fn check_transform(src: &str, dest: &str) -> Result<(), TransformError> {
    let src = if src.is_empty() { ">" } else { src };
    let Some((wildcards, src_fwc)) = subject_info(src.as_bytes()) else {
        return Err(TransformError::Source);
    };
    let dest = dest.as_bytes();
    let Some((dest_wildcards, dest_fwc)) = subject_info(dest) else {
        return Err(TransformError::Destination);
    };
    if dest_wildcards > 0 {
        return Err(TransformError::WildcardInDestination);
    }
    if src_fwc != dest_fwc {
        return Err(TransformError::FullWildcard { in_source: src_fwc });
    }
    let has_wildcards = wildcards > 0 || src_fwc;
    let mut start = 0;
    while start < dest.len() {
        let mut end = start;
        while end < dest.len() && dest[end] != b'.' {
            end += 1;
        }
        let range = (start, end);
        match placeholder(dest, range, has_wildcards, wildcards) {
            Ok(function) => {
                if !has_wildcards
                    && !matches!(
                        function,
                        Function::None | Function::Random | Function::Partition
                    )
                {
                    return Err(TransformError::NoWildcards { token: range });
                }
            }
            Err(error) => return Err(error),
        }
        start = end + 1;
    }
    Ok(())
}

/// Whether `token` is `{{partition(..)}}`: the destination token a partitioned stream routes by.
pub const fn is_partition(token: &str) -> bool {
    let bytes = token.as_bytes();
    matches!(
        placeholder(bytes, (0, bytes.len()), false, 0),
        Ok(Function::Partition)
    )
}

/// How many `*` tokens a subject has and whether it ends with `>`, if the server takes it as a
/// subject here: no empty token, nothing after a `>` (tokens are otherwise free, spaces and all:
/// `{{partition(10, 1)}}`).
const fn subject_info(subject: &[u8]) -> Option<(usize, bool)> {
    if subject.is_empty() {
        return None;
    }
    let mut wildcards = 0;
    let mut fwc = false;
    let mut start = 0;
    while start <= subject.len() {
        let mut end = start;
        while end < subject.len() && subject[end] != b'.' {
            end += 1;
        }
        if end == start || fwc {
            return None;
        }
        if end - start == 1 {
            match subject[start] {
                b'>' => fwc = true,
                b'*' => wildcards += 1,
                _ => {}
            }
        }
        start = end + 1;
    }
    Some((wildcards, fwc))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Function {
    /// A literal token (or a `$` token that is not `$<number>`).
    None,
    Wildcard,
    Partition,
    Random,
    /// `split`, `splitFromLeft` and the other functions of one wildcard.
    Other,
}

/// The arguments a function takes.
#[derive(Clone, Copy)]
enum Shape {
    /// One wildcard position.
    Wildcard,
    /// A count, then any number of wildcard positions.
    Partition,
    /// A wildcard position and a number.
    IndexInt,
    /// A wildcard position and a delimiter.
    Split,
    /// A number.
    Random,
}

/// The names the server knows, each part matched with its first letter in either case, as the
/// server's patterns do (`[sS]plit[fF]rom[lL]eft`), in the order the server tries them.
const FUNCTIONS: &[(&[&str], Shape, Function)] = &[
    (&["wildcard"], Shape::Wildcard, Function::Wildcard),
    (&["partition"], Shape::Partition, Function::Partition),
    (&["split", "from", "left"], Shape::IndexInt, Function::Other),
    (
        &["split", "from", "right"],
        Shape::IndexInt,
        Function::Other,
    ),
    (&["slice", "from", "left"], Shape::IndexInt, Function::Other),
    (
        &["slice", "from", "right"],
        Shape::IndexInt,
        Function::Other,
    ),
    (&["right"], Shape::IndexInt, Function::Other),
    (&["left"], Shape::IndexInt, Function::Other),
    (&["split"], Shape::Split, Function::Other),
    (&["random"], Shape::Random, Function::Random),
];

/// The destination token `dest[range]`, parsed as the server parses it; each wildcard position
/// it names is checked against the source's `wildcards` when `has_wildcards` (a source without
/// wildcards is checked by the caller, by function).
const fn placeholder(
    dest: &[u8],
    range: (usize, usize),
    has_wildcards: bool,
    wildcards: usize,
) -> Result<Function, TransformError> {
    let (start, end) = range;
    let len = end - start;
    // `$1`; any other `$` token is a literal, as the server leaves it.
    if len > 1 && dest[start] == b'$' {
        return match parse_int(dest, start + 1, end) {
            Some(n) => match check_position(n, range, has_wildcards, wildcards) {
                Ok(()) => Ok(Function::Wildcard),
                Err(error) => Err(error),
            },
            None => Ok(Function::None),
        };
    }
    if !(len > 4
        && dest[start] == b'{'
        && dest[start + 1] == b'{'
        && dest[end - 2] == b'}'
        && dest[end - 1] == b'}')
    {
        return Ok(Function::None);
    }
    let unknown = TransformError::UnknownFunction { token: range };
    let arguments = TransformError::Arguments { token: range };
    // `{{ name ( args ) }}`: the name after spaces, then spaces, `(`, the arguments up to the
    // last `)`, and only spaces before `}}`.
    let inner_end = end - 2;
    let mut i = skip_space(dest, start + 2, inner_end);
    let mut found = None;
    let mut f = 0;
    while f < FUNCTIONS.len() {
        if let Some(after) = named(dest, i, inner_end, FUNCTIONS[f].0) {
            found = Some((after, FUNCTIONS[f].1, FUNCTIONS[f].2));
            break;
        }
        f += 1;
    }
    let Some((after, shape, function)) = found else {
        return Err(unknown);
    };
    i = skip_space(dest, after, inner_end);
    if i >= inner_end || dest[i] != b'(' {
        return Err(unknown);
    }
    let open = i;
    let mut close = inner_end;
    while close > open + 1 && dest[close - 1] != b')' {
        close -= 1;
    }
    close -= 1;
    if close <= open || dest[close] != b')' || skip_space(dest, close + 1, inner_end) != inner_end {
        return Err(unknown);
    }
    // The arguments, split at commas.
    let args_start = open + 1;
    let args_end = close;
    let count = count_args(dest, args_start, args_end);
    match shape {
        Shape::Wildcard => {
            if count != 1 {
                return Err(arguments);
            }
            let (a, b) = arg(dest, args_start, args_end, 0);
            match parse_int(dest, a, b) {
                Some(n) => match check_position(n, range, has_wildcards, wildcards) {
                    Ok(()) => Ok(function),
                    Err(error) => Err(error),
                },
                None => Err(arguments),
            }
        }
        Shape::Partition => {
            let (a, b) = arg(dest, args_start, args_end, 0);
            if !fits_i32(parse_int(dest, a, b)) {
                return Err(arguments);
            }
            let mut k = 1;
            while k < count {
                let (a, b) = arg(dest, args_start, args_end, k);
                match parse_int(dest, a, b) {
                    Some(n) => {
                        if let Err(error) = check_position(n, range, has_wildcards, wildcards) {
                            return Err(error);
                        }
                    }
                    None => return Err(arguments),
                }
                k += 1;
            }
            Ok(function)
        }
        Shape::IndexInt | Shape::Split => {
            if count != 2 {
                return Err(arguments);
            }
            let (a, b) = arg(dest, args_start, args_end, 0);
            let Some(n) = parse_int(dest, a, b) else {
                return Err(arguments);
            };
            let (c, d) = arg(dest, args_start, args_end, 1);
            let second_ok = match shape {
                Shape::Split => no_space_or_dot(dest, c, d),
                _ => is_i32(parse_int(dest, c, d)),
            };
            if !second_ok {
                return Err(arguments);
            }
            match check_position(n, range, has_wildcards, wildcards) {
                Ok(()) => Ok(function),
                Err(error) => Err(error),
            }
        }
        Shape::Random => {
            if count != 1 {
                return Err(arguments);
            }
            let (a, b) = arg(dest, args_start, args_end, 0);
            if fits_i32(parse_int(dest, a, b)) {
                Ok(function)
            } else {
                Err(arguments)
            }
        }
    }
}

/// A wildcard position a token names, checked against the source's `wildcards` when
/// `has_wildcards`.
const fn check_position(
    position: i64,
    token: (usize, usize),
    has_wildcards: bool,
    wildcards: usize,
) -> Result<(), TransformError> {
    if has_wildcards && position > wildcards as i64 {
        Err(TransformError::PositionOutOfRange {
            token,
            position,
            wildcards,
        })
    } else {
        Ok(())
    }
}

/// Where the name `parts` ends if `dest[i..end]` starts with it, each part's first letter in
/// either case and the rest as written.
const fn named(dest: &[u8], mut i: usize, end: usize, parts: &[&str]) -> Option<usize> {
    let mut p = 0;
    while p < parts.len() {
        let part = parts[p].as_bytes();
        if i + part.len() > end || dest[i].to_ascii_lowercase() != part[0] {
            return None;
        }
        let mut k = 1;
        while k < part.len() {
            if dest[i + k] != part[k] {
                return None;
            }
            k += 1;
        }
        i += part.len();
        p += 1;
    }
    Some(i)
}

/// How many arguments `dest[start..end]` holds: one more than its commas (an empty list is one
/// empty argument, as the server splits it).
const fn count_args(dest: &[u8], start: usize, end: usize) -> usize {
    let mut count = 1;
    let mut i = start;
    while i < end {
        if dest[i] == b',' {
            count += 1;
        }
        i += 1;
    }
    count
}

/// The byte range of argument `n` of `dest[start..end]`, trimmed as the server trims it: the
/// whitespace after its comma, then spaces at both ends.
const fn arg(dest: &[u8], start: usize, end: usize, n: usize) -> (usize, usize) {
    let mut i = start;
    let mut seen = 0;
    while seen < n {
        while dest[i] != b',' {
            i += 1;
        }
        i += 1;
        seen += 1;
    }
    let mut a = if n > 0 { skip_space(dest, i, end) } else { i };
    let mut b = a;
    while b < end && dest[b] != b',' {
        b += 1;
    }
    while a < b && dest[a] == b' ' {
        a += 1;
    }
    while b > a && dest[b - 1] == b' ' {
        b -= 1;
    }
    (a, b)
}

/// `dest[start..end]` as a decimal integer with an optional sign, as Go's `strconv.Atoi` reads
/// it; `None` when it is not one or does not fit.
const fn parse_int(dest: &[u8], start: usize, end: usize) -> Option<i64> {
    let mut i = start;
    let negative = i < end && dest[i] == b'-';
    if i < end && (dest[i] == b'-' || dest[i] == b'+') {
        i += 1;
    }
    if i == end {
        return None;
    }
    let mut value: i64 = 0;
    while i < end {
        let digit = dest[i];
        if !digit.is_ascii_digit() {
            return None;
        }
        let Some(shifted) = value.checked_mul(10) else {
            return None;
        };
        let Some(next) = shifted.checked_add((digit - b'0') as i64) else {
            return None;
        };
        value = next;
        i += 1;
    }
    Some(if negative { -value } else { value })
}

/// A count the server takes: a number at most `i32::MAX` (read as Go's `Atoi`, then compared).
const fn fits_i32(n: Option<i64>) -> bool {
    matches!(n, Some(n) if n <= i32::MAX as i64)
}

/// A number in `i32`'s range (read as Go's `ParseInt(.., 10, 32)`).
const fn is_i32(n: Option<i64>) -> bool {
    matches!(n, Some(n) if n >= i32::MIN as i64 && n <= i32::MAX as i64)
}

const fn no_space_or_dot(dest: &[u8], start: usize, end: usize) -> bool {
    let mut i = start;
    while i < end {
        if dest[i] == b' ' || dest[i] == b'.' {
            return false;
        }
        i += 1;
    }
    true
}

/// The first index at or after `i` (before `end`) that is not whitespace (Go's `\s`).
const fn skip_space(dest: &[u8], mut i: usize, end: usize) -> usize {
    while i < end && matches!(dest[i], b' ' | b'\t' | b'\n' | 0x0c | b'\r') {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's own cases (`TestSubjectTransforms` in nats-server, non-strict).
    #[test]
    fn refused_as_the_server_refuses() {
        for (src, dest) in [
            ("foo..", "bar"),
            ("foo.*", "bar.*"),
            ("foo.*", "bar.$2"),
            ("foo.*", "bar.$1.>"),
            ("foo.>", "bar.baz"),
            ("foo.*", "foo.{{wildcard(2)}}"),
            ("foo.*", "foo.{{unimplemented(1)}}"),
            ("foo.*", "foo.{{partition()}}"),
            ("foo.*", "foo.{{random()}}"),
            ("foo.*", "foo.{{wildcard(foo)}}"),
            ("foo.*", "foo.{{wildcard()}}"),
            ("foo.*", "foo.{{wildcard(1,2)}}"),
            ("foo.*", "foo.{{ wildcard5) }}"),
            ("foo.*", "foo.{{splitLeft(2,2}}"),
            ("foo", "bla.{{wildcard(1)}}"),
            ("foo.*", "foo.{{partition(2147483648)}}"),
            ("foo.*", "foo.{{random(2147483648)}}"),
            ("foo.*", "foo.{{left(1,-2147483649)}}"),
            // The issue's case: a `*` in a source's destination.
            ("billing.*.paid", "ledger.*.paid"),
        ] {
            assert!(
                check_transform(src, dest).is_err(),
                "{src} -> {dest} must be refused"
            );
        }
    }

    #[test]
    fn accepted_as_the_server_accepts() {
        for (src, dest) in [
            ("foo.*.*", "bar.$2"),
            ("foo.*.*", "bar.{{wildcard(1)}}"),
            ("foo.*.*", "bar.{{partition(1)}}"),
            ("foo.*.*", "bar.{{random(5)}}"),
            ("foo", "bar"),
            ("foo.*.bar.*.baz", "req.$2.$1"),
            ("baz.>", "mybaz.>"),
            ("*", "{{splitfromleft(1,1)}}"),
            ("", "prefix.>"),
            ("*.*", "{{partition(10,1,2)}}"),
            (
                "foo.*.*",
                "foo.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(5,1,2)}}",
            ),
            ("foo.*", "foo.{{partition(2147483647)}}"),
            ("foo.bar", "foo.{{random(2147483647)}}"),
            ("foo.*", "bar.{{Wildcard(1)}}"),
            ("*", "{{SplitFromRight(1,3)}}"),
            ("*", "{{SliceFromLeft(1,3)}}"),
            ("*", "{{split(1,-)}}"),
            ("*.*", "{{split(2,-)}}.{{splitfromleft(1,2)}}"),
            ("*", "{{right(1,6)}}"),
            ("*", "bar.{{partition(10, 0)}}"),
            ("foo.bar", "baz.{{partition(10)}}"),
            ("foo.*", "foo.$foo"),
            ("foo.*", "foo.{{left(1,-2147483648)}}"),
            ("foo.*", "foo.{{partition(-3000000000)}}"),
            ("billing.*.paid", "ledger.{{wildcard(1)}}.paid"),
        ] {
            assert_eq!(check_transform(src, dest), Ok(()), "{src} -> {dest}");
        }
    }

    #[test]
    fn errors_name_the_token() {
        let dest = "o.{{wildcard(2)}}";
        let error = check_transform("orders.*", dest).unwrap_err();
        assert_eq!(
            error,
            TransformError::PositionOutOfRange {
                token: (2, 17),
                position: 2,
                wildcards: 1
            }
        );
        assert_eq!(error.token(dest), Some("{{wildcard(2)}}"));
        assert!(error.message().contains("count the source's `*`"));
        assert!(is_partition("{{partition(16,1)}}"));
        assert!(is_partition("{{ Partition(16, 1) }}"));
        assert!(!is_partition("$1"));
    }
}
