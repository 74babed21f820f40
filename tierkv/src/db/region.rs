//! Regions (`Options::regions`, vLSM §2): the key space split into N
//! independent LSMs inside one `Db`.
//!
//! What is per region and what is shared (RocksDB's column families are the
//! model):
//!
//! ```text
//!                      one WAL, one seqno space, one MANIFEST
//!  put/delete ──► WAL ──► route(key) ──┬─► region 0: memtable, immutables, Version (levels)
//!                                      ├─► region 1: memtable, immutables, Version
//!                                      └─► ...
//!  shared: memtable budget, busy set, background threads, block cache, stats
//! ```
//!
//! * **Routing** ([`Router`]). With `Options::region_boundaries` (N − 1
//!   sorted split keys `b`), region `r` holds the user keys in
//!   `[b[r-1], b[r])` (unbounded at both ends): scans with bounds touch only
//!   the regions they overlap. Without boundaries a key goes to region
//!   `(xxh3_64_with_seed(key, 0x7265_6769_6f6e) × N) >> 64` (multiply-shift:
//!   no division, no modulo bias): load spreads evenly whatever the key
//!   distribution, but every scan merges the streams of all N regions.
//!   Worked example (golden test in tests/regions.rs): with boundaries
//!   `["g", "p"]`, `"apple"` → 0, `"g"` → 1, `"kiwi"` → 1, `"zebra"` → 2.
//! * **Memtable budget.** The mutable memtables of all regions share
//!   `memtable_size_bytes`: when their total reaches it, the *largest* one
//!   becomes immutable (RocksDB's write buffer manager). Immutable
//!   memtables share `(memtable_count_max − 1) × memtable_size_bytes`: a
//!   switch waits for a flush once they reach it. So DRAM stays within the
//!   budget of a one-region database whatever N is, and a region that gets
//!   many writes gets large memtables (few, large L0 tables) while idle
//!   regions cost nothing. The price: with N regions written evenly a
//!   memtable holds about 2 × budget / N when it is switched (raise
//!   `memtable_size_bytes` with N for the same L0 table size). Per-region
//!   memtables of budget / N were the alternative: the same size under even
//!   load, but skewed load would flush the hot region's small memtables
//!   while the idle regions' share sat unused. With one region both rules
//!   are exactly the engine's old ones (switch when full; wait while
//!   `memtable_count_max − 1` immutables exist).
//! * **WAL lifetime.** A memtable's log number is the WAL that was current
//!   when it was created; it holds records of WALs `>=` it and below its
//!   successor's log number. A flush of region `r` records `r`'s log number
//!   as its next memtable's; replay skips a region's records below it. A WAL
//!   file is deleted once no region has an unflushed record in it
//!   ([`Regions::wal_bound`]); a region whose memtables are empty holds no
//!   WAL back (its empty memtable is renewed at every WAL switch).
//!
//! Concurrency contract: [`Regions`] lives inside the engine's `state`
//! mutex (every method REQUIRES it held); [`Router`] is immutable.
//!
//! Invariants:
//! 1. `Router::route` is a pure function of the key and the layout recorded
//!    in the manifest (`RegionLayout`): a database reopens only with the
//!    same layout, so a key never moves between regions.
//! 2. Within a region memtables flush oldest first; a region's log number
//!    only grows.
//! 3. Every record in a WAL numbered below `wal_bound` is in a table whose
//!    edit is durable.

use std::collections::VecDeque;
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::memtable::MemTable;
use crate::options::Options;
use crate::version::edit::RegionLayout;

/// Seed of the routing hash ("region"), distinct from the bloom filter's
/// hash so that a region's keys do not share filter probes.
pub const ROUTE_HASH_SEED: u64 = 0x7265_6769_6f6e;

/// Maps user keys to regions.
#[derive(Debug, Clone)]
pub struct Router {
    count: usize,
    boundaries: Vec<Vec<u8>>,
}

impl Router {
    /// The router of `opts.regions` / `opts.region_boundaries` (validated).
    pub fn new(opts: &Options) -> Router {
        Router {
            count: opts.regions,
            boundaries: opts.region_boundaries.clone(),
        }
    }

    /// Number of regions.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The layout the manifest records.
    pub fn layout(&self) -> RegionLayout {
        RegionLayout {
            count: self.count as u32,
            boundaries: self.boundaries.clone(),
        }
    }

    /// The region holding `user_key`.
    #[inline]
    pub fn route(&self, user_key: &[u8]) -> usize {
        if self.count == 1 {
            return 0;
        }
        if self.boundaries.is_empty() {
            let h = xxh3_64_with_seed(user_key, ROUTE_HASH_SEED);
            ((u128::from(h) * self.count as u128) >> 64) as usize
        } else {
            self.boundaries
                .partition_point(|b| b.as_slice() <= user_key)
        }
    }

