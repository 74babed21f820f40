//! db_bench's output format, so that our lines and RocksDB's `db_bench`
//! lines compare one for one:
//!
//! ```text
//! fillrandom   :      32.055 micros/op 31194 ops/sec 0.641 seconds 20000 operations;  122.3 MB/s
//! Microseconds per write:
//! Count: 20000 Average: 32.3815  StdDev: 290.27
//! Min: 10  Median: 14.2472  Max: 14988
//! Percentiles: P50: 14.25 P75: 18.23 P99: 71.00 P99.9: 4246.94 P99.99: 9350.00
//! ------------------------------------------------------
//! (      10,      15 ]    11643  58.215%  58.765% ############
//! ```
//!
//! `micros/op` is the sum of the threads' busy time per operation and
//! `ops/sec` the operations over wall time, as in db_bench. Percentiles come
//! from an HdrHistogram (db_bench interpolates within its buckets); the
//! bucket rows use db_bench's bucket limits (1, 2, 3, 4, 6, 10, 15, 22, …:
//! ×1.5, two significant digits).

use std::fmt::Write as _;

use crate::metrics::Record;
use crate::report::{fmt_count, fmt_us};
use crate::runner::{Hist, Measured};

/// The summary line of one benchmark.
pub fn summary_line(name: &str, m: &Measured) -> String {
    let t = &m.tally;
    let ops = t.ops.max(1);
    let micros_per_op = m.thread_seconds * 1e6 / ops as f64;
    let ops_per_sec = t.ops as f64 / m.seconds;
    let mut extra = String::new();
    if t.bytes > 0 {
        let _ = write!(extra, "{:6.1} MB/s", t.bytes as f64 / 1048576.0 / m.seconds);
    }
    if t.reads > 0 && t.reads == t.ops && !name.starts_with("readseq") && !name.starts_with("seek")
    {
        let _ = write!(extra, " ({} of {} found)", t.found, t.reads);
    }
    if let Some(rate) = m.rate {
        let _ = write!(extra, " [open loop at {rate:.0} ops/sec]");
    }
    format!(
        "{:<12} : {:>11.3} micros/op {} ops/sec {:.3} seconds {} operations;{}{}",
        name,
        micros_per_op,
        ops_per_sec as i64,
        m.seconds,
        t.ops,
        if extra.is_empty() { "" } else { " " },
        extra
    )
}

/// The client's stall figures of a record (metrics rule 3) as a line under
/// the summary line, in the same column layout; `None` when the benchmark
/// wrote nothing. E.g.
///
/// ```text
/// fillrandom   : stall (client): longest write 8.10 ms; writes > 1/10/100 ms: 12/0/0; in writes > 1 ms 0.3% of the run; per second min 31k median 45k ops
/// fillrandom   : stall (engine's own): paced 1203 writes, 2.41 s; 2 stalls, 0.04 s; longest 31.2 ms pm-full at 5.3 s, 8.1 ms memtable-full at 9.0 s
/// ```
///
/// The second line where the engine keeps its own stalls (tierkv) or
/// counts them by cause (RocksDB: `... : stall (engine's own): 3 stalls,
/// 0.41 s; by cause memtable_compaction 2, level0_numfiles 1`).
pub fn stall_line(name: &str, r: &Record) -> Option<String> {
    let s = &r.stall;
    let rs = &r.read_stall;
    let reads = (rs.reads > 0).then(|| {
        format!(
            "{:<12} : reads (client): longest read {}; P99.9 {} P99.99 {}; reads > 1/10/100 ms: {}/{}/{}{}",
            name,
            fmt_us(rs.read_seconds_max * 1e6),
            fmt_us(rs.p999_us),
            fmt_us(rs.p9999_us),
            rs.reads_over_1ms,
            rs.reads_over_10ms,
            rs.reads_over_100ms,
            r.quiesce_seconds
                .map_or(String::new(), |q| format!("; quiesced after {q:.1} s"))
        )
    });
    if s.writes == 0 {
        return reads;
    }
    let mut line = format!(
        "{:<12} : stall (client): longest write {}; writes > 1/10/100 ms: {}/{}/{}; in writes > 1 ms {:.1}% of the run; per second min {} median {} ops",
        name,
        fmt_us(s.write_seconds_max * 1e6),
        s.writes_over_1ms,
        s.writes_over_10ms,
        s.writes_over_100ms,
        s.slow_write_time_percent,
        fmt_count(s.second_ops_min),
        fmt_count(s.second_ops_median)
    );
    let es = &r.engine_stall;
    if es.paced_writes > 0 || !es.longest.is_empty() || !es.causes.is_empty() {
        let mut parts = Vec::new();
        if r.engine != "rocksdb" {
            parts.push(format!(
                "paced {} writes, {:.2} s",
                es.paced_writes, es.paced_seconds
            ));
        }
        parts.push(format!("{} stalls, {:.2} s", es.count, es.seconds));
        if !es.longest.is_empty() {
            let longest: Vec<String> = es
                .longest
                .iter()
                .map(|l| format!("{} {} at {:.1} s", fmt_us(l.seconds * 1e6), l.cause, l.at_s))
                .collect();
            parts.push(format!("longest {}", longest.join(", ")));
        } else if !es.causes.is_empty() {
            let counts: Vec<String> = es
                .causes
                .iter()
                .map(|c| format!("{} {}", c.cause, c.count))
                .collect();
            parts.push(format!("by cause {}", counts.join(", ")));
        }
        let _ = write!(
            line,
            "\n{:<12} : stall (engine's own): {}",
            name,
            parts.join("; ")
        );
    }
    if let Some(st) = &r.steady {
        let _ = write!(
            line,
            "\n{:<12} : steady state after {} warm-up ops ({}); debt at start: worst level {:.2}× target, {:.0} MiB over; at end: {}",
            name,
            st.warmup_ops,
            st.settled,
            st.debt_start.ratio_max,
            st.debt_start.over_bytes as f64 / 1048576.0,
            r.debt.as_ref().map_or("?".to_string(), |d| format!(
                "{:.2}×, {:.0} MiB over",
                d.ratio_max,
                d.over_bytes as f64 / 1048576.0
            ))
        );
    }
    if let Some(reads) = reads {
        line.push('\n');
        line.push_str(&reads);
    }
    Some(line)
}

