//! The storage seam: every byte of I/O in the engine goes through
//! [`FileSystem`] (the SSD tier) or [`PmRegion`] (the PM tier), never through
//! `std::fs` or a raw mapping, so that every test can run on a crashable file
//! system, a PM simulator and injected errors.
//!
//! SSD backends: [`posix`] (real files, optional `O_DIRECT` for flush and
//! compaction output), [`mem`] (in memory; `crash()` drops whatever was not
//! synced), [`fault`] (wraps another and injects errors by rule).
//!
//! PM backends: [`dax`] (MAP_SYNC on a DAX file system, or a plain shared
//! mapping of a file on a memory file system such as /dev/shm; persist =
//! clwb/clflushopt + sfence, no system call), [`mmap`] (a file on a
//! disk-backed file system without DAX; persist = msync), [`sim`] (tests: a
//! volatile and a durable image; only persisted cache lines survive
//! `crash()`). [`Persistence`] names what a region's persist does.
//! [`alloc`] is the persistent 4 KB page allocator on top of a region.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Result;

pub mod alloc;
pub mod dax;
pub mod fault;
pub mod limiter;
pub mod mem;
pub mod mmap;
pub mod pm;
pub mod posix;
pub mod sim;

pub use dax::open_pm_region;

/// How a file is opened for writing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteHint {
    /// Bypass the page cache (`O_DIRECT`) where the backend supports it.
    /// Used for flush and compaction output when `Options::use_direct_io_for_flush_and_compaction`.
    pub direct: bool,
    /// Start the write-back of every `bytes_per_sync` appended bytes
    /// (`Options::bytes_per_sync`); 0: never. Advisory: only
    /// [`WritableFile::sync`] makes data durable, and reports its errors.
    pub bytes_per_sync: u64,
}

impl WriteHint {
    /// `O_DIRECT` output, nothing else asked.
    pub fn direct() -> WriteHint {
        WriteHint {
            direct: true,
            ..WriteHint::default()
        }
    }
}

/// The SSD tier: a directory tree of files.
///
/// Contract (what the crashable backend enforces and the engine relies on):
/// 1. Appended data is durable only after [`WritableFile::sync`] returns.
/// 2. A new file's *name*, a rename and a removal are durable only after
///    [`FileSystem::sync_dir`] of the parent directory returns.
/// 3. [`FileSystem::rename`] atomically replaces the destination.
pub trait FileSystem: Send + Sync + 'static {
    /// Creates (or truncates) `path` for appending.
    fn create(&self, path: &Path, hint: WriteHint) -> Result<Box<dyn WritableFile>>;
    /// Opens an existing file for positional reads.
    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>>;
    /// Reads a whole file (manifests, CURRENT, small files).
    fn read_all(&self, path: &Path) -> Result<Vec<u8>>;
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> Result<()>;
    /// True if `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// File names (not paths) in a directory.
    fn list(&self, dir: &Path) -> Result<Vec<String>>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> Result<()>;
    /// Size of a file in bytes.
    fn file_size(&self, path: &Path) -> Result<u64>;
    /// Takes an exclusive advisory lock on `path` (created if missing);
    /// `Error::Locked` if another holder has it. Dropping the guard unlocks.
    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>>;
    /// Free bytes on the device holding `dir` (`u64::MAX` if unknown).
    fn free_space(&self, dir: &Path) -> Result<u64>;
    /// Makes `to` a hard link to the existing file `from` (checkpoints share
    /// immutable SSTs this way). `Ok(false)` when the backend or the file
    /// system cannot (another device, no hard links): the caller copies
    /// instead. Like a creation, the new name is durable after
    /// [`FileSystem::sync_dir`]. The default cannot.
    fn link(&self, from: &Path, to: &Path) -> Result<bool> {
        let _ = (from, to);
        Ok(false)
    }
    /// Keeps the file `path`, which nothing will read again, under the name
    /// `to` for [`FileSystem::reuse`]: `Ok(false)` (the caller removes it)
    /// unless overwriting the file in place is cheaper here than creating
    /// one, and no other name links it (a checkpoint's hard link) and this
    /// process has no reader of it open. Like a removal, the rename is
    /// durable after [`FileSystem::sync_dir`]. The default keeps nothing.
    fn retire(&self, path: &Path, to: &Path) -> Result<bool> {
        let _ = (path, to);
        Ok(false)
    }
    /// Creates `path` from the file `from` that [`FileSystem::retire`]
    /// kept: as [`FileSystem::create`] (an empty file for appending, the
    /// name durable after [`FileSystem::sync_dir`]), but the old file's
    /// storage is written over in place and whatever lies past the
    /// appended bytes is cut off when the file is synced. Until then the
    /// file may show old bytes past its end: no reader opens it before.
    /// The default removes `from` and creates `path`.
    fn reuse(&self, from: &Path, path: &Path, hint: WriteHint) -> Result<Box<dyn WritableFile>> {
        self.remove(from)?;
        self.create(path, hint)
    }
}

