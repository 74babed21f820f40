//! Damaged NV-Cache structures — nodes, offset arrays, log segments — are
//! reported as `Error::Corruption` naming the PM region, the byte offset
//! and the structure: never a panic, never a wrong value.

use std::path::PathBuf;
use std::sync::Arc;

use tierkv::design::nvcache::format::{
    read_table_header, Node, SegmentHeader, SegmentKind, HEAD_WORD, NODE_NEXT, SEAL_WORD,
    SEGMENT_MAGIC, TABLE_HEADER_BYTES, TABLE_MAGIC,
};
use tierkv::storage::alloc::PageRun;
use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::{Db, Error, Options, Preset, ReadOptions};

const PM_BYTES: usize = 8 << 20;

fn options(fs: &MemFs, sim: &Arc<SimRegion>) -> Options {
    Options {
        design: Preset::NvCache,
        fs: Arc::new(fs.clone()),
        pm_region: Some(Arc::clone(sim) as Arc<dyn PmRegion>),
        pm_size_bytes: PM_BYTES as u64,
        memtable_size_bytes: 64 << 10,
        l0_compaction_trigger: 100,
        l0_slowdown_trigger: 100,
        l0_stop_trigger: 100,
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("k{:05}", (i * 37) % 1000).into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    vec![(i + round) as u8; 100]
}

/// Three rounds of 300 puts, each flushed: three L0 NVTables; then 50
/// more puts left in the log.
fn build_open(fs: &MemFs, sim: &Arc<SimRegion>) -> (Db, Vec<Option<Vec<u8>>>) {
    let db = Db::open(PathBuf::from("/db"), options(fs, sim)).expect("open");
    for round in 0..3u32 {
        for i in 0..300 {
            db.put(&key(i + round), &value(i, round)).expect("put");
        }
        db.flush().expect("flush");
    }
    for i in 0..50 {
        db.put(&key(i + 7), &value(i, 9)).expect("put");
    }
    let want = (0..1000).map(|i| db.get(&key(i)).expect("get")).collect();
    (db, want)
}

/// [`build_open`], closed cleanly: the log stays listed (not flushed),
/// sealed.
fn build(fs: &MemFs, sim: &Arc<SimRegion>) -> Vec<Option<Vec<u8>>> {
    let (db, want) = build_open(fs, sim);
    drop(db);
    want
}

/// [`build_open`], then a power loss: the log stays listed, unsealed.
fn build_crashed() -> (MemFs, Arc<SimRegion>, Vec<Option<Vec<u8>>>) {
    let (fs, sim) = (MemFs::new(), Arc::new(SimRegion::new(PM_BYTES)));
    let (db, want) = build_open(&fs, &sim);
    let crashed = (fs.crash(), Arc::new(sim.crash()));
    drop(db);
    (crashed.0, crashed.1, want)
}

/// Ids of the tables the database lists.
fn live_ids(fs: &MemFs, sim: &Arc<SimRegion>) -> Vec<u64> {
    let db = Db::open(PathBuf::from("/db"), options(fs, sim)).expect("open");
    let t = db.property("tierkv.tables").expect("tables");
    t.lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|id| id.trim_start_matches('#').parse().ok())
        .collect()
}

/// The array runs of live tables: (offset, length).
fn arrays(sim: &SimRegion, ids: &[u64]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for page in 0..(PM_BYTES as u64 / 4096) {
        if sim.slice(page * 4096, 8).expect("slice") != TABLE_MAGIC {
            continue;
        }
        let Ok(h) = read_table_header(
            sim,
            PageRun {
                first: page,
                count: 64,
            },
        ) else {
            continue;
        };
        if ids.contains(&h.id) {
            out.push((
                page * 4096,
                TABLE_HEADER_BYTES + 8 * h.n + 16 * u64::from(h.u),
            ));
        }
    }
    out
}

/// Offset `i` of the array at `at`.
fn offset(sim: &SimRegion, at: u64, i: u64) -> u64 {
    let b = sim
        .slice(at + TABLE_HEADER_BYTES + 8 * i, 8)
        .expect("slice");
    u64::from_le_bytes(b.try_into().expect("8"))
}

