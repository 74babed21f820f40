//! The MANIFEST side of RangeKV: the layout record (how many RangeTabs,
//! their capacity, the page run of each buffer, the key boundaries) and
//! one state record per buffer, and [`RtView`], the RangeTabs of one
//! version as the picker, the flush and the reads see them.
//!
//! # Records (design records, docs/format/pm.md "RangeTab")
//!
//! ```text
//! LAYOUT_TAG = 0x5254_0000 ("RT" 00 00):
//!   u8 version = 1
//!   varint N | varint capacity_bytes | varint buffer_pages
//!   2N × varint first_page          buffer (r, slot) is runs[2r + slot]
//!   u8 source (0 pending, 1 option, 2 prefix, 3 quantiles)
//!   source ≠ 0: (N − 1) × (varint len, boundary key)
//!
//! buffer_tag(r, slot) = 0x5254_0001 + 2r + slot:
//!   u8 version = 1 | u8 state (0 init, 1 write, 2 sealed) |
//!   varint order | varint chunks
//! ```
//!
//! One record per buffer (not one for all of them) because a flush and a
//! merge may change different buffers at once: each edit writes only the
//! records of the buffers it changes, so neither overwrites the other's.
//! `order` ages the buffers of a RangeTab (the buffer that became the write
//! buffer later holds newer data); `chunks` is the paper's `seq` (chunks
//! appended since the buffer was last emptied). A buffer's used bytes, key
//! and seqno range are its L0 table's metadata (`size_bytes`, `smallest`,
//! `largest`, `seq_min`, `seq_max`): the table is listed with exactly its
//! buffer's page run, and an init buffer has no table.
//!
//! Worked example: N = 2 RangeTabs of 64 KiB (17-page buffers at pages
//! 10, 27, 44, 61) split at `"m"`: `01 02 80 80 04 11 0a 1b 2c 3d 01 01
//! 6d`; buffer (1, 0) being written, second in age, 3 chunks: `01 01 02
//! 03`.
//!
//! # Invariants (checked by [`RtView::of`])
//!
//! 1. Every L0 table is a buffer table: tier PM, format RangeTab,
//!    `pm_pages` = exactly one buffer's run; at most one table per buffer.
//! 2. A buffer has a table iff its state is not init.
//! 3. A RangeTab has at most one write buffer, and it is the youngest of
//!    its non-init buffers (largest `order`); every chunk of an older
//!    buffer is older than every chunk of a younger one.
//! 4. A buffer table's keys lie in its RangeTab's range (boundaries).

use std::collections::HashMap;
use std::sync::Arc;

use crate::coding::{put_length_prefixed, put_varint, Reader};
use crate::error::{Error, Result};
use crate::stats::Tier;
use crate::storage::alloc::PageRun;
use crate::version::edit::TableFormat;
use crate::version::{TableHandle, Version};

/// Design-record tag of the layout; buffer records follow it.
pub const LAYOUT_TAG: u32 = 0x5254_0000;

/// Most RangeTabs a database may have (the buffer tags must fit below
/// `LAYOUT_TAG + 0x1_0000`).
pub const MAX_RANGETABS: usize = 32767;

/// Tag of the state record of buffer `slot` (0 or 1) of RangeTab `r`.
pub fn buffer_tag(r: u32, slot: u8) -> u32 {
    LAYOUT_TAG + 1 + 2 * r + u32::from(slot)
}

fn bad(what: impl Into<String>) -> Error {
    Error::corruption("MANIFEST", 0, format!("RangeTab {}", what.into()))
}

/// Where the boundaries came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Not decided yet: the first flush takes its memtable's quantiles.
    Pending,
    /// `Options::rangetab_boundaries`.
    Option,
    /// `Options::rangetab_prefix_bytes` (the paper's prefix mapping).
    Prefix,
    /// Quantiles of the first flushed memtable (the fallback).
    Quantiles,
}

