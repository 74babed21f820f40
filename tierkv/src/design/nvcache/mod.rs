//! `nvcache`: NV-Cache (seed 001) — the upper LSM levels in PM as NVTables
//! that are their own log, list compaction by relinking, LRU eviction to
//! SSD.
//!
//! # The design, mechanism by mechanism
//!
//! * **Split LSM (§III-A)**: levels `L0..=LK` are NVTables in PM, levels
//!   below are SSTs on SSD ([`picker`]). K and the PM budget are options
//!   (`nvcache_pm_levels`, `nvcache_cache_bytes`; defaults below).
//! * **NVTable (§III-B)**: an unsorted, doubly linked KV list of
//!   persistent nodes in *segments* (runs of pages) plus a sorted offset
//!   array ([`format`], [`table`]).
//! * **WAL-free write path (§III-D ①)**: the NVTable of the mutable
//!   memtable *is* the log: the engine appends each committed group to it
//!   ([`log`], through [`Design::log`]) before the memtable insert,
//!   persisted before the write is acknowledged — nodes pre-linked, one
//!   persist of the group's nodes, one 8-byte publish. Batches are atomic
//!   (a group is published with one store).
//! * **Lightweight flush (§III-D ③)**: iterates the immutable memtable and
//!   writes only the offset array (seqno → node offset is kept in DRAM as
//!   nodes are appended); no key or value is written again.
//! * **Recovery (§III-G)**: the recovery hook adopts every log the
//!   MANIFEST still lists (one per memtable not flushed): it walks the
//!   list, checks every node, builds the array and adds the table to L0 —
//!   there is no log replay. A log sealed when its writer was retired
//!   (a memtable switch, a clean close) must hold exactly its sealed node
//!   count; after a crash only the current log's group in flight may be
//!   missing (`log.rs`, "Recovery").
//! * **List compaction (§III-E)** ([`compact`]): merge the offset arrays,
//!   deduplicate, relink, write new arrays; no data is copied.
//! * **LRU eviction (§III-F)**: the victim of a level is its LRU tail
//!   (the least recently created table); from the lowest cached level it
//!   is merged into the SSD levels as SSTs (the shared merge job).
//! * **Lock-free readers, safe reclamation (§III-C)**: readers of a
//!   completed NVTable use only its offset array; the engine's version
//!   reference counts (`Arc<Version>`, `Arc<TableHandle>`, and the page-run
//!   counts of `TableContext::pm_run_refs` for segments several tables
//!   list) replace the paper's T_c/T_l/T_p timestamps: a table's array
//!   and the segments no other live table lists are freed only when no
//!   version, iterator or job references it. The MANIFEST is the
//!   persistent bottom level of the paper's table index; each version's
//!   sorted table vector is its rebuilt upper levels.
//!
//! # Readings of the paper (faithful / sound), and what selects them
//!
//! * **Relinking** (`nvcache_relink`): `Links` (faithful, the default)
//!   rewrites the `next`/`prev` words of every node a list compaction
//!   moves, 16 bytes and a persist per node, reported as PM relinked
//!   bytes. (The paper's "32 × (N − 1) bytes" best case concatenates the
//!   input lists unsorted; with outputs cut by key range each output's
//!   list is built in key order instead.) Nothing ever reads the links of
//!   a completed table, so `ArrayOnly` (sound and leaner) writes only the
//!   arrays.
//! * **Appends** (`nvcache_append`): `Group` (sound, the default) persists
//!   a whole group and publishes it with one store; `PerEntry` is the
//!   paper's transaction per insert: every node persisted and published on
//!   its own (recovery drops an incomplete trailing group: every node
//!   records its group's size).
//! * **Outputs** (`nvcache_table_bytes`): cut at the SST size (sound: a
//!   table stays a unit of eviction), or `u64::MAX` for the paper's single
//!   unbounded output per compaction.
//! * **Victims**: §III-E picks the victim at random, §III-F takes the LRU
//!   tail; a random L0 victim would break newest-first reads. We take the
//!   LRU tail everywhere — in L0 that is the oldest table, the only one
//!   that may leave L0 — and evict (free PM) only from the lowest cached
//!   level, whose score is the cache's occupancy; a cache overflow with an
//!   empty lowest level moves the deepest upper level's LRU tail down.
//! * **Flush**: §III-A calls it synchronous, §III-D runs it in the
//!   background: it runs on the engine's flush thread.
//! * **Reclamation** (`nvcache_copy_out_percent`, ours): PM is freed per
//!   segment, and a segment goes only when no table lists it; after
//!   deduplication and eviction a few live nodes can pin many segments
//!   (worst under skewed updates). A list compaction copies the
//!   survivors of segments under 50% live into fresh segments (0 turns it
//!   off: the paper's behaviour). The cache is measured in *allocated*
//!   bytes, so pinned segments count.
//! * **Timestamps**: not built (the engine's reference counts, above).
//!
//! # Options and defaults (ours: the paper gives none)
//!
//! * segments: `memtable_size_bytes` / 16, between 16 KiB and 1 MiB;
//! * the cache: the PM tier's data pages minus `memtable_count_max` logs
//!   and their arrays, minus the write path's reserve (one group, two
//!   segments, the next log's first segment) and a compaction reserve
//!   (1/32 of PM, at least 1 MiB);
//! * K: the deepest level whose cumulative target (L0: the trigger ×
//!   the memtable size; Ln: `l1_size_bytes` × multiplier^(n−1)) fits the
//!   cache, leaving at least one SSD level; 0 (L0 alone in PM) when not
//!   even L0 and L1 fit. The lowest cached level has no size target: it
//!   holds whatever the cache has room for. (Until 2026-11-28 K was at
//!   least 1. Where L1's target does not fit — `medium`: a 251 MB cache,
//!   64 MiB memtables, L0 trigger 4, L1 256 MiB — L1 in PM only passed
//!   each flushed table, spanning the whole key space, to an eviction
//!   that merged it with *all* of the SSD level below: 61 evictions wrote
//!   90 GB for 4.3 GB of user data, SSD write-amp 21.8, 12.9 K ops/s.)
//! * the L0 trigger is `l0_compaction_trigger`; writes stop (a `PmFull`
//!   stall) only when PM has less free than the write path's reserve plus
//!   the arrays of the memtables waiting to be flushed.
//! * `regions` > 1 is refused (one NVTable per memtable), so is
//!   `wal = Ssd` (there is no WAL).
//!
//! # Persist points (crash tests: tests/nvcache_crash.rs)
//!
//! | operation | persists, in order |
//! |---|---|
//! | new log | its first segment's header; then the MANIFEST lists it |
//! | append (group) | [new segment header, chain link]…, the nodes (one per segment touched), the publish |
//! | append (per entry) | per node: the node, its publish |
//! | log retired (memtable switch, clean close) | its seal (its node count, `log.rs` "Sealing") |
//! | flush | the offset array; then the MANIFEST edit |
//! | list compaction | arena copies, each node's links (`Links`), each output array; then the edit |
//! | eviction | SSTs synced; then the edit |
//! | release | the allocator's bitmap words (after the edit, last reference gone) |
//!
//! Recovery after any of them: the MANIFEST says which tables and logs
//! exist; pages nobody lists (a segment allocated and not linked, a
//! header whose log was never recorded, arrays and arenas of an
//! unfinished flush or compaction) go back at open.
//!
//! # Concurrency
//!
//! The write leader owns the current log's writer; flushes run one at a
//! time and take the log of the memtable they flush from [`log::Logs`];
//! compactions own their input tables (the engine's busy set) and write
//! only fresh pages and their inputs' link words; readers read arrays and
//! node bodies, which nothing writes while a version lists them.
//! [`TableCache`] is behind a mutex.