/// Copies the file `from` to `to` (created or truncated) and syncs it; the
/// fallback of [`FileSystem::link`]. Returns the bytes copied.
pub fn copy_file(fs: &dyn FileSystem, from: &Path, to: &Path) -> Result<u64> {
    const CHUNK_BYTES: usize = 1 << 20;
    let src = fs.open(from)?;
    let mut dst = fs.create(to, WriteHint::default())?;
    let len = src.len();
    let mut buf = vec![0u8; CHUNK_BYTES.min(len as usize)];
    let mut at = 0u64;
    while at < len {
        let n = ((len - at) as usize).min(CHUNK_BYTES);
        src.read_exact_at(at, &mut buf[..n])?;
        dst.append(&buf[..n])?;
        at += n as u64;
    }
    dst.sync()?;
    Ok(len)
}

/// A file being written sequentially.
pub trait WritableFile: Send {
    /// Appends bytes (buffered by the backend as it sees fit).
    fn append(&mut self, data: &[u8]) -> Result<()>;
    /// Hands buffered bytes to the OS (not durable).
    fn flush(&mut self) -> Result<()>;
    /// Makes every appended byte durable (`fdatasync`).
    fn sync(&mut self) -> Result<()>;
    /// Bytes appended so far.
    fn len(&self) -> u64;
    /// True if nothing was appended.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The path this file was created at (for error messages).
    fn path(&self) -> &Path;
}

/// A file read by offset; shared by many readers.
pub trait RandomAccessFile: Send + Sync {
    /// Reads exactly `buf.len()` bytes at `offset`; a short file is an error
    /// (`Error::Corruption` naming the file and offset).
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Reads like [`read_exact_at`](Self::read_exact_at) only if no byte of
    /// it waits for the device (all in the page cache): `true` when `buf`
    /// holds them; `false` when the read would wait, and then `buf`'s
    /// content is unspecified and the caller reads with `read_exact_at`
    /// (which also reports errors: this one never does). The default
    /// cannot tell and says the read would wait.
    fn read_cached_at(&self, offset: u64, buf: &mut [u8]) -> bool {
        let _ = (offset, buf);
        false
    }
    /// [`read_exact_at`](Self::read_exact_at) of `len` bytes appended to
    /// `buf`; on an error `buf` is as it was. A backend that can read into
    /// uninitialised memory (a `pread` can) spares the caller zeroing a
    /// buffer it is about to overwrite; the default zeroes and reads.
    fn read_exact_at_append(&self, offset: u64, len: usize, buf: &mut Vec<u8>) -> Result<()> {
        let start = buf.len();
        buf.resize(start + len, 0);
        let r = self.read_exact_at(offset, &mut buf[start..]);
        if r.is_err() {
            buf.truncate(start);
        }
        r
    }
    /// [`read_cached_at`](Self::read_cached_at) of `len` bytes appended to
    /// `buf`: `true` when they were; on `false` `buf` is as it was.
    fn read_cached_at_append(&self, offset: u64, len: usize, buf: &mut Vec<u8>) -> bool {
        let start = buf.len();
        buf.resize(start + len, 0);
        let done = self.read_cached_at(offset, &mut buf[start..]);
        if !done {
            buf.truncate(start);
        }
        done
    }
    /// File size in bytes.
    fn len(&self) -> u64;
    /// True for an empty file.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The path (for error messages).
    fn path(&self) -> &Path;
}

