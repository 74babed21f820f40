//! Block compression (docs/format/sst.md §1.1): a table round trip per
//! codec, per-level compression in a database, the options' validation,
//! the worked example of the format doc, and damaged compressed blocks
//! (always `Error::Corruption` with checksums on; never a panic with them
//! off).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tierkv::iter::TableReader;
use tierkv::key::{make_internal_key, user_key, Kind};
use tierkv::sst::{
    sst_file_name, Compression, ReadConfig, Table, TableBuilder, TableOptions, TableProps,
};
use tierkv::storage::mem::MemFs;
use tierkv::storage::{FileSystem, WriteHint};
use tierkv::{Db, Error, Options};

type Model = Vec<(Vec<u8>, Vec<u8>)>;

/// Compressible entries: text keys, values that repeat a pattern.
fn model(n: usize) -> Model {
    (0..n)
        .map(|i| {
            let kind = if i % 10 == 3 { Kind::Delete } else { Kind::Put };
            let k = make_internal_key(format!("key{i:06}").as_bytes(), 1000 + i as u64, kind);
            let v = match kind {
                Kind::Put => format!("value {i} of a compressible table; ").repeat(1 + i % 5),
                Kind::Delete => String::new(),
            };
            (k, v.into_bytes())
        })
        .collect()
}

fn path(id: u64) -> PathBuf {
    Path::new("/db").join(sst_file_name(id))
}

fn write(fs: &MemFs, id: u64, m: &Model, compression: Compression) -> TableProps {
    let f = fs.create(&path(id), WriteHint::default()).unwrap();
    let mut b = TableBuilder::new(
        f,
        TableOptions {
            block_size_bytes: 1024,
            compression,
            ..TableOptions::default()
        },
    );
    for (k, v) in m {
        b.add(k, v).unwrap();
    }
    b.finish().unwrap()
}

fn open(fs: &MemFs, id: u64, verify: bool) -> tierkv::Result<Arc<Table>> {
    Table::open(
        fs.open(&path(id))?,
        id,
        None,
        ReadConfig {
            verify_checksums: verify,
            ..ReadConfig::default()
        },
    )
}

/// Reads the whole table both ways and every key; returns the first error.
fn read_all(t: &Arc<Table>, m: &Model) -> tierkv::Result<usize> {
    let mut it = Arc::clone(t).iter(false);
    it.seek_to_first();
    let mut n = 0;
    while it.valid() {
        n += 1;
        it.next();
    }
    it.status()?;
    it.seek_to_last();
    while it.valid() {
        it.prev();
    }
    it.status()?;
    for (k, _) in m {
        t.get(user_key(k), u64::MAX)?;
    }
    Ok(n)
}

fn round_trip(c: Compression) {
    let fs = MemFs::new();
    let m = model(3000);
    let plain = write(&fs, 1, &m, Compression::None);
    let packed = write(&fs, 2, &m, c);
    assert!(
        packed.file_size_bytes * 2 < plain.file_size_bytes,
        "{c}: {} bytes against {} uncompressed",
        packed.file_size_bytes,
        plain.file_size_bytes
    );
    assert_eq!(packed.entries, plain.entries);
    let t = open(&fs, 2, true).unwrap();
    let blocks = t.data_blocks().unwrap();
    assert_eq!(blocks.len() as u64, t.block_count());
    assert!(blocks
        .iter()
        .all(|b| b.compression == c && b.raw_size_bytes > b.handle.size));
    // Every entry, by iteration and by get.
    let mut it = Arc::clone(&t).iter(false);
    it.seek_to_first();
    for (k, v) in &m {
        assert!(it.valid(), "{c}");
        assert_eq!((it.key(), it.value()), (k.as_slice(), v.as_slice()));
        it.next();
    }
    assert!(!it.valid());
    it.status().unwrap();
    for (k, v) in &m {
        let f = t.get(user_key(k), u64::MAX).unwrap().unwrap();
        if f.kind == Kind::Put {
            assert_eq!(&f.value, v);
        }
    }
    assert_eq!(t.verify().unwrap(), m.len() as u64);
}

#[test]
fn lz4_tables_round_trip() {
    round_trip(Compression::Lz4);
}

#[test]
fn zstd_tables_round_trip() {
    round_trip(Compression::Zstd);
}

