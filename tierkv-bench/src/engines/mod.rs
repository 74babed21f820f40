//! The engines under test, behind one trait, and the configurations that
//! name them (`tierkv:<preset>`, `rocksdb-ssd`, `rocksdb-l0-pm`,
//! `rocksdb-pm`, `fake`, `null`).
//!
//! Every engine gets the same [`EngineSetup`] (memtable size and count, SST
//! size, L1 size, background jobs, block cache, bloom bits, L0 triggers, no
//! compression) and the workloads drive all of them with the same keys.
//!
//! # Concurrency
//!
//! An [`Engine`] is `Send + Sync`: the runner shares one `&dyn Engine` among
//! its worker threads (scoped threads), and calls [`Engine::stats`] from the
//! driving thread while workers run.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub mod fake;
#[cfg(feature = "rocksdb")]
pub mod rocksdb;
pub mod tierkv;

/// A key-value engine as the workloads see it.
pub trait Engine: Send + Sync {
    /// Inserts or overwrites `key`.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Reads `key` into `value`; returns whether it was found.
    fn get(&self, key: &[u8], value: &mut Vec<u8>) -> Result<bool>;
    /// Deletes `key`.
    fn delete(&self, key: &[u8]) -> Result<()>;
    /// Visits up to `n` entries from the first key ≥ `start`, in key order;
    /// returns how many were visited.
    fn scan(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize>;
    /// Flushes the memtables.
    fn flush(&self) -> Result<()>;
    /// A snapshot of the engine's own statistics.
    fn stats(&self) -> Result<EngineStats>;
    /// The level shape, its targets and the engine's pending-compaction
    /// estimate now (the fields of [`EngineStats`] the compaction debt is
    /// computed from; the others may be left empty): what a steady-state
    /// warm-up samples after each chunk, so it should be cheap. The
    /// default takes a whole [`Engine::stats`].
    fn shape(&self) -> Result<EngineStats> {
        self.stats()
    }
    /// The engine's own statistics text (`--statistics`), if it has one.
    fn report(&self) -> Option<String> {
        None
    }
    /// Whether background work is done: no flush or compaction running or
    /// pending (RocksDB's `num-running-flushes`, `num-running-compactions`,
    /// `mem-table-flush-pending` and `compaction-pending` all 0). What
    /// `--quiesce` waits for.
    fn background_idle(&self) -> Result<bool> {
        Ok(true)
    }
    /// Closes the engine, waiting for its background work.
    fn close(self: Box<Self>) -> Result<()>;
}

/// One memtable flush.
#[derive(Debug, Clone, PartialEq)]
pub struct FlushEvent {
    /// Start, seconds since the engine opened.
    pub start_s: f64,
    /// Duration in seconds.
    pub duration_s: f64,
    /// Bytes written.
    pub bytes: u64,
}

/// One compaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionEvent {
    /// Start, seconds (since the engine opened here; since the benchmark
    /// started once in a JSON record).
    pub start_s: f64,
    /// Duration in seconds.
    pub duration_s: f64,
    /// `l0-l1`, `intra-l0`, `leveled`, or the engine's own name for it.
    pub kind: String,
    /// Total input bytes.
    pub input_bytes: u64,
    /// Input bytes per level.
    pub inputs: Vec<LevelBytes>,
    /// Level the output went to.
    pub output_level: usize,
    /// Bytes written.
    pub output_bytes: u64,
}

impl CompactionEvent {
    /// True for a compaction from L0 into L1 (the papers' stall culprit).
    pub fn is_l0_to_l1(&self) -> bool {
        self.output_level == 1 && self.inputs.iter().any(|i| i.level == 0 && i.bytes > 0)
    }
}

/// Bytes of one level in a compaction's input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelBytes {
    /// Level.
    pub level: usize,
    /// Bytes.
    pub bytes: u64,
}

