//! Checkpoints of a live database (`Db::checkpoint`): writers keep writing
//! while the copy is made; the copy opens (with its own PM region for
//! `triangle`), holds every write acknowledged before the checkpoint
//! started, and is consistent — each writer's keys form a prefix of what it
//! wrote, without holes. SSTs are hard-linked on a real file system.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::{CheckpointOptions, Db, Error, Options, Preset, WalPlacement};

const WRITERS: u64 = 2;

fn key(w: u64, i: u64) -> Vec<u8> {
    format!("w{w}-{i:08}").into_bytes()
}

fn value(w: u64, i: u64) -> Vec<u8> {
    format!("value of writer {w} number {i} ")
        .repeat(6)
        .into_bytes()
}

fn options(design: Preset, pm_dir: Option<&Path>) -> Options {
    let mut o = Options {
        design,
        memtable_size_bytes: 256 << 10,
        sst_size_bytes: 256 << 10,
        l1_size_bytes: 1 << 20,
        ..Options::default()
    };
    if let Some(p) = pm_dir {
        o.pm_dir = Some(p.to_path_buf());
        o.pm_size_bytes = 16 << 20;
    }
    o
}

/// Runs `WRITERS` writer threads on `db` until `stop`; `acked[w]` counts
/// writer `w`'s acknowledged puts (keys `0..acked[w]`).
fn start_writers(
    db: &Arc<Db>,
    stop: &Arc<AtomicBool>,
) -> (Vec<Arc<AtomicU64>>, Vec<std::thread::JoinHandle<()>>) {
    let acked: Vec<Arc<AtomicU64>> = (0..WRITERS).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let handles = (0..WRITERS)
        .map(|w| {
            let (db, stop, acked) = (
                Arc::clone(db),
                Arc::clone(stop),
                Arc::clone(&acked[w as usize]),
            );
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    db.put(&key(w, i), &value(w, i)).unwrap();
                    i += 1;
                    acked.store(i, Ordering::Release);
                }
            })
        })
        .collect();
    (acked, handles)
}

/// Each writer's keys in `copy` are `0..n` with `before[w] <= n <=
/// after[w] + 1`, with the right values (a writer counts its put after
/// `put` returns: one put may be in the copy and not counted yet).
fn check_prefixes(copy: &Db, before: &[u64], after: &[u64]) {
    for w in 0..WRITERS {
        let prefix = format!("w{w}-");
        let mut n = 0u64;
        for kv in copy.prefix(prefix.as_bytes()) {
            let (k, v) = kv.unwrap();
            assert_eq!(k, key(w, n), "writer {w}: a hole before key {n}");
            assert_eq!(v, value(w, n));
            n += 1;
        }
        let (b, a) = (before[w as usize], after[w as usize]);
        assert!(
            b <= n && n <= a + 1,
            "writer {w}: {n} keys, acknowledged {b} before and {a} after"
        );
    }
}

fn live_checkpoint(design: Preset, flush: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let pm_dir = design.needs_pm().then(|| tmp.path().join("pm"));
    let db = Arc::new(Db::open(tmp.path().join("db"), options(design, pm_dir.as_deref())).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let (acked, writers) = start_writers(&db, &stop);
    // Let the writers fill a few memtables (tables on every tier).
    while acked.iter().map(|a| a.load(Ordering::Acquire)).sum::<u64>() < 12_000 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let before: Vec<u64> = acked.iter().map(|a| a.load(Ordering::Acquire)).collect();
    let copy_pm = design.needs_pm().then(|| tmp.path().join("copy-pm"));
    let stats = db
        .checkpoint_with(
            tmp.path().join("copy"),
            &CheckpointOptions {
                flush,
                pm_dir: copy_pm.clone(),
                ..CheckpointOptions::default()
            },
        )
        .unwrap();
    let after: Vec<u64> = acked.iter().map(|a| a.load(Ordering::Acquire)).collect();
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    for h in writers {
        h.join().unwrap();
    }
    assert!(
        stats.ssts_linked + stats.ssts_copied > 0 || design.needs_pm(),
        "{stats:?}"
    );
    assert_eq!(
        stats.ssts_copied, 0,
        "same file system: every SST is linked"
    );
    if design.needs_pm() {
        assert!(stats.pm_bytes > 0, "{stats:?}");
    }
    // Without a flush, the writes of the memtables are only in the copied
    // WALs (SSD files or PM extents): `check_prefixes` below finds them.
    // Linked SSTs share their inode with the live database's.
    for e in std::fs::read_dir(tmp.path().join("copy")).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().ends_with(".sst") {
            let live = tmp.path().join("db").join(e.file_name());
            if let Ok(m) = std::fs::metadata(&live) {
                assert_eq!(m.ino(), e.metadata().unwrap().ino());
            }
        }
    }
    // The live database goes on; the copy is unaffected by what followed.
    let total: Vec<u64> = acked.iter().map(|a| a.load(Ordering::Acquire)).collect();
    db.put(b"after", b"the checkpoint").unwrap();
    let copy = Db::open(tmp.path().join("copy"), options(design, copy_pm.as_deref())).unwrap();
    check_prefixes(&copy, &before, &after);
    assert_eq!(copy.get(b"after").unwrap(), None);
    assert_eq!(
        copy.property("tierkv.design").as_deref(),
        Some(design.name())
    );
    // The copy is a database of its own: it takes writes and reopens.
    copy.put(b"copy", b"only").unwrap();
    copy.close().unwrap();
    let copy = Db::open(tmp.path().join("copy"), options(design, copy_pm.as_deref())).unwrap();
    assert_eq!(copy.get(b"copy").unwrap(), Some(b"only".to_vec()));
    check_prefixes(&copy, &before, &after);
    copy.close().unwrap();
    assert_eq!(db.get(b"copy").unwrap(), None);
    for w in 0..WRITERS {
        let n = total[w as usize];
        assert_eq!(db.get(&key(w, n - 1)).unwrap(), Some(value(w, n - 1)));
    }
    Arc::try_unwrap(db).ok().unwrap().close().unwrap();
}

