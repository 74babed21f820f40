//! The iterator and table seams shared by every tier and format.
//!
//! [`InternalIterator`] walks internal keys (see [`crate::key`]) in the
//! engine's order; memtables, SST files, PM tables, the merging iterator and
//! level iterators all implement it, so the read path does not care which
//! tier or format a table uses. [`TableReader`] is the point-lookup side.
//!
//! Error contract (leveldb style): an iterator that hits an I/O error or
//! corrupt data becomes invalid and reports the error from
//! [`InternalIterator::status`]; it never panics.

use std::sync::Arc;

use crate::error::Result;
use crate::key::{compare_internal, parse_internal_key, seek_key, user_key, Kind, SeqNo};

/// A cursor over internal keys in [`crate::key::compare_internal`] order.
pub trait InternalIterator: Send {
    /// True if positioned on an entry.
    fn valid(&self) -> bool;
    /// Positions at the first entry.
    fn seek_to_first(&mut self);
    /// Positions at the last entry.
    fn seek_to_last(&mut self);
    /// Positions at the first entry `>= target` (an internal key).
    fn seek(&mut self, target: &[u8]);
    /// Moves to the next entry. REQUIRES: `valid()`.
    fn next(&mut self);
    /// Moves to the previous entry. REQUIRES: `valid()`.
    fn prev(&mut self);
    /// The current internal key. REQUIRES: `valid()`.
    fn key(&self) -> &[u8];
    /// The current value. REQUIRES: `valid()`.
    fn value(&self) -> &[u8];
    /// The first error met, if any.
    fn status(&self) -> Result<()>;
}

/// The newest entry of a user key visible at a snapshot, as a table found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Seqno of the entry.
    pub seq: SeqNo,
    /// Put or Delete.
    pub kind: Kind,
    /// The value (empty for a Delete).
    pub value: Vec<u8>,
}

/// Point lookups and iteration over one immutable table of any format.
pub trait TableReader: Send + Sync {
    /// The newest entry for `user_key` with seqno `<= seq`, if the table holds one.
    fn get(&self, user_key: &[u8], seq: SeqNo) -> Result<Option<Found>>;
    /// An iterator over the whole table. `fill_cache`: whether blocks read
    /// by this iterator enter the block cache.
    fn iter(self: Arc<Self>, fill_cache: bool) -> Box<dyn InternalIterator>;
}

/// An iterator over nothing (an empty table, or a failed open carrying its error).
pub struct EmptyIterator(Result<()>);

impl EmptyIterator {
    /// An empty iterator with OK status.
    pub fn new() -> Self {
        EmptyIterator(Ok(()))
    }
    /// An empty iterator that reports `err`.
    pub fn with_error(err: crate::Error) -> Self {
        EmptyIterator(Err(err))
    }
}

impl Default for EmptyIterator {
    fn default() -> Self {
        Self::new()
    }
}

impl InternalIterator for EmptyIterator {
    fn valid(&self) -> bool {
        false
    }
    fn seek_to_first(&mut self) {}
    fn seek_to_last(&mut self) {}
    fn seek(&mut self, _target: &[u8]) {}
    fn next(&mut self) {}
    fn prev(&mut self) {}
    fn key(&self) -> &[u8] {
        &[]
    }
    fn value(&self) -> &[u8] {
        &[]
    }
    fn status(&self) -> Result<()> {
        self.0.clone()
    }
}

/// Merges children into one sorted stream (duplicates kept: every version
/// of every key appears, in internal-key order).
///
/// Children are few (memtables, L0 tables, one iterator per level), so the
/// smallest/largest child is found by a linear scan.
///
/// A child that stops on an error stops the merge: the merge becomes
/// invalid and [`InternalIterator::status`] reports the error. Merging on
/// without that child would be a wrong answer, not a shorter one: the
/// entries it still held (a newer value, a tombstone) would be missing,
/// and older versions from other children would show through. A child is
/// checked when it moves (every child on a seek, the moved one on
/// `next`/`prev`), so a step costs one status check only when a child
/// runs out.
pub struct MergingIterator {
    children: Vec<Box<dyn InternalIterator>>,
    current: Option<usize>,
    forward: bool,
}

impl MergingIterator {
    /// A merge of `children`.
    pub fn new(children: Vec<Box<dyn InternalIterator>>) -> Self {
        MergingIterator {
            children,
            current: None,
            forward: true,
        }
    }

    fn find_smallest(&mut self) {
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate() {
            if c.valid() {
                best = match best {
                    Some(b) if compare_internal(c.key(), self.children[b].key()).is_ge() => Some(b),
                    _ => Some(i),
                };
            }
        }
        self.current = best;
    }

