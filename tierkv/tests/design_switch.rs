//! A database knows what it is (issue 23): every ordered pair of designs,
//! the PM region missing, foreign, resized or shared, and crashes in the
//! middle of a migration.
//!
//! For every pair (from, to): a database written under `from` and closed is
//! opened under `to` (on the same PM region when both keep data in PM, a
//! fresh one when only `to` does). It either opens with every key, or is
//! refused with every file and every PM byte as they were; then it opens
//! under its own design with every key. A refused pair is then migrated
//! (`Db::migrate`), opened under `to` with every key, and migrated back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tierkv::db::identity::{switch, Switch};
use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::{FileSystem, PmRegion, Power};
use tierkv::{Db, Error, Options, Preset, ReadOptions, WriteBatch};

mod common;
use common::crash::{Countdown, CountingFs, CountingRegion};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const PM_BYTES: usize = 24 << 20;

fn dir() -> PathBuf {
    PathBuf::from("/db")
}

fn key(i: u64) -> Vec<u8> {
    format!("key{:05}", (i * 7919) % 2503).into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    let len = 40 + (i * 37) % 300;
    (0..len).map(|j| (i as u8).wrapping_add(j as u8)).collect()
}

/// Options for `design` on `fs` and (for a design with PM) `region`: small
/// enough that a few thousand writes fill several tables at several levels.
fn options(design: Preset, fs: Arc<dyn FileSystem>, region: Option<Arc<dyn PmRegion>>) -> Options {
    let mut o = Options {
        design,
        fs,
        memtable_size_bytes: 64 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 256 << 10,
        level_size_multiplier: 4,
        level_count: 5,
        l0_compaction_trigger: 2,
        block_size_bytes: 1024,
        background_threads: 2,
        ..Options::default()
    };
    if let Some(r) = region {
        o.pm_size_bytes = r.len();
        o.pm_region = Some(r);
    }
    if design.needs_pm() {
        o.l1_size_bytes = 1 << 20;
        o.pm_container_limit_bytes = 24 << 10;
    }
    match design {
        Preset::RangeTab => {
            o.rangetab_count = 8;
            o.rangetab_capacity_bytes = 96 << 10;
        }
        Preset::NvCache => o.l1_size_bytes = 256 << 10,
        _ => {}
    }
    o
}

/// Writes `n` keys (every ninth a delete) and returns what the database
/// must hold.
fn fill(db: &Db, model: &mut Model, start: u64, n: u64) {
    for i in start..start + n {
        let mut b = WriteBatch::new();
        if i % 9 == 4 {
            b.delete(&key(i));
            model.remove(&key(i));
        } else {
            b.put(&key(i), &value(i));
            model.insert(key(i), value(i));
        }
        db.write(b, &Default::default()).expect("write");
    }
}

