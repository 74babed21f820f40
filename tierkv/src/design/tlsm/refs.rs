//! Reference counts of TLSM's data runs.
//!
//! A *data run* is a run of PM pages holding entries that lists point at:
//! a flush's persistent buffer (full variant), or the node run of a PS
//! list whose nodes hold their entries inline (PS and PS+BAC). After
//! byte-addressable compaction a data run is shared by every list that
//! links to one of its entries — a deep list references about one buffer
//! per flush, too many to list in the MANIFEST's `pm_pages` — so the design
//! counts the references itself: a run goes back to the allocator when the
//! last live list referencing it is released (`Design::release`).
//!
//! # Invariants
//!
//! 1. A list is registered once, when it is written (flush, compaction,
//!    copy-forward, resumed compaction) or found in the MANIFEST at open,
//!    and unregistered once, when the engine releases it; `refs` of a run
//!    is the number of registered lists whose directory names it.
//! 2. `live_bytes` of a run is the sum, over those lists, of the bytes of
//!    their entries in it; the rest of the run is pinned by dead entries
//!    (PM space amplification).
//! 3. A run whose `refs` drops to 0 is returned exactly once, and never
//!    while a registered list names it.
//!
//! # Concurrency
//!
//! One mutex guards the index; every method takes it once. Pickers read it
//! (exclusive bytes, live ratios): it is a function of the set of
//! registered lists, so a pick stays a deterministic function of the
//! version and of which tables are alive.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::format::DataRef;
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};

/// What the index keeps of one list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRefs {
    /// PM the list alone owns (`pm_pages`: header, pointer nodes, directory).
    pub own_bytes: u64,
    /// The data runs it references, sorted by first page.
    pub data: Vec<DataRef>,
}

#[derive(Debug, Clone, Copy)]
struct RunState {
    pages: u64,
    refs: u32,
    live_bytes: u64,
    /// The most entry bytes ever live in the run (the bytes it was written
    /// with, when its writer registered it): live shares are measured
    /// against it, not against the pages (a small buffer's page slack is
    /// not garbage a copy-forward could reclaim).
    capacity: u64,
}

#[derive(Default)]
struct Inner {
    runs: HashMap<u64, RunState>,
    lists: HashMap<u64, Arc<ListRefs>>,
}

/// PM space figures of the skip lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Space {
    /// Registered lists.
    pub lists: u64,
    /// Live data runs.
    pub data_runs: u64,
    /// Bytes of the live data runs.
    pub data_run_bytes: u64,
    /// Bytes of entries some registered list references.
    pub live_entry_bytes: u64,
    /// Bytes the lists own besides data runs (headers, nodes, directories).
    pub own_bytes: u64,
}

impl Space {
    /// Bytes of data runs pinned by entries no list references.
    pub fn pinned_dead_bytes(&self) -> u64 {
        self.data_run_bytes.saturating_sub(self.live_entry_bytes)
    }

    /// Data-run bytes per live entry byte (1.0 = nothing pinned).
    pub fn amplification(&self) -> f64 {
        if self.live_entry_bytes == 0 {
            1.0
        } else {
            self.data_run_bytes as f64 / self.live_entry_bytes as f64
        }
    }
}

/// The index (module doc).
#[derive(Default)]
pub struct RefIndex {
    inner: Mutex<Inner>,
}

impl RefIndex {
    /// An empty index.
    pub fn new() -> RefIndex {
        RefIndex::default()
    }

    /// Registers list `id` (invariant 1); a second registration of the same
    /// id is ignored.
    pub fn register(&self, id: u64, refs: ListRefs) {
        let mut g = self.inner.lock();
        if g.lists.contains_key(&id) {
            return;
        }
        for d in &refs.data {
            let r = g.runs.entry(d.run.first).or_insert(RunState {
                pages: d.run.count,
                refs: 0,
                live_bytes: 0,
                capacity: 0,
            });
            r.refs += 1;
            r.live_bytes += d.bytes;
            r.capacity = r.capacity.max(r.live_bytes);
        }
        g.lists.insert(id, Arc::new(refs));
    }

    /// Unregisters list `id`; returns the data runs no list references any
    /// more (invariant 3). An unknown id returns nothing.
    pub fn unregister(&self, id: u64) -> Vec<PageRun> {
        let mut g = self.inner.lock();
        let Some(refs) = g.lists.remove(&id) else {
            return Vec::new();
        };
        let mut free = Vec::new();
        for d in &refs.data {
            if let Some(r) = g.runs.get_mut(&d.run.first) {
                r.refs = r.refs.saturating_sub(1);
                r.live_bytes = r.live_bytes.saturating_sub(d.bytes);
                if r.refs == 0 {
                    let pages = r.pages;
                    g.runs.remove(&d.run.first);
                    free.push(PageRun {
                        first: d.run.first,
                        count: pages,
                    });
                }
            }
        }
        free
    }

    /// Forgets everything (the engine rebuilds the index at open).
    pub fn clear(&self) {
        *self.inner.lock() = Inner::default();
    }

    /// True if list `id` is registered.
    pub fn contains(&self, id: u64) -> bool {
        self.inner.lock().lists.contains_key(&id)
    }

    /// What the index keeps of list `id`.
    pub fn list(&self, id: u64) -> Option<Arc<ListRefs>> {
        self.inner.lock().lists.get(&id).cloned()
    }

