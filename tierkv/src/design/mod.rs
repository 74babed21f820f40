//! The design seam (DESIGN.md §2): a design is a flush target, a picker, a
//! job runner and a write controller. The engine (`db.rs`) knows only these
//! traits; each preset lives in its own module.
//!
//! * [`Design::flush`] turns an immutable memtable into tables (an edit).
//! * [`Design::pick`] is **pure**: a function of an immutable [`Version`] and
//!   the set of tables already being compacted. Pickers are tested with
//!   golden LSM shapes (tierkv/testdata/) and can be replayed without I/O.
//! * [`Design::run`] executes a [`Task`] and returns the edit to apply.
//! * [`Design::write_control`] says whether writes proceed, are delayed or
//!   stop, given the version and the memtable backlog.

pub mod classic;
pub mod inspect;
pub mod matrix;
pub mod triangle;
pub mod vlsm;

use std::collections::HashSet;
use std::sync::Arc;

use crate::db::pm::PmTier;
use crate::error::Result;
use crate::memtable::MemTable;
use crate::options::{Options, Preset};
use crate::stats::StallCause;
use crate::version::edit::VersionEdit;
use crate::version::{TableContext, TableHandle, Version};

pub use crate::compaction::JobEnv;

/// What a compaction task is, for stats and dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// L0 → L1 (merge all overlapping L0 tables with the overlapped L1 tables).
    L0ToL1,
    /// Ln → Ln+1 for n ≥ 1.
    Leveled,
    /// A table moved to the next level without rewriting (edit only).
    TrivialMove,
    /// A compaction asked for by `compact_range`.
    Manual,
    /// TriangleKV: one right-angle side of the PM container (a key range of
    /// every row) merged into L1.
    RightAngle,
    /// MatrixKV: one column of the PM container's compactor merged into L1.
    Column,
}

impl TaskKind {
    /// Name used in stats.
    pub fn name(self) -> &'static str {
        match self {
            TaskKind::L0ToL1 => "l0-l1",
            TaskKind::Leveled => "leveled",
            TaskKind::TrivialMove => "trivial-move",
            TaskKind::Manual => "manual",
            TaskKind::RightAngle => "right-angle",
            TaskKind::Column => "column",
        }
    }
}

/// A unit of background work chosen by a picker.
#[derive(Debug, Clone)]
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
}

impl Task {
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

/// A design preset plugged into the engine.
pub trait Design: Send + Sync {
    /// The preset.
    fn preset(&self) -> Preset;

    /// Writes an immutable memtable to its flush target; returns the edit
    /// adding the new tables (the caller sets the log number and applies it).
    fn flush(&self, env: &JobEnv, mem: &Arc<MemTable>) -> Result<VersionEdit>;

    /// Chooses the next background task, if any. Pure.
    fn pick(&self, v: &Version, busy: &HashSet<u64>) -> Option<Task>;

    /// A manual compaction of the user-key range `[lo, hi]` out of `level`.
    fn pick_manual(
        &self,
        v: &Version,
        busy: &HashSet<u64>,
        level: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Option<Task>;

    /// Called by the flush thread before a flush job takes its version: a
    /// design whose flush target has bounded room (a PM container) may
    /// wait here for it — no version is pinned yet, so compaction can
    /// free space. The default does nothing.
    fn prepare_flush(&self, mem: &Arc<MemTable>) -> Result<()> {
        let _ = mem;
        Ok(())
    }

    /// Runs a task; returns the edit to apply.
    fn run(&self, env: &JobEnv, task: &Task) -> Result<VersionEdit>;

    /// Whether writes may proceed given the version and the number of
    /// immutable memtables waiting to be flushed.
    fn write_control(&self, v: &Version, immutable_count: usize) -> WriteControl;

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
    /// (`ctx.pm_opener`). The default does nothing.
    fn install(&self, ctx: &Arc<TableContext>) {
        let _ = ctx;
    }

    /// A number that grows while the LSM falls behind (RocksDB adjusts the
    /// delayed write rate on it): L0 files plus pending compaction bytes in MB.
    fn debt(&self, v: &Version) -> u64;

    /// Input bytes per level of a task, for stats. The default sums the
    /// input tables; a design whose tasks take only part of a table (a key
    /// range of PM rows) reports what it really reads.
    fn task_input_bytes(&self, task: &Task) -> Vec<(usize, u64)> {
        task.input_bytes()
    }
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
        Preset::Triangle => Ok(Arc::new(triangle::Triangle::new(opts, need_pm(pm)?)?)),
        Preset::Matrix => Ok(Arc::new(matrix::Matrix::new(opts, need_pm(pm)?)?)),
        Preset::Vlsm => Ok(Arc::new(vlsm::Vlsm::new(opts))),
        other => Err(crate::Error::InvalidOptions(format!(
            "design `{other}` is not available in this build of tierkv (available: classic, matrix, triangle, vlsm)"
        ))),
    }
}
