//! Chunks (RangeKV Fig. 6): the unit a flush appends to a RangeTab buffer —
//! one memtable's entries of one key range, sorted, then each entry's
//! offset, then the count — and the DRAM hash index over a chunk.
//!
//! # Layout (docs/format/pm.md "RangeTab"; little-endian)
//!
//! ```text
//!  chunk at region offset C (a multiple of 64 inside the buffer's data area)
//! +----------------------+---------------------------+-----+---------------+-------+
//! | header (32 B)        | entries, in internal-key  | pad | offsets[n]    | n     |
//! | magic crc len n      | order: varint klen,       | 0-3 | u32 each,     | u32   |
//! | seq_min seq_max      | varint vlen, ikey, value  |     | from C        |       |
//! +----------------------+---------------------------+-----+---------------+-------+
//!  C                      C+32                                              C+len
//!
//!  0  u32 magic "RTCk"        4  u32 crc       8  u32 len (bytes to the end of n)
//! 12  u32 n                  16  u64 seq_min  24  u64 seq_max
//!  crc = crc32c(bytes 32..len ‖ bytes 8..32)  (the body is written first)
//! ```
//!
//! The next chunk starts at the next multiple of 64 after `C + len`, so a
//! chunk never shares a cache line with the one after it. A value of
//! length 0 (a tombstone) takes no bytes. `ikey` is the internal key (user
//! key ‖ u64le(seqno << 8 | kind)), at least 8 bytes.
//!
//! Worked example (the unit test `worked_example` checks every byte):
//! `apple@7 = "red"` and a tombstone `kiwi@6` form a chunk of 76 bytes:
//! header `52 54 43 6b | crc | 4c 00 00 00 | 02 00 00 00 | 06 00.. | 07
//! 00..`, then entries at 32 (`0d 03 "apple" 01 07 00 00 00 00 00 00
//! "red"`) and 50 (`0c 00 "kiwi" 00 06 00 00 00 00 00 00`), no padding
//! (the entries end at 64, a multiple of 4), offsets `20 00 00 00 32 00
//! 00 00` and n `02 00 00 00`. The next chunk would start at 128.
//!
//! # The hash index
//!
//! One per chunk, immutable, in DRAM (RangeKV §III-B "pre-constructs the
//! hash index"; the paper indexes groups of chunks — a group of one keeps
//! each index immutable, so a reader of an older version never sees an
//! entry appended after it). Open addressing over `2^k >= 2n` slots of
//! `u64`: the high 32 bits of the key's xxh3 hash, and 1 + the index of
//! the key's *newest* entry in the chunk; 0 is empty. A probe compares the
//! hash bits first and reads the key from PM only on a match; older
//! versions of the key follow the newest in the chunk. 16 bytes per
//! distinct key; the design reports the total in `tierkv.stats`. Built by
//! the flush, or on the first read of a chunk after a restart.
//!
//! # Groups of chunks
//!
//! A point read probes the chunks of its RangeTab's buffers newest first,
//! and a buffer fills with one chunk per flush: 64 or more at the paper's
//! setup, so a key absent from PM cost as many probes, each a cache miss
//! (9% of a `rangetab` readrandom's samples right after a fill). A
//! [`ChunkGroup`] indexes a run of consecutive chunks at once, each key
//! at its newest entry in the run (slots as above, numbering the entries
//! group-wide; the probe position is taken from the tag bits, which the
//! chunk indexes it is built from keep). A buffer reader of `n` chunks
//! covers them with groups of the sizes of `n`'s binary digits, largest
//! and oldest first, one chunk of an odd `n` left to its own index; the
//! reader of the next flush reuses every group over the same chunks, so
//! each entry is indexed into at most log2(n) groups over the buffer's
//! life, and a read makes at most log2(n) + 1 probes per buffer. Groups
//! are immutable (built once over chunks that never change), so a reader
//! of an older version never sees past its own chunks — the spec's bar
//! on indexes shared across versions. A snapshot's read whose key's
//! entries in its newest chunk of a group are all newer than the snapshot
//! falls back to that group's older chunks one by one.
//!
//! # Concurrency
//!
//! A [`Chunk`] is immutable once built or parsed and shared (`Arc`) by
//! every reader of every table that lists its buffer; its index is built
//! once (`OnceLock`). The bytes it reads are never written while a
//! version that can reach them lives (the buffer is reused only when no
//! table handle lists it: `design/rangetab/mod.rs`).

use std::cmp::Ordering as CmpOrdering;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use xxhash_rust::xxh3::xxh3_64;

use crate::coding::{get_varint, varint_len};
use crate::error::{Error, Result};
use crate::iter::{Found, InternalIterator};
use crate::key::{self, Kind, SeqNo};
use crate::storage::PmRegion;

