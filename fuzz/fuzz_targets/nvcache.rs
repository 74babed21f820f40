//! Fuzzes NV-Cache's PM decoders (`design/nvcache/`): the recovery of an
//! active NVTable — `log::walk_segments` and `log::walk` over the segment
//! chain (`format::SegmentHeader::read`), the seal (`format::read_seal`)
//! and the node list that is the log (`format::Node::read`) — and a
//! completed NVTable: `NvTable::open` (`format::read_table_header`, the
//! usage entries, every offset) and every accessor of a table that opens
//! (`node`, `offset`, `segment_of`, `seek_index` through `get`, the
//! iterator forward, backward and seeking). Arbitrary bytes never panic;
//! every error is a `Corruption` naming the region (or the MANIFEST).
//!
//! The first byte picks the mode. Bit 0 builds a real log (below) instead
//! of laying the rest over the region from page 2 on. Bit 1 rewrites the
//! checksums — every segment header's, the key and value checksums of the
//! nodes the list links from its head (or a table's offsets name), a
//! non-zero seal's, an offset array's header and body crcs — to match the
//! (fuzzed) bytes, so the structure checks behind them are reached. Bit 2
//! has the table verify value checksums. Bit 3 damages the table (array
//! and nodes) after it is built from a clean walk, instead of the log
//! before the walk.
//!
//! With bit 0 the rest is: a byte for the groups (1–12), the segment size
//! (1–3 pages) and the append mode (one persist per group or per entry);
//! a byte where power is cut (the persist budget, and after which group);
//! a byte whether the log is sealed (a retired writer) and for the
//! early write-backs of the crash image; then per group a size byte and
//! two bytes per entry (key, value length, kind); then (u16 offset, u8
//! XOR) triples damaging the region. An undamaged log walks to a prefix of
//! the appended groups, whole groups only (all of them if power stayed
//! on), and the table built from its nodes answers every get like a model.
//!
//! Every image (damaged or not) is also read as `Db::repair` reads it
//! without a MANIFEST (`design::salvage::salvage_pm`, through
//! `common/salvage.rs`).

#![no_main]

#[path = "common/salvage.rs"]
mod common_salvage;
use common_salvage::salvage;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tierkv::design::nvcache::format::{
    encode_seal, node_size, Node, HEAD_WORD, NODE_HEADER_BYTES, SEAL_WORD, SEGMENT_HEADER_BYTES,
    SEGMENT_MAGIC, TABLE_HEADER_BYTES, TABLE_MAGIC, USAGE_BYTES,
};
use tierkv::design::nvcache::log::{self, Logs, Space, WalkedNode};
use tierkv::design::nvcache::table::{NvTable, TableBuild};
use tierkv::iter::{Found, TableReader};
use tierkv::key::{self, Kind, SeqNo, MAX_SEQNO};
use tierkv::stats::Tier;
use tierkv::storage::alloc::PageRun;
use tierkv::storage::pm::PmTier;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::version::edit::{TableFormat, TableMeta};
use tierkv::wal::LogWriter;
use tierkv::{Error, WriteBatch};

const PAGE: u64 = 4096;
const PAGES: u64 = 16;
const REGION: u64 = PAGES * PAGE;
const LOG: u64 = 7;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn check(region: &dyn PmRegion, e: &Error) {
    match e {
        Error::Corruption { at, .. } => {
            assert!(at.source == region.name() || at.source == "MANIFEST", "{e}")
        }
        _ => panic!("not a corruption: {e}"),
    }
}

