//! Subjects and subject filters: validity, matching, subset ("is covered by") and overlap.
//!
//! A subject is a sequence of non-empty tokens separated by `.`. A *filter* may also contain the
//! wildcards `*` (exactly one token) and `>` (one or more tokens, only as the last token); each
//! wildcard must be a whole token (`orders.*` is a filter, `orders.a*` is not).
//!
//! Everything here is a `const fn`, so that the macros (at expansion time), generated `const _`
//! assertions (cross-item checks) and the runtime (start-up validation) share one definition.
//! Functions that relate two filters assume both are valid (see [`check_filter`]); on invalid
//! input they return a meaningless but well-defined answer and never panic.
//!
//! ```
//! use topology_core::subject::{check_filter, covered_by, is_subset, overlaps};
//!
//! assert!(check_filter("orders.*.created").is_ok());
//! assert!(check_filter("orders..created").is_err());
//!
//! assert!(is_subset("orders.eu.created", "orders.>"));
//! assert!(!is_subset("orders.>", "orders.*"));
//! assert!(covered_by("orders.eu.created", &["billing.>", "orders.*.created"]));
//! assert!(overlaps("orders.*.created", "orders.eu.>"));
//! assert!(!overlaps("orders.*", "orders.*.created"));
//! ```

/// Why a subject or filter is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubjectError {
    /// The subject is the empty string.
    Empty,
    /// Two dots in a row, or a dot at the start or the end, leave an empty token.
    EmptyToken,
    /// A space, tab, newline or other whitespace.
    Whitespace,
    /// A control character.
    ControlChar,
    /// `*` or `>` inside a token instead of as a whole token (`a*`, `>b`).
    PartialWildcard,
    /// `>` followed by more tokens; it matches the rest, so it must be last.
    TailNotLast,
    /// A wildcard where a literal subject is required (a subject to publish to).
    Wildcard,
}

impl SubjectError {
    /// What is wrong, in lowercase, without naming the subject.
    pub const fn message(&self) -> &'static str {
        match self {
            SubjectError::Empty => "a subject cannot be empty",
            SubjectError::EmptyToken => {
                "a subject cannot have an empty token (a leading or trailing `.`, or `..`)"
            }
            SubjectError::Whitespace => "a subject cannot contain whitespace",
            SubjectError::ControlChar => "a subject cannot contain control characters",
            SubjectError::PartialWildcard => {
                "a wildcard must be a whole token (`*` or `>` between dots), not part of a token"
            }
            SubjectError::TailNotLast => "`>` matches the rest of a subject, so it must be last",
            SubjectError::Wildcard => {
                "a subject to publish to cannot contain the wildcards `*` or `>`"
            }
        }
    }
}

/// Checks a subject filter: non-empty, no empty tokens, no whitespace or control characters,
/// wildcards only as whole tokens, `>` only last.
///
/// ```
/// use topology_core::subject::{check_filter, SubjectError};
///
/// assert_eq!(check_filter("a.*.c.>"), Ok(()));
/// assert_eq!(check_filter("a.>.c"), Err(SubjectError::TailNotLast));
/// assert_eq!(check_filter("a.b*"), Err(SubjectError::PartialWildcard));
/// assert_eq!(check_filter("a b"), Err(SubjectError::Whitespace));
/// ```
pub const fn check_filter(filter: &str) -> Result<(), SubjectError> {
    let bytes = filter.as_bytes();
    if bytes.is_empty() {
        return Err(SubjectError::Empty);
    }
    // Characters first, so that "a. b" reports the whitespace rather than a token problem.
    if let Err(error) = check_chars(bytes) {
        return Err(error);
    }
    let mut start = 0;
    while start <= bytes.len() {
        let end = token_end(bytes, start);
        let len = end - start;
        if len == 0 {
            return Err(SubjectError::EmptyToken);
        }
        let mut i = start;
        while i < end {
            if (bytes[i] == b'*' || bytes[i] == b'>') && len != 1 {
                return Err(SubjectError::PartialWildcard);
            }
            i += 1;
        }
        if len == 1 && bytes[start] == b'>' && end != bytes.len() {
            return Err(SubjectError::TailNotLast);
        }
        start = end + 1;
    }
    Ok(())
}