#[test]
fn classic_checkpoint_while_writing() {
    live_checkpoint(Preset::Classic, true);
}

#[test]
fn classic_checkpoint_without_flush_copies_the_wals() {
    live_checkpoint(Preset::Classic, false);
}

#[test]
fn triangle_checkpoint_while_writing() {
    live_checkpoint(Preset::Triangle, true);
}

#[test]
fn triangle_checkpoint_without_flush_copies_the_pm_wals() {
    live_checkpoint(Preset::Triangle, false);
}

/// Regions share a WAL and a manifest: the copy holds every region's
/// tables and log numbers (in memory, with simulated PM regions).
#[test]
fn checkpoint_of_a_database_with_regions_and_a_pm_wal() {
    let fs = MemFs::new();
    let region: Arc<dyn PmRegion> = Arc::new(SimRegion::new(8 << 20));
    let opts = |r: &Arc<dyn PmRegion>| Options {
        fs: Arc::new(fs.clone()),
        regions: 4,
        memtable_size_bytes: 128 << 10,
        sst_size_bytes: 128 << 10,
        l1_size_bytes: 512 << 10,
        pm_region: Some(Arc::clone(r)),
        pm_size_bytes: r.len(),
        wal: Some(WalPlacement::Pm),
        ..Options::default()
    };
    let db = Db::open("/db", opts(&region)).unwrap();
    for i in 0..6000u64 {
        db.put(&key(i % 2, i / 2), &value(i % 2, i / 2)).unwrap();
    }
    let target: Arc<dyn PmRegion> = Arc::new(SimRegion::new(8 << 20));
    db.checkpoint_with(
        "/copy",
        &CheckpointOptions {
            flush: false,
            pm_region: Some(Arc::clone(&target)),
            ..CheckpointOptions::default()
        },
    )
    .unwrap();
    db.close().unwrap();
    let copy = Db::open("/copy", opts(&target)).unwrap();
    check_prefixes(&copy, &[3000, 3000], &[3000, 3000]);
    copy.close().unwrap();
}

#[test]
fn checkpoints_refuse_what_they_cannot_do() {
    let tmp = tempfile::tempdir().unwrap();
    let pm = tmp.path().join("pm");
    let db = Db::open(tmp.path().join("db"), options(Preset::Triangle, Some(&pm))).unwrap();
    db.put(b"k", b"v").unwrap();
    let invalid = |r: tierkv::Result<tierkv::CheckpointStats>, what: &str| match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(what), "{m}"),
        other => panic!("expected InvalidArgument({what}), got {other:?}"),
    };
    // A PM tier needs a PM directory for the copy.
    invalid(db.checkpoint(tmp.path().join("c1")), "PM directory");
    // Not into a non-empty directory, nor into the database itself.
    std::fs::create_dir_all(tmp.path().join("c2")).unwrap();
    std::fs::write(tmp.path().join("c2/file"), b"x").unwrap();
    let with_pm = |p: &str| CheckpointOptions {
        pm_dir: Some(tmp.path().join(p)),
        ..CheckpointOptions::default()
    };
    invalid(
        db.checkpoint_with(tmp.path().join("c2"), &with_pm("pm2")),
        "not empty",
    );
    invalid(
        db.checkpoint_with(tmp.path().join("db"), &with_pm("pm2")),
        "own directory",
    );
    // Not over an existing PM region.
    invalid(
        db.checkpoint_with(tmp.path().join("c3"), &with_pm("pm")),
        "exists already",
    );
    db.checkpoint_with(tmp.path().join("c4"), &with_pm("pm4"))
        .unwrap();
    db.close().unwrap();
}
