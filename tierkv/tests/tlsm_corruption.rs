//! Damaged TLSM structures — list headers, directories, nodes, the null
//! sentinel, persistent buffers, inline entries — are reported as
//! `Error::Corruption` naming the PM region and a byte offset inside the
//! damaged structure: never a panic, never a wrong value. A MANIFEST-listed
//! skip list without its sentinel is corruption.

use std::path::PathBuf;
use std::sync::Arc;

use tierkv::design::tlsm::format::{self, Header, LinkWords};
use tierkv::options::TlsmVariant;
use tierkv::storage::alloc::PageRun;
use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::{Db, Error, Options, Preset, ReadOptions};

const PM_BYTES: usize = 8 << 20;
const PAGE: u64 = 4096;

fn options(fs: &MemFs, sim: &Arc<SimRegion>, variant: TlsmVariant) -> Options {
    let mut o = Options {
        design: Preset::Tlsm,
        fs: Arc::new(fs.clone()),
        pm_region: Some(Arc::clone(sim) as Arc<dyn PmRegion>),
        pm_size_bytes: PM_BYTES as u64,
        memtable_size_bytes: 64 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 64 << 20,
        level_count: 2,
        l0_compaction_trigger: 100,
        l0_slowdown_trigger: 200,
        l0_stop_trigger: 300,
        ..Options::default()
    };
    o.tlsm.variant = variant;
    o
}

fn key(i: u32) -> Vec<u8> {
    format!("k{:05}", (i * 37) % 1000).into_bytes()
}

/// A list found in the region: its header page, node runs and buffers.
struct Found {
    header: u64,
    node_runs: Vec<PageRun>,
    dir_off: u64,
    link: LinkWords,
}

/// A database with L1 lists (from a byte-addressable compaction) and two
/// L0 lists; returns the lists (by their header magic at page starts) and
/// the buffers (by theirs).
fn lists(fs: &MemFs, sim: &Arc<SimRegion>, variant: TlsmVariant) -> (Vec<Found>, Vec<u64>) {
    let db = Db::open(PathBuf::from("/db"), options(fs, sim, variant)).expect("open");
    for round in 0..4u32 {
        for i in 0..300 {
            db.put(&key(i + round * 7), &[round as u8 + 1; 100])
                .expect("put");
        }
        db.flush().expect("flush");
        if round == 1 {
            db.compact_range(None, None).expect("compact");
        }
    }
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
    let mut found = Vec::new();
    let mut buffers = Vec::new();
    for page in 0..(PM_BYTES as u64 / PAGE) {
        let b = sim.slice(page * PAGE, 8).expect("slice");
        if b == format::HEADER_MAGIC {
            let run = sim.slice(page * PAGE, PAGE as usize).expect("slice");
            let Ok(h) = Header::decode(run) else {
                continue;
            };
            if !live.contains(&h.id) {
                continue; // a released list's stale pages
            }
            let w = LinkWords::at(h.link_offset());
            let at = page * PAGE;
            let dir_off = sim.load_u64(at + w.dir as u64).expect("dir");
            if dir_off == 0 {
                continue; // never closed (not listed)
            }
            let k = sim.load_u64(at + w.runs as u64).expect("k");
            let node_runs = (0..k)
                .map(|i| {
                    format::unpack_run(
                        sim.load_u64(at + (w.slots + 8 * i as usize) as u64)
                            .expect("slot"),
                    )
                    .expect("run")
                })
                .collect();
            found.push(Found {
                header: at,
                node_runs,
                dir_off,
                link: w,
            });
        }
    }
    for l in &found {
        let rest = sim.slice(l.dir_off, 4096).expect("dir");
        let d = format::Directory::decode(rest).expect("directory");
        for r in d.data {
            let at = r.run.first * PAGE;
            if sim.slice(at, 8).expect("slice") == format::BUFFER_MAGIC && !buffers.contains(&at) {
                buffers.push(at);
            }
        }
    }
    if variant == TlsmVariant::Full {
        assert!(!buffers.is_empty());
    }
    assert!(found.len() >= 3, "lists: {}", found.len());
    (found, buffers)
}

