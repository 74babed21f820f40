//! `rangetab`: RangeKV (seed 002) — L0 in PM as key-range RangeTabs with a
//! double buffer, a hash index per chunk, and the β/α/μ/γ selection.
//!
//! # What the design is
//!
//! * **PM holds the WAL and the RangeTabs** (§III-A). N RangeTabs own
//!   disjoint, adjacent key ranges cut by N − 1 boundaries
//!   (`Options::rangetab_boundaries`; or the paper's p-byte prefix split,
//!   `rangetab_prefix_bytes`; or, as a fallback, the quantiles of the first
//!   flushed memtable that is a fair sample of the keys), recorded in the
//!   MANIFEST and fixed for the life of the database ([`layout`]). A
//!   flush too small to cut the key space by — fewer distinct keys than
//!   RangeTabs, or fewer than 16 per RangeTab in less than half a memtable
//!   (a close or an explicit flush soon after creation, the replay of a
//!   short log) — is merged into L1 whole (an exclusive flush) and leaves
//!   the boundaries to a later flush: taken from it, they would be fixed
//!   for good around a handful of keys (one key gave `k`, `k\0`, `k\0\0`,
//!   …: every later key in the last RangeTab).
//! * **Double buffer** (§III-C-1): each RangeTab owns two buffers of
//!   `capacity` bytes, allocated once when the database is created and
//!   kept (declared live to reconcile: [`Design::live_pm_runs`]), each in
//!   state init, write or sealed (the paper's compaction state).
//! * **Flush** (§III-B): an immutable memtable is cut by the boundaries;
//!   each part is appended to its RangeTab's write buffer as one sorted,
//!   checksummed chunk ([`chunk`]). A part the write buffer cannot take
//!   *spills* (below): its older entries fill the buffer, which is sealed,
//!   and the rest go to the init sibling, which becomes the write buffer
//!   (a buffer with less than 1/32 of its capacity left is sealed without
//!   a chunk instead); a buffer past β after the append is sealed too.
//!   Every append re-lists the buffer under a new table id (version
//!   invariant 5), so an append racing a merge of the old id fails loudly
//!   instead of losing data; sealing and merging are edits of per-buffer
//!   state records.
//! * **Reads**: L0 is served by a level view ([`view`]) that routes a key
//!   by the boundaries to one RangeTab and probes its chunks newest first
//!   through their DRAM hash indexes (binary search as the fallback).
//! * **Merges** ([`picker`]): step 1 (sealed buffers, β), leveled
//!   compactions of the SSD levels with score ≥ 1, step 2 (α), step 3
//!   (μ, γ, low load) — each merges the chosen buffers with the
//!   overlapped L1 tables into new L1 tables (`leveled::run_merge`).
//! * **Flattened SSD levels**: L1 = `l1_size_bytes` (the PM size in the
//!   benchmark), × `level_size_multiplier` below, compacted as `classic`.
//! * **Write control**: writes stop only when PM cannot take the WAL
//!   (`PmFull`) or the SSD levels' pending compaction passes the hard
//!   limit (delayed past the soft one); the flush is held back
//!   ([`Design::flush_blocked`], a `PmFull` stall) while some RangeTab has
//!   no write buffer and no init buffer. The classic L0-file triggers do
//!   not apply: the 2N buffer tables are the steady state, not a backlog.
//!   The pacer ([`Design::headroom`]) sees the RangeTabs' room, so that
//!   writers slow to the merges' pace before a flush finds a RangeTab
//!   full: at `medium` the longest write fell from 0.27–0.72 s to 19–29
//!   ms, none over 100 ms, at 7% less fill throughput (43.5 K against
//!   ~47 K ops/s, two runs each).
//!
//! # Invariants
//!
//! 1. `layout.rs` invariants 1–4 hold in every version.
//! 2. A buffer's pages hold, up to its table's `size_bytes`, exactly the
//!    chunks its table lists; bytes past it are garbage a crash may have
//!    left and the next append overwrites.
//! 3. A buffer is written only (a) past its table's used bytes, or (b)
//!    from its start once it is init *and* no live table handle lists its
//!    run (`TableContext::pm_run_refs`): no version that can read its old
//!    chunks is left (PmRegion contract 4).
//! 4. Every edit changes the state records of the buffers it touches
//!    only: flushes touch write and init buffers, merges sealed ones, a
//!    seal a write buffer while no flush is in flight (below).
//!
//! # Concurrency
//!
//! Flushes are serial (the engine's contract). A merge of a write buffer
//! (steps 2–3, `compact_range`) first seals it with an edit of its own,
//! behind a gate: the seal waits until the flush in flight, if any, is
//! applied (its output ids visible in the current version), keeps the
//! next flush from starting (in `prepare_flush`) until the seal is
//! applied, and gives the task up (an empty job) if a flush re-listed the
//! buffer since the pick. A flush whose part cannot go to any buffer (a
//! part larger than a buffer, or no buffer free in WAL replay) merges
//! that RangeTab's buffers and the part straight into L1 — an
//! *exclusive* flush: it waits for running jobs to end, new jobs give
//! their task up, and nothing is picked until its edit is applied.
//!
//! # Spills
//!
//! Without them a part that does not fit the write buffer's room seals
//! the buffer as it is: at `medium` (two RangeTabs of ~63 MiB, parts of
//! ~32 MiB) every buffer went to its merge about half full. A spill cuts
//! the part by seqno, not by key: the sealed buffer then holds only
//! entries older than every entry of its sibling, so a RangeTab's buffers
//! keep disjoint seqno ranges (version invariant 1), readers still meet
//! every key's newest version in the younger buffer first, and the older
//! buffer merges into L1 before (or with) the younger one, as the
//! picker's age order requires. Both chunks and both headers are
//! persisted before the flush's one edit, as for any flush. This is the
//! spec's "a flush's data for one RangeTab may span several chunks
//! across a seal" (liveness hole (c)).
//!
//! # Crash consistency (docs/format/pm.md "RangeTab")
//!
//! A flush persists each chunk, then the buffer's header mirror, then its
//! edit commits. A crash before the edit leaves bytes past the MANIFEST's
//! used size (garbage; WAL replay appends again over them) and possibly a
//! header ahead of the MANIFEST (rewritten at open). A seal is one edit.
//! A merge syncs its L1 tables, then its edit; a crash before leaves
//! orphan SSTs (removed at open) and the buffers sealed (picked again).
//! Buffer runs allocated at creation are recorded by the creating edit; a
//! crash before it leaks them until reconcile frees them.
//!
//! # Readings of the paper (faithful / ours)
//!
//! * Key mapping: §III-B's prefix split is `rangetab_prefix_bytes = 4`
//!   (faithful); explicit boundaries are the sound default for keys that
//!   share prefixes. §IV's "hashing the key" is not built: it breaks key
//!   adjacency, scans and the overlap-based selection.
//! * Buffers: N × 2 × capacity of PM (the double buffer inside the PM
//!   budget); capacity defaults to the memtable size (the paper's 64 MB).
//! * `cur` = the offset of the next write; `seq` = chunks since reset.
//! * α = 0.75 is ours (the paper gives none). "Low load" is measured on
//!   the admitted write rate (the paper: CPU and I/O load).
//! * Every sealed buffer is a step-1 candidate, and steps 2–3 seal the
//!   write buffer they take (sound, the default); the paper's picker takes
//!   only sealed buffers, step 1 only those past β
//!   (`rangetab_faithful_picker`), which can leave a buffer sealed below
//!   α unmerged while its sibling fills (`picker.rs`).
//! * L1 = PM size (flattened); the paper grows L0 keeping level ratios.
//! * No sequential bypass (§V-B-1b: sequential writes pass through PM).
//! * `regions` > 1 is refused: RangeTabs already partition the key space.

pub mod buffer;
pub mod chunk;
pub mod inspect;
pub mod layout;
pub mod picker;
pub mod salvage;
pub mod view;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::compaction::{merge_to_ssts, OutputSpec};
use crate::design::classic::Classic;
use crate::design::leveled;
use crate::design::{
    Design, Headroom, JobEnv, JobOutput, PickContext, Task, WriteControl, Written,
};
use crate::error::{Error, Result};
use crate::iter::{InternalIterator, MergingIterator};
use crate::key::{self, compare_internal};
use crate::memtable::MemTable;
use crate::options::{Options, Preset, WalPlacement};
use crate::stats::{StallCause, Tier};
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};
use crate::storage::pm::PmTier;
use crate::storage::PmRegion;
use crate::version::edit::{PmWal, TableFormat, TableMeta, VersionEdit};
use crate::version::{table_iter, LevelIterator, TableContext, TableHandle, Version};

use buffer::{page_offset, BufferReader, Mirror, Readers, DATA_START};
use chunk::Size;
use layout::{buffer_tag, BufferRecord, Layout, RtView, Source, State, LAYOUT_TAG};
use picker::{MergePlan, Thresholds, MERGE_KINDS};
use view::L0View;

pub use layout::MAX_RANGETABS;

