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

use crate::compaction::{merge_to_ssts, JobEnv, OutputSpec};
use crate::error::Result;
use crate::iter::{InternalIterator, MergingIterator};
use crate::key;
use crate::memtable::MemTable;
use crate::options::{Options, Preset};
use crate::stats::StallCause;
use crate::version::edit::VersionEdit;
use crate::version::{table_iter, LevelIterator, TableHandle, Version};

use super::{Design, Task, TaskKind, WriteControl};

/// The shape parameters the picker and write controller read.
#[derive(Debug, Clone)]
pub struct Classic {
    l0_compaction_trigger: usize,
    l0_slowdown_trigger: usize,
    l0_stop_trigger: usize,
    l1_size_bytes: u64,
    level_size_multiplier: u64,
    sst_size_bytes: u64,
    pending_soft_bytes: u64,
    pending_hard_bytes: u64,
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
            pending_soft_bytes: opts.pending_compaction_bytes_soft,
            pending_hard_bytes: opts.pending_compaction_bytes_hard,
        }
    }

    /// Target bytes of level `level` (≥ 1).
    pub fn level_target_bytes(&self, level: usize) -> u64 {
        let mut t = self.l1_size_bytes;
        for _ in 1..level {
            t = t.saturating_mul(self.level_size_multiplier);
        }
        t
    }

    /// Compaction score of each level (the last level's is 0).
    pub fn scores(&self, v: &Version, busy: &HashSet<u64>) -> Vec<f64> {
        let n = v.level_count();
        let mut scores = vec![0.0; n];
        for (level, score) in scores.iter_mut().enumerate().take(n - 1) {
            let tables = &v.levels[level];
            *score = if level == 0 {
                let files = tables.iter().filter(|t| !busy.contains(&t.meta.id)).count();
                let by_count = files as f64 / self.l0_compaction_trigger as f64;
                let by_size = v.level_bytes(0) as f64 / self.l1_size_bytes as f64;
                by_count.max(by_size)
            } else {
                let bytes: u64 = tables
                    .iter()
                    .filter(|t| !busy.contains(&t.meta.id))
                    .map(|t| t.meta.size_bytes)
                    .sum();
                bytes as f64 / self.level_target_bytes(level) as f64
            };
        }
        scores
    }

    /// RocksDB's estimate of bytes compaction still has to rewrite.
    pub fn pending_compaction_bytes(&self, v: &Version) -> u64 {
        let n = v.level_count();
        let mut pending = 0u64;
        let mut carried = 0u64;
        if v.levels[0].len() >= self.l0_compaction_trigger {
            carried = v.level_bytes(0);
            pending += carried;
        }
        for level in 1..n.saturating_sub(1) {
            let bytes = v.level_bytes(level) + carried;
            let target = self.level_target_bytes(level);
            if bytes > target {
                let excess = bytes - target;
                let next = v.level_bytes(level + 1) as f64;
                let ratio = if bytes > 0 { next / bytes as f64 } else { 0.0 };
                pending = pending.saturating_add((excess as f64 * (ratio + 1.0)) as u64);
                carried = excess;
            } else {
                carried = 0;
            }
        }
        pending
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
            return Some(Task {
                kind: TaskKind::TrivialMove,
                grandparents: Vec::new(),
                inputs: vec![(0, l0.clone()), (1, Vec::new())],
                output_level: 1,
                cursor: None,
            });
        }
        let (glo, ghi) = user_range(l0.iter().chain(l1.iter()));
        Some(Task {
            kind: TaskKind::L0ToL1,
            grandparents: v.overlapping(2, Some(&glo), Some(&ghi)),
            inputs: vec![(0, l0.clone()), (1, l1)],
            output_level: 1,
            cursor: None,
        })
    }

    fn pick_level(&self, v: &Version, busy: &HashSet<u64>, level: usize) -> Option<Task> {
        pick_min_overlap(v, busy, level, self.sst_size_bytes)
    }
}

/// Ln → Ln+1 (n ≥ 1): the idle table with the smallest ratio of overlapped
/// next-level bytes to its own size (RocksDB's `kMinOverlappingRatio`),
/// moved down without rewriting when it overlaps nothing below. Shared by
/// the designs whose deeper levels are leveled.
pub fn pick_min_overlap(
    v: &Version,
    busy: &HashSet<u64>,
    level: usize,
    sst_size_bytes: u64,
) -> Option<Task> {
    let mut best: Option<(f64, Arc<TableHandle>, Vec<Arc<TableHandle>>)> = None;
    for t in &v.levels[level] {
        if busy.contains(&t.meta.id) {
            continue;
        }
        let next = v.overlapping(
            level + 1,
            Some(t.smallest_user_key()),
            Some(t.largest_user_key()),
        );
        if next.iter().any(|n| busy.contains(&n.meta.id)) {
            continue;
        }
        let overlap: u64 = next.iter().map(|n| n.meta.size_bytes).sum();
        let ratio = overlap as f64 / t.meta.size_bytes.max(1) as f64;
        if best.as_ref().is_none_or(|(r, _, _)| ratio < *r) {
            best = Some((ratio, Arc::clone(t), next));
        }
    }
    let (_, table, next) = best?;
    let grandparents = v.overlapping(
        level + 2,
        Some(table.smallest_user_key()),
        Some(table.largest_user_key()),
    );
    let gp_bytes: u64 = grandparents.iter().map(|g| g.meta.size_bytes).sum();
    let kind = if next.is_empty()
        && gp_bytes <= sst_size_bytes * crate::compaction::MAX_GRANDPARENT_OVERLAP_FACTOR
    {
        TaskKind::TrivialMove
    } else {
        TaskKind::Leveled
    };
    Some(Task {
        kind,
        cursor: Some((level, table.meta.largest.clone())),
        inputs: vec![(level, vec![table]), (level + 1, next)],
        output_level: level + 1,
        grandparents,
    })
}

