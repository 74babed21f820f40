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
//! 4. The key filter's bits of an entry are set before the entry enters
//!    the skiplist, so a get that can see the entry (its snapshot was
//!    published after the insert) sees its bits.
//!
//! # The key filter
//!
//! A point read that misses a memtable still walks the skiplist from the
//! top: a dozen levels of pointer chasing, two cache misses each (node,
//! then key) — 14% of a quiesced `classic` readrandom at `medium`
//! (perf), where 98% of the reads miss the memtable. A blocked bloom
//! filter over the user keys (RocksDB's memtable bloom with whole-key
//! filtering, `memtable_prefix_bloom_size_ratio`) answers most misses with
//! one cache line: each key sets [`PROBES`] bits in one 512-bit line
//! chosen by its xxh3 hash. Sized `Options::memtable_filter_ratio` of the
//! memtable's bytes (default 1/64: 1 MiB for 64 MiB). Every entry is
//! charged at least 104 bytes (its key, trailer and per-entry charge), so
//! the filter has at least 1/64 × 104 × 8 = 13 bits per key: under 1%
//! false positives. Iterators and flushes do not use it.
//!
//! # Where the bytes live
//!
//! A skiplist node holds its internal key (inline up to
//! [`key::INLINE_KEY_BYTES`]: [`InternalKey`]) and a reference to its
//! value; the values are copied into an append-only arena of
//! [`ARENA_CHUNK_BYTES`] chunks (values over a quarter of a chunk get an
//! allocation of their own) that lives as long as the memtable, as
//! LevelDB's and RocksDB's arenas. With each value in its own heap
//! allocation, an insert allocated three times (key, value, node), the
//! nodes of a 64 MiB memtable of 4 KiB values sat one a page between the
//! values, and dropping a flushed memtable freed every value one by one.
//! Now an insert allocates its node only, those nodes take about 1.5 MB
//! side by side, and the values are freed a chunk at a time. (`bumpalo`
//! would do the bump allocation, but it doubles its chunks without bound
//! — a 64 MiB memtable's last chunk would be 32–64 MiB — where fixed
//! chunks stay reusable by the allocator from one memtable to the next.)
//! The arena's lock is taken only by the inserting thread (contract 1),
//! and readers need none: a value's bytes are written before the skiplist
//! insert publishes its node and never change afterwards.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_skiplist::map::Entry;
use crossbeam_skiplist::SkipMap;
use parking_lot::Mutex;
use xxhash_rust::xxh3::xxh3_64;

use crate::batch::WriteBatch;
use crate::error::Result;
use crate::iter::{Found, InternalIterator};
use crate::key::{self, InternalKey, InternalKeyRef, Kind, SeqNo};

/// Bytes of one chunk of a memtable's value arena (module docs): large
/// enough that a chunk's tail left unused when a value does not fit wastes
/// under 0.5% with 4 KiB values, small enough to be cheap for a memtable
/// that holds a few entries.
pub const ARENA_CHUNK_BYTES: usize = 1 << 20;

/// The value arena (module docs).
#[derive(Default)]
struct Arena {
    /// Chunks of [`ARENA_CHUNK_BYTES`] capacity, filled in order; only the
    /// last has room. A chunk is never grown past its capacity, so its
    /// buffer never moves.
    chunks: Vec<Vec<u8>>,
    /// Values over a quarter of a chunk, one allocation each.
    large: Vec<Box<[u8]>>,
}

impl Arena {
    /// Copies `bytes` in; the reference stays valid as long as the arena.
    fn copy(&mut self, bytes: &[u8]) -> ValueRef {
        let len = bytes.len();
        if len == 0 {
            return ValueRef {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                len,
            };
        }
        if len > ARENA_CHUNK_BYTES / 4 {
            let b: Box<[u8]> = bytes.into();
            let ptr = b.as_ptr();
            self.large.push(b);
            return ValueRef { ptr, len };
        }
        if !matches!(self.chunks.last(), Some(c) if c.capacity() - c.len() >= len) {
            self.chunks.push(Vec::with_capacity(ARENA_CHUNK_BYTES));
        }
        let chunk = self.chunks.last_mut().expect("a chunk with room");
        let at = chunk.len();
        // Within the capacity: no reallocation, earlier values stay put.
        chunk.extend_from_slice(bytes);
        ValueRef {
            ptr: chunk[at..].as_ptr(),
            len,
        }
    }
}

