//! Fuzzes the RowTable decoder (`rowtable::read_header`, `RowTable::open`)
//! and every accessor a validated row serves: arbitrary bytes in the
//! metadata run and the value pages never panic nor read outside the region
//! (the accessors read through raw pointers that only `open`'s checks keep
//! in bounds: run it under the address sanitizer, cargo fuzz's default);
//! every error is a `Corruption` naming the region.
//!
//! The first byte picks the mode, so the fuzzer gets past the checksums:
//! bit 0 rewrites the header checksum and bit 1 the metadata checksum to
//! match the (fuzzed) bytes, bit 2 rewrites every extent's data checksum,
//! bit 3 asks `open` to verify the data. Without bit 4 the rest is laid
//! over the region from page 2 (the metadata run) on; with it, the rest
//! describes entries that `rowtable::build` writes as a real row, and then
//! (offset, XOR) pairs that damage its metadata run — so the structure
//! checks see rows that are valid but for a few bytes.

#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use tierkv::design::container::rowtable::{self, BuildParams, PageSource, Probe, RowTable};
use tierkv::iter::TableReader;
use tierkv::key::{Kind, MAX_SEQNO};
use tierkv::memtable::MemTable;
use tierkv::storage::alloc::PageRun;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;

const PAGE: u64 = 4096;
const REGION: usize = 16 * 4096;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let sim = Arc::new(SimRegion::new(REGION));
    let region: Arc<dyn PmRegion> = sim.clone();
    let m = if mode & 16 == 0 {
        let n = rest.len().min(REGION - 2 * PAGE as usize);
        sim.write(2 * PAGE, &rest[..n]).unwrap();
        2 * PAGE
    } else {
        match build_then_damage(&sim, &region, rest) {
            Some(m) => m,
            None => return,
        }
    };
    let meta_page = m / PAGE;
    // Fix the checksums up, as the mode asks.
    let h = sim.slice(m, rowtable::HEADER_BYTES).unwrap().to_vec();
    let meta_len = rowtable::HEADER_BYTES as u64
        + rowtable::EXTENT_BYTES as u64 * u64::from(u32_at(&h, 48))
        + rowtable::ELEMENT_BYTES as u64 * u64::from(u32_at(&h, 40))
        + u64::from(u32_at(&h, 52));
    if mode & 2 != 0 && m + meta_len <= REGION as u64 {
        let body = sim
            .slice(
                m + rowtable::HEADER_BYTES as u64,
                (meta_len - rowtable::HEADER_BYTES as u64) as usize,
            )
            .unwrap()
            .to_vec();
        sim.write(m + 64, &tierkv::coding::crc32c(&body).to_le_bytes())
            .unwrap();
    }
    if mode & 4 != 0 {
        let x = u32_at(&h, 48) as u64;
        for i in 0..x.min(64) {
            let at = m + rowtable::HEADER_BYTES as u64 + i * rowtable::EXTENT_BYTES as u64;
            let Ok(e) = sim.slice(at, rowtable::EXTENT_BYTES) else {
                break;
            };
            let e = e.to_vec();
            let first = u64::from_le_bytes(e[0..8].try_into().unwrap());
            let used = u64::from(u32_at(&e, 16));
            let Some(start) = first.checked_mul(PAGE) else {
                continue;
            };
            if let Ok(d) = sim.slice(start, used as usize) {
                let c = tierkv::coding::crc32c(d);
                sim.write(at + 20, &c.to_le_bytes()).unwrap();
            }
        }
    }
    if mode & 1 != 0 {
        let h = sim.slice(m, 72).unwrap().to_vec();
        sim.write(m + 72, &tierkv::coding::crc32c(&h).to_le_bytes())
            .unwrap();
    }

    let (expect, run) = match rowtable::read_header(region.as_ref(), meta_page) {
        Ok(x) => x,
        Err(e) => {
            assert!(e.is_corruption(), "{e}");
            return;
        }
    };
    // The row owns every extent it lists (so `verify_data` checks them all).
    let mut live = vec![run];
    if let Ok(probe) = RowTable::open(Arc::clone(&region), run, expect, &[], false) {
        live.extend(probe.extents().iter().map(|e| e.run));
    }
    let row = match RowTable::open(Arc::clone(&region), run, expect, &live, mode & 8 != 0) {
        Ok(r) => Arc::new(r),
        Err(e) => {
            assert!(e.is_corruption(), "{e}");
            assert_eq!(
                match &e {
                    tierkv::Error::Corruption { at, .. } => at.source.as_str(),
                    _ => "",
                },
                region.name()
            );
            return;
        }
    };
    // Every accessor of every element.
    let len = row.len();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for i in 0..len.min(4096) {
        let ik = row.ikey(i).to_vec();
        let _ = row.user_key(i);
        let _ = row.value(i);
        let _ = row.value_len(i);
        let _ = row.prefix(i);
        let _ = row.fwd(i);
        let _ = row.found(i);
        let (lo, hi) = row.hint_window(i);
        assert!(lo <= hi, "hint window {lo}..{hi} of element {i}");
        if keys.len() < 32 {
            keys.push(ik);
        }
    }
    let _ = row.hint_window(len);
    for k in &keys {
        let p = Probe::internal(k);
        let j = row.lower_bound(&p, 0, len);
        assert!(j <= len);
        let _ = row.lower_bound_user(tierkv::key::user_key(k));
        let _ = row.get(tierkv::key::user_key(k), MAX_SEQNO);
        let _ = row.get(tierkv::key::user_key(k), 0);
    }
    let mut it = Arc::clone(&row).iter(false);
    it.seek_to_first();
    let mut steps = 0;
    while it.valid() && steps < 10_000 {
        let _ = (it.key(), it.value());
        it.next();
        steps += 1;
    }
    it.seek_to_last();
    while it.valid() && steps < 20_000 {
        let _ = (it.key(), it.value());
        it.prev();
        steps += 1;
    }
    for k in &keys {
        it.seek(k);
    }
    assert!(it.status().is_ok());
});