/// Files and bytes of one level in one tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelShape {
    /// Level (0 = L0).
    pub level: usize,
    /// `pm` or `ssd`.
    pub tier: String,
    /// Number of files (tables).
    pub files: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Write-stall accounting, cumulative since open.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StallStats {
    /// Total seconds writers were delayed or stopped.
    pub seconds: f64,
    /// Number of stalls.
    pub count: u64,
    /// Longest stall in seconds.
    pub max_seconds: f64,
    /// Every interval when the engine keeps them (tierkv, fake); `None`
    /// when only the counters exist (RocksDB).
    pub intervals: Option<Vec<StallInterval>>,
    /// Writes a pacing controller delayed by a short pause, and the time
    /// those pauses took (tierkv's `db/control.rs`; counted apart from the
    /// intervals, which are its stops and RocksDB-style delays).
    pub paced_writes: u64,
    /// Seconds of those pauses.
    pub paced_seconds: f64,
    /// Stall counts per cause, cumulative, where the engine counts its
    /// stalls by cause without keeping each one (RocksDB's
    /// `Stalls(count)` line of `rocksdb.cfstats`).
    pub cause_counts: Vec<(String, u64)>,
}

/// One stall an engine recorded itself.
#[derive(Debug, Clone, PartialEq)]
pub struct StallInterval {
    /// Start, seconds since the engine opened.
    pub start_s: f64,
    /// How long writers were delayed or stopped.
    pub seconds: f64,
    /// The engine's name for why (tierkv: `memtable-full`, `l0-stop`,
    /// `pm-full`, ...).
    pub cause: &'static str,
}

/// The level shape an engine works to: what its compaction picker scores
/// levels against (the compaction debt is measured against it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LevelTargets {
    /// L0 tables at which L0 compaction starts, where the engine counts L0
    /// in tables (RocksDB, `classic`, `vlsm`).
    pub l0_files: Option<u64>,
    /// Target bytes per level, index = level; `bytes[0]` is L0's (0: none).
    pub bytes: Vec<u64>,
}

/// A snapshot of an engine's statistics, cumulative since it opened.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineStats {
    /// Seconds since the engine opened.
    pub uptime_s: f64,
    /// Bytes written to the SSD tier (WAL, flush, compaction, manifest).
    pub ssd_written_bytes: u64,
    /// Bytes read from the SSD tier (compactions and reads).
    pub ssd_read_bytes: u64,
    /// Bytes of data written to the PM tier (relinks excluded).
    pub pm_written_bytes: u64,
    /// PM bytes written by pointer-only work.
    pub pm_relinked_bytes: u64,
    /// WAL bytes, whatever the tier.
    pub wal_bytes: u64,
    /// Write stalls.
    pub stall: StallStats,
    /// Every flush.
    pub flushes: Vec<FlushEvent>,
    /// Every compaction.
    pub compactions: Vec<CompactionEvent>,
    /// The level shape now.
    pub levels: Vec<LevelShape>,
    /// The level shape of each region, when the engine has several
    /// (tierkv's `Options::regions`); empty: one, `levels`.
    pub regions: Vec<Vec<LevelShape>>,
    /// The targets the engine works to, if it reports them.
    pub targets: Option<LevelTargets>,
    /// The engine's own estimate of the bytes compaction still has to
    /// rewrite, if it reports one.
    pub pending_compaction_bytes: Option<u64>,
    /// Numbers the engine's design reports about its own work and shape
    /// (tierkv's `Stats::design_counters`), by name: cumulative counters
    /// and gauges of the shape now.
    pub design_counters: Vec<(String, f64)>,
}

/// The preset of a tierkv configuration `<preset>[/knob=value]*`.
pub fn preset_name(spec: &str) -> &str {
    spec.split('/').next().unwrap_or(spec)
}

/// Which engine a configuration runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineKind {
    /// tierkv with a design preset.
    Tierkv(String),
    /// RocksDB with everything on the SSD directory.
    RocksdbSsd,
    /// RocksDB with L0 and the WAL on the PM directory.
    RocksdbL0Pm,
    /// RocksDB with every table and the WAL on the PM directory (the
    /// papers' "RocksDB-NVM").
    RocksdbPm,
    /// An in-memory map (tests and dry runs of the harness).
    Fake,
    /// Accepts every request and does nothing: what the client itself
    /// costs (CPU per request of the open-loop generator and workers).
    Null,
}

