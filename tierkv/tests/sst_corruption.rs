//! Corrupt SST files: a flipped byte in a data block, the index, the filter,
//! the properties or the footer; truncated files; all-zero and random files.
//! Every case is `Error::Corruption` naming the file and the offset of the
//! bad block — never a panic.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tierkv::iter::TableReader;
use tierkv::key::{make_internal_key, user_key, Kind};
use tierkv::sst::block::BlockBuilder;
use tierkv::sst::builder::{block_trailer, Footer, TableProps, FOOTER_LEN};
use tierkv::sst::index::BlockHandle;
use tierkv::sst::{sst_file_name, ReadConfig, Table, TableBuilder, TableOptions};
use tierkv::storage::mem::MemFs;
use tierkv::storage::{FileSystem, WriteHint};
use tierkv::Error;

type Model = Vec<(Vec<u8>, Vec<u8>)>;

fn model(n: usize) -> Model {
    (0..n)
        .map(|i| {
            let k = make_internal_key(format!("key{i:06}").as_bytes(), 100 + i as u64, Kind::Put);
            (k, format!("value-{i}-{}", "x".repeat(i % 50)).into_bytes())
        })
        .collect()
}

fn path(id: u64) -> PathBuf {
    Path::new("/db").join(sst_file_name(id))
}

fn write(fs: &MemFs, id: u64, m: &Model) -> Vec<u8> {
    let f = fs.create(&path(id), WriteHint::default()).unwrap();
    let mut b = TableBuilder::new(
        f,
        TableOptions {
            block_size_bytes: 512,
            ..TableOptions::default()
        },
    );
    for (k, v) in m {
        b.add(k, v).unwrap();
    }
    b.finish().unwrap();
    fs.read_all(&path(id)).unwrap()
}

fn open(fs: &MemFs, id: u64, verify: bool) -> tierkv::Result<Arc<Table>> {
    Table::open(
        fs.open(&path(id)).unwrap(),
        id,
        None,
        ReadConfig {
            verify_checksums: verify,
            ..ReadConfig::default()
        },
    )
}

fn assert_corruption_at(e: &Error, id: u64, offset: u64) {
    match e {
        Error::Corruption { at, what } => {
            assert!(
                at.source.ends_with(&sst_file_name(id)),
                "{} does not name the file",
                at.source
            );
            assert_eq!(at.offset, offset, "{what}");
        }
        e => panic!("expected corruption, got {e}"),
    }
}

fn footer(bytes: &[u8]) -> Footer {
    Footer::decode(&bytes[bytes.len() - FOOTER_LEN..]).unwrap()
}

/// Reads everything; returns the first error.
fn scan_all(t: &Arc<Table>, m: &Model) -> tierkv::Result<()> {
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
    assert_eq!(n, m.len());
    Ok(())
}

#[test]
fn flipped_data_block_byte_fails_the_read_that_touches_it() {
    let fs = MemFs::new();
    let m = model(200);
    let bytes = write(&fs, 1, &m);
    let t = open(&fs, 1, true).unwrap();
    // Second data block: find it through the index.
    let second_off = t.approximate_offset_of(&m[100].0);
    assert!(second_off > 0);
    fs.corrupt(&path(1), second_off as usize + 7, 0x10).unwrap();
    let t = open(&fs, 1, true).unwrap(); // data blocks are not read at open
                                         // Gets in the first block still work.
    assert!(t.get(user_key(&m[0].0), u64::MAX).unwrap().is_some());
    // A get in the bad block fails, naming it.
    let e = t.get(user_key(&m[100].0), u64::MAX).unwrap_err();
    assert_corruption_at(&e, 1, second_off);
    // An iterator stops there with the error.
    let mut it = Arc::clone(&t).iter(true);
    it.seek_to_first();
    let mut n = 0;
    while it.valid() {
        n += 1;
        it.next();
    }
    assert!(n > 0 && n < m.len());
    assert_corruption_at(&it.status().unwrap_err(), 1, second_off);
    // Sticky: later positioning stays invalid with the same error.
    it.seek_to_first();
    assert!(!it.valid());
    assert!(it.status().is_err());
    drop(bytes);
}

