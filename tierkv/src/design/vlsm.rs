//! `vlsm`: vLSM (Xanthakis et al.) — low tail latency on SSD alone by
//! keeping compaction chains narrow and short.
//!
//! With SM = `sst_size_bytes`, f = `vlsm_growth_factor`, Φ = `vlsm_phi`:
//!
//! * **Flush**: the memtable is cut into range-partitioned L0 SSTs of at
//!   most SM ([`L0Cutter`]), each closing at the first L1 table boundary
//!   past SM / 2, so one L0 SST overlaps whole L1 tables. With memtable =
//!   SM (the paper's literal setting, §6.2) that is one L0 SST per flush
//!   covering the whole key range, and every L0 → L1 compaction rewrites
//!   all of L1 (f + 1 SSTs per SST, ≈ f × the I/O of `classic`'s tiered
//!   step). With memtables k × SM (the default: RocksDB's 64 MB, the
//!   paper's "same memory budget"), a flush writes k SSTs of 1/k of the key
//!   range each, and one L0 SST meets ≈ L1 / k of L1: with L1 = f × SM and
//!   k = f, the L0 → L1 step costs what `classic`'s tiered step does while
//!   each compaction stays one SST wide.
//! * **L0 is a FIFO queue** of `vlsm_l0_max_ssts` SSTs (a flush is admitted
//!   while the queue holds fewer, so it may briefly hold up to one flush's
//!   SSTs more). There is no tiering step merging all of L0: the *oldest
//!   single* L0 SST is compacted with the L1 tables it overlaps (oldest
//!   among those its key range meets: key-disjoint SSTs of range-partitioned
//!   flushes go side by side; `vlsm_l0_batch_ssts` > 1 lets one compaction
//!   take newer SSTs lying inside the same L1 rewrite). L0 drains continuously, so
//!   the queue is there to absorb bursts; when it is full, flushes wait
//!   ([`Design::flush_blocked`]) and L0's chain goes first.
//! * **Level sizes**: L1 = f × SM (or `vlsm_l1_size_bytes`), L2 = Φ × L1,
//!   L(n+1) = f × Ln, so small
//!   SSTs do not add levels (Φ > f makes up for the small L1).
//! * **vSSTs in L1**: L0 → L1 output is cut by the overlap-aware rule of
//!   [`crate::compaction::vsst`] (when `Options::vsst_enabled`, on by
//!   default here): poor vSSTs of Sm = SM / f with overlap > f, good vSSTs
//!   of [Sm, SM] with overlap ≤ f.
//! * **L1 → L2** frees room for the next L0 SST: the L1 tables with the
//!   lowest ratio of overlapped L2 bytes to their size, good ones only, as
//!   many as sum to SM. The picked vSSTs need not be adjacent: each group
//!   of them sharing L2 tables is merged on its own, so no output spans L2
//!   tables that are not inputs. The paper leaves open what to do when L1
//!   has no good vSST (with uniform keys and Φ/f = 4 that is the common
//!   case): then the run of adjacent L1 tables of SM bytes with the lowest
//!   overlap ratio goes, as one merge — adjacent poor vSSTs share their
//!   boundary L2 tables, scattered ones would each pull them in again.
//! * **Ln → Ln+1** (n ≥ 2): RocksDB's min-overlapping-ratio pick, one SST.
//! * **Order** (the chain is freed bottom-up, vLSM §2.3): when the L0 queue
//!   is full, first L1 → L2 if L1 has no room for the oldest L0 SST, then
//!   that L0 SST; otherwise the level with the highest score ≥ 1
//!   (bytes / target); otherwise drain L0 the same way.
//! * **Write controller**: vLSM has no L0 slowdown or stop triggers — the
//!   full L0 queue holds flushes back, and writers stall (recorded as
//!   `L0Stop`) only once every memtable is full too, for as long as one
//!   small L0 → L1 compaction (and the L1 → L2 step before it) takes.
//!   Pending compaction bytes over the soft / hard limits delay / stop
//!   writes as in `classic` (a safety net when deeper levels fall behind).
//!
//! Faithful and improved settings (YCSB Load A, 1 KB records, `small`,
//! measured beside `classic`): the literal one-SST-per-memtable setting
//! (`memtable_size_bytes` = SM) rewrites all of L1 per L0 SST — I/O amp
//! ≈ 7.5× `classic`'s; range-partitioned flushes of RocksDB-sized
//! memtables (the default) halve that (≈ 4.2×, Φ = 8: ≈ 3.4×), the rest
//! being L1 → L2 at overlap ≈ Φ/2–Φ: with uniform keys few vSSTs are good.
//!
//! At steady state (after the fill, the debt within 2× of every target;
//! README "vLSM at its paper's shape"), with uniform keys, a 1/16 model of
//! `medium`: L1 → L2 merges meet ≈ Φ/2 bytes of L2 per L1 byte (14.5 at
//! Φ = 32, where a random L1 range meets ≈ Φ), and write 15 bytes per user
//! byte against `classic`'s 4.5; few vSSTs are good (2–3% of what L0 → L1
//! cuts), and without vSSTs the overlap is the same — the picker's choice
//! of the L1 range that waited longest does the work. The counters of
//! [`VlsmCounters`] show this for any run.
//!
//! The picker is pure and per-LSM (a function of one [`Version`]), so a
//! `Db` split into regions can run one instance per region.
//!
//! Invariants:
//! 1. An L0 SST reaches L1 only after every older L0 SST whose key range
//!    meets its own, so L1 never holds data newer than an L0 SST above it.
//!    With one SST per flush (each over the whole key range) that is the
//!    paper's strict FIFO, one L0 → L1 task at a time; the key-disjoint
//!    SSTs of range-partitioned flushes may go side by side, in tasks with
//!    disjoint inputs (hence disjoint outputs).
//! 2. An L1 → L2 task's L2 inputs are exactly the L2 tables meeting its L1
//!    inputs; groups merged separately are key-disjoint and separated by L2
//!    tables left in place.
//!
//! Measurement ([`Design::counters`], [`VlsmCounters`]): how many of L1's
//! bytes are good vSSTs now; per L1 → L2 merge, the overlap it achieved
//! against what a random choice of the same L1 bytes meets; per L0 → L1
//! merge, how the cutter classed its output. `tierkv.stats` prints them
//! under `** Design **`; the bench reports them per benchmark.
//!
//! Concurrency: the design holds configuration and counters (atomics its
//! jobs add to); `pick` runs under the engine's state lock with the set of
//! busy tables, `run` in a job thread.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::compaction::vsst::{VsstCutter, VsstParams};
use crate::compaction::{
    merge_to_ssts, merge_to_ssts_with, Cutter, JobEnv, OutputSpec, MAX_GRANDPARENT_OVERLAP_FACTOR,
};
use crate::error::Result;
use crate::memtable::MemTable;
use crate::options::{Options, Preset};
use crate::stats::StallCause;
use crate::version::edit::VersionEdit;
use crate::version::{TableHandle, Version};

