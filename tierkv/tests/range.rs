//! `Db::range` / `Db::prefix` against a `BTreeMap` model: random bounds of
//! every kind, random interleavings of `next` and `next_back` (the two ends
//! never cross or repeat a key), a snapshot that later writes do not
//! change, in `classic` and `triangle` with data in memtables, L0 and
//! deeper levels; and an error ends the iteration.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::{FileSystem, PmRegion};
use tierkv::{Db, Options, Preset, Range};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn opts(fs: &MemFs, design: Preset) -> Options {
    let mut o = Options {
        design,
        fs: Arc::new(fs.clone()),
        memtable_size_bytes: 64 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 256 << 10,
        block_size_bytes: 1024,
        ..Options::default()
    };
    if design.needs_pm() {
        let r: Arc<dyn PmRegion> = Arc::new(SimRegion::new(16 << 20));
        o.pm_size_bytes = r.len();
        o.pm_region = Some(r);
    }
    o
}

fn key(i: u32) -> Vec<u8> {
    // Keys of several lengths, sharing prefixes: "k1", "k12", "k123", ...
    format!("k{i}").into_bytes()
}

/// A database with the model's contents spread over the tiers.
fn filled(design: Preset, seed: u64) -> (Db, Model) {
    let fs = MemFs::new();
    let db = Db::open("/db", opts(&fs, design)).unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = Model::new();
    for round in 0..4 {
        for _ in 0..1500 {
            let k = key(rng.gen_range(0..3000));
            if rng.gen_bool(0.2) {
                db.delete(&k).unwrap();
                model.remove(&k);
            } else {
                let v = format!("v{}-{}", round, rng.gen::<u32>()).repeat(rng.gen_range(1..8));
                db.put(&k, v.as_bytes()).unwrap();
                model.insert(k, v.into_bytes());
            }
        }
        match round {
            0 => db.compact_range(None, None).unwrap(),
            1 | 2 => db.flush().unwrap(),
            _ => {} // the last round stays in the memtable
        }
    }
    (db, model)
}

fn random_key(rng: &mut SmallRng) -> Vec<u8> {
    match rng.gen_range(0..10) {
        0 => Vec::new(),
        1 => b"k\xff".to_vec(),
        _ => key(rng.gen_range(0..3200)),
    }
}

fn random_bound(rng: &mut SmallRng) -> Bound<Vec<u8>> {
    match rng.gen_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(random_key(rng)),
        _ => Bound::Excluded(random_key(rng)),
    }
}

/// Drains `it` with a random mix of `next` and `next_back`; returns the
/// keys in ascending order.
fn drain(it: Range<'_>, rng: &mut SmallRng) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut it = it;
    let (mut front, mut back) = (Vec::new(), Vec::new());
    let p_front = rng.gen_range(0.0..=1.0);
    loop {
        let step = if rng.gen_bool(p_front) {
            it.next().map(|r| (true, r))
        } else {
            it.next_back().map(|r| (false, r))
        };
        match step {
            None => break,
            Some((true, r)) => front.push(r.unwrap()),
            Some((false, r)) => back.push(r.unwrap()),
        }
    }
    // Fused: both ends stay done.
    assert!(it.next().is_none() && it.next_back().is_none());
    back.reverse();
    front.extend(back);
    front
}

