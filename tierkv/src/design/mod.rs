//! The design seam (DESIGN.md §2): a design is a flush target, a picker, a
//! job runner and a write controller, plus the PM it owns. The engine
//! (`db/`) knows only this trait; each preset lives in its own module or
//! folder, and shares what it can with the others ([`leveled`] for the
//! RocksDB-style SSD levels, [`container`] for the PM containers of
//! `triangle` and `matrix`; [`rangetab`] is RangeKV's folder).
//!
//! # The hooks and their contracts
//!
//! Every hook but [`Design::flush`], [`Design::pick`], [`Design::run`],
//! [`Design::write_control`] and [`Design::debt`] has a default that does
//! nothing, so a design implements only what it needs.
//!
//! * **[`Design::flush`]** turns an immutable memtable into tables and
//!   returns a [`JobOutput`]: the edit adding them (the engine sets the
//!   region, the log number and the WAL deletions, then applies it) and
//!   the bytes the flush wrote per tier and kind ([`Written`]). The engine
//!   never derives written bytes from table sizes: a PM table that grows by
//!   appends, an offset array built over nodes already in PM, or a
//!   pointer-only compaction would all be misreported.
//! * **[`Design::pick`]** is **pure**: a function of an immutable
//!   [`Version`] and a [`PickContext`] (the busy set, the memtable backlog,
//!   the running jobs, PM free space and the admitted write rate — load
//!   figures the engine measures, so a "low load" trigger stays pure).
//!   Pickers are tested with golden LSM shapes (tierkv/testdata/) and can
//!   be replayed without I/O. A task carries a design-defined
//!   [`TaskKind`] (a name, not an enum of the seam) and may carry a
//!   design-defined plan ([`Task::plan`]) from the picker to the job.
//! * **[`Design::run`]** executes a task and returns its [`JobOutput`].
//! * **[`Design::write_control`]** says whether writes proceed, are
//!   delayed or stop, given the version and the memtable backlog;
//!   **[`Design::headroom`]** says how much room is left before it stops
//!   them, so the engine's pacing controller (db/control.rs) can slow
//!   writers to the drain rate before the stop instead of after.
//! * **[`Design::install`]** registers, before recovery reads any table,
//!   how the design's PM tables are opened and read (`TableContext`).
//! * **[`Design::recover`]**, the recovery hook: called once at open, in
//!   this order: the MANIFEST is read; the PM allocator is reconciled with
//!   it (every page no table, engine PM WAL or [`Design::live_pm_runs`]
//!   names is freed, so the hook may allocate: pages a crash leaked are
//!   free again); the hook runs; the engine applies its edits, in order,
//!   before anything else changes, reconciles the allocator again (what
//!   the edits retired goes back) and raises its last seqno to cover every
//!   table the edits added (an adopted log holds seqnos no MANIFEST record
//!   saw); then logs are replayed. The design may inspect its PM
//!   structures and return edits (a resumed compaction, an adopted log).
//!   Because the first reconcile comes before the hook, every page the
//!   hook reads or reuses — the slot run and started outputs of a job it
//!   resumes — must be declared by `live_pm_runs`: a page it does not
//!   declare is free, and the hook's own allocations may be handed it. It
//!   must be idempotent: a crash before its edits are durable repeats it.
//! * **[`Design::live_pm_runs`]**: PM the design owns beyond the page runs
//!   its tables list in `meta.pm_pages` (an arena being filled, buffers
//!   kept between merges, every run of an in-flight job the recovery hook
//!   will resume — its slot page, the outputs it started — the logs the
//!   MANIFEST lists for a design-owned log). The engine counts them live
//!   when it rebuilds the allocator at open (`PmTier::reconcile`); every
//!   page neither a table, an engine PM WAL nor this list names is freed.
//!   A run listed by several tables (or by a table and this list) counts
//!   once; runs that overlap without being equal are an error.
//!   It is an open-time hook: it may rebuild the design's own indexes
//!   (TLSM's buffer reference counts) and is never called while jobs run.
//! * **[`Design::retained_pm_runs`]**: runs the design keeps allocated
//!   itself although tables list them (RangeKV's buffers, re-listed under
//!   a new table id at every append): the engine never frees a retained
//!   run when the last table listing it is released, so the design reuses
//!   it; it learns when no live handle lists it any more from
//!   `TableContext::pm_run_refs`. Called at every release of PM tables:
//!   cheap, no PM reads, no side effects. The default: none.
//! * **[`Design::release`]**: told when a PM table no version references
//!   any more is released (after the edit removing it is durable and its
//!   last handle is gone). The engine frees the runs the handle was the
//!   last to list (`meta.pm_pages`, counted across handles by
//!   `TableContext::pm_run_refs`); the design returns further runs it can
//!   free now — shared runs it counts by reference itself, e.g. a buffer
//!   referenced by thousands of skip lists, too many to list per table.
//! * **[`Design::stats`]**: named figures the design measures beside the
//!   engine's (e.g. PM space amplification of shared buffers), given every
//!   region's current version; shown in `Stats::design` and under
//!   "** Design **" in `tierkv.stats`, and alone, one `name: value` a
//!   line, by `Db::property("tierkv.design-stats")`. It must be cheap (it runs at every
//!   `Db::stats`) and must not block on background work. The default: none.
//! * **WAL replay** calls [`Design::flush`] once per replayed memtable,
//!   each against the version the earlier replayed flushes made (chained
//!   in memory, never installed), and records the composed edits
//!   (`VersionEdit::compose`) in one manifest record: a flush may re-list
//!   or delete tables and write design records in replay as at run time.
//!   No background job runs during replay.
//! * **[`Design::level_targets`]**, for measurement only: the target of
//!   each level as the picker scores it (so compaction debt is measured,
//!   not assumed). It changes nothing the engine does.
//! * **[`Design::log`]**, a design-owned log: `None` (the default) gives
//!   the engine's WAL (on PM when the PM tier holds it, else on SSD). A
//!   design whose flush target *is* the log (NV-Cache's NVTable) returns a
//!   [`DesignLog`]: the engine appends each committed group to it before
//!   the memtable insert, creates a new one at each memtable switch, and
//!   records each in the MANIFEST's list of logs in PM
//!   (`VersionEdit::new_pm_wals`, with the design's locator in
//!   `first_extent`) before its first record. A flush retires the logs
//!   below its bound from that list (`deleted_pm_wals`), exactly as for the
//!   engine's PM WAL — list updates are set operations the version set
//!   applies in order, so a switch racing a flush cannot lose a log. But
//!   the engine never walks, replays or frees a design's log: the design's
//!   `flush` adopts the log of the memtable it flushes
//!   (`MemTable::log_number`; e.g. its pages become the new table's
//!   `pm_pages`), its `recover` adopts the logs a crash left listed, and
//!   its `live_pm_runs` declares the pages of the listed logs.
//!
//! # Rules every design keeps
//!
//! 1. A table's metadata never changes under its id: a PM table that grows
//!    by appends or shrinks as it is consumed is re-listed under a new id
//!    (delete old, add new, in one edit). `Version::apply` refuses an edit
//!    that re-adds an id with other metadata, so an append racing a
//!    compaction that picked the old id fails loudly instead of losing
//!    the appended data.
//! 2. PM structures are written, persisted, and only then published by an
//!    edit; the only in-place updates of published PM are 8-byte link
//!    words through `PmRegion::store_u64` (the `PmRegion` contract).
//! 3. A table's PM pages are freed only by the engine, after the edit
//!    removing it is durable and no version, iterator or job holds it.

