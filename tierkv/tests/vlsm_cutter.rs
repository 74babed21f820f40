//! Golden tests for the overlap-aware vSST cutter (vLSM §4.2.1): scripts
//! under `tierkv/testdata/*.cutter` build an L2 layout, feed a stream of
//! keys through [`VsstCutter`] and print the vSSTs it cuts — key range,
//! size, L2 overlap, ratio, good or poor — and the good/poor counts.
//!
//! Script format (as `picker_golden.rs`): a command line, input lines,
//! `----`, the expected output, a blank line.
//!
//! * `define sst=<SM> f=<f>` with input lines `L2: <lo>-<hi>:<size> ...`
//!   (user keys, sizes with K/M/G) sets the parameters and the L2 tables.
//! * `cut` with input lines `<first>..<last> <size per key>`: keys are a
//!   prefix and a number (`k0000..k0127` is 128 keys `k0000`, `k0001`, …,
//!   of the width of `<first>`), each adding `<size>` bytes to the open
//!   vSST. Lines must come in key order.
//!
//! Regenerate expected outputs with
//! `TIERKV_REGENERATE=1 cargo test --test vlsm_cutter`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tierkv::compaction::vsst::{VsstCutter, VsstParams};
use tierkv::compaction::Cutter;
use tierkv::key::{make_internal_key, Kind};
use tierkv::sst::TableCounters;
use tierkv::stats::Tier;
use tierkv::storage::mem::MemFs;
use tierkv::version::edit::{TableFormat, TableMeta};
use tierkv::version::{TableContext, TableHandle};

fn parse_size(s: &str) -> u64 {
    let (num, mult) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().expect("size") * mult
}

fn fmt_size(b: u64) -> String {
    if b == 0 {
        "0".into()
    } else if b & ((1 << 20) - 1) == 0 {
        format!("{}M", b >> 20)
    } else if b & ((1 << 10) - 1) == 0 {
        format!("{}K", b >> 10)
    } else {
        format!("{b}B")
    }
}

/// `k0012` → (`k`, 12, 4).
fn split_key(k: &str) -> (&str, u64, usize) {
    let digits = k.chars().rev().take_while(|c| c.is_ascii_digit()).count();
    let (prefix, num) = k.split_at(k.len() - digits);
    (prefix, num.parse().expect("numbered key"), digits)
}

struct Script {
    params: VsstParams,
    l2: Vec<Arc<TableHandle>>,
    ctx: Arc<TableContext>,
}

impl Script {
    fn new() -> Script {
        Script {
            params: VsstParams::new(8 << 20, 8),
            l2: Vec::new(),
            ctx: Arc::new(TableContext::new(
                Arc::new(MemFs::new()),
                PathBuf::from("/golden"),
                None,
                TableCounters::default(),
                true,
            )),
        }
    }

