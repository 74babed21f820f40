//! Corrupt bytes in every persistent structure: the engine reports
//! `Error::Corruption` naming the file or region and the offset (or, for a
//! torn WAL tail, truncates cleanly as documented in docs/format/wal.md),
//! never panics and never returns a wrong value.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tierkv::storage::alloc::{PageAllocator, PAGE_SIZE_BYTES};
use tierkv::storage::fault::{FaultFs, FaultRule, Op};
use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::{FileSystem, PmRegion};
use tierkv::wal::pm::EXTENT_HEADER_BYTES;
use tierkv::wal::{PmLog, BLOCK_SIZE};
use tierkv::{
    Compression, Db, Error, Options, WalPlacement, WalRecovery, WriteBatch, WriteOptions,
};

fn dir() -> PathBuf {
    PathBuf::from("/db")
}

fn opts(fs: &MemFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        memtable_size_bytes: 1 << 20,
        sst_size_bytes: 1 << 20,
        l1_size_bytes: 4 << 20,
        block_size_bytes: 1024,
        block_cache_bytes: 0,
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    format!("value-{i}-").repeat(10).into_bytes()
}

fn files_with(fs: &MemFs, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs
        .list(&dir())
        .expect("list")
        .into_iter()
        .filter(|n| n.ends_with(suffix) || n.starts_with(suffix))
        .map(|n| dir().join(n))
        .collect();
    v.sort();
    v
}

fn expect_corruption(e: Error, source_part: &str) {
    match &e {
        Error::Corruption { at, .. } => assert!(
            at.source.contains(source_part),
            "corruption names {} (wanted {source_part}): {e}",
            at.source
        ),
        other => panic!("expected corruption in {source_part}, got {other}"),
    }
}

/// Writes `n` keys, one synced batch each, without flushing, so they live
/// only in the WAL; returns the durable state after a power loss (no clean
/// close: a torn WAL tail is then what a crash can leave) and that WAL's
/// path.
fn wal_only_db(n: u32) -> (MemFs, PathBuf) {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs)).expect("open");
    for i in 0..n {
        let mut b = WriteBatch::new();
        b.put(&key(i), &value(i));
        db.write(b, &WriteOptions { sync: true }).expect("write");
    }
    let crashed = fs.crash();
    drop(db);
    let wal = files_with(&crashed, ".log").pop().expect("a wal");
    (crashed, wal)
}

#[test]
fn torn_wal_tail_is_truncated_cleanly() {
    let (fs, wal) = wal_only_db(50);
    let len = fs.file_size(&wal).expect("size") as usize;
    fs.truncate(&wal, len - 20).expect("truncate");
    let db = Db::open(dir(), opts(&fs)).expect("open after torn tail");
    for i in 0..49 {
        assert_eq!(db.get(&key(i)).expect("get"), Some(value(i)), "key {i}");
    }
    assert_eq!(
        db.get(&key(49)).expect("get"),
        None,
        "the torn record is gone"
    );
}

/// After a clean close the same cut is damage, never a torn tail: CLOSED
/// recorded every WAL's length (and the MANIFEST's).
#[test]
fn a_wal_or_manifest_cut_short_after_a_clean_close_is_corruption() {
    for pattern in [".log", "MANIFEST-"] {
        let fs = MemFs::new();
        {
            let db = Db::open(dir(), opts(&fs)).expect("open");
            for i in 0..30 {
                db.put(&key(i), &value(i)).expect("put");
            }
            db.close().expect("close");
        }
        let path = files_with(&fs, pattern).pop().expect("a file");
        let len = fs.file_size(&path).expect("size") as usize;
        fs.truncate(&path, len - 1).expect("truncate");
        expect_corruption(
            Db::open(dir(), opts(&fs)).err().expect("open must fail"),
            pattern,
        );
    }
}

