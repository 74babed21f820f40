//! Fuzzes the PM page allocator's decoder (`PageAllocator::open`: the
//! superblock and the bitmap, the free list of the PM tier) and what an
//! opened allocator does with it: arbitrary bytes never panic; an error is
//! `Corruption` (or `NotADatabase` for a zero magic or another version);
//! an allocator that opens keeps its accounting under alloc / free /
//! reconcile driven by the rest of the input, and reopens to the same
//! bitmap.
//!
//! The first byte picks the mode: bit 0 formats the region first and lays
//! the input over the bitmap only (past the superblock's checksum), bit 1
//! rewrites the superblock checksum after laying the input over page 0.

#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use tierkv::storage::alloc::{PageAllocator, PageRun};
use tierkv::storage::sim::SimRegion;
use tierkv::storage::PmRegion;
use tierkv::Error;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    // 3 to 200 pages: the bitmap of a region this small is one page.
    let pages = 3 + usize::from(rest.first().copied().unwrap_or(0)) % 198;
    let sim = Arc::new(SimRegion::new(pages * 4096));
    let region: Arc<dyn PmRegion> = sim.clone();
    if mode & 1 != 0 {
        PageAllocator::format(Arc::clone(&region)).unwrap();
        let n = rest.len().min(4096);
        sim.write(4096, &rest[..n]).unwrap();
    } else {
        let n = rest.len().min(2 * 4096);
        sim.write(0, &rest[..n]).unwrap();
        if mode & 2 != 0 {
            let sb = sim.slice(0, 40).unwrap().to_vec();
            sim.write(40, &tierkv::coding::crc32c(&sb).to_le_bytes())
                .unwrap();
        }
    }
    let a = match PageAllocator::open(Arc::clone(&region)) {
        Ok(a) => a,
        Err(Error::Corruption { at, .. }) => {
            assert_eq!(at.source, region.name());
            return;
        }
        Err(Error::NotADatabase(_)) => return,
        Err(e) => panic!("open: {e}"),
    };
    let total = a.total_pages();
    let start = a.data_start_page();
    let count_free =
        |a: &PageAllocator| (start..total).filter(|&p| !a.is_allocated(p)).count() as u64;
    assert_eq!(a.free_pages(), count_free(&a), "free count after open");
    let mut runs: Vec<PageRun> = Vec::new();
    for chunk in rest.chunks(3).skip(1).take(200) {
        match chunk[0] % 3 {
            0 => {
                let n = u64::from(chunk.get(1).copied().unwrap_or(1)) % 16;
                match a.alloc(n) {
                    Ok(Some(r)) => {
                        assert!(r.first >= start && r.first + r.count <= total);
                        runs.push(r);
                    }
                    Ok(None) => {}
                    Err(e) => assert!(n == 0, "alloc({n}): {e}"),
                }
            }
            1 if !runs.is_empty() => {
                let r = runs.swap_remove(usize::from(chunk[1 % chunk.len()]) % runs.len());
                a.free(r).unwrap();
            }
            _ => {
                a.reconcile(&runs).unwrap();
            }
        }
        assert_eq!(a.free_pages(), count_free(&a), "free count");
        for r in &runs {
            assert!((r.first..r.first + r.count).all(|p| a.is_allocated(p)));
        }
    }
    // The bitmap is persisted: a reopen sees the same allocation.
    let b = PageAllocator::open(Arc::clone(&region)).expect("reopen");
    for p in 0..total {
        if p >= start {
            assert_eq!(
                a.is_allocated(p),
                b.is_allocated(p),
                "page {p} after reopen"
            );
        }
    }
});
