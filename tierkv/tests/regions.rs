//! Regions (`Options::regions`): routing, option checks, layout checks at
//! reopen, batches spanning regions that stay atomic across crashes, WAL
//! retention with idle regions, scans and stats over regions.

use std::path::Path;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tierkv::db::region::Router;
use tierkv::storage::mem::MemFs;
use tierkv::storage::FileSystem;
use tierkv::{Db, Error, Options, Preset, ReadOptions, WriteBatch, WriteOptions};

fn options(fs: &MemFs, design: Preset, regions: usize, boundaries: &[&str]) -> Options {
    Options {
        design,
        fs: Arc::new(fs.clone()),
        memtable_size_bytes: 64 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 256 << 10,
        level_size_multiplier: 4,
        level_count: 5,
        l0_compaction_trigger: 2,
        block_size_bytes: 1024,
        vlsm_growth_factor: 2,
        vlsm_phi: 2,
        vlsm_l0_max_ssts: 3,
        regions,
        region_boundaries: boundaries.iter().map(|b| b.as_bytes().to_vec()).collect(),
        ..Options::default()
    }
}

#[test]
fn routing_golden() {
    // Range routing: region r holds [b[r-1], b[r]).
    let mut o = Options {
        regions: 3,
        region_boundaries: vec![b"g".to_vec(), b"p".to_vec()],
        ..Options::default()
    };
    let r = Router::new(&o);
    let got: Vec<usize> = ["", "apple", "g", "kiwi", "p", "zebra"]
        .iter()
        .map(|k| r.route(k.as_bytes()))
        .collect();
    assert_eq!(got, [0, 0, 1, 1, 2, 2]);
    // Hash routing: fixed forever (a database reopens with the same routing).
    o.region_boundaries.clear();
    o.regions = 4;
    let r4 = Router::new(&o);
    o.regions = 256;
    let r256 = Router::new(&o);
    let keys = ["", "a", "key00000", "key00001", "key00002", "user1234567"];
    let got4: Vec<usize> = keys.iter().map(|k| r4.route(k.as_bytes())).collect();
    let got256: Vec<usize> = keys.iter().map(|k| r256.route(k.as_bytes())).collect();
    assert_eq!(got4, GOLDEN_4);
    assert_eq!(got256, GOLDEN_256);
    o.regions = 1;
    assert_eq!(Router::new(&o).route(b"anything"), 0);
}
const GOLDEN_4: [usize; 6] = [2, 1, 2, 0, 2, 0];
const GOLDEN_256: [usize; 6] = [129, 105, 171, 36, 162, 11];

fn expect_invalid(o: Options, needle: &str) {
    let fs = MemFs::new();
    let o = Options {
        fs: Arc::new(fs),
        ..o
    };
    match Db::open("/db", o) {
        Err(Error::InvalidOptions(m)) => assert!(m.contains(needle), "{m} should name {needle}"),
        Err(e) => panic!("expected InvalidOptions naming {needle}, got {e}"),
        Ok(_) => panic!("expected InvalidOptions naming {needle}"),
    }
}

#[test]
fn bad_region_options_are_refused() {
    let b = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
    for n in [0, 257] {
        expect_invalid(
            Options {
                regions: n,
                ..Options::default()
            },
            "`regions`",
        );
    }
    expect_invalid(
        Options {
            regions: 3,
            region_boundaries: b(&["m"]),
            ..Options::default()
        },
        "`region_boundaries`",
    );
    expect_invalid(
        Options {
            regions: 3,
            region_boundaries: b(&["m", "c"]),
            ..Options::default()
        },
        "`region_boundaries`",
    );
    expect_invalid(
        Options {
            regions: 3,
            region_boundaries: b(&["m", "m"]),
            ..Options::default()
        },
        "`region_boundaries`",
    );
    expect_invalid(
        Options {
            regions: 1,
            region_boundaries: b(&["m"]),
            ..Options::default()
        },
        "`region_boundaries`",
    );
}

