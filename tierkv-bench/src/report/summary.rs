//! The markdown summary: one table per benchmark (and pacing), every
//! configuration a row, with ratios against the RocksDB baseline of the same
//! benchmark (`rocksdb-ssd` if present, else the first RocksDB
//! configuration). A ratio is `config ÷ baseline`: above 1× is more
//! throughput, or more latency / stall / amplification.
//!
//! Below each table: the compaction debt (at the start of a steady-state
//! window and at the end of every benchmark), the compactions by level
//! (where the compaction cost goes), vLSM's own counters when present, and
//! for a rate sweep the latency at each offered rate and, per
//! configuration, the highest offered rate meeting the latency target (every
//! lower swept rate meeting it too).

use std::fmt::Write as _;
use std::path::Path;

use super::plots::{fmt_count, fmt_us};
use super::{groups, sweeps, Group};
use crate::metrics::{Debt, LatencySummary, Record};

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

fn mib(b: u64) -> f64 {
    b as f64 / 1048576.0
}

/// The client's stall cells (metrics rule 3): longest write, writes over
/// 1/10/100 ms, share of the run in slow writes, per-second min / median.
fn stall_cells(r: &Record) -> String {
    let s = &r.stall;
    let per_second = format!(
        "{} / {}",
        fmt_count(s.second_ops_min),
        fmt_count(s.second_ops_median)
    );
    if s.writes == 0 {
        return format!("– | – | – | {per_second} |");
    }
    format!(
        "{} | {} / {} / {} | {:.1} | {per_second} |",
        fmt_us(s.write_seconds_max * 1e6),
        s.writes_over_1ms,
        s.writes_over_10ms,
        s.writes_over_100ms,
        s.slow_write_time_percent
    )
}

fn debt_cell(d: &Debt) -> String {
    let levels: Vec<String> = d
        .levels
        .iter()
        .map(|l| {
            format!(
                "L{} {:.2}×",
                l.level,
                l.bytes as f64 / l.target_bytes.max(1) as f64
            )
        })
        .collect();
    let l0 = match d.l0_files_trigger {
        Some(t) => format!("L0 {} files (trigger {t})", d.l0_files),
        None => match d.l0_target_bytes {
            Some(t) => format!("L0 {:.0} / {:.0} MiB", mib(d.l0_bytes), mib(t)),
            None => format!("L0 {} files", d.l0_files),
        },
    };
    let pending = d
        .pending_compaction_bytes
        .map_or(String::new(), |p| format!("; pending {:.0} MiB", mib(p)));
    format!(
        "worst {:.2}×, {:.0} MiB over: {l0}; {}{pending}",
        d.ratio_max,
        mib(d.over_bytes),
        if levels.is_empty() {
            "no level judged".to_string()
        } else {
            levels.join(", ")
        }
    )
}

/// The compactions of a record by (input level → output level): count,
/// bytes from the upper level, bytes from the output level, bytes written.
fn by_level(r: &Record) -> Vec<((usize, usize), [u64; 4])> {
    let mut out: Vec<((usize, usize), [u64; 4])> = Vec::new();
    for c in &r.compactions {
        let from = c
            .inputs
            .iter()
            .filter(|i| i.bytes > 0 && i.level < c.output_level)
            .map(|i| i.level)
            .min()
            .unwrap_or(c.output_level);
        let upper: u64 = c
            .inputs
            .iter()
            .filter(|i| i.level < c.output_level)
            .map(|i| i.bytes)
            .sum();
        let lower: u64 = c
            .inputs
            .iter()
            .filter(|i| i.level == c.output_level)
            .map(|i| i.bytes)
            .sum();
        let key = (from, c.output_level);
        let e = match out.iter_mut().find(|(k, _)| *k == key) {
            Some(e) => e,
            None => {
                out.push((key, [0; 4]));
                let n = out.len() - 1;
                &mut out[n]
            }
        };
        e.1[0] += 1;
        e.1[1] += upper;
        e.1[2] += lower;
        e.1[3] += c.output_bytes;
    }
    out.sort_by_key(|(k, _)| *k);
    out
}

fn counter(r: &Record, name: &str) -> Option<(f64, f64)> {
    r.design_counters
        .iter()
        .find(|c| c.name == name)
        .map(|c| (c.start, c.end))
}