/// Checks a literal subject (one to publish to): a valid filter without wildcards.
///
/// ```
/// use topology_core::subject::{check_subject, SubjectError};
///
/// assert_eq!(check_subject("orders.dead"), Ok(()));
/// assert_eq!(check_subject("orders.*"), Err(SubjectError::Wildcard));
/// ```
pub const fn check_subject(subject: &str) -> Result<(), SubjectError> {
    if let Err(error) = check_filter(subject) {
        return Err(error);
    }
    if has_wildcard(subject) {
        return Err(SubjectError::Wildcard);
    }
    Ok(())
}

/// Whether a (valid) filter contains a wildcard token.
pub const fn has_wildcard(filter: &str) -> bool {
    let bytes = filter.as_bytes();
    let mut start = 0;
    while start <= bytes.len() {
        let end = token_end(bytes, start);
        if is_star(bytes, start, end) || is_tail(bytes, start, end) {
            return true;
        }
        start = end + 1;
    }
    false
}

/// Whether the literal `subject` matches `filter`.
///
/// ```
/// use topology_core::subject::matches;
///
/// assert!(matches("orders.*", "orders.created"));
/// assert!(matches("orders.>", "orders.eu.created"));
/// assert!(!matches("orders.>", "orders"));
/// ```
pub const fn matches(filter: &str, subject: &str) -> bool {
    // A literal subject is the filter whose subjects are exactly itself.
    is_subset(subject, filter)
}

/// Whether every subject matched by `filter` is also matched by `pattern`.
///
/// ```
/// use topology_core::subject::is_subset;
///
/// assert!(is_subset("a.b", "a.*"));
/// assert!(is_subset("a.*.c", "a.>"));
/// assert!(is_subset("a.>", "a.>"));
/// assert!(is_subset("a.*.>", "a.>"));
/// assert!(!is_subset("a.>", "a.*.>")); // "a.b" is matched by the first only
/// assert!(!is_subset("a.*", "a.b"));
/// assert!(!is_subset("a", "a.>"));
/// ```
pub const fn is_subset(filter: &str, pattern: &str) -> bool {
    let f = filter.as_bytes();
    let p = pattern.as_bytes();
    let mut fs = 0;
    let mut ps = 0;
    loop {
        let f_done = fs > f.len();
        let p_done = ps > p.len();
        if f_done || p_done {
            return f_done && p_done;
        }
        let fe = token_end(f, fs);
        let pe = token_end(p, ps);
        if is_tail(p, ps, pe) {
            // `>` matches one or more tokens, and `filter` has at least this one left.
            return true;
        }
        if is_tail(f, fs, fe) {
            // `filter` matches subjects of any length from here; `pattern` does not.
            return false;
        }
        if !is_star(p, ps, pe) && (is_star(f, fs, fe) || !token_eq(f, fs, fe, p, ps, pe)) {
            return false;
        }
        fs = fe + 1;
        ps = pe + 1;
    }
}

/// Whether some subject is matched by both `a` and `b`.
///
/// ```
/// use topology_core::subject::overlaps;
///
/// assert!(overlaps("a.*", "a.b"));
/// assert!(overlaps("a.>", "*.b.c"));
/// assert!(!overlaps("a.*", "a.b.c"));
/// assert!(!overlaps("a.>", "a"));
/// ```
pub const fn overlaps(a: &str, b: &str) -> bool {
    let x = a.as_bytes();
    let y = b.as_bytes();
    let mut xs = 0;
    let mut ys = 0;
    loop {
        let x_done = xs > x.len();
        let y_done = ys > y.len();
        if x_done || y_done {
            return x_done && y_done;
        }
        let xe = token_end(x, xs);
        let ye = token_end(y, ys);
        if is_tail(x, xs, xe) || is_tail(y, ys, ye) {
            // Both have a token left here, and `>` takes it and anything after it.
            return true;
        }
        if !is_star(x, xs, xe) && !is_star(y, ys, ye) && !token_eq(x, xs, xe, y, ys, ye) {
            return false;
        }
        xs = xe + 1;
        ys = ye + 1;
    }
}

