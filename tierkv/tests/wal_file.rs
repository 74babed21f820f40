//! WAL record format on files: roundtrip, torn tails, body corruption,
//! recycled tails, crashes of the in-memory file system, and a MANIFEST-like
//! use with version edits.

use std::path::{Path, PathBuf};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tierkv::storage::mem::MemFs;
use tierkv::storage::{FileSystem, WriteHint};
use tierkv::version::edit::VersionEdit;
use tierkv::wal::{FileLog, FileSink, Reader, Writer, BLOCK_SIZE, HEADER_SIZE};
use tierkv::Error;

/// A payload whose bytes depend on its index, so a misplaced record shows.
fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (i * 131 + j * 7 + j / 251) as u8)
        .collect()
}

/// Mostly small records, some up to 100 KiB (several blocks).
fn random_len(rng: &mut SmallRng) -> usize {
    match rng.gen_range(0..10) {
        0 => 0,
        1..=6 => rng.gen_range(1..300),
        7 | 8 => rng.gen_range(300..40_000),
        _ => rng.gen_range(40_000..=100 * 1024),
    }
}

/// Where the first header of a record appended at log position `pos` lands.
fn header_offset(pos: u64) -> u64 {
    let left = BLOCK_SIZE as u64 - pos % BLOCK_SIZE as u64;
    if left < HEADER_SIZE as u64 {
        pos + left
    } else {
        pos
    }
}

/// Writes `records` to `path` on `fs` as log `log_number`, syncing at the
/// end; returns each record's offset.
fn write_log(fs: &MemFs, path: &Path, log_number: u64, records: &[Vec<u8>]) -> Vec<u64> {
    let file = fs.create(path, WriteHint::default()).unwrap();
    let mut w = Writer::new(FileSink(file), log_number);
    let mut offsets = Vec::new();
    for r in records {
        offsets.push(header_offset(w.bytes_written()));
        w.add_record(r).unwrap();
    }
    w.sync().unwrap();
    offsets
}

