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
    /// Builds now what the table's first lookup would otherwise build (a
    /// PM table's DRAM search index): called when a flush or compaction
    /// adds the table, before readers see it (`TableHandle::warm`).
    /// Nothing by default: an SST's open reads all it needs.
    fn warm(&self) -> Result<()> {
        Ok(())
    }
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
/// The valid children form a binary heap on their current keys (RocksDB's
/// `MergingIterator`): a min-heap moving forward, a max-heap moving
/// backward, the current child on top. A step moves the top child and
/// sifts it down: O(log n) key comparisons, where leveldb's linear scan
/// costs n. Children can be many — a RangeTab merges every chunk of its
/// buffers, a compaction every input table — and a scan pays that per
/// entry. Ties (equal internal keys) go to the lower-indexed child moving
/// forward and to the higher-indexed one moving backward, so a merge and
/// its reverse visit the same entries in mirrored order.
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
    /// Indexes of the valid children, a heap ordered by [`before`]; the
    /// current child is `heap[0]`.
    heap: Vec<usize>,
    forward: bool,
}

/// True if child `a` comes out of the heap before child `b`.
#[inline]
fn before(children: &[Box<dyn InternalIterator>], forward: bool, a: usize, b: usize) -> bool {
    let ord = compare_internal(children[a].key(), children[b].key()).then(a.cmp(&b));
    if forward {
        ord.is_lt()
    } else {
        ord.is_gt()
    }
}

/// Restores the heap below position `i`.
fn sift_down(
    children: &[Box<dyn InternalIterator>],
    forward: bool,
    heap: &mut [usize],
    mut i: usize,
) {
    let n = heap.len();
    loop {
        let l = 2 * i + 1;
        if l >= n {
            return;
        }
        let r = l + 1;
        let m = if r < n && before(children, forward, heap[r], heap[l]) {
            r
        } else {
            l
        };
        if !before(children, forward, heap[m], heap[i]) {
            return;
        }
        heap.swap(i, m);
        i = m;
    }
}

impl MergingIterator {
    /// A merge of `children`.
    pub fn new(children: Vec<Box<dyn InternalIterator>>) -> Self {
        let heap = Vec::with_capacity(children.len());
        MergingIterator {
            children,
            heap,
            forward: true,
        }
    }

    fn current(&self) -> Option<usize> {
        self.heap.first().copied()
    }

    /// Builds the heap of every valid child in the current direction.
    fn rebuild(&mut self) {
        self.heap.clear();
        self.heap
            .extend((0..self.children.len()).filter(|&i| self.children[i].valid()));
        for i in (0..self.heap.len() / 2).rev() {
            sift_down(&self.children, self.forward, &mut self.heap, i);
        }
    }

    /// After the top child moved in the heap's direction: sinks it to its
    /// place, or drops it when it ran out (or stops the merge on its error).
    fn fix_top(&mut self) {
        let top = self.heap[0];
        if self.children[top].valid() {
            sift_down(&self.children, self.forward, &mut self.heap, 0);
        } else if self.children[top].status().is_err() {
            self.heap.clear();
        } else {
            self.heap.swap_remove(0);
            sift_down(&self.children, self.forward, &mut self.heap, 0);
        }
    }

    /// After a seek: stops the merge if any child reports an error, else
    /// builds the heap.
    fn settle(&mut self) {
        if self.children.iter().any(|c| c.status().is_err()) {
            self.heap.clear();
        } else {
            self.rebuild();
        }
    }
}

impl InternalIterator for MergingIterator {
    fn valid(&self) -> bool {
        !self.heap.is_empty()
    }
    fn seek_to_first(&mut self) {
        for c in &mut self.children {
            c.seek_to_first();
        }
        self.forward = true;
        self.settle();
    }
    fn seek_to_last(&mut self) {
        for c in &mut self.children {
            c.seek_to_last();
        }
        self.forward = false;
        self.settle();
    }
    fn seek(&mut self, target: &[u8]) {
        for c in &mut self.children {
            c.seek(target);
        }
        self.forward = true;
        self.settle();
    }
    fn next(&mut self) {
        let Some(cur) = self.current() else { return };
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
            self.children[cur].next();
            self.settle();
            return;
        }
        self.children[cur].next();
        self.fix_top();
    }
    fn prev(&mut self) {
        let Some(cur) = self.current() else { return };
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
            self.children[cur].prev();
            self.settle();
            return;
        }
        self.children[cur].prev();
        self.fix_top();
    }
    fn key(&self) -> &[u8] {
        match self.current() {
            Some(i) => self.children[i].key(),
            None => &[],
        }
    }
    fn value(&self) -> &[u8] {
        match self.current() {
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

    /// Many children, random steps both ways and seeks: the merge is the
    /// sorted union at every step (the heap against a model).
    #[test]
    fn a_merge_of_many_children_is_their_sorted_union() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for trial in 0..40u64 {
            let children = 1 + (trial * 7 % 48) as usize;
            let mut per_child: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![Vec::new(); children];
            let mut all = Vec::new();
            for seq in 1..=(1 + rand(400)) {
                let k = format!("k{:03}", rand(120));
                let e = (
                    make_internal_key(k.as_bytes(), seq, Kind::Put),
                    format!("{k}@{seq}").into_bytes(),
                );
                per_child[rand(children as u64) as usize].push(e.clone());
                all.push(e);
            }
            all.sort_by(|a, b| compare_internal(&a.0, &b.0));
            let boxed: Vec<Box<dyn InternalIterator>> = per_child
                .into_iter()
                .map(|mut entries| {
                    entries.sort_by(|a, b| compare_internal(&a.0, &b.0));
                    Box::new(Failing {
                        entries,
                        pos: None,
                        fail_at: usize::MAX,
                        err: None,
                    }) as Box<dyn InternalIterator>
                })
                .collect();
            let mut m = MergingIterator::new(boxed);
            let mut at: Option<usize> = None;
            for step in 0..600 {
                match rand(10) {
                    0 => {
                        m.seek_to_first();
                        at = (!all.is_empty()).then_some(0);
                    }
                    1 => {
                        m.seek_to_last();
                        at = all.len().checked_sub(1);
                    }
                    2 => {
                        let k = format!("k{:03}", rand(125));
                        let target = make_internal_key(k.as_bytes(), rand(500), Kind::Put);
                        m.seek(&target);
                        let i =
                            all.partition_point(|(ik, _)| compare_internal(ik, &target).is_lt());
                        at = (i < all.len()).then_some(i);
                    }
                    3..=6 if at.is_some() => {
                        m.next();
                        at = at.map(|i| i + 1).filter(|&i| i < all.len());
                    }
                    _ if at.is_some() => {
                        m.prev();
                        at = at.and_then(|i| i.checked_sub(1));
                    }
                    _ => {}
                }
                assert_eq!(m.valid(), at.is_some(), "trial {trial} step {step}");
                if let Some(i) = at {
                    assert_eq!(m.key(), &all[i].0[..], "trial {trial} step {step}");
                    assert_eq!(m.value(), &all[i].1[..], "trial {trial} step {step}");
                }
            }
            assert!(m.status().is_ok());
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