/// Whether every subject matched by `filter` is matched by at least one of `patterns`.
///
/// This is exact for unions, not only "a subset of one of them": `a.>` is covered by
/// `["a.*", "a.*.>"]` together although by neither alone.
///
/// ```
/// use topology_core::subject::covered_by;
///
/// assert!(covered_by("daemon.sync.complete", &["daemon.sync.>"]));
/// assert!(covered_by("a.>", &["a.*", "a.*.>"]));
/// assert!(!covered_by("a.>", &["a.*", "a.*.*"]));
/// assert!(!covered_by("billing.x", &["orders.>"]));
/// assert!(!covered_by("a", &[]));
/// ```
pub const fn covered_by(filter: &str, patterns: &[&str]) -> bool {
    let f = filter.as_bytes();
    let tokens = token_count(f);
    let ends_with_tail = tokens > 0 && {
        let last = last_token_start(f);
        is_tail(f, last, f.len())
    };
    if !ends_with_tail {
        // Instantiate each `*` of `filter` with a token no pattern mentions: the subject that
        // results is matched by some pattern only if that pattern has a wildcard at each of those
        // positions, and then that pattern alone covers `filter`.
        let mut i = 0;
        while i < patterns.len() {
            if is_subset(filter, patterns[i]) {
                return true;
            }
            i += 1;
        }
        return false;
    }
    // `filter` = prefix.`>` with `m` prefix tokens: it matches prefix.x1..xk for every k >= 1.
    // With fresh tokens, prefix.x1..xk is matched by a pattern p only if p matches the whole
    // prefix and then either ends with `>` after j < k stars, or is exactly k stars long.
    let m = tokens - 1;
    let mut min_tail_stars = usize::MAX; // smallest j of a pattern `prefix-compatible.*{j}.>`
    let mut i = 0;
    while i < patterns.len() {
        match tail_shape(f, m, patterns[i].as_bytes()) {
            TailShape::All => return true,
            TailShape::StarsThenTail(j) => {
                if j < min_tail_stars {
                    min_tail_stars = j;
                }
            }
            TailShape::Stars(_) | TailShape::Incompatible => {}
        }
        i += 1;
    }
    if min_tail_stars == usize::MAX {
        return false;
    }
    // Lengths 1..=j are left to patterns of exactly that many stars.
    let mut k = 1;
    while k <= min_tail_stars {
        let mut found = false;
        let mut i = 0;
        while i < patterns.len() && !found {
            if let TailShape::Stars(n) = tail_shape(f, m, patterns[i].as_bytes()) {
                found = n == k;
            }
            i += 1;
        }
        if !found {
            return false;
        }
        k += 1;
    }
    true
}

/// How a pattern relates to a filter `prefix.>` whose prefix has `m` tokens.
enum TailShape {
    /// Does not match every instantiation of the prefix.
    Incompatible,
    /// Matches every subject of the filter (a `>` reached while matching the prefix or right
    /// after it).
    All,
    /// Matches the prefix, then exactly this many (at least one) `*` tokens.
    Stars(usize),
    /// Matches the prefix, then this many (at least one) `*` tokens, then `>`.
    StarsThenTail(usize),
}

