//! NV-Cache's contracts beyond the model test: options refused naming the
//! option, the write path's persists per group, bytes relinked reported
//! apart from bytes copied, recovery that adopts the log, snapshots kept
//! by list compaction, the cache occupancy report.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::{
    Db, Error, NvAppend, NvRelink, Options, Preset, ReadOptions, Result, WalPlacement, WriteBatch,
    WriteOptions,
};

const PM_BYTES: usize = 16 << 20;

/// The simulated region, counting persists.
struct Counting {
    inner: SimRegion,
    persists: AtomicU64,
}

impl PmRegion for Counting {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.inner.write(offset, data)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read(offset, buf)
    }
    fn slice(&self, offset: u64, len: usize) -> Result<&[u8]> {
        self.inner.slice(offset, len)
    }
    fn persist(&self, offset: u64, len: usize) -> Result<()> {
        self.persists.fetch_add(1, Ordering::SeqCst);
        self.inner.persist(offset, len)
    }
    fn fence(&self) {
        self.inner.fence()
    }
    fn persistence(&self) -> tierkv::storage::Persistence {
        self.inner.persistence()
    }
    fn store_u64(&self, offset: u64, value: u64) -> Result<()> {
        self.inner.store_u64(offset, value)
    }
    fn load_u64(&self, offset: u64) -> Result<u64> {
        self.inner.load_u64(offset)
    }
}

fn options(fs: &MemFs, region: Arc<dyn PmRegion>) -> Options {
    Options {
        design: Preset::NvCache,
        fs: Arc::new(fs.clone()),
        pm_region: Some(region),
        pm_size_bytes: PM_BYTES as u64,
        memtable_size_bytes: 256 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 256 << 10,
        level_size_multiplier: 4,
        level_count: 5,
        ..Options::default()
    }
}

fn sim() -> Arc<SimRegion> {
    Arc::new(SimRegion::new(PM_BYTES))
}

fn refused(o: Options, option: &str) {
    match Db::open(PathBuf::from("/db"), o) {
        Err(Error::InvalidOptions(m)) => assert!(m.contains(option), "{m} does not name {option}"),
        Err(e) => panic!("{option}: expected InvalidOptions, got {e}"),
        Ok(_) => panic!("{option}: accepted"),
    }
}

#[test]
fn invalid_options_are_refused_naming_the_option() {
    let fs = MemFs::new();
    let o = || options(&fs, sim());
    refused(Options { regions: 2, ..o() }, "`regions`");
    refused(
        Options {
            wal: Some(WalPlacement::Ssd),
            ..o()
        },
        "`wal`",
    );
    refused(
        Options {
            nvcache_segment_bytes: 10_000,
            ..o()
        },
        "`nvcache_segment_bytes`",
    );
    refused(
        Options {
            nvcache_pm_levels: 5,
            ..o()
        },
        "`nvcache_pm_levels`",
    );
    refused(
        Options {
            nvcache_copy_out_percent: 101,
            ..o()
        },
        "`nvcache_copy_out_percent`",
    );
    refused(
        Options {
            nvcache_table_bytes: 1000,
            ..o()
        },
        "`nvcache_table_bytes`",
    );
    refused(
        Options {
            nvcache_cache_bytes: 1 << 30,
            ..o()
        },
        "`nvcache_cache_bytes`",
    );
    refused(
        Options {
            nvcache_cache_bytes: 4096,
            ..o()
        },
        "`nvcache_cache_bytes`",
    );
    refused(
        Options {
            memtable_size_bytes: 16 << 20,
            ..o()
        },
        "`pm_size_bytes`",
    );
    refused(
        Options {
            design: Preset::NvCache,
            fs: Arc::new(fs.clone()),
            ..Options::default()
        },
        "`pm_dir`",
    );
}

