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

/// A design whose PM structures repair cannot read is refused before
/// anything changes: rebuilding without them would drop their data.
#[test]
fn repair_refuses_designs_whose_pm_structures_it_cannot_read() {
    for design in [Preset::Tlsm, Preset::RangeTab] {
        let fs = MemFs::new();
        let sim = Arc::new(SimRegion::new(PM_BYTES));
        let db = Db::open(dir(), options(design, &fs, Some(&sim), 1)).expect("open");
        let model = build(&db, 3_000, false, 7);
        db.close().expect("close");
        let before = fs.list(&dir()).expect("list");
        let e = Db::repair(dir(), options(design, &fs, Some(&sim), 1))
            .expect_err("repair must be refused");
        assert!(
            matches!(&e, tierkv::Error::InvalidOptions(m) if m.contains(design.name())),
            "{e}"
        );
        assert_eq!(
            fs.list(&dir()).expect("list"),
            before,
            "repair changed files"
        );
        let db = Db::open(dir(), options(design, &fs, Some(&sim), 1)).expect("reopen");
        assert_eq!(contents(&db), model);
        db.close().expect("close");
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
/// only keys whose one copy was in (or, in a log, after) the damage may
/// be missing.
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
                let after: Vec<Vec<u8>> = nodes[mid..]
                    .iter()
                    .map(|w| w.ikey[..w.ikey.len() - 8].to_vec())
                    .collect();
                if case == "log node" {
                    flip(&sim, n.value_at() + 1);
                    (n.at, after)
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
            "log node" => assert!(!missing.is_empty(), "{case}"),
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
