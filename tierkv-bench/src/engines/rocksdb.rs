//! RocksDB as the papers ran it, through the `rocksdb` crate linked to the
//! system's librocksdb (Debian's 7.8.3).
//!
//! - `rocksdb-ssd`: everything in the SSD directory.
//! - `rocksdb-l0-pm` ("RocksDB-L0-NVM"): `db_paths[0]` = the PM directory
//!   with target size = the PM tier, then the SSD directory, and the WAL in
//!   the PM directory. RocksDB places a level in the first path whose target
//!   still holds it (L0 counted as large as L1), so L0 lands on PM and L1+ on
//!   SSD at every BENCH.md scale.
//! - `rocksdb-pm` ("RocksDB-NVM", RangeKV §V-A; Fig. 20's all-on-NVM
//!   store): `db_paths[0]` = the PM directory with no size limit, and the
//!   WAL there: every table and log on PM (MANIFEST, LOG and OPTIONS stay
//!   in the SSD directory).
//!
//! # Where the numbers come from
//!
//! Statistics are enabled (`Options::enable_statistics`), and the counters
//! are RocksDB's own tickers:
//!
//! - stall seconds: `rocksdb.stall.micros` — the same counter
//!   (`kIntStatsWriteStallMicros`) that `rocksdb.stats` prints as
//!   "Cumulative stall" (checked by a test); stall count: the count of the `rocksdb.db.write.stall`
//!   histogram (write groups that entered the delay path); longest stall: that
//!   histogram's P100 (cumulative since open, so a benchmark after a stalling
//!   one reports the earlier maximum — only when it stalled itself).
//! - bytes written: `rocksdb.wal.bytes`, `rocksdb.flush.write.bytes`,
//!   `rocksdb.compact.write.bytes`; bytes read from files:
//!   `rocksdb.non.last.level.read.bytes` + `rocksdb.last.level.read.bytes`
//!   (compaction and user reads).
//! - flushes and compactions: the `EVENT_LOG_v1` JSON lines of the info log
//!   (`<db>/LOG`): `flush_started` / `table_file_creation` /
//!   `flush_finished` and `compaction_started` (input files per level) /
//!   `compaction_finished` (duration, output level and bytes). The log is
//!   flushed before it is read by a no-op `SetOptions` (RocksDB flushes its
//!   info log at the end of `SetOptions`).
//! - for `rocksdb-pm`: every write counts as a PM write and reads as PM
//!   reads (no SSD reads).
//! - for `rocksdb-l0-pm`: WAL and flush bytes count as PM writes, compaction
//!   output to L0 as PM and to L1+ as SSD; compaction input from L0 counts as
//!   PM reads and is taken out of the SSD reads (user reads of L0 files still
//!   count as SSD reads: the ticker does not split them by path).
//! - level shape: `DB::live_files`, the tier of each file found by whether
//!   it exists in the PM directory; level targets from the options
//!   ([`level_targets`]) and `rocksdb.estimate-pending-compaction-bytes`,
//!   for the compaction debt.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, DBPath, Options, WriteOptions, DB};

use super::{
    CompactionEvent, Engine, EngineSetup, EngineStats, FlushEvent, LevelBytes, LevelShape,
    LevelTargets, StallStats,
};
use crate::error::{io_err, Error, Result};

/// Where a RocksDB under test keeps its tables and WAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Everything in the SSD directory (`rocksdb-ssd`).
    Ssd,
    /// L0 and the WAL in the PM directory (`rocksdb-l0-pm`).
    L0OnPm,
    /// Every table and the WAL in the PM directory (`rocksdb-pm`).
    AllOnPm,
}

/// A RocksDB instance under test.
pub struct RocksEngine {
    db: DB,
    opts: Options,
    write_opts: WriteOptions,
    dir: PathBuf,
    pm_dir: Option<PathBuf>,
    placement: Placement,
    opened: Instant,
    opened_wall_us: u64,
    l0_trigger: String,
    targets: LevelTargets,
    _cache: Cache,
}

fn rerr(e: rocksdb::Error) -> Error {
    Error::Engine(format!("rocksdb: {e}"))
}

