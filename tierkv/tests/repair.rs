//! `Db::repair`: damage or remove the MANIFEST, repair, reopen — every key
//! that was in a table, a WAL or a PM structure is there with its newest
//! value, and the report says what was read.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tierkv::db::repair::SourceKind;
use tierkv::design::nvcache::format::{
    read_table_header, Node, SegmentHeader, SegmentKind, TableHeader, NODE_NEXT, SEGMENT_MAGIC,
    TABLE_HEADER_BYTES, TABLE_MAGIC,
};
use tierkv::design::nvcache::log::walk;
use tierkv::storage::alloc::{PageAllocator, PageRun};
use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::{FileSystem, PmRegion};
use tierkv::{Db, Options, Preset, ReadOptions, WriteBatch, WriteOptions};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const PM_BYTES: usize = 16 << 20;

fn dir() -> PathBuf {
    PathBuf::from("/db")
}

fn options(design: Preset, fs: &MemFs, pm: Option<&Arc<SimRegion>>, regions: usize) -> Options {
    let mut o = Options {
        design,
        fs: Arc::new(fs.clone()),
        memtable_size_bytes: 64 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 256 << 10,
        level_size_multiplier: 4,
        level_count: 5,
        l0_compaction_trigger: 2,
        block_size_bytes: 1024,
        regions,
        ..Options::default()
    };
    if let Some(sim) = pm {
        o.pm_region = Some(Arc::clone(sim) as Arc<dyn PmRegion>);
        o.pm_size_bytes = PM_BYTES as u64;
        o.l1_size_bytes = 1 << 20;
        // Sides only when asked (below), so rows stay in the container
        // whatever the machine's speed.
        o.pm_container_limit_bytes = 1 << 30;
    }
    o
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Writes `n` batches over 1,500 keys (overwrites; with `deletes`, every
/// ninth operation deletes), flushing now and then, and leaves the last
/// ones in the WAL; closes cleanly.
fn build(db: &Db, n: u32, deletes: bool, seed: u64) -> Model {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = Model::new();
    for op in 0..n {
        let k = key(rng.gen_range(0..1_500));
        let mut b = WriteBatch::new();
        if deletes && op % 9 == 4 {
            b.delete(&k);
            model.remove(&k);
        } else {
            let v = format!("{op}-").repeat(rng.gen_range(1..40)).into_bytes();
            b.put(&k, &v);
            model.insert(k, v);
        }
        db.write(b, &WriteOptions { sync: op % 50 == 0 })
            .expect("write");
        if op % 2_000 == 1_999 {
            db.flush().expect("flush");
        }
    }
    model
}

fn contents(db: &Db) -> Model {
    let mut it = db.iter(ReadOptions::default()).expect("iter");
    it.seek_to_first();
    let mut m = Model::new();
    while it.valid() {
        m.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    it.status().expect("scan");
    m
}

fn manifest_of(fs: &MemFs) -> PathBuf {
    let name = fs
        .list(&dir())
        .expect("list")
        .into_iter()
        .find(|n| n.starts_with("MANIFEST-"))
        .expect("a manifest");
    dir().join(name)
}

/// Damages the MANIFEST (the open fails), repairs, reopens and compares.
fn damage_repair_reopen(
    design: Preset,
    regions: usize,
    deletes: bool,
    damage: &dyn Fn(&MemFs),
) -> tierkv::RepairReport {
    let fs = MemFs::new();
    let sim = design
        .needs_pm()
        .then(|| Arc::new(SimRegion::new(PM_BYTES)));
    let o = || options(design, &fs, sim.as_ref(), regions);
    let model = {
        let db = Db::open(dir(), o()).expect("open");
        let mut m = build(&db, 6_000, deletes, 7);
        // Part of the key space compacted (a side, for the PM designs: rows
        // partly consumed), then more rows and WAL records.
        db.compact_range(Some(&key(200)), Some(&key(700)))
            .expect("compact");
        m.extend(build(&db, 3_000, false, 8));
        db.close().expect("close");
        m
    };
    damage(&fs);
    let report = Db::repair(dir(), o()).expect("repair");
    eprintln!("{design}: {report}");
    let db = Db::open(dir(), o()).expect("open after repair");
    assert_eq!(contents(&db), model, "{design}: data after repair");
    for (k, v) in model.iter().step_by(13) {
        assert_eq!(db.get(k).expect("get").as_ref(), Some(v));
    }
    // The repaired database goes on working, and survives a reopen.
    for i in 0..300 {
        db.put(&key(i), b"after").expect("put");
    }
    db.flush().expect("flush");
    db.close().expect("close");
    let db = Db::open(dir(), o()).expect("reopen");
    assert_eq!(
        db.get(&key(7)).expect("get").as_deref(),
        Some(&b"after"[..])
    );
    assert!(fs.exists(&dir().join("lost")), "inputs kept in lost/");
    report
}

fn flip_in_manifest(fs: &MemFs) {
    let m = manifest_of(fs);
    let len = fs.file_size(&m).expect("size") as usize;
    fs.corrupt(&m, len / 2, 0x20).expect("corrupt");
}

#[test]
fn classic_repair_after_a_damaged_manifest() {
    let r = damage_repair_reopen(Preset::Classic, 1, true, &|fs| {
        flip_in_manifest(fs);
        let e = Db::open(dir(), options(Preset::Classic, fs, None, 1))
            .err()
            .expect("a damaged manifest fails the open");
        assert!(e.is_corruption(), "{e}");
    });
    assert!(r.is_complete(), "{r}");
    assert!(r.sources.iter().any(|s| s.kind == SourceKind::Sst));
    assert!(r
        .sources
        .iter()
        .any(|s| s.kind == SourceKind::Wal && s.entries > 0));
    assert!(r.kept_in_lost.iter().any(|n| n.starts_with("MANIFEST-")));
}

#[test]
fn classic_repair_without_manifest_and_current() {
    damage_repair_reopen(Preset::Classic, 1, true, &|fs| {
        fs.remove(&manifest_of(fs)).expect("remove");
        fs.remove(&dir().join("CURRENT")).expect("remove");
    });
}

#[test]
fn classic_repair_with_regions() {
    damage_repair_reopen(Preset::Classic, 4, true, &flip_in_manifest);
}

#[test]
fn vlsm_repair_after_a_damaged_manifest() {
    damage_repair_reopen(Preset::Vlsm, 1, true, &flip_in_manifest);
}

/// A table whose block is damaged: repair keeps what it can read, says what
/// it could not, and the database opens.
#[test]
fn repair_reports_a_damaged_table_and_keeps_the_rest() {
    let fs = MemFs::new();
    let o = || options(Preset::Classic, &fs, None, 1);
    let model = {
        let db = Db::open(dir(), o()).expect("open");
        let m = build(&db, 6_000, false, 3);
        db.close().expect("close");
        m
    };
    let sst = fs
        .list(&dir())
        .expect("list")
        .into_iter()
        .filter(|n| n.ends_with(".sst"))
        .max()
        .expect("a table");
    fs.corrupt(&dir().join(&sst), 100, 0x01).expect("corrupt");
    flip_in_manifest(&fs);
    let report = Db::repair(dir(), o()).expect("repair");
    assert!(!report.is_complete());
    assert!(
        report.problems.iter().any(|p| p.contains(&sst)),
        "the damaged table is named: {report}"
    );
    let db = Db::open(dir(), o()).expect("open after repair");
    let got = contents(&db);
    // Whatever is there has the right value (a key whose newest version
    // was in the damaged block may show an older one: repair can only
    // give what it read).
    assert!(!got.is_empty() && got.keys().all(|k| model.contains_key(k)));
    let differ = got
        .iter()
        .filter(|(k, v)| model.get(*k) != Some(*v))
        .count();
    assert!(
        model.len() - got.len() + differ <= 400,
        "far more damage than one block: {} missing, {differ} differ",
        model.len() - got.len()
    );
    assert!(fs.exists(&dir().join("lost").join(&sst)));
}

#[test]
fn triangle_repair_reads_pm_rows_and_the_pm_wal() {
    let r = damage_repair_reopen(Preset::Triangle, 1, false, &flip_in_manifest);
    assert!(r.sources.iter().any(|s| s.kind == SourceKind::PmRow), "{r}");
    assert!(
        r.sources
            .iter()
            .any(|s| s.kind == SourceKind::PmWal && s.entries > 0),
        "{r}"
    );
    assert!(r.kept_in_lost.iter().any(|n| n == "pm.region"));
}

#[test]
fn matrix_repair_reads_pm_rows_and_the_pm_wal() {
    let r = damage_repair_reopen(Preset::Matrix, 1, false, &flip_in_manifest);
    assert!(r.sources.iter().any(|s| s.kind == SourceKind::PmRow), "{r}");
}

/// The PM allocator's superblock zeroed as well: every page is searched,
/// the region is formatted after its copy is kept, and the database opens.
#[test]
fn triangle_repair_with_a_damaged_pm_superblock() {
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(PM_BYTES));
    let o = || options(Preset::Triangle, &fs, Some(&sim), 1);
    let model = {
        let db = Db::open(dir(), o()).expect("open");
        let m = build(&db, 9_000, false, 11);
        db.close().expect("close");
        m
    };
    flip_in_manifest(&fs);
    sim.write(0, &[0u8; 4096]).expect("zero the superblock");
    sim.persist(0, 4096).expect("persist");
    let e = Db::open(dir(), o()).err().expect("open fails");
    assert!(e.is_corruption(), "{e}");
    let report = Db::repair(dir(), o()).expect("repair");
    assert!(
        report.problems.iter().any(|p| p.contains("allocator")),
        "{report}"
    );
    let db = Db::open(dir(), o()).expect("open after repair");
    assert_eq!(contents(&db), model);
    let copy = fs
        .read_all(&dir().join("lost").join("pm.region"))
        .expect("region copy");
    assert_eq!(copy.len(), PM_BYTES);
}

#[test]
fn repair_of_a_directory_without_a_database_is_refused() {
    let fs = MemFs::new();
    fs.create_dir_all(&dir()).expect("mkdir");
    let e =
        Db::repair(dir(), options(Preset::Classic, &fs, None, 1)).expect_err("nothing to repair");
    assert!(matches!(e, tierkv::Error::NotADatabase(_)), "{e}");
}

// ---- rangetab: the RangeTab buffers ----

mod common;
use common::crash::{Countdown, CountingFs, CountingRegion};
use tierkv::design::rangetab::buffer::Mirror;
use tierkv::storage::Power;

/// `rangetab` with two RangeTabs split at `key(750)` whose buffers hold
/// every flush of these tests: only a sealed buffer merges on its own, so
/// what sits in the buffers does not depend on timing.
fn rangetab_options(fs: Arc<dyn FileSystem>, pm: Arc<dyn PmRegion>, capacity: u64) -> Options {
    Options {
        design: Preset::RangeTab,
        fs,
        pm_region: Some(pm),
        pm_size_bytes: PM_BYTES as u64,
        memtable_size_bytes: 64 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 1 << 20,
        level_size_multiplier: 4,
        level_count: 5,
        block_size_bytes: 1024,
        rangetab_count: 2,
        rangetab_capacity_bytes: capacity,
        rangetab_boundaries: vec![key(750)],
        rangetab_beta: 0.99,
        rangetab_alpha: 0.98,
        rangetab_mu: 0.97,
        rangetab_low_load_fraction: 0.0,
        ..Options::default()
    }
}

/// Operation `o` of the rangetab tests: key `(7o) mod 1500` (ops 1500 and
/// up overwrite the keys of ops 0..1500, in the same order), a value that
/// names the op, and with `deletes` every ninth op a delete.
fn rangetab_op(db: &Db, model: &mut Model, o: u32, deletes: bool, sync: bool) {
    let k = key((o * 7) % 1_500);
    let mut b = WriteBatch::new();
    if deletes && o % 9 == 4 {
        b.delete(&k);
        model.remove(&k);
    } else {
        let v = format!("{o}:").repeat(1 + (o % 5) as usize).into_bytes();
        b.put(&k, &v);
        model.insert(k, v);
    }
    db.write(b, &WriteOptions { sync }).expect("write");
}

/// The buffers of a `rangetab` region in use (write or sealed header):
/// (offset, header).
fn rangetab_buffers(sim: &SimRegion) -> Vec<(u64, Mirror)> {
    (1..PM_BYTES as u64 / 4096)
        .filter_map(|p| {
            let h = sim.slice(p * 4096, 64).ok()?;
            Mirror::decode(h).map(|m| (p * 4096, m))
        })
        .filter(|(_, m)| m.used > 0)
        .collect()
}

#[test]
fn rangetab_repair_after_a_damaged_manifest() {
    let r = damage_repair_reopen(Preset::RangeTab, 1, true, &flip_in_manifest);
    assert!(
        r.sources
            .iter()
            .any(|s| s.kind == SourceKind::PmRangeTab && s.entries > 0),
        "{r}"
    );
    assert!(r.kept_in_lost.iter().any(|n| n == "pm.region"));
}

/// Everything flushed sits in the RangeTab buffers only (no merge ran, the
/// flushed WALs are gone): repair gives exactly the model, read from the
/// buffers — deletes included: the overwrite pass deletes keys whose puts
/// sit in earlier chunks of the same buffers, and they stay deleted.
#[test]
fn rangetab_repair_reads_the_buffers() {
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(PM_BYTES));
    let o = || rangetab_options(Arc::new(fs.clone()), sim.clone(), 512 << 10);
    let mut model = Model::new();
    let db = Db::open(dir(), o()).expect("open");
    for op in 0..2_400 {
        rangetab_op(&db, &mut model, op, true, op % 50 == 0);
        if op % 300 == 299 {
            db.flush().expect("flush");
        }
    }
    for op in 2_400..2_500 {
        rangetab_op(&db, &mut model, op, true, true);
    }
    db.close().expect("close");
    let buffers = rangetab_buffers(&sim);
    assert_eq!(buffers.len(), 2, "both RangeTabs' write buffers in use");
    assert!(buffers.iter().all(|(_, m)| m.chunks == 8), "{buffers:?}");
    flip_in_manifest(&fs);
    let report = Db::repair(dir(), o()).expect("repair");
    eprintln!("{report}");
    assert!(report.is_complete(), "{report}");
    assert!(
        !report.sources.iter().any(|s| s.kind == SourceKind::Sst),
        "no table: the flushed data is in the buffers only: {report}"
    );
    let from_buffers: u64 = report
        .sources
        .iter()
        .filter(|s| s.kind == SourceKind::PmRangeTab)
        .map(|s| s.entries)
        .sum();
    assert_eq!(from_buffers, 2_400, "{report}");
    let db = Db::open(dir(), o()).expect("open after repair");
    assert_eq!(contents(&db), model);
    for (k, v) in model.iter().step_by(11) {
        assert_eq!(db.get(k).expect("get").as_ref(), Some(v));
    }
    // Deleted keys stay deleted.
    for op in (1_500..2_400).filter(|o| o % 9 == 4) {
        assert_eq!(db.get(&key((op * 7) % 1_500)).expect("get"), None);
    }
    db.close().expect("close");
}

/// A byte flipped inside one chunk of a buffer: repair reports the chunk
/// by its offset, loses exactly that chunk's keys (each key was written
/// once and its WAL is gone), reads the chunks after it, and returns no
/// wrong value.
#[test]
fn rangetab_repair_skips_a_damaged_chunk() {
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(PM_BYTES));
    let o = || rangetab_options(Arc::new(fs.clone()), sim.clone(), 512 << 10);
    let mut model = Model::new();
    let db = Db::open(dir(), o()).expect("open");
    for op in 0..1_500 {
        rangetab_op(&db, &mut model, op, false, false);
        if op % 300 == 299 {
            db.flush().expect("flush");
        }
    }
    db.close().expect("close");
    let (base, m) = rangetab_buffers(&sim)[0];
    assert_eq!(m.chunks, 5);
    let u32_at = |at: u64| {
        let b = sim.slice(at, 4).expect("slice");
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    };
    let c0 = base + 64;
    let c1 = c0 + u64::from(u32_at(c0 + 8)).next_multiple_of(64);
    let lost = u64::from(u32_at(c1 + 12));
    let mut b = [0u8; 1];
    sim.read(c1 + 40, &mut b).expect("read");
    sim.write(c1 + 40, &[b[0] ^ 0x08]).expect("write");
    sim.persist(c1 + 40, 1).expect("persist");
    flip_in_manifest(&fs);
    let report = Db::repair(dir(), o()).expect("repair");
    eprintln!("{report}");
    assert!(!report.is_complete());
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(&format!("chunk at {c1}")) && p.contains("RangeTab")),
        "the damaged chunk is named: {report}"
    );
    assert!(report
        .sources
        .iter()
        .any(|s| s.kind == SourceKind::PmRangeTab && !s.complete));
    let db = Db::open(dir(), o()).expect("open after repair");
    let got = contents(&db);
    for (k, v) in &got {
        assert_eq!(model.get(k), Some(v), "{k:?}: a value repair invented");
    }
    assert_eq!(
        (model.len() - got.len()) as u64,
        lost,
        "exactly the damaged chunk's keys are lost"
    );
    db.close().expect("close");
}