use super::leveled::{self, overlaps_any, run_merge, sorted_by_key, user_range};
use super::{Design, Headroom, JobOutput, LevelTargets, PickContext, Task, TaskKind, WriteControl};

/// The vLSM design: its shape parameters.
#[derive(Debug, Clone)]
pub struct Vlsm {
    sst_size_bytes: u64,
    growth_factor: u64,
    phi: u64,
    l0_max_ssts: usize,
    l0_batch_ssts: usize,
    l1_size_bytes: u64,
    vsst: bool,
    pending_soft_bytes: u64,
    pending_hard_bytes: u64,
    counters: Arc<VlsmCounters>,
}

/// What vLSM's jobs did, cumulative since open ([`Design::counters`],
/// names `vlsm.*`): where its compaction cost goes.
///
/// * L1 → L2 merges: the L1 bytes they took, the L2 bytes they merged
///   with them (achieved overlap = L2 ÷ L1), and what a random choice of
///   the same L1 bytes would have met — each merge's L1 bytes × the
///   version's L2 bytes ÷ L1 bytes when it was picked (with uniform keys,
///   the expected overlap of any L1 range); how many merges found no good
///   vSST and took the window fallback ([`Vlsm::pick_l1_window`]); how many
///   of their L1 bytes were good vSSTs; how many of their key-disjoint
///   groups were merged in key-range parts side by side.
/// * L0 → L1 merges: the L1 output the vSST cutter closed as good
///   (overlap ≤ f) and as poor, in tables and bytes.
#[derive(Debug, Default)]
pub struct VlsmCounters {
    l1_l2_merges: AtomicU64,
    l1_l2_window_merges: AtomicU64,
    l1_l2_moves: AtomicU64,
    l1_l2_l1_bytes: AtomicU64,
    l1_l2_l1_good_bytes: AtomicU64,
    l1_l2_l2_bytes: AtomicU64,
    l1_l2_random_l2_bytes: AtomicU64,
    l1_l2_split_groups: AtomicU64,
    l0_l1_good_tables: AtomicU64,
    l0_l1_good_bytes: AtomicU64,
    l0_l1_poor_tables: AtomicU64,
    l0_l1_poor_bytes: AtomicU64,
}

/// How the L1 → L2 picker chose (the task's plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L1Pick {
    /// Good vSSTs by lowest overlap ratio.
    Good,
    /// No good vSST: the window of adjacent tables with the lowest ratio.
    Window,
}

/// Cuts a flush into range-partitioned L0 SSTs: a table closes at
/// `target_bytes` (+ 1/8 slack), or earlier — once it holds half of
/// `target_bytes` — where the
/// keys cross the end of an L1 table, so that consecutive L0 SSTs of one
/// flush overlap disjoint sets of L1 tables and a single-SST L0 → L1
/// compaction rewrites only the L1 tables under its own key range.
///
/// Worked example (target 8 MB, L1 = `[a-f]:8M [g-m]:8M [n-z]:8M`, a
/// 24 MB memtable of uniform keys): the first SST closes after `f` (about
/// 8 MB, the first boundary past 4 MB), the next after `m`, the last at
/// the end — three L0 SSTs, each meeting exactly one L1 table.
///
/// Invariant: `l1[..idx]` end before the last key seen (keys ascend).
pub struct L0Cutter<'a> {
    target_bytes: u64,
    l1: &'a [Arc<TableHandle>],
    idx: usize,
}