/// Reads every record; returns them with the error that ended the read.
fn read_all<S: tierkv::wal::LogSource>(r: &mut Reader<S>) -> (Vec<Vec<u8>>, Option<Error>) {
    let mut out = Vec::new();
    loop {
        match r.next_record() {
            Ok(Some(rec)) => out.push(rec),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

/// Reads every record, failing the test on an error.
fn read_ok<S: tierkv::wal::LogSource>(r: &mut Reader<S>) -> Vec<Vec<u8>> {
    match read_all(r) {
        (got, None) => got,
        (got, Some(e)) => panic!("error after {} records: {e}", got.len()),
    }
}

fn log_path() -> PathBuf {
    PathBuf::from("/db/000007.log")
}

fn records(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n).map(|i| payload(i, random_len(&mut rng))).collect()
}

#[test]
fn roundtrip_of_random_sizes_across_blocks() {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/db")).unwrap();
    let recs = records(1, 400);
    let offsets = write_log(&fs, &log_path(), 7, &recs);
    let mut r = Reader::open_file(&fs, &log_path(), 7).unwrap();
    let mut buf = Vec::new();
    for (i, want) in recs.iter().enumerate() {
        assert!(r.read_record(&mut buf).unwrap(), "record {i} missing");
        assert_eq!(&buf, want, "record {i}");
        assert_eq!(r.last_record_offset(), offsets[i], "offset of record {i}");
    }
    assert!(!r.read_record(&mut buf).unwrap());
    assert!(!r.read_record(&mut buf).unwrap(), "the end is sticky");
    assert_eq!(r.torn_tail(), None);
    assert!(fs.file_size(&log_path()).unwrap() > 10 * BLOCK_SIZE as u64);
}

#[test]
fn empty_log_and_empty_records() {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/db")).unwrap();
    write_log(&fs, &log_path(), 7, &[]);
    let mut r = Reader::open_file(&fs, &log_path(), 7).unwrap();
    assert_eq!(r.next_record().unwrap(), None);
    assert_eq!(r.torn_tail(), None);

    // Empty records, including ones landing exactly where a block has only
    // room for a header.
    let mut recs = vec![Vec::new(); 3];
    recs.push(payload(1, BLOCK_SIZE - 5 * HEADER_SIZE));
    recs.extend(vec![Vec::new(); 3]);
    recs.push(payload(2, 5));
    write_log(&fs, &log_path(), 7, &recs);
    let mut r = Reader::open_file(&fs, &log_path(), 7).unwrap();
    assert_eq!(read_ok(&mut r), recs);
}

/// Builds a log whose last record starts a little before a block boundary
/// and crosses it; returns the bytes, the records and the last one's offset.
fn log_with_crossing_last_record(last_len: usize) -> (Vec<u8>, Vec<Vec<u8>>, u64) {
    let fs = MemFs::new();
    let path = Path::new("/x.log");
    let mut recs: Vec<Vec<u8>> = (0..12).map(|i| payload(i, 2_500)).collect();
    recs.push(payload(99, last_len));
    let offsets = write_log(&fs, path, 3, &recs);
    let last = *offsets.last().unwrap();
    (fs.read_all(path).unwrap(), recs, last)
}

#[test]
fn torn_tail_at_every_byte_of_the_last_record() {
    for last_len in [40usize, 6_000] {
        let (bytes, recs, last_at) = log_with_crossing_last_record(last_len);
        let n = recs.len() - 1;
        for cut in last_at as usize..bytes.len() {
            let mut r = Reader::new(FileLog::new("cut.log", bytes[..cut].to_vec()), 3);
            let (got, err) = read_all(&mut r);
            assert!(err.is_none(), "cut at {cut}: {err:?}");
            assert_eq!(got.len(), n, "cut at {cut}");
            assert_eq!(&got[..], &recs[..n], "cut at {cut}");
            let want = if cut == last_at as usize {
                None
            } else {
                Some(last_at)
            };
            assert_eq!(r.torn_tail(), want, "cut at {cut}");
        }
        let mut r = Reader::new(FileLog::new("whole.log", bytes), 3);
        assert_eq!(read_ok(&mut r), recs);
        assert_eq!(r.torn_tail(), None);
    }
}

#[test]
fn torn_tail_of_a_record_spanning_three_blocks() {
    let fs = MemFs::new();
    let path = Path::new("/big.log");
    let mut recs: Vec<Vec<u8>> = (0..5).map(|i| payload(i, 100)).collect();
    recs.push(payload(5, 70_000));
    let offsets = write_log(&fs, path, 11, &recs);
    let bytes = fs.read_all(path).unwrap();
    let last_at = offsets[5] as usize;
    // Every byte near the fragment boundaries, a sample elsewhere.
    let cuts = (last_at..bytes.len()).filter(|c| {
        let in_block = c % BLOCK_SIZE;
        !(2 * HEADER_SIZE..=BLOCK_SIZE - 2).contains(&in_block) || c % 89 == 0
    });
    for cut in cuts {
        let mut r = Reader::new(FileLog::new("big.log", bytes[..cut].to_vec()), 11);
        let (got, err) = read_all(&mut r);
        assert!(err.is_none(), "cut at {cut}: {err:?}");
        assert_eq!(&got[..], &recs[..5], "cut at {cut}");
        assert_eq!(r.torn_tail(), (cut > last_at).then_some(last_at as u64));
    }
    // The file system truncates the real file too.
    fs.truncate(path, last_at + 40_000).unwrap();
    let mut r = Reader::open_file(&fs, path, 11).unwrap();
    assert_eq!(read_all(&mut r).0, &recs[..5]);
    assert_eq!(r.torn_tail(), Some(last_at as u64));
}

#[test]
fn body_corruption_names_the_file_and_the_record() {
    let recs = records(2, 200);
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/db")).unwrap();
    let offsets = write_log(&fs, &log_path(), 7, &recs);
    let clean = fs.read_all(&log_path()).unwrap();
    let mut rng = SmallRng::seed_from_u64(3);
    // Damage in each part of a header and in payloads of early records,
    // including fragments of multi-block records.
    let mut victims = Vec::new();
    for i in [0usize, 1, 3, 10, 40] {
        for delta in [0u64, 4, 5, 6, 7, 10] {
            victims.push((i, offsets[i] + delta));
        }
        let len = recs[i].len() as u64;
        if len > 0 {
            victims.push((i, offsets[i] + HEADER_SIZE as u64 + rng.gen_range(0..len)));
        }
    }
    if let Some(big) = (0..150).find(|&i| recs[i].len() > 2 * BLOCK_SIZE) {
        // A MIDDLE or LAST fragment's header: the next block start after it.
        let second = (offsets[big] / BLOCK_SIZE as u64 + 1) * BLOCK_SIZE as u64;
        victims.push((big, second + 2));
        victims.push((big, second + HEADER_SIZE as u64 + 17));
    }
    for (i, at) in victims {
        let mut bytes = clean.clone();
        bytes[at as usize] ^= 0x40;
        let mut r = Reader::new(FileLog::new("/db/000007.log", bytes), 7);
        let (got, err) = read_all(&mut r);
        assert_eq!(&got[..], &recs[..i], "damage at {at} in record {i}");
        match err {
            Some(Error::Corruption { at: loc, what }) => {
                assert_eq!(loc.source, "/db/000007.log");
                assert_eq!(loc.offset, offsets[i], "damage at {at}: {what}");
            }
            other => panic!("damage at {at} in record {i}: expected corruption, got {other:?}"),
        }
        // The error is sticky.
        assert!(r.next_record().unwrap_err().is_corruption());
    }

    // The same through the file system.
    fs.corrupt(&log_path(), offsets[2] as usize + 1, 1).unwrap();
    let mut r = Reader::open_file(&fs, &log_path(), 7).unwrap();
    let err = read_all(&mut r).1.expect("corruption");
    assert!(
        err.to_string()
            .contains(&format!("/db/000007.log at offset {}", offsets[2])),
        "{err}"
    );
}

#[test]
fn damaged_payload_is_corruption_even_in_the_last_record() {
    // Rule: a checksum mismatch trusts the length and looks right after the
    // damaged fragment, in the same block.
    let recs: Vec<Vec<u8>> = (0..20).map(|i| payload(i, 50)).collect();
    let fs = MemFs::new();
    let offsets = write_log(&fs, Path::new("/a.log"), 1, &recs);
    let clean = fs.read_all(Path::new("/a.log")).unwrap();
    let mut bytes = clean.clone();
    bytes[offsets[15] as usize + 20] ^= 1;
    let mut r = Reader::new(FileLog::new("a.log", bytes), 1);
    let e = loop {
        match r.next_record() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("damage followed by records must be corruption"),
            Err(e) => break e,
        }
    };
    match e {
        tierkv::Error::Corruption { at, .. } => assert_eq!(at.offset, offsets[15]),
        other => panic!("expected corruption, got {other}"),
    }
    // The same damage in the last record: a crash only cuts a file short,
    // so a complete record that fails its checksum is corruption too.
    let mut bytes = clean.clone();
    bytes[offsets[19] as usize + 20] ^= 1;
    let mut r = Reader::new(FileLog::new("a.log", bytes.clone()), 1);
    let (got, err) = read_all(&mut r);
    assert_eq!(got, recs[..19].to_vec());
    match err {
        Some(Error::Corruption { at, .. }) => assert_eq!(at.offset, offsets[19]),
        other => panic!("expected corruption, got {other:?}"),
    }
    // Point-in-time mode ends the log there instead.
    let mut r = Reader::new(FileLog::new("a.log", bytes), 1).point_in_time(true);
    assert_eq!(read_ok(&mut r), recs[..19].to_vec());
    assert_eq!(r.torn_tail(), Some(offsets[19]));
    assert!(!r.dropped_records());
    // Only a record cut short by the end of the file is a torn tail.
    let mut r = Reader::new(FileLog::new("a.log", clean[..clean.len() - 1].to_vec()), 1);
    assert_eq!(read_ok(&mut r), recs[..19].to_vec());
    assert_eq!(r.torn_tail(), Some(offsets[19]));
}

#[test]
fn a_damaged_length_is_not_taken_for_a_record_cut_short() {
    // The last record's length grows past the end of the file: that looks
    // like a truncated record, but the checksum verifies the true payload,
    // which ends exactly at the end of the file.
    let recs: Vec<Vec<u8>> = (0..20).map(|i| payload(i, 50)).collect();
    let fs = MemFs::new();
    let offsets = write_log(&fs, Path::new("/l.log"), 1, &recs);
    let clean = fs.read_all(Path::new("/l.log")).unwrap();
    for (i, bit) in [(19usize, 0x04u8), (19, 0x80), (12, 0x02)] {
        let mut bytes = clean.clone();
        bytes[offsets[i] as usize + 4] ^= bit; // low byte of the length
        let mut r = Reader::new(FileLog::new("l.log", bytes), 1);
        let (got, err) = read_all(&mut r);
        assert_eq!(got, recs[..i].to_vec(), "record {i} bit {bit:#x}");
        match err {
            Some(Error::Corruption { at, .. }) => assert_eq!(at.offset, offsets[i]),
            other => panic!("record {i} bit {bit:#x}: expected corruption, got {other:?}"),
        }
    }
}

#[test]
fn stale_records_of_another_log_end_the_log_cleanly() {
    let fs = MemFs::new();
    // An old log 6 with the same record sizes, then a shorter log 7 written
    // over its beginning (a recycled file): the tail holds log 6 records at
    // record boundaries.
    let old: Vec<Vec<u8>> = (0..300).map(|i| vec![0xee; 100 + (i % 7) * 400]).collect();
    let new: Vec<Vec<u8>> = (0..120).map(|i| payload(i, 100 + (i % 7) * 400)).collect();
    write_log(&fs, Path::new("/old"), 6, &old);
    write_log(&fs, Path::new("/new"), 7, &new);
    let old_bytes = fs.read_all(Path::new("/old")).unwrap();
    let mut bytes = fs.read_all(Path::new("/new")).unwrap();
    let n = bytes.len();
    bytes.extend_from_slice(&old_bytes[n..]);
    let mut r = Reader::new(FileLog::new("recycled", bytes.clone()), 7);
    assert_eq!(read_ok(&mut r), new.clone());
    assert_eq!(r.torn_tail(), None);

    // Not at a record boundary: the last record no longer verifies. A crash
    // only cuts a file short (this engine never reuses a log file), so that
    // is corruption of the last record, after every earlier one.
    bytes.truncate(n - 1);
    bytes.extend_from_slice(&old_bytes[n + 17..]);
    let mut r = Reader::new(FileLog::new("recycled", bytes), 7);
    let (got, err) = read_all(&mut r);
    assert!(err.is_some_and(|e| e.is_corruption()));
    assert_eq!(&got[..], &new[..new.len() - 1]);
}

#[test]
fn zero_bytes_in_a_file_are_corruption() {
    let recs = records(4, 120);
    let fs = MemFs::new();
    let offsets = write_log(&fs, Path::new("/z.log"), 9, &recs);
    let clean = fs.read_all(Path::new("/z.log")).unwrap();

    // Zeros after the last record: the writer never writes them (block
    // padding is shorter than a header), and a crash only cuts a file short.
    let mut padded = clean.clone();
    padded.resize(clean.len() + 3 * BLOCK_SIZE + 5, 0);
    let mut r = Reader::new(FileLog::new("z.log", padded.clone()), 9);
    let (got, err) = read_all(&mut r);
    assert_eq!(got, recs.clone());
    match err {
        Some(Error::Corruption { at: loc, .. }) => assert_eq!(loc.offset, clean.len() as u64),
        other => panic!("expected corruption, got {other:?}"),
    }
    // Point-in-time mode reads them as the end of the log.
    let mut r = Reader::new(FileLog::new("z.log", padded), 9).point_in_time(true);
    assert_eq!(read_ok(&mut r), recs.clone());
    assert_eq!(r.torn_tail(), None);

    // A page of zeros in the body (e.g. a page the OS never wrote back).
    let i = 10;
    let mut holed = clean.clone();
    let at = offsets[i] as usize;
    holed[at..at + 4096].fill(0);
    let mut r = Reader::new(FileLog::new("z.log", holed.clone()), 9);
    let (got, err) = read_all(&mut r);
    assert_eq!(&got[..], &recs[..i]);
    match err {
        Some(Error::Corruption { at: loc, .. }) => assert_eq!(loc.offset, offsets[i]),
        other => panic!("expected corruption, got {other:?}"),
    }

    // Point-in-time mode stops at the hole and says records were dropped.
    let mut r = Reader::new(FileLog::new("z.log", holed), 9).point_in_time(true);
    assert_eq!(read_ok(&mut r), recs[..i].to_vec());
    assert_eq!(r.torn_tail(), Some(offsets[i]));
    assert!(r.dropped_records());
}

#[test]
fn crash_keeps_exactly_the_synced_records() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    fs.create_dir_all(dir).unwrap();
    let path = dir.join("000012.log");
    let file = fs.create(&path, WriteHint::default()).unwrap();
    fs.sync_dir(dir).unwrap();
    let mut w = Writer::new(FileSink(file), 12);
    let recs = records(5, 60);
    let mut synced = 0;
    for (i, rec) in recs.iter().enumerate() {
        w.add_record(rec).unwrap();
        if i % 3 == 2 {
            w.sync().unwrap();
            synced = i + 1;
        } else {
            w.flush().unwrap();
        }
    }
    let crashed = fs.crash();
    let mut r = Reader::open_file(&crashed, &path, 12).unwrap();
    let (got, err) = read_all(&mut r);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(&got[..], &recs[..synced]);
}