/// A value in a memtable's arena: its bytes live as long as the memtable.
#[derive(Clone, Copy)]
struct ValueRef {
    ptr: *const u8,
    len: usize,
}

// SAFETY: a `ValueRef` points at bytes that are written once, before the
// entry holding it is published, and never again; they are freed only with
// the memtable that owns both the arena and every `ValueRef` (module docs).
unsafe impl Send for ValueRef {}
unsafe impl Sync for ValueRef {}

impl ValueRef {
    /// The bytes.
    ///
    /// # Safety
    /// The memtable whose arena holds them must outlive `'a`.
    #[inline]
    unsafe fn bytes<'a>(self) -> &'a [u8] {
        std::slice::from_raw_parts(self.ptr, self.len)
    }
}

/// Bytes charged per entry on top of key and value: the skiplist node (the
/// inline key, the value's reference, the tower) and its allocation header.
const ENTRY_OVERHEAD_BYTES: usize = 96;

/// Bits a key sets in its line of the key filter.
pub const PROBES: u32 = 6;

/// The key filter (module docs): lines of 512 bits, set concurrently with
/// readers (relaxed: the skiplist insert that follows publishes them).
struct KeyFilter {
    words: Box<[AtomicU64]>,
    lines: u64,
}

impl KeyFilter {
    /// A filter of about `bytes` bytes (at least one line).
    fn new(bytes: usize) -> KeyFilter {
        let lines = (bytes / 64).max(1);
        KeyFilter {
            words: (0..lines * 8).map(|_| AtomicU64::new(0)).collect(),
            lines: lines as u64,
        }
    }

