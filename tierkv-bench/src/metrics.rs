//! The JSON record of one benchmark on one configuration (BENCH.md
//! "Metrics"), and the rules that derive it from measurements and the
//! engine's own statistics — the same rules for every engine.
//!
//! ```json
//! { "engine": "rocksdb", "config": "rocksdb-ssd", "benchmark": "fillrandom",
//!   "scale": "medium", "value_size": 4096, "ops": 1048576, "seconds": 27.0,
//!   "ops_per_sec": 38883.0, "mb_per_sec": 152.5,
//!   "latency_us": {"avg":25.7,"p50":3.1,"p90":4.5,"p99":50,"p999":3093,"p9999":9215,"max":14988},
//!   "stall": {"writes":1048576,"write_seconds_max":0.34,"writes_over_1ms":9120,
//!             "writes_over_10ms":310,"writes_over_100ms":4,"slow_write_time_percent":31.2,
//!             "second_ops_min":1320.0,"second_ops_median":41000.0},
//!   "engine_stall": {"seconds":8.2,"percent":30.4,"count":120,"max_seconds":0.9,
//!                    "causes":[{"cause":"l0-stop","count":3,"seconds":1.4,"max_seconds":0.9},…],
//!                    "longest":[{"at_s":12.5,"seconds":0.9,"cause":"l0-stop"},…]},
//!   "troughs": {"seconds":6,"percent":22.2},
//!   "bytes": {"user":…,"ssd_written":…,"ssd_read":…,"pm_written":0,"pm_relinked":0,"wal":…},
//!   "write_amp": {"ssd":2.4,"pm":0.0,"total":2.4}, "io_amp": 3.1,
//!   "chain_bytes": {"avg":…,"max":…},
//!   "timeline": [41000, 39000, …], "compactions": [{…}], "levels": [{…}],
//!   "cpu_seconds": 40.1, "peak_rss_bytes": 300000000,
//!   "mode": "closed", "threads": 1, "debt": {…}, … }
//! ```
//!
//! Fields after `peak_rss_bytes` are extensions the report uses (mode,
//! rate, threads, key count, key size, the latency CDF, the compaction
//! debt, the steady-state warm-up, the rate sweep point).
//!
//! Rules:
//! 1. `troughs`: seconds of the timeline whose completions are below 20% of
//!    the run's mean rate (operations ÷ seconds); only whole seconds are
//!    judged (the partial last second is not). Not the median: where most
//!    seconds are stalled the median is a stalled second, and a median rule
//!    finds no trough at all.
//! 2. `chain_bytes`: the input bytes of the compactions that start between
//!    two consecutive memtable flushes (by flush start), averaged over those
//!    intervals and maximised — vLSM's compaction-chain width.
//! 3. `stall`: measured by the client, the same way for every engine, from
//!    the latency of every write (closed loop: its service time; open loop:
//!    from its scheduled start, so queueing behind a stall counts): the
//!    longest write; the writes slower than 1, 10 and 100 ms; the share of
//!    the run's wall time during which at least one write slower than 1 ms
//!    was in progress (the union of their intervals, so it never exceeds
//!    100% whatever the threads); and the slowest and median whole second
//!    of the timeline (all operations). `engine_stall` is each engine's own
//!    accounting over the benchmark window — with intervals (tierkv), those
//!    starting in the window, with their totals per cause and the five
//!    longest (when, how long, why); with counters only (RocksDB), the
//!    difference of the counters. The two count different things (tierkv counts every
//!    wait, RocksDB its delay and stop paths) and are never compared.
//! 4. amplification: `write_amp.ssd` = ssd_written / user,
//!    `write_amp.pm` = (pm_written + pm_relinked) / user,
//!    `write_amp.total` = (ssd_written + pm_written + pm_relinked) / user,
//!    `io_amp` = (ssd_read + ssd_written) / user; 0 when nothing was written.
//! 5. `debt`: the compaction debt of the level shape against the targets the
//!    engine itself works to (tierkv: its design's; RocksDB: L1 target ×
//!    multiplier, L0 at its compaction trigger): per level ≥ 1, the bytes
//!    over target; L0's files against its trigger (and bytes against its
//!    target). The deepest level holding data is not judged (it has no
//!    level below to push into; RocksDB scores it 0 too). With regions,
//!    each region is judged against the targets and the debts add up.
//!    [`Debt::within`] is the steady-state test: every judged level at most
//!    `factor` × its target (L0 by files where the engine counts files).
//! 6. `read_stall`: slow reads measured by the client, as rule 3 does for
//!    writes: the longest read, P99.9 and P99.99, and the reads slower than
//!    1, 10 and 100 ms (service time closed loop, from the scheduled start
//!    open loop). `quiesce_seconds`: with `--quiesce`, how long the bench
//!    waited before the benchmark for the engine's background work to end
//!    (`None` without it; a benchmark "after the fill" has none).

use serde::{Deserialize, Serialize};

use crate::engines::{CompactionEvent, EngineStats, FlushEvent, LevelShape, LevelTargets};
use crate::runner::{Hist, Measured};

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// 99.99th percentile.
    pub p9999: f64,
    /// Maximum.
    pub max: f64,
}

impl LatencySummary {
    /// Summarises a nanosecond histogram.
    pub fn from_hist(h: &Hist) -> LatencySummary {
        if h.is_empty() {
            return LatencySummary::default();
        }
        let q = |x: f64| h.value_at_quantile(x) as f64 / 1e3;
        LatencySummary {
            avg: h.mean() / 1e3,
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            p9999: q(0.9999),
            max: h.max() as f64 / 1e3,
        }
    }
}

/// `latency_us`: all requests, and reads / writes separately in mixed runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// All counted requests.
    #[serde(flatten)]
    pub all: LatencySummary,
    /// Reads (mixed workloads only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<LatencySummary>,
    /// Writes (mixed workloads only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<LatencySummary>,
}

/// `stall`: write stalls as the client sees them (rule 3), the same for
/// every engine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stall {
    /// Writes measured (0 for a read-only benchmark, or for a record written
    /// before the client measured stalls: then only the per-second figures
    /// are known, recomputed from the timeline).
    pub writes: u64,
    /// The longest write, in seconds.
    pub write_seconds_max: f64,
    /// Writes slower than 1 ms.
    pub writes_over_1ms: u64,
    /// Writes slower than 10 ms.
    pub writes_over_10ms: u64,
    /// Writes slower than 100 ms.
    pub writes_over_100ms: u64,
    /// Percent of the run's wall time during which a write slower than
    /// 1 ms was in progress.
    pub slow_write_time_percent: f64,
    /// Completions in the slowest whole second.
    pub second_ops_min: f64,
    /// Completions in the median whole second.
    pub second_ops_median: f64,
}