/// vLSM's counters over the benchmark (tierkv's `VlsmCounters`).
fn vlsm_lines(s: &mut String, g: &Group<'_>) {
    let rows: Vec<&Record> = g
        .records
        .iter()
        .copied()
        .filter(|r| counter(r, "vlsm.l1_l2.merges").is_some())
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nvLSM's L1 (over the benchmark; `overlap` = L2 bytes merged per L1 byte, `random` = what the same L1 bytes meet on average at pick time, Φ/2 for reference):\n\n\
         | config | L1→L2 merges (window fallback) | overlap achieved | random | Φ/2 | merged L1 that was good | L0→L1 output good (tables, bytes) | L1 good now |\n|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let d = |n: &str| counter(r, n).map_or(0.0, |(a, b)| b - a);
        let end = |n: &str| counter(r, n).map_or(0.0, |(_, b)| b);
        let per = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let l1 = d("vlsm.l1_l2.l1_bytes");
        let good_t = d("vlsm.l0_l1.good_tables");
        let poor_t = d("vlsm.l0_l1.poor_tables");
        let good_b = d("vlsm.l0_l1.good_bytes");
        let poor_b = d("vlsm.l0_l1.poor_bytes");
        let _ = writeln!(
            s,
            "| {} | {:.0} ({:.0}) | {:.1} | {:.1} | {:.1} | {:.0}% | {:.0}%, {:.0}% | {:.0} of {:.0} MiB ({:.0} of {:.0} tables) |",
            r.config,
            d("vlsm.l1_l2.merges"),
            d("vlsm.l1_l2.window_merges"),
            per(d("vlsm.l1_l2.l2_bytes"), l1),
            per(d("vlsm.l1_l2.random_l2_bytes"), l1),
            end("vlsm.phi") / 2.0,
            100.0 * per(d("vlsm.l1_l2.l1_good_bytes"), l1),
            100.0 * per(good_t, good_t + poor_t),
            100.0 * per(good_b, good_b + poor_b),
            end("vlsm.l1.good_bytes") / 1048576.0,
            end("vlsm.l1.bytes") / 1048576.0,
            end("vlsm.l1.good_tables"),
            end("vlsm.l1.tables"),
        );
    }
}