/// Opens and reads everything; returns the first error.
fn read_all(fs: &MemFs, sim: &Arc<SimRegion>, variant: TlsmVariant) -> Result<(), Error> {
    let db = Db::open(PathBuf::from("/db"), options(fs, sim, variant))?;
    for i in 0..1000 {
        db.get(&key(i))?;
    }
    let mut it = db.iter(ReadOptions::default())?;
    it.seek_to_first();
    while it.valid() {
        it.next();
    }
    it.status()?;
    it.seek_to_last();
    while it.valid() {
        it.prev();
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

fn fresh() -> (MemFs, Arc<SimRegion>) {
    (MemFs::new(), Arc::new(SimRegion::new(PM_BYTES)))
}

#[test]
fn damaged_header_is_corruption_at_open() {
    for delta in [0u64, 9, 17, 33, 45, 48] {
        let (fs, sim) = fresh();
        let (ls, _) = lists(&fs, &sim, TlsmVariant::Full);
        let target = ls[0].header;
        sim.corrupt(target + delta, 0x10).expect("corrupt");
        let e =
            read_all(&fs, &sim, TlsmVariant::Full).expect_err("a damaged header must be reported");
        expect_pm_corruption(e, &sim, target, target + PAGE);
    }
}

#[test]
fn damaged_directory_is_corruption_at_open() {
    for delta in [0u64, 13, 20, 41, 60] {
        let (fs, sim) = fresh();
        let (ls, _) = lists(&fs, &sim, TlsmVariant::Full);
        let l = &ls[1];
        sim.corrupt(l.dir_off + delta, 0x04).expect("corrupt");
        let e = read_all(&fs, &sim, TlsmVariant::Full)
            .expect_err("a damaged directory must be reported");
        expect_pm_corruption(e, &sim, l.dir_off, l.dir_off + PAGE);
    }
}

#[test]
fn a_listed_list_without_its_sentinel_is_corruption() {
    // The directory offset cleared: the list was never closed.
    let (fs, sim) = fresh();
    let (ls, _) = lists(&fs, &sim, TlsmVariant::Full);
    let l = &ls[0];
    let word = l.header + l.link.dir as u64;
    for (i, b) in l.dir_off.to_le_bytes().iter().enumerate() {
        if *b != 0 {
            sim.corrupt(word + i as u64, *b).expect("corrupt");
        }
    }
    match read_all(&fs, &sim, TlsmVariant::Full).expect_err("reported") {
        Error::Corruption { at, what } => {
            assert_eq!(at.offset, word, "{what}");
            assert!(what.contains("sentinel"), "{what}");
        }
        e => panic!("{e}"),
    }
    // The sentinel node itself overwritten by a node: the walk finds it.
    let (fs, sim) = fresh();
    let (ls, _) = lists(&fs, &sim, TlsmVariant::Full);
    let l = &ls[2];
    let run = l.node_runs[0];
    let start = run.first * PAGE;
    let bytes = sim
        .slice(start, (run.count * PAGE) as usize)
        .expect("run")
        .to_vec();
    // The sentinel: the last zero `entry_off` with height 0 and a crc.
    let mut sentinel = None;
    let mut at = 0;
    while at + 16 <= bytes.len() {
        let h = format::node_head(&bytes[at..]).expect("node");
        if h.entry_off == 0 && h.height == 0 && h.crc != 0 {
            sentinel = Some(start + at as u64);
        }
        at += 8;
    }
    let s = sentinel.expect("sentinel found");
    sim.corrupt(s + 8, 0x01).expect("corrupt");
    let e = read_all(&fs, &sim, TlsmVariant::Full)
        .expect_err("a list without its sentinel must be reported");
    expect_pm_corruption(e, &sim, s, s + 16);
}

#[test]
fn damaged_node_is_found_by_the_sentinel_checksum() {
    for delta in [112u64, 120, 137, 300, 700] {
        let (fs, sim) = fresh();
        let (ls, _) = lists(&fs, &sim, TlsmVariant::Full);
        let run = ls[1].node_runs[0];
        let start = run.first * PAGE;
        sim.corrupt(start + delta, 0x20).expect("corrupt");
        let e =
            read_all(&fs, &sim, TlsmVariant::Full).expect_err("a damaged node must be reported");
        let end = (run.first + run.count) * PAGE;
        match &e {
            Error::Corruption { at, .. } if (start..end).contains(&at.offset) => {}
            // A damaged entry offset points outside the list's runs or at
            // a malformed entry: reported where it points.
            Error::Corruption { at, .. } => assert_eq!(at.source, sim.name()),
            other => panic!("expected corruption, got {other}"),
        }
    }
}

#[test]
fn damaged_buffer_is_found_by_its_checksum() {
    for delta in [3u64, 30, 41, 200, 3000] {
        let (fs, sim) = fresh();
        let (_, bufs) = lists(&fs, &sim, TlsmVariant::Full);
        let b = bufs[0];
        sim.corrupt(b + delta, 0x02).expect("corrupt");
        let e =
            read_all(&fs, &sim, TlsmVariant::Full).expect_err("a damaged buffer must be reported");
        expect_pm_corruption(e, &sim, b, b + 64 * PAGE);
    }
}

#[test]
fn no_panic_and_no_wrong_value_on_flips_across_lists() {
    for variant in [TlsmVariant::Full, TlsmVariant::PsBac] {
        let (fs0, sim0) = fresh();
        let (ls, bufs) = lists(&fs0, &sim0, variant);
        let want: Vec<Option<Vec<u8>>> = {
            let db = Db::open(PathBuf::from("/db"), options(&fs0, &sim0, variant)).expect("open");
            (0..1000).map(|i| db.get(&key(i)).expect("get")).collect()
        };
        let mut targets: Vec<u64> = Vec::new();
        for l in &ls {
            targets.extend((0..PAGE).step_by(151).map(|d| l.header + d));
            let r = l.node_runs[0];
            targets.extend((0..r.count * PAGE).step_by(307).map(|d| r.first * PAGE + d));
        }
        for b in &bufs {
            targets.extend((0..2 * PAGE).step_by(263).map(|d| b + d));
        }
        let mut reported = 0;
        for off in targets {
            let fs = fs0.crash();
            let sim = Arc::new(sim0.crash());
            sim.corrupt(off, 0x80).expect("corrupt");
            let db = match Db::open(PathBuf::from("/db"), options(&fs, &sim, variant)) {
                Ok(db) => db,
                Err(e) => {
                    assert!(e.is_corruption(), "{variant:?} flip at {off}: {e}");
                    reported += 1;
                    continue;
                }
            };
            for (i, w) in want.iter().enumerate() {
                match db.get(&key(i as u32)) {
                    Ok(v) => assert_eq!(&v, w, "{variant:?} flip at {off}: wrong value"),
                    Err(e) => {
                        assert!(e.is_corruption(), "{variant:?} flip at {off}: {e}");
                        reported += 1;
                        break;
                    }
                }
            }
            if let Ok(mut it) = db.iter(ReadOptions::default()) {
                it.seek_to_first();
                while it.valid() {
                    it.next();
                }
                if let Err(e) = it.status() {
                    assert!(e.is_corruption(), "{variant:?} flip at {off}: {e}");
                }
            }
        }
        assert!(reported > 0, "{variant:?}: no flip was reported");
    }
}
