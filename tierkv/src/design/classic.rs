//! `classic`: RocksDB's leveled compaction with its default triggers — the
//! baseline every other design is measured against.
//!
//! * Flush: one L0 SST per memtable.
//! * L0 score = L0 files / `l0_compaction_trigger` (or L0 bytes / L1 target
//!   if larger); Ln score = bytes not being compacted / target(n), with
//!   target(1) = `l1_size_bytes` and ×`level_size_multiplier` per level.
//!   The highest score ≥ 1 is compacted.
//! * L0 → L1 takes every L0 table (they overlap) and the overlapped L1
//!   tables; only one runs at a time.
//! * Ln → Ln+1 takes the table with the smallest ratio of overlapped
//!   next-level bytes to its own size (RocksDB's `kMinOverlappingRatio`),
//!   or moves it down without rewriting when nothing overlaps.
//! * Write controller: stop at `l0_stop_trigger` L0 files, when every
//!   memtable is full, or at the hard pending-compaction limit; delay at
//!   `l0_slowdown_trigger` or the soft limit.

use std::collections::HashSet;
use std::sync::Arc;

use crate::error::Result;
use crate::memtable::MemTable;
use crate::options::{Options, Preset};
use crate::stats::StallCause;
use crate::version::{TableHandle, Version};

use super::leveled::{self, flush_to_l0_sst, run_merge, user_range};
use super::{
    Design, Headroom, JobEnv, JobOutput, LevelTargets, PickContext, Task, TaskKind, WriteControl,
};

/// The shape parameters the picker and write controller read.
#[derive(Debug, Clone)]
pub struct Classic {
    l0_compaction_trigger: usize,
    l0_slowdown_trigger: usize,
    l0_stop_trigger: usize,
    l1_size_bytes: u64,
    level_size_multiplier: u64,
    sst_size_bytes: u64,
    memtable_size_bytes: u64,
    pending_soft_bytes: u64,
    pending_hard_bytes: u64,
}

/// Room before an L0 file count reaches `limit`, in user bytes (a
/// memtable's worth per L0 file): the headroom of designs whose writes
/// slow down or stop on L0 files.
pub fn l0_headroom(files: usize, limit: usize, memtable_size_bytes: u64) -> Headroom {
    Headroom {
        free_bytes: limit.saturating_sub(files) as u64 * memtable_size_bytes,
        capacity_bytes: limit as u64 * memtable_size_bytes,
        step_bytes: memtable_size_bytes,
    }
}

impl Classic {
    /// The design with the shape of `opts`.
    pub fn new(opts: &Options) -> Self {
        Classic {
            l0_compaction_trigger: opts.l0_compaction_trigger,
            l0_slowdown_trigger: opts.l0_slowdown_trigger,
            l0_stop_trigger: opts.l0_stop_trigger,
            l1_size_bytes: opts.l1_size_bytes,
            level_size_multiplier: opts.level_size_multiplier,
            sst_size_bytes: opts.sst_size_bytes,
            memtable_size_bytes: opts.memtable_size_bytes as u64,
            pending_soft_bytes: opts.pending_compaction_bytes_soft,
            pending_hard_bytes: opts.pending_compaction_bytes_hard,
        }
    }

    /// Target bytes of level `level` (≥ 1).
    pub fn level_target_bytes(&self, level: usize) -> u64 {
        leveled::geometric_target(self.l1_size_bytes, self.level_size_multiplier, level)
    }

    /// Compaction score of each level (the last level's is 0): L0 by
    /// files against the trigger (or bytes against L1's target, if
    /// larger), deeper levels by idle bytes against their targets.
    pub fn scores(&self, v: &Version, busy: &HashSet<u64>) -> Vec<f64> {
        let mut scores = leveled::scores_below_l0(v, busy, |l| self.level_target_bytes(l));
        if v.level_count() > 1 {
            let files = v.levels[0]
                .iter()
                .filter(|t| !busy.contains(&t.meta.id))
                .count();
            let by_count = files as f64 / self.l0_compaction_trigger as f64;
            let by_size = v.level_bytes(0) as f64 / self.l1_size_bytes as f64;
            scores[0] = by_count.max(by_size);
        }
        scores
    }

    /// RocksDB's estimate of bytes compaction still has to rewrite (L0
    /// counts once it reaches the compaction trigger).
    pub fn pending_compaction_bytes(&self, v: &Version) -> u64 {
        let l0 = if v.levels[0].len() >= self.l0_compaction_trigger {
            v.level_bytes(0)
        } else {
            0
        };
        leveled::pending_compaction_bytes(v, l0, |l| self.level_target_bytes(l))
    }

