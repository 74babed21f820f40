//! NV-Cache's picker: a pure function of a [`Version`] and a
//! [`PickContext`] (golden tests: `tierkv/testdata/nvcache.picker`).
//!
//! Levels `0..=K` live in PM as NVTables (`K` = [`Shape::lowest_pm`]),
//! levels `K+1..` on SSD as SSTs.
//!
//! Scores (the level with the highest score ≥ 1 goes first):
//! * L0 (when `K ≥ 1`): idle L0 tables / `l0_compaction_trigger`;
//! * `L1..L(K-1)`: idle bytes / target (`l1_size_bytes` × multiplier^(l-1));
//! * `LK`, the lowest cached level: the PM the cached levels occupy — the
//!   distinct page runs their tables list, segments shared between
//!   tables counted once, i.e. *allocated*, not live, bytes — over the
//!   cache budget (`nvcache_cache_bytes`); at least 2 when free PM is
//!   below twice the write path's reserve;
//! * SSD levels: idle bytes / target, the last level 0.
//!
//! Tasks:
//! * a cached level above `K` → **list compaction** (`nv-list`) of its LRU
//!   tail into the next level: in L0 the oldest table (reads need L0
//!   newest first, so no other L0 table may go down before it), below it
//!   the table with the smallest id — a table's id is its creation time,
//!   and a table is created by a flush or a compaction that rewrote it, so
//!   the smallest id is the least recently updated — with the overlapped
//!   tables of the next level; a **trivial move** when nothing overlaps;
//!   it is skipped while free PM could not hold the new offset arrays (8
//!   bytes per input entry) — the plan carries what is left as the budget
//!   for copying nodes out of sparse segments;
//! * `LK` → **eviction** (`nv-evict`): its LRU tail merged with the
//!   overlapped SSD tables into SSTs of `K+1` — when `K` = 0, the LRU
//!   tail and the next oldest L0 tables together, until what stays holds
//!   at most half the cache (`Shape::evict_l0`); when the cache overflows
//!   and `LK` has nothing to evict, the deepest cached level that can move
//!   its LRU tail down does (so data cascades to where it can leave PM);
//! * an SSD level → leveled (RocksDB's min-overlap pick, trivial moves).

use std::collections::HashSet;
use std::sync::Arc;

use crate::design::leveled::{self, user_range};
use crate::design::{PickContext, Task, TaskKind};
use crate::stats::Tier;
use crate::storage::alloc::PAGE_SIZE_BYTES;
use crate::version::{TableHandle, Version};

/// List compaction: a cached level's victim relinked into the next level.
pub const LIST: TaskKind = TaskKind::new("nv-list");
/// Eviction: the lowest cached level's victim merged into SSTs.
pub const EVICT: TaskKind = TaskKind::new("nv-evict");

/// What the picker decided beyond the inputs of a list compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListPlan {
    /// PM bytes the job may fill with nodes copied out of sparse segments.
    pub copy_budget_bytes: u64,
}

/// The LSM shape NV-Cache's picker and write controller read.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Levels, L0 included.
    pub level_count: usize,
    /// K: the lowest level in PM.
    pub lowest_pm: usize,
    /// L0 tables that trigger a list compaction.
    pub l0_trigger: usize,
    /// Target of L1.
    pub l1_bytes: u64,
    /// Growth factor.
    pub multiplier: u64,
    /// SSD output table size.
    pub sst_bytes: u64,
    /// Budget of the cached levels' PM (allocated bytes).
    pub cache_bytes: u64,
    /// Free PM the write path keeps (writes stop below it).
    pub write_reserve_bytes: u64,
}

impl Shape {
    /// Target bytes of level `level` ≥ 1 (geometric from L1).
    pub fn target(&self, level: usize) -> u64 {
        leveled::geometric_target(self.l1_bytes, self.multiplier, level)
    }

    /// True for the levels kept in PM.
    pub fn in_pm(&self, level: usize) -> bool {
        level <= self.lowest_pm
    }

    /// PM bytes the cached levels occupy (allocated: every distinct page
    /// run their tables list) and their live bytes (the tables' sizes).
    pub fn cache_usage(&self, v: &Version) -> (u64, u64) {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut live = 0u64;
        for t in v.levels.iter().take(self.lowest_pm + 1).flatten() {
            if t.meta.tier != Tier::Pm {
                continue;
            }
            live += t.meta.size_bytes;
            runs.extend(t.meta.pm_pages.iter().map(|r| (r.first, r.count)));
        }
        runs.sort_unstable();
        runs.dedup();
        let pages: u64 = runs.iter().map(|r| r.1).sum();
        (pages * PAGE_SIZE_BYTES, live)
    }

