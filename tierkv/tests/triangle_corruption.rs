//! Damaged RowTables are reported as `Error::Corruption` naming the PM
//! region and the byte offset — never a panic, never a wrong value.

use std::path::PathBuf;
use std::sync::Arc;

use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::{Db, Error, Options, Preset, ReadOptions};

const PM_BYTES: usize = 8 << 20;

fn options(fs: &MemFs, sim: &Arc<SimRegion>) -> Options {
    Options {
        design: Preset::Triangle,
        fs: Arc::new(fs.clone()),
        pm_region: Some(Arc::clone(sim) as Arc<dyn PmRegion>),
        pm_size_bytes: PM_BYTES as u64,
        memtable_size_bytes: 64 << 10,
        pm_container_limit_bytes: 1 << 30,
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("k{:05}", (i * 37) % 1000).into_bytes()
}

/// A database whose L0 holds two rows (the first memtable bypasses the
/// container: it overlaps nothing); returns the offsets of the rows'
/// metadata runs (found by their magic at page starts).
fn two_rows(fs: &MemFs, sim: &Arc<SimRegion>) -> Vec<u64> {
    let db = Db::open(PathBuf::from("/db"), options(fs, sim)).expect("open");
    for round in 0..3u32 {
        for i in 0..300 {
            db.put(&key(i + round), &[round as u8 + 1; 100])
                .expect("put");
        }
        db.flush().expect("flush");
    }
    db.close().expect("close");
    let mut metas = Vec::new();
    for page in 0..(PM_BYTES as u64 / 4096) {
        if sim.slice(page * 4096, 8).expect("slice") == b"RowTable" {
            metas.push(page * 4096);
        }
    }
    assert_eq!(metas.len(), 2, "two rows");
    metas
}

/// Reads everything; returns the first error.
fn read_all(fs: &MemFs, sim: &Arc<SimRegion>) -> Result<(), Error> {
    let db = Db::open(PathBuf::from("/db"), options(fs, sim))?;
    for i in 0..300 {
        db.get(&key(i))?;
    }
    let mut it = db.iter(ReadOptions::default())?;
    it.seek_to_first();
    while it.valid() {
        it.next();
    }
    it.status()
}

fn expect_pm_corruption(e: Error, sim: &SimRegion, lo: u64, hi: u64) {
    match e {
        Error::Corruption { at, what } => {
            assert_eq!(at.source, sim.name(), "{what}");
            assert!(
                (lo..hi).contains(&at.offset),
                "offset {} outside {lo}..{hi}: {what}",
                at.offset
            );
        }
        other => panic!("expected corruption, got {other}"),
    }
}

#[test]
fn damaged_header_metadata_or_value_is_corruption_naming_the_region() {
    // Header (magic, seqnos, checksum), extent table, elements, key area.
    for (i, delta) in [0u64, 9, 20, 70, 90, 140, 300].into_iter().enumerate() {
        let fs = MemFs::new();
        let sim = Arc::new(SimRegion::new(PM_BYTES));
        let metas = two_rows(&fs, &sim);
        let target = metas[i % 2];
        sim.corrupt(target + delta, 0x10).expect("corrupt");
        let e = read_all(&fs, &sim).expect_err("a damaged row must be reported");
        expect_pm_corruption(e, &sim, target, target + 4096);
    }
}

#[test]
fn damaged_value_is_found_by_the_extent_checksum() {
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(PM_BYTES));
    let metas = two_rows(&fs, &sim);
    // The first extent of the first row: its first page, from the extent
    // table right after the 80-byte header.
    let ext = sim.slice(metas[0] + 80, 8).expect("slice");
    let page = u64::from_le_bytes(ext.try_into().expect("8 bytes"));
    sim.corrupt(page * 4096 + 10, 0x01).expect("corrupt");
    let e = read_all(&fs, &sim).expect_err("a damaged value must be reported");
    expect_pm_corruption(e, &sim, page * 4096, page * 4096 + 1);
}

#[test]
fn no_panic_and_no_wrong_value_on_flips_across_a_row() {
    let fs0 = MemFs::new();
    let sim0 = Arc::new(SimRegion::new(PM_BYTES));
    let metas = two_rows(&fs0, &sim0);
    let want: Vec<Option<Vec<u8>>> = {
        let db = Db::open(PathBuf::from("/db"), options(&fs0, &sim0)).expect("open");
        (0..300).map(|i| db.get(&key(i)).expect("get")).collect()
    };
    for off in (0..2048u64).step_by(61) {
        let fs = fs0.crash();
        let sim = Arc::new(sim0.crash());
        sim.corrupt(metas[1] + off, 0x80).expect("corrupt");
        let Ok(db) = Db::open(PathBuf::from("/db"), options(&fs, &sim)) else {
            continue;
        };
        for (i, w) in want.iter().enumerate() {
            match db.get(&key(i as u32)) {
                Ok(v) => assert_eq!(&v, w, "flip at {off}: wrong value"),
                Err(e) => assert!(e.is_corruption(), "flip at {off}: {e}"),
            }
        }
    }
}
