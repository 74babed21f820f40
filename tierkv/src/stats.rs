//! What every design reports (DESIGN.md §5): user bytes, bytes written per
//! tier and cause, every stall interval, every flush and compaction, and the
//! level shape. [`Stats`] is a snapshot; the engine keeps a [`StatsRecorder`]
//! that its threads update.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Which tier a table or a byte count belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// Persistent memory.
    Pm,
    /// SSD files.
    Ssd,
}

impl Tier {
    /// `pm` or `ssd`.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Pm => "pm",
            Tier::Ssd => "ssd",
        }
    }
}

/// Why writes were delayed or stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StallCause {
    /// All memtables full, waiting for a flush.
    MemtableFull,
    /// L0 file count reached the slowdown trigger (writes delayed).
    L0Slowdown,
    /// L0 file count reached the stop trigger (writes stopped).
    L0Stop,
    /// Pending compaction bytes over the soft limit (writes delayed).
    PendingCompactionSlowdown,
    /// Pending compaction bytes over the hard limit (writes stopped).
    PendingCompactionStop,
    /// The PM tier is full, waiting for compaction to free pages.
    PmFull,
}

impl StallCause {
    /// A short name for tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            StallCause::MemtableFull => "memtable-full",
            StallCause::L0Slowdown => "l0-slowdown",
            StallCause::L0Stop => "l0-stop",
            StallCause::PendingCompactionSlowdown => "pending-compaction-slowdown",
            StallCause::PendingCompactionStop => "pending-compaction-stop",
            StallCause::PmFull => "pm-full",
        }
    }
}

/// One interval during which a writer was delayed or stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StallInterval {
    /// Start, as time since the database was opened.
    pub start: Duration,
    /// How long it lasted.
    pub duration: Duration,
    /// Why.
    pub cause: StallCause,
}

/// One memtable flush.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushRecord {
    /// Start, since open.
    pub start: Duration,
    /// Duration.
    pub duration: Duration,
    /// Bytes written by the flush.
    pub output_bytes: u64,
    /// Tier the flush wrote to.
    pub tier: Tier,
}

/// One compaction job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionRecord {
    /// Start, since open.
    pub start: Duration,
    /// Duration.
    pub duration: Duration,
    /// What kind of job (`l0-l1`, `leveled`, `trivial-move`, …).
    pub kind: String,
    /// Input bytes per level: `(level, bytes)`.
    pub input_bytes: Vec<(usize, u64)>,
    /// Level the output went to.
    pub output_level: usize,
    /// Bytes written.
    pub output_bytes: u64,
}

/// How long the tables that left one level had lived there, counted in
/// compactions (TLSM's Table 2, the basis of its PM threshold level): the
/// jobs that removed tables (merges, moves, evictions, the tables' own
/// included) between the version edit that added a table at the level and
/// the one that removed it. Only tables added since the database opened
/// are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableLifetime {
    /// Level.
    pub level: usize,
    /// Tables that left the level.
    pub tables: u64,
    /// Their lifetimes, summed.
    pub compactions: u64,
}

impl TableLifetime {
    /// Mean lifetime in compactions.
    pub fn mean(&self) -> f64 {
        if self.tables == 0 {
            0.0
        } else {
            self.compactions as f64 / self.tables as f64
        }
    }
}

/// Files and bytes of one level in one tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelShape {
    /// Level number (0 = L0).
    pub level: usize,
    /// Tier.
    pub tier: Tier,
    /// Number of tables.
    pub tables: usize,
    /// Total bytes.
    pub bytes: u64,
}

/// The level shape a design works to: what its picker scores levels
/// against, so that compaction debt (bytes over target) is measured from
/// the design rather than assumed (`Design::level_targets`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelTargets {
    /// L0 tables at which L0 compaction starts, for designs that count L0
    /// in tables (`classic`: the compaction trigger; `vlsm`: its queue).
    pub l0_tables: Option<usize>,
    /// Target bytes per level, index = level (one region). `bytes[0]` is
    /// L0's: the bytes at which it is compacted (a PM container's limit;
    /// the L0 trigger's worth of memtables), 0 if none.
    pub bytes: Vec<u64>,
}