/// `read_stall`: slow reads as the client sees them (rule 6), the same for
/// every engine — the read-side twin of [`Stall`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReadStall {
    /// Reads measured (0 for a benchmark without reads).
    pub reads: u64,
    /// The longest read, in seconds.
    pub read_seconds_max: f64,
    /// Read P99.9, µs.
    pub p999_us: f64,
    /// Read P99.99, µs.
    pub p9999_us: f64,
    /// Reads slower than 1 ms.
    pub reads_over_1ms: u64,
    /// Reads slower than 10 ms.
    pub reads_over_10ms: u64,
    /// Reads slower than 100 ms.
    pub reads_over_100ms: u64,
}

/// The client's read-stall measures (rule 6) from the read latencies.
pub fn client_read_stall(read: &Hist) -> ReadStall {
    if read.is_empty() {
        return ReadStall::default();
    }
    let over = |ms: u64| read.len() - read.count_between(0, ms * 1_000_000);
    ReadStall {
        reads: read.len(),
        read_seconds_max: read.max() as f64 / 1e9,
        p999_us: read.value_at_quantile(0.999) as f64 / 1e3,
        p9999_us: read.value_at_quantile(0.9999) as f64 / 1e3,
        reads_over_1ms: over(1),
        reads_over_10ms: over(10),
        reads_over_100ms: over(100),
    }
}

/// `engine_stall`: the engine's own stall accounting (rule 3), kept beside
/// [`Stall`] and never compared across engines.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineStall {
    /// Seconds writes were delayed or stopped.
    pub seconds: f64,
    /// Percent of the benchmark's duration.
    pub percent: f64,
    /// Number of stalls.
    pub count: u64,
    /// Longest stall.
    pub max_seconds: f64,
    /// Per cause, where the engine names its stalls: most seconds first
    /// (tierkv), or most stalls first with counts only (RocksDB).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<CauseStall>,
    /// The longest stalls of the window (at most [`LONGEST_STALLS`]),
    /// longest first, with when and why, where the engine keeps them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub longest: Vec<StallRecord>,
    /// Writes the engine's pacing controller delayed by a short pause in
    /// the window (tierkv), apart from the stalls above.
    #[serde(default)]
    pub paced_writes: u64,
    /// Seconds of those pauses.
    #[serde(default)]
    pub paced_seconds: f64,
}

/// How many of the longest stalls `engine_stall.longest` keeps.
pub const LONGEST_STALLS: usize = 5;

/// The stalls of one cause in a benchmark window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CauseStall {
    /// The engine's name for the cause.
    pub cause: String,
    /// Number of stalls.
    pub count: u64,
    /// Seconds writers were delayed or stopped for it, where the engine
    /// keeps each stall (tierkv; RocksDB counts them only).
    #[serde(default)]
    pub seconds: Option<f64>,
    /// Longest, likewise.
    #[serde(default)]
    pub max_seconds: Option<f64>,
}

/// One stall: when (seconds from the start of the benchmark window), how
/// long and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StallRecord {
    /// Start, seconds into the benchmark.
    pub at_s: f64,
    /// Duration.
    pub seconds: f64,
    /// The engine's name for the cause.
    pub cause: String,
}

/// Bytes of one level against its target (rule 5).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LevelDebt {
    /// Level (≥ 1).
    pub level: usize,
    /// Bytes in the level (all regions).
    pub bytes: u64,
    /// Its target (all regions).
    pub target_bytes: u64,
    /// Bytes over the target (summed per region).
    pub over_bytes: u64,
    /// The worst region's bytes ÷ target.
    pub ratio: f64,
}

/// `debt`: the compaction debt of a level shape (rule 5).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Debt {
    /// L0 tables (all regions).
    pub l0_files: u64,
    /// L0 tables at which L0 compaction starts (per region), where the
    /// engine counts L0 in tables.
    pub l0_files_trigger: Option<u64>,
    /// L0 bytes (all regions).
    pub l0_bytes: u64,
    /// L0's target bytes (all regions), where the engine has one.
    pub l0_target_bytes: Option<u64>,
    /// Judged levels ≥ 1 (the deepest level holding data is not judged).
    pub levels: Vec<LevelDebt>,
    /// Bytes over target, all judged levels and L0 together.
    pub over_bytes: u64,
    /// The worst judged level's size ÷ target (L0: files ÷ trigger where the
    /// engine counts files, else bytes ÷ target).
    pub ratio_max: f64,
    /// The engine's own estimate of the bytes compaction still has to
    /// rewrite, where it reports one (RocksDB's
    /// `rocksdb.estimate-pending-compaction-bytes`).
    pub pending_compaction_bytes: Option<u64>,
}

impl Debt {
    /// True if every judged level is at most `factor` × its target.
    pub fn within(&self, factor: f64) -> bool {
        self.ratio_max <= factor
    }
}

/// The debt after one warm-up chunk of a steady-state run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DebtSample {
    /// Warm-up operations so far.
    pub ops: u64,
    /// Seconds of warm-up so far.
    pub seconds: f64,
    /// [`Debt::over_bytes`].
    pub over_bytes: u64,
    /// [`Debt::ratio_max`].
    pub ratio_max: f64,
}

/// `steady`: how a steady-state run got to its measured window
/// (suite.rs, "Steady state").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Steady {
    /// The factor every level had to be within.
    pub factor: f64,
    /// Operations run before the measured window.
    pub warmup_ops: u64,
    /// Their wall seconds.
    pub warmup_seconds: f64,
    /// Why the warm-up ended: `within-factor` (three samples in a row with
    /// every level within the factor), `plateau` (the debt stopped growing
    /// without getting within the factor) or `budget` (neither, after
    /// `--steady_max_ops`).
    pub settled: String,
    /// The debt after each warm-up chunk.
    pub samples: Vec<DebtSample>,
    /// The debt when the measured window started.
    pub debt_start: Debt,
}

/// One of the numbers a design reports about itself (tierkv's
/// `Design::counters`), when the benchmark started and when it ended:
/// cumulative counters (take the difference) and gauges of the shape
/// (read the end).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DesignCounter {
    /// Its name (e.g. `vlsm.l1_l2.l2_bytes`).
    pub name: String,
    /// The value when the benchmark started.
    pub start: f64,
    /// The value when it ended.
    pub end: f64,
}

/// `sweep`: one point of a `--rate_sweep`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// The value listed in `--rate_sweep` (a fraction, or requests per
    /// second when `of` is `None`).
    pub point: f64,
    /// Whose sustained rate the fraction refers to (a configuration, or
    /// the configuration itself), `None` for absolute rates.
    pub of: Option<String>,
    /// That sustained rate (requests per second), when a fraction.
    pub base_ops_per_sec: Option<f64>,
    /// The latency target of the summary (P99, µs).
    pub target_us: f64,
}