#[test]
fn reopening_with_another_layout_is_refused() {
    let fs = MemFs::new();
    let db = Db::open("/db", options(&fs, Preset::Classic, 4, &["g", "o", "w"])).unwrap();
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    for (n, b) in [
        (1, &[][..]),
        (4, &[][..]),
        (4, &["g", "o", "x"][..]),
        (3, &["g", "o"][..]),
    ] {
        match Db::open("/db", options(&fs, Preset::Classic, n, b)) {
            Err(Error::InvalidOptions(m)) => assert!(m.contains("`regions`"), "{m}"),
            Err(e) => panic!("unexpected {e}"),
            Ok(_) => panic!("opened with {n} regions {b:?}"),
        }
    }
    let db = Db::open("/db", options(&fs, Preset::Classic, 4, &["g", "o", "w"])).unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    db.close().unwrap();
    // A database without regions does not open with some.
    let fs = MemFs::new();
    Db::open("/db", options(&fs, Preset::Classic, 1, &[]))
        .unwrap()
        .close()
        .unwrap();
    assert!(matches!(
        Db::open("/db", options(&fs, Preset::Classic, 2, &[])),
        Err(Error::InvalidOptions(_))
    ));
}

/// Batch `i` writes one key into each of the four range regions, with
/// values of very different sizes so the regions' memtables switch at
/// different times (the biggest region flushes often, the smallest rarely,
/// and holds old WALs back).
/// Key-value pairs.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn batch(i: u64) -> (WriteBatch, Pairs) {
    let mut b = WriteBatch::new();
    let mut kv = Vec::new();
    for (prefix, len) in [("a", 900usize), ("h", 120), ("q", 30), ("x", 4)] {
        let k = format!("{prefix}{i:08}").into_bytes();
        let v = format!("{i}-").repeat(len / 4 + 1).into_bytes();
        b.put(&k, &v);
        kv.push((k, v));
    }
    (b, kv)
}

fn check_atomic_prefix(db: &Db, written: u64, durable: u64) -> u64 {
    let mut present = 0;
    let mut gap = false;
    for i in 0..written {
        let (_, kv) = batch(i);
        let found: Vec<bool> = kv
            .iter()
            .map(|(k, v)| match db.get(k).unwrap() {
                Some(got) => {
                    assert_eq!(&got, v, "batch {i}: wrong value");
                    true
                }
                None => false,
            })
            .collect();
        let n = found.iter().filter(|&&f| f).count();
        assert!(
            n == 0 || n == kv.len(),
            "batch {i} is torn across regions: {found:?}"
        );
        if n == 0 {
            gap = true;
        } else {
            assert!(!gap, "batch {i} survived but an earlier one did not");
            present = i + 1;
        }
    }
    assert!(
        present >= durable,
        "lost synced batches: {present} < {durable}"
    );
    present
}

fn crash_cycles(design: Preset, boundaries: &[&str], seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut fs = MemFs::new();
    let mut next = 0u64;
    let mut durable = 0u64;
    for cycle in 0..6 {
        let db = Db::open("/db", options(&fs, design, 4, boundaries)).unwrap();
        next = check_atomic_prefix(&db, next, durable);
        durable = next;
        for _ in 0..rng.gen_range(100..700) {
            let sync = rng.gen_bool(0.1);
            db.write(batch(next).0, &WriteOptions { sync }).unwrap();
            next += 1;
            if sync {
                durable = next;
            }
            if rng.gen_bool(0.01) {
                db.flush().unwrap();
                durable = next;
            }
        }
        if cycle % 3 == 2 {
            db.close().unwrap();
            durable = next;
        } else {
            // Crash with the background threads possibly mid-flush or
            // mid-compaction: only what was synced survives.
            let crashed = fs.crash();
            drop(db);
            fs = crashed;
        }
    }
    let db = Db::open("/db", options(&fs, design, 4, boundaries)).unwrap();
    check_atomic_prefix(&db, next, durable);
}

#[test]
fn batches_spanning_regions_are_atomic_across_crashes_classic() {
    crash_cycles(Preset::Classic, &["g", "o", "w"], 1);
}

#[test]
fn batches_spanning_regions_are_atomic_across_crashes_vlsm() {
    crash_cycles(Preset::Vlsm, &["g", "o", "w"], 2);
}

