//! Cross-row hint search (TriangleKV §3.4): the container's L0 served as
//! one [`TableReader`] per version.
//!
//! A get searches the rows newest first. In row `i` a binary search finds
//! `j`, the lower bound of the target; the forward pointers of elements
//! `j-1` and `j` then bound the target's lower bound in row `i-1` (the
//! older row the pointers were built against) to the window
//! `[fwd(j-1), fwd(j)]`, so each older row costs a search of a window of a
//! few elements instead of the whole row (Fig. 12). The search stops at
//! the first row that has consumed the key: every older row has too, and
//! the entry is in L1 (container.rs invariant 2). A row's pointers are
//! used only if the next older row in the version is the row they were
//! built against (same `seq_max` and length); otherwise that row is
//! searched whole and the chain resumes from it. With hints off
//! (`Options::pm_hints = false`) every row is searched whole. Before
//! searching a row, a get asks the row's DRAM bloom filter (rowtable.rs):
//! a row that surely lacks the key is skipped, and the next row is then
//! searched whole (most gets hold keys no row has: the filters answer
//! them without a load from PM).
//!
//! Iterators seek the same way (one window per row) and then merge the
//! rows, skipping consumed entries.
//!
//! Concurrency: a view is immutable once resolved (lazily, by the first
//! reader, under a `OnceLock`); it holds the handles of its rows, so their
//! pages outlive every get and iterator using it.

use std::sync::{Arc, OnceLock};

use crate::error::Result;
use crate::iter::{EmptyIterator, Found, InternalIterator, TableReader};
use crate::key::{self, SeqNo};
use crate::sst::bloom::bloom_hash;
use crate::version::TableHandle;

use super::rowtable::{Probe, RowTable};
use super::{ContainerState, RowCache};

struct Row {
    t: Arc<RowTable>,
    seq_max: SeqNo,
    /// Consumed entries, sorted disjoint index intervals.
    consumed: Vec<(usize, usize)>,
    /// This row's forward pointers point into the next row of the view.
    linked: bool,
}

struct Resolved {
    rows: Vec<Row>,
    state: ContainerState,
}

/// The rows of one version, searched as one level.
pub struct ContainerView {
    tables: Vec<Arc<TableHandle>>,
    state_bytes: Option<Vec<u8>>,
    cache: Arc<RowCache>,
    hints: bool,
    resolved: OnceLock<Result<Resolved>>,
}

impl ContainerView {
    /// A view of `tables` (L0, newest first) under the container state
    /// recorded as `state_bytes`. Nothing is read until the first use.
    pub fn new(
        tables: Vec<Arc<TableHandle>>,
        state_bytes: Option<Vec<u8>>,
        cache: Arc<RowCache>,
        hints: bool,
    ) -> ContainerView {
        ContainerView {
            tables,
            state_bytes,
            cache,
            hints,
            resolved: OnceLock::new(),
        }
    }

    fn resolve(&self) -> Result<Resolved> {
        let state = match &self.state_bytes {
            Some(b) => ContainerState::decode(b)?,
            None => ContainerState::default(),
        };
        let mut rows: Vec<Row> = Vec::with_capacity(self.tables.len());
        for t in &self.tables {
            let r = self.cache.get(&t.meta)?;
            rows.push(Row {
                consumed: state.consumed_intervals(&r),
                seq_max: r.seq_max(),
                t: r,
                linked: false,
            });
        }
        for i in 0..rows.len().saturating_sub(1) {
            let (a, b) = (&rows[i].t, &rows[i + 1].t);
            rows[i].linked = a.prev_seq_max() == b.seq_max() && a.prev_len() == b.len();
        }
        Ok(Resolved { rows, state })
    }

    fn resolved(&self) -> Result<&Resolved> {
        match self.resolved.get_or_init(|| self.resolve()) {
            Ok(r) => Ok(r),
            Err(e) => Err(e.clone()),
        }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.tables.len()
    }
}

impl TableReader for ContainerView {
    fn get(&self, user_key: &[u8], seq: SeqNo) -> Result<Option<Found>> {
        let r = self.resolved()?;
        let through = r.state.consumed_through(user_key);
        let p = Probe::seek(user_key, seq);
        let h = bloom_hash(user_key);
        let mut window: Option<(usize, usize)> = None;
        for row in &r.rows {
            if row.seq_max <= through {
                break; // consumed here and in every older row
            }
            if !row.t.may_contain_hash(h) {
                // No position here to narrow the next row's search by.
                window = None;
                continue;
            }
            let n = row.t.len();
            let (lo, hi) = window.unwrap_or((0, n));
            let j = row.t.lower_bound(&p, lo, hi);
            // The prefix settles most misses without reading the key area.
            if j < n && row.t.prefix(j) == p.prefix && row.t.user_key(j) == user_key {
                return Ok(row.t.found(j));
            }
            window = (self.hints && row.linked).then(|| row.t.hint_window(j));
        }
        Ok(None)
    }

    fn iter(self: Arc<Self>, _fill_cache: bool) -> Box<dyn InternalIterator> {
        let n = match self.resolved() {
            Ok(r) => r.rows.len(),
            Err(e) => return Box::new(EmptyIterator::with_error(e)),
        };
        Box::new(ContainerIter {
            view: self,
            pos: vec![usize::MAX; n],
            current: None,
            forward: true,
        })
    }
}

/// Iterator over the container: one cursor per row, merged.
pub struct ContainerIter {
    view: Arc<ContainerView>,
    /// Per row: the entry, or `usize::MAX` (not valid).
    pos: Vec<usize>,
    current: Option<usize>,
    forward: bool,
}

const NONE: usize = usize::MAX;

