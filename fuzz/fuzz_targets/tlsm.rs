//! Fuzzes TLSM's PM decoders (`design/tlsm/`): the static decoders of
//! `format.rs` (`Header::decode`, `Directory::decode`, `Slot::decode`,
//! `decode_buffer_header`, `entry_shape`) and the job record
//! (`JobRecord::decode`) over the raw input, as it is and with each
//! structure's crc made to match it; the skip list reader
//! (`SkipList::open`: `list::read_header`, `list::read_directory`, the
//! buffers' headers and the walk of every node) and every read of a list
//! that opens (`get`, `seek_node`, `find_less_than`, `find_last`, `entry`,
//! `data_run`, the iterator forward, backward and seeking); a persistent
//! buffer (`BufferSource::open` and its entries); and what the resume of
//! an interrupted compaction reads (`job::read_slot`, `build::output_runs`
//! — `header_run_at`, the walk of an output's linked prefix, `dir_run_at`
//! — and `Outputs::resume`, which then finishes the merge). Arbitrary
//! bytes never panic; every error of a list or a buffer is a `Corruption`
//! naming the region (a resume may also give up with `Unresumable`).
//!
//! The first byte picks the mode. Bit 0 builds real lists (below) instead
//! of laying the rest over the region from page 2 on. Bit 1 rewrites the
//! checksums — the list headers', the directories', the buffers' (header
//! and entries), every inline entry's and the sentinel's of the nodes the
//! layout rule walks from the head, the slot run's — to match the
//! (fuzzed) bytes, so the structure checks behind them are reached. Bit 2
//! verifies entry checksums. Bits 3–4 pick the variant: full (sound
//! order), full (faithful order), `ps`, `ps_bac`. Bit 5 adds an
//! interrupted compaction of the lists.
//!
//! With bit 0 the rest is: a byte for the lists (1 or 2) and their entries
//! (1–32 each); two bytes per entry (key, value length, kind); with bit 5,
//! a compaction byte (link or copy, outputs cut at ~2000 bytes or not, the
//! smallest snapshot, nodes per persist) and a byte for where power is cut
//! (the persist budget; 255: never); then (u24 offset, u8 XOR) quadruples
//! damaging the crash image. Undamaged lists read back exactly what was
//! flushed, and the resumed compaction produces every entry it must keep,
//! in order.
//!
//! Every image (damaged or not) is also read as `Db::repair` reads it
//! without a MANIFEST (`design::salvage::salvage_pm`, through
//! `common/salvage.rs`).

#![no_main]

#[path = "common/salvage.rs"]
mod common_salvage;
use common_salvage::salvage;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use tierkv::design::tlsm::build::{self, FlushParams, Mode, OutputParams, Outputs, Pages};
use tierkv::design::tlsm::format::{
    self, align8, decode_buffer_header, entry_shape, Directory, Header, Layout, Origin, Slot,
    BUFFER_HEADER_BYTES, HEAD_MARK, MARKER_HEIGHT, MAX_HEIGHT, NODE_FIXED,
};
use tierkv::design::tlsm::job::{
    self, merge_into, BufferSource, GpCutter, JobKind, JobRecord, KeySpan, ListSource, Merge,
    Source,
};
use tierkv::design::tlsm::list::{self, SkipList, Verified};
use tierkv::iter::{Found, InternalIterator, TableReader};
use tierkv::key::{self, Kind, SeqNo, MAX_SEQNO};
use tierkv::memtable::MemTable;
use tierkv::options::TlsmPersistOrder;
use tierkv::stats::Tier;
use tierkv::storage::alloc::PageRun;
use tierkv::storage::pm::PmTier;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::version::edit::{TableFormat, TableMeta};
use tierkv::Error;

const PAGE: u64 = 4096;
const PAGES: u64 = 64;
const REGION: u64 = PAGES * PAGE;
const JOB: u64 = 500;

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

/// Pages from the allocator of the region: `want` if a run that long is
/// free, else `min`.
struct Alloc(Arc<PmTier>);

impl Pages for Alloc {
    fn alloc(&self, want: u64, min: u64) -> tierkv::Result<PageRun> {
        let a = self.0.allocator();
        if let Some(r) = a.alloc(want)? {
            return Ok(r);
        }
        a.alloc(min)?
            .ok_or_else(|| Error::InvalidArgument("fuzz region full".into()))
    }
    fn free(&self, run: PageRun) -> tierkv::Result<()> {
        self.0.free_pages(run)
    }
}