/// `troughs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Troughs {
    /// Whole seconds under 20% of the run's mean rate.
    pub seconds: u64,
    /// Percent of the judged seconds.
    pub percent: f64,
}

/// `bytes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Bytes {
    /// Key + value bytes the benchmark wrote.
    pub user: u64,
    /// Bytes written to the SSD tier.
    pub ssd_written: u64,
    /// Bytes read from the SSD tier.
    pub ssd_read: u64,
    /// Bytes of data written to the PM tier (WAL, flush and compaction
    /// output; relinks excluded).
    pub pm_written: u64,
    /// PM bytes written by pointer-only work (relinked, not copied).
    #[serde(default)]
    pub pm_relinked: u64,
    /// WAL bytes (either tier).
    pub wal: u64,
}

/// `write_amp`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WriteAmp {
    /// SSD bytes written / user bytes.
    pub ssd: f64,
    /// PM bytes written (data and relinks) / user bytes.
    #[serde(default)]
    pub pm: f64,
    /// (SSD + PM bytes written) / user bytes.
    pub total: f64,
}

/// `chain_bytes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Chain {
    /// Mean bytes compacted between two consecutive flushes.
    pub avg: f64,
    /// Most bytes compacted between two consecutive flushes.
    pub max: u64,
}

/// One JSON record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// `tierkv`, `rocksdb` or `fake`.
    pub engine: String,
    /// The configuration (`tierkv:classic`, `rocksdb-ssd`, …).
    pub config: String,
    /// The benchmark.
    pub benchmark: String,
    /// The scale name, or `custom`.
    pub scale: String,
    /// Value size in bytes.
    pub value_size: usize,
    /// Counted operations.
    pub ops: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// db_bench's MB/s (MiB of keys + values moved per second).
    pub mb_per_sec: f64,
    /// Latency percentiles.
    pub latency_us: Latency,
    /// Write stalls, measured by the client (rule 3).
    pub stall: Stall,
    /// Slow reads, measured by the client (rule 6).
    #[serde(default)]
    pub read_stall: ReadStall,
    /// Seconds waited for background work to end before the benchmark
    /// (`--quiesce`, rule 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiesce_seconds: Option<f64>,
    /// The engine's own stall accounting (rule 3).
    #[serde(default)]
    pub engine_stall: EngineStall,
    /// Throughput troughs.
    pub troughs: Troughs,
    /// Bytes moved.
    pub bytes: Bytes,
    /// Write amplification.
    pub write_amp: WriteAmp,
    /// (SSD read + SSD written) / user bytes.
    pub io_amp: f64,
    /// Compaction-chain width.
    pub chain_bytes: Chain,
    /// Completions per second.
    pub timeline: Vec<u64>,
    /// Compactions that started during the benchmark (start relative to it).
    pub compactions: Vec<CompactionEvent>,
    /// Level shape at the end.
    pub levels: Vec<LevelShape>,
    /// CPU seconds of the process (all threads) during the benchmark.
    pub cpu_seconds: f64,
    /// Peak resident set size during the benchmark.
    pub peak_rss_bytes: u64,

    /// Extension: `closed` or `open`.
    #[serde(default)]
    pub mode: String,
    /// Extension: open-loop rate (requests per second).
    #[serde(default)]
    pub rate_ops_per_sec: Option<f64>,
    /// Extension: the sustained throughput — completions per second over
    /// the second half of the operations ([`steady_ops_per_sec`]). What
    /// `--rate_fraction` refers to.
    #[serde(default)]
    pub steady_ops_per_sec: f64,
    /// Extension: client threads or workers.
    #[serde(default)]
    pub threads: usize,
    /// Extension: key count of the data set.
    #[serde(default)]
    pub num: u64,
    /// Extension: key size.
    #[serde(default)]
    pub key_size: usize,
    /// Extension: `[quantile, latency µs]` points of the latency CDF.
    #[serde(default)]
    pub latency_cdf: Vec<[f64; 2]>,
    /// Extension: CPU microseconds (user + system, all threads, from
    /// `getrusage`) per operation.
    #[serde(default)]
    pub cpu_us_per_op: f64,
    /// Extension: CPU cycles per operation, the vLSM paper's CPU
    /// efficiency: `cpu_seconds` × the nominal clock (`cpu MHz` of
    /// /proc/cpuinfo) / ops — an estimate from CPU time, not a hardware
    /// counter; 0 when the clock is unknown.
    #[serde(default)]
    pub cpu_cycles_per_op: f64,
    /// Extension: CPU microseconds the open-loop generator thread spent per
    /// request (0 in a closed loop).
    #[serde(default)]
    pub generator_cpu_us_per_op: f64,
    /// Extension: the compaction debt when the benchmark ended (rule 5);
    /// `None` when the engine reports no level targets.
    #[serde(default)]
    pub debt: Option<Debt>,
    /// Extension: the warm-up of a steady-state run (`--steady_state`).
    #[serde(default)]
    pub steady: Option<Steady>,
    /// Extension: the rate-sweep point of an open-loop run (`--rate_sweep`).
    #[serde(default)]
    pub sweep: Option<SweepPoint>,
    /// Extension: what the engine's design reports about itself
    /// (tierkv's `Design::counters`), at the start and the end.
    #[serde(default)]
    pub design_counters: Vec<DesignCounter>,
}

/// The sustained throughput of a run: operations per second over the
/// second half of its operations, from the per-second `timeline` (the
/// second in which the half-way operation completed counts in proportion).
/// A closed-loop fill runs fastest while memtables and empty levels absorb
/// it; an open loop paced at a fraction of the *whole* run's rate can
/// therefore overload the engine for its whole second half. Falls back to
/// `ops / seconds` without a timeline.
pub fn steady_ops_per_sec(timeline: &[u64], seconds: f64) -> f64 {
    let ops: u64 = timeline.iter().sum();
    if ops == 0 || seconds <= 0.0 {
        return 0.0;
    }
    let half = ops.div_ceil(2);
    let mut done = 0u64;
    for (sec, &n) in timeline.iter().enumerate() {
        if n > 0 && done + n >= half {
            // `half` is reached `frac` of the way into this second.
            let frac = (half - done) as f64 / n as f64;
            let t_half = sec as f64 + frac;
            let left = seconds - t_half;
            return if left > 0.0 {
                (ops - half) as f64 / left
            } else {
                ops as f64 / seconds
            };
        }
        done += n;
    }
    ops as f64 / seconds
}