#[test]
fn batches_spanning_hash_regions_are_atomic_across_crashes() {
    crash_cycles(Preset::Classic, &[], 3);
}

fn wal_files(fs: &MemFs) -> usize {
    fs.list(Path::new("/db"))
        .unwrap()
        .iter()
        .filter(|n| n.ends_with(".log"))
        .count()
}

#[test]
fn idle_regions_do_not_hold_wals_back() {
    let fs = MemFs::new();
    let db = Db::open("/db", options(&fs, Preset::Classic, 4, &["g", "o", "w"])).unwrap();
    // One key in an otherwise idle region, then only writes to region 0.
    db.put(b"zz", b"idle").unwrap();
    db.flush().unwrap();
    let v = vec![7u8; 1000];
    let mut most = 0;
    for i in 0..4000u32 {
        db.put(format!("a{i:06}").as_bytes(), &v).unwrap();
        most = most.max(wal_files(&fs));
    }
    assert!(most <= 3, "{most} WAL files alive at once");
    let stats = db.stats();
    assert_eq!(stats.regions.len(), 4);
    let tables = |r: usize| stats.regions[r].iter().map(|l| l.tables).sum::<usize>();
    assert!(
        tables(0) > 2 && tables(3) >= 1 && tables(1) == 0,
        "{:?}",
        stats.regions
    );
    let total: usize = stats.levels.iter().map(|l| l.tables).sum();
    assert_eq!(total, (0..4).map(tables).sum::<usize>());
    assert!(db.property("tierkv.regions").unwrap().lines().count() == 4);
    assert!(stats.to_table().contains("R3:"), "{}", stats.to_table());
    db.close().unwrap();
    let db = Db::open("/db", options(&fs, Preset::Classic, 4, &["g", "o", "w"])).unwrap();
    assert_eq!(db.get(b"zz").unwrap().as_deref(), Some(&b"idle"[..]));
    assert_eq!(db.get(b"a003999").unwrap().as_deref(), Some(&v[..]));
}

#[test]
fn scans_merge_regions_in_key_order_with_bounds_and_snapshots() {
    for boundaries in [&["c", "f", "m"][..], &[][..]] {
        let fs = MemFs::new();
        let db = Db::open("/db", options(&fs, Preset::Vlsm, 4, boundaries)).unwrap();
        let keys: Vec<String> = (b'a'..=b'z')
            .map(|c| format!("{}{}", c as char, c as char))
            .collect();
        for k in &keys {
            db.put(k.as_bytes(), b"1").unwrap();
        }
        db.flush().unwrap();
        let snap = db.snapshot();
        for k in &keys {
            db.put(k.as_bytes(), b"2").unwrap();
        }
        let scan = |opts: ReadOptions, reverse: bool| -> Vec<(String, String)> {
            let mut it = db.iter(opts).unwrap();
            let mut out = Vec::new();
            if reverse {
                it.seek_to_last();
            } else {
                it.seek_to_first();
            }
            while it.valid() {
                out.push((
                    String::from_utf8(it.key().to_vec()).unwrap(),
                    String::from_utf8(it.value().to_vec()).unwrap(),
                ));
                if reverse {
                    it.prev();
                } else {
                    it.next();
                }
            }
            it.status().unwrap();
            out
        };
        let all = scan(ReadOptions::default(), false);
        assert_eq!(all.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(), keys);
        assert!(all.iter().all(|(_, v)| v == "2"));
        let old = scan(
            ReadOptions {
                snapshot: Some(snap),
                ..Default::default()
            },
            true,
        );
        assert_eq!(old.len(), 26);
        assert!(old.iter().all(|(_, v)| v == "1"));
        assert_eq!(old[0].0, "zz");
        let bounded = scan(
            ReadOptions {
                lower_bound: Some(b"dd".to_vec()),
                upper_bound: Some(b"gg".to_vec()),
                ..Default::default()
            },
            false,
        );
        assert_eq!(
            bounded.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            ["dd", "ee", "ff"]
        );
        db.compact_range(None, None).unwrap();
        assert_eq!(scan(ReadOptions::default(), true).len(), 26);
    }
}
