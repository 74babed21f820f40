//! Integration tests of the storage layer on real backends: the PM region
//! (mmap on /dev/shm, via `open_pm_region`) under the page allocator, and
//! the fault-injecting wrapper over the POSIX file system.

use std::path::Path;
use std::sync::Arc;

use tierkv::storage::alloc::PageRun;
use tierkv::storage::alloc::{PageAllocator, PAGE_SIZE_BYTES};
use tierkv::storage::fault::{FaultFs, FaultRule, Op};
use tierkv::storage::posix::PosixFs;
use tierkv::storage::{open_pm_region, FileSystem, WriteHint};
use tierkv::{Error, PmBackend};

fn shm_dir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        if let Ok(d) = tempfile::tempdir_in("/dev/shm") {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

#[test]
fn allocator_on_an_mmap_region_survives_reopen() {
    let dir = shm_dir();
    let path = dir.path().join("pm.region");
    let len = 1024 * PAGE_SIZE_BYTES;
    let (a_run, b_run);
    {
        let region = open_pm_region(&path, len, PmBackend::Auto, true).unwrap();
        // A fresh region is all zeros: not yet formatted.
        assert!(matches!(
            PageAllocator::open(region.clone()),
            Err(Error::NotADatabase(_))
        ));
        let alloc = PageAllocator::format(region.clone()).unwrap();
        a_run = alloc.alloc(10).unwrap().unwrap();
        b_run = alloc.alloc(20).unwrap().unwrap();
        let off = alloc.page_offset(a_run.first);
        region.write(off, b"table data").unwrap();
        region.persist(off, 10).unwrap();
        // Allocated but never committed to a manifest:
        alloc.alloc(5).unwrap().unwrap();
    }
    let region = open_pm_region(&path, len, PmBackend::Mmap, false).unwrap();
    let alloc = PageAllocator::open(region.clone()).unwrap();
    assert_eq!(alloc.free_pages(), 1022 - 35);
    alloc.reconcile(&[a_run, b_run]).unwrap();
    assert_eq!(alloc.free_pages(), 1022 - 30);
    assert_eq!(
        region.slice(alloc.page_offset(a_run.first), 10).unwrap(),
        b"table data"
    );
    // A different size is refused, naming the option.
    match open_pm_region(&path, len * 2, PmBackend::Auto, true) {
        Err(Error::InvalidOptions(m)) => assert!(m.contains("pm_size_bytes"), "{m}"),
        other => panic!("{:?}", other.err()),
    }
}

#[test]
fn allocation_across_bitmap_pages() {
    // 32768 + 128 pages: two bitmap pages; runs cross the boundary between
    // the pages they describe.
    let dir = shm_dir();
    let pages = 32768 + 128;
    let region = open_pm_region(
        &dir.path().join("pm.region"),
        pages * PAGE_SIZE_BYTES,
        PmBackend::Auto,
        true,
    )
    .unwrap();
    let alloc = PageAllocator::format(region.clone()).unwrap();
    assert_eq!(alloc.data_start_page(), 3);
    let big = alloc.alloc(32760).unwrap().unwrap();
    assert_eq!(
        big,
        PageRun {
            first: 3,
            count: 32760
        }
    );
    let x = alloc.alloc(100).unwrap().unwrap();
    assert_eq!(x.first, 32763);
    assert_eq!(alloc.free_pages(), 33);
    assert!(alloc.alloc(34).unwrap().is_none());
    assert!(alloc.alloc(33).unwrap().is_some());
    assert!(alloc.alloc(1).unwrap().is_none());
    alloc.free(x).unwrap();
    drop(alloc);
    let alloc = PageAllocator::open(region).unwrap();
    assert_eq!(alloc.free_pages(), 100);
    assert!(!alloc.is_allocated(32768 + 10) && alloc.is_allocated(32762));
}

#[test]
fn fault_fs_over_posix_fills_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::new(Arc::new(PosixFs::new()));
    fs.set_capacity_bytes(Some(10_000));
    let p = dir.path().join("000001.sst");
    let mut f = fs.create(&p, WriteHint::direct()).unwrap();
    f.append(&[1; 6000]).unwrap();
    let e = f.append(&[1; 6000]).unwrap_err();
    assert!(e.is_no_space(), "{e}");
    f.sync().unwrap();
    drop(f);
    assert_eq!(fs.file_size(&p).unwrap(), 6000);
    fs.remove(&p).unwrap();
    assert_eq!(fs.used_bytes(), 0);

    let id = fs.add_rule(FaultRule::new(Op::Rename).path_contains("CURRENT"));
    let tmp = dir.path().join("CURRENT.tmp");
    fs.create(&tmp, WriteHint::default())
        .unwrap()
        .sync()
        .unwrap();
    assert!(fs.rename(&tmp, &dir.path().join("CURRENT")).is_err());
    assert_eq!(fs.rule_fired(id), 1);
    fs.rename(&tmp, &dir.path().join("CURRENT")).unwrap();
}