/// A held lock; dropping it releases the lock.
pub trait FileLock: Send + Sync {}

/// How the PM region file is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmBackend {
    /// DAX (`MAP_SYNC`) where the file system offers it; otherwise a shared
    /// mapping persisted with cache-line write-backs on a memory file
    /// system (/dev/shm), or with `msync` on a disk-backed one.
    Auto,
    /// DAX only: refuse to open if `MAP_SYNC` is not supported.
    Dax,
    /// Plain shared mapping, persisted with `msync` whatever the file system.
    Mmap,
}

/// How a PM region makes its stores durable (reported in `tierkv.stats` and
/// the bench's header line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// A DAX mapping (`MAP_SYNC`): cache-line write-back + `sfence` reaches
    /// the media.
    Dax,
    /// A file on a memory file system (tmpfs, ramfs, hugetlbfs), mapped
    /// `MAP_SHARED`: the page *is* the storage, so every store survives a
    /// process crash and nothing survives a machine crash whatever is done.
    /// Persist is the DAX sequence (cache-line write-back + `sfence`), as on
    /// real PM, with no system call.
    MemoryFile,
    /// A file on a disk-backed file system without DAX: `msync`, the only
    /// way to reach the disk.
    Msync,
    /// The crash simulator (tests).
    Simulated,
}

impl Persistence {
    /// A short name: `dax`, `memory-file`, `msync`, `sim`.
    pub fn name(self) -> &'static str {
        match self {
            Persistence::Dax => "dax",
            Persistence::MemoryFile => "memory-file",
            Persistence::Msync => "msync",
            Persistence::Simulated => "sim",
        }
    }

    /// What a persist does, for people: e.g. `memory-file (clwb + sfence)`.
    pub fn describe(self) -> String {
        match self {
            Persistence::Dax | Persistence::MemoryFile => {
                format!(
                    "{} ({} + sfence)",
                    self.name(),
                    dax::flush_instruction().name()
                )
            }
            Persistence::Msync => "msync".to_string(),
            Persistence::Simulated => "sim".to_string(),
        }
    }
}