/// The trough rule (rule 1): `(trough seconds, percent of judged seconds)`.
pub fn troughs(timeline: &[u64], seconds: f64) -> Troughs {
    let whole = (seconds.floor() as usize).min(timeline.len());
    if whole == 0 {
        return Troughs::default();
    }
    let ops: u64 = timeline.iter().sum();
    let mean = ops as f64 / seconds;
    let n = timeline[..whole]
        .iter()
        .filter(|&&x| (x as f64) < 0.2 * mean)
        .count() as u64;
    Troughs {
        seconds: n,
        percent: 100.0 * n as f64 / whole as f64,
    }
}

/// A write slower than this is a slow write (rule 3): 1 ms.
pub const SLOW_WRITE_NS: u64 = 1_000_000;

/// Wall nanoseconds covered by at least one of `intervals` (`(start, end)`
/// in ns; sorted here).
pub fn union_ns(intervals: &mut [(u64, u64)]) -> u64 {
    intervals.sort_unstable();
    let mut total = 0u64;
    let mut cur: Option<(u64, u64)> = None;
    for &(a, b) in intervals.iter() {
        match cur {
            Some((s, e)) if a <= e => cur = Some((s, e.max(b))),
            Some((s, e)) => {
                total += e - s;
                cur = Some((a, b));
            }
            None => cur = Some((a, b)),
        }
    }
    if let Some((s, e)) = cur {
        total += e - s;
    }
    total
}

/// The slowest and the median whole second of a timeline; with no whole
/// second, the run's mean rate for both.
pub fn second_ops(timeline: &[u64], seconds: f64) -> (f64, f64) {
    let whole = (seconds.floor() as usize).min(timeline.len());
    if whole == 0 {
        let ops: u64 = timeline.iter().sum();
        let mean = if seconds > 0.0 {
            ops as f64 / seconds
        } else {
            0.0
        };
        return (mean, mean);
    }
    let mut sorted = timeline[..whole].to_vec();
    sorted.sort_unstable();
    let median = if whole % 2 == 1 {
        sorted[whole / 2] as f64
    } else {
        (sorted[whole / 2 - 1] + sorted[whole / 2]) as f64 / 2.0
    };
    (sorted[0] as f64, median)
}

/// The client's stall measures (rule 3) from the write latencies, the
/// intervals of the writes slower than [`SLOW_WRITE_NS`] (ns since the
/// start, any order) and the timeline.
pub fn client_stall(
    write: &Hist,
    slow_writes: &mut [(u64, u64)],
    timeline: &[u64],
    seconds: f64,
) -> Stall {
    let over = |ms: u64| -> u64 {
        if write.is_empty() {
            0
        } else {
            write.len() - write.count_between(0, ms * 1_000_000)
        }
    };
    let (min, median) = second_ops(timeline, seconds);
    let slow_ns = union_ns(slow_writes);
    Stall {
        writes: write.len(),
        write_seconds_max: if write.is_empty() {
            0.0
        } else {
            write.max() as f64 / 1e9
        },
        writes_over_1ms: over(1),
        writes_over_10ms: over(10),
        writes_over_100ms: over(100),
        slow_write_time_percent: if seconds > 0.0 {
            (100.0 * slow_ns as f64 / 1e9 / seconds).min(100.0)
        } else {
            0.0
        },
        second_ops_min: min,
        second_ops_median: median,
    }
}

/// The debt of per-region level shapes against the engine's targets
/// (rule 5).
pub fn debt(
    regions: &[Vec<LevelShape>],
    targets: &LevelTargets,
    pending_compaction_bytes: Option<u64>,
) -> Debt {
    let mut d = Debt {
        l0_files_trigger: targets.l0_files,
        pending_compaction_bytes,
        ..Debt::default()
    };
    let l0_target = targets.bytes.first().copied().filter(|&b| b > 0);
    let mut l0_target_total = 0u64;
    for shape in regions {
        let depth = shape.iter().map(|l| l.level + 1).max().unwrap_or(0);
        let mut bytes = vec![0u64; depth.max(1)];
        let mut l0_files = 0u64;
        for l in shape {
            bytes[l.level] += l.bytes;
            if l.level == 0 {
                l0_files += l.files;
            }
        }
        d.l0_files += l0_files;
        d.l0_bytes += bytes[0];
        let mut l0_ratio = 0.0;
        if let Some(t) = l0_target {
            l0_target_total += t;
            d.over_bytes += bytes[0].saturating_sub(t);
            l0_ratio = bytes[0] as f64 / t as f64;
        }
        if let Some(n) = targets.l0_files.filter(|&n| n > 0) {
            l0_ratio = l0_files as f64 / n as f64;
        }
        d.ratio_max = d.ratio_max.max(l0_ratio);
        // The deepest level holding data is not judged.
        let deepest = (1..bytes.len()).rev().find(|&l| bytes[l] > 0).unwrap_or(0);
        for (level, &b) in bytes.iter().enumerate().take(deepest).skip(1) {
            let Some(&t) = targets.bytes.get(level).filter(|&&t| t > 0) else {
                continue;
            };
            let over = b.saturating_sub(t);
            let ratio = b as f64 / t as f64;
            d.over_bytes += over;
            d.ratio_max = d.ratio_max.max(ratio);
            match d.levels.iter_mut().find(|x| x.level == level) {
                Some(x) => {
                    x.bytes += b;
                    x.target_bytes += t;
                    x.over_bytes += over;
                    x.ratio = x.ratio.max(ratio);
                }
                None => d.levels.push(LevelDebt {
                    level,
                    bytes: b,
                    target_bytes: t,
                    over_bytes: over,
                    ratio,
                }),
            }
        }
    }
    d.l0_target_bytes = l0_target.map(|_| l0_target_total);
    d.levels.sort_by_key(|l| l.level);
    d
}

/// The debt of an engine's statistics, if it reports level targets.
pub fn debt_of(stats: &EngineStats) -> Option<Debt> {
    let targets = stats.targets.as_ref()?;
    let one;
    let regions: &[Vec<LevelShape>] = if stats.regions.is_empty() {
        one = [stats.levels.clone()];
        &one
    } else {
        &stats.regions
    };
    Some(debt(regions, targets, stats.pending_compaction_bytes))
}

/// The chain rule (rule 2).
pub fn chain_bytes(flushes: &[FlushEvent], compactions: &[CompactionEvent]) -> Chain {
    let mut starts: Vec<f64> = flushes.iter().map(|f| f.start_s).collect();
    starts.sort_by(f64::total_cmp);
    if starts.len() < 2 {
        return Chain::default();
    }
    let mut sums = Vec::with_capacity(starts.len() - 1);
    for w in starts.windows(2) {
        let s: u64 = compactions
            .iter()
            .filter(|c| c.start_s >= w[0] && c.start_s < w[1])
            .map(|c| c.input_bytes)
            .sum();
        sums.push(s);
    }
    Chain {
        avg: sums.iter().sum::<u64>() as f64 / sums.len() as f64,
        max: sums.iter().copied().max().unwrap_or(0),
    }
}