/// Bytes of the chunk header.
pub const HEADER_BYTES: usize = 32;
/// `"RTCk"`.
pub const MAGIC: [u8; 4] = *b"RTCk";
/// Chunks start at multiples of this (a cache line).
pub const ALIGN: u64 = 64;

/// Bytes an entry takes in a chunk, its offset included.
#[inline]
pub fn entry_bytes(ikey_len: usize, value_len: usize) -> u64 {
    (varint_len(ikey_len as u64) + varint_len(value_len as u64) + ikey_len + value_len + 4) as u64
}

/// The size of a chunk being planned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Size {
    /// Entries.
    pub n: u64,
    /// Bytes of the entries and their offsets.
    pub entry_bytes: u64,
}

impl Size {
    /// Adds one entry.
    #[inline]
    pub fn add(&mut self, ikey_len: usize, value_len: usize) {
        self.n += 1;
        self.entry_bytes += entry_bytes(ikey_len, value_len);
    }

    /// `len` of the chunk (header to count; padding of at most 3 bytes
    /// before the offsets is counted as 3).
    pub fn len(&self) -> u64 {
        HEADER_BYTES as u64 + self.entry_bytes + 3 + 4
    }

    /// True if no entry was added.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Bytes of buffer the chunk takes, alignment included (an upper bound).
    pub fn footprint(&self) -> u64 {
        self.len().next_multiple_of(ALIGN)
    }
}

/// The hash bits a slot keeps (the rest numbers the entry, plus one).
const TAG: u64 = 0xffff_ffff_0000_0000;

/// The DRAM hash index of one chunk (module docs).
pub struct HashIndex {
    slots: Box<[u64]>,
    mask: usize,
}

impl HashIndex {
    /// An index over `(hash, entry)` pairs of the distinct keys of a chunk
    /// of `n` entries.
    fn build(n: usize, keys: impl Iterator<Item = (u64, u32)>) -> HashIndex {
        let cap = (2 * n.max(1)).next_power_of_two();
        let mut slots = vec![0u64; cap].into_boxed_slice();
        let mask = cap - 1;
        for (h, i) in keys {
            let mut pos = (h as usize) & mask;
            while slots[pos] != 0 {
                pos = (pos + 1) & mask;
            }
            slots[pos] = (h & TAG) | u64::from(i + 1);
        }
        HashIndex { slots, mask }
    }

    /// DRAM bytes.
    pub fn bytes(&self) -> u64 {
        (self.slots.len() * 8) as u64
    }
}

/// The hash of a user key.
#[inline]
pub fn key_hash(user_key: &[u8]) -> u64 {
    xxh3_64(user_key)
}

/// One chunk in PM, validated.
pub struct Chunk {
    /// Keeps the mapping alive.
    _region: Arc<dyn PmRegion>,
    base: *const u8,
    /// Region offset of the chunk.
    pub offset: u64,
    /// `len` of the header.
    pub len: u32,
    /// Entries.
    pub n: u32,
    /// Smallest seqno.
    pub seq_min: SeqNo,
    /// Largest seqno.
    pub seq_max: SeqNo,
    offsets_at: u32,
    index: OnceLock<HashIndex>,
    gauge: Arc<AtomicU64>,
}

// SAFETY: `base` points into the region's mapping, which `_region` keeps
// alive; the `len` bytes behind it were validated to lie inside the region
// and are not written while any version can reach this chunk (module
// docs), so they may be read from any thread.
unsafe impl Send for Chunk {}
// SAFETY: as above; all methods take `&self` and only read (the index is
// built once through `OnceLock`).
unsafe impl Sync for Chunk {}

impl Drop for Chunk {
    fn drop(&mut self) {
        if let Some(ix) = self.index.get() {
            self.gauge.fetch_sub(ix.bytes(), Ordering::Relaxed);
        }
    }
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunk")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("n", &self.n)
            .field("seq", &(self.seq_min..=self.seq_max))
            .finish()
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Decodes the entry at `at` of `chunk`: (ikey, value, end).
#[inline]
fn decode_entry(chunk: &[u8], at: usize) -> Option<(&[u8], &[u8], usize)> {
    let (klen, a) = get_varint(chunk.get(at..)?)?;
    let (vlen, b) = get_varint(chunk.get(at + a..)?)?;
    let k0 = at + a + b;
    let k1 = k0.checked_add(usize::try_from(klen).ok()?)?;
    let v1 = k1.checked_add(usize::try_from(vlen).ok()?)?;
    Some((chunk.get(k0..k1)?, chunk.get(k1..v1)?, v1))
}

/// What the first 32 bytes of a chunk say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// `len`.
    pub len: u32,
    /// Entries.
    pub n: u32,
    /// Seqnos.
    pub seq_min: SeqNo,
    /// Seqnos.
    pub seq_max: SeqNo,
    /// Stored crc.
    pub crc: u32,
}