pub mod classic;
pub mod container;
pub mod inspect;
pub mod leveled;
pub mod matrix;
pub mod nvcache;
pub mod rangetab;
pub mod salvage;
pub mod tlsm;
pub mod triangle;
pub mod vlsm;

use std::any::Any;
use std::collections::HashSet;
use std::sync::Arc;

use crate::error::Result;
use crate::memtable::MemTable;
use crate::options::{Options, Preset};
pub use crate::stats::LevelTargets;
use crate::stats::StallCause;
use crate::storage::alloc::PageRun;
use crate::storage::pm::PmTier;
use crate::version::edit::{PmWal, TableMeta, VersionEdit};
use crate::version::{TableContext, TableHandle, Version};
use crate::wal::LogWriter;

pub use crate::compaction::JobEnv;

/// What a compaction task is, for stats and dispatch: a name a design
/// chooses (`l0-l1`, `right-angle`, `list-relink`, …). Designs define
/// their own as constants; the leveled kinds shared by every design are
/// here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaskKind(&'static str);

impl TaskKind {
    /// L0 → L1 (merge all overlapping L0 tables with the overlapped L1 tables).
    pub const L0_TO_L1: TaskKind = TaskKind("l0-l1");
    /// Ln → Ln+1 for n ≥ 1.
    pub const LEVELED: TaskKind = TaskKind("leveled");
    /// A table moved to the next level without rewriting (edit only).
    pub const TRIVIAL_MOVE: TaskKind = TaskKind("trivial-move");
    /// A compaction asked for by `compact_range`.
    pub const MANUAL: TaskKind = TaskKind("manual");