#[test]
fn manifest_records_hold_version_edits() {
    let fs = MemFs::new();
    let path = Path::new("/db/MANIFEST-000005");
    fs.create_dir_all(Path::new("/db")).unwrap();
    let edits: Vec<VersionEdit> = (0..50u64)
        .map(|i| VersionEdit {
            log_number: Some(i),
            next_file_number: Some(i + 10),
            deleted_tables: vec![(1, i)],
            design_records: vec![(7, vec![i as u8; (i * 977 % 3000) as usize])],
            ..Default::default()
        })
        .collect();
    let encoded: Vec<Vec<u8>> = edits
        .iter()
        .map(|e| {
            let mut b = Vec::new();
            e.encode(&mut b);
            b
        })
        .collect();
    write_log(&fs, path, 5, &encoded);
    let mut r = Reader::open_file(&fs, path, 5).unwrap();
    let mut buf = Vec::new();
    let mut got = Vec::new();
    while r.read_record(&mut buf).unwrap() {
        got.push(VersionEdit::decode(&buf, r.source_name(), r.last_record_offset()).unwrap());
    }
    assert_eq!(got, edits);

    // A record with a valid checksum but a malformed edit names the record.
    let fs2 = MemFs::new();
    let offsets = write_log(&fs2, path, 5, &[encoded[0].clone(), vec![0x63, 0x01]]);
    let mut r = Reader::open_file(&fs2, path, 5).unwrap();
    r.next_record().unwrap();
    let rec = r.next_record().unwrap().unwrap();
    let err = VersionEdit::decode(&rec, r.source_name(), r.last_record_offset()).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("/db/MANIFEST-000005 at offset {}", offsets[1])),
        "{err}"
    );
}