/// A database on crashable devices for the crash test.
struct CrashRig {
    fs: MemFs,
    sim: Arc<SimRegion>,
    cd: Arc<Countdown>,
    capacity: u64,
}

impl CrashRig {
    fn new(capacity: u64) -> CrashRig {
        let power = Power::new();
        let fs = MemFs::new();
        fs.set_power(power.clone());
        let sim = Arc::new(SimRegion::new(PM_BYTES));
        sim.set_power(power.clone());
        CrashRig {
            fs,
            sim,
            cd: Countdown::new(power),
            capacity,
        }
    }

    fn options(&self) -> Options {
        rangetab_options(
            Arc::new(CountingFs {
                inner: self.fs.clone(),
                cd: Arc::clone(&self.cd),
            }),
            Arc::new(CountingRegion {
                inner: Arc::clone(&self.sim),
                cd: Arc::clone(&self.cd),
            }),
            self.capacity,
        )
    }
}

/// Writes acknowledged with `sync: true`, then the power cut before every
/// durability event of a flush (an append; a spill that fills and seals a
/// buffer and goes on in its sibling) or of a seal and merge into L1, and
/// after it, the database never closed: repair of what was durable (a
/// chunk without its header, a header without its edit, a torn header, a
/// WAL not yet dropped, headers a merge left stale, orphan L1 tables)
/// gives every acknowledged write and nothing else (every key is written
/// once: nothing a stale buffer holds can resurface).
#[test]
fn rangetab_repair_after_a_crash_in_a_flush_or_merge() {
    // (capacity, rounds of 300 ops, pending ops). A round puts about 5 KiB
    // into each RangeTab: 3 rounds and 300 more ops fit 256 KiB buffers
    // (the flush appends), but overflow 20 KiB ones (the flush spills: the
    // older entries fill the write buffer, which is sealed, the newer go
    // to its sibling). `merge`: the operation is a `compact_range` that
    // seals and merges both RangeTabs' buffers into L1 instead.
    for (capacity, rounds, pending, spill, merge) in [
        (256u64 << 10, 3u32, 300u32, false, false),
        (20 << 10, 3, 300, true, false),
        (256 << 10, 3, 300, false, true),
    ] {
        let run = |arm: u64, evictions: Option<u64>| -> u64 {
            let rig = CrashRig::new(capacity);
            let db = Db::open(dir(), rig.options()).expect("open");
            let mut model = Model::new();
            let mut op = 0;
            for _ in 0..rounds {
                for _ in 0..300 {
                    rangetab_op(&db, &mut model, op, true, true);
                    op += 1;
                }
                db.flush().expect("flush");
            }
            for _ in 0..pending {
                rangetab_op(&db, &mut model, op, true, true);
                op += 1;
            }
            let spills = || {
                db.stats()
                    .design
                    .iter()
                    .find(|(n, _)| n == "rangetab.spills")
                    .map_or(0, |(_, v)| v.parse::<u64>().expect("a count"))
            };
            assert_eq!(spills(), 0, "a spill before the flush");
            rig.cd.arm(arm);
            let _ = if merge {
                db.compact_range(Some(&key(400)), Some(&key(1_100)))
            } else {
                db.flush()
            };
            let events = rig.cd.events.load(std::sync::atomic::Ordering::SeqCst);
            if arm == u64::MAX && !merge {
                assert_eq!(spills() > 0, spill, "capacity {capacity}: spills");
            }
            rig.cd.power.lock().cut();
            let fs = rig.fs.crash();
            let sim = Arc::new(match evictions {
                Some(seed) => rig.sim.crash_with_evictions(seed),
                None => rig.sim.crash(),
            });
            drop(db);
            let o = || rangetab_options(Arc::new(fs.clone()), sim.clone(), capacity);
            let what = format!(
                "capacity {capacity}, crash before event {arm} of a {}",
                if merge { "merge" } else { "flush" }
            );
            let report = Db::repair(dir(), o()).unwrap_or_else(|e| panic!("{what}: repair: {e}"));
            assert!(
                report
                    .sources
                    .iter()
                    .any(|s| s.kind == SourceKind::PmRangeTab && s.entries > 0),
                "{what}: {report}"
            );
            if merge && arm == u64::MAX {
                // The merge's L1 tables and the buffers whose headers it
                // left stale are both read.
                assert!(
                    report
                        .sources
                        .iter()
                        .any(|s| s.kind == SourceKind::Sst && s.entries > 0),
                    "{what}: {report}"
                );
            }
            let db = Db::open(dir(), o()).unwrap_or_else(|e| panic!("{what}: open: {e}"));
            let got = contents(&db);
            if got != model {
                let missing = model.keys().filter(|k| !got.contains_key(*k)).count();
                let extra = got.keys().filter(|k| !model.contains_key(*k)).count();
                let differ = model
                    .iter()
                    .filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v))
                    .count();
                panic!("{what}: {missing} keys missing, {extra} extra, {differ} differ\n{report}");
            }
            db.close().expect("close");
            events
        };
        let total = run(u64::MAX, None);
        assert!(total > 3, "only {total} durability events");
        for n in 0..=total {
            run(n, (n % 2 == 1).then_some(n * 7919 + 1));
        }
    }
}

