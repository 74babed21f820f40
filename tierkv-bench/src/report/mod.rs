//! `tierkv-bench report RUN.json`: the papers' figures from a run's records,
//! as PNG and SVG, and a markdown summary with ratios against RocksDB.
//!
//! | file | what | papers |
//! |---|---|---|
//! | `throughput-<bench>` | operations per second over time, one line per configuration | Fig. 2 / 15 |
//! | `latency-<bench>` | latency CDF (whole, and the tail on a 9s scale) | tail-latency figures |
//! | `compactions-l0l1-<bench>` | each L0→L1 compaction as a segment: start → end at its input size | Fig. 17 |
//! | `compaction-bytes-<bench>` | input bytes of every compaction, in order | Fig. 18 |
//! | `write-amp` | SSD and total write amplification per configuration and benchmark | Fig. 16 / 19 |
//! | `level-shape` | bytes per level and tier at the end of each configuration's run | Fig. 16 / 19 |
//! | `ops-<bench>` | operations per second per configuration (bars): knob sweeps run side by side, e.g. capacities or L1 sizes | RangeKV Figs. 18–20 |
//! | `value-sizes-<bench>` | MB/s against the value size, one line per configuration (several runs' JSONs together) | RangeKV Fig. 11 |
//! | `latency-vs-load-<bench>` | P50 / P99 / P99.9 of writes (and reads) against the offered rate of a `--rate_sweep`, one colour per configuration | vLSM Fig. 8 |
//! | `steady-<bench>` | compaction debt (worst level ÷ target) after each warm-up chunk of a `--steady_state` run | |
//! | `summary.md` | one table per benchmark, ratios against RocksDB; client stalls; compaction debt; compactions by level; vLSM's counters; per sweep, the highest rate meeting the latency target | |
//!
//! Records from a rate sweep form one group per sweep point (slug
//! `<bench>-open-<point>`), so each point gets its own throughput and
//! latency figures; `latency-vs-load` puts the points together.
//!
//! The font (DejaVu Sans, `assets/`) is compiled in and registered with
//! plotters' `ab_glyph` text renderer, so PNGs look the same on any machine;
//! SVGs name the font family and leave rendering to the viewer.

mod plots;
pub(crate) mod summary;

pub use plots::{fmt_count, fmt_us};

use std::path::{Path, PathBuf};

use crate::error::{io_err, Error, Result};
use crate::metrics::Record;

/// DejaVu Sans (Bitstream Vera license, `assets/DejaVuSans-LICENSE.txt`).
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// Registers the embedded font for every family name plotters may ask for.
pub fn register_fonts() -> Result<()> {
    use plotters::style::FontStyle;
    for family in ["sans-serif", "serif", "monospace"] {
        for style in [
            FontStyle::Normal,
            FontStyle::Bold,
            FontStyle::Italic,
            FontStyle::Oblique,
        ] {
            plotters::style::register_font(family, style, FONT)
                .map_err(|_| Error::Other("the embedded font could not be loaded".into()))?;
        }
    }
    Ok(())
}

/// A group of records of one benchmark in one pacing mode (and sweep
/// point, and value size when the records have several), in run order.
pub struct Group<'a> {
    /// Benchmark name.
    pub benchmark: String,
    /// `closed` or `open`.
    pub mode: String,
    /// The value size, when records of this benchmark have several.
    pub value_size: Option<usize>,
    /// The sweep point, for records of a `--rate_sweep`.
    pub point: Option<f64>,
    /// The records.
    pub records: Vec<&'a Record>,
}

impl Group<'_> {
    /// `fillrandom`, `ycsb-a-open`, `ycsb-a-open-0.5` (a sweep point) or
    /// `fillrandom-1024B`.
    pub fn slug(&self) -> String {
        let mut s = self.benchmark.clone();
        if self.mode == "open" {
            s.push_str("-open");
            if let Some(p) = self.point {
                s.push_str(&format!("-{p}"));
            }
        }
        if let Some(v) = self.value_size {
            s.push_str(&format!("-{v}B"));
        }
        s
    }
}