const fn tail_shape(f: &[u8], m: usize, p: &[u8]) -> TailShape {
    let mut fs = 0;
    let mut ps = 0;
    let mut i = 0;
    while i < m {
        if ps > p.len() {
            return TailShape::Incompatible;
        }
        let fe = token_end(f, fs);
        let pe = token_end(p, ps);
        if is_tail(p, ps, pe) {
            return TailShape::All;
        }
        if !is_star(p, ps, pe) && (is_star(f, fs, fe) || !token_eq(f, fs, fe, p, ps, pe)) {
            return TailShape::Incompatible;
        }
        fs = fe + 1;
        ps = pe + 1;
        i += 1;
    }
    let mut stars = 0;
    while ps <= p.len() {
        let pe = token_end(p, ps);
        if is_tail(p, ps, pe) {
            return if stars == 0 {
                TailShape::All
            } else {
                TailShape::StarsThenTail(stars)
            };
        }
        if !is_star(p, ps, pe) {
            return TailShape::Incompatible;
        }
        stars += 1;
        ps = pe + 1;
    }
    if stars == 0 {
        TailShape::Incompatible
    } else {
        TailShape::Stars(stars)
    }
}

/// The index one past the token starting at `start` (the next `.` or the end).
const fn token_end(bytes: &[u8], start: usize) -> usize {
    let mut i = start;
    while i < bytes.len() && bytes[i] != b'.' {
        i += 1;
    }
    i
}

const fn token_count(bytes: &[u8]) -> usize {
    if bytes.is_empty() {
        return 0;
    }
    let mut count = 1;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'.' {
            count += 1;
        }
        i += 1;
    }
    count
}

const fn last_token_start(bytes: &[u8]) -> usize {
    let mut i = bytes.len();
    while i > 0 && bytes[i - 1] != b'.' {
        i -= 1;
    }
    i
}

const fn is_star(bytes: &[u8], start: usize, end: usize) -> bool {
    end == start + 1 && bytes[start] == b'*'
}

const fn is_tail(bytes: &[u8], start: usize, end: usize) -> bool {
    end == start + 1 && bytes[start] == b'>'
}

