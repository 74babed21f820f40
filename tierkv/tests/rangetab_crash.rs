//! Crash tests of `rangetab` (RangeKV): cut the power at every durability
//! point — every PM persist of the simulated region and every sync of the
//! crashable file system, counted together in the order they happen — of
//! a flush into the RangeTabs (appends; a flush that fills a buffer,
//! seals it and spills into its sibling; an exclusive flush that merges a RangeTab
//! and an oversized part into L1), of a seal + merge (`compact_range`),
//! and of the first open (the buffers' allocation), then reopen on what
//! was durable and check that the database holds every acknowledged write
//! and nothing else, and that it keeps working. Half of the crashes also
//! let unpersisted PM words reach the durable image (early cache
//! write-backs). A last test cuts the power at random points while
//! background merges run under writes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::Power;
use tierkv::{Db, Options, Preset, ReadOptions, WriteBatch, WriteOptions};

mod common;
use common::crash::{Countdown, CountingFs, CountingRegion};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// One database on crashable devices.
struct Rig {
    capacity: u64,
    fs: MemFs,
    sim: Arc<SimRegion>,
    cd: Arc<Countdown>,
    db: Option<Db>,
}

const PM_BYTES: usize = 8 << 20;

fn dir() -> PathBuf {
    PathBuf::from("/db")
}

/// The four RangeTabs' boundaries over the keys of [`key`].
fn boundaries() -> Vec<Vec<u8>> {
    [750, 1500, 2250].iter().map(|&n| knum(n)).collect()
}

impl Rig {
    fn new(capacity: u64) -> Rig {
        let power = Power::new();
        let fs = MemFs::new();
        fs.set_power(power.clone());
        let sim = Arc::new(SimRegion::new(PM_BYTES));
        sim.set_power(power.clone());
        let cd = Countdown::new(power);
        let mut r = Rig {
            capacity,
            fs,
            sim,
            cd,
            db: None,
        };
        r.open();
        r
    }

    fn options(&self) -> Options {
        Options {
            design: Preset::RangeTab,
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
            l1_size_bytes: 1 << 20,
            level_size_multiplier: 4,
            level_count: 4,
            block_size_bytes: 1024,
            rangetab_count: 4,
            rangetab_capacity_bytes: self.capacity,
            rangetab_boundaries: boundaries(),
            // Only sealed buffers merge on their own: the states the
            // operations start from do not depend on timing.
            rangetab_beta: 0.99,
            rangetab_alpha: 0.98,
            rangetab_mu: 0.97,
            rangetab_low_load_fraction: 0.0,
            ..Options::default()
        }
    }

    fn open(&mut self) {
        self.db = Some(Db::open(dir(), self.options()).unwrap_or_else(|e| panic!("open: {e}")));
    }