impl Source {
    fn to_u8(self) -> u8 {
        match self {
            Source::Pending => 0,
            Source::Option => 1,
            Source::Prefix => 2,
            Source::Quantiles => 3,
        }
    }
    fn from_u8(b: u8) -> Option<Source> {
        Some(match b {
            0 => Source::Pending,
            1 => Source::Option,
            2 => Source::Prefix,
            3 => Source::Quantiles,
            _ => return None,
        })
    }
    /// A short name for stats and errors.
    pub fn name(self) -> &'static str {
        match self {
            Source::Pending => "pending",
            Source::Option => "option",
            Source::Prefix => "prefix",
            Source::Quantiles => "quantiles",
        }
    }
}

/// The layout record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// N, the number of RangeTabs.
    pub count: u32,
    /// Data bytes of one buffer (its chunks; the header is extra).
    pub capacity_bytes: u64,
    /// Pages of one buffer's run (header + capacity, rounded up).
    pub buffer_pages: u64,
    /// First page of each buffer's run, `2r + slot`.
    pub first_pages: Vec<u64>,
    /// Where the boundaries came from.
    pub source: Source,
    /// N − 1 strictly increasing keys (empty while `Pending`).
    pub boundaries: Vec<Vec<u8>>,
    /// First page → buffer index (derived).
    by_page: HashMap<u64, u32>,
}

impl Layout {
    /// A layout; `boundaries` must match `source` (N − 1 keys, or none
    /// while pending).
    pub fn new(
        count: u32,
        capacity_bytes: u64,
        buffer_pages: u64,
        first_pages: Vec<u64>,
        source: Source,
        boundaries: Vec<Vec<u8>>,
    ) -> Layout {
        let by_page = first_pages
            .iter()
            .enumerate()
            .map(|(i, p)| (*p, i as u32))
            .collect();
        Layout {
            count,
            capacity_bytes,
            buffer_pages,
            first_pages,
            source,
            boundaries,
            by_page,
        }
    }

    /// The layout recorded in `v`, if any.
    pub fn of(v: &Version) -> Result<Option<Layout>> {
        v.design_state
            .get(&LAYOUT_TAG)
            .map(|b| Layout::decode(b))
            .transpose()
    }

    /// The run of buffer `slot` of RangeTab `r`.
    pub fn run(&self, r: u32, slot: u8) -> PageRun {
        PageRun {
            first: self.first_pages[(2 * r + u32::from(slot)) as usize],
            count: self.buffer_pages,
        }
    }