/// The PM tier: one byte-addressable persistent region.
///
/// Contract:
/// 1. [`PmRegion::write`] stores bytes in the volatile view; they are durable
///    only after a [`PmRegion::persist`] covering them returns.
/// 2. `persist` is ordered: a crash after `persist(a)` and before
///    `persist(b)` returns may keep `a` and lose `b`, never the reverse.
/// 3. An aligned 8-byte store that is persisted is atomic across a crash
///    (the unit for commit flags and pointers).
/// 4. The engine never writes a range that a reader may be reading, link
///    words (5) excepted: PM structures are written, persisted and then
///    published; a range is only rewritten after it was freed and no live
///    version references it. This is what makes [`PmRegion::slice`] sound.
/// 5. **Link words.** A structure may declare some aligned 8-byte words
///    *link words* (e.g. the `next`/`prev` words of a list node whose
///    readers reach it only through an immutable, published offset array).
///    A link word may be updated in place while the structure is published,
///    under three rules: (a) it is written only with
///    [`PmRegion::store_u64`] and read only with [`PmRegion::load_u64`] —
///    never with `write`, `read` or `slice` once the structure is
///    published; (b) no reader's slice covers it (readers slice a node from
///    past its link words) and no checksum covers it; (c) whoever follows a
///    link validates what it reaches (a link may point at a node written
///    after the crash point): recovery trusts only what a checksum or the
///    MANIFEST vouches for.
///
/// Why rule 5 is sound: (a) and (b) make every concurrent access to the
/// bytes of a link word an atomic operation on an aligned `AtomicU64`,
/// which the Rust memory model defines (no data race, so no undefined
/// behaviour), while every `&[u8]` handed out by `slice` covers only bytes
/// no one writes during its life (rule 4). Across a crash, an aligned
/// persisted store is all-or-nothing (rule 3), so a link word holds its old
/// or its new value, and (c) makes either value safe to find.
pub trait PmRegion: Send + Sync + 'static {
    /// Region size in bytes.
    fn len(&self) -> u64;
    /// True for a zero-size region.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A name for error messages (`pm:<path>` or `sim:<n>`).
    fn name(&self) -> &str;
    /// Copies `data` into the region at `offset`. Out of range is
    /// `Error::InvalidArgument`.
    fn write(&self, offset: u64, data: &[u8]) -> Result<()>;
    /// Copies `buf.len()` bytes at `offset` into `buf`.
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Borrows `len` bytes at `offset` (see invariant 4).
    fn slice(&self, offset: u64, len: usize) -> Result<&[u8]>;
    /// Makes `[offset, offset+len)` durable (flush the cache lines / pages and
    /// fence). Returns after the bytes are persistent.
    fn persist(&self, offset: u64, len: usize) -> Result<()>;
    /// Orders earlier persists before later stores (`sfence`).
    fn fence(&self);
    /// How [`PmRegion::persist`] makes stores durable.
    fn persistence(&self) -> Persistence;
    /// Stores the aligned 8-byte link word at `offset` with one atomic
    /// store (contract 5); durable after a `persist` covering it. An
    /// offset not a multiple of 8, or out of range, is
    /// `Error::InvalidArgument`.
    fn store_u64(&self, offset: u64, value: u64) -> Result<()>;
    /// Loads the aligned 8-byte link word at `offset` with one atomic load
    /// (contract 5).
    fn load_u64(&self, offset: u64) -> Result<u64>;
}

/// Asks the CPU to bring the cache lines holding the first bytes of
/// `bytes` (up to two lines) into its caches ahead of a read: a hint for
/// walks that jump through PM in key order (a table's nodes in the order
/// of its offset array), where each first touch is a cache and TLB miss.
/// Changes no result; a no-op off x86-64.
#[inline]
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        for line in bytes.chunks(64).take(2) {
            // SAFETY: a prefetch never faults and changes no memory; the
            // address is inside a live slice anyway. SSE is part of every
            // x86-64 CPU.
            #[allow(unused_unsafe)]
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast::<i8>())
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Checks that `offset` names an aligned 8-byte word inside `region`;
/// returns it as an index.
pub(crate) fn check_word(region: &dyn PmRegion, offset: u64) -> Result<usize> {
    let in_range = offset.checked_add(8).is_some_and(|e| e <= region.len());
    if !offset.is_multiple_of(8) || !in_range {
        return Err(crate::error::Error::InvalidArgument(format!(
            "{}: link word at offset {offset} is not an aligned 8-byte word inside the region of {} bytes",
            region.name(),
            region.len()
        )));
    }
    usize::try_from(offset).map_err(|_| {
        crate::error::Error::InvalidArgument(format!("{}: offset {offset}", region.name()))
    })
}

/// A power switch shared by crashable backends ([`mem::MemFs`],
/// [`sim::SimRegion`]): once cut, no sync or persist takes effect on any of
/// them, so a test freezes the durable state of both tiers at one instant.
#[derive(Debug, Clone, Default)]
pub struct Power(Arc<std::sync::atomic::AtomicBool>);

impl Power {
    /// A switch that is on.
    pub fn new() -> Self {
        Self::default()
    }
    /// Cuts the power: later syncs and persists are silently dropped.
    pub fn cut(&self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    /// True until [`Power::cut`].
    pub fn is_on(&self) -> bool {
        !self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Joins a directory and a file name.
pub fn join(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}
