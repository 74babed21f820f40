//! Leveled SSD levels, shared by every design whose levels below L0 (or
//! below its PM tier) are RocksDB-style: level targets, scores, the
//! pending-compaction estimate, the min-overlap pick, manual ranges, the
//! merge job and the flush into one L0 SST. `classic` is these with
//! RocksDB's L0 triggers; `vlsm` replaces L0 and L1; the PM containers
//! replace L0.
//!
//! Everything here is a pure function of a [`Version`] (and the busy set),
//! except [`run_merge`] and [`flush_to_l0_sst`], which write SSTs.

use std::collections::HashSet;
use std::sync::Arc;

use crate::compaction::{
    merge_to_ssts, merge_to_ssts_with, Cutter, JobEnv, KeyRange, OutputSpec,
    MAX_GRANDPARENT_OVERLAP_FACTOR,
};
use crate::error::Result;
use crate::iter::{InternalIterator, MergingIterator};
use crate::key;
use crate::memtable::MemTable;
use crate::version::edit::{TableMeta, VersionEdit};
use crate::version::{table_iter, LevelIterator, TableHandle, Version};

use super::{JobOutput, LevelTargets, Task, TaskKind};

/// Bytes of `level` not being compacted.
pub fn idle_bytes(v: &Version, busy: &HashSet<u64>, level: usize) -> u64 {
    v.levels[level]
        .iter()
        .filter(|t| !busy.contains(&t.meta.id))
        .map(|t| t.meta.size_bytes)
        .sum()
}

/// Scores of the levels below L0: idle bytes / `target(level)`, 0 for the
/// last level; `scores[0]` is left at 0 for the design to set.
pub fn scores_below_l0(
    v: &Version,
    busy: &HashSet<u64>,
    target: impl Fn(usize) -> u64,
) -> Vec<f64> {
    let n = v.level_count();
    let mut scores = vec![0.0; n];
    for (level, score) in scores.iter_mut().enumerate().take(n - 1).skip(1) {
        *score = idle_bytes(v, busy, level) as f64 / target(level).max(1) as f64;
    }
    scores
}

/// RocksDB's estimate of the bytes compaction still has to rewrite, with
/// `l0_pending` bytes of L0 counted as pending (and carried into L1), and
/// `target(level)` the target of each level ≥ 1.
pub fn pending_compaction_bytes(
    v: &Version,
    l0_pending: u64,
    target: impl Fn(usize) -> u64,
) -> u64 {
    let n = v.level_count();
    let mut pending = l0_pending;
    let mut carried = l0_pending;
    for level in 1..n.saturating_sub(1) {
        let bytes = v.level_bytes(level) + carried;
        let target = target(level);
        if bytes > target {
            let excess = bytes - target;
            let ratio = v.level_bytes(level + 1) as f64 / bytes as f64;
            pending = pending.saturating_add((excess as f64 * (ratio + 1.0)) as u64);
            carried = excess;
        } else {
            carried = 0;
        }
    }
    pending
}

/// Level `level`'s target when L1 is `l1_bytes` and each level is
/// `multiplier` times the one above.
pub fn geometric_target(l1_bytes: u64, multiplier: u64, level: usize) -> u64 {
    let mut t = l1_bytes;
    for _ in 1..level {
        t = t.saturating_mul(multiplier);
    }
    t
}

/// The [`LevelTargets`] of a design over `v`'s levels: L0 by
/// `l0_tables` (if it counts tables) and `l0_bytes`, each level ≥ 1 by
/// `target(level)`.
pub fn level_targets(
    v: &Version,
    l0_tables: Option<usize>,
    l0_bytes: u64,
    target: impl Fn(usize) -> u64,
) -> LevelTargets {
    let mut bytes = vec![l0_bytes];
    bytes.extend((1..v.level_count()).map(target));
    LevelTargets { l0_tables, bytes }
}

