//! The markdown summary: one table per benchmark (and pacing), every
//! configuration a row, with ratios against the RocksDB baseline of the same
//! benchmark (`rocksdb-ssd` if present, else the first RocksDB
//! configuration). A ratio is `config ÷ baseline`: above 1× is more
//! throughput, or more latency / stall / amplification.

use std::fmt::Write as _;
use std::path::Path;

use super::plots::{fmt_count, fmt_us};
use super::{groups, Group};
use crate::metrics::{LatencySummary, Record};

fn baseline<'a>(g: &Group<'a>) -> Option<&'a Record> {
    g.records
        .iter()
        .find(|r| r.config == "rocksdb-ssd")
        .or_else(|| g.records.iter().find(|r| r.engine == "rocksdb"))
        .copied()
}

fn ratio(v: f64, base: Option<f64>) -> String {
    match base {
        Some(b) if b > 0.0 && v.is_finite() => format!(" ({:.2}×)", v / b),
        _ => String::new(),
    }
}

fn lat_cells(l: &LatencySummary, base: Option<&LatencySummary>) -> String {
    format!(
        "{} | {}{} | {}{} | {} | {} |",
        fmt_us(l.p50),
        fmt_us(l.p99),
        ratio(l.p99, base.map(|b| b.p99)),
        fmt_us(l.p999),
        ratio(l.p999, base.map(|b| b.p999)),
        fmt_us(l.p9999),
        fmt_us(l.max)
    )
}

/// The summary of `records` (from `json`), linking the figures `files`.
pub fn markdown(records: &[Record], json: &Path, files: &[String]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# tierkv-bench report\n");
    let _ = writeln!(
        s,
        "Run: `{}` — {} records. Ratios in parentheses are against RocksDB on the same benchmark \
         (`rocksdb-ssd` when present).\n",
        json.display(),
        records.len()
    );
    for g in groups(records) {
        let base = baseline(&g);
        let first = g.records[0];
        let pacing = if g.mode == "open" {
            format!(
                "open loop at {} ops/s",
                first.rate_ops_per_sec.map_or("?".into(), fmt_count)
            )
        } else {
            format!("closed loop, {} thread(s)", first.threads.max(1))
        };
        let _ = writeln!(
            s,
            "## {} — scale {}, {} keys × {} B values, {pacing}\n",
            g.benchmark, first.scale, first.num, first.value_size
        );
        let _ = writeln!(
            s,
            "| config | ops/s | MB/s | P50 | P99 | P99.9 | P99.99 | max | stall % | troughs % | SSD write-amp | total write-amp | I/O amp | chain MiB avg / max | CPU s | CPU kcycles/op | peak RSS MiB |"
        );
        let _ = writeln!(
            s,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for r in &g.records {
            let b = base.filter(|b| !std::ptr::eq(*b, *r));
            let wa = |v: f64, bv: Option<f64>| {
                if r.bytes.user == 0 {
                    "–".to_string()
                } else {
                    format!("{v:.2}{}", ratio(v, bv))
                }
            };
            let _ = writeln!(
                s,
                "| {} | {}{} | {:.1} | {} {:.1}{} | {:.1} | {} | {} | {} | {:.1} / {:.1} | {:.1} | {:.1} | {:.0} |",
                r.config,
                fmt_count(r.ops_per_sec),
                ratio(r.ops_per_sec, b.map(|b| b.ops_per_sec)),
                r.mb_per_sec,
                lat_cells(&r.latency_us.all, b.map(|b| &b.latency_us.all)),
                r.stall.percent,
                if r.stall.count > 0 {
                    format!(" ({} stalls, longest {:.2} s)", r.stall.count, r.stall.max_seconds)
                } else {
                    String::new()
                },
                r.troughs.percent,
                wa(r.write_amp.ssd, b.filter(|b| b.bytes.user > 0).map(|b| b.write_amp.ssd)),
                wa(r.write_amp.total, b.filter(|b| b.bytes.user > 0).map(|b| b.write_amp.total)),
                wa(r.io_amp, b.filter(|b| b.bytes.user > 0).map(|b| b.io_amp)),
                r.chain_bytes.avg / 1048576.0,
                r.chain_bytes.max as f64 / 1048576.0,
                r.cpu_seconds,
                r.cpu_cycles_per_op / 1e3,
                r.peak_rss_bytes as f64 / 1048576.0
            );
        }
        if g.records.iter().any(|r| r.latency_us.read.is_some()) {
            let _ = writeln!(
                s,
                "\nReads and writes separately:\n\n| config | op | P50 | P99 | P99.9 | P99.99 | max |\n|---|---|---|---|---|---|---|"
            );
            for r in &g.records {
                let b = base.filter(|b| !std::ptr::eq(*b, *r));
                for (op, l, bl) in [
                    (
                        "read",
                        &r.latency_us.read,
                        b.and_then(|b| b.latency_us.read.as_ref()),
                    ),
                    (
                        "write",
                        &r.latency_us.write,
                        b.and_then(|b| b.latency_us.write.as_ref()),
                    ),
                ] {
                    if let Some(l) = l {
                        let _ = writeln!(s, "| {} | {op} | {}", r.config, lat_cells(l, bl));
                    }
                }
            }
        }
        let slug = g.slug();
        let figs: Vec<&String> = files
            .iter()
            .filter(|f| f.ends_with(&format!("-{slug}")))
            .collect();
        if !figs.is_empty() {
            let _ = writeln!(s);
            for f in figs {
                let _ = writeln!(s, "![{f}]({f}.png)");
            }
        }
        let _ = writeln!(s);
    }
    for f in files
        .iter()
        .filter(|f| *f == "write-amp" || *f == "level-shape")
    {
        let _ = writeln!(s, "![{f}]({f}.png)");
    }
    s
}