#[test]
fn mutated_logs_never_panic_and_never_yield_foreign_records() {
    let recs = records(6, 40);
    let fs = MemFs::new();
    write_log(&fs, Path::new("/m.log"), 4, &recs);
    let clean = fs.read_all(Path::new("/m.log")).unwrap();
    let mut rng = SmallRng::seed_from_u64(8);
    for round in 0..400 {
        let mut bytes = clean.clone();
        match round % 4 {
            0 => {
                let i = rng.gen_range(0..bytes.len());
                bytes[i] ^= 1 << rng.gen_range(0..8);
            }
            1 => bytes.truncate(rng.gen_range(0..clean.len())),
            2 => {
                let i = rng.gen_range(0..bytes.len());
                let n = rng.gen_range(1..200).min(bytes.len() - i);
                rng.fill(&mut bytes[i..i + n]);
            }
            _ => {
                for _ in 0..rng.gen_range(1..20) {
                    let i = rng.gen_range(0..bytes.len());
                    bytes[i] = rng.gen();
                }
            }
        }
        let mut r = Reader::new(FileLog::new("m.log", bytes), 4);
        let (got, err) = read_all(&mut r);
        assert!(got.len() <= recs.len());
        assert_eq!(&got[..], &recs[..got.len()], "round {round}");
        if let Some(e) = err {
            assert!(e.is_corruption(), "round {round}: {e}");
        }
    }
    // Pure garbage of every small length.
    for len in 0..3 * HEADER_SIZE {
        let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        let mut r = Reader::new(FileLog::new("g", bytes), 4);
        let _ = read_all(&mut r);
    }
}