    /// A kind named `name`.
    pub const fn new(name: &'static str) -> TaskKind {
        TaskKind(name)
    }

    /// Name used in stats.
    pub fn name(self) -> &'static str {
        self.0
    }
}

/// A unit of background work chosen by a picker.
#[derive(Clone)]
pub struct Task {
    /// What kind of task.
    pub kind: TaskKind,
    /// Input tables per level, in level order.
    pub inputs: Vec<(usize, Vec<Arc<TableHandle>>)>,
    /// Level the output goes to.
    pub output_level: usize,
    /// Tables of `output_level + 1` overlapping the inputs (to cut outputs
    /// so that no output overlaps too much of the next level).
    pub grandparents: Vec<Arc<TableHandle>>,
    /// New round-robin cursor for the input level, if the picker keeps one.
    pub cursor: Option<(usize, Vec<u8>)>,
    /// What else the picker decided, for the job (e.g. the key range of a
    /// PM container side); the design that made the task downcasts it.
    pub plan: Option<Arc<dyn Any + Send + Sync>>,
}

impl Task {
    /// A task of `kind` over `inputs` into `output_level`, with no
    /// grandparents, cursor or plan.
    pub fn new(
        kind: TaskKind,
        inputs: Vec<(usize, Vec<Arc<TableHandle>>)>,
        output_level: usize,
    ) -> Task {
        Task {
            kind,
            inputs,
            output_level,
            grandparents: Vec::new(),
            cursor: None,
            plan: None,
        }
    }

    /// Every input table id.
    pub fn input_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.inputs
            .iter()
            .flat_map(|(_, ts)| ts.iter().map(|t| t.meta.id))
    }

    /// Input bytes per level.
    pub fn input_bytes(&self) -> Vec<(usize, u64)> {
        self.inputs
            .iter()
            .map(|(l, ts)| (*l, ts.iter().map(|t| t.meta.size_bytes).sum()))
            .collect()
    }

    /// The plan, if it is a `T`.
    pub fn plan<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.plan.as_deref().and_then(|p| p.downcast_ref::<T>())
    }
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("kind", &self.kind.name())
            .field("inputs", &self.inputs)
            .field("output_level", &self.output_level)
            .field("cursor", &self.cursor)
            .field("plan", &self.plan.is_some())
            .finish()
    }
}

/// Bytes a flush or a task wrote, per tier and kind. The engine adds them
/// to the stats under the job's cause (flush, or compaction into the
/// task's output level).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Bytes stored into PM that carry data: keys, values and their
    /// framing, table blocks, indexes, offset arrays, headers.
    pub pm_copied: u64,
    /// Bytes stored into PM by pointer-only work: link words and nodes
    /// that point at entries already in PM (no key or value byte copied).
    pub pm_relinked: u64,
    /// Bytes appended to SSD files (tables).
    pub ssd: u64,
}

impl Written {
    /// SSD bytes of some new SST tables.
    pub fn ssd_tables<'a>(metas: impl IntoIterator<Item = &'a TableMeta>) -> Written {
        Written {
            ssd: metas.into_iter().map(|m| m.size_bytes).sum(),
            ..Written::default()
        }
    }
}

impl std::ops::AddAssign for Written {
    fn add_assign(&mut self, o: Written) {
        self.pm_copied += o.pm_copied;
        self.pm_relinked += o.pm_relinked;
        self.ssd += o.ssd;
    }
}