/// Bytes written, by cause.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BytesWritten {
    /// WAL bytes written to SSD files.
    pub wal_ssd: u64,
    /// WAL bytes written to PM.
    pub wal_pm: u64,
    /// Flush output written to SSD.
    pub flush_ssd: u64,
    /// Flush output written to PM.
    pub flush_pm: u64,
    /// Compaction output written to SSD, indexed by output level.
    pub compaction_ssd: Vec<u64>,
    /// Compaction output written to PM.
    pub compaction_pm: u64,
    /// PM bytes written by pointer-only work (link words, nodes pointing
    /// at entries already in PM), by flushes and compactions alike.
    pub pm_relinked: u64,
    /// MANIFEST bytes.
    pub manifest: u64,
    /// PM bytes of the page allocator's metadata (superblock, bitmap).
    pub pm_metadata: u64,
}

impl BytesWritten {
    /// Everything written to the SSD tier.
    pub fn ssd_total(&self) -> u64 {
        self.wal_ssd + self.flush_ssd + self.compaction_ssd.iter().sum::<u64>() + self.manifest
    }
    /// Bytes written to the PM tier but relinks: WAL, flushes,
    /// compactions and the allocator's metadata.
    pub fn pm_written(&self) -> u64 {
        self.wal_pm + self.flush_pm + self.compaction_pm + self.pm_metadata
    }
    /// Everything written to the PM tier: data and relinks.
    pub fn pm_total(&self) -> u64 {
        self.pm_written() + self.pm_relinked
    }
}

/// A snapshot of the engine's statistics.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Time since open when the snapshot was taken.
    pub uptime: Duration,
    /// Writes (puts and deletes) accepted.
    pub user_ops: u64,
    /// Key + value bytes of accepted writes.
    pub user_bytes: u64,
    /// Bytes written, per tier and cause.
    pub written: BytesWritten,
    /// Bytes read from the SSD tier by flushes, compactions and reads.
    pub ssd_bytes_read: u64,
    /// Every stall interval, in order of start.
    pub stalls: Vec<StallInterval>,
    /// Every flush.
    pub flushes: Vec<FlushRecord>,
    /// Every compaction.
    pub compactions: Vec<CompactionRecord>,
    /// The level shape now (with several regions: totals over them, per
    /// level and tier).
    pub levels: Vec<LevelShape>,
    /// The level shape of each region (`Options::regions`), in region order.
    pub regions: Vec<Vec<LevelShape>>,
    /// Block cache hits.
    pub block_cache_hits: u64,
    /// Block cache misses.
    pub block_cache_misses: u64,
    /// How the PM tier persists (`Persistence::describe`, e.g.
    /// `memory-file (clwb + sfence)`); `None` without a PM tier.
    pub pm_persistence: Option<String>,
    /// Writes the pacing controller paused (db/control.rs).
    pub paced_writes: u64,
    /// Time those pauses took in all.
    pub paced_time: Duration,
    /// Under `Options::adaptive_compaction_priority`: how many times the
    /// compaction threads changed policy, and whether they are under
    /// `SCHED_IDLE` now.
    pub compaction_priority: Option<(u64, bool)>,
    /// Figures the design reports (`Design::stats`), by name, in its order.
    pub design: Vec<(String, String)>,
    /// The level targets of the design (one region's), if it reports them.
    pub level_targets: Option<LevelTargets>,
    /// How long tables lived per level (levels no table has left yet are
    /// absent).
    pub table_lifetimes: Vec<TableLifetime>,
}

impl Stats {
    /// Total time writers were delayed or stopped.
    pub fn stall_total(&self) -> Duration {
        self.stalls.iter().map(|s| s.duration).sum()
    }