impl ContainerIter {
    fn rows(&self) -> &[Row] {
        match self.view.resolved.get() {
            Some(Ok(r)) => &r.rows,
            _ => &[],
        }
    }

    /// Moves row `i`'s cursor forward past consumed entries.
    fn skip_forward(rows: &[Row], pos: &mut [usize], i: usize) {
        let row = &rows[i];
        let p = pos[i];
        if p >= row.t.len() {
            pos[i] = NONE;
            return;
        }
        let k = row.consumed.partition_point(|(_, b)| *b <= p);
        if let Some(&(a, b)) = row.consumed.get(k) {
            if a <= p {
                pos[i] = if b < row.t.len() { b } else { NONE };
            }
        }
    }

    /// Moves row `i`'s cursor backward past consumed entries.
    fn skip_backward(rows: &[Row], pos: &mut [usize], i: usize) {
        let row = &rows[i];
        let p = pos[i];
        if p == NONE || p >= row.t.len() {
            pos[i] = NONE;
            return;
        }
        let k = row.consumed.partition_point(|(_, b)| *b <= p);
        if let Some(&(a, _)) = row.consumed.get(k) {
            if a <= p {
                pos[i] = if a == 0 { NONE } else { a - 1 };
            }
        }
    }

    fn find(&mut self, smallest: bool) {
        let rows = match self.view.resolved.get() {
            Some(Ok(r)) => &r.rows,
            _ => {
                self.current = None;
                return;
            }
        };
        let mut best: Option<usize> = None;
        for (i, &p) in self.pos.iter().enumerate() {
            if p == NONE {
                continue;
            }
            best = match best {
                None => Some(i),
                Some(b) => {
                    let o = key::compare_internal(rows[i].t.ikey(p), rows[b].t.ikey(self.pos[b]));
                    if (smallest && o.is_lt()) || (!smallest && o.is_gt()) {
                        Some(i)
                    } else {
                        Some(b)
                    }
                }
            };
        }
        self.current = best;
    }

    /// Positions every row at the lower bound of `target`, through the
    /// hint windows.
    fn seek_all(&mut self, target: &[u8]) {
        let hints = self.view.hints;
        let rows = match self.view.resolved.get() {
            Some(Ok(r)) => &r.rows,
            _ => return,
        };
        let p = Probe::internal(target);
        let mut window: Option<(usize, usize)> = None;
        for (i, row) in rows.iter().enumerate() {
            let n = row.t.len();
            let (lo, hi) = window.unwrap_or((0, n));
            let j = row.t.lower_bound(&p, lo, hi);
            window = (hints && row.linked).then(|| row.t.hint_window(j));
            self.pos[i] = if j < n { j } else { NONE };
            Self::skip_forward(rows, &mut self.pos, i);
        }
    }
}

impl InternalIterator for ContainerIter {
    fn valid(&self) -> bool {
        self.current.is_some()
    }

    fn seek_to_first(&mut self) {
        let rows = match self.view.resolved.get() {
            Some(Ok(r)) => &r.rows,
            _ => return,
        };
        for i in 0..rows.len() {
            self.pos[i] = 0;
            Self::skip_forward(rows, &mut self.pos, i);
        }
        self.forward = true;
        self.find(true);
    }

    fn seek_to_last(&mut self) {
        let rows = match self.view.resolved.get() {
            Some(Ok(r)) => &r.rows,
            _ => return,
        };
        for i in 0..rows.len() {
            self.pos[i] = rows[i].t.len().wrapping_sub(1);
            Self::skip_backward(rows, &mut self.pos, i);
        }
        self.forward = false;
        self.find(false);
    }

    fn seek(&mut self, target: &[u8]) {
        self.seek_all(target);
        self.forward = true;
        self.find(true);
    }

    fn next(&mut self) {
        let Some(cur) = self.current else { return };
        let view = Arc::clone(&self.view);
        let rows = match view.resolved.get() {
            Some(Ok(r)) => &r.rows,
            _ => return,
        };
        if !self.forward {
            let k = rows[cur].t.ikey(self.pos[cur]);
            let p = Probe::internal(k);
            for i in 0..rows.len() {
                if i != cur {
                    let j = rows[i].t.lower_bound(&p, 0, rows[i].t.len());
                    self.pos[i] = j;
                    Self::skip_forward(rows, &mut self.pos, i);
                }
            }
            self.forward = true;
        }
        self.pos[cur] += 1;
        Self::skip_forward(rows, &mut self.pos, cur);
        self.find(true);
    }

    fn prev(&mut self) {
        let Some(cur) = self.current else { return };
        let view = Arc::clone(&self.view);
        let rows = match view.resolved.get() {
            Some(Ok(r)) => &r.rows,
            _ => return,
        };
        if self.forward {
            let k = rows[cur].t.ikey(self.pos[cur]);
            let p = Probe::internal(k);
            for i in 0..rows.len() {
                if i != cur {
                    let j = rows[i].t.lower_bound(&p, 0, rows[i].t.len());
                    self.pos[i] = if j == 0 { NONE } else { j - 1 };
                    Self::skip_backward(rows, &mut self.pos, i);
                }
            }
            self.forward = false;
        }
        self.pos[cur] = if self.pos[cur] == 0 {
            NONE
        } else {
            self.pos[cur] - 1
        };
        Self::skip_backward(rows, &mut self.pos, cur);
        self.find(false);
    }

    fn key(&self) -> &[u8] {
        match self.current {
            Some(i) => self.rows()[i].t.ikey(self.pos[i]),
            None => &[],
        }
    }

    fn value(&self) -> &[u8] {
        match self.current {
            Some(i) => self.rows()[i].t.value(self.pos[i]),
            None => &[],
        }
    }

    fn status(&self) -> Result<()> {
        self.view.resolved().map(|_| ())
    }
}
