//! Fuzzes RangeKV's decoders (`design/rangetab/`): the MANIFEST's layout
//! and buffer records (`Layout::decode`, `BufferRecord::decode`), the
//! buffer header mirror (`Mirror::decode`), and the reader of a buffer
//! table (`Readers::get`: `chunk::Header::read` and `Chunk::parse` of every
//! chunk up to the table's used bytes), then every accessor of a buffer
//! that opens — each chunk's entries, its hash-index probe and binary
//! search (`Chunk::get`), `lower_bound`, the chunk iterators and the
//! buffer's merging iterator. Arbitrary bytes never panic nor read outside
//! the region (a chunk reads its bytes through a raw pointer that only
//! `parse`'s checks keep in bounds: run it under the address sanitizer,
//! cargo fuzz's default); every error is a `Corruption` naming the region
//! (or the MANIFEST, for what the table's metadata says).
//!
//! The first byte picks the mode: bit 0 builds real chunks (below) instead
//! of laying the rest over the buffer run; bit 1 rewrites every chunk's
//! crc to match its (fuzzed) bytes, so the structure checks behind it are
//! reached; bit 2 asks the reader to verify the crcs; bit 3 probes the
//! hash indexes (else binary search); bit 4 rewrites the buffer header's
//! crc; bit 5 XORs the next 32 input bytes into the table's used bytes,
//! entries and seqnos (a MANIFEST record that disagrees with PM). With bit
//! 0 the rest describes 1–4 chunks of entries (each entry from two input
//! bytes: key, value length, kind) that `chunk::Builder` writes one after
//! the other into the buffer, and then (u16 offset, u8 XOR) triples that
//! damage the buffer run. Without damage (and without bit 5) the buffer
//! must read back exactly what was written.
//!
//! Whatever the mode, the whole input is also decoded as a layout record,
//! a buffer record and a buffer header; a record that decodes re-encodes
//! to the same value.
//!
//! Every image (damaged or not) is also read as `Db::repair` reads it
//! without a MANIFEST (`design::salvage::salvage_pm`, through
//! `common/salvage.rs`).

#![no_main]

#[path = "common/salvage.rs"]
mod common_salvage;
use common_salvage::salvage;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use tierkv::design::rangetab::buffer::{Mirror, Readers, DATA_START, HEADER_BYTES};
use tierkv::design::rangetab::chunk::{self, Builder, Chunk, ChunkIter, Size};
use tierkv::design::rangetab::layout::{BufferRecord, Layout, Source, State};
use tierkv::iter::{Found, InternalIterator, TableReader};
use tierkv::key::{self, Kind, SeqNo, MAX_SEQNO};
use tierkv::memtable::MemTable;
use tierkv::stats::Tier;
use tierkv::storage::alloc::PageRun;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::version::edit::{TableFormat, TableMeta};
use tierkv::Error;