    /// SSD write amplification: SSD bytes written / user bytes.
    pub fn ssd_write_amp(&self) -> f64 {
        self.per_user_byte(self.written.ssd_total())
    }

    /// PM write amplification: PM bytes written (data and relinks) / user
    /// bytes.
    pub fn pm_write_amp(&self) -> f64 {
        self.per_user_byte(self.written.pm_total())
    }

    fn per_user_byte(&self, bytes: u64) -> f64 {
        if self.user_bytes == 0 {
            0.0
        } else {
            bytes as f64 / self.user_bytes as f64
        }
    }

    /// The statistics as a text table (`property("tierkv.stats")`).
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let mb = |b: u64| b as f64 / 1048576.0;
        let _ = writeln!(
            s,
            "uptime {:.1} s, {} writes, {:.1} MB user data",
            self.uptime.as_secs_f64(),
            self.user_ops,
            mb(self.user_bytes)
        );
        if let Some(p) = &self.pm_persistence {
            let _ = writeln!(s, "PM tier persists with {p}");
        }
        let _ = writeln!(s, "\n** Levels **");
        let _ = writeln!(
            s,
            "{:>5} {:>4} {:>7} {:>12}",
            "level", "tier", "tables", "MB"
        );
        for l in &self.levels {
            let _ = writeln!(
                s,
                "{:>5} {:>4} {:>7} {:>12.1}",
                format!("L{}", l.level),
                l.tier.name(),
                l.tables,
                mb(l.bytes)
            );
        }
        if let Some(t) = &self.level_targets {
            let per: Vec<String> = t
                .bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b > 0)
                .map(|(l, b)| format!("L{l} {:.1}", mb(*b)))
                .collect();
            let _ = writeln!(
                s,
                "targets (MB{}): {}",
                t.l0_tables
                    .map_or(String::new(), |n| format!("; L0 compacts at {n} tables")),
                per.join("  ")
            );
        }
        if !self.table_lifetimes.is_empty() {
            let per: Vec<String> = self
                .table_lifetimes
                .iter()
                .map(|t| format!("L{} {:.1} ({} tables)", t.level, t.mean(), t.tables))
                .collect();
            let _ = writeln!(s, "table lifetimes (compactions): {}", per.join("  "));
        }
        if self.regions.len() > 1 {
            // One line per region: tables per level (L0 first).
            let _ = writeln!(s, "per region (tables at L0 L1 ...):");
            for (r, shape) in self.regions.iter().enumerate() {
                let depth = shape.iter().map(|l| l.level + 1).max().unwrap_or(0);
                let counts: Vec<String> = (0..depth)
                    .map(|lv| {
                        let n: usize = shape
                            .iter()
                            .filter(|l| l.level == lv)
                            .map(|l| l.tables)
                            .sum();
                        n.to_string()
                    })
                    .collect();
                let _ = writeln!(s, "  R{r}: {}", counts.join(" "));
            }
        }
        let w = &self.written;
        let _ = writeln!(s, "\n** Bytes written (MB) **");
        let _ = writeln!(
            s,
            "wal ssd {:.1}  wal pm {:.1}  flush ssd {:.1}  flush pm {:.1}  manifest {:.1}",
            mb(w.wal_ssd),
            mb(w.wal_pm),
            mb(w.flush_ssd),
            mb(w.flush_pm),
            mb(w.manifest)
        );
        for (lvl, b) in w.compaction_ssd.iter().enumerate().filter(|(_, b)| **b > 0) {
            let _ = writeln!(s, "compaction -> L{lvl} ssd {:.1}", mb(*b));
        }
        let _ = writeln!(
            s,
            "compaction pm {:.1}  pm relinked {:.1}",
            mb(w.compaction_pm),
            mb(w.pm_relinked)
        );
        let _ = writeln!(
            s,
            "ssd total {:.1}  pm written {:.1}  pm total {:.1}  ssd read {:.1}  ssd write-amp {:.2}  pm write-amp {:.2}",
            mb(w.ssd_total()),
            mb(w.pm_written()),
            mb(w.pm_total()),
            mb(self.ssd_bytes_read),
            self.ssd_write_amp(),
            self.pm_write_amp()
        );
        let _ = writeln!(s, "\n** Stalls **");
        let _ = writeln!(
            s,
            "{} intervals, {:.3} s total",
            self.stalls.len(),
            self.stall_total().as_secs_f64()
        );
        let mut causes: Vec<(StallCause, Duration, usize)> = Vec::new();
        for st in &self.stalls {
            match causes.iter_mut().find(|c| c.0 == st.cause) {
                Some(c) => {
                    c.1 += st.duration;
                    c.2 += 1;
                }
                None => causes.push((st.cause, st.duration, 1)),
            }
        }
        for (c, d, n) in causes {
            let _ = writeln!(
                s,
                "  {:<28} {:>6} x {:>9.3} s",
                c.name(),
                n,
                d.as_secs_f64()
            );
        }
        let _ = writeln!(
            s,
            "paced: {} pauses, {:.3} s",
            self.paced_writes,
            self.paced_time.as_secs_f64()
        );
        if let Some((switches, idle)) = self.compaction_priority {
            let _ = writeln!(
                s,
                "compaction priority (adaptive): {switches} switches, now {}",
                if idle { "SCHED_IDLE" } else { "normal" }
            );
        }
        let _ = writeln!(s, "\n** Flushes and compactions **");
        let flushed: u64 = self.flushes.iter().map(|f| f.output_bytes).sum();
        let flush_s: f64 = self.flushes.iter().map(|f| f.duration.as_secs_f64()).sum();
        let flush_max_s = self
            .flushes
            .iter()
            .map(|f| f.duration.as_secs_f64())
            .fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "{} flushes, {:.1} MB, {:.3} s (longest {:.3} s)",
            self.flushes.len(),
            mb(flushed),
            flush_s,
            flush_max_s
        );
        let compacted: u64 = self.compactions.iter().map(|c| c.output_bytes).sum();
        let compact_s: f64 = self
            .compactions
            .iter()
            .map(|c| c.duration.as_secs_f64())
            .sum();
        let _ = writeln!(
            s,
            "{} compactions, {:.1} MB out, {:.3} s",
            self.compactions.len(),
            mb(compacted),
            compact_s
        );
        let _ = writeln!(
            s,
            "block cache: {} hits, {} misses",
            self.block_cache_hits, self.block_cache_misses
        );
        if !self.design.is_empty() {
            let _ = writeln!(s, "\n** Design **");
            for (k, v) in &self.design {
                let _ = writeln!(s, "{k}: {v}");
            }
        }
        s
    }
}