    fn pick_l0(&self, v: &Version, busy: &HashSet<u64>) -> Option<Task> {
        let l0 = &v.levels[0];
        if l0.is_empty() || l0.iter().any(|t| busy.contains(&t.meta.id)) {
            return None; // one L0 → L1 at a time
        }
        let (lo, hi) = user_range(l0);
        let l1 = v.overlapping(1, Some(&lo), Some(&hi));
        if l1.iter().any(|t| busy.contains(&t.meta.id)) {
            return None;
        }
        // Sequential loads: L0 tables disjoint from each other and from L1
        // move down without rewriting, as RocksDB's trivial move does.
        let mut sorted: Vec<&Arc<TableHandle>> = l0.iter().collect();
        sorted.sort_by(|a, b| a.smallest_user_key().cmp(b.smallest_user_key()));
        let disjoint = sorted
            .windows(2)
            .all(|w| w[0].largest_user_key() < w[1].smallest_user_key());
        if l1.is_empty() && disjoint {
            return Some(Task::new(
                TaskKind::TRIVIAL_MOVE,
                vec![(0, l0.clone()), (1, Vec::new())],
                1,
            ));
        }
        let (glo, ghi) = user_range(l0.iter().chain(l1.iter()));
        Some(Task {
            grandparents: v.overlapping(2, Some(&glo), Some(&ghi)),
            ..Task::new(TaskKind::L0_TO_L1, vec![(0, l0.clone()), (1, l1)], 1)
        })
    }

    fn pick_level(&self, v: &Version, busy: &HashSet<u64>, level: usize) -> Option<Task> {
        leveled::pick_min_overlap(v, busy, level, self.sst_size_bytes)
    }
}

impl Design for Classic {
    fn preset(&self) -> Preset {
        Preset::Classic
    }

    fn flush(&self, env: &JobEnv, mem: &Arc<MemTable>) -> Result<JobOutput> {
        flush_to_l0_sst(env, mem)
    }

    fn pick(&self, v: &Version, cx: &PickContext) -> Option<Task> {
        let busy = cx.busy;
        let scores = self.scores(v, busy);
        let mut order: Vec<usize> = (0..scores.len()).filter(|&l| scores[l] >= 1.0).collect();
        order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]));
        order.into_iter().find_map(|level| {
            if level == 0 {
                self.pick_l0(v, busy)
            } else {
                self.pick_level(v, busy, level)
            }
        })
    }

    fn run(&self, env: &JobEnv, task: &Task) -> Result<JobOutput> {
        run_merge(env, task, self.sst_size_bytes)
    }

    fn write_control(&self, v: &Version, immutable_count: usize) -> WriteControl {
        let l0 = v.levels[0].len();
        let pending = self.pending_compaction_bytes(v);
        let _ = immutable_count; // the engine handles a full set of memtables itself
        if l0 >= self.l0_stop_trigger {
            WriteControl::Stop(StallCause::L0Stop)
        } else if pending >= self.pending_hard_bytes {
            WriteControl::Stop(StallCause::PendingCompactionStop)
        } else if l0 >= self.l0_slowdown_trigger {
            WriteControl::Delay(StallCause::L0Slowdown)
        } else if pending >= self.pending_soft_bytes {
            WriteControl::Delay(StallCause::PendingCompactionSlowdown)
        } else {
            WriteControl::Proceed
        }
    }

    fn headroom(&self, v: &Version, _immutable_count: usize) -> Option<Headroom> {
        Some(l0_headroom(
            v.levels[0].len(),
            self.l0_slowdown_trigger,
            self.memtable_size_bytes,
        ))
    }

    fn debt(&self, v: &Version) -> u64 {
        v.levels[0].len() as u64 + (self.pending_compaction_bytes(v) >> 20)
    }

    fn level_targets(&self, v: &Version) -> Option<LevelTargets> {
        Some(leveled::level_targets(
            v,
            Some(self.l0_compaction_trigger),
            self.l0_compaction_trigger as u64 * self.memtable_size_bytes,
            |l| self.level_target_bytes(l),
        ))
    }

    fn near_stop(&self, v: &Version) -> bool {
        let soft = self.pending_soft_bytes;
        let hard = self.pending_hard_bytes;
        let pending = self.pending_compaction_bytes(v);
        v.levels[0].len() + 2 >= self.l0_stop_trigger
            || (hard > soft && pending > soft && pending - soft > (hard - soft) / 4 * 3)
    }
}
