//! The PM container shared by `triangle` and `matrix`: rows (RowTables) in
//! L0, the key ranges compaction has consumed from them, the flush into
//! the container (or past it, the sequential bypass), the write
//! controller, and the *side* job both designs run — merge one key range
//! of some rows with the overlapped L1 tables (a right-angle side for
//! TriangleKV, a column for MatrixKV).
//!
//! # Rows and their consumed ranges
//!
//! Every L0 table is a row: a [`TableMeta`] with tier PM, format RowTable,
//! its page runs (metadata run first, then the data extents still owned).
//! A row is identified by its largest seqno (`seq_max`, unique). A side
//! compaction of `[lo, hi)` takes the rows with `seq_max <= through` — a
//! prefix in age, since it takes every row older than the newest it
//! takes — so what is consumed is a step function of the user key:
//! `consumed_through(k)` = the largest `through` of a side that covered
//! `k`, and entry `k` of row `r` is consumed iff `r.seq_max <=
//! consumed_through(k)`. Older rows are always consumed at least as much
//! as newer ones, so a search of the container stops at the first row
//! consumed at its key (everything older is in L1 already).
//!
//! [`ContainerState`] — that step function, the rotation cursor, and
//! MatrixKV's compactor boundary and per-row first-key indexes — is the
//! MANIFEST state of the container, written whole by every side edit as
//! the design record [`CONTAINER_TAG`].
//!
//! ```text
//! design record CONTAINER_TAG:
//!  u8 version = 1
//!  u8 flags (bit 0: cursor present)   [varint len, cursor user key]
//!  varint step count s >= 1
//!  s × (varint len, start user key, varint through_seq)   starts increase,
//!        the first start is the empty key, adjacent throughs differ
//!  varint compactor_seq
//!  varint f, f × (varint row seq_max, varint first_key_index)
//! ```
//!
//! Worked example: after a right-angle side `[b, d)` taking rows up to
//! seqno 300, the cursor at `d`: `01 01 01 64 | 03 00 00 01 62 ac 02 01 64
//! 00 | 00 | 00` (steps `["": 0, "b": 300, "d": 0]`).
//!
//! # Page release
//!
//! A side edit replaces a row whose extents became fully consumed by a new
//! meta (new table id, same row) listing fewer runs, and deletes a row that
//! is consumed entirely. The engine frees a run when the last live handle
//! listing it goes (version/mod.rs invariant 3): after the edit is durable
//! and no version still reading the old row is alive (lazy deletion).
//!
//! # Concurrency
//!
//! A side job gathers its victims with `k` collector threads (each merges
//! the victim windows of some rows into a sorted run of references) and
//! merges them with the L1 inputs on up to `k` threads, each over one part
//! of the key range (cut at victim keys, so all versions of a key meet in
//! one merge).
//!
//! Flushes are serial (the engine's contract); a side task lists every row
//! it takes and the L1 tables it rewrites as inputs, so the engine's busy
//! set keeps two sides, or a side and an L1→L2 compaction of the same
//! table, apart. Side jobs never write PM; they read rows that their task
//! pins. [`Container`] methods take `&self`; the row cache and the flush
//! bookkeeping are behind mutexes.
//!
//! # Invariants
//!
//! 1. Rows are exactly the L0 tables; their seqno ranges are disjoint.
//! 2. `consumed_through` is non-increasing in row age: for rows `a` older
//!    than `b`, every key consumed in `b` is consumed in `a`.
//! 3. A row's data extent is listed in its meta until every entry in it is
//!    consumed; its metadata run until the whole row is.
//! 4. An L1 table written by a side never spans an L1 table that is not
//!    one of the side's inputs, and a sequential-bypass table overlaps no
//!    row and no L1 table (so the two never overlap either: a side's
//!    outputs lie within its input tables and the span of the rows).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::coding::{put_length_prefixed, put_varint, Reader};
use crate::compaction::{merge_to_ssts, JobEnv, KeyRange, OutputSpec};
use crate::design::classic::Classic;
use crate::design::leveled;
use crate::design::{
    Design, Headroom, JobOutput, PickContext, Task, TaskKind, WriteControl, Written,
};
use crate::error::{Error, Result};
use crate::iter::{InternalIterator, MergingIterator};
use crate::key::{self, SeqNo};
use crate::memtable::MemTable;
use crate::options::{Options, Preset};
use crate::stats::{StallCause, Tier};
use crate::storage::alloc::{take_counted, PageRun, PAGE_SIZE_BYTES};
use crate::storage::pm::PmTier;
use crate::storage::PmRegion;
use crate::version::edit::{TableFormat, TableMeta, VersionEdit};
use crate::version::{LevelIterator, TableContext, TableHandle, Version};

use hint::ContainerView;
use rowtable::{BuildParams, Expect, PageSource, RowTable};

pub mod hint;
pub mod inspect;
pub mod rowtable;
pub mod salvage;
pub mod side;

/// Design-record tag of the container state.
pub const CONTAINER_TAG: u32 = 0x434e_5452;

const PAGE: u64 = PAGE_SIZE_BYTES;

/// How long a flush waits for PM pages before it fails.
const PM_WAIT_LIMIT: Duration = Duration::from_secs(120);

// ------------------------------------------------------------------ state

/// One step of the consumed-range function: from `start` (inclusive) to the
/// next step's start, rows with `seq_max <= through` are consumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// First user key of the step.
    pub start: Vec<u8>,
    /// Rows with `seq_max <= through` are consumed here (0: none).
    pub through: SeqNo,
}

/// The container's MANIFEST state (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerState {
    /// Where the next side starts (`None`: at the start of the key space).
    pub cursor: Option<Vec<u8>>,
    /// The consumed-range step function.
    pub steps: Vec<Step>,
    /// MatrixKV: rows with `seq_max <=` this form the compactor (0: none).
    pub compactor_seq: SeqNo,
    /// MatrixKV: `(row seq_max, index of its first unconsumed entry)` for
    /// every compactor row.
    pub first_key_index: Vec<(SeqNo, u64)>,
}

impl Default for ContainerState {
    fn default() -> Self {
        ContainerState {
            cursor: None,
            steps: vec![Step {
                start: Vec::new(),
                through: 0,
            }],
            compactor_seq: 0,
            first_key_index: Vec::new(),
        }
    }
}

fn bad_state(what: impl Into<String>) -> Error {
    Error::corruption(
        "MANIFEST",
        0,
        format!("PM container state: {}", what.into()),
    )
}

impl ContainerState {
    /// The state recorded in a version (the default if none).
    pub fn of(v: &Version) -> Result<ContainerState> {
        match v.design_state.get(&CONTAINER_TAG) {
            Some(b) => ContainerState::decode(b),
            None => Ok(ContainerState::default()),
        }
    }

    /// Encodes the state as its design record.
    pub fn encode(&self) -> Vec<u8> {
        debug_assert!(self.is_well_formed());
        let mut b = vec![1u8];
        match &self.cursor {
            Some(c) => {
                b.push(1);
                put_length_prefixed(&mut b, c);
            }
            None => b.push(0),
        }
        put_varint(&mut b, self.steps.len() as u64);
        for s in &self.steps {
            put_length_prefixed(&mut b, &s.start);
            put_varint(&mut b, s.through);
        }
        put_varint(&mut b, self.compactor_seq);
        put_varint(&mut b, self.first_key_index.len() as u64);
        for (s, i) in &self.first_key_index {
            put_varint(&mut b, *s);
            put_varint(&mut b, *i);
        }
        b
    }

