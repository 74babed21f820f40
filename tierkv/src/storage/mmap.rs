//! The `mmap` PM backend: a file mapped `MAP_SHARED`, persisted with `msync`
//! (`PmBackend::Mmap`, and `PmBackend::Auto` on a disk-backed file system
//! without DAX; on a memory file system `Auto` uses the cache-line persists
//! of [`super::dax`] instead).
//!
//! [`MmapRegion`] maps a whole file (typically under /dev/shm, which is how
//! this machine emulates PM) into the address space. Stores go straight to
//! the page cache; [`PmRegion::persist`] calls `msync(MS_SYNC)` on the pages
//! covering the range. On tmpfs that survives a process crash (the pages
//! belong to the file, not the process), which is what tests and benchmarks
//! need; on a disk file system it also survives power loss once `msync`
//! returns.
//!
//! Layout: the region *is* the file, byte for byte (offset `o` of the region
//! = offset `o` of the file); the structures in it are described in
//! docs/format/pm.md. The file is exactly `len_bytes` long:
//!
//! ```text
//!  file /dev/shm/db/pm.region (len_bytes)      mapping (MAP_SHARED)
//!  +----------+----------+-----+----------+    base ──► same bytes
//!  | page 0   | page 1   | ... | page n-1 |    persist(5000, 10) = msync of
//!  +----------+----------+-----+----------+    [4096, 8192) (page-aligned)
//! ```
//!
//! Opening: [`MmapRegion::open`] creates the file if asked (sized with
//! `fallocate`, or `ftruncate` where that is unsupported), and refuses a
//! pre-existing file of another size with [`Error::InvalidOptions`] naming
//! `pm_size_bytes`. The mapping uses `MAP_POPULATE`, and a freshly created
//! region is also pre-faulted for writing (`MADV_POPULATE_WRITE`, or one
//! store per page where the kernel lacks it): the first touch of fresh
//! memory is slow in this VM (BENCH.md), so it is paid at open, not during a
//! measured run.
//!
//! Concurrency: `MmapRegion` is `Send + Sync`. Reads and writes of disjoint
//! ranges may run concurrently; the [`PmRegion`] contract (invariant 4: a
//! range is never written while it is read) is what makes [`PmRegion::slice`]
//! sound. The file must not be truncated by anyone else while it is mapped
//! (a store past the end of the file would raise SIGBUS); the engine's
//! directory lock guarantees that for its own region.
//!
//! Invariants:
//! 1. `base` is the start of a live mapping of exactly `len` bytes (rounded
//!    up to whole pages by the kernel), unmapped only in `Drop`.
//! 2. Every access is bounds-checked against `len` before touching memory;
//!    out of range is [`Error::InvalidArgument`], never a panic.

use std::fs;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};

use rustix::fs::FallocateFlags;
use rustix::io::Errno;
use rustix::mm::{MapFlags, MsyncFlags, ProtFlags};

use super::{Persistence, PmRegion};
use crate::error::{Error, Result};

/// A PM region file opened and sized, not yet mapped.
pub(crate) struct SizedFile {
    pub(crate) file: fs::File,
    pub(crate) path: PathBuf,
    pub(crate) len: usize,
    /// True if this open created (or sized) the file.
    pub(crate) created: bool,
}

