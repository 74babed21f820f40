//! A RangeTab buffer in PM (RangeKV Figs. 5 and 8): a 64-byte header — a
//! mirror of the MANIFEST's state of the buffer — then the data area of
//! chunks; and the reader of a buffer table (the chunks up to its used
//! bytes), with the caches that share chunks and their hash indexes
//! across the table ids one buffer takes, append after append.
//!
//! # Layout (docs/format/pm.md "RangeTab")
//!
//! ```text
//!  buffer run at region offset B = 4096 × first_page, buffer_pages pages
//! +-------------------+---------+---------+-----+---------------------------+
//! | header (64 B)     | chunk 0 | chunk 1 | ... | (room up to capacity)     |
//! +-------------------+---------+---------+-----+---------------------------+
//!  B                   B+64                 B+64+used        B+64+capacity
//!
//!  header:  0 "RangeTab"   8 u16 version=1  10 u8 state  11 u8 slot
//!          12 u32 r        16 u64 capacity  24 u64 used (the paper's cur:
//!          where the next chunk goes)       32 u64 chunks (the paper's seq)
//!          40 u64 seq_min  48 u64 seq_max   56 u32 crc32c(0..56)  60 u32 0
//! ```
//!
//! The header is a *mirror*: the MANIFEST (the buffer's table and state
//! record) is authoritative. A flush rewrites it after persisting the
//! chunk and before its edit commits; a merge leaves it stale; recovery
//! compares it with the MANIFEST and rewrites it when they differ (a torn
//! header — bad crc — too). Readers never read it.
//!
//! Worked example: RangeTab 1 slot 0 of 64 KiB after two chunks of 400
//! bytes of seqnos 100..=180, in write state: `"RangeTab" 01 00 01 00 01
//! 00 00 00 | 00 00 01 00 .. | 80 03 00 .. | 02 00 .. | 64 00 .. | b4 00
//! .. | crc | 0` (`used` = 2 × 448 = 896: each chunk is followed by
//! padding to a multiple of 64).
//!
//! # Concurrency
//!
//! [`Readers`] is shared by the design, the table opener and the level
//! views; its maps are behind mutexes held only for lookups and inserts.
//! A [`BufferReader`] is immutable.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::chunk::{self, Chunk, ChunkGroup, ChunkIter};
use super::layout::{Layout, State};
use crate::error::{Error, Result};
use crate::iter::{Found, InternalIterator, MergingIterator, TableReader};
use crate::key::SeqNo;
use crate::storage::alloc::PAGE_SIZE_BYTES;
use crate::storage::PmRegion;
use crate::version::edit::TableMeta;

/// Offset of the first chunk in a buffer's run.
pub const DATA_START: u64 = 64;
/// Bytes of the header.
pub const HEADER_BYTES: usize = 64;
/// `"RangeTab"`.
pub const MAGIC: [u8; 8] = *b"RangeTab";

/// What a buffer header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mirror {
    /// RangeTab.
    pub r: u32,
    /// Slot.
    pub slot: u8,
    /// State.
    pub state: State,
    /// Capacity (data bytes).
    pub capacity: u64,
    /// Used bytes (`cur`).
    pub used: u64,
    /// Chunks (`seq`).
    pub chunks: u64,
    /// Seqnos of the chunks (0 when empty).
    pub seq_min: SeqNo,
    /// Seqnos of the chunks.
    pub seq_max: SeqNo,
}

