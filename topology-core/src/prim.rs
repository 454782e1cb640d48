//! The const primitives the rules are built from: an inclusive range of integers
//! ([`IntRange`]) and string equality usable in a `const fn`.

/// An inclusive range of integers a key accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IntRange {
    /// The smallest accepted value.
    pub min: i128,
    /// The largest accepted value.
    pub max: i128,
}

impl IntRange {
    /// Whether `value` is in the range.
    pub const fn contains(&self, value: i128) -> bool {
        self.min <= value && value <= self.max
    }
}

/// `a == b`, usable in a `const fn`.
pub(crate) const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}