#[test]
fn flipped_metadata_byte_fails_open_naming_the_block() {
    let fs = MemFs::new();
    let m = model(300);
    let bytes = write(&fs, 2, &m);
    let f = footer(&bytes);
    let footer_off = (bytes.len() - FOOTER_LEN) as u64;
    let cases = [
        (
            "filter",
            f.filter.offset + f.filter.size / 2,
            f.filter.offset,
        ),
        ("properties", f.props.offset + 3, f.props.offset),
        ("index", f.index.offset + f.index.size / 2, f.index.offset),
        (
            "index trailer",
            f.index.offset + f.index.size + 2,
            f.index.offset,
        ),
        ("footer", footer_off + 20, footer_off),
        ("magic", bytes.len() as u64 - 1, footer_off),
    ];
    for (name, at, want) in cases {
        let fs = MemFs::new();
        fs.create(&path(2), WriteHint::default())
            .unwrap()
            .append(&bytes)
            .unwrap();
        fs.corrupt(&path(2), at as usize, 0x01).unwrap();
        for verify in [true, false] {
            let e = open(&fs, 2, verify).expect_err(name);
            assert_corruption_at(&e, 2, want);
        }
    }
}

#[test]
fn every_single_byte_flip_is_detected() {
    let fs = MemFs::new();
    let m = model(40);
    let bytes = write(&fs, 3, &m);
    for i in 0..bytes.len() {
        let fs = MemFs::new();
        let mut w = fs.create(&path(3), WriteHint::default()).unwrap();
        let mut b = bytes.clone();
        b[i] ^= 0x80;
        w.append(&b).unwrap();
        // With checksums on, either open or a full read reports corruption.
        match open(&fs, 3, true) {
            Err(e) => assert!(e.is_corruption(), "byte {i}: {e}"),
            Ok(t) => {
                let e = scan_all(&t, &m).expect_err(&format!("byte {i} not detected"));
                assert!(e.is_corruption(), "byte {i}: {e}");
            }
        }
        // Without data checksums nothing may panic.
        if let Ok(t) = open(&fs, 3, false) {
            let _ = scan_all(&t, &m);
        }
    }
}

#[test]
fn truncated_files_are_corruption() {
    let fs = MemFs::new();
    let m = model(60);
    let bytes = write(&fs, 4, &m);
    for len in 0..bytes.len() {
        let fs = MemFs::new();
        let mut w = fs.create(&path(4), WriteHint::default()).unwrap();
        w.append(&bytes[..len]).unwrap();
        let e = open(&fs, 4, true).expect_err("truncated file opened");
        let want = if len < FOOTER_LEN {
            0
        } else {
            (len - FOOTER_LEN) as u64
        };
        assert_corruption_at(&e, 4, want);
    }
}

#[test]
fn zero_and_random_files_are_corruption() {
    let mut rng = SmallRng::seed_from_u64(5);
    for len in [0usize, 1, 63, 64, 65, 4096, 100_000] {
        for zero in [true, false] {
            let fs = MemFs::new();
            let mut w = fs.create(&path(5), WriteHint::default()).unwrap();
            let b: Vec<u8> = if zero {
                vec![0; len]
            } else {
                (0..len).map(|_| rng.gen()).collect()
            };
            w.append(&b).unwrap();
            let e = open(&fs, 5, true).expect_err("garbage opened");
            assert!(e.is_corruption(), "{e}");
        }
    }
}

#[test]
fn valid_footer_over_garbage_never_panics() {
    // A footer with a correct checksum and magic but handles pointing at
    // random bytes: everything after the footer check must still hold.
    let mut rng = SmallRng::seed_from_u64(6);
    for _ in 0..2000 {
        let body_len = rng.gen_range(0..300u64);
        let mut body: Vec<u8> = (0..body_len).map(|_| rng.gen()).collect();
        let mut h = || {
            let off = rng.gen_range(0..=body_len);
            let size = rng.gen_range(0..=body_len - off);
            tierkv::sst::index::BlockHandle { offset: off, size }
        };
        let f = Footer {
            filter: h(),
            props: h(),
            index: h(),
            version: tierkv::sst::builder::FORMAT_VERSION,
        };
        body.extend_from_slice(&f.encode());
        let fs = MemFs::new();
        let mut w = fs.create(&path(6), WriteHint::default()).unwrap();
        w.append(&body).unwrap();
        if let Err(e) = open(&fs, 6, true) {
            assert!(e.is_corruption(), "{e}");
        }
    }
}

/// Appends `block` and a valid trailer; returns its handle.
fn push_block(file: &mut Vec<u8>, block: &[u8]) -> BlockHandle {
    let h = BlockHandle {
        offset: file.len() as u64,
        size: block.len() as u64,
    };
    file.extend_from_slice(block);
    file.extend_from_slice(&block_trailer(block));
    h
}

fn random_bytes(rng: &mut SmallRng, max: usize) -> Vec<u8> {
    let n = rng.gen_range(0..=max);
    (0..n).map(|_| rng.gen()).collect()
}

