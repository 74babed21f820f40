//! The RangeTab picker (RangeKV §III-C-2/3), pure over a version and a
//! [`PickContext`]: the three triggers, the four selection steps, and the
//! leveled compactions of the SSD levels, in this order:
//!
//! 0. **An SSD level past its target** (ours; not with the faithful
//!    picker): a leveled compaction whose score is at least
//!    [`L1_OVERDUE_SCORE`] goes first while no RangeTab has both buffers
//!    sealed (none of its flushes waits). The spec's order puts step 1
//!    first; with one compaction thread and writes going on some buffer
//!    is nearly always sealed, so that starves L1 → L2 for good: L1 grew
//!    to 2.1–2.5 GB against its 400 MiB target in a `medium` fill, every
//!    merge rewrites its RangeTab's share of L1, so each cost more than
//!    the last, and no steady state was ever reached. Measured (`medium`
//!    fill, alternated binaries, two runs each): step 1 first 27.7 / 28.2 K
//!    ops/s, SSD write-amp 7.4; this step at score ≥ 2: 34.3–46.1 K; at
//!    score ≥ 1 (the constant): 47.6 / 48.0 K, write-amp 4.3–4.4.
//! 1. **β, step 1**: a RangeTab with a sealed buffer — one a flush sealed
//!    because it passed β or because the next chunk did not fit (every
//!    sealed buffer is a candidate, or one sealed below β would sit there
//!    while its sibling fills and the flush blocks). A RangeTab with both
//!    buffers sealed first (ours, not with the faithful picker: the flush
//!    waits on it), then highest fill first. The RangeTab's sealed
//!    buffers (its oldest) merge into L1. (Highest fill alone left the
//!    RangeTab a flush waited on behind the other sealed ones: at the
//!    1/16 setup's 64 RangeTabs, a 1.32 s `pm-full` stall that ended
//!    with the last of 43 merges in a row.)
//! 2. **Leveled**: an L1+ level whose score is ≥ 1 (classic scores with
//!    L1 = `l1_size_bytes`, the PM size in the benchmark: flattened).
//! 3. **α, step 2** (trigger: average write-buffer fill ≥ α): among
//!    RangeTabs whose write buffer is ≥ α full and whose other buffer is
//!    init, the one with the most bytes per overlapped L1 table.
//! 4. **μ, step 3** (trigger: low load and average fill ≥ μ, no RangeTab
//!    ≥ α): a random RangeTab filled in (μ, α), grown over adjacent such
//!    RangeTabs, the fuller neighbour first, while the total stays within
//!    γ × capacity ("as much data as possible"; with γ = 2 and μ = 0.6 at
//!    most three fit). "Random" is a PRNG seeded by the version's
//!    generation, so the picker stays a function of its inputs.
//! 5. Otherwise nothing.
//!
//! `Options::rangetab_faithful_picker` selects the paper's picker as
//! written instead: it takes sealed buffers only (the paper merges a
//! buffer once it is in compaction state), step 1 only those past β,
//! step 2 sealed ones at α, step 3 sealed ones in (μ, α). A buffer sealed
//! below α because the next chunk did not fit is then picked by no step
//! unless the average reaches α or the load drops: its sibling fills, the
//! flush waits, and after a minute merges the RangeTab into L1 itself.
//! Steps 2 and 3 of the sound picker (the default) take write buffers
//! instead, and every sealed buffer is a step-1 candidate.
//!
//! Steps 2 and 3 take write buffers: the task lists them in
//! [`MergePlan::seal`] and the job seals them (an edit) before merging.
//! They are not picked while a flush runs (the flush could append to the
//! buffer first, making the task stale). "Low load": the admitted write
//! rate of the last second is at most `low_load_fraction` of its peak
//! over the last minute (an idle database is at low load).

use std::collections::HashSet;
use std::sync::Arc;

use super::layout::{Buf, RtView, State};
use crate::design::classic::Classic;
use crate::design::leveled::user_range;
use crate::design::{Design, PickContext, Task, TaskKind};
use crate::version::{TableHandle, Version};

/// Step 1: sealed buffers (β).
pub const BETA: TaskKind = TaskKind::new("rt-beta");
/// Step 2: the RangeTab with the most bytes per overlapped L1 table (α).
pub const ALPHA: TaskKind = TaskKind::new("rt-alpha");
/// Step 3: adjacent RangeTabs under low load (μ, γ).
pub const MU: TaskKind = TaskKind::new("rt-mu");
/// `compact_range` over L0: every buffer of the RangeTabs it touches.
pub const MANUAL: TaskKind = TaskKind::new("rt-manual");