pub mod compact;
pub mod format;
pub mod inspect;
pub mod log;
pub mod picker;
pub mod salvage;
pub mod table;

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use self::compact::{run_list, ListConfig};
use self::format::Usage;
use self::log::{Logs, Space, PM_WAIT_LIMIT};
use self::picker::{ListPlan, Shape, EVICT, LIST};
use self::table::{entry_size, NvTable, TableBuild};
use crate::design::leveled::{self, run_merge};
use crate::design::{
    Design, DesignLog, Headroom, JobEnv, JobOutput, PickContext, Task, TaskKind, WriteControl,
    Written,
};
use crate::error::{Error, Result};
use crate::iter::{InternalIterator, TableReader};
use crate::key;
use crate::memtable::MemTable;
use crate::options::{NvAppend, NvRelink, Options, Preset};
use crate::stats::StallCause;
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};
use crate::storage::pm::PmTier;
use crate::storage::PmRegion;
use crate::version::edit::{PmWal, TableMeta, VersionEdit};
use crate::version::{TableContext, Version};
use crate::wal::LogWriter;

const PAGE: u64 = PAGE_SIZE_BYTES;

/// A table's reader (while someone holds it) and its segment usage.
type CacheEntry = (Weak<NvTable>, Option<Arc<[Usage]>>);