fn wall_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl RocksEngine {
    /// Opens a fresh RocksDB in `setup.ssd_dir` (and `setup.pm_dir`, by
    /// `placement`), destroying what was there.
    pub fn open(setup: &EngineSetup, placement: Placement) -> Result<RocksEngine> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(match setup.compression {
            ::tierkv::Compression::None => DBCompressionType::None,
            ::tierkv::Compression::Lz4 => DBCompressionType::Lz4,
            ::tierkv::Compression::Zstd => DBCompressionType::Zstd,
        });
        opts.set_write_buffer_size(setup.memtable_size_bytes as usize);
        opts.set_max_write_buffer_number(setup.memtable_count as i32);
        opts.set_target_file_size_base(setup.sst_size_bytes);
        opts.set_max_bytes_for_level_base(setup.l1_size_bytes);
        opts.set_max_bytes_for_level_multiplier(setup.level_multiplier as f64);
        opts.set_max_background_jobs(setup.background_jobs as i32);
        if setup.subcompactions > 0 {
            opts.set_max_subcompactions(setup.subcompactions as u32);
        }
        if let Some(ratio) = setup.memtable_bloom_ratio.filter(|r| *r > 0.0) {
            opts.set_memtable_prefix_bloom_ratio(ratio);
            opts.set_memtable_whole_key_filtering(true);
        }
        opts.set_level_zero_file_num_compaction_trigger(setup.l0_triggers.0 as i32);
        opts.set_level_zero_slowdown_writes_trigger(setup.l0_triggers.1 as i32);
        opts.set_level_zero_stop_writes_trigger(setup.l0_triggers.2 as i32);
        opts.set_soft_pending_compaction_bytes_limit(
            setup.pending_compaction_bytes_limits.0 as usize,
        );
        opts.set_hard_pending_compaction_bytes_limit(
            setup.pending_compaction_bytes_limits.1 as usize,
        );
        opts.set_use_direct_io_for_flush_and_compaction(setup.direct_io);
        opts.set_bytes_per_sync(setup.bytes_per_sync);
        opts.set_wal_bytes_per_sync(setup.wal_bytes_per_sync);
        opts.enable_statistics();
        let cache = Cache::new_lru_cache(setup.block_cache_bytes as usize).map_err(rerr)?;
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_block_size(4096);
        if setup.bloom_bits > 0 {
            table.set_bloom_filter(f64::from(setup.bloom_bits), false);
        }
        opts.set_block_based_table_factory(&table);

        let dir = setup.ssd_dir.clone();
        std::fs::create_dir_all(&dir).map_err(io_err(format!("create {}", dir.display())))?;
        let pm_dir = if placement == Placement::Ssd {
            None
        } else {
            let pm = setup.pm_dir.clone();
            std::fs::create_dir_all(&pm).map_err(io_err(format!("create {}", pm.display())))?;
            let paths = if placement == Placement::AllOnPm {
                vec![DBPath::new(&pm, u64::MAX / 2).map_err(rerr)?]
            } else {
                vec![
                    DBPath::new(&pm, setup.pm_size_bytes).map_err(rerr)?,
                    DBPath::new(&dir, u64::MAX / 2).map_err(rerr)?,
                ]
            };
            opts.set_db_paths(&paths);
            opts.set_wal_dir(&pm);
            Some(pm)
        };
        let _ = DB::destroy(&opts, &dir);
        let opened = Instant::now();
        let opened_wall_us = wall_micros();
        let db = DB::open(&opts, &dir).map_err(|e| {
            // RocksDB refuses a codec its library was built without ("...
            // is not linked with the binary"): say which flag asked for it.
            if setup.compression != ::tierkv::Compression::None && e.to_string().contains("linked")
            {
                Error::Refused(format!(
                    "rocksdb open: --compression_type {} needs a librocksdb built with {}: {e}",
                    setup.compression,
                    setup.compression.name().to_uppercase()
                ))
            } else {
                Error::Refused(format!("rocksdb open: {e}"))
            }
        })?;
        Ok(RocksEngine {
            db,
            opts,
            write_opts: WriteOptions::default(),
            dir,
            pm_dir,
            placement,
            opened,
            opened_wall_us,
            l0_trigger: setup.l0_triggers.0.to_string(),
            targets: level_targets(setup),
            _cache: cache,
        })
    }

    fn levels(&self) -> Result<Vec<LevelShape>> {
        let mut by: HashMap<(usize, &'static str), (u64, u64)> = HashMap::new();
        for f in self.db.live_files().map_err(rerr)? {
            let name = f.name.trim_start_matches('/');
            let tier = match &self.pm_dir {
                Some(pm) if pm.join(name).exists() => "pm",
                _ => "ssd",
            };
            let e = by.entry((f.level.max(0) as usize, tier)).or_default();
            e.0 += 1;
            e.1 += f.size as u64;
        }
        let mut v: Vec<LevelShape> = by
            .into_iter()
            .map(|((level, tier), (files, bytes))| LevelShape {
                level,
                tier: tier.to_string(),
                files,
                bytes,
            })
            .collect();
        v.sort_by(|a, b| (a.level, &a.tier).cmp(&(b.level, &b.tier)));
        Ok(v)
    }
}

