//! TLSM's picker and write controller: pure functions of a [`Version`], a
//! [`PickContext`] and the reference index (itself a function of which
//! lists are alive), so they are tested with golden LSM shapes
//! (tierkv/testdata/tlsm.picker).
//!
//! # What is picked, in order
//!
//! 1. **Misplaced lists** (`leveled`): a skip list below the threshold
//!    level (left there by a database opened with another policy) is
//!    written out as SSTs at its level (`tlsm-evict`).
//! 2. **Tier eviction** (`lru`): when the PM tier holds at least 95% of the
//!    capacity (`TlsmOptions::lru_capacity_bytes`, default all of PM), the
//!    longest-resident lists — deepest PM level first, oldest (smallest id)
//!    first — are written to SSD as SSTs at their own levels, as many as
//!    it takes (at most 32 per task) for the PM they alone hold to bring
//!    the tier down to 85% (hysteresis). A list's exclusively owned bytes
//!    are its own pages plus the data runs no other live list references
//!    (after byte-addressable compaction most lists share buffers, so
//!    evicting one frees little until its co-referencing lists go too).
//!    **Flush room** (`lru` and `leveled`): the same eviction runs, whatever
//!    the capacity says, when free PM falls below what the write path
//!    keeps for flushes ([`Shape::flush_shortfall`]: a flush estimate per
//!    memtable waiting plus one, the WAL's reserve and a tenth of the tier),
//!    until a further tenth is free. Without it a flush could wait for PM
//!    that only an eviction frees while the 95% trigger never fires (a
//!    64 MiB memtable needs a fifth of a 400 MiB tier); under `leveled`
//!    it is the only way PM shrinks besides compactions below the
//!    threshold, and lists it evicts from PM levels become SSTs there (a
//!    compaction with an SST input writes SSTs, as under `lru`).
//! 3. **Copy-forward**: the data run with the smallest live share below
//!    `copy_forward_live_ratio` (or, under `none` with the tier at 95% of
//!    its capacity, below 90%) has the first of its idle referencing
//!    lists rewritten into a fresh buffer (`tlsm-copy-forward`); the run
//!    goes once its last referencing list has been.
//! 4. **Leveled compaction** (LevelDB's): L0 scores files over the trigger,
//!    Ln idle bytes over `l1_size_bytes × multiplier^(n-1)`; the highest
//!    score ≥ 1 is compacted — all of L0 with the overlapped L1, or the
//!    Ln table with the least overlap below (moved without rewriting when
//!    it overlaps nothing, unless that would carry a skip list below the
//!    threshold: it is converted instead).
//!
//! A compaction is named for what its job will do: `tlsm-link` (every
//! input a skip list and the output level in PM: byte-addressable),
//! `tlsm-copy` (the same under the PS variant), `tlsm-sst` (SSTs out: an
//! SST level, or an SST among the inputs). The job re-checks PM room and
//! writes SSTs instead when PM could not take the outputs (`lru`,
//! `leveled`).
//!
//! # Write control (LevelDB 1.20, plus PM full)
//!
//! Stop at `l0_stop_trigger` L0 tables (12) or when PM could not take the
//! memtables waiting to be flushed; delay at `l0_slowdown_trigger` (8).
//! "Could not take" counts free pages: a flush's buffer and nodes may take
//! as many runs as PM has (down to one entry's or one node's pages, see
//! `build::flush_list`), so free pages, not the longest free run, are
//! what a flush can use; the pages the flush in progress already
//! reserved count as taken, not as still needed (`Tlsm::flush_need`).

use std::collections::HashSet;
use std::sync::Arc;

use super::refs::RefIndex;
use crate::design::leveled;
use crate::design::{PickContext, Task, TaskKind, WriteControl};
use crate::options::{TlsmPolicy, TlsmVariant};
use crate::stats::{StallCause, Tier};
use crate::version::{TableHandle, Version};

/// A byte-addressable compaction: skip lists linked into skip lists.
pub const LINK: TaskKind = TaskKind::new("tlsm-link");
/// A PS compaction: skip lists copied into skip lists.
pub const COPY: TaskKind = TaskKind::new("tlsm-copy");
/// A compaction writing SSTs.
pub const SST: TaskKind = TaskKind::new("tlsm-sst");
/// Skip lists written to SSD as SSTs at their own levels.
pub const EVICT: TaskKind = TaskKind::new("tlsm-evict");
/// One skip list rewritten into a fresh buffer.
pub const COPY_FORWARD: TaskKind = TaskKind::new("tlsm-copy-forward");

/// Most lists one eviction task takes.
pub const EVICT_BATCH: usize = 32;

