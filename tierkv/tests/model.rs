//! The model test: the same seeded operations under every design, with
//! flushes, compactions, snapshots, clean reopens and crashes, compared
//! against a `BTreeMap`.
//!
//! A crash cuts the shared power switch of the crashable file system and
//! the PM simulator at one instant, reopens on what was durable, and checks
//! that the database equals the model after some prefix of the committed
//! writes that includes every acknowledged *synced* write (all writes, when
//! the WAL is on PM).
//!
//! A failure prints its seed; replay it with
//! `TIERKV_MODEL_SEED=<seed> cargo test --test model -- <design>` and turn
//! it into a named regression test below.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::Power;
use tierkv::{Db, Options, Preset, ReadOptions, Snapshot, WalPlacement, WriteBatch, WriteOptions};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// How one run is set up: the design, where the WAL lives, the seeds.
#[derive(Clone, Copy)]
struct Setup {
    design: Preset,
    pm_wal: bool,
    seeds: &'static [u64],
    ops: usize,
    /// `Options::vsst` (None: the design's default).
    vsst: Option<bool>,
    /// Size of the key space (more keys: more data reaches the deeper levels).
    keys: u32,
    /// Issue `compact_range` calls (off: only background compactions shape
    /// the LSM, so a design's own chain of compactions runs).
    compact_range: bool,
    /// `Options::regions`.
    regions: usize,
    /// Route by key range (`regions` − 1 boundaries splitting the key space
    /// evenly) instead of by hash.
    range_routing: bool,
    /// Memtables of this many SSTs (vlsm cuts a flush into range-partitioned
    /// L0 SSTs).
    ssts_per_memtable: usize,
    /// `Options::vlsm_l0_batch_ssts`.
    l0_batch: usize,
    /// Design-specific options on top of the harness's (e.g. TLSM's
    /// policy and variant).
    tweak: fn(&mut Options),
    /// `rangetab`: explicit boundaries splitting the key space evenly
    /// (false: the fallback, quantiles of the first flush, and binary
    /// search instead of the hash index).
    rangetab_bounds: bool,
    /// nvcache: `Options::nvcache_cache_bytes` (0: the default).
    nv_cache: u64,
    /// nvcache: `Options::nvcache_pm_levels` (0: the default).
    nv_levels: usize,
    /// nvcache: the paper's readings (entry-by-entry appends, one
    /// unbounded output per list compaction, no copy-out).
    nv_paper: bool,
    /// nvcache: `NvRelink::ArrayOnly`.
    nv_array_only: bool,
}