/// The targets RocksDB's leveled picker scores levels against, with
/// `level_compaction_dynamic_level_bytes` off (7.8.3's default): L1 =
/// `max_bytes_for_level_base`, × `max_bytes_for_level_multiplier` per level
/// (RocksDB's 7 levels), and L0 at `level0_file_num_compaction_trigger`
/// files (bytes: that many memtables).
pub fn level_targets(setup: &EngineSetup) -> LevelTargets {
    let mut bytes = vec![setup.l0_triggers.0 as u64 * setup.memtable_size_bytes];
    let mut t = setup.l1_size_bytes;
    for _ in 1..7 {
        bytes.push(t);
        t = t.saturating_mul(setup.level_multiplier.max(1));
    }
    LevelTargets {
        l0_files: Some(setup.l0_triggers.0 as u64),
        bytes,
    }
}

impl RocksEngine {
    fn int_property(&self, name: &str) -> Result<Option<u64>> {
        self.db.property_int_value(name).map_err(rerr)
    }

    /// Levels from `live_files` (L0's count is `rocksdb.num-files-at-level0`'s:
    /// both read the current version) and
    /// `rocksdb.estimate-pending-compaction-bytes`.
    fn debt_shape(&self) -> Result<(Vec<LevelShape>, Option<u64>)> {
        let levels = self.levels()?;
        let pending = self.int_property("rocksdb.estimate-pending-compaction-bytes")?;
        Ok((levels, pending))
    }
}

/// Tickers (`name COUNT : n`) and histograms (`name P50 : .. P100 : max
/// COUNT : n SUM : s`) of a RocksDB statistics dump.
#[derive(Debug, Default)]
pub struct Statistics {
    /// Ticker values.
    pub tickers: HashMap<String, u64>,
    /// Histograms: (count, sum, max).
    pub histograms: HashMap<String, (u64, u64, f64)>,
}

impl Statistics {
    /// Parses `Options::get_statistics()` output; unknown lines are skipped.
    pub fn parse(text: &str) -> Statistics {
        let mut s = Statistics::default();
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let Some(name) = it.next() else { continue };
            let rest: Vec<&str> = it.collect();
            let field = |key: &str| -> Option<&str> {
                rest.windows(3)
                    .find(|w| w[0] == key && w[1] == ":")
                    .map(|w| w[2])
            };
            if rest.first() == Some(&"COUNT") {
                if let Some(v) = field("COUNT").and_then(|v| v.parse().ok()) {
                    s.tickers.insert(name.to_string(), v);
                }
            } else if rest.first() == Some(&"P50") {
                let count = field("COUNT").and_then(|v| v.parse().ok()).unwrap_or(0);
                let sum = field("SUM").and_then(|v| v.parse().ok()).unwrap_or(0);
                let max = field("P100").and_then(|v| v.parse().ok()).unwrap_or(0.0);
                s.histograms.insert(name.to_string(), (count, sum, max));
            }
        }
        s
    }

    /// A ticker, 0 when absent.
    pub fn ticker(&self, name: &str) -> u64 {
        self.tickers.get(name).copied().unwrap_or(0)
    }
}