    /// Whether region `r` may hold keys in `[lower, upper)` (`None` =
    /// unbounded). Always true with hash routing.
    pub fn may_overlap(&self, r: usize, lower: Option<&[u8]>, upper: Option<&[u8]>) -> bool {
        if self.boundaries.is_empty() {
            return true;
        }
        // Region r is [start, end).
        let start = r.checked_sub(1).map(|i| self.boundaries[i].as_slice());
        let end = self.boundaries.get(r).map(Vec::as_slice);
        let below = matches!((end, lower), (Some(e), Some(l)) if e <= l);
        let above = matches!((start, upper), (Some(s), Some(u)) if s >= u);
        !(below || above)
    }
}

/// The memtables of one region. Guarded by the engine's `state` mutex.
pub struct RegionMem {
    /// The mutable memtable.
    pub mem: Arc<MemTable>,
    /// Immutable memtables, oldest first.
    pub imms: VecDeque<Arc<MemTable>>,
}

/// The memtables of every region and the WALs they keep alive.
pub struct Regions {
    /// One entry per region.
    pub regions: Vec<RegionMem>,
    /// Number of the WAL being written.
    pub wal_number: u64,
    /// SSD WAL files not yet deleted, oldest first.
    pub ssd_wals: VecDeque<u64>,
    /// Where the compaction picker starts next (round robin over regions).
    pub next_pick: usize,
    /// Bytes of each new memtable's key filter (`Options::memtable_filter_ratio`).
    filter_bytes: usize,
}

impl Regions {
    /// `count` regions with empty memtables fed by WAL `wal_number`, each
    /// memtable with a key filter of `filter_bytes`.
    pub fn new(count: usize, wal_number: u64, filter_bytes: usize) -> Regions {
        Regions {
            regions: (0..count)
                .map(|_| RegionMem {
                    mem: Arc::new(MemTable::with_filter(wal_number, filter_bytes)),
                    imms: VecDeque::new(),
                })
                .collect(),
            wal_number,
            ssd_wals: VecDeque::new(),
            next_pick: 0,
            filter_bytes,
        }
    }

    /// Immutable memtables over all regions.
    pub fn imm_count(&self) -> usize {
        self.regions.iter().map(|r| r.imms.len()).sum()
    }

    /// Whether every immutable memtable is flushed.
    pub fn no_imms(&self) -> bool {
        self.regions.iter().all(|r| r.imms.is_empty())
    }

    /// Whether the mutable memtables are full: the one region's memtable
    /// reached `memtable_size_bytes`, or (several regions) their total did.
    pub fn mutable_full(&self, opts: &Options) -> bool {
        match self.regions.as_slice() {
            [one] => one.mem.size_bytes() >= opts.memtable_size_bytes,
            _ => self.mutable_bytes() >= opts.memtable_size_bytes,
        }
    }

    /// Room left in the memtable budget (`memtable_count_max` ×
    /// `memtable_size_bytes`, the point where a switch must wait for a
    /// flush), in user bytes: the memtables' bytes converted with the
    /// mutable memtables' ratio of payload to charged bytes.
    pub fn headroom(&self, opts: &Options) -> crate::design::Headroom {
        let budget = (opts.memtable_count_max * opts.memtable_size_bytes) as u64;
        let used: usize = self
            .regions
            .iter()
            .map(|r| r.mem.size_bytes() + r.imms.iter().map(|m| m.size_bytes()).sum::<usize>())
            .sum();
        let (charged, payload) = self.regions.iter().fold((0u64, 0u64), |(c, p), r| {
            (c + r.mem.size_bytes() as u64, p + r.mem.payload_bytes())
        });
        let ratio = if charged == 0 {
            1.0
        } else {
            payload as f64 / charged as f64
        };
        crate::design::Headroom {
            free_bytes: (budget.saturating_sub(used as u64) as f64 * ratio) as u64,
            capacity_bytes: (budget as f64 * ratio) as u64,
            // Memtables fill by writes and empty by whole flushes: no step
            // takes room at once.
            step_bytes: 0,
        }
    }

    /// Bytes of the mutable memtables, all regions together.
    pub fn mutable_bytes(&self) -> usize {
        self.regions.iter().map(|r| r.mem.size_bytes()).sum()
    }

    /// Whether any mutable memtable holds data.
    pub fn any_mutable_data(&self) -> bool {
        self.regions.iter().any(|r| !r.mem.is_empty())
    }

    /// Whether the immutable memtables use up their budget (a switch must
    /// wait for a flush): `memtable_count_max − 1` of them with one region,
    /// `(memtable_count_max − 1) × memtable_size_bytes` bytes with several
    /// (their memtables are smaller; counting them would waste the budget).
    pub fn imms_full(&self, opts: &Options) -> bool {
        let slots = opts.memtable_count_max - 1;
        match self.regions.as_slice() {
            [one] => one.imms.len() >= slots,
            all => {
                let bytes: usize = all
                    .iter()
                    .flat_map(|r| r.imms.iter())
                    .map(|m| m.size_bytes())
                    .sum();
                bytes >= slots * opts.memtable_size_bytes
            }
        }
    }

