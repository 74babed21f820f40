//! Fuzzes the WAL reader.
//!
//! The first byte picks a mode:
//! - 0: the rest is a log file; reading never panics and ends cleanly or
//!   with a `Corruption`.
//! - 1: the rest is the content of the blocks of a valid two-block PM
//!   extent; same expectations, through the PM extent chain reader.
//! - 2: the rest is a list of records (u16 length prefixes); writing them
//!   and reading them back gives them all, in order.
//! - 3: the rest is a raw PM region; walking an extent chain at offset 8
//!   never panics.

#![no_main]

use std::sync::{Arc, Mutex};

use libfuzzer_sys::fuzz_target;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::wal::pm::{extent_len_for_blocks, EXTENT_HEADER_BYTES};
use tierkv::wal::{ExtentSource, FileLog, LogSink, LogSource, PmLog, Reader, Writer};
use tierkv::Result;

/// Reads everything; at most one record per input byte (plus one) can come
/// out of a well-formed log, which bounds the loop.
fn drain<S: LogSource>(r: &mut Reader<S>, max_records: usize) {
    let mut buf = Vec::new();
    for _ in 0..=max_records {
        match r.read_record(&mut buf) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                assert!(e.is_corruption(), "{e}");
                assert!(r.read_record(&mut buf).is_err(), "errors are sticky");
                return;
            }
        }
    }
    panic!("more records than the input can hold");
}

struct Bump(Mutex<u64>);

impl ExtentSource for Bump {
    fn alloc_extent(&self, len_bytes: u64) -> Result<Option<u64>> {
        let mut next = self.0.lock().unwrap();
        let at = *next;
        *next += len_bytes;
        Ok(Some(at))
    }
    fn free_extent(&self, _offset: u64, _len_bytes: u64) -> Result<()> {
        Ok(())
    }
}

#[derive(Default)]
struct VecSink(Vec<u8>);

impl LogSink for VecSink {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => {
            let mut r = Reader::new(FileLog::new("fuzz.log", rest.to_vec()), 1);
            drain(&mut r, rest.len() / 11 + 1);
        }
        1 => {
            let ext = extent_len_for_blocks(2);
            let region = Arc::new(SimRegion::new((4096 + ext) as usize));
            let dynr: Arc<dyn PmRegion> = region.clone();
            let source = Arc::new(Bump(Mutex::new(4096)));
            let sink = PmLog::create(dynr.clone(), source, 1, ext).unwrap();
            let first = sink.first_extent();
            let n = rest.len().min((ext - EXTENT_HEADER_BYTES) as usize);
            region
                .write(first + EXTENT_HEADER_BYTES, &rest[..n])
                .unwrap();
            let mut r = PmLog::open_for_read(dynr, first, 1).unwrap();
            drain(&mut r, n / 11 + 1);
        }
        2 => {
            let mut records = Vec::new();
            let mut input = rest;
            while input.len() >= 2 {
                let len = usize::from(u16::from_le_bytes([input[0], input[1]])) * 3;
                input = &input[2..];
                let take = len.min(input.len());
                let mut rec = input[..take].to_vec();
                rec.resize(len, 0x5a);
                records.push(rec);
                input = &input[take..];
            }
            let mut w = Writer::new(VecSink::default(), 77);
            for rec in &records {
                w.add_record(rec).unwrap();
            }
            let bytes = w.into_sink().0;
            let mut r = Reader::new(FileLog::new("roundtrip.log", bytes), 77);
            for rec in &records {
                assert_eq!(r.next_record().unwrap().as_ref(), Some(rec));
            }
            assert_eq!(r.next_record().unwrap(), None);
            assert_eq!(r.torn_tail(), None);
        }
        _ => {
            let region = Arc::new(SimRegion::new(rest.len().max(64)));
            region.write(0, rest).unwrap();
            let dynr: Arc<dyn PmRegion> = region;
            if let Err(e) = PmLog::extents(dynr.as_ref(), 8) {
                assert!(e.is_corruption(), "{e}");
            }
            if let Ok(mut r) = PmLog::open_for_read(dynr, 8, 1) {
                drain(&mut r, rest.len() / 11 + 1);
            }
        }
    }
});
