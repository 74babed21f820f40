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
//!
//! PM container designs (`define design=triangle` or `design=matrix`, with
//! `pm=` the simulated PM tier, `mem=` the memtable size, `limit=` the
//! container limit): L0 tables are real RowTables built in the simulated
//! region, `lo-hi[*count][@seq][:bytes]` — `count` keys (default 8) of the
//! length of `lo`, evenly spaced from `lo` to `hi` in base 26, holding
//! `bytes` of values in all (default 64K), seqnos up to `seq`, built
//! oldest first with forward pointers into the previous row. `apply` of a
//! side applies the design's own container edit (consumed range, freed
//! extents, deleted rows) and replaces the L1 inputs by one table;
//! `row <spec>` flushes one more row on top of L0.
//! TLSM (`define design=tlsm`, with `policy=leveled|lru|none`,
//! `threshold=`, `variant=ps|ps_bac|full`, `cap=` the LRU capacity,
//! `cf=` the copy-forward live ratio in percent): a table spec ending in
//! `/pm` is a persistent skip list (its metadata only: the picker never
//! opens a list); `refs` registers lists' data runs in the design's
//! reference index, one line per list: `#id own=<bytes> <first>+<pages>:<bytes> ...`,
//! and `release` (one `#id` a line) unregisters lists as the engine's
//! release would;
//! `pick free=<bytes> cap=<bytes>` gives the picker the PM tier's figures;
//! `apply` of a TLSM task writes skip lists where the job would (link and
//! copy compactions, copy-forwards), SSTs elsewhere, and an evicted list
//! becomes an SST at its level.
//!
//! RangeKV (`define design=rangetab rt=N cap=SIZE bounds=k1,k2,...`, and
//! `beta=`, `alpha=`, `mu=`, `gamma=`, `faithful=1` for the paper's
//! picker as written): L0 tables are buffer tables
//! `r.slot:state:bytes:lo-hi[@seq]` (state `write` or `sealed`; buffers
//! not listed are init; within a RangeTab the buffer with the larger seq
//! is the younger). Only metadata and state records: the picker reads no
//! PM. `pick rate=R peak=P flushing=1 gen=G` gives the load figures, a
//! flush in flight and the version generation (step 3's seed); `apply` of
//! a RangeTab merge also resets the merged buffers to init.
//!
//! NV-Cache (`define design=nvcache`, with `pm=`, `mem=`, `cache=` the
//! cache budget, `pm_levels=`): tables of the PM levels (L0..=K) are
//! NVTable metadata, `lo-hi[@seq][:size][/s1+s2+…]` — the named segments
//! (`sN` is a 64-page run, shared by every table that names it) after the
//! table's own one-page array run; the picker reads nothing else. `nv`
//! prints K, the cache budget and the cache's allocated and live bytes;
//! `pick free=SIZE` passes the free PM the engine would see; `apply` of a
//! task into a PM level makes one NVTable per key-connected group listing
//! every segment its inputs listed (a list compaction moves nodes, not
//! data), and into SSD one SST.
//! Regenerate expected outputs with `TIERKV_REGENERATE=1 cargo test --test picker_golden`.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tierkv::compaction::vsst::VsstParams;
use tierkv::design::container::rowtable::{self, BuildParams, PageSource, RowTable};
use tierkv::design::container::{side_edit, victim_windows, Container, ContainerState, SidePlan};
use tierkv::design::matrix::Matrix;
use tierkv::design::nvcache::NvCache;
use tierkv::design::rangetab::layout::{
    buffer_tag, BufferRecord, Layout, RtView, Source, State, LAYOUT_TAG,
};
use tierkv::design::rangetab::picker::{average_ratio, MergePlan};
use tierkv::design::rangetab::RangeTab;
use tierkv::design::tlsm::format::DataRef;
use tierkv::design::tlsm::picker as tlsm_picker;
use tierkv::design::tlsm::refs::ListRefs;
use tierkv::design::tlsm::Tlsm;
use tierkv::design::triangle::Triangle;
use tierkv::design::{Design, PickContext, Task, TaskKind};
use tierkv::key::{make_internal_key, Kind};
use tierkv::memtable::MemTable;
use tierkv::sst::TableCounters;
use tierkv::stats::Tier;
use tierkv::storage::alloc::PageRun;
use tierkv::storage::mem::MemFs;
use tierkv::storage::pm::PmTier;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::version::edit::{TableFormat, TableMeta};
use tierkv::version::{TableContext, TableHandle, Version};
use tierkv::{Options, Preset};