/// An appended entry: (seqno, kind, key, value).
type Entry = (SeqNo, Kind, Vec<u8>, Vec<u8>);

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let fix = mode & 2 != 0;
    let (image, locator, appended, damage) = if mode & 1 == 0 {
        let sim = Arc::new(SimRegion::new(REGION as usize));
        let n = rest.len().min((REGION - 2 * PAGE) as usize);
        sim.write(2 * PAGE, &rest[..n]).unwrap();
        (sim, 2 * PAGE, None, &[][..])
    } else {
        match build(rest) {
            Some(b) => b,
            None => return,
        }
    };
    let region: Arc<dyn PmRegion> = image.clone();
    let damage_log = mode & 8 == 0;
    let pristine = appended.is_some() && damage.len() < 3;
    if damage_log {
        apply(&image, damage);
    }
    // The log's number: the owner its first segment names, in raw mode.
    let number = match &appended {
        Some(_) => LOG,
        None => u64_at(image.slice(locator, 16).unwrap(), 8),
    };
    if fix {
        fix_segments(&image);
        fix_list(&image, locator);
        fix_seal(&image, locator, number);
    }
    // Repair's reading of the same bytes.
    salvage(&region, tierkv::Preset::NvCache, 2);

    // Recovery: the chain (live_pm_runs), then the walk (recover).
    let chain = log::walk_segments(region.as_ref(), locator, number);
    let walked = log::walk(region.as_ref(), locator, number);
    match (&chain, &walked) {
        (Ok((segs, _)), Ok((walk_segs, _))) => assert_eq!(segs, walk_segs),
        (Err(e), Ok(_)) => panic!("the walk succeeds where the chain fails: {e}"),
        _ => {}
    }
    if let Err(e) = &chain {
        check(region.as_ref(), e);
    }
    let (segs, nodes) = match walked {
        Ok(w) => w,
        Err(e) => {
            check(region.as_ref(), &e);
            assert!(
                !(pristine && damage_log),
                "an undamaged log fails its walk: {e}"
            );
            if appended.is_none() {
                raw_table(&image, fix, mode & 4 != 0);
            }
            return;
        }
    };
    check_walk(region.as_ref(), &segs, &nodes);
    if let (Some((entries, groups, all)), true) = (&appended, pristine && damage_log) {
        // A prefix of the appended entries, in whole groups.
        assert!(nodes.len() <= entries.len());
        for (n, e) in nodes.iter().zip(entries) {
            assert_eq!(
                n.ikey,
                key::make_internal_key(&e.2, e.0, e.1),
                "node at {}",
                n.at
            );
        }
        assert!(
            nodes.is_empty() || groups.contains(&nodes.len()),
            "{} nodes end inside a group",
            nodes.len()
        );
        if *all {
            assert_eq!(nodes.len(), entries.len(), "acknowledged groups lost");
        }
    }
    if appended.is_none() {
        raw_table(&image, fix, mode & 4 != 0);
        return;
    }
    if nodes.is_empty() {
        return;
    }
    // The flush of the recovered log (`NvCache::adopt`).
    let Some(meta) = adopt(&region, &segs, &nodes) else {
        return;
    };
    if !damage_log {
        apply(&image, damage);
        if fix {
            fix_table(&image, meta.pm_pages[0]);
        }
    }
    let model = (pristine && appended.is_some()).then(|| {
        let mut m: BTreeMap<Vec<u8>, Vec<(SeqNo, Kind, Vec<u8>)>> = BTreeMap::new();
        for n in &nodes {
            let p = key::parse_internal_key(&n.ikey).unwrap();
            let node = Node::read(region.as_ref(), n.at, 0, REGION).unwrap();
            let v = node.value(region.as_ref(), true).unwrap().to_vec();
            m.entry(p.user_key.to_vec())
                .or_default()
                .push((p.seq, p.kind, v));
        }
        m
    });
    read_table(&region, &meta, mode & 4 != 0, model.as_ref());
});

/// Applies (u16 offset, u8 XOR) triples to the region.
fn apply(sim: &SimRegion, damage: &[u8]) {
    for d in damage.chunks_exact(3) {
        let off = 2 * PAGE + u64::from(u16::from_le_bytes([d[0], d[1]])) % (REGION - 2 * PAGE);
        sim.corrupt(off, d[2]).unwrap();
    }
}

