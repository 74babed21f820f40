//! Where a point read looks in a sorted level, without touching the tables.
//!
//! [`Version::get`](super::Version::get) binary-searches every level below
//! L0 for the first table whose largest user key is at least the key. Done
//! over the level's `Arc<TableHandle>`s, each step loads a handle and then
//! its key's bytes: two dependent cache misses per step. In a quiesced
//! `medium` readrandom of `triangle` (49 tables in L1, 51 in L2), the two
//! loads were half of `Version::get`'s samples and `Version::get` 9% of the
//! reading thread's.
//!
//! [`LevelBounds`] keeps one level's boundaries the way RocksDB's
//! `LevelFilesBrief` does, in arrays of their own: each table's largest
//! user key as its first eight bytes in one dense `u64` array (big-endian,
//! zero-padded, so that numeric order is byte order whenever two numbers
//! differ), and the keys themselves back to back for the ties. A search
//! reads a few cache lines of numbers and touches key bytes only when a
//! number ties.
//!
//! [`Bounds`] holds a version's levels' bounds, built once per version; a
//! clone starts unbuilt, because a clone is how a new version begins (its
//! tables are about to change).

use std::cmp::Ordering;
use std::sync::{Arc, OnceLock};

use super::TableHandle;
use crate::key::user_key_prefix as prefix;

/// The largest user keys of one sorted level's tables, in table order.
#[derive(Debug, Default)]
pub struct LevelBounds {
    /// Each key's first eight bytes, big-endian, zero-padded.
    prefixes: Vec<u64>,
    /// Where each key ends in `keys`.
    ends: Vec<usize>,
    /// The keys, back to back.
    keys: Vec<u8>,
}

impl LevelBounds {
    /// The bounds of a level's tables (sorted by key, disjoint).
    pub fn new(tables: &[Arc<TableHandle>]) -> Self {
        Self::of_keys(tables.iter().map(|t| t.largest_user_key()))
    }

    /// The bounds of ascending largest user keys, one per table.
    fn of_keys<'a>(largest: impl ExactSizeIterator<Item = &'a [u8]>) -> Self {
        let mut b = LevelBounds {
            prefixes: Vec::with_capacity(largest.len()),
            ends: Vec::with_capacity(largest.len()),
            keys: Vec::new(),
        };
        for k in largest {
            b.prefixes.push(prefix(k));
            b.keys.extend_from_slice(k);
            b.ends.push(b.keys.len());
        }
        b
    }

    /// Number of tables.
    pub fn len(&self) -> usize {
        self.prefixes.len()
    }

    /// True if the level has no tables.
    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty()
    }

    /// Largest user key of table `i`.
    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.keys[start..self.ends[i]]
    }

    /// Index of the first table whose largest user key is `>= user_key`
    /// (`len()` if none): the only table of the level that can hold it.
    #[inline]
    pub fn find(&self, user_key: &[u8]) -> usize {
        let p = prefix(user_key);
        let (mut lo, mut hi) = (0, self.prefixes.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let below = match self.prefixes[mid].cmp(&p) {
                Ordering::Less => true,
                Ordering::Greater => false,
                Ordering::Equal => self.key(mid) < user_key,
            };
            if below {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// A version's per-level bounds (L0's is empty: its tables overlap and are
/// searched newest first), built at most once. A clone starts unbuilt.
#[derive(Default)]
pub struct Bounds(OnceLock<Vec<LevelBounds>>);

impl Bounds {
    /// The bounds of `levels`, built on first use.
    pub fn get(&self, levels: &[Vec<Arc<TableHandle>>]) -> &[LevelBounds] {
        self.0.get_or_init(|| {
            levels
                .iter()
                .enumerate()
                .map(|(l, tables)| {
                    if l == 0 {
                        LevelBounds::default()
                    } else {
                        LevelBounds::new(tables)
                    }
                })
                .collect()
        })
    }
}

impl Clone for Bounds {
    /// Unbuilt: a cloned version is about to have its tables changed.
    fn clone(&self) -> Self {
        Bounds::default()
    }
}

impl std::fmt::Debug for Bounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Bounds(built)"
        } else {
            "Bounds(unbuilt)"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `find` against a plain search over the keys, for keys around every
    /// boundary, including keys shorter and longer than eight bytes,
    /// prefixes of each other and bytes 0x00 and 0xff.
    #[test]
    fn find_agrees_with_a_plain_search() {
        let mut largest: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"\x00".to_vec(),
            b"\x00\x00".to_vec(),
            b"a".to_vec(),
            b"abcdefgh".to_vec(),
            b"abcdefgh\x00".to_vec(),
            b"abcdefghij".to_vec(),
            b"abcdefgi".to_vec(),
            b"b\x00\x00\x00\x00\x00\x00\x00\x00".to_vec(),
            b"b\x00\x00\x00\x00\x00\x00\x00\x01".to_vec(),
            b"key000000000017".to_vec(),
            b"key000000000018".to_vec(),
            b"\xff\xff\xff\xff\xff\xff\xff\xff".to_vec(),
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff".to_vec(),
        ];
        largest.sort();
        largest.dedup();
        let b = LevelBounds::of_keys(largest.iter().map(Vec::as_slice));
        assert_eq!(b.len(), largest.len());
        let mut probes: Vec<Vec<u8>> = Vec::new();
        for k in &largest {
            probes.push(k.clone());
            let mut longer = k.clone();
            longer.push(0);
            probes.push(longer);
            let mut bigger = k.clone();
            bigger.push(0xff);
            probes.push(bigger);
            if !k.is_empty() {
                probes.push(k[..k.len() - 1].to_vec());
                let mut dec = k.clone();
                let last = dec.len() - 1;
                dec[last] = dec[last].wrapping_sub(1);
                probes.push(dec);
            }
        }
        probes.push(b"zzzzzzzzzzzz".to_vec());
        for p in &probes {
            let want = largest.partition_point(|k| k.as_slice() < p.as_slice());
            assert_eq!(b.find(p), want, "probe {p:?}");
        }
    }

    #[test]
    fn a_clone_starts_unbuilt() {
        let b = Bounds::default();
        assert!(b.get(&[Vec::new(), Vec::new()]).len() == 2);
        assert_eq!(format!("{b:?}"), "Bounds(built)");
        assert_eq!(format!("{:?}", b.clone()), "Bounds(unbuilt)");
    }
}