    /// Decodes a design record; malformed input is corruption.
    pub fn decode(b: &[u8]) -> Result<ContainerState> {
        let mut r = Reader::new(b);
        let short = || bad_state("truncated record");
        if r.u8().ok_or_else(short)? != 1 {
            return Err(bad_state("unknown version"));
        }
        let cursor = match r.u8().ok_or_else(short)? {
            0 => None,
            1 => Some(r.length_prefixed().ok_or_else(short)?.to_vec()),
            _ => return Err(bad_state("bad flags")),
        };
        let n = r.varint().ok_or_else(short)?;
        if n == 0 || n > b.len() as u64 {
            return Err(bad_state("bad step count"));
        }
        let mut steps = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let start = r.length_prefixed().ok_or_else(short)?.to_vec();
            let through = r.varint().ok_or_else(short)?;
            steps.push(Step { start, through });
        }
        let compactor_seq = r.varint().ok_or_else(short)?;
        let f = r.varint().ok_or_else(short)?;
        if f > b.len() as u64 {
            return Err(bad_state("bad first-key-index count"));
        }
        let mut first_key_index = Vec::with_capacity(f as usize);
        for _ in 0..f {
            first_key_index.push((r.varint().ok_or_else(short)?, r.varint().ok_or_else(short)?));
        }
        if !r.is_empty() {
            return Err(bad_state("trailing bytes"));
        }
        let s = ContainerState {
            cursor,
            steps,
            compactor_seq,
            first_key_index,
        };
        if !s.is_well_formed() {
            return Err(bad_state("steps out of order"));
        }
        Ok(s)
    }

    fn is_well_formed(&self) -> bool {
        self.steps.first().is_some_and(|s| s.start.is_empty())
            && self
                .steps
                .windows(2)
                .all(|w| w[0].start < w[1].start && w[0].through != w[1].through)
    }

    /// Rows with `seq_max <=` this have consumed `user_key`.
    #[inline]
    pub fn consumed_through(&self, user_key: &[u8]) -> SeqNo {
        let i = self
            .steps
            .partition_point(|s| s.start.as_slice() <= user_key);
        self.steps[i.saturating_sub(1)].through
    }

    /// Marks `[lo, hi)` consumed for rows with `seq_max <= through`.
    pub fn consume(&mut self, lo: &[u8], hi: Option<&[u8]>, through: SeqNo) {
        if hi.is_some_and(|h| h <= lo) {
            return;
        }
        self.split_at(lo);
        if let Some(h) = hi {
            self.split_at(h);
        }
        for s in &mut self.steps {
            if s.start.as_slice() >= lo && hi.is_none_or(|h| s.start.as_slice() < h) {
                s.through = s.through.max(through);
            }
        }
        self.merge();
    }

    /// Forgets consumption that no live row can see: thresholds below
    /// `oldest` (the smallest `seq_max` of a live row; `None`: no rows).
    pub fn prune(&mut self, oldest: Option<SeqNo>) {
        for s in &mut self.steps {
            if oldest.is_none_or(|o| s.through < o) {
                s.through = 0;
            }
        }
        self.merge();
        match oldest {
            Some(o) => {
                self.first_key_index.retain(|(s, _)| *s >= o);
            }
            None => self.first_key_index.clear(),
        }
    }

    fn split_at(&mut self, k: &[u8]) {
        let i = self.steps.partition_point(|s| s.start.as_slice() <= k);
        if self.steps[i - 1].start.as_slice() != k {
            let through = self.steps[i - 1].through;
            self.steps.insert(
                i,
                Step {
                    start: k.to_vec(),
                    through,
                },
            );
        }
    }

    fn merge(&mut self) {
        self.steps.dedup_by(|b, a| a.through == b.through);
    }

    /// The user-key ranges consumed in a row with `seq_max`, in order.
    pub fn consumed_ranges(&self, seq_max: SeqNo) -> Vec<(&[u8], Option<&[u8]>)> {
        let mut out: Vec<(&[u8], Option<&[u8]>)> = Vec::new();
        for (i, s) in self.steps.iter().enumerate() {
            if s.through >= seq_max && s.through > 0 {
                let end = self.steps.get(i + 1).map(|n| n.start.as_slice());
                match out.last_mut() {
                    Some(last) if last.1 == Some(s.start.as_slice()) => last.1 = end,
                    _ => out.push((s.start.as_slice(), end)),
                }
            }
        }
        out
    }

    /// The consumed entries of `row` as sorted index intervals that neither
    /// overlap nor touch (so one step skips a whole consumed stretch).
    pub fn consumed_intervals(&self, row: &RowTable) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        for (lo, hi) in self.consumed_ranges(row.seq_max()) {
            let a = row.lower_bound_user(lo);
            let b = hi.map_or(row.len(), |h| row.lower_bound_user(h));
            if a < b {
                // Ranges apart in key space may touch in the row: merge.
                match out.last_mut() {
                    Some(last) if last.1 >= a => last.1 = last.1.max(b),
                    _ => out.push((a, b)),
                }
            }
        }
        out
    }
}

/// Entries of `[a, b)` not inside the sorted intervals.
pub fn live_count(intervals: &[(usize, usize)], a: usize, b: usize) -> usize {
    let mut n = b.saturating_sub(a);
    for &(x, y) in intervals {
        let (lo, hi) = (x.max(a), y.min(b));
        if lo < hi {
            n -= hi - lo;
        }
    }
    n
}

/// True if every index of `[a, b)` is inside the intervals.
pub fn covered(intervals: &[(usize, usize)], a: usize, b: usize) -> bool {
    live_count(intervals, a, b) == 0
}

// ------------------------------------------------------------ side plans

/// What a side task consumes: carried in the task ([`Task::plan`]) from the
/// pure picker to the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidePlan {
    /// First user key of the side.
    pub lo: Vec<u8>,
    /// End of the side (exclusive; `None`: the end of the key space).
    pub hi: Option<Vec<u8>>,
    /// Rows with `seq_max <=` this are taken.
    pub through: SeqNo,
    /// The cursor after this side.
    pub next_cursor: Option<Vec<u8>>,
    /// The compactor boundary after this side (MatrixKV; 0 for TriangleKV).
    pub compactor_seq: SeqNo,
    /// Estimated bytes of L0 entries the side takes.
    pub victim_bytes: u64,
}

impl SidePlan {
    /// The plan of a side task.
    pub fn of(task: &Task) -> Option<SidePlan> {
        task.plan::<SidePlan>().cloned()
    }

    /// True if `user_key` is inside the side.
    pub fn contains(&self, user_key: &[u8]) -> bool {
        user_key >= self.lo.as_slice() && self.hi.as_deref().is_none_or(|h| user_key < h)
    }
}

/// The smallest user key greater than `k` (`k ‖ 0x00`).
pub fn successor(k: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(k.len() + 1);
    s.extend_from_slice(k);
    s.push(0);
    s
}

// ------------------------------------------------------------- row cache

/// Open readers of the rows, shared by table handles, views and jobs, so a
/// row's metadata is checked once per process.
///
/// The cache holds its readers itself: the picker and the jobs open every
/// row of a version, and a write-only load has no view keeping them open, so
/// a weak cache would re-check every row's metadata (a checksum and a walk
/// of every element) at every pick. Each flush drops the readers of rows that
/// are no longer in its version (`RowCache::retain_live`); a reader kept a
/// little longer is harmless, since its key `(first metadata page, seq_max)`
/// is never reused (seqnos only grow).
pub struct RowCache {
    region: Arc<dyn PmRegion>,
    verify_data: bool,
    open: Mutex<HashMap<(u64, SeqNo), Arc<RowTable>>>,
    /// Rows whose data this process wrote or already verified.
    verified: Mutex<HashSet<(u64, SeqNo)>>,
}

impl RowCache {
    fn new(region: Arc<dyn PmRegion>, verify_data: bool) -> RowCache {
        RowCache {
            region,
            verify_data,
            open: Mutex::new(HashMap::new()),
            verified: Mutex::new(HashSet::new()),
        }
    }

    /// The reader of the row `meta` describes.
    pub fn get(&self, meta: &TableMeta) -> Result<Arc<RowTable>> {
        let Some(&meta_run) = meta.pm_pages.first() else {
            return Err(Error::corruption(
                "MANIFEST",
                0,
                format!("PM row {} lists no page runs", meta.id),
            ));
        };
        if meta.format != TableFormat::RowTable || meta.tier != Tier::Pm {
            return Err(Error::corruption(
                "MANIFEST",
                0,
                format!("L0 table {} is not a PM RowTable", meta.id),
            ));
        }
        let id = (meta_run.first, meta.seq_max);
        if let Some(t) = self.open.lock().get(&id) {
            return Ok(Arc::clone(t));
        }
        let verify = self.verify_data && !self.verified.lock().contains(&id);
        let t = Arc::new(RowTable::open(
            Arc::clone(&self.region),
            meta_run,
            Expect {
                seq_min: meta.seq_min,
                seq_max: meta.seq_max,
                entries: meta.entries,
            },
            &meta.pm_pages,
            verify,
        )?);
        self.verified.lock().insert(id);
        // Another thread may have opened it meanwhile: keep one reader.
        Ok(Arc::clone(self.open.lock().entry(id).or_insert(t)))
    }

    fn built(&self, t: &Arc<RowTable>) {
        let id = (t.meta_run().first, t.seq_max());
        self.verified.lock().insert(id);
        self.open.lock().insert(id, Arc::clone(t));
    }

    /// DRAM bytes of the open rows' filters (rowtable.rs).
    pub fn filter_bytes(&self) -> u64 {
        self.open.lock().values().map(|t| t.filter_bytes()).sum()
    }

    /// Forgets the rows that are not `live` (their readers and whether
    /// their data was verified).
    fn retain_live(&self, live: &HashSet<(u64, SeqNo)>) {
        self.open.lock().retain(|id, _| live.contains(id));
        let mut v = self.verified.lock();
        if v.len() > 2 * live.len() + 64 {
            v.retain(|id| live.contains(id));
        }
    }
}

// ------------------------------------------------------------- container

/// Sizes and switches of a container.
#[derive(Debug, Clone)]
pub struct Config {
    /// Bytes of PM data pages.
    pub capacity_bytes: u64,
    /// Container bytes at which compaction of L0 starts.
    pub limit_bytes: u64,
    /// Upper bound of the PM a flushed memtable takes.
    pub row_estimate_bytes: u64,
    /// PM kept free beyond the rows owed, for the WAL (a few extents).
    pub wal_reserve_bytes: u64,
    /// Target data extent size, in pages.
    pub extent_pages: u64,
    /// Use the forward pointers when searching.
    pub hints: bool,
    /// Collector threads of a side job.
    pub collectors: usize,
    /// Target SST size.
    pub sst_size_bytes: u64,
    /// Growth factor between levels (AF).
    pub level_size_multiplier: u64,
    /// TriangleKV: most L0 bytes one right-angle side takes.
    pub side_max_bytes: u64,
    /// TriangleKV: fewest L0 bytes one right-angle side takes (unless it
    /// reaches the end of the key space).
    pub side_min_bytes: u64,
}