/// Rewrites the crc of every segment header (a page starting with the
/// magic).
fn fix_segments(sim: &SimRegion) {
    for p in 2..PAGES {
        let h = sim.slice(p * PAGE, 36).unwrap();
        if h[0..8] == SEGMENT_MAGIC {
            let crc = tierkv::coding::crc32c(h);
            sim.write(p * PAGE + 36, &crc.to_le_bytes()).unwrap();
        }
    }
}

/// Rewrites the checksums of the node at `at` if its lengths fit the
/// region; returns its `next` link.
fn fix_node(sim: &SimRegion, at: u64) -> Option<u64> {
    if !at.is_multiple_of(8) || at < PAGE || at + NODE_HEADER_BYTES > REGION {
        return None;
    }
    let h = sim.slice(at, NODE_HEADER_BYTES as usize).unwrap().to_vec();
    let (k, v) = (u64::from(u32_at(&h, 24)), u64::from(u32_at(&h, 28)));
    if at + NODE_HEADER_BYTES + k + v > REGION {
        return None;
    }
    let key = sim
        .slice(at + NODE_HEADER_BYTES, k as usize)
        .unwrap()
        .to_vec();
    let value = sim.slice(at + NODE_HEADER_BYTES + k, v as usize).unwrap();
    let vcrc = tierkv::coding::crc32c(value).to_le_bytes();
    let kcrc = tierkv::coding::crc32c_append(
        tierkv::coding::crc32c_append(tierkv::coding::crc32c(&h[16..36]), &vcrc),
        &key,
    );
    sim.write(at + 36, &kcrc.to_le_bytes()).unwrap();
    sim.write(at + 40, &vcrc).unwrap();
    Some(u64_at(&h, 0))
}

/// Rewrites the checksums of the nodes the list links from its head.
fn fix_list(sim: &SimRegion, locator: u64) {
    let mut seen = HashSet::new();
    let mut at = sim.load_u64(locator + HEAD_WORD).unwrap();
    while at != 0 && seen.insert(at) && seen.len() < 256 {
        match fix_node(sim, at) {
            Some(next) => at = next,
            None => break,
        }
    }
}

/// Rewrites a non-zero seal's checksum for the count it holds.
fn fix_seal(sim: &SimRegion, locator: u64, number: u64) {
    let w = sim.load_u64(locator + SEAL_WORD).unwrap();
    if w != 0 {
        sim.store_u64(locator + SEAL_WORD, encode_seal(number, w as u32))
            .unwrap();
    }
}

/// Rewrites an offset array's checksums (when its counts fit the run) and
/// those of the nodes its offsets name.
fn fix_table(sim: &SimRegion, run: PageRun) {
    let at = run.first * PAGE;
    let h = sim.slice(at, TABLE_HEADER_BYTES as usize).unwrap().to_vec();
    let (n, u) = (u64_at(&h, 40), u64::from(u32_at(&h, 48)));
    let Some(body) = n
        .checked_mul(8)
        .and_then(|x| x.checked_add(USAGE_BYTES * u))
        .filter(|&b| TABLE_HEADER_BYTES + b <= run.count * PAGE)
    else {
        return;
    };
    for i in 0..n.min(512) {
        let o = sim.load_u64(at + TABLE_HEADER_BYTES + 8 * i).unwrap_or(0);
        fix_node(sim, o);
    }
    let b = sim.slice(at + TABLE_HEADER_BYTES, body as usize).unwrap();
    let crc = tierkv::coding::crc32c(b);
    sim.write(at + 52, &crc.to_le_bytes()).unwrap();
    let h = sim.slice(at, 60).unwrap();
    let crc = tierkv::coding::crc32c(h);
    sim.write(at + 60, &crc.to_le_bytes()).unwrap();
}

