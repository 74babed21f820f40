//! TLSM end to end on the simulated PM tier: each tiering policy and
//! variant does what it says (byte-addressable compactions, evictions to
//! SST, conversion below the threshold, copy-forwards), shared buffers are
//! given back so PM stays bounded under overwrites, reads (gets, forward
//! and reverse scans) match a model, and invalid options are refused
//! naming the option.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use tierkv::design::tlsm::Tlsm;
use tierkv::design::Design;
use tierkv::options::{TlsmPolicy, TlsmVariant};
use tierkv::storage::mem::MemFs;
use tierkv::storage::pm::PmTier;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::{Db, Error, Options, Preset, ReadOptions, WalPlacement};

fn opts(tweak: impl FnOnce(&mut Options)) -> Options {
    let pm = 24usize << 20;
    let mut o = Options {
        design: Preset::Tlsm,
        fs: Arc::new(MemFs::new()),
        pm_region: Some(Arc::new(SimRegion::new(pm))),
        pm_size_bytes: pm as u64,
        memtable_size_bytes: 64 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 256 << 10,
        level_size_multiplier: 4,
        level_count: 5,
        l0_compaction_trigger: 2,
        l0_slowdown_trigger: 6,
        l0_stop_trigger: 10,
        block_size_bytes: 1024,
        wal: Some(WalPlacement::Pm),
        ..Options::default()
    };
    tweak(&mut o);
    o
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Overwrites 400 keys `n` times over with values of mixed sizes, with
/// flushes and range compactions, and checks the contents at the end.
fn churn(o: Options, n: u32) -> (Db, Model) {
    let db = Db::open("/db", o).expect("open");
    let mut model = Model::new();
    for i in 0..n {
        let k = format!("key{:05}", (i * 7919) % 400).into_bytes();
        if i % 13 == 5 {
            db.delete(&k).expect("delete");
            model.remove(&k);
        } else {
            let len = match i % 100 {
                0..=2 => 4000 + (i as usize * 31) % 8000,
                3..=10 => 0,
                _ => 1 + (i as usize % 300),
            };
            let v = vec![i as u8; len];
            db.put(&k, &v).expect("put");
            model.insert(k, v);
        }
        if i % 37 == 0 {
            db.flush().expect("flush");
        }
        if i % 301 == 0 {
            db.compact_range(None, Some(b"key00200")).expect("compact");
        }
    }
    check(&db, &model);
    (db, model)
}

fn check(db: &Db, model: &Model) {
    let got = scan(db, None);
    assert_eq!(got.len(), model.len());
    assert!(got == *model, "contents differ");
    // Backwards, from a seek in the middle.
    let mut it = db.iter(ReadOptions::default()).expect("iter");
    it.seek(b"key00200");
    let mut back = Vec::new();
    while it.valid() && back.len() < 50 {
        back.push(it.key().to_vec());
        it.prev();
    }
    it.status().expect("reverse scan");
    let want: Vec<Vec<u8>> = model
        .range(..=b"key00200".to_vec())
        .rev()
        .take(50)
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(back, want, "reverse scan");
    for (k, v) in model.iter().step_by(7) {
        assert_eq!(db.get(k).expect("get").as_ref(), Some(v));
    }
}

/// Waits until background work has stopped: nothing ran for 150 ms,
/// nothing runs, and the picker would pick nothing. (Without the last
/// check, a loaded machine once saw two more copy-forwards start after
/// "idle": a background thread also wakes on a 200 ms timer, longer than
/// the 150 ms this waits.)
fn idle(db: &Db) {
    let mut last = usize::MAX;
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(150));
        let s = db.stats();
        let now = s.compactions.len() + s.flushes.len();
        let running = [
            "tierkv.num-running-flushes",
            "tierkv.num-running-compactions",
            "tierkv.compaction-pending",
        ]
        .iter()
        .any(|n| db.property(n).as_deref() != Some("0"));
        if now == last && !running {
            return;
        }
        last = now;
    }
}