/// A named configuration, e.g. `tierkv:triangle` or `rocksdb-ssd`. A
/// tierkv configuration may end in knobs that override the run's setup for
/// it alone, so variants run side by side: `tierkv:vlsm/sst=4m/phi=16`
/// (see `tierkv::parse_knobs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The name as given (`tierkv` is normalised to `tierkv:classic`).
    pub name: String,
    /// The engine.
    pub kind: EngineKind,
}

impl Config {
    /// Parses a configuration name.
    pub fn parse(s: &str) -> Result<Config> {
        let s = s.trim();
        let kind = match s {
            "rocksdb-ssd" => EngineKind::RocksdbSsd,
            "rocksdb-l0-pm" => EngineKind::RocksdbL0Pm,
            "rocksdb-pm" => EngineKind::RocksdbPm,
            "fake" => EngineKind::Fake,
            "null" => EngineKind::Null,
            "tierkv" => EngineKind::Tierkv("classic".into()),
            _ => match s.strip_prefix("tierkv:") {
                Some(p) if ::tierkv::Preset::from_name(preset_name(p)).is_some() => {
                    self::tierkv::parse_knobs(p)?;
                    EngineKind::Tierkv(p.to_string())
                }
                Some(p) => {
                    let all: Vec<&str> = ::tierkv::Preset::ALL.iter().map(|p| p.name()).collect();
                    return Err(Error::Usage(format!(
                        "unknown tierkv preset `{p}`; presets: {}",
                        all.join(", ")
                    )));
                }
                None => {
                    return Err(Error::Usage(format!(
                        "unknown configuration `{s}`; use tierkv:<preset>, rocksdb-ssd, rocksdb-l0-pm, rocksdb-pm, fake or null"
                    )))
                }
            },
        };
        let name = match &kind {
            EngineKind::Tierkv(p) => format!("tierkv:{p}"),
            _ => s.to_string(),
        };
        Ok(Config { name, kind })
    }

    /// The engine's name in the JSON (`tierkv`, `rocksdb`, `fake`).
    pub fn engine_name(&self) -> &'static str {
        match self.kind {
            EngineKind::Tierkv(_) => "tierkv",
            EngineKind::RocksdbSsd | EngineKind::RocksdbL0Pm | EngineKind::RocksdbPm => "rocksdb",
            EngineKind::Fake => "fake",
            EngineKind::Null => "null",
        }
    }

    /// True if the configuration keeps data in the PM directory.
    pub fn uses_pm(&self) -> bool {
        match &self.kind {
            EngineKind::Tierkv(p) => {
                ::tierkv::Preset::from_name(preset_name(p)).is_some_and(|p| p.needs_pm())
                    || self::tierkv::all_on_pm(p)
            }
            EngineKind::RocksdbL0Pm | EngineKind::RocksdbPm => true,
            EngineKind::RocksdbSsd | EngineKind::Fake | EngineKind::Null => false,
        }
    }

    /// True if every file of the configuration lives in the PM directory
    /// (`rocksdb-pm`, `tierkv:classic/onpm=1`: the papers' "-NVM" baselines).
    pub fn all_on_pm(&self) -> bool {
        match &self.kind {
            EngineKind::Tierkv(p) => self::tierkv::all_on_pm(p),
            EngineKind::RocksdbPm => true,
            _ => false,
        }
    }

    /// A file-name-safe form of the name.
    pub fn file_name(&self) -> String {
        self.name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }
}