/// Seconds of "Cumulative stall: H:MM:SS.mmm H:M:S, x percent" in the
/// `rocksdb.stats` property text.
pub fn parse_cumulative_stall(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("Cumulative stall:"))?;
    let hms = line.split_whitespace().nth(2)?;
    let mut parts = hms.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

/// Flushes and compactions from the `EVENT_LOG_v1` lines of a RocksDB info
/// log, with times in seconds since `opened_wall_us` (epoch microseconds).
pub fn parse_event_log(text: &str, opened_wall_us: u64) -> (Vec<FlushEvent>, Vec<CompactionEvent>) {
    use serde_json::Value;
    let mut file_size: HashMap<u64, u64> = HashMap::new();
    let mut job_bytes: HashMap<u64, u64> = HashMap::new();
    let mut flush_start: HashMap<u64, u64> = HashMap::new();
    let mut comp_start: HashMap<u64, (u64, Vec<LevelBytes>, u64)> = HashMap::new();
    let mut flushes = Vec::new();
    let mut compactions = Vec::new();
    let secs = |t: u64| t.saturating_sub(opened_wall_us) as f64 / 1e6;
    for line in text.lines() {
        let Some(pos) = line.find("EVENT_LOG_v1 ") else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(&line[pos + 13..]) else {
            continue;
        };
        let num = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
        let job = num("job");
        let time = num("time_micros");
        match v.get("event").and_then(Value::as_str).unwrap_or("") {
            "table_file_creation" => {
                file_size.insert(num("file_number"), num("file_size"));
                *job_bytes.entry(job).or_default() += num("file_size");
            }
            "flush_started" => {
                flush_start.insert(job, time);
                job_bytes.insert(job, 0);
            }
            "flush_finished" => {
                let start = flush_start.remove(&job).unwrap_or(time);
                flushes.push(FlushEvent {
                    start_s: secs(start),
                    duration_s: time.saturating_sub(start) as f64 / 1e6,
                    bytes: job_bytes.remove(&job).unwrap_or(0),
                });
            }
            "compaction_started" => {
                let mut inputs = Vec::new();
                if let Some(obj) = v.as_object() {
                    for (k, files) in obj {
                        let Some(level) = k.strip_prefix("files_L").and_then(|l| l.parse().ok())
                        else {
                            continue;
                        };
                        let bytes = files
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .filter_map(Value::as_u64)
                                    .map(|f| file_size.get(&f).copied().unwrap_or(0))
                                    .sum()
                            })
                            .unwrap_or(0);
                        inputs.push(LevelBytes { level, bytes });
                    }
                }
                inputs.sort_by_key(|i| i.level);
                comp_start.insert(job, (time, inputs, num("input_data_size")));
            }
            "compaction_finished" => {
                let Some((start, inputs, input_bytes)) = comp_start.remove(&job) else {
                    continue;
                };
                let output_level = num("output_level") as usize;
                let from_l0 = inputs.iter().any(|i| i.level == 0);
                let kind = match (from_l0, output_level) {
                    (true, 0) => "intra-l0",
                    (true, 1) => "l0-l1",
                    _ => "leveled",
                };
                let dur = v
                    .get("compaction_time_micros")
                    .and_then(Value::as_u64)
                    .unwrap_or(time.saturating_sub(start));
                compactions.push(CompactionEvent {
                    start_s: secs(start),
                    duration_s: dur as f64 / 1e6,
                    kind: kind.to_string(),
                    input_bytes,
                    inputs,
                    output_level,
                    output_bytes: num("total_output_size"),
                });
            }
            _ => {}
        }
    }
    (flushes, compactions)
}