/// The target size of the L0 SSTs of a flush of `mem_bytes`: the memtable
/// split into k = round(mem / SM) equal parts (at least one), so that an
/// SST-sized memtable gives one SST and no tiny tail is cut off.
pub fn flush_target_bytes(mem_bytes: u64, sst_size_bytes: u64) -> u64 {
    let sm = sst_size_bytes.max(1);
    let k = ((mem_bytes + sm / 2) / sm).max(1);
    mem_bytes.div_ceil(k).max(1)
}

impl<'a> L0Cutter<'a> {
    /// A cutter for L0 SSTs of `target_bytes` over `l1` (sorted, disjoint).
    pub fn new(target_bytes: u64, l1: &'a [Arc<TableHandle>]) -> Self {
        L0Cutter {
            target_bytes,
            l1,
            idx: 0,
        }
    }
}

impl Cutter for L0Cutter<'_> {
    fn cut_before(&mut self, ikey: &[u8], open_bytes: Option<u64>) -> bool {
        let user_key = crate::key::user_key(ikey);
        let before = self.idx;
        while self.idx < self.l1.len() && self.l1[self.idx].largest_user_key() < user_key {
            self.idx += 1;
        }
        let crossed = self.idx > before;
        // The hard cut leaves an eighth of slack: the memtable's size is an
        // estimate of the tables' and must not leave a sliver at the end.
        let hard = self.target_bytes + self.target_bytes / 8;
        open_bytes.is_some_and(|b| b >= hard || (crossed && b >= self.target_bytes / 2))
    }
}

/// One L1 table as the L1 → L2 picker sees it.
#[derive(Debug, Clone)]
pub struct L1Candidate {
    /// The table.
    pub table: Arc<TableHandle>,
    /// The L2 tables its key range meets.
    pub overlapped: Vec<Arc<TableHandle>>,
    /// Their bytes.
    pub overlap_bytes: u64,
    /// Overlap ratio ≤ f.
    pub good: bool,
}

impl L1Candidate {
    /// Overlapped L2 bytes per byte of the table.
    pub fn ratio(&self) -> f64 {
        self.overlap_bytes as f64 / self.table.meta.size_bytes.max(1) as f64
    }
}

impl Vlsm {
    /// The design with the shape of `opts`.
    pub fn new(opts: &Options) -> Self {
        Vlsm {
            sst_size_bytes: opts.sst_size_bytes,
            growth_factor: opts.vlsm_growth_factor,
            phi: opts.vlsm_phi,
            l0_max_ssts: opts.vlsm_l0_max_ssts,
            l0_batch_ssts: opts.vlsm_l0_batch_ssts.max(1),
            l1_size_bytes: opts
                .vlsm_l1_size_bytes
                .unwrap_or(opts.vlsm_growth_factor.saturating_mul(opts.sst_size_bytes)),
            vsst: opts.vsst_enabled(),
            pending_soft_bytes: opts.pending_compaction_bytes_soft,
            pending_hard_bytes: opts.pending_compaction_bytes_hard,
            counters: Arc::new(VlsmCounters::default()),
        }
    }

    /// Bytes and tables of `v`'s L1 that are good vSSTs (overlap with L2 ≤
    /// f × size): `(good bytes, good tables)`.
    pub fn l1_good(&self, v: &Version) -> (u64, u64) {
        if v.level_count() < 3 {
            return (0, 0);
        }
        let p = self.vsst_params();
        let mut out = (0, 0);
        for t in &v.levels[1] {
            let overlap: u64 = v
                .overlapping(2, Some(t.smallest_user_key()), Some(t.largest_user_key()))
                .iter()
                .map(|o| o.meta.size_bytes)
                .sum();
            if p.is_good(t.meta.size_bytes, overlap) {
                out.0 += t.meta.size_bytes;
                out.1 += 1;
            }
        }
        out
    }