/// What a walk returns holds whatever its input: nodes in consecutive
/// seqnos, each a valid node inside one of the chain's segments.
fn check_walk(region: &dyn PmRegion, segs: &[PageRun], nodes: &[WalkedNode]) {
    assert!(!segs.is_empty());
    for s in segs {
        assert!(s.count > 0 && (s.first + s.count) * PAGE <= REGION, "{s:?}");
    }
    for (i, n) in nodes.iter().enumerate() {
        let seg = segs
            .iter()
            .find(|s| {
                s.first * PAGE + SEGMENT_HEADER_BYTES <= n.at
                    && n.at + n.size <= (s.first + s.count) * PAGE
            })
            .unwrap_or_else(|| panic!("node at {} outside the chain {segs:?}", n.at));
        let node = Node::read(
            region,
            n.at,
            seg.first * PAGE,
            (seg.first + seg.count) * PAGE,
        )
        .expect("a walked node reads back");
        assert!(node.value(region, true).is_ok());
        assert_eq!(node.size(), n.size);
        let p = key::parse_internal_key(&n.ikey).expect("a walked node's key");
        assert_eq!((p.user_key, p.seq), (node.key, node.seq()));
        if i > 0 {
            let q = key::parse_internal_key(&nodes[i - 1].ikey).unwrap();
            assert_eq!(p.seq, q.seq + 1, "seqnos of a log are consecutive");
        }
    }
}

/// Sorts the walked nodes into a table, as the recovery hook does; the
/// array goes into pages the reconciled allocator hands out.
fn adopt(region: &Arc<dyn PmRegion>, segs: &[PageRun], nodes: &[WalkedNode]) -> Option<TableMeta> {
    let tier = Arc::new(PmTier::open(Arc::clone(region), true).ok()?);
    tier.allocator().reconcile(segs).ok()?;
    let space = Space {
        region: Arc::clone(region),
        tier,
        segment_pages: 1,
    };
    let mut nodes = nodes.to_vec();
    nodes.sort_by(|a, b| key::compare_internal(&a.ikey, &b.ikey));
    let mut sorted = segs.to_vec();
    sorted.sort_unstable();
    let mut build = TableBuild::with_capacity(nodes.len());
    for s in &sorted {
        build.include(*s);
    }
    for n in &nodes {
        let seg = *sorted
            .iter()
            .find(|r| r.first * PAGE <= n.at && n.at < (r.first + r.count) * PAGE)?;
        build.push(
            n.at,
            n.size,
            seg,
            key::user_key(&n.ikey),
            key::trailer(&n.ikey),
        );
    }
    Some(build.finish(&space, 9, Duration::ZERO).ok()??.meta)
}

/// Raw mode: a table whose array run starts at the first page holding the
/// array magic, its metadata taken from the array itself (the runs only
/// if they lie in the region and overlap nothing, as the allocator's
/// reconcile guarantees before any table is opened).
fn raw_table(sim: &Arc<SimRegion>, fix: bool, verify: bool) {
    let Some(p) = (2..PAGES).find(|&p| sim.slice(p * PAGE, 8).unwrap() == TABLE_MAGIC) else {
        return;
    };
    let h = sim
        .slice(p * PAGE, TABLE_HEADER_BYTES as usize)
        .unwrap()
        .to_vec();
    let (n, u) = (u64_at(&h, 40), u64::from(u32_at(&h, 48)));
    let Some(len) = n
        .checked_mul(8)
        .and_then(|x| x.checked_add(TABLE_HEADER_BYTES + USAGE_BYTES * u))
    else {
        return;
    };
    let array = PageRun {
        first: p,
        count: len.div_ceil(PAGE).clamp(1, PAGES - p),
    };
    let mut pm_pages = vec![array];
    let usage_at = p * PAGE + TABLE_HEADER_BYTES + 8 * n;
    for i in 0..u.min(16) {
        let Ok(e) = sim.slice(usage_at + USAGE_BYTES * i, USAGE_BYTES as usize) else {
            return;
        };
        pm_pages.push(PageRun {
            first: u64_at(e, 0),
            count: u64::from(u32_at(e, 8)),
        });
    }
    let mut taken = vec![false; PAGES as usize];
    for r in &pm_pages {
        match r.first.checked_add(r.count) {
            Some(end) if r.first >= 2 && r.count > 0 && end <= PAGES => {}
            _ => return,
        }
        for q in r.first..r.first + r.count {
            if std::mem::replace(&mut taken[q as usize], true) {
                return;
            }
        }
    }
    if fix {
        fix_table(sim, array);
    }
    let meta = TableMeta {
        id: u64_at(&h, 16),
        tier: Tier::Pm,
        format: TableFormat::NvTable,
        size_bytes: 0,
        smallest: Vec::new(),
        largest: Vec::new(),
        seq_min: u64_at(&h, 24),
        seq_max: u64_at(&h, 32),
        entries: n,
        deletions: 0,
        pm_pages,
    };
    let region: Arc<dyn PmRegion> = sim.clone();
    read_table(&region, &meta, verify, None);
}