/// The checks CLOSED adds hold for every open until one succeeds: an open
/// that fails on them writes nothing that lets the next one through. (The
/// WALs used to be checked only during replay, after the open had switched
/// CURRENT to a fresh manifest: CLOSED then named an older manifest, and
/// the second open replayed the cut WAL as after a crash, dropping its
/// last acknowledged write with `Ok`.) In point-in-time mode too.
#[test]
fn a_failed_open_leaves_the_clean_close_checks_to_the_next_open() {
    for recovery in [WalRecovery::TornTail, WalRecovery::PointInTime] {
        let fs = MemFs::new();
        let o = || Options {
            wal_recovery: recovery,
            ..opts(&fs)
        };
        {
            let db = Db::open(dir(), o()).expect("open");
            for i in 0..30 {
                db.put(&key(i), &value(i)).expect("put");
            }
            db.close().expect("close");
        }
        let wal = files_with(&fs, ".log").pop().expect("a wal");
        let whole = fs.read_all(&wal).expect("read");
        for (what, damage) in [("cut short", 0), ("last byte flipped", 1)] {
            if damage == 0 {
                fs.truncate(&wal, whole.len() - 1).expect("truncate");
            } else {
                fs.corrupt(&wal, whole.len() - 1, 0x01).expect("corrupt");
            }
            for attempt in 0..3 {
                let e = Db::open(dir(), o())
                    .err()
                    .unwrap_or_else(|| panic!("{recovery:?}, {what}: open {attempt} succeeded"));
                expect_corruption(e, ".log");
            }
            // Whole again: it opens, with every write.
            let mut f = fs
                .create(&wal, tierkv::storage::WriteHint::default())
                .expect("create");
            f.append(&whole).expect("append");
            f.sync().expect("sync");
        }
        let db = Db::open(dir(), o()).expect("open the whole database");
        for i in 0..30 {
            assert_eq!(db.get(&key(i)).expect("get"), Some(value(i)), "key {i}");
        }
        db.close().expect("close");
    }
}

/// An open that fails deletes nothing: a table flushed before the damage
/// and the manifest are all still there (a fresh manifest the failed open
/// wrote may be there too), and so are the WALs.
#[test]
fn a_failed_open_deletes_nothing() {
    let fs = MemFs::new();
    {
        let db = Db::open(dir(), opts(&fs)).expect("open");
        for i in 0..200 {
            db.put(&key(i), &value(i)).expect("put");
        }
        db.flush().expect("flush");
        for i in 200..260 {
            let mut b = WriteBatch::new();
            b.put(&key(i), &value(i));
            db.write(b, &WriteOptions { sync: true }).expect("write");
        }
        // Not closed: a power loss, so the next open replays the WAL.
        let crashed = fs.crash();
        drop(db);
        let before = crashed.list(&dir()).expect("list");
        let wal = files_with(&crashed, ".log").pop().expect("a wal");
        let len = crashed.file_size(&wal).expect("size") as usize;
        crashed.corrupt(&wal, len / 3, 0x04).expect("corrupt");
        expect_corruption(
            Db::open(dir(), opts(&crashed))
                .err()
                .expect("open must fail"),
            ".log",
        );
        let after = crashed.list(&dir()).expect("list");
        for name in &before {
            assert!(after.contains(name), "{name} was deleted by a failed open");
        }
    }
}

#[test]
fn flipped_byte_in_wal_body_is_corruption_naming_the_file() {
    let (fs, wal) = wal_only_db(50);
    fs.corrupt(&wal, 100, 0x40).expect("corrupt");
    let e = Db::open(dir(), opts(&fs)).err().expect("open must fail");
    expect_corruption(e, ".log");
}

/// `WalRecovery::PointInTime`: the same damage ends the log instead; what
/// is recovered is a prefix of the writes (the records after the damage
/// are dropped, never replayed around a hole).
#[test]
fn point_in_time_recovery_ends_the_wal_at_damage() {
    let (fs, wal) = wal_only_db(50);
    let len = fs.file_size(&wal).expect("size") as usize;
    fs.corrupt(&wal, len / 2, 0x40).expect("corrupt");
    let o = Options {
        wal_recovery: WalRecovery::PointInTime,
        ..opts(&fs)
    };
    let db = Db::open(dir(), o).expect("point-in-time open");
    let present: Vec<bool> = (0..50)
        .map(|i| db.get(&key(i)).expect("get").is_some())
        .collect();
    let first_missing = present
        .iter()
        .position(|p| !p)
        .expect("damage drops records");
    assert!(first_missing > 0, "records before the damage survive");
    assert!(
        present[first_missing..].iter().all(|p| !p),
        "a prefix of the writes: {present:?}"
    );
    for i in 0..first_missing as u32 {
        assert_eq!(db.get(&key(i)).expect("get"), Some(value(i)));
    }
    // The damaged WAL, which holds the dropped records, is kept in lost/.
    let name = wal
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(!fs.exists(&wal));
    assert_eq!(
        fs.list(&dir().join("lost")).expect("lost/"),
        vec![name],
        "the damaged WAL is kept"
    );
}

#[test]
fn flipped_byte_in_sst_block_is_corruption_not_a_wrong_value() {
    flipped_sst_block_byte(Compression::None);
}

/// A flipped byte inside a compressed block fails the checksum before the
/// decompressor sees it: `Corruption`, never a panic or a wrong value.
#[test]
fn flipped_byte_in_compressed_sst_blocks_is_corruption_not_a_wrong_value() {
    flipped_sst_block_byte(Compression::Lz4);
    flipped_sst_block_byte(Compression::Zstd);
}