// NV-Cache: the NVTables (offset arrays over nodes in segments) and the
// logs (the active NVTables: the design has no WAL).

const PAGE: u64 = 4096;

fn nv_options(fs: &MemFs, sim: &Arc<SimRegion>) -> Options {
    options(Preset::NvCache, fs, Some(sim), 1)
}

fn has_source(r: &tierkv::RepairReport, kind: SourceKind) -> bool {
    r.sources.iter().any(|s| s.kind == kind && s.entries > 0)
}

#[test]
fn nvcache_repair_reads_nvtables_and_logs() {
    let r = damage_repair_reopen(Preset::NvCache, 1, true, &flip_in_manifest);
    // Flushed tables, and the last memtable's log (sealed by the close).
    assert!(has_source(&r, SourceKind::NvTable), "{r}");
    assert!(has_source(&r, SourceKind::NvLog), "{r}");
    assert!(r.is_complete(), "{r}");
    assert!(r.kept_in_lost.iter().any(|n| n == "pm.region"));
}

/// Allocated pages of the region that start with `magic`.
fn allocated_with(sim: &Arc<SimRegion>, magic: &[u8]) -> Vec<u64> {
    let region: Arc<dyn PmRegion> = sim.clone();
    let alloc = PageAllocator::open(Arc::clone(&region)).expect("allocator");
    (alloc.data_start_page()..alloc.total_pages())
        .filter(|&p| alloc.is_allocated(p) && region.slice(p * PAGE, 8).ok() == Some(magic))
        .collect()
}

