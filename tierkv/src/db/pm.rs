//! The PM tier of an open database: the mapped region, its page allocator,
//! and the WALs placed in it.
//!
//! Ownership of PM pages (what `reconcile` rebuilds at open): the pages of
//! every PM table in the current version, plus the extents of every PM WAL
//! the manifest lists as live. Anything else was allocated by work a crash
//! interrupted before its manifest edit, and is reclaimed.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::options::Options;
use crate::storage::alloc::PageAllocator;
use crate::storage::{open_pm_region, FileSystem, PmRegion};
use crate::version::edit::PageRun;
use crate::version::set::VersionSet;
use crate::wal::{self, ExtentSource, PmLog, PmSink, PmSource};

/// File name of the PM region inside `pm_dir`.
pub const REGION_FILE_NAME: &str = "pm.region";

/// The PM tier.
pub struct PmTier {
    region: Arc<dyn PmRegion>,
    alloc: Arc<PageAllocator>,
    source: Arc<dyn ExtentSource>,
    extent_len_bytes: u64,
}

/// Hands WAL extents out of the page allocator.
struct AllocExtents(Arc<PageAllocator>);

impl ExtentSource for AllocExtents {
    fn alloc_extent(&self, len_bytes: u64) -> Result<Option<u64>> {
        let pages = len_bytes.div_ceil(self.0.page_size());
        Ok(self
            .0
            .alloc(pages)?
            .map(|run| self.0.page_offset(run.first)))
    }
    fn free_extent(&self, offset: u64, len_bytes: u64) -> Result<()> {
        self.0.free(run_of(&self.0, offset, len_bytes))
    }
}

/// The offset of the first non-zero byte of the region, if any.
fn first_non_zero(region: &dyn PmRegion) -> Result<Option<u64>> {
    const CHUNK: u64 = 1 << 20;
    let mut at = 0;
    while at < region.len() {
        let n = CHUNK.min(region.len() - at);
        let bytes = region.slice(at, n as usize)?;
        if let Some(i) = bytes.iter().position(|&b| b != 0) {
            return Ok(Some(at + i as u64));
        }
        at += n;
    }
    Ok(None)
}

fn run_of(alloc: &PageAllocator, offset: u64, len_bytes: u64) -> PageRun {
    PageRun {
        first: offset / alloc.page_size(),
        count: len_bytes.div_ceil(alloc.page_size()),
    }
}

impl PmTier {
    /// Maps (or takes the injected) region and opens its allocator,
    /// formatting a region that was never formatted. For an existing
    /// database (`db_exists`) a region whose superblock is blank but which
    /// holds any data is never formatted: that is a damaged superblock, and
    /// formatting would lose what the region holds (`Corruption`).
    pub fn open(opts: &Options, db_exists: bool) -> Result<PmTier> {
        let region = match (&opts.pm_region, &opts.pm_dir) {
            (Some(r), _) => Arc::clone(r),
            (None, Some(dir)) => {
                crate::storage::posix::PosixFs::new().create_dir_all(dir)?;
                open_pm_region(
                    &dir.join(REGION_FILE_NAME),
                    opts.pm_size_bytes,
                    opts.pm_backend,
                    true,
                )?
            }
            (None, None) => {
                return Err(Error::InvalidOptions(
                    "a PM tier needs `pm_dir` (or an injected `pm_region`)".into(),
                ))
            }
        };
        let alloc = match PageAllocator::open(Arc::clone(&region)) {
            Ok(a) => a,
            Err(Error::NotADatabase(why)) => {
                if db_exists {
                    if let Some(at) = first_non_zero(region.as_ref())? {
                        return Err(Error::corruption(
                            region.name(),
                            0,
                            format!(
                                "{why}, yet the region of an existing database holds data \
                                 (a non-zero byte at offset {at}): the allocator superblock is \
                                 damaged; refusing to format it (Db::repair rebuilds the \
                                 database from what the region and the directory hold)"
                            ),
                        ));
                    }
                }
                log::info!("{}: formatting PM region ({why})", region.name());
                PageAllocator::format(Arc::clone(&region))?
            }
            Err(e) => return Err(e),
        };
        let alloc = Arc::new(alloc);
        // WAL extents: about 1/64 of the region, between 4 and 128 log blocks.
        let blocks = (region.len() / 64 / wal::BLOCK_SIZE as u64).clamp(4, 128);
        Ok(PmTier {
            source: Arc::new(AllocExtents(Arc::clone(&alloc))),
            region,
            alloc,
            extent_len_bytes: wal::pm::extent_len_for_blocks(blocks),
        })
    }

    /// The region.
    pub fn region(&self) -> &Arc<dyn PmRegion> {
        &self.region
    }

    /// Bytes of one PM WAL extent (a WAL grows by this much at a time).
    pub fn wal_extent_len_bytes(&self) -> u64 {
        self.extent_len_bytes
    }

    /// The page allocator (designs allocate their PM tables from it).
    pub fn allocator(&self) -> &Arc<PageAllocator> {
        &self.alloc
    }

    /// Creates PM WAL `n`; returns its writer and first extent offset.
    pub fn create_log(&self, n: u64) -> Result<(wal::Writer<PmSink>, u64)> {
        let sink = PmLog::create(
            Arc::clone(&self.region),
            Arc::clone(&self.source),
            n,
            self.extent_len_bytes,
        )?;
        let first = sink.first_extent();
        Ok((wal::Writer::new(sink, n), first))
    }

    /// Opens PM WAL `n` for replay.
    pub fn open_log(&self, first_extent: u64, n: u64) -> Result<wal::Reader<PmSource>> {
        PmLog::open_for_read(Arc::clone(&self.region), first_extent, n)
    }

    /// Frees every extent of a PM WAL whose data is in tables.
    pub fn free_log(&self, first_extent: u64) -> Result<()> {
        for (offset, len) in PmLog::extents(self.region.as_ref(), first_extent)? {
            self.alloc.free(run_of(&self.alloc, offset, len))?;
        }
        Ok(())
    }

    /// Frees a table's pages.
    pub fn free_pages(&self, run: PageRun) -> Result<()> {
        self.alloc.free(run)
    }

    /// Rebuilds the allocator's bitmap from what the manifest references.
    pub fn reconcile(&self, versions: &VersionSet) -> Result<()> {
        let mut live: Vec<PageRun> = Vec::new();
        for v in versions.current_all() {
            for t in v.levels.iter().flatten() {
                live.extend(t.meta.pm_pages.iter().copied());
            }
        }
        for w in versions.pm_wals() {
            for (offset, len) in PmLog::extents(self.region.as_ref(), w.first_extent)? {
                live.push(run_of(&self.alloc, offset, len));
            }
        }
        self.alloc.reconcile(&live)
    }
}
