//! Table roundtrips against a sorted-vector model: 10 k random internal keys
//! with several versions per user key and deletes; gets at many snapshots,
//! full forward/backward iteration, seeks with next/prev walks; block cache
//! and read counters; concurrent readers sharing one cache.

use std::cmp::Ordering;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tierkv::iter::{Found, InternalIterator, TableReader};
use tierkv::key::{compare_internal, make_internal_key, parse_internal_key, seek_key, Kind};
use tierkv::sst::{
    sst_file_name, BlockCache, Compression, ReadConfig, Table, TableBuilder, TableCounters,
    TableOptions,
};
use tierkv::storage::mem::MemFs;
use tierkv::storage::{FileSystem, RandomAccessFile, WriteHint};

type Model = Vec<(Vec<u8>, Vec<u8>)>;

fn user_key(i: u64) -> Vec<u8> {
    format!("user{:08}", i * 7).into_bytes()
}

/// `n` entries over about n/3 user keys, 1–5 versions each, ~15 % deletes.
fn random_model(rng: &mut SmallRng, n: usize, big_values: bool) -> Model {
    let mut v: Model = Vec::with_capacity(n);
    let mut seq = 1u64;
    while v.len() < n {
        let uk = user_key(rng.gen_range(0..(n as u64 / 3).max(1)));
        for _ in 0..rng.gen_range(1..=5) {
            seq += rng.gen_range(1..4);
            let kind = if rng.gen_bool(0.15) {
                Kind::Delete
            } else {
                Kind::Put
            };
            let vlen = match kind {
                Kind::Delete => 0,
                Kind::Put if big_values => 4096,
                Kind::Put => rng.gen_range(0..120),
            };
            let val: Vec<u8> = (0..vlen).map(|_| rng.gen()).collect();
            v.push((make_internal_key(&uk, seq, kind), val));
        }
    }
    v.sort_by(|a, b| compare_internal(&a.0, &b.0));
    v.dedup_by(|a, b| compare_internal(&a.0, &b.0) == Ordering::Equal);
    v
}

fn write_table(fs: &MemFs, id: u64, model: &Model, opts: TableOptions) -> tierkv::sst::TableProps {
    let path = Path::new("/db").join(sst_file_name(id));
    let file = fs.create(&path, WriteHint::default()).unwrap();
    let mut b = TableBuilder::new(file, opts);
    for (k, v) in model {
        b.add(k, v).unwrap();
    }
    let est = b.estimated_size();
    let props = b.finish().unwrap();
    // The open block counts uncompressed in the estimate.
    assert!(props.file_size_bytes >= est || opts.compression != Compression::None);
    assert_eq!(props.file_size_bytes, fs.file_size(&path).unwrap());
    props
}

fn open(fs: &MemFs, id: u64, cache: Option<Arc<BlockCache>>, cfg: ReadConfig) -> Arc<Table> {
    let path = Path::new("/db").join(sst_file_name(id));
    Table::open(fs.open(&path).unwrap(), id, cache, cfg).unwrap()
}

/// What the model says `get(uk, snapshot)` returns.
fn model_get(model: &Model, uk: &[u8], snapshot: u64) -> Option<Found> {
    let t = seek_key(uk, snapshot);
    let i = model.partition_point(|(k, _)| compare_internal(k, &t) == Ordering::Less);
    let (k, v) = model.get(i)?;
    let p = parse_internal_key(k).unwrap();
    (p.user_key == uk).then(|| Found {
        seq: p.seq,
        kind: p.kind,
        value: v.clone(),
    })
}

fn lower_bound(model: &Model, target: &[u8]) -> usize {
    model.partition_point(|(k, _)| compare_internal(k, target) == Ordering::Less)
}

fn check_iter_at(it: &dyn InternalIterator, model: &Model, pos: usize) {
    it.status().unwrap();
    if pos < model.len() {
        assert!(it.valid(), "expected entry {pos} of {}", model.len());
        assert_eq!(it.key(), &model[pos].0[..]);
        assert_eq!(it.value(), &model[pos].1[..]);
    } else {
        assert!(!it.valid());
    }
}