/// Reads every key and scans; returns the first error, checking every
/// value read on the way.
fn read_all(fs: &MemFs, sim: &Arc<SimRegion>, want: &[Option<Vec<u8>>]) -> Result<(), Error> {
    let db = Db::open(PathBuf::from("/db"), options(fs, sim))?;
    for (i, w) in want.iter().enumerate() {
        let got = db.get(&key(i as u32))?;
        assert_eq!(&got, w, "key {i}: a wrong value instead of an error");
    }
    let mut it = db.iter(ReadOptions::default())?;
    it.seek_to_first();
    while it.valid() {
        it.next();
    }
    it.status()
}

fn expect_corruption(e: Error, sim: &SimRegion, lo: u64, hi: u64, structure: &str) {
    match e {
        Error::Corruption { at, what } => {
            assert_eq!(at.source, sim.name(), "{what}");
            assert!(
                (lo..hi).contains(&at.offset),
                "offset {} outside {lo}..{hi}: {what}",
                at.offset
            );
            assert!(what.contains(structure), "{what} does not name {structure}");
        }
        other => panic!("expected corruption, got {other}"),
    }
}

#[test]
fn damaged_node_is_corruption_naming_it() {
    // Header fields, key bytes, value bytes of the first and a middle node.
    for (n, delta) in [
        (0u64, 16u64),
        (0, 26),
        (0, 33),
        (0, 44),
        (150, 50),
        (150, 90),
        (299, 140),
    ] {
        let fs = MemFs::new();
        let sim = Arc::new(SimRegion::new(PM_BYTES));
        let want = build(&fs, &sim);
        let ids = live_ids(&fs, &sim);
        let (array, _) = arrays(&sim, &ids)[0];
        let node = offset(&sim, array, n);
        sim.corrupt(node + delta, 0x10).expect("corrupt");
        let e = read_all(&fs, &sim, &want).expect_err("a damaged node must be reported");
        expect_corruption(e, &sim, node, node + 160, "NVTable node");
    }
}

#[test]
fn damaged_offset_array_is_corruption_naming_it() {
    for delta in [
        0u64,
        9,
        20,
        44,
        52,
        61,
        64,
        70,
        64 + 8 * 100,
        64 + 8 * 299 + 3,
    ] {
        let fs = MemFs::new();
        let sim = Arc::new(SimRegion::new(PM_BYTES));
        let want = build(&fs, &sim);
        let ids = live_ids(&fs, &sim);
        let (array, len) = arrays(&sim, &ids)[1];
        assert!(delta < len);
        sim.corrupt(array + delta, 0x04).expect("corrupt");
        let e = read_all(&fs, &sim, &want).expect_err("a damaged array must be reported");
        expect_corruption(e, &sim, array, array + len, "NVTable");
    }
}

#[test]
fn no_panic_and_no_wrong_value_on_flips_across_a_table() {
    let fs0 = MemFs::new();
    let sim0 = Arc::new(SimRegion::new(PM_BYTES));
    let want = build(&fs0, &sim0);
    let ids = live_ids(&fs0, &sim0);
    let (array, len) = arrays(&sim0, &ids)[2];
    let first = offset(&sim0, array, 0);
    let targets: Vec<u64> = (0..len)
        .step_by(37)
        .map(|d| array + d)
        .chain((0..4096).step_by(53).map(|d| first + d))
        .collect();
    for at in targets {
        let fs = fs0.crash();
        let sim = Arc::new(sim0.crash());
        sim.corrupt(at, 0x80).expect("corrupt");
        match read_all(&fs, &sim, &want) {
            Ok(()) => {}
            Err(e) => assert!(e.is_corruption(), "flip at {at}: {e}"),
        }
    }
}

/// The log left listed by `build`: its first segment (the newest log
/// segment 0 with a published node).
fn log_head(sim: &SimRegion) -> u64 {
    let mut best: Option<(u64, u64)> = None;
    for page in 0..(PM_BYTES as u64 / 4096) {
        let at = page * 4096;
        if sim.slice(at, 8).expect("slice") != SEGMENT_MAGIC {
            continue;
        }
        let Ok(h) = SegmentHeader::read(sim, at) else {
            continue;
        };
        if h.kind == SegmentKind::Log
            && h.index == 0
            && sim.load_u64(at + HEAD_WORD).expect("head") != 0
            && best.is_none_or(|(o, _)| h.owner > o)
        {
            best = Some((h.owner, at));
        }
    }
    best.expect("a log").1
}

