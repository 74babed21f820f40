//! The PM tier of an open database: the mapped region and its persistent
//! page allocator. What lives in the pages — WAL extents (`wal::pm`), a
//! design's tables and arenas (`design/`) — is owned by the layers above.
//!
//! Ownership of pages at open: the allocator's persisted bitmap may list
//! pages that work interrupted by a crash allocated and never recorded.
//! The engine collects every run its MANIFEST and its design reference
//! (tables, live WAL extents, a design's declared runs) and calls
//! [`PmTier::reconcile`] with them before anything allocates: every other
//! page goes back.
//!
//! Concurrency: `PmTier` is `Send + Sync`; the allocator serialises its own
//! updates, and the region follows the [`PmRegion`] contract.

use std::path::Path;
use std::sync::Arc;

use super::alloc::{PageAllocator, PageRun};
use super::{open_pm_region, PmBackend, PmRegion};
use crate::error::{Error, Result};

/// File name of the PM region inside `pm_dir`.
pub const REGION_FILE_NAME: &str = "pm.region";

/// The offset of the first non-zero byte of `region`, if any.
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

/// The PM tier: one region and its page allocator.
pub struct PmTier {
    region: Arc<dyn PmRegion>,
    alloc: Arc<PageAllocator>,
}

impl PmTier {
    /// Maps the region file `pm.region` in `dir` (created at `size_bytes`
    /// if missing) with `backend`, and opens its allocator as
    /// [`PmTier::open`] does.
    pub fn open_dir(
        dir: &Path,
        size_bytes: u64,
        backend: PmBackend,
        db_exists: bool,
    ) -> Result<PmTier> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("create PM directory {}", dir.display()), e))?;
        let region = open_pm_region(&dir.join(REGION_FILE_NAME), size_bytes, backend, true)?;
        Self::open(region, db_exists)
    }

    /// Opens the allocator of `region`, formatting it if it was never
    /// formatted. For an existing database (`db_exists`) a region whose
    /// superblock is blank but which holds any data is never formatted:
    /// that is a damaged superblock, and formatting would lose what the
    /// region holds (`Corruption` at offset 0; `Db::repair` rebuilds such a
    /// database).
    pub fn open(region: Arc<dyn PmRegion>, db_exists: bool) -> Result<PmTier> {
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
        Ok(PmTier {
            region,
            alloc: Arc::new(alloc),
        })
    }

    /// The region.
    pub fn region(&self) -> &Arc<dyn PmRegion> {
        &self.region
    }

    /// The page allocator.
    pub fn allocator(&self) -> &Arc<PageAllocator> {
        &self.alloc
    }

    /// Frees a run of pages.
    pub fn free_pages(&self, run: PageRun) -> Result<()> {
        self.alloc.free(run)
    }

    /// Rebuilds the allocator's bitmap from the runs the database
    /// references (`live`): every other data page is freed.
    pub fn reconcile(&self, live: &[PageRun]) -> Result<()> {
        self.alloc.reconcile(live)
    }

    /// The pages covering `len_bytes` at byte `offset`.
    pub fn run_of(&self, offset: u64, len_bytes: u64) -> PageRun {
        let page = self.alloc.page_size();
        PageRun {
            first: offset / page,
            count: len_bytes.div_ceil(page),
        }
    }
}