const fn token_eq(
    a: &[u8],
    a_start: usize,
    a_end: usize,
    b: &[u8],
    b_start: usize,
    b_end: usize,
) -> bool {
    if a_end - a_start != b_end - b_start {
        return false;
    }
    let mut i = 0;
    while i < a_end - a_start {
        if a[a_start + i] != b[b_start + i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Rejects whitespace and control characters anywhere (decoding UTF-8 for the non-ASCII ones).
const fn check_chars(bytes: &[u8]) -> Result<(), SubjectError> {
    let mut i = 0;
    while i < bytes.len() {
        let (c, len) = crate::names::decode_char(bytes, i);
        if c.is_whitespace() {
            return Err(SubjectError::Whitespace);
        }
        if crate::names::is_control(c) {
            return Err(SubjectError::ControlChar);
        }
        i += len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::String;
    use std::vec::Vec;

    use crate::xorshift::Rng;

    #[test]
    fn valid_filters() {
        for ok in [
            "a",
            "a.b",
            "a.b.c",
            "*",
            ">",
            "a.*",
            "a.>",
            "*.b",
            "*.*.>",
            "a.*.c.>",
            "A-b_c.9",
            "$JS.API.>",
            "ünï.cödé",
        ] {
            assert_eq!(check_filter(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn invalid_filters() {
        use SubjectError::*;
        for (bad, error) in [
            ("", Empty),
            (".", EmptyToken),
            (".a", EmptyToken),
            ("a.", EmptyToken),
            ("a..b", EmptyToken),
            ("a b", Whitespace),
            ("a.\tb", Whitespace),
            (" a", Whitespace),
            ("a\n", Whitespace),
            ("a\u{a0}b", Whitespace),
            ("a\u{7}b", ControlChar),
            ("a\u{85}b", Whitespace),
            ("a\u{9f}b", ControlChar),
            ("a*", PartialWildcard),
            ("a.*b", PartialWildcard),
            ("a.b>", PartialWildcard),
            ("**", PartialWildcard),
            (">>", PartialWildcard),
            ("a.>.b", TailNotLast),
            (">.a", TailNotLast),
            ("a.>.>", TailNotLast),
        ] {
            assert_eq!(check_filter(bad), Err(error), "{bad:?}");
        }
    }

    #[test]
    fn literal_subjects() {
        assert_eq!(check_subject("a.b"), Ok(()));
        assert_eq!(check_subject("a.*"), Err(SubjectError::Wildcard));
        assert_eq!(check_subject(">"), Err(SubjectError::Wildcard));
        assert_eq!(check_subject("a..b"), Err(SubjectError::EmptyToken));
        assert!(!has_wildcard("a.b"));
        assert!(has_wildcard("a.*.b"));
    }

    #[test]
    fn messages_are_lowercase_sentences() {
        use SubjectError::*;
        for e in [
            Empty,
            EmptyToken,
            Whitespace,
            ControlChar,
            PartialWildcard,
            TailNotLast,
            Wildcard,
        ] {
            let m = e.message();
            assert!(m.starts_with(|c: char| c.is_lowercase() || c == '`'), "{m}");
            assert!(!m.ends_with('.'), "{m}");
        }
    }

    #[test]
    fn subset_cases() {
        let yes = [
            ("a", "a"),
            ("a.b", "a.*"),
            ("a.b", "*.b"),
            ("a.b", "*.*"),
            ("a.b", ">"),
            ("a.b", "a.>"),
            ("a.*", "a.*"),
            ("a.*", "*.*"),
            ("a.*", "a.>"),
            ("a.*", ">"),
            ("a.>", "a.>"),
            ("a.>", ">"),
            ("a.*.>", "a.>"),
            ("a.*.c", "a.*.*"),
            ("a.*.c", "a.>"),
            ("*", "*"),
            ("*", ">"),
            (">", ">"),
            ("*.>", ">"),
            ("a.b.c.d", "a.*.>"),
        ];
        for (f, p) in yes {
            assert!(is_subset(f, p), "{f} ⊆ {p}");
        }
        let no = [
            ("a", "b"),
            ("a", "a.b"),
            ("a.b", "a"),
            ("a", "a.>"),
            ("a", "a.*"),
            ("a.*", "a.b"),
            ("a.>", "a.*"),
            ("a.>", "a.*.>"),
            ("a.>", "a.b"),
            (">", "*"),
            (">", "*.>"),
            ("*", "a"),
            ("*.b", "a.*"),
            ("a.*.c", "a.b.*"),
            ("b.>", "a.>"),
        ];
        for (f, p) in no {
            assert!(!is_subset(f, p), "{f} ⊄ {p}");
        }
    }

    #[test]
    fn overlap_cases() {
        let yes = [
            ("a", "a"),
            ("a", "*"),
            ("a", ">"),
            ("a.b", "a.*"),
            ("a.*", "*.b"),
            ("a.>", "*.b.c"),
            ("a.>", "a.b"),
            (">", "*.*.*"),
            ("a.*.>", "a.b.c"),
        ];
        for (a, b) in yes {
            assert!(overlaps(a, b), "{a} ∩ {b}");
            assert!(overlaps(b, a), "{b} ∩ {a}");
        }
        let no = [
            ("a", "b"),
            ("a.*", "a.b.c"),
            ("a.>", "a"),
            ("a.*", "b.*"),
            ("*.a", "*.b"),
            ("a.*.>", "a.b"),
            ("*", "a.b"),
        ];
        for (a, b) in no {
            assert!(!overlaps(a, b), "{a} ∩ {b} = ∅");
            assert!(!overlaps(b, a), "{b} ∩ {a} = ∅");
        }
        assert!(!overlaps("*.>", "a"));
        assert!(overlaps("*.>", "a.b"));
    }

    #[test]
    fn covered_by_cases() {
        assert!(covered_by("a.b", &["x", "a.*"]));
        assert!(!covered_by("a.b", &["x", "a.c"]));
        assert!(covered_by("a.>", &["a.*", "a.*.>"]));
        assert!(covered_by("a.>", &["a.*", "a.*.*", "a.*.*.>"]));
        assert!(!covered_by("a.>", &["a.*", "a.*.*.>"]));
        assert!(!covered_by("a.>", &["a.*.*", "a.*.>"]));
        assert!(covered_by("a.>", &["a.>"]));
        assert!(covered_by("a.>", &[">"]));
        assert!(covered_by(">", &["*", "*.>"]));
        assert!(!covered_by(">", &["*.>"]));
        assert!(covered_by("a.*.>", &["a.b.>", "*.*.>"]));
        assert!(!covered_by("a.*.>", &["a.b.>"]));
        // A union of literals never covers a wildcard.
        assert!(!covered_by("a.*", &["a.b", "a.c"]));
        assert!(!covered_by("a", &[]));
    }

    fn random_filter(rng: &mut Rng) -> String {
        let len = 1 + rng.below(4);
        let mut tokens = Vec::new();
        for i in 0..len {
            let last = i + 1 == len;
            let token = match rng.below(if last { 5 } else { 4 }) {
                0 => "a",
                1 => "b",
                2 | 3 => "*",
                _ => ">",
            };
            tokens.push(token);
        }
        tokens.join(".")
    }

    /// All literal subjects over {a, b, z} ("z" appears in no filter) of length 1..=6.
    fn universe() -> Vec<String> {
        let mut all = Vec::new();
        let mut layer: Vec<String> = ["a", "b", "z"].iter().map(|s| String::from(*s)).collect();
        for _ in 0..6 {
            all.extend(layer.iter().cloned());
            let mut next = Vec::new();
            for s in &layer {
                for t in ["a", "b", "z"] {
                    next.push(std::format!("{s}.{t}"));
                }
            }
            layer = next;
        }
        all
    }

    fn naive_match(filter: &str, subject: &str) -> bool {
        let f: Vec<&str> = filter.split('.').collect();
        let s: Vec<&str> = subject.split('.').collect();
        for (i, t) in f.iter().enumerate() {
            if *t == ">" {
                return s.len() > i;
            }
            match s.get(i) {
                None => return false,
                Some(x) if *t == "*" || t == x => {}
                Some(_) => return false,
            }
        }
        f.len() == s.len()
    }

    /// Filters have at most 4 tokens, so subjects of up to 6 tokens over {a, b, z} witness every
    /// difference: any counterexample can be shortened to one of at most 5 tokens.
    #[test]
    fn agrees_with_brute_force() {
        let universe = universe();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..600 {
            let a = random_filter(&mut rng);
            let b = random_filter(&mut rng);
            assert_eq!(check_filter(&a), Ok(()), "{a}");
            let in_a: Vec<bool> = universe.iter().map(|s| naive_match(&a, s)).collect();
            let in_b: Vec<bool> = universe.iter().map(|s| naive_match(&b, s)).collect();
            let subset = in_a.iter().zip(&in_b).all(|(x, y)| !x || *y);
            let overlap = in_a.iter().zip(&in_b).any(|(x, y)| *x && *y);
            assert_eq!(is_subset(&a, &b), subset, "{a} ⊆ {b}");
            assert_eq!(overlaps(&a, &b), overlap, "{a} ∩ {b}");
            for (s, m) in universe.iter().zip(&in_a) {
                assert_eq!(matches(&a, s), *m, "{a} ~ {s}");
            }
            // Unions of up to three patterns.
            let n = 1 + rng.below(3);
            let patterns: Vec<String> = (0..n).map(|_| random_filter(&mut rng)).collect();
            let refs: Vec<&str> = patterns.iter().map(String::as_str).collect();
            let covered = universe
                .iter()
                .zip(&in_a)
                .all(|(s, m)| !m || refs.iter().any(|p| naive_match(p, s)));
            assert_eq!(covered_by(&a, &refs), covered, "{a} covered by {refs:?}");
        }
    }

    #[test]
    fn usable_in_const_context() {
        const OK: bool = covered_by("a.b", &["a.*"]) && !overlaps("a", "b");
        const CHECK: Result<(), SubjectError> = check_filter("a.>");
        const { assert!(OK) };
        assert_eq!(CHECK, Ok(()));
    }
}