fn flipped_sst_block_byte(compression: Compression) {
    let fs = MemFs::new();
    let opts = |fs: &MemFs| Options {
        compression,
        ..opts(fs)
    };
    {
        let db = Db::open(dir(), opts(&fs)).expect("open");
        for i in 0..2000 {
            db.put(&key(i), &value(i)).expect("put");
        }
        db.flush().expect("flush");
        db.close().expect("close");
    }
    let sst = files_with(&fs, ".sst").pop().expect("an sst");
    fs.corrupt(&sst, 50, 0x01).expect("corrupt");
    let db = Db::open(dir(), opts(&fs)).expect("open");
    let mut errors = 0;
    for i in 0..2000 {
        match db.get(&key(i)) {
            Ok(v) => assert_eq!(v, Some(value(i)), "never a wrong value"),
            Err(e) => {
                expect_corruption(e, ".sst");
                errors += 1;
            }
        }
    }
    assert!(errors > 0, "the corrupt block was never read");
    let mut it = db.iter(Default::default()).expect("iter");
    it.seek_to_first();
    while it.valid() {
        it.next();
    }
    expect_corruption(it.status().expect_err("scan must fail"), ".sst");
}

#[test]
fn flipped_byte_in_sst_footer_is_corruption() {
    let fs = MemFs::new();
    {
        let db = Db::open(dir(), opts(&fs)).expect("open");
        for i in 0..500 {
            db.put(&key(i), &value(i)).expect("put");
        }
        db.flush().expect("flush");
    }
    let sst = files_with(&fs, ".sst").pop().expect("an sst");
    let len = fs.file_size(&sst).expect("size") as usize;
    fs.corrupt(&sst, len - 12, 0x80).expect("corrupt");
    let db = Db::open(dir(), opts(&fs)).expect("open (tables open lazily)");
    expect_corruption(db.get(&key(1)).expect_err("get must fail"), ".sst");
}

#[test]
fn flipped_byte_in_manifest_is_corruption() {
    let fs = MemFs::new();
    {
        let db = Db::open(dir(), opts(&fs)).expect("open");
        for i in 0..500 {
            db.put(&key(i), &value(i)).expect("put");
        }
        db.flush().expect("flush");
    }
    let manifest = files_with(&fs, "MANIFEST-").pop().expect("a manifest");
    fs.corrupt(&manifest, 20, 0x10).expect("corrupt");
    let e = Db::open(dir(), opts(&fs)).err().expect("open must fail");
    expect_corruption(e, "MANIFEST");
}

#[test]
fn garbage_current_is_corruption() {
    let fs = MemFs::new();
    drop(Db::open(dir(), opts(&fs)).expect("open"));
    fs.corrupt(&dir().join("CURRENT"), 3, 0x01)
        .expect("corrupt");
    let e = Db::open(dir(), opts(&fs)).err().expect("open must fail");
    expect_corruption(e, "CURRENT");
}

fn pm_opts(fs: &MemFs, region: &Arc<SimRegion>) -> Options {
    Options {
        pm_region: Some(Arc::clone(region) as Arc<dyn PmRegion>),
        pm_size_bytes: region.len(),
        wal: Some(WalPlacement::Pm),
        ..opts(fs)
    }
}

#[test]
fn flipped_byte_in_pm_wal_is_corruption_naming_the_region() {
    let fs = MemFs::new();
    let region = Arc::new(SimRegion::new(8 << 20));
    {
        let db = Db::open(dir(), pm_opts(&fs, &region)).expect("open");
        for i in 0..200 {
            db.put(&key(i), &value(i)).expect("put");
        }
    }
    // Find the WAL's first record: the first non-zero byte after the
    // allocator's metadata pages and the extent header.
    let image = region
        .slice(0, region.len() as usize)
        .expect("slice")
        .to_vec();
    let first_data = (8192..image.len())
        .step_by(4096)
        .find(|&p| image[p..p + 8] != [0; 8])
        .expect("a WAL extent");
    // Skip the 4 KiB extent header; corrupt a payload byte of record 3.
    let victim = first_data + 4096 + 400;
    region.corrupt(victim as u64, 0x20).expect("corrupt");
    let e = Db::open(dir(), pm_opts(&fs, &region))
        .err()
        .expect("open must fail");
    expect_corruption(e, region.name());
}