/// The nodes of the log whose first segment is at `seg0`, in list order.
fn log_nodes(sim: &SimRegion, seg0: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut link = seg0 + HEAD_WORD;
    loop {
        let at = sim.load_u64(link).expect("link");
        if at == 0 {
            return out;
        }
        out.push(at);
        link = at + NODE_NEXT;
    }
}

#[test]
fn damaged_log_node_with_published_nodes_after_it_fails_open() {
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(PM_BYTES));
    build(&fs, &sim);
    let seg0 = log_head(&sim);
    let nodes = log_nodes(&sim, seg0);
    assert_eq!(nodes.len(), 50);
    let victim = nodes[20];
    let n = Node::read(sim.as_ref(), victim, 0, PM_BYTES as u64).expect("node");
    sim.corrupt(n.value_at() + 3, 0x20).expect("corrupt");
    let e = Db::open(PathBuf::from("/db"), options(&fs, &sim))
        .err()
        .expect("a damaged log must not open");
    expect_corruption(e, &sim, victim, victim + 1, "NVTable log");
}

#[test]
fn damaged_first_segment_of_a_listed_log_fails_open() {
    for delta in [0u64, 8, 20, 36] {
        let fs = MemFs::new();
        let sim = Arc::new(SimRegion::new(PM_BYTES));
        build(&fs, &sim);
        let seg0 = log_head(&sim);
        sim.corrupt(seg0 + delta, 0x01).expect("corrupt");
        let e = Db::open(PathBuf::from("/db"), options(&fs, &sim))
            .err()
            .expect("a damaged log segment must not open");
        expect_corruption(e, &sim, seg0, seg0 + 64, "NVTable");
    }
}

/// The last node of a log damaged after a crash: indistinguishable from
/// an append the crash tore (nothing published follows it), so it is
/// dropped as a torn tail — as a WAL drops its torn last record — and the
/// rest survives.
#[test]
fn damaged_last_log_node_after_a_crash_is_a_torn_tail() {
    let (fs, sim, want) = build_crashed();
    let seg0 = log_head(&sim);
    let nodes = log_nodes(&sim, seg0);
    let last = *nodes.last().expect("nodes");
    let n = Node::read(sim.as_ref(), last, 0, PM_BYTES as u64).expect("node");
    let key_of_last = n.key.to_vec();
    sim.corrupt(n.value_at(), 0x01).expect("corrupt");
    let db = Db::open(PathBuf::from("/db"), options(&fs, &sim)).expect("open");
    for (i, w) in want.iter().enumerate() {
        let k = key(i as u32);
        let got = db.get(&k).expect("get");
        if k != key_of_last {
            assert_eq!(&got, w, "key {i}");
        } else {
            assert_ne!(&got, w, "the torn write is gone");
        }
    }
}

/// After a crash, a lost link in the middle of the log (its publish word
/// zeroed, or changed) with published nodes after it is corruption, not a
/// torn tail.
#[test]
fn damaged_log_link_after_a_crash_is_corruption() {
    let (fs0, sim0, _) = build_crashed();
    let seg0 = log_head(&sim0);
    let nodes = log_nodes(&sim0, seg0);
    for (at, zero) in [
        (seg0 + HEAD_WORD, false),
        (nodes[10] + NODE_NEXT, true),
        (nodes[30] + NODE_NEXT, false),
    ] {
        let (fs, sim) = (fs0.crash(), Arc::new(sim0.crash()));
        if zero {
            sim.store_u64(at, 0).expect("store");
        } else {
            sim.corrupt(at + 1, 0x0f).expect("corrupt");
        }
        let e = Db::open(PathBuf::from("/db"), options(&fs, &sim))
            .err()
            .expect("a damaged log must not open");
        expect_corruption(e, &sim, 0, PM_BYTES as u64, "NVTable log");
    }
}