/// What a flush or a task produced: the edit to apply and what it wrote.
#[derive(Debug, Default)]
pub struct JobOutput {
    /// The edit.
    pub edit: VersionEdit,
    /// Bytes written.
    pub written: Written,
}

impl JobOutput {
    /// An edit whose new SSD tables are all the job wrote.
    pub fn ssd(edit: VersionEdit) -> JobOutput {
        let written = Written::ssd_tables(edit.new_tables.iter().map(|(_, m)| m));
        JobOutput { edit, written }
    }
}

/// What a picker may look at besides the version: the engine's load, as
/// plain numbers, so that pickers stay pure functions.
#[derive(Debug, Clone, Copy)]
pub struct PickContext<'a> {
    /// Tables already being compacted (never hand one to two jobs).
    pub busy: &'a HashSet<u64>,
    /// Immutable memtables waiting to be flushed (all regions).
    pub immutable_memtables: usize,
    /// Background compactions running now.
    pub compactions_running: usize,
    /// A flush is running now.
    pub flush_running: bool,
    /// Free bytes in the PM tier's page allocator (`None`: no PM tier).
    pub pm_free_bytes: Option<u64>,
    /// Bytes of the PM tier's data pages (`None`: no PM tier).
    pub pm_capacity_bytes: Option<u64>,
    /// User bytes the write path admitted per second over the last second.
    pub write_bytes_per_sec: f64,
    /// The highest such one-second rate over the last minute.
    pub write_bytes_per_sec_peak: f64,
}

impl<'a> PickContext<'a> {
    /// A context with `busy` and no load (golden tests, manual picks).
    pub fn idle(busy: &'a HashSet<u64>) -> PickContext<'a> {
        PickContext {
            busy,
            immutable_memtables: 0,
            compactions_running: 0,
            flush_running: false,
            pm_free_bytes: None,
            pm_capacity_bytes: None,
            write_bytes_per_sec: 0.0,
            write_bytes_per_sec_peak: 0.0,
        }
    }
}

/// Room left before the design's write controller stops writes, for the
/// engine's pacing controller (db/control.rs): both in bytes of user data
/// (the design converts from its own resource: free PM, L0 files, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headroom {
    /// User bytes the write path may still admit, at the current version
    /// and memtable backlog, before `write_control` says `Stop`.
    pub free_bytes: u64,
    /// The same with the resource empty (a scale for the pacer's reserve).
    pub capacity_bytes: u64,
    /// The largest drop of `free_bytes` one event causes at once (a
    /// memtable switch or a flush taking a whole row or L0 file): the
    /// pacer keeps this much in reserve, so such a step never reaches the
    /// stop.
    pub step_bytes: u64,
}

/// The write controller's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteControl {
    /// Write at full speed.
    Proceed,
    /// Write, but at most at the delayed write rate.
    Delay(StallCause),
    /// Wait until background work changes the situation.
    Stop(StallCause),
}

/// A log owned by a design (see the module doc).
pub trait DesignLog: Send + Sync {
    /// Starts log `number` for a new memtable. Returns its writer and a
    /// locator (e.g. the PM offset of its header) that the engine records
    /// durably with the number (`PmWal { log_number, first_extent:
    /// locator }`) before the first record is appended.
    fn create(&self, number: u64) -> Result<(Box<dyn LogWriter>, u64)>;
}

/// A design preset plugged into the engine.
pub trait Design: Send + Sync {
    /// The preset.
    fn preset(&self) -> Preset;

    /// Writes an immutable memtable to its flush target; returns the edit
    /// adding the new tables (the caller sets the log number and applies
    /// it) and what the flush wrote.
    fn flush(&self, env: &JobEnv, mem: &Arc<MemTable>) -> Result<JobOutput>;

    /// Chooses the next background task, if any. Pure.
    fn pick(&self, v: &Version, cx: &PickContext) -> Option<Task>;