impl Config {
    /// Sizes for `opts` on a PM tier of `capacity_bytes` data bytes whose
    /// WAL extents are `wal_extent_bytes` long.
    pub fn new(opts: &Options, capacity_bytes: u64, wal_extent_bytes: u64) -> Result<Config> {
        // PM accounting. A memtable's WAL grows while it is written (to
        // about a memtable); its flush then adds a row of at most
        // `row_estimate`, and the WAL is freed only once the row is durable.
        // The flush sets its pages aside before it pins a version
        // (`prepare_flush`), waiting for sides to free some if needed, so
        // PM may fill: writes stop only when it could not take the rows of
        // the memtables waiting to be flushed plus a few WAL extents
        // (`write_control`), and sides take priority once it could not take
        // two more rows (`l0_score`). Progress: with two WALs and a row
        // guaranteed to fit (`floor`), what the WALs do not hold is
        // container, which sides can always free.
        let mem = opts.memtable_size_bytes as u64;
        let wal_on_pm = opts.wal_placement() == crate::WalPlacement::Pm;
        // Data extents: about 1/16 of a memtable — or exactly a PM WAL
        // extent when that is not much larger, so that the runs compaction
        // frees are the contiguous runs the WAL asks for (a fragmented PM
        // tier would otherwise fail a WAL with free space to spare).
        let extent_pages = if wal_on_pm && wal_extent_bytes <= mem / 2 {
            wal_extent_bytes.div_ceil(PAGE)
        } else {
            (mem / 16).clamp(16 << 10, 2 << 20).div_ceil(PAGE)
        };
        let row_estimate_bytes = mem + mem / 64 + (mem / (extent_pages * PAGE) + 3) * PAGE;
        let (wal_bytes, wal_reserve_bytes) = if wal_on_pm {
            (mem + 3 * wal_extent_bytes, 3 * wal_extent_bytes)
        } else {
            (0, 0)
        };
        // Two WALs (the memtable being written and the one being flushed)
        // and the row of one.
        let floor = 2 * wal_bytes + row_estimate_bytes;
        if capacity_bytes < floor {
            return Err(Error::InvalidOptions(format!(
                "`pm_size_bytes` = {} is too small for design `{}`: its {} data bytes must hold \
                 two WALs and a flushed memtable ({floor} bytes with `memtable_size_bytes` = {mem})",
                opts.pm_size_bytes.max(capacity_bytes),
                opts.design,
                capacity_bytes
            )));
        }
        if opts.background_threads < 2 {
            return Err(Error::InvalidOptions(format!(
                "design `{}` needs `background_threads` >= 2 (a flush may wait for a compaction \
                 to free PM), got {}",
                opts.design, opts.background_threads
            )));
        }
        // The paper starts sides at 60% of PM: 4.8 GB of 8 GB, where two
        // 64 MB WALs and a flush's row hardly count. On a PM tier only a few
        // memtables big (BENCH.md's scales: 400 MB for 64 MB memtables),
        // 60% of all of PM leaves less room than one flush above the limit,
        // so writers wait on PM at every flush. The default takes 60% of
        // what is left after two WALs and two rows: the paper's figure at
        // its scale (≈ 4.76 GB of 8 GB), ≈ 84 MB of 400 MB at `medium`.
        // (`tierkv-bench compare --configs tierkv:triangle,tierkv:triangle/limit=96m
        // --benchmarks fillrandom --scale medium`, 60% of all PM against
        // 96 MB, twice in one run: 55.5 / 50.1 K against 72.4 / 66.0 K
        // ops/s, SSD write-amp 2.60 / 2.88 against 2.24 / 2.24.)
        let headroom_bytes = 2 * wal_bytes + 2 * row_estimate_bytes;
        let limit_bytes = match opts.pm_container_limit_bytes {
            0 => (capacity_bytes.saturating_sub(headroom_bytes) / 10 * 6).max(row_estimate_bytes),
            n => n,
        };
        // The paper's sides are ½·AF·S_sst ..= AF·S_sst with S_sst = 64 MB
        // against a 4.8 GB container (60% of 8 GB): at most 2/15 of it. A
        // smaller PM tier keeps that ratio, so a side stays fine-grained.
        let af = opts.level_size_multiplier;
        let side_max_bytes = (af.saturating_mul(opts.sst_size_bytes))
            .min(limit_bytes / 15 * 2)
            .max(16 << 10);
        Ok(Config {
            capacity_bytes,
            limit_bytes,
            row_estimate_bytes,
            wal_reserve_bytes,
            extent_pages,
            hints: opts.pm_hints,
            collectors: match opts.pm_collector_threads {
                0 => opts.background_threads.min(8),
                n => n,
            }
            .max(1),
            sst_size_bytes: opts.sst_size_bytes,
            level_size_multiplier: af,
            side_max_bytes,
            side_min_bytes: side_max_bytes / 2,
        })
    }
}

/// What the flushes against one version built (a WAL replay flushes
/// several memtables against one version before any edit is applied).
#[derive(Default)]
struct Recent {
    version: Weak<Version>,
    last_row: Option<Arc<RowTable>>,
    rows: Vec<(Vec<u8>, Vec<u8>)>,
    l1: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Pages set aside for the next flush by [`Container::prepare_flush`].
#[derive(Default)]
struct Reservation {
    meta: Vec<PageRun>,
    data: Vec<PageRun>,
}

/// Takes `want` pages (at least `min`) off the front of a reserved run.
fn carve(runs: &mut Vec<PageRun>, want: u64, min: u64) -> Option<PageRun> {
    let i = runs.iter().position(|r| r.count >= min)?;
    let r = &mut runs[i];
    let n = want.min(r.count);
    let out = PageRun {
        first: r.first,
        count: n,
    };
    r.first += n;
    r.count -= n;
    if r.count == 0 {
        runs.remove(i);
    }
    Some(out)
}

/// The container: PM tier, row readers, sizes, and the SSD-level picker.
pub struct Container {
    pm: Arc<PmTier>,
    region: Arc<dyn PmRegion>,
    /// Sizes and switches.
    pub cfg: Config,
    rows: Arc<RowCache>,
    recent: Mutex<Vec<Recent>>,
    reserved: Mutex<Reservation>,
    /// PM bytes the flush under way set aside for its row
    /// ([`Container::prepare_flush`]) until the engine stops counting its
    /// memtable as waiting ([`Container::flush_built`]): until then the
    /// write controller keeps room for that memtable's row, but the room
    /// is already taken from free PM.
    flush_held: AtomicU64,
    /// Allocations waiting for PM ([`Container::alloc_wait`]): while any
    /// waits, L0 is under pressure whatever the free total says (the free
    /// pages may hold no run long enough).
    alloc_waiters: AtomicU64,
    /// Leveled compaction below L1.
    pub leveled: Classic,
}

impl Container {
    /// A container on `pm` sized by `opts`.
    pub fn new(opts: &Options, pm: Arc<PmTier>) -> Result<Container> {
        let alloc = pm.allocator();
        let capacity = (alloc.total_pages() - alloc.data_start_page()) * PAGE;
        let cfg = Config::new(
            opts,
            capacity,
            crate::wal::pm::extent_len_for_region(pm.region().len()),
        )?;
        let region = Arc::clone(pm.region());
        Ok(Container {
            rows: Arc::new(RowCache::new(Arc::clone(&region), opts.verify_checksums)),
            region,
            pm,
            cfg,
            recent: Mutex::new(Vec::new()),
            reserved: Mutex::new(Reservation::default()),
            flush_held: AtomicU64::new(0),
            alloc_waiters: AtomicU64::new(0),
            leveled: Classic::new(opts),
        })
    }

    /// The reader of a row.
    pub fn row(&self, meta: &TableMeta) -> Result<Arc<RowTable>> {
        self.rows.get(meta)
    }

    /// Registers the PM table opener and the L0 view.
    pub fn install(&self, ctx: &Arc<TableContext>) {
        let rows = Arc::clone(&self.rows);
        let _ = ctx.pm_opener.set(Box::new(move |meta: &TableMeta| {
            let t: Arc<dyn crate::iter::TableReader> = rows.get(meta)?;
            Ok(t)
        }));
        let _ = ctx
            .design_record_check
            .set(Box::new(|tag: u32, bytes: &[u8]| match tag {
                CONTAINER_TAG => ContainerState::decode(bytes).map(|_| ()),
                _ => Ok(()),
            }));
        let rows = Arc::clone(&self.rows);
        let hints = self.cfg.hints;
        let _ = ctx
            .level_view
            .set(Box::new(move |v: &Version, level: usize| {
                if level != 0 || v.levels[0].is_empty() {
                    return None;
                }
                let view: Arc<dyn crate::iter::TableReader> = Arc::new(ContainerView::new(
                    v.levels[0].clone(),
                    v.design_state.get(&CONTAINER_TAG).cloned(),
                    Arc::clone(&rows),
                    hints,
                ));
                Some(view)
            }));
    }

    /// Bytes of PM the rows occupy.
    pub fn container_bytes(v: &Version) -> u64 {
        v.levels[0].iter().map(|t| t.meta.size_bytes).sum()
    }

    /// Free PM bytes.
    pub fn free_bytes(&self) -> u64 {
        self.pm.allocator().free_pages() * PAGE
    }

