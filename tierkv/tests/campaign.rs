//! The corruption campaign: for every design and every kind of file and PM
//! structure of a real small database — SSTs, the WAL, the MANIFEST,
//! CURRENT, CLOSED, the PM WAL (extent headers and records), the PM page
//! allocator (superblock and bitmap), `triangle`/`matrix` RowTables
//! (metadata and values) and their container state (a design record in the
//! MANIFEST) — change bytes (single bytes, truncations of files, a zeroed
//! 4 KiB page) on a fresh copy of the database, then open it, read every
//! key and scan everything. Each outcome must be an `Error::Corruption`
//! naming the damaged file or PM region, or exactly the right data: never
//! a wrong value, a missing or extra key with `Ok`, a panic or a hang.
//!
//! The normal test command runs a seeded sample of offsets per structure.
//! `TIERKV_CAMPAIGN=full` changes every byte of every structure (and
//! truncates files at every 61st byte, zeroes every page): minutes, not
//! seconds. `TIERKV_CAMPAIGN_DESIGN=<name>` restricts it to one design,
//! `TIERKV_CAMPAIGN_TARGET=<text>` to the structures whose description
//! contains the text (e.g. `MANIFEST`, `PM WAL`, `RowTable`).
//!
//! A new design joins with one line in the `designs!` table: a test name,
//! its preset, whether it has a PM tier and where its WAL lives, and a
//! locator of its own structures (a function from the built database to
//! byte ranges, e.g. its PM tables and their metadata; the files, the PM
//! allocator and the PM WAL are located for every design). `pm_pages`
//! serves a design without a locator of its own (`tlsm`, `nvcache`): its
//! allocated PM runs, damaged without knowing their layout. `rangetab`
//! preallocates every buffer at create, so its runs are mostly free space:
//! `pm_rangetab` damages each buffer's header and the chunks it holds.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tierkv::design::container::rowtable::{self, RowTable};
use tierkv::design::container::CONTAINER_TAG;
use tierkv::storage::alloc::{PageAllocator, PAGE_SIZE_BYTES};
use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::{FileSystem, PmRegion};
use tierkv::version::edit::VersionEdit;
use tierkv::wal::{pm::EXTENT_HEADER_BYTES, PmLog, Reader, BLOCK_SIZE};
use tierkv::{Db, Error, Options, Preset, ReadOptions, WalPlacement, WriteBatch, WriteOptions};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const PM_BYTES: usize = 8 << 20;
const PAGE: u64 = PAGE_SIZE_BYTES;

/// One design under the campaign.
#[derive(Clone, Copy)]
struct DesignCase {
    name: &'static str,
    preset: Preset,
    /// The database has a PM region (the design's tier, or just its WAL).
    pm: bool,
    /// Its WAL is in PM.
    wal_on_pm: bool,
    /// The design's own structures (PM tables, their metadata, design
    /// records), beyond the files, the PM allocator and the PM WAL.
    locate: fn(&Built) -> Vec<Target>,
}