fn check_table(table: &Arc<Table>, model: &Model, rng: &mut SmallRng) {
    let props = table.props();
    assert_eq!(props.entries, model.len() as u64);
    let dels = model
        .iter()
        .filter(|(k, _)| parse_internal_key(k).unwrap().kind == Kind::Delete)
        .count();
    assert_eq!(props.deletions, dels as u64);
    if let (Some(first), Some(last)) = (model.first(), model.last()) {
        assert_eq!(props.smallest, first.0);
        assert_eq!(props.largest, last.0);
        let seqs = model
            .iter()
            .map(|(k, _)| parse_internal_key(k).unwrap().seq);
        assert_eq!(props.seq_min, seqs.clone().min().unwrap());
        assert_eq!(props.seq_max, seqs.max().unwrap());
    }
    let max_seq = props.seq_max + 2;

    // Gets: every user key at several snapshots, and absent keys.
    let mut uks: Vec<&[u8]> = model
        .iter()
        .map(|(k, _)| tierkv::key::user_key(k))
        .collect();
    uks.dedup();
    for uk in &uks {
        assert!(table.may_contain(uk));
        let mut snaps = vec![0, max_seq, u64::MAX];
        for _ in 0..3 {
            snaps.push(rng.gen_range(0..max_seq));
        }
        for s in snaps {
            let want = model_get(model, uk, s.min(tierkv::key::MAX_SEQNO));
            let got = table.get(uk, s).unwrap();
            assert_eq!(got, want, "get({:?}, {s})", String::from_utf8_lossy(uk));
        }
    }
    for i in 0..500u64 {
        let uk = format!("user{:08}x", i * 13).into_bytes();
        assert_eq!(table.get(&uk, max_seq).unwrap(), None);
        let uk = format!("absent{i}").into_bytes();
        assert_eq!(table.get(&uk, max_seq).unwrap(), None);
    }

    // Full forward and backward iteration.
    let mut it = Arc::clone(table).iter(rng.gen_bool(0.5));
    it.seek_to_first();
    for (k, v) in model {
        assert!(it.valid());
        assert_eq!(it.key(), &k[..]);
        assert_eq!(it.value(), &v[..]);
        it.next();
    }
    assert!(!it.valid());
    it.status().unwrap();
    it.seek_to_last();
    for (k, v) in model.iter().rev() {
        assert!(it.valid());
        assert_eq!(it.key(), &k[..]);
        assert_eq!(it.value(), &v[..]);
        it.prev();
    }
    assert!(!it.valid());
    it.status().unwrap();

    // Seeks with random walks across block boundaries.
    let mut it = table.table_iter(true);
    for round in 0..400 {
        let target = if model.is_empty() || round % 4 == 0 {
            make_internal_key(
                &user_key(rng.gen_range(0..5000)),
                rng.gen_range(0..max_seq),
                Kind::Put,
            )
        } else {
            model[rng.gen_range(0..model.len())].0.clone()
        };
        it.seek(&target);
        let mut pos = lower_bound(model, &target);
        check_iter_at(&it, model, pos);
        for _ in 0..rng.gen_range(0..60) {
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
            check_iter_at(&it, model, pos);
        }
    }
    // Seek before the first and past the last.
    it.seek(&make_internal_key(b"", tierkv::key::MAX_SEQNO, Kind::Put));
    check_iter_at(&it, model, 0);
    it.seek(&make_internal_key(b"\xff\xff", 0, Kind::Delete));
    check_iter_at(&it, model, model.len());

    // approximate_offset_of is monotonic and within the file.
    let mut last = 0;
    for (k, _) in model.iter().step_by(97) {
        let off = table.approximate_offset_of(k);
        assert!(off >= last && off <= props.file_size_bytes);
        last = off;
    }
}

