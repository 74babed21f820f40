//! Runs a list of benchmarks on a list of configurations, one configuration
//! after the other in one process, and collects their JSON records: what
//! both the plain db_bench-style command and `compare` do.
//!
//! Each configuration starts from empty directories (`<db>/<config>` on the
//! SSD, `<pm_dir>/<config>` for the PM tier) and runs the benchmarks in
//! order on the same database, as db_bench does. Free space is checked
//! before anything runs; a run that cannot fit is refused.
//!
//! A configuration the engine refuses (`Error::Refused`: not built in,
//! invalid options) or that fails is reported and skipped; the others
//! still run. One that fails after some of its benchmarks completed keeps
//! their records (the JSON holds what the log printed; e.g. TLSM's `none`
//! policy filling its PM in the last YCSB phase).
//!
//! # Steady state (`--steady_state`)
//!
//! A fill is a transient: when it ends, every engine holds compaction debt
//! (L1 at several times its target, L0 files past the trigger). With
//! `--steady_state`, each benchmark that writes and is not a fill
//! (`overwrite`, `ycsb-a`, `-b`, `-d`, `-e`, `-f`) first *warms up*: it runs
//! its own workload (another seed, the same pacing) in chunks of a tenth of
//! its operations, and after each chunk samples the engine's level shape
//! against the targets the engine itself works to (`Engine::shape`,
//! metrics rule 5). The warm-up ends when
//! 1. `within-factor`: three samples in a row have every judged level at
//!    most `--steady_factor` × its target (L0 by files where the engine
//!    counts files); or
//! 2. `plateau`: the debt stopped moving — the mean bytes over target of
//!    the last four samples is within 10% of the four before (at least
//!    eight samples); or
//! 3. `budget`: `--steady_max_ops` (default 3 × the benchmark's operations)
//!    ran without either.
//!
//! Then the benchmark is measured for its operations (or `--steady_ops`),
//! and its record carries the warm-up (`steady`: how it ended, the samples,
//! the debt when the window started) beside the debt when it ended
//! (`debt`). Fills and read-only benchmarks are measured as they are.
//!
//! # Rate sweep (`--rate_sweep`)
//!
//! The last benchmark of the list runs open loop at each rate of the sweep
//! (ascending); the benchmarks before it prepare the database closed loop
//! (e.g. `ycsb-load,ycsb-a` loads once and sweeps A's rates one after the
//! other on the same database). A fill is measured from empty, so when the
//! last benchmark is a fill every rate gets a fresh database. Rates are
//! absolute, or fractions of a configuration's sustained rate
//! (`--rate_of CONFIG`, measured first closed loop, the same rates for
//! every configuration; `--rate_of each`: each configuration's own). Each
//! point's record carries `sweep` (the listed value, the base rate, the
//! latency target); `report` draws latency against offered load and finds
//! the highest rate meeting the target with every lower rate meeting it.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::db_bench::{histogram_text, stall_line, summary_line};
use crate::engines::{self, Config, EngineSetup};
use crate::error::{io_err, Error, Result};
use crate::metrics::{
    build_record, DebtSample, ProcessUsage, Record, RecordContext, Steady, SweepPoint,
};
use crate::runner::{run, Measured, RunOptions};
use crate::scale::Scale;
use crate::sys;
use crate::workload::{is_fill, Workload, WorkloadParams};

/// What the fractions of a rate sweep refer to.
#[derive(Debug, Clone)]
pub enum SweepBase {
    /// The listed rates are requests per second.
    Absolute,
    /// Fractions of this configuration's sustained rate (measured first).
    Of(Config),
    /// Fractions of each configuration's own sustained rate.
    Each,
}

/// A steady-state run's settings (module doc).
#[derive(Debug, Clone)]
pub struct SteadyOptions {
    /// Every level within this factor of its target.
    pub factor: f64,
    /// Warm-up operations at most (default 3 × the benchmark's).
    pub max_ops: Option<u64>,
    /// Operations of the measured window (default the benchmark's).
    pub ops: Option<u64>,
}

/// How requests are paced.
#[derive(Debug, Clone)]
pub enum Pacing {
    /// Closed loop (db_bench).
    Closed,
    /// Open loop at a fixed rate.
    Rate(f64),
    /// Open loop at a fraction of what `of` sustains closed loop on the same
    /// benchmark (its rate over the second half of the operations,
    /// [`crate::metrics::steady_ops_per_sec`]), measured first in the same
    /// run.
    Fraction {
        /// The fraction.
        fraction: f64,
        /// The configuration measured.
        of: Config,
    },
    /// Open loop at each of several rates (module doc).
    Sweep {
        /// The listed values, ascending.
        points: Vec<f64>,
        /// What they refer to.
        base: SweepBase,
    },
}

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Configurations, in order.
    pub configs: Vec<Config>,
    /// Benchmarks, in order.
    pub benchmarks: Vec<String>,
    /// The scale.
    pub scale: Scale,
    /// `--num` if given (else from the scale and value size).
    pub num: Option<u64>,
    /// `--reads` if given.
    pub reads: Option<u64>,
    /// Key size.
    pub key_size: usize,
    /// `--value_size` if given (else the scale's, 4096 but at `tlsm10`;
    /// 1000 for YCSB).
    pub value_size: Option<usize>,
    /// Workload parameters not tied to a benchmark.
    pub params: WorkloadParams,
    /// Engine setup (directories are per configuration).
    pub setup: EngineSetup,
    /// Threads.
    pub threads: usize,
    /// Print db_bench histograms.
    pub histogram: bool,
    /// `--report_interval_seconds`.
    pub report_interval_s: u64,
    /// Pacing.
    pub pacing: Pacing,
    /// SSD base directory.
    pub db_base: PathBuf,
    /// PM base directory.
    pub pm_base: PathBuf,
    /// Keep the databases after the run.
    pub keep_db: bool,
    /// Print the engine's own statistics after each configuration.
    pub statistics: bool,
    /// Write the records here after every configuration.
    pub json: Option<PathBuf>,
    /// Warm up to a steady state before each writing benchmark.
    pub steady: Option<SteadyOptions>,
    /// The P99 target of a rate sweep's summary, in µs.
    pub latency_target_us: f64,
    /// Before each benchmark, wait this long at most for the engine's
    /// background work to end (`--quiesce`); `None`: start at once.
    pub quiesce: Option<Duration>,
    /// readwhilewriting's writer rate, puts per second (`--writer_rate`).
    pub writer_rate: Option<f64>,
    /// Append every read slower than 1 ms here (`--slow_reads_file`).
    pub slow_reads_file: Option<PathBuf>,
}