fn kinds(db: &Db) -> BTreeSet<String> {
    db.stats()
        .compactions
        .iter()
        .map(|c| c.kind.clone())
        .collect()
}

fn stat(db: &Db, name: &str) -> String {
    db.stats()
        .design
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// (tier, level) of every table.
fn tables(db: &Db) -> Vec<(String, usize)> {
    db.property("tierkv.tables")
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[2].to_string(), f[0][1..].parse().expect("level"))
        })
        .collect()
}

#[test]
fn full_variant_links_and_keeps_pm_bounded_under_overwrites() {
    let (db, model) = churn(opts(|_| {}), 20_000);
    assert!(kinds(&db).contains("tlsm-link"), "{:?}", kinds(&db));
    // 400 keys of at most 12 KB live: shared buffers pinned by dead
    // entries are given back as the lists referencing them go.
    let used: u64 = stat(&db, "tlsm.pm_used_bytes").parse().expect("used");
    assert!(
        used < 6 << 20,
        "PM used {used} after 20000 overwrites of 400 keys"
    );
    assert!(tables(&db).iter().all(|(t, _)| t == "pm"));
    // Giving buffers back lost nothing: once background work is idle,
    // every key still reads its newest value.
    idle(&db);
    check(&db, &model);
}

/// Every entry a scan at `snapshot` (None: the latest state) returns.
fn scan(db: &Db, snapshot: Option<tierkv::Snapshot>) -> Model {
    let mut it = db
        .iter(ReadOptions {
            snapshot,
            ..ReadOptions::default()
        })
        .expect("iter");
    it.seek_to_first();
    let mut got = Model::new();
    while it.valid() {
        got.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    it.status().expect("scan");
    got
}

/// A merge between PM levels cut into key-range parts run side by side
/// (`max_subcompactions` 2, the default with two background threads)
/// keeps exactly what one merge keeps (`max_subcompactions` 1): the
/// newest values, the versions a live snapshot reads, tombstones dropped
/// or kept alike — in every variant (link, copy, inline link).
#[test]
fn split_merges_keep_exactly_what_one_merge_keeps() {
    for variant in [TlsmVariant::Full, TlsmVariant::PsBac, TlsmVariant::Ps] {
        let mut results = Vec::new();
        for sub in [1usize, 2] {
            let db = Db::open(
                "/db",
                opts(|o| {
                    o.tlsm.variant = variant;
                    o.max_subcompactions = sub;
                }),
            )
            .expect("open");
            let mut model = Model::new();
            let mut at_snapshot = None;
            for i in 0..6000u32 {
                let k = format!("key{:05}", (i * 7919) % 1500).into_bytes();
                if i % 11 == 3 {
                    db.delete(&k).expect("delete");
                    model.remove(&k);
                } else {
                    let v = vec![i as u8; 1 + (i as usize * 37) % 200];
                    db.put(&k, &v).expect("put");
                    model.insert(k, v);
                }
                if i == 2500 {
                    at_snapshot = Some((db.snapshot(), model.clone()));
                }
                if i % 400 == 399 {
                    db.flush().expect("flush");
                }
            }
            db.compact_range(None, None).expect("compact");
            idle(&db);
            let (snap, snap_model) = at_snapshot.expect("snapshot taken");
            assert_eq!(scan(&db, None), model, "{variant:?} sub={sub}: latest");
            assert_eq!(
                scan(&db, Some(snap)),
                snap_model,
                "{variant:?} sub={sub}: at the snapshot"
            );
            let split: u64 = stat(&db, "tlsm.split_jobs").parse().expect("split_jobs");
            assert_eq!(
                split > 0,
                sub > 1,
                "{variant:?} sub={sub}: {split} split jobs"
            );
            results.push(scan(&db, None));
        }
        assert_eq!(results[0], results[1], "{variant:?}");
    }
}

#[test]
fn reopen_rebuilds_references_and_frees_nothing_live() {
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(24 << 20));
    let o = |fs: &MemFs, sim: &Arc<SimRegion>| {
        opts(|o| {
            o.fs = Arc::new(fs.clone());
            o.pm_region = Some(Arc::clone(sim) as Arc<dyn tierkv::storage::PmRegion>);
        })
    };
    let (db, model) = churn(o(&fs, &sim), 6000);
    db.flush().expect("flush");
    idle(&db);
    let space = stat(&db, "tlsm.data_runs");
    db.close().expect("close");
    let db = Db::open("/db", o(&fs, &sim)).expect("reopen");
    check(&db, &model);
    assert_eq!(stat(&db, "tlsm.data_runs"), space);
    // And keeps working: more churn, reopen again.
    for i in 0..3000u32 {
        db.put(format!("key{:05}", i % 400).as_bytes(), &[7u8; 90])
            .expect("put");
    }
    db.close().expect("close");
    let db = Db::open("/db", o(&fs, &sim)).expect("reopen");
    assert_eq!(db.get(b"key00005").expect("get"), Some(vec![7u8; 90]));
}

