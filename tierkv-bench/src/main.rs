//! The `tierkv-bench` command line; see the library docs for the pieces.

#![warn(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use tierkv_bench::engines::{Config, EngineSetup};
use tierkv_bench::error::{Error, Result};
use tierkv_bench::keys::Distribution;
use tierkv_bench::report;
use tierkv_bench::scale::Scale;
use tierkv_bench::suite::{self, Pacing, Plan, SteadyOptions, SweepBase};
use tierkv_bench::workload::WorkloadParams;

/// db_bench and YCSB workloads on tierkv and RocksDB, side by side.
#[derive(Parser, Debug)]
#[command(name = "tierkv-bench", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    bench: BenchArgs,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run several configurations one after another on the same workload.
    Compare(Box<CompareArgs>),
    /// Draw the plots and the summary of a JSON run.
    Report(ReportArgs),
    /// Rebuild a tierkv database whose MANIFEST is damaged or lost from the
    /// tables and logs found (`Db::repair`); prints what was recovered.
    Repair(RepairArgs),
}

#[derive(Args, Debug)]
struct RepairArgs {
    /// The database directory.
    db: PathBuf,
    /// The design the database was opened with (its PM tier is read too).
    #[arg(long, default_value = "classic")]
    design: String,
    /// The PM directory the database was opened with (`pm.region` inside).
    #[arg(long = "pm_dir")]
    pm_dir: Option<PathBuf>,
    /// PM tier size in bytes, as opened.
    #[arg(long = "pm_size")]
    pm_size: Option<u64>,
    /// `Options::regions`, as opened.
    #[arg(long, default_value_t = 1)]
    regions: usize,
    /// `Options::level_count`, as opened (the repaired tables go to the last
    /// level).
    #[arg(long = "level_count")]
    level_count: Option<usize>,
}

/// `tierkv-bench repair`.
fn repair(a: &RepairArgs) -> Result<()> {
    let design = tierkv::Preset::from_name(&a.design)
        .ok_or_else(|| Error::Usage(format!("unknown design `{}`", a.design)))?;
    let mut o = tierkv::Options {
        design,
        regions: a.regions,
        pm_dir: a.pm_dir.clone(),
        ..tierkv::Options::default()
    };
    if let Some(n) = a.pm_size {
        o.pm_size_bytes = n;
    }
    if let Some(n) = a.level_count {
        o.level_count = n;
    }
    let report = tierkv::Db::repair(&a.db, o).map_err(|e| Error::Engine(e.to_string()))?;
    print!("{report}");
    Ok(())
}

#[derive(Args, Debug)]
struct CompareArgs {
    /// Comma-separated configurations: tierkv:<preset>, rocksdb-ssd, rocksdb-l0-pm, rocksdb-pm, fake.
    #[arg(long, value_delimiter = ',', required = true)]
    configs: Vec<String>,
    #[command(flatten)]
    bench: BenchArgs,
}

#[derive(Args, Debug)]
struct ReportArgs {
    /// The JSON files written by `--json` (several runs are drawn
    /// together, e.g. one per value size for a sweep).
    #[arg(required = true, num_args = 1..)]
    json: Vec<PathBuf>,
    /// Output directory (default: `<json stem>-report` beside the JSON).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn parse_flag(s: &str) -> std::result::Result<bool, String> {
    match s {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(format!("expected 0/1/true/false, got `{s}`")),
    }
}

fn parse_compression(s: &str) -> std::result::Result<tierkv::Compression, String> {
    tierkv::Compression::from_name(s)
        .ok_or_else(|| format!("expected none, lz4 or zstd, got `{s}`"))
}