    /// Counts an L1 → L2 task run against the version it was picked from.
    fn count_l1_task(&self, v: &Version, task: &Task) {
        let c = &self.counters;
        let add = |a: &AtomicU64, n: u64| {
            a.fetch_add(n, Ordering::Relaxed);
        };
        if task.kind == TaskKind::TRIVIAL_MOVE {
            add(&c.l1_l2_moves, 1);
            return;
        }
        let p = self.vsst_params();
        let level = |l: usize| -> &[Arc<TableHandle>] {
            task.inputs
                .iter()
                .find(|(x, _)| *x == l)
                .map_or(&[], |(_, t)| t.as_slice())
        };
        let l1: u64 = level(1).iter().map(|t| t.meta.size_bytes).sum();
        let l2: u64 = level(2).iter().map(|t| t.meta.size_bytes).sum();
        let good: u64 = level(1)
            .iter()
            .filter(|t| {
                let overlap: u64 = v
                    .overlapping(2, Some(t.smallest_user_key()), Some(t.largest_user_key()))
                    .iter()
                    .map(|o| o.meta.size_bytes)
                    .sum();
                p.is_good(t.meta.size_bytes, overlap)
            })
            .map(|t| t.meta.size_bytes)
            .sum();
        let random = l1 as f64 * v.level_bytes(2) as f64 / v.level_bytes(1).max(1) as f64;
        add(&c.l1_l2_merges, 1);
        if task.plan::<L1Pick>() == Some(&L1Pick::Window) {
            add(&c.l1_l2_window_merges, 1);
        }
        add(&c.l1_l2_l1_bytes, l1);
        add(&c.l1_l2_l1_good_bytes, good);
        add(&c.l1_l2_l2_bytes, l2);
        add(&c.l1_l2_random_l2_bytes, random as u64);
    }

    /// L0 → L1, its output cut into vSSTs (when on) and counted by class.
    fn run_l0(&self, env: &JobEnv, task: &Task) -> Result<JobOutput> {
        if !self.vsst || task.kind == TaskKind::TRIVIAL_MOVE {
            return run_merge(env, task, self.sst_size_bytes);
        }
        let next: &[Arc<TableHandle>] = env.version.levels.get(2).map_or(&[], |l| l.as_slice());
        let mut cutter = VsstCutter::new(next, self.vsst_params());
        let out = leveled::run_merge_with(env, task, self.sst_size_bytes, Some(&mut cutter))?;
        let c = &self.counters;
        for r in cutter.records() {
            let (tables, bytes) = if r.good {
                (&c.l0_l1_good_tables, &c.l0_l1_good_bytes)
            } else {
                (&c.l0_l1_poor_tables, &c.l0_l1_poor_bytes)
            };
            tables.fetch_add(1, Ordering::Relaxed);
            bytes.fetch_add(r.size_bytes, Ordering::Relaxed);
        }
        Ok(out)
    }

    /// The vSST parameters (Sm, SM, f).
    pub fn vsst_params(&self) -> VsstParams {
        VsstParams::new(self.sst_size_bytes, self.growth_factor)
    }

    /// Target bytes of level `level` ≥ 1: L1 = f × SM (or
    /// `vlsm_l1_size_bytes`), L2 = Φ × L1, L(n+1) = f × Ln.
    pub fn level_target_bytes(&self, level: usize) -> u64 {
        let mut t = self.l1_size_bytes;
        for l in 2..=level {
            let g = if l == 2 { self.phi } else { self.growth_factor };
            t = t.saturating_mul(g);
        }
        t
    }

    /// Compaction score of each level: L0 = SSTs / queue capacity, Ln =
    /// idle bytes / target; the last level's is 0.
    pub fn scores(&self, v: &Version, busy: &HashSet<u64>) -> Vec<f64> {
        let mut scores = leveled::scores_below_l0(v, busy, |l| self.level_target_bytes(l));
        if v.level_count() > 1 {
            scores[0] = v.levels[0].len() as f64 / self.l0_max_ssts as f64;
        }
        scores
    }

    /// Estimated bytes compaction still has to rewrite (RocksDB's estimate
    /// with vLSM's targets; every L0 SST is pending, as L0 drains).
    pub fn pending_compaction_bytes(&self, v: &Version) -> u64 {
        leveled::pending_compaction_bytes(v, v.level_bytes(0), |l| self.level_target_bytes(l))
    }

    /// L0 → L1 for the oldest L0 SST that can go — idle, with idle L1
    /// tables under it, and no older L0 SST left behind overlapping it
    /// (invariant 1) — with the L1 tables it overlaps; a move without
    /// rewrite when it overlaps nothing in L1 and would be a good vSST (or,
    /// without vSSTs, overlaps little of L2). With one SST per flush that is
    /// always the oldest SST, one at a time; the key-disjoint SSTs of a
    /// range-partitioned flush go to L1 side by side.
    pub fn pick_l0(&self, v: &Version, busy: &HashSet<u64>) -> Option<Task> {
        let by_age: Vec<&Arc<TableHandle>> = v.levels[0].iter().rev().collect();
        // Older SSTs staying in L0: nothing overlapping them may pass them.
        let mut left: Vec<&Arc<TableHandle>> = Vec::new();
        for (i, t) in by_age.iter().enumerate() {
            let (lo, hi) = (t.smallest_user_key(), t.largest_user_key());
            if busy.contains(&t.meta.id) || overlaps_any(&left, lo, hi) {
                left.push(t);
                continue;
            }
            let l1 = v.overlapping(1, Some(lo), Some(hi));
            if l1.iter().any(|x| busy.contains(&x.meta.id)) {
                left.push(t);
                continue;
            }
            return Some(self.l0_task(v, busy, t, l1, &by_age[i + 1..], left));
        }
        None
    }