impl Mirror {
    /// The 64 header bytes.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..10].copy_from_slice(&1u16.to_le_bytes());
        h[10] = match self.state {
            State::Init => 0,
            State::Write => 1,
            State::Sealed => 2,
        };
        h[11] = self.slot;
        h[12..16].copy_from_slice(&self.r.to_le_bytes());
        h[16..24].copy_from_slice(&self.capacity.to_le_bytes());
        h[24..32].copy_from_slice(&self.used.to_le_bytes());
        h[32..40].copy_from_slice(&self.chunks.to_le_bytes());
        h[40..48].copy_from_slice(&self.seq_min.to_le_bytes());
        h[48..56].copy_from_slice(&self.seq_max.to_le_bytes());
        let crc = crate::coding::crc32c(&h[..56]);
        h[56..60].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decodes a header; `None` if its magic, version or crc is wrong.
    pub fn decode(h: &[u8]) -> Option<Mirror> {
        let u64_at = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&h[at..at + 8]);
            u64::from_le_bytes(a)
        };
        if h.len() < HEADER_BYTES || h[0..8] != MAGIC || h[8..10] != [1, 0] {
            return None;
        }
        let crc = u32::from_le_bytes([h[56], h[57], h[58], h[59]]);
        if crc != crate::coding::crc32c(&h[..56]) {
            return None;
        }
        Some(Mirror {
            state: match h[10] {
                0 => State::Init,
                1 => State::Write,
                2 => State::Sealed,
                _ => return None,
            },
            slot: h[11],
            r: u32::from_le_bytes([h[12], h[13], h[14], h[15]]),
            capacity: u64_at(16),
            used: u64_at(24),
            chunks: u64_at(32),
            seq_min: u64_at(40),
            seq_max: u64_at(48),
        })
    }

    /// Writes and persists the header of the buffer whose run starts at
    /// region offset `base`.
    pub fn store(&self, region: &dyn PmRegion, base: u64) -> Result<()> {
        region.write(base, &self.encode())?;
        region.persist(base, HEADER_BYTES)
    }
}

/// Region offset of the run starting at `first_page`.
pub fn page_offset(first_page: u64) -> u64 {
    first_page * PAGE_SIZE_BYTES
}

/// The chunks of one buffer table: what a version sees of a buffer.
pub struct BufferReader {
    /// RangeTab.
    pub r: u32,
    /// Slot.
    pub slot: u8,
    /// Its chunks, oldest first.
    pub chunks: Vec<Arc<Chunk>>,
    /// Probe hash indexes.
    pub hash_index: bool,
    /// With hash indexes: groups over `chunks[..covered]`, oldest first
    /// (chunk.rs, "Groups of chunks"); the rest is probed chunk by chunk.
    groups: Vec<Arc<ChunkGroup>>,
    covered: usize,
}

impl BufferReader {
    /// The reader of `chunks` (oldest first). With hash indexes, its chunk
    /// groups are taken from `prev` (a reader of the same buffer with a
    /// prefix of these chunks) where they cover the same chunks, and made
    /// otherwise — their indexes built when the first read needs them,
    /// unless the caller [`warm`](Self::warm)s them.
    pub fn new(
        r: u32,
        slot: u8,
        chunks: Vec<Arc<Chunk>>,
        hash_index: bool,
        prev: Option<&BufferReader>,
        gauge: &Arc<AtomicU64>,
    ) -> BufferReader {
        let mut groups = Vec::new();
        let mut covered = 0;
        if hash_index {
            let n = chunks.len();
            for bit in (1..usize::BITS).rev() {
                let len = 1usize << bit;
                if n & len == 0 {
                    continue;
                }
                let reused = prev.and_then(|p| {
                    p.groups
                        .iter()
                        .find(|g| g.first == covered && g.len() == len)
                        .cloned()
                });
                let group = reused.or_else(|| {
                    let run = chunks[covered..covered + len].to_vec();
                    ChunkGroup::new(covered, run, gauge).map(Arc::new)
                });
                match group {
                    Some(g) => groups.push(g),
                    // Too many entries to number: chunk by chunk from here.
                    None => break,
                }
                covered += len;
            }
        }
        BufferReader {
            r,
            slot,
            chunks,
            hash_index,
            groups,
            covered,
        }
    }

    /// Builds every chunk group's index not built yet.
    pub fn warm(&self) {
        for g in &self.groups {
            g.warm();
        }
    }

    /// The newest entry of `user_key` visible at `seq`.
    pub fn find(&self, user_key: &[u8], seq: SeqNo) -> Option<Found> {
        if !self.hash_index {
            return self
                .chunks
                .iter()
                .rev()
                .find_map(|c| c.get_hashed(user_key, None, seq));
        }
        let h = chunk::key_hash(user_key);
        self.chunks[self.covered..]
            .iter()
            .rev()
            .find_map(|c| c.get_hashed(user_key, Some(h), seq))
            .or_else(|| {
                self.groups
                    .iter()
                    .rev()
                    .find_map(|g| g.get(user_key, h, seq))
            })
    }

    /// Adds an iterator per chunk to `out`.
    pub fn add_iterators(&self, out: &mut Vec<Box<dyn InternalIterator>>) {
        for c in &self.chunks {
            out.push(Box::new(ChunkIter::new(Arc::clone(c))));
        }
    }
}