    /// Every buffer run.
    pub fn runs(&self) -> impl Iterator<Item = PageRun> + '_ {
        self.first_pages.iter().map(|&first| PageRun {
            first,
            count: self.buffer_pages,
        })
    }

    /// The buffer `(r, slot)` whose run starts at `first_page`.
    pub fn locate(&self, first_page: u64) -> Option<(u32, u8)> {
        self.by_page
            .get(&first_page)
            .map(|&i| (i / 2, (i % 2) as u8))
    }

    /// True once the boundaries are known.
    pub fn has_boundaries(&self) -> bool {
        self.source != Source::Pending
    }

    /// The RangeTab holding `user_key`: the number of boundaries `<=` it.
    #[inline]
    pub fn route(&self, user_key: &[u8]) -> u32 {
        self.boundaries
            .partition_point(|b| b.as_slice() <= user_key) as u32
    }

    /// RangeTab `r`'s key range `[lo, hi)` (`None`: unbounded).
    pub fn range(&self, r: u32) -> (Option<&[u8]>, Option<&[u8]>) {
        let r = r as usize;
        let lo = r
            .checked_sub(1)
            .and_then(|i| self.boundaries.get(i))
            .map(Vec::as_slice);
        (lo, self.boundaries.get(r).map(Vec::as_slice))
    }

    /// The record.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16 + 4 * self.first_pages.len());
        b.push(1);
        put_varint(&mut b, u64::from(self.count));
        put_varint(&mut b, self.capacity_bytes);
        put_varint(&mut b, self.buffer_pages);
        for p in &self.first_pages {
            put_varint(&mut b, *p);
        }
        b.push(self.source.to_u8());
        if self.source != Source::Pending {
            for k in &self.boundaries {
                put_length_prefixed(&mut b, k);
            }
        }
        b
    }

    /// Decodes a layout record; anything malformed is corruption.
    pub fn decode(b: &[u8]) -> Result<Layout> {
        let mut r = Reader::new(b);
        let short = || bad("layout record truncated");
        if r.u8().ok_or_else(short)? != 1 {
            return Err(bad("layout record of an unknown version"));
        }
        let count = r.varint().ok_or_else(short)?;
        if count == 0 || count > MAX_RANGETABS as u64 {
            return Err(bad(format!("layout with {count} RangeTabs")));
        }
        let capacity_bytes = r.varint().ok_or_else(short)?;
        let buffer_pages = r.varint().ok_or_else(short)?;
        if buffer_pages == 0
            || capacity_bytes == 0
            || capacity_bytes
                .checked_add(super::buffer::DATA_START)
                .is_none_or(|b| b > buffer_pages.saturating_mul(4096))
        {
            return Err(bad(format!(
                "layout: capacity {capacity_bytes} does not fit buffers of {buffer_pages} pages"
            )));
        }
        let mut first_pages = Vec::with_capacity(2 * count as usize);
        for _ in 0..2 * count {
            first_pages.push(r.varint().ok_or_else(short)?);
        }
        let source = Source::from_u8(r.u8().ok_or_else(short)?)
            .ok_or_else(|| bad("layout: unknown boundary source"))?;
        let mut boundaries = Vec::new();
        if source != Source::Pending {
            for _ in 1..count {
                boundaries.push(r.length_prefixed().ok_or_else(short)?.to_vec());
            }
            if boundaries.windows(2).any(|w| w[0] >= w[1]) {
                return Err(bad("layout: boundaries not strictly increasing"));
            }
        }
        if !r.is_empty() {
            return Err(bad("layout record has trailing bytes"));
        }
        let l = Layout::new(
            count as u32,
            capacity_bytes,
            buffer_pages,
            first_pages,
            source,
            boundaries,
        );
        if l.by_page.len() != l.first_pages.len() {
            return Err(bad("layout lists one buffer run twice"));
        }
        Ok(l)
    }
}

/// A buffer's state (Fig. 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Empty (the paper's `init_state`).
    Init,
    /// Flushes append here (`write_state`).
    Write,
    /// Sealed: waits for, or is in, a merge into L1 (`compaction_state`).
    Sealed,
}

impl State {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            State::Init => "init",
            State::Write => "write",
            State::Sealed => "sealed",
        }
    }
}

/// A buffer's state record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferRecord {
    /// Its state.
    pub state: State,
    /// Age among its RangeTab's buffers (larger: younger; 0 when init).
    pub order: u64,
    /// Chunks appended since it was emptied (the paper's `seq`).
    pub chunks: u64,
}

impl BufferRecord {
    /// The record of an empty buffer.
    pub const INIT: BufferRecord = BufferRecord {
        state: State::Init,
        order: 0,
        chunks: 0,
    };

    /// Encodes the record.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![
            1,
            match self.state {
                State::Init => 0,
                State::Write => 1,
                State::Sealed => 2,
            },
        ];
        put_varint(&mut b, self.order);
        put_varint(&mut b, self.chunks);
        b
    }

    /// Decodes a record; malformed input is corruption.
    pub fn decode(b: &[u8]) -> Result<BufferRecord> {
        let mut r = Reader::new(b);
        let short = || bad("buffer record truncated");
        if r.u8().ok_or_else(short)? != 1 {
            return Err(bad("buffer record of an unknown version"));
        }
        let state = match r.u8().ok_or_else(short)? {
            0 => State::Init,
            1 => State::Write,
            2 => State::Sealed,
            s => return Err(bad(format!("buffer record with state {s}"))),
        };
        let order = r.varint().ok_or_else(short)?;
        let chunks = r.varint().ok_or_else(short)?;
        if !r.is_empty() {
            return Err(bad("buffer record has trailing bytes"));
        }
        Ok(BufferRecord {
            state,
            order,
            chunks,
        })
    }
}