#[test]
fn lru_evicts_lists_to_sst() {
    let (db, _) = churn(opts(|o| o.tlsm.lru_capacity_bytes = 1 << 20), 8000);
    let evicted: u64 = stat(&db, "tlsm.evicted_lists").parse().expect("evicted");
    assert!(
        evicted > 0,
        "no eviction: {}",
        db.property("tierkv.stats").unwrap_or_default()
    );
    assert!(kinds(&db).contains("tlsm-evict"));
    assert!(tables(&db).iter().any(|(t, _)| t == "ssd"));
}

#[test]
fn leveled_keeps_skip_lists_at_or_above_the_threshold() {
    let (db, _) = churn(
        opts(|o| {
            o.tlsm.policy = TlsmPolicy::Leveled;
            o.tlsm.level_threshold = 1;
        }),
        8000,
    );
    let t = tables(&db);
    assert!(t.iter().any(|(tier, l)| tier == "ssd" && *l > 1), "{t:?}");
    assert!(t.iter().all(|(tier, l)| tier == "ssd" || *l <= 1), "{t:?}");
    assert!(kinds(&db).contains("tlsm-link"));
}

/// Bytes the copy-forward jobs wrote, exact (`tlsm.copy_forward_bytes` in
/// the stats is rounded to 0.1 MB).
fn copy_forward_bytes(db: &Db) -> u64 {
    db.stats()
        .compactions
        .iter()
        .filter(|c| c.kind == "tlsm-copy-forward")
        .map(|c| c.output_bytes)
        .sum()
}

#[test]
fn none_copies_forward_and_keeps_everything_in_pm() {
    let (db, _) = churn(
        opts(|o| {
            o.tlsm.policy = TlsmPolicy::None;
            o.tlsm.copy_forward_live_ratio = 0.5;
        }),
        8000,
    );
    assert!(kinds(&db).contains("tlsm-copy-forward"), "{:?}", kinds(&db));
    assert!(tables(&db).iter().all(|(t, _)| t == "pm"));
    assert!(copy_forward_bytes(&db) > 0);
}

/// Under PS+BAC a list's entries sit inline in its nodes: a copy-forward
/// that linked to them would pin the very runs it exists to free, and be
/// picked again and again. It copies, and the tier settles.
#[test]
fn ps_bac_copy_forward_copies_and_settles() {
    let (db, model) = churn(
        opts(|o| {
            o.tlsm.variant = TlsmVariant::PsBac;
            o.tlsm.policy = TlsmPolicy::None;
            o.tlsm.copy_forward_live_ratio = 0.5;
        }),
        8000,
    );
    let copy_forwards = |db: &Db| {
        db.stats()
            .compactions
            .iter()
            .filter(|c| c.kind == "tlsm-copy-forward")
            .count()
    };
    assert!(copy_forwards(&db) > 0, "{:?}", kinds(&db));
    assert!(copy_forward_bytes(&db) > 0);
    idle(&db);
    let settled = copy_forwards(&db);
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(
        copy_forwards(&db),
        settled,
        "copy-forwards that free nothing"
    );
    check(&db, &model);
}