/// db_bench's flags (same names), plus the scale, pacing and JSON output.
#[derive(Args, Debug)]
struct BenchArgs {
    /// Comma-separated benchmarks: fillseq, fillrandom, overwrite, readrandom,
    /// readseq, seekrandom, readwhilewriting, ycsb-load, ycsb-a … ycsb-f.
    #[arg(
        long = "benchmarks",
        value_delimiter = ',',
        default_value = "fillrandom,readrandom"
    )]
    benchmarks: Vec<String>,
    /// Configuration of a plain run (default tierkv:triangle, the flagship:
    /// it beats tierkv:classic at `medium`, see the README).
    #[arg(long = "config", default_value = "tierkv:triangle")]
    config: String,
    /// tiny | small | medium | paper10 | leveldb10 | vlsm-paper | tlsm10 (default:
    /// tiny; medium
    /// for compare).
    #[arg(long = "scale")]
    scale: Option<String>,
    /// Keys of a fill (default: dataset of the scale / value size).
    #[arg(long = "num")]
    num: Option<u64>,
    /// Reads per thread (YCSB: operations in all); negative = num.
    #[arg(long = "reads", allow_negative_numbers = true)]
    reads: Option<i64>,
    /// Key size in bytes.
    #[arg(long = "key_size", default_value_t = 16)]
    key_size: usize,
    /// Value size in bytes (default 4096; 1000 for YCSB).
    #[arg(long = "value_size")]
    value_size: Option<usize>,
    /// Client threads (open loop: workers).
    #[arg(long = "threads", default_value_t = 1)]
    threads: usize,
    /// Print db_bench latency histograms.
    #[arg(long = "histogram", num_args = 0..=1, default_value = "0", default_missing_value = "1", value_parser = parse_flag)]
    histogram: bool,
    /// Print throughput every N seconds (0 = off).
    #[arg(long = "report_interval_seconds", default_value_t = 0)]
    report_interval_seconds: u64,
    /// SSD base directory (each configuration gets a subdirectory).
    #[arg(long = "db", default_value_os_t = default_db_dir())]
    db: PathBuf,
    /// PM base directory (default /dev/shm/tierkv-bench-<pid>, or
    /// $TMPDIR/tierkv-bench-<pid> where there is no /dev/shm).
    #[arg(long = "pm_dir")]
    pm_dir: Option<PathBuf>,
    /// PM tier size in bytes (default: the scale's).
    #[arg(long = "pm_size")]
    pm_size: Option<u64>,
    /// Memtable size in bytes (default: the scale's).
    #[arg(long = "write_buffer_size")]
    write_buffer_size: Option<u64>,
    /// Memtables at most.
    #[arg(long = "max_write_buffer_number", default_value_t = 2)]
    max_write_buffer_number: usize,
    /// SST target size in bytes (default: `--write_buffer_size` if given,
    /// else the scale's: the memtable size, half of it at `tlsm10`).
    #[arg(long = "target_file_size_base")]
    target_file_size_base: Option<u64>,
    /// L1 target size in bytes (default: the scale's).
    #[arg(long = "max_bytes_for_level_base")]
    max_bytes_for_level_base: Option<u64>,
    /// Growth factor between levels below L1 (default: the scale's, 10;
    /// 8 at vlsm-paper). `vlsm` has its own f and Φ.
    #[arg(long = "max_bytes_for_level_multiplier")]
    max_bytes_for_level_multiplier: Option<u64>,
    /// Background flush and compaction threads.
    #[arg(long = "max_background_jobs", default_value_t = 2)]
    max_background_jobs: usize,
    /// Parts one merge may be cut into, every engine (`max_subcompactions`);
    /// 0: each engine's default (tierkv: `--max_background_jobs`; RocksDB: 1).
    #[arg(long = "subcompactions", default_value_t = 0)]
    subcompactions: usize,
    /// Share of the memtable size given to a bloom filter over its keys,
    /// every engine (db_bench's `--memtable_bloom_size_ratio`, with RocksDB's
    /// whole-key filtering); unset: each engine's default (tierkv: 1/64,
    /// `Options::memtable_filter_ratio`; RocksDB: none).
    #[arg(long = "memtable_bloom_size_ratio")]
    memtable_bloom_size_ratio: Option<f64>,
    /// Block cache bytes.
    #[arg(long = "cache_size", default_value_t = 8 << 20)]
    cache_size: u64,
    /// Bloom filter bits per key (0 = none).
    #[arg(long = "bloom_bits", default_value_t = 10)]
    bloom_bits: u32,
    /// L0 files that trigger a compaction (default 4).
    #[arg(long = "level0_file_num_compaction_trigger")]
    level0_file_num_compaction_trigger: Option<usize>,
    /// L0 files that slow writes down (default 20; 8 at leveldb10).
    #[arg(long = "level0_slowdown_writes_trigger")]
    level0_slowdown_writes_trigger: Option<usize>,
    /// L0 files that stop writes (default 36; 12 at leveldb10).
    #[arg(long = "level0_stop_writes_trigger")]
    level0_stop_writes_trigger: Option<usize>,
    /// Write rate while delayed (bytes/s).
    #[arg(long = "delayed_write_rate", default_value_t = 16 << 20)]
    delayed_write_rate: u64,
    /// Estimated pending compaction bytes at which writes slow down
    /// (RocksDB's `soft_pending_compaction_bytes_limit`; default 64 GiB,
    /// RocksDB's). Applies to RocksDB and to the tierkv designs that
    /// estimate it (`classic`, `vlsm`, `rangetab`).
    #[arg(long = "soft_pending_compaction_bytes_limit", default_value_t = 64 << 30)]
    soft_pending_compaction_bytes_limit: u64,
    /// The same at which writes stop (default 256 GiB, RocksDB's).
    #[arg(long = "hard_pending_compaction_bytes_limit", default_value_t = 256 << 30)]
    hard_pending_compaction_bytes_limit: u64,
    /// O_DIRECT for flush and compaction.
    #[arg(long = "use_direct_io_for_flush_and_compaction", num_args = 0..=1, default_value = "0", default_missing_value = "1", value_parser = parse_flag)]
    use_direct_io_for_flush_and_compaction: bool,
    /// Start the write-back of flush and compaction output every this many
    /// bytes (0: never; RocksDB's default). Applies to every engine.
    #[arg(long = "bytes_per_sync", default_value_t = 0)]
    bytes_per_sync: u64,
    /// The same for a WAL on SSD (0: never; RocksDB's default). Applies to
    /// every engine.
    #[arg(long = "wal_bytes_per_sync", default_value_t = 0)]
    wal_bytes_per_sync: u64,
    /// tierkv's pacing write controller (1, the default) or none (0): for
    /// comparison; the knob `pace=0|1` sets it per configuration.
    #[arg(long = "write_pacing", num_args = 0..=1, default_value = "1", default_missing_value = "1", value_parser = parse_flag)]
    write_pacing: bool,
    /// Block compression of every engine, every level: none | lz4 | zstd
    /// (default none, as the papers measure).
    #[arg(long = "compression_type", default_value = "none", value_parser = parse_compression)]
    compression_type: tierkv::Compression,
    /// Request distribution of random workloads: uniform | zipfian | latest
    /// | hotspot (1% of the keys get 99% of the requests).
    #[arg(long = "distribution")]
    distribution: Option<String>,
    /// Entries read after each seek in seekrandom.
    #[arg(long = "seek_nexts", default_value_t = 0)]
    seek_nexts: usize,
    /// Seed of the request streams (the same for every configuration).
    #[arg(long = "seed", default_value_t = 1)]
    seed: u64,
    /// Open loop: requests per second.
    #[arg(long = "rate", conflicts_with_all = ["rate_fraction", "rate_sweep"])]
    rate: Option<f64>,
    /// Open loop at this fraction of a configuration's sustained closed-loop
    /// throughput (its rate over the second half of the operations).
    #[arg(
        long = "rate_fraction",
        requires = "rate_of",
        conflicts_with = "rate_sweep"
    )]
    rate_fraction: Option<f64>,
    /// The configuration whose throughput `--rate_fraction` refers to; with
    /// `--rate_sweep`, a configuration (the same rates for all) or `each`
    /// (each configuration's own throughput).
    #[arg(long = "rate_of")]
    rate_of: Option<String>,
    /// Open loop at each of these rates in turn (comma-separated, run in
    /// ascending order): requests per second, or with `--rate_of`
    /// fractions of a sustained rate. The last benchmark is swept; the ones
    /// before it prepare the database closed loop.
    #[arg(long = "rate_sweep", value_delimiter = ',')]
    rate_sweep: Vec<f64>,
    /// P99 latency target of the rate sweep's summary, in microseconds.
    #[arg(long = "latency_target_us", default_value_t = 1000.0)]
    latency_target_us: f64,
    /// Before each benchmark, wait for the engine's background work
    /// (flushes and compactions) to end: reads measured quiesced rather
    /// than right after a fill.
    #[arg(long = "quiesce", num_args = 0..=1, default_value = "0", default_missing_value = "1", value_parser = parse_flag)]
    quiesce: bool,
    /// Leave glibc malloc's dynamic mmap and trim thresholds to move
    /// during the run, as they do in a fresh process (by default the bench
    /// fixes them before the first configuration: [`pin_malloc`]).
    #[arg(long = "malloc_dynamic", num_args = 0..=1, default_value = "0", default_missing_value = "1", value_parser = parse_flag)]
    malloc_dynamic: bool,
    /// How long `--quiesce` waits at most before failing the run.
    #[arg(long = "quiesce_timeout_seconds", default_value_t = 1800)]
    quiesce_timeout_seconds: u64,
    /// readwhilewriting's writer at this many puts per second (default: as
    /// fast as it can).
    #[arg(long = "writer_rate")]
    writer_rate: Option<f64>,
    /// Append every read slower than 1 ms to this file (configuration,
    /// benchmark, thread id, start and end in CLOCK_MONOTONIC ns).
    #[arg(long = "slow_reads_file")]
    slow_reads_file: Option<PathBuf>,
    /// Warm writing benchmarks (overwrite, ycsb-a/b/d/e/f) up to a steady
    /// state before measuring them: until every level is within
    /// `--steady_factor` of its target (after at least half the benchmark's
    /// operations) or the debt stops moving.
    #[arg(long = "steady_state", num_args = 0..=1, default_value = "0", default_missing_value = "1", value_parser = parse_flag)]
    steady_state: bool,
    /// The factor of `--steady_state`.
    #[arg(long = "steady_factor", default_value_t = 2.0)]
    steady_factor: f64,
    /// Warm-up operations at most (default 3 × the benchmark's).
    #[arg(long = "steady_max_ops")]
    steady_max_ops: Option<u64>,
    /// Operations measured after the warm-up (default the benchmark's).
    #[arg(long = "steady_ops")]
    steady_ops: Option<u64>,
    /// Write the JSON records here.
    #[arg(long = "json")]
    json: Option<PathBuf>,
    /// `tierkv:vlsm` SST size in bytes (default: the scale's SST size / 8).
    #[arg(long = "vlsm_sst_size")]
    vlsm_sst_size: Option<u64>,
    /// `tierkv:vlsm` memtable size in bytes (default: the run's memtable
    /// size, cut into range-partitioned L0 SSTs; the SST size = the paper's
    /// literal one SST per memtable). Per configuration: `tierkv:vlsm/mem=8m`.
    #[arg(long = "vlsm_memtable_size")]
    vlsm_memtable_size: Option<u64>,
    /// `tierkv:vlsm` growth factor Φ between L1 and L2.
    #[arg(long = "vlsm_phi", default_value_t = 32)]
    vlsm_phi: u64,
    /// `tierkv:vlsm` growth factor f between the other levels.
    #[arg(long = "vlsm_growth_factor", default_value_t = 8)]
    vlsm_growth_factor: u64,
    /// tierkv: independent LSMs (regions) in one database, hash-routed
    /// (the vLSM paper runs 4 to 256).
    #[arg(long = "regions", default_value_t = 1)]
    regions: usize,
    /// Keep the databases after the run.
    #[arg(long = "keep_db", num_args = 0..=1, default_value = "0", default_missing_value = "1", value_parser = parse_flag)]
    keep_db: bool,
    /// Print the engine's own statistics (tierkv: `tierkv.stats`: stalls
    /// by cause, compactions, bytes per tier) after each configuration.
    #[arg(long = "statistics", num_args = 0..=1, default_value = "0", default_missing_value = "1", value_parser = parse_flag)]
    statistics: bool,
}