impl TableReader for BufferReader {
    fn get(&self, user_key: &[u8], seq: SeqNo) -> Result<Option<Found>> {
        Ok(self.find(user_key, seq))
    }

    fn iter(self: Arc<Self>, _fill_cache: bool) -> Box<dyn InternalIterator> {
        if self.chunks.len() == 1 {
            return Box::new(ChunkIter::new(Arc::clone(&self.chunks[0])));
        }
        let mut v = Vec::with_capacity(self.chunks.len());
        self.add_iterators(&mut v);
        Box::new(MergingIterator::new(v))
    }
}

/// Readers of buffer tables and the chunks they share.
pub struct Readers {
    region: Arc<dyn PmRegion>,
    verify: bool,
    hash_index: bool,
    /// DRAM bytes of the live hash indexes.
    pub index_bytes: Arc<AtomicU64>,
    layout: RwLock<Option<Arc<Layout>>>,
    tables: Mutex<HashMap<u64, Arc<BufferReader>>>,
    chunks: Mutex<HashMap<(u64, u64), Arc<Chunk>>>,
}

impl Readers {
    /// Readers over `region`; `verify`: check chunk crcs when a chunk is
    /// first read from PM in this process.
    pub fn new(region: Arc<dyn PmRegion>, verify: bool, hash_index: bool) -> Readers {
        Readers {
            region,
            verify,
            hash_index,
            index_bytes: Arc::new(AtomicU64::new(0)),
            layout: RwLock::new(None),
            tables: Mutex::new(HashMap::new()),
            chunks: Mutex::new(HashMap::new()),
        }
    }

    /// Sets the layout buffer tables are located in.
    pub fn set_layout(&self, layout: Arc<Layout>) {
        *self.layout.write() = Some(layout);
    }

    /// Whether hash indexes are probed.
    pub fn hash_index(&self) -> bool {
        self.hash_index
    }

    /// The gauge chunks built elsewhere must report their index to.
    pub fn gauge(&self) -> &Arc<AtomicU64> {
        &self.index_bytes
    }

    /// The reader of the buffer table `meta`, opened from PM on first use
    /// (checking every chunk up to its used bytes).
    pub fn get(&self, meta: &TableMeta) -> Result<Arc<BufferReader>> {
        if let Some(r) = self.tables.lock().get(&meta.id) {
            return Ok(Arc::clone(r));
        }
        let reader = Arc::new(self.open(meta)?);
        Ok(Arc::clone(
            self.tables.lock().entry(meta.id).or_insert(reader),
        ))
    }

    fn open(&self, meta: &TableMeta) -> Result<BufferReader> {
        let layout = self.layout.read().clone().ok_or_else(|| {
            Error::corruption(
                "MANIFEST",
                0,
                format!("RangeTab table {} but no RangeTab layout", meta.id),
            )
        })?;
        let run = match meta.pm_pages.as_slice() {
            [run] => *run,
            _ => {
                return Err(Error::corruption(
                    "MANIFEST",
                    0,
                    format!(
                        "RangeTab table {} must list exactly its buffer run",
                        meta.id
                    ),
                ))
            }
        };
        let (r, slot) = layout.locate(run.first).ok_or_else(|| {
            Error::corruption(
                "MANIFEST",
                0,
                format!(
                    "table {} lists run {run:?}, which is no RangeTab buffer",
                    meta.id
                ),
            )
        })?;
        let name = || format!("RangeTab {r} slot {slot} (table {})", meta.id);
        let base = page_offset(run.first);
        let start = base + DATA_START;
        // `size_bytes` is the MANIFEST's, any u64: saturate, never overflow.
        let end = start.saturating_add(meta.size_bytes);
        if meta.size_bytes > layout.capacity_bytes || end > self.region.len() {
            return Err(Error::corruption(
                self.region.name(),
                base,
                format!(
                    "{}: {} used bytes exceed the buffer",
                    name(),
                    meta.size_bytes
                ),
            ));
        }
        let mut chunks: Vec<Arc<Chunk>> = Vec::new();
        let mut at = start;
        let mut entries = 0u64;
        let mut last_seq = 0;
        while at < end {
            let c = self.chunk(run.first, at, end, &name)?;
            let bad_seq = c.seq_min < meta.seq_min
                || c.seq_max > meta.seq_max
                || (c.seq_min < last_seq && !chunks.is_empty());
            if bad_seq {
                return Err(Error::corruption(
                    self.region.name(),
                    at + 16,
                    format!(
                        "{}: chunk seqnos {}..={} out of order or outside the table's {}..={}",
                        name(),
                        c.seq_min,
                        c.seq_max,
                        meta.seq_min,
                        meta.seq_max
                    ),
                ));
            }
            last_seq = c.seq_max;
            entries += u64::from(c.n);
            at += u64::from(c.len).next_multiple_of(chunk::ALIGN);
            chunks.push(c);
        }
        if at != end || entries != meta.entries {
            return Err(Error::corruption(
                self.region.name(),
                base,
                format!(
                    "{}: chunks end at {} with {entries} entries; the MANIFEST says {} bytes, {} entries",
                    name(),
                    at - start,
                    meta.size_bytes,
                    meta.entries
                ),
            ));
        }
        Ok(BufferReader::new(
            r,
            slot,
            chunks,
            self.hash_index,
            None,
            &self.index_bytes,
        ))
    }