/// The engine's own stall accounting over the window `(t0, t1]` of engine
/// uptime (rule 3).
pub fn stall_in_window(before: &EngineStats, after: &EngineStats, seconds: f64) -> EngineStall {
    let mut causes: Vec<CauseStall> = Vec::new();
    let mut longest: Vec<StallRecord> = Vec::new();
    let (secs, count, max) = match &after.stall.intervals {
        Some(iv) => {
            let mut inside: Vec<_> = iv
                .iter()
                .filter(|i| i.start_s >= before.uptime_s && i.start_s <= after.uptime_s)
                .collect();
            for i in &inside {
                match causes.iter_mut().find(|c| c.cause == i.cause) {
                    Some(c) => {
                        c.count += 1;
                        c.seconds = c.seconds.map(|s| s + i.seconds);
                        c.max_seconds = c.max_seconds.map(|m| m.max(i.seconds));
                    }
                    None => causes.push(CauseStall {
                        cause: i.cause.to_string(),
                        count: 1,
                        seconds: Some(i.seconds),
                        max_seconds: Some(i.seconds),
                    }),
                }
            }
            causes.sort_by(|a, b| {
                b.seconds
                    .unwrap_or(0.0)
                    .total_cmp(&a.seconds.unwrap_or(0.0))
            });
            // Longest first: the maximum is the first, the longest a prefix.
            inside.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
            longest = inside
                .iter()
                .take(LONGEST_STALLS)
                .map(|i| StallRecord {
                    at_s: i.start_s - before.uptime_s,
                    seconds: i.seconds,
                    cause: i.cause.to_string(),
                })
                .collect();
            (
                // fold from +0.0: an empty f64 sum is -0.0.
                inside.iter().fold(0.0, |a, i| a + i.seconds),
                inside.len() as u64,
                inside.first().map_or(0.0, |i| i.seconds),
            )
        }
        None => {
            for (cause, n) in &after.stall.cause_counts {
                let was = before
                    .stall
                    .cause_counts
                    .iter()
                    .find(|(c, _)| c == cause)
                    .map_or(0, |(_, n)| *n);
                if *n > was {
                    causes.push(CauseStall {
                        cause: cause.clone(),
                        count: n - was,
                        seconds: None,
                        max_seconds: None,
                    });
                }
            }
            causes.sort_by_key(|c| std::cmp::Reverse(c.count));
            let count = after.stall.count.saturating_sub(before.stall.count);
            let secs = (after.stall.seconds - before.stall.seconds).max(0.0);
            // The histogram's maximum is cumulative since open; it cannot
            // exceed the stall time of this window.
            let max = if count > 0 {
                after.stall.max_seconds.min(secs)
            } else {
                0.0
            };
            (secs, count, max)
        }
    };
    EngineStall {
        seconds: secs,
        percent: if seconds > 0.0 {
            (100.0 * secs / seconds).min(100.0)
        } else {
            0.0
        },
        count,
        max_seconds: max,
        causes,
        longest,
        paced_writes: after
            .stall
            .paced_writes
            .saturating_sub(before.stall.paced_writes),
        paced_seconds: (after.stall.paced_seconds - before.stall.paced_seconds).max(0.0),
    }
}

/// Identity of a record.
#[derive(Debug, Clone)]
pub struct RecordContext {
    /// Engine name.
    pub engine: String,
    /// Configuration name.
    pub config: String,
    /// Scale name.
    pub scale: String,
    /// Key count.
    pub num: u64,
    /// Key size.
    pub key_size: usize,
    /// Value size.
    pub value_size: usize,
    /// Threads.
    pub threads: usize,
}

/// Process measurements over a benchmark.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessUsage {
    /// CPU seconds.
    pub cpu_seconds: f64,
    /// Peak RSS.
    pub peak_rss_bytes: u64,
    /// Nominal CPU clock in Hz (0 if unknown).
    pub cpu_hz: f64,
}