/// A PM container design under test.
enum PmDesign {
    Triangle(Arc<Triangle>),
    Matrix(Arc<Matrix>),
}

impl PmDesign {
    fn container(&self) -> &Container {
        match self {
            PmDesign::Triangle(t) => t.container(),
            PmDesign::Matrix(m) => m.container(),
        }
    }
}

struct Pm {
    design: PmDesign,
    tier: Arc<PmTier>,
}

struct Pages<'a>(&'a PmTier);

impl PageSource for Pages<'_> {
    fn alloc(&self, want: u64, min: u64) -> tierkv::Result<PageRun> {
        let mut n = want;
        loop {
            if let Some(r) = self.0.allocator().alloc(n)? {
                return Ok(r);
            }
            assert!(n > min, "simulated PM tier full");
            n = (n / 2).max(min);
        }
    }
    fn free(&self, run: PageRun) -> tierkv::Result<()> {
        self.0.free_pages(run)
    }
}

struct Script {
    design: Arc<dyn Design>,
    /// The TLSM design under test, if any.
    tlsm: Option<Arc<Tlsm>>,
    opts: Options,
    pm: Option<Pm>,
    version: Version,
    busy: HashSet<u64>,
    last: Option<Task>,
    next_id: u64,
    ctx: Arc<TableContext>,
    /// The RangeTab layout of a `design=rangetab` script.
    rt: Option<Arc<Layout>>,
    /// NV-Cache under test (its PM levels hold NVTable metadata).
    nv: Option<Arc<NvCache>>,
}

/// Base-26 value of a lowercase key.
fn key_value(k: &str) -> u64 {
    k.bytes().fold(0, |v, b| v * 26 + u64::from(b - b'a'))
}

/// A user key for display: printable ASCII as is, other bytes as `\xNN`.
fn show_key(k: &[u8]) -> String {
    k.iter()
        .map(|&b| {
            if b.is_ascii_graphic() {
                (b as char).to_string()
            } else {
                format!("\\x{b:02x}")
            }
        })
        .collect()
}