/// The rule the MANIFEST relies on: any change of one byte of a log file
/// (three different XOR masks at every offset) yields either every record
/// exactly or `Corruption` — never fewer records with `Ok`.
#[test]
fn every_single_byte_change_is_corruption_or_harmless() {
    let recs: Vec<Vec<u8>> = (0..40)
        .map(|i| payload(i, if i == 30 { 40_000 } else { 30 + i * 13 }))
        .collect();
    let fs = MemFs::new();
    write_log(&fs, Path::new("/e.log"), 5, &recs);
    let clean = fs.read_all(Path::new("/e.log")).unwrap();
    let mut harmless = 0;
    for at in 0..clean.len() {
        for mask in [0x01u8, 0x80, 0xff] {
            let mut bytes = clean.clone();
            bytes[at] ^= mask;
            let mut r = Reader::new(FileLog::new("e.log", bytes), 5);
            let (got, err) = read_all(&mut r);
            match err {
                None => {
                    assert_eq!(got, recs, "change {mask:#x} at {at} lost records silently");
                    harmless += 1;
                }
                Some(e) => assert!(e.is_corruption(), "change at {at}: {e}"),
            }
        }
    }
    // Only block padding is unchecked.
    assert!(
        harmless < 3 * HEADER_SIZE * 2,
        "{harmless} harmless changes"
    );
}