/// `data` with the u32 at `at` set to the crc32c of the bytes before it
/// (when it fits), so a decoder's checks behind its crc are reached.
fn with_crc(data: &[u8], at: usize) -> Option<Vec<u8>> {
    let mut b = data.to_vec();
    let crc = tierkv::coding::crc32c(b.get(..at)?);
    b.get_mut(at..at.checked_add(4)?)?
        .copy_from_slice(&crc.to_le_bytes());
    Some(b)
}

/// The static decoders over arbitrary bytes, as they are and with their
/// crc made to match: whatever decodes re-encodes to the same value.
fn check_decoders(data: &[u8]) {
    let field = |at: usize| data.get(at..at + 4).map_or(0, |b| u32_at(b, 0) as usize);
    let fixed = [
        with_crc(data, 48usize.saturating_add(field(44).saturating_mul(8))),
        with_crc(
            data,
            format::DIR_FIXED
                .saturating_add(field(32).saturating_mul(12))
                .saturating_add(field(12).saturating_mul(20)),
        ),
        with_crc(data, 24usize.saturating_add(field(20))),
        with_crc(data, 36),
    ];
    for b in fixed.iter().flatten() {
        decoders(b);
    }
    decoders(data);
}

fn decoders(data: &[u8]) {
    if let Ok(h) = Header::decode(data) {
        let mut b = h.encode();
        b.resize(b.len().max(data.len()), 0);
        assert_eq!(Header::decode(&b).unwrap(), h);
    }
    if let Ok(d) = Directory::decode(data) {
        assert_eq!(Directory::decode(&d.encode()).unwrap(), d);
        // Data runs sorted and disjoint, as `decode` promises.
        for w in d.data.windows(2) {
            assert!(w[0]
                .run
                .first
                .checked_add(w[0].run.count)
                .is_some_and(|e| e <= w[1].run.first));
        }
    }
    if let Ok((s, w)) = Slot::decode(data) {
        assert!(w + 16 + 8 * s.capacity as usize <= data.len());
        assert_eq!(Slot::decode(&s.encode()).unwrap().0, s);
    }
    if let Ok(h) = decode_buffer_header(data) {
        assert_eq!(
            decode_buffer_header(&format::encode_buffer_header(&h)).unwrap(),
            h
        );
    }
    if let Some(s) = entry_shape(data) {
        assert!(s.len <= data.len() && s.key_at + s.key_len == s.value_at);
    }
    match JobRecord::decode(data) {
        Ok(r) => assert_eq!(JobRecord::decode(&r.encode()).unwrap(), r),
        Err(e) => assert!(e.is_corruption(), "{e}"),
    }
}

/// An entry: (internal key, value).
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// A compaction: its parameters, its slot run and the region before the
/// power went.
struct Job {
    mode: Mode,
    target: u64,
    snapshot: SeqNo,
    persist_every: usize,
    slot: PageRun,
    /// Outputs it finished before the crash image was taken (power on).
    finished: Option<Vec<TableMeta>>,
}

fuzz_target!(|data: &[u8]| {
    check_decoders(data);
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let fix = mode & 2 != 0;
    let verify = mode & 4 != 0;
    if mode & 1 == 0 {
        raw(rest, fix, verify);
        return;
    }
    let (layout, order) = match (mode >> 3) & 3 {
        0 => (Layout::Full, TlsmPersistOrder::Sound),
        1 => (Layout::Full, TlsmPersistOrder::Faithful),
        2 => (Layout::Ps, TlsmPersistOrder::Sound),
        _ => (Layout::PsBac, TlsmPersistOrder::Sound),
    };
    let Some((sim, lists, job, damage)) = build_all(rest, layout, order, mode & 32 != 0) else {
        return;
    };
    let image = Arc::new(sim.crash());
    let region: Arc<dyn PmRegion> = image.clone();
    let pristine = damage.len() < 4;
    // Node runs of each list, from an open of the undamaged image.
    let mut node_runs = Vec::new();
    for (meta, _, _) in &lists {
        let l = SkipList::open(Arc::clone(&region), meta, true, &Verified::default())
            .expect("a list just flushed opens");
        node_runs.push(l.directory().node_runs.clone());
    }
    for d in damage.chunks_exact(4) {
        let off = u64::from(u32::from_le_bytes([d[0], d[1], d[2], 0]));
        image
            .corrupt(2 * PAGE + off % (REGION - 2 * PAGE), d[3])
            .unwrap();
    }
    if fix {
        for ((meta, data_runs, _), runs) in lists.iter().zip(&node_runs) {
            fix_list(&image, meta.pm_pages[0], runs, data_runs, layout);
        }
        if let Some(j) = &job {
            fix_job(&image, j.slot);
        }
    }
    // Repair's reading of the same bytes.
    salvage(&region, tierkv::Preset::Tlsm, 2);
    let verified = Verified::default();
    let mut opened = Vec::new();
    for (meta, data_runs, entries) in &lists {
        if layout == Layout::Full {
            for r in data_runs {
                read_buffer(&region, *r, None);
            }
        }
        let l = read_list(
            &region,
            meta,
            verify,
            &verified,
            pristine.then_some(entries),
        );
        opened.push(l);
    }
    if let Some(j) = job {
        let all: Option<Vec<Arc<SkipList>>> = opened.into_iter().collect();
        resume(&image, &lists, all, &j, pristine);
    }
});