impl Plan {
    fn value_size_for(&self, bench: &str) -> usize {
        self.value_size.unwrap_or(if bench.starts_with("ycsb-") {
            1000
        } else {
            self.scale.value_size()
        })
    }

    /// Key count, reads and value size of one benchmark.
    pub fn params_for(&self, bench: &str) -> WorkloadParams {
        let value_size = self.value_size_for(bench);
        let num = self.num.unwrap_or_else(|| self.scale.key_count(value_size));
        let reads = self.reads.unwrap_or(if bench.starts_with("ycsb-") {
            self.scale.ycsb_ops()
        } else {
            num
        });
        WorkloadParams {
            num,
            reads,
            key_size: self.key_size,
            value_size,
            ..self.params.clone()
        }
    }

    /// Key numbers of the run lie below this: the largest `num` of its
    /// benchmarks, or 2^63 if YCSB's hashed keys are among them.
    pub fn key_count(&self) -> u64 {
        let mut n = 0;
        for b in &self.benchmarks {
            if b.starts_with("ycsb-") {
                return 1 << 63;
            }
            n = n.max(self.params_for(b).num);
        }
        n
    }

    /// Bytes the SSD and PM directories may need at most, per configuration.
    pub fn space_needed(&self, config: &Config) -> (u64, u64) {
        let mut live = 0u64;
        for b in &self.benchmarks {
            let p = self.params_for(b);
            let kv = (p.key_size + p.value_size) as u64;
            if is_fill(b) {
                live = live.max(p.num * kv);
            }
            if b == "ycsb-d" || b == "ycsb-e" {
                live += p.reads * kv / 10;
            }
        }
        let mem = self.setup.memtable_size_bytes;
        let ssd = live * 22 / 10 + 4 * mem + (64 << 20);
        let pm = if !config.uses_pm() {
            0
        } else if config.all_on_pm() {
            ssd
        } else if matches!(config.kind, engines::EngineKind::RocksdbL0Pm) {
            (self.setup.l0_triggers.2 as u64 + 6) * self.setup.sst_size_bytes.max(mem)
        } else {
            self.setup.pm_size_bytes + 4 * mem
        };
        (ssd, pm)
    }

    fn dirs(&self, config: &Config) -> (PathBuf, PathBuf) {
        (
            self.db_base.join(config.file_name()),
            self.pm_base.join(config.file_name()),
        )
    }
}

/// Refuses the run if any configuration cannot fit in the free space.
pub fn check_space(plan: &Plan) -> Result<()> {
    let free_ssd = sys::free_bytes(&plan.db_base)?;
    let free_pm = sys::free_bytes(&plan.pm_base)?;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    for c in &plan.configs {
        let (ssd, pm) = plan.space_needed(c);
        if ssd > free_ssd {
            return Err(Error::Refused(format!(
                "`{}` needs up to {:.1} GiB in {} but only {:.1} GiB are free",
                c.name,
                gib(ssd),
                plan.db_base.display(),
                gib(free_ssd)
            )));
        }
        if pm > free_pm {
            return Err(Error::Refused(format!(
                "`{}` needs up to {:.1} GiB for the PM tier in {} but only {:.1} GiB are free",
                c.name,
                gib(pm),
                plan.pm_base.display(),
                gib(free_pm)
            )));
        }
    }
    Ok(())
}

fn remove_dir(p: &Path) -> Result<()> {
    if p.exists() {
        std::fs::remove_dir_all(p).map_err(io_err(format!("remove {}", p.display())))?;
    }
    Ok(())
}

fn progress_bar(label: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(0);
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix:>28} [{elapsed_precise}] {wide_bar} {pos}/{len} {per_sec} eta {eta}",
    ) {
        pb.set_style(style);
    }
    pb.set_prefix(label.to_string());
    pb
}

/// One benchmark of a configuration's run.
#[derive(Debug, Clone)]
pub struct Step {
    /// The benchmark.
    pub bench: String,
    /// Open loop at this rate; `None`: closed loop.
    pub rate: Option<f64>,
    /// The sweep point, if the step is one.
    pub sweep: Option<SweepPoint>,
}