fn mode_of(r: &Record) -> &str {
    if r.mode.is_empty() {
        "closed"
    } else {
        r.mode.as_str()
    }
}

/// Groups records by (benchmark, mode, sweep point) — and value size where
/// one benchmark ran with several — in order of first appearance.
pub fn groups(records: &[Record]) -> Vec<Group<'_>> {
    let several = |r: &Record| {
        records.iter().any(|o| {
            o.benchmark == r.benchmark && mode_of(o) == mode_of(r) && o.value_size != r.value_size
        })
    };
    let mut out: Vec<Group<'_>> = Vec::new();
    for r in records {
        let mode = mode_of(r);
        let vs = several(r).then_some(r.value_size);
        let point = r.sweep.as_ref().map(|p| p.point);
        match out.iter_mut().find(|g| {
            g.benchmark == r.benchmark && g.mode == mode && g.value_size == vs && g.point == point
        }) {
            Some(g) => g.records.push(r),
            None => out.push(Group {
                benchmark: r.benchmark.clone(),
                mode: mode.to_string(),
                value_size: vs,
                point,
                records: vec![r],
            }),
        }
    }
    out
}

/// The records of each swept benchmark (those with a `sweep` point), by
/// benchmark in order of first appearance.
pub fn sweeps(records: &[Record]) -> Vec<(String, Vec<&Record>)> {
    let mut out: Vec<(String, Vec<&Record>)> = Vec::new();
    for r in records.iter().filter(|r| r.sweep.is_some()) {
        match out.iter_mut().find(|(b, _)| *b == r.benchmark) {
            Some((_, v)) => v.push(r),
            None => out.push((r.benchmark.clone(), vec![r])),
        }
    }
    out
}