/// One line per design: a test `campaign_<name>` and its case.
macro_rules! designs {
    ($($(#[$attr:meta])* $test:ident: $case:expr,)*) => {
        /// Every design under the campaign.
        #[allow(dead_code)]
        const DESIGNS: &[DesignCase] = &[$($case),*];
        $(
            $(#[$attr])*
            #[test]
            fn $test() {
                campaign($case);
            }
        )*
    };
}

designs! {
    campaign_classic: DesignCase { name: "classic", preset: Preset::Classic, pm: false, wal_on_pm: false, locate: nothing_more },
    campaign_classic_pm_wal: DesignCase { name: "classic-pm-wal", preset: Preset::Classic, pm: true, wal_on_pm: true, locate: nothing_more },
    campaign_vlsm: DesignCase { name: "vlsm", preset: Preset::Vlsm, pm: false, wal_on_pm: false, locate: nothing_more },
    campaign_triangle: DesignCase { name: "triangle", preset: Preset::Triangle, pm: true, wal_on_pm: true, locate: pm_container },
    campaign_matrix: DesignCase { name: "matrix", preset: Preset::Matrix, pm: true, wal_on_pm: true, locate: pm_container },
    campaign_rangetab: DesignCase { name: "rangetab", preset: Preset::RangeTab, pm: true, wal_on_pm: true, locate: pm_rangetab },
    campaign_tlsm: DesignCase { name: "tlsm", preset: Preset::Tlsm, pm: true, wal_on_pm: true, locate: pm_pages },
    campaign_nvcache: DesignCase { name: "nvcache", preset: Preset::NvCache, pm: true, wal_on_pm: true, locate: pm_pages },
}

/// Where a structure lives.
#[derive(Debug, Clone)]
enum Place {
    File(PathBuf),
    Pm,
}

/// A structure to damage: its bytes, and what an error must name.
#[derive(Debug, Clone)]
struct Target {
    what: String,
    place: Place,
    range: Range<u64>,
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    Byte { at: u64, mask: u8 },
    Truncate { len: u64 },
    ZeroPage { start: u64 },
}

/// The database every trial copies.
struct Built {
    fs: MemFs,
    sim: Option<Arc<SimRegion>>,
    model: Model,
    /// Keys written and deleted since: a get must find nothing.
    absent: Vec<Vec<u8>>,
}

fn dir() -> PathBuf {
    PathBuf::from("/db")
}

fn options(case: &DesignCase, fs: &MemFs, sim: Option<&Arc<SimRegion>>) -> Options {
    let mut o = Options {
        design: case.preset,
        fs: Arc::new(fs.clone()),
        memtable_size_bytes: 64 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 128 << 10,
        level_size_multiplier: 4,
        level_count: 4,
        l0_compaction_trigger: 2,
        block_size_bytes: 1024,
        block_cache_bytes: 0,
        background_threads: 2,
        ..Options::default()
    };
    if let Some(s) = sim {
        o.pm_region = Some(Arc::clone(s) as Arc<dyn PmRegion>);
        o.pm_size_bytes = PM_BYTES as u64;
        o.wal = Some(if case.wal_on_pm {
            WalPlacement::Pm
        } else {
            WalPlacement::Ssd
        });
    }
    if case.preset.needs_pm() {
        o.l1_size_bytes = 1 << 20;
        // Sides run only when asked for, so rows stay in the container.
        o.pm_container_limit_bytes = 1 << 30;
    }
    o
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// A small database with every structure: tables on several levels (and
/// rows in the container, partly consumed by a side), records still in
/// the WAL, closed cleanly.
fn build(case: &DesignCase) -> Built {
    let fs = MemFs::new();
    let sim = case.pm.then(|| Arc::new(SimRegion::new(PM_BYTES)));
    let db = Db::open(dir(), options(case, &fs, sim.as_ref())).expect("open");
    let mut rng = SmallRng::seed_from_u64(0x15);
    let mut model = Model::new();
    let mut absent = Vec::new();
    let mut write = |db: &Db, n: u32, rng: &mut SmallRng| {
        for op in 0..n {
            let k = key(rng.gen_range(0..700));
            let mut b = WriteBatch::new();
            if op % 11 == 5 {
                b.delete(&k);
                if model.remove(&k).is_some() {
                    absent.push(k);
                }
            } else {
                let len = rng.gen_range(0..300);
                let v: Vec<u8> = (0..len).map(|i| (i as u8) ^ (op as u8)).collect();
                b.put(&k, &v);
                absent.retain(|a| a != &k);
                model.insert(k, v);
            }
            db.write(b, &WriteOptions { sync: op % 40 == 0 })
                .expect("write");
        }
    };
    // Every byte of a smaller database in the full campaign.
    let n = |x: u32| if full() { x / 3 } else { x };
    write(&db, n(700), &mut rng);
    db.flush().expect("flush");
    write(&db, n(500), &mut rng);
    db.flush().expect("flush");
    db.compact_range(Some(&key(100)), Some(&key(350)))
        .expect("compact");
    write(&db, n(400), &mut rng);
    db.flush().expect("flush");
    write(&db, n(250), &mut rng); // left in the WAL
    db.close().expect("close");
    absent.sort();
    absent.dedup();
    Built {
        fs,
        sim,
        model,
        absent,
    }
}

fn nothing_more(_: &Built) -> Vec<Target> {
    Vec::new()
}

/// Every file of the database directory.
fn files(b: &Built) -> Vec<Target> {
    let mut names: Vec<String> =
        b.fs.list(&dir())
            .expect("list")
            .into_iter()
            .filter(|n| n != "LOCK")
            .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let path = dir().join(&n);
            let len = b.fs.file_size(&path).expect("size");
            let kind = if n.ends_with(".sst") {
                "SST"
            } else if n.ends_with(".log") {
                "WAL"
            } else {
                n.as_str()
            };
            Target {
                what: format!("{kind} {n}"),
                place: Place::File(path),
                range: 0..len,
            }
        })
        .collect()
}

fn region(b: &Built) -> Option<Arc<dyn PmRegion>> {
    b.sim.as_ref().map(|s| Arc::clone(s) as Arc<dyn PmRegion>)
}

/// Allocated data pages of the region.
fn allocated_pages(r: &Arc<dyn PmRegion>) -> Vec<u64> {
    let a = PageAllocator::open(Arc::clone(r)).expect("allocator");
    (a.data_start_page()..a.total_pages())
        .filter(|&p| a.is_allocated(p))
        .collect()
}

/// The page allocator and the PM WAL: every database with a PM region.
fn pm_common(b: &Built) -> Vec<Target> {
    let Some(r) = region(b) else {
        return Vec::new();
    };
    let pages = r.len() / PAGE;
    let mut t = vec![
        Target {
            what: "PM allocator superblock".into(),
            place: Place::Pm,
            range: 0..48,
        },
        Target {
            what: "PM allocator bitmap".into(),
            place: Place::Pm,
            range: PAGE..PAGE + pages.div_ceil(64) * 8,
        },
    ];
    let alloc = allocated_pages(&r);
    for (first, log) in PmLog::find_chains(r.as_ref(), alloc.iter().map(|p| p * PAGE)) {
        let Ok(Some(sealed)) = PmLog::sealed_end(r.as_ref(), first) else {
            continue; // not the live log
        };
        let mut left = sealed;
        for (i, (at, len)) in PmLog::extents(r.as_ref(), first)
            .expect("chain")
            .into_iter()
            .enumerate()
        {
            t.push(Target {
                what: format!("PM WAL {log} extent {i} header"),
                place: Place::Pm,
                range: at..at + 56,
            });
            let cap = (len - EXTENT_HEADER_BYTES) / BLOCK_SIZE as u64 * BLOCK_SIZE as u64;
            let used = left.min(cap);
            if used > 0 {
                t.push(Target {
                    what: format!("PM WAL {log} extent {i} records"),
                    place: Place::Pm,
                    range: at + EXTENT_HEADER_BYTES..at + EXTENT_HEADER_BYTES + used,
                });
            }
            left -= used;
        }
    }
    t
}

/// A design without a locator of its own: its PM tables as allocated pages
/// (every allocated run outside the PM WAL's extents, up to eight runs),
/// damaged without knowing their layout.
fn pm_pages(b: &Built) -> Vec<Target> {
    let Some(r) = region(b) else {
        return Vec::new();
    };
    let alloc = allocated_pages(&r);
    let mut wal = std::collections::HashSet::new();
    for (first, _) in PmLog::find_chains(r.as_ref(), alloc.iter().map(|p| p * PAGE)) {
        for (at, len) in PmLog::extents(r.as_ref(), first).expect("chain") {
            wal.extend(at / PAGE..(at + len).div_ceil(PAGE));
        }
    }
    let mut runs: Vec<Range<u64>> = Vec::new();
    for p in alloc.into_iter().filter(|p| !wal.contains(p)) {
        match runs.last_mut() {
            Some(run) if run.end == p => run.end = p + 1,
            _ => runs.push(p..p + 1),
        }
    }
    runs.into_iter()
        .take(8)
        .map(|run| Target {
            what: format!("PM pages {}..{} (the design's tables)", run.start, run.end),
            place: Place::Pm,
            range: run.start * PAGE..run.end * PAGE,
        })
        .collect()
}

/// `rangetab`: each buffer's 64-byte header and its chunks (up to the
/// header's `used`; docs/format/pm.md, "RangeTab"). The free space after
/// them is not read by anything.
fn pm_rangetab(b: &Built) -> Vec<Target> {
    let Some(r) = region(b) else {
        return Vec::new();
    };
    let mut buffers: Vec<(u64, u64)> = allocated_pages(&r)
        .into_iter()
        .filter(|&p| r.slice(p * PAGE, 8).expect("slice") == b"RangeTab")
        .map(|p| {
            let header = r.slice(p * PAGE, 64).expect("header");
            (
                p,
                u64::from_le_bytes(header[24..32].try_into().expect("8 bytes")),
            )
        })
        .collect();
    if !full() {
        // A sample, as of the SSTs: the first, the last and two between of
        // the buffers holding chunks, and one empty buffer.
        let (full_bufs, empty): (Vec<_>, Vec<_>) = buffers.iter().partition(|b| b.1 > 0);
        let n = full_bufs.len();
        let mut keep: Vec<(u64, u64)> = [0, n / 3, 2 * n / 3, n.saturating_sub(1)]
            .into_iter()
            .filter_map(|i| full_bufs.get(i).copied())
            .chain(empty.first().copied())
            .collect();
        keep.sort_unstable();
        keep.dedup();
        buffers = keep;
    }
    let mut t = Vec::new();
    for (page, used) in buffers {
        let at = page * PAGE;
        t.push(Target {
            what: format!("RangeTab buffer at page {page}: header"),
            place: Place::Pm,
            range: at..at + 64,
        });
        if used > 0 {
            t.push(Target {
                what: format!("RangeTab buffer at page {page}: chunks"),
                place: Place::Pm,
                range: at + 64..at + 64 + used,
            });
        }
    }
    assert!(
        t.iter().any(|x| x.what.ends_with("chunks")),
        "a flush left chunks in a buffer"
    );
    t
}

/// `triangle` / `matrix`: the rows (metadata runs and value extents) and the
/// container state in the MANIFEST.
fn pm_container(b: &Built) -> Vec<Target> {
    let mut t = Vec::new();
    let Some(r) = region(b) else {
        return t;
    };
    for page in allocated_pages(&r) {
        if r.slice(page * PAGE, 8).expect("slice") != rowtable::MAGIC {
            continue;
        }
        let (expect, run) = rowtable::read_header(r.as_ref(), page).expect("header");
        let row = RowTable::open(Arc::clone(&r), run, expect, &[], false).expect("row");
        let meta_end = run.first * PAGE
            + rowtable::HEADER_BYTES as u64
            + (rowtable::EXTENT_BYTES * row.extents().len()) as u64
            + (rowtable::ELEMENT_BYTES * row.len()) as u64;
        t.push(Target {
            what: format!("RowTable at page {page}: header, extents and elements"),
            place: Place::Pm,
            range: run.first * PAGE..meta_end,
        });
        t.push(Target {
            what: format!("RowTable at page {page}: keys"),
            place: Place::Pm,
            range: meta_end..meta_end + (row.ikey(row.len() - 1).len() as u64).max(1),
        });
        for (i, e) in row.extents().iter().enumerate().take(2) {
            let at = e.run.first * PAGE;
            t.push(Target {
                what: format!("RowTable at page {page}: value extent {i}"),
                place: Place::Pm,
                range: at..at + u64::from(e.used_bytes),
            });
        }
    }
    // The container state: a design record inside a MANIFEST record.
    let manifest =
        b.fs.list(&dir())
            .expect("list")
            .into_iter()
            .find(|n| n.starts_with("MANIFEST-"))
            .expect("manifest");
    let path = dir().join(&manifest);
    let bytes = b.fs.read_all(&path).expect("read");
    let number: u64 = manifest["MANIFEST-".len()..].parse().expect("number");
    let mut reader = Reader::open_file(&b.fs, &path, number).expect("reader");
    while let Some(rec) = reader.next_record().expect("record") {
        let group = VersionEdit::decode_group(&rec, "m", 0).expect("group");
        for e in group {
            for (tag, state) in e.design_records {
                if tag != CONTAINER_TAG {
                    continue;
                }
                if let Some(pos) = bytes.windows(state.len()).position(|w| w == state) {
                    t.push(Target {
                        what: "container state (MANIFEST design record)".into(),
                        place: Place::File(path.clone()),
                        range: pos as u64..(pos + state.len()) as u64,
                    });
                }
            }
        }
    }
    assert!(
        t.iter().any(|x| x.what.starts_with("container state")),
        "a side ran and recorded the container state"
    );
    t
}

fn full() -> bool {
    std::env::var("TIERKV_CAMPAIGN").is_ok_and(|v| v == "full")
}

/// The damage done to a target: a seeded sample, or everything.
fn damages(t: &Target, seed: u64) -> Vec<Damage> {
    let (lo, hi) = (t.range.start, t.range.end);
    if hi <= lo {
        return Vec::new();
    }
    let masks = [0x01u8, 0x80, 0xff, 0x10, 0x04, 0x40, 0x02, 0x20, 0x08, 0x0f];
    let file = matches!(t.place, Place::File(_));
    let pages = |v: &mut Vec<Damage>, all: bool, rng: &mut SmallRng| {
        let (first, last) = (lo / PAGE, (hi - 1) / PAGE);
        if all {
            v.extend((first..=last).map(|p| Damage::ZeroPage { start: p * PAGE }));
        } else {
            for _ in 0..2 {
                v.push(Damage::ZeroPage {
                    start: rng.gen_range(first..=last) * PAGE,
                });
            }
        }
    };
    let mut v = Vec::new();
    let mut rng = SmallRng::seed_from_u64(seed);
    if full() {
        v.extend((lo..hi).map(|at| Damage::Byte {
            at,
            mask: masks[at as usize % masks.len()],
        }));
        if file {
            v.extend((lo..hi).step_by(61).map(|len| Damage::Truncate { len }));
            v.push(Damage::Truncate { len: hi - 1 });
        }
        pages(&mut v, true, &mut rng);
    } else {
        let n = if hi - lo > 4096 { 14 } else { 10 };
        for _ in 0..n {
            v.push(Damage::Byte {
                at: rng.gen_range(lo..hi),
                mask: masks[rng.gen_range(0..masks.len())],
            });
        }
        if file {
            v.push(Damage::Truncate { len: hi - 1 });
            for _ in 0..2 {
                v.push(Damage::Truncate {
                    len: rng.gen_range(lo..hi),
                });
            }
        }
        pages(&mut v, false, &mut rng);
    }
    v
}

/// Opens the damaged copy, reads every key and scans: `Ok(None)` for
/// exactly the right data, `Ok(Some(what))` for a silent difference.
fn check(
    case: &DesignCase,
    fs: &MemFs,
    sim: Option<&Arc<SimRegion>>,
    model: &Model,
    absent: &[Vec<u8>],
) -> Result<Option<String>, Error> {
    let db = Db::open(dir(), options(case, fs, sim))?;
    for (k, v) in model {
        match db.get(k)? {
            Some(g) if &g == v => {}
            Some(_) => return Ok(Some(format!("wrong value for {k:?}"))),
            None => return Ok(Some(format!("key {k:?} missing"))),
        }
    }
    for k in absent {
        if db.get(k)?.is_some() {
            return Ok(Some(format!("deleted key {k:?} is back")));
        }
    }
    let mut it = db.iter(ReadOptions::default())?;
    it.seek_to_first();
    let mut n = 0;
    while it.valid() {
        if model.get(it.key()).map(|v| v.as_slice()) != Some(it.value()) {
            return Ok(Some(format!("scan: unexpected {:?}", it.key())));
        }
        n += 1;
        it.next();
    }
    it.status()?;
    if n != model.len() {
        return Ok(Some(format!("scan: {n} keys of {}", model.len())));
    }
    drop(it);
    db.close()?;
    Ok(None)
}

fn apply(d: Damage, t: &Target, fs: &MemFs, sim: Option<&Arc<SimRegion>>) {
    match (&t.place, d) {
        (Place::File(p), Damage::Byte { at, mask }) => {
            fs.corrupt(p, at as usize, mask).expect("corrupt")
        }
        (Place::File(p), Damage::Truncate { len }) => {
            fs.truncate(p, len as usize).expect("truncate")
        }
        (Place::File(p), Damage::ZeroPage { start }) => {
            let len = fs.file_size(p).expect("size");
            for at in start..(start + PAGE).min(len) {
                let b = fs.read_all(p).expect("read")[at as usize];
                if b != 0 {
                    fs.corrupt(p, at as usize, b).expect("zero");
                }
            }
        }
        (Place::Pm, Damage::Byte { at, mask }) => {
            sim.expect("region").corrupt(at, mask).expect("corrupt")
        }
        (Place::Pm, Damage::ZeroPage { start }) => {
            let s = sim.expect("region");
            let page = s.slice(start, PAGE as usize).expect("slice").to_vec();
            for (i, b) in page.into_iter().enumerate() {
                if b != 0 {
                    s.corrupt(start + i as u64, b).expect("zero");
                }
            }
        }
        (Place::Pm, Damage::Truncate { .. }) => {}
    }
}

/// How one trial ended.
enum Outcome {
    Right,
    Detected,
    Bad(String),
}

fn trial(case: DesignCase, b: &Built, t: &Target, d: Damage) -> Outcome {
    let fs = b.fs.crash(); // an independent copy
    let sim = b.sim.as_ref().map(|s| Arc::new(s.crash()));
    apply(d, t, &fs, sim.as_ref());
    let expect_source = match &t.place {
        Place::File(p) => p.display().to_string(),
        Place::Pm => sim
            .as_ref()
            .map(|s| s.name().to_string())
            .unwrap_or_default(),
    };
    let (model, absent) = (b.model.clone(), b.absent.clone());
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let r = check(&case, &fs, sim.as_ref(), &model, &absent);
        let _ = tx.send(r);
    });
    let limit = Duration::from_secs(if full() { 120 } else { 60 });
    match rx.recv_timeout(limit) {
        Ok(Ok(None)) => {
            let _ = handle.join();
            Outcome::Right
        }
        Ok(Ok(Some(what))) => Outcome::Bad(format!("opened silently with wrong data: {what}")),
        Ok(Err(Error::Corruption { at, what })) => {
            if at.source.contains(&expect_source) {
                Outcome::Detected
            } else {
                Outcome::Bad(format!(
                    "corruption reported in {} at {} ({what}), not in the damaged {expect_source}",
                    at.source, at.offset
                ))
            }
        }
        Ok(Err(e)) => Outcome::Bad(format!("an error that is not corruption: {e}")),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            Outcome::Bad(format!("no answer in {limit:?}: a hang"))
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let why = handle
                .join()
                .err()
                .and_then(|p| {
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                })
                .unwrap_or_default();
            Outcome::Bad(format!("panic: {why}"))
        }
    }
}