const PAGE: u64 = 4096;
/// Pages of one buffer run; buffer (0, 0) starts at page 2, (0, 1) after it.
const BUF_PAGES: u64 = 4;
const FIRST: u64 = 2;
const REGION: usize = ((FIRST + 2 * BUF_PAGES) * PAGE) as usize;
const CAPACITY: u64 = BUF_PAGES * PAGE - DATA_START;
const BASE: u64 = FIRST * PAGE;
const START: u64 = BASE + DATA_START;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The chunks a reader would find, by their headers only (magic and a
/// length that fits): (offset, len, n, seq_min, seq_max).
fn scan(sim: &SimRegion) -> Vec<(u64, u64, u64, u64, u64)> {
    let mut out = Vec::new();
    let mut at = START;
    let end = START + CAPACITY;
    while at + chunk::HEADER_BYTES as u64 <= end {
        let h = sim.slice(at, chunk::HEADER_BYTES).unwrap();
        if h[0..4] != chunk::MAGIC {
            break;
        }
        let len = u64::from(u32_at(h, 8));
        if len < chunk::HEADER_BYTES as u64 || at + len > end {
            break;
        }
        out.push((
            at,
            len,
            u64::from(u32_at(h, 12)),
            u64_at(h, 16),
            u64_at(h, 24),
        ));
        at += len.next_multiple_of(chunk::ALIGN);
    }
    out
}

fn check_records(data: &[u8]) {
    match Layout::decode(data) {
        Ok(l) => assert_eq!(Layout::decode(&l.encode()).unwrap(), l),
        Err(e) => assert!(e.is_corruption(), "{e}"),
    }
    match BufferRecord::decode(data) {
        Ok(r) => assert_eq!(BufferRecord::decode(&r.encode()).unwrap(), r),
        Err(e) => assert!(e.is_corruption(), "{e}"),
    }
    if let Some(m) = Mirror::decode(data) {
        assert_eq!(Mirror::decode(&m.encode()), Some(m));
    }
}

/// The entries of the chunks `build` wrote, as (user key → versions).
type Model = BTreeMap<Vec<u8>, Vec<(SeqNo, Kind, Vec<u8>)>>;

fuzz_target!(|data: &[u8]| {
    check_records(data);
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let mut perturb = [0u64; 4];
    if mode & 32 != 0 {
        if rest.len() < 32 {
            return;
        }
        for (i, p) in perturb.iter_mut().enumerate() {
            *p = u64_at(rest, 8 * i);
        }
        rest = &rest[32..];
    }
    let sim = Arc::new(SimRegion::new(REGION));
    let region: Arc<dyn PmRegion> = sim.clone();
    let gauge = Arc::new(AtomicU64::new(0));
    let (mut meta, model, pristine) = if mode & 1 == 0 {
        let n = rest.len().min((BUF_PAGES * PAGE) as usize);
        sim.write(BASE, &rest[..n]).unwrap();
        let chunks = scan(&sim);
        let used = chunks
            .last()
            .map_or(0, |c| (c.0 + c.1).next_multiple_of(chunk::ALIGN) - START)
            .min(CAPACITY);
        let meta = table_meta(
            used,
            chunks.iter().map(|c| c.2).sum(),
            chunks.iter().map(|c| c.3).min().unwrap_or(0),
            chunks.iter().map(|c| c.4).max().unwrap_or(0),
        );
        (meta, None, false)
    } else {
        match build(&region, &gauge, rest) {
            Some((meta, model, damage)) => {
                for d in damage.chunks_exact(3) {
                    let off = u64::from(u16::from_le_bytes([d[0], d[1]])) % (BUF_PAGES * PAGE);
                    sim.corrupt(BASE + off, d[2]).unwrap();
                }
                let pristine = damage.len() < 3 && mode & 32 == 0;
                (meta, Some(model), pristine)
            }
            None => return,
        }
    };
    if mode & 2 != 0 {
        for (at, len, ..) in scan(&sim) {
            let b = sim.slice(at, len as usize).unwrap();
            let crc = tierkv::coding::crc32c_append(
                tierkv::coding::crc32c(&b[chunk::HEADER_BYTES..]),
                &b[8..chunk::HEADER_BYTES],
            );
            sim.write(at + 4, &crc.to_le_bytes()).unwrap();
        }
    }
    if mode & 16 != 0 {
        let h = sim.slice(BASE, 56).unwrap().to_vec();
        sim.write(BASE + 56, &tierkv::coding::crc32c(&h).to_le_bytes())
            .unwrap();
    }
    // Repair's reading of the same bytes: an undamaged buffer gives every
    // entry the build wrote, with nothing to report.
    let (salvaged, problems) = salvage(&region, tierkv::Preset::RangeTab, FIRST);
    if pristine {
        assert!(!problems, "an undamaged buffer salvaged with problems");
        assert_eq!(salvaged, meta.entries, "an undamaged buffer salvaged short");
    }
    meta.size_bytes ^= perturb[0];
    meta.entries ^= perturb[1];
    meta.seq_min ^= perturb[2];
    meta.seq_max ^= perturb[3];

    // The header mirror (recovery compares it with the MANIFEST).
    let mirror = Mirror::decode(sim.slice(BASE, HEADER_BYTES).unwrap());
    if pristine {
        let m = mirror.expect("the header the build stored");
        assert_eq!(
            (m.used, m.capacity, m.state),
            (meta.size_bytes, CAPACITY, State::Write)
        );
    }

    let readers = Readers::new(Arc::clone(&region), mode & 4 != 0, mode & 8 != 0);
    readers.set_layout(Arc::new(Layout::new(
        1,
        CAPACITY,
        BUF_PAGES,
        vec![FIRST, FIRST + BUF_PAGES],
        Source::Pending,
        Vec::new(),
    )));
    let reader = match readers.get(&meta) {
        Ok(r) => r,
        Err(e) => {
            assert!(!pristine, "an undamaged buffer fails to open: {e}");
            match &e {
                Error::Corruption { at, .. } => {
                    assert!(at.source == region.name() || at.source == "MANIFEST", "{e}")
                }
                _ => panic!("not a corruption: {e}"),
            }
            return;
        }
    };
    // Every accessor of every chunk.
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut total = 0usize;
    for c in &reader.chunks {
        total += c.len();
        check_chunk(c, &mut keys);
    }
    assert_eq!(total as u64, meta.entries);
    // The buffer: newest chunk first, and its merging iterator.
    for k in &keys {
        for seq in [MAX_SEQNO, key::parse_internal_key(k).unwrap().seq, 0] {
            let uk = key::user_key(k);
            let f = reader.get(uk, seq).unwrap();
            if let Some(f) = &f {
                assert!(f.seq <= seq);
            }
            if let Some(model) = &model {
                if pristine {
                    assert_eq!(f, expect(model, uk, seq), "get({uk:?}, {seq})");
                }
            }
        }
    }
    let mut it = Arc::clone(&reader).iter(false);
    it.seek_to_first();
    let mut n = 0;
    while it.valid() {
        n += 1;
        assert!(n <= total, "the buffer's iterator outruns its entries");
        let _ = (it.key(), it.value());
        it.next();
    }
    assert_eq!(n, total);
    it.seek_to_last();
    let mut back = 0;
    while it.valid() && back <= total {
        back += 1;
        let _ = (it.key(), it.value());
        it.prev();
    }
    for k in keys.iter().take(16) {
        it.seek(k);
    }
    assert!(it.status().is_ok());
    if let (Some(model), true) = (&model, pristine) {
        assert_eq!(total, model.values().map(Vec::len).sum::<usize>());
    }
});

fn table_meta(used: u64, entries: u64, seq_min: u64, seq_max: u64) -> TableMeta {
    TableMeta {
        id: 7,
        tier: Tier::Pm,
        format: TableFormat::RangeTab,
        size_bytes: used,
        smallest: Vec::new(),
        largest: Vec::new(),
        seq_min,
        seq_max,
        entries,
        deletions: 0,
        pm_pages: vec![PageRun {
            first: FIRST,
            count: BUF_PAGES,
        }],
    }
}

/// The newest version of `uk` at or below `seq`.
fn expect(model: &Model, uk: &[u8], seq: SeqNo) -> Option<Found> {
    model
        .get(uk)?
        .iter()
        .filter(|v| v.0 <= seq)
        .max_by_key(|v| v.0)
        .map(|v| Found {
            seq: v.0,
            kind: v.1,
            value: if v.1 == Kind::Delete {
                Vec::new()
            } else {
                v.2.clone()
            },
        })
}

/// Reads every entry of a parsed chunk, probes every key both ways and
/// walks its iterator; collects up to 64 internal keys into `keys`.
fn check_chunk(c: &Arc<Chunk>, keys: &mut Vec<Vec<u8>>) {
    let n = c.len();
    let mut sorted = true;
    let mut prev: Option<Vec<u8>> = None;
    for i in 0..n {
        let ik = c.ikey(i).to_vec();
        let p = key::parse_internal_key(&ik).expect("parse checked every key");
        assert!(p.seq >= c.seq_min && p.seq <= c.seq_max);
        assert_eq!(c.user_key(i), p.user_key);
        let _ = c.value(i);
        if let Some(q) = &prev {
            sorted &= key::compare_internal(q, &ik).is_le();
        }
        if keys.len() < 64 {
            keys.push(ik.clone());
        }
        prev = Some(ik);
    }
    let mut probes: Vec<Vec<u8>> = (0..n.min(32)).map(|i| c.ikey(i).to_vec()).collect();
    probes.push(key::make_internal_key(b"zz-absent", 1, Kind::Put));
    for ik in &probes {
        let uk = key::user_key(ik);
        for seq in [MAX_SEQNO, key::trailer(ik) >> 8, 0] {
            let hashed = c.get(uk, seq, true);
            let searched = c.get(uk, seq, false);
            for f in [&hashed, &searched].into_iter().flatten() {
                assert!(f.seq <= seq && f.seq >= c.seq_min);
            }
            // In a sorted chunk (every chunk a flush writes) both ways
            // find the first version of the key at or below `seq`.
            if sorted {
                let first = (0..n).find(|&i| {
                    let p = key::parse_internal_key(c.ikey(i)).unwrap();
                    p.user_key == uk && p.seq <= seq
                });
                let want = first.map(|i| {
                    let p = key::parse_internal_key(c.ikey(i)).unwrap();
                    Found {
                        seq: p.seq,
                        kind: p.kind,
                        value: if p.kind == Kind::Delete {
                            Vec::new()
                        } else {
                            c.value(i).to_vec()
                        },
                    }
                });
                assert_eq!(hashed, want, "hash probe of {uk:?} at {seq}");
                assert_eq!(searched, want, "binary search of {uk:?} at {seq}");
            }
        }
        let j = c.lower_bound(ik);
        assert!(j <= n);
        if sorted && j < n {
            assert!(key::compare_internal(c.ikey(j), ik).is_ge());
        }
    }
    let mut it = ChunkIter::new(Arc::clone(c));
    it.seek_to_first();
    let mut steps = 0;
    while it.valid() {
        let _ = (it.key(), it.value());
        it.next();
        steps += 1;
        assert!(steps <= n);
    }
    assert_eq!(steps, n);
    it.seek_to_last();
    while it.valid() {
        let _ = (it.key(), it.value());
        it.prev();
        steps -= 1;
    }
    assert_eq!(steps, 0);
    for ik in &probes {
        it.seek(ik);
        if it.valid() {
            let _ = (it.key(), it.value());
        }
    }
    assert!(it.status().is_ok());
}

/// Writes the chunks `input` describes into buffer (0, 0) and its header
/// mirror; returns the table's metadata, the entries written and the
/// rest of the input (the damage).
fn build<'a>(
    region: &Arc<dyn PmRegion>,
    gauge: &Arc<AtomicU64>,
    input: &'a [u8],
) -> Option<(TableMeta, Model, &'a [u8])> {
    let (&c, mut rest) = input.split_first()?;
    let chunks = 1 + usize::from(c % 4);
    let mut model = Model::new();
    let mut used = 0u64;
    let mut seq: SeqNo = 1 + u64::from(c / 4);
    let (mut seq_min, mut seq_max, mut entries, mut built) = (SeqNo::MAX, 0, 0u64, 0u64);
    for _ in 0..chunks {
        let (&m, r) = rest.split_first()?;
        let m = 1 + usize::from(m % 32);
        let (desc, r) = r.split_at((2 * m).min(r.len()));
        if desc.is_empty() {
            return None; // a flush never writes an empty chunk
        }
        rest = r;
        let mem = Arc::new(MemTable::new(0));
        let mut size = Size::default();
        for d in desc.chunks(2) {
            let a = d[0];
            let b = d.get(1).copied().unwrap_or(0);
            let uk = vec![b'a' + a % 8; 1 + usize::from(a / 8 % 5)];
            let value = vec![b; usize::from(b % 7) * 13];
            let kind = if b % 5 == 0 { Kind::Delete } else { Kind::Put };
            let value = if kind == Kind::Put { value } else { Vec::new() };
            mem.add(seq, kind, &uk, &value);
            size.add(uk.len() + 8, value.len());
            model.entry(uk).or_default().push((seq, kind, value));
            seq_min = seq_min.min(seq);
            seq_max = seq_max.max(seq);
            seq += 1;
            entries += 1;
        }
        if size.footprint() > CAPACITY - used {
            return None;
        }
        let mut b = Builder::new(region, START + used, CAPACITY - used, &size);
        let mut it = mem.iter();
        it.seek_to_first();
        while it.valid() {
            b.add(it.key(), it.value()).ok()?;
            it.next();
        }
        let (_, footprint) = b.finish(gauge, false).ok()?;
        used += footprint;
        built += 1;
    }
    Mirror {
        r: 0,
        slot: 0,
        state: State::Write,
        capacity: CAPACITY,
        used,
        chunks: built,
        seq_min,
        seq_max,
    }
    .store(region.as_ref(), BASE)
    .ok()?;
    Some((table_meta(used, entries, seq_min, seq_max), model, rest))
}