    fn db(&self) -> &Db {
        self.db.as_ref().expect("open")
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
}

fn knum(n: u64) -> Vec<u8> {
    format!("key{n:05}").into_bytes()
}

/// Keys spread over the four RangeTabs.
fn key(i: u64) -> Vec<u8> {
    knum((i * 7919) % 3001)
}

/// Keys of RangeTab 0 only.
fn key0(i: u64) -> Vec<u8> {
    knum((i * 7919) % 750)
}

fn value(i: u64) -> Vec<u8> {
    let len = 50 + (i * 37) % 400;
    (0..len).map(|j| (i as u8).wrapping_add(j as u8)).collect()
}

/// Writes `n` batches starting at `start` with keys from `k`; deletes
/// every seventh key.
fn write_with(db: &Db, model: &mut Model, k: fn(u64) -> Vec<u8>, start: u64, n: u64) {
    for i in start..start + n {
        let mut b = WriteBatch::new();
        if i % 7 == 3 {
            b.delete(&k(i));
            model.remove(&k(i));
        } else {
            b.put(&k(i), &value(i));
            model.insert(k(i), value(i));
        }
        db.write(b, &WriteOptions::default()).expect("write");
    }
}

fn write(db: &Db, model: &mut Model, start: u64, n: u64) {
    write_with(db, model, key, start, n)
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
    for k in model.keys().step_by(17) {
        assert_eq!(
            rig.db().get(k).expect("get").as_ref(),
            model.get(k),
            "{what}: get"
        );
    }
}

/// The state before an operation: `rounds` flushed memtables in the
/// RangeTabs and a memtable with `pending` more writes (`k` keys).
struct Prep {
    capacity: u64,
    rounds: u64,
    pending: u64,
    k: fn(u64) -> Vec<u8>,
}

fn prepare(p: &Prep, model: &mut Model) -> Rig {
    let rig = Rig::new(p.capacity);
    for round in 0..p.rounds {
        write(rig.db(), model, round * 150, 150);
        rig.db().flush().expect("flush");
    }
    write_with(rig.db(), model, p.k, 10_000, p.pending);
    rig
}

/// Runs `op` with the power cut before its n-th durability event, for
/// every n up to the number it performs, crashing and checking each time.
fn every_crash_point(p: &Prep, what: &str, op: &dyn Fn(&Db)) {
    // Dry run: count the events.
    let mut model = Model::new();
    let rig = prepare(p, &mut model);
    rig.cd.arm(u64::MAX);
    op(rig.db());
    let total = rig.cd.events.load(Ordering::SeqCst);
    assert!(total > 3, "{what}: only {total} durability events");
    eprintln!("{what}: {total} durability events");
    let gauges = rig.db().stats().design;
    eprintln!("{what}: {gauges:?}");
    drop(rig);
    for n in 0..=total {
        let mut model = Model::new();
        let mut rig = prepare(p, &mut model);
        rig.cd.arm(n);
        op(rig.db());
        let evictions = (n % 2 == 1).then_some(n * 7919 + 1);
        rig.crash(evictions);
        check(
            &rig,
            &model,
            &format!("{what}: crash before event {n} of {total}"),
        );
        // The reopened database keeps working.
        write(rig.db(), &mut model, 5000, 50);
        rig.db().flush().expect("flush after recovery");
        check(&rig, &model, &format!("{what}: writes after crash {n}"));
    }
}

fn gauge(db: &Db, name: &str) -> u64 {
    db.stats()
        .design
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, v)| v.parse().expect("a count"))
}

#[test]
fn flush_appends_chunks() {
    let p = Prep {
        capacity: 256 << 10,
        rounds: 3,
        pending: 120,
        k: key,
    };
    every_crash_point(&p, "rangetab flush", &|db| db.flush().expect("flush"));
}

#[test]
fn flush_seals_a_full_buffer_and_switches() {
    // RangeTab 0 holds about 30 KiB; 120 more writes to it do not fit its
    // 48 KiB write buffer: their older entries fill it (a spill), it is
    // sealed, and the rest goes to its sibling.
    let p = Prep {
        capacity: 48 << 10,
        rounds: 3,
        pending: 120,
        k: key0,
    };
    let mut model = Model::new();
    let rig = prepare(&p, &mut model);
    let seals = gauge(rig.db(), "rangetab.seals");
    rig.db().flush().expect("flush");
    assert!(
        gauge(rig.db(), "rangetab.seals") > seals,
        "the flush sealed no buffer"
    );
    assert_eq!(
        gauge(rig.db(), "rangetab.spills"),
        1,
        "the flush did not spill"
    );
    drop(rig);
    every_crash_point(&p, "rangetab flush with a seal", &|db| {
        db.flush().expect("flush")
    });
}

#[test]
fn exclusive_flush_merges_an_oversized_part_into_l1() {
    // 120 writes to RangeTab 0 make a part larger than a 16 KiB buffer.
    let p = Prep {
        capacity: 16 << 10,
        rounds: 1,
        pending: 120,
        k: key0,
    };
    let mut model = Model::new();
    let rig = prepare(&p, &mut model);
    rig.db().flush().expect("flush");
    assert!(
        gauge(rig.db(), "rangetab.exclusive_flushes") > 0,
        "no exclusive flush"
    );
    drop(rig);
    every_crash_point(&p, "rangetab exclusive flush", &|db| {
        db.flush().expect("flush")
    });
}