type Model = BTreeMap<Vec<u8>, Vec<(SeqNo, Kind, Vec<u8>)>>;

/// Opens the table and drives every accessor; with a model (an undamaged
/// table), checks every answer.
fn read_table(region: &Arc<dyn PmRegion>, meta: &TableMeta, verify: bool, model: Option<&Model>) {
    let t = match NvTable::open(Arc::clone(region), meta, verify) {
        Ok(t) => Arc::new(t),
        Err(e) => {
            check(region.as_ref(), &e);
            assert!(model.is_none(), "an undamaged table fails to open: {e}");
            return;
        }
    };
    assert_eq!((t.len() as u64, t.id()), (meta.entries, meta.id));
    for u in t.usage() {
        assert!(t.segment_of(u.nodes_start()).is_some_and(|s| s == u));
    }
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for i in 0..t.len().min(512) {
        let o = t.offset(i).expect("offsets were checked at open");
        assert!(t.segment_of(o).is_some());
        match t.node(i) {
            Ok(n) => {
                if keys.len() < 48 {
                    keys.push(n.key.to_vec());
                }
                if let Err(e) = n.value(region.as_ref(), true) {
                    check(region.as_ref(), &e);
                }
            }
            Err(e) => check(region.as_ref(), &e),
        }
    }
    keys.push(b"zz-absent".to_vec());
    keys.push(Vec::new());
    for k in &keys {
        for seq in [MAX_SEQNO, 105, 0] {
            match t.get(k, seq) {
                Ok(f) => {
                    if let Some(f) = &f {
                        assert!(f.seq <= seq, "get({k:?}, {seq}) found seqno {}", f.seq);
                    }
                    if let Some(m) = model {
                        assert_eq!(f, expect(m, k, seq), "get({k:?}, {seq})");
                    }
                }
                Err(e) => {
                    check(region.as_ref(), &e);
                    assert!(model.is_none(), "get of an undamaged table: {e}");
                }
            }
        }
    }
    let mut it = Arc::clone(&t).iter(false);
    it.seek_to_first();
    let mut steps = 0;
    let mut prev: Option<Vec<u8>> = None;
    while it.valid() {
        steps += 1;
        assert!(steps <= t.len(), "the iterator outruns the table");
        let k = it.key().to_vec();
        let _ = it.value();
        if let (Some(p), Some(_)) = (&prev, model) {
            assert!(key::compare_internal(p, &k).is_lt(), "iterator order");
        }
        prev = Some(k);
        it.next();
    }
    match it.status() {
        Ok(()) => assert_eq!(steps, t.len()),
        Err(e) => check(region.as_ref(), &e),
    }
    let mut it = Arc::clone(&t).iter(false);
    it.seek_to_last();
    let mut back = 0;
    while it.valid() && back <= t.len() {
        back += 1;
        let _ = (it.key(), it.value());
        it.prev();
    }
    for k in &keys {
        it.seek(&key::seek_key(k, MAX_SEQNO));
        if it.valid() {
            let _ = (it.key(), it.value());
            it.next();
        }
    }
    if let Err(e) = it.status() {
        check(region.as_ref(), &e);
        assert!(model.is_none(), "iterator over an undamaged table: {e}");
    }
}