/// One buffer as a version has it.
#[derive(Debug, Clone)]
pub struct Buf {
    /// Its RangeTab.
    pub r: u32,
    /// 0 or 1.
    pub slot: u8,
    /// Its state record.
    pub rec: BufferRecord,
    /// Its table (none while init).
    pub table: Option<Arc<TableHandle>>,
}

impl Buf {
    /// Bytes of chunks in it.
    pub fn used(&self) -> u64 {
        self.table.as_ref().map_or(0, |t| t.meta.size_bytes)
    }
}

/// The RangeTabs of one version: every buffer's record and table.
#[derive(Debug, Clone)]
pub struct RtView {
    /// The layout.
    pub layout: Arc<Layout>,
    /// Buffer `(r, slot)` at `2r + slot`.
    pub bufs: Vec<Buf>,
}

impl RtView {
    /// The RangeTabs of `v` under `layout`, checking invariants 1–3.
    pub fn of(v: &Version, layout: Arc<Layout>) -> Result<RtView> {
        let n = layout.count;
        let mut bufs: Vec<Buf> = (0..2 * n)
            .map(|i| Buf {
                r: i / 2,
                slot: (i % 2) as u8,
                rec: BufferRecord::INIT,
                table: None,
            })
            .collect();
        for b in &mut bufs {
            if let Some(bytes) = v.design_state.get(&buffer_tag(b.r, b.slot)) {
                b.rec = BufferRecord::decode(bytes)?;
            }
        }
        for t in v.levels.first().map(|l| l.as_slice()).unwrap_or(&[]) {
            let m = &t.meta;
            let run = match (m.tier, m.format, m.pm_pages.as_slice()) {
                (Tier::Pm, TableFormat::RangeTab, [run]) => *run,
                _ => {
                    return Err(bad(format!(
                        "L0 table {} is not a RangeTab buffer table",
                        m.id
                    )))
                }
            };
            let Some((r, slot)) = layout.locate(run.first) else {
                return Err(bad(format!(
                    "L0 table {} lists page run {run:?}, which is no buffer",
                    m.id
                )));
            };
            if run.count != layout.buffer_pages {
                return Err(bad(format!("L0 table {} lists a partial buffer run", m.id)));
            }
            let b = &mut bufs[(2 * r + u32::from(slot)) as usize];
            if b.table.is_some() {
                return Err(bad(format!("two L0 tables in buffer ({r}, {slot})")));
            }
            b.table = Some(Arc::clone(t));
        }
        for b in &bufs {
            if (b.rec.state == State::Init) != b.table.is_none() {
                return Err(bad(format!(
                    "buffer ({}, {}) is {} but {} a table",
                    b.r,
                    b.slot,
                    b.rec.state.name(),
                    if b.table.is_some() { "has" } else { "has no" }
                )));
            }
        }
        let view = RtView { layout, bufs };
        for r in 0..n {
            let [a, b] = view.pair(r);
            if a.rec.state == State::Write && b.rec.state == State::Write {
                return Err(bad(format!("RangeTab {r} has two write buffers")));
            }
            let w = [a, b].into_iter().find(|x| x.rec.state == State::Write);
            let other = [a, b].into_iter().find(|x| x.rec.state == State::Sealed);
            if let (Some(w), Some(o)) = (w, other) {
                if w.rec.order <= o.rec.order {
                    return Err(bad(format!(
                        "RangeTab {r}: its write buffer is older than its sealed one"
                    )));
                }
            }
        }
        Ok(view)
    }

