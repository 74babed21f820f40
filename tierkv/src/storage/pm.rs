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

use super::alloc::{identity_from_head, PageAllocator, PageRun, RegionIdentity, IDENTITY_END};
use super::{open_pm_region, PmBackend, PmRegion};
use crate::error::{Error, Result};

/// File name of the PM region inside `pm_dir`.
pub const REGION_FILE_NAME: &str = "pm.region";

/// File name of the PM directory's lock (it covers the region file).
pub const LOCK_FILE_NAME: &str = "LOCK";

/// The exclusive hold of a PM directory by one open database: an advisory
/// `flock` on `pm_dir/LOCK`, as `LOCK` is on the database directory, so
/// two databases (in one process or several) never run two page
/// allocators over the same region. The file holds the holder's database
/// directory and process id, so that a refused opener can name them.
/// Released when dropped (or when the process dies).
pub struct PmLock {
    _file: std::fs::File,
}

impl PmLock {
    /// Takes the lock of `pm_dir` (created if missing) for the database in
    /// `db_dir`; `Error::Locked` naming the holder if another has it.
    pub fn acquire(pm_dir: &Path, db_dir: &Path) -> Result<PmLock> {
        use std::io::{Read, Seek, Write};
        std::fs::create_dir_all(pm_dir)
            .map_err(|e| Error::io(format!("create PM directory {}", pm_dir.display()), e))?;
        let path = pm_dir.join(LOCK_FILE_NAME);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("open PM lock {}", path.display()), e))?;
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                let mut holder = String::new();
                let _ = f.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(Error::Locked(format!(
                    "the PM directory {} is in use by another open database ({})",
                    pm_dir.display(),
                    if holder.is_empty() {
                        "holder unknown"
                    } else {
                        holder
                    }
                )));
            }
            Err(e) => {
                return Err(Error::io(format!("lock {}", path.display()), e.into()));
            }
        }
        // Who holds it, for the next opener's refusal (advice only: the
        // lock is the flock, not these bytes).
        let who = format!(
            "database {} (pid {})\n",
            db_dir.display(),
            std::process::id()
        );
        let _ = f
            .set_len(0)
            .and_then(|()| f.rewind())
            .and_then(|()| f.write_all(who.as_bytes()));
        Ok(PmLock { _file: f })
    }
}

/// The offset of the first non-zero byte of `region`, if any.
pub(crate) fn first_non_zero(region: &dyn PmRegion) -> Result<Option<u64>> {
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

/// The identity block of the region file in `pm_dir`, read without
/// writing anything: `Ok(None)` when there is no region file, `Ok(Some(None))`
/// when the file carries no identity (blank, never formatted, or formatted
/// before identities existed); damage is `Error::Corruption`.
pub fn probe_dir(pm_dir: &Path) -> Result<Option<Option<RegionIdentity>>> {
    let path = pm_dir.join(REGION_FILE_NAME);
    let len = match std::fs::metadata(&path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("stat PM region {}", path.display()), e)),
    };
    let mut head = vec![0u8; IDENTITY_END.min(usize::try_from(len).unwrap_or(usize::MAX))];
    let f = std::fs::File::open(&path)
        .map_err(|e| Error::io(format!("open PM region {}", path.display()), e))?;
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut head, 0)
        .map_err(|e| Error::io(format!("read PM region {}", path.display()), e))?;
    Ok(Some(identity_from_head(
        &format!("pm:{}", path.display()),
        &head,
    )?))
}

/// The offset of the first non-zero byte of the region file in `pm_dir`,
/// read without mapping or writing it (`None`: all zero, or no file).
pub fn first_non_zero_in_dir(pm_dir: &Path) -> Result<Option<u64>> {
    let path = pm_dir.join(REGION_FILE_NAME);
    let f = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("open PM region {}", path.display()), e)),
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    loop {
        let n = std::os::unix::fs::FileExt::read_at(&f, &mut buf, at)
            .map_err(|e| Error::io(format!("read PM region {}", path.display()), e))?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(i) = buf[..n].iter().position(|&b| b != 0) {
            return Ok(Some(at + i as u64));
        }
        at += n as u64;
    }
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