/// The picker's parameters.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Tiering policy.
    pub policy: TlsmPolicy,
    /// Deepest PM level under `leveled`.
    pub threshold: usize,
    /// Ablation variant.
    pub variant: TlsmVariant,
    /// L0 tables that trigger a compaction.
    pub l0_trigger: usize,
    /// L0 tables at which writes slow down.
    pub l0_slowdown: usize,
    /// L0 tables at which writes stop.
    pub l0_stop: usize,
    /// L1 target.
    pub l1_bytes: u64,
    /// Level growth factor.
    pub multiplier: u64,
    /// Output list / SST size.
    pub sst_bytes: u64,
    /// Eviction / copy-forward capacity (0: the PM tier's).
    pub capacity_bytes: u64,
    /// Copy-forward live-share threshold (0: off).
    pub copy_forward_ratio: f64,
    /// Upper bound of the PM one flush takes.
    pub flush_bytes: u64,
    /// PM kept for the WAL (when it lives in PM).
    pub wal_reserve_bytes: u64,
}

impl Shape {
    /// True if outputs at `level` are skip lists under the policy.
    pub fn pm_level(&self, level: usize) -> bool {
        match self.policy {
            TlsmPolicy::Leveled => level <= self.threshold,
            TlsmPolicy::Lru | TlsmPolicy::None => true,
        }
    }

    /// Target bytes of `level` (≥ 1).
    pub fn target(&self, level: usize) -> u64 {
        leveled::geometric_target(self.l1_bytes, self.multiplier, level)
    }

    /// Compaction scores per level (the last level's is 0).
    pub fn scores(&self, v: &Version, busy: &HashSet<u64>) -> Vec<f64> {
        let mut s = leveled::scores_below_l0(v, busy, |l| self.target(l));
        if v.level_count() > 1 {
            let files = v.levels[0]
                .iter()
                .filter(|t| !busy.contains(&t.meta.id))
                .count();
            s[0] = files as f64 / self.l0_trigger.max(1) as f64;
        }
        s
    }

    /// The PM capacity the policy fills, and the bytes in use, from the
    /// context (`None` without PM figures).
    pub fn usage(&self, cx: &PickContext) -> Option<(u64, u64)> {
        let (free, cap) = (cx.pm_free_bytes?, cx.pm_capacity_bytes?);
        let used = cap.saturating_sub(free);
        let cap = if self.capacity_bytes > 0 {
            self.capacity_bytes.min(cap)
        } else {
            cap
        };
        Some((cap, used))
    }