/// A flush spills a part into a write buffer's remaining room only if
/// that room is at least 1/this of the capacity (a smaller piece would
/// cost a chunk header and a hash index for little data).
const MIN_SPILL_FRACTION: u64 = 32;

/// Smallest buffer capacity accepted.
pub const MIN_CAPACITY_BYTES: u64 = 16 << 10;

/// How long a flush waits for a RangeTab to get room before it merges the
/// RangeTab into L1 itself, and a seal for the flush in flight.
const WAIT_LIMIT: Duration = Duration::from_secs(60);

/// The sizes of the RangeTabs, fixed when the database is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// N.
    pub count: u32,
    /// Data bytes of one buffer.
    pub capacity_bytes: u64,
    /// Pages of one buffer's run.
    pub buffer_pages: u64,
    /// PM kept for the WALs.
    pub wal_reserve_bytes: u64,
}

fn pages_for(capacity: u64) -> u64 {
    (DATA_START + capacity).div_ceil(PAGE_SIZE_BYTES)
}

/// The largest capacity whose buffer fits `bytes`.
fn capacity_within(bytes: u64) -> u64 {
    (bytes / PAGE_SIZE_BYTES * PAGE_SIZE_BYTES).saturating_sub(DATA_START)
}

impl Geometry {
    /// The geometry `opts` asks for on a PM tier of `region_len_bytes`
    /// whose allocator has `data_bytes` of data pages: the WALs get
    /// `memtable_count_max` memtables of PM (plus extents), the RangeTabs
    /// what is left (Options: `rangetab_count`, `rangetab_capacity_bytes`).
    pub fn for_options(opts: &Options, region_len_bytes: u64, data_bytes: u64) -> Result<Geometry> {
        let mem = opts.memtable_size_bytes as u64;
        let wal_reserve_bytes = if opts.wal_placement() == WalPlacement::Pm {
            let ext = crate::wal::pm::extent_len_for_region(region_len_bytes);
            opts.memtable_count_max as u64 * (mem + 2 * ext) + ext
        } else {
            0
        };
        let avail = data_bytes.saturating_sub(wal_reserve_bytes);
        let count = if opts.rangetab_boundaries.is_empty() {
            opts.rangetab_count as u64
        } else {
            opts.rangetab_boundaries.len() as u64 + 1
        };
        let fit = |n: u64, cap: u64| 2 * n * pages_for(cap) * PAGE_SIZE_BYTES <= avail;
        let (count, capacity) = match (count, opts.rangetab_capacity_bytes) {
            (0, 0) => {
                let cap = capacity_within(pages_for(mem) * PAGE_SIZE_BYTES);
                let n = avail / (2 * pages_for(cap) * PAGE_SIZE_BYTES);
                if n >= 2 {
                    (n.min(MAX_RANGETABS as u64), cap)
                } else {
                    (2, capacity_within(avail / 4))
                }
            }
            (0, cap) => (
                (avail / (2 * pages_for(cap) * PAGE_SIZE_BYTES)).min(MAX_RANGETABS as u64),
                cap,
            ),
            (n, 0) => {
                let cap = capacity_within(avail / (2 * n))
                    .min(capacity_within(pages_for(mem) * PAGE_SIZE_BYTES));
                (n, cap)
            }
            (n, cap) => (n, cap),
        };
        if count == 0 || capacity < MIN_CAPACITY_BYTES || !fit(count, capacity) {
            return Err(Error::InvalidOptions(format!(
                "design `rangetab`: {count} RangeTabs of two {capacity}-byte buffers do not fit the \
                 {avail} bytes of PM left after the WALs ({wal_reserve_bytes} bytes for \
                 `memtable_count_max` = {} memtables of `memtable_size_bytes` = {mem}): lower \
                 `rangetab_count` or `rangetab_capacity_bytes` (each buffer at least {} bytes), or \
                 raise `pm_size_bytes`",
                opts.memtable_count_max, MIN_CAPACITY_BYTES
            )));
        }
        Ok(Geometry {
            count: count as u32,
            capacity_bytes: capacity,
            buffer_pages: pages_for(capacity),
            wal_reserve_bytes,
        })
    }
}

impl Geometry {
    /// [`Geometry::for_options`] for a PM region of `region_len_bytes`,
    /// with the page allocator's data pages worked out from its layout
    /// (docs/format/pm.md: a superblock page and one bitmap page per
    /// 32768 pages) — what a tool needs to know N before the database
    /// exists (e.g. to split a key range into N boundaries).
    pub fn for_region(opts: &Options, region_len_bytes: u64) -> Result<Geometry> {
        let pages = region_len_bytes / PAGE_SIZE_BYTES;
        let meta = 1 + pages.div_ceil(PAGE_SIZE_BYTES * 8);
        let data = pages.saturating_sub(meta) * PAGE_SIZE_BYTES;
        Geometry::for_options(opts, region_len_bytes, data)
    }
}

/// The boundaries of the paper's prefix mapping: the space of `p`-byte
/// prefixes cut into `n` equal parts.
pub fn prefix_boundaries(p: usize, n: u32) -> Result<Vec<Vec<u8>>> {
    let space: u128 = 1u128 << (8 * p as u32);
    if u128::from(n) > space {
        return Err(Error::InvalidOptions(format!(
            "`rangetab_prefix_bytes` = {p} gives {space} prefixes, fewer than the {n} RangeTabs"
        )));
    }
    Ok((1..u128::from(n))
        .map(|i| {
            let v = i * space / u128::from(n);
            v.to_be_bytes()[16 - p..].to_vec()
        })
        .collect())
}

/// Distinct keys per RangeTab that make a flush smaller than half a
/// memtable a fair sample for the quantile boundaries.
const QUANTILE_MIN_KEYS_PER_RANGETAB: usize = 16;

/// N − 1 boundaries from the distinct user keys of a memtable (the
/// fallback): its quantiles, or `None` if it is too small a sample to cut
/// the key space by (module doc) — fewer distinct keys than RangeTabs, or
/// fewer than [`QUANTILE_MIN_KEYS_PER_RANGETAB`] per RangeTab in less than
/// half of `memtable_size_bytes`. Equal quantiles (many versions of few
/// keys) are padded with successors so the boundaries stay strictly
/// increasing.
pub fn quantile_boundaries(
    mem: &Arc<MemTable>,
    n: u32,
    memtable_size_bytes: usize,
) -> Option<Vec<Vec<u8>>> {
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut it = mem.iter();
    it.seek_to_first();
    while it.valid() {
        let uk = key::user_key(it.key());
        if keys.last().is_none_or(|k| k.as_slice() != uk) {
            keys.push(uk.to_vec());
        }
        it.next();
    }
    let m = keys.len();
    let half_full = mem.size_bytes() >= memtable_size_bytes / 2;
    if m < n as usize || (m < QUANTILE_MIN_KEYS_PER_RANGETAB * n as usize && !half_full) {
        return None;
    }
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(n as usize);
    for i in 1..n as usize {
        let k = keys.get(i * m / n as usize).cloned().unwrap_or_default();
        let k = match out.last() {
            Some(prev) if k <= *prev => {
                let mut s = prev.clone();
                s.push(0);
                s
            }
            _ if k.is_empty() => vec![0],
            _ => k,
        };
        out.push(k);
    }
    Some(out)
}

/// The tables an edit adds and deletes, by level: the edit is applied
/// once the current version has the first and not the second.
#[derive(Debug, Clone, Default)]
struct Mark {
    added: Vec<(u32, u64)>,
    deleted: Vec<(u32, u64)>,
}

impl Mark {
    fn of(edit: &VersionEdit) -> Mark {
        Mark {
            added: edit.new_tables.iter().map(|(l, m)| (*l, m.id)).collect(),
            deleted: edit.deleted_tables.clone(),
        }
    }

    /// True if `v` has every added table and none of the deleted ones:
    /// the first version built that does is the one the edit made (added
    /// ids are fresh; what the edit deletes, nothing else deletes first).
    fn matches(&self, v: &Version) -> bool {
        let at = |&(level, id): &(u32, u64)| {
            v.levels
                .get(level as usize)
                .is_some_and(|l| l.iter().any(|t| t.meta.id == id))
        };
        self.added.iter().all(at) && !self.deleted.iter().any(at)
    }

    fn is_empty(&self) -> bool {
        self.added.is_empty() && self.deleted.is_empty()
    }
}

/// An edit the design waits to see applied: its mark, and the generation
/// of the version it made once that version was built (`observe`).
#[derive(Debug, Clone, Default)]
struct Pending {
    mark: Mark,
    generation: Option<u64>,
}

impl Pending {
    fn new(mark: Mark) -> Pending {
        // An edit that changes no table cannot race anything: applied.
        let generation = mark.is_empty().then_some(0);
        Pending { mark, generation }
    }

    /// Notes a version just built.
    fn observe(&mut self, v: &Version) {
        if self.generation.is_none() && self.mark.matches(v) {
            self.generation = Some(v.generation);
        }
    }

    /// True if `v` (the current version, or a later one) includes the edit.
    fn applied_in(&self, v: &Version) -> bool {
        self.generation.is_some_and(|g| v.generation >= g)
    }
}