#[test]
fn table_roundtrip_10k_entries() {
    let mut rng = SmallRng::seed_from_u64(0x7ab1e);
    let model = random_model(&mut rng, 10_000, false);
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/db")).unwrap();
    for (id, opts) in [
        TableOptions::default(),
        TableOptions {
            block_size_bytes: 256,
            restart_interval: 4,
            bloom_bits_per_key: 10,
            compression: Compression::Lz4,
        },
        TableOptions {
            block_size_bytes: 1 << 16,
            restart_interval: 1,
            bloom_bits_per_key: 0,
            compression: Compression::Zstd,
        },
    ]
    .into_iter()
    .enumerate()
    {
        let id = id as u64 + 1;
        let props = write_table(&fs, id, &model, opts);
        assert!(props.data_block_count > 0);
        for cache in [None, Some(Arc::new(BlockCache::new(1 << 20)))] {
            for verify in [true, false] {
                let cfg = ReadConfig {
                    verify_checksums: verify,
                    counters: TableCounters::default(),
                };
                let t = open(&fs, id, cache.clone(), cfg);
                assert_eq!(t.block_count(), props.data_block_count);
                let mut want = props.clone();
                want.file_size_bytes = t.props().file_size_bytes;
                assert_eq!(t.props(), &want);
                check_table(&t, &model, &mut rng);
            }
        }
    }
}

#[test]
fn table_roundtrip_4k_values() {
    let mut rng = SmallRng::seed_from_u64(4096);
    let model = random_model(&mut rng, 600, true);
    let fs = MemFs::new();
    let props = write_table(&fs, 9, &model, TableOptions::default());
    // One entry per block with 4 KB values.
    assert!(props.data_block_count as usize >= model.len() * 8 / 10);
    let t = open(
        &fs,
        9,
        Some(Arc::new(BlockCache::new(8 << 20))),
        ReadConfig::default(),
    );
    check_table(&t, &model, &mut rng);
}

#[test]
fn empty_and_tiny_tables() {
    let mut rng = SmallRng::seed_from_u64(1);
    let fs = MemFs::new();
    for (id, n) in [(1u64, 0usize), (2, 1), (3, 2)] {
        let model = random_model(&mut rng, n, false);
        let props = write_table(&fs, id, &model, TableOptions::default());
        assert_eq!(props.entries, model.len() as u64);
        let t = open(&fs, id, None, ReadConfig::default());
        check_table(&t, &model, &mut rng);
    }
}

#[test]
fn counters_and_cache() {
    let mut rng = SmallRng::seed_from_u64(2);
    let model = random_model(&mut rng, 2000, false);
    let fs = MemFs::new();
    write_table(&fs, 5, &model, TableOptions::default());
    let counters = TableCounters {
        bytes_read: Some(Arc::new(AtomicU64::new(0))),
        cache_hits: Some(Arc::new(AtomicU64::new(0))),
        cache_misses: Some(Arc::new(AtomicU64::new(0))),
        recorder: Some(Arc::new(tierkv::stats::StatsRecorder::new())),
    };
    let cache = Arc::new(BlockCache::new(4 << 20));
    let t = open(
        &fs,
        5,
        Some(Arc::clone(&cache)),
        ReadConfig {
            verify_checksums: true,
            counters: counters.clone(),
        },
    );
    let load = |c: &Option<Arc<AtomicU64>>| c.as_ref().unwrap().load(AtomicOrdering::Relaxed);
    let after_open = load(&counters.bytes_read);
    assert!(after_open > 0);
    let (k, _) = &model[model.len() / 2];
    let uk = tierkv::key::user_key(k);
    assert!(t.get(uk, u64::MAX).unwrap().is_some());
    assert_eq!(load(&counters.cache_misses), 1);
    assert_eq!(load(&counters.cache_hits), 0);
    let one_block = load(&counters.bytes_read) - after_open;
    assert!(one_block > 0 && one_block <= 4096 + 1024);
    assert!(t.get(uk, u64::MAX).unwrap().is_some());
    assert_eq!(load(&counters.cache_hits), 1);
    assert_eq!(load(&counters.bytes_read) - after_open, one_block);
    let rec = counters.recorder.as_ref().unwrap();
    assert_eq!(rec.block_cache_hits.load(AtomicOrdering::Relaxed), 1);
    assert_eq!(rec.block_cache_misses.load(AtomicOrdering::Relaxed), 1);
    assert_eq!(
        rec.ssd_bytes_read.load(AtomicOrdering::Relaxed),
        load(&counters.bytes_read)
    );

    // A scan without fill_cache leaves the cache as it was.
    let usage = cache.usage_bytes();
    let mut it = Arc::clone(&t).iter(false);
    it.seek_to_first();
    while it.valid() {
        it.next();
    }
    it.status().unwrap();
    assert_eq!(cache.usage_bytes(), usage);
    // With fill_cache every block ends up cached.
    let mut it = Arc::clone(&t).iter(true);
    it.seek_to_first();
    while it.valid() {
        it.next();
    }
    assert_eq!(cache.len() as u64, t.block_count());
    cache.check_invariants();
}