#[test]
fn ps_variants_copy_or_link_inline_entries() {
    let (db, _) = churn(opts(|o| o.tlsm.variant = TlsmVariant::Ps), 4000);
    let k = kinds(&db);
    assert!(k.contains("tlsm-copy") && !k.contains("tlsm-link"), "{k:?}");
    let (db, _) = churn(opts(|o| o.tlsm.variant = TlsmVariant::PsBac), 4000);
    assert!(kinds(&db).contains("tlsm-link"));
    assert!(db
        .property("tierkv.stats")
        .unwrap_or_default()
        .contains("tlsm.variant: ps_bac"));
}

#[test]
fn invalid_options_are_refused_naming_the_option() {
    let refused = |tweak: fn(&mut Options), name: &str| match Db::open("/db", opts(tweak)) {
        Err(Error::InvalidOptions(m)) => assert!(m.contains(name), "{m}"),
        Err(e) => panic!("{name}: {e}"),
        Ok(_) => panic!("{name}: accepted"),
    };
    refused(
        |o| {
            o.tlsm.policy = TlsmPolicy::Leveled;
            o.tlsm.level_threshold = 5;
        },
        "tlsm.level_threshold",
    );
    refused(|o| o.tlsm.persist_every = 0, "tlsm.persist_every");
    refused(
        |o| o.tlsm.copy_forward_live_ratio = 1.5,
        "tlsm.copy_forward_live_ratio",
    );
    refused(
        |o| o.tlsm.lru_capacity_bytes = 1 << 40,
        "tlsm.lru_capacity_bytes",
    );
    refused(|o| o.background_threads = 1, "background_threads");
    refused(|o| o.memtable_size_bytes = 16 << 20, "pm_size_bytes");
    refused(
        |o| {
            o.pm_region = None;
            o.pm_dir = None;
        },
        "PM tier",
    );
}