/// The kinds of RangeTab merges.
pub const MERGE_KINDS: [TaskKind; 4] = [BETA, ALPHA, MU, MANUAL];

/// The thresholds.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// β.
    pub beta: f64,
    /// α.
    pub alpha: f64,
    /// μ.
    pub mu: f64,
    /// γ.
    pub gamma: f64,
    /// Low load: rate ≤ this × peak.
    pub low_load_fraction: f64,
    /// The paper's picker as written (module docs).
    pub faithful: bool,
}

/// What a RangeTab merge takes, carried from the picker to the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergePlan {
    /// The RangeTabs.
    pub rangetabs: Vec<u32>,
    /// Every buffer merged, `(r, slot)`.
    pub buffers: Vec<(u32, u8)>,
    /// Write buffers to seal before the merge: `(r, slot, table id)`.
    pub seal: Vec<(u32, u8, u64)>,
}

impl MergePlan {
    /// The plan of a RangeTab merge task.
    pub fn of(task: &Task) -> Option<&MergePlan> {
        task.plan::<MergePlan>()
    }
}

fn busy(cx: &PickContext, t: &Arc<TableHandle>) -> bool {
    cx.busy.contains(&t.meta.id)
}

/// Whether the engine is at low load.
pub fn low_load(th: &Thresholds, cx: &PickContext) -> bool {
    cx.write_bytes_per_sec <= th.low_load_fraction * cx.write_bytes_per_sec_peak
}

/// Average write-buffer fill over all RangeTabs (the trigger ratio).
pub fn average_ratio(rt: &RtView) -> f64 {
    let n = rt.layout.count;
    (0..n).map(|r| rt.ratio(r)).sum::<f64>() / f64::from(n.max(1))
}

/// A merge of the tables of `bufs` (all in L0) with the L1 tables they
/// overlap; `None` if one of those is busy.
fn merge_task(
    v: &Version,
    cx: &PickContext,
    kind: TaskKind,
    bufs: &[&Buf],
    seal: Vec<(u32, u8, u64)>,
) -> Option<Task> {
    let tables: Vec<Arc<TableHandle>> = bufs.iter().filter_map(|b| b.table.clone()).collect();
    if tables.is_empty() || tables.iter().any(|t| busy(cx, t)) {
        return None;
    }
    let (lo, hi) = user_range(&tables);
    let l1 = v.overlapping(1, Some(&lo), Some(&hi));
    if l1.iter().any(|t| busy(cx, t)) {
        return None;
    }
    let (glo, ghi) = user_range(tables.iter().chain(l1.iter()));
    let mut rangetabs: Vec<u32> = bufs.iter().map(|b| b.r).collect();
    rangetabs.dedup();
    Some(Task {
        grandparents: v.overlapping(2, Some(&glo), Some(&ghi)),
        plan: Some(Arc::new(MergePlan {
            rangetabs,
            buffers: bufs.iter().map(|b| (b.r, b.slot)).collect(),
            seal,
        })),
        ..Task::new(kind, vec![(0, tables), (1, l1)], 1)
    })
}

/// The sealed buffers of `r` that lead its age order (the oldest ones).
fn sealed_prefix(rt: &RtView, r: u32) -> Vec<&Buf> {
    rt.filled(r)
        .into_iter()
        .take_while(|b| b.rec.state == State::Sealed)
        .collect()
}

/// True if both buffers of `r` are sealed: a flush with a chunk for `r`
/// waits until one of them is merged.
fn blocked(rt: &RtView, r: u32) -> bool {
    rt.pair(r).into_iter().all(|b| b.rec.state == State::Sealed)
}

/// Step 1 (`beta`: only buffers past β, the faithful picker; 0: every
/// sealed buffer). `blocked_first`: a RangeTab a flush waits on goes
/// before any other (the sound picker).
pub fn pick_beta(
    rt: &RtView,
    v: &Version,
    cx: &PickContext,
    beta: f64,
    blocked_first: bool,
) -> Option<Task> {
    let cap = rt.layout.capacity_bytes as f64;
    let mut cands: Vec<(bool, f64, u32)> = (0..rt.layout.count)
        .filter_map(|r| {
            let sealed = sealed_prefix(rt, r);
            let first = sealed.first()?;
            let ratio = first.used() as f64 / cap;
            (ratio >= beta).then_some((blocked_first && blocked(rt, r), ratio, r))
        })
        .collect();
    cands.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.total_cmp(&a.1)).then(a.2.cmp(&b.2)));
    cands
        .into_iter()
        .find_map(|(_, _, r)| merge_task(v, cx, BETA, &sealed_prefix(rt, r), Vec::new()))
}