impl Step {
    /// A closed-loop step.
    pub fn closed(bench: &str) -> Step {
        Step {
            bench: bench.to_string(),
            rate: None,
            sweep: None,
        }
    }
}

/// True for benchmarks a steady-state run warms up before measuring: those
/// that write and do not build the data set.
pub fn warms_up(bench: &str) -> bool {
    matches!(
        bench,
        "overwrite" | "ycsb-a" | "ycsb-b" | "ycsb-d" | "ycsb-e" | "ycsb-f"
    )
}

/// The warm-up's end rule (module doc), over the samples so far: why it
/// may end, or `None` to go on.
pub fn settled(samples: &[DebtSample], factor: f64) -> Option<&'static str> {
    let n = samples.len();
    if n >= 5 && samples[n - 3..].iter().all(|s| s.ratio_max <= factor) {
        return Some("within-factor");
    }
    if n >= 8 {
        let mean =
            |s: &[DebtSample]| s.iter().map(|x| x.over_bytes as f64).sum::<f64>() / s.len() as f64;
        let (a, b) = (mean(&samples[n - 8..n - 4]), mean(&samples[n - 4..]));
        if (b - a).abs() <= 0.1 * a.max(b) {
            return Some("plateau");
        }
    }
    None
}

/// Warm-ups use their own request stream.
const WARMUP_SEED: u64 = 0x5354_4541_4459; // "STEADY"

/// Runs `w`'s workload in chunks until the debt settles (module doc).
/// Returns the warm-up record part and the next insert key number.
fn warm_up(
    engine: &dyn engines::Engine,
    plan: &Plan,
    w: &Workload,
    params: &WorkloadParams,
    opts: &RunOptions,
    label: &str,
) -> Result<(Steady, u64)> {
    let so = plan.steady.clone().unwrap_or(SteadyOptions {
        factor: 2.0,
        max_ops: None,
        ops: None,
    });
    let threads = opts.threads.max(1) as u64;
    let total = w.total_ops(opts.threads);
    let chunk = (total / 10).max(1000);
    let budget = so.max_ops.unwrap_or(3 * total);
    let mut samples: Vec<DebtSample> = Vec::new();
    let mut next_insert = w.inserts.count();
    let mut done = 0u64;
    let mut seconds = 0.0;
    let t0 = std::time::Instant::now();
    let mut last_debt = None;
    let settled_by = loop {
        if done >= budget {
            break "budget";
        }
        let n = chunk.min(budget - done);
        let mut cw = Workload::new(&w.name, params)?;
        cw.ops = if cw.ops_per_thread {
            n.div_ceil(threads)
        } else {
            n
        };
        cw.seed = w.seed ^ WARMUP_SEED ^ (samples.len() as u64 + 1).wrapping_mul(0x9e37_79b9);
        cw.inserts = crate::keys::InsertCounter::new(next_insert);
        let pb = progress_bar(&format!("{label} warm-up"));
        let m = run(engine, &cw, opts, &pb)?;
        pb.finish_and_clear();
        next_insert = cw.inserts.count();
        done += m.tally.ops;
        seconds = t0.elapsed().as_secs_f64();
        let shape = engine.shape()?;
        let d = crate::metrics::debt_of(&shape).ok_or_else(|| {
            Error::Usage(format!(
                "--steady_state: `{label}` reports no level targets, so its compaction debt cannot be measured"
            ))
        })?;
        samples.push(DebtSample {
            ops: done,
            seconds,
            over_bytes: d.over_bytes,
            ratio_max: d.ratio_max,
        });
        last_debt = Some(d);
        if let Some(why) = settled(&samples, so.factor) {
            break why;
        }
    };
    let debt_start = match last_debt {
        Some(d) => d,
        None => crate::metrics::debt_of(&engine.shape()?).unwrap_or_default(),
    };
    eprintln!(
        "{label}: warm-up {done} ops in {seconds:.1} s, ended by {settled_by}; worst level {:.2}× its target, {:.0} MiB over",
        debt_start.ratio_max,
        debt_start.over_bytes as f64 / 1048576.0
    );
    Ok((
        Steady {
            factor: so.factor,
            warmup_ops: done,
            warmup_seconds: seconds,
            settled: settled_by.to_string(),
            samples,
            debt_start,
        },
        next_insert,
    ))
}