    /// True if child `i` stopped on an error (it is then invalid).
    fn failed(&self, i: usize) -> bool {
        let c = &self.children[i];
        !c.valid() && c.status().is_err()
    }

    /// After a seek: stops the merge if any child reports an error.
    fn check_all(&mut self) -> bool {
        if self.children.iter().any(|c| c.status().is_err()) {
            self.current = None;
            return false;
        }
        true
    }

    fn find_largest(&mut self) {
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate().rev() {
            if c.valid() {
                best = match best {
                    Some(b) if compare_internal(c.key(), self.children[b].key()).is_le() => Some(b),
                    _ => Some(i),
                };
            }
        }
        self.current = best;
    }
}

impl InternalIterator for MergingIterator {
    fn valid(&self) -> bool {
        self.current.is_some()
    }
    fn seek_to_first(&mut self) {
        for c in &mut self.children {
            c.seek_to_first();
        }
        self.forward = true;
        if self.check_all() {
            self.find_smallest();
        }
    }
    fn seek_to_last(&mut self) {
        for c in &mut self.children {
            c.seek_to_last();
        }
        self.forward = false;
        if self.check_all() {
            self.find_largest();
        }
    }
    fn seek(&mut self, target: &[u8]) {
        for c in &mut self.children {
            c.seek(target);
        }
        self.forward = true;
        if self.check_all() {
            self.find_smallest();
        }
    }
    fn next(&mut self) {
        let Some(cur) = self.current else { return };
        if !self.forward {
            // Position every other child just after the current key.
            let key = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i != cur {
                    c.seek(&key);
                    if c.valid() && compare_internal(&key, c.key()).is_eq() {
                        c.next();
                    }
                }
            }
            self.forward = true;
            if !self.check_all() {
                return;
            }
        }
        self.children[cur].next();
        if self.failed(cur) {
            self.current = None;
            return;
        }
        self.find_smallest();
    }
    fn prev(&mut self) {
        let Some(cur) = self.current else { return };
        if self.forward {
            // Position every other child just before the current key.
            let key = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i != cur {
                    c.seek(&key);
                    if c.valid() {
                        c.prev();
                    } else {
                        c.seek_to_last();
                    }
                }
            }
            self.forward = false;
            if !self.check_all() {
                return;
            }
        }
        self.children[cur].prev();
        if self.failed(cur) {
            self.current = None;
            return;
        }
        self.find_largest();
    }
    fn key(&self) -> &[u8] {
        match self.current {
            Some(i) => self.children[i].key(),
            None => &[],
        }
    }
    fn value(&self) -> &[u8] {
        match self.current {
            Some(i) => self.children[i].value(),
            None => &[],
        }
    }
    fn status(&self) -> Result<()> {
        for c in &self.children {
            c.status()?;
        }
        Ok(())
    }
}

/// The user-facing iterator: resolves versions at a snapshot, hides
/// tombstones and applies bounds (leveldb's `DBIter`).
///
/// In the forward direction the inner iterator is positioned *at* the
/// current entry; in the reverse direction it is positioned just *before*
/// all entries of the current user key, whose key and value are saved.
pub struct DbIterator {
    inner: Box<dyn InternalIterator>,
    seq: SeqNo,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    forward: bool,
    valid: bool,
    saved_key: Vec<u8>,
    saved_value: Vec<u8>,
    err: Option<crate::Error>,
    /// Keeps the version, memtables and snapshot alive while iterating.
    _pins: Box<dyn std::any::Any + Send>,
}

impl DbIterator {
    /// Wraps a merged internal iterator read at snapshot `seq`, with an
    /// inclusive lower and exclusive upper bound on user keys.
    pub(crate) fn new(
        inner: Box<dyn InternalIterator>,
        seq: SeqNo,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
        pins: Box<dyn std::any::Any + Send>,
    ) -> Self {
        DbIterator {
            inner,
            seq,
            lower,
            upper,
            forward: true,
            valid: false,
            saved_key: Vec::new(),
            saved_value: Vec::new(),
            err: None,
            _pins: pins,
        }
    }

    /// True if positioned on a key.
    pub fn valid(&self) -> bool {
        self.valid
    }

    /// The current user key. REQUIRES: `valid()`.
    pub fn key(&self) -> &[u8] {
        debug_assert!(self.valid);
        if self.forward {
            user_key(self.inner.key())
        } else {
            &self.saved_key
        }
    }

    /// The current value. REQUIRES: `valid()`.
    pub fn value(&self) -> &[u8] {
        debug_assert!(self.valid);
        if self.forward {
            self.inner.value()
        } else {
            &self.saved_value
        }
    }

    /// The first error met, if any.
    pub fn status(&self) -> Result<()> {
        match &self.err {
            Some(e) => Err(e.clone()),
            None => self.inner.status(),
        }
    }