    /// How urgently L0 must be compacted, on the scale of the leveled
    /// scores: container bytes over the limit, as RocksDB scores L0
    /// against its trigger (the level furthest over its target goes
    /// first), and at least 2 when PM is about to run short of room for
    /// the next flushes (sides free PM, L1→L2 compactions do not).
    ///
    /// An earlier version capped it at 1 outside that pressure, so an L1
    /// over its target always went first; the container then sat full and
    /// writers waited on PM: `tierkv-bench compare --configs
    /// tierkv:triangle --benchmarks fillrandom --scale small`, paired runs
    /// on a loaded machine, gave 36–39 K ops/s capped and 58–60 K uncapped.
    pub fn l0_score(&self, v: &Version) -> f64 {
        if v.levels[0].is_empty() {
            return 0.0;
        }
        let score = Self::container_bytes(v) as f64 / self.cfg.limit_bytes.max(1) as f64;
        if self.pressure() {
            score.max(2.0)
        } else {
            score
        }
    }

    /// PM is about to run short of room for the next flushes, or an
    /// allocation already waits for room.
    fn pressure(&self) -> bool {
        self.free_bytes() < 2 * self.cfg.row_estimate_bytes + self.cfg.wal_reserve_bytes
            || self.alloc_waiters.load(Ordering::Acquire) > 0
    }

    /// PM the stop keeps free: the rows of the memtables waiting to be
    /// flushed, less what the flush under way has already set aside, plus
    /// a few WAL extents (see [`Config::new`]).
    fn need_bytes(&self, immutable_count: usize) -> u64 {
        (immutable_count as u64 * self.cfg.row_estimate_bytes).saturating_sub(self.held_bytes())
            + self.cfg.wal_reserve_bytes
    }

    /// What the flush under way holds, as far as it covers its memtable's
    /// row (a row larger than estimated takes the rest from free PM, not
    /// from the next memtable's room).
    fn held_bytes(&self) -> u64 {
        self.flush_held
            .load(Ordering::Acquire)
            .min(self.cfg.row_estimate_bytes)
    }

    /// The write controller: writes stop (a recorded `PmFull` stall) only
    /// when PM could not take the rows of the memtables waiting to be
    /// flushed plus a few WAL extents ([`Container::need_bytes`]).
    pub fn write_control(&self, immutable_count: usize) -> WriteControl {
        let need = self.need_bytes(immutable_count);
        if self.free_bytes() < need {
            WriteControl::Stop(StallCause::PmFull)
        } else {
            WriteControl::Proceed
        }
    }

    /// Room before [`Container::write_control`] stops writes, in user
    /// bytes: the free PM above what the stop keeps for the waiting rows
    /// and WAL extents, halved because until its flush frees the WAL each
    /// user byte takes PM twice (WAL record, then row).
    pub fn headroom(&self, immutable_count: usize) -> Headroom {
        let need = self.need_bytes(immutable_count);
        let data_pages = {
            let a = self.pm.allocator();
            a.total_pages() - a.data_start_page()
        };
        Headroom {
            free_bytes: self.free_bytes().saturating_sub(need) / 2,
            capacity_bytes: (data_pages * PAGE).saturating_sub(self.cfg.wal_reserve_bytes) / 2,
            // A memtable switch reserves a whole row at once (`need`
            // grows by a row; the flush's own allocation of it is then
            // not counted again, `flush_held`).
            step_bytes: self.cfg.row_estimate_bytes / 2,
        }
    }

    /// Changes whenever free PM plus what the next flush holds moves by a
    /// 64th of a memtable: the write-control verdict follows the two
    /// together (each write's WAL record consumes free PM; a flush taking
    /// its row moves pages from one to the other).
    pub fn write_control_epoch(&self) -> u64 {
        let step = (self.cfg.row_estimate_bytes / 64).max(PAGE);
        (self.free_bytes() + self.held_bytes()) / step
    }

    /// The L1+ picker on a copy of `v` without its rows.
    pub fn pick_leveled(&self, v: &Version, cx: &PickContext) -> Option<(f64, Task)> {
        let mut ssd = Version {
            design_state: Default::default(),
            level_views: Vec::new(),
            ..v.clone()
        };
        ssd.levels[0].clear();
        let scores = self.leveled.scores(&ssd, cx.busy);
        let best = scores.iter().copied().fold(0.0f64, f64::max);
        let task = Design::pick(&self.leveled, &ssd, cx)?;
        Some((best, task))
    }

    // --------------------------------------------------------------- flush

    /// Sets aside the PM pages the row of `mem` will take, waiting for
    /// compaction to free them if PM is full. Runs before the flush job
    /// pins a version (the pages compaction frees are those of rows no
    /// version references any more).
    pub fn prepare_flush(&self, mem: &Arc<MemTable>) -> Result<()> {
        self.release_reservation();
        self.flush_held.store(0, Ordering::Release);
        let mut it = mem.iter();
        it.seek_to_first();
        let (mut n, mut keys, mut values, mut value_pages_max) = (0u64, 0u64, 0u64, 0u64);
        while it.valid() {
            n += 1;
            keys += it.key().len() as u64;
            let v = it.value().len() as u64;
            values += v;
            value_pages_max = value_pages_max.max(v.div_ceil(PAGE));
            it.next();
        }
        if n == 0 {
            return Ok(());
        }
        let mut r = Reservation::default();
        let result = (|| -> Result<()> {
            // Data: runs that each take any value (at least the largest
            // value's pages); a run leaves fewer than that many pages unused
            // at its end (the value that did not fit goes to the next run).
            let need = values.div_ceil(PAGE);
            let mut covered = 0u64;
            while values > 0 && covered < need {
                let want = (need - covered + value_pages_max)
                    .min(self.cfg.extent_pages)
                    .max(value_pages_max);
                let run = self.take_for_flush(want, value_pages_max)?;
                covered += run.count + 1 - value_pages_max;
                r.data.push(run);
            }
            // Metadata: the extent table has at most one extent per run.
            let extents = r.data.len() as u64 + 1;
            let meta_pages = (rowtable::HEADER_BYTES as u64
                + rowtable::EXTENT_BYTES as u64 * extents
                + rowtable::ELEMENT_BYTES as u64 * n
                + keys)
                .div_ceil(PAGE);
            r.meta.push(self.take_for_flush(meta_pages, meta_pages)?);
            Ok(())
        })();
        if let Err(e) = result {
            for run in r.meta.iter().chain(&r.data) {
                let _ = self.pm.free_pages(*run);
            }
            self.flush_held.store(0, Ordering::Release);
            return Err(e);
        }
        *self.reserved.lock() = r;
        Ok(())
    }

    /// Takes a run for the next flush's row, counted as held from before
    /// it is taken: the write control subtracts what is held from the
    /// waiting memtable's need, so free PM less that need does not move
    /// while the row is taken. Counted only once all its runs were taken
    /// (until 2026-11-29), the row was counted twice meanwhile (its pages
    /// gone from free PM and the whole row still needed): writers stopped
    /// on PM full 1–5 times per `triangle` fill at `medium`, 9–53 ms each,
    /// with the room there. Counted after each run, a writer could still
    /// meet the instant between the allocation and the count. A wait for
    /// compaction to free a run counts it meanwhile: at most one run's
    /// worth of PM too much, never the WAL's reserve.
    fn take_for_flush(&self, want: u64, min: u64) -> Result<PageRun> {
        take_counted(&self.flush_held, want, || self.alloc_wait(want, min))
    }

    /// Gives back what the last flush did not use.
    fn release_reservation(&self) {
        let r = std::mem::take(&mut *self.reserved.lock());
        for run in r.meta.iter().chain(&r.data) {
            if let Err(e) = self.pm.free_pages(*run) {
                log::warn!("could not free reserved PM pages {run:?}: {e}");
            }
        }
    }

    /// Flushes a memtable into a row, or straight to L1 when it overlaps
    /// nothing in L0 and L1 (the sequential bypass).
    pub fn flush(&self, env: &JobEnv, mem: &Arc<MemTable>) -> Result<JobOutput> {
        let r = self.flush_inner(env, mem);
        self.release_reservation();
        // What the row holds stays counted until the engine stops counting
        // its memtable as waiting (`Container::flush_built`).
        r
    }

    /// The engine no longer counts the flushed memtable as waiting: its
    /// row's pages are no longer subtracted from the need either
    /// ([`Design::flush_built`]).
    pub fn flush_built(&self) {
        self.flush_held.store(0, Ordering::Release);
    }