fn per_op(total: f64, ops: u64) -> f64 {
    if ops == 0 {
        0.0
    } else {
        total / ops as f64
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Builds the record of one benchmark from its measurements and the engine
/// statistics before and after it.
pub fn build_record(
    ctx: &RecordContext,
    benchmark: &str,
    m: &Measured,
    before: &EngineStats,
    after: &EngineStats,
    usage: ProcessUsage,
) -> Record {
    let t = &m.tally;
    let mixed = !t.read.is_empty() && !t.write.is_empty();
    let in_window = |s: f64| s >= before.uptime_s && s <= after.uptime_s;
    let flushes: Vec<FlushEvent> = after
        .flushes
        .iter()
        .filter(|f| in_window(f.start_s))
        .cloned()
        .collect();
    let compactions: Vec<CompactionEvent> = after
        .compactions
        .iter()
        .filter(|c| in_window(c.start_s))
        .map(|c| CompactionEvent {
            start_s: c.start_s - before.uptime_s,
            ..c.clone()
        })
        .collect();
    let bytes = Bytes {
        user: t.written,
        ssd_written: after
            .ssd_written_bytes
            .saturating_sub(before.ssd_written_bytes),
        ssd_read: after.ssd_read_bytes.saturating_sub(before.ssd_read_bytes),
        pm_written: after
            .pm_written_bytes
            .saturating_sub(before.pm_written_bytes),
        pm_relinked: after
            .pm_relinked_bytes
            .saturating_sub(before.pm_relinked_bytes),
        wal: after.wal_bytes.saturating_sub(before.wal_bytes),
    };
    let cdf = cdf_points(&t.all);
    Record {
        engine: ctx.engine.clone(),
        config: ctx.config.clone(),
        benchmark: benchmark.to_string(),
        scale: ctx.scale.clone(),
        value_size: ctx.value_size,
        ops: t.ops,
        seconds: m.seconds,
        ops_per_sec: t.ops as f64 / m.seconds,
        mb_per_sec: t.bytes as f64 / 1048576.0 / m.seconds,
        latency_us: Latency {
            all: LatencySummary::from_hist(&t.all),
            read: mixed.then(|| LatencySummary::from_hist(&t.read)),
            write: mixed.then(|| LatencySummary::from_hist(&t.write)),
        },
        stall: client_stall(&t.write, &mut t.slow_writes.clone(), &t.timeline, m.seconds),
        read_stall: client_read_stall(&t.read),
        quiesce_seconds: None,
        engine_stall: stall_in_window(before, after, m.seconds),
        troughs: troughs(&t.timeline, m.seconds),
        write_amp: WriteAmp {
            ssd: ratio(bytes.ssd_written, bytes.user),
            pm: ratio(bytes.pm_written + bytes.pm_relinked, bytes.user),
            total: ratio(
                bytes.ssd_written + bytes.pm_written + bytes.pm_relinked,
                bytes.user,
            ),
        },
        io_amp: ratio(bytes.ssd_read + bytes.ssd_written, bytes.user),
        chain_bytes: chain_bytes(
            &flushes,
            &compactions_abs(&after.compactions, before, after),
        ),
        bytes,
        timeline: t.timeline.clone(),
        compactions,
        levels: after.levels.clone(),
        cpu_seconds: usage.cpu_seconds,
        peak_rss_bytes: usage.peak_rss_bytes,
        mode: if m.open_loop { "open" } else { "closed" }.to_string(),
        rate_ops_per_sec: m.rate,
        steady_ops_per_sec: steady_ops_per_sec(&t.timeline, m.seconds),
        threads: ctx.threads,
        num: ctx.num,
        key_size: ctx.key_size,
        latency_cdf: cdf,
        cpu_us_per_op: per_op(usage.cpu_seconds * 1e6, t.ops),
        cpu_cycles_per_op: per_op(usage.cpu_seconds * usage.cpu_hz, t.ops),
        generator_cpu_us_per_op: per_op(m.generator_cpu_seconds * 1e6, t.ops),
        debt: debt_of(after),
        steady: None,
        sweep: None,
        design_counters: after
            .design_counters
            .iter()
            .map(|(name, end)| DesignCounter {
                name: name.clone(),
                start: before
                    .design_counters
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(0.0, |x| x.1),
                end: *end,
            })
            .collect(),
    }
}

/// Reads a JSON array of records, including those written before the
/// client measured stalls: their `stall` was the engine's own accounting
/// (`seconds`, `percent`, `count`, `max_seconds`); it moves to
/// `engine_stall`, and `stall` keeps what the timeline still tells (the
/// per-second minimum and median) with `writes` = 0 (unknown).
pub fn parse_records(text: &str) -> std::result::Result<Vec<Record>, String> {
    let mut v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut legacy = Vec::new();
    if let Some(items) = v.as_array_mut() {
        for (i, r) in items.iter_mut().enumerate() {
            let Some(obj) = r.as_object_mut() else {
                continue;
            };
            let old = obj
                .get("stall")
                .is_some_and(|s| s.get("max_seconds").is_some());
            if old && !obj.contains_key("engine_stall") {
                if let Some(st) = obj.remove("stall") {
                    obj.insert("engine_stall".into(), st);
                }
                obj.insert("stall".into(), serde_json::json!({}));
                legacy.push(i);
            }
        }
    }
    let mut records: Vec<Record> = serde_json::from_value(v).map_err(|e| e.to_string())?;
    for i in legacy {
        if let Some(r) = records.get_mut(i) {
            let (min, median) = second_ops(&r.timeline, r.seconds);
            r.stall.second_ops_min = min;
            r.stall.second_ops_median = median;
        }
    }
    Ok(records)
}

fn compactions_abs(
    all: &[CompactionEvent],
    before: &EngineStats,
    after: &EngineStats,
) -> Vec<CompactionEvent> {
    all.iter()
        .filter(|c| c.start_s >= before.uptime_s && c.start_s <= after.uptime_s)
        .cloned()
        .collect()
}

/// Log-spaced points of the latency CDF: `[quantile, µs]`.
pub fn cdf_points(h: &Hist) -> Vec<[f64; 2]> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut v = Vec::new();
    for it in h.iter_quantiles(4) {
        let q = it.quantile_iterated_to();
        let us = it.value_iterated_to() as f64 / 1e3;
        let repeat = v
            .last()
            .is_some_and(|l: &[f64; 2]| (q - l[0]).abs() <= 1e-12 && us == l[1]);
        if !repeat {
            v.push([q, us]);
        }
        if v.len() > 400 {
            break;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::{LevelBytes, StallInterval, StallStats};
    use crate::runner::{new_hist, Tally};

    #[test]
    fn trough_rule() {
        // 10 whole seconds + a partial 11th: 7,252 ops in 10.5 s, a mean of
        // 690.7 ops/s; seconds under 138.1 (20%) are troughs: 50, 99 and 100.
        let tl = [1000, 1000, 50, 1000, 100, 1000, 99, 1000, 1000, 1000, 3];
        let t = troughs(&tl, 10.5);
        assert_eq!(t.seconds, 3);
        assert!((t.percent - 30.0).abs() < 1e-9);
        assert_eq!(troughs(&[5], 0.9), Troughs::default());
        // A run stalled most of the time: the median second is a stalled
        // one, but the mean is not — the stalled seconds are troughs.
        let t = troughs(&[0, 0, 0, 500, 500], 5.0);
        assert_eq!(t.seconds, 3);
    }

    #[test]
    fn client_read_stall_rule() {
        let mut h = new_hist();
        // 10,000 reads: 9,990 fast, 6 over 1 ms, 3 over 10 ms, 1 of 150 ms.
        for _ in 0..9_990 {
            h.record(20_000).unwrap_or(());
        }
        for v in [2, 3, 4, 5, 6, 7, 20, 30, 40, 150u64] {
            h.record(v * 1_000_000).unwrap_or(());
        }
        let s = client_read_stall(&h);
        assert_eq!(s.reads, 10_000);
        assert_eq!(
            (s.reads_over_1ms, s.reads_over_10ms, s.reads_over_100ms),
            (10, 4, 1)
        );
        assert!((s.read_seconds_max - 0.15).abs() < 0.001);
        assert!(s.p9999_us > 1000.0 && s.p9999_us >= s.p999_us);
        assert_eq!(client_read_stall(&new_hist()), ReadStall::default());
    }

    #[test]
    fn client_stall_rule() {
        let mut h = new_hist();
        // 100 writes: 90 fast, 6 over 1 ms, 3 over 10 ms, 1 of 150 ms.
        for _ in 0..90 {
            h.record(20_000).unwrap_or(());
        }
        for v in [2, 3, 4, 5, 6, 7, 20, 30, 40, 150u64] {
            h.record(v * 1_000_000).unwrap_or(());
        }
        // Slow writes overlapping in time (two threads): 0–150 ms and
        // 100–130 ms make 150 ms of wall time; 500–502 ms adds 2.
        let mut slow = vec![
            (100_000_000, 130_000_000),
            (0, 150_000_000),
            (500_000_000, 502_000_000),
        ];
        let tl = [40, 10, 50];
        let s = client_stall(&h, &mut slow, &tl, 2.5);
        assert_eq!(s.writes, 100);
        assert!((s.write_seconds_max - 0.15).abs() < 0.001, "{s:?}");
        assert_eq!(
            (s.writes_over_1ms, s.writes_over_10ms, s.writes_over_100ms),
            (10, 4, 1)
        );
        assert!((s.slow_write_time_percent - 100.0 * 0.152 / 2.5).abs() < 1e-9);
        assert_eq!((s.second_ops_min, s.second_ops_median), (10.0, 25.0));
        // No writes: only the per-second figures.
        let s = client_stall(&new_hist(), &mut [], &[7, 9, 8], 3.0);
        assert_eq!((s.writes, s.writes_over_1ms), (0, 0));
        assert_eq!((s.second_ops_min, s.second_ops_median), (7.0, 8.0));
    }

    fn shape(level: usize, files: u64, mib: u64) -> LevelShape {
        LevelShape {
            level,
            tier: "ssd".into(),
            files,
            bytes: mib << 20,
        }
    }

    #[test]
    fn debt_rule() {
        // Classic at `medium`: L0 at 4 files × 64 MiB, L1 256 MiB, × 10.
        let targets = LevelTargets {
            l0_files: Some(4),
            bytes: vec![256 << 20, 256 << 20, 2560 << 20, 25600 << 20],
        };
        // End of a fill: 9 L0 files, L1 at 4.5×, L2 under target, L3 the
        // deepest level (not judged even though it is "over" nothing).
        let end_of_fill = vec![
            shape(0, 9, 576),
            shape(1, 18, 1152),
            shape(2, 30, 2000),
            shape(3, 10, 600),
        ];
        let d = debt(&[end_of_fill], &targets, Some(123));
        assert!((d.ratio_max - 4.5).abs() < 1e-9, "{d:?}");
        assert_eq!(d.l0_files, 9);
        assert_eq!(d.levels.len(), 2, "L1 and L2 judged, not L3");
        assert_eq!(d.levels[0].over_bytes, 896 << 20);
        assert_eq!(d.over_bytes, (320 + 896) << 20);
        assert_eq!(d.pending_compaction_bytes, Some(123));
        assert!(!d.within(2.0) && d.within(5.0));
        // Two regions: judged each against the targets, added up; the worst
        // region's ratio counts.
        let calm = vec![shape(0, 1, 64), shape(1, 2, 128), shape(2, 5, 300)];
        let busy = vec![shape(0, 6, 384), shape(1, 8, 512), shape(2, 5, 300)];
        let d = debt(&[calm, busy], &targets, None);
        assert!((d.ratio_max - 2.0).abs() < 1e-9, "{d:?}");
        assert_eq!(d.levels[0].target_bytes, 512 << 20);
        assert_eq!(d.levels[0].over_bytes, 256 << 20);
        assert_eq!(d.l0_files, 7);
        // A byte-sized L0 target (a PM container): L0 judged by bytes.
        let pm = LevelTargets {
            l0_files: None,
            bytes: vec![100 << 20, 400 << 20, 4000 << 20],
        };
        let d = debt(&[vec![shape(0, 3, 150), shape(1, 5, 100)]], &pm, None);
        assert!((d.ratio_max - 1.5).abs() < 1e-9);
        assert_eq!(d.over_bytes, 50 << 20);
        assert_eq!(union_ns(&mut [(5, 9), (1, 3), (2, 4), (9, 10)]), 8);
    }

    #[test]
    fn old_records_stay_readable() {
        let old = r#"[{"engine":"rocksdb","config":"rocksdb-ssd","benchmark":"fillrandom","scale":"tiny",
            "value_size":4096,"ops":10,"seconds":3.0,"ops_per_sec":3.3,"mb_per_sec":0.1,
            "latency_us":{"avg":1,"p50":1,"p90":1,"p99":1,"p999":1,"p9999":1,"max":1},
            "stall":{"seconds":1.5,"percent":50.0,"count":3,"max_seconds":0.9},
            "troughs":{"seconds":0,"percent":0},
            "bytes":{"user":1,"ssd_written":1,"ssd_read":0,"pm_written":0,"wal":1},
            "write_amp":{"ssd":1,"total":1},"io_amp":1,"chain_bytes":{"avg":0,"max":0},
            "timeline":[4,2,4],"compactions":[],"levels":[],"cpu_seconds":1,"peak_rss_bytes":1}]"#;
        let r = parse_records(old).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].engine_stall.count, 3);
        assert!((r[0].engine_stall.max_seconds - 0.9).abs() < 1e-9);
        assert_eq!(r[0].stall.writes, 0);
        assert_eq!(
            (r[0].stall.second_ops_min, r[0].stall.second_ops_median),
            (2.0, 4.0)
        );
        assert!(r[0].debt.is_none() && r[0].steady.is_none() && r[0].sweep.is_none());
        // New records round-trip unchanged.
        let text = serde_json::to_string(&r).unwrap_or_default();
        assert_eq!(parse_records(&text).unwrap_or_default(), r);
    }

    #[test]
    fn steady_rate_is_the_second_half() {
        // 4000 ops in 4 s: 3000 in the first second (a burst), then 1000
        // over the last three. The 2000th op completes 2/3 into second 0,
        // so the second half (2000 ops) took 3 1/3 s: 600 ops/s, not the
        // whole run's 1000.
        let tl = [3000, 400, 300, 300];
        let r = steady_ops_per_sec(&tl, 4.0);
        assert!((r - 600.0).abs() < 1e-6, "{r}");
        // Steady runs: the same as ops / seconds.
        assert!((steady_ops_per_sec(&[500, 500, 500, 500], 4.0) - 500.0).abs() < 1e-6);
        // Degenerate inputs do not divide by zero.
        assert_eq!(steady_ops_per_sec(&[], 1.0), 0.0);
        assert_eq!(steady_ops_per_sec(&[0, 0], 2.0), 0.0);
        assert!((steady_ops_per_sec(&[10], 0.5) - 20.0).abs() < 1e-6);
    }

    fn comp(start: f64, bytes: u64) -> CompactionEvent {
        CompactionEvent {
            start_s: start,
            duration_s: 0.1,
            kind: "l0-l1".into(),
            input_bytes: bytes,
            inputs: vec![LevelBytes { level: 0, bytes }],
            output_level: 1,
            output_bytes: bytes,
        }
    }

    #[test]
    fn chain_rule() {
        let f = |s| FlushEvent {
            start_s: s,
            duration_s: 0.1,
            bytes: 1,
        };
        let flushes = [f(0.0), f(1.0), f(2.0)];
        let c = chain_bytes(
            &flushes,
            &[comp(0.5, 100), comp(0.7, 50), comp(1.5, 10), comp(3.0, 999)],
        );
        assert_eq!(c.max, 150);
        assert!((c.avg - 80.0).abs() < 1e-9);
        assert_eq!(chain_bytes(&flushes[..1], &[]), Chain::default());
    }

    #[test]
    fn stall_window_from_intervals_and_counters() {
        let mut before = EngineStats {
            uptime_s: 10.0,
            ..EngineStats::default()
        };
        let mut after = EngineStats {
            uptime_s: 20.0,
            ..EngineStats::default()
        };
        after.stall = StallStats {
            seconds: 0.0,
            count: 0,
            max_seconds: 0.0,
            intervals: Some(
                [
                    (5.0, 3.0, "l0-stop"),
                    (12.0, 1.0, "pm-full"),
                    (15.0, 2.0, "l0-stop"),
                ]
                .iter()
                .map(|&(start_s, seconds, cause)| StallInterval {
                    start_s,
                    seconds,
                    cause,
                })
                .collect(),
            ),
            ..StallStats::default()
        };
        let s = stall_in_window(&before, &after, 10.0);
        assert_eq!(s.count, 2);
        assert!((s.seconds - 3.0).abs() < 1e-9 && (s.max_seconds - 2.0).abs() < 1e-9);
        assert!((s.percent - 30.0).abs() < 1e-9);
        // Causes and the longest stalls, of the window only (the l0-stop at
        // 5 s is before it), most first; times from the window's start.
        let names: Vec<_> = s
            .causes
            .iter()
            .map(|c| (c.cause.as_str(), c.count))
            .collect();
        assert_eq!(names, [("l0-stop", 1), ("pm-full", 1)]);
        let when: Vec<_> = s
            .longest
            .iter()
            .map(|r| (r.at_s, r.cause.as_str()))
            .collect();
        assert_eq!(when, [(5.0, "l0-stop"), (2.0, "pm-full")]);
        before.stall = StallStats {
            seconds: 1.0,
            count: 4,
            max_seconds: 0.5,
            intervals: None,
            ..StallStats::default()
        };
        after.stall = StallStats {
            seconds: 3.5,
            count: 10,
            max_seconds: 0.8,
            intervals: None,
            ..StallStats::default()
        };
        before.stall.cause_counts = vec![("level0_numfiles".into(), 1)];
        after.stall.cause_counts = vec![
            ("level0_slowdown".into(), 0),
            ("level0_numfiles".into(), 3),
            ("memtable_compaction".into(), 4),
        ];
        let s = stall_in_window(&before, &after, 10.0);
        let counts: Vec<_> = s
            .causes
            .iter()
            .map(|c| (c.cause.as_str(), c.count, c.seconds))
            .collect();
        assert_eq!(
            counts,
            [
                ("memtable_compaction", 4, None),
                ("level0_numfiles", 2, None)
            ],
            "counts only, of the window"
        );
        assert_eq!(s.count, 6);
        assert!((s.seconds - 2.5).abs() < 1e-9 && (s.max_seconds - 0.8).abs() < 1e-9);
    }

    /// Every field BENCH.md lists is in the JSON, with read/write latency
    /// sub-objects for a mixed workload.
    #[test]
    fn json_has_every_bench_md_field() {
        let mut tally_hist = new_hist();
        for v in 1..1000u64 {
            tally_hist.record(v * 1000).unwrap_or(());
        }
        let mut m = Measured {
            tally: Tally::new(),
            seconds: 2.0,
            thread_seconds: 2.0,
            open_loop: true,
            rate: Some(1000.0),
            generator_cpu_seconds: 0.0,
            origin_monotonic_ns: 0,
        };
        m.tally.ops = 999;
        m.tally.written = 1000;
        m.tally.all = tally_hist.clone();
        m.tally.read = tally_hist.clone();
        m.tally.write = tally_hist;
        m.tally.timeline = vec![500, 499];
        let after = EngineStats {
            uptime_s: 5.0,
            ssd_written_bytes: 3000,
            compactions: vec![comp(1.0, 10)],
            levels: vec![LevelShape {
                level: 0,
                tier: "pm".into(),
                files: 1,
                bytes: 10,
            }],
            ..EngineStats::default()
        };
        let ctx = RecordContext {
            engine: "fake".into(),
            config: "fake".into(),
            scale: "tiny".into(),
            num: 10,
            key_size: 16,
            value_size: 100,
            threads: 1,
        };
        let r = build_record(
            &ctx,
            "ycsb-a",
            &m,
            &EngineStats::default(),
            &after,
            ProcessUsage::default(),
        );
        assert!((r.write_amp.ssd - 3.0).abs() < 1e-9);
        let v = serde_json::to_value(vec![r.clone()]).unwrap_or_default();
        let rec = &v[0];
        for k in [
            "engine",
            "config",
            "benchmark",
            "scale",
            "value_size",
            "ops",
            "seconds",
            "ops_per_sec",
            "mb_per_sec",
            "latency_us",
            "stall",
            "engine_stall",
            "troughs",
            "bytes",
            "write_amp",
            "io_amp",
            "chain_bytes",
            "timeline",
            "compactions",
            "levels",
            "cpu_seconds",
            "peak_rss_bytes",
        ] {
            assert!(rec.get(k).is_some(), "missing {k}");
        }
        let sub = |o: &str, keys: &[&str]| {
            for k in keys {
                assert!(rec[o].get(*k).is_some(), "missing {o}.{k}");
            }
        };
        let lat = ["avg", "p50", "p90", "p99", "p999", "p9999", "max"];
        sub("latency_us", &lat);
        for k in lat {
            assert!(rec["latency_us"]["read"].get(k).is_some());
            assert!(rec["latency_us"]["write"].get(k).is_some());
        }
        sub(
            "stall",
            &[
                "writes",
                "write_seconds_max",
                "writes_over_1ms",
                "writes_over_10ms",
                "writes_over_100ms",
                "slow_write_time_percent",
                "second_ops_min",
                "second_ops_median",
            ],
        );
        sub(
            "engine_stall",
            &["seconds", "percent", "count", "max_seconds"],
        );
        sub("troughs", &["seconds", "percent"]);
        sub(
            "bytes",
            &[
                "user",
                "ssd_written",
                "ssd_read",
                "pm_written",
                "pm_relinked",
                "wal",
            ],
        );
        sub("write_amp", &["ssd", "pm", "total"]);
        sub("chain_bytes", &["avg", "max"]);
        for k in [
            "start_s",
            "duration_s",
            "input_bytes",
            "inputs",
            "output_level",
            "output_bytes",
        ] {
            assert!(
                rec["compactions"][0].get(k).is_some(),
                "missing compactions.{k}"
            );
        }
        for k in ["level", "tier", "files", "bytes"] {
            assert!(rec["levels"][0].get(k).is_some(), "missing levels.{k}");
        }
        // Round trip.
        let back: Vec<Record> = serde_json::from_value(v).unwrap_or_default();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].latency_us, r.latency_us);
    }
}