impl Engine for RocksEngine {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db.put_opt(key, value, &self.write_opts).map_err(rerr)
    }

    fn get(&self, key: &[u8], value: &mut Vec<u8>) -> Result<bool> {
        match self.db.get_pinned(key).map_err(rerr)? {
            Some(v) => {
                value.clear();
                value.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.db.delete_opt(key, &self.write_opts).map_err(rerr)
    }

    fn scan(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        let mut it = self.db.raw_iterator();
        it.seek(start);
        let mut seen = 0;
        while seen < n && it.valid() {
            if let (Some(k), Some(v)) = (it.key(), it.value()) {
                visit(k, v);
            }
            seen += 1;
            it.next();
        }
        it.status().map_err(rerr)?;
        Ok(seen)
    }

    fn flush(&self) -> Result<()> {
        self.db.flush().map_err(rerr)
    }

    fn background_idle(&self) -> Result<bool> {
        for name in [
            "rocksdb.num-running-flushes",
            "rocksdb.num-running-compactions",
            "rocksdb.mem-table-flush-pending",
            "rocksdb.compaction-pending",
        ] {
            if self.int_property(name)? != Some(0) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn stats(&self) -> Result<EngineStats> {
        let uptime_s = self.opened.elapsed().as_secs_f64();
        // A no-op SetOptions flushes the info log, so the event log is current.
        self.db
            .set_options(&[(
                "level0_file_num_compaction_trigger",
                self.l0_trigger.as_str(),
            )])
            .map_err(rerr)?;
        let st = Statistics::parse(&self.opts.get_statistics().unwrap_or_default());
        let log_path = self.dir.join("LOG");
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let (flushes, compactions) = parse_event_log(&log, self.opened_wall_us);
        let wal = st.ticker("rocksdb.wal.bytes");
        let flush = st.ticker("rocksdb.flush.write.bytes");
        let comp_w = st.ticker("rocksdb.compact.write.bytes");
        let read = st.ticker("rocksdb.non.last.level.read.bytes")
            + st.ticker("rocksdb.last.level.read.bytes");
        let (ssd_w, pm_w, ssd_r) = if self.placement == Placement::AllOnPm {
            (0, wal + flush + comp_w, 0)
        } else if self.pm_dir.is_some() {
            let comp_to_l0: u64 = compactions
                .iter()
                .filter(|c| c.output_level == 0)
                .map(|c| c.output_bytes)
                .sum();
            let l0_in: u64 = compactions
                .iter()
                .flat_map(|c| c.inputs.iter())
                .filter(|i| i.level == 0)
                .map(|i| i.bytes)
                .sum();
            (
                comp_w.saturating_sub(comp_to_l0),
                wal + flush + comp_to_l0,
                read.saturating_sub(l0_in),
            )
        } else {
            (wal + flush + comp_w, 0, read)
        };
        let (levels, pending) = self.debt_shape()?;
        let (count, _, max_us) = st
            .histograms
            .get("rocksdb.db.write.stall")
            .copied()
            .unwrap_or((0, 0, 0.0));
        Ok(EngineStats {
            uptime_s,
            ssd_written_bytes: ssd_w,
            ssd_read_bytes: ssd_r,
            pm_written_bytes: pm_w,
            pm_relinked_bytes: 0,
            wal_bytes: wal,
            stall: StallStats {
                seconds: st.ticker("rocksdb.stall.micros") as f64 / 1e6,
                count,
                max_seconds: max_us / 1e6,
                intervals: None,
                cause_counts: self
                    .db
                    .property_value("rocksdb.cfstats")
                    .ok()
                    .flatten()
                    .map_or_else(Vec::new, |s| stall_counts(&s)),
                ..StallStats::default()
            },
            flushes,
            compactions,
            levels,
            regions: Vec::new(),
            targets: Some(self.targets.clone()),
            pending_compaction_bytes: pending,
            design_counters: Vec::new(),
        })
    }

    fn shape(&self) -> Result<EngineStats> {
        let (levels, pending) = self.debt_shape()?;
        Ok(EngineStats {
            uptime_s: self.opened.elapsed().as_secs_f64(),
            levels,
            targets: Some(self.targets.clone()),
            pending_compaction_bytes: pending,
            ..EngineStats::default()
        })
    }

    fn close(self: Box<Self>) -> Result<()> {
        // Dropping the DB waits for background work and closes it.
        drop(self);
        Ok(())
    }
}

/// RocksDB's stall counts per cause from `rocksdb.cfstats`' line
/// `Stalls(count): 0 level0_slowdown, 2 level0_numfiles, ..., 1
/// memtable_compaction, 0 memtable_slowdown, interval 3 total count`
/// (cumulative since open; the "interval" total is left out).
pub fn stall_counts(cfstats: &str) -> Vec<(String, u64)> {
    let Some(line) = cfstats
        .lines()
        .find_map(|l| l.trim().strip_prefix("Stalls(count):"))
    else {
        return Vec::new();
    };
    line.split(',')
        .filter_map(|part| {
            let (n, name) = part.trim().split_once(' ')?;
            let n = n.parse::<u64>().ok()?;
            Some((name.trim().to_string(), n))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_statistics_dump() {
        let s = Statistics::parse(
            "rocksdb.stall.micros COUNT : 383544\n\
             rocksdb.db.write.stall P50 : 28875.000000 P95 : 53164.000000 P99 : 53164.000000 P100 : 53164.000000 COUNT : 13 SUM : 383544\n\
             garbage line\n",
        );
        assert_eq!(s.ticker("rocksdb.stall.micros"), 383_544);
        assert_eq!(
            s.histograms.get("rocksdb.db.write.stall"),
            Some(&(13, 383_544, 53_164.0))
        );
        assert_eq!(s.ticker("absent"), 0);
    }

    #[test]
    fn parses_stall_counts_per_cause() {
        let t = "** Compaction Stats [default] **\n...\nStalls(count): 0 level0_slowdown, 0 level0_slowdown_with_compaction, 2 level0_numfiles, 2 level0_numfiles_with_compaction, 0 stop for pending_compaction_bytes, 0 slowdown for pending_compaction_bytes, 3 memtable_compaction, 0 memtable_slowdown, interval 5 total count\n";
        let c = stall_counts(t);
        assert_eq!(c.len(), 8);
        assert_eq!(c[2], ("level0_numfiles".to_string(), 2));
        assert_eq!(c[4], ("stop for pending_compaction_bytes".to_string(), 0));
        assert_eq!(c[6], ("memtable_compaction".to_string(), 3));
        assert!(stall_counts("nothing").is_empty());
    }

    #[test]
    fn parses_cumulative_stall() {
        let t = "** DB Stats **\nUptime(secs): 3.0 total\nCumulative stall: 00:01:2.542 H:M:S, 18.0 percent\n";
        assert_eq!(parse_cumulative_stall(t), Some(62.542));
        assert_eq!(parse_cumulative_stall("nothing"), None);
    }

    /// The ticker we report is the counter `rocksdb.stats` prints as
    /// "Cumulative stall".
    #[test]
    fn stall_ticker_is_cumulative_stall() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut setup = EngineSetup::defaults(dir.path().join("db"), dir.path().join("pm"));
        setup.memtable_size_bytes = 1 << 20;
        setup.sst_size_bytes = 1 << 20;
        setup.l1_size_bytes = 4 << 20;
        setup.l0_triggers = (2, 3, 4);
        let e = RocksEngine::open(&setup, Placement::Ssd).unwrap_or_else(|e| panic!("{e}"));
        let v = vec![7u8; 4096];
        for i in 0..8000u64 {
            e.put(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes(), &v)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let st = e.stats().unwrap_or_else(|e| panic!("{e}"));
        let text =
            e.db.property_value("rocksdb.stats")
                .ok()
                .flatten()
                .unwrap_or_default();
        let cumulative = parse_cumulative_stall(&text).unwrap_or(-1.0);
        assert!(
            (cumulative - st.stall.seconds).abs() < 0.002 + 0.01 * st.stall.seconds,
            "ticker {} vs Cumulative stall {}",
            st.stall.seconds,
            cumulative
        );
        assert!(st.stall.seconds > 0.0, "tight L0 triggers stall writes");
        // RocksDB's counts per cause, read from `rocksdb.cfstats`: its eight
        // causes, and the tight L0 triggers among those that counted.
        let causes = &st.stall.cause_counts;
        assert_eq!(causes.len(), 8, "{causes:?}");
        assert!(
            causes
                .iter()
                .any(|(c, n)| c.starts_with("level0_") && *n > 0),
            "{causes:?}"
        );
        assert!(!st.compactions.is_empty() && !st.flushes.is_empty());
        // The debt's inputs: targets from the options, the pending estimate.
        let t = st.targets.clone().unwrap_or_default();
        assert_eq!(t.l0_files, Some(2));
        assert_eq!(&t.bytes[..3], &[2 << 20, 4 << 20, 40 << 20]);
        let shape = e.shape().unwrap_or_else(|e| panic!("{e}"));
        assert!(shape.pending_compaction_bytes.is_some());
        assert!(!shape.levels.is_empty());
        assert!(crate::metrics::debt_of(&shape).is_some());
        Box::new(e).close().unwrap_or_else(|e| panic!("{e}"));
    }

    /// `--compression_type` reaches RocksDB: with either codec the tables of
    /// compressible values are a fraction of the bytes put (Debian's
    /// librocksdb links LZ4 and Zstd).
    #[test]
    fn compression_type_compresses_rocksdb_tables() {
        for c in [::tierkv::Compression::Lz4, ::tierkv::Compression::Zstd] {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let mut setup = EngineSetup::defaults(dir.path().join("db"), dir.path().join("pm"));
            setup.compression = c;
            let e =
                RocksEngine::open(&setup, Placement::Ssd).unwrap_or_else(|e| panic!("{c}: {e}"));
            let v = b"a compressible value, ".repeat(40);
            for i in 0..2000u64 {
                e.put(&i.to_be_bytes(), &v)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            e.flush().unwrap_or_else(|e| panic!("{e}"));
            let sst_bytes: u64 = std::fs::read_dir(dir.path().join("db"))
                .unwrap_or_else(|e| panic!("{e}"))
                .filter_map(|f| f.ok())
                .filter(|f| f.file_name().to_string_lossy().ends_with(".sst"))
                .filter_map(|f| f.metadata().ok())
                .map(|m| m.len())
                .sum();
            assert!(
                sst_bytes > 0 && sst_bytes < 2000 * v.len() as u64 / 4,
                "{c}: {sst_bytes}"
            );
            Box::new(e).close().unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn parses_event_log() {
        let log = r#"x EVENT_LOG_v1 {"time_micros": 1000000, "job": 2, "event": "flush_started", "num_memtables": 1}
x EVENT_LOG_v1 {"time_micros": 1100000, "job": 2, "event": "table_file_creation", "file_number": 9, "file_size": 400}
x EVENT_LOG_v1 {"time_micros": 1200000, "job": 2, "event": "flush_finished", "lsm_state": [1, 0]}
x EVENT_LOG_v1 {"time_micros": 1300000, "job": 3, "event": "table_file_creation", "file_number": 11, "file_size": 600}
x EVENT_LOG_v1 {"time_micros": 2000000, "job": 6, "event": "compaction_started", "files_L0": [9, 11], "files_L1": [], "input_data_size": 1000}
x EVENT_LOG_v1 {"time_micros": 2500000, "job": 6, "event": "compaction_finished", "compaction_time_micros": 500000, "output_level": 1, "total_output_size": 900}
x EVENT_LOG_v1 {not json"#;
        let (f, c) = parse_event_log(log, 500_000);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].bytes, 400);
        assert!((f[0].start_s - 0.5).abs() < 1e-9 && (f[0].duration_s - 0.2).abs() < 1e-9);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].kind, "l0-l1");
        assert!(c[0].is_l0_to_l1());
        assert_eq!(c[0].input_bytes, 1000);
        assert_eq!(
            c[0].inputs[0],
            LevelBytes {
                level: 0,
                bytes: 1000
            }
        );
        assert_eq!(c[0].output_bytes, 900);
        assert!((c[0].start_s - 1.5).abs() < 1e-9 && (c[0].duration_s - 0.5).abs() < 1e-9);
    }
}
