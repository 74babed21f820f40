//! Overlap-aware variable-size SSTs (vSSTs), vLSM §4.2: how L1 output is
//! cut so that enough of L1 overlaps little of L2.
//!
//! With f the growth factor, SM the SST size and Sm = SM / f:
//!
//! * before appending a key, the cutter measures the overlap the open vSST
//!   would have with L2 *as if the key were in it*: the bytes of every L2
//!   table whose user-key range meets `[first key, key]`;
//! * below Sm it never cuts (a vSST has at least Sm bytes);
//! * at SM it always cuts;
//! * in between it cuts when the overlap exceeds f × the open size.
//!
//! So a vSST whose overlap is already above f when it reaches Sm closes at
//! Sm — a *poor* vSST (overlap > f, size Sm) — and one below f keeps
//! growing until the next key would take its overlap past f or its size
//! reaches SM — a *good* vSST (overlap ≤ f, size in [Sm, SM]). The vLSM
//! picker then compacts good vSSTs into L2 and leaves poor ones to be
//! reorganised by the next L0 → L1 compaction.
//!
//! Worked example (f = 4, SM = 4 MB, Sm = 1 MB, L2 = `[a-c]:8M [d-f]:8M
//! [g-p]:2M`, 64 KB per key): keys `a..` start a vSST overlapping `[a-c]`
//! (8 MB); at 1 MB the ratio is 8 > 4, so the vSST closes: poor, 1 MB. Say
//! the next vSST starts at `g`: it overlaps 2 MB, ratio 2 at 1 MB, so it
//! grows; at 4 MB it closes: good, 4 MB, overlap 0.5.
//!
//! The overlap is kept with two cursors into the (sorted, disjoint) next
//! level and a prefix sum of its sizes, so each key costs O(1) amortised
//! user-key comparisons and no allocation.
//!
//! Invariants (checked with `debug_assert!`):
//! 1. Keys arrive in ascending user-key order.
//! 2. `start <= end`: `next[start..end]` are exactly the tables meeting
//!    `[first key of the open vSST, last key seen]`.
//! 3. `prefix[i]` = bytes of `next[..i]`.
//!
//! Concurrency: a cutter belongs to one merge job; the tables it reads are
//! immutable (`Arc<TableHandle>` from a version).

use std::sync::Arc;

use crate::key;
use crate::version::TableHandle;

use super::Cutter;

/// The size bounds and overlap bound of vSSTs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VsstParams {
    /// Sm: a vSST never closes below this size.
    pub min_bytes: u64,
    /// SM: a vSST always closes at this size.
    pub max_bytes: u64,
    /// f: a vSST whose overlap with the next level exceeds f × its size is
    /// poor.
    pub growth_factor: u64,
}

impl VsstParams {
    /// vLSM's parameters for SSTs of `sst_size_bytes` (SM) and growth
    /// factor f: Sm = SM / f (the paper's choice: at most f times more
    /// tables in L1 than with fixed-size SSTs).
    pub fn new(sst_size_bytes: u64, growth_factor: u64) -> VsstParams {
        let f = growth_factor.max(1);
        VsstParams {
            min_bytes: (sst_size_bytes / f).max(1),
            max_bytes: sst_size_bytes,
            growth_factor: f,
        }
    }

    /// True if a table of `size_bytes` overlapping `overlap_bytes` of the
    /// next level is good (overlap ratio ≤ f).
    pub fn is_good(&self, size_bytes: u64, overlap_bytes: u64) -> bool {
        overlap_bytes <= self.growth_factor.saturating_mul(size_bytes)
    }
}

/// One vSST the cutter closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VsstRecord {
    /// Its estimated size when it closed.
    pub size_bytes: u64,
    /// Bytes of the next level its key range meets.
    pub overlap_bytes: u64,
    /// Overlap ratio ≤ f.
    pub good: bool,
}

/// The vSST cutting policy over one next level (L2 for L1 output).
pub struct VsstCutter<'a> {
    next: &'a [Arc<TableHandle>],
    prefix: Vec<u64>,
    params: VsstParams,
    /// First table of `next` whose largest key ≥ the open vSST's first key.
    start: usize,
    /// First table of `next` whose smallest key > the last key seen.
    end: usize,
    /// Overlap of the open vSST with its keys so far.
    open_overlap_bytes: u64,
    #[cfg(debug_assertions)]
    last_key: Vec<u8>,
    records: Vec<VsstRecord>,
}

impl<'a> VsstCutter<'a> {
    /// A cutter over `next` (the tables of the level below the output,
    /// sorted by key and disjoint).
    pub fn new(next: &'a [Arc<TableHandle>], params: VsstParams) -> Self {
        debug_assert!(next
            .windows(2)
            .all(|w| w[0].largest_user_key() < w[1].smallest_user_key()));
        let mut prefix = Vec::with_capacity(next.len() + 1);
        let mut sum = 0u64;
        prefix.push(0);
        for t in next {
            sum = sum.saturating_add(t.meta.size_bytes);
            prefix.push(sum);
        }
        VsstCutter {
            next,
            prefix,
            params,
            start: 0,
            end: 0,
            open_overlap_bytes: 0,
            #[cfg(debug_assertions)]
            last_key: Vec::new(),
            records: Vec::new(),
        }
    }

    /// The parameters.
    pub fn params(&self) -> VsstParams {
        self.params
    }

