//! Fuzzes the PM WAL's extent chains: `PmLog::extents`, `open_for_read`,
//! `sealed_end`, `find_chains` and `open_prefix_for_salvage` over a region
//! whose extent headers, links, seals and blocks come from the input. The
//! fuzzer chooses the chain (offsets, lengths, log numbers, links) and the
//! target writes headers with valid checksums, so the chain walk's checks
//! (bounds, overlaps and cycles, log numbers, seal bounds) are reached.
//! Nothing panics; every error is a `Corruption` naming the region; a
//! reader returns at most as many records as the blocks can hold.
//!
//! Input: mode byte; then up to 8 extent descriptors of 8 bytes (page u16,
//! blocks u8, log u8, next index u8, seal u16, flags u8); the rest is laid
//! over the blocks.

#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::wal::pm::{extent_len_for_blocks, EXTENT_HEADER_BYTES, EXTENT_MAGIC};
use tierkv::wal::{mask_crc, LogSource, PmLog, Reader, BLOCK_SIZE};

const PAGES: u64 = 160;
const PAGE: u64 = 4096;

fn header(log: u64, len: u64, next: u64) -> [u8; 40] {
    let mut b = [0u8; 40];
    b[0..8].copy_from_slice(&EXTENT_MAGIC);
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[16..24].copy_from_slice(&log.to_le_bytes());
    b[24..32].copy_from_slice(&len.to_le_bytes());
    b[32..40].copy_from_slice(&next.to_le_bytes());
    let crc = mask_crc(tierkv::coding::crc32c_append(
        tierkv::coding::crc32c(&b[0..12]),
        &b[16..32],
    ));
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

fn seal(log: u64, end: u64) -> [u8; 12] {
    let mut c = [0u8; 16];
    c[0..8].copy_from_slice(&log.to_le_bytes());
    c[8..16].copy_from_slice(&end.to_le_bytes());
    let mut b = [0u8; 12];
    b[0..8].copy_from_slice(&end.to_le_bytes());
    b[8..12].copy_from_slice(&mask_crc(tierkv::coding::crc32c(&c)).to_le_bytes());
    b
}

fn drain<S: LogSource>(r: &mut Reader<S>, blocks: u64) {
    let max = blocks * (BLOCK_SIZE as u64 / 11 + 1) + 1;
    let mut buf = Vec::new();
    for _ in 0..=max {
        match r.read_record(&mut buf) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                assert!(e.is_corruption(), "{e}");
                return;
            }
        }
    }
    panic!("more records than the blocks can hold");
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let sim = Arc::new(SimRegion::new((PAGES * PAGE) as usize));
    let region: Arc<dyn PmRegion> = sim.clone();
    let count = usize::from(mode % 9);
    let (desc, blocks_bytes) = rest.split_at((count * 8).min(rest.len()));
    let mut extents: Vec<(u64, u64, u64)> = Vec::new(); // offset, len, log
    for d in desc.chunks_exact(8) {
        let page = 1 + u64::from(u16::from_le_bytes([d[0], d[1]])) % (PAGES - 1);
        let blocks = u64::from(d[2] % 4);
        let log = u64::from(d[3] % 3) + 1;
        extents.push((page * PAGE, extent_len_for_blocks(blocks), log));
    }
    // Headers (links by index), seals, then block bytes from the input.
    let mut fill = blocks_bytes.iter().copied().cycle();
    for (i, d) in desc.chunks_exact(8).enumerate() {
        let (at, len, log) = extents[i];
        let next = match usize::from(d[4]) {
            j if j < extents.len() => extents[j].0,
            255 => u64::from(u16::from_le_bytes([d[5], d[6]])) * 8,
            _ => 0,
        };
        if at + 40 <= PAGES * PAGE {
            sim.write(at, &header(log, len, next)).unwrap();
        }
        if d[7] & 1 != 0 && at + 52 <= PAGES * PAGE {
            let end = u64::from(u16::from_le_bytes([d[5], d[6]])) * 11;
            sim.write(at + 40, &seal(log, end)).unwrap();
        }
        if !blocks_bytes.is_empty() {
            let data_at = at + EXTENT_HEADER_BYTES;
            let n = (len.saturating_sub(EXTENT_HEADER_BYTES))
                .min(PAGES * PAGE - data_at.min(PAGES * PAGE))
                .min(2 * BLOCK_SIZE as u64);
            let bytes: Vec<u8> = fill.by_ref().take(n as usize).collect();
            let _ = sim.write(data_at, &bytes);
        }
    }
    let check = |e: tierkv::Error| match &e {
        tierkv::Error::Corruption { at, .. } => assert_eq!(at.source, region.name()),
        other => panic!("not a corruption: {other}"),
    };
    for &(at, _, log) in &extents {
        match PmLog::extents(region.as_ref(), at) {
            Ok(chain) => {
                let total: u64 = chain.iter().map(|(_, l)| *l).sum();
                assert!(total <= PAGES * PAGE, "extents overlap");
            }
            Err(e) => check(e),
        }
        if let Err(e) = PmLog::sealed_end(region.as_ref(), at) {
            check(e);
        }
        match PmLog::open_for_read(Arc::clone(&region), at, log) {
            Ok(mut r) => drain(&mut r, PAGES * PAGE / BLOCK_SIZE as u64),
            Err(e) => check(e),
        }
        match PmLog::open_prefix_for_salvage(Arc::clone(&region), at, log) {
            Ok((r, cut)) => {
                if let Some(e) = cut {
                    check(e);
                }
                let mut r = r.salvage(true);
                drain(&mut r, PAGES * PAGE / BLOCK_SIZE as u64);
            }
            Err(e) => check(e),
        }
    }
    for (first, log) in PmLog::find_chains(region.as_ref(), (1..PAGES).map(|p| p * PAGE)) {
        match PmLog::open_prefix_for_salvage(Arc::clone(&region), first, log) {
            Ok((r, _)) => drain(&mut r.salvage(true), PAGES * PAGE / BLOCK_SIZE as u64),
            Err(e) => check(e),
        }
    }
});