    fn parse(&mut self) -> Option<(SeqNo, Kind)> {
        match parse_internal_key(self.inner.key()) {
            Some(p) => Some((p.seq, p.kind)),
            None => {
                self.err = Some(crate::Error::corruption(
                    "iterator",
                    0,
                    "malformed internal key",
                ));
                None
            }
        }
    }

    fn past_upper(&self, ukey: &[u8]) -> bool {
        self.upper.as_deref().is_some_and(|u| ukey >= u)
    }

    fn before_lower(&self, ukey: &[u8]) -> bool {
        self.lower.as_deref().is_some_and(|l| ukey < l)
    }

    /// Moves forward to the first visible entry; entries of `skip` (and
    /// smaller keys) are hidden when `skipping`.
    fn find_next_user_entry(&mut self, mut skipping: bool) {
        debug_assert!(self.forward);
        while self.inner.valid() {
            let Some((seq, kind)) = self.parse() else {
                self.valid = false;
                return;
            };
            if seq <= self.seq {
                let ukey = user_key(self.inner.key());
                match kind {
                    Kind::Delete => {
                        self.saved_key.clear();
                        self.saved_key.extend_from_slice(ukey);
                        skipping = true;
                    }
                    Kind::Put => {
                        if !(skipping && ukey <= self.saved_key.as_slice()) {
                            if self.past_upper(ukey) {
                                break;
                            }
                            self.valid = true;
                            self.saved_key.clear();
                            return;
                        }
                    }
                }
            }
            self.inner.next();
        }
        self.saved_key.clear();
        self.valid = false;
    }

    /// Moves backward to the newest visible value of the previous user key.
    fn find_prev_user_entry(&mut self) {
        debug_assert!(!self.forward);
        let mut kind_found = Kind::Delete;
        while self.inner.valid() {
            let Some((seq, kind)) = self.parse() else {
                self.valid = false;
                return;
            };
            if seq <= self.seq {
                let ukey = user_key(self.inner.key());
                if kind_found != Kind::Delete && ukey < self.saved_key.as_slice() {
                    break; // saved_key holds a live value, and we moved past it
                }
                kind_found = kind;
                match kind {
                    Kind::Delete => {
                        self.saved_key.clear();
                        self.saved_value.clear();
                    }
                    Kind::Put => {
                        self.saved_key.clear();
                        self.saved_key.extend_from_slice(ukey);
                        self.saved_value.clear();
                        self.saved_value.extend_from_slice(self.inner.value());
                    }
                }
            }
            self.inner.prev();
        }
        if kind_found == Kind::Delete || self.before_lower(&self.saved_key) {
            self.valid = false;
            self.saved_key.clear();
            self.saved_value.clear();
            self.forward = true;
        } else {
            self.valid = true;
        }
    }

    /// Positions at the first key.
    pub fn seek_to_first(&mut self) {
        match self.lower.clone() {
            Some(l) => self.seek(&l),
            None => {
                self.forward = true;
                self.saved_value.clear();
                self.inner.seek_to_first();
                self.find_next_user_entry(false);
            }
        }
    }

    /// Positions at the last key.
    pub fn seek_to_last(&mut self) {
        self.forward = false;
        self.saved_value.clear();
        self.saved_key.clear();
        match &self.upper {
            Some(u) => {
                let t = seek_key(u, crate::key::MAX_SEQNO);
                self.inner.seek(&t);
                if self.inner.valid() {
                    self.inner.prev();
                } else {
                    self.inner.seek_to_last();
                }
            }
            None => self.inner.seek_to_last(),
        }
        self.find_prev_user_entry();
    }

    /// Positions at the first key `>= target`.
    pub fn seek(&mut self, target: &[u8]) {
        self.forward = true;
        self.saved_value.clear();
        let target = match &self.lower {
            Some(l) if target < l.as_slice() => l.clone(),
            _ => target.to_vec(),
        };
        let t = seek_key(&target, self.seq);
        self.inner.seek(&t);
        self.find_next_user_entry(false);
    }

    /// Positions at the last key `<= target`.
    pub fn seek_for_prev(&mut self, target: &[u8]) {
        if self.past_upper(target) {
            self.seek_to_last();
            return;
        }
        self.forward = false;
        self.saved_value.clear();
        self.saved_key.clear();
        self.inner.seek(&seek_key(target, crate::key::MAX_SEQNO));
        while self.inner.valid() && user_key(self.inner.key()) <= target {
            self.inner.next();
        }
        if self.inner.valid() {
            self.inner.prev();
        } else {
            self.inner.seek_to_last();
        }
        self.find_prev_user_entry();
    }

