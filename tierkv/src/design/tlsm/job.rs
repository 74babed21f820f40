//! TLSM's background jobs: the byte-addressable compaction (Algorithm 2,
//! PM → PM by linking), the PS copy compaction, the copy-forward of one
//! list into a fresh buffer, and the jobs that write SSTs (compactions
//! into SST levels, tier evictions); with the in-flight record that makes
//! a PM-output job resumable, and its resume.
//!
//! # The in-flight record (MANIFEST design record)
//!
//! Before a PM-output job links its first node it records itself, in the
//! region's version, under a design-record tag of its own
//! (`JOB_TAG_BASE + i`, one tag per concurrently running job: the version
//! keeps one value per tag, so concurrent jobs sharing one record would
//! overwrite each other). The job's edit clears it (an empty value) in the
//! same MANIFEST record that deletes the inputs and adds the outputs.
//!
//! ```text
//!  u8 version = 1 | varint job id | varint output level | u8 kind (0 merge,
//!  1 copy-forward) | u8 mode (0 link, 1 copy) | u8 flags (bit 0: tombstones
//!  may drop) | varint smallest snapshot | varint cut target bytes |
//!  varint slot first page | varint slot pages |
//!  varint input count | count × (varint level, varint table id)
//! ```
//!
//! Worked example: job 57 merging L0 lists #12 and #13 into L1 by linking,
//! snapshot 900, 64 KiB outputs, slot at page 300 (1 page):
//! `01 39 01 00 00 01 84 07 80 80 04 ac 02 01 02 00 0c 00 0d`.
//!
//! A merge cut into key-range parts (subcompactions, run side by side:
//! one link merge is one thread's work otherwise) is written as version 2:
//! the same fields, the first part's job id and slot being the ones
//! above (its range starts at the first key), then
//!
//! ```text
//!  varint more parts (>= 1) | parts × (varint part job id, varint slot
//!  first page, varint slot pages, varint key length, first user key)
//! ```
//!
//! with the parts' first keys strictly ascending; a part ends where the
//! next begins. Each part has a job id of its own (a file number: output
//! headers name it with their ordinal) and a slot of its own, and is
//! resumed on its own; the one edit that ends the job adds every part's
//! outputs. Worked example: the job above cut at user key `"m"`, its
//! second part job 58 with its slot at page 301:
//! `02 39 … 00 0d 01 3a ad 02 01 01 6d`.
//!
//! The slot run (format.rs) names each output's header before its first
//! node is counted, and holds the grandparents the outputs are cut
//! against, so a resume cuts exactly where the uninterrupted job would.
//!
//! # Resume (`Design::recover`)
//!
//! The engine reconciles the PM allocator before the resume; the runs the
//! record references (each part's slot run, a copy-forward's buffer, each
//! named output's header, node and directory runs) are declared live by
//! `Design::live_pm_runs` (`Tlsm::job_runs`, with the reads and checks
//! of the resume), so the resume's own allocations never land on them.
//! With every input still in the version, each part of the job is run
//! again in turn, from its first key, with the recorded snapshot and
//! grandparents (every table id any part's slot names is marked used
//! first, so no part's new output takes another's id); every
//! entry it keeps is matched against the next node the slot's outputs
//! already count (an output the slot names is reused, one closed before
//! the crash is taken as it is), and linking continues after the last
//! counted node. The result is the uninterrupted job's, node for node. An
//! output that does not match (damage, or a deeper level that changed the
//! fate of a tombstone) makes the job unresumable: the record is cleared,
//! its pages go back at reconcile, and the inputs are compacted again later.
//!
//! # Concurrency
//!
//! Jobs run on background threads; the engine's busy set keeps their inputs
//! apart; the parts of a split merge run on scoped threads of their own
//! (`compaction::side_by_side`), each writing only its own slot and
//! outputs. A job writes PM nobody reads until its edit is applied; the only
//! shared state it touches is the design's tag pool, reap list and
//! reference index (each behind its own lock).

use std::cmp::Ordering;
use std::sync::Arc;

use super::build::{Item, Mode, Outputs, SlotRef, Unresumable};
use super::format::{self, Layout, Origin, Slot};
use super::list::{ListIter, SkipList};
use crate::coding::{put_varint, Reader};
use crate::compaction::MAX_GRANDPARENT_OVERLAP_FACTOR;
use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::key::{self, compare_internal, Kind, SeqNo};
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};
use crate::storage::PmRegion;
use crate::version::Version;

const PAGE: u64 = PAGE_SIZE_BYTES;

/// First design-record tag of in-flight jobs (`"TL\0\0"`).
pub const JOB_TAG_BASE: u32 = 0x544c_0000;
/// Tags reserved for in-flight jobs.
pub const JOB_TAGS: u32 = 1024;