    /// The lowest cached level's score (module doc).
    fn cache_score(&self, v: &Version, cx: &PickContext) -> f64 {
        let (alloc, _) = self.cache_usage(v);
        let mut s = alloc as f64 / self.cache_bytes.max(1) as f64;
        if cx
            .pm_free_bytes
            .is_some_and(|f| f < 2 * self.write_reserve_bytes)
        {
            s = s.max(2.0);
        }
        s
    }

    /// Every level's score (module doc).
    pub fn scores(&self, v: &Version, cx: &PickContext) -> Vec<f64> {
        let busy = cx.busy;
        let n = v.level_count();
        let k = self.lowest_pm;
        let mut scores = vec![0.0; n];
        for (level, score) in scores.iter_mut().enumerate().take(n - 1) {
            *score = if level == k {
                self.cache_score(v, cx)
            } else if level == 0 {
                let idle = v.levels[0]
                    .iter()
                    .filter(|t| !busy.contains(&t.meta.id))
                    .count();
                idle as f64 / self.l0_trigger.max(1) as f64
            } else {
                leveled::idle_bytes(v, busy, level) as f64 / self.target(level).max(1) as f64
            };
        }
        scores
    }

    /// Chooses the next task (module doc).
    pub fn pick(&self, v: &Version, cx: &PickContext) -> Option<Task> {
        let scores = self.scores(v, cx);
        let mut order: Vec<usize> = (0..scores.len()).filter(|&l| scores[l] >= 1.0).collect();
        order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]).then(a.cmp(b)));
        let k = self.lowest_pm;
        for level in order {
            let task = if level < k {
                self.pick_list(v, cx, level)
            } else if level == k {
                self.pick_evict(v, cx.busy).or_else(|| {
                    // Nothing to evict: move data down towards LK.
                    (0..k).rev().find_map(|l| self.pick_list(v, cx, l))
                })
            } else {
                leveled::pick_min_overlap(v, cx.busy, level, self.sst_bytes)
            };
            if task.is_some() {
                return task;
            }
        }
        None
    }

    /// The LRU tail of `level`: the oldest L0 table, or the idle table
    /// with the smallest id whose overlapped tables of the next level are
    /// idle too; with those tables.
    fn victim(
        &self,
        v: &Version,
        busy: &HashSet<u64>,
        level: usize,
    ) -> Option<(Arc<TableHandle>, Vec<Arc<TableHandle>>)> {
        let next_of = |t: &Arc<TableHandle>| {
            v.overlapping(
                level + 1,
                Some(t.smallest_user_key()),
                Some(t.largest_user_key()),
            )
        };
        if level == 0 {
            // L0 is newest first: only the oldest may leave.
            let t = v.levels[0].last()?;
            if busy.contains(&t.meta.id) {
                return None;
            }
            let next = next_of(t);
            if next.iter().any(|n| busy.contains(&n.meta.id)) {
                return None;
            }
            return Some((Arc::clone(t), next));
        }
        let mut lru: Vec<&Arc<TableHandle>> = v.levels[level]
            .iter()
            .filter(|t| !busy.contains(&t.meta.id))
            .collect();
        lru.sort_by_key(|t| t.meta.id);
        lru.into_iter().find_map(|t| {
            let next = next_of(t);
            (!next.iter().any(|n| busy.contains(&n.meta.id))).then(|| (Arc::clone(t), next))
        })
    }

    /// The list compaction (or trivial move) of `level`'s LRU tail.
    fn pick_list(&self, v: &Version, cx: &PickContext, level: usize) -> Option<Task> {
        let (victim, next) = self.victim(v, cx.busy, level)?;
        self.list_task(v, cx, level, vec![victim], next)
    }

    /// A list compaction of `inputs` (of `level`) with `next` (of the
    /// level below), or `None` if free PM could not hold its arrays.
    fn list_task(
        &self,
        v: &Version,
        cx: &PickContext,
        level: usize,
        inputs: Vec<Arc<TableHandle>>,
        next: Vec<Arc<TableHandle>>,
    ) -> Option<Task> {
        let (lo, hi) = user_range(inputs.iter().chain(next.iter()));
        let grandparents = v.overlapping(level + 2, Some(&lo), Some(&hi));
        // Disjoint tables (one table, or tables of one level below L0) over
        // nothing move down unchanged; L0 tables may overlap each other.
        if next.is_empty() && (inputs.len() == 1 || level > 0) {
            return Some(Task {
                grandparents,
                ..Task::new(
                    TaskKind::TRIVIAL_MOVE,
                    vec![(level, inputs), (level + 1, next)],
                    level + 1,
                )
            });
        }
        let entries: u64 = inputs
            .iter()
            .chain(next.iter())
            .map(|t| t.meta.entries)
            .sum();
        let tables = (inputs.len() + next.len()) as u64;
        let need = 8 * entries + PAGE_SIZE_BYTES * (tables + 2);
        let budget = match cx.pm_free_bytes {
            Some(free) if free < need => return None,
            Some(free) => free - need,
            None => u64::MAX,
        };
        let plan = ListPlan {
            copy_budget_bytes: budget.saturating_sub(self.write_reserve_bytes),
        };
        Some(Task {
            grandparents,
            plan: Some(Arc::new(plan)),
            ..Task::new(LIST, vec![(level, inputs), (level + 1, next)], level + 1)
        })
    }

    /// The eviction of the lowest cached level's LRU tail.
    fn pick_evict(&self, v: &Version, busy: &HashSet<u64>) -> Option<Task> {
        let k = self.lowest_pm;
        if k == 0 {
            return self.evict_l0(v, busy);
        }
        let (victim, next) = self.victim(v, busy, k)?;
        Some(self.evict_task(v, k, vec![victim], next))
    }

    /// The eviction out of L0 when it is the only cached level: the oldest
    /// table and the next oldest with it, until the tables that stay
    /// occupy at most half the cache.
    ///
    /// An L0 table spans the whole key space, so every eviction rewrites
    /// all of L1 it overlaps; one table at a time, each evicted byte would
    /// cost `1 + |L1| / table` bytes written (5 at `medium`: 64 MiB tables
    /// over a 256 MiB L1), as many tables as leave together share that
    /// rewrite — RocksDB's L0 → L1 takes every L0 file for the same
    /// reason. Leaving half the cache keeps the newest writes in PM, and
    /// keeps the write path's room while the merge runs. The victims are
    /// the oldest tables, so L0 stays newest first.
    fn evict_l0(&self, v: &Version, busy: &HashSet<u64>) -> Option<Task> {
        let (alloc, _) = self.cache_usage(v);
        let keep = self.cache_bytes / 2;
        let mut left = alloc;
        let mut inputs: Vec<Arc<TableHandle>> = Vec::new();
        for t in v.levels[0].iter().rev() {
            if busy.contains(&t.meta.id) || (!inputs.is_empty() && left <= keep) {
                break;
            }
            let pages: u64 = t.meta.pm_pages.iter().map(|r| r.count).sum();
            left = left.saturating_sub(pages * PAGE_SIZE_BYTES);
            inputs.push(Arc::clone(t));
        }
        if inputs.is_empty() {
            return None;
        }
        inputs.reverse(); // newest first, as L0 is listed
        let (lo, hi) = user_range(&inputs);
        let next = v.overlapping(1, Some(&lo), Some(&hi));
        if next.iter().any(|n| busy.contains(&n.meta.id)) {
            return None;
        }
        Some(self.evict_task(v, 0, inputs, next))
    }

    fn evict_task(
        &self,
        v: &Version,
        level: usize,
        inputs: Vec<Arc<TableHandle>>,
        next: Vec<Arc<TableHandle>>,
    ) -> Task {
        let (lo, hi) = user_range(inputs.iter().chain(next.iter()));
        Task {
            grandparents: v.overlapping(level + 2, Some(&lo), Some(&hi)),
            ..Task::new(EVICT, vec![(level, inputs), (level + 1, next)], level + 1)
        }
    }

    /// A manual compaction of `[lo, hi]` out of `level`: list compaction
    /// inside PM, eviction out of `LK`, leveled on SSD.
    pub fn pick_manual(
        &self,
        v: &Version,
        cx: &PickContext,
        level: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Option<Task> {
        let k = self.lowest_pm;
        if level > k {
            return leveled::pick_manual_range(v, cx.busy, level, lo, hi);
        }
        if level + 1 >= v.level_count() {
            return None;
        }
        let inputs = v.overlapping(level, lo, hi);
        if inputs.is_empty() {
            return None;
        }
        // Every L0 table: a subset could leave an older version above a
        // newer one.
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
            .any(|t| cx.busy.contains(&t.meta.id))
        {
            return None;
        }
        if level == k {
            return Some(self.evict_task(v, level, inputs, next));
        }
        self.list_task(v, cx, level, inputs, next)
    }

    /// The write path's debt: L0 tables plus the cache's overflow in MiB.
    pub fn debt(&self, v: &Version) -> u64 {
        let (alloc, _) = self.cache_usage(v);
        v.levels[0].len() as u64 + (alloc.saturating_sub(self.cache_bytes) >> 20)
    }
}