    /// Moves to the next key. REQUIRES: `valid()`.
    pub fn next(&mut self) {
        if !self.valid {
            return;
        }
        if !self.forward {
            // The inner iterator is before the current key's entries.
            self.forward = true;
            if self.inner.valid() {
                self.inner.next();
            } else {
                self.inner.seek_to_first();
            }
            if !self.inner.valid() {
                self.valid = false;
                self.saved_key.clear();
                return;
            }
            // saved_key holds the current key: skip its entries.
        } else {
            self.saved_key.clear();
            self.saved_key.extend_from_slice(user_key(self.inner.key()));
            self.inner.next();
        }
        self.find_next_user_entry(true);
    }

    /// Moves to the previous key. REQUIRES: `valid()`.
    pub fn prev(&mut self) {
        if !self.valid {
            return;
        }
        if self.forward {
            self.saved_key.clear();
            self.saved_key.extend_from_slice(user_key(self.inner.key()));
            loop {
                self.inner.prev();
                if !self.inner.valid() {
                    self.valid = false;
                    self.saved_key.clear();
                    self.saved_value.clear();
                    return;
                }
                if user_key(self.inner.key()) < self.saved_key.as_slice() {
                    break;
                }
            }
            self.forward = false;
        }
        self.find_prev_user_entry();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::make_internal_key;

    /// Sorted entries; stops with an error when it would reach `fail_at`.
    struct Failing {
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        pos: Option<usize>,
        fail_at: usize,
        err: Option<crate::Error>,
    }

    impl Failing {
        fn new(entries: &[(&str, u64, &str)], fail_at: usize) -> Box<Failing> {
            Box::new(Failing {
                entries: entries
                    .iter()
                    .map(|(k, s, v)| {
                        (
                            make_internal_key(k.as_bytes(), *s, Kind::Put),
                            v.as_bytes().to_vec(),
                        )
                    })
                    .collect(),
                pos: None,
                fail_at,
                err: None,
            })
        }
        fn go(&mut self, i: Option<usize>) {
            self.pos = None;
            let Some(i) = i.filter(|&i| i < self.entries.len()) else {
                return;
            };
            if i == self.fail_at {
                self.err = Some(crate::Error::corruption("test", i as u64, "damaged"));
                return;
            }
            self.pos = Some(i);
        }
    }

    impl InternalIterator for Failing {
        fn valid(&self) -> bool {
            self.pos.is_some()
        }
        fn seek_to_first(&mut self) {
            self.go(Some(0));
        }
        fn seek_to_last(&mut self) {
            self.go(self.entries.len().checked_sub(1));
        }
        fn seek(&mut self, target: &[u8]) {
            let i = self
                .entries
                .partition_point(|(k, _)| compare_internal(k, target).is_lt());
            self.go(Some(i));
        }
        fn next(&mut self) {
            self.go(self.pos.map(|i| i + 1));
        }
        fn prev(&mut self) {
            self.go(self.pos.and_then(|i| i.checked_sub(1)));
        }
        fn key(&self) -> &[u8] {
            self.pos.map_or(&[], |i| &self.entries[i].0)
        }
        fn value(&self) -> &[u8] {
            self.pos.map_or(&[], |i| &self.entries[i].1)
        }
        fn status(&self) -> Result<()> {
            self.err.clone().map_or(Ok(()), Err)
        }
    }

    /// A child that stops on an error stops the merge: nothing after it
    /// (here the older value of "b") shows through.
    #[test]
    fn a_failing_child_stops_the_merge() {
        for backward in [false, true] {
            let newer = Failing::new(&[("a", 9, "new-a"), ("b", 9, "new-b")], 1);
            let older = Failing::new(&[("a", 1, "old-a"), ("b", 1, "old-b")], usize::MAX);
            let mut m = MergingIterator::new(vec![newer, older]);
            let mut seen = Vec::new();
            if backward {
                m.seek_to_last();
                while m.valid() {
                    seen.push(m.value().to_vec());
                    m.prev();
                }
            } else {
                m.seek_to_first();
                while m.valid() {
                    seen.push(m.value().to_vec());
                    m.next();
                }
            }
            assert!(m.status().unwrap_err().is_corruption());
            assert!(
                !seen.contains(&b"old-b".to_vec()),
                "backward {backward}: {seen:?}"
            );
        }
    }

    #[test]
    fn exhausted_children_are_not_errors() {
        let a = Failing::new(&[("a", 1, "x")], usize::MAX);
        let b = Failing::new(&[("b", 1, "y"), ("c", 1, "z")], usize::MAX);
        let mut m = MergingIterator::new(vec![a, b]);
        m.seek_to_first();
        let mut n = 0;
        while m.valid() {
            n += 1;
            m.next();
        }
        assert_eq!(n, 3);
        assert!(m.status().is_ok());
    }
}