/// True if `tag` is an in-flight job tag.
pub fn is_job_tag(tag: u32) -> bool {
    (JOB_TAG_BASE..JOB_TAG_BASE + JOB_TAGS).contains(&tag)
}

/// What kind of PM-output job a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// A merge of inputs into the output level.
    Merge,
    /// One list copied forward into a fresh buffer (or fresh inline nodes).
    CopyForward,
}

/// The in-flight record of a PM-output job (module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    /// Job id (a file number).
    pub job: u64,
    /// Output level.
    pub level: u32,
    /// Kind.
    pub kind: JobKind,
    /// Link or copy.
    pub mode: Mode,
    /// Tombstones may be dropped (at their base level).
    pub drop_tombstones: bool,
    /// Smallest snapshot the merge kept entries for.
    pub smallest_snapshot: SeqNo,
    /// Outputs are cut at this size (`u64::MAX`: one output).
    pub target_bytes: u64,
    /// The slot run.
    pub slot: PageRun,
    /// Inputs: (level, table id).
    pub inputs: Vec<(u32, u64)>,
    /// The parts after the first when the merge is cut into key ranges
    /// (empty: one part), by ascending first key; the first part is
    /// `job` and `slot`, from the first key.
    pub more_parts: Vec<PartRecord>,
}

/// A key-range part of a job after its first (module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRecord {
    /// The part's job id (a file number; its outputs' headers name it).
    pub job: u64,
    /// The part's slot run.
    pub slot: PageRun,
    /// The first user key of the part.
    pub first_key: Vec<u8>,
}

/// One key-range part of a job, as its run and its resume see it.
#[derive(Debug, Clone, Copy)]
pub struct PartView<'a> {
    /// Job id the part's outputs carry.
    pub job: u64,
    /// Its slot run.
    pub slot: PageRun,
    /// The user keys it covers.
    pub span: KeySpan<'a>,
}

impl JobRecord {
    /// Encodes the record.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![if self.more_parts.is_empty() { 1u8 } else { 2 }];
        put_varint(&mut b, self.job);
        put_varint(&mut b, u64::from(self.level));
        b.push(match self.kind {
            JobKind::Merge => 0,
            JobKind::CopyForward => 1,
        });
        b.push(match self.mode {
            Mode::Link => 0,
            Mode::Copy => 1,
        });
        b.push(u8::from(self.drop_tombstones));
        put_varint(&mut b, self.smallest_snapshot);
        put_varint(&mut b, self.target_bytes);
        put_varint(&mut b, self.slot.first);
        put_varint(&mut b, self.slot.count);
        put_varint(&mut b, self.inputs.len() as u64);
        for (l, id) in &self.inputs {
            put_varint(&mut b, u64::from(*l));
            put_varint(&mut b, *id);
        }
        if !self.more_parts.is_empty() {
            put_varint(&mut b, self.more_parts.len() as u64);
            for p in &self.more_parts {
                put_varint(&mut b, p.job);
                put_varint(&mut b, p.slot.first);
                put_varint(&mut b, p.slot.count);
                put_varint(&mut b, p.first_key.len() as u64);
                b.extend_from_slice(&p.first_key);
            }
        }
        b
    }

    /// Every part of the job in key order: the first (`job`, `slot`, from
    /// the first key), then `more_parts`, each ending where the next
    /// begins.
    pub fn parts(&self) -> Vec<PartView<'_>> {
        let mut out = Vec::with_capacity(1 + self.more_parts.len());
        out.push(PartView {
            job: self.job,
            slot: self.slot,
            span: KeySpan {
                lo: None,
                hi: self.more_parts.first().map(|p| p.first_key.as_slice()),
            },
        });
        for (i, p) in self.more_parts.iter().enumerate() {
            out.push(PartView {
                job: p.job,
                slot: p.slot,
                span: KeySpan {
                    lo: Some(&p.first_key),
                    hi: self.more_parts.get(i + 1).map(|n| n.first_key.as_slice()),
                },
            });
        }
        out
    }

    /// Decodes a record; malformed bytes are corruption of the MANIFEST.
    pub fn decode(b: &[u8]) -> Result<JobRecord> {
        let bad = || Error::corruption("MANIFEST", 0, "TLSM in-flight job record is malformed");
        let mut r = Reader::new(b);
        let version = r.u8().ok_or_else(bad)?;
        if version != 1 && version != 2 {
            return Err(bad());
        }
        let job = r.varint().ok_or_else(bad)?;
        let level = r.varint32().ok_or_else(bad)?;
        let kind = match r.u8().ok_or_else(bad)? {
            0 => JobKind::Merge,
            1 => JobKind::CopyForward,
            _ => return Err(bad()),
        };
        let mode = match r.u8().ok_or_else(bad)? {
            0 => Mode::Link,
            1 => Mode::Copy,
            _ => return Err(bad()),
        };
        let drop_tombstones = match r.u8().ok_or_else(bad)? {
            0 => false,
            1 => true,
            _ => return Err(bad()),
        };
        let smallest_snapshot = r.varint().ok_or_else(bad)?;
        let target_bytes = r.varint().ok_or_else(bad)?;
        let slot = PageRun {
            first: r.varint().ok_or_else(bad)?,
            count: r.varint().ok_or_else(bad)?,
        };
        let n = r.varint().ok_or_else(bad)?;
        if n > b.len() as u64 || slot.count == 0 {
            return Err(bad());
        }
        let mut inputs = Vec::with_capacity(n as usize);
        for _ in 0..n {
            inputs.push((r.varint32().ok_or_else(bad)?, r.varint().ok_or_else(bad)?));
        }
        let mut more_parts = Vec::new();
        if version == 2 {
            let m = r.varint().ok_or_else(bad)?;
            if m == 0 || m > b.len() as u64 || kind != JobKind::Merge {
                return Err(bad());
            }
            for _ in 0..m {
                let job = r.varint().ok_or_else(bad)?;
                let slot = PageRun {
                    first: r.varint().ok_or_else(bad)?,
                    count: r.varint().ok_or_else(bad)?,
                };
                let len = r.varint().ok_or_else(bad)?;
                let len = usize::try_from(len).map_err(|_| bad())?;
                let key = r.bytes(len).ok_or_else(bad)?;
                let prev: Option<&PartRecord> = more_parts.last();
                if slot.count == 0
                    || key.is_empty()
                    || prev.is_some_and(|p| p.first_key.as_slice() >= key)
                {
                    return Err(bad());
                }
                more_parts.push(PartRecord {
                    job,
                    slot,
                    first_key: key.to_vec(),
                });
            }
        }
        if !r.is_empty() {
            return Err(bad());
        }
        Ok(JobRecord {
            job,
            level,
            kind,
            mode,
            drop_tombstones,
            smallest_snapshot,
            target_bytes,
            slot,
            inputs,
            more_parts,
        })
    }
}

