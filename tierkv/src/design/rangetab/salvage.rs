//! The RangeTab buffers of `rangetab` for `Db::repair`
//! (`design/salvage.rs`): every buffer found by its header's magic at a
//! page start, with the chunks that verify, merged into one source per
//! buffer. (The engine's PM WALs are read by `db/repair.rs` itself.)
//!
//! # What is read
//!
//! Buffers are allocated when the database is created and never freed,
//! so every buffer's run is among the allocated pages. For each page
//! whose first 8 bytes are `"RangeTab"` (docs/format/pm.md "RangeTab"):
//!
//! * **Header verifies** (magic, version, crc — [`Mirror::decode`]): an
//!   init buffer is skipped (it holds no chunk of its current fill: a
//!   flush writes the chunk, then the header, so a chunk past an init
//!   header is in a WAL still, and bytes of an earlier fill went into the
//!   SSTs). A write or sealed buffer is read from its first chunk up to
//!   the header's `used`: the header is persisted after every append and
//!   before the flush's edit commits, so it covers every chunk whose WAL
//!   may be gone; chunks past `used` are the garbage of a crash (their
//!   WAL is still there) or of an earlier fill, and are not read. A
//!   header a merge left stale (the MANIFEST says init, the header still
//!   write or sealed) is read the same way: its chunks are older than the
//!   SSTs they went into, so seqnos make them harmless.
//! * **Header torn or damaged** (magic but no valid crc), and pages
//!   outside every buffer found whose bytes 64..68 are a chunk's magic
//!   (a header whose magic itself is damaged): the chunks are read from
//!   the first one on while they verify and their seqnos do not go down,
//!   up to the end of the region or the first page that is not
//!   allocated; the first that does not ends the buffer (with no `used`,
//!   nothing says where the chunks of this fill stop, and the chunks of
//!   an earlier fill that may follow are older: seqnos going down mark
//!   them).
//!
//! Each chunk is opened with the design's own decoder ([`Chunk::parse`]:
//! magic, length inside the limit, crc, trailing count, seqno range,
//! every entry's offset and key) and its entries must be in internal-key
//! order. **Past a chunk that fails** (inside a verified `used`), the
//! reader resynchronises: it tries every later 64-byte aligned offset
//! below `used` (chunks start at multiples of 64) and goes on from the
//! first chunk that verifies and whose seqnos are not below those of the
//! last chunk read (chunks of one fill are appended in seqno order), so
//! one damaged chunk loses only its own entries. The bytes skipped are
//! reported with their offsets.
//!
//! Tombstones are entries like any other and are returned. A buffer's
//! chunks may hold versions of the same keys (each chunk is sorted, the
//! chunks overlap), so the source is the buffer's merging iterator over
//! its chunks (`BufferReader`), in internal-key order.

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::buffer::{BufferReader, Mirror, DATA_START, HEADER_BYTES, MAGIC};
use super::chunk::{self, Chunk, ChunkIter};
use super::layout::State;
use crate::design::salvage::{Salvaged, SourceKind};
use crate::iter::{InternalIterator, TableReader};
use crate::key::{self, SeqNo};
use crate::storage::alloc::PAGE_SIZE_BYTES;
use crate::storage::PmRegion;

