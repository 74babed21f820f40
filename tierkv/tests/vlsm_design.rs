//! vlsm on a real (in-memory) database: the bounded L0 queue, single-SST
//! L0 → L1 compactions, vSSTs in L1 (and in `classic` with `vsst`), the
//! level shape, what writers stall on, and the options.

use std::path::Path;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tierkv::stats::{CompactionRecord, StallCause};
use tierkv::storage::mem::MemFs;
use tierkv::{Db, Error, Options, Preset};

const SST: u64 = 64 << 10;

fn opts(fs: &MemFs, design: Preset) -> Options {
    Options {
        design,
        fs: Arc::new(fs.clone()),
        memtable_size_bytes: SST as usize,
        sst_size_bytes: SST,
        l1_size_bytes: 4 * SST,
        level_size_multiplier: 4,
        vlsm_growth_factor: 4,
        vlsm_phi: 8,
        vlsm_l0_max_ssts: 3,
        block_size_bytes: 1024,
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

/// One table of `tierkv.tables`.
#[derive(Debug)]
struct T {
    level: usize,
    size: u64,
    lo: String,
    hi: String,
}

fn tables(db: &Db) -> Vec<T> {
    db.property("tierkv.tables")
        .expect("tierkv.tables")
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            T {
                level: f[0][1..].parse().expect("level"),
                size: f[3].parse().expect("size"),
                lo: f[4].trim_matches('"').to_string(),
                hi: f[5].trim_matches('"').to_string(),
            }
        })
        .collect()
}

/// Random puts of ~100-byte values over `keys` keys; checks L0 after each
/// batch; returns the model.
fn load(db: &Db, seed: u64, n: usize, keys: u32, l0_max: usize) -> Vec<Option<u8>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = vec![None; keys as usize];
    for i in 0..n {
        let k = rng.gen_range(0..keys);
        let b: u8 = rng.gen();
        db.put(&key(k), &[b; 100]).expect("put");
        model[k as usize] = Some(b);
        if i % 97 == 0 {
            let l0: usize = db
                .property("tierkv.num-files-at-level0")
                .and_then(|s| s.parse().ok())
                .expect("L0 files");
            assert!(
                l0 <= l0_max,
                "L0 holds {l0} SSTs, more than the queue's {l0_max}"
            );
        }
    }
    model
}

/// Bytes a compaction read from L0.
fn l0_input_bytes(c: &CompactionRecord) -> u64 {
    c.input_bytes
        .iter()
        .filter(|(l, _)| *l == 0)
        .map(|(_, b)| *b)
        .sum()
}

fn check(db: &Db, model: &[Option<u8>]) {
    for (k, v) in model.iter().enumerate() {
        let got = db.get(&key(k as u32)).expect("get");
        assert_eq!(got, v.map(|b| vec![b; 100]), "key {k}");
    }
}