/// A `ps`/`ps_bac` flush into fragmented PM whose first node does not fit
/// after the head: the list's first node run holds only the head and a
/// run marker. The run must stay allocated while the list lives, across
/// reopens too: an open's reconcile frees every page no table, WAL or
/// design names, and the flushes after it reuse what was freed (a
/// regression test: that run was in neither the list's `pm_pages` nor its
/// data runs, so a reopen freed it and the next flush overwrote the head).
#[test]
fn ps_list_whose_first_node_run_holds_only_the_head_survives_reopen() {
    for variant in [TlsmVariant::Ps, TlsmVariant::PsBac] {
        let fs = MemFs::new();
        let sim = Arc::new(SimRegion::new(8 << 20));
        let o = || {
            opts(|o| {
                o.fs = Arc::new(fs.clone());
                o.pm_region = Some(Arc::clone(&sim) as Arc<dyn PmRegion>);
                o.pm_size_bytes = 8 << 20;
                o.wal = Some(WalPlacement::Ssd);
                o.tlsm.variant = variant;
                // No compaction: the list stays as the flush wrote it.
                o.l0_compaction_trigger = 100;
                o.l0_slowdown_trigger = 200;
                o.l0_stop_trigger = 300;
            })
        };
        let tier: Arc<Mutex<Option<Arc<PmTier>>>> = Arc::default();
        let keep = Arc::clone(&tier);
        let factory =
            move |o: &Options, pm: Option<Arc<PmTier>>| -> tierkv::Result<Arc<dyn Design>> {
                let pm = pm.expect("a PM tier");
                *keep.lock().expect("lock") = Some(Arc::clone(&pm));
                Ok(Arc::new(Tlsm::new(o, pm)?))
            };
        let db = Db::open_with_design("/db", o(), &factory).expect("open");
        let pm = tier.lock().expect("lock").clone().expect("the PM tier");
        // Fragment PM: take every free page, give every other one back, so
        // no free run is longer than a page (the pages kept are listed
        // nowhere: the reopen's reconcile frees them).
        let mut held = Vec::new();
        while let Some(r) = pm.allocator().alloc(1).expect("alloc") {
            held.push(r);
        }
        for r in held.iter().step_by(2) {
            pm.free_pages(*r).expect("free");
        }
        // Its node (16 + 8h + the padded inline entry: 3984 ..= 4072
        // bytes, whatever its height h) fits a page, but not after the
        // 112-byte head with room for a 16-byte marker.
        let big = vec![0xb1u8; 3934];
        let mut model = Model::new();
        db.put(b"key00200", &big).expect("put");
        model.insert(b"key00200".to_vec(), big.clone());
        db.put(b"key00201", b"x").expect("put");
        model.insert(b"key00201".to_vec(), b"x".to_vec());
        db.flush().expect("flush");
        check(&db, &model);
        db.close().expect("close");
        drop(pm);
        // Reopen, then flushes that take the pages the reconcile freed
        // (the allocator starts again at the first data page: a small
        // flush takes the first free page).
        let db = Db::open("/db", o()).expect("reopen");
        check(&db, &model);
        for round in 0..4u8 {
            for i in 0..[1, 1, 200, 200][round as usize] {
                let k = format!("key{round}{i:04}").into_bytes();
                db.put(&k, &[round; 100]).expect("put");
                model.insert(k, vec![round; 100]);
            }
            db.flush().expect("flush");
        }
        check(&db, &model);
        db.close().expect("close");
        let db = Db::open("/db", o()).expect("reopen");
        check(&db, &model);
        db.close().expect("close");
    }
}

/// Options for the PM-room tests: a small simulated tier, 256 KiB
/// memtables, the WAL on SSD (PM holds only the lists and jobs).
fn room_opts(fs: &MemFs, sim: &Arc<SimRegion>, tweak: impl FnOnce(&mut Options)) -> Options {
    opts(|o| {
        o.fs = Arc::new(fs.clone());
        o.pm_region = Some(Arc::clone(sim) as Arc<dyn PmRegion>);
        o.pm_size_bytes = sim.len();
        o.wal = Some(WalPlacement::Ssd);
        o.memtable_size_bytes = 256 << 10;
        o.sst_size_bytes = 256 << 10;
        o.l1_size_bytes = 1 << 20;
        tweak(o);
    })
}

/// Opens a TLSM database and hands back its PM tier too.
fn open_keeping_tier(o: Options) -> (Db, Arc<PmTier>) {
    let tier: Arc<Mutex<Option<Arc<PmTier>>>> = Arc::default();
    let keep = Arc::clone(&tier);
    let factory = move |o: &Options, pm: Option<Arc<PmTier>>| -> tierkv::Result<Arc<dyn Design>> {
        let pm = pm.expect("a PM tier");
        *keep.lock().expect("lock") = Some(Arc::clone(&pm));
        Ok(Arc::new(Tlsm::new(o, pm)?))
    };
    let db = Db::open_with_design("/db", o, &factory).expect("open");
    let pm = tier.lock().expect("lock").clone().expect("the PM tier");
    (db, pm)
}