/// Every RangeTab buffer whose run starts at one of `pages` (the
/// allocated pages), as one source each.
pub fn salvage(region: &Arc<dyn PmRegion>, pages: &[u64]) -> Vec<Salvaged> {
    let allocated: HashSet<u64> = pages.iter().copied().collect();
    let mut pages = pages.to_vec();
    pages.sort_unstable();
    pages.dedup();
    let mut out = Vec::new();
    // Byte ranges of the buffers found (their whole capacity when the
    // header verifies, else what was read), so that a page inside one is
    // not taken for a buffer of its own.
    let mut covered = Covered::default();
    let mut unmarked = Vec::new();
    for page in pages {
        let Some(base) = page.checked_mul(PAGE_SIZE_BYTES) else {
            continue;
        };
        let Ok(h) = region.slice(base, HEADER_BYTES) else {
            continue;
        };
        // Inside a buffer found already: its chunks' bytes (a value may
        // hold anything), not a buffer of its own.
        if covered.contains(base) {
            continue;
        }
        if h[0..8] != MAGIC {
            unmarked.push(base);
            continue;
        }
        let name = format!("{} buffer at offset {base}", region.name());
        match Mirror::decode(h) {
            Some(m) => {
                covered.add(
                    base,
                    base.saturating_add(DATA_START)
                        .saturating_add(m.capacity)
                        .min(region.len()),
                );
                if m.state == State::Init {
                    continue;
                }
                let name = format!(
                    "{} RangeTab {} slot {} ({}) at offset {base}",
                    region.name(),
                    m.r,
                    m.slot,
                    m.state.name()
                );
                let end = (base + DATA_START)
                    .checked_add(m.used)
                    .filter(|&e| m.used <= m.capacity && e <= region.len());
                match end {
                    Some(end) => {
                        let mut b = Buffer::new(region, base, name, m.seq_max);
                        b.read_within(end);
                        if b.problems.is_empty() && b.chunks.len() as u64 != m.chunks {
                            b.problems.push(format!(
                                "{}: its header counts {} chunks, {} found up to its {} used bytes",
                                b.name,
                                m.chunks,
                                b.chunks.len(),
                                m.used
                            ));
                        }
                        out.push(b.finish(m.r, m.slot));
                    }
                    None => {
                        let mut b = Buffer::new(region, base, name, m.seq_max);
                        b.problems.push(format!(
                            "{}: header's {} used bytes exceed its capacity {} or the region; chunks read while they verify",
                            b.name, m.used, m.capacity
                        ));
                        b.scan(&allocated);
                        out.push(b.finish(m.r, m.slot));
                    }
                }
            }
            None => {
                let mut b = Buffer::new(region, base, name, 0);
                b.problems.push(format!(
                    "{}: buffer header fails its checksum (torn or damaged); chunks read while they verify",
                    b.name
                ));
                b.scan(&allocated);
                covered.add(base, b.read_end);
                out.push(b.finish(u32::MAX, u8::MAX));
            }
        }
    }
    // Buffers whose header's magic is gone: a chunk at DATA_START of a
    // page that no buffer found covers.
    for base in unmarked {
        if covered.contains(base) {
            continue;
        }
        let Some(at) = base.checked_add(DATA_START) else {
            continue;
        };
        if region.slice(at, 4).ok() != Some(&chunk::MAGIC[..]) {
            continue;
        }
        let name = format!("{} buffer at offset {base}", region.name());
        let mut b = Buffer::new(region, base, name, 0);
        b.problems.push(format!(
            "{}: a chunk at offset {at} but no RangeTab header before it (damaged); chunks read while they verify",
            b.name
        ));
        b.scan(&allocated);
        covered.add(base, b.read_end);
        out.push(b.finish(u32::MAX, u8::MAX));
    }
    out
}

/// Disjoint byte ranges `[lo, hi)`, sorted.
#[derive(Default)]
struct Covered(Vec<(u64, u64)>);

impl Covered {
    fn add(&mut self, lo: u64, hi: u64) {
        let i = self.0.partition_point(|r| r.0 <= lo);
        self.0.insert(i, (lo, hi));
    }

    fn contains(&self, at: u64) -> bool {
        let i = self.0.partition_point(|r| r.0 <= at);
        i > 0 && at < self.0[i - 1].1
    }
}

/// One buffer being read.
struct Buffer<'a> {
    region: &'a Arc<dyn PmRegion>,
    base: u64,
    name: String,
    chunks: Vec<Arc<Chunk>>,
    /// Where the chunks read end (the last one's end, aligned).
    read_end: u64,
    seq_max: SeqNo,
    problems: Vec<String>,
    gauge: Arc<AtomicU64>,
}