impl Setup {
    fn new(design: Preset, pm_wal: bool, seeds: &'static [u64]) -> Setup {
        Setup {
            design,
            pm_wal,
            seeds,
            ops: 4000,
            vsst: None,
            keys: 400,
            compact_range: true,
            regions: 1,
            range_routing: false,
            ssts_per_memtable: 1,
            l0_batch: 1,
            tweak: |_| {},
            rangetab_bounds: true,
            nv_cache: 0,
            nv_levels: 0,
            nv_paper: false,
            nv_array_only: false,
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
}

struct Harness {
    setup: Setup,
    fs: MemFs,
    sim: Option<Arc<SimRegion>>,
    power: Power,
    db: Option<Db>,
    dir: PathBuf,
    /// The model after every batch known to survive a crash (the durable
    /// prefix of the committed batches).
    durable_model: Model,
    /// The batches committed after that prefix, in commit order: a crash
    /// may keep any prefix of them.
    pending: Vec<Vec<Op>>,
    /// Batches committed in all.
    committed: u64,
    model: Model,
    snapshots: Vec<(Snapshot, Model)>,
    crashes: usize,
    reopens: usize,
}

/// The PM region: a PM tier for the PM designs, or just the WAL.
fn pm_size(design: Preset) -> usize {
    if design.needs_pm() {
        24 << 20
    } else {
        8 << 20
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn value(rng: &mut SmallRng) -> Vec<u8> {
    let len = match rng.gen_range(0..100) {
        0..=2 => rng.gen_range(4000..12000),
        3..=10 => 0,
        _ => rng.gen_range(1..300),
    };
    let b: u8 = rng.gen();
    (0..len).map(|i| b.wrapping_add(i as u8)).collect()
}

/// What differs between the database and the model (`TIERKV_MODEL_DIFF`).
fn print_diff(got: &Model, want: &Model) {
    for (k, v) in want {
        match got.get(k) {
            None => eprintln!("missing {:?}", String::from_utf8_lossy(k)),
            Some(g) if g != v => eprintln!(
                "differs {:?}: {} vs {} bytes; got {:?} want {:?}",
                String::from_utf8_lossy(k),
                g.len(),
                v.len(),
                &g[..8.min(g.len())],
                &v[..8.min(v.len())]
            ),
            _ => {}
        }
    }
    for k in got.keys() {
        if !want.contains_key(k) {
            eprintln!("extra {:?}", String::from_utf8_lossy(k));
        }
    }
}

fn apply(model: &mut Model, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Put(k, v) => {
                model.insert(k.clone(), v.clone());
            }
            Op::Delete(k) => {
                model.remove(k);
            }
        }
    }
}

impl Harness {
    fn new(setup: Setup) -> Harness {
        let power = Power::new();
        let fs = MemFs::new();
        fs.set_power(power.clone());
        let sim = (setup.pm_wal || setup.design.needs_pm()).then(|| {
            let r = Arc::new(SimRegion::new(pm_size(setup.design)));
            r.set_power(power.clone());
            r
        });
        let mut h = Harness {
            setup,
            fs,
            sim,
            power,
            db: None,
            dir: PathBuf::from("/db"),
            durable_model: Model::new(),
            pending: Vec::new(),
            committed: 0,
            model: Model::new(),
            snapshots: Vec::new(),
            crashes: 0,
            reopens: 0,
        };
        h.open();
        h
    }

    fn options(&self) -> Options {
        let mut o = Options {
            design: self.setup.design,
            fs: Arc::new(self.fs.clone()),
            memtable_size_bytes: (64 << 10) * self.setup.ssts_per_memtable,
            sst_size_bytes: 64 << 10,
            l1_size_bytes: 256 << 10,
            level_size_multiplier: 4,
            level_count: 5,
            l0_compaction_trigger: 2,
            l0_slowdown_trigger: 6,
            l0_stop_trigger: 10,
            block_size_bytes: 1024,
            block_cache_bytes: 256 << 10,
            background_threads: 2,
            // vlsm: L1 = 2 × 64 KiB, L2 = 2 × L1, a 3-SST L0 queue, so a
            // few hundred KiB reach L2 and vSSTs are cut between 32 and 64 KiB.
            vsst: self.setup.vsst,
            vlsm_growth_factor: 2,
            vlsm_phi: 2,
            vlsm_l0_max_ssts: 3 * self.setup.ssts_per_memtable,
            vlsm_l0_batch_ssts: self.setup.l0_batch,
            regions: self.setup.regions,
            region_boundaries: if self.setup.range_routing {
                (1..self.setup.regions as u32)
                    .map(|i| key(self.setup.keys * i / self.setup.regions as u32))
                    .collect()
            } else {
                Vec::new()
            },
            ..Options::default()
        };
        if let Some(sim) = &self.sim {
            o.pm_region = Some(Arc::clone(sim) as Arc<dyn tierkv::storage::PmRegion>);
            o.pm_size_bytes = pm_size(self.setup.design) as u64;
            o.wal = Some(if self.setup.pm_wal {
                WalPlacement::Pm
            } else {
                WalPlacement::Ssd
            });
        }
        if self.setup.design.needs_pm() {
            // The flattened tree (L1 = the PM tier), and a container limit
            // small enough that these few MB cycle through it many times.
            o.l1_size_bytes = 1 << 20;
            o.pm_container_limit_bytes = 24 << 10;
        }
        (self.setup.tweak)(&mut o);
        if self.setup.design == Preset::RangeTab {
            // Eight RangeTabs of two 96 KiB buffers: a 64 KiB memtable
            // gives each about 8 KiB, so buffers seal and merge often.
            o.rangetab_count = 8;
            o.rangetab_capacity_bytes = 96 << 10;
            if self.setup.rangetab_bounds {
                o.rangetab_boundaries = (1..8).map(|i| key(self.setup.keys * i / 8)).collect();
            } else {
                o.rangetab_hash_index = false;
            }
        }
        if self.setup.design == Preset::NvCache {
            // A cache small enough that evictions to SSD run all along.
            o.l1_size_bytes = 256 << 10;
            o.nvcache_cache_bytes = self.setup.nv_cache;
            o.nvcache_pm_levels = self.setup.nv_levels;
            if self.setup.nv_paper {
                o.nvcache_append = tierkv::NvAppend::PerEntry;
                o.nvcache_table_bytes = u64::MAX;
                o.nvcache_copy_out_percent = 0;
            }
            if self.setup.nv_array_only {
                o.nvcache_relink = tierkv::NvRelink::ArrayOnly;
            }
        }
        o
    }

    fn open(&mut self) {
        let db = Db::open(Path::new(&self.dir), self.options())
            .unwrap_or_else(|e| panic!("reopen failed: {e}"));
        self.db = Some(db);
    }

    fn db(&self) -> &Db {
        self.db.as_ref().expect("open")
    }

    fn commit(&mut self, ops: Vec<Op>, sync: bool) {
        let mut b = WriteBatch::new();
        for op in &ops {
            match op {
                Op::Put(k, v) => b.put(k, v),
                Op::Delete(k) => b.delete(k),
            };
        }
        self.db()
            .write(b, &WriteOptions { sync })
            .unwrap_or_else(|e| panic!("write failed: {e}"));
        apply(&mut self.model, &ops);
        self.committed += 1;
        self.pending.push(ops);
        if sync || self.setup.pm_wal {
            // Everything before a durable batch is durable too.
            for ops in self.pending.drain(..) {
                apply(&mut self.durable_model, &ops);
            }
        }
    }

    fn check_get(&self, k: &[u8], snap: Option<&(Snapshot, Model)>) {
        let (opts, model) = match snap {
            Some((s, m)) => (
                ReadOptions {
                    snapshot: Some(s.clone()),
                    ..Default::default()
                },
                m,
            ),
            None => (ReadOptions::default(), &self.model),
        };
        let got = self.db().get_with(k, &opts).expect("get");
        assert_eq!(
            got.as_deref(),
            model.get(k).map(|v| v.as_slice()),
            "get {:?}",
            String::from_utf8_lossy(k)
        );
    }

    fn check_scan(&self, rng: &mut SmallRng, snap: Option<&(Snapshot, Model)>) {
        let lo = rng
            .gen_bool(0.5)
            .then(|| key(rng.gen_range(0..self.setup.keys)));
        let hi = rng
            .gen_bool(0.5)
            .then(|| key(rng.gen_range(0..self.setup.keys)));
        let reverse = rng.gen_bool(0.5);
        let limit = rng.gen_range(1..80);
        let (snapshot, model) = match snap {
            Some((s, m)) => (Some(s.clone()), m),
            None => (None, &self.model),
        };
        let mut it = self
            .db()
            .iter(ReadOptions {
                snapshot,
                lower_bound: lo.clone(),
                upper_bound: hi.clone(),
                ..Default::default()
            })
            .expect("iter");
        let range = model.iter().filter(|(k, _)| {
            lo.as_ref().is_none_or(|l| *k >= l) && hi.as_ref().is_none_or(|h| *k < h)
        });
        let want: Vec<(&Vec<u8>, &Vec<u8>)> = if reverse {
            range.rev().take(limit).collect()
        } else {
            range.take(limit).collect()
        };
        let mut got = Vec::new();
        if reverse {
            it.seek_to_last();
        } else {
            it.seek_to_first();
        }
        while it.valid() && got.len() < limit {
            got.push((it.key().to_vec(), it.value().to_vec()));
            if reverse {
                it.prev();
            } else {
                it.next();
            }
        }
        it.status().expect("iterator status");
        let want: Vec<(Vec<u8>, Vec<u8>)> = want
            .into_iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(
            got.iter()
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                .collect::<Vec<_>>(),
            want.iter()
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                .collect::<Vec<_>>(),
            "scan keys lo={lo:?} hi={hi:?} reverse={reverse}"
        );
        assert!(got == want, "scan values differ");
        // Direction changes: step back and forth once (on the latest state).
        if got.len() >= 2 && snap.is_none() {
            let mut it = self.db().iter(ReadOptions::default()).expect("iter");
            it.seek(&got[1].0);
            if it.valid() && !reverse {
                it.prev();
                assert!(it.valid());
                assert_eq!(it.key(), got[0].0.as_slice(), "prev after seek");
                it.next();
                assert_eq!(it.key(), got[1].0.as_slice(), "next after prev");
            }
        }
    }

    fn full_contents(&self) -> Model {
        let mut it = self.db().iter(ReadOptions::default()).expect("iter");
        it.seek_to_first();
        let mut m = Model::new();
        while it.valid() {
            m.insert(it.key().to_vec(), it.value().to_vec());
            it.next();
        }
        it.status().expect("scan after reopen");
        m
    }

    fn reopen(&mut self) {
        self.snapshots.clear();
        self.reopens += 1;
        let db = self.db.take().expect("open");
        db.close().expect("close");
        // A clean close makes every write durable.
        self.pending.clear();
        self.durable_model = self.model.clone();
        self.open();
        let got = self.full_contents();
        if got != self.model && std::env::var_os("TIERKV_MODEL_DIFF").is_some() {
            print_diff(&got, &self.model);
        }
        assert_eq!(got, self.model, "contents after clean reopen");
    }

    fn crash(&mut self) {
        self.snapshots.clear();
        self.crashes += 1;
        self.power.cut();
        let fs = self.fs.crash();
        let sim = self.sim.as_ref().map(|s| Arc::new(s.crash()));
        drop(self.db.take()); // its later writes reach the old devices only
        self.power = Power::new();
        fs.set_power(self.power.clone());
        if let Some(s) = &sim {
            s.set_power(self.power.clone());
        }
        self.fs = fs;
        self.sim = sim;
        self.open();
        // The state must be the model after some prefix of the history that
        // includes every durable write.
        let got = self.full_contents();
        let mut m = self.durable_model.clone();
        let mut n = 0;
        while got != m && n < self.pending.len() {
            apply(&mut m, &self.pending[n]);
            n += 1;
        }
        // `TIERKV_MODEL_DIFF=1` prints how the database differs from the
        // model after every committed batch.
        if got != m && std::env::var_os("TIERKV_MODEL_DIFF").is_some() {
            print_diff(&got, &self.model);
        }
        assert!(
            got == m,
            "after crash: no prefix of the {} batches committed after the last durable one matches the database ({} keys; {} batches committed in all)",
            self.pending.len(),
            got.len(),
            self.committed
        );
        self.pending.clear();
        self.durable_model = m.clone();
        self.model = m;
    }

    fn step(&mut self, rng: &mut SmallRng) {
        let k = key(rng.gen_range(0..self.setup.keys));
        match rng.gen_range(0..1000) {
            0..=449 => {
                let v = value(rng);
                self.commit(vec![Op::Put(k, v)], rng.gen_bool(0.05));
            }
            450..=549 => self.commit(vec![Op::Delete(k)], rng.gen_bool(0.05)),
            550..=609 => {
                let n = rng.gen_range(1..20);
                let ops = (0..n)
                    .map(|_| {
                        let k = key(rng.gen_range(0..self.setup.keys));
                        if rng.gen_bool(0.8) {
                            Op::Put(k, value(rng))
                        } else {
                            Op::Delete(k)
                        }
                    })
                    .collect();
                self.commit(ops, rng.gen_bool(0.2));
            }
            610..=779 => self.check_get(&k, None),
            780..=829 => self.check_scan(rng, None),
            830..=849 => {
                let s = self.db().snapshot();
                self.snapshots.push((s, self.model.clone()));
            }
            850..=889 => {
                if !self.snapshots.is_empty() {
                    let i = rng.gen_range(0..self.snapshots.len());
                    if rng.gen_bool(0.3) {
                        self.snapshots.swap_remove(i);
                    } else {
                        let s = &self.snapshots[i];
                        self.check_get(&k, Some(s));
                        self.check_scan(rng, Some(s));
                    }
                }
            }
            890..=919 => self.db().flush().expect("flush"),
            920..=934 => {
                let a = key(rng.gen_range(0..self.setup.keys));
                let b = key(rng.gen_range(0..self.setup.keys));
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                if !self.setup.compact_range {
                    // Leave the shape to background compactions.
                } else if rng.gen_bool(0.3) {
                    self.db().compact_range(None, None).expect("compact")
                } else {
                    self.db()
                        .compact_range(Some(&lo), Some(&hi))
                        .expect("compact")
                }
            }
            935..=959 => self.reopen(),
            _ => self.crash(),
        }
    }
}

/// Prints the engine's warnings (torn tails, failed frees) to stderr when
/// `TIERKV_MODEL_DIFF` is set, tagged with the thread.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record) {
        let t = std::thread::current();
        eprintln!("[{} {}] {}", r.level(), t.name().unwrap_or("?"), r.args());
    }
    fn flush(&self) {}
}