/// Waits until `engine`'s background work is done (`--quiesce`), polling
/// every 100 ms; returns the seconds waited, or an error past `limit`.
fn quiesce(engine: &dyn engines::Engine, limit: Duration, label: &str, bench: &str) -> Result<f64> {
    let t0 = std::time::Instant::now();
    while !engine.background_idle()? {
        if t0.elapsed() > limit {
            return Err(Error::Other(format!(
                "{label}: background work still running {} s before {bench} (--quiesce_timeout_seconds)",
                limit.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let s = t0.elapsed().as_secs_f64();
    eprintln!("{label}: quiesced in {s:.1} s before {bench}");
    Ok(s)
}

/// Appends one line per read slower than 1 ms to `path`: configuration,
/// benchmark, thread id, start and end in `CLOCK_MONOTONIC` ns — to lay
/// beside `perf record -k CLOCK_MONOTONIC` (README "Reads").
fn append_slow_reads(path: &Path, config: &str, bench: &str, m: &Measured) -> Result<()> {
    let mut text = String::new();
    for &(tid, start, end) in &m.tally.slow_reads {
        let base = m.origin_monotonic_ns;
        text.push_str(&format!(
            "{config}\t{bench}\t{tid}\t{}\t{}\n",
            base + start,
            base + end
        ));
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(io_err(format!("append {}", path.display())))
}

/// Runs `steps` on a fresh database of `config`.
pub fn run_config(plan: &Plan, config: &Config, steps: &[Step]) -> Result<Vec<Record>> {
    let (records, err) = run_config_kept(plan, config, steps);
    match err {
        Some(e) => Err(e),
        None => Ok(records),
    }
}

/// [`run_config`], keeping the records of the benchmarks that completed
/// before an error (a `compare` reports them, as its log printed them)
/// beside the error.
pub fn run_config_kept(
    plan: &Plan,
    config: &Config,
    steps: &[Step],
) -> (Vec<Record>, Option<Error>) {
    let mut records = Vec::new();
    let err = run_config_into(plan, config, steps, &mut records).err();
    (records, err)
}

fn run_config_into(
    plan: &Plan,
    config: &Config,
    steps: &[Step],
    records: &mut Vec<Record>,
) -> Result<()> {
    let (ssd_dir, pm_dir) = plan.dirs(config);
    remove_dir(&ssd_dir)?;
    remove_dir(&pm_dir)?;
    std::fs::create_dir_all(&ssd_dir).map_err(io_err(format!("create {}", ssd_dir.display())))?;
    if config.uses_pm() {
        std::fs::create_dir_all(&pm_dir).map_err(io_err(format!("create {}", pm_dir.display())))?;
    }
    let setup = EngineSetup {
        ssd_dir: ssd_dir.clone(),
        pm_dir: pm_dir.clone(),
        key_count: plan.key_count(),
        key_size: plan.key_size,
        ..plan.setup.clone()
    };
    let result = (|| {
        let engine = engines::open(config, &setup)?;
        for step in steps {
            let b = step.bench.as_str();
            let params = plan.params_for(b);
            let mut w = Workload::new(b, &params)?;
            let opts = RunOptions {
                threads: plan.threads,
                rate: step.rate,
                report_interval_s: plan.report_interval_s,
                writer_rate: plan.writer_rate,
            };
            let steady = match &plan.steady {
                Some(so) if warms_up(b) => {
                    let label = format!("{} {}", config.name, b);
                    let (st, next_insert) =
                        warm_up(engine.as_ref(), plan, &w, &params, &opts, &label)?;
                    w.inserts = crate::keys::InsertCounter::new(next_insert);
                    if let Some(n) = so.ops {
                        w.ops = if w.ops_per_thread {
                            n.div_ceil(plan.threads.max(1) as u64)
                        } else {
                            n
                        };
                    }
                    Some(st)
                }
                _ => None,
            };
            let quiesce_seconds = match plan.quiesce {
                Some(limit) => Some(quiesce(engine.as_ref(), limit, &config.name, b)?),
                None => None,
            };
            let before = engine.stats()?;
            let cpu0 = sys::cpu_seconds();
            sys::reset_peak_rss();
            let pb = progress_bar(&format!("{} {}", config.name, b));
            let m = run(engine.as_ref(), &w, &opts, &pb)?;
            pb.finish_and_clear();
            let usage = ProcessUsage {
                cpu_seconds: sys::cpu_seconds() - cpu0,
                peak_rss_bytes: sys::peak_rss_bytes(),
                cpu_hz: sys::cpu_hz(),
            };
            let after = engine.stats()?;
            let ctx = RecordContext {
                engine: config.engine_name().to_string(),
                config: config.name.clone(),
                scale: plan.scale.name().to_string(),
                num: params.num,
                key_size: params.key_size,
                value_size: params.value_size,
                threads: plan.threads,
            };
            let mut rec = build_record(&ctx, b, &m, &before, &after, usage);
            rec.steady = steady;
            rec.sweep = step.sweep.clone();
            rec.quiesce_seconds = quiesce_seconds;
            if let Some(path) = &plan.slow_reads_file {
                append_slow_reads(path, &config.name, b, &m)?;
            }
            // print! (not a locked stdout) so test harnesses capture it.
            println!("{}", summary_line(b, &m));
            if let Some(line) = stall_line(b, &rec) {
                println!("{line}");
            }
            if plan.histogram {
                for (what, h) in [("write", &m.tally.write), ("read", &m.tally.read)] {
                    if !h.is_empty() {
                        println!("{}", histogram_text(what, h));
                    }
                }
            }
            let _ = std::io::stdout().flush();
            records.push(rec);
        }
        if plan.statistics {
            if let Some(text) = engine.report() {
                println!("{text}");
            }
        }
        engine.close()?;
        Ok(())
    })();
    if !plan.keep_db {
        let _ = remove_dir(&ssd_dir);
        let _ = remove_dir(&pm_dir);
    }
    result
}

/// Writes the records as a pretty JSON array (atomically: temp + rename).
pub fn write_json(path: &Path, records: &[Record]) -> Result<()> {
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(records)
        .map_err(|e| Error::Other(format!("encode JSON: {e}")))?;
    std::fs::write(&tmp, text).map_err(io_err(format!("write {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io_err(format!("rename to {}", path.display())))?;
    Ok(())
}

/// `64 MiB`, or `400 KiB` below a MiB (the `tlsm10` sizes).
fn size_text(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else {
        format!("{} KiB", b >> 10)
    }
}

fn print_header(plan: &Plan, config: &Config) {
    let p = plan.params_for(plan.benchmarks.first().map_or("fillrandom", |s| s.as_str()));
    println!(
        "== {} ({}) · scale {} · keys {} B · values {} B · entries {} · threads {} · memtable {} · L1 {}{}",
        config.name,
        config.engine_name(),
        plan.scale.name(),
        p.key_size,
        p.value_size,
        p.num,
        plan.threads,
        size_text(plan.setup.memtable_size_bytes),
        size_text(plan.setup.l1_size_bytes),
        if config.uses_pm() {
            let persists = match config.kind {
                engines::EngineKind::Tierkv(_) => format!(
                    ", persisted with {}",
                    ::tierkv::storage::dax::auto_persistence(&plan.dirs(config).1).describe()
                ),
                _ => String::new(),
            };
            format!(" · PM {} MiB{persists}", plan.setup.pm_size_bytes >> 20)
        } else {
            String::new()
        }
    );
    println!("------------------------------------------------");
}

/// The closed-loop steps of every benchmark of the plan.
fn closed_steps(plan: &Plan) -> Vec<Step> {
    plan.benchmarks.iter().map(|b| Step::closed(b)).collect()
}

/// Measures `config` closed loop on the plan's benchmarks (for
/// `--rate_fraction` / `--rate_sweep` fractions); returns its records.
fn calibrate(plan: &Plan, config: &Config, why: &str) -> Result<Vec<Record>> {
    eprintln!(
        "measuring the sustainable throughput of `{}` (closed loop) for {why}",
        config.name
    );
    print_header(plan, config);
    run_config(plan, config, &closed_steps(plan))
}

/// The sweep of one configuration at `rates` (the points' absolute rates).
fn run_sweep(
    plan: &Plan,
    config: &Config,
    points: &[f64],
    rates: &[f64],
    of: Option<String>,
    base: Option<f64>,
) -> Result<Vec<Record>> {
    let Some((last, prefix)) = plan.benchmarks.split_last() else {
        return Ok(Vec::new());
    };
    let point = |i: usize| Step {
        bench: last.clone(),
        rate: Some(rates[i]),
        sweep: Some(SweepPoint {
            point: points[i],
            of: of.clone(),
            base_ops_per_sec: base,
            target_us: plan.latency_target_us,
        }),
    };
    let prefix: Vec<Step> = prefix.iter().map(|b| Step::closed(b)).collect();
    if is_fill(last) {
        // A fill is measured from empty: a fresh database per rate (the
        // prefix's records are kept from the first only).
        let mut out = Vec::new();
        for i in 0..rates.len() {
            let mut steps = prefix.clone();
            steps.push(point(i));
            let recs = run_config(plan, config, &steps)?;
            let skip = if i == 0 { 0 } else { prefix.len() };
            out.extend(recs.into_iter().skip(skip));
        }
        Ok(out)
    } else {
        let mut steps = prefix;
        steps.extend((0..rates.len()).map(point));
        run_config(plan, config, &steps)
    }
}

/// The sustained rate of the swept (last) benchmark in calibration records.
fn swept_rate(records: &[Record], plan: &Plan) -> Option<f64> {
    let last = plan.benchmarks.last()?;
    records
        .iter()
        .rev()
        .find(|r| &r.benchmark == last)
        .map(|r| r.steady_ops_per_sec)
}

/// Runs the whole plan: calibration first when pacing by fraction, then
/// every configuration. Returns the records; fails only if nothing ran.
pub fn execute(plan: &Plan) -> Result<Vec<Record>> {
    for b in &plan.benchmarks {
        Workload::new(b, &plan.params_for(b))?;
    }
    check_space(plan)?;
    let mut records: Vec<Record> = Vec::new();
    let rates: Option<Vec<f64>> = match &plan.pacing {
        Pacing::Closed | Pacing::Sweep { .. } => None,
        Pacing::Rate(r) => Some(vec![*r; plan.benchmarks.len()]),
        Pacing::Fraction { fraction, of } => {
            let cal = calibrate(plan, of, &format!("--rate_fraction {fraction}"))?;
            let rates = cal
                .iter()
                .map(|r| (r.steady_ops_per_sec * fraction).max(1.0))
                .collect();
            records.extend(cal);
            Some(rates)
        }
    };
    let shared_base = match &plan.pacing {
        Pacing::Sweep {
            base: SweepBase::Of(of),
            ..
        } => {
            let cal = calibrate(plan, of, "--rate_sweep")?;
            let base = swept_rate(&cal, plan);
            records.extend(cal);
            base.map(|b| (of.name.clone(), b))
        }
        _ => None,
    };
    let mut failures = Vec::new();
    for c in &plan.configs {
        let result = match &plan.pacing {
            Pacing::Sweep { points, base } => (|| {
                let (of, base_rate) = match base {
                    SweepBase::Absolute => (None, None),
                    SweepBase::Of(_) => match &shared_base {
                        Some((name, b)) => (Some(name.clone()), Some(*b)),
                        None => return Err(Error::Other("no calibration record".into())),
                    },
                    SweepBase::Each => {
                        let cal = calibrate(plan, c, "--rate_sweep --rate_of each")?;
                        let b = swept_rate(&cal, plan);
                        records.extend(cal);
                        (Some(c.name.clone()), b)
                    }
                };
                let rates: Vec<f64> = points
                    .iter()
                    .map(|p| base_rate.map_or(*p, |b| (p * b).max(1.0)))
                    .collect();
                print_header(plan, c);
                run_sweep(plan, c, points, &rates, of, base_rate)
            })(),
            _ => {
                print_header(plan, c);
                let steps: Vec<Step> = plan
                    .benchmarks
                    .iter()
                    .enumerate()
                    .map(|(i, b)| Step {
                        rate: rates.as_ref().and_then(|r| r.get(i).copied()),
                        ..Step::closed(b)
                    })
                    .collect();
                let (kept, err) = run_config_kept(plan, c, &steps);
                match err {
                    Some(e) if !kept.is_empty() => {
                        println!(
                            "{}: stopped after {} of {} benchmarks, which are kept ({e})",
                            c.name,
                            kept.len(),
                            steps.len()
                        );
                        records.extend(kept);
                        failures.push(format!("{}: {e}", c.name));
                        Ok(Vec::new())
                    }
                    Some(e) => Err(e),
                    None => Ok(kept),
                }
            }
        };
        match result {
            Ok(r) => records.extend(r),
            Err(e) => {
                println!("{}: skipped ({e})", c.name);
                failures.push(format!("{}: {e}", c.name));
            }
        }
        if let Some(p) = &plan.json {
            write_json(p, &records)?;
        }
    }
    if records.is_empty() && !failures.is_empty() {
        return Err(Error::Other(format!(
            "no configuration ran: {}",
            failures.join("; ")
        )));
    }
    if let Some(p) = &plan.json {
        eprintln!("wrote {} records to {}", records.len(), p.display());
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Distribution;
    use crate::metrics::DebtSample;

    pub(crate) fn tiny_plan(configs: &[&str], benchmarks: &[&str], dir: &Path) -> Plan {
        let scale = Scale::Tiny;
        let mut setup = EngineSetup::defaults(dir.join("db"), dir.join("pm"));
        setup.memtable_size_bytes = scale.memtable_size_bytes();
        setup.sst_size_bytes = scale.memtable_size_bytes();
        setup.l1_size_bytes = scale.l1_size_bytes();
        setup.pm_size_bytes = scale.pm_size_bytes();
        Plan {
            configs: configs
                .iter()
                .map(|c| Config::parse(c).unwrap_or_else(|e| panic!("{e}")))
                .collect(),
            benchmarks: benchmarks.iter().map(|s| s.to_string()).collect(),
            scale,
            num: None,
            reads: None,
            key_size: 16,
            value_size: None,
            params: WorkloadParams {
                num: 0,
                reads: 0,
                key_size: 16,
                value_size: 0,
                distribution: None::<Distribution>,
                seek_nexts: 0,
                seed: 1,
            },
            setup,
            threads: 1,
            histogram: false,
            report_interval_s: 0,
            pacing: Pacing::Closed,
            db_base: dir.join("db"),
            pm_base: dir.join("pm"),
            keep_db: false,
            statistics: false,
            json: Some(dir.join("out.json")),
            steady: None,
            latency_target_us: 1000.0,
            quiesce: None,
            writer_rate: None,
            slow_reads_file: None,
        }
    }

    /// A stall the engine records itself reaches the record with its
    /// cause and time, the text line and the summary table.
    #[test]
    fn engine_stall_causes_reach_the_record_line_and_summary() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut plan = tiny_plan(&["fake"], &["fillrandom"], dir.path());
        plan.num = Some(500);
        plan.setup.fake_stall = Some((100, 30));
        let recs = execute(&plan).unwrap_or_else(|e| panic!("{e}"));
        let es = &recs[0].engine_stall;
        assert_eq!(es.count, 1);
        assert_eq!(es.causes.len(), 1);
        assert_eq!(
            (es.causes[0].cause.as_str(), es.causes[0].count),
            ("injected", 1)
        );
        assert_eq!(es.longest.len(), 1);
        let l = &es.longest[0];
        assert_eq!(l.cause, "injected");
        assert!(
            l.seconds >= 0.03 && l.at_s >= 0.0 && l.at_s <= recs[0].seconds,
            "{l:?}"
        );
        let line = stall_line("fillrandom", &recs[0]).unwrap_or_default();
        assert!(
            line.contains("stall (engine's own)") && line.contains("injected"),
            "{line}"
        );
        let md = crate::report::summary::markdown(&recs, &dir.path().join("out.json"), &[]);
        assert!(md.contains("The engine's own stalls by cause"), "{md}");
        assert!(md.contains("| fake | 0, 0.00 s | injected 1,"), "{md}");
    }

    #[test]
    fn fake_engine_end_to_end() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut plan = tiny_plan(
            &["fake"],
            &["fillrandom", "readrandom", "readseq", "seekrandom"],
            dir.path(),
        );
        plan.num = Some(2000);
        let recs = execute(&plan).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recs.len(), 4);
        assert_eq!(recs[0].ops, 2000);
        assert_eq!(recs[0].bytes.user, 2000 * (16 + 4096));
        assert!(recs[2].ops > 1000, "readseq reads what fillrandom wrote");
        let text = std::fs::read_to_string(dir.path().join("out.json")).unwrap_or_default();
        let back: Vec<Record> = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(back.len(), 4);
        assert!(!dir.path().join("db").join("fake").exists(), "cleaned up");
    }

    #[test]
    fn refused_configuration_does_not_stop_the_others() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut plan = tiny_plan(&["tierkv:triangle", "fake"], &["fillrandom"], dir.path());
        plan.num = Some(100);
        // tierkv refuses a PM tier below 4 MiB (Error::InvalidOptions at open).
        plan.setup.pm_size_bytes = 1 << 20;
        let recs = execute(&plan).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].config, "fake");
    }

    /// A configuration that fails part-way keeps the records of the
    /// benchmarks it completed (the log printed them); the next runs.
    #[test]
    fn a_configuration_that_stops_keeps_what_it_completed() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut plan = tiny_plan(
            &["fake", "fake"],
            &["fillrandom", "readrandom", "overwrite", "readseq"],
            dir.path(),
        );
        plan.num = Some(1000);
        plan.json = Some(dir.path().join("r.json"));
        // fillrandom writes 1000: overwrite fails on its 501st write.
        plan.setup.fake_fail_after_writes = Some(1500);
        let recs = execute(&plan).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = recs.iter().map(|r| r.benchmark.as_str()).collect();
        assert_eq!(
            names,
            ["fillrandom", "readrandom", "fillrandom", "readrandom"]
        );
        let text =
            std::fs::read_to_string(dir.path().join("r.json")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(text.matches("\"benchmark\": \"readrandom\"").count(), 2);
    }

    #[test]
    fn space_check_refuses_what_cannot_fit() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut plan = tiny_plan(&["fake"], &["fillrandom"], dir.path());
        plan.num = Some(1 << 40);
        assert!(matches!(check_space(&plan), Err(Error::Refused(_))));
    }

    #[test]
    fn rate_fraction_measures_then_paces() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut plan = tiny_plan(&["fake"], &["ycsb-load", "ycsb-a"], dir.path());
        plan.num = Some(500);
        plan.reads = Some(500);
        plan.value_size = Some(100);
        plan.pacing = Pacing::Fraction {
            fraction: 0.5,
            of: Config::parse("fake").unwrap_or_else(|e| panic!("{e}")),
        };
        // Cap the rate so the test stays fast whatever the calibration says.
        let recs = execute(&plan).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recs.len(), 4);
        assert_eq!(recs[0].mode, "closed");
        assert_eq!(recs[3].mode, "open");
        let want = recs[1].steady_ops_per_sec * 0.5;
        let got = recs[3].rate_ops_per_sec.unwrap_or(0.0);
        assert!((got - want.max(1.0)).abs() < 1e-6);
        assert!(recs[3].latency_us.read.is_some() && recs[3].latency_us.write.is_some());
    }

    /// RocksDB at `tiny` scale, both configurations (needs `--features rocksdb`).
    #[cfg(feature = "rocksdb")]
    #[test]
    fn rocksdb_tiny_run() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let plan = tiny_plan(
            &["rocksdb-ssd", "rocksdb-l0-pm", "rocksdb-pm"],
            &["fillrandom", "readrandom"],
            dir.path(),
        );
        let recs = execute(&plan).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recs.len(), 6);
        for r in &recs {
            assert_eq!(r.engine, "rocksdb");
            assert_eq!(r.ops, 16 * 1024);
            assert!(!r.levels.is_empty());
        }
        let (ssd, pm) = (&recs[0], &recs[2]);
        // 64 MiB through 4 MiB memtables: flushes and L0→L1 compactions.
        assert!(ssd.bytes.user == 16 * 1024 * (16 + 4096));
        assert!(ssd.bytes.wal >= ssd.bytes.user);
        assert!(ssd.write_amp.ssd > 1.5, "{}", ssd.write_amp.ssd);
        assert!(ssd.compactions.iter().any(|c| c.is_l0_to_l1()));
        assert_eq!(ssd.bytes.pm_written, 0);
        // L0-on-PM: WAL and flushes go to PM, compactions to SSD.
        assert!(pm.bytes.pm_written >= pm.bytes.wal + pm.bytes.user / 2);
        assert!(pm.bytes.ssd_written > 0 && pm.bytes.ssd_written < ssd.bytes.ssd_written);
        // Reads find what was written.
        assert!(recs[1].ops_per_sec > 0.0 && recs[1].bytes.user == 0);
        // All on PM: no SSD writes or reads.
        let all = &recs[4];
        assert!(all.bytes.pm_written >= all.bytes.user && all.bytes.ssd_written == 0);
        assert!(
            all.levels.iter().all(|l| l.tier == "pm"),
            "{:?}",
            all.levels
        );
    }

    #[test]
    fn tierkv_rangetab_end_to_end() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut plan = tiny_plan(
            &["tierkv:rangetab/rt=6/cap=512k"],
            &["fillrandom", "readrandom"],
            dir.path(),
        );
        plan.num = Some(4096);
        let recs = execute(&plan).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recs.len(), 2);
        assert!(
            recs[0].bytes.pm_written > recs[0].bytes.wal,
            "{:?}",
            recs[0].bytes
        );
        assert_eq!(recs[1].ops, 4096);
    }

    #[test]
    fn tierkv_classic_end_to_end() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut plan = tiny_plan(
            &["tierkv:classic"],
            &["fillrandom", "readrandom", "seekrandom"],
            dir.path(),
        );
        plan.num = Some(4096);
        let recs = execute(&plan).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].engine, "tierkv");
        assert_eq!(recs[0].ops, 4096);
        assert!(recs[0].bytes.ssd_written > 0, "{:?}", recs[0].bytes);
        assert!(recs[1].ops == 4096);
    }

    fn sample(ratio_max: f64, over_mib: u64) -> DebtSample {
        DebtSample {
            ops: 0,
            seconds: 0.0,
            over_bytes: over_mib << 20,
            ratio_max,
        }
    }

    #[test]
    fn warm_up_end_rule() {
        let within = [
            sample(5.0, 2000),
            sample(3.0, 900),
            sample(1.9, 100),
            sample(1.5, 50),
        ];
        assert_eq!(settled(&within, 2.0), None, "two in a row are not enough");
        let mut v = within.to_vec();
        v.push(sample(2.0, 80));
        assert_eq!(settled(&v, 2.0), Some("within-factor"));
        assert_eq!(settled(&v[2..], 2.0), None, "half the benchmark at least");
        // Growing debt never settles; a flat one (within 10%) does.
        let growing: Vec<DebtSample> = (1..12).map(|i| sample(5.0, 100 * i)).collect();
        assert_eq!(settled(&growing, 2.0), None);
        let flat: Vec<DebtSample> = [900, 1000, 950, 1000, 980, 940, 1010, 990]
            .iter()
            .map(|&m| sample(4.0, m))
            .collect();
        assert_eq!(settled(&flat[..7], 2.0), None, "eight samples at least");
        assert_eq!(settled(&flat, 2.0), Some("plateau"));
        // Still falling fast after a fill: not a plateau.
        let falling: Vec<DebtSample> = (0..8).map(|i| sample(4.0, 2000 - 200 * i)).collect();
        assert_eq!(settled(&falling, 2.0), None);
    }

    /// A sweep of absolute rates on the fake engine: the prefix runs once
    /// closed loop, the last benchmark at each rate on the same database.
    #[test]
    fn rate_sweep_absolute_and_each() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut plan = tiny_plan(&["fake"], &["ycsb-load", "ycsb-a"], dir.path());
        plan.num = Some(300);
        plan.reads = Some(300);
        plan.value_size = Some(100);
        plan.pacing = Pacing::Sweep {
            points: vec![2000.0, 4000.0],
            base: SweepBase::Absolute,
        };
        let recs = execute(&plan).unwrap_or_else(|e| panic!("{e}"));
        let modes: Vec<(&str, Option<f64>)> = recs
            .iter()
            .map(|r| (r.benchmark.as_str(), r.rate_ops_per_sec))
            .collect();
        assert_eq!(
            modes,
            vec![
                ("ycsb-load", None),
                ("ycsb-a", Some(2000.0)),
                ("ycsb-a", Some(4000.0))
            ]
        );
        assert!(recs[2]
            .sweep
            .as_ref()
            .is_some_and(|p| p.point == 4000.0 && p.of.is_none() && p.target_us == 1000.0));
        // Fractions of each configuration's own rate; a fill is swept from
        // a fresh database each time.
        plan.benchmarks = vec!["fillrandom".into()];
        plan.pacing = Pacing::Sweep {
            points: vec![0.1, 0.2],
            base: SweepBase::Each,
        };
        let recs = execute(&plan).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recs.len(), 3, "calibration + two points");
        let base = recs[0].steady_ops_per_sec;
        for (r, f) in recs[1..].iter().zip([0.1, 0.2]) {
            let p = r.sweep.clone().unwrap_or_default();
            assert_eq!(p.of.as_deref(), Some("fake"));
            assert!((r.rate_ops_per_sec.unwrap_or(0.0) - (base * f).max(1.0)).abs() < 1e-6);
            assert_eq!(r.ops, 300, "each point fills from empty");
        }
    }

    /// `--steady_state` on tierkv: the overwrite after a fill warms up
    /// until the debt settles, and the record says how it ended.
    #[test]
    fn steady_state_overwrite_on_classic() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut plan = tiny_plan(
            &["tierkv:classic"],
            &["fillrandom", "overwrite"],
            dir.path(),
        );
        plan.num = Some(4096);
        plan.setup.memtable_size_bytes = 1 << 20;
        plan.setup.sst_size_bytes = 1 << 20;
        plan.setup.l1_size_bytes = 4 << 20;
        plan.steady = Some(SteadyOptions {
            factor: 2.0,
            max_ops: Some(8192),
            ops: Some(2048),
        });
        let recs = execute(&plan).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recs.len(), 2);
        assert!(recs[0].steady.is_none(), "a fill is measured as it is");
        assert!(recs[0].debt.is_some(), "classic reports its level targets");
        let st = recs[1].steady.clone().unwrap_or_default();
        assert!(["within-factor", "plateau", "budget"].contains(&st.settled.as_str()));
        assert!(st.warmup_ops >= 1000 && st.warmup_ops <= 8192, "{st:?}");
        assert_eq!(st.samples.len() as u64, st.warmup_ops.div_ceil(1000).min(9));
        assert_eq!(recs[1].ops, 2048);
        assert!(recs[1].stall.writes == 2048);
    }
}