fn key_of(mut v: u64, len: usize) -> String {
    let mut b = vec![b'a'; len];
    for c in b.iter_mut().rev() {
        *c = b'a' + (v % 26) as u8;
        v /= 26;
    }
    String::from_utf8(b).expect("ascii")
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
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
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
            tlsm: None,
            opts: Options::default(),
            pm: None,
            version: Version::empty(7),
            busy: HashSet::new(),
            last: None,
            next_id: 1,
            ctx: Self::fresh_ctx(),
            rt: None,
            nv: None,
        }
    }

    /// A RangeTab buffer table `r.slot:state:bytes:lo-hi[@seq]`; records
    /// its state (order from the seqno: set by `order_buffers`).
    fn rt_table(&mut self, spec: &str) -> Arc<TableHandle> {
        let layout = Arc::clone(self.rt.as_ref().expect("rangetab layout"));
        let mut f = spec.split(':');
        let (r, slot) = f
            .next()
            .and_then(|b| b.split_once('.'))
            .map(|(r, s)| (r.parse::<u32>().expect("r"), s.parse::<u8>().expect("slot")))
            .expect("r.slot");
        let state = match f.next().expect("state") {
            "write" => State::Write,
            "sealed" => State::Sealed,
            other => panic!("buffer state {other}"),
        };
        let size = parse_size(f.next().expect("bytes"));
        let range = f.next().expect("lo-hi");
        let (range, seq) = match range.split_once('@') {
            Some((r, q)) => (r, q.parse::<u64>().expect("seq")),
            None => (range, self.next_id * 10),
        };
        let (lo, hi) = range.split_once('-').expect("range a-b");
        let id = self.next_id;
        self.next_id += 1;
        let rec = BufferRecord {
            state,
            order: seq,
            chunks: 1,
        };
        self.version
            .design_state
            .insert(buffer_tag(r, slot), rec.encode());
        TableHandle::new(
            TableMeta {
                id,
                tier: Tier::Pm,
                format: TableFormat::RangeTab,
                size_bytes: size,
                smallest: make_internal_key(lo.as_bytes(), seq, Kind::Put),
                largest: make_internal_key(hi.as_bytes(), seq, Kind::Put),
                seq_min: seq,
                seq_max: seq,
                entries: 1,
                deletions: 0,
                pm_pages: vec![layout.run(r, slot)],
            },
            Arc::clone(&self.ctx),
        )
    }

    fn show_rangetabs(&self) -> String {
        let Some(layout) = &self.rt else {
            return String::new();
        };
        let rt = match RtView::of(&self.version, Arc::clone(layout)) {
            Ok(rt) => rt,
            Err(e) => return format!("rangetabs: {e}\n"),
        };
        let mut s = String::from("rangetabs:");
        for r in 0..layout.count {
            let bufs: Vec<String> = rt
                .pair(r)
                .iter()
                .map(|b| match b.rec.state {
                    State::Init => "-".to_string(),
                    State::Write => format!("W{}", fmt_size(b.used())),
                    State::Sealed => format!("S{}", fmt_size(b.used())),
                })
                .collect();
            let _ = write!(s, " {r}[{}]", bufs.join(" "));
        }
        let _ = writeln!(s, " avg={:.2}", average_ratio(&rt));
        s
    }

    /// True if `level` holds NVTables (NV-Cache's PM levels).
    fn nv_level(&self, level: usize) -> bool {
        self.nv
            .as_ref()
            .is_some_and(|d| level <= d.shape().lowest_pm)
    }

    /// An NVTable's metadata from `lo-hi[@seq][:size][/s1+s2+…]`.
    fn nv_table(&mut self, spec: &str) -> Arc<TableHandle> {
        let (spec, segs) = match spec.split_once('/') {
            Some((t, s)) => (t, s),
            None => (spec, ""),
        };
        let t = self.table(spec);
        let mut meta = t.meta.clone();
        drop(t);
        meta.tier = Tier::Pm;
        meta.format = TableFormat::NvTable;
        meta.entries = (meta.size_bytes / 1024).max(1);
        meta.pm_pages = vec![PageRun {
            first: 100_000 + meta.id,
            count: 1,
        }];
        for seg in segs.split('+').filter(|s| !s.is_empty()) {
            let n: u64 = seg.trim_start_matches('s').parse().expect("segment sN");
            meta.pm_pages.push(PageRun {
                first: 1000 + 64 * n,
                count: 64,
            });
        }
        TableHandle::new(meta, Arc::clone(&self.ctx))
    }

    fn segment_names(t: &TableHandle) -> String {
        t.meta.pm_pages[1..]
            .iter()
            .map(|r| format!("s{}", (r.first - 1000) / 64))
            .collect::<Vec<_>>()
            .join("+")
    }

    fn fresh_ctx() -> Arc<TableContext> {
        Arc::new(TableContext::new(
            Arc::new(MemFs::new()),
            PathBuf::from("/golden"),
            None,
            TableCounters::default(),
            true,
        ))
    }

    fn table(&mut self, spec: &str) -> Arc<TableHandle> {
        let (spec, pm) = match spec.strip_suffix("/pm") {
            Some(s) => (s, true),
            None => (spec, false),
        };
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
        let (tier, format, pm_pages) = if pm {
            // A list's own runs (header and nodes): unique per id.
            let run = PageRun {
                first: 1_000_000 + id * 16,
                count: 1,
            };
            (Tier::Pm, TableFormat::PmSkipList, vec![run])
        } else {
            (Tier::Ssd, TableFormat::Sst, Vec::new())
        };
        TableHandle::new(
            TableMeta {
                id,
                tier,
                format,
                size_bytes: size,
                smallest: make_internal_key(lo.as_bytes(), seq, Kind::Put),
                largest: make_internal_key(hi.as_bytes(), seq, Kind::Put),
                seq_min: seq,
                seq_max: seq,
                entries: 1,
                deletions: 0,
                pm_pages,
            },
            Arc::clone(&self.ctx),
        )
    }

    /// A RowTable built from `lo-hi[*count][@seq][:bytes]` with forward
    /// pointers into `pred`.
    fn row(&mut self, spec: &str, pred: Option<&RowTable>) -> Arc<TableHandle> {
        let (spec, bytes) = match spec.split_once(':') {
            Some((r, s)) => (r, parse_size(s)),
            None => (spec, 64 << 10),
        };
        let (spec, seq) = match spec.split_once('@') {
            Some((r, s)) => (r, s.parse::<u64>().expect("seq")),
            None => (spec, self.next_id * 100),
        };
        let (range, count) = match spec.split_once('*') {
            Some((r, c)) => (r, c.parse::<u64>().expect("count")),
            None => (spec, 8),
        };
        let (lo, hi) = range.split_once('-').expect("range a-b");
        assert_eq!(lo.len(), hi.len(), "row keys of one length");
        let (a, b) = (key_value(lo), key_value(hi));
        let mem = Arc::new(MemTable::new(0));
        let vlen = (bytes / count) as usize;
        for i in 0..count {
            let k = key_of(a + (b - a) * i / (count - 1).max(1), lo.len());
            mem.add(
                seq - count + 1 + i,
                Kind::Put,
                k.as_bytes(),
                &vec![b'v'; vlen],
            );
        }
        let pm = self.pm.as_ref().expect("PM design");
        let c = pm.design.container();
        let built = rowtable::build(
            &BuildParams {
                region: pm.tier.region(),
                pages: &Pages(&pm.tier),
                extent_pages: c.cfg.extent_pages,
                pred,
                entries_hint: count as usize,
                key_bytes_hint: 0,
            },
            &mut mem.iter(),
        )
        .expect("build row");
        let id = self.next_id;
        self.next_id += 1;
        TableHandle::new(built.into_meta(id), Arc::clone(&self.ctx))
    }

    fn show_container(&self) -> String {
        let Some(pm) = &self.pm else {
            return String::new();
        };
        let st = match ContainerState::of(&self.version) {
            Ok(st) => st,
            Err(e) => return format!("container: {e}\n"),
        };
        let mut s = String::from("container:");
        if let Some(c) = &st.cursor {
            let _ = write!(s, " cursor={}", show_key(c));
        }
        if st.compactor_seq > 0 {
            let _ = write!(s, " compactor<={}", st.compactor_seq);
        }
        for (i, step) in st.steps.iter().enumerate() {
            if step.through == 0 {
                continue;
            }
            let end = st
                .steps
                .get(i + 1)
                .map_or("∞".to_string(), |n| show_key(&n.start));
            let _ = write!(s, " [{}..{end})<={}", show_key(&step.start), step.through);
        }
        for (seq, fki) in &st.first_key_index {
            let _ = write!(s, " fki(@{seq})={fki}");
        }
        let _ = write!(
            s,
            " free={}",
            fmt_size(pm.tier.allocator().free_pages() * 4096)
        );
        s.push('\n');
        s
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
                if t.meta.format == TableFormat::NvTable {
                    let _ = write!(s, "/{}", Self::segment_names(t));
                } else if t.meta.tier == Tier::Pm {
                    let _ = write!(s, "/{}runs", t.meta.pm_pages.len());
                }
            }
            s.push('\n');
        }
        if s.is_empty() {
            s.push_str("empty\n");
        }
        s.push_str(&self.show_container());
        s.push_str(&self.show_rangetabs());
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
        if let Some(p) = SidePlan::of(t) {
            let _ = write!(
                s,
                " side [{}..{}) rows<={} L0 {} next={}",
                show_key(&p.lo),
                p.hi.as_deref().map_or("∞".into(), show_key),
                p.through,
                fmt_size(p.victim_bytes),
                p.next_cursor.as_deref().map_or("start".into(), show_key)
            );
            if p.compactor_seq > 0 {
                let _ = write!(s, " compactor<={}", p.compactor_seq);
            }
        }
        if let Some(p) = MergePlan::of(t) {
            let rs: Vec<String> = p.rangetabs.iter().map(|r| r.to_string()).collect();
            let _ = write!(s, " rangetabs {}", rs.join(","));
            if !p.seal.is_empty() {
                let seal: Vec<String> = p
                    .seal
                    .iter()
                    .map(|(r, slot, id)| format!("{r}.{slot}#{id}"))
                    .collect();
                let _ = write!(s, " seal {}", seal.join(","));
            }
        }
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
                let mut pm_bytes = 16u64 << 20;
                for (k, v) in &args {
                    match *k {
                        "pm" => pm_bytes = parse_size(v),
                        "mem" => o.memtable_size_bytes = parse_size(v) as usize,
                        "limit" => o.pm_container_limit_bytes = parse_size(v),
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
                        "policy" => {
                            o.tlsm.policy =
                                tierkv::options::TlsmPolicy::from_name(v).expect("policy")
                        }
                        "threshold" => o.tlsm.level_threshold = v.parse().expect("n"),
                        "variant" => {
                            o.tlsm.variant =
                                tierkv::options::TlsmVariant::from_name(v).expect("variant")
                        }
                        "cf" => {
                            o.tlsm.copy_forward_live_ratio =
                                v.parse::<f64>().expect("percent") / 100.0
                        }
                        "rt" => o.rangetab_count = v.parse().expect("n"),
                        "cap" if o.design == Preset::Tlsm => {
                            o.tlsm.lru_capacity_bytes = parse_size(v)
                        }
                        "cap" => o.rangetab_capacity_bytes = parse_size(v),
                        "bounds" => {
                            o.rangetab_boundaries =
                                v.split(',').map(|b| b.as_bytes().to_vec()).collect()
                        }
                        "beta" => o.rangetab_beta = v.parse().expect("x"),
                        "alpha" => o.rangetab_alpha = v.parse().expect("x"),
                        "mu" => o.rangetab_mu = v.parse().expect("x"),
                        "gamma" => o.rangetab_gamma = v.parse().expect("x"),
                        "faithful" => o.rangetab_faithful_picker = *v == "1",
                        "cache" => o.nvcache_cache_bytes = parse_size(v),
                        "pm_levels" => o.nvcache_pm_levels = v.parse().expect("n"),
                        other => panic!("unknown define option {other}"),
                    }
                }
                self.ctx = Self::fresh_ctx();
                self.pm = None;
                self.tlsm = None;
                self.rt = None;
                self.nv = None;
                if o.design == Preset::NvCache {
                    if !args.iter().any(|(k, _)| *k == "mem") {
                        o.memtable_size_bytes = 4 << 20;
                    }
                    let sim: Arc<dyn PmRegion> = Arc::new(SimRegion::new(pm_bytes as usize));
                    o.pm_region = Some(Arc::clone(&sim));
                    o.pm_size_bytes = pm_bytes;
                    let tier = Arc::new(PmTier::open(sim, false).expect("PM tier"));
                    let d = Arc::new(NvCache::new(&o, tier).expect("design"));
                    self.design = Arc::clone(&d) as Arc<dyn Design>;
                    self.nv = Some(d);
                } else if o.design == Preset::Tlsm {
                    if !args.iter().any(|(k, _)| *k == "mem") {
                        o.memtable_size_bytes = 400 << 10;
                    }
                    let sim: Arc<dyn PmRegion> = Arc::new(SimRegion::new(pm_bytes as usize));
                    o.pm_region = Some(Arc::clone(&sim));
                    o.pm_size_bytes = pm_bytes;
                    let tier = Arc::new(PmTier::open(sim, false).expect("PM tier"));
                    let t = Arc::new(Tlsm::new(&o, tier).expect("tlsm"));
                    t.install(&self.ctx);
                    self.tlsm = Some(Arc::clone(&t));
                    self.design = t;
                } else if o.design == Preset::RangeTab {
                    // Metadata only: buffer runs at made-up pages.
                    let sim: Arc<dyn PmRegion> = Arc::new(SimRegion::new(pm_bytes as usize));
                    o.pm_region = Some(Arc::clone(&sim));
                    o.pm_size_bytes = pm_bytes;
                    let tier = Arc::new(PmTier::open(sim, false).expect("PM tier"));
                    let d = Arc::new(RangeTab::new(&o, tier).expect("design"));
                    d.install(&self.ctx);
                    self.design = d;
                    let n = o.rangetab_boundaries.len() as u32 + 1;
                    let cap = o.rangetab_capacity_bytes;
                    let pages = (64 + cap).div_ceil(4096);
                    let layout = Layout::new(
                        n,
                        cap,
                        pages,
                        (0..2 * u64::from(n)).map(|i| 100 + i * pages).collect(),
                        Source::Option,
                        o.rangetab_boundaries.clone(),
                    );
                    self.rt = Some(Arc::new(layout));
                } else if o.design.needs_pm() {
                    if !args.iter().any(|(k, _)| *k == "mem") {
                        o.memtable_size_bytes = 64 << 10;
                    }
                    let sim: Arc<dyn PmRegion> = Arc::new(SimRegion::new(pm_bytes as usize));
                    o.pm_region = Some(sim);
                    o.pm_size_bytes = pm_bytes;
                    let region = Arc::clone(o.pm_region.as_ref().expect("sim region"));
                    let tier = Arc::new(PmTier::open(region, false).expect("PM tier"));
                    let (pmd, d): (PmDesign, Arc<dyn Design>) = match o.design {
                        Preset::Triangle => {
                            let t = Arc::new(Triangle::new(&o, Arc::clone(&tier)).expect("design"));
                            (PmDesign::Triangle(Arc::clone(&t)), t)
                        }
                        Preset::Matrix => {
                            let m = Arc::new(Matrix::new(&o, Arc::clone(&tier)).expect("design"));
                            (PmDesign::Matrix(Arc::clone(&m)), m)
                        }
                        other => panic!("no golden support for {other}"),
                    };
                    d.install(&self.ctx);
                    self.design = d;
                    self.pm = Some(Pm { design: pmd, tier });
                } else {
                    self.design = tierkv::design::build(&o, None).expect("design");
                }
                self.opts = o.clone();
                self.version = Version::empty(o.level_count);
                if let Some(l) = &self.rt {
                    self.version.design_state.insert(LAYOUT_TAG, l.encode());
                }
                self.busy.clear();
                self.next_id = 1;
                let mut rows: Vec<&str> = Vec::new();
                for line in input {
                    let (level, tables) = line.split_once(':').expect("L<n>: tables");
                    let level: usize = level.trim().trim_start_matches('L').parse().expect("level");
                    for spec in tables.split_whitespace() {
                        if level == 0 && self.pm.is_some() {
                            rows.push(spec);
                            continue;
                        }
                        if level == 0 && self.rt.is_some() {
                            let t = self.rt_table(spec);
                            self.version.levels[0].push(t);
                            continue;
                        }
                        let t = if self.nv_level(level) {
                            self.nv_table(spec)
                        } else {
                            self.table(spec)
                        };
                        self.version.levels[level].push(t);
                    }
                }
                // Rows oldest first, each pointing into the one before.
                let seq_of = |spec: &str| {
                    spec.split_once('@').map(|(_, s)| {
                        s.split(':')
                            .next()
                            .unwrap_or(s)
                            .parse::<u64>()
                            .expect("seq")
                    })
                };
                rows.sort_by_key(|r| seq_of(r));
                let mut pred: Option<Arc<RowTable>> = None;
                for spec in rows {
                    let t = self.row(spec, pred.as_deref());
                    pred = Some(
                        self.pm
                            .as_ref()
                            .expect("pm")
                            .design
                            .container()
                            .row(&t.meta)
                            .expect("open row"),
                    );
                    self.version.levels[0].push(t);
                }
                self.resort();
                self.show_version()
            }
            "pick" => {
                let picked = {
                    let mut cx = PickContext::idle(&self.busy);
                    for (k, v) in &args {
                        match *k {
                            "rate" => cx.write_bytes_per_sec = parse_size(v) as f64,
                            "peak" => cx.write_bytes_per_sec_peak = parse_size(v) as f64,
                            "flushing" => cx.flush_running = *v == "1",
                            "gen" => self.version.generation = v.parse().expect("n"),
                            "free" => cx.pm_free_bytes = Some(parse_size(v)),
                            "cap" => cx.pm_capacity_bytes = Some(parse_size(v)),
                            other => panic!("unknown pick option {other}"),
                        }
                    }
                    if cx.pm_free_bytes.is_some() && cx.pm_capacity_bytes.is_none() {
                        cx.pm_capacity_bytes = Some(self.opts.pm_size_bytes);
                    }
                    self.design.pick(&self.version, &cx)
                };
                match picked {
                    Some(t) => {
                        let s = Self::show_task(&t);
                        self.last = Some(t);
                        s
                    }
                    None => {
                        self.last = None;
                        "none\n".into()
                    }
                }
            }
            "row" => {
                // A flush into the container: a new newest row.
                let pred = self.version.levels[0].first().map(|t| {
                    self.pm
                        .as_ref()
                        .expect("PM design")
                        .design
                        .container()
                        .row(&t.meta)
                        .expect("open row")
                });
                let spec = cmd.split_whitespace().nth(1).expect("row spec");
                let t = self.row(spec, pred.as_deref());
                self.version.levels[0].push(t);
                self.resort();
                self.show_version()
            }
            "refs" => {
                let t = self.tlsm.as_ref().expect("refs needs design=tlsm");
                let mut out = String::new();
                let mut ids = Vec::new();
                for line in input {
                    let mut words = line.split_whitespace();
                    let id: u64 = words
                        .next()
                        .and_then(|w| w.trim_start_matches('#').parse().ok())
                        .expect("#id");
                    let mut own = 0;
                    let mut data = Vec::new();
                    for w in words {
                        if let Some(v) = w.strip_prefix("own=") {
                            own = parse_size(v);
                        } else {
                            let (run, bytes) = w.split_once(':').expect("first+pages:bytes");
                            let (first, count) = run.split_once('+').expect("first+pages");
                            data.push(DataRef {
                                run: PageRun {
                                    first: first.parse().expect("page"),
                                    count: count.parse().expect("pages"),
                                },
                                bytes: parse_size(bytes),
                            });
                        }
                    }
                    data.sort();
                    t.refs().register(
                        id,
                        ListRefs {
                            own_bytes: own,
                            data,
                        },
                    );
                    ids.push(id);
                }
                for id in ids {
                    let _ = writeln!(
                        out,
                        "#{id} exclusive {}",
                        fmt_size(t.refs().exclusive_bytes(id))
                    );
                }
                let sp = t.space();
                let _ = writeln!(
                    out,
                    "data runs {} ({}), live {}, space amp {:.2}",
                    sp.data_runs,
                    fmt_size(sp.data_run_bytes),
                    fmt_size(sp.live_entry_bytes),
                    sp.amplification()
                );
                out
            }
            "release" => {
                // A list released by the engine (`Design::release`).
                let t = self.tlsm.as_ref().expect("release needs design=tlsm");
                let mut out = String::new();
                for id in input
                    .iter()
                    .flat_map(|l| l.split(','))
                    .filter_map(|id| id.trim().trim_start_matches('#').parse::<u64>().ok())
                {
                    let freed: Vec<String> = t
                        .refs()
                        .unregister(id)
                        .iter()
                        .map(|r| format!("{}+{}", r.first, r.count))
                        .collect();
                    let _ = writeln!(out, "#{id} frees [{}]", freed.join(" "));
                }
                out
            }
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
                if let Some(plan) = SidePlan::of(&task) {
                    return self.apply_side(&task, &plan);
                }
                if self.tlsm.is_some() {
                    return self.apply_tlsm(&task);
                }
                if let Some(plan) = MergePlan::of(&task) {
                    for &(r, slot) in &plan.buffers {
                        self.version
                            .design_state
                            .insert(buffer_tag(r, slot), BufferRecord::INIT.encode());
                    }
                }
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
                if task.kind == TaskKind::TRIVIAL_MOVE {
                    for t in all {
                        self.version.levels[task.output_level].push(t);
                    }
                } else if self.nv_level(task.output_level) {
                    // A list compaction: the outputs list the inputs' segments.
                    for (lo, hi, bytes, seq) in groups {
                        let segs: std::collections::BTreeSet<u64> = all
                            .iter()
                            .filter(|t| {
                                t.smallest_user_key() <= hi.as_slice()
                                    && t.largest_user_key() >= lo.as_slice()
                            })
                            .flat_map(|t| {
                                t.meta.pm_pages[1..].iter().map(|r| (r.first - 1000) / 64)
                            })
                            .collect();
                        let names: Vec<String> = segs.iter().map(|n| format!("s{n}")).collect();
                        let spec = format!(
                            "{}-{}@{seq}:{bytes}/{}",
                            String::from_utf8_lossy(&lo),
                            String::from_utf8_lossy(&hi),
                            names.join("+")
                        );
                        let t = self.nv_table(&spec);
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
            "nv" => {
                let d = self.nv.as_ref().expect("design=nvcache");
                let sh = d.shape();
                let (alloc, live) = sh.cache_usage(&self.version);
                // Exact to the KiB where a MiB would round.
                let exact = |b: u64| {
                    if b.is_multiple_of(1 << 20) {
                        fmt_size(b)
                    } else {
                        format!("{}K", b >> 10)
                    }
                };
                format!(
                    "K={} cache={} allocated={} live={} reserve={} segment={}\n",
                    sh.lowest_pm,
                    exact(sh.cache_bytes),
                    exact(alloc),
                    exact(live),
                    exact(sh.write_reserve_bytes),
                    exact(d.segment_bytes())
                )
            }
            other => panic!("unknown command {other}"),
        }
    }

    /// Applies a side the way its job would: the design's container edit,
    /// and one L1 table for the merged victims and L1 inputs.
    fn apply_side(&mut self, task: &Task, plan: &SidePlan) -> String {
        let pm = self.pm.as_ref().expect("side of a PM design");
        let c = pm.design.container();
        let state = ContainerState::of(&self.version).expect("state");
        let mut lo: Option<Vec<u8>> = None;
        let mut hi: Option<Vec<u8>> = None;
        let mut widen = |a: &[u8], b: &[u8]| {
            if lo.as_deref().is_none_or(|x| a < x) {
                lo = Some(a.to_vec());
            }
            if hi.as_deref().is_none_or(|x| b > x) {
                hi = Some(b.to_vec());
            }
        };
        for t in &task.inputs[0].1 {
            if t.meta.seq_max > plan.through {
                continue;
            }
            let r = c.row(&t.meta).expect("row");
            let w = victim_windows(&state, &r, plan);
            if let (Some(first), Some(last)) = (w.first(), w.last()) {
                widen(r.user_key(first.0), r.user_key(last.1 - 1));
            }
        }
        let mut bytes = plan.victim_bytes;
        let mut edit_l1 = Vec::new();
        for t in &task.inputs[1].1 {
            widen(t.smallest_user_key(), t.largest_user_key());
            bytes += t.meta.size_bytes;
            edit_l1.push((1u32, t.meta.id));
        }
        let next_id = &mut self.next_id;
        let mut ids = || {
            let id = *next_id;
            *next_id += 1;
            id
        };
        let mut edit =
            side_edit(&self.version, &state, plan, &|m| c.row(m), &mut ids).expect("side edit");
        edit.deleted_tables.extend(edit_l1);
        if let (Some(lo), Some(hi)) = (lo, hi) {
            let id = ids();
            edit.new_tables.push((
                1,
                TableMeta {
                    id,
                    tier: Tier::Ssd,
                    format: TableFormat::Sst,
                    size_bytes: bytes,
                    smallest: make_internal_key(&lo, plan.through, Kind::Put),
                    largest: make_internal_key(&hi, plan.through, Kind::Put),
                    seq_min: plan.through,
                    seq_max: plan.through,
                    entries: 1,
                    deletions: 0,
                    pm_pages: Vec::new(),
                },
            ));
        }
        self.version = self.version.apply(&edit, &self.ctx).expect("apply");
        // Released runs go back as the engine would release them.
        for m in std::mem::take(&mut *self.ctx.obsolete.lock()) {
            for run in m.pm_pages {
                pm.tier.free_pages(run).expect("free");
            }
        }
        self.show_version()
    }

    /// Applies a TLSM task the way its job would shape the LSM: link and
    /// copy compactions write skip lists, copy-forwards replace a list by a
    /// fresh one, evictions turn lists into SSTs at their own levels, the
    /// others write SSTs (or move tables); released lists leave the
    /// reference index, as `Design::release` would.
    fn apply_tlsm(&mut self, task: &Task) -> String {
        let k = task.kind;
        let pm_out =
            k == tlsm_picker::LINK || k == tlsm_picker::COPY || k == tlsm_picker::COPY_FORWARD;
        let per_table = k == tlsm_picker::EVICT || k == tlsm_picker::COPY_FORWARD;
        let mut all: Vec<(usize, Arc<TableHandle>)> = Vec::new();
        for (l, tables) in &task.inputs {
            for t in tables {
                all.push((*l, Arc::clone(t)));
                self.version.levels[*l].retain(|x| x.meta.id != t.meta.id);
            }
        }
        if k == TaskKind::TRIVIAL_MOVE {
            for (_, t) in all {
                self.version.levels[task.output_level].push(t);
            }
            self.resort();
            return self.show_version();
        }
        let suffix = if pm_out { "/pm" } else { "" };
        let mut made = Vec::new();
        if per_table {
            for (l, t) in &all {
                let spec = format!(
                    "{}-{}@{}:{}{suffix}",
                    String::from_utf8_lossy(t.smallest_user_key()),
                    String::from_utf8_lossy(t.largest_user_key()),
                    t.meta.seq_max,
                    t.meta.size_bytes
                );
                made.push((*l, spec));
            }
        } else {
            let mut sorted: Vec<&Arc<TableHandle>> = all.iter().map(|(_, t)| t).collect();
            sorted.sort_by(|a, b| a.smallest_user_key().cmp(b.smallest_user_key()));
            let (mut lo, mut hi, mut bytes, mut seq) = (Vec::new(), Vec::new(), 0u64, 0u64);
            for (i, t) in sorted.iter().enumerate() {
                if i == 0 || t.smallest_user_key() < lo.as_slice() {
                    lo = t.smallest_user_key().to_vec();
                }
                if t.largest_user_key() > hi.as_slice() {
                    hi = t.largest_user_key().to_vec();
                }
                bytes += t.meta.size_bytes;
                seq = seq.max(t.meta.seq_max);
            }
            made.push((
                task.output_level,
                format!(
                    "{}-{}@{seq}:{bytes}{suffix}",
                    String::from_utf8_lossy(&lo),
                    String::from_utf8_lossy(&hi)
                ),
            ));
        }
        for (l, spec) in made {
            let t = self.table(&spec);
            self.version.levels[l].push(t);
        }
        if let Some(t) = &self.tlsm {
            for (_, x) in &all {
                t.refs().unregister(x.meta.id);
            }
        }
        self.resort();
        self.show_version()
    }

    fn resort(&mut self) {
        self.version.levels[0].sort_by_key(|t| std::cmp::Reverse(t.meta.seq_max));
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