/// The seal gate (module docs).
#[derive(Default)]
struct Gate {
    /// A seal is being decided or applied: flushes wait to start.
    sealing: bool,
    /// A flush started (`prepare_flush`) whose edit may not be applied yet.
    in_flight: bool,
    /// That flush's edit, once the flush returned it.
    edit: Option<Pending>,
}

/// One buffer as the latest version has it, without its table (holding
/// the table would keep its run referenced).
#[derive(Debug, Clone, Copy)]
struct Seen {
    state: State,
    used: u64,
    run: PageRun,
}

/// The RangeTabs of the latest version built (for `prepare_flush`, which
/// has no version).
#[derive(Clone)]
struct Latest {
    layout: Arc<Layout>,
    bufs: Vec<Seen>,
}

/// What `prepare_flush` planned for a memtable.
struct Prepared {
    mem: usize,
    layout: Option<Arc<Layout>>,
    parts: Arc<Vec<(u32, Size)>>,
}

/// What a flush decided for one RangeTab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dest {
    /// Append to this slot (the write buffer, or an init buffer that
    /// becomes it); seal the other slot first if `seal`.
    Slot { slot: u8, seal: Option<u8> },
    /// The part overflows the write buffer `write`: its older entries
    /// fill `write`, which is sealed, the rest go to the init buffer
    /// `init` (module docs, "Spills").
    Spill { write: u8, init: u8 },
    /// Merge the RangeTab and its part into L1 (an exclusive flush).
    L1,
}

/// Counters shown in `tierkv.stats`.
#[derive(Default)]
struct Counters {
    seals: AtomicU64,
    stale_tasks: AtomicU64,
    flush_waits: AtomicU64,
    flush_wait_us: AtomicU64,
    exclusive_flushes: AtomicU64,
    chunks: AtomicU64,
    spills: AtomicU64,
}

/// Everything the design, its table opener and its level views share.
struct Shared {
    pm: Arc<PmTier>,
    region: Arc<dyn PmRegion>,
    readers: Arc<Readers>,
    layout_cache: Mutex<Option<(Vec<u8>, Arc<Layout>)>>,
    ctx: OnceLock<Weak<TableContext>>,
    latest: Mutex<Option<Latest>>,
    latest_cv: Condvar,
    gate: Mutex<Gate>,
    gate_cv: Condvar,
    /// Jobs running, counted until their edit is applied (they give up
    /// their task while `exclusive`).
    active: AtomicUsize,
    /// Edits of jobs that ended, until they are seen in the current
    /// version.
    finished: Mutex<Vec<Pending>>,
    /// An exclusive flush runs, or its edit is not applied yet.
    exclusive: AtomicBool,
    exclusive_edit: Mutex<Option<Pending>>,
    /// The memtable `prepare_flush` ran for (a flush without it is a WAL
    /// replay), the layout its parts were planned with, and the parts.
    prepared: Mutex<Option<Prepared>>,
    /// Each RangeTab's share of the last flush's bytes (empty: none yet),
    /// for the pacer's estimate of the room left ([`Design::headroom`]).
    shares: Mutex<Vec<f64>>,
    counters: Counters,
}

/// The RangeKV design.
pub struct RangeTab {
    s: Arc<Shared>,
    opts: Options,
    th: Thresholds,
    leveled: Classic,
    hash_index: bool,
}

/// The RangeKV design on `pm`, configured by `opts`.
pub fn rangetab(opts: &Options, pm: Arc<PmTier>) -> Result<RangeTab> {
    RangeTab::new(opts, pm)
}

impl Shared {
    /// The layout recorded in `v` (decoded once per record).
    fn layout_of(&self, v: &Version) -> Result<Option<Arc<Layout>>> {
        let Some(bytes) = v.design_state.get(&LAYOUT_TAG) else {
            return Ok(None);
        };
        let mut c = self.layout_cache.lock();
        if let Some((b, l)) = c.as_ref() {
            if b == bytes {
                return Ok(Some(Arc::clone(l)));
            }
        }
        let l = Arc::new(Layout::decode(bytes)?);
        self.readers.set_layout(Arc::clone(&l));
        *c = Some((bytes.clone(), Arc::clone(&l)));
        Ok(Some(l))
    }

    fn rt_view(&self, v: &Version) -> Result<Option<RtView>> {
        match self.layout_of(v)? {
            Some(l) => Ok(Some(RtView::of(v, l)?)),
            None => Ok(None),
        }
    }

    /// True if no live table handle lists `run`.
    fn unreferenced(&self, run: PageRun) -> bool {
        match self.ctx.get().and_then(Weak::upgrade) {
            Some(ctx) => !ctx.pm_run_refs.lock().contains_key(&run),
            None => true,
        }
    }

    /// Notes the RangeTabs of a version just built (the level-view hook).
    fn observe(&self, v: &Version, layout: &Arc<Layout>) {
        let Ok(rt) = RtView::of(v, Arc::clone(layout)) else {
            return;
        };
        let bufs = rt
            .bufs
            .iter()
            .map(|b| Seen {
                state: b.rec.state,
                used: b.used(),
                run: layout.run(b.r, b.slot),
            })
            .collect();
        *self.latest.lock() = Some(Latest {
            layout: Arc::clone(layout),
            bufs,
        });
        self.latest_cv.notify_all();
        {
            let mut g = self.gate.lock();
            if let Some(p) = &mut g.edit {
                p.observe(v);
            }
        }
        self.gate_cv.notify_all();
        if let Some(p) = self.exclusive_edit.lock().as_mut() {
            p.observe(v);
        }
        for p in self.finished.lock().iter_mut() {
            p.observe(v);
        }
    }

    /// Whether RangeTab `r` of `latest` can take a part of `need` bytes
    /// now (a part larger than a buffer goes to L1 and needs no room).
    fn can_take(&self, latest: &Latest, r: u32, need: u64) -> bool {
        let cap = latest.layout.capacity_bytes;
        if need > cap {
            return true;
        }
        let pair = &latest.bufs[2 * r as usize..2 * r as usize + 2];
        pair.iter()
            .any(|b| b.state == State::Write && b.used + need <= cap)
            || pair
                .iter()
                .any(|b| b.state == State::Init && self.unreferenced(b.run))
    }