impl<'a> Buffer<'a> {
    fn new(region: &'a Arc<dyn PmRegion>, base: u64, name: String, seq_max: SeqNo) -> Buffer<'a> {
        Buffer {
            region,
            base,
            name,
            chunks: Vec::new(),
            read_end: base.saturating_add(DATA_START),
            seq_max,
            problems: Vec::new(),
            gauge: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The chunk at `at`, if it verifies, extends at most to `limit`, is
    /// sorted and does not go back in seqnos; else why not.
    fn open(&self, at: u64, limit: u64) -> Result<Arc<Chunk>, String> {
        let name = || self.name.clone();
        let c = Chunk::parse(self.region, at, limit, true, &self.gauge, &name)
            .map_err(|e| e.to_string())?;
        if let Some(last) = self.chunks.last() {
            if c.seq_min < last.seq_max {
                return Err(format!(
                    "{}: chunk at offset {at}: seqnos {}..={} below those of the chunk before it ({}..={}): bytes of an earlier fill",
                    self.name, c.seq_min, c.seq_max, last.seq_min, last.seq_max
                ));
            }
        }
        let c = Arc::new(c);
        let mut it = ChunkIter::new(Arc::clone(&c));
        it.seek_to_first();
        let mut prev: Option<Vec<u8>> = None;
        while it.valid() {
            if prev
                .as_deref()
                .is_some_and(|p| key::compare_internal(p, it.key()).is_gt())
            {
                return Err(format!(
                    "{}: chunk at offset {at}: entries out of order",
                    self.name
                ));
            }
            prev = Some(it.key().to_vec());
            it.next();
        }
        Ok(c)
    }

    fn take(&mut self, at: u64, c: Arc<Chunk>) -> u64 {
        let next = at.saturating_add(u64::from(c.len).next_multiple_of(chunk::ALIGN));
        self.seq_max = self.seq_max.max(c.seq_max);
        self.read_end = next;
        self.chunks.push(c);
        next
    }

    /// Reads the chunks from the first one up to `end` (a verified used
    /// end), resynchronising past a chunk that fails.
    fn read_within(&mut self, end: u64) {
        let mut at = self.base + DATA_START;
        while at < end {
            match self.open(at, end) {
                Ok(c) => at = self.take(at, c),
                Err(why) => {
                    let mut next = at.saturating_add(chunk::ALIGN);
                    let found = loop {
                        if next >= end {
                            break None;
                        }
                        if self.region.slice(next, 4).ok() == Some(&chunk::MAGIC[..]) {
                            if let Ok(c) = self.open(next, end) {
                                break Some(c);
                            }
                        }
                        next = next.saturating_add(chunk::ALIGN);
                    };
                    let resumed = next.min(end);
                    self.problems.push(format!(
                        "{why}: bytes {at}..{resumed} of the buffer's used bytes skipped{}",
                        if found.is_some() {
                            ", read again from the next chunk that verifies"
                        } else {
                            " (no chunk after them verifies)"
                        }
                    ));
                    match found {
                        Some(c) => at = self.take(next, c),
                        None => break,
                    }
                }
            }
        }
    }

    /// Reads the chunks from the first one while they verify, inside the
    /// region and the allocated pages (no `used` to stop at).
    fn scan(&mut self, allocated: &HashSet<u64>) {
        // A buffer's run is allocated whole: the chunks may extend to the
        // end of the allocated pages that follow its first.
        let mut page = self.base / PAGE_SIZE_BYTES + 1;
        while page
            .checked_mul(PAGE_SIZE_BYTES)
            .is_some_and(|b| b < self.region.len())
            && allocated.contains(&page)
        {
            page += 1;
        }
        let limit = page.saturating_mul(PAGE_SIZE_BYTES).min(self.region.len());
        let mut at = self.base.saturating_add(DATA_START);
        loop {
            if at.saturating_add(chunk::HEADER_BYTES as u64) > limit {
                break;
            }
            if self.region.slice(at, 4).ok() != Some(&chunk::MAGIC[..]) {
                break;
            }
            match self.open(at, limit) {
                Ok(c) => at = self.take(at, c),
                Err(why) => {
                    self.problems.push(format!(
                        "{why}: the buffer's readable part ends at offset {at}"
                    ));
                    break;
                }
            }
        }
    }

    fn finish(self, r: u32, slot: u8) -> Salvaged {
        let reader = Arc::new(BufferReader::new(
            r,
            slot,
            self.chunks,
            false,
            None,
            &Arc::new(std::sync::atomic::AtomicU64::new(0)),
        ));
        Salvaged {
            kind: SourceKind::PmRangeTab,
            name: self.name,
            entries: Some(reader.iter(false)),
            seq_max: self.seq_max,
            problems: self.problems,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::key::{make_internal_key, Kind};
    use crate::storage::sim::SimRegion;

    const BUF_PAGES: u64 = 4;
    const CAPACITY: u64 = BUF_PAGES * PAGE_SIZE_BYTES - DATA_START;
    /// Buffer (0, 0) at page 2, (0, 1) at page 6, (1, 0) at page 10.
    const FIRST: [u64; 3] = [2, 6, 10];
    const PAGES: u64 = 16;

    type Entry = (Vec<u8>, Vec<u8>);

    fn region() -> (Arc<SimRegion>, Arc<dyn PmRegion>) {
        let sim = Arc::new(SimRegion::new((PAGES * PAGE_SIZE_BYTES) as usize));
        let region: Arc<dyn PmRegion> = sim.clone();
        (sim, region)
    }

    fn all_pages() -> Vec<u64> {
        (1..PAGES).collect()
    }

    /// Chunk `c` of a buffer: keys k{c*3+j*7 % 40}, seqnos from `seq`,
    /// every fifth a tombstone; sorted by internal key.
    fn entries(c: u64, seq: SeqNo, n: u64) -> Vec<Entry> {
        let mut v: Vec<Entry> = (0..n)
            .map(|j| {
                let k = format!("k{:03}", (c * 3 + j * 7) % 40);
                let s = seq + j;
                if s.is_multiple_of(5) {
                    (make_internal_key(k.as_bytes(), s, Kind::Delete), Vec::new())
                } else {
                    (
                        make_internal_key(k.as_bytes(), s, Kind::Put),
                        format!("v{s}").repeat(1 + (s % 4) as usize).into_bytes(),
                    )
                }
            })
            .collect();
        v.sort_by(|a, b| key::compare_internal(&a.0, &b.0));
        v.dedup_by(|a, b| key::user_key(&a.0) == key::user_key(&b.0) && a.0 == b.0);
        v
    }

    /// Appends a chunk of `e` at `used` of the buffer at `first`; returns
    /// the new used bytes.
    fn append(region: &Arc<dyn PmRegion>, first: u64, used: u64, e: &[Entry]) -> u64 {
        let mut size = chunk::Size::default();
        for (k, v) in e {
            size.add(k.len(), v.len());
        }
        let start = first * PAGE_SIZE_BYTES + DATA_START + used;
        let mut b = chunk::Builder::new(region, start, CAPACITY - used, &size);
        for (k, v) in e {
            b.add(k, v).unwrap();
        }
        let (_, footprint) = b.finish(&Arc::new(AtomicU64::new(0)), false).unwrap();
        used + footprint
    }

    fn header(region: &Arc<dyn PmRegion>, first: u64, state: State, used: u64, chunks: u64) {
        Mirror {
            r: 0,
            slot: 0,
            state,
            capacity: CAPACITY,
            used,
            chunks,
            seq_min: 1,
            seq_max: 1000,
        }
        .store(region.as_ref(), first * PAGE_SIZE_BYTES)
        .unwrap();
    }

    /// A buffer of `n` chunks of 12 entries at `first` (seqnos from
    /// `seq`), its header stored; returns its entries and used bytes.
    fn buffer(region: &Arc<dyn PmRegion>, first: u64, seq: SeqNo, n: u64) -> (Vec<Entry>, u64) {
        let mut all = Vec::new();
        let mut used = 0;
        for c in 0..n {
            let e = entries(c, seq + 12 * c, 12);
            used = append(region, first, used, &e);
            all.extend(e);
        }
        header(region, first, State::Write, used, n);
        all.sort_by(|a, b| key::compare_internal(&a.0, &b.0));
        (all, used)
    }

    fn read(s: &mut Salvaged) -> Vec<Entry> {
        let it = s.entries.as_mut().unwrap();
        it.seek_to_first();
        let mut v = Vec::new();
        while it.valid() {
            v.push((it.key().to_vec(), it.value().to_vec()));
            it.next();
        }
        it.status().unwrap();
        v
    }

    #[test]
    fn reads_every_chunk_up_to_used_in_internal_key_order() {
        let (_sim, region) = region();
        let (want0, used0) = buffer(&region, FIRST[0], 100, 4);
        let (want1, _) = buffer(&region, FIRST[1], 500, 1);
        // A chunk past buffer 0's used bytes (a crash before its header)
        // is not read; an init buffer with a chunk is skipped.
        append(&region, FIRST[0], used0, &entries(9, 900, 5));
        append(&region, FIRST[2], 0, &entries(9, 950, 5));
        header(&region, FIRST[2], State::Init, 0, 0);
        let mut found = salvage(&region, &all_pages());
        assert_eq!(found.len(), 2);
        for (s, want) in found.iter_mut().zip([want0, want1]) {
            assert!(s.problems.is_empty(), "{:?}", s.problems);
            assert_eq!(s.kind, SourceKind::PmRangeTab);
            let got = read(s);
            assert_eq!(got, want);
            assert!(got
                .iter()
                .any(|(k, _)| key::parse_internal_key(k).unwrap().kind == Kind::Delete));
        }
        assert!(found[0]
            .name
            .contains(&format!("offset {}", FIRST[0] * 4096)));
        assert_eq!(found[0].seq_max, 1000);
        // Pages the allocator says are free are not looked at.
        assert!(salvage(&region, &[1, 10, 11]).is_empty());
    }

    #[test]
    fn a_damaged_chunk_is_skipped_and_the_chunks_after_it_are_read() {
        let (sim, region) = region();
        let mut chunks = Vec::new();
        let mut used = 0;
        for c in 0..4 {
            let at = FIRST[0] * PAGE_SIZE_BYTES + DATA_START + used;
            let e = entries(c, 100 + 12 * c, 12);
            used = append(&region, FIRST[0], used, &e);
            chunks.push((at, e));
        }
        header(&region, FIRST[0], State::Sealed, used, 4);
        // Chunk 1: a byte of an entry; chunk 2: its length field.
        for (i, off) in [(1usize, 40u64), (2, 8)] {
            sim.corrupt(chunks[i].0 + off, 0x10).unwrap();
        }
        let mut found = salvage(&region, &all_pages());
        assert_eq!(found.len(), 1);
        let s = &mut found[0];
        assert!(
            s.problems
                .iter()
                .any(|p| p.contains(&format!("{}", chunks[1].0))),
            "{:?}",
            s.problems
        );
        let mut want: Vec<Entry> = [&chunks[0].1, &chunks[3].1]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        want.sort_by(|a, b| key::compare_internal(&a.0, &b.0));
        assert_eq!(read(s), want);
    }

    #[test]
    fn a_torn_or_unmarked_header_reads_chunks_while_they_verify() {
        for damage in [20u64, 0] {
            let (sim, region) = region();
            let (want, used) = buffer(&region, FIRST[0], 100, 3);
            // Bytes of an earlier fill after the used bytes: older seqnos.
            append(&region, FIRST[0], used, &entries(7, 10, 6));
            let (want1, _) = buffer(&region, FIRST[1], 500, 2);
            sim.corrupt(FIRST[0] * PAGE_SIZE_BYTES + damage, 0x01)
                .unwrap();
            let mut found = salvage(&region, &all_pages());
            assert_eq!(found.len(), 2, "damage at {damage}");
            let s = found
                .iter_mut()
                .find(|s| s.name.contains(&format!("offset {}", FIRST[0] * 4096)))
                .unwrap();
            assert!(!s.problems.is_empty());
            assert_eq!(read(s), want, "damage at {damage}");
            let s1 = found
                .iter_mut()
                .find(|s| s.name.contains(&format!("offset {}", FIRST[1] * 4096)))
                .unwrap();
            assert_eq!(read(s1), want1);
        }
    }

    /// Any byte of a buffer flipped: no panic, and every entry returned
    /// is one that was written.
    #[test]
    fn any_damage_returns_only_entries_that_were_written() {
        let (sim, region) = region();
        let (mut written, _) = buffer(&region, FIRST[0], 100, 5);
        written.extend(buffer(&region, FIRST[1], 500, 3).0);
        let pages = all_pages();
        let end = (FIRST[1] + BUF_PAGES) * PAGE_SIZE_BYTES;
        let mut at = FIRST[0] * PAGE_SIZE_BYTES;
        while at < end {
            for xor in [0x01u8, 0x80] {
                sim.corrupt(at, xor).unwrap();
                for mut s in salvage(&region, &pages) {
                    for e in read(&mut s) {
                        assert!(written.contains(&e), "flip at {at}: {e:?} invented");
                    }
                }
                sim.corrupt(at, xor).unwrap();
            }
            at += if at % PAGE_SIZE_BYTES < 1024 { 1 } else { 61 };
        }
    }
}