    /// The chunk at `at` of the buffer at `first_page`: the cached one if
    /// its header still matches, else parsed (and checked) from PM.
    fn chunk(
        &self,
        first_page: u64,
        at: u64,
        end: u64,
        name: &dyn Fn() -> String,
    ) -> Result<Arc<Chunk>> {
        let h = chunk::Header::read(self.region.as_ref(), at, name)?;
        if let Some(c) = self.chunks.lock().get(&(first_page, at)) {
            if c.len == h.len && c.seq_max == h.seq_max && c.n == h.n {
                return Ok(Arc::clone(c));
            }
        }
        let c = Arc::new(Chunk::parse(
            &self.region,
            at,
            end,
            self.verify,
            &self.index_bytes,
            name,
        )?);
        self.chunks.lock().insert((first_page, at), Arc::clone(&c));
        Ok(c)
    }

    /// Records the reader a flush built for table `id` and its new chunks.
    pub fn built(&self, id: u64, first_page: u64, reader: Arc<BufferReader>, new: &[Arc<Chunk>]) {
        {
            let mut cs = self.chunks.lock();
            for c in new {
                cs.insert((first_page, c.offset), Arc::clone(c));
            }
        }
        self.tables.lock().insert(id, reader);
    }

    /// Forgets the readers of tables not in `live`.
    pub fn retain(&self, live: &HashSet<u64>) {
        self.tables.lock().retain(|id, _| live.contains(id));
    }