    /// The first word of `h`'s line, and the bits within the line.
    #[inline]
    fn place(&self, h: u64) -> (usize, u64) {
        let line = ((h >> 32) * self.lines) >> 32;
        (line as usize * 8, h.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    #[inline]
    fn add(&self, h: u64) {
        let (base, mut bits) = self.place(h);
        for _ in 0..PROBES {
            let b = (bits & 511) as usize;
            self.words[base + b / 64].fetch_or(1 << (b % 64), Ordering::Relaxed);
            bits >>= 9;
        }
    }

    #[inline]
    fn may_contain(&self, h: u64) -> bool {
        let (base, mut bits) = self.place(h);
        for _ in 0..PROBES {
            let b = (bits & 511) as usize;
            if self.words[base + b / 64].load(Ordering::Relaxed) & (1 << (b % 64)) == 0 {
                return false;
            }
            bits >>= 9;
        }
        true
    }
}

/// A memtable.
pub struct MemTable {
    map: SkipMap<InternalKey, ValueRef>,
    /// The values' bytes (module docs); locked only by the inserting thread.
    values: Mutex<Arena>,
    filter: Option<KeyFilter>,
    size_bytes: AtomicUsize,
    entries: AtomicU64,
    deletions: AtomicU64,
    /// Number of the WAL whose records this memtable holds.
    log_number: u64,
}

impl MemTable {
    /// An empty memtable fed by WAL `log_number`, without a key filter.
    pub fn new(log_number: u64) -> Self {
        Self::with_filter(log_number, 0)
    }

    /// An empty memtable fed by WAL `log_number` whose key filter takes
    /// `filter_bytes` (0: none).
    pub fn with_filter(log_number: u64, filter_bytes: usize) -> Self {
        MemTable {
            map: SkipMap::new(),
            values: Mutex::new(Arena::default()),
            filter: (filter_bytes > 0).then(|| KeyFilter::new(filter_bytes)),
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
        if let Some(f) = &self.filter {
            f.add(xxh3_64(user_key));
        }
        let value = self.values.lock().copy(value);
        self.map.insert(ikey, value);
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
        if let Some(f) = &self.filter {
            if !f.may_contain(xxh3_64(user_key)) {
                return None;
            }
        }
        let target = InternalKey::seek(user_key, seq);
        let e = self.map.lower_bound(Bound::Included(&target))?;
        let p = key::parse_internal_key(e.key().encoded())?;
        if p.user_key != user_key {
            return None;
        }
        Some(Found {
            seq: p.seq,
            kind: p.kind,
            value: match p.kind {
                // SAFETY: `e` borrows from `self`, which owns the arena.
                Kind::Put => unsafe { e.value().bytes() }.to_vec(),
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
    cur: Option<Entry<'static, InternalKey, ValueRef>>,
    mem: Arc<MemTable>,
}

impl MemTableIter {
    /// The skiplist with the lifetime of this iterator's `Arc`.
    fn map(&self) -> &'static SkipMap<InternalKey, ValueRef> {
        // SAFETY: the map lives as long as the `Arc<MemTable>` this iterator
        // owns. Entries derived from this reference are stored only in
        // `cur`, which is declared before `mem` and so dropped first, and
        // accessors reborrow them for `&self`, never handing out 'static.
        unsafe { &*(&self.mem.map as *const SkipMap<InternalKey, ValueRef>) }
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
        self.cur = self
            .map()
            .lower_bound(Bound::Included(InternalKeyRef::new(target)));
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
            // SAFETY: this iterator owns an `Arc` of the memtable, whose
            // arena holds the bytes; the slice borrows `self`.
            .map(|e| unsafe { e.value().bytes() })
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

    /// With a filter, every inserted key is found (no false negatives,
    /// tiny filters too) and most absent keys are answered by the filter.
    #[test]
    fn the_key_filter_never_hides_a_key() {
        for filter_bytes in [1, 64, 4096, 64 << 10] {
            let m = MemTable::with_filter(1, filter_bytes);
            for i in 0..5000u64 {
                m.add(i + 1, Kind::Put, format!("key{i}").as_bytes(), b"v");
            }
            for i in 0..5000u64 {
                assert!(
                    m.get(format!("key{i}").as_bytes(), 9999).is_some(),
                    "{filter_bytes}"
                );
            }
            let f = m.filter.as_ref().unwrap();
            let passed = (0..10_000)
                .filter(|i| f.may_contain(xxh3_64(format!("absent{i}").as_bytes())))
                .count();
            if filter_bytes == 64 << 10 {
                // 105 bits per key: false positives are rare.
                assert!(passed < 100, "{passed} of 10000 absent keys passed");
            }
        }
    }

    /// Values of every size the arena handles differently (empty, filling
    /// a chunk's tail, larger than a quarter chunk) and keys on both sides
    /// of the inline bound read back whole, in order, after later inserts.
    #[test]
    fn values_and_keys_of_every_size_read_back() {
        let m = Arc::new(MemTable::new(1));
        let sizes = [
            0,
            1,
            4096,
            ARENA_CHUNK_BYTES / 4,
            ARENA_CHUNK_BYTES / 4 + 1,
            3000,
            0,
        ];
        let mut want = Vec::new();
        for round in 0..40u64 {
            for (i, &n) in sizes.iter().enumerate() {
                let klen = [1, 23, 24, 25, 200][(round as usize + i) % 5];
                let mut k = format!("{round:03}{i}").into_bytes();
                k.resize(klen.max(k.len()), b'k');
                let v: Vec<u8> = (0..n).map(|j| (j as u64 * 31 + round) as u8).collect();
                m.add(round * 10 + i as u64 + 1, Kind::Put, &k, &v);
                want.push((k, v));
            }
        }
        for (k, v) in &want {
            assert_eq!(&m.get(k, u64::MAX >> 8).unwrap().value, v);
        }
        want.sort();
        let mut it = m.iter();
        it.seek_to_first();
        for (k, v) in &want {
            assert_eq!(key::user_key(it.key()), &k[..]);
            assert_eq!(it.value(), &v[..]);
            it.next();
        }
        assert!(!it.valid());
        let arena = m.values.lock();
        assert!(arena.chunks.len() > 1, "chunk boundaries crossed");
        assert_eq!(arena.large.len(), 40, "one allocation per large value");
    }

    /// Readers that run beside the inserting thread see every published
    /// entry with its whole value.
    #[test]
    fn readers_beside_the_inserter_see_whole_values() {
        let m = Arc::new(MemTable::new(1));
        let n = 20_000u64;
        let value = |i: u64| vec![(i % 251) as u8; (i % 700) as usize];
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..n {
                    m.add(i + 1, Kind::Put, &i.to_be_bytes(), &value(i));
                }
            });
            for _ in 0..2 {
                s.spawn(|| {
                    let mut checked = 0;
                    while checked < n {
                        let mut it = m.iter();
                        it.seek_to_first();
                        checked = 0;
                        while it.valid() {
                            let i = u64::from_be_bytes(key::user_key(it.key()).try_into().unwrap());
                            assert_eq!(it.value(), &value(i)[..]);
                            checked += 1;
                            it.next();
                        }
                    }
                });
            }
        });
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