fn check(db: &Db, model: &Model, what: &str) {
    let mut got = Model::new();
    let mut it = db.iter(ReadOptions::default()).expect("iter");
    it.seek_to_first();
    while it.valid() {
        got.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    it.status().unwrap_or_else(|e| panic!("{what}: scan: {e}"));
    assert_eq!(
        got.len(),
        model.len(),
        "{what}: scan holds {} keys, want {}",
        got.len(),
        model.len()
    );
    assert!(got == *model, "{what}: scan differs from the model");
    for (k, v) in model.iter().step_by(7) {
        let g = db.get(k).unwrap_or_else(|e| panic!("{what}: get: {e}"));
        assert_eq!(
            g.as_deref(),
            Some(&v[..]),
            "{what}: get {:?}",
            String::from_utf8_lossy(k)
        );
    }
}

/// Every file of the directory and every byte of the region.
fn image(fs: &MemFs, region: Option<&SimRegion>) -> (BTreeMap<String, Vec<u8>>, Vec<u8>) {
    let mut files = BTreeMap::new();
    for name in fs.list(&dir()).expect("list") {
        let p = dir().join(&name);
        if name == "lost" {
            continue;
        }
        files.insert(name, fs.read_all(&p).expect("read"));
    }
    let pm = region.map_or_else(Vec::new, |r| {
        r.slice(0, r.len() as usize).expect("slice").to_vec()
    });
    (files, pm)
}

/// One database on a memory file system and (as its designs need them)
/// simulated PM regions.
struct Rig {
    fs: MemFs,
    /// The region of the design the database has now (if it keeps PM).
    region: Option<Arc<SimRegion>>,
    design: Preset,
    model: Model,
}

impl Rig {
    fn new(design: Preset, keys: u64) -> Rig {
        let fs = MemFs::new();
        let region = design
            .needs_pm()
            .then(|| Arc::new(SimRegion::new(PM_BYTES)));
        let mut rig = Rig {
            fs,
            region,
            design,
            model: Model::new(),
        };
        let db = Db::open(dir(), rig.options_for(design, rig.region.clone())).expect("create");
        fill(&db, &mut rig.model, 0, keys);
        db.close().expect("close");
        rig
    }

    fn options_for(&self, design: Preset, region: Option<Arc<SimRegion>>) -> Options {
        options(
            design,
            Arc::new(self.fs.clone()),
            region.map(|r| r as Arc<dyn PmRegion>),
        )
    }

    /// The region `design` opens with: the database's own if it has one
    /// and `design` keeps PM, a fresh one if only `design` does.
    fn region_for(&self, design: Preset) -> Option<Arc<SimRegion>> {
        if !design.needs_pm() {
            return None;
        }
        Some(
            self.region
                .clone()
                .unwrap_or_else(|| Arc::new(SimRegion::new(PM_BYTES))),
        )
    }

    fn open_own(&self, what: &str) {
        let db = Db::open(dir(), self.options_for(self.design, self.region.clone()))
            .unwrap_or_else(|e| panic!("{what}: open under its own design `{}`: {e}", self.design));
        check(&db, &self.model, what);
        db.close().expect("close");
    }
}

/// Every ordered pair: opens with every key, or refuses changing nothing;
/// then opens under its own design; a refused pair migrates both ways.
#[test]
fn every_ordered_pair_opens_whole_or_refuses_untouched() {
    for from in Preset::ALL {
        for to in Preset::ALL {
            let what = format!("{from} -> {to}");
            let mut rig = Rig::new(from, 3000);
            let before = image(&rig.fs, rig.region.as_deref());
            let to_region = rig.region_for(to);
            match Db::open(dir(), rig.options_for(to, to_region.clone())) {
                Ok(db) => {
                    assert_ne!(switch(from, to), Switch::NeedsMigration, "{what}: opened");
                    check(&db, &rig.model, &what);
                    // New writes go to the new design.
                    fill(&db, &mut rig.model, 3000, 300);
                    db.close().expect("close");
                    rig.design = to;
                    rig.region = to_region;
                    rig.open_own(&format!("{what}, reopened"));
                }
                Err(e) => {
                    assert_eq!(switch(from, to), Switch::NeedsMigration, "{what}: {e}");
                    let msg = e.to_string();
                    assert!(
                        matches!(e, Error::InvalidOptions(_))
                            && msg.contains(&format!("`{from}`"))
                            && msg.contains(&format!("`{to}`")),
                        "{what}: the refusal names both designs: {msg}"
                    );
                    let after = image(&rig.fs, rig.region.as_deref());
                    assert!(
                        before.0 == after.0,
                        "{what}: a file changed after the refusal"
                    );
                    assert!(
                        before.1 == after.1,
                        "{what}: the PM region changed after the refusal"
                    );
                    rig.open_own(&format!("{what}, refused, back under {from}"));

                    // The documented way across: migrate, then back.
                    let r = Db::migrate(
                        dir(),
                        rig.options_for(from, rig.region.clone()),
                        rig.options_for(to, to_region.clone()),
                    )
                    .unwrap_or_else(|e| panic!("{what}: migrate: {e}"));
                    assert!(r.moved_pm_data, "{what}: {r:?}");
                    rig.design = to;
                    rig.region = to_region;
                    rig.open_own(&format!("{what}, migrated"));
                    let back_region = rig.region_for(from);
                    Db::migrate(
                        dir(),
                        rig.options_for(to, rig.region.clone()),
                        rig.options_for(from, back_region.clone()),
                    )
                    .unwrap_or_else(|e| panic!("{what}: migrate back: {e}"));
                    rig.design = from;
                    rig.region = back_region;
                    rig.open_own(&format!("{what}, migrated back"));
                }
            }
        }
    }
}

/// A crash at every durability point of a migration leaves either the old
/// database or the new one, whole; running the migration again finishes
/// it.
#[test]
fn a_crash_anywhere_in_a_migration_loses_nothing() {
    for (from, to, step) in [
        (Preset::Triangle, Preset::Classic, 2),
        (Preset::RangeTab, Preset::Tlsm, 5),
    ] {
        let mut n = 0;
        loop {
            // A database of `from`, durable, then a migration with the
            // power cut before its n-th durability event.
            let base = Rig::new(from, 1200);
            let power = Power::new();
            base.fs.set_power(power.clone());
            let sim = base.region.clone().expect("region");
            sim.set_power(power.clone());
            let cd = Countdown::new(power);
            let counted = |design: Preset| {
                let mut o = options(
                    design,
                    Arc::new(CountingFs {
                        inner: base.fs.clone(),
                        cd: Arc::clone(&cd),
                    }),
                    Some(Arc::new(CountingRegion {
                        inner: Arc::clone(&sim),
                        cd: Arc::clone(&cd),
                    })),
                );
                if !design.needs_pm() {
                    o.pm_region = None;
                }
                o
            };
            cd.arm(n);
            let r = Db::migrate(dir(), counted(from), counted(to));
            let finished = cd.is_on();
            if finished {
                r.unwrap_or_else(|e| panic!("{from} -> {to}: migrate: {e}"));
            }
            // What was durable.
            cd.power.lock().cut();
            let fs = base.fs.crash();
            let region = Arc::new(sim.crash());
            let o = |design: Preset| {
                options(
                    design,
                    Arc::new(fs.clone()),
                    design
                        .needs_pm()
                        .then(|| Arc::clone(&region) as Arc<dyn PmRegion>),
                )
            };
            let what = format!("{from} -> {to}, crash before event {n}");
            let db = match Db::open(dir(), o(to)) {
                Ok(db) => db,
                Err(e) => {
                    assert!(!finished, "{what}: finished, yet refused: {e}");
                    let db = Db::open(dir(), o(from))
                        .unwrap_or_else(|e| panic!("{what}: neither design opens it: {e}"));
                    check(&db, &base.model, &format!("{what}, under {from}"));
                    db.close().expect("close");
                    Db::migrate(dir(), o(from), o(to))
                        .unwrap_or_else(|e| panic!("{what}: migrate again: {e}"));
                    Db::open(dir(), o(to)).expect("open after the second migration")
                }
            };
            check(&db, &base.model, &what);
            db.close().expect("close");
            if finished {
                assert!(n > 0);
                break;
            }
            n += step;
            let _ = cd.events.load(Ordering::SeqCst);
        }
    }
}

fn posix_options(design: Preset, dir: &Path, pm_dir: &Path) -> Options {
    let mut o = options(
        design,
        Arc::new(tierkv::storage::posix::PosixFs::new()),
        None,
    );
    o.pm_dir = Some(pm_dir.to_path_buf());
    o.pm_size_bytes = 16 << 20;
    let _ = dir;
    o
}

fn create(design: Preset, dir: &Path, pm_dir: &Path) -> Model {
    let db = Db::open(dir, posix_options(design, dir, pm_dir)).expect("create");
    let mut model = Model::new();
    fill(&db, &mut model, 0, 1500);
    db.close().expect("close");
    model
}

fn dir_image(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        if p.is_file() && p.file_name().is_some_and(|n| n != "LOCK") {
            m.insert(p.clone(), std::fs::read(&p).expect("read"));
        }
    }
    m
}