/// The completed tables in the region: (array offset, header).
fn nv_tables(sim: &Arc<SimRegion>) -> Vec<(u64, TableHeader)> {
    let total = sim.len() / PAGE;
    allocated_with(sim, &TABLE_MAGIC)
        .into_iter()
        .filter_map(|p| {
            let run = PageRun {
                first: p,
                count: total - p,
            };
            Some((p * PAGE, read_table_header(sim.as_ref(), run).ok()?))
        })
        .collect()
}

/// The newest log in the region: (segment 0 offset, log number).
fn newest_log(sim: &Arc<SimRegion>) -> (u64, u64) {
    allocated_with(sim, &SEGMENT_MAGIC)
        .into_iter()
        .filter_map(|p| {
            let h = SegmentHeader::read(sim.as_ref(), p * PAGE).ok()?;
            (h.kind == SegmentKind::Log && h.index == 0).then_some((p * PAGE, h.owner))
        })
        .max_by_key(|&(_, n)| n)
        .expect("a log")
}

/// Puts of `key(i)` for `range`, each key written once.
fn put_unique(db: &Db, range: std::ops::Range<u32>, model: &mut Model) {
    for i in range {
        let v = format!("v{i}-").repeat(1 + i as usize % 30).into_bytes();
        let mut b = WriteBatch::new();
        b.put(&key(i), &v);
        db.write(b, &WriteOptions { sync: true }).expect("write");
        model.insert(key(i), v);
    }
}

/// Flips one byte of the region, durably.
fn flip(sim: &SimRegion, at: u64) {
    let b = sim.slice(at, 1).expect("in the region")[0];
    sim.write(at, &[b ^ 0x55]).expect("write");
    sim.persist(at, 1).expect("persist");
}