/// Blocks evicted from a small cache leave their buffers for the next
/// misses; a scan that does not fill the cache (a compaction's) takes none
/// of them, and every read still returns what the table holds.
#[test]
fn evicted_buffers_go_to_reads_that_fill_the_cache() {
    let mut rng = SmallRng::seed_from_u64(4);
    let model = random_model(&mut rng, 1000, true);
    let fs = MemFs::new();
    write_table(&fs, 6, &model, TableOptions::default());
    // Two shards of 512 KiB: room for a few 4 KiB spares each.
    let cache = Arc::new(BlockCache::new(1 << 20));
    let t = open(&fs, 6, Some(Arc::clone(&cache)), ReadConfig::default());
    assert!(model.iter().map(|(_, v)| v.len()).sum::<usize>() > 2 << 20);
    let scan = |fill: bool| {
        let mut it = Arc::clone(&t).iter(fill);
        it.seek_to_first();
        let mut n = 0;
        while it.valid() {
            check_iter_at(it.as_ref(), &model, n);
            n += 1;
            it.next();
        }
        it.status().unwrap();
        assert_eq!(n, model.len());
    };
    scan(true);
    let spares = cache.spares();
    assert!(spares.0 > 0, "a scan through a small cache leaves spares");
    scan(false);
    assert_eq!(cache.spares(), spares);
    scan(true);
    for (k, _) in model.iter().step_by(7) {
        let uk = tierkv::key::user_key(k);
        let s = tierkv::key::MAX_SEQNO;
        assert_eq!(t.get(uk, s).unwrap(), model_get(&model, uk, s));
    }
    cache.check_invariants();
}

#[test]
fn concurrent_readers_share_a_small_cache() {
    // Small enough to evict constantly; the second with room for spare
    // buffers, which evicted 4 KiB blocks hand to the next misses.
    concurrent_readers(3000, false, 64 << 10);
    concurrent_readers(800, true, 1 << 20);
}

fn concurrent_readers(entries: usize, big_values: bool, cache_bytes: usize) {
    let mut rng = SmallRng::seed_from_u64(3);
    let fs = MemFs::new();
    let models: Vec<Model> = (0..3)
        .map(|_| random_model(&mut rng, entries, big_values))
        .collect();
    let cache = Arc::new(BlockCache::new(cache_bytes));
    let tables: Vec<Arc<Table>> = models
        .iter()
        .enumerate()
        .map(|(i, m)| {
            write_table(&fs, i as u64, m, TableOptions::default());
            open(
                &fs,
                i as u64,
                Some(Arc::clone(&cache)),
                ReadConfig::default(),
            )
        })
        .collect();
    let models = Arc::new(models);
    std::thread::scope(|s| {
        for th in 0..4u64 {
            let tables = tables.clone();
            let models = Arc::clone(&models);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(100 + th);
                for _ in 0..3000 {
                    let t = rng.gen_range(0..tables.len());
                    let m = &models[t];
                    let (k, _) = &m[rng.gen_range(0..m.len())];
                    let uk = tierkv::key::user_key(k);
                    let snap = rng.gen_range(0..20_000);
                    assert_eq!(tables[t].get(uk, snap).unwrap(), model_get(m, uk, snap));
                }
                let mut it = Arc::clone(&tables[th as usize % 3]).iter(true);
                it.seek_to_first();
                let mut n = 0;
                while it.valid() {
                    check_iter_at(it.as_ref(), &models[th as usize % 3], n);
                    n += 1;
                    it.next();
                }
                it.status().unwrap();
                assert_eq!(n, models[th as usize % 3].len());
            });
        }
    });
    assert!(cache.usage_bytes() <= cache_bytes);
    cache.check_invariants();
    if big_values {
        assert!(cache.spares().0 > 0);
    }
}

