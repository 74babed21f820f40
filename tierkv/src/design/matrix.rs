//! `matrix`: MatrixKV as the TriangleKV paper describes it (seed 000 §2.4)
//! — the baseline the triangle improves on. It shares the PM container,
//! the RowTable format, the hints, the flattened tree and the side job
//! with `triangle` ([`container`](super::container)); only the choice of what to compact
//! differs.
//!
//! * The container's rows are split into a **compactor** — the rows
//!   present when it was last emptied, `seq_max <= compactor_seq` in the
//!   container state — and a **receiver**, the rows flushed since.
//! * When the compactor is empty and the receiver holds the container
//!   limit (by default 60% of the PM left after two WALs and two rows),
//!   the receiver becomes the compactor (recorded by the first column's
//!   edit).
//! * **Column compaction** drains the compactor in key order: a column
//!   starts where the previous one ended and takes the compactor's data
//!   of consecutive L1 ranges; it is cut only at L1 table boundaries, once
//!   it holds 2 × `sst_size_bytes` of L0 data if L1 tables overlap it, or
//!   4 × if none does (MatrixKV's code); inside a long stretch without L1
//!   tables it may cut at any row key. Only compactor rows take part, so
//!   the receiver's data in a compacted key range stays in L0 and is
//!   merged with L1 again later (the extra writes of §2.4.4).
//! * The compacted part of each compactor row is cut off in the MANIFEST
//!   by advancing the row's first-key index (`first_key_index` in the
//!   container state); with the column cursor it determines the consumed
//!   range `[start, cursor)` of every compactor row.

use std::collections::HashSet;
use std::sync::Arc;

use crate::design::container::side::side_task;
use crate::design::container::{
    Container, ContainerDesign, ContainerState, Drain, L1Ranges, RowSizer, SidePlan,
};
use crate::design::{PickContext, Task, TaskKind};
use crate::error::Result;
use crate::options::{Options, Preset};
use crate::storage::pm::PmTier;
use crate::version::{TableHandle, Version};

/// Columns hold this many target SSTs of L0 data when L1 overlaps them.
pub const COLUMN_SSTS_OVERLAPPED: u64 = 2;
/// … and this many when no L1 table does.
pub const COLUMN_SSTS_ALONE: u64 = 4;

/// One column of the compactor merged into L1.
pub const COLUMN: TaskKind = TaskKind::new("column");

/// MatrixKV's drain: columns of the compactor, or an L1+ compaction whose
/// score is at least 1 and above the container's (and 1).
pub struct Columns;

/// The MatrixKV design.
pub type Matrix = ContainerDesign<Columns>;

/// The MatrixKV design on `pm`, sized by `opts`.
pub fn matrix(opts: &Options, pm: Arc<PmTier>) -> Result<Matrix> {
    Matrix::new(opts, pm)
}

impl Drain for Columns {
    const PRESET: Preset = Preset::Matrix;
    const SIDE: TaskKind = COLUMN;

    fn pick(c: &Container, v: &Version, cx: &PickContext) -> Option<Task> {
        let l0 = c.l0_score(v);
        match c.pick_leveled(v, cx) {
            Some((score, task)) if score >= 1.0 && score > l0.max(1.0) => Some(task),
            other => pick_column(c, v, cx.busy)
                .or_else(|| other.filter(|(s, _)| *s >= 1.0).map(|(_, t)| t)),
        }
    }
}

/// The next column of `v`, if the compactor has data (or the receiver is
/// ready to become the compactor).
pub fn pick_column(c: &Container, v: &Version, busy: &HashSet<u64>) -> Option<Task> {
    let rows = &v.levels[0];
    if rows.is_empty() {
        return None;
    }
    let state = ContainerState::of(v).ok()?;
    let mut compactor: Vec<Arc<TableHandle>> = rows
        .iter()
        .filter(|t| t.meta.seq_max <= state.compactor_seq)
        .cloned()
        .collect();
    let (compactor_seq, cursor) = if compactor.is_empty() {
        // Promote the receiver once it is full (or PM runs short).
        if c.l0_score(v) < 1.0 {
            return None;
        }
        compactor = rows.clone();
        (rows.iter().map(|t| t.meta.seq_max).max()?, Vec::new())
    } else {
        (
            state.compactor_seq,
            state.cursor.clone().unwrap_or_default(),
        )
    };
    if compactor.iter().any(|t| busy.contains(&t.meta.id)) {
        return None;
    }
    let readers = compactor
        .iter()
        .map(|t| c.row(&t.meta).ok())
        .collect::<Option<Vec<_>>>()?;
    let sizer = RowSizer::new(readers, &state);
    let plan = plan_column(
        v,
        busy,
        &sizer,
        &cursor,
        c.cfg.sst_size_bytes,
        compactor_seq,
    )?;
    Some(side_task(v, COLUMN, compactor, &sizer, plan))
}

/// Chooses a column starting at `cursor`.
pub fn plan_column(
    v: &Version,
    busy: &HashSet<u64>,
    sizer: &RowSizer,
    cursor: &[u8],
    sst_size_bytes: u64,
    compactor_seq: u64,
) -> Option<SidePlan> {
    let l1 = L1Ranges::of(v);
    let overlapped_target = COLUMN_SSTS_OVERLAPPED * sst_size_bytes;
    let alone_target = COLUMN_SSTS_ALONE * sst_size_bytes;
    let mut i = l1.find(cursor);
    let lo = cursor.to_vec();
    let mut acc = 0u64;
    let mut overlaps_l1 = false;
    let mut hi: Option<Vec<u8>>;
    loop {
        let (rlo, rhi, table) = &l1.ranges[i];
        if table.is_some_and(|t| busy.contains(&t.meta.id)) {
            if i == l1.find(cursor) {
                return None; // wait for the L1 table
            }
            hi = Some(rlo.clone());
            break;
        }
        let from = if rlo.as_slice() < cursor {
            cursor
        } else {
            rlo.as_slice()
        };
        let bytes = sizer.bytes(from, rhi.as_deref());
        if table.is_none() && !overlaps_l1 && acc + bytes > alone_target {
            // A stretch without L1 tables: cut at any row key.
            if let Some(cut) = sizer.split(from, rhi.as_deref(), alone_target - acc) {
                acc += sizer.bytes(from, Some(&cut));
                hi = Some(cut);
                break;
            }
        }
        acc += bytes;
        overlaps_l1 |= table.is_some() && bytes > 0;
        hi = rhi.clone();
        let target = if overlaps_l1 {
            overlapped_target
        } else {
            alone_target
        };
        if hi.is_none() || acc >= target {
            break;
        }
        i += 1;
    }
    Some(SidePlan {
        lo,
        next_cursor: hi.clone(),
        hi,
        through: compactor_seq,
        compactor_seq,
        victim_bytes: acc,
    })
}