    /// Both buffers of RangeTab `r`.
    pub fn pair(&self, r: u32) -> [&Buf; 2] {
        let i = 2 * r as usize;
        [&self.bufs[i], &self.bufs[i + 1]]
    }

    /// The buffer `(r, slot)`.
    pub fn buf(&self, r: u32, slot: u8) -> &Buf {
        &self.bufs[(2 * r + u32::from(slot)) as usize]
    }

    /// RangeTab `r`'s write buffer.
    pub fn write_buf(&self, r: u32) -> Option<&Buf> {
        self.pair(r)
            .into_iter()
            .find(|b| b.rec.state == State::Write)
    }

    /// RangeTab `r`'s non-init buffers, oldest first.
    pub fn filled(&self, r: u32) -> Vec<&Buf> {
        let mut v: Vec<&Buf> = self
            .pair(r)
            .into_iter()
            .filter(|b| b.rec.state != State::Init)
            .collect();
        v.sort_by_key(|b| b.rec.order);
        v
    }

    /// The order a buffer of `r` that becomes the write buffer now takes.
    pub fn next_order(&self, r: u32) -> u64 {
        self.pair(r)
            .into_iter()
            .filter(|b| b.rec.state != State::Init)
            .map(|b| b.rec.order)
            .max()
            .unwrap_or(0)
            + 1
    }

    /// Fill of the write buffer of `r` (0 without one): the RangeTab's
    /// ratio for the triggers and steps 2–3.
    pub fn ratio(&self, r: u32) -> f64 {
        self.write_buf(r)
            .map_or(0.0, |b| b.used() as f64 / self.layout.capacity_bytes as f64)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn worked_example() {
        let l = Layout::new(
            2,
            64 << 10,
            17,
            vec![10, 27, 44, 61],
            Source::Option,
            vec![b"m".to_vec()],
        );
        assert_eq!(
            l.encode(),
            [1, 2, 0x80, 0x80, 4, 0x11, 10, 27, 44, 61, 1, 1, b'm']
        );
        assert_eq!(Layout::decode(&l.encode()).unwrap(), l);
        assert_eq!(l.route(b"a"), 0);
        assert_eq!(l.route(b"m"), 1);
        assert_eq!(l.range(1), (Some(&b"m"[..]), None));
        assert_eq!(l.locate(44), Some((1, 0)));
        let rec = BufferRecord {
            state: State::Write,
            order: 2,
            chunks: 3,
        };
        assert_eq!(rec.encode(), [1, 1, 2, 3]);
        assert_eq!(BufferRecord::decode(&rec.encode()).unwrap(), rec);
        for bad in [&[][..], &[2][..], &[1, 3, 0, 0][..], &[1, 0, 0, 0, 9][..]] {
            assert!(BufferRecord::decode(bad).unwrap_err().is_corruption());
        }
        let mut e = l.encode();
        e.push(0);
        assert!(Layout::decode(&e).unwrap_err().is_corruption());
        assert!(Layout::decode(&e[..5]).unwrap_err().is_corruption());
    }

    /// A capacity whose sum with the buffer header overflows does not fit
    /// any buffer (found by fuzz/fuzz_targets/rangetab.rs: the sum wrapped
    /// — a panic where overflow is checked, and where it is not a layout
    /// of 1-page buffers with a capacity of ~2^64 bytes was accepted).
    #[test]
    fn capacity_near_u64_max_is_corruption() {
        for capacity in [u64::MAX, u64::MAX - 63, u64::MAX - 100] {
            let l = Layout::new(1, capacity, 1, vec![10, 11], Source::Pending, Vec::new());
            let e = Layout::decode(&l.encode()).unwrap_err();
            assert!(e.is_corruption(), "{e}");
        }
    }
}