/// Ln → Ln+1 (n ≥ 1): the idle table with the smallest ratio of overlapped
/// next-level bytes to its own size (RocksDB's `kMinOverlappingRatio`),
/// moved down without rewriting when it overlaps nothing below (and not
/// too much of the level after).
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
    let kind = if next.is_empty() && gp_bytes <= sst_size_bytes * MAX_GRANDPARENT_OVERLAP_FACTOR {
        TaskKind::TRIVIAL_MOVE
    } else {
        TaskKind::LEVELED
    };
    let cursor = Some((level, table.meta.largest.clone()));
    Some(Task {
        grandparents,
        cursor,
        ..Task::new(
            kind,
            vec![(level, vec![table]), (level + 1, next)],
            level + 1,
        )
    })
}

/// Manual compaction: every table of `level` overlapping `[lo, hi]` (all
/// of L0) plus the overlapped tables of the next level.
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
        grandparents: v.overlapping(level + 2, Some(&ga), Some(&gb)),
        ..Task::new(
            TaskKind::MANUAL,
            vec![(level, inputs), (level + 1, next)],
            level + 1,
        )
    })
}

/// Runs a merge-and-copy task (or a trivial move) into SSTs of
/// `target_size_bytes` at the task's output level — cut into
/// subcompactions ([`subcompaction_cuts`]) when the options allow more
/// than one and no explicit cutter is given (a cutter is one policy over
/// the whole output).
pub fn run_merge(env: &JobEnv, task: &Task, target_size_bytes: u64) -> Result<JobOutput> {
    run_merge_with(env, task, target_size_bytes, None)
}

/// [`run_merge`] with an explicit cutting policy for the output (`None`:
/// the options' default, [`crate::compaction::cutter_for`]).
pub fn run_merge_with(
    env: &JobEnv,
    task: &Task,
    target_size_bytes: u64,
    cutter: Option<&mut dyn Cutter>,
) -> Result<JobOutput> {
    let mut edit = VersionEdit::default();
    for (level, tables) in &task.inputs {
        for t in tables {
            edit.deleted_tables.push((*level as u32, t.meta.id));
        }
    }
    if let Some((level, c)) = &task.cursor {
        edit.compact_cursors.push((*level as u32, c.clone()));
    }
    if task.kind == TaskKind::TRIVIAL_MOVE {
        for (_, tables) in &task.inputs {
            for t in tables {
                edit.new_tables
                    .push((task.output_level as u32, t.meta.clone()));
            }
        }
        return Ok(JobOutput {
            edit,
            written: Default::default(),
        });
    }
    let spec = OutputSpec {
        level: task.output_level,
        target_size_bytes,
        grandparents: &task.grandparents,
        may_drop_tombstones: true,
    };
    let outputs = match cutter {
        Some(c) => merge_to_ssts_with(env, &mut merged_inputs(task), &spec, c)?,
        None => {
            let cuts = subcompaction_cuts(task, env.opts.subcompactions(), target_size_bytes);
            if cuts.is_empty() {
                merge_to_ssts(env, &mut merged_inputs(task), &spec)?
            } else {
                merge_parts(env, task, &spec, cuts)?
            }
        }
    };
    let written = super::Written::ssd_tables(&outputs);
    for m in outputs {
        edit.new_tables.push((task.output_level as u32, m));
    }
    debug_assert!(edit.new_tables.windows(2).all(|w| key::compare_internal(
        &w[0].1.largest,
        &w[1].1.smallest
    )
    .is_lt()));
    Ok(JobOutput { edit, written })
}

/// Flushes a memtable into one L0 SST (the classic flush target).
pub fn flush_to_l0_sst(env: &JobEnv, mem: &Arc<MemTable>) -> Result<JobOutput> {
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
    Ok(JobOutput::ssd(edit))
}

