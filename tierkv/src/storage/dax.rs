//! The DAX PM backend: `MAP_SYNC` mappings persisted with cache-line flushes.
//!
//! On a DAX file system (ext4 or xfs mounted `-o dax` on real persistent
//! memory), a file mapped with `MAP_SHARED_VALIDATE | MAP_SYNC` gives loads
//! and stores direct access to the media, and the kernel guarantees the file
//! metadata needed to reach the mapped blocks is durable. Persisting a range
//! is then a user-space affair: write back each 64-byte cache line covering
//! it and fence:
//!
//! ```text
//!  persist(100, 60) on lines of 64 bytes:
//!    line 64..128   ──► clwb [base+64]
//!    line 128..192  ──► clwb [base+128]
//!    sfence              (orders the write-backs before later stores)
//! ```
//!
//! The write-back instruction is chosen once per process by CPUID (leaf 7,
//! sub-leaf 0): `clwb` if EBX bit 24 is set (writes back and may keep the
//! line cached), else `clflushopt` (EBX bit 23; writes back and evicts,
//! weakly ordered), else `clflush` (always present on x86-64; strongly
//! ordered, slowest). These are not exposed by stable `core::arch`, so they
//! are emitted with `asm!`. On other architectures `persist` falls back to
//! `msync`.
//!
//! The file handling (creation, exact size, `pm_size_bytes` check) is that of
//! [`MmapRegion`]; the region layout is
//! docs/format/pm.md.
//!
//! Fallback: on a file system without DAX (e.g. /dev/shm), `MAP_SYNC` is
//! refused with `EOPNOTSUPP` (or `EINVAL` on older kernels). For
//! [`PmBackend::Dax`], [`open_pm_region`] then refuses to open with
//! [`Error::InvalidOptions`]. For [`PmBackend::Auto`] it looks at the file
//! system ([`auto_persistence`]):
//!
//! * a **memory file system** (tmpfs, ramfs, hugetlbfs — /dev/shm above
//!   all): a plain `MAP_SHARED` mapping persisted exactly as on DAX, with
//!   cache-line write-backs and `sfence` and no system call. A tmpfs page is
//!   its own storage: every store survives a process crash without `msync`,
//!   and nothing survives a machine crash whatever is done, so `msync` would
//!   buy nothing but a system call per persist;
//! * a **disk-backed** file system: an [`MmapRegion`] persisted with `msync`,
//!   the only way to reach the disk (logged once per process).
//!
//! Concurrency: as [`MmapRegion`]: `Send + Sync`, disjoint ranges written
//! concurrently, nothing rewritten while read (the [`PmRegion`] contract).
//!
//! Invariants:
//! 1. Every access is bounds-checked; a persist flushes only lines that
//!    intersect the (checked) range, so every flushed address is mapped.
//! 2. `persist` returns only after an `sfence` that follows the last flush.

use std::path::Path;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use rustix::io::Errno;
use rustix::mm::MapFlags;

use super::mmap::{open_sized, Mapping, MmapRegion, SizedFile};
use super::{Persistence, PmBackend, PmRegion};
use crate::error::{Error, Result};

/// Cache-line size the flushes work on.
pub const CACHE_LINE_BYTES: usize = 64;

/// The cache-line write-back instruction this CPU offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushInstruction {
    /// `clwb`: write back, keep the line (CPUID.7.0:EBX bit 24).
    Clwb,
    /// `clflushopt`: write back and invalidate, weakly ordered (EBX bit 23).
    Clflushopt,
    /// `clflush`: write back and invalidate, strongly ordered (baseline).
    Clflush,
    /// Not x86-64: no user-space flush; persists use `msync`.
    None,
}

impl FlushInstruction {
    /// The mnemonic (`none` off x86-64).
    pub fn name(self) -> &'static str {
        match self {
            FlushInstruction::Clwb => "clwb",
            FlushInstruction::Clflushopt => "clflushopt",
            FlushInstruction::Clflush => "clflush",
            FlushInstruction::None => "none",
        }
    }
}