/// A write buffer steps 2–3 may take: `r` has no sealed buffer, its other
/// buffer is init, and its table is not busy.
fn takeable<'a>(rt: &'a RtView, r: u32, cx: &PickContext) -> Option<&'a Buf> {
    let [a, b] = rt.pair(r);
    let (w, other) = match (a.rec.state, b.rec.state) {
        (State::Write, State::Init) => (a, b),
        (State::Init, State::Write) => (b, a),
        _ => return None,
    };
    debug_assert_eq!(other.rec.state, State::Init);
    w.table.as_ref().filter(|t| !busy(cx, t))?;
    Some(w)
}

fn seal_of(b: &Buf) -> Vec<(u32, u8, u64)> {
    b.table
        .as_ref()
        .map(|t| vec![(b.r, b.slot, t.meta.id)])
        .unwrap_or_default()
}

/// Step 2 (when the average fill is at least α).
pub fn pick_alpha(th: &Thresholds, rt: &RtView, v: &Version, cx: &PickContext) -> Option<Task> {
    if cx.flush_running || average_ratio(rt) < th.alpha {
        return None;
    }
    let mut cands: Vec<(f64, u32)> = (0..rt.layout.count)
        .filter(|&r| rt.ratio(r) >= th.alpha)
        .filter_map(|r| {
            let w = takeable(rt, r, cx)?;
            let t = w.table.as_ref()?;
            let l1 = v
                .overlapping(1, Some(t.smallest_user_key()), Some(t.largest_user_key()))
                .len();
            Some((w.used() as f64 / l1.max(1) as f64, r))
        })
        .collect();
    cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    cands.into_iter().find_map(|(_, r)| {
        let w = takeable(rt, r, cx)?;
        merge_task(v, cx, ALPHA, &[w], seal_of(w))
    })
}