/// Opens the region file at `path`, creating it with `len_bytes` if `create`
/// and it is missing or empty; any other size is an options error.
pub(crate) fn open_sized(path: &Path, len_bytes: u64, create: bool) -> Result<SizedFile> {
    if len_bytes == 0 {
        return Err(Error::InvalidOptions(
            "pm_size_bytes must be greater than 0".into(),
        ));
    }
    let len = usize::try_from(len_bytes)
        .ok()
        .filter(|&l| l <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::InvalidOptions(format!(
                "pm_size_bytes = {len_bytes} does not fit in the address space"
            ))
        })?;
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
        .map_err(|e| Error::io(format!("open PM region {}", path.display()), e))?;
    let size = file
        .metadata()
        .map_err(|e| Error::io(format!("stat PM region {}", path.display()), e))?
        .len();
    let mut created = false;
    if size == 0 && create {
        match rustix::fs::fallocate(&file, FallocateFlags::empty(), 0, len_bytes) {
            Ok(()) => {}
            Err(Errno::OPNOTSUPP) => rustix::fs::ftruncate(&file, len_bytes)
                .map_err(|e| Error::io(format!("size PM region {}", path.display()), e.into()))?,
            Err(e) => {
                return Err(Error::io(
                    format!(
                        "allocate {len_bytes} bytes for PM region {}",
                        path.display()
                    ),
                    e.into(),
                ))
            }
        }
        created = true;
    } else if size != len_bytes {
        return Err(Error::InvalidOptions(format!(
            "pm_size_bytes = {len_bytes} but the existing PM region {} is {size} bytes \
             (the size of a PM region cannot change)",
            path.display()
        )));
    }
    Ok(SizedFile {
        file,
        path: path.to_path_buf(),
        len,
        created,
    })
}

/// A live shared mapping of a whole file; unmapped on drop.
pub(crate) struct Mapping {
    base: NonNull<u8>,
    len: usize,
    name: String,
}