/// Everything an engine is opened with; the same for every engine of a run.
#[derive(Debug, Clone)]
pub struct EngineSetup {
    /// SSD directory (created if missing; must be empty or absent).
    pub ssd_dir: PathBuf,
    /// PM directory (a file system in DRAM or a DAX mount).
    pub pm_dir: PathBuf,
    /// PM tier size.
    pub pm_size_bytes: u64,
    /// Memtable size (`write_buffer_size`).
    pub memtable_size_bytes: u64,
    /// Memtables at most (`max_write_buffer_number`).
    pub memtable_count: usize,
    /// SST target size (`target_file_size_base`).
    pub sst_size_bytes: u64,
    /// L1 target size (`max_bytes_for_level_base`).
    pub l1_size_bytes: u64,
    /// Growth factor between levels below L1
    /// (`max_bytes_for_level_multiplier`; `vlsm` has its own f and Φ).
    pub level_multiplier: u64,
    /// Background flush + compaction threads (`max_background_jobs`).
    pub background_jobs: usize,
    /// Parts one merge may be cut into (`max_subcompactions`); 0: each
    /// engine's default (tierkv: its background threads; RocksDB: 1).
    pub subcompactions: usize,
    /// Share of the memtable size given to a bloom filter over its keys
    /// (`--memtable_bloom_size_ratio`); `None`: each engine's default.
    pub memtable_bloom_ratio: Option<f64>,
    /// Block cache (`cache_size`).
    pub block_cache_bytes: u64,
    /// Bloom filter bits per key (0 = none).
    pub bloom_bits: u32,
    /// L0 compaction / slowdown / stop triggers.
    pub l0_triggers: (usize, usize, usize),
    /// Write rate while delayed, bytes per second.
    pub delayed_write_rate_bytes_per_sec: u64,
    /// Pending compaction bytes at which writes slow down and stop
    /// (RocksDB's soft and hard limits).
    pub pending_compaction_bytes_limits: (u64, u64),
    /// O_DIRECT for flush and compaction output.
    pub direct_io: bool,
    /// Start the write-back of flush and compaction output every this many
    /// bytes (RocksDB's `bytes_per_sync`); 0: never.
    pub bytes_per_sync: u64,
    /// The same for a WAL on SSD (RocksDB's `wal_bytes_per_sync`); 0: never.
    pub wal_bytes_per_sync: u64,
    /// tierkv: the pacing write controller (`Options::write_pacing`).
    pub write_pacing: bool,
    /// Block compression of every level (`--compression_type`; RocksDB's
    /// `compression`). None by default: the papers measure without.
    pub compression: ::tierkv::Compression,
    /// Inject one stall of this many milliseconds after this many writes
    /// (fake engine only; tests of the open-loop scheduler).
    pub fake_stall: Option<(u64, u64)>,
    /// Fail every write after this many (fake engine only; tests of a
    /// configuration that stops part-way).
    pub fake_fail_after_writes: Option<u64>,
    /// `tierkv:vlsm`: SST size; default = `sst_size_bytes` / 8
    /// (8 MB at `medium`, the paper's best size).
    pub vlsm_sst_size_bytes: Option<u64>,
    /// `tierkv:vlsm`: memtable size; default = `memtable_size_bytes` (the
    /// same memory as the other configurations; flushes are cut into
    /// range-partitioned SSTs). The SST size gives the paper's literal
    /// one-SST-per-memtable setting.
    pub vlsm_memtable_size_bytes: Option<u64>,
    /// `tierkv:vlsm`: growth factor Φ between L1 and L2.
    pub vlsm_phi: u64,
    /// `tierkv:vlsm`: growth factor f between the other levels.
    pub vlsm_growth_factor: u64,
    /// tierkv: independent LSMs (regions) in one database, hash-routed.
    pub regions: usize,
    /// Key numbers of the run lie in `[0, key_count)` (0: unknown);
    /// `tierkv:rangetab` splits that range evenly into its RangeTabs'
    /// boundaries (YCSB's hashed keys: the whole 63-bit range).
    pub key_count: u64,
    /// Key size of the run (db_bench's key format, `keys::format_key`).
    pub key_size: usize,
}

impl EngineSetup {
    /// RocksDB's defaults, at the given directories (tests adjust fields).
    pub fn defaults(ssd_dir: PathBuf, pm_dir: PathBuf) -> EngineSetup {
        EngineSetup {
            ssd_dir,
            pm_dir,
            pm_size_bytes: 16 << 20,
            memtable_size_bytes: 64 << 20,
            memtable_count: 2,
            sst_size_bytes: 64 << 20,
            l1_size_bytes: 256 << 20,
            level_multiplier: 10,
            background_jobs: 2,
            subcompactions: 0,
            memtable_bloom_ratio: None,
            block_cache_bytes: 8 << 20,
            bloom_bits: 10,
            l0_triggers: (4, 20, 36),
            delayed_write_rate_bytes_per_sec: 16 << 20,
            pending_compaction_bytes_limits: (64 << 30, 256 << 30),
            direct_io: false,
            bytes_per_sync: 0,
            wal_bytes_per_sync: 0,
            write_pacing: true,
            compression: ::tierkv::Compression::None,
            fake_stall: None,
            fake_fail_after_writes: None,
            vlsm_sst_size_bytes: None,
            vlsm_memtable_size_bytes: None,
            vlsm_phi: 32,
            vlsm_growth_factor: 8,
            regions: 1,
            key_count: 0,
            key_size: 16,
        }
    }
}