/// Persists of one committed group: its nodes (one persist, in one
/// segment) and the 8-byte publish — or two per entry, entry by entry.
#[test]
fn a_group_costs_one_persist_of_its_nodes_and_one_publish() {
    for (append, per_batch_of_ten) in [(NvAppend::Group, 2), (NvAppend::PerEntry, 20)] {
        let fs = MemFs::new();
        let region = Arc::new(Counting {
            inner: SimRegion::new(PM_BYTES),
            persists: AtomicU64::new(0),
        });
        let db = Db::open(
            PathBuf::from("/db"),
            Options {
                nvcache_append: append,
                ..options(&fs, Arc::clone(&region) as Arc<dyn PmRegion>)
            },
        )
        .expect("open");
        let mut exact = 0;
        for round in 0..20u32 {
            let mut b = WriteBatch::new();
            for i in 0..10u32 {
                b.put(format!("k{round:03}{i}").as_bytes(), &[7u8; 100]);
            }
            let before = region.persists.load(Ordering::SeqCst);
            db.write(b, &WriteOptions::default()).expect("write");
            let n = region.persists.load(Ordering::SeqCst) - before;
            // A group that needs a new segment also persists the allocator's
            // bitmap word, the segment's header and the chain link (and its
            // nodes in two segments, one persist each).
            assert!(
                n == per_batch_of_ten || n <= per_batch_of_ten + 4,
                "{append:?}: {n} persists for one group"
            );
            exact += usize::from(n == per_batch_of_ten);
        }
        assert!(
            exact >= 15,
            "{append:?}: only {exact} of 20 groups in one segment"
        );
        let s = db.stats();
        assert_eq!(s.written.wal_ssd, 0, "no WAL on SSD");
        assert!(
            s.written.wal_pm > 200 * 100,
            "node bytes: {}",
            s.written.wal_pm
        );
    }
}

fn fill(db: &Db, rounds: u32) {
    for round in 0..rounds {
        for i in 0..400u32 {
            let k = format!("key{:05}", (i * 7919 + round * 13) % 3000);
            db.put(k.as_bytes(), &vec![round as u8; 300]).expect("put");
        }
        db.flush().expect("flush");
    }
}

/// Flushes write only offset arrays; list compactions report the link
/// words they rewrite as relinked bytes (none with `ArrayOnly`) apart from
/// what they copy; evictions write SSTs.
#[test]
fn written_bytes_are_reported_per_kind() {
    for relink in [NvRelink::Links, NvRelink::ArrayOnly] {
        let fs = MemFs::new();
        let db = Db::open(
            PathBuf::from("/db"),
            Options {
                nvcache_relink: relink,
                nvcache_cache_bytes: 1 << 20,
                l0_compaction_trigger: 2,
                ..options(&fs, sim())
            },
        )
        .expect("open");
        fill(&db, 12);
        db.compact_range(None, None).expect("compact");
        let s = db.stats();
        let w = &s.written;
        let kinds: Vec<&str> = s.compactions.iter().map(|c| c.kind.as_str()).collect();
        assert!(kinds.contains(&"nv-list"), "{kinds:?}");
        assert!(kinds.contains(&"nv-evict"), "{kinds:?}");
        // A flush writes 8 bytes per entry plus a header and usage.
        assert!(
            w.flush_pm * 20 < w.wal_pm,
            "flush {} wal {}",
            w.flush_pm,
            w.wal_pm
        );
        assert_eq!(w.flush_ssd, 0);
        assert!(
            w.compaction_ssd.iter().sum::<u64>() > 0,
            "evictions write SSTs"
        );
        match relink {
            NvRelink::Links => {
                assert!(w.pm_relinked > 0);
                assert_eq!(w.pm_relinked % 16, 0, "16 bytes per relinked node");
            }
            NvRelink::ArrayOnly => assert_eq!(w.pm_relinked, 0),
        }
        let d = db.property("tierkv.design-stats").expect("design stats");
        assert!(
            d.contains("nvcache.cache_allocated_bytes") && d.contains("nvcache.cache_live_bytes"),
            "{d}"
        );
    }
}