/// The live counters the engine's threads update.
pub struct StatsRecorder {
    opened: Instant,
    /// Writes accepted.
    pub user_ops: AtomicU64,
    /// User bytes accepted.
    pub user_bytes: AtomicU64,
    /// SSD bytes read.
    pub ssd_bytes_read: AtomicU64,
    /// Block cache hits.
    pub block_cache_hits: AtomicU64,
    /// Block cache misses.
    pub block_cache_misses: AtomicU64,
    /// How the PM tier persists (set once at open).
    pub pm_persistence: std::sync::OnceLock<String>,
    /// Pauses of the pacing controller: count and total nanoseconds.
    paused: (AtomicU64, AtomicU64),
    log: Mutex<Log>,
}

#[derive(Default)]
struct Log {
    written: BytesWritten,
    stalls: Vec<StallInterval>,
    flushes: Vec<FlushRecord>,
    compactions: Vec<CompactionRecord>,
    lifetimes: Lifetimes,
}

/// The book behind [`TableLifetime`].
#[derive(Default)]
struct Lifetimes {
    /// Version edits that removed tables so far.
    jobs: u64,
    /// Live tables added since open: id → (level, `jobs` when added).
    born: std::collections::HashMap<u64, (usize, u64)>,
    /// Per level.
    levels: Vec<TableLifetime>,
}