#[test]
fn seal_and_merge() {
    let p = Prep {
        capacity: 256 << 10,
        rounds: 3,
        pending: 60,
        k: key,
    };
    every_crash_point(&p, "rangetab seal + merge", &|db| {
        db.compact_range(Some(&knum(400)), Some(&knum(1600)))
            .expect("compact")
    });
}

#[test]
fn creation() {
    // The first open allocates and formats 2N buffers and records them.
    let count = |n: u64| {
        let power = Power::new();
        let fs = MemFs::new();
        fs.set_power(power.clone());
        let sim = Arc::new(SimRegion::new(PM_BYTES));
        sim.set_power(power.clone());
        let cd = Countdown::new(power);
        cd.arm(n);
        let mut rig = Rig {
            capacity: 64 << 10,
            fs,
            sim,
            cd,
            db: None,
        };
        let opened = Db::open(dir(), rig.options()).is_ok();
        let events = rig.cd.events.load(Ordering::SeqCst);
        // No early write-backs: the open goes on after the cut, and a
        // write-back of what it stores after it (the allocator's magic
        // after a superblock that never became durable) is no crash a
        // machine can have.
        rig.crash(None);
        let mut model = Model::new();
        write(rig.db(), &mut model, 0, 200);
        rig.db().flush().expect("flush");
        check(
            &rig,
            &model,
            &format!("writes after a crash at creation event {n}"),
        );
        (opened, events)
    };
    let (_, total) = count(u64::MAX);
    assert!(total > 8, "creation: only {total} durability events");
    for n in 0..total {
        count(n);
    }
}

/// Background merges (sealed buffers, step 1) racing with writes: the
/// power is cut at some event while writes go on; every write that
/// returned before the cut survives, the one in flight may or may not.
#[test]
fn automatic_merges_under_writes() {
    let mut merges = 0;
    for n in (0..10u64).map(|x| x * 131 + 7) {
        let mut rig = Rig::new(24 << 10);
        let mut model = Model::new();
        write(rig.db(), &mut model, 0, 1500);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while merge_count(rig.db()) == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        rig.cd.arm(n);
        let mut in_flight: Option<(Vec<u8>, Option<Vec<u8>>)> = None;
        let mut i = 1500u64;
        while rig.cd.power.lock().is_on() && i < 6000 {
            let mut b = WriteBatch::new();
            let (k, v) = (key(i), value(i));
            let del = i % 7 == 3;
            if del {
                b.delete(&k);
            } else {
                b.put(&k, &v);
            }
            rig.db().write(b, &WriteOptions::default()).expect("write");
            let op = (k, (!del).then_some(v));
            if rig.cd.power.lock().is_on() {
                match &op.1 {
                    Some(v) => model.insert(op.0.clone(), v.clone()),
                    None => model.remove(&op.0),
                };
            } else {
                in_flight = Some(op);
            }
            i += 1;
        }
        merges += merge_count(rig.db());
        // No early write-backs here: background jobs run on after the cut
        // and reuse buffers whose emptying edit "committed" after it; a
        // write-back of those stores is no crash a machine can have.
        rig.crash(None);
        let got = rig.contents();
        let mut with = model.clone();
        if let Some((k, v)) = in_flight {
            match v {
                Some(v) => with.insert(k, v),
                None => with.remove(&k),
            };
        }
        assert!(
            got == model || got == with,
            "crash at event {n} after {i} writes: database differs from the acknowledged writes"
        );
    }
    eprintln!("rangetab: {merges} merges");
    assert!(merges >= 10, "only {merges} RangeTab merges ran");
}

/// RangeTab merges run so far.
fn merge_count(db: &Db) -> usize {
    db.stats()
        .compactions
        .iter()
        .filter(|c| c.kind.starts_with("rt-"))
        .count()
}