    /// The next task (module doc).
    pub fn pick(&self, v: &Version, cx: &PickContext, refs: &RefIndex) -> Option<Task> {
        if let Some(t) = self.pick_misplaced(v, cx.busy) {
            return Some(t);
        }
        if let Some(t) = self.pick_evict(v, cx, refs) {
            return Some(t);
        }
        if let Some(t) = self.pick_copy_forward(v, cx, refs) {
            return Some(t);
        }
        let busy = cx.busy;
        let scores = self.scores(v, busy);
        let mut order: Vec<usize> = (0..scores.len()).filter(|&l| scores[l] >= 1.0).collect();
        order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]));
        order
            .into_iter()
            .find_map(|level| {
                if level == 0 {
                    self.pick_l0(v, busy)
                } else {
                    leveled::pick_min_overlap(v, busy, level, self.sst_bytes)
                }
            })
            .map(|t| self.classify(t))
    }

    /// Names a compaction task for what its job will do (module doc).
    pub fn classify(&self, mut t: Task) -> Task {
        let pm_inputs = t
            .inputs
            .iter()
            .flat_map(|(_, ts)| ts.iter())
            .all(|h| h.meta.tier == Tier::Pm);
        let any_pm = t
            .inputs
            .iter()
            .flat_map(|(_, ts)| ts.iter())
            .any(|h| h.meta.tier == Tier::Pm);
        if t.kind == TaskKind::TRIVIAL_MOVE {
            if any_pm && !self.pm_level(t.output_level) {
                t.kind = SST;
            }
            return t;
        }
        t.kind = if pm_inputs && self.pm_level(t.output_level) {
            if self.variant == TlsmVariant::Ps {
                COPY
            } else {
                LINK
            }
        } else {
            SST
        };
        t
    }

    fn pick_l0(&self, v: &Version, busy: &HashSet<u64>) -> Option<Task> {
        let l0 = &v.levels[0];
        if l0.is_empty() || l0.iter().any(|t| busy.contains(&t.meta.id)) {
            return None;
        }
        let (lo, hi) = leveled::user_range(l0);
        let l1 = v.overlapping(1, Some(&lo), Some(&hi));
        if l1.iter().any(|t| busy.contains(&t.meta.id)) {
            return None;
        }
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
        let (glo, ghi) = leveled::user_range(l0.iter().chain(l1.iter()));
        Some(Task {
            grandparents: v.overlapping(2, Some(&glo), Some(&ghi)),
            ..Task::new(TaskKind::L0_TO_L1, vec![(0, l0.clone()), (1, l1)], 1)
        })
    }

    /// Step 1: skip lists below the threshold under `leveled`.
    fn pick_misplaced(&self, v: &Version, busy: &HashSet<u64>) -> Option<Task> {
        if self.policy != TlsmPolicy::Leveled {
            return None;
        }
        let (level, t) = v
            .levels
            .iter()
            .enumerate()
            .skip(self.threshold + 1)
            .flat_map(|(l, ts)| ts.iter().map(move |t| (l, t)))
            .find(|(_, t)| t.meta.tier == Tier::Pm && !busy.contains(&t.meta.id))?;
        Some(Task::new(EVICT, vec![(level, vec![Arc::clone(t)])], level))
    }

    /// Bytes an eviction should free so that flushes find their PM (0:
    /// none), under `lru` and `leveled` (`none` copies forward instead):
    /// the free PM the write path keeps — a flush estimate per memtable
    /// waiting and one for the memtable being written, the WAL's reserve,
    /// and a tenth of the tier (the pacer's reserve: below it writers are
    /// braked) — and once free PM is below it, up to another tenth above
    /// it (hysteresis).
    pub fn flush_shortfall(&self, cx: &PickContext) -> u64 {
        if self.policy == TlsmPolicy::None {
            return 0;
        }
        let (Some(free), Some(cap)) = (cx.pm_free_bytes, cx.pm_capacity_bytes) else {
            return 0;
        };
        let floor = (cx.immutable_memtables as u64 + 1) * self.flush_bytes
            + self.wal_reserve_bytes
            + cap / 10;
        if free >= floor {
            0
        } else {
            floor + cap / 10 - free
        }
    }

    /// Step 2: LRU eviction, and under `lru` and `leveled` eviction when
    /// free PM runs below what the flushes need (`flush_shortfall`).
    fn pick_evict(&self, v: &Version, cx: &PickContext, refs: &RefIndex) -> Option<Task> {
        let short = self.flush_shortfall(cx);
        let lru = match self.usage(cx) {
            Some((cap, used)) if self.policy == TlsmPolicy::Lru && used * 100 >= cap * 95 => {
                used.saturating_sub(cap / 100 * 85)
            }
            _ => 0,
        };
        let want = short.max(lru);
        if want == 0 {
            return None;
        }
        let mut cands: Vec<(usize, &Arc<TableHandle>)> = v
            .levels
            .iter()
            .enumerate()
            .flat_map(|(l, ts)| ts.iter().map(move |t| (l, t)))
            .filter(|(_, t)| t.meta.tier == Tier::Pm && !cx.busy.contains(&t.meta.id))
            .collect();
        cands.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.meta.id.cmp(&b.1.meta.id)));
        let mut chosen: Vec<(usize, &Arc<TableHandle>)> = Vec::new();
        let mut ids: Vec<u64> = Vec::new();
        for c in cands {
            chosen.push(c);
            ids.push(c.1.meta.id);
            if chosen.len() >= EVICT_BATCH || refs.freed_together(&ids) >= want {
                break;
            }
        }
        if chosen.is_empty() {
            return None;
        }
        let mut inputs: Vec<(usize, Vec<Arc<TableHandle>>)> = Vec::new();
        for (l, t) in chosen {
            match inputs.iter_mut().find(|(x, _)| *x == l) {
                Some((_, ts)) => ts.push(Arc::clone(t)),
                None => inputs.push((l, vec![Arc::clone(t)])),
            }
        }
        inputs.sort_by_key(|(l, _)| *l);
        let out = inputs.last().map_or(0, |(l, _)| *l);
        Some(Task::new(EVICT, inputs, out))
    }

    /// Step 3: copy-forward.
    fn pick_copy_forward(&self, v: &Version, cx: &PickContext, refs: &RefIndex) -> Option<Task> {
        let pressure = self.policy == TlsmPolicy::None
            && self
                .usage(cx)
                .is_some_and(|(cap, used)| used * 100 >= cap * 95);
        let ratio = if self.copy_forward_ratio > 0.0 {
            self.copy_forward_ratio
        } else if pressure {
            0.9
        } else {
            return None;
        };
        for (_, ids, _) in refs.worst_runs(ratio, 16) {
            let found = ids
                .iter()
                .filter(|id| !cx.busy.contains(id))
                .find_map(|id| {
                    v.levels.iter().enumerate().find_map(|(l, ts)| {
                        ts.iter()
                            .find(|t| t.meta.id == *id && t.meta.tier == Tier::Pm)
                            .map(|t| (l, Arc::clone(t)))
                    })
                });
            if let Some((l, t)) = found {
                return Some(Task::new(COPY_FORWARD, vec![(l, vec![t])], l));
            }
        }
        None
    }

    /// The write controller (module doc); `pm_short` says whether PM could
    /// not take the memtables waiting to be flushed.
    pub fn write_control(&self, v: &Version, pm_short: bool) -> WriteControl {
        let l0 = v.levels[0].len();
        if l0 >= self.l0_stop {
            WriteControl::Stop(StallCause::L0Stop)
        } else if pm_short {
            WriteControl::Stop(StallCause::PmFull)
        } else if l0 >= self.l0_slowdown {
            WriteControl::Delay(StallCause::L0Slowdown)
        } else {
            WriteControl::Proceed
        }
    }

    /// Debt: L0 tables plus pending compaction bytes in MB.
    pub fn debt(&self, v: &Version) -> u64 {
        let l0 = if v.levels[0].len() >= self.l0_trigger {
            v.level_bytes(0)
        } else {
            0
        };
        v.levels[0].len() as u64
            + (leveled::pending_compaction_bytes(v, l0, |l| self.target(l)) >> 20)
    }
}