/// The NVTables opened so far, and their segment usage (immutable, so
/// cached until the table is released).
pub struct TableCache {
    region: Arc<dyn PmRegion>,
    verify: bool,
    map: Mutex<HashMap<u64, CacheEntry>>,
}

impl TableCache {
    /// A cache over `region`.
    pub fn new(region: Arc<dyn PmRegion>, verify: bool) -> TableCache {
        TableCache {
            region,
            verify,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The reader of `meta`, opened (and checked) on first use.
    pub fn open(&self, meta: &TableMeta) -> Result<Arc<NvTable>> {
        if let Some(t) = self.map.lock().get(&meta.id).and_then(|e| e.0.upgrade()) {
            return Ok(t);
        }
        let t = Arc::new(NvTable::open(Arc::clone(&self.region), meta, self.verify)?);
        let usage: Arc<[Usage]> = t.usage().into();
        self.map
            .lock()
            .insert(meta.id, (Arc::downgrade(&t), Some(usage)));
        Ok(t)
    }

    /// The segment usage of `meta`.
    pub fn usage(&self, meta: &TableMeta) -> Result<Arc<[Usage]>> {
        if let Some(u) = self.map.lock().get(&meta.id).and_then(|e| e.1.clone()) {
            return Ok(u);
        }
        let t = self.open(meta)?;
        Ok(t.usage().into())
    }

    /// DRAM the open tables' search indexes and filters take
    /// (`nvcache.dram_index_bytes` in `tierkv.design-stats`).
    pub fn dram_index_bytes(&self) -> u64 {
        self.map
            .lock()
            .values()
            .filter_map(|e| e.0.upgrade())
            .map(|t| t.dram_index_bytes())
            .sum()
    }

    /// Forgets a released table.
    pub fn forget(&self, id: u64) {
        self.map.lock().remove(&id);
    }
}

/// How much free PM the write path keeps (module doc, "Options").
#[derive(Debug, Clone, Copy)]
struct Reserve {
    /// One group, two segments, the next log's first segment and the
    /// compaction reserve: writes stop below this.
    write_bytes: u64,
    /// The array of one flushed memtable, at most.
    array_bytes: u64,
}

/// The NV-Cache design.
pub struct NvCache {
    shape: Shape,
    space: Arc<Space>,
    logs: Logs,
    tables: Arc<TableCache>,
    list: ListConfig,
    per_entry: bool,
    reserve: Reserve,
    sst_bytes: u64,
}

/// Builds NV-Cache on `pm`, sized by `opts`; refuses sizes that do not fit,
/// naming the option.
pub fn nvcache(opts: &Options, pm: Arc<PmTier>) -> Result<NvCache> {
    NvCache::new(opts, pm)
}

impl NvCache {
    /// The design on `pm`, sized by `opts` (module doc, "Options").
    pub fn new(opts: &Options, pm: Arc<PmTier>) -> Result<NvCache> {
        let alloc = pm.allocator();
        let capacity = (alloc.total_pages() - alloc.data_start_page()) * PAGE;
        let memtable = opts.memtable_size_bytes as u64;
        let segment_bytes = if opts.nvcache_segment_bytes > 0 {
            opts.nvcache_segment_bytes
        } else {
            (memtable / 16).clamp(16 << 10, 1 << 20) / PAGE * PAGE
        };
        let group = memtable.clamp(256 << 10, 4 << 20) + 2 * segment_bytes;
        let compaction = (capacity / 32).max(1 << 20);
        let array_bytes = memtable / 12 + PAGE;
        let write_bytes = group + segment_bytes + compaction;
        let logs = opts.memtable_count_max as u64 * (memtable + segment_bytes + array_bytes);
        let cache_bytes = if opts.nvcache_cache_bytes > 0 {
            if opts.nvcache_cache_bytes > capacity {
                return Err(Error::InvalidOptions(format!(
                    "`nvcache_cache_bytes` = {} exceeds the PM tier's {capacity} bytes of data pages (`pm_size_bytes`)",
                    opts.nvcache_cache_bytes
                )));
            }
            if opts.nvcache_cache_bytes < 2 * segment_bytes {
                return Err(Error::InvalidOptions(format!(
                    "`nvcache_cache_bytes` = {} must hold at least two segments of {segment_bytes} bytes",
                    opts.nvcache_cache_bytes
                )));
            }
            opts.nvcache_cache_bytes
        } else {
            capacity.saturating_sub(logs + write_bytes)
        };
        if cache_bytes < 2 * segment_bytes || capacity < logs + write_bytes {
            return Err(Error::InvalidOptions(format!(
                "`pm_size_bytes` = {} is too small for design `nvcache`: its {capacity} bytes of data pages \
                 must hold {} memtable logs ({logs} bytes), the write path's reserve ({write_bytes} bytes) and a cache \
                 (set a larger `pm_size_bytes` or a smaller `memtable_size_bytes`)",
                pm.region().len(),
                opts.memtable_count_max
            )));
        }
        let target =
            |l: usize| leveled::geometric_target(opts.l1_size_bytes, opts.level_size_multiplier, l);
        let lowest_pm = if opts.nvcache_pm_levels > 0 {
            opts.nvcache_pm_levels - 1
        } else {
            let mut cum = opts.l0_compaction_trigger as u64 * memtable;
            let mut k = 0;
            for l in 1..opts.level_count.saturating_sub(1) {
                cum = cum.saturating_add(target(l));
                if cum > cache_bytes {
                    break;
                }
                k = l;
            }
            k.min(opts.level_count.saturating_sub(2))
        };
        let table_bytes = match opts.nvcache_table_bytes {
            0 => opts.sst_size_bytes,
            n => n,
        };
        let region = Arc::clone(pm.region());
        Ok(NvCache {
            shape: Shape {
                level_count: opts.level_count,
                lowest_pm,
                l0_trigger: opts.l0_compaction_trigger,
                l1_bytes: opts.l1_size_bytes,
                multiplier: opts.level_size_multiplier,
                sst_bytes: opts.sst_size_bytes,
                cache_bytes,
                write_reserve_bytes: write_bytes,
            },
            space: Arc::new(Space {
                region: Arc::clone(&region),
                tier: pm,
                segment_pages: segment_bytes / PAGE,
            }),
            logs: Logs::default(),
            tables: Arc::new(TableCache::new(region, opts.verify_checksums)),
            list: ListConfig {
                table_bytes,
                relink: opts.nvcache_relink == NvRelink::Links,
                copy_out_percent: opts.nvcache_copy_out_percent,
            },
            per_entry: opts.nvcache_append == NvAppend::PerEntry,
            reserve: Reserve {
                write_bytes,
                array_bytes,
            },
            sst_bytes: opts.sst_size_bytes,
        })
    }

    /// The shape the picker uses.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Bytes of a segment.
    pub fn segment_bytes(&self) -> u64 {
        self.space.segment_pages * PAGE
    }

    /// The readers and usage of the NVTables.
    pub fn tables(&self) -> &Arc<TableCache> {
        &self.tables
    }

    fn free_bytes(&self) -> u64 {
        self.space.tier.allocator().free_pages() * PAGE
    }

    /// Builds the NVTable of the nodes of log `number` found by a walk.
    fn adopt(&self, env: &JobEnv, number: u64, locator: u64) -> Result<Option<TableMeta>> {
        let region = self.space.region.as_ref();
        let (segs, mut nodes) = log::walk(region, locator, number)?;
        if nodes.is_empty() {
            return Ok(None);
        }
        nodes.sort_by(|a, b| key::compare_internal(&a.ikey, &b.ikey));
        let mut sorted = segs.clone();
        sorted.sort_unstable();
        let mut build = TableBuild::with_capacity(nodes.len());
        for s in &sorted {
            build.include(*s);
        }
        for n in &nodes {
            let seg = segment_of(&sorted, n.at).ok_or_else(|| {
                Error::corruption(region.name(), n.at, "NVTable log node outside its segments")
            })?;
            build.push(
                n.at,
                n.size,
                seg,
                key::user_key(&n.ikey),
                key::trailer(&n.ikey),
            );
        }
        let id = env.versions.new_file_number();
        let built = build
            .finish(&self.space, id, PM_WAIT_LIMIT)?
            .ok_or_else(|| log::pm_full(region, "the offset array of a recovered NVTable", 1))?;
        Ok(Some(built.meta))
    }
}

/// The segment of `sorted` (by first page) holding `at`.
fn segment_of(sorted: &[PageRun], at: u64) -> Option<PageRun> {
    let i = sorted.partition_point(|r| (r.first + r.count) * PAGE <= at);
    sorted.get(i).copied().filter(|r| r.first * PAGE <= at)
}

impl DesignLog for NvCache {
    fn create(&self, number: u64) -> Result<(Box<dyn LogWriter>, u64)> {
        let (w, at) = log::create(&self.space, &self.logs, number, self.per_entry)?;
        Ok((Box::new(w), at))
    }
}

impl Design for NvCache {
    fn preset(&self) -> Preset {
        Preset::NvCache
    }

    /// The lightweight flush: the memtable's order, as an offset array over
    /// the nodes its log already holds.
    fn flush(&self, env: &JobEnv, mem: &Arc<MemTable>) -> Result<JobOutput> {
        let number = mem.log_number();
        let shared = self.logs.get(number).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "NV-Cache flush: the log {number} of the memtable is not an open NVTable"
            ))
        })?;
        let mut build = TableBuild::with_capacity(mem.entries() as usize);
        {
            let st = shared.state.lock();
            let mut segs = st.segments.clone();
            segs.sort_unstable();
            for s in &segs {
                build.include(*s);
            }
            let mut it = mem.iter();
            it.seek_to_first();
            while it.valid() {
                let ikey = it.key();
                let p = key::parse_internal_key(ikey)
                    .ok_or_else(|| Error::corruption("memtable", 0, "malformed internal key"))?;
                let at = p
                    .seq
                    .checked_sub(st.first_seq)
                    .and_then(|i| st.offsets.get(i as usize))
                    .copied()
                    .filter(|&a| a != 0)
                    .ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "NV-Cache flush: seqno {} has no node in log {number}",
                            p.seq
                        ))
                    })?;
                let seg = segment_of(&segs, at).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "NV-Cache flush: node {at} outside the segments of log {number}"
                    ))
                })?;
                build.push(
                    at,
                    entry_size(p.user_key, it.value()),
                    seg,
                    p.user_key,
                    key::trailer(ikey),
                );
                it.next();
            }
        }
        if build.is_empty() {
            // Nothing to keep: the log's segments go back at the next open.
            self.logs.remove(number);
            return Ok(JobOutput::default());
        }
        let id = env.versions.new_file_number();
        let built = build
            .finish(&self.space, id, PM_WAIT_LIMIT)?
            .ok_or_else(|| {
                log::pm_full(
                    self.space.region.as_ref(),
                    "the offset array of a flushed NVTable",
                    1,
                )
            })?;
        self.logs.remove(number);
        let mut edit = VersionEdit::default();
        edit.new_tables.push((0, built.meta));
        Ok(JobOutput {
            edit,
            written: Written {
                pm_copied: built.array_bytes,
                ..Written::default()
            },
        })
    }

    fn pick(&self, v: &Version, cx: &PickContext) -> Option<Task> {
        self.shape.pick(v, cx)
    }

    fn pick_manual(
        &self,
        v: &Version,
        cx: &PickContext,
        level: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Option<Task> {
        self.shape.pick_manual(v, cx, level, lo, hi)
    }

    fn run(&self, env: &JobEnv, task: &Task) -> Result<JobOutput> {
        if task.kind == LIST {
            let budget = task.plan::<ListPlan>().map_or(0, |p| p.copy_budget_bytes);
            return run_list(&self.space, &self.tables, &self.list, env, task, budget);
        }
        // Trivial moves (PM or SSD), evictions into SSTs, SSD compactions.
        debug_assert!(
            task.kind == EVICT
                || task.kind == TaskKind::TRIVIAL_MOVE
                || !self.shape.in_pm(task.output_level)
        );
        run_merge(env, task, self.sst_bytes)
    }

    fn write_control(&self, v: &Version, immutable_count: usize) -> WriteControl {
        let _ = v;
        let need = self.reserve.write_bytes + immutable_count as u64 * self.reserve.array_bytes;
        if self.free_bytes() < need {
            WriteControl::Stop(StallCause::PmFull)
        } else {
            WriteControl::Proceed
        }
    }

    /// The free PM above what [`Design::write_control`] keeps back, in
    /// user bytes (a write's node takes its bytes of PM once: the log is
    /// the table). Evictions and list compactions free PM in bursts; a
    /// memtable switch takes a log segment and a flush an offset array at
    /// once: the step is the larger.
    fn headroom(&self, _v: &Version, immutable_count: usize) -> Option<Headroom> {
        let need = self.reserve.write_bytes + immutable_count as u64 * self.reserve.array_bytes;
        let alloc = self.space.tier.allocator();
        let capacity = (alloc.total_pages() - alloc.data_start_page()) * PAGE;
        Some(Headroom {
            free_bytes: self.free_bytes().saturating_sub(need),
            capacity_bytes: capacity.saturating_sub(self.reserve.write_bytes),
            step_bytes: self
                .reserve
                .array_bytes
                .max(self.space.segment_pages * PAGE),
        })
    }

    fn write_control_epoch(&self) -> u64 {
        let step = (self.space.segment_pages / 4).max(1);
        self.space.tier.allocator().free_pages() / step
    }

    fn install(&self, ctx: &Arc<TableContext>) {
        let tables = Arc::clone(&self.tables);
        let _ = ctx.pm_opener.set(Box::new(move |meta| {
            let t: Arc<dyn TableReader> = tables.open(meta)?;
            Ok(t)
        }));
    }

    /// Adopts every log a crash (or a close) left: each becomes an L0
    /// NVTable, in one edit that also retires the logs.
    fn recover(&self, env: &JobEnv) -> Result<Vec<VersionEdit>> {
        let mut logs = env.versions.pm_wals();
        if logs.is_empty() {
            return Ok(Vec::new());
        }
        logs.sort_by_key(|w| w.log_number);
        let mut edit = VersionEdit::default();
        for w in &logs {
            if let Some(meta) = self.adopt(env, w.log_number, w.first_extent)? {
                edit.new_tables.push((0, meta));
            }
            edit.deleted_pm_wals.push(w.log_number);
        }
        Ok(vec![edit])
    }

    fn live_pm_runs(&self, versions: &[Arc<Version>], logs: &[PmWal]) -> Result<Vec<PageRun>> {
        let _ = versions;
        let mut runs = Vec::new();
        for w in logs {
            let (segs, _) =
                log::walk_segments(self.space.region.as_ref(), w.first_extent, w.log_number)?;
            runs.extend(segs);
        }
        Ok(runs)
    }

    fn release(&self, meta: &TableMeta) -> Result<Vec<PageRun>> {
        self.tables.forget(meta.id);
        Ok(Vec::new())
    }

    fn log(&self) -> Option<&dyn DesignLog> {
        Some(self)
    }

    fn debt(&self, v: &Version) -> u64 {
        self.shape.debt(v)
    }

    /// The cache's occupancy: allocated PM (every page run the cached
    /// tables list, shared segments once) against live bytes (their nodes
    /// and arrays), in all and per PM level, and the shape it runs with.
    fn stats(&self, versions: &[Arc<Version>]) -> Vec<(String, String)> {
        let sh = &self.shape;
        let mut out = vec![
            (
                "nvcache.lowest_pm_level".to_string(),
                sh.lowest_pm.to_string(),
            ),
            (
                "nvcache.cache_budget_bytes".to_string(),
                sh.cache_bytes.to_string(),
            ),
            (
                "nvcache.segment_bytes".to_string(),
                self.segment_bytes().to_string(),
            ),
            (
                "nvcache.relink".to_string(),
                if self.list.relink {
                    "links"
                } else {
                    "array-only"
                }
                .to_string(),
            ),
            (
                "nvcache.copy_out_percent".to_string(),
                self.list.copy_out_percent.to_string(),
            ),
        ];
        let (mut alloc, mut live) = (0, 0);
        for v in versions {
            let (a, l) = sh.cache_usage(v);
            alloc += a;
            live += l;
        }
        out.push(("nvcache.cache_allocated_bytes".into(), alloc.to_string()));
        out.push(("nvcache.cache_live_bytes".into(), live.to_string()));
        for level in 0..=sh.lowest_pm {
            let tables = || versions.iter().flat_map(|v| v.levels[level].iter());
            let segs: std::collections::HashSet<u64> = tables()
                .flat_map(|t| t.meta.pm_pages.iter().skip(1).map(|r| r.first))
                .collect();
            out.push((
                format!("nvcache.L{level}.tables"),
                tables().count().to_string(),
            ));
            out.push((
                format!("nvcache.L{level}.live_bytes"),
                tables().map(|t| t.meta.size_bytes).sum::<u64>().to_string(),
            ));
            out.push((format!("nvcache.L{level}.segments"), segs.len().to_string()));
        }
        out.push((
            "nvcache.dram_index_bytes".into(),
            self.tables.dram_index_bytes().to_string(),
        ));
        out
    }
}