/// A byte flipped in a node a table lists, in the middle of the last log's
/// list (a node's value, a link word), or in an array: repair succeeds,
/// names the damage's offset, and every key it gives back has its value;
/// only keys whose one copy was in the damage may be missing (a log is
/// read on past a damaged node, `log::walk_salvage`).
#[test]
fn nvcache_repair_of_damaged_nvtable_structures() {
    for case in ["table node", "log node", "log link", "array"] {
        let fs = MemFs::new();
        let sim = Arc::new(SimRegion::new(PM_BYTES));
        let mut model = Model::new();
        {
            let db = Db::open(dir(), nv_options(&fs, &sim)).expect("open");
            put_unique(&db, 0..3_000, &mut model);
            db.flush().expect("flush");
            put_unique(&db, 3_000..3_600, &mut model);
            db.close().expect("close");
        }
        let region: &dyn PmRegion = sim.as_ref();
        // (offset named in the report, keys that may go missing)
        let (named, may_miss): (u64, Vec<Vec<u8>>) = match case {
            "table node" | "array" => {
                let (at, h) = nv_tables(&sim)
                    .into_iter()
                    .max_by_key(|(_, h)| h.n)
                    .expect("a table");
                let o = region
                    .load_u64(at + TABLE_HEADER_BYTES + 8 * (h.n / 2))
                    .expect("offset");
                let node = Node::read(region, o, 0, region.len()).expect("node");
                let k = node.key.to_vec();
                if case == "array" {
                    // The array's body: the table cannot be opened. Its
                    // nodes may still be read from its log, if it is one.
                    let all = (0..h.n)
                        .map(|i| {
                            let o = region.load_u64(at + TABLE_HEADER_BYTES + 8 * i).unwrap();
                            Node::read(region, o, 0, region.len()).unwrap().key.to_vec()
                        })
                        .collect();
                    flip(&sim, at + TABLE_HEADER_BYTES + 8 * (h.n / 2) + 3);
                    (at, all)
                } else {
                    flip(&sim, node.value_at() + node.vlen as u64 / 2);
                    (o, vec![k])
                }
            }
            _ => {
                let (at, number) = newest_log(&sim);
                let (_, nodes) = walk(region, at, number).expect("an undamaged log");
                assert!(nodes.len() > 100, "{} nodes in the last log", nodes.len());
                let mid = nodes.len() / 2;
                let n = Node::read(region, nodes[mid].at, 0, region.len()).expect("node");
                if case == "log node" {
                    // Read on past it by place: only its batch (one put,
                    // a group of one node) is lost.
                    flip(&sim, n.value_at() + 1);
                    (n.at, vec![n.key.to_vec()])
                } else {
                    // The link word, outside every checksum: nothing lost.
                    flip(&sim, nodes[mid - 1].at + NODE_NEXT + 1);
                    (nodes[mid - 1].at + NODE_NEXT, Vec::new())
                }
            }
        };
        flip_in_manifest(&fs);
        let report = Db::repair(dir(), nv_options(&fs, &sim)).expect("repair");
        eprintln!("{case}: {report}");
        assert!(!report.is_complete(), "{case}: {report}");
        let offset = named.to_string();
        assert!(
            report.problems.iter().any(|p| p.contains(&offset)),
            "{case}: no problem names offset {named}: {report}"
        );
        let db = Db::open(dir(), nv_options(&fs, &sim)).expect("open after repair");
        let got = contents(&db);
        for (k, v) in &got {
            assert_eq!(model.get(k), Some(v), "{case}: a key with a wrong value");
        }
        let missing: Vec<&Vec<u8>> = model.keys().filter(|k| !got.contains_key(*k)).collect();
        for k in &missing {
            assert!(may_miss.contains(k), "{case}: {k:?} lost");
        }
        match case {
            "table node" => assert_eq!(missing.len(), 1, "{case}"),
            "log node" => assert_eq!(missing.len(), 1, "{case}"),
            "log link" => assert!(missing.is_empty(), "{case}"),
            _ => {}
        }
        db.close().expect("close");
    }
}

/// A crash (no close: the last log unsealed, no seal, background work
/// where it was): repair of the durable images gives back every write,
/// each acknowledged after its sync, and nothing else.
#[test]
fn nvcache_repair_of_a_crash_image() {
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(PM_BYTES));
    let db = Db::open(dir(), nv_options(&fs, &sim)).expect("open");
    let mut rng = SmallRng::seed_from_u64(5);
    let mut model = Model::new();
    for op in 0..7_000u32 {
        let k = key(rng.gen_range(0..1_500));
        let mut b = WriteBatch::new();
        if op % 9 == 4 {
            b.delete(&k);
            model.remove(&k);
        } else {
            let v = format!("{op}-").repeat(rng.gen_range(1..40)).into_bytes();
            b.put(&k, &v);
            model.insert(k, v);
        }
        db.write(b, &WriteOptions { sync: true }).expect("write");
        if op % 2_500 == 2_499 {
            db.flush().expect("flush");
        }
    }
    let crashed_sim = Arc::new(sim.crash());
    let crashed_fs = fs.crash();
    drop(db);
    let (at, number) = newest_log(&crashed_sim);
    assert_eq!(
        crashed_sim.load_u64(at + 56).expect("seal word"),
        0,
        "log {number} is not sealed after a crash"
    );
    let report = Db::repair(dir(), nv_options(&crashed_fs, &crashed_sim)).expect("repair");
    eprintln!("{report}");
    assert!(has_source(&report, SourceKind::NvTable), "{report}");
    assert!(
        report.sources.iter().any(|s| s.kind == SourceKind::NvLog
            && s.entries > 0
            && s.name.contains(&format!("log {number} "))),
        "{report}"
    );
    let db = Db::open(dir(), nv_options(&crashed_fs, &crashed_sim)).expect("open after repair");
    assert_eq!(contents(&db), model, "data after repair of a crash");
    db.close().expect("close");
}

// ------------------------------------------------------------------- tlsm

/// The options of `options` with TLSM's variant and policy.
fn tlsm_options(
    fs: &MemFs,
    sim: &Arc<SimRegion>,
    variant: tierkv::options::TlsmVariant,
    policy: tierkv::options::TlsmPolicy,
) -> Options {
    let mut o = options(Preset::Tlsm, fs, Some(sim), 1);
    o.tlsm.variant = variant;
    o.tlsm.policy = policy;
    o
}