#[test]
fn per_level_compression_in_a_database() {
    let fs = MemFs::new();
    let opts = Options {
        fs: Arc::new(fs.clone()),
        memtable_size_bytes: 256 << 10,
        sst_size_bytes: 256 << 10,
        l1_size_bytes: 1 << 20,
        block_size_bytes: 1024,
        level_count: 4,
        // L0 stays until `compact_range` moves it (no background L0 → L1
        // before the test looks at it).
        l0_compaction_trigger: 20,
        l0_slowdown_trigger: 30,
        l0_stop_trigger: 40,
        compression_per_level: vec![Compression::None, Compression::Lz4, Compression::Zstd],
        ..Options::default()
    };
    let value = |i: u32| format!("value {i} ").repeat(20).into_bytes();
    let db = Db::open("/db", opts.clone()).unwrap();
    for i in 0..4000u32 {
        db.put(format!("key{i:06}").as_bytes(), &value(i)).unwrap();
    }
    db.flush().unwrap();
    // L0 tables: uncompressed.
    let codecs_at = |level: &str| -> Vec<Compression> {
        let tables = db.property("tierkv.tables").unwrap();
        tables
            .lines()
            .filter(|l| l.starts_with(level))
            .flat_map(|l| {
                let id: u64 = l.split_whitespace().nth(1).unwrap()[1..].parse().unwrap();
                let t = Table::open(
                    fs.open(&Path::new("/db").join(sst_file_name(id))).unwrap(),
                    id,
                    None,
                    ReadConfig::default(),
                )
                .unwrap();
                t.data_blocks()
                    .unwrap()
                    .into_iter()
                    .map(|b| b.compression)
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let l0 = codecs_at("L0 ");
    assert!(
        !l0.is_empty() && l0.iter().all(|c| *c == Compression::None),
        "{l0:?} {:?}",
        db.property("tierkv.tables")
    );
    db.compact_range(None, None).unwrap();
    let deeper = [codecs_at("L1 "), codecs_at("L2 "), codecs_at("L3 ")].concat();
    assert!(!deeper.is_empty(), "{:?}", db.property("tierkv.tables"));
    assert!(deeper.iter().all(|c| *c != Compression::None), "{deeper:?}");
    for i in (0..4000u32).step_by(37) {
        assert_eq!(
            db.get(format!("key{i:06}").as_bytes()).unwrap(),
            Some(value(i))
        );
    }
    db.close().unwrap();
    // The setting may change between opens: old tables stay readable.
    let db = Db::open(
        "/db",
        Options {
            compression: Compression::None,
            compression_per_level: vec![],
            ..opts
        },
    )
    .unwrap();
    assert_eq!(db.get(b"key000042").unwrap(), Some(value(42)));
    db.close().unwrap();
}

#[test]
fn compression_options_are_validated_at_open_naming_the_option() {
    let fs = MemFs::new();
    let opts = Options {
        fs: Arc::new(fs),
        level_count: 3,
        compression_per_level: vec![Compression::Lz4; 4],
        ..Options::default()
    };
    match Db::open("/db", opts) {
        Err(Error::InvalidOptions(m)) => assert!(m.contains("`compression_per_level`"), "{m}"),
        other => panic!("expected InvalidOptions, got {:?}", other.err()),
    }
    let o = Options {
        compression: Compression::Zstd,
        compression_per_level: vec![Compression::None, Compression::Lz4],
        ..Options::default()
    };
    assert_eq!(o.compression_for_level(0), Compression::None);
    assert_eq!(o.compression_for_level(1), Compression::Lz4);
    assert_eq!(o.compression_for_level(5), Compression::Lz4);
    let o = Options {
        compression: Compression::Zstd,
        ..Options::default()
    };
    assert_eq!(o.compression_for_level(3), Compression::Zstd);
}

/// docs/format/sst.md §1.1: three entries `key1..key3` at seqnos 1..3, each
/// with the value "tierkv tierkv tierkv", no bloom filter, LZ4: the 107-byte
/// data block is stored in 59 bytes.
#[test]
fn worked_example_of_a_compressed_block_matches_the_format_doc() {
    let fs = MemFs::new();
    let f = fs.create(&path(9), WriteHint::default()).unwrap();
    let mut b = TableBuilder::new(
        f,
        TableOptions {
            compression: Compression::Lz4,
            bloom_bits_per_key: 0,
            ..TableOptions::default()
        },
    );
    for i in 1..=3u64 {
        let k = make_internal_key(format!("key{i}").as_bytes(), i, Kind::Put);
        b.add(&k, b"tierkv tierkv tierkv").unwrap();
    }
    b.finish().unwrap();
    let bytes = fs.read_all(&path(9)).unwrap();
    let doc: Vec<u8> = "6b a1 00 0c 14 6b 65 79 31 01 01 00 01 00 79 74
                        69 65 72 6b 76 20 07 00 61 03 09 14 32 01 02 1f
                        00 19 00 19 00 03 27 00 6f 03 09 14 33 01 03 20
                        00 07 80 00 00 00 00 01 00 00 00 01 f7 ff eb 67
                        00"
    .split_whitespace()
    .map(|h| u8::from_str_radix(h, 16).unwrap())
    .collect();
    assert_eq!(&bytes[..doc.len()], doc.as_slice());
    let t = open(&fs, 9, true).unwrap();
    let blocks = t.data_blocks().unwrap();
    assert_eq!(blocks.len(), 1);
    assert_eq!(
        (
            blocks[0].handle.offset,
            blocks[0].handle.size,
            blocks[0].raw_size_bytes
        ),
        (0, 59, 107)
    );
    assert_eq!(t.verify().unwrap(), 3);
}

/// Every byte of a compressed table flipped in turn: with checksums on,
/// open or a full read reports `Corruption`; with them off, the
/// decompressor meets the damage and nothing panics.
#[test]
fn every_byte_flip_of_a_compressed_table_is_caught() {
    for c in [Compression::Lz4, Compression::Zstd] {
        let fs = MemFs::new();
        let m = model(60);
        write(&fs, 3, &m, c);
        let bytes = fs.read_all(&path(3)).unwrap();
        for i in 0..bytes.len() {
            let fs = MemFs::new();
            let mut b = bytes.clone();
            b[i] ^= 0x21;
            fs.create(&path(3), WriteHint::default())
                .unwrap()
                .append(&b)
                .unwrap();
            match open(&fs, 3, true) {
                Err(e) => assert!(e.is_corruption(), "{c} byte {i}: {e}"),
                Ok(t) => {
                    let e = read_all(&t, &m).expect_err(&format!("{c}: byte {i} not detected"));
                    assert!(e.is_corruption(), "{c} byte {i}: {e}");
                    assert!(t.verify().unwrap_err().is_corruption());
                }
            }
            if let Ok(t) = open(&fs, 3, false) {
                if let Err(e) = read_all(&t, &m) {
                    assert!(e.is_corruption(), "{c} byte {i}: {e}");
                }
            }
        }
    }
}

/// A block whose stored bytes (and checksum) are valid but whose
/// compressed stream is not: `Corruption` at the block's offset.
#[test]
fn a_compressed_block_that_does_not_decompress_is_corruption() {
    use tierkv::sst::builder::{block_trailer_typed, Footer, FOOTER_LEN};
    for c in [Compression::Lz4, Compression::Zstd] {
        let fs = MemFs::new();
        let m = model(200);
        write(&fs, 4, &m, c);
        let mut bytes = fs.read_all(&path(4)).unwrap();
        let footer = Footer::decode(&bytes[bytes.len() - FOOTER_LEN..]).unwrap();
        let t = open(&fs, 4, true).unwrap();
        let h = t.data_blocks().unwrap()[1].handle;
        let (start, end) = (h.offset as usize, (h.offset + h.size) as usize);
        // Scramble the stream after the length prefix, then re-seal it
        // with a valid trailer.
        for b in &mut bytes[start + 3..end] {
            *b = b.wrapping_mul(31).wrapping_add(7);
        }
        let trailer = block_trailer_typed(&bytes[start..end], c.block_type());
        bytes[end..end + 5].copy_from_slice(&trailer);
        assert!(footer.index.offset > h.offset);
        let fs = MemFs::new();
        fs.create(&path(4), WriteHint::default())
            .unwrap()
            .append(&bytes)
            .unwrap();
        let t = open(&fs, 4, true).unwrap();
        let raw = t.data_blocks().unwrap()[1].raw_size_bytes;
        // The decompressor refuses the stream (at the block's offset), or
        // what it makes of it does not parse (at an entry of the block).
        for e in [read_all(&t, &m).unwrap_err(), t.verify().unwrap_err()] {
            match e {
                Error::Corruption { at, .. } => {
                    assert!((h.offset..h.offset + raw).contains(&at.offset), "{c}: {at}")
                }
                e => panic!("{c}: {e}"),
            }
        }
    }
}