    /// Enters a job; `false`: an exclusive flush runs, give the task up.
    fn enter(&self) -> bool {
        self.active.fetch_add(1, Ordering::SeqCst);
        if self.exclusive.load(Ordering::SeqCst) {
            self.active.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    fn leave(&self) {
        self.active.fetch_sub(1, Ordering::SeqCst);
        self.latest_cv.notify_all();
    }

    /// Leaves a job, keeping its output's edit until it is applied (an
    /// exclusive flush must not read a version without it).
    fn leave_after(&self, env: &JobEnv, out: &Result<JobOutput>) {
        {
            let cur = env.versions.current();
            let mut f = self.finished.lock();
            f.retain(|p| !p.applied_in(&cur));
            if let Ok(o) = out {
                let p = Pending::new(Mark::of(&o.edit));
                if p.generation.is_none() {
                    f.push(p);
                }
            }
        }
        self.leave();
    }

    /// True once no job runs and every finished job's edit is in `cur`.
    fn quiet(&self, cur: &Version) -> bool {
        if self.active.load(Ordering::SeqCst) > 0 {
            return false;
        }
        let mut f = self.finished.lock();
        f.retain(|p| !p.applied_in(cur));
        f.is_empty()
    }
}

/// The parts of a memtable per RangeTab: `(r, size)` in key order.
fn plan_parts(mem: &Arc<MemTable>, layout: &Layout) -> Vec<(u32, Size)> {
    let mut out: Vec<(u32, Size)> = Vec::new();
    let mut it = mem.iter();
    it.seek_to_first();
    let mut cur: Option<(u32, Option<Vec<u8>>)> = None;
    while it.valid() {
        let ik = it.key();
        let uk = key::user_key(ik);
        let same = cur
            .as_ref()
            .is_some_and(|(_, hi)| hi.as_deref().is_none_or(|h| uk < h));
        if !same {
            let r = layout.route(uk);
            cur = Some((r, layout.range(r).1.map(<[u8]>::to_vec)));
            out.push((r, Size::default()));
        }
        if let Some((_, s)) = out.last_mut() {
            s.add(ik.len(), it.value().len());
        }
        it.next();
    }
    out
}

/// Forward-only view of an iterator restricted to the keys of some
/// RangeTabs (the memtable part of an exclusive flush).
struct OnlyRangeTabs {
    inner: Box<dyn InternalIterator>,
    layout: Arc<Layout>,
    take: Arc<Vec<bool>>,
    stopped: bool,
}

impl OnlyRangeTabs {
    fn new(inner: Box<dyn InternalIterator>, layout: &Arc<Layout>, take: &Arc<Vec<bool>>) -> Self {
        OnlyRangeTabs {
            inner,
            layout: Arc::clone(layout),
            take: Arc::clone(take),
            stopped: false,
        }
    }

    fn skip(&mut self) {
        while self.inner.valid()
            && !self.take[self.layout.route(key::user_key(self.inner.key())) as usize]
        {
            self.inner.next();
        }
    }
}

impl InternalIterator for OnlyRangeTabs {
    fn valid(&self) -> bool {
        !self.stopped && self.inner.valid()
    }
    fn seek_to_first(&mut self) {
        self.stopped = false;
        self.inner.seek_to_first();
        self.skip();
    }
    fn seek_to_last(&mut self) {
        // Forward only (merges read it once from the start).
        self.stopped = true;
    }
    fn seek(&mut self, target: &[u8]) {
        self.stopped = false;
        self.inner.seek(target);
        self.skip();
    }
    fn next(&mut self) {
        self.inner.next();
        self.skip();
    }
    fn prev(&mut self) {
        self.stopped = true;
    }
    fn key(&self) -> &[u8] {
        self.inner.key()
    }
    fn value(&self) -> &[u8] {
        self.inner.value()
    }
    fn status(&self) -> Result<()> {
        self.inner.status()
    }
}

/// A buffer's table metadata after appending a chunk to `old` (or to an
/// empty buffer).
fn appended_meta(
    id: u64,
    run: PageRun,
    old: Option<&TableMeta>,
    used: u64,
    b: &ChunkSummary,
) -> TableMeta {
    let (smallest, largest, seq_min, seq_max, entries, deletions) = match old {
        Some(m) => (
            if compare_internal(&b.smallest, &m.smallest).is_lt() {
                b.smallest.clone()
            } else {
                m.smallest.clone()
            },
            if compare_internal(&b.largest, &m.largest).is_gt() {
                b.largest.clone()
            } else {
                m.largest.clone()
            },
            m.seq_min.min(b.seq_min),
            m.seq_max.max(b.seq_max),
            m.entries + b.n,
            m.deletions + b.deletions,
        ),
        None => (
            b.smallest.clone(),
            b.largest.clone(),
            b.seq_min,
            b.seq_max,
            b.n,
            b.deletions,
        ),
    };
    TableMeta {
        id,
        tier: Tier::Pm,
        format: TableFormat::RangeTab,
        size_bytes: used,
        smallest,
        largest,
        seq_min,
        seq_max,
        entries,
        deletions,
        pm_pages: vec![run],
    }
}

/// One chunk a flush wrote, and what it does to the buffers' states.
struct Piece {
    r: u32,
    slot: u8,
    /// Seal the other buffer of `r` (the part did not fit it).
    seal_other: Option<u8>,
    /// Seal this buffer (a spill filled it).
    seal_self: bool,
    cs: ChunkSummary,
}

/// A spill's cut of the part `[lo, hi)` of `mem`: the sizes of its older
/// entries — by seqno, as many as fit `room` bytes — and of the rest, and
/// the largest seqno of the older ones. Cutting by seqno keeps a
/// RangeTab's buffers in disjoint seqno ranges (the older buffer holds
/// only older entries), so readers probing the younger buffer first still
/// meet every key's newest version first (version.rs invariant 1).
fn spill_split(
    mem: &Arc<MemTable>,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
    room: u64,
) -> (Size, Size, u64) {
    let mut entries: Vec<(u64, u32, u32)> = Vec::new();
    let mut it = mem.iter();
    match lo {
        Some(l) => it.seek(&key::seek_key(l, key::MAX_SEQNO)),
        None => it.seek_to_first(),
    }
    while it.valid() && hi.is_none_or(|h| key::user_key(it.key()) < h) {
        let seq = key::parse_internal_key(it.key()).map_or(0, |p| p.seq);
        entries.push((seq, it.key().len() as u32, it.value().len() as u32));
        it.next();
    }
    entries.sort_unstable_by_key(|e| e.0);
    let mut older = Size::default();
    let mut newer = Size::default();
    let mut through = 0;
    let mut full = false;
    for &(seq, k, v) in &entries {
        if !full {
            let mut grown = older;
            grown.add(k as usize, v as usize);
            if grown.footprint() <= room {
                older = grown;
                through = seq;
                continue;
            }
            full = true;
        }
        newer.add(k as usize, v as usize);
    }
    (older, newer, through)
}

/// What a flush's chunk added to its buffer.
struct ChunkSummary {
    chunk: Arc<chunk::Chunk>,
    footprint: u64,
    n: u64,
    deletions: u64,
    seq_min: u64,
    seq_max: u64,
    smallest: Vec<u8>,
    largest: Vec<u8>,
}

impl RangeTab {
    /// The design on `pm`, configured by `opts` (its sizes are checked
    /// when the database is created, `Design::recover`).
    pub fn new(opts: &Options, pm: Arc<PmTier>) -> Result<RangeTab> {
        if opts.regions != 1 {
            return Err(Error::InvalidOptions(format!(
                "`regions` = {}: design `rangetab` needs `regions` = 1",
                opts.regions
            )));
        }
        let region = Arc::clone(pm.region());
        let readers = Arc::new(Readers::new(
            Arc::clone(&region),
            opts.verify_checksums,
            opts.rangetab_hash_index,
        ));
        Ok(RangeTab {
            s: Arc::new(Shared {
                pm,
                region,
                readers,
                layout_cache: Mutex::new(None),
                ctx: OnceLock::new(),
                latest: Mutex::new(None),
                latest_cv: Condvar::new(),
                gate: Mutex::new(Gate::default()),
                gate_cv: Condvar::new(),
                active: AtomicUsize::new(0),
                finished: Mutex::new(Vec::new()),
                exclusive: AtomicBool::new(false),
                exclusive_edit: Mutex::new(None),
                prepared: Mutex::new(None),
                shares: Mutex::new(Vec::new()),
                counters: Counters::default(),
            }),
            opts: opts.clone(),
            th: Thresholds {
                beta: opts.rangetab_beta,
                alpha: opts.rangetab_alpha,
                mu: opts.rangetab_mu,
                gamma: opts.rangetab_gamma,
                low_load_fraction: opts.rangetab_low_load_fraction,
                faithful: opts.rangetab_faithful_picker,
            },
            leveled: Classic::new(opts),
            hash_index: opts.rangetab_hash_index,
        })
    }

    /// The thresholds.
    pub fn thresholds(&self) -> Thresholds {
        self.th
    }

    /// The RangeTabs of `v` (`None` before the layout exists).
    pub fn view(&self, v: &Version) -> Result<Option<RtView>> {
        self.s.rt_view(v)
    }

    fn data_bytes(&self) -> u64 {
        let a = self.s.pm.allocator();
        (a.total_pages() - a.data_start_page()) * PAGE_SIZE_BYTES
    }

    /// The geometry the options ask for on this PM tier.
    pub fn geometry(&self) -> Result<Geometry> {
        Geometry::for_options(&self.opts, self.s.region.len(), self.data_bytes())
    }

    /// Allocates and formats the buffers of a new database; returns the
    /// edit recording them (module docs: a crash before it leaks them).
    fn create(&self) -> Result<VersionEdit> {
        let g = self.geometry()?;
        let (source, boundaries) = if !self.opts.rangetab_boundaries.is_empty() {
            (Source::Option, self.opts.rangetab_boundaries.clone())
        } else if self.opts.rangetab_prefix_bytes > 0 {
            (
                Source::Prefix,
                prefix_boundaries(self.opts.rangetab_prefix_bytes, g.count)?,
            )
        } else {
            (Source::Pending, Vec::new())
        };
        let alloc = self.s.pm.allocator();
        let mut runs: Vec<PageRun> = Vec::with_capacity(2 * g.count as usize);
        let result = (|| -> Result<()> {
            for i in 0..2 * g.count {
                let run = alloc.alloc(g.buffer_pages)?.ok_or_else(|| {
                    Error::InvalidOptions(format!(
                        "design `rangetab`: the PM tier has no run of {} free pages for buffer {i} \
                         of {}; lower `rangetab_count` or `rangetab_capacity_bytes`",
                        g.buffer_pages,
                        2 * g.count
                    ))
                })?;
                runs.push(run);
                Mirror {
                    r: i / 2,
                    slot: (i % 2) as u8,
                    state: State::Init,
                    capacity: g.capacity_bytes,
                    used: 0,
                    chunks: 0,
                    seq_min: 0,
                    seq_max: 0,
                }
                .store(self.s.region.as_ref(), page_offset(run.first))?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            for r in runs {
                let _ = alloc.free(r);
            }
            return Err(e);
        }
        let layout = Layout::new(
            g.count,
            g.capacity_bytes,
            g.buffer_pages,
            runs.iter().map(|r| r.first).collect(),
            source,
            boundaries,
        );
        log::info!(
            "rangetab: {} RangeTabs of 2 × {} bytes ({} pages each), boundaries: {}",
            g.count,
            g.capacity_bytes,
            g.buffer_pages,
            source.name()
        );
        let mut edit = VersionEdit::default();
        edit.design_records.push((LAYOUT_TAG, layout.encode()));
        Ok(edit)
    }

    /// Checks a recovered layout against the options and the region, and
    /// rewrites every buffer header that disagrees with the MANIFEST.
    fn check_and_repair(&self, v: &Version, layout: Arc<Layout>) -> Result<()> {
        let o = &self.opts;
        let refuse = |m: String| Err(Error::InvalidOptions(m));
        if o.rangetab_count != 0 && o.rangetab_count != layout.count as usize {
            return refuse(format!(
                "`rangetab_count` = {} but the database was created with {} RangeTabs",
                o.rangetab_count, layout.count
            ));
        }
        if o.rangetab_capacity_bytes != 0 && o.rangetab_capacity_bytes != layout.capacity_bytes {
            return refuse(format!(
                "`rangetab_capacity_bytes` = {} but the database was created with {}",
                o.rangetab_capacity_bytes, layout.capacity_bytes
            ));
        }
        if !o.rangetab_boundaries.is_empty()
            && (layout.source != Source::Option || layout.boundaries != o.rangetab_boundaries)
        {
            return refuse(
                "`rangetab_boundaries` differ from the boundaries the database was created with"
                    .into(),
            );
        }
        if o.rangetab_prefix_bytes != 0 && layout.source != Source::Prefix {
            return refuse(format!(
                "`rangetab_prefix_bytes` = {} but the database's boundaries come from {}",
                o.rangetab_prefix_bytes,
                layout.source.name()
            ));
        }
        let alloc = self.s.pm.allocator();
        for run in layout.runs() {
            if run.first < alloc.data_start_page() || run.first + run.count > alloc.total_pages() {
                return Err(Error::corruption(
                    "MANIFEST",
                    0,
                    format!("RangeTab buffer run {run:?} lies outside the PM data pages"),
                ));
            }
        }
        let rt = RtView::of(v, Arc::clone(&layout))?;
        for b in &rt.bufs {
            let run = layout.run(b.r, b.slot);
            let want = Mirror {
                r: b.r,
                slot: b.slot,
                state: b.rec.state,
                capacity: layout.capacity_bytes,
                used: b.used(),
                chunks: b.rec.chunks,
                seq_min: b.table.as_ref().map_or(0, |t| t.meta.seq_min),
                seq_max: b.table.as_ref().map_or(0, |t| t.meta.seq_max),
            };
            let base = page_offset(run.first);
            let got = Mirror::decode(self.s.region.slice(base, buffer::HEADER_BYTES)?);
            if got != Some(want) {
                log::info!(
                    "rangetab: buffer ({}, {}) header {} the MANIFEST; rewritten",
                    b.r,
                    b.slot,
                    if got.is_some() {
                        "disagrees with"
                    } else {
                        "is torn, unlike"
                    }
                );
                want.store(self.s.region.as_ref(), base)?;
            }
        }
        Ok(())
    }

    /// The parts of `mem` under `layout`, as `prepare_flush` planned them
    /// if it used the same boundaries.
    fn parts(&self, mem: &Arc<MemTable>, layout: &Layout) -> Arc<Vec<(u32, Size)>> {
        let key = Arc::as_ptr(mem) as usize;
        if let Some(p) = self.s.prepared.lock().as_ref() {
            let same = p
                .layout
                .as_ref()
                .is_some_and(|l| l.has_boundaries() && l.boundaries == layout.boundaries);
            if p.mem == key && same {
                return Arc::clone(&p.parts);
            }
        }
        Arc::new(plan_parts(mem, layout))
    }

    /// Where each part goes.
    fn destinations(&self, rt: &RtView, parts: &[(u32, Size)]) -> Vec<Dest> {
        let cap = rt.layout.capacity_bytes;
        parts
            .iter()
            .map(|&(r, size)| {
                let need = size.footprint();
                if need > cap {
                    return Dest::L1;
                }
                let w = rt.write_buf(r);
                if let Some(w) = w {
                    if w.used() + need <= cap {
                        return Dest::Slot {
                            slot: w.slot,
                            seal: None,
                        };
                    }
                }
                let free = rt.pair(r).into_iter().find(|b| {
                    b.rec.state == State::Init && self.s.unreferenced(rt.layout.run(b.r, b.slot))
                });
                match (free, w) {
                    (Some(i), Some(w)) if cap - w.used() >= cap / MIN_SPILL_FRACTION => {
                        Dest::Spill {
                            write: w.slot,
                            init: i.slot,
                        }
                    }
                    (Some(i), w) => Dest::Slot {
                        slot: i.slot,
                        seal: w.map(|w| w.slot),
                    },
                    (None, _) => Dest::L1,
                }
            })
            .collect()
    }

    fn flush_inner(&self, env: &JobEnv, mem: &Arc<MemTable>, prepared: bool) -> Result<JobOutput> {
        let v = &env.version;
        let mut edit = VersionEdit::default();
        let mut layout = self.s.layout_of(v)?.ok_or_else(|| {
            Error::corruption("MANIFEST", 0, "RangeTab design without a layout record")
        })?;
        if mem.is_empty() {
            return Ok(JobOutput::default());
        }
        if !layout.has_boundaries() {
            let Some(b) = quantile_boundaries(mem, layout.count, self.opts.memtable_size_bytes)
            else {
                // Too small a sample (module doc): into L1 whole, every
                // RangeTab still empty; the boundaries wait.
                let rt = RtView::of(v, Arc::clone(&layout))?;
                let ssd = self.exclusive_merge(env, mem, &rt, &[0], prepared, &mut edit)?;
                return Ok(JobOutput {
                    edit,
                    written: Written {
                        ssd,
                        ..Written::default()
                    },
                });
            };
            let l = Layout::new(
                layout.count,
                layout.capacity_bytes,
                layout.buffer_pages,
                layout.first_pages.clone(),
                Source::Quantiles,
                b,
            );
            log::info!("rangetab: boundaries from the quantiles of the first flush");
            edit.design_records.push((LAYOUT_TAG, l.encode()));
            layout = Arc::new(l);
            self.s.readers.set_layout(Arc::clone(&layout));
        }
        let rt = RtView::of(v, Arc::clone(&layout))?;
        let parts = self.parts(mem, &layout);
        let dests = self.destinations(&rt, &parts);
        let cap = layout.capacity_bytes;
        let mut written = Written::default();

        // Appends, one chunk per RangeTab part (two for a spill), streamed
        // from the memtable.
        let region = &self.s.region;
        let gauge = Arc::clone(self.s.readers.gauge());
        let mut built: Vec<Piece> = Vec::new();
        let mut it = mem.iter();
        it.seek_to_first();
        for (&(r, size), dest) in parts.iter().zip(&dests) {
            let (lo, hi) = layout.range(r);
            debug_assert!(
                !it.valid() || lo.is_none_or(|l| key::user_key(it.key()) >= l),
                "parts out of step with the memtable"
            );
            let in_part = |it: &crate::memtable::MemTableIter| {
                it.valid() && hi.is_none_or(|h| key::user_key(it.key()) < h)
            };
            // Each target: (slot, seal the other slot, seal this one, the
            // planned size, the entries it takes: seqno ≤ this).
            let targets: Vec<(u8, Option<u8>, bool, Size, u64)> = match *dest {
                Dest::L1 => {
                    // Skip the part (an exclusive merge takes it below).
                    while in_part(&it) {
                        it.next();
                    }
                    continue;
                }
                Dest::Slot { slot, seal } => vec![(slot, seal, false, size, u64::MAX)],
                Dest::Spill { write, init } => {
                    let room = cap - rt.buf(r, write).used();
                    let (older, newer, through) = spill_split(mem, lo, hi, room);
                    if older.is_empty() {
                        vec![(init, Some(write), false, newer, u64::MAX)]
                    } else if newer.is_empty() {
                        vec![(write, None, false, older, u64::MAX)]
                    } else {
                        self.s.counters.spills.fetch_add(1, Ordering::Relaxed);
                        vec![
                            (write, None, true, older, through),
                            (init, None, false, newer, u64::MAX),
                        ]
                    }
                }
            };
            let mut builders = Vec::with_capacity(targets.len());
            for &(slot, _, _, size, _) in &targets {
                let b = rt.buf(r, slot);
                let used = if b.rec.state == State::Init {
                    0
                } else {
                    b.used()
                };
                let run = layout.run(r, slot);
                if b.rec.state == State::Init {
                    // A new epoch: the chunks cached for this run are stale.
                    self.s.readers.evict(run.first);
                }
                let start = page_offset(run.first) + DATA_START + used;
                builders.push(chunk::Builder::new(region, start, cap - used, &size));
            }
            while in_part(&it) {
                // Route by seqno only in a spill (one target otherwise).
                let i = if targets.len() == 1 {
                    0
                } else {
                    let seq = key::parse_internal_key(it.key()).map_or(0, |p| p.seq);
                    targets
                        .iter()
                        .position(|t| seq <= t.4)
                        .unwrap_or(targets.len() - 1)
                };
                builders[i].add(it.key(), it.value())?;
                it.next();
            }
            for (mut cb, &(slot, seal_other, seal_self, _, _)) in builders.into_iter().zip(&targets)
            {
                let n = cb.entries() as u64;
                let deletions = cb.deletions;
                let smallest = std::mem::take(&mut cb.smallest);
                let largest = std::mem::take(&mut cb.largest);
                let (c, footprint) = cb.finish(&gauge, self.hash_index)?;
                written.pm_copied += u64::from(c.len);
                built.push(Piece {
                    r,
                    slot,
                    seal_other,
                    seal_self,
                    cs: ChunkSummary {
                        seq_min: c.seq_min,
                        seq_max: c.seq_max,
                        chunk: Arc::new(c),
                        footprint,
                        n,
                        deletions,
                        smallest,
                        largest,
                    },
                });
            }
        }
        it.status()?;

        // Tables, records and header mirrors of the buffers written.
        let beta = (self.th.beta * cap as f64) as u64;
        for Piece {
            r,
            slot,
            seal_other,
            seal_self,
            cs,
        } in &built
        {
            let b = rt.buf(*r, *slot);
            let run = layout.run(*r, *slot);
            if let Some(other) = seal_other {
                let o = rt.buf(*r, *other);
                let rec = BufferRecord {
                    state: State::Sealed,
                    ..o.rec
                };
                edit.design_records
                    .push((buffer_tag(*r, *other), rec.encode()));
                if let Some(t) = &o.table {
                    Mirror {
                        r: *r,
                        slot: *other,
                        state: State::Sealed,
                        capacity: cap,
                        used: t.meta.size_bytes,
                        chunks: o.rec.chunks,
                        seq_min: t.meta.seq_min,
                        seq_max: t.meta.seq_max,
                    }
                    .store(region.as_ref(), page_offset(layout.run(*r, *other).first))?;
                    written.pm_copied += buffer::HEADER_BYTES as u64;
                }
                self.s.counters.seals.fetch_add(1, Ordering::Relaxed);
            }
            let fresh = b.rec.state == State::Init;
            let old_meta = (!fresh)
                .then(|| b.table.as_ref().map(|t| &t.meta))
                .flatten();
            let used = if fresh { 0 } else { b.used() } + cs.footprint;
            let id = env.versions.new_file_number();
            let meta = appended_meta(id, run, old_meta, used, cs);
            let mut rec = if fresh {
                BufferRecord {
                    state: State::Write,
                    order: rt.next_order(*r),
                    chunks: 0,
                }
            } else {
                b.rec
            };
            rec.chunks += 1;
            if *seal_self || used > beta {
                rec.state = State::Sealed;
                self.s.counters.seals.fetch_add(1, Ordering::Relaxed);
            }
            Mirror {
                r: *r,
                slot: *slot,
                state: rec.state,
                capacity: cap,
                used,
                chunks: rec.chunks,
                seq_min: meta.seq_min,
                seq_max: meta.seq_max,
            }
            .store(region.as_ref(), page_offset(run.first))?;
            written.pm_copied += buffer::HEADER_BYTES as u64;
            // The new table's reader: the old chunks and the new one, the
            // old reader's chunk groups reused and the new ones indexed
            // here, not by the first read.
            let prev = match (&b.table, fresh) {
                (Some(t), false) => Some(self.s.readers.get(&t.meta)?),
                _ => None,
            };
            let mut chunks: Vec<Arc<chunk::Chunk>> =
                prev.as_ref().map_or_else(Vec::new, |p| p.chunks.clone());
            chunks.push(Arc::clone(&cs.chunk));
            let reader = BufferReader::new(
                *r,
                *slot,
                chunks,
                self.hash_index,
                prev.as_deref(),
                self.s.readers.gauge(),
            );
            reader.warm();
            self.s.readers.built(
                id,
                run.first,
                Arc::new(reader),
                std::slice::from_ref(&cs.chunk),
            );
            if let (Some(t), false) = (&b.table, fresh) {
                edit.deleted_tables.push((0, t.meta.id));
            }
            edit.new_tables.push((0, meta));
            edit.design_records
                .push((buffer_tag(*r, *slot), rec.encode()));
            self.s.counters.chunks.fetch_add(1, Ordering::Relaxed);
        }

        // RangeTabs that could take no part: merged with it into L1.
        let to_l1: Vec<u32> = parts
            .iter()
            .zip(&dests)
            .filter(|(_, d)| **d == Dest::L1)
            .map(|(&(r, _), _)| r)
            .collect();
        if !to_l1.is_empty() {
            let ssd = self.exclusive_merge(env, mem, &rt, &to_l1, prepared, &mut edit)?;
            written.ssd += ssd;
        }
        let live: HashSet<u64> = v.levels[0]
            .iter()
            .map(|t| t.meta.id)
            .filter(|id| !edit.deleted_tables.iter().any(|(_, d)| d == id))
            .chain(edit.new_tables.iter().map(|(_, m)| m.id))
            .collect();
        self.s.readers.retain(&live);
        Ok(JobOutput { edit, written })
    }

    /// Merges the RangeTabs `rs` — their buffers and their parts of `mem`
    /// — with the L1 tables they overlap into L1 (an exclusive flush).
    /// Returns the SSD bytes written.
    fn exclusive_merge(
        &self,
        env: &JobEnv,
        mem: &Arc<MemTable>,
        rt: &RtView,
        rs: &[u32],
        prepared: bool,
        edit: &mut VersionEdit,
    ) -> Result<u64> {
        let layout = &rt.layout;
        self.s
            .counters
            .exclusive_flushes
            .fetch_add(1, Ordering::Relaxed);
        if prepared {
            // Jobs give their tasks up from now on; wait for running ones.
            self.s.exclusive.store(true, Ordering::SeqCst);
            let start = Instant::now();
            while !self.s.quiet(&env.versions.current()) {
                if start.elapsed() > WAIT_LIMIT {
                    self.s.exclusive.store(false, Ordering::SeqCst);
                    return Err(Error::InvalidArgument(format!(
                        "rangetab: an exclusive flush waited {} s for running jobs",
                        WAIT_LIMIT.as_secs()
                    )));
                }
                let mut l = self.s.latest.lock();
                self.s.latest_cv.wait_for(&mut l, Duration::from_millis(1));
            }
        }
        // The RangeTabs and L1 as they are now that no job runs: merges
        // that finished since the flush took its version changed them (in
        // WAL replay, the replay's chained version is the current one).
        let env = JobEnv {
            opts: env.opts,
            fs: env.fs,
            dir: env.dir,
            versions: env.versions,
            stats: env.stats,
            smallest_snapshot: env.smallest_snapshot,
            limiter: env.limiter,
            version: if prepared {
                env.versions.current()
            } else {
                Arc::clone(&env.version)
            },
        };
        let now = RtView::of(&env.version, Arc::clone(layout))?;
        let mut take = vec![false; layout.count as usize];
        let mut tables: Vec<Arc<TableHandle>> = Vec::new();
        for &r in rs {
            take[r as usize] = true;
            tables.extend(now.filled(r).into_iter().filter_map(|b| b.table.clone()));
        }
        let take = Arc::new(take);
        // The key span: the RangeTabs' tables and the memtable's parts.
        let mut lo: Option<Vec<u8>> = None;
        let mut hi: Option<Vec<u8>> = None;
        let mut widen = |k: &[u8]| {
            if lo.as_deref().is_none_or(|x| k < x) {
                lo = Some(k.to_vec());
            }
            if hi.as_deref().is_none_or(|x| k > x) {
                hi = Some(k.to_vec());
            }
        };
        for t in &tables {
            widen(t.smallest_user_key());
            widen(t.largest_user_key());
        }
        {
            let mut part = OnlyRangeTabs::new(Box::new(mem.iter()), layout, &take);
            part.seek_to_first();
            let mut last: Option<Vec<u8>> = None;
            if part.valid() {
                widen(key::user_key(part.key()));
            }
            while part.valid() {
                last = Some(key::user_key(part.key()).to_vec());
                part.next();
            }
            if let Some(k) = last {
                widen(&k);
            }
        }
        let (Some(lo), Some(hi)) = (lo, hi) else {
            return Ok(0);
        };
        let env = &env;
        let v = &env.version;
        let l1 = v.overlapping(1, Some(&lo), Some(&hi));
        let gp = v.overlapping(2, Some(&lo), Some(&hi));
        let mut children: Vec<Box<dyn InternalIterator>> = vec![Box::new(OnlyRangeTabs::new(
            Box::new(mem.iter()),
            layout,
            &take,
        ))];
        for t in &tables {
            children.push(table_iter(t, false));
        }
        if !l1.is_empty() {
            children.push(Box::new(LevelIterator::new(l1.clone(), false)));
        }
        let mut merged = MergingIterator::new(children);
        let spec = OutputSpec {
            level: 1,
            target_size_bytes: self.opts.sst_size_bytes,
            grandparents: &gp,
            may_drop_tombstones: true,
        };
        let outputs = merge_to_ssts(env, &mut merged, &spec)?;
        let ssd: u64 = outputs.iter().map(|m| m.size_bytes).sum();
        for t in &tables {
            edit.deleted_tables.push((0, t.meta.id));
        }
        for t in &l1 {
            edit.deleted_tables.push((1, t.meta.id));
        }
        for m in outputs {
            edit.new_tables.push((1, m));
        }
        for &r in rs {
            for slot in 0..2u8 {
                edit.design_records
                    .push((buffer_tag(r, slot), BufferRecord::INIT.encode()));
                self.s.readers.evict(layout.run(r, slot).first);
            }
        }
        Ok(ssd)
    }

    /// The seal of a merge's write buffers (module docs, "Concurrency").
    /// `Ok(false)`: the task is stale (a flush re-listed a buffer first).
    fn seal(&self, env: &JobEnv, plan: &MergePlan) -> Result<bool> {
        let s = &self.s;
        let deadline = Instant::now() + WAIT_LIMIT;
        let mut g = s.gate.lock();
        while g.sealing {
            s.gate_cv.wait_for(&mut g, Duration::from_millis(5));
        }
        g.sealing = true;
        while g.in_flight {
            let applied = g
                .edit
                .as_ref()
                .is_some_and(|p| p.applied_in(&env.versions.current()));
            if applied {
                g.in_flight = false;
                g.edit = None;
                break;
            }
            if Instant::now() > deadline {
                g.sealing = false;
                s.gate_cv.notify_all();
                return Ok(false);
            }
            s.gate_cv.wait_for(&mut g, Duration::from_millis(2));
        }
        drop(g);
        let r = (|| -> Result<bool> {
            let v = env.versions.current();
            let Some(rt) = s.rt_view(&v)? else {
                return Ok(false);
            };
            let mut edit = VersionEdit::default();
            for &(r, slot, id) in &plan.seal {
                let b = rt.buf(r, slot);
                let current = b.table.as_ref().map(|t| t.meta.id);
                if b.rec.state != State::Write || current != Some(id) {
                    return Ok(false);
                }
                let rec = BufferRecord {
                    state: State::Sealed,
                    ..b.rec
                };
                edit.design_records
                    .push((buffer_tag(r, slot), rec.encode()));
            }
            env.versions.log_and_apply(edit, 0)?;
            s.counters
                .seals
                .fetch_add(plan.seal.len() as u64, Ordering::Relaxed);
            Ok(true)
        })();
        let mut g = s.gate.lock();
        g.sealing = false;
        drop(g);
        s.gate_cv.notify_all();
        r
    }

    /// Enters a job for `task` (its inputs must still be in the current
    /// version: an exclusive flush may have merged some since the pick).
    /// `false`: give the task up; `true`: leave with `Shared::leave`.
    fn enter_with(&self, env: &JobEnv, task: &Task) -> bool {
        if !self.s.enter() {
            return false;
        }
        let v = env.versions.current();
        let present = task.inputs.iter().all(|(level, tables)| {
            tables.iter().all(|t| {
                v.levels
                    .get(*level)
                    .is_some_and(|l| l.iter().any(|x| x.meta.id == t.meta.id))
            })
        });
        if !present {
            self.s.leave();
        }
        present
    }

    /// Runs a RangeTab merge: seal, merge, reset the buffers to init.
    fn run_rangetab_merge(&self, env: &JobEnv, task: &Task) -> Result<JobOutput> {
        let plan = MergePlan::of(task)
            .ok_or_else(|| Error::InvalidArgument("RangeTab merge without a plan".into()))?;
        if !plan.seal.is_empty() && !self.seal(env, plan)? {
            self.s.counters.stale_tasks.fetch_add(1, Ordering::Relaxed);
            return Ok(JobOutput::default());
        }
        if !self.enter_with(env, task) {
            self.s.counters.stale_tasks.fetch_add(1, Ordering::Relaxed);
            return Ok(JobOutput::default());
        }
        let r = (|| {
            let mut out = leveled::run_merge(env, task, self.opts.sst_size_bytes)?;
            let layout = self.s.layout_of(&env.version)?.ok_or_else(|| {
                Error::corruption("MANIFEST", 0, "RangeTab merge without a layout record")
            })?;
            for &(r, slot) in &plan.buffers {
                out.edit
                    .design_records
                    .push((buffer_tag(r, slot), BufferRecord::INIT.encode()));
                self.s.readers.evict(layout.run(r, slot).first);
            }
            Ok(out)
        })();
        self.s.leave_after(env, &r);
        r
    }
}

impl Design for RangeTab {
    fn preset(&self) -> Preset {
        Preset::RangeTab
    }

    fn flush(&self, env: &JobEnv, mem: &Arc<MemTable>) -> Result<JobOutput> {
        let key = Arc::as_ptr(mem) as usize;
        let prepared = self
            .s
            .prepared
            .lock()
            .as_ref()
            .is_some_and(|p| p.mem == key);
        let r = self.flush_inner(env, mem, prepared);
        *self.s.prepared.lock() = None;
        if prepared {
            let mut g = self.s.gate.lock();
            match &r {
                Ok(out) => g.edit = Some(Pending::new(Mark::of(&out.edit))),
                Err(_) => {
                    g.in_flight = false;
                    g.edit = None;
                }
            }
            drop(g);
            self.s.gate_cv.notify_all();
            if self.s.exclusive.load(Ordering::SeqCst) {
                match &r {
                    Ok(out) => {
                        *self.s.exclusive_edit.lock() = Some(Pending::new(Mark::of(&out.edit)))
                    }
                    Err(_) => self.s.exclusive.store(false, Ordering::SeqCst),
                }
            }
        }
        r
    }

    fn prepare_flush(&self, mem: &Arc<MemTable>) -> Result<()> {
        let s = &self.s;
        let key = Arc::as_ptr(mem) as usize;
        let layout = s.latest.lock().as_ref().map(|l| Arc::clone(&l.layout));
        let parts = match &layout {
            Some(l) if l.has_boundaries() => Arc::new(plan_parts(mem, l)),
            _ => Arc::new(Vec::new()),
        };
        if let Some(l) = &layout {
            let total: u64 = parts.iter().map(|(_, size)| size.footprint()).sum();
            if total > 0 {
                let mut shares = vec![0.0; l.count as usize];
                for &(r, size) in parts.iter() {
                    shares[r as usize] += size.footprint() as f64 / total as f64;
                }
                *s.shares.lock() = shares;
            }
        }
        // Wait (no version pinned) until every part has room.
        let start = Instant::now();
        let mut waited = false;
        loop {
            let blocked = {
                let l = s.latest.lock();
                match l.as_ref() {
                    Some(l) if l.layout.has_boundaries() => parts
                        .iter()
                        .any(|&(r, size)| !s.can_take(l, r, size.footprint())),
                    _ => false,
                }
            };
            if !blocked {
                break;
            }
            if start.elapsed() > WAIT_LIMIT {
                log::warn!(
                    "rangetab: a RangeTab found no room for {} s; the flush merges it into L1",
                    WAIT_LIMIT.as_secs()
                );
                break;
            }
            waited = true;
            let mut l = s.latest.lock();
            s.latest_cv.wait_for(&mut l, Duration::from_millis(2));
        }
        if waited {
            s.counters.flush_waits.fetch_add(1, Ordering::Relaxed);
            s.counters
                .flush_wait_us
                .fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
        }
        // The gate: no seal in progress, and this flush is in flight.
        let mut g = s.gate.lock();
        while g.sealing {
            s.gate_cv.wait_for(&mut g, Duration::from_millis(2));
        }
        g.in_flight = true;
        g.edit = None;
        drop(g);
        *s.prepared.lock() = Some(Prepared {
            mem: key,
            layout,
            parts,
        });
        Ok(())
    }

    fn pick(&self, v: &Version, cx: &PickContext) -> Option<Task> {
        if self.s.exclusive.load(Ordering::SeqCst) {
            let mut m = self.s.exclusive_edit.lock();
            match m.as_ref() {
                Some(p) if p.applied_in(v) => {
                    *m = None;
                    self.s.exclusive.store(false, Ordering::SeqCst);
                }
                _ => return None,
            }
        }
        let rt = self.s.rt_view(v).ok()??;
        picker::pick(&self.th, &self.leveled, &rt, v, cx)
    }

    fn pick_manual(
        &self,
        v: &Version,
        cx: &PickContext,
        level: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Option<Task> {
        if self.s.exclusive.load(Ordering::SeqCst) {
            // An exclusive flush runs or is being applied (see `pick`).
            return None;
        }
        if level == 0 {
            let rt = self.s.rt_view(v).ok()??;
            picker::pick_manual(&rt, v, cx, lo, hi)
        } else {
            leveled::pick_manual_range(v, cx.busy, level, lo, hi)
        }
    }

    fn run(&self, env: &JobEnv, task: &Task) -> Result<JobOutput> {
        if MERGE_KINDS.contains(&task.kind) {
            return self.run_rangetab_merge(env, task);
        }
        if !self.enter_with(env, task) {
            self.s.counters.stale_tasks.fetch_add(1, Ordering::Relaxed);
            return Ok(JobOutput::default());
        }
        let r = leveled::run_merge(env, task, self.opts.sst_size_bytes);
        self.s.leave_after(env, &r);
        r
    }

    fn write_control(&self, v: &Version, immutable_count: usize) -> WriteControl {
        let _ = immutable_count;
        let ext = crate::wal::pm::extent_len_for_region(self.s.region.len());
        let free = self.s.pm.allocator().free_pages() * PAGE_SIZE_BYTES;
        if self.opts.wal_placement() == WalPlacement::Pm && free < 2 * ext {
            return WriteControl::Stop(StallCause::PmFull);
        }
        let pending =
            leveled::pending_compaction_bytes(v, 0, |l| self.leveled.level_target_bytes(l));
        if pending >= self.opts.pending_compaction_bytes_hard {
            WriteControl::Stop(StallCause::PendingCompactionStop)
        } else if pending >= self.opts.pending_compaction_bytes_soft {
            WriteControl::Delay(StallCause::PendingCompactionSlowdown)
        } else {
            WriteControl::Proceed
        }
    }

    /// The bytes the flushes may still move into the RangeTabs before one
    /// of them finds no room and waits: each RangeTab's room (what its
    /// write buffer has left, and a whole buffer if its sibling is init)
    /// over its share of the last flush (even shares before the first),
    /// the least of these; plus the memtable budget less what the
    /// memtables hold (the mutable one counted as full): the user bytes
    /// writes may add before one stops. A merge frees a whole buffer at
    /// once; a memtable switch takes a memtable at once (the mutable one
    /// is counted full): the step is a memtable.
    fn headroom(&self, v: &Version, immutable_count: usize) -> Option<Headroom> {
        let rt = self.s.rt_view(v).ok()??;
        let cap = rt.layout.capacity_bytes;
        let n = rt.layout.count;
        let shares = self.s.shares.lock();
        let even = 1.0 / f64::from(n.max(1));
        // `full`: the same measure with every buffer empty, under the same
        // shares — the capacity the pacer scales its reserve by. With even
        // shares it is every buffer of every RangeTab; when the last flush
        // went to one RangeTab (sequential keys), that RangeTab's two
        // buffers. (A capacity of the whole tier there put the reserve at
        // 10% of all buffers, far above what one RangeTab can hold: the
        // pacer braked to its floor on every `fillseq`.)
        let (mut free, mut full) = (f64::INFINITY, f64::INFINITY);
        for r in 0..n {
            let share = match shares.get(r as usize) {
                Some(&x) if shares.len() == n as usize => x,
                _ => even,
            };
            if share <= 0.0 {
                continue;
            }
            let room: u64 = rt
                .pair(r)
                .into_iter()
                .map(|b| match b.rec.state {
                    State::Write => cap.saturating_sub(b.used()),
                    State::Init => cap,
                    State::Sealed => 0,
                })
                .sum();
            free = free.min(room as f64 / share);
            full = full.min((2 * cap) as f64 / share);
        }
        let mem = self.opts.memtable_size_bytes as u64;
        let all = 2 * u64::from(n) * cap;
        let (free, full) = if free.is_finite() {
            (free as u64, (full as u64).min(all))
        } else {
            (all, all)
        };
        // Writes stop once the RangeTabs are out of room and the
        // memtables full: the room, plus the memtable budget, less what
        // the memtables hold (the mutable one counted as full).
        let spare = (self.opts.memtable_count_max as u64).saturating_sub(1) * mem;
        Some(Headroom {
            free_bytes: (free + spare).saturating_sub(immutable_count as u64 * mem),
            capacity_bytes: full + spare,
            step_bytes: mem,
        })
    }

    fn write_control_epoch(&self) -> u64 {
        let ext = crate::wal::pm::extent_len_for_region(self.s.region.len());
        self.s.pm.allocator().free_pages() / (ext / PAGE_SIZE_BYTES).max(1)
    }

    fn flush_blocked(&self, v: &Version) -> Option<StallCause> {
        let rt = self.s.rt_view(v).ok()??;
        picker::any_blocked(&rt).then_some(StallCause::PmFull)
    }

    fn install(&self, ctx: &Arc<TableContext>) {
        let _ = self.s.ctx.set(Arc::downgrade(ctx));
        let readers = Arc::clone(&self.s.readers);
        let _ = ctx.pm_opener.set(Box::new(move |meta: &TableMeta| {
            let t: Arc<dyn crate::iter::TableReader> = readers.get(meta)?;
            Ok(t)
        }));
        let s = Arc::clone(&self.s);
        let _ = ctx
            .level_view
            .set(Box::new(move |v: &Version, level: usize| {
                if level != 0 {
                    return None;
                }
                let layout = s.layout_of(v).ok()??;
                s.observe(v, &layout);
                if v.levels[0].is_empty() {
                    return None;
                }
                let view: Arc<dyn crate::iter::TableReader> = Arc::new(L0View::new(
                    layout,
                    v.levels[0].clone(),
                    Arc::clone(&s.readers),
                ));
                Some(view)
            }));
    }

    fn recover(&self, env: &JobEnv) -> Result<Vec<VersionEdit>> {
        let v = &env.version;
        match self.s.layout_of(v)? {
            None => {
                // No layout yet: a new database, or an SSD-only one being
                // upgraded (its SSTs below L0, `db/identity.rs`); L0 or PM
                // tables without a layout are another design's.
                let foreign = !v.levels[0].is_empty()
                    || v.levels
                        .iter()
                        .flatten()
                        .any(|t| t.meta.tier != crate::stats::Tier::Ssd);
                if foreign {
                    return Err(Error::InvalidOptions(
                        "design `rangetab` cannot open a database another design created \
                         (it has tables in L0 or in PM but no RangeTab layout)"
                            .into(),
                    ));
                }
                Ok(vec![self.create()?])
            }
            Some(layout) => {
                self.check_and_repair(v, layout)?;
                Ok(Vec::new())
            }
        }
    }

    fn live_pm_runs(&self, versions: &[Arc<Version>], logs: &[PmWal]) -> Result<Vec<PageRun>> {
        let _ = logs;
        self.retained_pm_runs(versions)
    }

    /// The buffers: allocated once, listed by every table appended to
    /// them, reused after a merge.
    fn retained_pm_runs(&self, versions: &[Arc<Version>]) -> Result<Vec<PageRun>> {
        let mut out = Vec::new();
        for v in versions {
            if let Some(l) = self.s.layout_of(v)? {
                out.extend(l.runs());
            }
        }
        Ok(out)
    }

    fn release(&self, meta: &TableMeta) -> Result<Vec<PageRun>> {
        let _ = meta;
        // A buffer may have become reusable: wake a waiting flush.
        self.s.latest_cv.notify_all();
        Ok(Vec::new())
    }

    fn debt(&self, v: &Version) -> u64 {
        let sealed = self.s.rt_view(v).ok().flatten().map_or(0, |rt| {
            rt.bufs
                .iter()
                .filter(|b| b.rec.state == State::Sealed)
                .count() as u64
        });
        sealed
            + (leveled::pending_compaction_bytes(v, 0, |l| self.leveled.level_target_bytes(l))
                >> 20)
    }

    /// L0 is the RangeTabs, bounded by construction at two buffers each:
    /// its target is one buffer per RangeTab (the write buffers; a sealed
    /// buffer waiting for its merge is debt), unknown (0, not judged)
    /// until the layout exists. L1 and below as the picker's leveled
    /// compactions work to them (`l1_size_bytes`, × the multiplier).
    fn level_targets(&self, v: &Version) -> Option<crate::design::LevelTargets> {
        let l0 = self.s.rt_view(v).ok().flatten().map_or(0, |rt| {
            u64::from(rt.layout.count) * rt.layout.capacity_bytes
        });
        Some(leveled::level_targets(v, None, l0, |l| {
            self.leveled.level_target_bytes(l)
        }))
    }

    fn stats(&self, versions: &[Arc<Version>]) -> Vec<(String, String)> {
        let _ = versions;
        let c = &self.s.counters;
        let (count, cap) = self.s.latest.lock().as_ref().map_or((0, 0), |l| {
            (u64::from(l.layout.count), l.layout.capacity_bytes)
        });
        vec![
            ("rangetab.count", count),
            ("rangetab.capacity_bytes", cap),
            (
                "rangetab.hash_index_bytes",
                self.s.readers.index_bytes.load(Ordering::Relaxed),
            ),
            ("rangetab.chunks_appended", c.chunks.load(Ordering::Relaxed)),
            ("rangetab.seals", c.seals.load(Ordering::Relaxed)),
            ("rangetab.spills", c.spills.load(Ordering::Relaxed)),
            (
                "rangetab.flush_waits",
                c.flush_waits.load(Ordering::Relaxed),
            ),
            (
                "rangetab.flush_wait_us",
                c.flush_wait_us.load(Ordering::Relaxed),
            ),
            (
                "rangetab.exclusive_flushes",
                c.exclusive_flushes.load(Ordering::Relaxed),
            ),
            (
                "rangetab.stale_tasks",
                c.stale_tasks.load(Ordering::Relaxed),
            ),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
    }
}