    /// The L0 → L1 task of `first` over `l1` (the L1 tables it meets):
    /// a trivial move, or a merge that also takes (up to
    /// `vlsm_l0_batch_ssts`, oldest first) each newer idle SST inside the
    /// range of the L1 rewrite that no SST left behind overlaps — so the
    /// L1 inputs stay those of `first`.
    fn l0_task<'v>(
        &self,
        v: &'v Version,
        busy: &HashSet<u64>,
        first: &Arc<TableHandle>,
        l1: Vec<Arc<TableHandle>>,
        newer: &[&'v Arc<TableHandle>],
        mut left: Vec<&'v Arc<TableHandle>>,
    ) -> Task {
        let (lo, hi) = (first.smallest_user_key(), first.largest_user_key());
        if l1.is_empty() {
            let l2_bytes: u64 = v
                .overlapping(2, Some(lo), Some(hi))
                .iter()
                .map(|t| t.meta.size_bytes)
                .sum();
            let movable = if self.vsst {
                self.vsst_params().is_good(first.meta.size_bytes, l2_bytes)
            } else {
                l2_bytes <= self.sst_size_bytes * MAX_GRANDPARENT_OVERLAP_FACTOR
            };
            if movable {
                return Task::new(
                    TaskKind::TRIVIAL_MOVE,
                    vec![(0, vec![Arc::clone(first)]), (1, Vec::new())],
                    1,
                );
            }
        }
        let (glo, ghi) = user_range(std::iter::once(first).chain(l1.iter()));
        let mut l0 = vec![Arc::clone(first)];
        for t in newer {
            if l0.len() >= self.l0_batch_ssts {
                break;
            }
            let (s, l) = (t.smallest_user_key(), t.largest_user_key());
            let inside = s >= glo.as_slice() && l <= ghi.as_slice();
            if inside && !busy.contains(&t.meta.id) && !overlaps_any(&left, s, l) {
                l0.push(Arc::clone(t));
            } else {
                left.push(t);
            }
        }
        Task {
            grandparents: v.overlapping(2, Some(&glo), Some(&ghi)),
            ..Task::new(TaskKind::L0_TO_L1, vec![(0, l0), (1, l1)], 1)
        }
    }

    /// The idle L1 tables whose L2 overlaps are idle, best first: lowest
    /// overlap ratio, then largest, then oldest id.
    pub fn l1_candidates(&self, v: &Version, busy: &HashSet<u64>) -> Vec<L1Candidate> {
        let p = self.vsst_params();
        let mut out: Vec<L1Candidate> = v.levels[1]
            .iter()
            .filter(|t| !busy.contains(&t.meta.id))
            .filter_map(|t| {
                let overlapped =
                    v.overlapping(2, Some(t.smallest_user_key()), Some(t.largest_user_key()));
                if overlapped.iter().any(|o| busy.contains(&o.meta.id)) {
                    return None;
                }
                let overlap_bytes = overlapped.iter().map(|o| o.meta.size_bytes).sum();
                Some(L1Candidate {
                    good: p.is_good(t.meta.size_bytes, overlap_bytes),
                    table: Arc::clone(t),
                    overlapped,
                    overlap_bytes,
                })
            })
            .collect();
        out.sort_by(|a, b| {
            a.ratio()
                .total_cmp(&b.ratio())
                .then(b.table.meta.size_bytes.cmp(&a.table.meta.size_bytes))
                .then(a.table.meta.id.cmp(&b.table.meta.id))
        });
        out
    }

    /// L1 → L2: good vSSTs by lowest overlap ratio until they sum to SM
    /// (poor ones only if no good one exists). Tables that overlap nothing
    /// in L2 (and little of L3) move down without a rewrite.
    pub fn pick_l1(&self, v: &Version, busy: &HashSet<u64>) -> Option<Task> {
        if v.level_count() < 3 {
            return None; // L1 is the last level
        }
        let cands = self.l1_candidates(v, busy);
        if !cands.iter().any(|c| c.good) {
            return self.pick_l1_window(v, busy);
        }
        let mut chosen: Vec<&L1Candidate> = Vec::new();
        let mut sum = 0u64;
        for c in cands.iter().filter(|c| c.good) {
            if sum >= self.sst_size_bytes {
                break;
            }
            sum += c.table.meta.size_bytes;
            chosen.push(c);
        }
        let gp_limit = self.sst_size_bytes * MAX_GRANDPARENT_OVERLAP_FACTOR;
        let l3_bytes = |t: &TableHandle| -> u64 {
            v.overlapping(3, Some(t.smallest_user_key()), Some(t.largest_user_key()))
                .iter()
                .map(|g| g.meta.size_bytes)
                .sum()
        };
        // Tables with no L2 overlap sort first: move that prefix alone.
        let movable: Vec<Arc<TableHandle>> = chosen
            .iter()
            .take_while(|c| c.overlap_bytes == 0 && l3_bytes(&c.table) <= gp_limit)
            .map(|c| Arc::clone(&c.table))
            .collect();
        if !movable.is_empty() {
            return Some(Task::new(
                TaskKind::TRIVIAL_MOVE,
                vec![(1, sorted_by_key(movable)), (2, Vec::new())],
                2,
            ));
        }
        let l1 = sorted_by_key(chosen.iter().map(|c| Arc::clone(&c.table)).collect());
        // (Tables with no L2 overlap went above; what is left is merged.)
        let mut l2: Vec<Arc<TableHandle>> = Vec::new();
        for c in &chosen {
            for o in &c.overlapped {
                if !l2.iter().any(|x| x.meta.id == o.meta.id) {
                    l2.push(Arc::clone(o));
                }
            }
        }
        let l2 = sorted_by_key(l2);
        let mut grandparents: Vec<Arc<TableHandle>> = Vec::new();
        for (lo, hi) in group_ranges(&l1, &l2) {
            grandparents.extend(v.overlapping(3, Some(&lo), Some(&hi)));
        }
        grandparents.dedup_by_key(|t| t.meta.id);
        Some(Task {
            grandparents,
            plan: Some(Arc::new(L1Pick::Good)),
            ..Task::new(TaskKind::LEVELED, vec![(1, l1), (2, l2)], 2)
        })
    }