// ---------------------------------------------------------------- sources

/// An input of a PM-output job: entries in internal-key order, with where
/// each lives in PM.
pub trait Source: Send {
    /// Positioned on an entry.
    fn valid(&self) -> bool;
    /// Positions at the first entry.
    fn seek_to_first(&mut self);
    /// Positions at the first entry at or after internal key `target`.
    fn seek(&mut self, target: &[u8]);
    /// Next entry.
    fn next(&mut self);
    /// Internal key.
    fn key(&self) -> &[u8];
    /// Value.
    fn value(&self) -> &[u8];
    /// Region offset of the entry.
    fn entry_off(&self) -> u64;
    /// Bytes of the entry as stored.
    fn entry_len(&self) -> u64;
    /// The data run holding it.
    fn data_run(&self) -> Option<PageRun>;
    /// First error.
    fn status(&self) -> Result<()>;
}

/// One list.
pub struct ListSource {
    it: ListIter,
    /// The data run of the last entry asked for: a list's entries lie in
    /// runs of consecutive entries, so the next one is most often in the
    /// same run and needs no search of the directory.
    last_run: std::cell::Cell<Option<PageRun>>,
}

impl ListSource {
    /// A source over `list`.
    pub fn new(list: &Arc<SkipList>) -> ListSource {
        ListSource {
            it: list.iter_list(),
            last_run: std::cell::Cell::new(None),
        }
    }
}

impl Source for ListSource {
    fn valid(&self) -> bool {
        self.it.valid()
    }
    fn seek_to_first(&mut self) {
        self.it.seek_to_first();
    }
    fn seek(&mut self, target: &[u8]) {
        self.it.seek(target);
    }
    fn next(&mut self) {
        self.it.next();
    }
    fn key(&self) -> &[u8] {
        self.it.key()
    }
    fn value(&self) -> &[u8] {
        self.it.value()
    }
    fn entry_off(&self) -> u64 {
        self.it.entry_off()
    }
    fn entry_len(&self) -> u64 {
        let (k, v) = (self.it.key().len(), self.it.value().len());
        (if self.it.list().inline() {
            format::inline_len(k, v)
        } else {
            format::entry_len(k, v)
        }) as u64
    }
    fn data_run(&self) -> Option<PageRun> {
        let page = self.it.entry_off() / PAGE;
        if let Some(r) = self.last_run.get() {
            if page >= r.first && page < r.first + r.count {
                return Some(r);
            }
        }
        let r = self.it.list().data_run_fast(self.it.entry_off());
        self.last_run.set(r);
        r
    }
    fn status(&self) -> Result<()> {
        self.it.status()
    }
}