#[test]
fn block_cache_concurrent_insert_get_erase() {
    use tierkv::sst::block::{Block, BlockBuilder};
    let mk = |size: usize, tag: u8| {
        let mut b = BlockBuilder::new(16);
        b.add(&make_internal_key(b"k", 1, Kind::Put), &vec![tag; size]);
        Arc::new(Block::new(b.finish().to_vec(), Arc::from("t"), 0).unwrap())
    };
    let cache = Arc::new(BlockCache::new(2 << 20));
    std::thread::scope(|s| {
        for th in 0..4u64 {
            let cache = Arc::clone(&cache);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(th);
                for _ in 0..20_000 {
                    let table = rng.gen_range(0..8u64);
                    let off = rng.gen_range(0..200u64) * 4096;
                    match rng.gen_range(0..9) {
                        0..=5 => {
                            if let Some(b) = cache.get(table, off) {
                                // Values identify their key.
                                let v = *b.data().get(20).unwrap();
                                assert_eq!(v, (table as u8) ^ (off / 4096) as u8);
                            }
                        }
                        _ => {
                            let tag = (table as u8) ^ (off / 4096) as u8;
                            cache.insert(table, off, mk(rng.gen_range(100..9000), tag));
                        }
                    }
                }
            });
        }
    });
    assert!(cache.usage_bytes() <= 2 << 20);
    cache.check_invariants();
}

/// The worked example of docs/format/sst.md, byte for byte.
#[test]
fn worked_example_matches_the_format_doc() {
    let fs = MemFs::new();
    let p = Path::new("/db/000007.sst");
    let mut b = TableBuilder::new(
        fs.create(p, WriteHint::default()).unwrap(),
        TableOptions::default(),
    );
    b.add(&make_internal_key(b"apple", 3, Kind::Put), b"red")
        .unwrap();
    b.add(&make_internal_key(b"apple", 1, Kind::Put), b"green")
        .unwrap();
    b.add(&make_internal_key(b"banana", 2, Kind::Delete), b"")
        .unwrap();
    let props = b.finish().unwrap();
    assert_eq!(props.file_size_bytes, 226);
    let want = "
        00 0d 03 61 70 70 6c 65 01 03 00 00 00 00 00 00
        72 65 64 06 07 05 01 00 00 00 00 00 00 67 72 65
        65 6e 00 0e 00 62 61 6e 61 6e 61 00 02 00 00 00
        00 00 00 00 00 00 00 01 00 00 00 00 c5 6c 5d 68
        44 61 10 02 81 80 28 0c 07 00 53 f7 0c ad 01 01
        03 02 01 01 03 01 28 04 01 08 07 01 01 08 01 03
        09 01 01 05 0d 61 70 70 6c 65 01 03 00 00 00 00
        00 00 06 0e 62 61 6e 61 6e 61 00 02 00 00 00 00
        00 00 00 a0 84 04 f8 00 09 02 63 01 ff ff ff ff
        ff ff ff 00 3b 00 00 00 00 01 00 00 00 00 9d 46
        67 f2 40 00 00 00 00 00 00 00 09 00 00 00 00 00
        00 00 4e 00 00 00 00 00 00 00 34 00 00 00 00 00
        00 00 87 00 00 00 00 00 00 00 16 00 00 00 00 00
        00 00 01 00 00 00 2d 7a 5e 19 74 69 65 72 6b 53
        53 54";
    let want: Vec<u8> = want
        .split_whitespace()
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    assert_eq!(fs.read_all(p).unwrap(), want);
}

/// A file that counts its positional reads and the bytes they return.
struct CountingFile {
    inner: Arc<dyn RandomAccessFile>,
    reads: AtomicU64,
    bytes: AtomicU64,
}

