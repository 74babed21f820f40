//! Damaged RangeTab chunks are reported as `Error::Corruption` naming the
//! PM region, the byte offset and the RangeTab — never a panic, never a
//! wrong value; a damaged buffer header (a mirror of the MANIFEST) is
//! rewritten at open.

use std::path::PathBuf;
use std::sync::Arc;

use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::{Db, Error, Options, Preset, ReadOptions};

const PM_BYTES: usize = 8 << 20;

fn options(fs: &MemFs, sim: &Arc<SimRegion>) -> Options {
    Options {
        design: Preset::RangeTab,
        fs: Arc::new(fs.clone()),
        pm_region: Some(Arc::clone(sim) as Arc<dyn PmRegion>),
        pm_size_bytes: PM_BYTES as u64,
        memtable_size_bytes: 64 << 10,
        rangetab_count: 2,
        rangetab_capacity_bytes: 256 << 10,
        rangetab_boundaries: vec![b"k00500".to_vec()],
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("k{:05}", (i * 37) % 1000).into_bytes()
}

/// A database whose two RangeTabs each hold three chunks; returns the
/// region offsets of the buffers in use (found by their headers' state
/// byte: write).
fn filled(fs: &MemFs, sim: &Arc<SimRegion>) -> Vec<u64> {
    let db = Db::open(PathBuf::from("/db"), options(fs, sim)).expect("open");
    for round in 0..3u32 {
        for i in 0..300 {
            db.put(&key(i + round), &[round as u8 + 1; 100])
                .expect("put");
        }
        db.flush().expect("flush");
    }
    db.close().expect("close");
    let mut bufs = Vec::new();
    for page in 0..(PM_BYTES as u64 / 4096) {
        let h = sim.slice(page * 4096, 16).expect("slice");
        if &h[..8] == b"RangeTab" && h[10] == 1 {
            bufs.push(page * 4096);
        }
    }
    assert_eq!(bufs.len(), 2, "two write buffers");
    bufs
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

fn u32_at(sim: &SimRegion, at: u64) -> u32 {
    u32::from_le_bytes(sim.slice(at, 4).expect("slice").try_into().expect("4"))
}

/// Region offsets of the chunks of the buffer at `buf`.
fn chunks(sim: &SimRegion, buf: u64) -> Vec<(u64, u64)> {
    let used = u64::from_le_bytes(
        sim.slice(buf + 24, 8)
            .expect("slice")
            .try_into()
            .expect("8"),
    );
    let mut out = Vec::new();
    let mut at = buf + 64;
    while at < buf + 64 + used {
        let len = u64::from(u32_at(sim, at + 8));
        out.push((at, len));
        at += len.next_multiple_of(64);
    }
    out
}

#[test]
fn damaged_chunk_is_corruption_naming_region_offset_and_rangetab() {
    // Header (magic, crc, len, n, seqnos), an entry, the offsets, the count.
    for (i, delta) in [0u64, 5, 9, 13, 20, 28, 40, 200].into_iter().enumerate() {
        let fs = MemFs::new();
        let sim = Arc::new(SimRegion::new(PM_BYTES));
        let bufs = filled(&fs, &sim);
        let cs = chunks(&sim, bufs[i % 2]);
        assert_eq!(cs.len(), 3, "three chunks");
        let (at, len) = cs[i % 3];
        let target = if delta == 200 {
            at + len - 6
        } else {
            at + delta
        };
        sim.corrupt(target, 0x10).expect("corrupt");
        match read_all(&fs, &sim).expect_err("a damaged chunk must be reported") {
            Error::Corruption { at: loc, what } => {
                assert_eq!(loc.source, sim.name(), "{what}");
                assert!(
                    (at..at + len).contains(&loc.offset),
                    "offset {} outside the chunk {at}+{len}: {what}",
                    loc.offset
                );
                assert!(what.contains("RangeTab"), "{what}");
            }
            other => panic!("expected corruption, got {other}"),
        }
    }
}

#[test]
fn damaged_header_is_rewritten_from_the_manifest() {
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(PM_BYTES));
    let bufs = filled(&fs, &sim);
    let want = sim.slice(bufs[0], 64).expect("slice").to_vec();
    for delta in [0u64, 10, 24, 33, 57] {
        sim.corrupt(bufs[0] + delta, 0x04).expect("corrupt");
        read_all(&fs, &sim).expect("a header is only a mirror");
        assert_eq!(
            sim.slice(bufs[0], 64).expect("slice"),
            &want[..],
            "rewritten"
        );
    }
}

#[test]
fn no_panic_and_no_wrong_value_on_flips_across_a_buffer() {
    let fs0 = MemFs::new();
    let sim0 = Arc::new(SimRegion::new(PM_BYTES));
    let bufs = filled(&fs0, &sim0);
    let want: Vec<Option<Vec<u8>>> = {
        let db = Db::open(PathBuf::from("/db"), options(&fs0, &sim0)).expect("open");
        (0..300).map(|i| db.get(&key(i)).expect("get")).collect()
    };
    for off in (0..40_000u64).step_by(997) {
        let fs = fs0.crash();
        let sim = Arc::new(sim0.crash());
        sim.corrupt(bufs[1] + off, 0x80).expect("corrupt");
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