/// A flush into PM whose free pages are enough but scattered: the buffer
/// of a whole memtable used to need one run of its size, so the flush
/// waited 120 s for a run nothing would make, and the database stopped
/// ("PM tier full: no run of N free pages ... (M pages free)", M > N; the
/// `medium` fillrandom at 8b668ca). Random overwrites and deletes through
/// flushes and compactions first, then every other free page held, so no
/// free run is longer than a page; then a memtable's worth of writes.
/// The flush splits its buffer into one-page buffers and the database
/// reads back what the model holds, before and after a reopen.
#[test]
fn flush_into_fragmented_pm_splits_its_buffer() {
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(8 << 20));
    let o = || room_opts(&fs, &sim, |_| {});
    let (db, pm) = open_keeping_tier(o());
    let mut model = Model::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..6000u32 {
        let k = format!("key{:05}", rand() % 1500).into_bytes();
        if i % 9 == 4 {
            db.delete(&k).expect("delete");
            model.remove(&k);
        } else {
            let v = vec![(i % 251) as u8; 200 + (rand() % 900) as usize];
            db.put(&k, &v).expect("put");
            model.insert(k, v);
        }
        if i % 700 == 0 {
            db.flush().expect("flush");
        }
        if i % 2100 == 0 {
            db.compact_range(None, None).expect("compact");
        }
    }
    db.flush().expect("flush");
    idle(&db);
    check(&db, &model);
    // Fragment what is free: hold every other page (listed nowhere: the
    // reopen's reconcile frees them).
    let mut held = Vec::new();
    while let Some(r) = pm.allocator().alloc(1).expect("alloc") {
        held.push(r);
    }
    for r in held.iter().step_by(2) {
        pm.free_pages(*r).expect("free");
    }
    let free = pm.allocator().free_pages();
    // A memtable of 1000-byte values: its buffer alone is over 60 pages,
    // and it fits the free pages about three times over.
    assert!(free * 4096 > 3 * (256 << 10), "{free} pages free");
    let start = std::time::Instant::now();
    for i in 0..230u32 {
        let k = format!("big{i:04}").into_bytes();
        let v = vec![(i % 199) as u8; 1000];
        db.put(&k, &v).expect("put into fragmented PM");
        model.insert(k, v);
    }
    db.flush().expect("flush into fragmented PM");
    assert!(
        start.elapsed() < std::time::Duration::from_secs(60),
        "the flush waited {:?}",
        start.elapsed()
    );
    check(&db, &model);
    db.close().expect("close");
    drop(pm);
    let db = Db::open("/db", o()).expect("reopen");
    check(&db, &model);
    for i in 0..400u32 {
        let k = format!("key{:05}", i * 3).into_bytes();
        db.put(&k, &[3u8; 700]).expect("put");
        model.insert(k, vec![3u8; 700]);
    }
    db.flush().expect("flush");
    idle(&db);
    check(&db, &model);
    db.close().expect("close");
}

/// Under `leveled` (and `lru` below its 95% trigger) nothing used to free
/// PM while every level fit above the threshold: once free PM could not
/// take a flush, writers stopped, the flush waited for pages and the
/// database stopped. Lists are now evicted to SSD when free PM runs below
/// what the flushes need, and a fill four times the tier completes.
#[test]
fn full_pm_evicts_for_flushes_instead_of_stopping() {
    for policy in [TlsmPolicy::Leveled, TlsmPolicy::Lru] {
        let fs = MemFs::new();
        let sim = Arc::new(SimRegion::new(4 << 20));
        let o = room_opts(&fs, &sim, |o| {
            o.tlsm.policy = policy;
            // Every level fits above the threshold: no compaction writes SSTs.
            o.l1_size_bytes = 64 << 20;
        });
        let db = Db::open("/db", o).expect("open");
        let mut model = Model::new();
        for i in 0..16_000u32 {
            let k = format!("key{:05}", (i * 7919) % 16_000).into_bytes();
            let v = vec![(i % 251) as u8; 1000];
            db.put(&k, &v).expect("put");
            model.insert(k, v);
        }
        db.flush().expect("flush");
        assert!(
            kinds(&db).contains("tlsm-evict"),
            "{policy:?}: {:?}",
            kinds(&db)
        );
        check(&db, &model);
        db.close().expect("close");
    }
}
