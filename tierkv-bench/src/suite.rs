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
//! invalid options) or that fails is reported on stderr and skipped; the
//! others still run.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};

use crate::db_bench::{histogram_text, summary_line};
use crate::engines::{self, Config, EngineSetup};
use crate::error::{io_err, Error, Result};
use crate::metrics::{build_record, ProcessUsage, Record, RecordContext};
use crate::runner::{run, RunOptions};
use crate::scale::Scale;
use crate::sys;
use crate::workload::{is_fill, Workload, WorkloadParams};

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
    /// `--value_size` if given (else 4096, or 1000 for YCSB).
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
}

impl Plan {
    fn value_size_for(&self, bench: &str) -> usize {
        self.value_size.unwrap_or(if bench.starts_with("ycsb-") {
            1000
        } else {
            4096
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
        } else if matches!(config.kind, engines::EngineKind::RocksdbPm) {
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

/// Runs every benchmark of `plan` on `config`; `rates[i]` paces benchmark `i`
/// open loop when given.
pub fn run_config(plan: &Plan, config: &Config, rates: Option<&[f64]>) -> Result<Vec<Record>> {
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
        let mut records = Vec::new();
        for (i, b) in plan.benchmarks.iter().enumerate() {
            let params = plan.params_for(b);
            let w = Workload::new(b, &params)?;
            let rate = rates.and_then(|r| r.get(i).copied());
            let opts = RunOptions {
                threads: plan.threads,
                rate,
                report_interval_s: plan.report_interval_s,
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
            let rec = build_record(&ctx, b, &m, &before, &after, usage);
            // print! (not a locked stdout) so test harnesses capture it.
            println!("{}", summary_line(b, &m));
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
        Ok(records)
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

fn print_header(plan: &Plan, config: &Config) {
    let p = plan.params_for(plan.benchmarks.first().map_or("fillrandom", |s| s.as_str()));
    println!(
        "== {} ({}) · scale {} · keys {} B · values {} B · entries {} · threads {} · memtable {} MiB · L1 {} MiB{}",
        config.name,
        config.engine_name(),
        plan.scale.name(),
        p.key_size,
        p.value_size,
        p.num,
        plan.threads,
        plan.setup.memtable_size_bytes >> 20,
        plan.setup.l1_size_bytes >> 20,
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

/// Runs the whole plan: calibration first when pacing by fraction, then
/// every configuration. Returns the records; fails only if nothing ran.
pub fn execute(plan: &Plan) -> Result<Vec<Record>> {
    for b in &plan.benchmarks {
        Workload::new(b, &plan.params_for(b))?;
    }
    check_space(plan)?;
    let mut records: Vec<Record> = Vec::new();
    let rates: Option<Vec<f64>> = match &plan.pacing {
        Pacing::Closed => None,
        Pacing::Rate(r) => Some(vec![*r; plan.benchmarks.len()]),
        Pacing::Fraction { fraction, of } => {
            eprintln!(
                "measuring the sustainable throughput of `{}` (closed loop) for --rate_fraction {fraction}",
                of.name
            );
            print_header(plan, of);
            let cal = run_config(plan, of, None)?;
            let rates = cal
                .iter()
                .map(|r| (r.steady_ops_per_sec * fraction).max(1.0))
                .collect();
            records.extend(cal);
            Some(rates)
        }
    };
    let mut failures = Vec::new();
    for c in &plan.configs {
        print_header(plan, c);
        match run_config(plan, c, rates.as_deref()) {
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
        }
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
}