/// Smallest and largest user key over some tables.
fn user_range<'a>(tables: impl IntoIterator<Item = &'a Arc<TableHandle>>) -> (Vec<u8>, Vec<u8>) {
    let mut lo: Option<&[u8]> = None;
    let mut hi: Option<&[u8]> = None;
    for t in tables {
        let (s, l) = (t.smallest_user_key(), t.largest_user_key());
        if lo.is_none_or(|x| s < x) {
            lo = Some(s);
        }
        if hi.is_none_or(|x| l > x) {
            hi = Some(l);
        }
    }
    (
        lo.unwrap_or_default().to_vec(),
        hi.unwrap_or_default().to_vec(),
    )
}

impl Design for Classic {
    fn preset(&self) -> Preset {
        Preset::Classic
    }

    fn flush(&self, env: &JobEnv, mem: &Arc<MemTable>) -> Result<VersionEdit> {
        flush_to_l0_sst(env, mem)
    }

    fn pick(&self, v: &Version, busy: &HashSet<u64>) -> Option<Task> {
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

    fn pick_manual(
        &self,
        v: &Version,
        busy: &HashSet<u64>,
        level: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Option<Task> {
        pick_manual_range(v, busy, level, lo, hi)
    }

    fn run(&self, env: &JobEnv, task: &Task) -> Result<VersionEdit> {
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

    fn debt(&self, v: &Version) -> u64 {
        v.levels[0].len() as u64 + (self.pending_compaction_bytes(v) >> 20)
    }

    fn near_stop(&self, v: &Version) -> bool {
        let soft = self.pending_soft_bytes;
        let hard = self.pending_hard_bytes;
        let pending = self.pending_compaction_bytes(v);
        v.levels[0].len() + 2 >= self.l0_stop_trigger
            || (hard > soft && pending > soft && pending - soft > (hard - soft) / 4 * 3)
    }
}

/// Flushes a memtable into one L0 SST (the classic and vLSM flush target).
pub fn flush_to_l0_sst(env: &JobEnv, mem: &Arc<MemTable>) -> Result<VersionEdit> {
    let mut edit = VersionEdit::default();
    let mut it = mem.iter();
    let spec = OutputSpec {
        level: 0,
        target_size_bytes: u64::MAX,
        grandparents: &[],
        may_drop_tombstones: false,
    };
    for m in merge_to_ssts(env, &mut it, &spec)? {
        edit.new_tables.push((0, m));
    }
    Ok(edit)
}

/// Manual compaction: every table of `level` overlapping `[lo, hi]` plus the
/// overlapped tables of the next level.
pub fn pick_manual_range(
    v: &Version,
    busy: &HashSet<u64>,
    level: usize,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
) -> Option<Task> {
    if level + 1 >= v.level_count() {
        return None;
    }
    let inputs = v.overlapping(level, lo, hi);
    if inputs.is_empty() {
        return None;
    }
    let inputs = if level == 0 {
        v.levels[0].clone()
    } else {
        inputs
    };
    let (a, b) = user_range(&inputs);
    let next = v.overlapping(level + 1, Some(&a), Some(&b));
    if inputs
        .iter()
        .chain(next.iter())
        .any(|t| busy.contains(&t.meta.id))
    {
        return None;
    }
    let (ga, gb) = user_range(inputs.iter().chain(next.iter()));
    Some(Task {
        kind: TaskKind::Manual,
        grandparents: v.overlapping(level + 2, Some(&ga), Some(&gb)),
        inputs: vec![(level, inputs), (level + 1, next)],
        output_level: level + 1,
        cursor: None,
    })
}

/// Runs a merge-and-copy task (or a trivial move) into SSTs.
pub fn run_merge(env: &JobEnv, task: &Task, target_size_bytes: u64) -> Result<VersionEdit> {
    let mut edit = VersionEdit::default();
    for (level, tables) in &task.inputs {
        for t in tables {
            edit.deleted_tables.push((*level as u32, t.meta.id));
        }
    }
    if let Some((level, c)) = &task.cursor {
        edit.compact_cursors.push((*level as u32, c.clone()));
    }
    if task.kind == TaskKind::TrivialMove {
        for (_, tables) in &task.inputs {
            for t in tables {
                edit.new_tables
                    .push((task.output_level as u32, t.meta.clone()));
            }
        }
        return Ok(edit);
    }
    let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
    for (level, tables) in &task.inputs {
        if tables.is_empty() {
            continue;
        }
        if *level == 0 {
            children.extend(tables.iter().map(|t| table_iter(t, false)));
        } else {
            children.push(Box::new(LevelIterator::new(tables.clone(), false)));
        }
    }
    let mut merged = MergingIterator::new(children);
    let spec = OutputSpec {
        level: task.output_level,
        target_size_bytes,
        grandparents: &task.grandparents,
        may_drop_tombstones: true,
    };
    for m in merge_to_ssts(env, &mut merged, &spec)? {
        edit.new_tables.push((task.output_level as u32, m));
    }
    debug_assert!(edit.new_tables.windows(2).all(|w| key::compare_internal(
        &w[0].1.largest,
        &w[1].1.smallest
    )
    .is_lt()));
    Ok(edit)
}