#[test]
fn vlsm_queue_single_sst_compactions_and_vssts() {
    let fs = MemFs::new();
    let o = opts(&fs, Preset::Vlsm);
    let db = Db::open(Path::new("/db"), o.clone()).expect("open");
    let model = load(&db, 7, 40_000, 20_000, o.vlsm_l0_max_ssts);
    db.flush().expect("flush");
    check(&db, &model);

    let stats = db.stats();
    // The queue never runs a tiering step: each L0 → L1 compaction takes
    // exactly one L0 SST (at most one memtable's worth of bytes).
    let l0_tables: Vec<u64> = stats.flushes.iter().map(|f| f.output_bytes).collect();
    let biggest_l0 = l0_tables.iter().copied().max().expect("flushes");
    let mut l0_to_l1 = 0;
    for c in &stats.compactions {
        let l0_in = l0_input_bytes(c);
        if l0_in > 0 {
            l0_to_l1 += 1;
            assert_eq!(c.output_level, 1, "{c:?}");
            assert!(
                l0_in <= biggest_l0,
                "an L0 -> L1 compaction took {l0_in} bytes of L0: {c:?}"
            );
        }
    }
    assert!(l0_to_l1 > 20, "only {l0_to_l1} L0 -> L1 compactions");
    assert!(
        stats
            .compactions
            .iter()
            .any(|c| c.output_level == 2 && c.kind == "leveled"),
        "no L1 -> L2 compaction"
    );
    // No L0 slowdown or stop triggers: writers wait only for memtables
    // (the flush held back by a full queue is recorded as l0-stop).
    for s in &stats.stalls {
        assert!(
            matches!(s.cause, StallCause::MemtableFull | StallCause::L0Stop),
            "unexpected stall cause {:?}",
            s.cause
        );
    }

    // L1 holds vSSTs between Sm = SM / f and SM (plus one entry), except
    // the tail of a merge (the last vSST of a compaction can be short).
    let ts = tables(&db);
    let l1: Vec<&T> = ts.iter().filter(|t| t.level == 1).collect();
    let l2: Vec<&T> = ts.iter().filter(|t| t.level == 2).collect();
    assert!(!l1.is_empty() && !l2.is_empty(), "shape: {ts:?}");
    let sm = SST / o.vlsm_growth_factor;
    let small = l1.iter().filter(|t| t.size < sm).count();
    assert!(small <= 3, "{small} L1 tables below Sm: {l1:?}");
    assert!(
        l1.iter().all(|t| t.size <= SST + 2048),
        "L1 table above SM: {l1:?}"
    );
    // L1 stays near its target (f × SM) plus one L0 SST in flight.
    let l1_bytes: u64 = l1.iter().map(|t| t.size).sum();
    assert!(l1_bytes <= 4 * SST + 2 * SST, "L1 holds {l1_bytes} bytes");
    // Good and poor vSSTs, classified from the outside.
    let (mut good, mut poor) = (0, 0);
    for t in &l1 {
        let overlap: u64 = l2
            .iter()
            .filter(|x| !(x.hi < t.lo || x.lo > t.hi))
            .map(|x| x.size)
            .sum();
        if overlap <= o.vlsm_growth_factor * t.size {
            good += 1;
        } else {
            poor += 1;
            assert!(t.size < sm + 2048, "a poor vSST larger than Sm: {t:?}");
        }
    }
    eprintln!(
        "L1: {good} good, {poor} poor vSSTs; {}",
        db.property("tierkv.levels").unwrap_or_default()
    );

    // What the design reports matches the outside view: its level targets
    // (L1 = f × SM, L2 = Φ × L1, L0 by its queue) and its counters.
    let stats = db.stats();
    let t = stats
        .level_targets
        .clone()
        .expect("vlsm reports level targets");
    assert_eq!(t.l0_tables, Some(o.vlsm_l0_max_ssts));
    assert_eq!(&t.bytes[1..3], &[4 * SST, 8 * 4 * SST]);
    let counter = |name: &str| {
        stats
            .design
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.parse::<f64>().expect("a number"))
            .unwrap_or_else(|| panic!("no counter {name}"))
    };
    assert_eq!(counter("vlsm.l1.good_tables"), good as f64);
    assert_eq!(counter("vlsm.l1.tables"), l1.len() as f64);
    let merges: Vec<&CompactionRecord> = stats
        .compactions
        .iter()
        .filter(|c| c.kind == "leveled" && c.output_level == 2)
        .collect();
    assert_eq!(counter("vlsm.l1_l2.merges"), merges.len() as f64);
    let level_in = |l: usize| -> f64 {
        merges
            .iter()
            .flat_map(|c| c.input_bytes.iter())
            .filter(|(x, _)| *x == l)
            .map(|(_, b)| *b as f64)
            .sum()
    };
    assert_eq!(counter("vlsm.l1_l2.l1_bytes"), level_in(1));
    assert_eq!(counter("vlsm.l1_l2.l2_bytes"), level_in(2));
    let cut = counter("vlsm.l0_l1.good_tables") + counter("vlsm.l0_l1.poor_tables");
    assert!(cut > 0.0, "the L0 -> L1 merges cut vSSTs");
    assert!(db
        .property("tierkv.level-targets")
        .is_some_and(|p| p.starts_with("L0: 3 tables\n")));

    // Reopen: same contents.
    db.close().expect("close");
    let db = Db::open(Path::new("/db"), o).expect("reopen");
    check(&db, &model);
}

