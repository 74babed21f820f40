//! Golden tests for pickers and write controllers: scripts under
//! `tierkv/testdata/*.picker` describe LSM shapes and the expected choices.
//! Pickers are pure, so no I/O happens here.
//!
//! Script format (pebble's datadriven style): a command line, optional input
//! lines, `----`, the expected output, a blank line.
//!
//! ```text
//! define l0_trigger=4 l1=256M mult=10 sst=64M
//! L0: a-c@10 b-d@20
//! L1: a-b:200M c-e:100M
//! ----
//! L0: #1[a-c]@10 #2[b-d]@20
//! ...
//!
//! pick
//! ----
//! l0-l1: L0 #2,#1 + L1 #3,#4 -> L1
//! ```
//!
//! Commands: `define [opts]` (tables `smallest-largest[@seq][:size]`,
//! sizes with K/M/G; default size 64M; `design=<preset>` picks the design,
//! default classic), `pick`, `busy <id,...>`, `apply` (replace the last
//! pick's inputs by one output table per key-connected group of inputs at
//! the output level), `write-control [imm=N]`, `flush-blocked`, `debt`,
//! `l1` (each L1 table's L2 overlap, ratio and vSST class).
//!
//! `define` options: `l0_trigger`, `l0_slowdown`, `l0_stop`, `l1`, `mult`,
//! `sst`, `levels`, `soft`, `hard`, `design`, and for vLSM `f`, `phi`,
//! `l0_max`, `l0_batch`, `l1_size`, `vsst=on|off`.
//! Regenerate expected outputs with `TIERKV_REGENERATE=1 cargo test --test picker_golden`.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use tierkv::compaction::vsst::VsstParams;
use tierkv::design::{Design, Task, TaskKind};
use tierkv::key::{make_internal_key, Kind};
use tierkv::sst::TableCounters;
use tierkv::stats::Tier;
use tierkv::storage::mem::MemFs;
use tierkv::version::edit::{TableFormat, TableMeta};
use tierkv::version::{TableContext, TableHandle, Version};
use tierkv::{Options, Preset};

struct Script {
    design: Arc<dyn Design>,
    opts: Options,
    version: Version,
    busy: HashSet<u64>,
    last: Option<Task>,
    next_id: u64,
    ctx: Arc<TableContext>,
}

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
    if b >= 1 << 30 && b % (1 << 30) == 0 {
        format!("{}G", b >> 30)
    } else if b >= 1 << 20 {
        format!("{}M", b >> 20)
    } else {
        format!("{}K", b >> 10)
    }
}

impl Script {
    fn new() -> Script {
        Script {
            design: tierkv::design::build(&Options::default(), None).expect("classic"),
            opts: Options::default(),
            version: Version::empty(7),
            busy: HashSet::new(),
            last: None,
            next_id: 1,
            ctx: Arc::new(TableContext {
                fs: Arc::new(MemFs::new()),
                dir: PathBuf::from("/golden"),
                cache: None,
                counters: TableCounters::default(),
                verify_checksums: true,
                pm_opener: Default::default(),
                obsolete: Mutex::new(Vec::new()),
            }),
        }
    }

    fn table(&mut self, spec: &str) -> Arc<TableHandle> {
        let (range, size) = match spec.split_once(':') {
            Some((r, s)) => (r, parse_size(s)),
            None => (spec, 64 << 20),
        };
        let (range, seq) = match range.split_once('@') {
            Some((r, s)) => (r, s.parse::<u64>().expect("seq")),
            None => (range, self.next_id * 10),
        };
        let (lo, hi) = range.split_once('-').expect("range a-b");
        let id = self.next_id;
        self.next_id += 1;
        TableHandle::new(
            TableMeta {
                id,
                tier: Tier::Ssd,
                format: TableFormat::Sst,
                size_bytes: size,
                smallest: make_internal_key(lo.as_bytes(), seq, Kind::Put),
                largest: make_internal_key(hi.as_bytes(), seq, Kind::Put),
                seq_min: seq,
                seq_max: seq,
                entries: 1,
                deletions: 0,
                pm_pages: Vec::new(),
            },
            Arc::clone(&self.ctx),
        )
    }