/// Reads the buffer in `run` as a copy-forward's source; with `want`,
/// its entries must be those.
fn read_buffer(region: &Arc<dyn PmRegion>, run: PageRun, want: Option<&Entries>) {
    match BufferSource::open(Arc::clone(region), run) {
        Ok(mut s) => {
            s.seek_to_first();
            let mut got = Vec::new();
            while s.valid() && got.len() <= 4096 {
                assert_eq!(s.data_run(), Some(run));
                got.push((s.key().to_vec(), s.value().to_vec()));
                let _ = (s.entry_off(), s.entry_len());
                s.next();
            }
            match s.status() {
                Ok(()) => {
                    if let Some(w) = want {
                        assert_eq!(&got, w);
                    }
                }
                Err(e) => check(region.as_ref(), &e),
            }
        }
        Err(e) => {
            check(region.as_ref(), &e);
            assert!(want.is_none(), "an undamaged buffer: {e}");
        }
    }
}

/// Opens the list and reads it every way; with `want` (an undamaged
/// list), every answer must match it.
fn read_list(
    region: &Arc<dyn PmRegion>,
    meta: &TableMeta,
    verify: bool,
    verified: &Verified,
    want: Option<&Entries>,
) -> Option<Arc<SkipList>> {
    let l = match SkipList::open(Arc::clone(region), meta, verify, verified) {
        Ok(l) => Arc::new(l),
        Err(e) => {
            check(region.as_ref(), &e);
            assert!(want.is_none(), "an undamaged list fails to open: {e}");
            return None;
        }
    };
    assert_eq!(l.len(), meta.entries);
    assert_eq!(l.directory().entry_bytes, meta.size_bytes);
    // Forward: strictly ascending, exactly n entries.
    let mut it = l.iter_list();
    it.seek_to_first();
    let mut got: Entries = Vec::new();
    while it.valid() {
        assert!(
            got.len() < l.len() as usize,
            "the iterator outruns the list"
        );
        let k = it.key().to_vec();
        if let Some((p, _)) = got.last() {
            assert!(key::compare_internal(p, &k).is_lt(), "iterator order");
        }
        let off = it.entry_off();
        assert!(l.data_run(off).is_some() && l.data_run_fast(off).is_some());
        let (ek, ev) = l.entry(off).expect("an entry the walk checked");
        assert_eq!((ek, ev), (it.key(), it.value()));
        let len = l.entry_len(off).unwrap();
        assert_eq!(
            len,
            if l.inline() {
                format::inline_len(ek.len(), ev.len())
            } else {
                format::entry_len(ek.len(), ev.len())
            } as u64
        );
        got.push((k, it.value().to_vec()));
        it.next();
    }
    it.status().expect("a list that opened iterates");
    assert_eq!(got.len() as u64, l.len());
    if let Some(w) = want {
        assert_eq!(&got, w, "the list's entries");
    }
    // Every key found by a search, from the top level down; backward
    // through find_less_than.
    for (i, (k, v)) in got.iter().enumerate() {
        let node = l.seek_node(k).unwrap();
        assert_eq!(
            l.entry(l.entry_off(node).unwrap()).unwrap().0,
            k.as_slice(),
            "seek_node"
        );
        let before = l.find_less_than(k).unwrap();
        if i == 0 {
            assert_eq!(before, l.head());
        } else {
            let off = l.entry_off(before).unwrap();
            assert_eq!(
                l.entry(off).unwrap().0,
                got[i - 1].0.as_slice(),
                "find_less_than"
            );
        }
        let p = key::parse_internal_key(k).unwrap();
        let f = l
            .get(p.user_key, p.seq)
            .unwrap()
            .expect("get of a key the list holds");
        assert_eq!(
            f,
            Found {
                seq: p.seq,
                kind: p.kind,
                value: if p.kind == Kind::Delete {
                    Vec::new()
                } else {
                    v.clone()
                },
            }
        );
        let _ = l.get(p.user_key, MAX_SEQNO).unwrap();
        let _ = l.get(p.user_key, 0).unwrap();
    }
    let last = l.find_last().unwrap();
    match got.last() {
        Some((k, _)) => assert_eq!(l.entry(l.entry_off(last).unwrap()).unwrap().0, k.as_slice()),
        None => assert_eq!(last, l.head()),
    }
    assert!(l.get(b"zz-absent", MAX_SEQNO).unwrap().is_none());
    let mut it = Arc::clone(&l).iter(false);
    it.seek_to_last();
    let mut back = got.len();
    while it.valid() {
        assert!(back > 0, "the iterator steps back past the first entry");
        back -= 1;
        assert_eq!(it.key(), got[back].0.as_slice());
        it.prev();
    }
    assert_eq!(back, 0);
    for (k, _) in got.iter().take(16) {
        it.seek(k);
        assert!(it.valid() && it.key() == k.as_slice());
    }
    it.seek(&key::make_internal_key(b"zz-absent", 1, Kind::Put));
    assert!(!it.valid());
    it.status().unwrap();
    Some(l)
}