    /// L1 → L2 when L1 has no good vSST: the run of adjacent idle L1
    /// tables of at least SM bytes (or up to the end of L1) whose L2
    /// overlap per byte is the lowest, merged as one group. Adjacent tables
    /// share the L2 tables at their boundaries, which scattered poor vSSTs
    /// would each drag in again.
    pub fn pick_l1_window(&self, v: &Version, busy: &HashSet<u64>) -> Option<Task> {
        let l1 = &v.levels[1];
        let l2 = &v.levels[2];
        let mut prefix = Vec::with_capacity(l2.len() + 1);
        prefix.push(0u64);
        for t in l2 {
            prefix.push(prefix[prefix.len() - 1] + t.meta.size_bytes);
        }
        // (ratio, bytes, first, end, l2 first, l2 end)
        let mut best: Option<(f64, u64, usize, usize, usize, usize)> = None;
        for i in 0..l1.len() {
            let mut sum = 0u64;
            let mut j = i;
            while j < l1.len() && sum < self.sst_size_bytes && !busy.contains(&l1[j].meta.id) {
                sum += l1[j].meta.size_bytes;
                j += 1;
            }
            if j == i || (sum < self.sst_size_bytes && j < l1.len()) {
                continue; // a busy table cuts the window short
            }
            let (lo, hi) = (l1[i].smallest_user_key(), l1[j - 1].largest_user_key());
            let a = l2.partition_point(|t| t.largest_user_key() < lo);
            let b = l2.partition_point(|t| t.smallest_user_key() <= hi).max(a);
            if l2[a..b].iter().any(|t| busy.contains(&t.meta.id)) {
                continue;
            }
            let ratio = (prefix[b] - prefix[a]) as f64 / sum.max(1) as f64;
            if best.is_none_or(|(r, n, ..)| ratio < r || (ratio == r && sum > n)) {
                best = Some((ratio, sum, i, j, a, b));
            }
        }
        let (_, _, i, j, a, b) = best?;
        let inputs_l1 = l1[i..j].to_vec();
        let inputs_l2 = l2[a..b].to_vec();
        let (lo, hi) = user_range(inputs_l1.iter().chain(inputs_l2.iter()));
        Some(Task {
            grandparents: v.overlapping(3, Some(&lo), Some(&hi)),
            plan: Some(Arc::new(L1Pick::Window)),
            ..Task::new(TaskKind::LEVELED, vec![(1, inputs_l1), (2, inputs_l2)], 2)
        })
    }

    /// Ln → Ln+1 for n ≥ 2: the idle table with the smallest ratio of
    /// overlapped next-level bytes to its size, moved down when it overlaps
    /// nothing.
    pub fn pick_level(&self, v: &Version, busy: &HashSet<u64>, level: usize) -> Option<Task> {
        leveled::pick_min_overlap(v, busy, level, self.sst_size_bytes)
    }

    /// L0's chain: room in L1 for the oldest L0 SST first, then that SST.
    fn pick_l0_chain(&self, v: &Version, busy: &HashSet<u64>) -> Option<Task> {
        let incoming = v.levels[0].last().map_or(0, |t| t.meta.size_bytes);
        if v.level_count() > 2
            && leveled::idle_bytes(v, busy, 1) + incoming > self.level_target_bytes(1)
        {
            if let Some(t) = self.pick_l1(v, busy) {
                return Some(t);
            }
        }
        self.pick_l0(v, busy)
    }