    fn run(&mut self, cmd: &str, input: &[&str]) -> String {
        let mut words = cmd.split_whitespace();
        let name = words.next().unwrap_or("");
        let args: Vec<(&str, &str)> = words.filter_map(|w| w.split_once('=')).collect();
        match name {
            "define" => {
                let mut sst = 8 << 20;
                let mut f = 8;
                for (k, v) in &args {
                    match *k {
                        "sst" => sst = parse_size(v),
                        "f" => f = v.parse().expect("f"),
                        other => panic!("unknown define option {other}"),
                    }
                }
                self.params = VsstParams::new(sst, f);
                self.l2.clear();
                for line in input {
                    let tables = line.strip_prefix("L2:").expect("L2: tables");
                    for (i, spec) in tables.split_whitespace().enumerate() {
                        let (range, size) = spec.split_once(':').expect("lo-hi:size");
                        let (lo, hi) = range.split_once('-').expect("lo-hi");
                        self.l2.push(TableHandle::new(
                            TableMeta {
                                id: i as u64 + 1,
                                tier: Tier::Ssd,
                                format: TableFormat::Sst,
                                size_bytes: parse_size(size),
                                smallest: make_internal_key(lo.as_bytes(), 1, Kind::Put),
                                largest: make_internal_key(hi.as_bytes(), 1, Kind::Put),
                                seq_min: 1,
                                seq_max: 1,
                                entries: 1,
                                deletions: 0,
                                pm_pages: Vec::new(),
                            },
                            Arc::clone(&self.ctx),
                        ));
                    }
                }
                let p = self.params;
                format!(
                    "Sm {} SM {} f {}, {} L2 tables, {}\n",
                    fmt_size(p.min_bytes),
                    fmt_size(p.max_bytes),
                    p.growth_factor,
                    self.l2.len(),
                    fmt_size(self.l2.iter().map(|t| t.meta.size_bytes).sum())
                )
            }
            "cut" => {
                let mut cutter = VsstCutter::new(&self.l2, self.params);
                let mut open: Option<u64> = None;
                // (first key, last key) of each vSST.
                let mut ranges: Vec<(String, String)> = Vec::new();
                for line in input {
                    let (keys, size) = line.split_once(' ').expect("<first>..<last> <size>");
                    let size = parse_size(size.trim());
                    let (first, last) = keys.split_once("..").expect("first..last");
                    let (prefix, a, width) = split_key(first);
                    let (_, b, _) = split_key(last);
                    for n in a..=b {
                        let k = format!("{prefix}{n:0width$}");
                        let ik = make_internal_key(k.as_bytes(), 9, Kind::Put);
                        if cutter.cut_before(&ik, open) || open.is_none() {
                            ranges.push((k.clone(), k.clone()));
                            open = Some(0);
                        }
                        if let Some(r) = ranges.last_mut() {
                            r.1 = k;
                        }
                        open = open.map(|o| o + size);
                    }
                }
                cutter.finish(open);
                let recs = cutter.records();
                assert_eq!(recs.len(), ranges.len());
                let mut s = String::new();
                let (mut good, mut good_bytes, mut poor, mut poor_bytes) = (0, 0, 0, 0);
                for (r, (lo, hi)) in recs.iter().zip(&ranges) {
                    let _ = writeln!(
                        s,
                        "[{lo}-{hi}] {} overlap {} ratio {:.2} {}",
                        fmt_size(r.size_bytes),
                        fmt_size(r.overlap_bytes),
                        r.overlap_bytes as f64 / r.size_bytes.max(1) as f64,
                        if r.good { "good" } else { "poor" }
                    );
                    if r.good {
                        good += 1;
                        good_bytes += r.size_bytes;
                    } else {
                        poor += 1;
                        poor_bytes += r.size_bytes;
                    }
                }
                let _ = writeln!(
                    s,
                    "good {good} ({}) poor {poor} ({})",
                    fmt_size(good_bytes),
                    fmt_size(poor_bytes)
                );
                s
            }
            other => panic!("unknown command {other}"),
        }
    }
}

fn run_file(path: &Path) {
    let text = std::fs::read_to_string(path).expect("read script");
    let regenerate = std::env::var_os("TIERKV_REGENERATE").is_some();
    let mut out = String::new();
    let mut script = Script::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    let mut failures = Vec::new();
    while i < lines.len() {
        let line = lines[i];
        if line.trim().is_empty() || line.starts_with('#') {
            out.push_str(line);
            out.push('\n');
            i += 1;
            continue;
        }
        let cmd = line;
        let mut input = Vec::new();
        i += 1;
        while i < lines.len() && lines[i] != "----" {
            input.push(lines[i]);
            i += 1;
        }
        i += 1; // ----
        let mut expected = String::new();
        while i < lines.len() && !lines[i].is_empty() {
            expected.push_str(lines[i]);
            expected.push('\n');
            i += 1;
        }
        let got = script.run(cmd, &input);
        if got != expected {
            failures.push(format!("{cmd}\nexpected:\n{expected}got:\n{got}"));
        }
        out.push_str(cmd);
        out.push('\n');
        for l in &input {
            out.push_str(l);
            out.push('\n');
        }
        out.push_str("----\n");
        out.push_str(&got);
    }
    if regenerate {
        std::fs::write(path, out).expect("write script");
    } else if !failures.is_empty() {
        panic!(
            "{}: {} case(s) differ (TIERKV_REGENERATE=1 rewrites them):\n{}",
            path.display(),
            failures.len(),
            failures.join("\n")
        );
    }
}

#[test]
fn golden_vsst_cutter() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("testdata") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "cutter") {
            run_file(&p);
            n += 1;
        }
    }
    assert!(n > 0, "no .cutter scripts in {}", dir.display());
}