/// Flushes the lists `input` describes (and runs the compaction, when
/// asked); returns the region, each list's metadata, data runs and
/// entries, the compaction, and the damage bytes.
#[allow(clippy::type_complexity)]
fn build_all(
    input: &[u8],
    layout: Layout,
    order: TlsmPersistOrder,
    compact: bool,
) -> Option<(
    Arc<SimRegion>,
    Vec<(TableMeta, Vec<PageRun>, Entries)>,
    Option<Job>,
    &[u8],
)> {
    let (&spec, mut rest) = input.split_first()?;
    let count = 1 + usize::from(spec & 1);
    let per = 1 + usize::from(spec >> 1) % 32;
    let sim = Arc::new(SimRegion::new(REGION as usize));
    let region: Arc<dyn PmRegion> = sim.clone();
    let tier = Arc::new(PmTier::open(Arc::clone(&region), false).ok()?);
    let pages = Alloc(Arc::clone(&tier));
    let mut seq: SeqNo = 10;
    let mut lists = Vec::new();
    for li in 0..count {
        let (desc, r) = rest.split_at((2 * per).min(rest.len()));
        rest = r;
        if desc.is_empty() {
            return None;
        }
        let mem = Arc::new(MemTable::new(0));
        for d in desc.chunks(2) {
            let a = d[0];
            let b = d.get(1).copied().unwrap_or(0);
            let k = vec![b'a' + a % 8; 1 + usize::from(a / 8 % 4)];
            let kind = if b % 5 == 0 { Kind::Delete } else { Kind::Put };
            let value = if kind == Kind::Put {
                vec![b; usize::from(b % 8) * 30]
            } else {
                Vec::new()
            };
            mem.add(seq, kind, &k, &value);
            seq += 1;
        }
        let mut entries = Entries::new();
        let mut it = mem.iter();
        it.seek_to_first();
        while it.valid() {
            entries.push((it.key().to_vec(), it.value().to_vec()));
            it.next();
        }
        let b = build::flush_list(
            &FlushParams {
                region: &region,
                pages: &pages,
                id: 1 + li as u64,
                layout,
                order,
                filter_bits: 10,
            },
            &mut mem.iter(),
        )
        .ok()?;
        same_as_walked(&region, &b);
        let data_runs = b.refs.data.iter().map(|d| d.run).collect();
        lists.push((b.meta, data_runs, entries));
    }
    let job = if compact {
        let [c, budget, r @ ..] = rest else {
            return None;
        };
        rest = r;
        Some(compaction(&sim, &region, &pages, &lists, *c, *budget)?)
    } else {
        None
    };
    Some((sim, lists, job, rest))
}

/// A list the process just wrote: the reader its builder recorded is the
/// one the opening walk finds (`SkipList::from_builder`).
fn same_as_walked(region: &Arc<dyn PmRegion>, b: &build::BuiltList) {
    let walked =
        SkipList::open_filtered(Arc::clone(region), &b.meta, true, &Default::default(), 10)
            .expect("a list just written opens");
    let reader = b
        .reader
        .as_ref()
        .expect("a fresh list has its builder's reader");
    assert!(
        reader.same_as_walked(&walked),
        "builder's reader of list {}",
        b.meta.id
    );
}

