//! The PM container designs (`triangle`, `matrix`) end to end: many rows
//! cycling through the container against a model, hints on and off giving
//! the same answers, the sequential bypass, PM page release, and stats.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tierkv::stats::{StallCause, Tier};
use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::{Db, Options, Preset, ReadOptions, WriteBatch, WriteOptions};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const PM_BYTES: usize = 16 << 20;

fn options(preset: Preset, fs: &MemFs, sim: &Arc<SimRegion>, hints: bool, limit: u64) -> Options {
    Options {
        design: preset,
        fs: Arc::new(fs.clone()),
        pm_region: Some(Arc::clone(sim) as Arc<dyn PmRegion>),
        pm_size_bytes: PM_BYTES as u64,
        memtable_size_bytes: 64 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 2 << 20,
        level_size_multiplier: 4,
        level_count: 5,
        block_size_bytes: 1024,
        pm_hints: hints,
        pm_container_limit_bytes: limit,
        ..Options::default()
    }
}

fn dir() -> PathBuf {
    PathBuf::from("/db")
}

fn key(i: u32) -> Vec<u8> {
    format!("user{i:06}").into_bytes()
}

fn scan(db: &Db, lo: Option<&[u8]>, hi: Option<&[u8]>, reverse: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut it = db
        .iter(ReadOptions {
            lower_bound: lo.map(<[u8]>::to_vec),
            upper_bound: hi.map(<[u8]>::to_vec),
            ..Default::default()
        })
        .expect("iter");
    let mut out = Vec::new();
    if reverse {
        it.seek_to_last();
    } else {
        it.seek_to_first();
    }
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        if reverse {
            it.prev();
        } else {
            it.next();
        }
    }
    it.status().expect("scan status");
    out
}

fn model_scan(
    m: &Model,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
    reverse: bool,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let it = m
        .iter()
        .filter(|(k, _)| {
            lo.is_none_or(|l| k.as_slice() >= l) && hi.is_none_or(|h| k.as_slice() < h)
        })
        .map(|(k, v)| (k.clone(), v.clone()));
    if reverse {
        it.rev().collect()
    } else {
        it.collect()
    }
}

fn check_all(db: &Db, m: &Model, rng: &mut SmallRng, what: &str) {
    for _ in 0..300 {
        let k = key(rng.gen_range(0..3000));
        assert_eq!(
            db.get(&k).expect("get").as_ref(),
            m.get(&k),
            "{what}: get {k:?}"
        );
    }
    assert!(
        scan(db, None, None, false) == model_scan(m, None, None, false),
        "{what}: full scan"
    );
    for _ in 0..10 {
        let a = key(rng.gen_range(0..3000));
        let b = key(rng.gen_range(0..3000));
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let rev = rng.gen_bool(0.5);
        assert!(
            scan(db, Some(&lo), Some(&hi), rev) == model_scan(m, Some(&lo), Some(&hi), rev),
            "{what}: range scan"
        );
    }
}

fn churn(preset: Preset, seed: u64) {
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(PM_BYTES));
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut m = Model::new();
    let db = Db::open(dir(), options(preset, &fs, &sim, true, 256 << 10)).expect("open");
    let snap_at = 4000;
    let mut snap: Option<(tierkv::Snapshot, Model)> = None;
    for i in 0..9000u32 {
        let mut b = WriteBatch::new();
        for _ in 0..rng.gen_range(1..4) {
            let k = key(rng.gen_range(0..3000));
            if rng.gen_bool(0.15) {
                b.delete(&k);
                m.remove(&k);
            } else {
                let v: Vec<u8> = (0..rng.gen_range(10..700)).map(|j| (i + j) as u8).collect();
                b.put(&k, &v);
                m.insert(k, v);
            }
        }
        db.write(b, &WriteOptions::default()).expect("write");
        if i == snap_at {
            snap = Some((db.snapshot(), m.clone()));
        }
        if i % 1500 == 1499 {
            check_all(&db, &m, &mut rng, &format!("{preset} after {i}"));
        }
    }
    // The snapshot still reads its state while sides moved data to L1.
    if let Some((s, sm)) = &snap {
        for k in sm.keys().step_by(7) {
            let got = db
                .get_with(
                    k,
                    &ReadOptions {
                        snapshot: Some(s.clone()),
                        ..Default::default()
                    },
                )
                .expect("snapshot get");
            assert_eq!(got.as_ref(), sm.get(k), "{preset}: snapshot get");
        }
    }
    drop(snap);
    // Released pages come back: once the writers stop, the sides bring the
    // container back under its limit (how far behind they are while the
    // writers run depends on the machine's load, so wait for them).
    let container_bytes = |db: &Db| -> u64 {
        db.stats()
            .levels
            .iter()
            .filter(|l| l.level == 0 && l.tier == Tier::Pm)
            .map(|l| l.bytes)
            .sum()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut l0_pm = container_bytes(&db);
    while l0_pm >= 2 << 20 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        l0_pm = container_bytes(&db);
    }
    assert!(l0_pm < 2 << 20, "{preset}: container holds {l0_pm} bytes");
    let st = db.stats();
    let sides = st
        .compactions
        .iter()
        .filter(|c| c.kind == "right-angle" || c.kind == "column")
        .count();
    eprintln!(
        "{preset}: {sides} sides, {} flushes, L0 {:?}, stalls {}",
        st.flushes.len(),
        st.levels,
        st.stalls.len()
    );
    assert!(sides >= 5, "{preset}: only {sides} side compactions");
    assert!(st.written.flush_pm > 0, "{preset}: nothing flushed to PM");
    assert!(
        st.written.wal_pm > 0 && st.written.wal_ssd == 0,
        "{preset}: WAL not on PM"
    );
    // Sides move a fraction of the container each, never all of L0.
    let l0_inputs: Vec<u64> = st
        .compactions
        .iter()
        .filter(|c| c.kind == "right-angle" || c.kind == "column")
        .filter_map(|c| c.input_bytes.iter().find(|(l, _)| *l == 0).map(|(_, b)| *b))
        .collect();
    assert!(
        l0_inputs.iter().all(|&b| b < 1 << 20),
        "{preset}: {l0_inputs:?}"
    );
    check_all(&db, &m, &mut rng, &format!("{preset} end"));
    db.close().expect("close");

    // Reopen with hints off: the same answers.
    let db = Db::open(dir(), options(preset, &fs, &sim, false, 256 << 10)).expect("reopen");
    check_all(&db, &m, &mut rng, &format!("{preset} without hints"));
    db.close().expect("close");
    let db = Db::open(dir(), options(preset, &fs, &sim, true, 256 << 10)).expect("reopen");
    check_all(&db, &m, &mut rng, &format!("{preset} with hints"));
    db.compact_range(None, None).expect("compact all");
    assert_eq!(
        db.property("tierkv.num-files-at-level0").as_deref(),
        Some("0")
    );
    check_all(&db, &m, &mut rng, &format!("{preset} compacted"));
}