/// A reopen adopts the log left by the memtable (no replay); new writes
/// take seqnos above every adopted one.
#[test]
fn reopen_adopts_the_log_and_keeps_seqnos_unique() {
    let fs = MemFs::new();
    let region = sim();
    let o = || options(&fs, Arc::clone(&region) as Arc<dyn PmRegion>);
    let db = Db::open(PathBuf::from("/db"), o()).expect("open");
    db.put(b"a", b"1").expect("put");
    db.put(b"a", b"2").expect("put");
    let last = db.last_sequence();
    drop(db);
    let db = Db::open(PathBuf::from("/db"), o()).expect("reopen");
    assert!(db.last_sequence() >= last);
    assert_eq!(db.get(b"a").expect("get").as_deref(), Some(&b"2"[..]));
    db.put(b"a", b"3").expect("put");
    db.compact_range(None, None).expect("compact");
    assert_eq!(db.get(b"a").expect("get").as_deref(), Some(&b"3"[..]));
    assert_eq!(
        db.property("tierkv.num-files-at-level0").as_deref(),
        Some("0")
    );
}

/// Versions a live snapshot reads survive list compactions and evictions.
#[test]
fn snapshots_survive_list_compaction() {
    let fs = MemFs::new();
    let db = Db::open(
        PathBuf::from("/db"),
        Options {
            l0_compaction_trigger: 2,
            ..options(&fs, sim())
        },
    )
    .expect("open");
    fill(&db, 2);
    let snap = db.snapshot();
    let before: Vec<Option<Vec<u8>>> = (0..3000)
        .step_by(7)
        .map(|i| db.get(format!("key{i:05}").as_bytes()).expect("get"))
        .collect();
    fill(&db, 6);
    db.compact_range(None, None).expect("compact");
    let ro = ReadOptions {
        snapshot: Some(snap),
        ..Default::default()
    };
    for (n, i) in (0..3000).step_by(7).enumerate() {
        let got = db
            .get_with(format!("key{i:05}").as_bytes(), &ro)
            .expect("get");
        assert_eq!(got, before[n], "key {i} at the snapshot");
    }
}

/// Point lookups in NVTables whose keys share their search-index number
/// (the 8 bytes after the prefix common to the table) and differ later:
/// a lookup whose number no entry has reads no node and misses; one whose
/// number ties reads the nodes and compares whole keys — present keys are
/// found, absent ones with the same number are not.
#[test]
fn lookups_through_the_search_index_compare_whole_keys_where_numbers_tie() {
    let fs = MemFs::new();
    let db = Db::open(PathBuf::from("/db"), options(&fs, sim())).expect("open");
    // First "a…", last "b…": no common prefix, so every "a12345678…" key
    // has the number of "a1234567".
    let tied = |i: u32| format!("a12345678-{i:04}");
    for i in (0..400u32).step_by(2) {
        db.put(tied(i).as_bytes(), tied(i).as_bytes()).expect("put");
    }
    db.put(b"b-last", b"last").expect("put");
    db.flush().expect("flush");
    let pm_tables = db
        .property("tierkv.tables")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("pm"))
        .count();
    assert!(pm_tables > 0, "the keys are in NVTables");
    let r = ReadOptions::default();
    for i in 0..400u32 {
        let want = (i % 2 == 0).then(|| tied(i).into_bytes());
        assert_eq!(
            db.get_with(tied(i).as_bytes(), &r).expect("get"),
            want,
            "{}",
            tied(i)
        );
    }
    for absent in [
        "a1234567",
        "a12345678",
        "a12345678-0401",
        "a2",
        "a",
        "",
        "b",
        "c",
    ] {
        assert_eq!(
            db.get_with(absent.as_bytes(), &r).expect("get"),
            None,
            "{absent}"
        );
    }
    assert_eq!(
        db.get(b"b-last").expect("get").as_deref(),
        Some(&b"last"[..])
    );
}