// SAFETY: the mapping is plain shared memory with no thread affinity; all
// access goes through bounds-checked methods, and concurrent access follows
// the PmRegion contract (disjoint ranges, or reads only).
unsafe impl Send for Mapping {}
// SAFETY: see `Send`; `&Mapping` only hands out reads of ranges nobody
// writes (contract invariant 4) and writes of disjoint ranges.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `f` read-write with `MAP_SHARED`-family `flags`.
    pub(crate) fn map(f: &SizedFile, flags: MapFlags) -> std::result::Result<Mapping, Errno> {
        // SAFETY: a fresh mapping (null hint, no MAP_FIXED) cannot alias any
        // Rust object; the file is `f.len` bytes long, so every byte of the
        // mapping is backed by the file.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                f.len,
                ProtFlags::READ | ProtFlags::WRITE,
                flags,
                &f.file,
                0,
            )?
        };
        let base = NonNull::new(p.cast::<u8>()).ok_or(Errno::NOMEM)?;
        Ok(Mapping {
            base,
            len: f.len,
            name: format!("pm:{}", f.path.display()),
        })
    }

    /// Makes every page of a fresh mapping present and writable.
    pub(crate) fn prefault(&self) {
        // SAFETY: the range is exactly our live mapping.
        let advised = unsafe {
            rustix::mm::madvise(
                self.base.as_ptr().cast(),
                self.len,
                rustix::mm::Advice::LinuxPopulateWrite,
            )
        };
        if advised.is_ok() {
            return;
        }
        let page = rustix::param::page_size();
        let mut off = 0;
        while off < self.len {
            // SAFETY: `off < len`, inside the mapping; nobody else uses the
            // region yet (it was just created), and we store back the byte we
            // read, so the contents do not change.
            unsafe {
                let p = self.base.as_ptr().add(off);
                p.write_volatile(p.read_volatile());
            }
            off += page;
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.len as u64
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Checks `[offset, offset+len)` is inside the region; returns the start.
    pub(crate) fn check(&self, offset: u64, len: usize) -> Result<usize> {
        let start = usize::try_from(offset).ok();
        match start.and_then(|s| s.checked_add(len).map(|e| (s, e))) {
            Some((s, e)) if e <= self.len => Ok(s),
            _ => Err(Error::InvalidArgument(format!(
                "{}: access of {len} bytes at offset {offset} beyond region of {} bytes",
                self.name, self.len
            ))),
        }
    }

    pub(crate) fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let at = self.check(offset, data.len())?;
        // SAFETY: `at..at+len` is inside the mapping (checked). `copy`
        // (memmove) is used because `data` may itself be a slice of this
        // region. The PmRegion contract guarantees nobody reads or writes
        // this range concurrently.
        unsafe { std::ptr::copy(data.as_ptr(), self.base().add(at), data.len()) };
        Ok(())
    }

    pub(crate) fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        buf.copy_from_slice(self.slice(offset, buf.len())?);
        Ok(())
    }

    pub(crate) fn slice(&self, offset: u64, len: usize) -> Result<&[u8]> {
        let at = self.check(offset, len)?;
        // SAFETY: inside the live mapping (checked), which outlives `&self`;
        // the PmRegion contract guarantees no writer touches this range while
        // the borrow lives.
        Ok(unsafe { std::slice::from_raw_parts(self.base().add(at), len) })
    }

    /// Atomically stores an aligned 8-byte word (PmRegion contract 5).
    pub(crate) fn store_u64(&self, offset: u64, value: u64) -> Result<()> {
        let at = self.check(offset, 8)?;
        // SAFETY: in the mapping (checked); the mapping is page-aligned and
        // the caller checked `offset % 8 == 0`, so the word is aligned; link
        // words are only ever accessed atomically (contract 5).
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.base().add(at).cast()) }
            .store(value, Ordering::Release);
        Ok(())
    }

    /// Atomically loads an aligned 8-byte word.
    pub(crate) fn load_u64(&self, offset: u64) -> Result<u64> {
        let at = self.check(offset, 8)?;
        // SAFETY: as in `store_u64`.
        Ok(
            unsafe { std::sync::atomic::AtomicU64::from_ptr(self.base().add(at).cast()) }
                .load(Ordering::Acquire),
        )
    }

    /// `msync(MS_SYNC)` of the pages covering `[offset, offset+len)`.
    pub(crate) fn msync(&self, offset: u64, len: usize) -> Result<()> {
        let at = self.check(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let page = rustix::param::page_size();
        let start = at / page * page;
        let end = (at + len).div_ceil(page) * page;
        // SAFETY: `start` is page-aligned and `[start, end)` lies within the
        // mapping's pages (`end` ≤ `len` rounded up to a page, which the
        // kernel maps as a whole page).
        unsafe { rustix::mm::msync(self.base().add(start).cast(), end - start, MsyncFlags::SYNC) }
            .map_err(|e| {
                Error::io(
                    format!("msync {} bytes {start}..{end}", self.name),
                    e.into(),
                )
            })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base..base+len` is the mapping created in `map`; no
        // borrow of it can outlive `self` (slices borrow `&self`).
        if let Err(e) = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) } {
            log::warn!("{}: munmap failed: {e}", self.name);
        }
    }
}

/// A PM region backed by a shared file mapping, persisted with `msync`.
pub struct MmapRegion {
    map: Mapping,
    created: bool,
}

impl MmapRegion {
    /// Opens (and with `create`, creates) the region file at `path`, which
    /// must be exactly `len_bytes` long, and maps it.
    ///
    /// Errors: a missing file without `create` is [`Error::Io`]; an existing
    /// file of another size is [`Error::InvalidOptions`] naming
    /// `pm_size_bytes` and both sizes.
    pub fn open(path: &Path, len_bytes: u64, create: bool) -> Result<MmapRegion> {
        let f = open_sized(path, len_bytes, create)?;
        Self::from_sized(f)
    }

    pub(crate) fn from_sized(f: SizedFile) -> Result<MmapRegion> {
        let map = Mapping::map(&f, MapFlags::SHARED | MapFlags::POPULATE)
            .map_err(|e| Error::io(format!("mmap PM region {}", f.path.display()), e.into()))?;
        if f.created {
            map.prefault();
        }
        Ok(MmapRegion {
            map,
            created: f.created,
        })
    }

    /// True if this open created the file (its contents are all zeros).
    pub fn created(&self) -> bool {
        self.created
    }
}

impl PmRegion for MmapRegion {
    fn len(&self) -> u64 {
        self.map.len()
    }

    fn name(&self) -> &str {
        self.map.name()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.map.write(offset, data)
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.map.read(offset, buf)
    }

    fn slice(&self, offset: u64, len: usize) -> Result<&[u8]> {
        self.map.slice(offset, len)
    }

    fn persist(&self, offset: u64, len: usize) -> Result<()> {
        self.map.msync(offset, len)?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn fence(&self) {
        fence(Ordering::SeqCst);
    }

    fn persistence(&self) -> Persistence {
        Persistence::Msync
    }

    fn store_u64(&self, offset: u64, value: u64) -> Result<()> {
        super::check_word(self, offset)?;
        self.map.store_u64(offset, value)
    }

    fn load_u64(&self, offset: u64) -> Result<u64> {
        super::check_word(self, offset)?;
        self.map.load_u64(offset)
    }
}

/// A directory for region files in tests: /dev/shm when it exists.
#[cfg(test)]
pub(crate) fn test_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn create_write_persist_reopen() {
        let dir = test_dir();
        let p = dir.path().join("pm.region");
        let len = 3 * 4096 + 100;
        {
            let r = MmapRegion::open(&p, len, true).unwrap();
            assert!(r.created());
            assert_eq!(r.len(), len);
            assert_eq!(r.name(), format!("pm:{}", p.display()));
            assert_eq!(r.slice(0, 16).unwrap(), &[0; 16]);
            r.write(5000, b"hello pm").unwrap();
            r.persist(5000, 8).unwrap();
            r.write(len - 4, b"tail").unwrap();
            r.persist(len - 4, 4).unwrap();
            r.persist(0, 0).unwrap();
            r.fence();
        }
        assert_eq!(fs::metadata(&p).unwrap().len(), len);
        let r = MmapRegion::open(&p, len, false).unwrap();
        assert!(!r.created());
        let mut b = [0u8; 8];
        r.read(5000, &mut b).unwrap();
        assert_eq!(&b, b"hello pm");
        assert_eq!(r.slice(len - 4, 4).unwrap(), b"tail");
    }

    #[test]
    fn out_of_range_is_invalid_argument() {
        let dir = test_dir();
        let r = MmapRegion::open(&dir.path().join("r"), 4096, true).unwrap();
        for (off, n) in [(4090u64, 7usize), (u64::MAX, 1), (4097, 0), (0, usize::MAX)] {
            if n <= 8 {
                assert!(matches!(
                    r.write(off, &vec![0; n]),
                    Err(Error::InvalidArgument(_))
                ));
            }
            assert!(matches!(r.slice(off, n), Err(Error::InvalidArgument(_))));
            assert!(matches!(r.persist(off, n), Err(Error::InvalidArgument(_))));
        }
        assert!(r.slice(4096, 0).unwrap().is_empty());
    }

    #[test]
    fn size_mismatch_names_the_option() {
        let dir = test_dir();
        let p = dir.path().join("r");
        drop(MmapRegion::open(&p, 8192, true).unwrap());
        match MmapRegion::open(&p, 4096, true) {
            Err(Error::InvalidOptions(m)) => {
                assert!(
                    m.contains("pm_size_bytes") && m.contains("8192") && m.contains("4096"),
                    "{m}"
                )
            }
            other => panic!("expected InvalidOptions, got {:?}", other.err()),
        }
        assert!(matches!(
            MmapRegion::open(&dir.path().join("missing"), 4096, false),
            Err(Error::Io { .. })
        ));
        assert!(matches!(
            MmapRegion::open(&dir.path().join("zero"), 0, true),
            Err(Error::InvalidOptions(_))
        ));
    }

    #[test]
    fn survives_drop_without_persist_on_tmpfs_and_concurrent_disjoint_writes() {
        let dir = test_dir();
        let p = dir.path().join("r");
        let r = std::sync::Arc::new(MmapRegion::open(&p, 64 * 1024, true).unwrap());
        let hs: Vec<_> = (0..4u8)
            .map(|t| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for i in 0..256u64 {
                        let off = u64::from(t) * 16384 + i * 64;
                        r.write(off, &[t + 1; 64]).unwrap();
                        r.persist(off, 64).unwrap();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        drop(r);
        let r = MmapRegion::open(&p, 64 * 1024, false).unwrap();
        for t in 0..4u8 {
            assert!(r
                .slice(u64::from(t) * 16384, 16384)
                .unwrap()
                .iter()
                .all(|&b| b == t + 1));
        }
    }
}