impl Header {
    /// Reads the header at `offset` (checking the magic); `name` says
    /// which buffer, for errors.
    pub fn read(region: &dyn PmRegion, offset: u64, name: &dyn Fn() -> String) -> Result<Header> {
        let h = region.slice(offset, HEADER_BYTES)?;
        if h[0..4] != MAGIC {
            return Err(Error::corruption(
                region.name(),
                offset,
                format!("{}: bad chunk magic", name()),
            ));
        }
        Ok(Header {
            crc: u32_at(h, 4),
            len: u32_at(h, 8),
            n: u32_at(h, 12),
            seq_min: u64_at(h, 16),
            seq_max: u64_at(h, 24),
        })
    }
}

impl Chunk {
    /// Opens the chunk at region offset `offset`, which may extend at most
    /// to `limit` (the buffer's used end), checking its structure, its
    /// crc (with `verify`) and every entry. Failures are `Corruption` at the
    /// chunk's offset, naming the buffer (`name`).
    pub fn parse(
        region: &Arc<dyn PmRegion>,
        offset: u64,
        limit: u64,
        verify: bool,
        gauge: &Arc<AtomicU64>,
        name: &dyn Fn() -> String,
    ) -> Result<Chunk> {
        let rname = region.name().to_string();
        let corrupt = |at: u64, what: &str| {
            Error::corruption(
                rname.clone(),
                at,
                format!("{}: chunk at {offset}: {what}", name()),
            )
        };
        if offset + HEADER_BYTES as u64 > limit {
            return Err(corrupt(offset, "header beyond the used bytes"));
        }
        let h = Header::read(region.as_ref(), offset, name)?;
        let len = h.len as u64;
        if len < HEADER_BYTES as u64 + 4 || offset + len > limit {
            return Err(corrupt(offset + 8, &format!("length {len} out of bounds")));
        }
        let n = h.n as u64;
        let tail = 4 * n + 4;
        if HEADER_BYTES as u64 + tail > len {
            return Err(corrupt(offset + 12, &format!("{n} entries do not fit")));
        }
        let bytes = region.slice(offset, len as usize)?;
        if verify {
            let mut crc = crate::coding::crc32c(&bytes[HEADER_BYTES..]);
            crc = crate::coding::crc32c_append(crc, &bytes[8..HEADER_BYTES]);
            if crc != h.crc {
                return Err(corrupt(offset + 4, "checksum mismatch"));
            }
        }
        if u32_at(bytes, len as usize - 4) != h.n {
            return Err(corrupt(offset + len - 4, "trailing count differs"));
        }
        if h.seq_min > h.seq_max || h.seq_max > key::MAX_SEQNO {
            return Err(corrupt(offset + 16, "bad seqno range"));
        }
        let offsets_at = (len - tail) as usize;
        let mut prev_end = HEADER_BYTES;
        for i in 0..n as usize {
            let at = u32_at(bytes, offsets_at + 4 * i) as usize;
            let at_field = offset + (offsets_at + 4 * i) as u64;
            if at != prev_end {
                return Err(corrupt(at_field, &format!("entry {i} offset {at}")));
            }
            let Some((ik, _, end)) = decode_entry(&bytes[..offsets_at], at) else {
                return Err(corrupt(offset + at as u64, &format!("entry {i} truncated")));
            };
            let ok = key::parse_internal_key(ik)
                .is_some_and(|p| p.seq >= h.seq_min && p.seq <= h.seq_max);
            if !ok {
                return Err(corrupt(
                    offset + at as u64,
                    &format!("entry {i} malformed key"),
                ));
            }
            prev_end = end;
        }
        if offsets_at - prev_end > 3 {
            return Err(corrupt(offset + prev_end as u64, "gap after the entries"));
        }
        Ok(Chunk {
            _region: Arc::clone(region),
            base: bytes.as_ptr(),
            offset,
            len: h.len,
            n: h.n,
            seq_min: h.seq_min,
            seq_max: h.seq_max,
            offsets_at: offsets_at as u32,
            index: OnceLock::new(),
            gauge: Arc::clone(gauge),
        })
    }

    #[inline]
    fn all(&self) -> &[u8] {
        // SAFETY: `base..base+len` lies inside the mapping (checked when
        // the chunk was parsed or built) and is immutable while the chunk
        // is reachable (module docs); `_region` keeps the mapping alive.
        unsafe { std::slice::from_raw_parts(self.base, self.len as usize) }
    }