/// Opens the engine of `config` with `setup`.
///
/// Errors: `Error::Refused` when the engine is not built into this binary or
/// rejects the options.
pub fn open(config: &Config, setup: &EngineSetup) -> Result<Box<dyn Engine>> {
    match &config.kind {
        EngineKind::Fake => Ok(Box::new(
            fake::FakeEngine::new(setup.fake_stall).failing_after(setup.fake_fail_after_writes),
        )),
        EngineKind::Null => Ok(Box::new(fake::NullEngine::new())),
        EngineKind::RocksdbSsd | EngineKind::RocksdbL0Pm | EngineKind::RocksdbPm => {
            open_rocksdb(config, setup)
        }
        EngineKind::Tierkv(preset) => open_tierkv(preset, setup),
    }
}

#[cfg(feature = "rocksdb")]
fn open_rocksdb(config: &Config, setup: &EngineSetup) -> Result<Box<dyn Engine>> {
    let placement = match config.kind {
        EngineKind::RocksdbL0Pm => rocksdb::Placement::L0OnPm,
        EngineKind::RocksdbPm => rocksdb::Placement::AllOnPm,
        _ => rocksdb::Placement::Ssd,
    };
    Ok(Box::new(rocksdb::RocksEngine::open(setup, placement)?))
}

#[cfg(not(feature = "rocksdb"))]
fn open_rocksdb(config: &Config, _setup: &EngineSetup) -> Result<Box<dyn Engine>> {
    Err(Error::Refused(format!(
        "`{}` needs RocksDB: rebuild with `cargo build --release --features rocksdb` after scripts/setup-rocksdb.sh",
        config.name
    )))
}

fn open_tierkv(preset: &str, setup: &EngineSetup) -> Result<Box<dyn Engine>> {
    Ok(Box::new(self::tierkv::TierkvEngine::open(preset, setup)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_configurations() {
        assert_eq!(
            Config::parse("tierkv").map(|c| c.name).ok(),
            Some("tierkv:classic".into())
        );
        let c = Config::parse("tierkv:triangle").unwrap_or_else(|e| panic!("{e}"));
        assert!(c.uses_pm());
        assert_eq!(c.file_name(), "tierkv_triangle");
        assert!(Config::parse("rocksdb-l0-pm").is_ok_and(|c| c.uses_pm()));
        assert!(Config::parse("rocksdb-ssd").is_ok_and(|c| !c.uses_pm()));
        assert!(Config::parse("tierkv:nope").is_err());
        let c = Config::parse("tierkv:vlsm/mem=8m/phi=16").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.name, "tierkv:vlsm/mem=8m/phi=16");
        assert!(!c.uses_pm());
        assert_eq!(c.file_name(), "tierkv_vlsm_mem_8m_phi_16");
        assert!(Config::parse("tierkv:vlsm/nope=1").is_err());
        assert!(Config::parse("tierkv:vlsm/mem=x").is_err());
        assert!(Config::parse("leveldb").is_err());
        assert!(Config::parse("null").is_ok_and(|c| c.engine_name() == "null" && !c.uses_pm()));
        // The "-NVM" baselines keep every file in the PM directory.
        let c = Config::parse("tierkv:classic/onpm=1").unwrap_or_else(|e| panic!("{e}"));
        assert!(c.uses_pm() && c.all_on_pm());
        assert!(Config::parse("rocksdb-pm").is_ok_and(|c| c.all_on_pm()));
        assert!(Config::parse("tierkv:tlsm").is_ok_and(|c| c.uses_pm() && !c.all_on_pm()));
    }
}
