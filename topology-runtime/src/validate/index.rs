//! A subject tree over many filters, so that "which of these overlap?" costs about the
//! number of filters (times their length), not the number of pairs.
//!
//! The tree only narrows the candidates: every pair it returns is checked again with
//! [`subject::overlaps`], the one definition of overlap the macros and the runtime share. So
//! it must never miss an overlapping pair, and may return a few that are not.

use std::collections::HashMap;

use topology_core::subject;

/// Filters by token: each node is the prefix of the filters below it.
#[derive(Default)]
struct Node<'a> {
    children: HashMap<&'a str, Node<'a>>,
    /// Filters that end at this node (`a.b` ends at the node of `a`, `b`).
    ends: Vec<usize>,
}

/// The filters of a set of owners (streams, consumers), indexed by token.
pub(super) struct SubjectIndex<'a> {
    root: Node<'a>,
    /// The owner of each filter added, by filter number.
    owners: Vec<usize>,
    filters: Vec<&'a str>,
}

impl<'a> SubjectIndex<'a> {
    pub(super) fn new() -> Self {
        SubjectIndex {
            root: Node::default(),
            owners: Vec::new(),
            filters: Vec::new(),
        }
    }

    /// Adds `filter` of `owner`.
    pub(super) fn insert(&mut self, owner: usize, filter: &'a str) {
        let id = self.filters.len();
        self.filters.push(filter);
        self.owners.push(owner);
        let mut node = &mut self.root;
        for token in filter.split('.') {
            node = node.children.entry(token).or_default();
        }
        node.ends.push(id);
    }

    /// Every pair of distinct owners `(a, b)`, `a < b`, with a filter of `a` overlapping a
    /// filter of `b` (checked with [`subject::overlaps`]), sorted and without repeats.
    pub(super) fn overlapping_owners(&self) -> Vec<(usize, usize)> {
        let mut pairs = Vec::new();
        let mut found = Vec::new();
        for (id, filter) in self.filters.iter().enumerate() {
            found.clear();
            let tokens: Vec<&str> = filter.split('.').collect();
            candidates(&self.root, &tokens, &mut found);
            let owner = self.owners[id];
            for &other in &found {
                let other_owner = self.owners[other];
                if other_owner > owner && subject::overlaps(filter, self.filters[other]) {
                    pairs.push((owner, other_owner));
                }
            }
        }
        pairs.sort_unstable();
        pairs.dedup();
        pairs
    }
}

impl SubjectIndex<'_> {
    /// The owners with a filter overlapping `filter` (checked with [`subject::overlaps`]),
    /// sorted and without repeats.
    pub(super) fn owners_overlapping(&self, filter: &str) -> Vec<usize> {
        let mut found = Vec::new();
        let tokens: Vec<&str> = filter.split('.').collect();
        candidates(&self.root, &tokens, &mut found);
        let mut owners: Vec<usize> = found
            .into_iter()
            .filter(|&id| subject::overlaps(filter, self.filters[id]))
            .map(|id| self.owners[id])
            .collect();
        owners.sort_unstable();
        owners.dedup();
        owners
    }
}

/// Adds to `found` every filter under `node` that may overlap the filter whose remaining
/// tokens are `rest`.
fn candidates(node: &Node<'_>, rest: &[&str], found: &mut Vec<usize>) {
    // A `>` here takes one or more of the remaining tokens.
    if !rest.is_empty()
        && let Some(tail) = node.children.get(">")
    {
        found.extend(&tail.ends);
    }
    let Some((&token, rest)) = rest.split_first() else {
        found.extend(&node.ends);
        return;
    };
    match token {
        // Everything below, at any depth of at least one more token.
        ">" => {
            for child in node.children.values() {
                all(child, found);
            }
        }
        "*" => {
            for (name, child) in &node.children {
                if *name != ">" {
                    candidates(child, rest, found);
                }
            }
        }
        literal => {
            if let Some(child) = node.children.get(literal) {
                candidates(child, rest, found);
            }
            if let Some(child) = node.children.get("*") {
                candidates(child, rest, found);
            }
        }
    }
}

fn all(node: &Node<'_>, found: &mut Vec<usize>) {
    found.extend(&node.ends);
    for child in node.children.values() {
        all(child, found);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology_core::xorshift::Rng;

    fn random_filter(rng: &mut Rng) -> String {
        let len = 1 + rng.below(4);
        (0..len)
            .map(|i| match rng.below(if i + 1 == len { 5 } else { 4 }) {
                0 => "a",
                1 => "b",
                2 | 3 => "*",
                _ => ">",
            })
            .collect::<Vec<_>>()
            .join(".")
    }

    /// The tree finds exactly the pairs that comparing every pair finds.
    #[test]
    fn agrees_with_every_pair() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for _ in 0..300 {
            let owners = 1 + rng.below(8);
            let mut filters: Vec<(usize, String)> = Vec::new();
            for owner in 0..owners {
                for _ in 0..1 + rng.below(3) {
                    filters.push((owner, random_filter(&mut rng)));
                }
            }
            let mut index = SubjectIndex::new();
            for (owner, filter) in &filters {
                index.insert(*owner, filter);
            }
            let mut expected = Vec::new();
            for (a, x) in &filters {
                for (b, y) in &filters {
                    if a < b && subject::overlaps(x, y) {
                        expected.push((*a, *b));
                    }
                }
            }
            expected.sort_unstable();
            expected.dedup();
            assert_eq!(index.overlapping_owners(), expected, "{filters:?}");
            let probe = random_filter(&mut rng);
            let mut owners: Vec<usize> = filters
                .iter()
                .filter(|(_, f)| subject::overlaps(&probe, f))
                .map(|(owner, _)| *owner)
                .collect();
            owners.dedup(); // added by owner, in order
            assert_eq!(
                index.owners_overlapping(&probe),
                owners,
                "{probe} {filters:?}"
            );
        }
    }
}