    /// Makes mutable memtables immutable after WAL `wal_number` was created:
    /// every non-empty one with `all`, else the largest; empty ones are
    /// renewed with the new WAL's number so they hold no old WAL back.
    pub fn switch(&mut self, wal_number: u64, all: bool) {
        debug_assert!(wal_number > self.wal_number);
        self.wal_number = wal_number;
        let largest = if all {
            None
        } else {
            self.regions
                .iter()
                .enumerate()
                .max_by_key(|(i, r)| (r.mem.size_bytes(), std::cmp::Reverse(*i)))
                .map(|(i, _)| i)
        };
        for (i, r) in self.regions.iter_mut().enumerate() {
            let switch = !r.mem.is_empty() && (all || largest == Some(i));
            if switch || r.mem.is_empty() {
                let mem = MemTable::with_filter(wal_number, self.filter_bytes);
                let old = std::mem::replace(&mut r.mem, Arc::new(mem));
                if switch {
                    r.imms.push_back(old);
                }
            }
        }
    }

    /// The region whose oldest immutable memtable is the oldest of all,
    /// among the regions `ready` accepts (the design's flush target has
    /// room); ties go to the lower region.
    pub fn flush_candidate(&self, mut ready: impl FnMut(usize) -> bool) -> Option<usize> {
        let mut best: Option<(u64, usize)> = None;
        for (i, r) in self.regions.iter().enumerate() {
            if let Some(front) = r.imms.front() {
                if best.is_none_or(|(log, _)| front.log_number() < log) && ready(i) {
                    best = Some((front.log_number(), i));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    /// The log number region `region` records after flushing its oldest
    /// immutable memtable: its successor's.
    pub fn next_log_number(&self, region: usize) -> u64 {
        let r = &self.regions[region];
        r.imms.get(1).unwrap_or(&r.mem).log_number()
    }

    /// WALs numbered below this hold no unflushed record once region
    /// `flushed`'s oldest immutable memtable is in tables (invariant 3):
    /// the oldest log number of a non-empty memtable, at most the current WAL.
    pub fn wal_bound(&self, flushed: usize) -> u64 {
        let mut bound = self.wal_number;
        for (i, r) in self.regions.iter().enumerate() {
            let skip = usize::from(i == flushed);
            let oldest = r
                .imms
                .iter()
                .skip(skip)
                .chain(std::iter::once(&r.mem))
                .find(|m| !m.is_empty());
            if let Some(m) = oldest {
                bound = bound.min(m.log_number());
            }
        }
        bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(n: usize, b: &[&str]) -> Router {
        Router {
            count: n,
            boundaries: b.iter().map(|s| s.as_bytes().to_vec()).collect(),
        }
    }

    #[test]
    fn range_routing_and_overlap() {
        let r = router(3, &["g", "p"]);
        let got: Vec<usize> = ["", "apple", "g", "kiwi", "p", "zebra"]
            .iter()
            .map(|k| r.route(k.as_bytes()))
            .collect();
        assert_eq!(got, [0, 0, 1, 1, 2, 2]);
        assert!(r.may_overlap(0, None, Some(b"b")));
        assert!(!r.may_overlap(1, None, Some(b"g")));
        assert!(r.may_overlap(1, None, Some(b"h")));
        assert!(!r.may_overlap(0, Some(b"g"), None));
        assert!(r.may_overlap(2, Some(b"x"), None));
        assert!(!r.may_overlap(2, Some(b"a"), Some(b"p")));
    }

    #[test]
    fn hash_routing_spreads_and_one_region_is_zero() {
        let r = router(4, &[]);
        let mut counts = [0usize; 4];
        for i in 0..4000u32 {
            counts[r.route(format!("key{i:08}").as_bytes())] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
        assert_eq!(router(1, &[]).route(b"anything"), 0);
    }

    #[test]
    fn switch_largest_and_bound() {
        let mut rs = Regions::new(3, 5, 0);
        rs.regions[1]
            .mem
            .add(1, crate::key::Kind::Put, b"a", b"xxxxxxxx");
        rs.regions[2].mem.add(2, crate::key::Kind::Put, b"b", b"x");
        rs.switch(8, false);
        assert_eq!(rs.regions[1].imms.len(), 1);
        assert!(rs.regions[2].imms.is_empty());
        assert_eq!(rs.regions[0].mem.log_number(), 8, "empty memtable renewed");
        assert_eq!(rs.regions[2].mem.log_number(), 5, "non-empty memtable kept");
        assert_eq!(rs.flush_candidate(|_| true), Some(1));
        assert_eq!(rs.next_log_number(1), 8);
        // Region 2 still has records of WAL 5.
        assert_eq!(rs.wal_bound(1), 5);
        rs.switch(9, true);
        rs.regions[1].imms.pop_front();
        assert_eq!(rs.wal_bound(2), 9);
    }
}