impl RandomAccessFile for CountingFile {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> tierkv::Result<()> {
        self.reads.fetch_add(1, AtomicOrdering::Relaxed);
        self.bytes
            .fetch_add(buf.len() as u64, AtomicOrdering::Relaxed);
        self.inner.read_exact_at(offset, buf)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}

/// A table of `n` 4 KiB values (a block each) opened through a
/// [`CountingFile`], with no cache.
fn counted_4k_table(n: usize, seed: u64) -> (MemFs, Model, Arc<CountingFile>, Arc<Table>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let model = random_model(&mut rng, n, true);
    let fs = MemFs::new();
    write_table(&fs, 11, &model, TableOptions::default());
    let path = Path::new("/db").join(sst_file_name(11));
    let file = Arc::new(CountingFile {
        inner: fs.open(&path).unwrap(),
        reads: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    });
    let as_dyn: Arc<dyn RandomAccessFile> = file.clone();
    let t = Table::open(as_dyn, 11, None, ReadConfig::default()).unwrap();
    (fs, model, file, t)
}

fn take(c: &AtomicU64) -> u64 {
    c.swap(0, AtomicOrdering::Relaxed)
}

/// A scan in file order reads ahead: a few dozen reads for a table of
/// ~1,500 blocks, each block read once, and every entry right.
#[test]
fn a_forward_scan_reads_ahead() {
    let (fs, model, file, t) = counted_4k_table(2000, 7);
    let blocks = t.block_count();
    assert!(blocks >= 1000, "{blocks} blocks");
    let data_bytes = fs.file_size(file.path()).unwrap();
    for fill_cache in [false, true] {
        take(&file.reads);
        take(&file.bytes);
        let mut it = Arc::clone(&t).iter(fill_cache);
        it.seek_to_first();
        for pos in 0..model.len() {
            check_iter_at(&*it, &model, pos);
            it.next();
        }
        check_iter_at(&*it, &model, model.len());
        let (reads, bytes) = (take(&file.reads), take(&file.bytes));
        assert!(
            reads <= blocks / 20,
            "{reads} reads for {blocks} blocks (fill_cache {fill_cache})"
        );
        assert!(bytes <= data_bytes, "{bytes} bytes read of {data_bytes}");
    }
}

/// Reads out of file order get no window: a backward scan reads each block
/// on its own, and seeks read only the blocks they step into.
#[test]
fn seeks_and_backward_scans_read_only_their_blocks() {
    let (_fs, model, file, t) = counted_4k_table(600, 8);
    let blocks = t.block_count();
    let largest_block = t
        .index_entries()
        .unwrap()
        .iter()
        .map(|(_, h)| h.size + 5)
        .max()
        .unwrap();
    take(&file.reads);
    let mut it = Arc::clone(&t).iter(false);
    it.seek_to_last();
    let mut pos = model.len();
    while it.valid() {
        pos -= 1;
        check_iter_at(&*it, &model, pos);
        it.prev();
    }
    it.status().unwrap();
    assert_eq!(pos, 0);
    assert_eq!(take(&file.reads), blocks);

    let mut rng = SmallRng::seed_from_u64(9);
    take(&file.bytes);
    for _ in 0..200 {
        let i = rng.gen_range(0..model.len());
        let mut it = Arc::clone(&t).iter(false);
        it.seek(&model[i].0);
        check_iter_at(&*it, &model, i);
        it.next();
        check_iter_at(&*it, &model, i + 1);
        let (reads, bytes) = (take(&file.reads), take(&file.bytes));
        assert!(reads <= 2, "a seek and a step read {reads} times");
        assert!(
            bytes <= 2 * largest_block,
            "a seek and a step read {bytes} bytes"
        );
    }
}

/// A damaged block met through the readahead window is `Corruption`
/// naming that block's offset, not the window's; the blocks before it
/// read right.
#[test]
fn a_bad_block_in_a_readahead_window_is_named() {
    let (fs, model, file, t) = counted_4k_table(600, 10);
    let entries = t.index_entries().unwrap();
    let bad = entries[entries.len() / 2].1;
    fs.corrupt(file.path(), bad.offset as usize + 100, 0x5a)
        .unwrap();
    let mut it = Arc::clone(&t).iter(false);
    it.seek_to_first();
    let mut pos = 0;
    while it.valid() {
        check_iter_at(&*it, &model, pos);
        pos += 1;
        it.next();
    }
    assert!(pos > 0 && pos < model.len());
    match it.status() {
        Err(tierkv::Error::Corruption { at, .. }) => {
            assert_eq!(at.offset, bad.offset);
            assert!(at.source.ends_with(&sst_file_name(11)), "{}", at.source);
        }
        other => panic!("expected corruption at {}, got {other:?}", bad.offset),
    }
}