/// A block of random entries (keys increasing, but not necessarily
/// internal keys), or random bytes.
fn random_block(rng: &mut SmallRng, values: &[Vec<u8>]) -> Vec<u8> {
    if rng.gen_bool(0.2) {
        return random_bytes(rng, 100);
    }
    let mut b = BlockBuilder::new(rng.gen_range(1..4));
    let mut keys: Vec<Vec<u8>> = (0..rng.gen_range(0..8))
        .map(|_| {
            if rng.gen_bool(0.5) {
                let uk = random_bytes(rng, 4);
                make_internal_key(&uk, rng.gen_range(0..100), Kind::Put)
            } else {
                random_bytes(rng, 12)
            }
        })
        .collect();
    keys.sort_by(|a, b| tierkv::key::compare_internal(a, b));
    keys.dedup_by(|a, b| tierkv::key::compare_internal(a, b).is_eq());
    for k in keys {
        let v = if values.is_empty() || rng.gen_bool(0.3) {
            random_bytes(rng, 20)
        } else {
            values[rng.gen_range(0..values.len())].clone()
        };
        b.add(&k, &v);
    }
    b.finish().to_vec()
}

#[test]
fn structurally_valid_garbage_never_panics() {
    // Blocks with valid trailers and a valid footer, but random contents:
    // exercises every decoder behind the checksums.
    let mut rng = SmallRng::seed_from_u64(7);
    let mut opened = 0;
    for round in 0..3000u64 {
        let mut file = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..rng.gen_range(0..5) {
            let b = random_block(&mut rng, &[]);
            handles.push(push_block(&mut file, &b));
        }
        let filter = if rng.gen_bool(0.5) {
            let mut f = random_bytes(&mut rng, 40);
            f.push(rng.gen_range(0..32));
            f
        } else {
            Vec::new()
        };
        let filter_h = push_block(&mut file, &filter);
        let props = if rng.gen_bool(0.8) {
            let n = handles.len() as u64;
            TableProps {
                entries: if n == 0 { 0 } else { rng.gen_range(1..50) },
                data_block_count: if rng.gen_bool(0.9) { n } else { n + 1 },
                smallest: make_internal_key(b"", 1, Kind::Put),
                largest: make_internal_key(b"\xff", 1, Kind::Put),
                seq_max: 100,
                ..TableProps::default()
            }
            .encode()
        } else {
            random_bytes(&mut rng, 30)
        };
        let props_h = push_block(&mut file, &props);
        // Index values: real handles (mostly), or garbage.
        let mut vals: Vec<Vec<u8>> = handles
            .iter()
            .map(|h| {
                let mut v = Vec::new();
                h.encode_to(&mut v);
                v
            })
            .collect();
        if rng.gen_bool(0.2) {
            vals.push(random_bytes(&mut rng, 6));
        }
        let index = if rng.gen_bool(0.7) && !vals.is_empty() {
            let mut b = BlockBuilder::new(1);
            for (i, v) in vals.iter().enumerate() {
                b.add(
                    &make_internal_key(format!("k{i:03}").as_bytes(), 5, Kind::Put),
                    v,
                );
            }
            b.finish().to_vec()
        } else {
            random_block(&mut rng, &vals)
        };
        let index_h = push_block(&mut file, &index);
        file.extend_from_slice(
            &Footer {
                filter: filter_h,
                props: props_h,
                index: index_h,
                version: tierkv::sst::builder::FORMAT_VERSION,
            }
            .encode(),
        );
        let fs = MemFs::new();
        fs.create(&path(round), WriteHint::default())
            .unwrap()
            .append(&file)
            .unwrap();
        match open(&fs, round, rng.gen_bool(0.5)) {
            Err(e) => assert!(e.is_corruption(), "{e}"),
            Ok(t) => {
                opened += 1;
                let probe: Model = (0..5)
                    .map(|i| {
                        (
                            make_internal_key(format!("k{i:03}").as_bytes(), 9, Kind::Put),
                            vec![],
                        )
                    })
                    .collect();
                if let Err(e) = scan_all_lenient(&t, &probe) {
                    assert!(e.is_corruption(), "{e}");
                }
            }
        }
    }
    assert!(opened > 50, "only {opened} garbage tables opened");
}

/// Like `scan_all` but without asserting the entry count.
fn scan_all_lenient(t: &Arc<Table>, probe: &Model) -> tierkv::Result<()> {
    let mut it = Arc::clone(t).iter(true);
    it.seek_to_first();
    let mut n = 0;
    while it.valid() && n < 100_000 {
        n += 1;
        it.next();
    }
    it.status()?;
    it.seek_to_last();
    while it.valid() {
        it.prev();
    }
    it.status()?;
    for (k, _) in probe {
        it.seek(k);
        t.get(user_key(k), u64::MAX)?;
        let _ = t.approximate_offset_of(k);
    }
    it.status()
}