    fn flush_inner(&self, env: &JobEnv, mem: &Arc<MemTable>) -> Result<JobOutput> {
        let v = &env.version;
        // What earlier flushes against this very version built (several
        // flushes meet one version only in WAL replay, where regions
        // interleave); versions no longer alive are forgotten.
        let mut all = self.recent.lock();
        all.retain(|r| r.version.strong_count() > 0);
        let same = match all
            .iter()
            .position(|r| r.version.as_ptr() == Arc::as_ptr(v))
        {
            Some(i) => {
                let r = all.remove(i);
                all.push(r);
                true
            }
            None => {
                all.push(Recent {
                    version: Arc::downgrade(v),
                    ..Recent::default()
                });
                false
            }
        };
        let Some(recent) = all.last_mut() else {
            return Err(Error::InvalidArgument("flush bookkeeping lost".into()));
        };
        let mut it = mem.iter();
        it.seek_to_first();
        if !it.valid() {
            return Ok(JobOutput::default());
        }
        let lo = key::user_key(it.key()).to_vec();
        it.seek_to_last();
        let hi = key::user_key(it.key()).to_vec();

        // The sequential bypass (invariant 4): clear of the span of every
        // row (those of `v`, and those built against `v` but not yet in it).
        let mut hull: Option<(Vec<u8>, Vec<u8>)> = None;
        let spans = v.levels[0]
            .iter()
            .map(|t| (t.smallest_user_key(), t.largest_user_key()))
            .chain(
                recent
                    .rows
                    .iter()
                    .map(|(a, b)| (a.as_slice(), b.as_slice())),
            );
        for (a, b) in spans {
            hull = Some(match hull {
                None => (a.to_vec(), b.to_vec()),
                Some((x, y)) => (x.min(a.to_vec()), y.max(b.to_vec())),
            });
        }
        let clear_of_rows = hull
            .as_ref()
            .is_none_or(|(a, b)| hi.as_slice() < a.as_slice() || lo.as_slice() > b.as_slice());
        let clear_of_l1 = v.level_count() > 1
            && v.overlapping(1, Some(&lo), Some(&hi)).is_empty()
            && recent
                .l1
                .iter()
                .all(|(a, b)| hi.as_slice() < a.as_slice() || lo.as_slice() > b.as_slice());
        let mut edit = VersionEdit::default();
        if clear_of_rows && clear_of_l1 {
            let gp = v.overlapping(2, Some(&lo), Some(&hi));
            let spec = OutputSpec {
                level: 1,
                target_size_bytes: self.cfg.sst_size_bytes,
                grandparents: &gp,
                may_drop_tombstones: false,
            };
            for m in merge_to_ssts(env, &mut mem.iter(), &spec)? {
                edit.new_tables.push((1, m));
            }
            recent.l1.push((lo, hi));
            return Ok(JobOutput::ssd(edit));
        }

        // A row, its forward pointers into the newest row before it.
        let pred: Option<Arc<RowTable>> = match (&recent.last_row, v.levels[0].first()) {
            (Some(r), _) if same => Some(Arc::clone(r)),
            (_, Some(t)) => Some(self.rows.get(&t.meta)?),
            _ => None,
        };
        let built = rowtable::build(
            &BuildParams {
                region: &self.region,
                pages: self,
                extent_pages: self.cfg.extent_pages,
                pred: pred.as_deref(),
                entries_hint: mem.entries() as usize,
                key_bytes_hint: (mem.entries() as usize).saturating_mul(lo.len() + 8),
            },
            &mut mem.iter(),
        )?;
        #[cfg(feature = "invariants")]
        for t in v.levels.iter().flatten() {
            for a in &t.meta.pm_pages {
                for b in &built.runs {
                    assert!(
                        a.first + a.count <= b.first || b.first + b.count <= a.first,
                        "new row run {b:?} overlaps run {a:?} of live table {}",
                        t.meta.id
                    );
                }
            }
        }
        let written = Written {
            pm_copied: built.written_bytes,
            ..Written::default()
        };
        let meta = built.into_meta(env.versions.new_file_number());
        let row = Arc::new(RowTable::open(
            Arc::clone(&self.region),
            meta.pm_pages[0],
            Expect {
                seq_min: meta.seq_min,
                seq_max: meta.seq_max,
                entries: meta.entries,
            },
            &meta.pm_pages,
            false,
        )?);
        self.rows.built(&row);
        let live: HashSet<(u64, SeqNo)> = v.levels[0]
            .iter()
            .filter_map(|t| t.meta.pm_pages.first().map(|r| (r.first, t.meta.seq_max)))
            .chain(std::iter::once((meta.pm_pages[0].first, meta.seq_max)))
            .collect();
        self.rows.retain_live(&live);
        recent.last_row = Some(row);
        recent.rows.push((lo, hi));
        edit.new_tables.push((0, meta));
        Ok(JobOutput { edit, written })
    }

    // ---------------------------------------------------------------- sides

    /// The rows a side with `plan` takes, as `(handle, reader)`, newest
    /// first.
    pub fn side_rows(
        &self,
        task: &Task,
        plan: &SidePlan,
    ) -> Result<Vec<(Arc<TableHandle>, Arc<RowTable>)>> {
        let mut out = Vec::new();
        for (level, tables) in &task.inputs {
            if *level != 0 {
                continue;
            }
            for t in tables {
                if t.meta.seq_max <= plan.through {
                    out.push((Arc::clone(t), self.rows.get(&t.meta)?));
                }
            }
        }
        out.sort_by_key(|r| std::cmp::Reverse(r.1.seq_max()));
        Ok(out)
    }