#[test]
fn triangle_churn_matches_the_model() {
    churn(Preset::Triangle, 1);
}

#[test]
fn matrix_churn_matches_the_model() {
    churn(Preset::Matrix, 2);
}

#[test]
fn sequential_loads_bypass_the_container() {
    for preset in [Preset::Triangle, Preset::Matrix] {
        let fs = MemFs::new();
        let sim = Arc::new(SimRegion::new(PM_BYTES));
        let db = Db::open(dir(), options(preset, &fs, &sim, true, 256 << 10)).expect("open");
        let v = vec![7u8; 400];
        for i in 0..3000 {
            db.put(&key(i), &v).expect("put");
        }
        db.flush().expect("flush");
        let st = db.stats();
        assert_eq!(
            st.written.flush_pm, 0,
            "{preset}: a sequential load reached PM"
        );
        assert!(st.written.flush_ssd > 0);
        assert!(st.flushes.iter().all(|f| f.tier == Tier::Ssd));
        assert_eq!(
            db.property("tierkv.num-files-at-level0").as_deref(),
            Some("0")
        );
        for i in (0..3000).step_by(97) {
            assert_eq!(db.get(&key(i)).expect("get"), Some(v.clone()));
        }
        // A random write after that goes to the container.
        db.put(&key(17), b"again").expect("put");
        db.flush().expect("flush");
        assert_eq!(
            db.property("tierkv.num-files-at-level0").as_deref(),
            Some("1")
        );
        assert_eq!(
            db.get(&key(17)).expect("get").as_deref(),
            Some(&b"again"[..])
        );
    }
}

#[test]
fn a_small_pm_tier_stalls_writes_only_when_full() {
    // 3 MiB of PM for 64 KiB memtables and a large container limit: the
    // container fills, writes wait (recorded as PmFull) until sides free
    // pages, and nothing is lost.
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(3 << 20));
    let mut o = options(Preset::Triangle, &fs, &sim, true, 0);
    o.pm_size_bytes = 3 << 20;
    let db = Db::open(dir(), o).expect("open");
    let mut m = Model::new();
    let mut rng = SmallRng::seed_from_u64(5);
    for i in 0..12000u32 {
        let k = key(rng.gen_range(0..5000));
        let v = vec![(i % 251) as u8; 300];
        db.put(&k, &v).expect("put");
        m.insert(k, v);
    }
    let st = db.stats();
    eprintln!(
        "small PM: {} stalls, {:?} total, {} compactions, {} flushes",
        st.stalls.len(),
        st.stall_total(),
        st.compactions.len(),
        st.flushes.len()
    );
    for s in &st.stalls {
        assert!(
            matches!(s.cause, StallCause::PmFull | StallCause::MemtableFull),
            "unexpected stall {s:?}"
        );
    }
    check_all(&db, &m, &mut rng, "small PM");
}

#[test]
fn pm_designs_refuse_a_pm_tier_too_small_for_two_memtables() {
    let fs = MemFs::new();
    let sim = Arc::new(SimRegion::new(1 << 20));
    let mut o = options(Preset::Matrix, &fs, &sim, true, 0);
    o.pm_size_bytes = 1 << 20;
    o.memtable_size_bytes = 1 << 20;
    match Db::open(dir(), o) {
        Err(tierkv::Error::InvalidOptions(m)) => assert!(m.contains("pm_size_bytes"), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened"),
    }
}