/// Sorted, disjoint lists of one level, one after the other.
pub struct LevelSource {
    lists: Vec<Arc<SkipList>>,
    i: usize,
    cur: Option<ListSource>,
    err: Option<Error>,
}

impl LevelSource {
    /// A source over `lists` (sorted by key, disjoint).
    pub fn new(lists: Vec<Arc<SkipList>>) -> LevelSource {
        LevelSource {
            lists,
            i: 0,
            cur: None,
            err: None,
        }
    }

    fn skip(&mut self) {
        while let Some(c) = &self.cur {
            if c.valid() {
                return;
            }
            if let Err(e) = c.status() {
                self.err.get_or_insert(e);
                self.cur = None;
                return;
            }
            self.i += 1;
            self.cur = self.lists.get(self.i).map(|l| {
                let mut s = ListSource::new(l);
                s.seek_to_first();
                s
            });
        }
    }
}

impl Source for LevelSource {
    fn valid(&self) -> bool {
        self.cur.as_ref().is_some_and(|c| c.valid())
    }
    fn seek_to_first(&mut self) {
        self.i = 0;
        self.cur = self.lists.first().map(|l| {
            let mut s = ListSource::new(l);
            s.seek_to_first();
            s
        });
        self.skip();
    }
    fn seek(&mut self, target: &[u8]) {
        // The first list holding an entry at or after `target`: the lists
        // before it end before it (one search each; a level has few).
        self.cur = None;
        for (i, l) in self.lists.iter().enumerate() {
            let mut s = ListSource::new(l);
            s.seek(target);
            if s.valid() || s.status().is_err() {
                self.i = i;
                self.cur = Some(s);
                break;
            }
        }
        if self.cur.is_none() {
            self.i = self.lists.len();
        }
        self.skip();
    }
    fn next(&mut self) {
        if let Some(c) = &mut self.cur {
            c.next();
        }
        self.skip();
    }
    fn key(&self) -> &[u8] {
        self.cur.as_ref().map_or(&[], |c| c.key())
    }
    fn value(&self) -> &[u8] {
        self.cur.as_ref().map_or(&[], |c| c.value())
    }
    fn entry_off(&self) -> u64 {
        self.cur.as_ref().map_or(0, |c| c.entry_off())
    }
    fn entry_len(&self) -> u64 {
        self.cur.as_ref().map_or(0, |c| c.entry_len())
    }
    fn data_run(&self) -> Option<PageRun> {
        self.cur.as_ref().and_then(|c| c.data_run())
    }
    fn status(&self) -> Result<()> {
        if let Some(e) = &self.err {
            return Err(e.clone());
        }
        self.cur.as_ref().map_or(Ok(()), |c| c.status())
    }
}

/// The entries of one persistent buffer, in order (a copy-forward links
/// its new list to the buffer it just wrote).
pub struct BufferSource {
    region: Arc<dyn PmRegion>,
    run: PageRun,
    start: u64,
    end: u64,
    pos: u64,
    cur: Option<(u64, usize, u64, usize, u64)>,
    err: Option<Error>,
}

impl BufferSource {
    /// A source over the buffer in `run` (its header checked, and its
    /// entries' crc).
    pub fn open(region: Arc<dyn PmRegion>, run: PageRun) -> Result<BufferSource> {
        let b = super::list::run_bytes(region.as_ref(), run)?;
        let at = run.first * PAGE;
        let h = format::decode_buffer_header(b)
            .map_err(|(o, w)| Error::corruption(region.name(), at + o, w))?;
        // `entry_bytes` is any u64 a damaged header holds: saturate, never
        // wrap (a wrapped end would slice backwards).
        let end = (format::BUFFER_HEADER_BYTES as u64).saturating_add(h.entry_bytes);
        if end > b.len() as u64 {
            return Err(Error::corruption(
                region.name(),
                at + 24,
                "persistent buffer overruns its run",
            ));
        }
        if crate::coding::crc32c(&b[format::BUFFER_HEADER_BYTES..end as usize]) != h.entries_crc {
            return Err(Error::corruption(
                region.name(),
                at + format::BUFFER_HEADER_BYTES as u64,
                "persistent buffer: entries checksum mismatch",
            ));
        }
        Ok(BufferSource {
            start: at + format::BUFFER_HEADER_BYTES as u64,
            end: at + end,
            pos: 0,
            cur: None,
            err: None,
            region,
            run,
        })
    }