/// db_bench's histogram bucket limits, in microseconds.
pub fn bucket_limits() -> Vec<u64> {
    let mut v: Vec<u64> = vec![1, 2];
    let mut x = 2.0f64;
    loop {
        x *= 1.5;
        if x > 1e13 {
            break;
        }
        let mut b = x as u64;
        let mut pow = 1u64;
        while b / 10 > 10 {
            b /= 10;
            pow *= 10;
        }
        v.push(b * pow);
    }
    v
}

/// db_bench's histogram block for one operation type (`what` = `write`,
/// `read`): header lines, percentiles, and the non-empty buckets.
pub fn histogram_text(what: &str, h: &Hist) -> String {
    let mut s = String::new();
    let us = |ns: u64| ns as f64 / 1e3;
    let _ = writeln!(s, "Microseconds per {what}:");
    let _ = writeln!(
        s,
        "Count: {} Average: {:.4}  StdDev: {:.2}",
        h.len(),
        h.mean() / 1e3,
        h.stdev() / 1e3
    );
    let _ = writeln!(
        s,
        "Min: {}  Median: {:.4}  Max: {}",
        (us(h.min())) as u64,
        us(h.value_at_quantile(0.5)),
        (us(h.max())) as u64
    );
    let _ = writeln!(
        s,
        "Percentiles: P50: {:.2} P75: {:.2} P99: {:.2} P99.9: {:.2} P99.99: {:.2}",
        us(h.value_at_quantile(0.5)),
        us(h.value_at_quantile(0.75)),
        us(h.value_at_quantile(0.99)),
        us(h.value_at_quantile(0.999)),
        us(h.value_at_quantile(0.9999))
    );
    let _ = writeln!(s, "------------------------------------------------------");
    let total = h.len().max(1) as f64;
    let mut cum = 0u64;
    let mut left = 0u64;
    for (b, right) in bucket_limits().into_iter().enumerate() {
        // db_bench truncates to whole microseconds: (left, right] holds
        // left+1 ..= right µs.
        let lo_ns = if b == 0 { 0 } else { (left + 1) * 1000 };
        let n = if lo_ns > h.max() {
            0
        } else {
            h.count_between(lo_ns, right * 1000 + 999)
        };
        if n > 0 {
            cum += n;
            let pct = 100.0 * n as f64 / total;
            let _ = writeln!(
                s,
                "{} {:>7}, {:>7} ] {:>8} {:>7.3}% {:>7.3}% {}",
                if b == 0 { '[' } else { '(' },
                left,
                right,
                n,
                pct,
                100.0 * cum as f64 / total,
                "#".repeat((pct / 5.0 + 0.5) as usize)
            );
        }
        left = right;
        if cum >= h.len() {
            break;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{new_hist, Tally};

    #[test]
    fn bucket_limits_match_db_bench() {
        let b = bucket_limits();
        assert_eq!(
            &b[..24],
            &[
                1, 2, 3, 4, 6, 10, 15, 22, 34, 51, 76, 110, 170, 250, 380, 580, 870, 1300, 1900,
                2900, 4400, 6600, 9900, 14000
            ]
        );
    }

    #[test]
    fn summary_line_has_db_bench_format() {
        let mut t = Tally::new();
        t.ops = 1_000_000;
        t.bytes = 1_000_000 * 4112;
        let m = Measured {
            tally: t,
            seconds: 25.718,
            thread_seconds: 25.715,
            open_loop: false,
            rate: None,
            generator_cpu_seconds: 0.0,
            origin_monotonic_ns: 0,
        };
        assert_eq!(
            summary_line("fillrandom", &m),
            "fillrandom   :      25.715 micros/op 38883 ops/sec 25.718 seconds 1000000 operations;  152.5 MB/s"
        );
    }

    #[test]
    fn histogram_block() {
        let mut h = new_hist();
        for v in [12_000u64, 14_000, 20_000, 5_000_000] {
            h.record(v).unwrap_or(());
        }
        let s = histogram_text("write", &h);
        assert!(s.starts_with("Microseconds per write:\nCount: 4 Average: "));
        assert!(s.contains("Percentiles: P50: "));
        assert!(
            s.contains("(      10,      15 ]        2  50.000%  50.000% ##########"),
            "{s}"
        );
        assert!(
            s.contains("(    4400,    6600 ]        1  25.000% 100.000% #####"),
            "{s}"
        );
    }
}
