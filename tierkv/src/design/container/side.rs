//! Side tasks, shared by the PM container designs: the rows a side reads,
//! the task a side plan becomes (the rows, the L1 tables of its range
//! holding L0 data, the L2 grandparents), and manual sides over a key
//! range. Which key range to drain next is each design's own choice
//! (`triangle`: right-angle sides rotating through the key space;
//! `matrix`: columns of the compactor).

use std::collections::HashSet;
use std::sync::Arc;

use crate::design::{Task, TaskKind};
use crate::version::{TableHandle, Version};

use super::rowtable::RowTable;
use super::{successor, Container, ContainerState, RowSizer, SidePlan};

/// Readers of every row of `v` (newest first), or `None` if one fails to
/// open (the failure surfaces on the read path).
pub fn open_rows(c: &Container, v: &Version) -> Option<Vec<Arc<RowTable>>> {
    v.levels[0].iter().map(|t| c.row(&t.meta).ok()).collect()
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
        let end = successor(t.largest_user_key());
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
        grandparents,
        plan: Some(Arc::new(plan)),
        ..Task::new(kind, vec![(0, rows), (1, l1)], 1)
    }
}

/// A manual side over the user-key range `[lo, hi]` of every row.
pub fn pick_manual_side(
    c: &Container,
    v: &Version,
    busy: &HashSet<u64>,
    kind: TaskKind,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
) -> Option<Task> {
    let rows = &v.levels[0];
    if rows.is_empty() || rows.iter().any(|t| busy.contains(&t.meta.id)) {
        return None;
    }
    let state = ContainerState::of(v).ok()?;
    let readers = open_rows(c, v)?;
    let sizer = RowSizer::new(readers, &state);
    let lo = lo.unwrap_or_default().to_vec();
    let hi = hi.map(successor);
    let l1_busy = v
        .overlapping(1, Some(&lo), hi.as_deref())
        .iter()
        .any(|t| busy.contains(&t.meta.id));
    if l1_busy {
        return None;
    }
    let victim_bytes = sizer.bytes(&lo, hi.as_deref());
    let plan = SidePlan {
        lo,
        hi,
        through: rows.iter().map(|t| t.meta.seq_max).max()?,
        next_cursor: state.cursor.clone(),
        compactor_seq: state.compactor_seq,
        victim_bytes,
    };
    Some(side_task(v, kind, rows.clone(), &sizer, plan))
}