    fn load(&mut self) {
        self.cur = None;
        if self.pos >= self.end {
            return;
        }
        let avail = (self.end - self.pos) as usize;
        match self.region.slice(self.pos, avail.min(format::ENTRY_PROBE)) {
            Ok(probe) => {
                let lens = super::list::entry_prefix_len(probe);
                match lens.filter(|&l| l <= avail) {
                    Some(l) => match self
                        .region
                        .slice(self.pos, l)
                        .ok()
                        .and_then(format::entry_shape)
                    {
                        Some(s) => {
                            self.cur = Some((
                                self.pos + s.key_at as u64,
                                s.key_len,
                                self.pos + s.value_at as u64,
                                s.value_len,
                                s.len as u64,
                            ))
                        }
                        None => self.fail(),
                    },
                    None => self.fail(),
                }
            }
            Err(e) => {
                self.err.get_or_insert(e);
            }
        }
    }

    fn fail(&mut self) {
        self.err.get_or_insert(Error::corruption(
            self.region.name(),
            self.pos,
            "persistent buffer: malformed entry",
        ));
        self.cur = None;
    }
}

impl Source for BufferSource {
    fn valid(&self) -> bool {
        self.cur.is_some()
    }
    fn seek_to_first(&mut self) {
        self.pos = self.start;
        self.load();
    }
    fn seek(&mut self, target: &[u8]) {
        // A buffer has no index: walk (copy-forwards, its only users,
        // read it whole).
        self.seek_to_first();
        while self.valid() && compare_internal(self.key(), target).is_lt() {
            self.next();
        }
    }
    fn next(&mut self) {
        if let Some(c) = self.cur {
            self.pos += c.4;
            self.load();
        }
    }
    fn key(&self) -> &[u8] {
        self.cur
            .and_then(|c| self.region.slice(c.0, c.1).ok())
            .unwrap_or(&[])
    }
    fn value(&self) -> &[u8] {
        self.cur
            .and_then(|c| self.region.slice(c.2, c.3).ok())
            .unwrap_or(&[])
    }
    fn entry_off(&self) -> u64 {
        self.pos
    }
    fn entry_len(&self) -> u64 {
        self.cur.map_or(0, |c| c.4)
    }
    fn data_run(&self) -> Option<PageRun> {
        Some(self.run)
    }
    fn status(&self) -> Result<()> {
        match &self.err {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

/// A merge of sources by internal key (every entry of every source).
///
/// The valid sources are kept in a binary min-heap by their current key
/// (ties: the lower index first, as the sources' order ranks them), as
/// RocksDB's `MergingIterator` does: a step compares the advanced source
/// with at most two children per heap level, where a scan for the smallest
/// (LevelDB's `FindSmallest`) compares every source — a link merge of a
/// dozen L0 lists pays that per linked entry.
pub struct Merge {
    kids: Vec<Box<dyn Source>>,
    /// Indices of the valid sources, a min-heap under [`Merge::less`].
    heap: Vec<usize>,
}

impl Merge {
    /// A merge of `kids`.
    pub fn new(kids: Vec<Box<dyn Source>>) -> Merge {
        let heap = Vec::with_capacity(kids.len());
        Merge { kids, heap }
    }

    /// Whether source `a` orders before source `b` (both valid).
    #[inline]
    fn less(&self, a: usize, b: usize) -> bool {
        match compare_internal(self.kids[a].key(), self.kids[b].key()) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => a < b,
        }
    }

    /// Moves the source at heap position `i` down to its place.
    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let l = 2 * i + 1;
            if l >= n {
                return;
            }
            let r = l + 1;
            let c = if r < n && self.less(self.heap[r], self.heap[l]) {
                r
            } else {
                l
            };
            if !self.less(self.heap[c], self.heap[i]) {
                return;
            }
            self.heap.swap(i, c);
            i = c;
        }
    }

    /// Rebuilds the heap from every valid source.
    fn rebuild(&mut self) {
        self.heap.clear();
        self.heap
            .extend((0..self.kids.len()).filter(|&i| self.kids[i].valid()));
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    fn seek_to_first(&mut self) {
        for k in &mut self.kids {
            k.seek_to_first();
        }
        self.rebuild();
    }

    fn seek(&mut self, target: &[u8]) {
        for k in &mut self.kids {
            k.seek(target);
        }
        self.rebuild();
    }

    /// True while positioned on an entry.
    pub fn valid(&self) -> bool {
        !self.heap.is_empty()
    }

    fn next(&mut self) {
        let Some(&top) = self.heap.first() else {
            return;
        };
        self.kids[top].next();
        if !self.kids[top].valid() {
            let last = self.heap.pop().expect("the heap holds the top");
            if self.heap.is_empty() {
                return;
            }
            self.heap[0] = last;
        }
        self.sift_down(0);
    }

    fn top(&self) -> Option<&dyn Source> {
        self.heap.first().map(|&i| self.kids[i].as_ref())
    }

    fn status(&self) -> Result<()> {
        self.kids.iter().try_for_each(|k| k.status())
    }
}

// -------------------------------------------------------------- the loop

/// leveldb's output cutting ([`crate::compaction::SizeCutter`]) over
/// grandparents recorded as (largest internal key, bytes).
pub struct GpCutter {
    target: u64,
    gps: Vec<(Vec<u8>, u64)>,
    i: usize,
    overlap: u64,
    seen: bool,
}

impl GpCutter {
    /// A cutter for outputs of `target` bytes over `gps` (sorted).
    pub fn new(target: u64, gps: Vec<(Vec<u8>, u64)>) -> GpCutter {
        GpCutter {
            target,
            gps,
            i: 0,
            overlap: 0,
            seen: false,
        }
    }