/// Memtables of 4 SSTs: each flush is cut into range-partitioned L0 SSTs
/// of at most SM, key-disjoint within a flush; each L0 → L1 compaction
/// takes one of them and only the L1 tables under it.
#[test]
fn vlsm_flush_is_cut_into_range_partitioned_l0_ssts() {
    let fs = MemFs::new();
    let o = Options {
        memtable_size_bytes: 4 * SST as usize,
        vlsm_l0_max_ssts: 12,
        ..opts(&fs, Preset::Vlsm)
    };
    let db = Db::open(Path::new("/db"), o.clone()).expect("open");
    // A queue of 12 admits a flush while it holds 11: at most 11 + 4 + 1.
    let model = load(&db, 9, 60_000, 20_000, 16);
    db.flush().expect("flush");
    check(&db, &model);
    let stats = db.stats();
    let mut split = 0;
    for f in &stats.flushes {
        assert!(
            f.output_bytes <= 4 * SST + 8 * 1024,
            "flush wrote {} bytes",
            f.output_bytes
        );
    }
    for t in tables(&db).iter().filter(|t| t.level == 0) {
        assert!(t.size <= SST + SST / 4, "L0 SST above SM: {t:?}");
        split += 1;
    }
    let mut l0_to_l1 = 0;
    let (mut l0_bytes, mut l1_bytes) = (0u64, 0u64);
    for c in &stats.compactions {
        let l0_in = l0_input_bytes(c);
        if l0_in > 0 && c.kind == "l0-l1" {
            l0_to_l1 += 1;
            assert!(
                l0_in <= SST + SST / 4,
                "an L0 -> L1 took {l0_in} bytes: {c:?}"
            );
            l0_bytes += l0_in;
            l1_bytes += c
                .input_bytes
                .iter()
                .filter(|(l, _)| *l == 1)
                .map(|(_, b)| *b)
                .sum::<u64>();
        }
    }
    assert!(l0_to_l1 > 40, "only {l0_to_l1} L0 -> L1 compactions");
    // L1 = f × SM = one memtable: one L0 SST (a quarter of a memtable's
    // key range) meets about a quarter of L1, i.e. about its own size —
    // not the whole of L1 (4×) as one SST per memtable would.
    let ratio = l1_bytes as f64 / l0_bytes as f64;
    eprintln!(
        "L0 -> L1: {l0_to_l1} compactions, L1 bytes per L0 byte {ratio:.2}; {split} L0 SSTs left"
    );
    assert!(ratio < 2.5, "L1 bytes per L0 byte {ratio:.2}");
    db.close().expect("close");
    let db = Db::open(Path::new("/db"), o).expect("reopen");
    check(&db, &model);
}

#[test]
fn vlsm_full_queue_stalls_are_l0_stop() {
    let fs = MemFs::new();
    // Without pacing, which would slow writers before the queue fills.
    let o = Options {
        vlsm_l0_max_ssts: 1,
        // The stop is the backstop the pacing controller (on by default)
        // exists to avoid: this test exercises the backstop.
        write_pacing: false,
        ..opts(&fs, Preset::Vlsm)
    };
    let db = Db::open(Path::new("/db"), o).expect("open");
    let model = load(&db, 3, 30_000, 10_000, 1);
    db.flush().expect("flush");
    check(&db, &model);
    let stats = db.stats();
    assert!(
        stats.stalls.iter().any(|s| s.cause == StallCause::L0Stop),
        "no l0-stop stall with a one-SST queue: {:?}",
        stats.stalls.iter().map(|s| s.cause).collect::<Vec<_>>()
    );
}