impl Default for StatsRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl StatsRecorder {
    /// A recorder whose clock starts now.
    pub fn new() -> Self {
        StatsRecorder {
            opened: Instant::now(),
            user_ops: AtomicU64::new(0),
            user_bytes: AtomicU64::new(0),
            ssd_bytes_read: AtomicU64::new(0),
            block_cache_hits: AtomicU64::new(0),
            block_cache_misses: AtomicU64::new(0),
            pm_persistence: std::sync::OnceLock::new(),
            paused: (AtomicU64::new(0), AtomicU64::new(0)),
            log: Mutex::new(Log::default()),
        }
    }

    /// Time since open of an instant.
    pub fn since_open(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.opened)
    }

    /// Adds to one of the written-bytes counters.
    pub fn add_written(&self, f: impl FnOnce(&mut BytesWritten)) {
        f(&mut self.log.lock().written);
    }

    /// Records a pause of the pacing controller that started at `start`
    /// and ended now (counted, not listed: there may be millions).
    pub fn record_pause(&self, start: Instant) {
        self.paused.0.fetch_add(1, Ordering::Relaxed);
        self.paused
            .1
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// Records a stall that started at `start` and ended now.
    pub fn record_stall(&self, start: Instant, cause: StallCause) {
        let iv = StallInterval {
            start: self.since_open(start),
            duration: start.elapsed(),
            cause,
        };
        self.log.lock().stalls.push(iv);
    }

    /// Records a finished flush that wrote `pm_bytes` of data and
    /// `pm_relinked_bytes` of links into PM and `ssd_bytes` to SSD.
    pub fn record_flush(
        &self,
        start: Instant,
        pm_bytes: u64,
        pm_relinked_bytes: u64,
        ssd_bytes: u64,
    ) {
        let tier = if ssd_bytes > 0 && pm_bytes + pm_relinked_bytes == 0 {
            Tier::Ssd
        } else {
            Tier::Pm
        };
        let r = FlushRecord {
            start: self.since_open(start),
            duration: start.elapsed(),
            output_bytes: pm_bytes + pm_relinked_bytes + ssd_bytes,
            tier,
        };
        let mut log = self.log.lock();
        log.written.flush_ssd += ssd_bytes;
        log.written.flush_pm += pm_bytes;
        log.written.pm_relinked += pm_relinked_bytes;
        log.flushes.push(r);
    }

    /// Records a finished compaction whose output wrote `pm_bytes` of data
    /// and `pm_relinked_bytes` of links into PM, and `rec.output_bytes −
    /// pm_bytes − pm_relinked_bytes` to SSD at `rec.output_level`.
    pub fn record_compaction(&self, rec: CompactionRecord, pm_bytes: u64, pm_relinked_bytes: u64) {
        let mut log = self.log.lock();
        let ssd = rec
            .output_bytes
            .saturating_sub(pm_bytes + pm_relinked_bytes);
        let v = &mut log.written.compaction_ssd;
        if v.len() <= rec.output_level {
            v.resize(rec.output_level + 1, 0);
        }
        v[rec.output_level] += ssd;
        log.written.compaction_pm += pm_bytes;
        log.written.pm_relinked += pm_relinked_bytes;
        log.compactions.push(rec);
    }

    /// Records the tables one applied version edit removed and added, as
    /// `(level, table id)` (the version set, once the edit is durable).
    pub fn record_table_changes(
        &self,
        removed: &[(u32, u64)],
        added: impl Iterator<Item = (u32, u64)>,
    ) {
        let mut log = self.log.lock();
        let b = &mut log.lifetimes;
        if !removed.is_empty() {
            b.jobs += 1;
        }
        for &(level, id) in removed {
            let level = level as usize;
            match b.born.remove(&id) {
                Some((l, at)) if l == level => {
                    if b.levels.len() <= level {
                        b.levels.resize_with(level + 1, TableLifetime::default);
                    }
                    let t = &mut b.levels[level];
                    t.level = level;
                    t.tables += 1;
                    t.compactions += b.jobs - at;
                }
                _ => {}
            }
        }
        for (level, id) in added {
            b.born.insert(id, (level as usize, b.jobs));
        }
    }

    /// A snapshot, with the level shape of each region; `levels` gets
    /// their per-level, per-tier totals.
    pub fn snapshot_regions(&self, regions: Vec<Vec<LevelShape>>) -> Stats {
        let mut levels: Vec<LevelShape> = Vec::new();
        for s in regions.iter().flatten() {
            match levels
                .iter_mut()
                .find(|l| l.level == s.level && l.tier == s.tier)
            {
                Some(l) => {
                    l.tables += s.tables;
                    l.bytes += s.bytes;
                }
                None => levels.push(s.clone()),
            }
        }
        levels.sort_by_key(|l| (l.level, l.tier == Tier::Ssd));
        Stats {
            regions,
            ..self.snapshot(levels)
        }
    }

    /// A snapshot, with the given level shape.
    pub fn snapshot(&self, levels: Vec<LevelShape>) -> Stats {
        let log = self.log.lock();
        Stats {
            uptime: self.opened.elapsed(),
            user_ops: self.user_ops.load(Ordering::Relaxed),
            user_bytes: self.user_bytes.load(Ordering::Relaxed),
            written: log.written.clone(),
            ssd_bytes_read: self.ssd_bytes_read.load(Ordering::Relaxed),
            stalls: log.stalls.clone(),
            flushes: log.flushes.clone(),
            compactions: log.compactions.clone(),
            levels: levels.clone(),
            regions: vec![levels],
            block_cache_hits: self.block_cache_hits.load(Ordering::Relaxed),
            block_cache_misses: self.block_cache_misses.load(Ordering::Relaxed),
            pm_persistence: self.pm_persistence.get().cloned(),
            paced_writes: self.paused.0.load(Ordering::Relaxed),
            paced_time: Duration::from_nanos(self.paused.1.load(Ordering::Relaxed)),
            compaction_priority: None,
            design: Vec::new(),
            level_targets: None,
            table_lifetimes: log
                .lifetimes
                .levels
                .iter()
                .filter(|t| t.tables > 0)
                .copied()
                .collect(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Lifetimes count the jobs that removed tables between a table's
    /// arrival at a level and its removal from it, its own removal
    /// included; a move starts a new life at the level below; tables from
    /// before the open are not counted.
    #[test]
    fn table_lifetimes_count_jobs_between_add_and_remove() {
        let r = StatsRecorder::new();
        r.record_table_changes(&[], [(0, 1)].into_iter()); // flush
        r.record_table_changes(&[], [(0, 2)].into_iter()); // flush
                                                           // Job 1: L0 -> L1.
        r.record_table_changes(&[(0, 1), (0, 2)], [(1, 3)].into_iter());
        r.record_table_changes(&[], [(0, 4)].into_iter());
        // Job 2: a table from before the open.
        r.record_table_changes(&[(1, 99)], [(2, 5)].into_iter());
        // Job 3: a move of table 3 to L2.
        r.record_table_changes(&[(1, 3)], [(2, 3)].into_iter());
        // Job 4: L0 -> L1 of table 4.
        r.record_table_changes(&[(0, 4)], [(1, 6)].into_iter());
        let s = r.snapshot(Vec::new());
        assert_eq!(
            s.table_lifetimes,
            vec![
                TableLifetime {
                    level: 0,
                    tables: 3,
                    compactions: 1 + 1 + 3,
                },
                TableLifetime {
                    level: 1,
                    tables: 1,
                    compactions: 2,
                },
            ]
        );
        assert!((s.table_lifetimes[0].mean() - 5.0 / 3.0).abs() < 1e-9);
        assert!(s
            .to_table()
            .contains("table lifetimes (compactions): L0 1.7 (3 tables)  L1 2.0 (1 tables)"));
    }
}