    /// Runs a side task: collects the victims with the collector threads,
    /// merges them with the input L1 tables into new L1 tables (never
    /// spanning an L1 table that is not an input), and returns the edit.
    pub fn run_side(&self, env: &JobEnv, task: &Task) -> Result<JobOutput> {
        let plan = SidePlan::of(task)
            .ok_or_else(|| Error::InvalidArgument("side task without a plan".into()))?;
        let v = &env.version;
        let state = ContainerState::of(v)?;
        let rows = self.side_rows(task, &plan)?;
        let readers: Vec<Arc<RowTable>> = rows.iter().map(|(_, r)| Arc::clone(r)).collect();

        // Victim windows per row, then k collectors merge groups of rows.
        let windows: Vec<Vec<(usize, usize)>> = readers
            .iter()
            .map(|r| victim_windows(&state, r, &plan))
            .collect();
        let k = self.cfg.collectors.min(readers.len()).max(1);
        let groups: Vec<Vec<usize>> = (0..k)
            .map(|g| (g..readers.len()).step_by(k).collect())
            .collect();
        let runs: Vec<Vec<(u32, u32)>> = if k > 1 {
            let cpu = crate::sched::current();
            std::thread::scope(|s| {
                let hs: Vec<_> = groups
                    .iter()
                    .map(|g| {
                        let (cpu, readers, windows) = (cpu.clone(), &readers, &windows);
                        s.spawn(move || {
                            crate::storage::limiter::mark_background();
                            let _cpu = cpu.as_ref().map(crate::sched::join);
                            collect(readers, windows, g)
                        })
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().unwrap_or_default())
                    .collect()
            })
        } else {
            vec![collect(&readers, &windows, &groups[0])]
        };
        let victims: usize = windows.iter().flatten().map(|(a, b)| b - a).sum();
        let collected: usize = runs.iter().map(Vec::len).sum();
        if victims != collected {
            return Err(Error::InvalidArgument(format!(
                "side collectors gathered {collected} of {victims} entries"
            )));
        }

        // Inputs of level 1.
        let l1_inputs: Vec<Arc<TableHandle>> = task
            .inputs
            .iter()
            .filter(|(l, _)| *l == 1)
            .flat_map(|(_, ts)| ts.iter().cloned())
            .collect();
        let input_ids: HashSet<u64> = l1_inputs.iter().map(|t| t.meta.id).collect();
        let runs: Vec<Arc<Vec<(u32, u32)>>> = runs
            .into_iter()
            .filter(|r| !r.is_empty())
            .map(Arc::new)
            .collect();
        let mut edit = VersionEdit::default();
        let mut written = Written::default();
        if !runs.is_empty() || !l1_inputs.is_empty() {
            // Fences: the L1 tables that are not inputs, inside the span of
            // the victims and the inputs; outputs never span one.
            let span_lo = l1_inputs
                .first()
                .map_or(plan.lo.as_slice(), |t| t.smallest_user_key().min(&plan.lo))
                .to_vec();
            let span_hi: Option<Vec<u8>> = match (&plan.hi, l1_inputs.last()) {
                (None, _) => None,
                (Some(h), Some(t)) => Some(h.as_slice().max(t.largest_user_key()).to_vec()),
                (Some(h), None) => Some(h.clone()),
            };
            let fences: Vec<(Vec<u8>, Vec<u8>)> = v
                .overlapping(1, Some(&span_lo), span_hi.as_deref())
                .iter()
                .filter(|t| !input_ids.contains(&t.meta.id))
                .map(|t| {
                    (
                        t.smallest_user_key().to_vec(),
                        t.largest_user_key().to_vec(),
                    )
                })
                .collect();
            // The merge runs on up to k threads, each over one part of the
            // key space (cut at victim keys; all versions of a key stay in
            // one part, so the dropping rules see them together).
            let cuts = part_cuts(&readers, &runs, k);
            let parts = crate::compaction::ranges_between(cuts);
            let job = SideMerge {
                env,
                readers: &readers,
                runs: &runs,
                l1_inputs: &l1_inputs,
                fences: &fences,
                grandparents: &task.grandparents,
                sst_size_bytes: self.cfg.sst_size_bytes,
            };
            let job = &job;
            let outputs = crate::compaction::run_parts(
                env,
                parts.iter().map(|p| move || job.part(p)).collect(),
            )?;
            written = Written::ssd_tables(&outputs);
            for m in outputs {
                edit.new_tables.push((1, m));
            }
        }
        for t in &l1_inputs {
            edit.deleted_tables.push((1, t.meta.id));
        }
        let mut next_id = || env.versions.new_file_number();
        let rest = side_edit(
            v,
            &state,
            &plan,
            &|m: &TableMeta| self.rows.get(m),
            &mut next_id,
        )?;
        edit.deleted_tables.extend(rest.deleted_tables);
        edit.new_tables.extend(rest.new_tables);
        edit.design_records = rest.design_records;
        Ok(JobOutput { edit, written })
    }

    /// Stats: the L0 bytes a side really reads, plus its L1 tables.
    pub fn task_input_bytes(task: &Task) -> Vec<(usize, u64)> {
        match SidePlan::of(task) {
            Some(plan) => {
                let l1: u64 = task
                    .inputs
                    .iter()
                    .filter(|(l, _)| *l != 0)
                    .flat_map(|(_, ts)| ts.iter().map(|t| t.meta.size_bytes))
                    .sum();
                vec![(0, plan.victim_bytes), (1, l1)]
            }
            None => task.input_bytes(),
        }
    }
}

impl Container {
    /// A run of `min..=want` pages, waiting for compaction to free some if
    /// PM is full.
    fn alloc_wait(&self, want: u64, min: u64) -> Result<PageRun> {
        debug_assert!(min <= want && min > 0);
        let alloc = self.pm.allocator();
        let start = Instant::now();
        let mut waiting = None;
        loop {
            let mut n = want;
            loop {
                if let Some(r) = alloc.alloc(n)? {
                    return Ok(r);
                }
                if n == min {
                    break;
                }
                n = (n / 2).max(min);
            }
            if start.elapsed() > PM_WAIT_LIMIT {
                return Err(Error::io(
                    format!(
                        "{}: PM tier full: no run of {min} free pages for a RowTable after {} s \
                         ({} pages free)",
                        self.region.name(),
                        PM_WAIT_LIMIT.as_secs(),
                        alloc.free_pages()
                    ),
                    std::io::Error::from_raw_os_error(28),
                ));
            }
            // Compaction frees pages; the engine releases them when idle.
            // The wait itself is pressure (`l0_score`): a flush once waited
            // here with a fifth of PM free in runs too short for it while
            // the picker, reading only the free total, drained nothing
            // (tierkv-raft's `leader_kills_triangle`, values of tens of KB).
            waiting.get_or_insert_with(|| Waiter::new(&self.alloc_waiters));
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// One allocation counted among the waiting ones while it lives.
struct Waiter<'a>(&'a AtomicU64);

impl<'a> Waiter<'a> {
    fn new(count: &'a AtomicU64) -> Waiter<'a> {
        count.fetch_add(1, Ordering::AcqRel);
        Waiter(count)
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl PageSource for Container {
    fn alloc(&self, want: u64, min: u64) -> Result<PageRun> {
        if let Some(run) = carve(&mut self.reserved.lock().data, want, min) {
            return Ok(run);
        }
        self.alloc_wait(want, min)
    }

    fn alloc_meta(&self, pages: u64) -> Result<PageRun> {
        if let Some(run) = carve(&mut self.reserved.lock().meta, pages, pages) {
            return Ok(run);
        }
        self.alloc_wait(pages, pages)
    }

    fn free(&self, run: PageRun) -> Result<()> {
        self.pm.free_pages(run)
    }
}

/// The entries of `row` a side takes: inside the side's key range and not
/// consumed, as sorted index windows.
pub fn victim_windows(
    state: &ContainerState,
    row: &RowTable,
    plan: &SidePlan,
) -> Vec<(usize, usize)> {
    let a = row.lower_bound_user(&plan.lo);
    let b = plan
        .hi
        .as_deref()
        .map_or(row.len(), |h| row.lower_bound_user(h));
    let mut out = Vec::new();
    let mut pos = a;
    for (x, y) in state.consumed_intervals(row) {
        if y <= pos || x >= b {
            continue;
        }
        if x > pos {
            out.push((pos, x.min(b)));
        }
        pos = pos.max(y);
    }
    if pos < b {
        out.push((pos, b));
    }
    out
}

/// One collector: merges the windows of its rows into one sorted run of
/// `(row, entry)` references (no copies of keys or values).
fn collect(
    rows: &[Arc<RowTable>],
    windows: &[Vec<(usize, usize)>],
    group: &[usize],
) -> Vec<(u32, u32)> {
    struct Cur {
        row: usize,
        w: usize,
        pos: usize,
    }
    let mut curs: Vec<Cur> = group
        .iter()
        .filter(|&&r| !windows[r].is_empty())
        .map(|&r| Cur {
            row: r,
            w: 0,
            pos: windows[r][0].0,
        })
        .collect();
    let total: usize = group
        .iter()
        .flat_map(|&r| windows[r].iter())
        .map(|(a, b)| b - a)
        .sum();
    let mut out = Vec::with_capacity(total);
    while !curs.is_empty() {
        let mut best = 0;
        for i in 1..curs.len() {
            let (a, b) = (&curs[i], &curs[best]);
            if key::compare_internal(rows[a.row].ikey(a.pos), rows[b.row].ikey(b.pos)).is_lt() {
                best = i;
            }
        }
        let c = &mut curs[best];
        out.push((c.row as u32, c.pos as u32));
        c.pos += 1;
        if c.pos >= windows[c.row][c.w].1 {
            c.w += 1;
            match windows[c.row].get(c.w) {
                Some(&(a, _)) => c.pos = a,
                None => {
                    curs.swap_remove(best);
                }
            }
        }
    }
    out
}

/// User keys cutting a side's victims into at most `k` parts of about
/// equal numbers of entries (quantiles of the longest collector run).
fn part_cuts(rows: &[Arc<RowTable>], runs: &[Arc<Vec<(u32, u32)>>], k: usize) -> Vec<Vec<u8>> {
    let Some(longest) = runs.iter().max_by_key(|r| r.len()) else {
        return Vec::new();
    };
    if k < 2 || longest.len() < 2 * k {
        return Vec::new();
    }
    let mut cuts: Vec<Vec<u8>> = Vec::new();
    for i in 1..k {
        let (r, e) = longest[longest.len() * i / k];
        let uk = rows[r as usize].user_key(e as usize);
        if cuts.last().is_none_or(|c| c.as_slice() < uk) && !uk.is_empty() {
            cuts.push(uk.to_vec());
        }
    }
    cuts
}

/// What every part of a side's merge shares.
struct SideMerge<'a, 'e> {
    env: &'a JobEnv<'e>,
    readers: &'a [Arc<RowTable>],
    runs: &'a [Arc<Vec<(u32, u32)>>],
    l1_inputs: &'a [Arc<TableHandle>],
    fences: &'a [(Vec<u8>, Vec<u8>)],
    grandparents: &'a [Arc<TableHandle>],
    sst_size_bytes: u64,
}

impl SideMerge<'_, '_> {
    /// Merges the user keys `[lo, hi)` of the victims and the L1 inputs
    /// into L1 tables, cut at every fence.
    fn part(&self, part: &(Vec<u8>, Option<Vec<u8>>)) -> Result<Vec<TableMeta>> {
        let (lo, hi) = (part.0.as_slice(), part.1.as_deref());
        let mut children: Vec<Box<dyn InternalIterator>> = self
            .runs
            .iter()
            .map(|r| {
                Box::new(CollectedIter {
                    rows: self.readers.to_vec(),
                    entries: Arc::clone(r),
                    pos: usize::MAX,
                }) as Box<dyn InternalIterator>
            })
            .collect();
        if !self.l1_inputs.is_empty() {
            children.push(Box::new(LevelIterator::new(self.l1_inputs.to_vec(), false)));
        }
        let mut seg = KeyRange::new(MergingIterator::new(children), Vec::new(), None);
        let spec = OutputSpec {
            level: 1,
            target_size_bytes: self.sst_size_bytes,
            grandparents: self.grandparents,
            may_drop_tombstones: true,
        };
        let mut out = Vec::new();
        let mut start: Vec<u8> = lo.to_vec();
        let bounds = self
            .fences
            .iter()
            .map(|f| Some(f.0.as_slice()))
            .chain(std::iter::once(None));
        for (i, end) in bounds.enumerate() {
            // The segment [start, end) clipped to the part.
            let seg_hi = match (end, hi) {
                (Some(e), Some(h)) => Some(e.min(h)),
                (Some(e), None) => Some(e),
                (None, h) => h,
            };
            if seg_hi.is_none_or(|h| start.as_slice() < h) {
                seg.set_range(start.clone(), seg_hi.map(<[u8]>::to_vec));
                match merge_to_ssts(self.env, &mut seg, &spec) {
                    Ok(ms) => out.extend(ms),
                    Err(e) => {
                        for m in &out {
                            let _ = self
                                .env
                                .fs
                                .remove(&self.env.dir.join(crate::sst::sst_file_name(m.id)));
                        }
                        return Err(e);
                    }
                }
            }
            match self.fences.get(i) {
                Some(f) => {
                    let next = successor(&f.1);
                    if next.as_slice() > start.as_slice() {
                        start = next;
                    }
                }
                None => break,
            }
            if hi.is_some_and(|h| start.as_slice() >= h) {
                break;
            }
        }
        Ok(out)
    }
}

/// Iterator over one collector's run.
struct CollectedIter {
    rows: Vec<Arc<RowTable>>,
    entries: Arc<Vec<(u32, u32)>>,
    /// `usize::MAX` or `>= len`: not valid.
    pos: usize,
}

impl CollectedIter {
    fn at(&self, i: usize) -> &[u8] {
        let (r, e) = self.entries[i];
        self.rows[r as usize].ikey(e as usize)
    }
}

impl InternalIterator for CollectedIter {
    fn valid(&self) -> bool {
        self.pos < self.entries.len()
    }
    fn seek_to_first(&mut self) {
        self.pos = 0;
    }
    fn seek_to_last(&mut self) {
        self.pos = self.entries.len().wrapping_sub(1);
    }
    fn seek(&mut self, target: &[u8]) {
        let (mut lo, mut hi) = (0, self.entries.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if key::compare_internal(self.at(mid), target).is_lt() {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        self.pos = lo;
    }
    fn next(&mut self) {
        self.pos += 1;
    }
    fn prev(&mut self) {
        self.pos = self.pos.wrapping_sub(1);
    }
    fn key(&self) -> &[u8] {
        self.at(self.pos)
    }
    fn value(&self) -> &[u8] {
        let (r, e) = self.entries[self.pos];
        self.rows[r as usize].value(e as usize)
    }
    fn status(&self) -> Result<()> {
        Ok(())
    }
}

/// The container part of a side's edit (pure given the rows): the new
/// state, and every row the side took either replaced by a meta listing
/// only the runs still needed, or deleted when consumed entirely.
/// `open` gives a row's reader; `next_id` fresh table ids.
pub fn side_edit(
    v: &Version,
    state: &ContainerState,
    plan: &SidePlan,
    open: &dyn Fn(&TableMeta) -> Result<Arc<RowTable>>,
    next_id: &mut dyn FnMut() -> u64,
) -> Result<VersionEdit> {
    let mut next = state.clone();
    next.consume(&plan.lo, plan.hi.as_deref(), plan.through);
    next.cursor = plan.next_cursor.clone();
    next.compactor_seq = plan.compactor_seq;
    let mut edit = VersionEdit::default();
    let mut oldest: Option<SeqNo> = None;
    let mut fki: Vec<(SeqNo, u64)> = Vec::new();
    for t in &v.levels[0] {
        let keep_oldest =
            |o: &mut Option<SeqNo>| *o = Some(o.map_or(t.meta.seq_max, |x| x.min(t.meta.seq_max)));
        if t.meta.seq_max > plan.through {
            keep_oldest(&mut oldest);
            continue;
        }
        let row = open(&t.meta)?;
        let consumed = next.consumed_intervals(&row);
        if covered(&consumed, 0, row.len()) {
            edit.deleted_tables.push((0, t.meta.id));
            continue;
        }
        keep_oldest(&mut oldest);
        if next.compactor_seq > 0 && t.meta.seq_max <= next.compactor_seq {
            let first = consumed
                .first()
                .filter(|(a, _)| *a == 0)
                .map_or(0, |(_, b)| *b);
            fki.push((t.meta.seq_max, first as u64));
        }
        let exts = row.extents();
        let mut ends: Vec<usize> = exts
            .iter()
            .skip(1)
            .map(|e| e.first_entry as usize)
            .collect();
        ends.push(row.len());
        let dead: Vec<PageRun> = exts
            .iter()
            .zip(&ends)
            .filter(|(e, end)| covered(&consumed, e.first_entry as usize, **end))
            .map(|(e, _)| e.run)
            .filter(|r| t.meta.pm_pages[1..].contains(r))
            .collect();
        if dead.is_empty() {
            continue;
        }
        let mut meta = t.meta.clone();
        meta.id = next_id();
        meta.pm_pages.retain(|r| !dead.contains(r));
        meta.size_bytes = meta.pm_pages.iter().map(|r| r.count * PAGE).sum();
        edit.deleted_tables.push((0, t.meta.id));
        edit.new_tables.push((0, meta));
    }
    next.prune(oldest);
    fki.sort_unstable();
    if next.compactor_seq > 0 {
        next.first_key_index = fki;
    } else {
        next.first_key_index.clear();
    }
    edit.design_records.push((CONTAINER_TAG, next.encode()));
    Ok(edit)
}

/// One L1 range: `[lo, hi)` (`hi = None` at the end) and its table.
pub type L1Range<'a> = (Vec<u8>, Option<Vec<u8>>, Option<&'a Arc<TableHandle>>);

/// A row and its consumed entries (sorted index intervals).
pub type SizedRow = (Arc<RowTable>, Vec<(usize, usize)>);

/// The L1 key ranges of a version in order — each L1 table's own range,
/// and the gaps before, between and after them — with the table of each.
pub struct L1Ranges<'a> {
    /// `(lo, hi, table)`: `[lo, hi)`, `hi = None` at the end.
    pub ranges: Vec<L1Range<'a>>,
}

impl<'a> L1Ranges<'a> {
    /// The ranges of `v`'s L1.
    pub fn of(v: &'a Version) -> L1Ranges<'a> {
        let mut ranges = Vec::new();
        let mut at: Vec<u8> = Vec::new();
        for t in v.levels.get(1).map(|l| l.as_slice()).unwrap_or(&[]) {
            let s = t.smallest_user_key().to_vec();
            if s > at {
                ranges.push((at.clone(), Some(s.clone()), None));
            }
            let end = successor(t.largest_user_key());
            ranges.push((s, Some(end.clone()), Some(t)));
            at = end;
        }
        ranges.push((at, None, None));
        L1Ranges { ranges }
    }

    /// Index of the range holding `k`.
    pub fn find(&self, k: &[u8]) -> usize {
        self.ranges
            .partition_point(|(_, hi, _)| hi.as_deref().is_some_and(|h| h <= k))
            .min(self.ranges.len() - 1)
    }
}

/// Live (unconsumed) L0 entries and estimated bytes of some rows inside
/// `[lo, hi)`.
pub struct RowSizer {
    /// The rows, newest first: reader and consumed intervals.
    pub rows: Vec<SizedRow>,
}

impl RowSizer {
    /// Sizes the given rows under `state`.
    pub fn new(rows: Vec<Arc<RowTable>>, state: &ContainerState) -> Self {
        RowSizer {
            rows: rows
                .into_iter()
                .map(|r| {
                    let c = state.consumed_intervals(&r);
                    (r, c)
                })
                .collect(),
        }
    }

    /// Estimated live bytes in `[lo, hi)`.
    pub fn bytes(&self, lo: &[u8], hi: Option<&[u8]>) -> u64 {
        self.rows
            .iter()
            .map(|(r, c)| {
                let a = r.lower_bound_user(lo);
                let b = hi.map_or(r.len(), |h| r.lower_bound_user(h));
                let live = live_count(c, a, b) as u64;
                if live == 0 {
                    0
                } else {
                    live * r.data_bytes() / r.len().max(1) as u64
                }
            })
            .sum()
    }

    /// A user key `c` in `(lo, hi)` such that the live bytes in `[lo, c)`
    /// are about `want` (never `lo` itself); `None` if no key splits it.
    pub fn split(&self, lo: &[u8], hi: Option<&[u8]>, want: u64) -> Option<Vec<u8>> {
        // Candidate keys: the live entries of the row with most of them.
        let (r, _) = self.rows.iter().max_by_key(|(r, c)| {
            let a = r.lower_bound_user(lo);
            let b = hi.map_or(r.len(), |h| r.lower_bound_user(h));
            live_count(c, a, b)
        })?;
        let a = r.lower_bound_user(lo);
        let b = hi.map_or(r.len(), |h| r.lower_bound_user(h));
        let (mut l, mut h) = (a + 1, b);
        while l < h {
            let mid = l + (h - l) / 2;
            if self.bytes(lo, Some(r.user_key(mid))) < want {
                l = mid + 1;
            } else {
                h = mid;
            }
        }
        if l >= b {
            return None;
        }
        let k = r.user_key(l);
        (k > lo).then(|| k.to_vec())
    }
}

// ------------------------------------------------------------- designs

/// What sets a design built on the container apart: how it drains L0
/// (which side to merge next, and when L1+ compactions go first).
pub trait Drain: Send + Sync + 'static {
    /// The preset.
    const PRESET: Preset;
    /// The kind of its side tasks.
    const SIDE: TaskKind;
    /// The next task: a side of the container, or an L1+ compaction
    /// ([`Container::pick_leveled`]). Pure.
    fn pick(c: &Container, v: &Version, cx: &PickContext) -> Option<Task>;
}

/// A design whose L0 is the PM container: `triangle` and `matrix` are this
/// with their own [`Drain`]. Flush, side job, write control, manual
/// compaction and reads are the container's.
pub struct ContainerDesign<D: Drain> {
    c: Container,
    _drain: std::marker::PhantomData<D>,
}

impl<D: Drain> ContainerDesign<D> {
    /// The design on `pm`, sized by `opts`.
    pub fn new(opts: &Options, pm: Arc<PmTier>) -> Result<Self> {
        Ok(ContainerDesign {
            c: Container::new(opts, pm)?,
            _drain: std::marker::PhantomData,
        })
    }

    /// The container (sizes, rows).
    pub fn container(&self) -> &Container {
        &self.c
    }
}

impl<D: Drain> Design for ContainerDesign<D> {
    fn preset(&self) -> Preset {
        D::PRESET
    }

    fn flush(&self, env: &JobEnv, mem: &Arc<MemTable>) -> Result<JobOutput> {
        self.c.flush(env, mem)
    }

    fn pick(&self, v: &Version, cx: &PickContext) -> Option<Task> {
        D::pick(&self.c, v, cx)
    }

    fn pick_manual(
        &self,
        v: &Version,
        cx: &PickContext,
        level: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Option<Task> {
        if level == 0 {
            side::pick_manual_side(&self.c, v, cx.busy, D::SIDE, lo, hi)
        } else {
            leveled::pick_manual_range(v, cx.busy, level, lo, hi)
        }
    }

    fn prepare_flush(&self, mem: &Arc<MemTable>) -> Result<()> {
        self.c.prepare_flush(mem)
    }

    fn flush_built(&self) {
        self.c.flush_built();
    }

    fn run(&self, env: &JobEnv, task: &Task) -> Result<JobOutput> {
        if task.kind == D::SIDE {
            self.c.run_side(env, task)
        } else {
            leveled::run_merge(env, task, self.c.cfg.sst_size_bytes)
        }
    }

    fn write_control(&self, _v: &Version, immutable_count: usize) -> WriteControl {
        self.c.write_control(immutable_count)
    }

    fn write_control_epoch(&self) -> u64 {
        self.c.write_control_epoch()
    }

    fn headroom(&self, _v: &Version, immutable_count: usize) -> Option<Headroom> {
        Some(self.c.headroom(immutable_count))
    }

    fn install(&self, ctx: &Arc<TableContext>) {
        self.c.install(ctx);
    }

    fn debt(&self, v: &Version) -> u64 {
        Container::container_bytes(v) >> 20
    }

    fn level_targets(&self, v: &Version) -> Option<crate::design::LevelTargets> {
        // L0 is the container, compacted past its limit; L1+ are leveled.
        Some(leveled::level_targets(
            v,
            None,
            self.c.cfg.limit_bytes,
            |l| self.c.leveled.level_target_bytes(l),
        ))
    }

    fn task_input_bytes(&self, task: &Task) -> Vec<(usize, u64)> {
        Container::task_input_bytes(task)
    }

    fn stats(&self, _versions: &[Arc<Version>]) -> Vec<(String, String)> {
        vec![(
            "container.row_filter_bytes".into(),
            self.c.rows.filter_bytes().to_string(),
        )]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::design::container::rowtable::tests::{build_mem, mem, setup};
    use crate::key::Kind;

    #[test]
    fn row_cache_keeps_a_live_rows_reader_until_the_row_leaves() {
        let (region, _sim, pages) = setup(64 << 10);
        let m = mem(&[("a", 3, Kind::Put, "x"), ("b", 4, Kind::Put, "y")]);
        let (b, _) = build_mem(&region, &pages, &m, None, 1);
        let id = (b.runs[0].first, b.seq_max);
        let meta = b.into_meta(9);
        let cache = RowCache::new(Arc::clone(&region), true);
        let first = cache.get(&meta).unwrap();
        let ptr = Arc::as_ptr(&first);
        drop(first);
        // Nobody else holds it, and it is not opened (checked) again.
        assert_eq!(Arc::as_ptr(&cache.get(&meta).unwrap()), ptr);
        cache.retain_live(&HashSet::from([id]));
        assert_eq!(Arc::as_ptr(&cache.get(&meta).unwrap()), ptr);
        // Once the row has left the version, a later get opens it afresh
        // (`old` keeps the first reader's address from being reused).
        let old = cache.get(&meta).unwrap();
        cache.retain_live(&HashSet::new());
        assert!(cache.open.lock().is_empty());
        assert!(!Arc::ptr_eq(&cache.get(&meta).unwrap(), &old));
    }

    #[test]
    fn state_roundtrip_and_worked_example() {
        let mut s = ContainerState::default();
        s.consume(b"b", Some(b"d"), 300);
        s.cursor = Some(b"d".to_vec());
        assert_eq!(
            s.encode(),
            vec![1, 1, 1, b'd', 3, 0, 0, 1, b'b', 0xac, 0x02, 1, b'd', 0, 0, 0]
        );
        assert_eq!(ContainerState::decode(&s.encode()).unwrap(), s);
        assert_eq!(s.consumed_through(b"a"), 0);
        assert_eq!(s.consumed_through(b"b"), 300);
        assert_eq!(s.consumed_through(b"c"), 300);
        assert_eq!(s.consumed_through(b"d"), 0);
        // Wider and newer sides raise the steps; pruning forgets old ones.
        s.consume(b"c", None, 400);
        assert_eq!(s.consumed_ranges(300), vec![(&b"b"[..], None)]);
        assert_eq!(s.consumed_ranges(350), vec![(&b"c"[..], None)]);
        s.prune(Some(350));
        assert_eq!(s.steps.len(), 2);
        s.prune(None);
        assert_eq!(s.steps, ContainerState::default().steps);
        for bad in [
            &[][..],
            &[2][..],
            &[1, 0, 0][..],
            &[1, 0, 1, 1, b'x', 0, 0, 0][..],
        ] {
            assert!(ContainerState::decode(bad).unwrap_err().is_corruption());
        }
    }

    /// A triangle container on a 16 MiB region whose every other page is
    /// allocated: half of PM free, in single pages. Returns the pages kept
    /// allocated.
    fn half_free_in_single_pages() -> (Arc<PmTier>, Arc<Container>, Vec<PageRun>) {
        use crate::storage::sim::SimRegion;
        let region = Arc::new(SimRegion::new(16 << 20)) as Arc<dyn PmRegion>;
        let tier = Arc::new(PmTier::open(region, false).unwrap());
        let opts = Options {
            design: Preset::Triangle,
            memtable_size_bytes: 1 << 20,
            pm_size_bytes: 16 << 20,
            ..Options::default()
        };
        let c = Arc::new(Container::new(&opts, Arc::clone(&tier)).unwrap());
        let alloc = tier.allocator();
        let mut pages = Vec::new();
        while let Some(r) = alloc.alloc(1).unwrap() {
            pages.push(r);
        }
        let mut kept = Vec::new();
        for (i, r) in pages.into_iter().enumerate() {
            if i % 2 == 0 {
                alloc.free(r).unwrap();
            } else {
                kept.push(r);
            }
        }
        (tier, c, kept)
    }

    /// Half of PM free in single pages: a flush that needs four in a row
    /// waits, and its wait is pressure for the picker, which reads the
    /// free total only otherwise; the wait ends when a run is freed.
    #[test]
    fn an_allocation_that_waits_is_pressure_whatever_the_free_total() {
        let (tier, c, mut kept) = half_free_in_single_pages();
        let alloc = tier.allocator();
        assert!(!c.pressure(), "half of PM free is no pressure by the total");
        let waiter = {
            let c = Arc::clone(&c);
            std::thread::spawn(move || c.alloc_wait(4, 4))
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !c.pressure() {
            assert!(
                Instant::now() < deadline,
                "the waiting allocation is no pressure"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // Compaction frees a row's run: the wait ends, and the pressure.
        for r in kept.drain(..4) {
            alloc.free(r).unwrap();
        }
        let run = waiter.join().unwrap().unwrap();
        assert_eq!(run.count, 4);
        assert!(!c.pressure());
    }

    /// A flush sets its row aside run by run, waiting when PM has no run
    /// long enough: each run counts as held from before it is taken, so
    /// the headroom the write control sees for the waiting memtable never
    /// falls while the row is taken (counted only at the end, the taken
    /// runs were missing from free PM and still needed: a stop on PM full
    /// with the room there), and the row stays counted as held until the
    /// engine stops counting its memtable as waiting.
    #[test]
    fn a_flush_taking_its_row_never_counts_it_twice() {
        // Free PM in single pages: the data runs are taken at once, the
        // metadata (several pages in a row) waits.
        let (tier, c, mut kept) = half_free_in_single_pages();
        let alloc = tier.allocator();
        let keys: Vec<String> = (0..400).map(|i| format!("key{i:06}")).collect();
        let value = "v".repeat(100);
        let entries: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_str(), i as u64 + 1, Kind::Put, value.as_str()))
            .collect();
        let m = mem(&entries);
        let before = c.headroom(1).free_bytes;
        assert!(before > 0, "the test needs room for the waiting row");
        let flush = {
            let c = Arc::clone(&c);
            std::thread::spawn(move || c.prepare_flush(&m))
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !c.pressure() {
            assert!(Instant::now() < deadline, "the flush did not wait");
            std::thread::sleep(Duration::from_millis(1));
        }
        // Never counted twice; the run waited for is counted ahead.
        let during = c.headroom(1).free_bytes;
        assert!(during >= before, "{during} < {before}");
        assert!(during - before <= c.cfg.extent_pages * PAGE / 2);
        assert_eq!(c.write_control(1), WriteControl::Proceed);
        assert!(
            c.flush_held.load(Ordering::Acquire) > 0,
            "no data run taken"
        );
        // Compaction frees a run at PM's far end (the data took the
        // lowest free pages): the wait ends.
        for r in kept.drain(kept.len() - 8..) {
            alloc.free(r).unwrap();
        }
        flush.join().unwrap().unwrap();
        assert_eq!(c.headroom(1).free_bytes, before + 8 * PAGE / 2);
        // The engine stops counting the memtable: so does the container.
        c.flush_built();
        assert_eq!(c.flush_held.load(Ordering::Acquire), 0);
    }

    #[test]
    fn interval_helpers() {
        let c = vec![(2, 4), (6, 9)];
        assert_eq!(live_count(&c, 0, 10), 5);
        assert_eq!(live_count(&c, 3, 7), 2);
        assert!(covered(&c, 6, 9));
        assert!(!covered(&c, 5, 9));
    }
}