    /// Every live data run.
    pub fn data_runs(&self) -> Vec<PageRun> {
        let g = self.inner.lock();
        let mut v: Vec<PageRun> = g
            .runs
            .iter()
            .map(|(&first, r)| PageRun {
                first,
                count: r.pages,
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// PM list `id` alone holds: its own runs and the data runs only it
    /// references (0 for an unknown id).
    pub fn exclusive_bytes(&self, id: u64) -> u64 {
        let g = self.inner.lock();
        let Some(l) = g.lists.get(&id) else {
            return 0;
        };
        l.own_bytes
            + l.data
                .iter()
                .filter_map(|d| g.runs.get(&d.run.first))
                .filter(|r| r.refs == 1)
                .map(|r| r.pages * PAGE_SIZE_BYTES)
                .sum::<u64>()
    }

    /// PM freed if every list of `ids` were released together: their own
    /// runs and the data runs referenced by nobody else.
    pub fn freed_together(&self, ids: &[u64]) -> u64 {
        let g = self.inner.lock();
        let mut drop: HashMap<u64, u32> = HashMap::new();
        let mut own = 0u64;
        for id in ids {
            if let Some(l) = g.lists.get(id) {
                own += l.own_bytes;
                for d in &l.data {
                    *drop.entry(d.run.first).or_insert(0) += 1;
                }
            }
        }
        own + drop
            .iter()
            .filter_map(|(first, n)| g.runs.get(first).filter(|r| r.refs <= *n))
            .map(|r| r.pages * PAGE_SIZE_BYTES)
            .sum::<u64>()
    }

    /// Up to `limit` data runs whose live share (live entry bytes over the
    /// most ever live) is below `max_ratio`,
    /// smallest share first, each with the lists referencing it (ascending
    /// ids) and its share.
    pub fn worst_runs(&self, max_ratio: f64, limit: usize) -> Vec<(PageRun, Vec<u64>, f64)> {
        let g = self.inner.lock();
        let mut cands: Vec<(f64, u64)> = g
            .runs
            .iter()
            .map(|(&first, r)| (r.live_bytes as f64 / r.capacity.max(1) as f64, first))
            .filter(|(ratio, _)| *ratio < max_ratio)
            .collect();
        cands.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        cands.truncate(limit);
        cands
            .into_iter()
            .map(|(ratio, first)| {
                let mut ids: Vec<u64> = g
                    .lists
                    .iter()
                    .filter(|(_, l)| l.data.binary_search_by_key(&first, |d| d.run.first).is_ok())
                    .map(|(id, _)| *id)
                    .collect();
                ids.sort_unstable();
                let pages = g.runs.get(&first).map_or(0, |r| r.pages);
                (
                    PageRun {
                        first,
                        count: pages,
                    },
                    ids,
                    ratio,
                )
            })
            .collect()
    }

    /// The space figures.
    pub fn space(&self) -> Space {
        let g = self.inner.lock();
        Space {
            lists: g.lists.len() as u64,
            data_runs: g.runs.len() as u64,
            data_run_bytes: g.runs.values().map(|r| r.pages * PAGE_SIZE_BYTES).sum(),
            live_entry_bytes: g.runs.values().map(|r| r.live_bytes).sum(),
            own_bytes: g.lists.values().map(|l| l.own_bytes).sum(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn d(first: u64, count: u64, bytes: u64) -> DataRef {
        DataRef {
            run: PageRun { first, count },
            bytes,
        }
    }

    #[test]
    fn shared_runs_go_with_their_last_list() {
        let ix = RefIndex::new();
        ix.register(
            1,
            ListRefs {
                own_bytes: 4096,
                data: vec![d(10, 2, 1000)],
            },
        );
        ix.register(
            2,
            ListRefs {
                own_bytes: 4096,
                data: vec![d(10, 2, 3000), d(20, 1, 50)],
            },
        );
        ix.register(
            2,
            ListRefs {
                own_bytes: 1,
                data: vec![],
            },
        ); // ignored
        assert_eq!(ix.exclusive_bytes(1), 4096);
        assert_eq!(ix.exclusive_bytes(2), 4096 + 4096);
        assert_eq!(ix.freed_together(&[1, 2]), 8192 + 3 * 4096);
        let s = ix.space();
        assert_eq!(
            (s.data_runs, s.data_run_bytes, s.live_entry_bytes),
            (2, 3 * 4096, 4050)
        );
        assert_eq!(ix.unregister(1), vec![]);
        assert_eq!(ix.exclusive_bytes(2), 4096 + 3 * 4096);
        // Live shares count against the bytes a run was written with:
        // run 10 keeps 3000 of its 4000 (0.75), run 20 all 50 of its 50
        // (its page slack is no garbage), so only run 10 is a candidate.
        let w = ix.worst_runs(0.9, 4);
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].0.first, w[0].1.clone()), (10, vec![2]));
        let mut freed = ix.unregister(2);
        freed.sort();
        assert_eq!(
            freed,
            vec![
                PageRun {
                    first: 10,
                    count: 2
                },
                PageRun {
                    first: 20,
                    count: 1
                }
            ]
        );
        assert_eq!(ix.unregister(2), vec![]);
        assert_eq!(ix.space(), Space::default());
    }
}
