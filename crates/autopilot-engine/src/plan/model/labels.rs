//! An object's labels as the planner keeps them: one string and the offsets into it.
//!
//! The leader keeps a view of every Node between passes (`TargetObject`), and a node's
//! labels were the biggest part of it: a `BTreeMap<String, String>` of a few entries is a
//! 540-byte tree node and two strings per label, about 730 bytes for the three labels of a
//! bare Node. Here the same three take one string of their text and one short list of
//! offsets, about 130 bytes.

use std::collections::BTreeMap;
use std::fmt;

/// Labels, read-only, looked up by key. Keys are unique and kept sorted.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Labels {
    /// Every key and value, one after the other: `key0 value0 key1 value1 …`.
    text: Box<str>,
    /// For each label, in key order: where its key starts and where its value starts (the
    /// value ends where the next key starts, or at the end of `text`).
    starts: Box<[(u32, u32)]>,
}

impl Labels {
    /// The value of `key`, if the object carries it.
    pub fn get(&self, key: &str) -> Option<&str> {
        let index = self
            .starts
            .binary_search_by(|&(at, value)| self.text[at as usize..value as usize].cmp(key))
            .ok()?;
        Some(self.entry(index).1)
    }

    /// Whether the object carries `key`.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Every label, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        (0..self.starts.len()).map(|index| self.entry(index))
    }

    /// How many labels there are.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Set `key` to `value`; returns the value it had. (Rebuilds the labels: for a dry run
    /// or a test, not for a loop.)
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        let mut all = self.to_map();
        let previous = all.insert(key, value);
        *self = Self::from(&all);
        previous
    }

    /// Remove `key`; returns the value it had. (Rebuilds the labels, like [`Self::insert`].)
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let mut all = self.to_map();
        let previous = all.remove(key);
        *self = Self::from(&all);
        previous
    }

    fn to_map(&self) -> BTreeMap<String, String> {
        self.iter().map(|(key, value)| (key.to_owned(), value.to_owned())).collect()
    }

    fn entry(&self, index: usize) -> (&str, &str) {
        let (key, value) = self.starts[index];
        let end = self.starts.get(index + 1).map_or(self.text.len(), |&(next, _)| next as usize);
        (&self.text[key as usize..value as usize], &self.text[value as usize..end])
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Labels {
    /// Labels from pairs in any order; of a key given twice, the last value counts (as when
    /// collecting into a map).
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let sorted: BTreeMap<String, String> = pairs
            .into_iter()
            .map(|(key, value)| (key.as_ref().to_owned(), value.as_ref().to_owned()))
            .collect();
        Self::from(&sorted)
    }
}

impl From<&BTreeMap<String, String>> for Labels {
    fn from(labels: &BTreeMap<String, String>) -> Self {
        let size = labels.iter().map(|(key, value)| key.len() + value.len()).sum();
        let mut text = String::with_capacity(size);
        let mut starts = Vec::with_capacity(labels.len());
        // Label keys and values are at most a few hundred bytes each (the API server
        // validates them); offsets past u32 would need 4 GiB of labels on one object.
        let offset = |text: &String| u32::try_from(text.len()).unwrap_or(u32::MAX);
        for (key, value) in labels {
            let key_start = offset(&text);
            text.push_str(key);
            let value_start = offset(&text);
            text.push_str(value);
            starts.push((key_start, value_start));
        }
        Self { text: text.into_boxed_str(), starts: starts.into_boxed_slice() }
    }
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(labels: BTreeMap<String, String>) -> Self {
        Self::from(&labels)
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_found_by_key_and_listed_in_key_order() {
        let labels: Labels =
            [("zone", "b"), ("kubernetes.io/os", "linux"), ("empty", ""), ("a", "1")]
                .into_iter()
                .collect();
        assert_eq!(labels.len(), 4);
        assert_eq!(labels.get("kubernetes.io/os"), Some("linux"));
        assert_eq!(labels.get("zone"), Some("b"));
        assert_eq!(labels.get("a"), Some("1"));
        assert_eq!(labels.get("empty"), Some(""), "an empty value is a value");
        assert!(labels.contains_key("empty"));
        assert_eq!(labels.get("kubernetes.io"), None, "a prefix of a key is not a key");
        assert_eq!(labels.get("zonex"), None);
        assert_eq!(labels.get(""), None);
        assert_eq!(
            labels.iter().collect::<Vec<_>>(),
            [("a", "1"), ("empty", ""), ("kubernetes.io/os", "linux"), ("zone", "b")]
        );
        assert_eq!(
            format!("{labels:?}"),
            r#"{"a": "1", "empty": "", "kubernetes.io/os": "linux", "zone": "b"}"#
        );
    }

    #[test]
    fn no_labels_find_nothing_and_a_repeated_key_keeps_its_last_value() {
        let none = Labels::default();
        assert!(none.is_empty());
        assert_eq!(none.get("a"), None);
        assert_eq!(none.iter().count(), 0);

        let labels: Labels = [("k", "first"), ("k", "last")].into_iter().collect();
        assert_eq!(labels.len(), 1);
        assert_eq!(labels.get("k"), Some("last"));
    }

    #[test]
    fn a_label_is_set_and_removed_like_a_map_entry() {
        let mut labels: Labels = [("b", "2")].into_iter().collect();
        assert_eq!(labels.insert("a".to_owned(), "1".to_owned()), None);
        assert_eq!(labels.insert("b".to_owned(), "3".to_owned()), Some("2".to_owned()));
        assert_eq!(labels.iter().collect::<Vec<_>>(), [("a", "1"), ("b", "3")]);
        assert_eq!(labels.remove("a"), Some("1".to_owned()));
        assert_eq!(labels.remove("a"), None);
        assert_eq!(labels, [("b", "3")].into_iter().collect());
    }

    #[test]
    fn the_same_labels_compare_equal_however_they_were_built() {
        let map =
            BTreeMap::from([("b".to_owned(), "2".to_owned()), ("a".to_owned(), "1".to_owned())]);
        let from_pairs: Labels = [("b", "2"), ("a", "1")].into_iter().collect();
        assert_eq!(Labels::from(&map), from_pairs);
        assert_ne!(Labels::from(&map), [("a", "1"), ("b", "3")].into_iter().collect());
        // The boundary between a key and its value is part of what is compared.
        assert_ne!(
            [("ab", "c")].into_iter().collect::<Labels>(),
            [("a", "bc")].into_iter().collect::<Labels>()
        );
    }
}
