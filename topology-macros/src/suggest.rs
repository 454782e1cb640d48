//! "Did you mean ...?": the nearest candidate by edit distance.

/// The candidate nearest to `given`, if it is near enough to be a typo: at most a third of its
/// length away (at least one edit), ignoring case.
pub(crate) fn nearest<'a>(given: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let given = given.to_lowercase();
    candidates
        .iter()
        .map(|c| (levenshtein(&given, &c.to_lowercase()), *c))
        .filter(|(d, c)| *d <= (c.chars().count() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// The number of single-character insertions, deletions and substitutions from `a` to `b`.
fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        current[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(levenshtein("", ""), 0);
        assert_eq!(levenshtein("abc", ""), 3);
        assert_eq!(levenshtein("replica", "replicas"), 1);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
    }

    #[test]
    fn suggestions() {
        let keys = ["name", "subjects", "replicas", "max_age", "max_msgs"];
        assert_eq!(nearest("replica", &keys), Some("replicas"));
        assert_eq!(nearest("subject", &keys), Some("subjects"));
        assert_eq!(nearest("NAME", &keys), Some("name"));
        assert_eq!(nearest("max_ag", &keys), Some("max_age"));
        assert_eq!(nearest("durable", &keys), None);
        assert_eq!(nearest("", &keys), None);
    }
}
