//! The memtable: a concurrent skiplist of internal keys in DRAM.
//!
//! Concurrency contract:
//! 1. Inserts come from one thread at a time (the group-commit leader);
//!    readers and iterators run concurrently with it, lock-free
//!    (crossbeam-skiplist).
//! 2. Every inserted internal key is unique (seqnos are unique), so an
//!    insert never replaces an entry.
//! 3. Once immutable (no more inserts), a memtable is read by gets,
//!    iterators and the flush, and dropped when the last `Arc` goes.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_skiplist::map::Entry;
use crossbeam_skiplist::SkipMap;

use crate::batch::WriteBatch;
use crate::error::Result;
use crate::iter::{Found, InternalIterator};
use crate::key::{self, InternalKey, Kind, SeqNo};

/// Bytes charged per entry on top of key and value (skiplist node, Vec headers).
const ENTRY_OVERHEAD_BYTES: usize = 96;

/// A memtable.
pub struct MemTable {
    map: SkipMap<InternalKey, Vec<u8>>,
    size_bytes: AtomicUsize,
    entries: AtomicU64,
    deletions: AtomicU64,
    /// Number of the WAL whose records this memtable holds.
    log_number: u64,
}

impl MemTable {
    /// An empty memtable fed by WAL `log_number`.
    pub fn new(log_number: u64) -> Self {
        MemTable {
            map: SkipMap::new(),
            size_bytes: AtomicUsize::new(0),
            entries: AtomicU64::new(0),
            deletions: AtomicU64::new(0),
            log_number,
        }
    }

    /// The WAL this memtable belongs to.
    pub fn log_number(&self) -> u64 {
        self.log_number
    }

    /// Approximate memory used, in bytes.
    pub fn size_bytes(&self) -> usize {
        self.size_bytes.load(Ordering::Relaxed)
    }

    /// Key and value bytes (what writers wrote), without the per-entry
    /// charge.
    pub fn payload_bytes(&self) -> u64 {
        let charge = (key::TRAILER_LEN + ENTRY_OVERHEAD_BYTES) as u64;
        (self.size_bytes() as u64).saturating_sub(self.entries().saturating_mul(charge))
    }

    /// Number of entries.
    pub fn entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// Number of tombstones.
    pub fn deletions(&self) -> u64 {
        self.deletions.load(Ordering::Relaxed)
    }

    /// True if nothing was inserted.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Inserts one entry. REQUIRES: single inserting thread; unique key.
    pub fn add(&self, seq: SeqNo, kind: Kind, user_key: &[u8], value: &[u8]) {
        let ikey = InternalKey::new(user_key, seq, kind);
        debug_assert!(!self.map.contains_key(&ikey), "duplicate internal key");
        self.size_bytes.fetch_add(
            user_key.len() + key::TRAILER_LEN + value.len() + ENTRY_OVERHEAD_BYTES,
            Ordering::Relaxed,
        );
        self.entries.fetch_add(1, Ordering::Relaxed);
        if kind == Kind::Delete {
            self.deletions.fetch_add(1, Ordering::Relaxed);
        }
        self.map.insert(ikey, value.to_vec());
    }

    /// Inserts every record of a committed batch (seqnos from the batch header).
    pub fn apply(&self, batch: &WriteBatch) -> Result<()> {
        for (seq, r) in (batch.seqno()..).zip(batch.iter()) {
            let (kind, k, v) = r?;
            self.add(seq, kind, k, v);
        }
        Ok(())
    }

    /// The newest entry for `user_key` with seqno `<= seq`.
    pub fn get(&self, user_key: &[u8], seq: SeqNo) -> Option<Found> {
        let target = InternalKey(key::seek_key(user_key, seq));
        let e = self.map.lower_bound(Bound::Included(&target))?;
        let p = key::parse_internal_key(e.key().encoded())?;
        if p.user_key != user_key {
            return None;
        }
        Some(Found {
            seq: p.seq,
            kind: p.kind,
            value: match p.kind {
                Kind::Put => e.value().clone(),
                Kind::Delete => Vec::new(),
            },
        })
    }

    /// An iterator that keeps the memtable alive.
    pub fn iter(self: &Arc<Self>) -> MemTableIter {
        MemTableIter {
            cur: None,
            mem: Arc::clone(self),
        }
    }
}

/// Iterator over a memtable; holds an `Arc` to it.
pub struct MemTableIter {
    // Field order matters: `cur` borrows from `mem` and must drop first.
    cur: Option<Entry<'static, InternalKey, Vec<u8>>>,
    mem: Arc<MemTable>,
}

impl MemTableIter {
    /// The skiplist with the lifetime of this iterator's `Arc`.
    fn map(&self) -> &'static SkipMap<InternalKey, Vec<u8>> {
        // SAFETY: the map lives as long as the `Arc<MemTable>` this iterator
        // owns. Entries derived from this reference are stored only in
        // `cur`, which is declared before `mem` and so dropped first, and
        // accessors reborrow them for `&self`, never handing out 'static.
        unsafe { &*(&self.mem.map as *const SkipMap<InternalKey, Vec<u8>>) }
    }
}

impl InternalIterator for MemTableIter {
    fn valid(&self) -> bool {
        self.cur.is_some()
    }
    fn seek_to_first(&mut self) {
        self.cur = self.map().front();
    }
    fn seek_to_last(&mut self) {
        self.cur = self.map().back();
    }
    fn seek(&mut self, target: &[u8]) {
        let t = InternalKey(target.to_vec());
        self.cur = self.map().lower_bound(Bound::Included(&t));
    }
    fn next(&mut self) {
        self.cur = self.cur.as_ref().and_then(|e| e.next());
    }
    fn prev(&mut self) {
        self.cur = self.cur.as_ref().and_then(|e| e.prev());
    }
    fn key(&self) -> &[u8] {
        self.cur.as_ref().map(|e| e.key().encoded()).unwrap_or(&[])
    }
    fn value(&self) -> &[u8] {
        self.cur
            .as_ref()
            .map(|e| e.value().as_slice())
            .unwrap_or(&[])
    }
    fn status(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_sees_newest_visible_version() {
        let m = MemTable::new(1);
        m.add(1, Kind::Put, b"a", b"1");
        m.add(2, Kind::Put, b"a", b"2");
        m.add(3, Kind::Delete, b"a", b"");
        m.add(4, Kind::Put, b"b", b"x");
        assert_eq!(m.get(b"a", 1).unwrap().value, b"1");
        assert_eq!(m.get(b"a", 2).unwrap().value, b"2");
        assert_eq!(m.get(b"a", 9).unwrap().kind, Kind::Delete);
        assert!(m.get(b"a", 0).is_none());
        assert!(m.get(b"c", 9).is_none());
        assert!(m.get(b"", 9).is_none());
    }

    #[test]
    fn iterator_walks_both_ways() {
        let m = Arc::new(MemTable::new(1));
        for (i, k) in [b"c", b"a", b"b"].iter().enumerate() {
            m.add(i as u64 + 1, Kind::Put, *k, b"v");
        }
        let mut it = m.iter();
        it.seek_to_first();
        let mut keys = vec![];
        while it.valid() {
            keys.push(key::user_key(it.key()).to_vec());
            it.next();
        }
        assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        it.seek_to_last();
        assert_eq!(key::user_key(it.key()), b"c");
        it.prev();
        assert_eq!(key::user_key(it.key()), b"b");
        it.seek(&key::seek_key(b"bb", 100));
        assert_eq!(key::user_key(it.key()), b"c");
        drop(m);
        it.prev();
        assert_eq!(key::user_key(it.key()), b"b");
    }
}