/// The PM directory gone (a reboot of /dev/shm): refused as "gone", naming
/// what it held and what SSD holds, nothing written (no new region file);
/// with the region back, it opens whole.
#[test]
fn a_missing_pm_region_is_named_gone_and_nothing_is_written() {
    let t = tempfile::tempdir().expect("tempdir");
    let (db_dir, pm_dir) = (t.path().join("db"), t.path().join("pm"));
    let model = create(Preset::Triangle, &db_dir, &pm_dir);
    let aside = t.path().join("pm-aside");
    std::fs::rename(&pm_dir, &aside).expect("move the PM directory away");
    let before = dir_image(&db_dir);
    let e = Db::open(&db_dir, posix_options(Preset::Triangle, &db_dir, &pm_dir))
        .err()
        .expect("refused");
    let msg = e.to_string();
    assert!(
        msg.contains("PM tier") && msg.contains("is gone") && msg.contains("WAL"),
        "{msg}"
    );
    assert!(msg.contains("repair"), "says what can be recovered: {msg}");
    assert_eq!(
        before,
        dir_image(&db_dir),
        "the refusal changed the directory"
    );
    assert!(
        !pm_dir.join("pm.region").exists(),
        "the refusal formatted a new region"
    );
    std::fs::remove_dir_all(&pm_dir).ok();
    std::fs::rename(&aside, &pm_dir).expect("move it back");
    let db = Db::open(&db_dir, posix_options(Preset::Triangle, &db_dir, &pm_dir)).expect("open");
    check(&db, &model, "region back");
    db.close().expect("close");
}