/// Starts a compaction of every list into L1, with power cut after
/// `budget` persists (255: never): the job as the uninterrupted one
/// would run it, from its slot.
fn compaction(
    sim: &Arc<SimRegion>,
    region: &Arc<dyn PmRegion>,
    pages: &Alloc,
    lists: &[(TableMeta, Vec<PageRun>, Entries)],
    c: u8,
    budget: u8,
) -> Option<Job> {
    let mode = if c & 1 != 0 { Mode::Copy } else { Mode::Link };
    let target = if c & 2 != 0 { 2000 } else { u64::MAX };
    let snapshot = if c & 4 != 0 { MAX_SEQNO } else { 0 };
    let persist_every = 1 + usize::from(c >> 3) % 4;
    let slot = pages.alloc(1, 1).ok()?;
    let sref = job::write_slot(
        region,
        slot,
        &Slot {
            job: JOB,
            capacity: 16,
            grandparents: Vec::new(),
        },
    )
    .ok()?;
    let rec = JobRecord {
        job: JOB,
        level: 1,
        kind: JobKind::Merge,
        mode,
        drop_tombstones: false,
        smallest_snapshot: snapshot,
        target_bytes: target,
        slot,
        inputs: lists.iter().map(|(m, ..)| (0, m.id)).collect(),
        more_parts: Vec::new(),
    };
    assert_eq!(JobRecord::decode(&rec.encode()).unwrap(), rec);
    let opened: Vec<Arc<SkipList>> = lists
        .iter()
        .map(|(m, ..)| {
            Arc::new(SkipList::open(Arc::clone(region), m, true, &Verified::default()).unwrap())
        })
        .collect();
    if budget != 255 {
        sim.set_persist_budget(Some(u64::from(budget)));
    }
    let next = AtomicU64::new(100);
    let next_id = || next.fetch_add(1, Ordering::Relaxed);
    let layout = job::output_layout(mode, opened[0].header().layout);
    let mut outs = Outputs::new(OutputParams {
        region,
        pages,
        slot: sref,
        job: JOB,
        level: 1,
        layout,
        origin: Origin::Compaction,
        inputs: lists.iter().map(|(m, ..)| m.id).collect(),
        persist_every,
        mode,
        node_bytes_hint: 2048,
        next_id: &next_id,
        filter_bits: 10,
    });
    let mut merge = Merge::new(
        opened
            .iter()
            .map(|l| Box::new(ListSource::new(l)) as Box<dyn Source>)
            .collect(),
    );
    let mut cutter = GpCutter::new(target, Vec::new());
    let ran = merge_into(
        &mut merge,
        KeySpan::default(),
        &mut outs,
        &mut cutter,
        snapshot,
        None,
    );
    let finished = match ran {
        Ok(Ok(())) => outs.finish_all().ok().map(|(built, _)| {
            built
                .into_iter()
                .map(|b| {
                    same_as_walked(region, &b);
                    b.meta
                })
                .collect()
        }),
        _ => None,
    };
    Some(Job {
        mode,
        target,
        snapshot,
        persist_every,
        slot,
        finished: finished.filter(|_| budget == 255),
    })
}

