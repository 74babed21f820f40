//! Several writers and readers at once, with snapshots, while flushes and
//! compactions run: batches are atomic, snapshots are stable, and the final
//! state is exactly what the writers wrote.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use tierkv::storage::mem::MemFs;
use tierkv::{Db, Options, ReadOptions, WriteBatch, WriteOptions};

const WRITERS: u32 = 4;
const ROUNDS: u32 = 1500;

fn pair_keys(w: u32, slot: u32) -> (Vec<u8>, Vec<u8>) {
    (
        format!("a-{w}-{slot:03}").into_bytes(),
        format!("b-{w}-{slot:03}").into_bytes(),
    )
}

fn db() -> Db {
    let o = Options {
        fs: Arc::new(MemFs::new()),
        memtable_size_bytes: 64 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 256 << 10,
        l0_compaction_trigger: 2,
        block_size_bytes: 1024,
        background_threads: 3,
        ..Options::default()
    };
    Db::open(PathBuf::from("/db"), o).expect("open")
}

#[test]
fn writers_and_readers_with_snapshots_during_background_work() {
    let db = Arc::new(db());
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let db = Arc::clone(&db);
        writers.push(thread::spawn(move || {
            for round in 0..ROUNDS {
                // Each batch writes the same value to a pair of keys.
                let slot = round % 50;
                let (a, b) = pair_keys(w, slot);
                let v = format!("{w}:{round}:").repeat(20).into_bytes();
                let mut batch = WriteBatch::new();
                batch.put(&a, &v).put(&b, &v);
                db.write(
                    batch,
                    &WriteOptions {
                        sync: round % 100 == 0,
                    },
                )
                .expect("write");
                if round % 7 == 0 {
                    db.delete(format!("c-{w}-{round}").as_bytes())
                        .expect("delete");
                }
            }
        }));
    }
    let mut readers = Vec::new();
    for r in 0..3u32 {
        let db = Arc::clone(&db);
        let stop = Arc::clone(&stop);
        readers.push(thread::spawn(move || {
            let mut checks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let snap = db.snapshot();
                let opts = ReadOptions {
                    snapshot: Some(snap.clone()),
                    ..Default::default()
                };
                // Atomic batches: both keys of a pair agree at a snapshot.
                let w = r % WRITERS;
                for slot in (0..50).step_by(7) {
                    let (a, b) = pair_keys(w, slot);
                    let va = db.get_with(&a, &opts).expect("get a");
                    let vb = db.get_with(&b, &opts).expect("get b");
                    assert_eq!(va, vb, "batch torn at snapshot {}", snap.seqno());
                    // Stable: the same read again at the same snapshot.
                    assert_eq!(db.get_with(&a, &opts).expect("get a again"), va);
                }
                // A scan at the snapshot sees the pairs agree too.
                let mut it = db
                    .iter(ReadOptions {
                        snapshot: Some(snap.clone()),
                        lower_bound: Some(b"a-".to_vec()),
                        upper_bound: Some(b"a-~".to_vec()),
                        ..Default::default()
                    })
                    .expect("iter");
                it.seek_to_first();
                while it.valid() {
                    let b_key = [b"b", &it.key()[1..]].concat();
                    let vb = db.get_with(&b_key, &opts).expect("get pair");
                    assert_eq!(vb.as_deref(), Some(it.value()), "scan/get disagree");
                    it.next();
                }
                it.status().expect("scan");
                checks += 1;
            }
            checks
        }));
    }
    for h in writers {
        h.join().expect("writer");
    }
    stop.store(true, Ordering::Relaxed);
    for h in readers {
        assert!(h.join().expect("reader") > 0);
    }
    // Final state: the last round's value of every pair.
    db.flush().expect("flush");
    for w in 0..WRITERS {
        for slot in 0..50 {
            let last_round = (0..ROUNDS).filter(|r| r % 50 == slot).max().expect("round");
            let v = format!("{w}:{last_round}:").repeat(20).into_bytes();
            let (a, b) = pair_keys(w, slot);
            assert_eq!(db.get(&a).expect("get"), Some(v.clone()));
            assert_eq!(db.get(&b).expect("get"), Some(v));
        }
    }
    let s = db.stats();
    assert!(!s.flushes.is_empty(), "flushes ran");
    assert!(!s.compactions.is_empty(), "compactions ran");
}
