//! Crash tests of NV-Cache (design/nvcache): cut the power at every
//! durability point — every PM persist of the simulated region and every
//! sync of the crashable file system, counted together in the order they
//! happen — of an append (group and entry-by-entry), a flush, a list
//! compaction (relinks, copies, arrays) and an eviction to SSD, then
//! reopen on what was durable and check that the database holds every
//! acknowledged write and nothing else, that it keeps working, and that
//! PM holds nothing no table or log references. Half of the crashes also
//! let unpersisted PM words reach the durable image (early write-backs).
//!
//! The spec's crash points (docs/format/pm.md, "NVTable", crash table):
//! 1–2 (nodes persisted, link not / link persisted, not acknowledged) and
//! 3 (segment allocated, not linked) are points of the append tests; 4
//! (a new log's header persisted, MANIFEST record missing) and 5 (array
//! persisted, flush edit missing) of the flush test; 6 (partway through
//! relinking) and 7 (after the edit, before the release) of the list
//! compaction test; 8 (SST synced, edit missing) and 9 (last reference
//! dropped, pages not freed yet) of the eviction test.
//!
//! Background work runs only when a test allows it: the design is wrapped
//! in a gate that lets the picker hand out a given number of tasks, so the
//! operation under test is the same job in every run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tierkv::design::nvcache::NvCache;
use tierkv::design::{Design, DesignLog, JobEnv, JobOutput, PickContext, Task, WriteControl};
use tierkv::memtable::MemTable;
use tierkv::stats::StallCause;
use tierkv::storage::alloc::PageRun;
use tierkv::storage::mem::MemFs;
use tierkv::storage::pm::PmTier;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::Power;
use tierkv::version::edit::{PmWal, TableMeta, VersionEdit};
use tierkv::version::{TableContext, Version};
use tierkv::{Db, NvAppend, Options, Preset, ReadOptions, Result, WriteBatch, WriteOptions};

mod common;
use common::crash::{Countdown, CountingFs, CountingRegion};

/// NV-Cache whose picker hands out only as many tasks as allowed.
struct Gate {
    inner: NvCache,
    allowed: Arc<AtomicUsize>,
}