/// What the resume reads of the job, then the resume itself on the
/// image: the merge run again from the slot's outputs. Without damage it
/// must finish, with every entry the merge keeps, in order.
fn resume(
    image: &Arc<SimRegion>,
    lists: &[(TableMeta, Vec<PageRun>, Entries)],
    inputs: Option<Vec<Arc<SkipList>>>,
    j: &Job,
    pristine: bool,
) {
    let region: Arc<dyn PmRegion> = image.clone();
    // `live_pm_runs` (job_runs): the slot and each named output's runs.
    let (slot, sref, outs, _) = match job::read_slot(region.as_ref(), j.slot) {
        Ok(s) => s,
        Err(e) => {
            assert!(!pristine, "an undamaged slot: {e}");
            return;
        }
    };
    assert!(outs.len() <= slot.capacity as usize);
    let mut live: Vec<PageRun> = vec![j.slot];
    for (i, &hoff) in outs.iter().enumerate() {
        match build::output_runs(region.as_ref(), JOB, 1, j.mode, i as u32, hoff) {
            Ok(r) => live.extend(r),
            Err(e) => {
                assert!(!pristine, "an undamaged output {i}: {e}");
                break;
            }
        }
    }
    let Some(inputs) = inputs else {
        return;
    };
    for (m, data, _) in lists {
        live.extend(m.pm_pages.iter().copied());
        live.extend(data.iter().copied());
    }
    live.sort_unstable();
    live.dedup();
    let Ok(tier) = PmTier::open(Arc::clone(&region), true) else {
        return;
    };
    if let Err(e) = tier.allocator().reconcile(&live) {
        assert!(!pristine, "the job's runs overlap: {e}");
        return;
    }
    let pages = Alloc(Arc::new(tier));
    let next = AtomicU64::new(200);
    let next_id = || next.fetch_add(1, Ordering::Relaxed);
    let params = OutputParams {
        region: &region,
        pages: &pages,
        slot: sref,
        job: JOB,
        level: 1,
        layout: job::output_layout(j.mode, inputs[0].header().layout),
        origin: Origin::Compaction,
        inputs: lists.iter().map(|(m, ..)| m.id).collect(),
        persist_every: j.persist_every,
        mode: j.mode,
        node_bytes_hint: 2048,
        next_id: &next_id,
        filter_bits: 10,
    };
    let mut o = match Outputs::resume(params, &outs) {
        Ok(o) => o,
        Err(u) => {
            assert!(!pristine, "an undamaged job is unresumable: {}", u.0);
            return;
        }
    };
    let mut merge = Merge::new(
        inputs
            .iter()
            .map(|l| Box::new(ListSource::new(l)) as Box<dyn Source>)
            .collect(),
    );
    let mut cutter = GpCutter::new(j.target, slot.grandparents.clone());
    let built = match merge_into(
        &mut merge,
        KeySpan::default(),
        &mut o,
        &mut cutter,
        j.snapshot,
        None,
    ) {
        Ok(Ok(())) => match o.finish_all() {
            Ok((built, _)) => built,
            Err(u) => {
                assert!(!pristine, "finishing an undamaged job: {}", u.0);
                return;
            }
        },
        Ok(Err(u)) => {
            assert!(
                !pristine,
                "an undamaged job does not match its outputs: {}",
                u.0
            );
            return;
        }
        Err(e) => {
            assert!(!pristine, "resuming an undamaged job: {e}");
            return;
        }
    };
    // Every output opens; together they hold what the merge keeps.
    let mut got: Entries = Vec::new();
    for b in &built {
        let want = None;
        if let Some(l) = read_list(&region, &b.meta, true, &Verified::default(), want) {
            let mut it = l.iter_list();
            it.seek_to_first();
            while it.valid() {
                got.push((it.key().to_vec(), it.value().to_vec()));
                it.next();
            }
        } else {
            assert!(!pristine, "an output of an undamaged job does not open");
            return;
        }
    }
    if pristine {
        let mut all: Entries = lists
            .iter()
            .flat_map(|(_, _, e)| e.iter().cloned())
            .collect();
        all.sort_by(|a, b| key::compare_internal(&a.0, &b.0));
        if j.snapshot == MAX_SEQNO {
            all.dedup_by(|b, a| key::user_key(&a.0) == key::user_key(&b.0));
        }
        assert_eq!(got, all, "the resumed compaction's entries");
        if let Some(f) = &j.finished {
            let ids: Vec<u64> = built.iter().map(|b| b.meta.id).collect();
            let before: Vec<u64> = f.iter().map(|m| m.id).collect();
            assert_eq!(ids, before, "a finished job resumes to its outputs");
        }
    }
}

// ------------------------------------------------------------------ fixups

/// Rewrites the crc of the header at `at` when its input count fits.
fn fix_header(sim: &SimRegion, at: u64) -> Option<u64> {
    let b = sim.slice(at, 48).ok()?;
    let m = u64::from(u32_at(b, 44));
    let crc_at = 48 + 8 * m;
    if at + crc_at + 4 > REGION {
        return None;
    }
    let crc = tierkv::coding::crc32c(sim.slice(at, crc_at as usize).unwrap());
    sim.write(at + crc_at, &crc.to_le_bytes()).unwrap();
    Some(u64::from(u32_at(sim.slice(at, 16).unwrap(), 12)))
}

/// Rewrites a list's header, directory, buffer, inline entry and sentinel
/// checksums.
fn fix_list(sim: &SimRegion, hrun: PageRun, runs: &[PageRun], data: &[PageRun], layout: Layout) {
    let at = hrun.first * PAGE;
    if let Some(w) = fix_header(sim, at) {
        if let Ok(dir) = sim.load_u64(at + w + 8) {
            fix_directory(sim, dir);
        }
    }
    if layout == Layout::Full {
        for r in data {
            fix_buffer(sim, *r);
        }
    }
    fix_nodes(sim, runs, layout.inline());
}