#[test]
fn classic_with_vssts_cuts_l1_by_overlap() {
    let sizes = |vsst: bool| -> Vec<u64> {
        let fs = MemFs::new();
        let o = Options {
            vsst: Some(vsst),
            l0_compaction_trigger: 2,
            ..opts(&fs, Preset::Classic)
        };
        let db = Db::open(Path::new("/db"), o).expect("open");
        let model = load(&db, 11, 30_000, 20_000, usize::MAX);
        db.flush().expect("flush");
        check(&db, &model);
        tables(&db)
            .iter()
            .filter(|t| t.level == 1)
            .map(|t| t.size)
            .collect()
    };
    let sm = SST / 4;
    let with = sizes(true);
    let without = sizes(false);
    // Fixed-size SSTs are cut near SM; vSSTs are cut at Sm when poor.
    // Without vSSTs only the last table of each merge is cut short, at
    // whatever its key range left; which of those end near Sm depends on
    // how the background merges fell (two of five did once, under a loaded
    // suite), so that is bounded as a minority, not counted.
    let near_sm = |v: &[u64]| v.iter().filter(|&&s| s >= sm && s < sm + 2048).count();
    assert!(near_sm(&with) > with.len() / 2, "vSST sizes: {with:?}");
    assert!(
        without.iter().any(|&s| s >= SST),
        "fixed sizes: {without:?}"
    );
    assert!(
        2 * near_sm(&without) < without.len(),
        "fixed sizes: {without:?}"
    );
}

#[test]
fn vlsm_options_are_validated_by_name() {
    let fs = MemFs::new();
    for (o, name) in [
        (
            Options {
                vlsm_growth_factor: 1,
                ..opts(&fs, Preset::Vlsm)
            },
            "vlsm_growth_factor",
        ),
        (
            Options {
                vlsm_phi: 1,
                ..opts(&fs, Preset::Vlsm)
            },
            "vlsm_phi",
        ),
        (
            Options {
                vlsm_l0_max_ssts: 0,
                ..opts(&fs, Preset::Vlsm)
            },
            "vlsm_l0_max_ssts",
        ),
    ] {
        match Db::open(Path::new("/db"), o) {
            Err(Error::InvalidOptions(m)) => assert!(m.contains(name), "`{m}` must name `{name}`"),
            Err(e) => panic!("expected InvalidOptions naming {name}, got {e}"),
            Ok(_) => panic!("a bad `{name}` was accepted"),
        }
    }
}

#[test]
fn vlsm_preset_defaults_follow_the_paper() {
    let o = Options::for_design(Preset::Vlsm);
    assert_eq!(o.design, Preset::Vlsm);
    assert_eq!(o.sst_size_bytes, 8 << 20);
    // The same memtables as classic (64 MB, two), flushed as 8 L0 SSTs.
    assert_eq!(o.memtable_size_bytes, 64 << 20);
    assert_eq!(o.memtable_count_max, 2);
    assert_eq!(o.vlsm_l0_max_ssts, 32);
    assert_eq!((o.vlsm_growth_factor, o.vlsm_phi), (8, 32));
    assert!(o.vsst_enabled());
    assert!(o.validate().is_ok());
    let c = Options::for_design(Preset::Classic);
    assert!(!c.vsst_enabled());
    assert_eq!(c.sst_size_bytes, 64 << 20);
}