    /// Whether the open output closes before `ikey` (a new user key).
    pub fn cut_before(&mut self, ikey: &[u8], open: Option<u64>) -> bool {
        while self.i < self.gps.len() && compare_internal(ikey, &self.gps[self.i].0).is_gt() {
            if self.seen {
                self.overlap += self.gps[self.i].1;
            }
            self.i += 1;
        }
        self.seen = true;
        let Some(open) = open else {
            return false;
        };
        if self.overlap > self.target.saturating_mul(MAX_GRANDPARENT_OVERLAP_FACTOR) {
            self.overlap = 0;
            return true;
        }
        open >= self.target
    }
}

/// Where tombstones may be dropped: below `level` of `version` nothing
/// may hold the key (leveldb's rule 2).
pub struct Base<'a> {
    /// The version.
    pub version: &'a Version,
    /// The output level.
    pub level: usize,
}

fn is_base_level_for_key(v: &Version, level: usize, user_key: &[u8], cursor: &mut [usize]) -> bool {
    for (tables, c) in v.levels.iter().zip(cursor.iter_mut()).skip(level + 1) {
        while *c < tables.len() && tables[*c].largest_user_key() < user_key {
            *c += 1;
        }
        if *c < tables.len() && tables[*c].smallest_user_key() <= user_key {
            return false;
        }
    }
    true
}

/// The user-key range one part of a merge covers: from `lo` (`None`: the
/// first key) to before `hi` (`None`: the last key).
#[derive(Debug, Clone, Copy, Default)]
pub struct KeySpan<'a> {
    /// First user key.
    pub lo: Option<&'a [u8]>,
    /// The user key the span ends before.
    pub hi: Option<&'a [u8]>,
}

/// Runs the merge over `span` into `outs` with the engine's dropping
/// rules (shadowed entries every reader sees past; tombstones at their
/// base level when `base` is given), cutting where `cutter` says. Every
/// version of a user key is in one span, so the rules see them together.
pub fn merge_into(
    merge: &mut Merge,
    span: KeySpan<'_>,
    outs: &mut Outputs<'_>,
    cutter: &mut GpCutter,
    smallest_snapshot: SeqNo,
    base: Option<Base<'_>>,
) -> Result<std::result::Result<(), Unresumable>> {
    let mut cursor = vec![0usize; base.as_ref().map_or(0, |b| b.version.level_count())];
    let mut cur_user_key: Vec<u8> = Vec::new();
    let mut has_cur = false;
    let mut last_seq = SeqNo::MAX;
    match span.lo {
        Some(lo) => merge.seek(&key::seek_key(lo, key::MAX_SEQNO)),
        None => merge.seek_to_first(),
    }
    while let Some(s) = merge.top() {
        let ikey = s.key();
        let p = key::parse_internal_key(ikey).ok_or_else(|| {
            Error::corruption("compaction input", s.entry_off(), "malformed internal key")
        })?;
        if span.hi.is_some_and(|hi| p.user_key >= hi) {
            break;
        }
        let new_user_key = !has_cur || p.user_key != cur_user_key.as_slice();
        if new_user_key {
            cur_user_key.clear();
            cur_user_key.extend_from_slice(p.user_key);
            has_cur = true;
            last_seq = SeqNo::MAX;
        }
        let drop = if last_seq <= smallest_snapshot {
            true
        } else {
            p.kind == Kind::Delete
                && p.seq <= smallest_snapshot
                && base.as_ref().is_some_and(|b| {
                    is_base_level_for_key(b.version, b.level, p.user_key, &mut cursor)
                })
        };
        last_seq = p.seq;
        if !drop {
            if new_user_key && cutter.cut_before(ikey, outs.open_bytes()) {
                if let Err(u) = outs.cut() {
                    return Ok(Err(u));
                }
            }
            let item = Item {
                ikey,
                value: s.value(),
                entry_off: s.entry_off(),
                entry_len: s.entry_len(),
                data_run: s.data_run(),
            };
            if let Err(u) = outs.add(&item) {
                return Ok(Err(u));
            }
        }
        merge.next();
    }
    merge.status()?;
    Ok(Ok(()))
}