fn fix_directory(sim: &SimRegion, dir: u64) {
    let Ok(b) = sim.slice(dir, format::DIR_FIXED) else {
        return;
    };
    let (r, k) = (u64::from(u32_at(b, 12)), u64::from(u32_at(b, 32)));
    let len = format::DIR_FIXED as u64 + 12 * k + 20 * r;
    if dir + len + 4 <= REGION {
        let crc = tierkv::coding::crc32c(sim.slice(dir, len as usize).unwrap());
        sim.write(dir + len, &crc.to_le_bytes()).unwrap();
    }
}

fn fix_buffer(sim: &SimRegion, run: PageRun) {
    let at = run.first * PAGE;
    let l = u64_at(sim.slice(at, 40).unwrap(), 24);
    if l <= run.count * PAGE - BUFFER_HEADER_BYTES as u64 {
        let crc = tierkv::coding::crc32c(sim.slice(at + 40, l as usize).unwrap());
        sim.write(at + 32, &crc.to_le_bytes()).unwrap();
    }
    let crc = tierkv::coding::crc32c(sim.slice(at, 36).unwrap());
    sim.write(at + 36, &crc.to_le_bytes()).unwrap();
}

/// Walks the nodes by the layout rule from the head of `runs[0]`, fixing
/// each inline entry's crc, and writes the sentinel's crc of them.
fn fix_nodes(sim: &SimRegion, runs: &[PageRun], inline: bool) {
    let Some(r0) = runs.first() else { return };
    let mut ri = 0;
    let mut pos = r0.first * PAGE;
    let mut crc = 0u32;
    for _ in 0..10_000 {
        let end = (runs[ri].first + runs[ri].count) * PAGE;
        if pos + NODE_FIXED as u64 > end {
            return;
        }
        let f = sim.slice(pos, NODE_FIXED).unwrap().to_vec();
        let (off, h) = (u64_at(&f, 0), f[8]);
        if off == 0 && h == MARKER_HEIGHT {
            crc = tierkv::coding::crc32c_append(crc, &f);
            ri += 1;
            let Some(r) = runs.get(ri) else { return };
            pos = r.first * PAGE;
            continue;
        }
        if off == 0 {
            sim.write(pos + 12, &crc.to_le_bytes()).unwrap();
            return;
        }
        let h = usize::from(h);
        if off != HEAD_MARK && !(1..=MAX_HEIGHT).contains(&h) {
            return;
        }
        let mut len = (NODE_FIXED + 8 * h) as u64;
        if inline && off == pos + len {
            let body = pos + len + 4;
            if body >= end {
                return;
            }
            let Some(s) = entry_shape(sim.slice(body, (end - body) as usize).unwrap()) else {
                return;
            };
            let c = tierkv::coding::crc32c(sim.slice(body, s.len).unwrap());
            sim.write(pos + len, &c.to_le_bytes()).unwrap();
            len += align8(4 + s.len) as u64;
        }
        if pos + len > end {
            return;
        }
        crc = tierkv::coding::crc32c_append(crc, sim.slice(pos, len as usize).unwrap());
        pos += len;
    }
}

/// Rewrites the slot's crc and the header crcs of the outputs it names.
fn fix_job(sim: &SimRegion, slot: PageRun) {
    let at = slot.first * PAGE;
    let g = u64::from(u32_at(sim.slice(at, 24).unwrap(), 20));
    if at + 28 + g > (slot.first + slot.count) * PAGE {
        return;
    }
    let crc = tierkv::coding::crc32c(sim.slice(at, 24 + g as usize).unwrap());
    sim.write(at + 24 + g, &crc.to_le_bytes()).unwrap();
    let w = at + align8(28 + g as usize) as u64;
    let n = sim.load_u64(w).unwrap_or(0).min(16);
    for i in 0..n {
        if let Ok(h) = sim.load_u64(w + 16 + 8 * i) {
            if h % PAGE == 0 && h < REGION {
                fix_header(sim, h);
            }
        }
    }
}

// -------------------------------------------------------------------- raw