/// `$TMPDIR/tierkv-bench-data`: works on any machine without flags; pass
/// `--db` to measure on a chosen SSD.
fn default_db_dir() -> PathBuf {
    std::env::temp_dir().join("tierkv-bench-data")
}

/// `/dev/shm/tierkv-bench-<pid>`: the PM tier of a machine without PM is a
/// file in shared memory. Where there is no `/dev/shm`, the temporary
/// directory serves (slower, but the main job still runs).
fn default_pm_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    base.join(format!("tierkv-bench-{}", std::process::id()))
}

fn plan_from(args: &BenchArgs, configs: Vec<Config>, default_scale: Scale) -> Result<Plan> {
    let scale = match &args.scale {
        None => default_scale,
        Some(s) => Scale::parse(s).ok_or_else(|| {
            Error::Usage(format!(
                "unknown scale `{s}`; scales: tiny, small, medium, paper10, leveldb10, vlsm-paper, tlsm10"
            ))
        })?,
    };
    let distribution = match &args.distribution {
        None => None,
        Some(d) => Some(Distribution::parse(d).ok_or_else(|| {
            Error::Usage(format!(
                "unknown distribution `{d}`; use uniform, zipfian, latest or hotspot"
            ))
        })?),
    };
    if args.threads == 0 {
        return Err(Error::Usage("--threads must be at least 1".into()));
    }
    if !args.rate_sweep.is_empty() {
        if let Some(bad) = args
            .rate_sweep
            .iter()
            .find(|r| !(r.is_finite() && **r > 0.0))
        {
            return Err(Error::Usage(format!(
                "--rate_sweep values must be positive, got {bad}"
            )));
        }
        if !(args.latency_target_us.is_finite() && args.latency_target_us > 0.0) {
            return Err(Error::Usage(format!(
                "--latency_target_us must be positive, got {}",
                args.latency_target_us
            )));
        }
    }
    if let Some(r) = args.writer_rate.filter(|r| !(r.is_finite() && *r > 0.0)) {
        return Err(Error::Usage(format!(
            "--writer_rate must be positive, got {r}"
        )));
    }
    if args.steady_state && !(args.steady_factor.is_finite() && args.steady_factor >= 1.0) {
        return Err(Error::Usage(format!(
            "--steady_factor must be at least 1, got {}",
            args.steady_factor
        )));
    }
    if let Some(r) = args
        .memtable_bloom_size_ratio
        .filter(|r| !(0.0..=0.25).contains(r))
    {
        return Err(Error::Usage(format!(
            "--memtable_bloom_size_ratio must be between 0 and 0.25, got {r}"
        )));
    }
    let pacing = match (args.rate, args.rate_fraction, &args.rate_of) {
        _ if !args.rate_sweep.is_empty() => {
            let mut points = args.rate_sweep.clone();
            points.sort_by(f64::total_cmp);
            points.dedup();
            let base = match args.rate_of.as_deref() {
                None => SweepBase::Absolute,
                Some("each") => SweepBase::Each,
                Some(of) => SweepBase::Of(Config::parse(of)?),
            };
            Pacing::Sweep { points, base }
        }
        (Some(r), _, _) if r > 0.0 && r.is_finite() => Pacing::Rate(r),
        (Some(r), _, _) => return Err(Error::Usage(format!("--rate must be positive, got {r}"))),
        (None, Some(f), Some(of)) if f > 0.0 && f.is_finite() => Pacing::Fraction {
            fraction: f,
            of: Config::parse(of)?,
        },
        (None, Some(f), _) => {
            return Err(Error::Usage(format!(
                "--rate_fraction must be positive and needs --rate_of, got {f}"
            )))
        }
        (None, None, _) => Pacing::Closed,
    };
    let memtable = args
        .write_buffer_size
        .unwrap_or(scale.memtable_size_bytes());
    let pm_base = args.pm_dir.clone().unwrap_or_else(default_pm_dir);
    let setup = EngineSetup {
        pm_size_bytes: args.pm_size.unwrap_or(scale.pm_size_bytes()),
        memtable_size_bytes: memtable,
        memtable_count: args.max_write_buffer_number.max(2),
        sst_size_bytes: args
            .target_file_size_base
            .unwrap_or(match args.write_buffer_size {
                Some(m) => m,
                None => scale.sst_size_bytes(),
            }),
        l1_size_bytes: args
            .max_bytes_for_level_base
            .unwrap_or(scale.l1_size_bytes()),
        level_multiplier: args
            .max_bytes_for_level_multiplier
            .unwrap_or(scale.level_multiplier())
            .max(2),
        background_jobs: args.max_background_jobs.max(1),
        subcompactions: args.subcompactions,
        memtable_bloom_ratio: args.memtable_bloom_size_ratio,
        block_cache_bytes: args.cache_size,
        bloom_bits: args.bloom_bits,
        l0_triggers: (
            args.level0_file_num_compaction_trigger
                .unwrap_or(scale.l0_triggers().0),
            args.level0_slowdown_writes_trigger
                .unwrap_or(scale.l0_triggers().1),
            args.level0_stop_writes_trigger
                .unwrap_or(scale.l0_triggers().2),
        ),
        delayed_write_rate_bytes_per_sec: args.delayed_write_rate,
        pending_compaction_bytes_limits: (
            args.soft_pending_compaction_bytes_limit,
            args.hard_pending_compaction_bytes_limit,
        ),
        direct_io: args.use_direct_io_for_flush_and_compaction,
        bytes_per_sync: args.bytes_per_sync,
        wal_bytes_per_sync: args.wal_bytes_per_sync,
        write_pacing: args.write_pacing,
        compression: args.compression_type,
        vlsm_sst_size_bytes: args.vlsm_sst_size,
        vlsm_memtable_size_bytes: args.vlsm_memtable_size,
        vlsm_phi: args.vlsm_phi,
        vlsm_growth_factor: args.vlsm_growth_factor,
        regions: args.regions,
        ..EngineSetup::defaults(args.db.clone(), pm_base.clone())
    };
    let benchmarks: Vec<String> = args
        .benchmarks
        .iter()
        .map(|b| b.trim().to_string())
        .filter(|b| !b.is_empty())
        .collect();
    Ok(Plan {
        configs,
        benchmarks,
        scale,
        num: args.num,
        reads: args.reads.and_then(|r| u64::try_from(r).ok()),
        key_size: args.key_size,
        value_size: args.value_size,
        params: WorkloadParams {
            num: 0,
            reads: 0,
            key_size: args.key_size,
            value_size: 0,
            distribution,
            seek_nexts: args.seek_nexts,
            seed: args.seed,
        },
        setup,
        threads: args.threads,
        histogram: args.histogram,
        report_interval_s: args.report_interval_seconds,
        pacing,
        db_base: args.db.clone(),
        pm_base,
        keep_db: args.keep_db,
        statistics: args.statistics,
        json: args.json.clone(),
        steady: args.steady_state.then_some(SteadyOptions {
            factor: args.steady_factor,
            max_ops: args.steady_max_ops,
            ops: args.steady_ops,
        }),
        latency_target_us: args.latency_target_us,
        quiesce: args
            .quiesce
            .then(|| std::time::Duration::from_secs(args.quiesce_timeout_seconds)),
        writer_rate: args.writer_rate,
        slow_reads_file: args.slow_reads_file.clone(),
    })
}