/// The slot of a job: its run and where its link words are.
pub fn slot_ref(run: PageRun, link_offset: usize, capacity: u32) -> SlotRef {
    let base = run.first * PAGE + link_offset as u64;
    SlotRef {
        run,
        count_word: base,
        buffer_word: base + 8,
        outputs: base + 16,
        capacity,
    }
}

/// Writes and persists a new slot run for `slot`.
pub fn write_slot(region: &Arc<dyn PmRegion>, run: PageRun, slot: &Slot) -> Result<SlotRef> {
    let img = slot.encode();
    region.write(run.first * PAGE, &img)?;
    region.persist(run.first * PAGE, img.len())?;
    let g = img.len() - 16 - 8 * slot.capacity as usize;
    Ok(slot_ref(run, g, slot.capacity))
}

/// Reads a slot run: its static part, its link-word offsets, and the
/// output headers it names.
pub fn read_slot(region: &dyn PmRegion, run: PageRun) -> Result<(Slot, SlotRef, Vec<u64>, u64)> {
    let b = super::list::run_bytes(region, run)?;
    let (slot, w) = Slot::decode(b)
        .map_err(|(o, what)| Error::corruption(region.name(), run.first * PAGE + o, what))?;
    let r = slot_ref(run, w, slot.capacity);
    let n = region.load_u64(r.count_word)?;
    if n > u64::from(slot.capacity) {
        return Err(Error::corruption(
            region.name(),
            r.count_word,
            format!("compaction slot names {n} of {} outputs", slot.capacity),
        ));
    }
    let mut outs = Vec::with_capacity(n as usize);
    for i in 0..n {
        outs.push(region.load_u64(r.outputs + 8 * i)?);
    }
    let buffer = region.load_u64(r.buffer_word)?;
    Ok((slot, r, outs, buffer))
}

/// The layout a job's outputs are written in.
pub fn output_layout(mode: Mode, input: Layout) -> Layout {
    match (mode, input) {
        (Mode::Copy, _) => Layout::Ps,
        (Mode::Link, l) => l,
    }
}