    #[inline]
    fn entry(&self, i: usize) -> (&[u8], &[u8]) {
        debug_assert!(i < self.n as usize);
        let b = self.all();
        let at = u32_at(b, self.offsets_at as usize + 4 * i) as usize;
        match decode_entry(&b[..self.offsets_at as usize], at) {
            Some((k, v, _)) => (k, v),
            None => (&[], &[]),
        }
    }

    /// Internal key of entry `i`.
    #[inline]
    pub fn ikey(&self, i: usize) -> &[u8] {
        self.entry(i).0
    }

    /// User key of entry `i`.
    #[inline]
    pub fn user_key(&self, i: usize) -> &[u8] {
        key::user_key(self.ikey(i))
    }

    /// Value of entry `i`.
    #[inline]
    pub fn value(&self, i: usize) -> &[u8] {
        self.entry(i).1
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// True for a chunk without entries (never built).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Index of the first entry `>= target` (an internal key).
    pub fn lower_bound(&self, target: &[u8]) -> usize {
        let (mut lo, mut hi) = (0usize, self.n as usize);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if key::compare_internal(self.ikey(mid), target) == CmpOrdering::Less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn index(&self) -> &HashIndex {
        self.index.get_or_init(|| {
            let mut prev: Option<&[u8]> = None;
            let mut keys = Vec::with_capacity(self.n as usize);
            for i in 0..self.n as usize {
                let uk = self.user_key(i);
                if prev != Some(uk) {
                    keys.push((key_hash(uk), i as u32));
                }
                prev = Some(uk);
            }
            let ix = HashIndex::build(self.n as usize, keys.into_iter());
            self.gauge.fetch_add(ix.bytes(), Ordering::Relaxed);
            ix
        })
    }

    /// Installs the index the flush built while writing the chunk.
    fn set_index(&self, ix: HashIndex) {
        let bytes = ix.bytes();
        if self.index.set(ix).is_ok() {
            self.gauge.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// The index of the newest entry of `user_key` (whose hash is `h`), by
    /// the hash index.
    fn probe(&self, user_key: &[u8], h: u64) -> Option<usize> {
        let ix = self.index();
        let tag = h & TAG;
        let mut pos = (h as usize) & ix.mask;
        loop {
            let s = ix.slots[pos];
            if s == 0 {
                return None;
            }
            if s & TAG == tag {
                let i = (s as u32 - 1) as usize;
                if self.user_key(i) == user_key {
                    return Some(i);
                }
            }
            pos = (pos + 1) & ix.mask;
        }
    }

    /// The newest entry of `user_key` with seqno `<= seq`.
    pub fn get(&self, user_key: &[u8], seq: SeqNo, hash_index: bool) -> Option<Found> {
        let h = if hash_index {
            Some(key_hash(user_key))
        } else {
            None
        };
        self.get_hashed(user_key, h, seq)
    }

    /// [`Chunk::get`] with the key's hash computed once by the caller
    /// (`Some`: probe the hash index; `None`: binary search).
    pub fn get_hashed(&self, user_key: &[u8], hash: Option<u64>, seq: SeqNo) -> Option<Found> {
        if self.seq_min > seq {
            return None;
        }
        let i = if let Some(h) = hash {
            self.probe(user_key, h)?
        } else {
            let i = self.lower_bound(&key::seek_key(user_key, seq));
            if i >= self.n as usize || self.user_key(i) != user_key {
                return None;
            }
            i
        };
        self.visible_from(user_key, i, seq)
    }

    /// The newest entry of `user_key` with seqno `<= seq`, from entry `i`
    /// on (an entry of `user_key` no older than the one sought).
    fn visible_from(&self, user_key: &[u8], mut i: usize, seq: SeqNo) -> Option<Found> {
        while i < self.n as usize {
            let (ik, v) = self.entry(i);
            let p = key::parse_internal_key(ik)?;
            if p.user_key != user_key {
                return None;
            }
            if p.seq <= seq {
                return Some(Found {
                    seq: p.seq,
                    kind: p.kind,
                    value: if p.kind == Kind::Delete {
                        Vec::new()
                    } else {
                        v.to_vec()
                    },
                });
            }
            i += 1;
        }
        None
    }

    /// DRAM bytes of its hash index (0 until built).
    pub fn index_bytes(&self) -> u64 {
        self.index.get().map_or(0, HashIndex::bytes)
    }

    /// Its distinct keys as the hash index holds them: the hash's tag
    /// bits and the key's newest entry (the index is built if need be).
    fn indexed(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.index()
            .slots
            .iter()
            .filter(|&&s| s != 0)
            .map(|&s| (s & TAG, (s as u32) - 1))
    }
}

/// A hash index over a run of consecutive chunks of one buffer (module
/// docs, "Groups of chunks"): each distinct key once, at its newest entry
/// in the group. Immutable: built once over chunks that never change.
pub struct ChunkGroup {
    /// Index of the first chunk in its buffer.
    pub first: usize,
    /// Oldest first.
    chunks: Vec<Arc<Chunk>>,
    /// Per chunk, the group-wide number of its first entry.
    starts: Vec<u32>,
    index: OnceLock<HashIndex>,
    gauge: Arc<AtomicU64>,
}

impl Drop for ChunkGroup {
    fn drop(&mut self) {
        if let Some(ix) = self.index.get() {
            self.gauge.fetch_sub(ix.bytes(), Ordering::Relaxed);
        }
    }
}

impl ChunkGroup {
    /// A group of `chunks` (oldest first, the buffer's chunks from
    /// `first`); `None` if they hold more entries than a slot can number.
    pub fn new(
        first: usize,
        chunks: Vec<Arc<Chunk>>,
        gauge: &Arc<AtomicU64>,
    ) -> Option<ChunkGroup> {
        let mut starts = Vec::with_capacity(chunks.len());
        let mut total = 0u32;
        for c in &chunks {
            starts.push(total);
            total = total.checked_add(c.n).filter(|t| *t < u32::MAX)?;
        }
        Some(ChunkGroup {
            first,
            chunks,
            starts,
            index: OnceLock::new(),
            gauge: Arc::clone(gauge),
        })
    }

    /// Chunks in the group.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// True for a group without chunks.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Builds the index now (by the flush that made the group, so that no
    /// reader pays for it).
    pub fn warm(&self) {
        self.index();
    }

    /// The chunk and entry of group-wide entry number `g`.
    fn locate(&self, g: u32) -> (usize, usize) {
        let k = self.starts.partition_point(|&s| s <= g) - 1;
        (k, (g - self.starts[k]) as usize)
    }

    fn index(&self) -> &HashIndex {
        self.index.get_or_init(|| {
            let total: usize = self.chunks.iter().map(|c| c.n as usize).sum();
            let cap = (2 * total.max(1)).next_power_of_two();
            let mut slots = vec![0u64; cap].into_boxed_slice();
            let mask = cap - 1;
            // Newest chunk first: a key already placed has a newer entry.
            for (k, c) in self.chunks.iter().enumerate().rev() {
                for (tag, e) in c.indexed() {
                    let mut pos = ((tag >> 32) as usize) & mask;
                    let mut newer = false;
                    while slots[pos] != 0 {
                        let s = slots[pos];
                        if s & TAG == tag {
                            let (k2, e2) = self.locate((s as u32) - 1);
                            if self.chunks[k2].user_key(e2) == c.user_key(e as usize) {
                                newer = true;
                                break;
                            }
                        }
                        pos = (pos + 1) & mask;
                    }
                    if !newer {
                        slots[pos] = tag | u64::from(self.starts[k] + e + 1);
                    }
                }
            }
            let ix = HashIndex { slots, mask };
            self.gauge.fetch_add(ix.bytes(), Ordering::Relaxed);
            ix
        })
    }

    /// The newest entry of `user_key` (whose [`key_hash`] is `h`) with
    /// seqno `<= seq` in the group's chunks.
    pub fn get(&self, user_key: &[u8], h: u64, seq: SeqNo) -> Option<Found> {
        if self.chunks.first().is_none_or(|c| c.seq_min > seq) {
            return None;
        }
        let ix = self.index();
        let tag = h & TAG;
        let mut pos = ((h >> 32) as usize) & ix.mask;
        let newest = loop {
            let s = ix.slots[pos];
            if s == 0 {
                return None;
            }
            if s & TAG == tag {
                let (k, e) = self.locate((s as u32) - 1);
                if self.chunks[k].user_key(e) == user_key {
                    if let Some(found) = self.chunks[k].visible_from(user_key, e, seq) {
                        return Some(found);
                    }
                    break k;
                }
            }
            pos = (pos + 1) & ix.mask;
        };
        // Every entry of the key in its newest chunk is newer than `seq`
        // (a snapshot's read): the older chunks, one by one.
        self.chunks[..newest]
            .iter()
            .rev()
            .find_map(|c| c.get_hashed(user_key, Some(h), seq))
    }
}

/// An iterator over one chunk.
pub struct ChunkIter {
    chunk: Arc<Chunk>,
    /// `>= n`: not valid.
    pos: usize,
    /// The current entry's internal key and value, as byte ranges of the
    /// chunk: decoded once per step, since a merge reads `key` several
    /// times per step.
    key: (u32, u32),
    value_end: u32,
}

impl ChunkIter {
    /// An unpositioned iterator over `chunk`.
    pub fn new(chunk: Arc<Chunk>) -> ChunkIter {
        ChunkIter {
            pos: usize::MAX,
            chunk,
            key: (0, 0),
            value_end: 0,
        }
    }

    /// Moves to entry `pos` (any value; `>= n` is not valid).
    fn go(&mut self, pos: usize) {
        self.pos = pos;
        if pos < self.chunk.n as usize {
            let b = self.chunk.all();
            let at = u32_at(b, self.chunk.offsets_at as usize + 4 * pos) as usize;
            // Every entry was checked when the chunk was parsed or built.
            (self.key, self.value_end) =
                match decode_entry(&b[..self.chunk.offsets_at as usize], at) {
                    Some((k, v, end)) => {
                        let k1 = end - v.len();
                        (((k1 - k.len()) as u32, k1 as u32), end as u32)
                    }
                    None => ((0, 0), 0),
                };
        }
    }
}

impl InternalIterator for ChunkIter {
    fn valid(&self) -> bool {
        self.pos < self.chunk.n as usize
    }
    fn seek_to_first(&mut self) {
        self.go(0);
    }
    fn seek_to_last(&mut self) {
        self.go((self.chunk.n as usize).wrapping_sub(1));
    }
    fn seek(&mut self, target: &[u8]) {
        self.go(self.chunk.lower_bound(target));
    }
    fn next(&mut self) {
        self.go(self.pos + 1);
    }
    fn prev(&mut self) {
        self.go(self.pos.wrapping_sub(1));
    }
    fn key(&self) -> &[u8] {
        &self.chunk.all()[self.key.0 as usize..self.key.1 as usize]
    }
    fn value(&self) -> &[u8] {
        &self.chunk.all()[self.key.1 as usize..self.value_end as usize]
    }
    fn status(&self) -> Result<()> {
        Ok(())
    }
}

/// Bytes staged in DRAM before one region write.
const STAGE_BYTES: usize = 256 << 10;

/// Writes one chunk into PM at a fixed offset, entry by entry (values are
/// copied once, memtable → stage → PM; large values go straight to PM).
pub struct Builder<'a> {
    region: &'a Arc<dyn PmRegion>,
    start: u64,
    /// Next byte to write, relative to `start`.
    pos: u64,
    /// Room from `start`.
    room: u64,
    stage: Vec<u8>,
    crc: u32,
    offsets: Vec<u32>,
    hashes: Vec<(u64, u32)>,
    last_user_key: Vec<u8>,
    seq_min: SeqNo,
    seq_max: SeqNo,
    /// Smallest internal key.
    pub smallest: Vec<u8>,
    /// Largest internal key.
    pub largest: Vec<u8>,
    /// Tombstones.
    pub deletions: u64,
}

impl<'a> Builder<'a> {
    /// A chunk at region offset `start` (a multiple of [`ALIGN`]) with
    /// `room` bytes available; `size` is the planned size.
    pub fn new(region: &'a Arc<dyn PmRegion>, start: u64, room: u64, size: &Size) -> Builder<'a> {
        debug_assert!(start.is_multiple_of(ALIGN));
        Builder {
            region,
            start,
            pos: HEADER_BYTES as u64,
            room,
            stage: Vec::with_capacity(STAGE_BYTES.min(size.entry_bytes as usize + 64)),
            crc: 0,
            offsets: Vec::with_capacity(size.n as usize),
            hashes: Vec::with_capacity(size.n as usize),
            last_user_key: Vec::new(),
            seq_min: SeqNo::MAX,
            seq_max: 0,
            smallest: Vec::new(),
            largest: Vec::new(),
            deletions: 0,
        }
    }

    fn drain(&mut self) -> Result<()> {
        if !self.stage.is_empty() {
            let at = self.start + self.pos - self.stage.len() as u64;
            self.region.write(at, &self.stage)?;
            self.crc = crate::coding::crc32c_append(self.crc, &self.stage);
            self.stage.clear();
        }
        Ok(())
    }

    fn put(&mut self, b: &[u8]) -> Result<()> {
        if b.len() >= STAGE_BYTES / 4 {
            self.drain()?;
            self.region.write(self.start + self.pos, b)?;
            self.crc = crate::coding::crc32c_append(self.crc, b);
        } else {
            if self.stage.len() + b.len() > STAGE_BYTES {
                self.drain()?;
            }
            self.stage.extend_from_slice(b);
        }
        self.pos += b.len() as u64;
        Ok(())
    }

    /// Appends an entry (in internal-key order).
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        let p = key::parse_internal_key(ikey)
            .ok_or_else(|| Error::corruption("flush input", 0, "malformed internal key"))?;
        let n = self.offsets.len() as u64 + 1;
        let need = self.pos + entry_bytes(ikey.len(), value.len()) - 4 + 3 + 4 * n + 4;
        if need > self.room || self.offsets.len() >= u32::MAX as usize - 1 {
            return Err(Error::InvalidArgument(format!(
                "{}: chunk at {} outgrew its {} bytes of room",
                self.region.name(),
                self.start,
                self.room
            )));
        }
        self.offsets.push(self.pos as u32);
        if self.offsets.len() == 1 || p.user_key != self.last_user_key.as_slice() {
            self.hashes
                .push((key_hash(p.user_key), (self.offsets.len() - 1) as u32));
            self.last_user_key.clear();
            self.last_user_key.extend_from_slice(p.user_key);
        }
        if self.smallest.is_empty() {
            self.smallest = ikey.to_vec();
        }
        self.seq_min = self.seq_min.min(p.seq);
        self.seq_max = self.seq_max.max(p.seq);
        if p.kind == Kind::Delete {
            self.deletions += 1;
        }
        let mut head = [0u8; 20];
        let mut h = 0;
        for mut v in [ikey.len() as u64, value.len() as u64] {
            while v >= 0x80 {
                head[h] = (v as u8) | 0x80;
                v >>= 7;
                h += 1;
            }
            head[h] = v as u8;
            h += 1;
        }
        let head = &head[..h];
        if self.stage.len() + h + ikey.len() + value.len() <= STAGE_BYTES {
            self.stage.extend_from_slice(head);
            self.stage.extend_from_slice(ikey);
            self.stage.extend_from_slice(value);
            self.pos += (h + ikey.len() + value.len()) as u64;
        } else {
            self.put(head)?;
            self.put(ikey)?;
            self.put(value)?;
        }
        self.largest.clear();
        self.largest.extend_from_slice(ikey);
        Ok(())
    }

    /// Entries added so far.
    pub fn entries(&self) -> usize {
        self.offsets.len()
    }

    /// Writes the padding, the offsets, the count and the header, persists
    /// the chunk and returns it (with its hash index, when asked for) and
    /// the bytes it takes in the buffer (a multiple of [`ALIGN`]).
    pub fn finish(mut self, gauge: &Arc<AtomicU64>, hash_index: bool) -> Result<(Chunk, u64)> {
        let n = self.offsets.len();
        let pad = (4 - self.pos % 4) % 4;
        let mut tail = Vec::with_capacity(pad as usize + 4 * n + 4);
        tail.resize(pad as usize, 0);
        for o in &self.offsets {
            tail.extend_from_slice(&o.to_le_bytes());
        }
        tail.extend_from_slice(&(n as u32).to_le_bytes());
        self.put(&tail)?;
        self.drain()?;
        let len = self.pos;
        let mut h = [0u8; HEADER_BYTES];
        h[0..4].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&(len as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(n as u32).to_le_bytes());
        h[16..24].copy_from_slice(&self.seq_min.to_le_bytes());
        h[24..32].copy_from_slice(&self.seq_max.to_le_bytes());
        let crc = crate::coding::crc32c_append(self.crc, &h[8..HEADER_BYTES]);
        h[4..8].copy_from_slice(&crc.to_le_bytes());
        self.region.write(self.start, &h)?;
        self.region.persist(self.start, len as usize)?;
        let bytes = self.region.slice(self.start, len as usize)?;
        let chunk = Chunk {
            _region: Arc::clone(self.region),
            base: bytes.as_ptr(),
            offset: self.start,
            len: len as u32,
            n: n as u32,
            seq_min: self.seq_min,
            seq_max: self.seq_max,
            offsets_at: (len - 4 - 4 * n as u64) as u32,
            index: OnceLock::new(),
            gauge: Arc::clone(gauge),
        };
        if hash_index {
            chunk.set_index(HashIndex::build(n, self.hashes.into_iter()));
        }
        Ok((chunk, len.next_multiple_of(ALIGN)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::key::make_internal_key;
    use crate::storage::sim::SimRegion;

    fn build(region: &Arc<dyn PmRegion>, at: u64, entries: &[(&str, u64, Kind, &str)]) -> Chunk {
        let gauge = Arc::new(AtomicU64::new(0));
        let mut size = Size::default();
        let keys: Vec<Vec<u8>> = entries
            .iter()
            .map(|(k, s, kind, _)| make_internal_key(k.as_bytes(), *s, *kind))
            .collect();
        for (k, e) in keys.iter().zip(entries) {
            size.add(k.len(), e.3.len());
        }
        let mut b = Builder::new(region, at, size.footprint(), &size);
        for (k, e) in keys.iter().zip(entries) {
            b.add(k, e.3.as_bytes()).unwrap();
        }
        let (c, footprint) = b.finish(&gauge, true).unwrap();
        assert!(footprint <= size.footprint());
        c
    }

    #[test]
    fn worked_example() {
        let sim = Arc::new(SimRegion::new(64 << 10));
        let region: Arc<dyn PmRegion> = sim;
        let c = build(
            &region,
            4096,
            &[
                ("apple", 7, Kind::Put, "red"),
                ("kiwi", 6, Kind::Delete, ""),
            ],
        );
        assert_eq!(c.len, 76);
        let b = region.slice(4096, 76).unwrap().to_vec();
        assert_eq!(&b[0..4], b"RTCk");
        assert_eq!(
            &b[4..8],
            &[0x9d, 0xda, 0x77, 0x93],
            "crc (docs/format/pm.md)"
        );
        assert_eq!(&b[8..16], &[76, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(
            &b[16..32],
            &[6, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]
        );
        let mut e0 = vec![13, 3];
        e0.extend_from_slice(b"apple");
        e0.extend_from_slice(&[1, 7, 0, 0, 0, 0, 0, 0]);
        e0.extend_from_slice(b"red");
        assert_eq!(&b[32..50], &e0[..]);
        let mut e1 = vec![12, 0];
        e1.extend_from_slice(b"kiwi");
        e1.extend_from_slice(&[0, 6, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[50..64], &e1[..]);
        assert_eq!(&b[64..76], &[32, 0, 0, 0, 50, 0, 0, 0, 2, 0, 0, 0]);
        let gauge = Arc::new(AtomicU64::new(0));
        let p = Chunk::parse(&region, 4096, 4096 + 76, true, &gauge, &|| "t".into()).unwrap();
        assert_eq!(p.user_key(1), b"kiwi");
        assert_eq!(p.get(b"apple", 10, true).unwrap().value, b"red");
        assert_eq!(p.get(b"apple", 6, true), None);
        assert_eq!(p.get(b"kiwi", 10, false).unwrap().kind, Kind::Delete);
        assert!(gauge.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn versions_and_probes_with_and_without_the_index() {
        let region: Arc<dyn PmRegion> = Arc::new(SimRegion::new(1 << 20));
        let mut entries = Vec::new();
        let keys: Vec<String> = (0..300).map(|i| format!("k{i:04}")).collect();
        for (i, k) in keys.iter().enumerate() {
            for s in (0..(i % 3 + 1) as u64).rev() {
                entries.push((k.as_str(), 1000 + 10 * i as u64 + s, Kind::Put, "v"));
            }
        }
        let c = build(&region, 0, &entries);
        for hash in [true, false] {
            for (i, k) in keys.iter().enumerate() {
                let newest = 1000 + 10 * i as u64 + (i % 3) as u64;
                assert_eq!(
                    c.get(k.as_bytes(), u64::MAX >> 8, hash).unwrap().seq,
                    newest
                );
                assert_eq!(
                    c.get(k.as_bytes(), 1000 + 10 * i as u64, hash).unwrap().seq,
                    1000 + 10 * i as u64
                );
                assert_eq!(c.get(k.as_bytes(), 999 + 10 * i as u64, hash), None);
            }
            assert_eq!(c.get(b"k9999", u64::MAX >> 8, hash), None);
        }
    }

    #[test]
    fn corruption_names_the_chunk() {
        let sim = Arc::new(SimRegion::new(64 << 10));
        let region: Arc<dyn PmRegion> = sim.clone();
        let c = build(
            &region,
            0,
            &[("a", 1, Kind::Put, "xyz"), ("b", 2, Kind::Put, "w")],
        );
        let len = u64::from(c.len);
        let gauge = Arc::new(AtomicU64::new(0));
        for at in 0..len {
            let mut b = [0u8; 1];
            region.read(at, &mut b).unwrap();
            region.write(at, &[b[0] ^ 0x40]).unwrap();
            match Chunk::parse(&region, 0, len, true, &gauge, &|| {
                "RangeTab 3 slot 1".into()
            }) {
                Err(e) => {
                    assert!(e.is_corruption(), "{e}");
                    assert!(e.to_string().contains("RangeTab 3 slot 1"), "{e}");
                }
                Ok(_) => panic!("flip at {at} not detected"),
            }
            region.write(at, &b).unwrap();
        }
        assert!(Chunk::parse(&region, 0, len, true, &gauge, &|| String::new()).is_ok());
        assert!(Chunk::parse(&region, 0, len - 1, true, &gauge, &|| String::new()).is_err());
    }
}
