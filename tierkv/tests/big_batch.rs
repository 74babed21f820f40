//! A write batch larger than a memtable, in every design with a PM tier:
//! either it is refused with a clear error naming the option, or it is
//! written and flushed — never a flush left waiting for PM that nothing
//! can free (which stalled every write and then failed the database).
//! Memtables also switch before a batch that would grow them past their
//! size, so a design never has to flush more than it was sized for.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::{Db, Error, Options, Preset, WriteBatch, WriteOptions};

const PM: usize = 64 << 20;
const MEM: usize = 12 << 20;

fn options(design: Preset) -> Options {
    Options {
        design,
        fs: Arc::new(MemFs::new()),
        pm_region: Some(Arc::new(SimRegion::new(PM)) as Arc<dyn PmRegion>),
        pm_size_bytes: PM as u64,
        memtable_size_bytes: MEM,
        l1_size_bytes: 256 << 20,
        ..Options::default()
    }
}

fn batch(prefix: &str, mb: usize) -> WriteBatch {
    let mut b = WriteBatch::new();
    for i in 0..(mb * 10) as u32 {
        b.put(
            format!("{prefix}{i:08}").as_bytes(),
            &vec![i as u8; 100 << 10],
        );
    }
    b
}

/// Runs `f` on a thread; fails the test if it takes longer than a minute
/// (a flush waiting for PM gives up only after two).
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: still waiting after 60 s"))
}

fn check(design: Preset) {
    let db = Arc::new(Db::open("/db", options(design)).expect("open"));
    // Keys on both sides of the big batches, in L1 and in L0, so that no
    // flush can go straight to L1.
    for i in 0..4000u32 {
        db.put(format!("k{:08}", i * 97).as_bytes(), &[1u8; 1000])
            .expect("put");
    }
    db.flush().expect("flush");
    db.compact_range(None, None).expect("compact");
    for i in 0..4000u32 {
        db.put(format!("k{:08}", i * 89).as_bytes(), &[2u8; 1000])
            .expect("put");
    }
    // Just under a memtable, twice: the second one goes to a fresh
    // memtable instead of doubling the first.
    for round in 0..2 {
        let d = Arc::clone(&db);
        bounded(&format!("{design}: 11 MiB batch {round}"), move || {
            d.write(
                batch(&format!("k{round}"), 11),
                &WriteOptions { sync: true },
            )
        })
        .unwrap_or_else(|e| panic!("{design}: a batch under the memtable size: {e}"));
    }
    // Larger than a memtable: refused, naming the option, or taken whole.
    let d = Arc::clone(&db);
    match bounded(&format!("{design}: 40 MiB batch"), move || {
        d.write(batch("k9", 40), &WriteOptions { sync: true })
    }) {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains("memtable_size_bytes"), "{design}: {m}")
        }
        Err(e) => panic!("{design}: a big batch failed with {e}"),
        Ok(()) => {}
    }
    let d = Arc::clone(&db);
    bounded(&format!("{design}: flush"), move || d.flush())
        .unwrap_or_else(|e| panic!("{design}: flush after big batches: {e}"));
    // Still writable and readable.
    db.put(b"after", b"ok").expect("put after");
    assert_eq!(db.get(b"after").expect("get").as_deref(), Some(&b"ok"[..]));
    assert_eq!(
        db.get(b"k100000003").expect("get").map(|v| v.len()),
        Some(100 << 10)
    );
}

#[test]
fn triangle() {
    check(Preset::Triangle);
}

#[test]
fn matrix() {
    check(Preset::Matrix);
}

#[test]
fn rangetab() {
    check(Preset::RangeTab);
}

#[test]
fn nvcache() {
    check(Preset::NvCache);
}

#[test]
fn tlsm() {
    check(Preset::Tlsm);
}