/// The instruction `persist` uses, detected once per process.
pub fn flush_instruction() -> FlushInstruction {
    static DETECTED: OnceLock<FlushInstruction> = OnceLock::new();
    *DETECTED.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> FlushInstruction {
    use core::arch::x86_64::{__cpuid_count, __get_cpuid_max};
    // SAFETY: CPUID is available on every x86-64 CPU (these intrinsics are
    // `unsafe` only on older toolchains, hence `unused_unsafe`).
    #[allow(unused_unsafe)]
    let (max_leaf, _) = unsafe { __get_cpuid_max(0) };
    if max_leaf < 7 {
        return FlushInstruction::Clflush;
    }
    // SAFETY: as above; leaf 7 exists (checked).
    #[allow(unused_unsafe)]
    let ebx = unsafe { __cpuid_count(7, 0) }.ebx;
    if ebx & (1 << 24) != 0 {
        FlushInstruction::Clwb
    } else if ebx & (1 << 23) != 0 {
        FlushInstruction::Clflushopt
    } else {
        FlushInstruction::Clflush
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> FlushInstruction {
    FlushInstruction::None
}

/// Writes back the cache lines covering `[start, start+len)` with `instr`.
///
/// # Safety
/// Every byte of `[start & !63, start+len)` must be mapped memory.
#[cfg(target_arch = "x86_64")]
unsafe fn flush_lines(instr: FlushInstruction, start: *const u8, len: usize) {
    use core::arch::asm;
    if len == 0 {
        return;
    }
    let first = start as usize & !(CACHE_LINE_BYTES - 1);
    let end = start as usize + len;
    let mut line = first;
    while line < end {
        let p = line as *const u8;
        // SAFETY: `p` is inside the mapped range (caller's contract). These
        // instructions only write back cache lines: they do not change memory
        // contents, the stack or flags. They are left as memory clobbers so
        // the compiler does not move stores across them.
        match instr {
            // SAFETY: `p` is mapped (above); `clwb` only writes the line back
            // and needs CPUID.7.0:EBX[24], which `detect` checked before
            // choosing it (callers pass the detected instruction, or one the
            // detected one implies).
            FlushInstruction::Clwb => unsafe {
                asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags))
            },
            // SAFETY: `p` is mapped; `clflushopt` writes back and evicts the
            // line and needs CPUID.7.0:EBX[23], checked as for `clwb`.
            FlushInstruction::Clflushopt => unsafe {
                asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags))
            },
            // SAFETY: `p` is mapped; `clflush` exists on every x86-64 CPU
            // (SSE2) and only writes back and evicts the line.
            FlushInstruction::Clflush | FlushInstruction::None => unsafe {
                asm!("clflush [{0}]", in(reg) p, options(nostack, preserves_flags))
            },
        }
        line += CACHE_LINE_BYTES;
    }
}

/// `sfence`: orders the write-backs before any later store.
#[cfg(target_arch = "x86_64")]
fn sfence() {
    // SAFETY: `sfence` has no operands and is available on every x86-64 CPU
    // (SSE); it only orders stores.
    unsafe { core::arch::asm!("sfence", options(nostack, preserves_flags)) };
}

/// Writes back the cache lines holding `buf` and fences (`clwb`/
/// `clflushopt`/`clflush` + `sfence`). On ordinary memory this is legal and
/// merely costs time; on a DAX mapping it makes `buf` persistent.
pub fn flush_and_fence(buf: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: a live slice is mapped memory, and so is the rest of its
        // first cache line (pages are 4096-byte aligned, lines 64).
        unsafe { flush_lines(flush_instruction(), buf.as_ptr(), buf.len()) };
        sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = buf;
        fence(Ordering::SeqCst);
    }
}

/// A PM region persisted with cache-line flushes: a `MAP_SYNC` mapping on a
/// DAX file system, or a plain shared mapping of a file on a memory file
/// system ([`Persistence::MemoryFile`]).
pub struct DaxRegion {
    map: Mapping,
    created: bool,
    persistence: Persistence,
}

/// `MAP_SYNC` was refused (not a DAX file system).
struct MapSyncRefused(Errno);

/// Maps `f` with `MAP_SYNC`; `Ok(Err(..))` if the file system refuses it.
fn map_sync(f: &SizedFile) -> Result<std::result::Result<Mapping, MapSyncRefused>> {
    let flags = MapFlags::SHARED_VALIDATE | MapFlags::SYNC | MapFlags::POPULATE;
    match Mapping::map(f, flags) {
        Ok(m) => Ok(Ok(m)),
        Err(e @ (Errno::OPNOTSUPP | Errno::INVAL)) => Ok(Err(MapSyncRefused(e))),
        Err(e) => Err(Error::io(
            format!("mmap (MAP_SYNC) PM region {}", f.path.display()),
            e.into(),
        )),
    }
}

fn refused_error(path: &Path, why: &MapSyncRefused) -> Error {
    let dir = path.parent().unwrap_or(path);
    Error::InvalidOptions(format!(
        "pm_backend = Dax: MAP_SYNC not supported on {} ({}); put pm_dir on a DAX \
         file system (ext4/xfs mounted with -o dax) or use pm_backend = Auto or Mmap",
        dir.display(),
        std::io::Error::from(why.0)
    ))
}