/// Raw mode: the rest over pages 2.., read as a list whose header run
/// is page 2 (its metadata from what the header, directory and nodes
/// say), as a slot run, a buffer and an output of job `JOB`.
fn raw(rest: &[u8], fix: bool, verify: bool) {
    let sim = Arc::new(SimRegion::new(REGION as usize));
    let n = rest.len().min((REGION - 2 * PAGE) as usize);
    sim.write(2 * PAGE, &rest[..n]).unwrap();
    let region: Arc<dyn PmRegion> = sim.clone();
    let at = 2 * PAGE;
    let magic = sim.slice(at, 8).unwrap().to_vec();
    if fix && magic == format::BUFFER_MAGIC {
        fix_buffer(&sim, PageRun { first: 2, count: 3 });
    } else if fix && magic == format::SLOT_MAGIC {
        fix_job(&sim, PageRun { first: 2, count: 2 });
    } else if fix {
        if let Some(w) = fix_header(&sim, at) {
            if let Ok(dir) = sim.load_u64(at + w + 8) {
                fix_directory(&sim, dir);
            }
        }
    }
    // A slot run and a buffer at page 2.
    if let Err(e) = job::read_slot(region.as_ref(), PageRun { first: 2, count: 2 }) {
        check(region.as_ref(), &e);
    }
    read_buffer(&region, PageRun { first: 2, count: 3 }, None);
    let Ok(hrun) = build::header_run_at(region.as_ref(), at) else {
        return;
    };
    let hv = match list::read_header(region.as_ref(), hrun) {
        Ok(hv) => hv,
        Err(e) => {
            check(region.as_ref(), &e);
            return;
        }
    };
    // As an output of an interrupted job (what its resume reads).
    let h = &hv.header;
    let _ = build::output_runs(region.as_ref(), h.job, h.level, Mode::Link, h.ordinal, at);
    let _ = build::output_runs(region.as_ref(), h.job, h.level, Mode::Copy, h.ordinal, at);
    let mut pm_pages = vec![hrun];
    if hv.dir_off != 0 && !(at..at + hrun.count * PAGE).contains(&hv.dir_off) {
        match build::dir_run_at(region.as_ref(), hv.dir_off) {
            Ok(r) if r.first >= hrun.first + hrun.count && r.first >= 2 => pm_pages.push(r),
            _ => return,
        }
    }
    let dir = match list::read_directory(region.as_ref(), hv.dir_off, &pm_pages) {
        Ok(d) => d,
        Err(e) => {
            check(region.as_ref(), &e);
            return;
        }
    };
    if fix {
        fix_nodes(&sim, &dir.node_runs, hv.header.layout.inline());
        if hv.header.layout == Layout::Full {
            for d in &dir.data {
                if d.run.first >= 2 && (d.run.first + d.run.count) * PAGE <= REGION {
                    fix_buffer(&sim, d.run);
                }
            }
        }
    }
    // The first and last keys, along the level-0 links.
    let (smallest, largest) = ends(&sim, &dir, hv.header.layout.inline()).unwrap_or_default();
    let meta = TableMeta {
        id: hv.header.id,
        tier: Tier::Pm,
        format: TableFormat::PmSkipList,
        size_bytes: dir.entry_bytes,
        smallest,
        largest,
        seq_min: 0,
        seq_max: MAX_SEQNO,
        entries: hv.linked,
        deletions: 0,
        pm_pages,
    };
    read_list(&region, &meta, verify, &Verified::default(), None);
}

/// The internal keys of the first and the last node along the level-0
/// links (at most 4096 steps), read the way the list lays entries out.
fn ends(sim: &SimRegion, dir: &Directory, inline: bool) -> Option<(Vec<u8>, Vec<u8>)> {
    let key_at = |node: u64| -> Option<Vec<u8>> {
        let off = sim.load_u64(node).ok()?;
        let body = off.checked_add(if inline { 4 } else { 0 })?;
        let b = sim
            .slice(body, (REGION.checked_sub(body)?).min(1 << 16) as usize)
            .ok()?;
        let s = entry_shape(b)?;
        Some(b[s.key_at..s.key_at + s.key_len].to_vec())
    };
    let head = dir.node_runs.first()?.first.checked_mul(PAGE)?;
    let mut x = sim.load_u64(head.checked_add(NODE_FIXED as u64)?).ok()?;
    let first = key_at(x)?;
    let mut last = first.clone();
    for _ in 0..4096 {
        let next = sim.load_u64(x.checked_add(NODE_FIXED as u64)?).ok()?;
        if next == 0 || sim.load_u64(next).ok()? == 0 {
            break;
        }
        x = next;
        last = key_at(x)?;
    }
    Some((first, last))
}
