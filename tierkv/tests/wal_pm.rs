//! The WAL in PM: roundtrip over an extent chain, reused pages, a full
//! region, corruption of records and of the chain, and crashes at every
//! persist point (with and without cache-line evictions).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::wal::pm::{extent_len_for_blocks, EXTENT_HEADER_BYTES};
use tierkv::wal::{
    is_pm_full, ExtentSource, LogSink, PmLog, PmSource, Reader, Writer, HEADER_SIZE,
};
use tierkv::{Error, Result};

/// A bump allocator with a LIFO free list (so freed extents are reused
/// first, stale bytes and all), and an adjustable end.
struct TestSource {
    state: Mutex<SourceState>,
}

struct SourceState {
    next: u64,
    end: u64,
    free: Vec<(u64, u64)>,
}

impl TestSource {
    fn new(end: u64) -> Arc<Self> {
        Arc::new(TestSource {
            state: Mutex::new(SourceState {
                next: 4096,
                end,
                free: Vec::new(),
            }),
        })
    }

    fn set_end(&self, end: u64) {
        self.state.lock().unwrap().end = end;
    }
}

impl ExtentSource for TestSource {
    fn alloc_extent(&self, len_bytes: u64) -> Result<Option<u64>> {
        let mut s = self.state.lock().unwrap();
        if let Some(i) = s.free.iter().rposition(|&(_, l)| l == len_bytes) {
            return Ok(Some(s.free.remove(i).0));
        }
        if s.next + len_bytes > s.end {
            return Ok(None);
        }
        let at = s.next;
        s.next += len_bytes.div_ceil(4096) * 4096;
        Ok(Some(at))
    }

    fn free_extent(&self, offset: u64, len_bytes: u64) -> Result<()> {
        self.state.lock().unwrap().free.push((offset, len_bytes));
        Ok(())
    }
}

/// A region that "loses power" at a chosen persist: that persist and every
/// later write or persist never happen, as if the process died there. The
/// inner simulator then yields what survived.
struct KillRegion {
    inner: Arc<SimRegion>,
    persists_left: AtomicU64,
    dead: AtomicBool,
}

impl KillRegion {
    fn new(inner: Arc<SimRegion>, persists: u64) -> Arc<Self> {
        Arc::new(KillRegion {
            inner,
            persists_left: AtomicU64::new(persists),
            dead: AtomicBool::new(false),
        })
    }

    fn dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }
}

impl PmRegion for KillRegion {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        if self.dead() {
            return Ok(());
        }
        self.inner.write(offset, data)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read(offset, buf)
    }
    fn slice(&self, offset: u64, len: usize) -> Result<&[u8]> {
        self.inner.slice(offset, len)
    }
    fn persist(&self, offset: u64, len: usize) -> Result<()> {
        if self.dead() {
            return Ok(());
        }
        if self.persists_left.load(Ordering::SeqCst) == 0 {
            self.dead.store(true, Ordering::SeqCst);
            return Ok(());
        }
        self.persists_left.fetch_sub(1, Ordering::SeqCst);
        self.inner.persist(offset, len)
    }
    fn fence(&self) {
        self.inner.fence()
    }
    fn persistence(&self) -> tierkv::storage::Persistence {
        self.inner.persistence()
    }
    fn store_u64(&self, offset: u64, value: u64) -> Result<()> {
        self.inner.store_u64(offset, value)
    }
    fn load_u64(&self, offset: u64) -> Result<u64> {
        self.inner.load_u64(offset)
    }
}

fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (i * 131 + j * 7 + j / 251) as u8)
        .collect()
}

fn random_len(rng: &mut SmallRng) -> usize {
    match rng.gen_range(0..10) {
        0 => 0,
        1..=6 => rng.gen_range(1..300),
        7 | 8 => rng.gen_range(300..40_000),
        _ => rng.gen_range(40_000..=100 * 1024),
    }
}

fn records(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n).map(|i| payload(i, random_len(&mut rng))).collect()
}