/// Reads the runs `jsons` (their records together), writes the plots and
/// `summary.md` into `out` (default: `<stem>-report` beside the first
/// JSON) and prints what it wrote.
pub fn report(jsons: &[PathBuf], out: Option<&Path>) -> Result<()> {
    let json = jsons
        .first()
        .ok_or_else(|| Error::Usage("report needs a JSON file".into()))?;
    let mut records: Vec<Record> = Vec::new();
    for j in jsons {
        let text = std::fs::read_to_string(j).map_err(io_err(format!("read {}", j.display())))?;
        let mut rs = crate::metrics::parse_records(&text)
            .map_err(|e| Error::Other(format!("{} is not a tierkv-bench run: {e}", j.display())))?;
        records.append(&mut rs);
    }
    if records.is_empty() {
        return Err(Error::Other(format!("{} holds no records", json.display())));
    }
    let out: PathBuf = match out {
        Some(o) => o.to_path_buf(),
        None => {
            let stem = json
                .file_stem()
                .map_or("run".into(), |s| s.to_string_lossy().into_owned());
            json.with_file_name(format!("{stem}-report"))
        }
    };
    std::fs::create_dir_all(&out).map_err(io_err(format!("create {}", out.display())))?;
    register_fonts()?;
    let files = plots::draw_all(&records, &out)?;
    let md = summary::markdown(&records, json, &files);
    let md_path = out.join("summary.md");
    std::fs::write(&md_path, md).map_err(io_err(format!("write {}", md_path.display())))?;
    for f in &files {
        println!("{}", out.join(f).with_extension("png").display());
    }
    println!("{}", md_path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::{CompactionEvent, LevelBytes, LevelShape};
    use crate::metrics::{Latency, LatencySummary};

    pub(crate) fn sample_records() -> Vec<Record> {
        let mut v = Vec::new();
        for (ci, config) in ["tierkv:classic", "rocksdb-ssd"].iter().enumerate() {
            for bench in ["fillrandom", "readrandom"] {
                let write = bench == "fillrandom";
                let r = Record {
                    engine: config.split(':').next().unwrap_or("x").replace("-ssd", ""),
                    config: config.to_string(),
                    benchmark: bench.into(),
                    scale: "tiny".into(),
                    value_size: 4096,
                    ops: 16384,
                    seconds: 3.0,
                    ops_per_sec: 5000.0 + 1000.0 * ci as f64,
                    mb_per_sec: 20.0,
                    latency_us: Latency {
                        all: LatencySummary {
                            avg: 10.0,
                            p50: 5.0,
                            p90: 9.0,
                            p99: 50.0,
                            p999: 900.0,
                            p9999: 3000.0,
                            max: 9000.0,
                        },
                        read: None,
                        write: None,
                    },
                    timeline: vec![5000, 200, 6000, 3000],
                    compactions: if write {
                        (0..5)
                            .map(|i| CompactionEvent {
                                start_s: i as f64 * 0.5,
                                duration_s: 0.3,
                                kind: "l0-l1".into(),
                                input_bytes: (16 + i) << 20,
                                inputs: vec![LevelBytes {
                                    level: 0,
                                    bytes: (16 + i) << 20,
                                }],
                                output_level: 1,
                                output_bytes: (15 + i) << 20,
                            })
                            .collect()
                    } else {
                        Vec::new()
                    },
                    levels: vec![
                        LevelShape {
                            level: 0,
                            tier: "ssd".into(),
                            files: 2,
                            bytes: 8 << 20,
                        },
                        LevelShape {
                            level: 1,
                            tier: "ssd".into(),
                            files: 4,
                            bytes: 16 << 20,
                        },
                        LevelShape {
                            level: 2,
                            tier: "ssd".into(),
                            files: 10,
                            bytes: 40 << 20,
                        },
                    ],
                    latency_cdf: vec![
                        [0.0, 1.0],
                        [0.5, 5.0],
                        [0.9, 9.0],
                        [0.99, 50.0],
                        [0.999, 900.0],
                        [1.0, 9000.0],
                    ],
                    mode: "closed".into(),
                    ..Record::default()
                };
                v.push(r);
            }
        }
        for r in v.iter_mut().filter(|r| r.benchmark == "fillrandom") {
            r.bytes.user = 64 << 20;
            r.bytes.ssd_written = 150 << 20;
            r.write_amp.ssd = 150.0 / 64.0;
            r.write_amp.total = 150.0 / 64.0;
        }
        v
    }

    #[test]
    fn value_size_sweep_over_two_runs() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut jsons = Vec::new();
        for vs in [1024usize, 4096] {
            let recs: Vec<Record> = sample_records()
                .into_iter()
                .map(|mut r| {
                    r.value_size = vs;
                    r
                })
                .collect();
            let json = dir.path().join(format!("v{vs}.json"));
            let text = serde_json::to_string(&recs).unwrap_or_default();
            std::fs::write(&json, text).unwrap_or_else(|e| panic!("{e}"));
            jsons.push(json);
        }
        report(&jsons, None).unwrap_or_else(|e| panic!("{e}"));
        let out = dir.path().join("v1024-report");
        for f in [
            "value-sizes-fillrandom.png",
            "ops-fillrandom-1024B.png",
            "throughput-fillrandom-4096B.svg",
            "summary.md",
        ] {
            assert!(out.join(f).exists(), "{f}");
        }
    }

    #[test]
    fn report_writes_plots_and_summary() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let json = dir.path().join("run.json");
        let text = serde_json::to_string(&sample_records()).unwrap_or_default();
        std::fs::write(&json, text).unwrap_or_else(|e| panic!("{e}"));
        report(std::slice::from_ref(&json), None).unwrap_or_else(|e| panic!("{e}"));
        let out = dir.path().join("run-report");
        for f in [
            "ops-fillrandom.png",
            "throughput-fillrandom.png",
            "throughput-fillrandom.svg",
            "latency-readrandom.png",
            "compactions-l0l1-fillrandom.png",
            "compaction-bytes-fillrandom.svg",
            "write-amp.png",
            "level-shape.png",
            "summary.md",
        ] {
            let p = out.join(f);
            assert!(
                p.exists() && p.metadata().map(|m| m.len()).unwrap_or(0) > 100,
                "{f}"
            );
        }
        let md = std::fs::read_to_string(out.join("summary.md")).unwrap_or_default();
        assert!(md.contains("| tierkv:classic |"), "{md}");
        assert!(md.contains("0.83×"), "ratio vs rocksdb-ssd: {md}");
    }

    #[test]
    fn groups_keep_order_and_mode() {
        let mut recs = sample_records();
        recs[3].mode = "open".into();
        let g = groups(&recs);
        assert_eq!(g.len(), 3);
        assert_eq!(g[0].slug(), "fillrandom");
        assert_eq!(g[2].slug(), "readrandom-open");
    }

    /// A rate sweep and a steady-state run: the latency-against-load and
    /// warm-up figures, and the summary's highest rate meeting the target.
    #[test]
    fn report_draws_sweeps_and_steady_state() {
        use crate::metrics::{Debt, DebtSample, Steady, SweepPoint};
        let mut recs = Vec::new();
        for (config, p99s) in [
            ("tierkv:triangle", [300.0, 800.0, 5000.0]),
            ("rocksdb-ssd", [900.0, 40000.0, 90000.0]),
            // A pass above a failure does not count.
            ("tierkv:classic", [300.0, 5000.0, 800.0]),
        ] {
            for (i, rate) in [1000.0, 2000.0, 4000.0].into_iter().enumerate() {
                let mut r = sample_records()[0].clone();
                r.config = config.into();
                r.engine = config.split(':').next().unwrap_or("x").replace("-ssd", "");
                r.benchmark = "ycsb-a".into();
                r.mode = "open".into();
                r.rate_ops_per_sec = Some(rate);
                r.sweep = Some(SweepPoint {
                    point: rate,
                    of: None,
                    base_ops_per_sec: None,
                    target_us: 1000.0,
                });
                let mut l = r.latency_us.all.clone();
                l.p99 = p99s[i];
                r.latency_us.write = Some(l.clone());
                l.p99 = p99s[i] / 2.0;
                r.latency_us.read = Some(l);
                recs.push(r);
            }
            let mut r = sample_records()[0].clone();
            r.config = config.into();
            r.benchmark = "overwrite".into();
            r.debt = Some(Debt {
                ratio_max: 1.4,
                ..Debt::default()
            });
            r.steady = Some(Steady {
                factor: 2.0,
                warmup_ops: 3000,
                warmup_seconds: 3.0,
                settled: "within-factor".into(),
                samples: (1..=3)
                    .map(|i| DebtSample {
                        ops: 1000 * i,
                        seconds: i as f64,
                        over_bytes: 0,
                        ratio_max: 4.0 / i as f64,
                    })
                    .collect(),
                debt_start: Debt::default(),
            });
            recs.push(r);
        }
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let json = dir.path().join("sweep.json");
        std::fs::write(&json, serde_json::to_string(&recs).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
        report(std::slice::from_ref(&json), None).unwrap_or_else(|e| panic!("{e}"));
        let out = dir.path().join("sweep-report");
        for f in [
            "latency-vs-load-ycsb-a.png",
            "latency-vs-load-ycsb-a.svg",
            "steady-overwrite.png",
            "throughput-ycsb-a-open-2000.png",
        ] {
            assert!(out.join(f).exists(), "{f}");
        }
        let md = std::fs::read_to_string(out.join("summary.md")).unwrap_or_default();
        assert!(md.contains("| tierkv:triangle | 2.0k (2.00×) |"), "{md}");
        assert!(md.contains("| rocksdb-ssd | 1.0k |"), "{md}");
        assert!(md.contains("| tierkv:classic | 1.0k (1.00×) |"), "{md}");
        assert!(md.contains("within-factor"), "{md}");
    }
}