    /// A manual compaction of the user-key range `[lo, hi]` out of
    /// `level`. The default compacts the range leveled-style
    /// ([`leveled::pick_manual_range`]).
    fn pick_manual(
        &self,
        v: &Version,
        cx: &PickContext,
        level: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Option<Task> {
        leveled::pick_manual_range(v, cx.busy, level, lo, hi)
    }

    /// Called by the flush thread before a flush job takes its version: a
    /// design whose flush target has bounded room (a PM container) may
    /// wait here for it — no version is pinned yet, so compaction can
    /// free space. The default does nothing.
    fn prepare_flush(&self, mem: &Arc<MemTable>) -> Result<()> {
        let _ = mem;
        Ok(())
    }

    /// Called by the engine, under the lock its writers take to ask
    /// [`Design::write_control`], as it stops counting the memtable just
    /// flushed among the waiting ones (its output is built and holds its
    /// room): a design that subtracts from the waiting memtables' need
    /// what [`Design::prepare_flush`] set aside stops subtracting it here,
    /// in the same step. Done inside the flush instead, a writer between
    /// the two saw the row counted twice (its pages gone from free PM and
    /// the memtable still waiting) and stopped until the next
    /// notification. The default does nothing.
    fn flush_built(&self) {}

    /// Runs a task; returns the edit to apply and what the task wrote.
    fn run(&self, env: &JobEnv, task: &Task) -> Result<JobOutput>;

    /// Whether writes may proceed given the version and the number of
    /// immutable memtables waiting to be flushed: those whose flush has
    /// not yet built its output (once it has, the output holds its room
    /// while the flush's edit is made durable, and the memtable is not
    /// counted).
    fn write_control(&self, v: &Version, immutable_count: usize) -> WriteControl;

    /// Room left before [`Design::write_control`] stops writes (the pacing
    /// controller slows writers to the rate background work frees it as it
    /// runs low). `None` (the default): no bounded resource besides the
    /// memtables, which the engine watches itself.
    fn headroom(&self, v: &Version, immutable_count: usize) -> Option<Headroom> {
        let _ = (v, immutable_count);
        None
    }

    /// A number that changes whenever [`Design::write_control`] may answer
    /// differently for the same versions and memtable backlog (the engine
    /// caches the verdict until one of the three changes). The default, 0,
    /// suits verdicts that depend on the version alone; a PM design whose
    /// verdict follows the free PM (which the WAL consumes write by write)
    /// returns a coarse measure of it.
    fn write_control_epoch(&self) -> u64 {
        0
    }

    /// Whether a `Delay` verdict is close to a stop (RocksDB's
    /// `near_stop`: L0 within two files of the stop trigger, or pending
    /// compaction bytes in the last quarter between the soft and hard
    /// limits). The engine then cuts the delayed write rate harder (×0.6
    /// instead of ×0.8). The default: never.
    fn near_stop(&self, v: &Version) -> bool {
        let _ = v;
        false
    }

    /// Whether the flush target is full. `None` (the default): flush now.
    /// `Some(cause)`: the engine holds immutable memtables back until
    /// background work makes room (it keeps asking the picker), and writers
    /// that then find every memtable full are recorded as stalled for
    /// `cause` instead of `MemtableFull` (vLSM: a full L0 queue).
    fn flush_blocked(&self, v: &Version) -> Option<StallCause> {
        let _ = v;
        None
    }

    /// Called once at open, before recovery reads any table: a PM design
    /// registers how its PM tables are opened
    /// (`ctx.pm_opener`, `ctx.level_view`). The default does nothing.
    fn install(&self, ctx: &Arc<TableContext>) {
        let _ = ctx;
    }

    /// The recovery hook (module doc): edits to apply after the MANIFEST
    /// is read and the PM allocator reconciled (with
    /// [`Design::live_pm_runs`]: what the hook resumes must be declared
    /// there), before log replay; the engine reconciles again after
    /// applying them. `env.version` is the recovered version of region 0.
    /// The default: none.
    fn recover(&self, env: &JobEnv) -> Result<Vec<VersionEdit>> {
        let _ = env;
        Ok(Vec::new())
    }

    /// PM runs the design's live structures use beyond its tables'
    /// `pm_pages` (module doc), given every region's current version and
    /// the logs in PM the MANIFEST lists (with a design-owned log: its
    /// logs, by number and locator). The default: none.
    fn live_pm_runs(&self, versions: &[Arc<Version>], logs: &[PmWal]) -> Result<Vec<PageRun>> {
        let _ = (versions, logs);
        Ok(Vec::new())
    }

    /// Runs the design keeps although tables list them (module doc), given
    /// every region's current version. The default: none.
    fn retained_pm_runs(&self, versions: &[Arc<Version>]) -> Result<Vec<PageRun>> {
        let _ = versions;
        Ok(Vec::new())
    }

    /// A PM table was released (module doc); returns further runs to free.
    /// The default: none.
    fn release(&self, meta: &TableMeta) -> Result<Vec<PageRun>> {
        let _ = meta;
        Ok(Vec::new())
    }

    /// Named figures the design reports beside the engine's stats (module
    /// doc). The default: none.
    fn stats(&self, versions: &[Arc<Version>]) -> Vec<(String, String)> {
        let _ = versions;
        Vec::new()
    }

    /// The design's own log, if its flush target is the log (module doc).
    /// The default: the engine's WAL.
    fn log(&self) -> Option<&dyn DesignLog> {
        None
    }

    /// A number that grows while the LSM falls behind (RocksDB adjusts the
    /// delayed write rate on it): L0 files plus pending compaction bytes in MB.
    fn debt(&self, v: &Version) -> u64;

    /// The level shape the design's picker works to, for one region at
    /// version `v` (its level count): what the compaction debt is measured
    /// against (`Stats::level_targets`, `tierkv.level-targets`). `None`
    /// (the default): the design does not say.
    fn level_targets(&self, v: &Version) -> Option<LevelTargets> {
        let _ = v;
        None
    }

    /// Input bytes per level of a task, for stats. The default sums the
    /// input tables; a design whose tasks take only part of a table (a key
    /// range of PM rows) reports what it really reads.
    fn task_input_bytes(&self, task: &Task) -> Vec<(usize, u64)> {
        task.input_bytes()
    }
}

/// Builds a design from the options and the PM tier (if any): how
/// `Db::open_with_design` plugs in a design that is not one of the presets
/// (a test's toy design, an experiment).
pub type DesignFactory =
    dyn Fn(&Options, Option<Arc<PmTier>>) -> Result<Arc<dyn Design>> + Send + Sync;

/// The options under which the design of `opts` moves every table out of
/// PM when the database is compacted down to its last level (`Db::migrate`,
/// `db/migrate.rs`). Most designs keep nothing in PM at the last level and
/// need no change; `tlsm` under `lru` or `none` keeps skip lists at every
/// level, so it runs `leveled` with only L0 in PM: every list below L0 is
/// then misplaced, and its picker converts it to SSTs at its own level.
pub fn evacuation_options(opts: &Options) -> Options {
    let mut o = opts.clone();
    if o.design == Preset::Tlsm {
        o.tlsm.policy = crate::options::TlsmPolicy::Leveled;
        o.tlsm.level_threshold = 0;
    }
    o
}

/// Builds the design named by `opts.design`, or refuses it at open. PM
/// designs get the PM tier (region and page allocator) here.
pub fn build(opts: &Options, pm: Option<Arc<PmTier>>) -> Result<Arc<dyn Design>> {
    let need_pm = |pm: Option<Arc<PmTier>>| {
        pm.ok_or_else(|| {
            crate::Error::InvalidOptions(format!(
                "design `{}` keeps L0 in persistent memory and needs a PM tier: set `pm_dir` and `pm_size_bytes`",
                opts.design
            ))
        })
    };
    match opts.design {
        Preset::Classic => Ok(Arc::new(classic::Classic::new(opts))),
        Preset::Triangle => Ok(Arc::new(triangle::triangle(opts, need_pm(pm)?)?)),
        Preset::Matrix => Ok(Arc::new(matrix::matrix(opts, need_pm(pm)?)?)),
        Preset::Vlsm => Ok(Arc::new(vlsm::Vlsm::new(opts))),
        Preset::Tlsm => Ok(Arc::new(tlsm::Tlsm::new(opts, need_pm(pm)?)?)),
        Preset::RangeTab => Ok(Arc::new(rangetab::rangetab(opts, need_pm(pm)?)?)),
        Preset::NvCache => Ok(Arc::new(nvcache::nvcache(opts, need_pm(pm)?)?)),
    }
}