/// The PM levels that hold skip lists (`tierkv.tables`: `L<n> #id tier ...`).
fn tlsm_pm_levels(db: &Db) -> Vec<String> {
    let mut v: Vec<String> = db
        .property("tierkv.tables")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"pm")).then(|| f[0].to_string())
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The sources of a kind that gave entries, and the levels named by the
/// skip lists among them.
fn tlsm_sources(
    r: &tierkv::RepairReport,
    kind: SourceKind,
) -> Vec<&tierkv::db::repair::RepairSource> {
    r.sources
        .iter()
        .filter(|s| s.kind == kind && s.entries > 0)
        .collect()
}

/// Checks that the report read skip lists at several levels, compaction
/// outputs (pointer-only lists) among them, and nothing from SSTs.
fn tlsm_check_report(r: &tierkv::RepairReport, what: &str) {
    let lists = tlsm_sources(r, SourceKind::PmSkipList);
    assert!(!lists.is_empty(), "{what}: no skip list read\n{r}");
    let mut levels: Vec<&str> = lists
        .iter()
        .filter_map(|s| s.name.split(" (").nth(1))
        .filter_map(|x| x.split(',').next())
        .collect();
    levels.sort();
    levels.dedup();
    assert!(
        levels.len() >= 2,
        "{what}: skip lists at {levels:?} only\n{r}"
    );
    assert!(
        lists.iter().any(|s| s.name.contains("compaction output")),
        "{what}: no compaction output read\n{r}"
    );
    assert!(
        !r.sources.iter().any(|s| s.kind == SourceKind::Sst),
        "{what}: the data was in SSTs, not in PM\n{r}"
    );
}

/// Full variant, LRU (the defaults): every list in PM, at several levels.
#[test]
fn tlsm_repair_after_a_damaged_manifest() {
    let r = damage_repair_reopen(Preset::Tlsm, 1, true, &flip_in_manifest);
    tlsm_check_report(&r, "tlsm full lru");
    assert!(r.is_complete(), "{r}");
    assert!(
        r.sources
            .iter()
            .any(|s| s.kind == SourceKind::PmWal && s.entries > 0),
        "{r}"
    );
}

/// `damage_repair_reopen` with a TLSM variant and policy: builds (with
/// deletes), checks that the lists sit at several PM levels, damages the
/// MANIFEST, repairs and reopens.
fn tlsm_repair_case(
    variant: tierkv::options::TlsmVariant,
    policy: tierkv::options::TlsmPolicy,
) -> tierkv::RepairReport {
    let what = format!("tlsm {} {}", variant.name(), policy.name());
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(PM_BYTES));
    let o = || tlsm_options(&fs, &sim, variant, policy);
    let model = {
        let db = Db::open(dir(), o()).expect("open");
        let mut m = build(&db, 6_000, true, 7);
        db.compact_range(Some(&key(200)), Some(&key(700)))
            .expect("compact");
        m.extend(build(&db, 3_000, false, 8));
        let levels = tlsm_pm_levels(&db);
        assert!(levels.len() >= 2, "{what}: lists at {levels:?} only");
        db.close().expect("close");
        m
    };
    flip_in_manifest(&fs);
    let report = Db::repair(dir(), o()).expect("repair");
    eprintln!("{what}: {report}");
    tlsm_check_report(&report, &what);
    assert!(report.is_complete(), "{what}: {report}");
    let db = Db::open(dir(), o()).expect("open after repair");
    assert_eq!(contents(&db), model, "{what}: data after repair");
    for i in 0..300 {
        db.put(&key(i), b"after").expect("put");
    }
    db.flush().expect("flush");
    db.close().expect("close");
    let db = Db::open(dir(), o()).expect("reopen");
    assert_eq!(
        db.get(&key(7)).expect("get").as_deref(),
        Some(&b"after"[..])
    );
    report
}

#[test]
fn tlsm_ps_bac_none_repair_after_a_damaged_manifest() {
    use tierkv::options::{TlsmPolicy, TlsmVariant};
    tlsm_repair_case(TlsmVariant::PsBac, TlsmPolicy::None);
}

#[test]
fn tlsm_ps_lru_repair_after_a_damaged_manifest() {
    use tierkv::options::{TlsmPolicy, TlsmVariant};
    tlsm_repair_case(TlsmVariant::Ps, TlsmPolicy::Lru);
}

/// Writes keys `0..n` once each (synced now and then), flushing every
/// 500, then compacts part of them further down: a key has one version,
/// so a repair can only give its value or lose it.
fn tlsm_unique(db: &Db, n: u32) -> Model {
    let mut model = Model::new();
    for i in 0..n {
        let v = format!("value-{i}-")
            .repeat(1 + (i % 7) as usize)
            .into_bytes();
        let mut b = WriteBatch::new();
        b.put(&key(i), &v);
        db.write(b, &WriteOptions { sync: i % 50 == 0 })
            .expect("write");
        model.insert(key(i), v);
        if i % 500 == 499 {
            db.flush().expect("flush");
        }
    }
    db.compact_range(Some(&key(0)), Some(&key(n / 3)))
        .expect("compact");
    model
}

/// The region offsets of the page starts holding `magic`.
fn tlsm_find(sim: &SimRegion, magic: &[u8; 8]) -> Vec<u64> {
    (1..PM_BYTES as u64 / 4096)
        .map(|p| p * 4096)
        .filter(|&at| sim.slice(at, 8).ok() == Some(&magic[..]))
        .collect()
}

/// Builds unique keys, closes, damages the MANIFEST and, with `damage`,
/// one PM structure (returning the offset its problem must name), repairs
/// and reopens: every key there has its one value, and what is missing
/// was in the damaged structure.
fn tlsm_damaged_structure(
    variant: tierkv::options::TlsmVariant,
    policy: tierkv::options::TlsmPolicy,
    damage: &dyn Fn(&SimRegion, &[u64]) -> u64,
) -> usize {
    let what = format!("tlsm {} {}", variant.name(), policy.name());
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(PM_BYTES));
    let o = || tlsm_options(&fs, &sim, variant, policy);
    let model = {
        let db = Db::open(dir(), o()).expect("open");
        let m = tlsm_unique(&db, 4_000);
        let levels = tlsm_pm_levels(&db);
        assert!(levels.len() >= 2, "{what}: lists at {levels:?} only");
        let live: Vec<u64> = db
            .property("tierkv.tables")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                l.split_whitespace()
                    .nth(1)?
                    .trim_start_matches('#')
                    .parse()
                    .ok()
            })
            .collect();
        db.close().expect("close");
        (m, live)
    };
    let (model, live) = model;
    flip_in_manifest(&fs);
    let at = damage(&sim, &live);
    let report = Db::repair(dir(), o()).expect("repair");
    eprintln!("{what}: {report}");
    assert!(!report.is_complete(), "{what}: {report}");
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(&format!("at offset {at}:"))),
        "{what}: no problem names offset {at}\n{report}"
    );
    let db = Db::open(dir(), o()).expect("open after repair");
    let got = contents(&db);
    for (k, v) in &got {
        assert_eq!(
            model.get(k),
            Some(v),
            "{what}: {} has a value it never had",
            String::from_utf8_lossy(k)
        );
    }
    let missing = model.len() - got.len();
    eprintln!("{what}: {missing} of {} keys lost", model.len());
    assert!(missing < model.len() / 2, "{what}: {missing} keys lost");
    db.close().expect("close");
    missing
}