/// The origin byte of a job kind.
pub fn origin_of(kind: JobKind) -> Origin {
    match kind {
        JobKind::Merge => Origin::Compaction,
        JobKind::CopyForward => Origin::CopyForward,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::storage::sim::SimRegion;

    fn record(more_parts: Vec<PartRecord>) -> JobRecord {
        JobRecord {
            job: 57,
            level: 1,
            kind: JobKind::Merge,
            mode: Mode::Link,
            drop_tombstones: true,
            smallest_snapshot: 900,
            target_bytes: 64 << 10,
            slot: PageRun {
                first: 300,
                count: 1,
            },
            inputs: vec![(0, 12), (0, 13)],
            more_parts,
        }
    }

    /// Sorted internal keys in memory, a source for [`Merge`].
    struct VecSource {
        keys: Vec<Vec<u8>>,
        i: usize,
        /// The value of every entry: the source's number.
        tag: [u8; 1],
    }

    impl Source for VecSource {
        fn valid(&self) -> bool {
            self.i < self.keys.len()
        }
        fn seek_to_first(&mut self) {
            self.i = 0;
        }
        fn seek(&mut self, target: &[u8]) {
            self.i = self
                .keys
                .partition_point(|k| compare_internal(k, target).is_lt());
        }
        fn next(&mut self) {
            self.i += 1;
        }
        fn key(&self) -> &[u8] {
            &self.keys[self.i]
        }
        fn value(&self) -> &[u8] {
            &self.tag
        }
        fn entry_off(&self) -> u64 {
            self.i as u64
        }
        fn entry_len(&self) -> u64 {
            0
        }
        fn data_run(&self) -> Option<PageRun> {
            None
        }
        fn status(&self) -> Result<()> {
            Ok(())
        }
    }

    /// The heap merge yields every entry of every source in internal-key
    /// order, versions of a user key newest first, equal keys in source
    /// order (the scan for the smallest it replaced did the same), from
    /// the first entry and from a seek; empty sources and sources that
    /// end early leave it.
    #[test]
    fn merge_orders_every_entry_of_every_source() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut draw = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for sources in [0usize, 1, 2, 3, 7, 12] {
            let mut all: Vec<(Vec<u8>, usize)> = Vec::new();
            let mut kids: Vec<Box<dyn Source>> = Vec::new();
            for src in 0..sources {
                let n = if src == 1 { 0 } else { draw(60) };
                let mut keys: Vec<Vec<u8>> = (0..n)
                    .map(|_| {
                        let uk = format!("k{:03}", draw(40));
                        key::make_internal_key(uk.as_bytes(), draw(5), Kind::Put)
                    })
                    .collect();
                keys.sort_by(|a, b| compare_internal(a, b));
                all.extend(keys.iter().map(|k| (k.clone(), src)));
                kids.push(Box::new(VecSource {
                    keys,
                    i: 0,
                    tag: [src as u8],
                }));
            }
            all.sort_by(|a, b| compare_internal(&a.0, &b.0).then(a.1.cmp(&b.1)));
            let mut m = Merge::new(kids);
            m.seek_to_first();
            let mut got = Vec::new();
            while let Some(t) = m.top() {
                got.push((t.key().to_vec(), t.value()[0] as usize));
                m.next();
            }
            assert!(!m.valid());
            assert_eq!(got, all, "{sources} sources");
            let target = key::seek_key(b"k020", key::MAX_SEQNO);
            m.seek(&target);
            let mut from = Vec::new();
            while let Some(t) = m.top() {
                from.push((t.key().to_vec(), t.value()[0] as usize));
                m.next();
            }
            let skip = all.partition_point(|(k, _)| compare_internal(k, &target).is_lt());
            assert_eq!(from, all[skip..], "{sources} sources, from a seek");
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The module doc's worked examples, one part and two.
    #[test]
    fn record_worked_examples() {
        let one = record(Vec::new());
        let b = one.encode();
        assert_eq!(
            hex(&b),
            "01 39 01 00 00 01 84 07 80 80 04 ac 02 01 02 00 0c 00 0d"
        );
        assert_eq!(JobRecord::decode(&b).unwrap(), one);
        let two = record(vec![PartRecord {
            job: 58,
            slot: PageRun {
                first: 301,
                count: 1,
            },
            first_key: b"m".to_vec(),
        }]);
        let b = two.encode();
        assert_eq!(
            hex(&b),
            "02 39 01 00 00 01 84 07 80 80 04 ac 02 01 02 00 0c 00 0d 01 3a ad 02 01 01 6d"
        );
        assert_eq!(JobRecord::decode(&b).unwrap(), two);
        let parts = two.parts();
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (parts[0].job, parts[0].span.lo, parts[0].span.hi),
            (57, None, Some(&b"m"[..]))
        );
        assert_eq!(
            (parts[1].job, parts[1].span.lo, parts[1].span.hi),
            (58, Some(&b"m"[..]), None)
        );
    }

    /// Parts out of order, an empty first key, none listed, or parts of a
    /// copy-forward are a malformed record.
    #[test]
    fn malformed_parts_are_corruption() {
        let part = |job, key: &str| PartRecord {
            job,
            slot: PageRun {
                first: 301 + job,
                count: 1,
            },
            first_key: key.as_bytes().to_vec(),
        };
        let bad = [
            record(vec![part(58, "m"), part(59, "m")]).encode(),
            record(vec![part(58, "m"), part(59, "c")]).encode(),
            record(vec![part(58, "")]).encode(),
            {
                let mut r = record(vec![part(58, "m")]);
                r.kind = JobKind::CopyForward;
                r.encode()
            },
            {
                // Version 2 with no parts.
                let mut b = record(Vec::new()).encode();
                b[0] = 2;
                b.push(0);
                b
            },
            {
                // A key running past the end.
                let mut b = record(vec![part(58, "m")]).encode();
                let n = b.len();
                b[n - 2] = 5;
                b
            },
        ];
        for b in bad {
            let e = JobRecord::decode(&b).err().unwrap();
            assert!(e.is_corruption(), "{e}");
        }
    }

    /// A buffer header whose entry bytes overflow the run's end is
    /// corruption (seen writing fuzz/fuzz_targets/tlsm.rs, which panics on
    /// such a header: the end wrapped below the header and the entries
    /// were sliced backwards — a panic in every build).
    #[test]
    fn buffer_entry_bytes_near_u64_max_are_corruption() {
        let sim = Arc::new(SimRegion::new(8 * 4096));
        for entry_bytes in [u64::MAX, u64::MAX - 16, u64::MAX - 39] {
            let h = format::encode_buffer_header(&format::BufferHeader {
                id: 9,
                entry_bytes,
                entries_crc: 0,
            });
            sim.write(2 * 4096, &h).unwrap();
            let region: Arc<dyn PmRegion> = sim.clone();
            let e = BufferSource::open(region, PageRun { first: 2, count: 1 })
                .err()
                .unwrap();
            assert!(e.is_corruption(), "{e}");
        }
    }
}