fn read_all(r: &mut Reader<PmSource>) -> (Vec<Vec<u8>>, Option<Error>) {
    let mut out = Vec::new();
    loop {
        match r.next_record() {
            Ok(Some(rec)) => out.push(rec),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

fn read_ok(r: &mut Reader<PmSource>) -> Vec<Vec<u8>> {
    match read_all(r) {
        (got, None) => got,
        (got, Some(e)) => panic!("error after {} records: {e}", got.len()),
    }
}

/// Reads every record and its offset.
fn read_with_offsets(region: Arc<dyn PmRegion>, first: u64, log: u64) -> Vec<(u64, Vec<u8>)> {
    let mut r = PmLog::open_for_read(region, first, log).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push((r.last_record_offset(), rec));
    }
    out
}

const EXTENT_4: u64 = EXTENT_HEADER_BYTES + 4 * 32 * 1024;

/// A source with no run longer than `max` bytes (a fragmented region).
struct FragmentedSource {
    inner: Arc<TestSource>,
    max: u64,
}

impl ExtentSource for FragmentedSource {
    fn alloc_extent(&self, len_bytes: u64) -> Result<Option<u64>> {
        if len_bytes > self.max {
            return Ok(None);
        }
        self.inner.alloc_extent(len_bytes)
    }
    fn free_extent(&self, offset: u64, len_bytes: u64) -> Result<()> {
        self.inner.free_extent(offset, len_bytes)
    }
}

#[test]
fn a_fragmented_region_gets_shorter_extents_instead_of_failing() {
    // Extents of 8 blocks are asked for; the region has no run longer than
    // 4 blocks, then 1: the log goes on in shorter extents, each header
    // recording its length.
    for (max_blocks, log) in [(4u64, 43u64), (1, 44)] {
        let sim = Arc::new(SimRegion::new(8 << 20));
        let region: Arc<dyn PmRegion> = sim.clone();
        let source = Arc::new(FragmentedSource {
            inner: TestSource::new(sim.len()),
            max: extent_len_for_blocks(max_blocks),
        });
        let sink = PmLog::create(region.clone(), source, log, extent_len_for_blocks(8)).unwrap();
        let first = sink.first_extent();
        let mut w = Writer::new(sink, log);
        let recs = records(log, 150);
        for r in &recs {
            w.add_record(r).unwrap();
        }
        w.sync().unwrap();
        let extents = w.sink().extents();
        assert!(extents.len() > 2);
        assert!(extents
            .iter()
            .all(|&(_, l)| l == extent_len_for_blocks(max_blocks)));
        let mut r = PmLog::open_for_read(region.clone(), first, log).unwrap();
        assert_eq!(read_ok(&mut r), recs);
        assert_eq!(PmLog::extents(region.as_ref(), first).unwrap(), extents);
    }
}

#[test]
fn roundtrip_over_an_extent_chain_with_one_persist_per_sync() {
    let sim = Arc::new(SimRegion::new(8 << 20));
    let region: Arc<dyn PmRegion> = sim.clone();
    let source = TestSource::new(sim.len());
    let sink = PmLog::create(region.clone(), source.clone(), 42, EXTENT_4).unwrap();
    let first = sink.first_extent();
    let mut w = Writer::new(sink, 42);
    let recs = records(10, 150);
    let mut single_persist_syncs = 0;
    for r in &recs {
        let extents = w.sink().extents().len();
        w.add_record(r).unwrap();
        let before = sim.persist_count();
        w.sync().unwrap();
        if w.sink().extents().len() == extents {
            assert_eq!(sim.persist_count() - before, 1, "a sync inside one extent");
            single_persist_syncs += 1;
        }
    }
    assert!(single_persist_syncs > 100);
    let before = sim.persist_count();
    w.sync().unwrap();
    assert_eq!(sim.persist_count(), before, "nothing new: no persist");
    assert!(
        w.sink().extents().len() > 5,
        "{} extents",
        w.sink().extents().len()
    );

    let mut r = PmLog::open_for_read(region.clone(), first, 42).unwrap();
    assert_eq!(read_ok(&mut r), recs);
    assert_eq!(r.torn_tail(), None);
    assert_eq!(
        PmLog::extents(region.as_ref(), first).unwrap(),
        w.sink().extents()
    );

    // The durable image holds the same.
    let crashed: Arc<dyn PmRegion> = Arc::new(sim.crash());
    let mut r = PmLog::open_for_read(crashed, first, 42).unwrap();
    assert_eq!(read_ok(&mut r), recs);
}

#[test]
fn reused_extents_full_of_an_old_log_read_cleanly() {
    let sim = Arc::new(SimRegion::new(4 << 20));
    let region: Arc<dyn PmRegion> = sim.clone();
    let source = TestSource::new(sim.len());
    // Log 3 fills several extents, then is retired and its extents freed.
    let sink = PmLog::create(region.clone(), source.clone(), 3, EXTENT_4).unwrap();
    let old_first = sink.first_extent();
    let mut w = Writer::new(sink, 3);
    for (i, r) in records(11, 120).iter().enumerate() {
        w.add_record(r).unwrap();
        if i % 5 == 0 {
            w.sync().unwrap();
        }
    }
    w.sync().unwrap();
    let old_extents = PmLog::extents(region.as_ref(), old_first).unwrap();
    for &(off, len) in old_extents.iter().rev() {
        source.free_extent(off, len).unwrap();
    }
    // Log 4 reuses them (same offsets), writes less, with varied sizes so its
    // records end in the middle of the old log's records.
    let sink = PmLog::create(region.clone(), source.clone(), 4, EXTENT_4).unwrap();
    assert_eq!(sink.first_extent(), old_first);
    let first = sink.first_extent();
    let mut w = Writer::new(sink, 4);
    let recs = records(12, 40);
    for r in &recs {
        w.add_record(r).unwrap();
        w.sync().unwrap();
    }
    for image in [sim.crash(), sim.crash_with_evictions(5)] {
        let image: Arc<dyn PmRegion> = Arc::new(image);
        let mut r = PmLog::open_for_read(image.clone(), first, 4).unwrap();
        assert_eq!(read_ok(&mut r), recs);
        assert_eq!(r.torn_tail(), None, "the end marker makes the end clean");
        // The old log is gone: its first extent now belongs to log 4.
        let err = PmLog::open_for_read(image, old_first, 3).err().unwrap();
        assert!(err.is_corruption(), "{err}");
    }
}

#[test]
fn a_full_region_is_a_recognisable_error_that_leaves_the_log_intact() {
    let sim = Arc::new(SimRegion::new(2 << 20));
    let region: Arc<dyn PmRegion> = sim.clone();
    let ext = extent_len_for_blocks(2);
    let source = TestSource::new(4096 + 3 * ext);
    let sink = PmLog::create(region.clone(), source.clone(), 8, ext).unwrap();
    let first = sink.first_extent();
    let mut w = Writer::new(sink, 8);
    let mut written = Vec::new();
    let mut i = 0;
    let err = loop {
        let rec = payload(i, 10_000 + i * 997 % 5_000);
        match w.add_record(&rec) {
            Ok(()) => {
                w.sync().unwrap();
                written.push(rec);
                i += 1;
            }
            Err(e) => break e,
        }
    };
    assert!(is_pm_full(&err), "{err}");
    assert!(err.is_no_space());
    assert!(!is_pm_full(&Error::InvalidArgument("x".into())));
    assert_eq!(w.sink().extents().len(), 3);
    w.sync().unwrap();
    let mut r = PmLog::open_for_read(region.clone(), first, 8).unwrap();
    assert_eq!(read_ok(&mut r), written);
    assert_eq!(r.torn_tail(), None);

    // Space comes back: the same record goes in, the writer is not poisoned.
    source.set_end(4096 + 6 * ext);
    let rec = payload(i, 10_000 + i * 997 % 5_000);
    w.add_record(&rec).unwrap();
    w.sync().unwrap();
    written.push(rec);
    let mut r = PmLog::open_for_read(region.clone(), first, 8).unwrap();
    assert_eq!(read_ok(&mut r), written);

    // Creating a log without space.
    let empty = TestSource::new(4096);
    let err = PmLog::create(region.clone(), empty, 9, ext).err().unwrap();
    assert!(is_pm_full(&err), "{err}");
    // An extent length that holds no block.
    let err = PmLog::create(region, source, 9, EXTENT_HEADER_BYTES + 100)
        .err()
        .unwrap();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

/// The workload of the crash tests: log 21 in 2-block extents, records of
/// mixed sizes (some cross blocks and extents), a sync after every
/// `per_sync` records. Returns the first extent and how many records were
/// acknowledged (their sync returned before the power went out), or `None`
/// if the power went out inside `create` (the log was never recorded).
fn crash_workload(
    region: &Arc<KillRegion>,
    recs: &[Vec<u8>],
    per_sync: usize,
) -> Option<(u64, usize)> {
    let dynr: Arc<dyn PmRegion> = region.clone();
    let source = TestSource::new(region.len());
    let sink = PmLog::create(dynr, source, 21, extent_len_for_blocks(2)).unwrap();
    if region.dead() {
        return None;
    }
    let first = sink.first_extent();
    let mut w = Writer::new(sink, 21);
    let mut acked = 0;
    for (i, rec) in recs.iter().enumerate() {
        w.add_record(rec).unwrap();
        if (i + 1) % per_sync == 0 || i + 1 == recs.len() {
            w.sync().unwrap();
            if region.dead() {
                break;
            }
            acked = i + 1;
        }
    }
    Some((first, acked))
}

fn crash_records() -> Vec<Vec<u8>> {
    let sizes = [
        10, 0, 3000, 20_000, 15_000, 70_000, 5, 33_000, 1, 60_000, 100, 32_757, 0, 9_000,
    ];
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| payload(i, n))
        .collect()
}

#[test]
fn crash_at_every_persist_point_keeps_the_synced_records() {
    let recs = crash_records();
    let total = {
        let sim = Arc::new(SimRegion::new(2 << 20));
        let k = KillRegion::new(sim.clone(), u64::MAX);
        crash_workload(&k, &recs, 1).unwrap();
        sim.persist_count()
    };
    assert!(total > recs.len() as u64 + 6, "{total} persists");
    let (mut checked, mut in_flight_kept, mut torn) = (0, 0, 0);
    for budget in 0..=total {
        let sim = Arc::new(SimRegion::new(2 << 20));
        let k = KillRegion::new(sim.clone(), budget);
        let Some((first, acked)) = crash_workload(&k, &recs, 1) else {
            continue;
        };
        let mut images = vec![("crash".to_string(), sim.crash())];
        for seed in 1..=4 {
            images.push((
                format!("evictions {seed}"),
                sim.crash_with_evictions(seed * 7919 + budget),
            ));
        }
        for (what, image) in images {
            let image: Arc<dyn PmRegion> = Arc::new(image);
            let mut r = PmLog::open_for_read(image, first, 21)
                .unwrap_or_else(|e| panic!("budget {budget}, {what}: {e}"));
            let (got, err) = read_all(&mut r);
            assert!(err.is_none(), "budget {budget}, {what}: {err:?}");
            assert!(
                got.len() == acked || got.len() == acked + 1,
                "budget {budget}, {what}: {} records, {acked} acknowledged",
                got.len()
            );
            assert_eq!(&got[..], &recs[..got.len()], "budget {budget}, {what}");
            checked += 1;
            in_flight_kept += usize::from(got.len() > acked);
            torn += usize::from(r.torn_tail().is_some());
        }
    }
    assert!(checked > 5 * recs.len());
    // Both outcomes of a crash in flight show up, and torn tails too.
    assert!(
        in_flight_kept > 0 && torn > 0,
        "{in_flight_kept} kept, {torn} torn"
    );
    eprintln!(
        "{checked} crash images, {in_flight_kept} kept the record in flight, {torn} torn tails"
    );
}

#[test]
fn crash_with_several_records_per_sync_keeps_a_prefix() {
    let recs = crash_records();
    let total = {
        let sim = Arc::new(SimRegion::new(2 << 20));
        let k = KillRegion::new(sim.clone(), u64::MAX);
        crash_workload(&k, &recs, 3).unwrap();
        sim.persist_count()
    };
    for budget in 0..=total {
        let sim = Arc::new(SimRegion::new(2 << 20));
        let k = KillRegion::new(sim.clone(), budget);
        let Some((first, acked)) = crash_workload(&k, &recs, 3) else {
            continue;
        };
        let image: Arc<dyn PmRegion> = Arc::new(sim.crash());
        let mut r = PmLog::open_for_read(image, first, 21).unwrap();
        let got = read_ok(&mut r);
        assert!(got.len() >= acked, "budget {budget}");
        assert_eq!(&got[..], &recs[..got.len()], "budget {budget}");
    }
}

/// A log of `n` records in 2-block extents on a fresh simulator.
fn small_log(n: usize) -> (Arc<SimRegion>, u64, Vec<Vec<u8>>) {
    let sim = Arc::new(SimRegion::new(2 << 20));
    let region: Arc<dyn PmRegion> = sim.clone();
    let source = TestSource::new(sim.len());
    let sink = PmLog::create(region, source, 77, extent_len_for_blocks(2)).unwrap();
    let first = sink.first_extent();
    let recs: Vec<Vec<u8>> = (0..n).map(|i| payload(i, 900 + i * 37)).collect();
    // Through a boxed sink, as the engine picks the sink at run time.
    let mut w: Writer<Box<dyn LogSink>> = Writer::new(Box::new(sink), 77);
    for r in &recs {
        w.add_record(r).unwrap();
    }
    w.sync().unwrap();
    (sim, first, recs)
}

#[test]
fn record_damage_in_pm_is_corruption_or_a_torn_tail_by_the_rule() {
    let (sim, first, recs) = small_log(200);
    let region: Arc<dyn PmRegion> = sim.clone();
    let with_offsets = read_with_offsets(region.clone(), first, 77);
    assert_eq!(with_offsets.len(), recs.len());
    assert!(PmLog::extents(region.as_ref(), first).unwrap().len() >= 3);

    // Body corruption: an early record, valid records after it.
    let (at, _) = with_offsets[5];
    sim.corrupt(at + 13, 0x08).unwrap();
    let mut r = PmLog::open_for_read(region.clone(), first, 77).unwrap();
    let (got, err) = read_all(&mut r);
    assert_eq!(&got[..], &recs[..5]);
    match err {
        Some(Error::Corruption { at: loc, .. }) => {
            assert_eq!(loc.source, sim.name());
            assert_eq!(loc.offset, at);
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    sim.corrupt(at + 13, 0x08).unwrap();

    // The last record damaged in a log that was not sealed (a crash may
    // have torn the record in flight anywhere): a torn tail, every earlier
    // record.
    let (last_at, _) = *with_offsets.last().unwrap();
    sim.corrupt(last_at + 20, 0x01).unwrap();
    let mut r = PmLog::open_for_read(region, first, 77).unwrap();
    assert_eq!(read_ok(&mut r), recs[..recs.len() - 1]);
    assert_eq!(r.torn_tail(), Some(last_at));
}

/// A log sealed at a clean close: the same damage of its last record, a
/// zeroed record, or a log ending early, is corruption; the seal is written
/// where the synced records end, and nothing can be appended after it.
#[test]
fn damage_before_the_seal_of_a_cleanly_closed_log_is_corruption() {
    let sim = Arc::new(SimRegion::new(2 << 20));
    let region: Arc<dyn PmRegion> = sim.clone();
    let sink = PmLog::create(
        region.clone(),
        TestSource::new(sim.len()),
        78,
        extent_len_for_blocks(2),
    )
    .unwrap();
    let first = sink.first_extent();
    let recs: Vec<Vec<u8>> = (0..150).map(|i| payload(i, 700 + i * 41)).collect();
    let mut w = Writer::new(sink, 78);
    assert_eq!(PmLog::sealed_end(region.as_ref(), first).unwrap(), None);
    for r in &recs {
        w.add_record(r).unwrap();
        w.sync().unwrap();
    }
    // Appended but never synced: not covered by the seal.
    w.add_record(b"never synced").unwrap();
    w.seal().unwrap();
    assert!(w.add_record(b"after the seal").is_err());
    let end = PmLog::sealed_end(region.as_ref(), first)
        .unwrap()
        .expect("sealed");
    assert!(end > 0);
    let with_offsets = read_with_offsets(region.clone(), first, 78);
    assert_eq!(
        with_offsets.len(),
        recs.len() + 1,
        "the unsynced record is still in the volatile image"
    );
    let crashed = Arc::new(sim.crash());
    let crashed_dyn: Arc<dyn PmRegion> = crashed.clone();
    let mut r = PmLog::open_for_read(crashed_dyn.clone(), first, 78).unwrap();
    assert_eq!(read_ok(&mut r), recs);
    assert_eq!(r.torn_tail(), None);

    let (last_at, _) = with_offsets[recs.len() - 1];
    for (at, how) in [
        (last_at + 20, "payload"),
        (last_at + 1, "checksum"),
        (last_at + 5, "length"),
    ] {
        let img = Arc::new(crashed.crash());
        img.corrupt(at, 0x04).unwrap();
        let mut r = PmLog::open_for_read(img.clone(), first, 78).unwrap();
        let (got, err) = read_all(&mut r);
        assert_eq!(got, recs[..recs.len() - 1].to_vec(), "{how}");
        match err {
            Some(Error::Corruption { at: loc, .. }) => assert_eq!(loc.offset, last_at, "{how}"),
            other => panic!("{how}: expected corruption, got {other:?}"),
        }
    }
    // The last record zeroed: the log would end early, before its seal.
    let img = Arc::new(crashed.crash());
    let len = HEADER_SIZE + recs[recs.len() - 1].len();
    img.write(last_at, &vec![0u8; len]).unwrap();
    let mut r = PmLog::open_for_read(img, first, 78).unwrap();
    let (got, err) = read_all(&mut r);
    assert_eq!(got, recs[..recs.len() - 1].to_vec());
    assert!(err.is_some_and(|e| e.is_corruption()));
    // A damaged seal is no seal: the damage reads as a torn tail again.
    let img = Arc::new(crashed.crash());
    img.corrupt(first + 41, 0x01).unwrap();
    assert_eq!(PmLog::sealed_end(img.as_ref(), first).unwrap(), None);
    img.corrupt(last_at + 20, 0x01).unwrap();
    let mut r = PmLog::open_for_read(img, first, 78).unwrap();
    assert_eq!(read_ok(&mut r), recs[..recs.len() - 1]);
    assert_eq!(r.torn_tail(), Some(last_at));
}

#[test]
fn a_damaged_extent_chain_is_corruption_naming_the_extent() {
    let (sim, first, _) = small_log(200);
    let region: Arc<dyn PmRegion> = sim.clone();
    let extents = PmLog::extents(region.as_ref(), first).unwrap();
    let second = extents[1].0;

    let expect = |first: u64, log: u64, offset: u64, needle: &str| {
        let err = PmLog::open_for_read(region.clone(), first, log)
            .err()
            .unwrap();
        match &err {
            Error::Corruption { at, what } => {
                assert_eq!(at.source, sim.name());
                assert_eq!(at.offset, offset, "{err}");
                assert!(what.contains(needle), "{err} should mention {needle}");
            }
            other => panic!("expected corruption, got {other}"),
        }
    };
    // The wrong log number, a bad first offset.
    expect(first, 78, first, "chain of log 78");
    expect(first + 8, 77, first + 8, "magic");
    expect(sim.len() - 8, 77, sim.len() - 8, "beyond the end");
    // A damaged second extent header: reported with the link that led to it.
    sim.corrupt(second + 20, 0x10).unwrap();
    expect(first, 77, second, "linked from the next field");
    assert!(PmLog::extents(region.as_ref(), first).is_err());
    sim.corrupt(second + 20, 0x10).unwrap();
    // A cycle: the third extent links back to the first.
    let third = extents[2].0;
    sim.write(third + 32, &first.to_le_bytes()).unwrap();
    expect(first, 77, first, "cycle");
    sim.write(third + 32, &extents.get(3).map_or(0, |e| e.0).to_le_bytes())
        .unwrap();
    assert_eq!(PmLog::extents(region.as_ref(), first).unwrap(), extents);
}

#[test]
fn simulator_persist_budget_crash_keeps_the_synced_records() {
    // The same with the simulator's own budget: persists past it are
    // dropped while the writer runs on; `crash()` keeps the durable image.
    let recs = crash_records();
    let ext = extent_len_for_blocks(2);
    let mut budget = 0;
    loop {
        let sim = Arc::new(SimRegion::new(2 << 20));
        let region: Arc<dyn PmRegion> = sim.clone();
        sim.set_persist_budget(Some(budget));
        let sink = PmLog::create(region, TestSource::new(sim.len()), 21, ext).unwrap();
        let created = sim.persist_count() <= budget;
        let first = sink.first_extent();
        let mut w = Writer::new(sink, 21);
        let mut acked = 0;
        for (i, rec) in recs.iter().enumerate() {
            w.add_record(rec).unwrap();
            w.sync().unwrap();
            if sim.persist_count() <= budget {
                acked = i + 1;
            }
        }
        if created {
            let image: Arc<dyn PmRegion> = Arc::new(sim.crash());
            let mut r = PmLog::open_for_read(image, first, 21).unwrap();
            let got = read_ok(&mut r);
            assert!(
                got.len() == acked || got.len() == acked + 1,
                "budget {budget}"
            );
            assert_eq!(&got[..], &recs[..got.len()], "budget {budget}");
        }
        if acked == recs.len() {
            break;
        }
        budget += 1;
    }
}