    fn show_version(&self) -> String {
        let mut s = String::new();
        for (l, tables) in self.version.levels.iter().enumerate() {
            if tables.is_empty() {
                continue;
            }
            let _ = write!(s, "L{l}:");
            for t in tables {
                let _ = write!(
                    s,
                    " #{}[{}-{}]@{}:{}",
                    t.meta.id,
                    String::from_utf8_lossy(t.smallest_user_key()),
                    String::from_utf8_lossy(t.largest_user_key()),
                    t.meta.seq_max,
                    fmt_size(t.meta.size_bytes)
                );
            }
            s.push('\n');
        }
        if s.is_empty() {
            s.push_str("empty\n");
        }
        s
    }

    fn show_task(t: &Task) -> String {
        let mut s = format!("{}:", t.kind.name());
        for (i, (l, tables)) in t.inputs.iter().enumerate() {
            if tables.is_empty() {
                continue;
            }
            let ids: Vec<String> = tables.iter().map(|t| format!("#{}", t.meta.id)).collect();
            let _ = write!(
                s,
                "{} L{l} {}",
                if i == 0 { "" } else { " +" },
                ids.join(",")
            );
        }
        let _ = write!(s, " -> L{}", t.output_level);
        if !t.grandparents.is_empty() {
            let ids: Vec<String> = t
                .grandparents
                .iter()
                .map(|t| format!("#{}", t.meta.id))
                .collect();
            let _ = write!(s, " (grandparents {})", ids.join(","));
        }
        s.push('\n');
        s
    }

