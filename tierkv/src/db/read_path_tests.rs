//! What a read may not do (issue "Reads that never wait behind background
//! work"): free a flushed memtable, or open a table a background job made.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::storage::fault::{Fault, FaultFs, FaultRule, Op};
use crate::storage::mem::MemFs;
use crate::{Db, Options};

fn filled(dir: &std::path::Path) -> Db {
    let db = Db::open(dir, Options::default()).unwrap_or_else(|e| panic!("open: {e}"));
    for i in 0..2000u32 {
        db.put(format!("key{i:06}").as_bytes(), &[7u8; 100])
            .unwrap_or_else(|e| panic!("put: {e}"));
    }
    db
}

/// A reader in flight while a flush installs the next super version ends
/// holding the only reference to the flushed memtable but the retired
/// list's: dropping its super version frees nothing; the background thread
/// frees the memtable afterwards.
#[test]
fn a_reader_never_frees_a_flushed_memtable() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let db = filled(dir.path());
    // What `get_with` holds while it reads.
    let in_flight = db.inner.super_version();
    let mem = Arc::downgrade(&in_flight.regions[0].mem);
    db.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    {
        // Keep the reaper out while the reader lets go.
        let _reaper_out = db.inner.retired_super_versions.lock();
        drop(in_flight);
        assert!(
            mem.upgrade().is_some(),
            "the reader freed the flushed memtable"
        );
    }
    let t0 = Instant::now();
    while mem.upgrade().is_some() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no background thread freed the flushed memtable"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    db.close().unwrap_or_else(|e| panic!("close: {e}"));
}

/// The table a flush makes is open (footer, index and filter read and
/// verified) before any reader can see it.
#[test]
fn a_flushed_table_is_open_before_readers_see_it() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let db = filled(dir.path());
    db.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    let sv = db.inner.super_version();
    let tables: Vec<_> = sv.regions[0].version.levels.iter().flatten().collect();
    assert!(!tables.is_empty(), "the flush made no table");
    for t in tables {
        assert!(t.is_open(), "table {} left for a reader to open", t.meta.id);
    }
    drop(sv);
    db.close().unwrap_or_else(|e| panic!("close: {e}"));
}

/// `nvcache`'s flushed table is open and its DRAM search index built
/// before readers see it (until 2026-11-28 the first lookup built the
/// index: a first reader waited 17 ms for a 64 MiB table in a traced
/// `medium` YCSB-C run).
#[test]
fn an_nvcache_flush_leaves_its_table_open_and_indexed() {
    use crate::design::nvcache::{NvCache, TableCache};
    use crate::design::{Design, DesignFactory};
    use crate::options::Preset;
    use crate::storage::sim::SimRegion;
    const PM: usize = 8 << 20;
    let cache: Arc<parking_lot::Mutex<Option<Arc<TableCache>>>> = Arc::default();
    let keep = Arc::clone(&cache);
    let factory: Box<DesignFactory> = Box::new(move |o, pm| {
        let pm = pm.ok_or_else(|| crate::Error::InvalidOptions("no PM tier".into()))?;
        let d = NvCache::new(o, pm)?;
        *keep.lock() = Some(Arc::clone(d.tables()));
        Ok(Arc::new(d) as Arc<dyn Design>)
    });
    let opts = Options {
        design: Preset::NvCache,
        fs: Arc::new(MemFs::new()),
        pm_region: Some(Arc::new(SimRegion::new(PM))),
        pm_size_bytes: PM as u64,
        memtable_size_bytes: 256 << 10,
        ..Options::default()
    };
    let db = Db::open_with_design("/db", opts, &*factory).unwrap_or_else(|e| panic!("open: {e}"));
    for i in 0..500u32 {
        db.put(format!("key{i:06}").as_bytes(), &[7u8; 100])
            .unwrap_or_else(|e| panic!("put: {e}"));
    }
    db.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    let cache = cache.lock().clone().unwrap_or_else(|| panic!("no design"));
    let sv = db.inner.super_version();
    let l0 = &sv.regions[0].version.levels[0];
    assert!(!l0.is_empty(), "the flush made no table");
    for t in l0 {
        assert!(t.is_open(), "table {} left for a reader to open", t.meta.id);
        let nv = cache.open(&t.meta).unwrap_or_else(|e| panic!("open: {e}"));
        assert!(
            nv.is_indexed(),
            "table {} left for a reader to index",
            t.meta.id
        );
    }
    drop(sv);
    // What the indexes cost is reported: 8 bytes an entry and the filter.
    let stats = db.property("tierkv.design-stats").unwrap_or_default();
    let bytes: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("nvcache.dram_index_bytes: "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no nvcache.dram_index_bytes in {stats}"));
    assert!(bytes >= 8 * 500, "{bytes} bytes for 500 entries");
    db.close().unwrap_or_else(|e| panic!("close: {e}"));
}

/// RocksDB's four background figures read 0 once background work is done
/// (what the bench's `--quiesce` waits for).
#[test]
fn background_figures_settle_to_zero() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let db = filled(dir.path());
    db.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    let names = [
        "tierkv.num-running-flushes",
        "tierkv.num-running-compactions",
        "tierkv.mem-table-flush-pending",
        "tierkv.compaction-pending",
    ];
    let t0 = Instant::now();
    while !names.iter().all(|n| db.property(n).as_deref() == Some("0")) {
        assert!(t0.elapsed() < Duration::from_secs(20), "never quiesced");
        std::thread::sleep(Duration::from_millis(10));
    }
    db.close().unwrap_or_else(|e| panic!("close: {e}"));
}

/// Slow foreground reads lower the limit on compaction's SSD writes; with
/// `background_io_autotune` off there is none.
#[test]
fn slow_foreground_reads_limit_compaction_writes() {
    for autotune in [true, false] {
        // Every read takes 2 ms: every foreground read is slow.
        let fs = FaultFs::new(Arc::new(MemFs::new()));
        fs.add_rule(
            FaultRule::new(Op::Read)
                .always()
                .fault(Fault::Delay(Duration::from_millis(2))),
        );
        let opts = Options {
            fs: Arc::new(fs),
            block_cache_bytes: 0,
            background_io_autotune: autotune,
            ..Options::default()
        };
        let dir = Path::new("/db");
        let db = Db::open(dir, opts).unwrap_or_else(|e| panic!("open: {e}"));
        for i in 0..2000u32 {
            db.put(format!("key{i:06}").as_bytes(), &[7u8; 100])
                .unwrap_or_else(|e| panic!("put: {e}"));
        }
        db.flush().unwrap_or_else(|e| panic!("flush: {e}"));
        // Over a window of slow foreground reads...
        let t0 = Instant::now();
        let mut i = 0u32;
        while t0.elapsed() < Duration::from_millis(250) {
            db.get(format!("key{:06}", i % 2000).as_bytes())
                .unwrap_or_else(|e| panic!("get: {e}"));
            i += 1;
        }
        // ...compaction writes into L1 are admitted under a limit.
        db.compact_range(None, None)
            .unwrap_or_else(|e| panic!("compact: {e}"));
        let limit = db
            .property("tierkv.background-write-limit")
            .unwrap_or_default();
        if autotune {
            assert!(
                !limit.contains("lowered in 0 windows"),
                "slow reads did not lower the limit: {limit}"
            );
        } else {
            assert_eq!(limit, "off");
        }
        db.close().unwrap_or_else(|e| panic!("close: {e}"));
    }
}