#[test]
fn vlsm_concurrent_writers_with_several_compaction_threads() {
    let fs = MemFs::new();
    let o = Options {
        background_threads: 4,
        ..opts(&fs, Preset::Vlsm)
    };
    let db = Arc::new(Db::open(Path::new("/db"), o.clone()).expect("open"));
    let threads: Vec<_> = (0..4u32)
        .map(|w| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(u64::from(w));
                for i in 0..8000u32 {
                    // Writer w owns keys ≡ w (mod 4); the last value wins.
                    let k = rng.gen_range(0..5000u32) * 4 + w;
                    db.put(&key(k), &[(i % 251) as u8; 100]).expect("put");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("writer");
    }
    db.flush().expect("flush");
    // Replay each writer's sequence to know the final values.
    let mut model = vec![None; 20_000];
    for w in 0..4u32 {
        let mut rng = SmallRng::seed_from_u64(u64::from(w));
        for i in 0..8000u32 {
            let k = rng.gen_range(0..5000u32) * 4 + w;
            model[k as usize] = Some((i % 251) as u8);
        }
    }
    check(&db, &model);
    let stats = db.stats();
    assert!(stats.compactions.iter().any(|c| c.output_level == 2));
    let db = Arc::try_unwrap(db).ok().expect("sole owner");
    db.close().expect("close");
    let db = Db::open(Path::new("/db"), o).expect("reopen");
    check(&db, &model);
}

/// Every entry a scan at `snapshot` (None: the latest state) returns.
fn scan(db: &Db, snapshot: Option<tierkv::Snapshot>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut it = db
        .iter(tierkv::ReadOptions {
            snapshot,
            ..tierkv::ReadOptions::default()
        })
        .expect("iter");
    it.seek_to_first();
    let mut got = Vec::new();
    while it.valid() {
        got.push((it.key().to_vec(), it.value().to_vec()));
        it.next();
    }
    it.status().expect("scan");
    got
}

fn design_stat(db: &Db, name: &str) -> f64 {
    db.stats()
        .design
        .iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0.0)
}

/// L1 → L2 merges whose groups are cut into key-range parts run side by
/// side (`max_subcompactions` 2) keep exactly what merging each group on
/// one thread keeps (`max_subcompactions` 1): the newest values, the
/// versions a live snapshot reads, tombstones — and the split happens.
#[test]
fn split_l1_l2_merges_keep_exactly_what_one_merge_keeps() {
    let mut results = Vec::new();
    for sub in [1usize, 2] {
        let fs = MemFs::new();
        let db = Db::open(
            Path::new("/db"),
            Options {
                max_subcompactions: sub,
                ..opts(&fs, Preset::Vlsm)
            },
        )
        .expect("open");
        let mut model: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = Default::default();
        let mut at_snapshot = None;
        let mut rng = SmallRng::seed_from_u64(11);
        for i in 0..40_000u32 {
            let k = key(rng.gen_range(0..6000u32));
            if i % 13 == 5 {
                db.delete(&k).expect("delete");
                model.remove(&k);
            } else {
                let v = vec![(i % 251) as u8; 60 + (i as usize * 37) % 90];
                db.put(&k, &v).expect("put");
                model.insert(k, v);
            }
            if i == 20_000 {
                at_snapshot = Some((db.snapshot(), model.clone()));
            }
        }
        db.flush().expect("flush");
        db.compact_range(None, None).expect("compact");
        let (snap, snap_model) = at_snapshot.expect("snapshot taken");
        let want: Vec<_> = model.into_iter().collect();
        assert_eq!(scan(&db, None), want, "sub={sub}: latest");
        let want_snap: Vec<_> = snap_model.into_iter().collect();
        assert_eq!(
            scan(&db, Some(snap)),
            want_snap,
            "sub={sub}: at the snapshot"
        );
        let merges = design_stat(&db, "vlsm.l1_l2.merges");
        let split = design_stat(&db, "vlsm.l1_l2.split_groups");
        assert!(merges > 0.0, "sub={sub}: no L1 → L2 merge");
        assert_eq!(
            split > 0.0,
            sub > 1,
            "sub={sub}: {split} split groups of {merges} merges"
        );
        results.push(scan(&db, None));
    }
    assert_eq!(results[0], results[1]);
}