/// Smallest and largest user key over some tables.
pub fn user_range<'a>(
    tables: impl IntoIterator<Item = &'a Arc<TableHandle>>,
) -> (Vec<u8>, Vec<u8>) {
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

/// True if any of `tables` meets the user-key range `[lo, hi]`.
pub fn overlaps_any(tables: &[&Arc<TableHandle>], lo: &[u8], hi: &[u8]) -> bool {
    tables
        .iter()
        .any(|t| !(t.largest_user_key() < lo || t.smallest_user_key() > hi))
}

/// Tables sorted by smallest key.
pub fn sorted_by_key(mut tables: Vec<Arc<TableHandle>>) -> Vec<Arc<TableHandle>> {
    tables.sort_by(|a, b| a.smallest_user_key().cmp(b.smallest_user_key()));
    tables
}

/// The merged stream of every input of `task`, from its first key.
pub(crate) fn merged_inputs(task: &Task) -> MergingIterator {
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
    MergingIterator::new(children)
}

/// The user keys at which a merge is cut into subcompactions: at most
/// `k − 1` of them, none if `k` is 1 or the inputs hold less than two
/// output tables (`target_size_bytes`) — threads for small merges cost
/// more than they give.
///
/// The cuts are the first keys of tables of the sorted input level (≥ 1)
/// with the most tables, chosen so that the parts hold about equal bytes
/// of it; the other inputs (L0 tables, a PM design's buffers: each one
/// spanning much of the range) are taken to spread as that level does.
/// Every version of a user key falls in one part, so the dropping rules
/// see them together, and the parts' outputs, in order, are one sorted
/// run: the edit lists them as one merge's.
pub fn subcompaction_cuts(task: &Task, k: usize, target_size_bytes: u64) -> Vec<Vec<u8>> {
    let total: u64 = task
        .inputs
        .iter()
        .flat_map(|(_, ts)| ts.iter())
        .map(|t| t.meta.size_bytes)
        .sum();
    let parts = (total / target_size_bytes.max(1)).min(k as u64) as usize;
    if parts < 2 {
        return Vec::new();
    }
    let Some(run) = task
        .inputs
        .iter()
        .filter(|(level, ts)| *level >= 1 && ts.len() >= 2)
        .max_by_key(|(_, ts)| ts.len())
        .map(|(_, ts)| ts)
    else {
        return Vec::new();
    };
    let run_bytes: u64 = run.iter().map(|t| t.meta.size_bytes).sum();
    let mut cuts: Vec<Vec<u8>> = Vec::with_capacity(parts - 1);
    let mut acc = 0u64;
    for (i, t) in run.iter().enumerate() {
        // Cut before `t` once the tables before it hold the next share.
        let share = run_bytes as u128 * (cuts.len() as u128 + 1) / parts as u128;
        if i > 0 && u128::from(acc) >= share && cuts.len() + 1 < parts {
            let key = t.smallest_user_key();
            if cuts.last().is_none_or(|c| c.as_slice() < key) {
                cuts.push(key.to_vec());
            }
        }
        acc += t.meta.size_bytes;
    }
    cuts
}

/// Runs `task`'s merge as subcompactions cut at `cuts`, each part on a
/// thread of its own with its own cutter and output tables
/// ([`crate::compaction::run_parts`]); the outputs in key order.
pub(crate) fn merge_parts(
    env: &JobEnv,
    task: &Task,
    spec: &OutputSpec,
    cuts: Vec<Vec<u8>>,
) -> Result<Vec<TableMeta>> {
    crate::compaction::run_parts(
        env,
        crate::compaction::ranges_between(cuts)
            .into_iter()
            .map(|(lo, hi)| {
                move || {
                    let mut part = KeyRange::new(merged_inputs(task), lo, hi);
                    merge_to_ssts(env, &mut part, spec)
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Db, Options, ReadOptions};

    fn table(id: u64, lo: &str, hi: &str, size: u64) -> Arc<TableHandle> {
        crate::version::detached_table(id, lo, hi, size)
    }

    /// One wide table above eight of 10 bytes each: "b0".."b7" below.
    fn task() -> Task {
        let below: Vec<_> = (0..8u64)
            .map(|i| table(10 + i, &format!("b{i}0"), &format!("b{i}9"), 10))
            .collect();
        Task::new(
            TaskKind::LEVELED,
            vec![(1, vec![table(1, "a", "z", 10)]), (2, below)],
            2,
        )
    }

    fn strs(cuts: &[Vec<u8>]) -> Vec<&str> {
        cuts.iter()
            .map(|c| std::str::from_utf8(c).unwrap_or("?"))
            .collect()
    }

    #[test]
    fn cuts_split_the_level_with_most_tables_into_equal_bytes() {
        assert_eq!(strs(&subcompaction_cuts(&task(), 2, 10)), ["b40"]);
        assert_eq!(
            strs(&subcompaction_cuts(&task(), 4, 10)),
            ["b20", "b40", "b60"]
        );
        // At most one part per table of the cut level (8), and per
        // output table's worth of input (90 bytes / 30).
        assert_eq!(subcompaction_cuts(&task(), 64, 10).len(), 7);
        assert_eq!(strs(&subcompaction_cuts(&task(), 4, 30)), ["b30", "b60"]);
    }

    #[test]
    fn small_or_unsplittable_merges_stay_whole() {
        assert!(subcompaction_cuts(&task(), 1, 10).is_empty(), "k = 1");
        assert!(
            subcompaction_cuts(&task(), 4, 50).is_empty(),
            "less than two output tables of input"
        );
        let l0 = Task::new(
            TaskKind::LEVELED,
            vec![
                (0, vec![table(1, "a", "z", 100), table(2, "a", "z", 100)]),
                (1, vec![table(3, "a", "z", 100)]),
            ],
            1,
        );
        assert!(
            subcompaction_cuts(&l0, 4, 10).is_empty(),
            "no sorted input level with two tables to cut at"
        );
    }

    /// Everything `db` holds at `snapshot` (or now), in order.
    fn contents(db: &Db, snapshot: Option<&crate::Snapshot>) -> Vec<(Vec<u8>, Vec<u8>)> {
        let opts = ReadOptions {
            snapshot: snapshot.cloned(),
            ..ReadOptions::default()
        };
        let mut it = db.iter(opts).unwrap_or_else(|e| panic!("iter: {e}"));
        it.seek_to_first();
        let mut out = Vec::new();
        while it.valid() {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.next();
        }
        it.status().unwrap_or_else(|e| panic!("scan: {e}"));
        out
    }

    /// The same writes, compacted with one part and with four, read the
    /// same now and at a snapshot taken halfway (versions a live snapshot
    /// sees survive whichever part they fall in; tombstones go).
    #[test]
    fn subcompactions_keep_exactly_what_one_merge_keeps() {
        let run = |sub: usize| {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let opts = Options {
                memtable_size_bytes: 256 << 10,
                sst_size_bytes: 64 << 10,
                l1_size_bytes: 256 << 10,
                max_subcompactions: sub,
                ..Options::default()
            };
            let db = Db::open(dir.path(), opts).unwrap_or_else(|e| panic!("open: {e}"));
            let mut x = 0x2545_f491_4f6c_dd1du64;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            for i in 0..20000u64 {
                let k = format!("key{:05}", next() % 8000);
                db.put(k.as_bytes(), format!("v{i:07}").repeat(12).as_bytes())
                    .unwrap_or_else(|e| panic!("put: {e}"));
            }
            let snap = db.snapshot();
            for i in 0..20000u64 {
                let k = format!("key{:05}", next() % 8000);
                if i % 3 == 0 {
                    db.delete(k.as_bytes())
                } else {
                    db.put(k.as_bytes(), format!("w{i:07}").repeat(12).as_bytes())
                }
                .unwrap_or_else(|e| panic!("write: {e}"));
            }
            db.compact_range(None, None)
                .unwrap_or_else(|e| panic!("compact: {e}"));
            let now = contents(&db, None);
            let then = contents(&db, Some(&snap));
            drop(snap);
            db.close().unwrap_or_else(|e| panic!("close: {e}"));
            (now, then)
        };
        let one = run(1);
        assert!(!one.0.is_empty() && !one.1.is_empty());
        assert_eq!(run(4), one);
    }
}