/// Pages from page 2 on, one after the other.
struct Bump(std::sync::Mutex<u64>);

impl PageSource for Bump {
    fn alloc(&self, want: u64, min: u64) -> tierkv::Result<PageRun> {
        let mut next = self.0.lock().unwrap();
        let left = (REGION as u64 / PAGE).saturating_sub(*next);
        let count = want.min(left);
        if count < min || count == 0 {
            return Err(tierkv::Error::InvalidArgument("region full".into()));
        }
        let run = PageRun {
            first: *next,
            count,
        };
        *next += count;
        Ok(run)
    }
    fn free(&self, _run: PageRun) -> tierkv::Result<()> {
        Ok(())
    }
}

/// Builds a row of the entries `input` describes (key length and byte,
/// value length and byte, kind, each from one input byte), then applies
/// the (u16 offset, u8 XOR) pairs that follow to its metadata run. Returns
/// the metadata run's offset.
fn build_then_damage(sim: &SimRegion, region: &Arc<dyn PmRegion>, input: &[u8]) -> Option<u64> {
    let (&n, rest) = input.split_first()?;
    let entries = usize::from(n % 64) + 1;
    let (desc, damage) = rest.split_at((entries * 2).min(rest.len()));
    let mem = Arc::new(MemTable::new(0));
    for (i, d) in desc.chunks(2).enumerate() {
        let a = d[0];
        let b = d.get(1).copied().unwrap_or(0);
        let key = vec![b'a' + a % 26; 1 + usize::from(a % 11)];
        let key = [key, (i as u32).to_be_bytes().to_vec()].concat();
        let value = vec![b; usize::from(b % 7) * 97];
        let kind = if b % 5 == 0 { Kind::Delete } else { Kind::Put };
        mem.add(
            1 + i as u64,
            kind,
            &key,
            if kind == Kind::Put { &value } else { &[] },
        );
    }
    let pages = Bump(std::sync::Mutex::new(2));
    let built = rowtable::build(
        &BuildParams {
            region,
            pages: &pages,
            extent_pages: 1 + u64::from(n % 3),
            pred: None,
            entries_hint: entries,
            key_bytes_hint: 0,
        },
        &mut mem.iter(),
    )
    .ok()?;
    let meta = built.runs[0];
    let m = meta.first * PAGE;
    let len = meta.count * PAGE;
    for d in damage.chunks_exact(3) {
        let off = u64::from(u16::from_le_bytes([d[0], d[1]])) % len;
        let _ = sim.corrupt(m + off, d[2]);
    }
    Some(m)
}