/// After a clean close the log is sealed with its node count: damage
/// anywhere in it — its last node, the link that published its last
/// write, any link, the seal itself — is corruption naming the log.
#[test]
fn damaged_sealed_log_is_corruption_even_at_its_end() {
    let fs0 = MemFs::new();
    let sim0 = Arc::new(SimRegion::new(PM_BYTES));
    build(&fs0, &sim0);
    let seg0 = log_head(&sim0);
    let nodes = log_nodes(&sim0, seg0);
    let last = *nodes.last().expect("nodes");
    let last_value = Node::read(sim0.as_ref(), last, 0, PM_BYTES as u64)
        .expect("node")
        .value_at();
    for (what, at, mask) in [
        ("last value", last_value + 2, 0x01u8),
        ("last node header", last + 20, 0x01),
        ("last publish", nodes[nodes.len() - 2] + NODE_NEXT, 0),
        ("a middle link", nodes[25] + NODE_NEXT + 1, 0x01),
        ("the head", seg0 + HEAD_WORD, 0),
        ("the seal", seg0 + SEAL_WORD + 6, 0x10),
    ] {
        let (fs, sim) = (fs0.crash(), Arc::new(sim0.crash()));
        if mask == 0 {
            sim.store_u64(at, 0).expect("store");
        } else {
            sim.corrupt(at, mask).expect("corrupt");
        }
        let e = Db::open(PathBuf::from("/db"), options(&fs, &sim))
            .err()
            .unwrap_or_else(|| panic!("{what}: a damaged sealed log must not open"));
        expect_corruption(e, &sim, seg0, PM_BYTES as u64, "NVTable log");
    }
}

/// A damaged value of a version that a newer one shadows is never read by
/// a get, but a scan reads every version: it must stop with the
/// corruption, never carry on without that table — its newer versions of
/// the keys after the damage would vanish, and older ones (a deleted key,
/// a stale value) show through.
#[test]
fn damaged_shadowed_node_stops_the_scan() {
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(PM_BYTES));
    let k = |i: u32| format!("s{i:04}").into_bytes();
    let mut model = std::collections::BTreeMap::new();
    {
        // Three L0 tables: A puts 0..200; B deletes every third key and
        // puts the others; C puts the even keys below 100.
        let db = Db::open(PathBuf::from("/db"), options(&fs, &sim)).expect("open");
        for i in 0..200 {
            db.put(&k(i), b"a").expect("put");
        }
        db.flush().expect("flush");
        for i in 0..200 {
            if i % 3 == 0 {
                db.delete(&k(i)).expect("delete");
            } else {
                db.put(&k(i), b"b").expect("put");
            }
        }
        db.flush().expect("flush");
        for i in (0..100).step_by(2) {
            db.put(&k(i), b"c").expect("put");
        }
        db.flush().expect("flush");
        for i in 0..200 {
            if let Some(v) = db.get(&k(i)).expect("get") {
                model.insert(k(i), v);
            }
        }
    }
    // B's version of key 10: shadowed by C's.
    let ids = live_ids(&fs, &sim);
    let mut victim = None;
    for (array, _) in arrays(&sim, &ids) {
        let run = PageRun {
            first: array / 4096,
            count: 64,
        };
        let n = read_table_header(sim.as_ref(), run).expect("array").n;
        for i in 0..n {
            let at = offset(&sim, array, i);
            let node = Node::read(sim.as_ref(), at, 0, PM_BYTES as u64).expect("node");
            if node.key == k(10).as_slice()
                && node.value(sim.as_ref(), true).expect("value") == b"b"
            {
                victim = Some((at, node.value_at()));
            }
        }
    }
    let (victim, value_at) = victim.expect("B's version of key 10");
    sim.corrupt(value_at, 0x08).expect("corrupt");
    let db = Db::open(PathBuf::from("/db"), options(&fs, &sim)).expect("open");
    for i in 0..200 {
        assert_eq!(
            db.get(&k(i)).expect("get"),
            model.get(&k(i)).cloned(),
            "key {i}"
        );
    }
    let mut it = db.iter(ReadOptions::default()).expect("iter");
    it.seek_to_first();
    while it.valid() {
        assert_eq!(
            model.get(it.key()).map(Vec::as_slice),
            Some(it.value()),
            "scan: {:?} wrong before the error",
            String::from_utf8_lossy(it.key())
        );
        it.next();
    }
    let e = it.status().expect_err("the scan must report the damage");
    expect_corruption(e, &sim, victim, victim + 64, "NVTable node");
}