/// A PM WAL retired at a memtable switch is sealed where its acknowledged
/// writes end, so damage to its very last record after a crash is
/// corruption, not a torn tail that would silently drop that write. Here
/// the flush that would make the retired log obsolete cannot create its
/// table, so the log is still needed when the power goes.
#[test]
fn damage_at_the_end_of_a_retired_pm_wal_is_corruption() {
    let mem = MemFs::new();
    let fault = FaultFs::new(Arc::new(mem.clone()));
    fault.add_rule(FaultRule::new(Op::Create).path_suffix(".sst").always());
    let region = Arc::new(SimRegion::new(8 << 20));
    let options = |fs: Arc<dyn FileSystem>, r: &Arc<SimRegion>| Options {
        fs,
        memtable_size_bytes: 64 << 10,
        ..pm_opts(&mem, r)
    };
    let db = Db::open(dir(), options(Arc::new(fault.clone()), &region)).expect("open");
    // Writes until the failed flush stops them: several memtables' worth
    // are acknowledged (the writes that switched logs included).
    let mut acked = 0;
    while acked < 2000 && db.put(&key(acked), &value(acked)).is_ok() {
        acked += 1;
    }
    assert!(acked > 200, "only {acked} writes before the flush failed");
    let crashed = || (mem.crash(), Arc::new(region.crash()));
    let (fs_a, pm_a) = crashed();
    let (fs_b, pm_b) = crashed();
    drop(db);

    // Undamaged, every acknowledged write is back.
    let db = Db::open(dir(), options(Arc::new(fs_a), &pm_a)).expect("reopen");
    for i in 0..acked {
        assert_eq!(db.get(&key(i)).expect("get"), Some(value(i)), "key {i}");
    }
    drop(db);

    // The retired log (the oldest chain) is sealed; damage its last byte.
    let alloc = PageAllocator::open(Arc::clone(&pm_b) as Arc<dyn PmRegion>).expect("allocator");
    let pages = (alloc.data_start_page()..alloc.total_pages()).filter(|&p| alloc.is_allocated(p));
    let chains = PmLog::find_chains(pm_b.as_ref(), pages.map(|p| p * PAGE_SIZE_BYTES));
    assert!(chains.len() >= 2, "a retired and a live log: {chains:?}");
    let (first, log) = chains[0];
    let end = PmLog::sealed_end(pm_b.as_ref(), first)
        .expect("seal")
        .unwrap_or_else(|| panic!("retired PM WAL {log} is not sealed"));
    let mut left = end - 1; // log offset of its last byte
    let mut victim = None;
    for (at, len) in PmLog::extents(pm_b.as_ref(), first).expect("extents") {
        let cap = (len - EXTENT_HEADER_BYTES) / BLOCK_SIZE as u64 * BLOCK_SIZE as u64;
        if left < cap {
            victim = Some(at + EXTENT_HEADER_BYTES + left);
            break;
        }
        left -= cap;
    }
    pm_b.corrupt(victim.expect("in the chain"), 0x20)
        .expect("corrupt");
    let e = Db::open(dir(), options(Arc::new(fs_b), &pm_b))
        .err()
        .expect("a damaged sealed log must not open");
    expect_corruption(e, pm_b.name());
}

#[test]
fn flipped_byte_in_pm_allocator_superblock_is_corruption() {
    let fs = MemFs::new();
    let region = Arc::new(SimRegion::new(8 << 20));
    drop(Db::open(dir(), pm_opts(&fs, &region)).expect("open"));
    region.corrupt(9, 0x01).expect("corrupt");
    let e = Db::open(dir(), pm_opts(&fs, &region))
        .err()
        .expect("open must fail");
    expect_corruption(e, region.name());
}

#[test]
fn no_panic_on_any_single_byte_flip_of_a_small_database() {
    // Every byte of every file, flipped in turn: open + full scan + gets
    // either succeed with the right values or report an error.
    let base = MemFs::new();
    {
        let db = Db::open(dir(), opts(&base)).expect("open");
        for i in 0..30 {
            db.put(&key(i), &value(i)).expect("put");
        }
        db.flush().expect("flush");
        for i in 30..40 {
            db.put(&key(i), &value(i)).expect("put");
        }
    }
    let names: Vec<PathBuf> = base
        .list(&dir())
        .expect("list")
        .into_iter()
        .filter(|n| n != "LOCK")
        .map(|n| dir().join(n))
        .collect();
    for path in names {
        let len = base.file_size(&path).expect("size") as usize;
        for off in (0..len).step_by(7) {
            let fs = base.crash(); // an independent copy of the synced state
            fs.corrupt(&path, off, 0x5a).expect("corrupt");
            check_no_wrong_answer(&fs, &path, off);
        }
    }
}

fn check_no_wrong_answer(fs: &MemFs, path: &Path, off: usize) {
    let Ok(db) = Db::open(dir(), opts(fs)) else {
        return;
    };
    for i in 0..40 {
        if let Ok(Some(v)) = db.get(&key(i)) {
            assert_eq!(
                v,
                value(i),
                "wrong value for key {i} after flipping {} at {off}",
                path.display()
            );
        }
    }
}