impl Design for Gate {
    fn preset(&self) -> Preset {
        Preset::NvCache
    }
    fn flush(&self, env: &JobEnv, mem: &Arc<MemTable>) -> Result<JobOutput> {
        self.inner.flush(env, mem)
    }
    fn pick(&self, v: &Version, cx: &PickContext) -> Option<Task> {
        if self.allowed.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let t = self.inner.pick(v, cx)?;
        self.allowed.fetch_sub(1, Ordering::SeqCst);
        Some(t)
    }
    fn pick_manual(
        &self,
        v: &Version,
        cx: &PickContext,
        level: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Option<Task> {
        self.inner.pick_manual(v, cx, level, lo, hi)
    }
    fn run(&self, env: &JobEnv, task: &Task) -> Result<JobOutput> {
        self.inner.run(env, task)
    }
    fn write_control(&self, v: &Version, immutable_count: usize) -> WriteControl {
        self.inner.write_control(v, immutable_count)
    }
    fn write_control_epoch(&self) -> u64 {
        self.inner.write_control_epoch()
    }
    fn flush_blocked(&self, v: &Version) -> Option<StallCause> {
        self.inner.flush_blocked(v)
    }
    fn install(&self, ctx: &Arc<TableContext>) {
        self.inner.install(ctx)
    }
    fn recover(&self, env: &JobEnv) -> Result<Vec<VersionEdit>> {
        self.inner.recover(env)
    }
    fn live_pm_runs(&self, versions: &[Arc<Version>], logs: &[PmWal]) -> Result<Vec<PageRun>> {
        self.inner.live_pm_runs(versions, logs)
    }
    fn release(&self, meta: &TableMeta) -> Result<Vec<PageRun>> {
        self.inner.release(meta)
    }
    fn log(&self) -> Option<&dyn DesignLog> {
        self.inner.log()
    }
    fn debt(&self, v: &Version) -> u64 {
        self.inner.debt(v)
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const PM_BYTES: usize = 8 << 20;

/// How a rig's NV-Cache is configured.
#[derive(Clone, Copy)]
struct Config {
    append: NvAppend,
    cache_bytes: u64,
    pm_levels: usize,
    l0_trigger: usize,
}

/// One database on crashable devices.
struct Rig {
    cfg: Config,
    fs: MemFs,
    sim: Arc<SimRegion>,
    cd: Arc<Countdown>,
    allowed: Arc<AtomicUsize>,
    db: Option<Db>,
}

fn dir() -> PathBuf {
    PathBuf::from("/db")
}

impl Rig {
    fn new(cfg: Config) -> Rig {
        let power = Power::new();
        let fs = MemFs::new();
        fs.set_power(power.clone());
        let sim = Arc::new(SimRegion::new(PM_BYTES));
        sim.set_power(power.clone());
        let mut r = Rig {
            cfg,
            fs,
            sim,
            cd: Countdown::new(power),
            allowed: Arc::new(AtomicUsize::new(0)),
            db: None,
        };
        r.open();
        r
    }

    fn options(&self) -> Options {
        Options {
            design: Preset::NvCache,
            fs: Arc::new(CountingFs {
                inner: self.fs.clone(),
                cd: Arc::clone(&self.cd),
            }),
            pm_region: Some(Arc::new(CountingRegion {
                inner: Arc::clone(&self.sim),
                cd: Arc::clone(&self.cd),
            })),
            pm_size_bytes: PM_BYTES as u64,
            memtable_size_bytes: 64 << 10,
            sst_size_bytes: 64 << 10,
            l1_size_bytes: 256 << 10,
            level_size_multiplier: 4,
            level_count: 4,
            l0_compaction_trigger: self.cfg.l0_trigger,
            l0_slowdown_trigger: 100,
            l0_stop_trigger: 100,
            block_size_bytes: 1024,
            nvcache_segment_bytes: 16 << 10,
            nvcache_append: self.cfg.append,
            nvcache_cache_bytes: self.cfg.cache_bytes,
            nvcache_pm_levels: self.cfg.pm_levels,
            // Background tasks run only when a test lets them: the pacer,
            // which slows writers to what background work drains, would
            // hold every write of the setup at its floor rate.
            write_pacing: false,
            ..Options::default()
        }
    }

    fn open(&mut self) {
        let allowed = Arc::clone(&self.allowed);
        allowed.store(0, Ordering::SeqCst);
        let factory = move |o: &Options, pm: Option<Arc<PmTier>>| -> Result<Arc<dyn Design>> {
            let pm = pm.ok_or_else(|| tierkv::Error::InvalidOptions("PM tier".into()))?;
            Ok(Arc::new(Gate {
                inner: NvCache::new(o, pm)?,
                allowed: Arc::clone(&allowed),
            }))
        };
        self.db = Some(
            Db::open_with_design(dir(), self.options(), &factory)
                .unwrap_or_else(|e| panic!("open: {e}")),
        );
    }

    fn db(&self) -> &Db {
        self.db.as_ref().expect("open")
    }

    /// Lets `n` background tasks run and waits until they are done.
    fn run_tasks(&self, n: usize) {
        let before = self.db().stats().compactions.len();
        self.allowed.store(n, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.db().stats().compactions.len() < before + n {
            assert!(Instant::now() < deadline, "background tasks did not run");
            std::thread::sleep(Duration::from_millis(1));
        }
        self.allowed.store(0, Ordering::SeqCst);
    }

    /// Power loss: both devices keep only what was durable.
    fn crash(&mut self, evictions: Option<u64>) {
        self.cd.power.lock().cut();
        let fs = self.fs.crash();
        let sim = Arc::new(match evictions {
            Some(seed) => self.sim.crash_with_evictions(seed),
            None => self.sim.crash(),
        });
        drop(self.db.take());
        let power = Power::new();
        fs.set_power(power.clone());
        sim.set_power(power.clone());
        self.fs = fs;
        self.sim = sim;
        self.cd = Countdown::new(power);
        self.open();
    }

    fn contents(&self) -> Model {
        let mut it = self.db().iter(ReadOptions::default()).expect("iter");
        it.seek_to_first();
        let mut m = Model::new();
        while it.valid() {
            m.insert(it.key().to_vec(), it.value().to_vec());
            it.next();
        }
        it.status().expect("scan");
        m
    }

    /// Kinds of the compactions run so far.
    fn kinds(&self) -> Vec<String> {
        self.db()
            .stats()
            .compactions
            .iter()
            .map(|c| c.kind.clone())
            .collect()
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key{:05}", (i * 7919) % 3001).into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    let len = 50 + (i * 37) % 400;
    (0..len).map(|j| (i as u8).wrapping_add(j as u8)).collect()
}

/// The batch `i`: a put or (every seventh) a delete; every fifth also
/// carries three more puts (a group of several nodes); every 41st a value
/// larger than a segment.
/// Puts (`Some`) and deletes (`None`) of a batch.
type Ops = Vec<(Vec<u8>, Option<Vec<u8>>)>;

fn batch(i: u64) -> (WriteBatch, Ops) {
    let mut b = WriteBatch::new();
    let mut ops = Vec::new();
    if i % 7 == 3 {
        b.delete(&key(i));
        ops.push((key(i), None));
    } else {
        let v = if i % 41 == 40 {
            vec![i as u8; 20 << 10]
        } else {
            value(i)
        };
        b.put(&key(i), &v);
        ops.push((key(i), Some(v)));
    }
    if i % 5 == 1 {
        for j in 1..4 {
            let k = key(i * 13 + j);
            let v = value(i + j);
            b.put(&k, &v);
            ops.push((k, Some(v)));
        }
    }
    (b, ops)
}

fn apply(model: &mut Model, ops: &[(Vec<u8>, Option<Vec<u8>>)]) {
    for (k, v) in ops {
        match v {
            Some(v) => model.insert(k.clone(), v.clone()),
            None => model.remove(k),
        };
    }
}

/// Writes batches `start..start + n`.
fn write(db: &Db, model: &mut Model, start: u64, n: u64) {
    for i in start..start + n {
        let (b, ops) = batch(i);
        db.write(b, &WriteOptions::default()).expect("write");
        apply(model, &ops);
    }
}

fn check(rig: &Rig, model: &Model, what: &str) {
    let got = rig.contents();
    if &got != model {
        let missing = model.keys().filter(|k| !got.contains_key(*k)).count();
        let extra = got.keys().filter(|k| !model.contains_key(*k)).count();
        let differ = model
            .iter()
            .filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v))
            .count();
        panic!("{what}: {missing} keys missing, {extra} extra, {differ} differ");
    }
    for k in model.keys().step_by(13) {
        assert_eq!(
            rig.db().get(k).expect("get").as_ref(),
            model.get(k),
            "{what}: get"
        );
    }
}

/// The state before the operation under test, built by `setup`.
type Setup = dyn Fn(&Rig, &mut Model);

/// Runs `op` with the power cut before its n-th durability event, for
/// every n up to the number it performs; after each crash the database
/// must equal the model, keep working, and keep PM exact.
fn every_crash_point(cfg: Config, what: &str, setup: &Setup, op: &dyn Fn(&Rig)) -> u64 {
    // Dry run: count the events.
    let mut model = Model::new();
    let rig = Rig::new(cfg);
    setup(&rig, &mut model);
    rig.cd.arm(u64::MAX);
    op(&rig);
    let total = rig.cd.events.load(Ordering::SeqCst);
    assert!(total > 2, "{what}: only {total} durability events");
    let kinds = rig.kinds();
    drop(rig);
    for n in 0..=total {
        let mut model = Model::new();
        let mut rig = Rig::new(cfg);
        setup(&rig, &mut model);
        rig.cd.arm(n);
        op(&rig);
        let evictions = (n % 2 == 1).then_some(n * 7919 + 1);
        rig.crash(evictions);
        check(
            &rig,
            &model,
            &format!("{what}: crash before event {n} of {total}"),
        );
        // The reopened database keeps working, flushes and (every few
        // points) compacts all the way down.
        write(rig.db(), &mut model, 5000, 60);
        rig.db().flush().expect("flush after recovery");
        if n % 5 == 0 || n == total {
            rig.db()
                .compact_range(None, None)
                .expect("compact after recovery");
        }
        check(&rig, &model, &format!("{what}: writes after crash {n}"));
    }
    eprintln!("{what}: {total} durability events, tasks {kinds:?}");
    total
}

/// Four flushed tables of `per` batches each, and a memtable (log) with
/// data.
fn flushed_n(rig: &Rig, model: &mut Model, per: u64) {
    for round in 0..4 {
        write(rig.db(), model, round * per, per);
        rig.db().flush().expect("flush");
    }
    write(rig.db(), model, 4 * per, per);
}

fn flushed(rig: &Rig, model: &mut Model) {
    flushed_n(rig, model, 100);
}

const DEFAULT: Config = Config {
    append: NvAppend::Group,
    cache_bytes: 0,
    pm_levels: 0,
    l0_trigger: 2,
};

/// Appends: every persist of 60 groups (single entries, groups of four,
/// values larger than a segment, new segments). A write acknowledged
/// before the cut survives; the one in flight may; nothing after it does.
fn appends(cfg: Config, what: &str) {
    let setup = |rig: &Rig, model: &mut Model| flushed_n(rig, model, 30);
    let mut dry = Model::new();
    let rig = Rig::new(cfg);
    setup(&rig, &mut dry);
    rig.cd.arm(u64::MAX);
    write(rig.db(), &mut dry, 1000, 60);
    let total = rig.cd.events.load(Ordering::SeqCst);
    drop(rig);
    assert!(total > 60, "{what}: only {total} durability events");
    eprintln!("{what}: {total} durability events");
    for n in 0..=total {
        let mut model = Model::new();
        let mut rig = Rig::new(cfg);
        setup(&rig, &mut model);
        rig.cd.arm(n);
        let mut with_in_flight: Option<Model> = None;
        for i in 1000..1060 {
            let (b, ops) = batch(i);
            rig.db().write(b, &WriteOptions::default()).expect("write");
            if rig.cd.is_on() {
                apply(&mut model, &ops);
            } else {
                let mut m = model.clone();
                apply(&mut m, &ops);
                with_in_flight = Some(m);
                break;
            }
        }
        rig.crash((n % 2 == 1).then_some(n * 31 + 7));
        let got = rig.contents();
        assert!(
            got == model || with_in_flight.as_ref() == Some(&got),
            "{what}: crash before event {n} of {total}: not the acknowledged writes"
        );
        let mut model = got;
        write(rig.db(), &mut model, 5000, 60);
        rig.db().flush().expect("flush after recovery");
        check(&rig, &model, &format!("{what}: writes after crash {n}"));
    }
}

#[test]
fn append_groups() {
    appends(DEFAULT, "append (group)");
}

#[test]
fn append_entry_by_entry() {
    appends(
        Config {
            append: NvAppend::PerEntry,
            ..DEFAULT
        },
        "append (per entry)",
    );
}

#[test]
fn flush() {
    every_crash_point(DEFAULT, "flush", &flushed, &|rig| {
        rig.db().flush().expect("flush")
    });
}

/// A list compaction of the oldest L0 table into a populated L1: relinks
/// (one persist per node), copies out of sparse segments, arrays, edit.
#[test]
fn list_compaction() {
    let setup = |rig: &Rig, model: &mut Model| {
        flushed_n(rig, model, 40);
        rig.db().flush().expect("flush");
        // Two list compactions populate L1 (and leave segments sparse).
        rig.run_tasks(2);
        for round in 0..2 {
            write(rig.db(), model, 700 + round * 50, 50);
            rig.db().flush().expect("flush");
        }
    };
    every_crash_point(DEFAULT, "list compaction", &setup, &|rig| rig.run_tasks(1));
}

/// Runs background tasks one at a time until one of `kind` ran.
fn run_until(rig: &Rig, kind: &str) {
    for _ in 0..20 {
        rig.run_tasks(1);
        if rig.kinds().last().map(String::as_str) == Some(kind) {
            return;
        }
    }
    panic!("no {kind} task: {:?}", rig.kinds());
}

/// An eviction of L1's LRU tail into SSTs: the cache overflows, L0's
/// oldest tables move down into L1 until there is something to evict.
/// (The cache holds not even L0's trigger, so two PM levels are set: by
/// default K would be 0, `eviction_out_of_l0`.)
#[test]
fn eviction() {
    let cfg = Config {
        cache_bytes: 64 << 10,
        l0_trigger: 100,
        pm_levels: 2,
        ..DEFAULT
    };
    let setup = |rig: &Rig, model: &mut Model| {
        flushed_n(rig, model, 60);
        rig.db().flush().expect("flush");
        run_until(rig, "nv-evict");
    };
    every_crash_point(cfg, "eviction", &setup, &|rig| run_until(rig, "nv-evict"));
}

/// L0 alone in PM (K = 0, the default when the cache cannot hold L0's
/// trigger and L1's target): one eviction takes the oldest L0 tables
/// together into SSTs of L1.
#[test]
fn eviction_out_of_l0() {
    let cfg = Config {
        cache_bytes: 64 << 10,
        l0_trigger: 100,
        ..DEFAULT
    };
    let setup = |rig: &Rig, model: &mut Model| {
        flushed_n(rig, model, 60);
        rig.db().flush().expect("flush");
    };
    let l0 = Rig::new(cfg);
    setup(&l0, &mut Model::new());
    let before = l0.db().property("tierkv.num-files-at-level0");
    run_until(&l0, "nv-evict");
    let after = l0.db().property("tierkv.num-files-at-level0");
    let (before, after): (usize, usize) = (
        before.expect("L0 files").parse().expect("a count"),
        after.expect("L0 files").parse().expect("a count"),
    );
    assert!(
        after + 1 < before,
        "one eviction took {} of {before} L0 tables",
        before - after
    );
    drop(l0);
    every_crash_point(cfg, "eviction out of L0", &setup, &|rig| {
        run_until(rig, "nv-evict")
    });
}