    /// L1 → L2: merges each key-disjoint group of the task separately.
    fn run_l1(&self, env: &JobEnv, task: &Task) -> Result<JobOutput> {
        let empty = Vec::new();
        let l1 = task
            .inputs
            .iter()
            .find(|(l, _)| *l == 1)
            .map_or(&empty, |(_, t)| t);
        let l2 = task
            .inputs
            .iter()
            .find(|(l, _)| *l == 2)
            .map_or(&empty, |(_, t)| t);
        let mut edit = VersionEdit::default();
        for (level, tables) in &task.inputs {
            for t in tables {
                edit.deleted_tables.push((*level as u32, t.meta.id));
            }
        }
        let mut written: Vec<u64> = Vec::new();
        let result = (|| -> Result<()> {
            for (g1, g2) in groups(l1, l2) {
                let (lo, hi) = user_range(g1.iter().chain(g2.iter()));
                let grandparents = env.version.overlapping(3, Some(&lo), Some(&hi));
                let spec = OutputSpec {
                    level: 2,
                    target_size_bytes: self.sst_size_bytes,
                    grandparents: &grandparents,
                    may_drop_tombstones: true,
                };
                // A group merges its L1 bytes with about Φ/2 times as many
                // L2 bytes (README, "vLSM at its paper's shape"): cut into
                // key-range parts at L2's table boundaries and merged side
                // by side, as `classic`'s subcompactions are, it keeps
                // both cores busy (with one thread per merge, compactions
                // kept 0.74 threads busy on average at `vlsm-paper`'s
                // steady state, the L1 → L2 merges 0.52).
                let group = Task::new(TaskKind::LEVELED, vec![(1, g1), (2, g2)], 2);
                let cuts = leveled::subcompaction_cuts(
                    &group,
                    env.opts.subcompactions(),
                    self.sst_size_bytes,
                );
                let outputs = if cuts.is_empty() {
                    merge_to_ssts(env, &mut leveled::merged_inputs(&group), &spec)?
                } else {
                    self.counters
                        .l1_l2_split_groups
                        .fetch_add(1, Ordering::Relaxed);
                    leveled::merge_parts(env, &group, &spec, cuts)?
                };
                for m in outputs {
                    written.push(m.id);
                    edit.new_tables.push((2, m));
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            for id in written {
                let _ = env.fs.remove(&env.dir.join(crate::sst::sst_file_name(id)));
            }
            return Err(e);
        }
        Ok(JobOutput::ssd(edit))
    }
}

/// L1 tables and the L2 tables merged with them.
pub type Group = (Vec<Arc<TableHandle>>, Vec<Arc<TableHandle>>);

/// Splits an L1 → L2 task (both lists sorted by key, the L2 list exactly
/// the tables meeting the L1 list) into key-disjoint groups: each L1 table
/// with the L2 tables it meets, groups joined while their ranges meet
/// (sharing an L2 table is the only way they can).
pub fn groups(l1: &[Arc<TableHandle>], l2: &[Arc<TableHandle>]) -> Vec<Group> {
    // Each group with the largest user key of its range.
    let mut out: Vec<(Group, Vec<u8>)> = Vec::new();
    let mut j = 0; // first L2 table not yet given to a group
    for t in l1 {
        let (lo, hi) = (t.smallest_user_key(), t.largest_user_key());
        // L2 tables of earlier groups end before this table can start.
        let mut mine: Vec<Arc<TableHandle>> = Vec::new();
        while j < l2.len() && l2[j].smallest_user_key() <= hi {
            mine.push(Arc::clone(&l2[j]));
            j += 1;
        }
        let mut end = hi.to_vec();
        if let Some(m) = mine.last() {
            end = end.max(m.largest_user_key().to_vec());
        }
        let joins = out.last().is_some_and(|(_, gend)| lo <= gend.as_slice());
        match out.last_mut() {
            Some((g, gend)) if joins => {
                g.0.push(Arc::clone(t));
                g.1.extend(mine);
                if end > *gend {
                    *gend = end;
                }
            }
            _ => out.push(((vec![Arc::clone(t)], mine), end)),
        }
    }
    debug_assert_eq!(j, l2.len(), "L2 inputs beyond the L1 inputs");
    out.into_iter().map(|(g, _)| g).collect()
}

/// The key range of each group of an L1 → L2 task.
fn group_ranges(l1: &[Arc<TableHandle>], l2: &[Arc<TableHandle>]) -> Vec<(Vec<u8>, Vec<u8>)> {
    groups(l1, l2)
        .iter()
        .map(|(a, b)| user_range(a.iter().chain(b.iter())))
        .collect()
}

impl Design for Vlsm {
    fn preset(&self) -> Preset {
        Preset::Vlsm
    }

    fn flush(&self, env: &JobEnv, mem: &Arc<MemTable>) -> Result<JobOutput> {
        let l1: &[Arc<TableHandle>] = env.version.levels.get(1).map_or(&[], |l| l.as_slice());
        let mem_bytes = mem.size_bytes() as u64;
        let target = flush_target_bytes(mem_bytes, self.sst_size_bytes);
        // One SST per memtable (the paper's literal setting) is not cut at
        // L1 boundaries: it meets all of L1 anyway.
        let l1 = if target < mem_bytes { l1 } else { &[] };
        let mut cutter = L0Cutter::new(target, l1);
        let spec = OutputSpec {
            level: 0,
            target_size_bytes: self.sst_size_bytes,
            grandparents: &[],
            may_drop_tombstones: false,
        };
        let mut edit = VersionEdit::default();
        for m in merge_to_ssts_with(env, &mut mem.iter(), &spec, &mut cutter)? {
            edit.new_tables.push((0, m));
        }
        Ok(JobOutput::ssd(edit))
    }

    fn pick(&self, v: &Version, cx: &PickContext) -> Option<Task> {
        let busy = cx.busy;
        if v.levels[0].len() >= self.l0_max_ssts {
            if let Some(t) = self.pick_l0_chain(v, busy) {
                return Some(t);
            }
        }
        let scores = self.scores(v, busy);
        let mut order: Vec<usize> = (1..scores.len()).filter(|&l| scores[l] >= 1.0).collect();
        order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]));
        let deeper = order.into_iter().find_map(|level| {
            if level == 1 {
                self.pick_l1(v, busy)
            } else {
                self.pick_level(v, busy, level)
            }
        });
        deeper.or_else(|| self.pick_l0_chain(v, busy))
    }

