//! The JSON record of one benchmark on one configuration (BENCH.md
//! "Metrics"), and the rules that derive it from measurements and the
//! engine's own statistics — the same rules for every engine.
//!
//! ```json
//! { "engine": "rocksdb", "config": "rocksdb-ssd", "benchmark": "fillrandom",
//!   "scale": "medium", "value_size": 4096, "ops": 1048576, "seconds": 27.0,
//!   "ops_per_sec": 38883.0, "mb_per_sec": 152.5,
//!   "latency_us": {"avg":25.7,"p50":3.1,"p90":4.5,"p99":50,"p999":3093,"p9999":9215,"max":14988},
//!   "stall": {"seconds":8.2,"percent":30.4,"count":120,"max_seconds":0.9},
//!   "troughs": {"seconds":6,"percent":22.2},
//!   "bytes": {"user":…,"ssd_written":…,"ssd_read":…,"pm_written":0,"pm_relinked":0,"wal":…},
//!   "write_amp": {"ssd":2.4,"pm":0.0,"total":2.4}, "io_amp": 3.1,
//!   "chain_bytes": {"avg":…,"max":…},
//!   "timeline": [41000, 39000, …], "compactions": [{…}], "levels": [{…}],
//!   "cpu_seconds": 40.1, "peak_rss_bytes": 300000000,
//!   "mode": "closed", "threads": 1, … }
//! ```
//!
//! Fields after `peak_rss_bytes` are extensions the report uses (mode,
//! rate, threads, key count, key size, the latency CDF).
//!
//! Rules:
//! 1. `troughs`: seconds of the timeline whose completions are below 10% of
//!    the run's median second; only whole seconds are judged (the partial
//!    last second is not).
//! 2. `chain_bytes`: the input bytes of the compactions that start between
//!    two consecutive memtable flushes (by flush start), averaged over those
//!    intervals and maximised — vLSM's compaction-chain width.
//! 3. `stall`: the engine's own accounting over the benchmark window; with
//!    intervals (tierkv), those starting in the window; with counters only
//!    (RocksDB), the difference of the counters.
//! 4. amplification: `write_amp.ssd` = ssd_written / user,
//!    `write_amp.pm` = (pm_written + pm_relinked) / user,
//!    `write_amp.total` = (ssd_written + pm_written + pm_relinked) / user,
//!    `io_amp` = (ssd_read + ssd_written) / user; 0 when nothing was written.

use serde::{Deserialize, Serialize};

use crate::engines::{CompactionEvent, EngineStats, FlushEvent, LevelShape};
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

/// `stall`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// Seconds writes were delayed or stopped.
    pub seconds: f64,
    /// Percent of the benchmark's duration.
    pub percent: f64,
    /// Number of stalls.
    pub count: u64,
    /// Longest stall.
    pub max_seconds: f64,
}

/// `troughs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Troughs {
    /// Seconds under 10% of the median second.
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
    /// Write stalls.
    pub stall: Stall,
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
    let mut sorted = timeline[..whole].to_vec();
    sorted.sort_unstable();
    let median = if whole % 2 == 1 {
        sorted[whole / 2] as f64
    } else {
        (sorted[whole / 2 - 1] + sorted[whole / 2]) as f64 / 2.0
    };
    let n = timeline[..whole]
        .iter()
        .filter(|&&x| (x as f64) < 0.1 * median)
        .count() as u64;
    Troughs {
        seconds: n,
        percent: 100.0 * n as f64 / whole as f64,
    }
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

/// Stall accounting over the window `(t0, t1]` of engine uptime (rule 3).
pub fn stall_in_window(before: &EngineStats, after: &EngineStats, seconds: f64) -> Stall {
    let (secs, count, max) = match &after.stall.intervals {
        Some(iv) => {
            let inside: Vec<f64> = iv
                .iter()
                .filter(|(s, _)| *s >= before.uptime_s && *s <= after.uptime_s)
                .map(|(_, d)| *d)
                .collect();
            (
                // fold from +0.0: an empty f64 sum is -0.0.
                inside.iter().fold(0.0, |a, b| a + b),
                inside.len() as u64,
                inside.iter().copied().fold(0.0, f64::max),
            )
        }
        None => {
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
    Stall {
        seconds: secs,
        percent: if seconds > 0.0 {
            (100.0 * secs / seconds).min(100.0)
        } else {
            0.0
        },
        count,
        max_seconds: max,
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
        stall: stall_in_window(before, after, m.seconds),
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
    }
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
    use crate::engines::{LevelBytes, StallStats};
    use crate::runner::{new_hist, Tally};

    #[test]
    fn trough_rule() {
        // Median of the 10 whole seconds is 1000; 50 and 99 are troughs,
        // 100 is not (not *below* 10%), and the partial 11th second is ignored.
        let tl = [1000, 1000, 50, 1000, 100, 1000, 99, 1000, 1000, 1000, 3];
        let t = troughs(&tl, 10.5);
        assert_eq!(t.seconds, 2);
        assert!((t.percent - 20.0).abs() < 1e-9);
        assert_eq!(troughs(&[5], 0.9), Troughs::default());
        // A run stalled most of the time has a low median: nothing is
        // *below* 10% of it. The rule is relative by design.
        let t = troughs(&[0, 0, 0, 500, 500], 5.0);
        assert_eq!(t.seconds, 0);
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
            intervals: Some(vec![(5.0, 3.0), (12.0, 1.0), (15.0, 2.0)]),
        };
        let s = stall_in_window(&before, &after, 10.0);
        assert_eq!(s.count, 2);
        assert!((s.seconds - 3.0).abs() < 1e-9 && (s.max_seconds - 2.0).abs() < 1e-9);
        assert!((s.percent - 30.0).abs() < 1e-9);
        before.stall = StallStats {
            seconds: 1.0,
            count: 4,
            max_seconds: 0.5,
            intervals: None,
        };
        after.stall = StallStats {
            seconds: 3.5,
            count: 10,
            max_seconds: 0.8,
            intervals: None,
        };
        let s = stall_in_window(&before, &after, 10.0);
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
        sub("stall", &["seconds", "percent", "count", "max_seconds"]);
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