/// The header of the newest flushed list damaged (its crc fails): the
/// WAL of its writes was retired by the flush, its buffer is linked by no
/// list that opens, and repair reads it whole: nothing is lost.
#[test]
fn tlsm_repair_reads_the_buffer_of_a_list_whose_header_is_damaged() {
    use tierkv::design::tlsm::build::header_run_at;
    use tierkv::design::tlsm::format::{Origin, HEADER_MAGIC};
    use tierkv::design::tlsm::list::read_header;
    use tierkv::options::{TlsmPolicy, TlsmVariant};
    let missing = tlsm_damaged_structure(TlsmVariant::Full, TlsmPolicy::Lru, &|sim, live| {
        let at = tlsm_find(sim, &HEADER_MAGIC)
            .into_iter()
            .filter_map(|at| {
                let hv = read_header(sim, header_run_at(sim, at).ok()?).ok()?;
                (hv.dir_off != 0
                    && hv.header.origin == Origin::Flush
                    && live.contains(&hv.header.id))
                .then_some((hv.header.id, at))
            })
            .max()
            .expect("a flushed list")
            .1;
        // The list id: covered by the header's crc.
        let off = at + 16;
        let b = sim.slice(off, 1).expect("byte")[0];
        sim.write(off, &[b ^ 0x01]).expect("write");
        sim.persist(off, 1).expect("persist");
        at
    });
    assert_eq!(missing, 0, "the buffer holds every entry of the list");
}

/// A byte of a persistent buffer's entries flipped: the lists linking it
/// fail their check, the entries they link in other buffers come back
/// from those buffers, and no value is wrong.
#[test]
fn tlsm_repair_with_a_damaged_buffer() {
    use tierkv::design::tlsm::format::{decode_buffer_header, BUFFER_MAGIC};
    use tierkv::options::{TlsmPolicy, TlsmVariant};
    tlsm_damaged_structure(TlsmVariant::Full, TlsmPolicy::Lru, &|sim, live| {
        // A flush's buffer whose list is live (a buffer's id is its
        // flush's list id).
        let at = tlsm_find(sim, &BUFFER_MAGIC)
            .into_iter()
            .find(|&at| {
                decode_buffer_header(sim.slice(at, 40).expect("header"))
                    .is_ok_and(|h| h.entry_bytes > 1000 && live.contains(&h.id))
            })
            .expect("a buffer");
        let h = decode_buffer_header(sim.slice(at, 40).expect("header")).expect("header");
        let off = at + 40 + h.entry_bytes / 2;
        let b = sim.slice(off, 1).expect("byte")[0];
        sim.write(off, &[b ^ 0x40]).expect("write");
        sim.persist(off, 1).expect("persist");
        at
    });
}

/// Flips bit `mask` of the byte `skip` bytes past the head (112 bytes) of
/// the first live closed list with at least 20 nodes whose layout is
/// `layout`, and returns the list's header offset.
fn tlsm_damage_node(
    sim: &SimRegion,
    live: &[u64],
    layout: tierkv::design::tlsm::format::Layout,
    skip: u64,
    mask: u8,
) -> u64 {
    use tierkv::design::tlsm::build::header_run_at;
    use tierkv::design::tlsm::format::HEADER_MAGIC;
    use tierkv::design::tlsm::list::read_header;
    let (at, run) = tlsm_find(sim, &HEADER_MAGIC)
        .into_iter()
        .find_map(|at| {
            let hv = read_header(sim, header_run_at(sim, at).ok()?).ok()?;
            (hv.dir_off != 0
                && hv.linked >= 20
                && hv.header.layout == layout
                && live.contains(&hv.header.id))
            .then(|| (at, hv.slot_runs[0]))
        })
        .expect("a closed list");
    let off = run.first * 4096 + 112 + skip;
    let b = sim.slice(off, 1).expect("byte")[0];
    sim.write(off, &[b ^ mask]).expect("write");
    sim.persist(off, 1).expect("persist");
    at
}

/// A byte in the first node run of a `ps_bac` list flipped (inside the
/// first node's inline entry): that list fails its walk, and is read by
/// place — every node that checks where the layout puts it — and so are
/// the lists linking into the damaged entry. One key is lost (80, the
/// list's whole first run, before the list was read by place); no value
/// is wrong.
#[test]
fn tlsm_ps_bac_repair_with_a_damaged_node() {
    use tierkv::design::tlsm::format::Layout;
    use tierkv::options::{TlsmPolicy, TlsmVariant};
    let missing = tlsm_damaged_structure(TlsmVariant::PsBac, TlsmPolicy::None, &|sim, live| {
        tlsm_damage_node(sim, live, Layout::PsBac, 40, 0x08)
    });
    assert!(missing <= 1, "{missing} keys lost");
}

/// The height byte of a `ps` list's first node flipped: the node cannot
/// be sized, so the read by place resynchronises on the next inline node
/// that checks (its entry right after its links, the entry's crc, the
/// height its key hashes to) and reads on by layout: exactly that one key
/// is lost, no value is wrong.
#[test]
fn tlsm_ps_repair_reads_past_a_node_it_cannot_size() {
    use tierkv::design::tlsm::format::Layout;
    use tierkv::options::{TlsmPolicy, TlsmVariant};
    let missing = tlsm_damaged_structure(TlsmVariant::Ps, TlsmPolicy::None, &|sim, live| {
        tlsm_damage_node(sim, live, Layout::Ps, 8, 0x02)
    });
    assert_eq!(missing, 1, "keys lost");
}

