//! The right-angle side picker (TriangleKV §3.2), pure over a [`Version`].
//!
//! 1. The L1 tables cut the key space into consecutive ranges: each
//!    table's own range and the gaps between tables ([`L1Ranges`]).
//! 2. A side starts at the range holding the rotation cursor (where the
//!    previous side ended) and takes ranges while the L0 data in them —
//!    the live entries of every row, estimated from the rows' metadata
//!    arrays — stays within `side_max_bytes` (the paper's AF·S_sst), until
//!    it holds at least `side_min_bytes` (½·AF·S_sst) or reaches the end of
//!    the key space. A gap between L1 tables too big on its own is cut at a
//!    row key; a table's range never is (the table would be rewritten by
//!    two sides in one rotation), so one table range may exceed the bound.
//!    A range whose L1 table is busy (an L1→L2 compaction) ends the side,
//!    or is stepped over if the side is still empty.
//! 3. The side takes every row (all of them, so the consumed ranges stay
//!    a prefix in age) and the L1 tables of its ranges that hold L0 data
//!    (the others are left alone; outputs are cut around them).
//! 4. The cursor moves to the end of the side; at the end of the key space
//!    it wraps to the start, so sides rotate through the whole key space.
//!
//! The side is only picked while the container holds at least its limit
//! (by default 60% of the PM left after two WALs and two rows) or PM runs
//! short; L1→L2 and deeper compactions compete by score (classic leveled
//! scores with L1 = `l1_size_bytes`).

use std::collections::HashSet;
use std::sync::Arc;

use crate::design::{Task, TaskKind};
use crate::version::{TableHandle, Version};

use super::container::{Container, ContainerState, L1Ranges, RowSizer, SidePlan};
use super::rowtable::RowTable;

/// Readers of every row of `v` (newest first), or `None` if one fails to
/// open (the failure surfaces on the read path).
pub fn open_rows(c: &Container, v: &Version) -> Option<Vec<Arc<RowTable>>> {
    v.levels[0].iter().map(|t| c.row(&t.meta).ok()).collect()
}

/// The next right-angle side of `v`, if the container needs one.
pub fn pick_right_angle(c: &Container, v: &Version, busy: &HashSet<u64>) -> Option<Task> {
    let rows = &v.levels[0];
    if rows.is_empty() || rows.iter().any(|t| busy.contains(&t.meta.id)) {
        return None;
    }
    if c.l0_score(v) < 1.0 {
        return None;
    }
    let state = ContainerState::of(v).ok()?;
    let readers = open_rows(c, v)?;
    let sizer = RowSizer::new(readers, &state);
    let through = rows.iter().map(|t| t.meta.seq_max).max()?;
    let cursor = state.cursor.clone().unwrap_or_default();
    let plan = plan_side(
        v,
        busy,
        &sizer,
        &cursor,
        c.cfg.side_min_bytes,
        c.cfg.side_max_bytes,
        through,
    )?;
    Some(side_task(
        v,
        TaskKind::RightAngle,
        rows.clone(),
        &sizer,
        plan,
    ))
}

/// Chooses the key range of a side starting at `cursor` (steps 1, 2, 4).
pub fn plan_side(
    v: &Version,
    busy: &HashSet<u64>,
    sizer: &RowSizer,
    cursor: &[u8],
    min_bytes: u64,
    max_bytes: u64,
    through: u64,
) -> Option<SidePlan> {
    let l1 = L1Ranges::of(v);
    let mut i = l1.find(cursor);
    let mut lo: Vec<u8> = cursor.to_vec();
    let mut hi: Option<Vec<u8>>;
    let mut acc = 0u64;
    loop {
        let (_, rhi, table) = &l1.ranges[i];
        if table.is_some_and(|t| busy.contains(&t.meta.id)) {
            if acc > 0 {
                hi = Some(lo_of(&l1, i));
                break;
            }
            // Step over it (wrap at the end).
            i += 1;
            if i >= l1.ranges.len() {
                return None;
            }
            lo = lo_of(&l1, i);
            continue;
        }
        let from = if acc == 0 { lo.clone() } else { lo_of(&l1, i) };
        let bytes = sizer.bytes(&from, rhi.as_deref());
        if acc + bytes > max_bytes {
            if acc >= min_bytes {
                hi = Some(from);
                break;
            }
            if table.is_some() {
                // Never cut an L1 table's range: the table would be
                // rewritten again by the next side.
                acc += bytes;
                hi = rhi.clone();
                break;
            }
            // Cut a gap at about the upper bound.
            match sizer.split(&from, rhi.as_deref(), max_bytes - acc) {
                Some(cut) => {
                    acc += sizer.bytes(&from, Some(&cut));
                    hi = Some(cut);
                }
                None => {
                    acc += bytes;
                    hi = rhi.clone();
                }
            }
            break;
        }
        acc += bytes;
        hi = rhi.clone();
        if acc >= min_bytes || hi.is_none() {
            break;
        }
        i += 1;
    }
    Some(SidePlan {
        lo,
        next_cursor: hi.clone(),
        hi,
        through,
        compactor_seq: 0,
        victim_bytes: acc,
    })
}

fn lo_of(l1: &L1Ranges<'_>, i: usize) -> Vec<u8> {
    l1.ranges[i].0.clone()
}

/// The task of a side: the rows it takes, the L1 tables of its range that
/// hold L0 data, and L2 grandparents for cutting (step 3).
pub fn side_task(
    v: &Version,
    kind: TaskKind,
    rows: Vec<Arc<TableHandle>>,
    sizer: &RowSizer,
    plan: SidePlan,
) -> Task {
    let mut l1: Vec<Arc<TableHandle>> = Vec::new();
    let lo = plan.lo.as_slice();
    for t in v.overlapping(1, Some(lo), None) {
        if plan
            .hi
            .as_deref()
            .is_some_and(|h| t.smallest_user_key() >= h)
        {
            break;
        }
        let a = t.smallest_user_key().max(lo);
        let end = super::container::successor(t.largest_user_key());
        let b = match plan.hi.as_deref() {
            Some(h) if h < end.as_slice() => h,
            _ => end.as_slice(),
        };
        if sizer.bytes(a, Some(b)) > 0 {
            l1.push(t);
        }
    }
    let gp_lo = l1
        .first()
        .map_or(lo, |t| t.smallest_user_key().min(lo))
        .to_vec();
    let gp_hi: Option<Vec<u8>> = match (&plan.hi, l1.last()) {
        (None, _) => None,
        (Some(h), Some(t)) => Some(h.as_slice().max(t.largest_user_key()).to_vec()),
        (Some(h), None) => Some(h.clone()),
    };
    let grandparents = v.overlapping(2, Some(&gp_lo), gp_hi.as_deref());
    Task {
        kind,
        inputs: vec![(0, rows), (1, l1)],
        output_level: 1,
        grandparents,
        cursor: Some((0, plan.encode())),
    }
}