impl DaxRegion {
    /// Opens (and with `create`, creates) the region file at `path` of
    /// exactly `len_bytes` and maps it with `MAP_SYNC`.
    ///
    /// Errors: as [`MmapRegion::open`]; and [`Error::InvalidOptions`] naming
    /// `pm_backend` when the file system does not support `MAP_SYNC` (a file
    /// this call created is removed again).
    pub fn open(path: &Path, len_bytes: u64, create: bool) -> Result<DaxRegion> {
        let f = open_sized(path, len_bytes, create)?;
        match map_sync(&f)? {
            Ok(map) => Ok(Self::from_mapping(map, f.created, Persistence::Dax)),
            Err(why) => {
                if f.created {
                    if let Err(e) = std::fs::remove_file(path) {
                        log::warn!("removing {} after MAP_SYNC refusal: {e}", path.display());
                    }
                }
                Err(refused_error(path, &why))
            }
        }
    }

    fn from_mapping(map: Mapping, created: bool, persistence: Persistence) -> DaxRegion {
        if created {
            map.prefault();
        }
        DaxRegion {
            map,
            created,
            persistence,
        }
    }

    /// True if this open created the file (its contents are all zeros).
    pub fn created(&self) -> bool {
        self.created
    }
}

impl PmRegion for DaxRegion {
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
        #[cfg(target_arch = "x86_64")]
        {
            let at = self.map.check(offset, len)?;
            // SAFETY: `[at, at+len)` is inside the mapping (checked); the
            // mapping starts on a page boundary, so the line containing `at`
            // is mapped too.
            unsafe { flush_lines(flush_instruction(), self.map.base().add(at), len) };
            sfence();
            Ok(())
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self.map.msync(offset, len)?;
            fence(Ordering::SeqCst);
            Ok(())
        }
    }

    fn fence(&self) {
        fence(Ordering::SeqCst);
    }

    fn persistence(&self) -> Persistence {
        self.persistence
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

/// `statfs` magic numbers of file systems whose pages live in memory.
const MEMORY_FS_MAGICS: [i64; 3] = [
    0x0102_1994, // tmpfs
    0x8584_58f6, // ramfs
    0x9584_58f6, // hugetlbfs
];

/// True if `dir` (or, while it does not exist yet, its nearest existing
/// ancestor) is on a memory file system (tmpfs, ramfs, hugetlbfs).
pub fn on_memory_fs(dir: &Path) -> bool {
    let Some(existing) = dir.ancestors().find(|a| a.exists()) else {
        return false;
    };
    rustix::fs::statfs(existing)
        // `f_type`'s integer type differs between targets.
        .map(|s| {
            #[allow(clippy::unnecessary_cast)]
            let t = s.f_type as i64;
            MEMORY_FS_MAGICS.contains(&t)
        })
        .unwrap_or(false)
}

/// What [`PmBackend::Auto`] chooses for a region file in `dir` when
/// `MAP_SYNC` is refused: cache-line persists on a memory file system,
/// `msync` elsewhere. (Where `MAP_SYNC` works it is [`Persistence::Dax`];
/// that is only known once the file is mapped.)
pub fn auto_persistence(dir: &Path) -> Persistence {
    if on_memory_fs(dir) {
        Persistence::MemoryFile
    } else {
        Persistence::Msync
    }
}

/// Opens the PM region file at `path` with the backend `backend` asks for.
///
/// * [`PmBackend::Mmap`]: an [`MmapRegion`].
/// * [`PmBackend::Dax`]: a [`DaxRegion`], or [`Error::InvalidOptions`] when
///   the file system refuses `MAP_SYNC`.
/// * [`PmBackend::Auto`]: a [`DaxRegion`] when `MAP_SYNC` works, else an
///   [`MmapRegion`] on the same file (logged once per process).
pub fn open_pm_region(
    path: &Path,
    len_bytes: u64,
    backend: PmBackend,
    create: bool,
) -> Result<Arc<dyn PmRegion>> {
    match backend {
        PmBackend::Mmap => Ok(Arc::new(MmapRegion::open(path, len_bytes, create)?)),
        PmBackend::Dax => Ok(Arc::new(DaxRegion::open(path, len_bytes, create)?)),
        PmBackend::Auto => {
            let f = open_sized(path, len_bytes, create)?;
            match map_sync(&f)? {
                Ok(map) => Ok(Arc::new(DaxRegion::from_mapping(
                    map,
                    f.created,
                    Persistence::Dax,
                ))),
                Err(_) if on_memory_fs(path.parent().unwrap_or(path)) => {
                    let map =
                        Mapping::map(&f, MapFlags::SHARED | MapFlags::POPULATE).map_err(|e| {
                            Error::io(format!("mmap PM region {}", path.display()), e.into())
                        })?;
                    Ok(Arc::new(DaxRegion::from_mapping(
                        map,
                        f.created,
                        Persistence::MemoryFile,
                    )))
                }
                Err(why) => {
                    static LOGGED: AtomicBool = AtomicBool::new(false);
                    if !LOGGED.swap(true, Ordering::Relaxed) {
                        log::info!(
                            "MAP_SYNC not supported for {} ({}): using mmap + msync for the PM tier",
                            path.display(),
                            std::io::Error::from(why.0)
                        );
                    }
                    Ok(Arc::new(MmapRegion::from_sized(f)?))
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::storage::mmap::test_dir;

    fn on_tmpfs(p: &Path) -> bool {
        on_memory_fs(p)
    }

    #[test]
    fn auto_persists_with_cache_lines_on_tmpfs_and_works() {
        let dir = test_dir();
        let p = dir.path().join("pm.region");
        let r = open_pm_region(&p, 16 * 4096, PmBackend::Auto, true).unwrap();
        if on_tmpfs(dir.path()) {
            assert_eq!(r.persistence(), Persistence::MemoryFile);
            assert_eq!(auto_persistence(dir.path()), Persistence::MemoryFile);
        }
        assert_eq!(r.len(), 16 * 4096);
        assert_eq!(r.name(), format!("pm:{}", p.display()));
        r.write(4000, b"across a page boundary").unwrap();
        r.persist(4000, 22).unwrap();
        drop(r);
        let r = open_pm_region(&p, 16 * 4096, PmBackend::Auto, false).unwrap();
        assert_eq!(r.slice(4000, 22).unwrap(), b"across a page boundary");
        let m = open_pm_region(&p, 16 * 4096, PmBackend::Mmap, false).unwrap();
        assert_eq!(m.persistence(), Persistence::Msync, "Mmap keeps msync");
    }

    #[test]
    fn dax_refuses_clearly_without_map_sync() {
        let dir = test_dir();
        if !on_tmpfs(dir.path()) {
            eprintln!("skipped: {} is not tmpfs", dir.path().display());
            return; // only tmpfs is known to refuse MAP_SYNC
        }
        let p = dir.path().join("pm.region");
        match open_pm_region(&p, 4096, PmBackend::Dax, true) {
            Err(Error::InvalidOptions(m)) => {
                assert!(
                    m.contains("pm_backend = Dax") && m.contains("MAP_SYNC"),
                    "{m}"
                );
                assert!(m.contains(&dir.path().display().to_string()), "{m}");
            }
            other => panic!("expected InvalidOptions, got {:?}", other.err()),
        }
        assert!(!p.exists(), "the refused file is removed");
    }

    #[test]
    fn cache_flush_runs_on_heap_memory() {
        let instr = flush_instruction();
        #[cfg(target_arch = "x86_64")]
        assert_ne!(instr, FlushInstruction::None);
        let _ = instr;
        let mut v = vec![7u8; 1000];
        flush_and_fence(&v);
        flush_and_fence(&v[3..130]);
        flush_and_fence(&[]);
        v[999] = 8;
        flush_and_fence(&v[999..]);
        assert_eq!(v[999], 8);
        // Every variant this CPU supports, on unaligned ranges.
        #[cfg(target_arch = "x86_64")]
        for i in [
            FlushInstruction::Clflush,
            FlushInstruction::Clflushopt,
            FlushInstruction::Clwb,
        ] {
            let ok = matches!(
                (i, instr),
                (FlushInstruction::Clflush, _)
                    | (
                        FlushInstruction::Clflushopt,
                        FlushInstruction::Clwb | FlushInstruction::Clflushopt,
                    )
                    | (FlushInstruction::Clwb, FlushInstruction::Clwb)
            );
            if ok {
                // SAFETY: `v` is a live allocation.
                unsafe { flush_lines(i, v.as_ptr().add(1), 900) };
                sfence();
            }
        }
    }

    #[test]
    fn dax_region_persist_flushes_lines_of_a_mapping() {
        // Exercise DaxRegion's persist path on a plain mapping: flushes on
        // ordinary shared memory are legal.
        let dir = test_dir();
        let f = open_sized(&dir.path().join("r"), 8192, true).unwrap();
        let map = Mapping::map(&f, MapFlags::SHARED).unwrap();
        let r = DaxRegion::from_mapping(map, true, Persistence::MemoryFile);
        r.write(63, b"xy").unwrap();
        r.persist(63, 2).unwrap();
        r.persist(8191, 1).unwrap();
        assert!(matches!(r.persist(8191, 2), Err(Error::InvalidArgument(_))));
        assert_eq!(r.slice(63, 2).unwrap(), b"xy");
    }
}