/// A step of xorshift64*.
fn next_random(x: &mut u64) -> u64 {
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Step 3 (low load, average fill at least μ, no RangeTab at α).
pub fn pick_mu(th: &Thresholds, rt: &RtView, v: &Version, cx: &PickContext) -> Option<Task> {
    let n = rt.layout.count;
    if cx.flush_running || !low_load(th, cx) || average_ratio(rt) < th.mu {
        return None;
    }
    if (0..n).any(|r| rt.ratio(r) >= th.alpha) {
        return None;
    }
    let is_cand = |r: u32| {
        let x = rt.ratio(r);
        x > th.mu && x < th.alpha && takeable(rt, r, cx).is_some()
    };
    let cands: Vec<u32> = (0..n).filter(|&r| is_cand(r)).collect();
    if cands.is_empty() {
        return None;
    }
    let mut seed = v.generation.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let start = cands[(next_random(&mut seed) % cands.len() as u64) as usize];
    let used = |r: u32| rt.write_buf(r).map_or(0, Buf::used);
    let limit = (th.gamma * rt.layout.capacity_bytes as f64) as u64;
    let (mut a, mut b) = (start, start);
    let mut total = used(start);
    loop {
        let left = (a > 0 && is_cand(a - 1)).then(|| a - 1);
        let right = (b + 1 < n && is_cand(b + 1)).then_some(b + 1);
        let best = [left, right]
            .into_iter()
            .flatten()
            .filter(|&r| total + used(r) <= limit)
            .max_by_key(|&r| (used(r), std::cmp::Reverse(r)));
        let Some(r) = best else { break };
        if r < a {
            a = r;
        } else {
            b = r;
        }
        total += used(r);
    }
    let bufs: Vec<&Buf> = (a..=b).filter_map(|r| takeable(rt, r, cx)).collect();
    let seal = bufs.iter().flat_map(|w| seal_of(w)).collect();
    merge_task(v, cx, MU, &bufs, seal)
}

/// The leveled L1+ pick on `v` without its L0, with its best score.
pub fn pick_leveled(leveled: &Classic, v: &Version, cx: &PickContext) -> Option<(f64, Task)> {
    let mut ssd = Version {
        design_state: Default::default(),
        level_views: Vec::new(),
        ..v.clone()
    };
    ssd.levels[0].clear();
    let scores = leveled.scores(&ssd, cx.busy);
    let best = scores.iter().copied().fold(0.0f64, f64::max);
    let task = Design::pick(leveled, &ssd, cx)?;
    Some((best, task))
}

/// An SSD level whose score (bytes / target) is at least this goes
/// before step 1 while no RangeTab is blocked (module docs, step 0).
pub const L1_OVERDUE_SCORE: f64 = 1.0;

/// True if some RangeTab has both buffers sealed: its flushes wait.
pub fn any_blocked(rt: &RtView) -> bool {
    (0..rt.layout.count).any(|r| blocked(rt, r))
}

/// The next task (module docs).
pub fn pick(
    th: &Thresholds,
    leveled: &Classic,
    rt: &RtView,
    v: &Version,
    cx: &PickContext,
) -> Option<Task> {
    let beta = if th.faithful { th.beta } else { 0.0 };
    let level = pick_leveled(leveled, v, cx).filter(|(score, _)| *score >= 1.0);
    if let Some((score, t)) = &level {
        if !th.faithful && *score >= L1_OVERDUE_SCORE && !any_blocked(rt) {
            return Some(t.clone());
        }
    }
    if let Some(t) = pick_beta(rt, v, cx, beta, !th.faithful) {
        return Some(t);
    }
    if let Some((_, t)) = level {
        return Some(t);
    }
    if th.faithful {
        return pick_sealed(th, rt, v, cx);
    }
    pick_alpha(th, rt, v, cx).or_else(|| pick_mu(th, rt, v, cx))
}

/// Steps 2–3 of the faithful picker: sealed buffers only. The ratio of a
/// RangeTab is its oldest sealed buffer's fill; the triggers average it
/// over all RangeTabs.
fn pick_sealed(th: &Thresholds, rt: &RtView, v: &Version, cx: &PickContext) -> Option<Task> {
    let cap = rt.layout.capacity_bytes as f64;
    let n = rt.layout.count;
    let ratio = |r: u32| {
        sealed_prefix(rt, r)
            .first()
            .map_or(0.0, |b| b.used() as f64 / cap)
    };
    let avg = (0..n).map(ratio).sum::<f64>() / f64::from(n.max(1));
    if avg >= th.alpha {
        let mut cands: Vec<(f64, u32)> = (0..n)
            .filter(|&r| ratio(r) >= th.alpha)
            .filter_map(|r| {
                let b = *sealed_prefix(rt, r).first()?;
                let t = b.table.as_ref()?;
                let l1 = v
                    .overlapping(1, Some(t.smallest_user_key()), Some(t.largest_user_key()))
                    .len();
                Some((b.used() as f64 / l1.max(1) as f64, r))
            })
            .collect();
        cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        if let Some(t) = cands
            .into_iter()
            .find_map(|(_, r)| merge_task(v, cx, ALPHA, &sealed_prefix(rt, r), Vec::new()))
        {
            return Some(t);
        }
    }
    if low_load(th, cx) && avg >= th.mu && !(0..n).any(|r| ratio(r) >= th.alpha) {
        let bufs: Vec<&Buf> = (0..n)
            .filter(|&r| ratio(r) > th.mu && ratio(r) < th.alpha)
            .flat_map(|r| sealed_prefix(rt, r))
            .collect();
        let limit = (th.gamma * cap) as u64;
        let mut total = 0;
        let mut take: Vec<&Buf> = Vec::new();
        for b in bufs {
            if take.last().is_some_and(|l| l.r + 1 < b.r && l.r != b.r) {
                break; // adjacent RangeTabs only
            }
            if total + b.used() > limit {
                break;
            }
            total += b.used();
            take.push(b);
        }
        return merge_task(v, cx, MU, &take, Vec::new());
    }
    None
}

/// `compact_range` of L0 over `[lo, hi]`: every filled buffer of each
/// RangeTab with a table overlapping the range, write buffers sealed first.
pub fn pick_manual(
    rt: &RtView,
    v: &Version,
    cx: &PickContext,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
) -> Option<Task> {
    let rs: HashSet<u32> = rt
        .bufs
        .iter()
        .filter(|b| b.table.as_ref().is_some_and(|t| t.overlaps(lo, hi)))
        .map(|b| b.r)
        .collect();
    let mut rs: Vec<u32> = rs.into_iter().collect();
    rs.sort_unstable();
    let bufs: Vec<&Buf> = rs.iter().flat_map(|&r| rt.filled(r)).collect();
    let seal = bufs
        .iter()
        .filter(|b| b.rec.state == State::Write)
        .flat_map(|b| seal_of(b))
        .collect();
    merge_task(v, cx, MANUAL, &bufs, seal)
}