/// Removes the PM base directory if it is the per-process default
/// ([`default_pm_dir`]): only that one is ours to remove entirely.
fn cleanup_pm_base(plan: &Plan, args: &BenchArgs) {
    if args.pm_dir.is_none() && !plan.keep_db {
        let _ = std::fs::remove_dir_all(&plan.pm_base);
    }
}

/// Fixes glibc malloc's thresholds for the whole run, so that every
/// configuration of a `compare` runs under the same allocator regime
/// whatever its place in the list.
///
/// Why, measured (2026-11-29, `tierkv:classic/onpm=1` filling 1 GiB at
/// `tlsm10`): the same configuration listed twice in one `compare` filled
/// at 65.5 K ops/s first and 106.8 K second; alone, 62.4 K, and 121.6 K
/// with the thresholds fixed. glibc starts with a 128 KiB mmap threshold
/// that grows as large blocks are freed, and trims the heap top past
/// twice that: until it has grown, a fresh process maps, faults in and
/// unmaps its large allocations again and again, and a page fault costs
/// about 7 µs in this VM (writing 14 GiB to tmpfs spent 24 s in the
/// kernel). The first configuration paid for the process's warm-up; the
/// ratios of earlier runs to their first configuration carry it. Every
/// engine, RocksDB included, allocates from this malloc, so the fixed
/// regime is the same for all. `--malloc_dynamic` leaves glibc's default.
fn pin_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before the
    // bench starts any thread.
    unsafe {
        // 32 MiB: glibc's largest dynamic threshold on 64-bit (below it
        // blocks come from the heap); trim only past 1 GiB free at the top.
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

fn main_inner() -> Result<()> {
    let cli = Cli::parse();
    let bench = match &cli.cmd {
        Some(Cmd::Compare(c)) => Some(&c.bench),
        None => Some(&cli.bench),
        _ => None,
    };
    if bench.is_some_and(|b| !b.malloc_dynamic) {
        pin_malloc();
    }
    match cli.cmd {
        Some(Cmd::Report(r)) => report::report(&r.json, r.out.as_deref()),
        Some(Cmd::Repair(r)) => repair(&r),
        Some(Cmd::Compare(c)) => {
            let configs = c
                .configs
                .iter()
                .map(|s| Config::parse(s))
                .collect::<Result<Vec<_>>>()?;
            let plan = plan_from(&c.bench, configs, Scale::Medium)?;
            let r = suite::execute(&plan);
            cleanup_pm_base(&plan, &c.bench);
            r.map(|_| ())
        }
        None => {
            let config = Config::parse(&cli.bench.config)?;
            let plan = plan_from(&cli.bench, vec![config], Scale::Tiny)?;
            let r = suite::execute(&plan);
            cleanup_pm_base(&plan, &cli.bench);
            r.map(|_| ())
        }
    }
}

fn main() -> ExitCode {
    match main_inner() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tierkv-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_type_sets_every_engine_s_codec() {
        let plan = |args: &[&str]| {
            let cli = Cli::parse_from(args);
            let config = Config::parse("tierkv:classic").unwrap_or_else(|e| panic!("{e}"));
            plan_from(&cli.bench, vec![config], Scale::Tiny).unwrap_or_else(|e| panic!("{e}"))
        };
        assert_eq!(
            plan(&["tierkv-bench"]).setup.compression,
            tierkv::Compression::None
        );
        for (name, c) in [
            ("lz4", tierkv::Compression::Lz4),
            ("zstd", tierkv::Compression::Zstd),
            ("none", tierkv::Compression::None),
        ] {
            assert_eq!(
                plan(&["tierkv-bench", "--compression_type", name])
                    .setup
                    .compression,
                c
            );
        }
        assert!(Cli::try_parse_from(["tierkv-bench", "--compression_type", "snappy"]).is_err());
    }

    /// The allocator regime is fixed unless `--malloc_dynamic` is given,
    /// for a single run and for `compare` alike.
    #[test]
    fn malloc_dynamic_flag() {
        assert!(!Cli::parse_from(["tierkv-bench"]).bench.malloc_dynamic);
        assert!(
            Cli::parse_from(["tierkv-bench", "--malloc_dynamic"])
                .bench
                .malloc_dynamic
        );
        let cli = Cli::parse_from([
            "tierkv-bench",
            "compare",
            "--configs",
            "rocksdb-ssd",
            "--malloc_dynamic",
        ]);
        match cli.cmd {
            Some(Cmd::Compare(c)) => assert!(c.bench.malloc_dynamic),
            _ => panic!("not a compare"),
        }
    }

    #[test]
    fn sweep_and_steady_flags() {
        let cli = Cli::parse_from([
            "tierkv-bench",
            "--rate_sweep",
            "0.8,0.2,0.5",
            "--rate_of",
            "each",
            "--steady_state",
            "--scale",
            "vlsm-paper",
        ]);
        let config = Config::parse("fake").unwrap_or_else(|e| panic!("{e}"));
        let plan =
            plan_from(&cli.bench, vec![config], Scale::Tiny).unwrap_or_else(|e| panic!("{e}"));
        match &plan.pacing {
            Pacing::Sweep {
                points,
                base: SweepBase::Each,
            } => assert_eq!(points, &[0.2, 0.5, 0.8]),
            other => panic!("{other:?}"),
        }
        assert!(plan.steady.as_ref().is_some_and(|s| s.factor == 2.0));
        assert_eq!(plan.setup.level_multiplier, 8);
        assert_eq!(plan.setup.l1_size_bytes, 128 << 20);
        let bad = Cli::parse_from(["tierkv-bench", "--rate_sweep", "0,1"]);
        assert!(plan_from(&bad.bench, Vec::new(), Scale::Tiny).is_err());
        assert!(
            Cli::try_parse_from(["tierkv-bench", "--rate", "5", "--rate_sweep", "1,2"]).is_err()
        );
    }

    #[test]
    fn main_job_runs_the_flagship_on_a_per_process_pm_dir() {
        let cli = Cli::parse_from(["tierkv-bench"]);
        assert!(cli.cmd.is_none());
        assert_eq!(cli.bench.config, "tierkv:triangle");
        let config = Config::parse(&cli.bench.config).unwrap_or_else(|e| panic!("{e}"));
        let plan =
            plan_from(&cli.bench, vec![config], Scale::Tiny).unwrap_or_else(|e| panic!("{e}"));
        let dir = default_pm_dir();
        assert_eq!(plan.pm_base, dir);
        assert!(dir.parent().is_some_and(Path::is_dir));
        assert!(plan.steady.is_none());
        assert_eq!(plan.setup.level_multiplier, 10);
        assert_eq!(
            dir.file_name(),
            Some(std::ffi::OsStr::new(&format!(
                "tierkv-bench-{}",
                std::process::id()
            )))
        );
    }

    #[test]
    fn repair_subcommand_rebuilds_a_database_with_a_damaged_manifest() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let db_dir = tmp.path().join("db");
        {
            let db = tierkv::Db::open(&db_dir, tierkv::Options::default())
                .unwrap_or_else(|e| panic!("{e}"));
            for i in 0..500u32 {
                db.put(format!("k{i:04}").as_bytes(), b"v")
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            db.flush().unwrap_or_else(|e| panic!("{e}"));
            db.put(b"in-the-wal", b"w")
                .unwrap_or_else(|e| panic!("{e}"));
            db.close().unwrap_or_else(|e| panic!("{e}"));
        }
        let manifest = std::fs::read_dir(&db_dir)
            .unwrap_or_else(|e| panic!("{e}"))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("MANIFEST-"))
            })
            .unwrap_or_else(|| panic!("no manifest"));
        let mut bytes = std::fs::read(&manifest).unwrap_or_else(|e| panic!("{e}"));
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x10;
        std::fs::write(&manifest, bytes).unwrap_or_else(|e| panic!("{e}"));
        assert!(tierkv::Db::open(&db_dir, tierkv::Options::default()).is_err());
        let dir_arg = db_dir.to_string_lossy().into_owned();
        let cli = Cli::parse_from(["tierkv-bench", "repair", dir_arg.as_str()]);
        let Some(Cmd::Repair(args)) = cli.cmd else {
            panic!("not the repair subcommand");
        };
        repair(&args).unwrap_or_else(|e| panic!("{e}"));
        let db =
            tierkv::Db::open(&db_dir, tierkv::Options::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            db.get(b"k0123").unwrap_or_else(|e| panic!("{e}")),
            Some(b"v".to_vec())
        );
        assert_eq!(
            db.get(b"in-the-wal").unwrap_or_else(|e| panic!("{e}")),
            Some(b"w".to_vec())
        );
    }
}