    fn run(&self, env: &JobEnv, task: &Task) -> Result<JobOutput> {
        let from = task.inputs.first().map(|(l, _)| *l);
        if from == Some(1) {
            self.count_l1_task(&env.version, task);
        }
        if task.kind == TaskKind::LEVELED && from == Some(1) {
            self.run_l1(env, task)
        } else if task.output_level == 1 {
            self.run_l0(env, task)
        } else {
            run_merge(env, task, self.sst_size_bytes)
        }
    }

    fn write_control(&self, v: &Version, immutable_count: usize) -> WriteControl {
        let _ = immutable_count; // a full L0 queue holds flushes back instead
        let pending = self.pending_compaction_bytes(v);
        if pending >= self.pending_hard_bytes {
            WriteControl::Stop(StallCause::PendingCompactionStop)
        } else if pending >= self.pending_soft_bytes {
            WriteControl::Delay(StallCause::PendingCompactionSlowdown)
        } else {
            WriteControl::Proceed
        }
    }

    fn headroom(&self, v: &Version, _immutable_count: usize) -> Option<Headroom> {
        // A full L0 queue holds flushes back: room is the queue's free SSTs.
        Some(super::classic::l0_headroom(
            v.levels[0].len(),
            self.l0_max_ssts,
            self.sst_size_bytes,
        ))
    }

    fn flush_blocked(&self, v: &Version) -> Option<StallCause> {
        (v.levels[0].len() >= self.l0_max_ssts).then_some(StallCause::L0Stop)
    }

    fn debt(&self, v: &Version) -> u64 {
        v.levels[0].len() as u64 + (self.pending_compaction_bytes(v) >> 20)
    }

    fn level_targets(&self, v: &Version) -> Option<LevelTargets> {
        Some(leveled::level_targets(
            v,
            Some(self.l0_max_ssts),
            self.l0_max_ssts as u64 * self.sst_size_bytes,
            |l| self.level_target_bytes(l),
        ))
    }

    /// Counters of vLSM's own work (cumulative) and the shape of L1 and L2
    /// now (summed over regions); every value a number.
    fn stats(&self, versions: &[Arc<Version>]) -> Vec<(String, String)> {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let (mut l1, mut l1_tables, mut l2, mut good, mut good_tables) = (0u64, 0u64, 0u64, 0, 0);
        for v in versions {
            l1 += v.levels.get(1).map_or(0, |_| v.level_bytes(1));
            l1_tables += v.levels.get(1).map_or(0, |l| l.len() as u64);
            l2 += v.levels.get(2).map_or(0, |_| v.level_bytes(2));
            let (b, n) = self.l1_good(v);
            good += b;
            good_tables += n;
        }
        vec![
            ("vlsm.l1_l2.merges", get(&c.l1_l2_merges)),
            ("vlsm.l1_l2.window_merges", get(&c.l1_l2_window_merges)),
            ("vlsm.l1_l2.moves", get(&c.l1_l2_moves)),
            ("vlsm.l1_l2.l1_bytes", get(&c.l1_l2_l1_bytes)),
            ("vlsm.l1_l2.l1_good_bytes", get(&c.l1_l2_l1_good_bytes)),
            ("vlsm.l1_l2.l2_bytes", get(&c.l1_l2_l2_bytes)),
            ("vlsm.l1_l2.random_l2_bytes", get(&c.l1_l2_random_l2_bytes)),
            ("vlsm.l1_l2.split_groups", get(&c.l1_l2_split_groups)),
            ("vlsm.l0_l1.good_tables", get(&c.l0_l1_good_tables)),
            ("vlsm.l0_l1.good_bytes", get(&c.l0_l1_good_bytes)),
            ("vlsm.l0_l1.poor_tables", get(&c.l0_l1_poor_tables)),
            ("vlsm.l0_l1.poor_bytes", get(&c.l0_l1_poor_bytes)),
            ("vlsm.l1.bytes", l1 as f64),
            ("vlsm.l1.tables", l1_tables as f64),
            ("vlsm.l1.good_bytes", good as f64),
            ("vlsm.l1.good_tables", good_tables as f64),
            ("vlsm.l2.bytes", l2 as f64),
            ("vlsm.f", self.growth_factor as f64),
            ("vlsm.phi", self.phi as f64),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
    }
}
