//! Block builder/iterator against a sorted-vector model with random keys:
//! forward and backward iteration, seeks (hits, misses, before first, after
//! last), and next/prev walks after seeks, for several restart intervals.

use std::cmp::Ordering;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tierkv::iter::InternalIterator;
use tierkv::key::{compare_internal, make_internal_key, Kind};
use tierkv::sst::block::{Block, BlockBuilder, BlockIter};

type Model = Vec<(Vec<u8>, Vec<u8>)>;

fn random_model(rng: &mut SmallRng, n: usize) -> Model {
    let mut v: Model = Vec::with_capacity(n);
    for _ in 0..n {
        // Short alphabet and shared prefixes so prefix compression matters.
        let len = rng.gen_range(0..12);
        let mut uk = b"key/".to_vec();
        for _ in 0..len {
            uk.push(b"abc\xff\x00"[rng.gen_range(0..5)]);
        }
        let kind = if rng.gen_bool(0.2) {
            Kind::Delete
        } else {
            Kind::Put
        };
        let key = make_internal_key(&uk, rng.gen_range(0..1000), kind);
        let vlen = if rng.gen_bool(0.05) {
            rng.gen_range(200..3000)
        } else {
            rng.gen_range(0..20)
        };
        let val: Vec<u8> = (0..vlen).map(|_| rng.gen()).collect();
        v.push((key, val));
    }
    v.sort_by(|a, b| compare_internal(&a.0, &b.0));
    v.dedup_by(|a, b| compare_internal(&a.0, &b.0) == Ordering::Equal);
    v
}

fn build(model: &Model, restart_interval: usize) -> Arc<Block> {
    let mut b = BlockBuilder::new(restart_interval);
    // Build twice to exercise reset().
    b.add(&make_internal_key(b"zzzz", 1, Kind::Put), b"junk");
    b.reset();
    for (k, v) in model {
        b.add(k, v);
    }
    let est = b.current_size_estimate();
    let data = b.finish().to_vec();
    assert_eq!(est, data.len());
    Arc::new(Block::new(data, Arc::from("mem:block"), 4096).unwrap())
}

fn lower_bound(model: &Model, target: &[u8]) -> usize {
    model.partition_point(|(k, _)| compare_internal(k, target) == Ordering::Less)
}

fn assert_at(it: &BlockIter, model: &Model, pos: usize) {
    if pos < model.len() {
        assert!(it.valid(), "expected entry {pos}");
        assert_eq!(it.key(), &model[pos].0[..]);
        assert_eq!(it.value(), &model[pos].1[..]);
    } else {
        assert!(!it.valid(), "expected end");
    }
    it.status().unwrap();
}

fn check(model: &Model, restart_interval: usize, rng: &mut SmallRng) {
    let block = build(model, restart_interval);
    let mut it = block.iter();

    // Forward.
    it.seek_to_first();
    for (k, v) in model {
        assert!(it.valid());
        assert_eq!(it.key(), &k[..]);
        assert_eq!(it.value(), &v[..]);
        it.next();
    }
    assert!(!it.valid());
    it.status().unwrap();

    // Backward.
    it.seek_to_last();
    for (k, v) in model.iter().rev() {
        assert!(it.valid());
        assert_eq!(it.key(), &k[..]);
        assert_eq!(it.value(), &v[..]);
        it.prev();
    }
    assert!(!it.valid());
    it.status().unwrap();

    // Seeks: existing keys, neighbours, extremes; then random walks.
    let mut targets: Vec<Vec<u8>> = vec![
        make_internal_key(b"", u64::MAX >> 8, Kind::Put),
        make_internal_key(b"key/", 5, Kind::Put),
        make_internal_key(b"zzz", 0, Kind::Delete),
        make_internal_key(
            b"key/\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
            0,
            Kind::Delete,
        ),
    ];
    for _ in 0..200 {
        if model.is_empty() {
            break;
        }
        let (k, _) = &model[rng.gen_range(0..model.len())];
        targets.push(k.clone());
        let mut t = k.clone();
        let n = t.len();
        t[n - 7] ^= 1; // perturb the seqno
        targets.push(t);
        let mut t = k[..k.len() - 8].to_vec();
        t.push(b'b');
        targets.push(make_internal_key(&t, 500, Kind::Put));
    }
    for t in &targets {
        it.seek(t);
        let mut pos = lower_bound(model, t);
        assert_at(&it, model, pos);
        for _ in 0..rng.gen_range(0..40) {
            if !it.valid() {
                break;
            }
            if rng.gen_bool(0.5) {
                it.next();
                pos += 1;
            } else {
                it.prev();
                if pos == 0 {
                    assert!(!it.valid());
                    break;
                }
                pos -= 1;
            }
            assert_at(&it, model, pos);
        }
    }
}

#[test]
fn block_roundtrip_against_model() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_b10c);
    for round in 0..30 {
        let n = match round % 5 {
            0 => 0,
            1 => 1,
            2 => rng.gen_range(2..20),
            _ => rng.gen_range(20..600),
        };
        let model = random_model(&mut rng, n);
        for ri in [1, 2, 3, 16, 100] {
            check(&model, ri, &mut rng);
        }
    }
}

#[test]
fn key_buffer_reuse_across_blocks() {
    let mut rng = SmallRng::seed_from_u64(7);
    let m1 = random_model(&mut rng, 50);
    let m2 = random_model(&mut rng, 50);
    let b1 = build(&m1, 4);
    let b2 = build(&m2, 4);
    let mut it = b1.iter();
    it.seek_to_last();
    assert_eq!(it.key(), &m1.last().unwrap().0[..]);
    it.reset(Arc::clone(&b2));
    assert!(!it.valid());
    it.seek_to_first();
    assert_eq!(it.key(), &m2[0].0[..]);
    let buf = it.into_key_buffer();
    let mut it = BlockIter::with_buffer(b1, buf);
    it.seek_to_first();
    assert_eq!(it.key(), &m1[0].0[..]);
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = SmallRng::seed_from_u64(99);
    let model = random_model(&mut rng, 100);
    let good = build(&model, 16).data().to_vec();
    for round in 0..3000 {
        let mut data = if round % 3 == 0 {
            let n = rng.gen_range(0..200);
            (0..n).map(|_| rng.gen()).collect::<Vec<u8>>()
        } else {
            good.clone()
        };
        if !data.is_empty() {
            for _ in 0..rng.gen_range(1..4) {
                let i = rng.gen_range(0..data.len());
                data[i] = rng.gen();
            }
        }
        let Ok(block) = Block::new(data, Arc::from("x"), 0) else {
            continue;
        };
        let block = Arc::new(block);
        let mut it = block.iter();
        it.seek_to_first();
        let mut n = 0;
        while it.valid() && n < 10_000 {
            let _ = (it.key(), it.value());
            it.next();
            n += 1;
        }
        it.seek_to_last();
        let mut n = 0;
        while it.valid() && n < 10_000 {
            it.prev();
            n += 1;
        }
        for (k, _) in model.iter().step_by(7) {
            it.seek(k);
            if it.valid() {
                it.prev();
            }
            if it.valid() {
                it.next();
            }
        }
        if let Err(e) = it.status() {
            assert!(e.is_corruption());
        }
    }
}