    /// Every vSST closed so far (the last one after [`Cutter::finish`]).
    pub fn records(&self) -> &[VsstRecord] {
        &self.records
    }

    /// Moves `end` past every table starting at or before `user_key`.
    fn advance_end(&mut self, user_key: &[u8]) {
        while self.end < self.next.len() && self.next[self.end].smallest_user_key() <= user_key {
            self.end += 1;
        }
    }

    /// Starts a vSST at `user_key` (after `advance_end(user_key)`).
    fn begin(&mut self, user_key: &[u8]) {
        while self.start < self.next.len() && self.next[self.start].largest_user_key() < user_key {
            self.start += 1;
        }
        // Tables before `end` start at or before the key, so those ending
        // before it come first: start <= end (invariant 2).
        self.start = self.start.min(self.end);
        self.open_overlap_bytes = self.overlap();
    }

    fn overlap(&self) -> u64 {
        debug_assert!(self.start <= self.end);
        self.prefix[self.end] - self.prefix[self.start]
    }

    fn close(&mut self, size_bytes: u64) {
        self.records.push(VsstRecord {
            size_bytes,
            overlap_bytes: self.open_overlap_bytes,
            good: self.params.is_good(size_bytes, self.open_overlap_bytes),
        });
    }
}

impl Cutter for VsstCutter<'_> {
    fn cut_before(&mut self, ikey: &[u8], open_bytes: Option<u64>) -> bool {
        let user_key = key::user_key(ikey);
        #[cfg(debug_assertions)]
        {
            debug_assert!(
                self.last_key.is_empty() || self.last_key.as_slice() < user_key,
                "vSST cutter: keys out of order"
            );
            self.last_key.clear();
            self.last_key.extend_from_slice(user_key);
        }
        self.advance_end(user_key);
        let Some(size) = open_bytes else {
            self.begin(user_key);
            return false;
        };
        // The overlap as if the key were in the open vSST.
        let overlap = self.overlap();
        let p = self.params;
        let cut = size >= p.max_bytes
            || (size >= p.min_bytes && overlap > p.growth_factor.saturating_mul(size));
        if cut {
            self.close(size);
            self.begin(user_key);
        } else {
            self.open_overlap_bytes = overlap;
        }
        cut
    }

    fn finish(&mut self, open_bytes: Option<u64>) {
        if let Some(size) = open_bytes {
            self.close(size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{make_internal_key, Kind};

    fn table(id: u64, lo: &str, hi: &str, size: u64) -> Arc<TableHandle> {
        crate::version::detached_table(id, lo, hi, size)
    }

    /// Feeds keys of `per_key` bytes; returns the closed records.
    fn cut(
        next: &[Arc<TableHandle>],
        p: VsstParams,
        keys: &[&str],
        per_key: u64,
    ) -> Vec<VsstRecord> {
        let mut c = VsstCutter::new(next, p);
        let mut open: Option<u64> = None;
        for k in keys {
            let ik = make_internal_key(k.as_bytes(), 5, Kind::Put);
            if c.cut_before(&ik, open) {
                open = None;
            }
            open = Some(open.unwrap_or(0) + per_key);
        }
        c.finish(open);
        c.records().to_vec()
    }

    #[test]
    fn worked_example_of_the_module_doc() {
        let next = vec![
            table(1, "a", "c", 8 << 20),
            table(2, "d", "f", 8 << 20),
            table(3, "g", "p", 2 << 20),
        ];
        let p = VsstParams::new(4 << 20, 4);
        assert_eq!(p.min_bytes, 1 << 20);
        // 16 keys of 64 KB in a..b, then 64 keys in g..o.
        let mut keys: Vec<String> = (0..16).map(|i| format!("a{i:02}")).collect();
        keys.extend((0..64).map(|i| format!("g{i:02}")));
        let refs: Vec<&str> = keys.iter().map(|s| s.as_str()).collect();
        let r = cut(&next, p, &refs, 64 << 10);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(
            r[0],
            VsstRecord {
                size_bytes: 1 << 20,
                overlap_bytes: 8 << 20,
                good: false
            }
        );
        assert_eq!(
            r[1],
            VsstRecord {
                size_bytes: 4 << 20,
                overlap_bytes: 2 << 20,
                good: true
            }
        );
    }

    #[test]
    fn empty_next_level_gives_max_size_tables() {
        let p = VsstParams::new(1 << 20, 8);
        let keys: Vec<String> = (0..40).map(|i| format!("k{i:03}")).collect();
        let refs: Vec<&str> = keys.iter().map(|s| s.as_str()).collect();
        let r = cut(&[], p, &refs, 100 << 10);
        assert_eq!(
            r.iter().map(|r| r.size_bytes).collect::<Vec<_>>(),
            vec![1100 << 10, 1100 << 10, 1100 << 10, 700 << 10]
        );
        assert!(r.iter().all(|r| r.good && r.overlap_bytes == 0));
    }

    #[test]
    fn keys_in_gaps_do_not_count_neighbours() {
        let next = vec![table(1, "b", "c", 10 << 20), table(2, "x", "y", 10 << 20)];
        let p = VsstParams::new(1 << 20, 2);
        let r = cut(&next, p, &["m", "n", "o"], 1 << 10);
        assert_eq!(
            r,
            vec![VsstRecord {
                size_bytes: 3 << 10,
                overlap_bytes: 0,
                good: true
            }]
        );
    }
}