    /// Forgets the cached chunks of the buffer at `first_page` (emptied
    /// by a merge; readers that hold them keep them).
    pub fn evict(&self, first_page: u64) {
        self.chunks.lock().retain(|(p, _), _| *p != first_page);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::key::{make_internal_key, Kind};
    use crate::storage::sim::SimRegion;
    use crate::storage::PmRegion;

    /// Chunk groups answer every read as probing each chunk does: readers
    /// of 1 to 21 chunks built flush by flush (each reusing the last one's
    /// groups), keys updated and deleted across chunks, read at the newest
    /// seqno and at every older one (snapshots).
    #[test]
    fn chunk_groups_answer_as_chunk_by_chunk_probes() {
        let region: Arc<dyn PmRegion> = Arc::new(SimRegion::new(4 << 20));
        let gauge = Arc::new(AtomicU64::new(0));
        let mut chunks: Vec<Arc<Chunk>> = Vec::new();
        let mut prev: Option<BufferReader> = None;
        let (mut at, mut seq) = (0u64, 100u64);
        for flush in 0..21u64 {
            // Each flush writes 40 of 97 keys, some as deletes.
            let mut entries: Vec<(Vec<u8>, Vec<u8>)> = (0..40u64)
                .map(|i| {
                    let k = format!("key{:03}", (i * 7 + flush * 13) % 97);
                    seq += 1;
                    let kind = if (i + flush) % 9 == 0 {
                        Kind::Delete
                    } else {
                        Kind::Put
                    };
                    let v = match kind {
                        Kind::Delete => Vec::new(),
                        _ => format!("v{flush}-{i}").into_bytes(),
                    };
                    (make_internal_key(k.as_bytes(), seq, kind), v)
                })
                .collect();
            entries.sort_by(|a, b| crate::key::compare_internal(&a.0, &b.0));
            let mut size = chunk::Size::default();
            for (k, v) in &entries {
                size.add(k.len(), v.len());
            }
            let mut b = chunk::Builder::new(&region, at, size.footprint(), &size);
            for (k, v) in &entries {
                b.add(k, v).unwrap();
            }
            let (c, footprint) = b.finish(&gauge, true).unwrap();
            at += footprint;
            chunks.push(Arc::new(c));
            let grouped = BufferReader::new(1, 0, chunks.clone(), true, prev.as_ref(), &gauge);
            if flush % 2 == 0 {
                grouped.warm();
            }
            let plain = BufferReader::new(1, 0, chunks.clone(), false, None, &gauge);
            let n = chunks.len();
            assert_eq!(grouped.covered, n & !1, "{n} chunks");
            assert_eq!(grouped.groups.len(), (n >> 1).count_ones() as usize);
            if let Some(p) = &prev {
                for g in &p.groups {
                    if grouped
                        .groups
                        .iter()
                        .any(|h| h.first == g.first && h.len() == g.len())
                    {
                        assert!(
                            grouped.groups.iter().any(|h| Arc::ptr_eq(h, g)),
                            "group reused"
                        );
                    }
                }
            }
            for k in 0..100u64 {
                let key = format!("key{k:03}");
                for at_seq in (95..=seq).step_by(7).chain([seq]) {
                    assert_eq!(
                        grouped.find(key.as_bytes(), at_seq),
                        plain.find(key.as_bytes(), at_seq),
                        "{key} at {at_seq} over {n} chunks"
                    );
                }
            }
            prev = Some(grouped);
        }
        drop(prev);
        drop(chunks);
        assert_eq!(
            gauge.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "index bytes given back"
        );
    }

    #[test]
    fn worked_example() {
        let m = Mirror {
            r: 1,
            slot: 0,
            state: State::Write,
            capacity: 64 << 10,
            used: 896,
            chunks: 2,
            seq_min: 100,
            seq_max: 180,
        };
        let h = m.encode();
        let want: [u8; 64] = [
            0x52, 0x61, 0x6e, 0x67, 0x65, 0x54, 0x61, 0x62, 1, 0, 1, 0, 1, 0, 0, 0, //
            0, 0, 1, 0, 0, 0, 0, 0, 0x80, 3, 0, 0, 0, 0, 0, 0, //
            2, 0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, //
            180, 0, 0, 0, 0, 0, 0, 0, 0xa7, 0x79, 0xee, 0, 0, 0, 0, 0,
        ];
        assert_eq!(h, want);
        assert_eq!(Mirror::decode(&h), Some(m));
        let mut torn = h;
        torn[30] ^= 1;
        assert_eq!(Mirror::decode(&torn), None);
    }

    /// A MANIFEST record whose used bytes overflow the buffer's offset is
    /// corruption (found by fuzz/fuzz_targets/rangetab.rs: `start +
    /// size_bytes` overflowed, a panic where overflow is checked).
    #[test]
    fn used_bytes_near_u64_max_are_corruption() {
        use crate::design::rangetab::layout::Source;
        use crate::stats::Tier;
        use crate::storage::alloc::PageRun;
        use crate::storage::sim::SimRegion;
        use crate::version::edit::TableFormat;

        let region: Arc<dyn PmRegion> = Arc::new(SimRegion::new(10 * 4096));
        let readers = Readers::new(Arc::clone(&region), true, true);
        readers.set_layout(Arc::new(Layout::new(
            1,
            4 * 4096 - DATA_START,
            4,
            vec![2, 6],
            Source::Pending,
            Vec::new(),
        )));
        for size_bytes in [u64::MAX, u64::MAX - 2 * 4096 - DATA_START + 1, 1 << 40] {
            let meta = TableMeta {
                id: 7,
                tier: Tier::Pm,
                format: TableFormat::RangeTab,
                size_bytes,
                smallest: Vec::new(),
                largest: Vec::new(),
                seq_min: 1,
                seq_max: 1,
                entries: 1,
                deletions: 0,
                pm_pages: vec![PageRun { first: 2, count: 4 }],
            };
            let e = readers.get(&meta).err().expect("a buffer beyond its run");
            assert!(e.is_corruption(), "{e}");
        }
    }
}