    fn run(&mut self, cmd: &str, input: &[&str]) -> String {
        let mut words = cmd.split_whitespace();
        let name = words.next().unwrap_or("");
        let args: Vec<(&str, &str)> = words.filter_map(|w| w.split_once('=')).collect();
        match name {
            "define" => {
                let mut o = Options::default();
                for (k, v) in &args {
                    match *k {
                        "l0_trigger" => o.l0_compaction_trigger = v.parse().expect("n"),
                        "l0_slowdown" => o.l0_slowdown_trigger = v.parse().expect("n"),
                        "l0_stop" => o.l0_stop_trigger = v.parse().expect("n"),
                        "l1" => o.l1_size_bytes = parse_size(v),
                        "mult" => o.level_size_multiplier = v.parse().expect("n"),
                        "sst" => o.sst_size_bytes = parse_size(v),
                        "levels" => o.level_count = v.parse().expect("n"),
                        "soft" => o.pending_compaction_bytes_soft = parse_size(v),
                        "hard" => o.pending_compaction_bytes_hard = parse_size(v),
                        "design" => o.design = Preset::from_name(v).expect("preset"),
                        "f" => o.vlsm_growth_factor = v.parse().expect("n"),
                        "phi" => o.vlsm_phi = v.parse().expect("n"),
                        "l0_max" => o.vlsm_l0_max_ssts = v.parse().expect("n"),
                        "l0_batch" => o.vlsm_l0_batch_ssts = v.parse().expect("n"),
                        "l1_size" => o.vlsm_l1_size_bytes = Some(parse_size(v)),
                        "vsst" => o.vsst = Some(*v == "on"),
                        other => panic!("unknown define option {other}"),
                    }
                }
                self.design = tierkv::design::build(&o, None).expect("design");
                self.opts = o.clone();
                self.version = Version::empty(o.level_count);
                self.busy.clear();
                self.next_id = 1;
                for line in input {
                    let (level, tables) = line.split_once(':').expect("L<n>: tables");
                    let level: usize = level.trim().trim_start_matches('L').parse().expect("level");
                    for spec in tables.split_whitespace() {
                        let t = self.table(spec);
                        self.version.levels[level].push(t);
                    }
                }
                self.resort();
                self.show_version()
            }
            "pick" => match self.design.pick(&self.version, &self.busy) {
                Some(t) => {
                    let s = Self::show_task(&t);
                    self.last = Some(t);
                    s
                }
                None => {
                    self.last = None;
                    "none\n".into()
                }
            },
            "busy" => {
                self.busy = input
                    .iter()
                    .chain(args.iter().map(|(_, v)| v))
                    .flat_map(|l| l.split(','))
                    .filter_map(|id| id.trim().trim_start_matches('#').parse().ok())
                    .collect();
                format!("{} busy\n", self.busy.len())
            }
            "apply" => {
                let Some(task) = self.last.take() else {
                    return "nothing picked\n".into();
                };
                // Inputs joined into groups while their key ranges meet.
                let mut all: Vec<Arc<TableHandle>> = Vec::new();
                for (l, tables) in &task.inputs {
                    for t in tables {
                        all.push(Arc::clone(t));
                        self.version.levels[*l].retain(|x| x.meta.id != t.meta.id);
                    }
                }
                all.sort_by(|a, b| a.smallest_user_key().cmp(b.smallest_user_key()));
                let mut groups: Vec<(Vec<u8>, Vec<u8>, u64, u64)> = Vec::new();
                for t in &all {
                    let (lo, hi) = (t.smallest_user_key(), t.largest_user_key());
                    match groups.last_mut() {
                        Some(g) if lo <= g.1.as_slice() => {
                            if hi > g.1.as_slice() {
                                g.1 = hi.to_vec();
                            }
                            g.2 += t.meta.size_bytes;
                            g.3 = g.3.max(t.meta.seq_max);
                        }
                        _ => groups.push((
                            lo.to_vec(),
                            hi.to_vec(),
                            t.meta.size_bytes,
                            t.meta.seq_max,
                        )),
                    }
                }
                if task.kind == TaskKind::TrivialMove {
                    for t in all {
                        self.version.levels[task.output_level].push(t);
                    }
                } else {
                    for (lo, hi, bytes, seq) in groups {
                        let spec = format!(
                            "{}-{}@{seq}:{bytes}",
                            String::from_utf8_lossy(&lo),
                            String::from_utf8_lossy(&hi),
                        );
                        let t = self.table(&spec);
                        self.version.levels[task.output_level].push(t);
                    }
                }
                self.resort();
                self.show_version()
            }
            "flush-blocked" => format!("{:?}\n", self.design.flush_blocked(&self.version)),
            "l1" => {
                let p = VsstParams::new(self.opts.sst_size_bytes, self.opts.vlsm_growth_factor);
                let mut s = String::new();
                for t in &self.version.levels[1] {
                    let overlap: u64 = self
                        .version
                        .overlapping(2, Some(t.smallest_user_key()), Some(t.largest_user_key()))
                        .iter()
                        .map(|o| o.meta.size_bytes)
                        .sum();
                    let _ = writeln!(
                        s,
                        "#{} {} overlap {} ratio {:.2} {}",
                        t.meta.id,
                        fmt_size(t.meta.size_bytes),
                        fmt_size(overlap),
                        overlap as f64 / t.meta.size_bytes.max(1) as f64,
                        if p.is_good(t.meta.size_bytes, overlap) {
                            "good"
                        } else {
                            "poor"
                        }
                    );
                }
                if s.is_empty() {
                    s.push_str("empty\n");
                }
                s
            }
            "write-control" => {
                let imm = args
                    .iter()
                    .find(|(k, _)| *k == "imm")
                    .map_or(0, |(_, v)| v.parse().expect("n"));
                format!("{:?}\n", self.design.write_control(&self.version, imm))
            }
            "debt" => format!("{}\n", self.design.debt(&self.version)),
            other => panic!("unknown command {other}"),
        }
    }

    fn resort(&mut self) {
        self.version.levels[0].sort_by(|a, b| b.meta.seq_max.cmp(&a.meta.seq_max));
        for l in self.version.levels.iter_mut().skip(1) {
            l.sort_by(|a, b| a.smallest_user_key().cmp(b.smallest_user_key()));
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
fn golden_pickers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("testdata") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "picker") {
            run_file(&p);
            n += 1;
        }
    }
    assert!(n > 0, "no .picker scripts in {}", dir.display());
}