fn expect(model: &Model, k: &[u8], seq: SeqNo) -> Option<Found> {
    model
        .get(k)?
        .iter()
        .filter(|v| v.0 <= seq)
        .max_by_key(|v| v.0)
        .map(|v| Found {
            seq: v.0,
            kind: v.1,
            value: if v.1 == Kind::Delete {
                Vec::new()
            } else {
                v.2.clone()
            },
        })
}

/// The crash image of a log written as `input` says; the appended
/// entries, the entry counts at group ends, whether every group must
/// survive; the damage bytes.
#[allow(clippy::type_complexity)]
fn build(
    input: &[u8],
) -> Option<(
    Arc<SimRegion>,
    u64,
    Option<(Vec<Entry>, Vec<usize>, bool)>,
    &[u8],
)> {
    let [g, cut, seal, rest @ ..] = input else {
        return None;
    };
    let groups = 1 + usize::from(g % 12);
    let sim = Arc::new(SimRegion::new(REGION as usize));
    let region: Arc<dyn PmRegion> = sim.clone();
    let tier = Arc::new(PmTier::open(Arc::clone(&region), false).ok()?);
    let space = Arc::new(Space {
        region: Arc::clone(&region),
        tier,
        segment_pages: 1 + u64::from(g / 16 % 3),
    });
    let logs = Logs::default();
    let per_entry = g & 0x80 != 0;
    let (mut w, locator) = log::create(&space, &logs, LOG, per_entry).ok()?;
    // Power goes after group `cut % 16` with `cut / 16` more persists.
    let cut_group = usize::from(cut % 16);
    let power_on = cut_group >= groups;
    let mut rest = rest;
    let mut seq: SeqNo = 100;
    let mut entries = Vec::new();
    let mut ends = Vec::new();
    let mut bytes = 0u64;
    for gi in 0..groups {
        if gi == cut_group {
            sim.set_persist_budget(Some(u64::from(cut / 16)));
        }
        let (&s, r) = rest.split_first()?;
        let n = 1 + usize::from(s % 4);
        let (desc, r) = r.split_at((2 * n).min(r.len()));
        if desc.is_empty() {
            break;
        }
        rest = r;
        let mut b = WriteBatch::new();
        let first = seq;
        for d in desc.chunks(2) {
            let a = d[0];
            let v = d.get(1).copied().unwrap_or(0);
            let k = vec![b'a' + a % 8; 1 + usize::from(a / 8 % 5)];
            let value = vec![v; usize::from(v % 8) * 40];
            bytes += node_size(k.len(), value.len());
            if v % 5 == 0 {
                b.delete(&k);
                entries.push((seq, Kind::Delete, k, Vec::new()));
            } else {
                b.put(&k, &value);
                entries.push((seq, Kind::Put, k, value));
            }
            seq += 1;
        }
        if bytes > 6 * PAGE {
            return None; // keep the log well inside the region
        }
        let mut rec = b.encoded().to_vec();
        rec[..8].copy_from_slice(&first.to_le_bytes());
        w.add_record(&rec).ok()?;
        ends.push(entries.len());
    }
    if seal & 1 != 0 {
        w.seal().ok()?;
    }
    let image = if seal & 2 != 0 {
        sim.crash_with_evictions(u64::from(*seal))
    } else {
        sim.crash()
    };
    drop(w);
    Some((
        Arc::new(image),
        locator,
        Some((entries, ends, power_on)),
        rest,
    ))
}