/// Another database's region: refused naming both ids, both databases
/// unchanged; a second database on a PM directory in use: refused naming
/// the holder.
#[test]
fn a_foreign_or_shared_pm_region_is_refused() {
    let t = tempfile::tempdir().expect("tempdir");
    let (a, pa) = (t.path().join("a"), t.path().join("pa"));
    let (b, pb) = (t.path().join("b"), t.path().join("pb"));
    let ma = create(Preset::Triangle, &a, &pa);
    let mb = create(Preset::Triangle, &b, &pb);

    // a's directory with b's region.
    let (ia, ib, ipb) = (dir_image(&a), dir_image(&b), dir_image(&pb));
    let e = Db::open(&a, posix_options(Preset::Triangle, &a, &pb))
        .err()
        .expect("refused");
    let msg = e.to_string();
    assert!(msg.contains("belongs to database 0x"), "{msg}");
    assert_eq!(
        (ia, ib, ipb),
        (dir_image(&a), dir_image(&b), dir_image(&pb))
    );

    // A new database on a's region.
    let c = t.path().join("c");
    let e = Db::open(&c, posix_options(Preset::Triangle, &c, &pa))
        .err()
        .expect("refused");
    assert!(e.to_string().contains("belongs to database 0x"), "{e}");

    // Shared: a is open; a second opener of its PM directory.
    let db = Db::open(&a, posix_options(Preset::Triangle, &a, &pa)).expect("open a");
    let d = t.path().join("d");
    let e = Db::open(&d, posix_options(Preset::Classic, &d, &pa))
        .err()
        .expect("refused while a holds it");
    assert!(matches!(e, Error::Locked(_)), "{e}");
    assert!(
        e.to_string().contains(&a.display().to_string()),
        "names the holder: {e}"
    );
    check(&db, &ma, "a");
    db.close().expect("close a");
    let db = Db::open(&b, posix_options(Preset::Triangle, &b, &pb)).expect("open b");
    check(&db, &mb, "b");
    db.close().expect("close b");
}

/// A region file of another size: refused, unchanged.
#[test]
fn a_resized_pm_region_is_refused() {
    let t = tempfile::tempdir().expect("tempdir");
    let (db_dir, pm_dir) = (t.path().join("db"), t.path().join("pm"));
    let model = create(Preset::Triangle, &db_dir, &pm_dir);
    let mut o = posix_options(Preset::Triangle, &db_dir, &pm_dir);
    o.pm_size_bytes = 32 << 20;
    let before = dir_image(&pm_dir);
    let e = Db::open(&db_dir, o).err().expect("refused");
    assert!(e.to_string().contains("bytes"), "{e}");
    assert_eq!(before, dir_image(&pm_dir));
    let db = Db::open(&db_dir, posix_options(Preset::Triangle, &db_dir, &pm_dir)).expect("open");
    check(&db, &model, "right size");
    db.close().expect("close");
}