/// Crashes: a database with lists at L0 and deeper and a memtable of
/// synced writes in the PM WAL, then a flush and a full compaction with
/// the power cut before each of their first `dense` durability events, then a sample of the others (PM persists and
/// file syncs): the flush's buffer written but not its list, outputs of a
/// compaction linked but not closed, ... Repair on what was durable
/// (the MANIFEST as the crash left it: repair does not read it) gives
/// exactly the acknowledged writes. Returns (crashes, crashes whose repair
/// read a buffer no list links, crashes that left a list not closed).
fn tlsm_crash_repair(
    variant: tierkv::options::TlsmVariant,
    policy: tierkv::options::TlsmPolicy,
    dense: u64,
) -> (u64, u64, u64) {
    use tierkv::storage::Power;
    let what = format!("tlsm {} {} crash", variant.name(), policy.name());
    let plain = |fs: &MemFs, sim: &Arc<SimRegion>| {
        let mut o = tlsm_options(fs, sim, variant, policy);
        // Compaction only when the test asks.
        o.l0_compaction_trigger = 100;
        o.l0_slowdown_trigger = 200;
        o.l0_stop_trigger = 300;
        o
    };
    let write = |db: &Db, model: &mut Model, from: u32, n: u32| {
        for i in from..from + n {
            let k = key(i % 1_200);
            let mut b = WriteBatch::new();
            if i % 9 == 4 {
                b.delete(&k);
                model.remove(&k);
            } else {
                let v = format!("{i}-").repeat(1 + (i % 13) as usize).into_bytes();
                b.put(&k, &v);
                model.insert(k, v);
            }
            db.write(b, &WriteOptions { sync: true }).expect("write");
        }
    };
    // The image: lists at L0 and below, then a memtable of synced writes.
    let mut model = Model::new();
    let (fs0, sim0) = {
        let fs = MemFs::new();
        let sim = Arc::new(SimRegion::new(PM_BYTES));
        let db = Db::open(dir(), plain(&fs, &sim)).expect("open");
        for round in 0..3 {
            write(&db, &mut model, round * 700, 700);
            db.flush().expect("flush");
        }
        db.compact_range(None, None).expect("compact");
        for round in 3..5 {
            write(&db, &mut model, round * 700, 700);
            db.flush().expect("flush");
        }
        write(&db, &mut model, 5 * 700, 600);
        db.close().expect("close");
        (fs.crash(), sim.crash())
    };
    let op = |db: &Db| {
        let _ = db.flush();
        let _ = db.compact_range(None, None);
    };
    // Each run: the image opened (its WAL replayed and flushed), a
    // memtable of synced writes, then the operation.
    let run = |n: Option<u64>| -> (u64, Option<(MemFs, SimRegion)>, Model) {
        let power = Power::new();
        let fs = fs0.crash();
        fs.set_power(power.clone());
        let sim = Arc::new(sim0.crash());
        sim.set_power(power.clone());
        let cd = Countdown::new(power);
        let mut o = plain(&fs, &sim);
        o.fs = Arc::new(CountingFs {
            inner: fs.clone(),
            cd: Arc::clone(&cd),
        });
        o.pm_region = Some(Arc::new(CountingRegion {
            inner: Arc::clone(&sim),
            cd: Arc::clone(&cd),
        }));
        let db = Db::open(dir(), o).expect("open the image");
        let mut model = model.clone();
        write(&db, &mut model, 6_000, 300);
        cd.arm(n.unwrap_or(u64::MAX));
        op(&db);
        let events = cd.events.load(std::sync::atomic::Ordering::SeqCst);
        cd.power.lock().cut();
        let image = n.map(|_| (fs.crash(), sim.crash()));
        drop(db);
        (events, image, model)
    };
    let (total, _, _) = run(None);
    assert!(total > 10, "{what}: only {total} durability events");
    let (mut crashes, mut orphans, mut unclosed, mut stale) = (0, 0, 0, 0);
    // Every event of the flush (the first few), then a sample.
    let sample = (total / 25).max(1);
    let points: Vec<u64> = (0..=dense.min(total))
        .chain((dense + 1..=total).step_by(sample as usize))
        .collect();
    for n in points {
        let (_, image, model) = run(Some(n));
        let (fs, sim) = image.expect("an image");
        let sim = Arc::new(sim);
        let at = format!("{what} before event {n} of {total}");
        let report = Db::repair(dir(), plain(&fs, &sim)).expect("repair");
        if std::env::var_os("TLSM_REPAIR_TRACE").is_some() {
            eprintln!("{at}: {report}");
        }
        if report
            .sources
            .iter()
            .any(|s| s.kind == SourceKind::PmBuffer && s.entries > 0)
        {
            orphans += 1;
        }
        if report
            .sources
            .iter()
            .any(|s| s.kind == SourceKind::PmSkipList && s.name.contains("not closed"))
        {
            unclosed += 1;
        }
        // Problems are allowed: the PM WAL may end in a torn tail, and the
        // runs a flush or a job had taken but not written yet hold stale
        // headers of freed lists and buffers (skipped when they do not
        // verify). What counts is that nothing is lost and nothing
        // invented.
        if report
            .problems
            .iter()
            .any(|p| p.contains("skip list") || p.contains("buffer"))
        {
            stale += 1;
        }
        let db = Db::open(dir(), plain(&fs, &sim)).expect("open after repair");
        let got = contents(&db);
        if got != model {
            let missing = model.keys().filter(|k| !got.contains_key(*k)).count();
            let extra = got.keys().filter(|k| !model.contains_key(*k)).count();
            let differ = got
                .iter()
                .filter(|(k, v)| model.get(*k).is_some_and(|m| m != *v))
                .count();
            panic!("{at}: {missing} missing, {extra} invented, {differ} differ\n{report}");
        }
        db.close().expect("close");
        crashes += 1;
    }
    eprintln!(
        "{what}: {total} events, {crashes} crashes, {orphans} read a buffer no list links, {unclosed} left a list not closed, {stale} skipped a stale list or buffer"
    );
    (crashes, orphans, unclosed)
}

#[test]
fn tlsm_repair_after_crashes_full() {
    use tierkv::options::{TlsmPolicy, TlsmVariant};
    // Crashes between a flush's buffer and its list's header are a window
    // of one or two events whose number varies with the background
    // threads' events: counted (and printed), not required; the damaged
    // header test reads such a buffer deterministically.
    let (_, _, unclosed) = tlsm_crash_repair(TlsmVariant::Full, TlsmPolicy::None, 150);
    assert!(unclosed > 0, "no crash left a compaction output not closed");
}

#[test]
fn tlsm_repair_after_crashes_ps_bac() {
    use tierkv::options::{TlsmPolicy, TlsmVariant};
    let (_, _, unclosed) = tlsm_crash_repair(TlsmVariant::PsBac, TlsmPolicy::Lru, 60);
    assert!(unclosed > 0, "no crash left a compaction output not closed");
}
