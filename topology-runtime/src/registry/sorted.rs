//! [`SortedList`]: a list kept in a stable order by key, to which additions cost O(1) in any
//! order: the first read after additions out of order sorts once.

use std::sync::OnceLock;

/// What an [`SortedList`] list is sorted by.
pub(super) trait Keyed: Clone {
    type Key: Ord;
    fn key(&self) -> Self::Key;
}

/// Items in order by [`Keyed::key`], those with equal keys in the order they were added:
/// the order that inserting each one after those with its key gives, at O(n log n) for n
/// additions in any order instead of a shift of the list per addition.
#[derive(Clone, Debug)]
pub(super) struct SortedList<T> {
    /// Every item: in order while `in_order`, else in the order added.
    items: Vec<T>,
    in_order: bool,
    /// `items` sorted, made by the first read while they are not in order.
    sorted: OnceLock<Vec<T>>,
}

impl<T> Default for SortedList<T> {
    fn default() -> Self {
        SortedList {
            items: Vec::new(),
            in_order: true,
            sorted: OnceLock::new(),
        }
    }
}

impl<T: Keyed> SortedList<T> {
    pub(super) fn push(&mut self, item: T) {
        // Stable: sorting the sorted items with later additions gives the order sorting every
        // addition would.
        if let Some(sorted) = self.sorted.take() {
            self.items = sorted;
            self.in_order = true;
        }
        if self
            .items
            .last()
            .is_some_and(|last| last.key() > item.key())
        {
            self.in_order = false;
        }
        self.items.push(item);
    }

    /// The items in no particular order (without sorting them).
    pub(super) fn iter_added(&self) -> impl Iterator<Item = &T> {
        self.items.iter()
    }

    /// The items, in order.
    pub(super) fn get(&self) -> &[T] {
        if self.in_order {
            return &self.items;
        }
        self.sorted.get_or_init(|| {
            let mut sorted = self.items.clone();
            sort(&mut sorted);
            sorted
        })
    }

    /// The items, in order, to change in place (what they are sorted by must not change).
    #[cfg(feature = "tower")]
    pub(super) fn get_mut(&mut self) -> &mut [T] {
        self.sort_in_place();
        &mut self.items
    }

    /// Keeps one copy of the items, in order (a read may have left a sorted copy beside
    /// them).
    pub(super) fn sort_in_place(&mut self) {
        if !self.in_order {
            self.items = match self.sorted.take() {
                Some(sorted) => sorted,
                None => {
                    let mut items = std::mem::take(&mut self.items);
                    sort(&mut items);
                    items
                }
            };
            self.in_order = true;
        }
    }
}

/// Sorts stably by key, moving each item at most twice (a merge sort of the items would
/// move each of them, a few hundred bytes, once per pass).
fn sort<T: Keyed>(items: &mut [T]) {
    items.sort_by_cached_key(T::key);
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology_core::xorshift::Rng;

    #[derive(Clone, Debug, PartialEq)]
    struct Item(u8, usize);

    impl Keyed for Item {
        type Key = u8;
        fn key(&self) -> u8 {
            self.0
        }
    }

    /// Any sequence of additions, reads and settles gives the order that inserting each
    /// item after those with its key gives.
    #[test]
    fn agrees_with_insertion_in_place() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..200 {
            let mut ordered = SortedList::default();
            let mut expected: Vec<Item> = Vec::new();
            for added in 0..rng.below(40) {
                let item = Item(rng.below(8) as u8, added);
                let at = expected.partition_point(|e| e.0 <= item.0);
                expected.insert(at, item.clone());
                ordered.push(item);
                match rng.below(4) {
                    0 => assert_eq!(ordered.get(), expected),
                    1 => ordered.sort_in_place(),
                    _ => {}
                }
            }
            assert_eq!(ordered.get(), expected);
            let copy = ordered.clone();
            ordered.sort_in_place();
            assert_eq!(ordered.get(), expected);
            assert_eq!(copy.get(), expected);
        }
    }
}
