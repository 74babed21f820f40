//! Fuzzes the SST reader: the input is written as a file in MemFs, opened as
//! a Table, then iterated both ways and probed with gets and seeks. Any
//! outcome but a panic is fine; errors must be `Corruption`.
#![no_main]

use std::path::Path;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use tierkv::iter::TableReader;
use tierkv::key::{make_internal_key, user_key, Kind, MAX_SEQNO};
use tierkv::sst::{BlockCache, ReadConfig, Table};
use tierkv::storage::mem::MemFs;
use tierkv::storage::{FileSystem, WriteHint};

fuzz_target!(|data: &[u8]| {
    let fs = MemFs::new();
    let path = Path::new("/fuzz/000001.sst");
    let Ok(mut w) = fs.create(path, WriteHint::default()) else {
        return;
    };
    if w.append(data).is_err() {
        return;
    }
    let Ok(file) = fs.open(path) else {
        return;
    };
    // The verify flag comes from the input so both paths are explored.
    let verify = data.first().map_or(true, |b| b & 1 == 0);
    let cfg = ReadConfig {
        verify_checksums: verify,
        ..ReadConfig::default()
    };
    let table = match Table::open(file, 1, Some(Arc::new(BlockCache::new(1 << 20))), cfg) {
        Ok(t) => t,
        Err(e) => {
            assert!(e.is_corruption(), "{e}");
            return;
        }
    };

    // Forward scan, remembering a few keys to probe.
    let mut probes: Vec<Vec<u8>> = vec![make_internal_key(b"", MAX_SEQNO, Kind::Put)];
    let mut it = Arc::clone(&table).iter(true);
    it.seek_to_first();
    let mut n = 0usize;
    while it.valid() && n < 1_000_000 {
        if n % 7 == 0 && probes.len() < 64 {
            probes.push(it.key().to_vec());
        }
        let _ = it.value();
        it.next();
        n += 1;
    }
    check(it.status());
    // Backward scan.
    let mut it = Arc::clone(&table).iter(false);
    it.seek_to_last();
    let mut m = 0usize;
    while it.valid() && m < 1_000_000 {
        it.prev();
        m += 1;
    }
    check(it.status());
    // Seeks, gets, offsets.
    let mut it = Arc::clone(&table).iter(true);
    for k in &probes {
        it.seek(k);
        if it.valid() {
            it.prev();
        }
        if it.valid() {
            it.next();
        }
        check(table.get(user_key(k), MAX_SEQNO).map(|_| ()));
        check(table.get(user_key(k), 0).map(|_| ()));
        let _ = table.approximate_offset_of(k);
        let _ = table.may_contain(user_key(k));
    }
    check(it.status());
});

fn check(r: tierkv::Result<()>) {
    if let Err(e) = r {
        assert!(e.is_corruption(), "{e}");
    }
}