/// The sweep section of one benchmark: latency per offered rate and the
/// highest rate meeting the target with every lower swept rate meeting it
/// too.
fn sweep_lines(s: &mut String, bench: &str, recs: &[&Record]) {
    let target = recs
        .iter()
        .find_map(|r| r.sweep.as_ref().map(|p| p.target_us))
        .unwrap_or(1000.0);
    let mixed = recs.iter().any(|r| r.latency_us.read.is_some());
    let _ = writeln!(
        s,
        "## {bench} — latency against offered load (open loop, target P99 ≤ {})\n",
        fmt_us(target)
    );
    let _ = writeln!(
        s,
        "| config | offered ops/s | achieved ops/s | write P50 | write P99 | write P99.9 | read P50 | read P99 | read P99.9 | meets target |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    let mut configs: Vec<&str> = Vec::new();
    for r in recs {
        if !configs.contains(&r.config.as_str()) {
            configs.push(&r.config);
        }
    }
    let mut best: Vec<(String, Option<f64>)> = Vec::new();
    for c in &configs {
        let mut rows: Vec<&&Record> = recs.iter().filter(|r| r.config == *c).collect();
        rows.sort_by(|a, b| {
            a.rate_ops_per_sec
                .unwrap_or(0.0)
                .total_cmp(&b.rate_ops_per_sec.unwrap_or(0.0))
        });
        // The highest rate below which every swept rate meets the target
        // too: a pass above a failure is noise, not headroom.
        let mut highest = None;
        let mut failed_below = false;
        for r in rows {
            let (w, rd) = split_latency(r);
            let ok = meets(r, target);
            if ok && !failed_below {
                highest = r.rate_ops_per_sec.or(highest);
            }
            failed_below |= !ok;
            let cell = |l: Option<&LatencySummary>, f: fn(&LatencySummary) -> f64| {
                l.map_or("–".to_string(), |l| fmt_us(f(l)))
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.config,
                r.rate_ops_per_sec.map_or("?".into(), fmt_count),
                fmt_count(r.ops_per_sec),
                cell(w, |l| l.p50),
                cell(w, |l| l.p99),
                cell(w, |l| l.p999),
                cell(rd, |l| l.p50),
                cell(rd, |l| l.p99),
                cell(rd, |l| l.p999),
                if ok { "yes" } else { "no" }
            );
        }
        best.push((c.to_string(), highest));
    }
    let what = if mixed {
        "write P99 and read P99"
    } else {
        "P99"
    };
    let _ = writeln!(
        s,
        "\nHighest offered rate whose {what} ≤ {}, every lower swept rate meeting it too:\n\n| config | ops/s |\n|---|---|",
        fmt_us(target)
    );
    let base = best
        .iter()
        .find(|(c, _)| c == "rocksdb-ssd")
        .and_then(|(_, b)| *b);
    for (c, b) in &best {
        let _ = writeln!(
            s,
            "| {c} | {} |",
            b.map_or("none of the swept rates".to_string(), |v| format!(
                "{}{}",
                fmt_count(v),
                ratio(v, base.filter(|_| c != "rocksdb-ssd"))
            ))
        );
    }
    let _ = writeln!(
        s,
        "\n![latency-vs-load-{bench}](latency-vs-load-{bench}.png)\n"
    );
}

/// Write and read latency of a record: the split ones of a mixed workload,
/// else all requests as the one class it has.
pub fn split_latency(r: &Record) -> (Option<&LatencySummary>, Option<&LatencySummary>) {
    match (&r.latency_us.write, &r.latency_us.read) {
        (Some(w), Some(rd)) => (Some(w), Some(rd)),
        _ if r.stall.writes > 0 || r.bytes.user > 0 => (Some(&r.latency_us.all), None),
        _ => (None, Some(&r.latency_us.all)),
    }
}

/// The sweep's rule: write P99 (and read P99 where there are reads) at or
/// below `target_us`.
pub fn meets(r: &Record, target_us: f64) -> bool {
    let (w, rd) = split_latency(r);
    w.is_none_or(|l| l.p99 <= target_us) && rd.is_none_or(|l| l.p99 <= target_us)
}

/// The summary of `records` (from `json`), linking the figures `files`.
pub fn markdown(records: &[Record], json: &Path, files: &[String]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# tierkv-bench report\n");
    let _ = writeln!(
        s,
        "Run: `{}` — {} records. Ratios in parentheses are against RocksDB on the same benchmark \
         (`rocksdb-ssd` when present). Stalls are measured by the client, the same way for every \
         engine: the longest write, the writes slower than 1/10/100 ms, the share of the run \
         during which a write slower than 1 ms was in progress, and the slowest / median second. \
         `engine stall %` is each engine's own accounting (tierkv counts every wait, RocksDB its \
         delay and stop paths): never compare it across engines.\n",
        json.display(),
        records.len()
    );
    for (bench, recs) in sweeps(records) {
        sweep_lines(&mut s, &bench, &recs);
    }
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
        let steady = if g.records.iter().any(|r| r.steady.is_some()) {
            ", steady state"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "## {} — scale {}, {} keys × {} B values, {pacing}{steady}\n",
            g.benchmark, first.scale, first.num, first.value_size
        );
        let _ = writeln!(
            s,
            "| config | ops/s | MB/s | P50 | P99 | P99.9 | P99.99 | max | longest write | writes > 1 / 10 / 100 ms | in slow writes % | per-second ops min / median | engine stall % (own) | troughs % | SSD write-amp | total write-amp | I/O amp | chain MiB avg / max | CPU s | CPU kcycles/op | peak RSS MiB |"
        );
        let _ = writeln!(
            s,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
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
                "| {} | {}{} | {:.1} | {} {} {:.1} | {:.1} | {} | {} | {} | {:.1} / {:.1} | {:.1} | {:.1} | {:.0} |",
                r.config,
                fmt_count(r.ops_per_sec),
                ratio(r.ops_per_sec, b.map(|b| b.ops_per_sec)),
                r.mb_per_sec,
                lat_cells(&r.latency_us.all, b.map(|b| &b.latency_us.all)),
                stall_cells(r),
                r.engine_stall.percent,
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
        if g.records.iter().any(|r| r.read_stall.reads > 0) {
            let _ = writeln!(
                s,
                "\nSlow reads, measured by the client:\n\n| config | reads | longest read | P99.9 | P99.99 | reads > 1 / 10 / 100 ms | quiesced before (s) |\n|---|---|---|---|---|---|---|"
            );
            for r in g.records.iter().filter(|r| r.read_stall.reads > 0) {
                let rs = &r.read_stall;
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} / {} / {} | {} |",
                    r.config,
                    rs.reads,
                    fmt_us(rs.read_seconds_max * 1e6),
                    fmt_us(rs.p999_us),
                    fmt_us(rs.p9999_us),
                    rs.reads_over_1ms,
                    rs.reads_over_10ms,
                    rs.reads_over_100ms,
                    r.quiesce_seconds
                        .map_or("–".to_string(), |q| format!("{q:.1}"))
                );
            }
        }
        let own = |r: &Record| {
            !r.engine_stall.causes.is_empty()
                || !r.engine_stall.longest.is_empty()
                || r.engine_stall.paced_writes > 0
        };
        if g.records.iter().any(|r| own(r)) {
            let _ = writeln!(
                s,
                "\nThe engine's own stalls by cause (its accounting, not comparable across engines), and its longest (seconds into the run: length, cause):\n\n| config | paced writes, seconds | by cause: count, seconds, longest | longest stalls |\n|---|---|---|---|"
            );
            for r in g.records.iter().filter(|r| own(r)) {
                let es = &r.engine_stall;
                let causes: Vec<String> = es
                    .causes
                    .iter()
                    .map(|c| match (c.seconds, c.max_seconds) {
                        (Some(secs), Some(max)) => format!(
                            "{} {}, {:.2} s, {}",
                            c.cause,
                            c.count,
                            secs,
                            fmt_us(max * 1e6)
                        ),
                        _ => format!("{} {}", c.cause, c.count),
                    })
                    .collect();
                let longest: Vec<String> = es
                    .longest
                    .iter()
                    .map(|l| format!("{:.1} s: {} {}", l.at_s, fmt_us(l.seconds * 1e6), l.cause))
                    .collect();
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} |",
                    r.config,
                    if r.engine == "rocksdb" {
                        "–".to_string()
                    } else {
                        format!("{}, {:.2} s", es.paced_writes, es.paced_seconds)
                    },
                    if causes.is_empty() {
                        "–".to_string()
                    } else {
                        causes.join("; ")
                    },
                    if longest.is_empty() {
                        "–".to_string()
                    } else {
                        longest.join("; ")
                    }
                );
            }
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
        if g.records
            .iter()
            .any(|r| r.debt.is_some() || r.steady.is_some())
        {
            let _ = writeln!(
                s,
                "\nCompaction debt (level size ÷ the engine's own target; the deepest level holding data is not judged):\n\n| config | warm-up | at the start | at the end |\n|---|---|---|---|"
            );
            for r in &g.records {
                let (warm, start) = match &r.steady {
                    Some(st) => (
                        format!(
                            "{} ops, {:.0} s, {}",
                            st.warmup_ops, st.warmup_seconds, st.settled
                        ),
                        debt_cell(&st.debt_start),
                    ),
                    None => ("–".to_string(), "–".to_string()),
                };
                let _ = writeln!(
                    s,
                    "| {} | {warm} | {start} | {} |",
                    r.config,
                    r.debt.as_ref().map_or("–".to_string(), debt_cell)
                );
            }
        }
        if g.records.iter().any(|r| !r.compactions.is_empty()) {
            let _ = writeln!(
                s,
                "\nCompactions by level (MiB; `overlap` = output-level input ÷ upper-level input; write-amp share = written ÷ user bytes):\n\n| config | levels | count | upper in | output-level in | overlap | written | write-amp share |\n|---|---|---|---|---|---|---|---|"
            );
            for r in &g.records {
                for ((from, to), [n, up, low, out]) in by_level(r) {
                    let _ = writeln!(
                        s,
                        "| {} | L{from}→L{to} | {n} | {:.0} | {:.0} | {:.2} | {:.0} | {} |",
                        r.config,
                        mib(up),
                        mib(low),
                        if up > 0 { low as f64 / up as f64 } else { 0.0 },
                        mib(out),
                        if r.bytes.user > 0 {
                            format!("{:.2}", out as f64 / r.bytes.user as f64)
                        } else {
                            "–".into()
                        }
                    );
                }
            }
        }
        vlsm_lines(&mut s, &g);
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