fn campaign(case: DesignCase) {
    if std::env::var("TIERKV_CAMPAIGN_DESIGN").is_ok_and(|d| d != case.name) {
        return;
    }
    let b = build(&case);
    let mut targets = files(&b);
    targets.extend(pm_common(&b));
    targets.extend((case.locate)(&b));
    if let Ok(only) = std::env::var("TIERKV_CAMPAIGN_TARGET") {
        targets.retain(|t| t.what.contains(&only));
    }
    if !full() {
        // A sample of the tables: the first, the last and two between.
        let ssts: Vec<usize> = (0..targets.len())
            .filter(|&i| targets[i].what.starts_with("SST"))
            .collect();
        if ssts.len() > 4 {
            let keep = [0, ssts.len() / 3, 2 * ssts.len() / 3, ssts.len() - 1];
            let drop: Vec<usize> = ssts
                .iter()
                .enumerate()
                .filter(|(j, _)| !keep.contains(j))
                .map(|(_, &i)| i)
                .collect();
            let mut i = 0;
            targets.retain(|_| {
                i += 1;
                !drop.contains(&(i - 1))
            });
        }
    }
    let (mut trials, mut right, mut detected) = (0, 0, 0);
    let mut bad: Vec<String> = Vec::new();
    for (ti, t) in targets.iter().enumerate() {
        let (mut t_right, mut t_detected) = (0, 0);
        for d in damages(t, ti as u64 * 7919 + 15) {
            trials += 1;
            match trial(case, &b, t, d) {
                Outcome::Right => t_right += 1,
                Outcome::Detected => t_detected += 1,
                Outcome::Bad(why) => bad.push(format!("{}: {d:?}: {why}", t.what)),
            }
        }
        right += t_right;
        detected += t_detected;
        eprintln!(
            "{}: {}: {t_detected} detected, {t_right} harmless",
            case.name, t.what
        );
    }
    eprintln!(
        "SUMMARY corruption {} ({}): {} structures, {trials} damaged copies: {detected} corruption errors naming the damage, {right} exactly right, {} wrong answers, panics or hangs",
        case.name,
        if full() { "every byte" } else { "sampled" },
        targets.len(),
        bad.len()
    );
    assert!(
        bad.is_empty(),
        "{}: {} of {trials} damaged copies went wrong:\n{}",
        case.name,
        bad.len(),
        bad.join("\n")
    );
    assert!(
        detected > 0 && trials > 50,
        "{}: the campaign did too little",
        case.name
    );
}