/// What a run did.
#[derive(Default)]
struct Totals {
    ops: u64,
    crashes: usize,
    reopens: usize,
}

/// Runs the setup's seeds (or `TIERKV_MODEL_SEED`). `TIERKV_MODEL_OPS`
/// sets the operations of the whole run (split over the seeds) instead of
/// the setup's per-seed count: the campaign at scale
/// (`scripts/campaigns.sh`) runs 10^6 per design.
fn run(setup: Setup) -> Totals {
    if std::env::var_os("TIERKV_MODEL_DIFF").is_some() {
        static LOG: StderrLog = StderrLog;
        if log::set_logger(&LOG).is_ok() {
            log::set_max_level(log::LevelFilter::Warn);
        }
    }
    let only: Option<u64> = std::env::var("TIERKV_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    let seeds: Vec<u64> = match only {
        Some(s) => vec![s],
        None => setup.seeds.to_vec(),
    };
    let ops_per_seed = std::env::var("TIERKV_MODEL_OPS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .map_or(setup.ops, |total| total.div_ceil(seeds.len()));
    let mut totals = Totals::default();
    for seed in seeds {
        let result = std::panic::catch_unwind(|| {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut h = Harness::new(setup);
            for _ in 0..ops_per_seed {
                h.step(&mut rng);
            }
            h.reopen();
            (h.crashes, h.reopens)
        });
        match result {
            Ok((c, r)) => {
                totals.ops += ops_per_seed as u64;
                totals.crashes += c;
                totals.reopens += r;
            }
            Err(e) => {
                eprintln!(
                    "model test failed: design {} pm_wal {} seed {seed} (replay with TIERKV_MODEL_SEED={seed})",
                    setup.design, setup.pm_wal
                );
                std::panic::resume_unwind(e);
            }
        }
    }
    totals
}

/// One line per design and WAL placement.
macro_rules! model_test {
    ($name:ident, $design:expr, pm_wal: $pm:expr, seeds: $seeds:expr $(, $field:ident: $val:expr)*) => {
        #[test]
        fn $name() {
            #[allow(unused_mut)]
            let mut setup = Setup::new($design, $pm, $seeds);
            $(setup.$field = $val;)*
            let t = run(setup);
            eprintln!(
                "SUMMARY model {}: {} operations, {} crashes (file system and PM cut at one instant), {} clean reopens; every check passed (no acknowledged write lost, nothing unwritten)",
                stringify!($name),
                t.ops,
                t.crashes,
                t.reopens
            );
        }
    };
}

model_test!(classic_ssd_wal, Preset::Classic, pm_wal: false, seeds: &[1, 2, 3, 4, 5, 6]);
model_test!(classic_pm_wal, Preset::Classic, pm_wal: true, seeds: &[11, 12, 13, 14]);
model_test!(vlsm_ssd_wal, Preset::Vlsm, pm_wal: false, seeds: &[21, 22, 23, 24], keys: 4000);
model_test!(vlsm_partitioned_flush, Preset::Vlsm, pm_wal: false, seeds: &[25, 26], keys: 4000, ssts_per_memtable: 4);
model_test!(vlsm_partitioned_batch, Preset::Vlsm, pm_wal: false, seeds: &[19, 20], keys: 4000, ssts_per_memtable: 4, l0_batch: 3);
model_test!(vlsm_background_only, Preset::Vlsm, pm_wal: false, seeds: &[27, 28, 29], keys: 4000, compact_range: false);
model_test!(classic_vsst, Preset::Classic, pm_wal: false, seeds: &[31, 32, 33], vsst: Some(true));
// Regions: four LSMs in one Db, routed by hash and by key range.
model_test!(classic_regions_hash, Preset::Classic, pm_wal: false, seeds: &[41, 42, 43], regions: 4);
model_test!(classic_regions_range, Preset::Classic, pm_wal: false, seeds: &[44, 45, 46], regions: 4, range_routing: true);
model_test!(classic_regions_pm_wal, Preset::Classic, pm_wal: true, seeds: &[47, 48], regions: 4);
model_test!(vlsm_regions_hash, Preset::Vlsm, pm_wal: false, seeds: &[51, 52, 53], keys: 4000, regions: 4);
model_test!(vlsm_regions_range, Preset::Vlsm, pm_wal: false, seeds: &[54, 55, 56], keys: 4000, regions: 4, range_routing: true);
model_test!(triangle_pm_wal, Preset::Triangle, pm_wal: true, seeds: &[21, 22, 23, 24]);
model_test!(rangetab_pm_wal, Preset::RangeTab, pm_wal: true, seeds: &[61, 62, 63, 64]);
model_test!(rangetab_quantiles, Preset::RangeTab, pm_wal: true, seeds: &[65, 66], rangetab_bounds: false);
model_test!(rangetab_background_only, Preset::RangeTab, pm_wal: true, seeds: &[67, 68], compact_range: false);
model_test!(matrix_pm_wal, Preset::Matrix, pm_wal: true, seeds: &[31, 32, 33, 34]);
model_test!(triangle_regions_range, Preset::Triangle, pm_wal: true, seeds: &[25, 26], regions: 4, range_routing: true);
model_test!(matrix_regions_hash, Preset::Matrix, pm_wal: true, seeds: &[35, 36], regions: 4);
// TLSM: skip lists in PM, each policy and ablation variant. The model's
// data (a few MB) fits the PM tier, so `lru` gets a small capacity to make
// evictions happen, `leveled` a low threshold to make conversions happen,
// and `none` a copy-forward threshold to make copy-forwards happen.
fn tlsm_small_lists(o: &mut Options) {
    o.l1_size_bytes = 256 << 10;
}
model_test!(tlsm_full_lru, Preset::Tlsm, pm_wal: true, seeds: &[61, 62, 63], tweak: |o| {
    tlsm_small_lists(o);
    o.tlsm.lru_capacity_bytes = 2 << 20;
});
model_test!(tlsm_full_leveled_ssd_wal, Preset::Tlsm, pm_wal: false, seeds: &[64, 65], tweak: |o| {
    tlsm_small_lists(o);
    o.tlsm.policy = tierkv::options::TlsmPolicy::Leveled;
    o.tlsm.level_threshold = 1;
});
model_test!(tlsm_full_none, Preset::Tlsm, pm_wal: true, seeds: &[66, 67], tweak: |o| {
    tlsm_small_lists(o);
    o.tlsm.policy = tierkv::options::TlsmPolicy::None;
    o.tlsm.copy_forward_live_ratio = 0.5;
    o.tlsm.persist_every = 8;
});
model_test!(tlsm_ps_bac, Preset::Tlsm, pm_wal: true, seeds: &[68, 69], tweak: |o| {
    tlsm_small_lists(o);
    o.tlsm.variant = tierkv::options::TlsmVariant::PsBac;
    o.tlsm.lru_capacity_bytes = 3 << 20;
});
model_test!(tlsm_ps, Preset::Tlsm, pm_wal: false, seeds: &[70, 71], tweak: |o| {
    tlsm_small_lists(o);
    o.tlsm.variant = tierkv::options::TlsmVariant::Ps;
});
model_test!(tlsm_faithful_regions, Preset::Tlsm, pm_wal: true, seeds: &[72], regions: 3, tweak: |o| {
    tlsm_small_lists(o);
    o.tlsm.persist_order = tierkv::options::TlsmPersistOrder::Faithful;
});
model_test!(nvcache, Preset::NvCache, pm_wal: true, seeds: &[61, 62, 63, 64], keys: 2000, nv_cache: 384 << 10);
model_test!(nvcache_background_only, Preset::NvCache, pm_wal: true, seeds: &[65, 66], keys: 2000, nv_cache: 384 << 10, compact_range: false);
model_test!(nvcache_paper, Preset::NvCache, pm_wal: true, seeds: &[67, 68], keys: 2000, nv_cache: 384 << 10, nv_paper: true);
// A cache that holds L0's trigger but not L1's target: K = 0 (L0 alone in
// PM), evictions of the oldest L0 tables together into SSTs of L1.
model_test!(nvcache_l0_only, Preset::NvCache, pm_wal: true, seeds: &[71, 72], keys: 2000, nv_cache: 256 << 10);
model_test!(nvcache_array_only_3_levels, Preset::NvCache, pm_wal: true, seeds: &[69, 70], keys: 2000, nv_cache: 1 << 20, nv_levels: 3, nv_array_only: true);