fn check(design: Preset, seed: u64) {
    let (db, model) = filled(design, seed);
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
    for _ in 0..300 {
        let (lo, hi) = (random_bound(&mut rng), random_bound(&mut rng));
        let empty = match (&lo, &hi) {
            (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
                a > b
                    || (a == b
                        && !(matches!(lo, Bound::Included(_)) && matches!(hi, Bound::Included(_))))
            }
            _ => false,
        };
        let want: Vec<(Vec<u8>, Vec<u8>)> = if empty {
            Vec::new()
        } else {
            model
                .range((lo.clone(), hi.clone()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let got = drain(db.range((lo.clone(), hi.clone())), &mut rng);
        assert_eq!(got.len(), want.len(), "{design} {lo:?}..{hi:?}");
        assert!(got == want, "{design} {lo:?}..{hi:?}");
    }
    for _ in 0..100 {
        let p: Vec<u8> = match rng.gen_range(0..4) {
            0 => Vec::new(),
            1 => b"k".to_vec(),
            _ => key(rng.gen_range(0..300)),
        };
        let want: Vec<(Vec<u8>, Vec<u8>)> = model
            .iter()
            .filter(|(k, _)| k.starts_with(&p))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(
            drain(db.prefix(&p), &mut rng),
            want,
            "{design} prefix {p:?}"
        );
    }
    // Rust iterator plumbing: rev, take, count.
    let all: Vec<_> = db.range::<&[u8], _>(..).map(|r| r.unwrap().0).collect();
    assert_eq!(all, model.keys().cloned().collect::<Vec<_>>());
    let rev: Vec<_> = db
        .range::<&[u8], _>(..)
        .rev()
        .map(|r| r.unwrap().0)
        .collect();
    assert!(rev.iter().eq(model.keys().rev()));
    assert_eq!(
        db.prefix(b"k1").take(3).count(),
        3.min(db.prefix(b"k1").count())
    );
    db.close().unwrap();
}

#[test]
fn classic_ranges_match_the_model() {
    check(Preset::Classic, 1);
    check(Preset::Classic, 2);
}

#[test]
fn triangle_ranges_match_the_model() {
    check(Preset::Triangle, 3);
}

#[test]
fn a_range_reads_one_snapshot() {
    let fs = MemFs::new();
    let db = Db::open("/db", opts(&fs, Preset::Classic)).unwrap();
    for i in 0..100 {
        db.put(&key(i), b"old").unwrap();
    }
    let mut r = db.range(key(10)..key(20));
    let snap = db.snapshot();
    let first = r.next().unwrap().unwrap();
    for i in 0..100 {
        db.put(&key(i), b"new").unwrap();
    }
    db.delete(&key(15)).unwrap();
    db.flush().unwrap();
    // Both ends see the state when the range was made, even the end opened
    // after the writes.
    let last = r.next_back().unwrap().unwrap();
    assert_eq!(
        (first.1.as_slice(), last.1.as_slice()),
        (&b"old"[..], &b"old"[..])
    );
    let rest: Vec<_> = r.map(|x| x.unwrap()).collect();
    assert!(rest.iter().all(|(_, v)| v == b"old"));
    assert!(rest.iter().any(|(k, _)| k == &key(15)));
    // `at` reads an older snapshot.
    let at: Vec<_> = db.prefix(b"k1").at(&snap).map(|x| x.unwrap().1).collect();
    assert!(!at.is_empty() && at.iter().all(|v| v == b"old"));
    let now: Vec<_> = db
        .prefix(b"k1")
        .skip_cache()
        .map(|x| x.unwrap().1)
        .collect();
    assert!(now.iter().all(|v| v == b"new"));
    db.close().unwrap();
}

#[test]
fn an_error_ends_the_iteration() {
    let fs = MemFs::new();
    {
        let db = Db::open("/db", opts(&fs, Preset::Classic)).unwrap();
        for i in 0..2000 {
            db.put(&key(i), &[b'x'; 100]).unwrap();
        }
        db.flush().unwrap();
        db.close().unwrap();
    }
    let sst = fs
        .list(std::path::Path::new("/db"))
        .unwrap()
        .into_iter()
        .find(|n| n.ends_with(".sst"))
        .unwrap();
    fs.corrupt(&std::path::Path::new("/db").join(&sst), 3000, 0x40)
        .unwrap();
    let db = Db::open(
        "/db",
        Options {
            block_cache_bytes: 0,
            ..opts(&fs, Preset::Classic)
        },
    )
    .unwrap();
    for reverse in [false, true] {
        let mut r = db.range::<&[u8], _>(..);
        let mut errors = 0;
        let mut after_error = 0;
        loop {
            let step = if reverse { r.next_back() } else { r.next() };
            match step {
                None => break,
                Some(Err(e)) => {
                    assert!(e.is_corruption(), "{e}");
                    errors += 1;
                }
                Some(Ok(_)) if errors > 0 => after_error += 1,
                Some(Ok(_)) => {}
            }
        }
        assert_eq!((errors, after_error), (1, 0), "reverse {reverse}");
        assert!(r.next().is_none());
    }
}
