//! The real file system: POSIX files, optionally written with `O_DIRECT`.
//!
//! # Writable files
//!
//! Every writable file appends through one in-process buffer of
//! [`WRITE_BUFFER_BYTES`] (1 MiB), so small appends cost a `memcpy`, not a
//! system call. The buffer is allocated 4096-byte aligned so that the same
//! code serves both modes:
//!
//! * **Buffered** (the default): a full buffer is written with `pwrite`; an
//!   append larger than the buffer goes straight to the file once the buffer
//!   is drained.
//! * **Direct** (`WriteHint { direct: true, .. }`): the file is opened with
//!   `O_DIRECT`, so it bypasses the page cache (flush and compaction output
//!   should not evict the hot data). `O_DIRECT` needs the memory address, the
//!   file offset and the length of each write aligned to the logical block
//!   size; we use [`DIRECT_ALIGN`] = 4096, a multiple of every common block
//!   size. Whole blocks are written directly. The final partial block (at
//!   `flush`, `sync` or drop) is written with `O_DIRECT` switched off for
//!   that one `pwrite` (`fcntl(F_SETFL)`), so the file length is always
//!   exact; the partial block stays at the front of the buffer and is written
//!   again, as a whole block, once more bytes complete it.
//!   If the file system refuses `O_DIRECT` (`EINVAL` at open or at the first
//!   write, e.g. some FUSE or network file systems), the file silently falls
//!   back to buffered mode (logged at debug level).
//!
//! * **Write-back** (`WriteHint { bytes_per_sync: n, .. }`, buffered only):
//!   each time the OS holds `n` more bytes of the file than it was last asked
//!   to write back, `sync_file_range(SYNC_FILE_RANGE_WRITE)` starts their
//!   write-back without waiting, as RocksDB's `bytes_per_sync` does. The
//!   device then writes while the merge runs, and the `fdatasync` that ends
//!   a table waits for the last `n` bytes or so, not the whole file. Since
//!   drains happen a buffer at a time, `n` is rounded up to whole buffers.
//!
//! * **Reuse** ([`FileSystem::reuse`], buffered only): a file
//!   [`FileSystem::retire`] kept is renamed and written over from offset 0;
//!   its old bytes past what was appended are cut off (`ftruncate`) at the
//!   first `sync` (or at drop, if never synced). Writing over pages the
//!   page cache holds, on blocks the file system has allocated, costs a
//!   fraction of writing a new file: one GiB of 1 MiB `pwrite`s took 0.14 s
//!   over a cached file against 0.26–0.54 s into a new one on this
//!   project's development machine (ext4), and a new inode first scans its
//!   group for recently deleted ones (`recently_deleted`, without a
//!   journal). A file is retired only if no other name links it and no
//!   reader of it is open in this process ([`OPEN_READERS`]: opens and
//!   retirements take one lock, so none slips between the check and the
//!   rename).
//!
//! Layout of the buffer against the file, in direct mode:
//!
//! ```text
//!  file:  | block 0 | block 1 | block 2 |..tail..|
//!                             ^ buf_offset (4096-aligned)
//!  buf:                       [ block 2 |..tail..|.........free.........]
//!                             0                 buf_len              cap
//! ```
//!
//! Worked example (direct): appending 5000 bytes and calling `sync` writes
//! block 0 (bytes 0..4096) with `O_DIRECT`, moves the 904-byte tail to the
//! front of the buffer, writes it buffered at offset 4096, and `fdatasync`s:
//! the file is exactly 5000 bytes long. Appending 3192 more bytes completes
//! block 1; the next drain writes bytes 4096..8192 with `O_DIRECT`.
//!
//! Invariants (per writable file):
//! 1. `len() == buf_offset + buf_len`: every appended byte is either in the
//!    file or in the buffer.
//! 2. In direct mode `buf_offset % DIRECT_ALIGN == 0`; in buffered mode the
//!    OS has exactly `buf_offset` bytes (`os_len == buf_offset`).
//! 3. `os_len` (what the OS has) is in `buf_offset ..= len()`. A reused
//!    file may hold old bytes past `os_len` until `cut_pending` is cleared.
//!
//! After an I/O error a writable file is in an unspecified state and must be
//! abandoned (the engine stops on background I/O errors).
//!
//! Dropping a writable file hands buffered bytes to the OS (best effort,
//! errors logged) but does not sync.
//!
//! # Concurrency
//!
//! `PosixFs` is stateless and `Sync`. A [`WritableFile`] is used by one thread
//! at a time (`&mut self`); a [`RandomAccessFile`] is shared: `pread` needs no
//! file position, so concurrent reads need no lock.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;

use rustix::fs::{FlockOperation, Mode, OFlags};
use rustix::io::Errno;

use super::{FileLock, FileSystem, RandomAccessFile, WritableFile, WriteHint};
use crate::error::{Error, Result};

/// Size of the in-process write buffer of every writable file.
pub const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// Alignment of `O_DIRECT` writes: address, offset and length.
pub const DIRECT_ALIGN: usize = 4096;

/// POSIX files.
#[derive(Debug, Default, Clone)]
pub struct PosixFs;

impl PosixFs {
    /// The file system.
    pub fn new() -> Self {
        PosixFs
    }
}

/// The files (device, inode) this process has open for reading, with how
/// many readers each: [`FileSystem::retire`] keeps none of them. Opening a
/// reader holds the lock from the `open` to the count, and a retirement
/// from the check to the rename.
static OPEN_READERS: LazyLock<Mutex<HashMap<(u64, u64), usize>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// One reader's count in [`OPEN_READERS`], given back on drop.
struct ReaderMark((u64, u64));

impl Drop for ReaderMark {
    fn drop(&mut self) {
        let mut open = OPEN_READERS.lock();
        if let Some(n) = open.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.0);
            }
        }
    }
}

/// Names the failed call and its file; the message is built only on error
/// (this wraps every append and read, so it must cost nothing on success).
fn ctx<'a>(what: &'a str, p: &'a Path) -> impl FnOnce(io::Error) -> Error + 'a {
    move |e| Error::io(format!("{what} {}", p.display()), e)
}

#[cfg(test)]
thread_local! {
    /// Tests: pretend the file system refuses `O_DIRECT` at open.
    static REFUSE_DIRECT_OPEN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Tests: pretend the file system refuses the first `O_DIRECT` write.
    static REFUSE_DIRECT_WRITE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A heap buffer aligned to [`DIRECT_ALIGN`], left uninitialised when it
/// is allocated: every writable file has one, and zero-filling 1 MiB per
/// file was 2% of a `leveldb10` fill's samples (10% of a compaction thread
/// cutting vLSM's 512 KiB tables and 64 KiB vSSTs), about 0.2 ms in the
/// writer at each WAL a memtable switch creates. Only bytes written at
/// least once (below `init`) are ever viewed.
struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
    /// Bytes `[0, init)` have been written.
    init: usize,
}

// SAFETY: the buffer is uniquely owned (no aliasing pointers escape it), so
// moving it to another thread is sound.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    fn layout(cap: usize) -> std::alloc::Layout {
        // `cap` is a non-zero multiple of DIRECT_ALIGN (a power of two), so
        // the layout is always valid; fall back to a byte layout never taken.
        std::alloc::Layout::from_size_align(cap, DIRECT_ALIGN)
            .unwrap_or_else(|_| std::alloc::Layout::new::<u8>())
    }

    fn new(cap: usize) -> Self {
        debug_assert!(cap > 0 && cap & (DIRECT_ALIGN - 1) == 0);
        let layout = Self::layout(cap);
        // SAFETY: `layout` has a non-zero size. The bytes stay
        // uninitialised until `write_at` or `copy_within` writes them.
        let raw = unsafe { std::alloc::alloc(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, cap, init: 0 }
    }

    /// The written bytes `range`. Panics outside `[0, init)`.
    fn filled(&self, range: std::ops::Range<usize>) -> &[u8] {
        assert!(
            range.start <= range.end && range.end <= self.init,
            "AlignedBuf: {range:?} beyond the {} bytes written",
            self.init
        );
        // SAFETY: `[0, init)` lies within the allocation and has been
        // written; the shared borrow of `self` prevents mutation meanwhile.
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr().add(range.start), range.end - range.start)
        }
    }

    /// Copies `data` to `at`, which may not leave a gap after the bytes
    /// written so far. Panics if it does or if `data` does not fit.
    fn write_at(&mut self, at: usize, data: &[u8]) {
        assert!(
            at <= self.init && at.checked_add(data.len()).is_some_and(|e| e <= self.cap),
            "AlignedBuf: {} bytes at {at} (written {}, capacity {})",
            data.len(),
            self.init,
            self.cap
        );
        let end = at + data.len();
        // SAFETY: `[at, end)` lies within the allocation (checked), `data`
        // cannot overlap a buffer we own exclusively (`&mut self`).
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(at), data.len());
        }
        self.init = self.init.max(end);
    }

    /// Moves the written bytes `src` to `dest` (`slice::copy_within`).
    fn copy_within(&mut self, src: std::ops::Range<usize>, dest: usize) {
        assert!(src.start <= src.end && src.end <= self.init && dest <= self.init);
        let len = src.end - src.start;
        assert!(dest.checked_add(len).is_some_and(|e| e <= self.cap));
        // SAFETY: both ranges lie within the allocation (checked); `copy`
        // allows them to overlap.
        unsafe {
            std::ptr::copy(
                self.ptr.as_ptr().add(src.start),
                self.ptr.as_ptr().add(dest),
                len,
            );
        }
        self.init = self.init.max(dest + len);
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.cap)) };
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IoMode {
    Buffered,
    Direct,
}

struct PosixWritable {
    path: PathBuf,
    file: fs::File,
    mode: IoMode,
    buf: AlignedBuf,
    /// File offset of `buf[0]`.
    buf_offset: u64,
    /// Bytes of `buf` holding appended data.
    buf_len: usize,
    /// Bytes the OS has (the file's current length).
    os_len: u64,
    /// [`WriteHint::bytes_per_sync`].
    bytes_per_sync: u64,
    /// Write-back has been started for the bytes before this offset.
    writeback_from: u64,
    /// A reused file ([`FileSystem::reuse`]) not yet cut to its length.
    cut_pending: bool,
}

impl PosixWritable {
    fn new(path: &Path, file: fs::File, mode: IoMode, bytes_per_sync: u64) -> Self {
        PosixWritable {
            path: path.to_path_buf(),
            file,
            mode,
            buf: AlignedBuf::new(WRITE_BUFFER_BYTES),
            buf_offset: 0,
            buf_len: 0,
            os_len: 0,
            bytes_per_sync,
            writeback_from: 0,
            cut_pending: false,
        }
    }

    /// A reused file: cuts off the old bytes past what was appended.
    fn cut(&mut self) -> io::Result<()> {
        if self.cut_pending {
            self.file.set_len(self.os_len)?;
            self.cut_pending = false;
        }
        Ok(())
    }

    /// Buffered mode: once the OS holds `bytes_per_sync` bytes whose
    /// write-back has not been started, starts it.
    fn maybe_start_writeback(&mut self) {
        if self.bytes_per_sync == 0 || self.mode != IoMode::Buffered {
            return;
        }
        let pending = self.os_len.saturating_sub(self.writeback_from);
        if pending >= self.bytes_per_sync {
            start_writeback(&self.file, self.writeback_from, pending);
            self.writeback_from = self.os_len;
        }
    }

    fn set_direct(&self, on: bool) -> io::Result<()> {
        let flags = rustix::fs::fcntl_getfl(&self.file)?;
        let flags = if on {
            flags | OFlags::DIRECT
        } else {
            flags - OFlags::DIRECT
        };
        rustix::fs::fcntl_setfl(&self.file, flags)?;
        Ok(())
    }

    /// The file system refused an `O_DIRECT` write: continue buffered.
    fn fall_back_to_buffered(&mut self, why: &io::Error) -> io::Result<()> {
        log::debug!(
            "{}: O_DIRECT write refused ({why}); falling back to buffered I/O",
            self.path.display()
        );
        self.set_direct(false)?;
        self.mode = IoMode::Buffered;
        Ok(())
    }

    fn write_direct(&self, len: usize) -> io::Result<()> {
        debug_assert!(
            len & (DIRECT_ALIGN - 1) == 0 && self.buf_offset & (DIRECT_ALIGN as u64 - 1) == 0
        );
        #[cfg(test)]
        if REFUSE_DIRECT_WRITE.with(|r| r.replace(false)) {
            return Err(io::Error::from_raw_os_error(Errno::INVAL.raw_os_error()));
        }
        self.file
            .write_all_at(self.buf.filled(0..len), self.buf_offset)
    }

    /// Writes buffered bytes to the OS. Without `all`, only whole blocks in
    /// direct mode (used when the buffer is full); with `all`, everything,
    /// the partial tail block included.
    fn drain(&mut self, all: bool) -> io::Result<()> {
        if self.mode == IoMode::Direct {
            let whole = self.buf_len / DIRECT_ALIGN * DIRECT_ALIGN;
            if whole > 0 {
                if let Err(e) = self.write_direct(whole) {
                    if e.raw_os_error() != Some(Errno::INVAL.raw_os_error()) {
                        return Err(e);
                    }
                    self.fall_back_to_buffered(&e)?;
                    return self.drain(all);
                }
            }
            let tail = self.buf_len - whole;
            let tail_offset = self.buf_offset + whole as u64;
            if all && tail > 0 {
                // Bytes of the tail the OS already has from an earlier drain.
                let have = usize::try_from(self.os_len.saturating_sub(tail_offset))
                    .unwrap_or(usize::MAX)
                    .min(tail);
                if have < tail {
                    self.set_direct(false)?;
                    let r = self.file.write_all_at(
                        self.buf.filled(whole + have..self.buf_len),
                        tail_offset + have as u64,
                    );
                    self.set_direct(true)?;
                    r?;
                }
            }
            self.buf.copy_within(whole..self.buf_len, 0);
            self.buf_offset = tail_offset;
            self.buf_len = tail;
            let written = if all {
                tail_offset + tail as u64
            } else {
                tail_offset
            };
            self.os_len = self.os_len.max(written);
        } else if self.buf_len > 0 {
            self.file
                .write_all_at(self.buf.filled(0..self.buf_len), self.buf_offset)?;
            self.buf_offset += self.buf_len as u64;
            self.buf_len = 0;
            self.os_len = self.buf_offset;
            self.maybe_start_writeback();
        }
        Ok(())
    }

    fn append_inner(&mut self, mut data: &[u8]) -> io::Result<()> {
        let cap = self.buf.cap;
        if self.mode == IoMode::Buffered && self.buf_len + data.len() > cap {
            self.drain(true)?;
            if data.len() >= cap {
                // Large append: no point copying it through the buffer.
                self.file.write_all_at(data, self.buf_offset)?;
                self.buf_offset += data.len() as u64;
                self.os_len = self.buf_offset;
                self.maybe_start_writeback();
                return Ok(());
            }
        }
        while !data.is_empty() {
            let n = (cap - self.buf_len).min(data.len());
            self.buf.write_at(self.buf_len, &data[..n]);
            self.buf_len += n;
            data = &data[n..];
            if self.buf_len == cap {
                self.drain(false)?;
            }
        }
        Ok(())
    }
}

impl WritableFile for PosixWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.append_inner(data)
            .map_err(ctx("append to", &self.path))
    }

    fn flush(&mut self) -> Result<()> {
        self.drain(true).map_err(ctx("flush", &self.path))
    }

    fn sync(&mut self) -> Result<()> {
        self.flush()?;
        self.cut().map_err(ctx("truncate", &self.path))?;
        rustix::fs::fdatasync(&self.file)
            .map_err(|e| Error::io(format!("sync {}", self.path.display()), e.into()))
    }

    fn len(&self) -> u64 {
        self.buf_offset + self.buf_len as u64
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PosixWritable {
    fn drop(&mut self) {
        if let Err(e) = self.drain(true).and_then(|()| self.cut()) {
            log::warn!(
                "{}: flushing buffered bytes on close failed: {e}",
                self.path.display()
            );
        }
    }
}

/// Starts the write-back of `len` bytes at `offset` without waiting for it
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`). Advisory: an error here is
/// not reported, because durability comes only from `fdatasync`, which
/// reports every write-back error of the file.
#[cfg(target_os = "linux")]
fn start_writeback(file: &fs::File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: the descriptor stays open for the call (`file` is borrowed),
    // and sync_file_range touches no memory of this process.
    let r = unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
    };
    if r != 0 {
        log::debug!("sync_file_range: {}", io::Error::last_os_error());
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &fs::File, _offset: u64, _len: u64) {}

/// Opens `path` for writing (created or truncated), with `O_DIRECT` if
/// asked and the file system accepts it.
fn open_writable(path: &Path, hint: WriteHint) -> Result<(fs::File, IoMode)> {
    let base = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC;
    let mode = Mode::from_raw_mode(0o644);
    if hint.direct {
        #[cfg(test)]
        let refused = REFUSE_DIRECT_OPEN.with(|r| r.get());
        #[cfg(not(test))]
        let refused = false;
        let r = if refused {
            Err(Errno::INVAL)
        } else {
            rustix::fs::open(path, base | OFlags::DIRECT, mode)
        };
        match r {
            Ok(fd) => return Ok((fs::File::from(fd), IoMode::Direct)),
            Err(Errno::INVAL) => log::debug!(
                "{}: O_DIRECT refused by the file system; using buffered I/O",
                path.display()
            ),
            Err(e) => return Err(Error::io(format!("create {}", path.display()), e.into())),
        }
    }
    let fd = rustix::fs::open(path, base, mode)
        .map_err(|e| Error::io(format!("create {}", path.display()), e.into()))?;
    Ok((fs::File::from(fd), IoMode::Buffered))
}

struct PosixReadable {
    path: PathBuf,
    file: fs::File,
    len: u64,
    /// False once the kernel refused `RWF_NOWAIT` for this file.
    nowait: AtomicBool,
    _open: ReaderMark,
}

impl PosixReadable {
    /// Reads exactly `len` bytes at `offset` into `dst` (`pread`, retried
    /// until done); reading past the end is `Error::Corruption` naming the
    /// file and offset.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes (they need not be
    /// initialised). On `Ok` every one of them was written.
    unsafe fn read_exact_raw(&self, dst: *mut u8, len: usize, offset: u64) -> Result<()> {
        // SAFETY: the caller's guarantee; `MaybeUninit<u8>` has `u8`'s layout.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst.cast::<MaybeUninit<u8>>(), len) };
        let mut done = 0;
        while done < len {
            match rustix::io::pread_uninit(&self.file, &mut dst[done..], offset + done as u64) {
                Ok(([], _)) => {
                    return Err(Error::corruption(
                        self.path.display().to_string(),
                        offset,
                        format!("read of {len} bytes past end of file ({} bytes)", self.len),
                    ))
                }
                Ok((read, _)) => done += read.len(),
                Err(Errno::INTR) => {}
                Err(e) => {
                    return Err(Error::io(
                        format!(
                            "read {len} bytes at offset {offset} of {}",
                            self.path.display()
                        ),
                        e.into(),
                    ))
                }
            }
        }
        Ok(())
    }

    /// `preadv2` with `RWF_NOWAIT` of `len` bytes at `offset` into `dst`:
    /// `true` when all were in the page cache and are written.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes (they need not be
    /// initialised).
    unsafe fn read_cached_raw(&self, dst: *mut u8, len: usize, offset: u64) -> bool {
        use std::os::fd::AsRawFd;
        if !self.nowait.load(Ordering::Relaxed) {
            return false;
        }
        let mut done = 0;
        while done < len {
            let Ok(at) = libc::off_t::try_from(offset + done as u64) else {
                return false;
            };
            let iov = libc::iovec {
                // SAFETY: `done < len`: inside the caller's buffer.
                iov_base: unsafe { dst.add(done) }.cast(),
                iov_len: len - done,
            };
            // SAFETY: the descriptor stays open for the call (`self` is
            // borrowed) and the one iovec covers memory the caller lets us
            // write.
            let n = unsafe { libc::preadv2(self.file.as_raw_fd(), &iov, 1, at, libc::RWF_NOWAIT) };
            match n {
                0 => return false,
                n if n > 0 => done += n as usize,
                _ => match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS) => {
                        self.nowait.store(false, Ordering::Relaxed);
                        return false;
                    }
                    // EAGAIN: the rest would wait; anything else (an I/O
                    // error) is for the blocking read to meet and report.
                    _ => return false,
                },
            }
        }
        true
    }
}

impl RandomAccessFile for PosixReadable {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        // SAFETY: `buf` is writable for its length.
        unsafe { self.read_exact_raw(buf.as_mut_ptr(), buf.len(), offset) }
    }

    /// Reads into `buf`'s spare capacity: no zeroing first (in a scan-heavy
    /// workload zeroing each block's buffer was 5.6% of the samples).
    fn read_exact_at_append(&self, offset: u64, len: usize, buf: &mut Vec<u8>) -> Result<()> {
        buf.reserve(len);
        let start = buf.len();
        // SAFETY: `reserve` made room for `len` bytes after `start`; on
        // `Ok` every one of them was written, so they are initialised.
        unsafe {
            self.read_exact_raw(buf.as_mut_ptr().add(start), len, offset)?;
            buf.set_len(start + len);
        }
        Ok(())
    }

    /// `preadv2` with `RWF_NOWAIT`: the kernel serves what the page cache
    /// holds and answers `EAGAIN` rather than wait for the device.
    fn read_cached_at(&self, offset: u64, buf: &mut [u8]) -> bool {
        // SAFETY: `buf` is writable for its length.
        unsafe { self.read_cached_raw(buf.as_mut_ptr(), buf.len(), offset) }
    }

    fn read_cached_at_append(&self, offset: u64, len: usize, buf: &mut Vec<u8>) -> bool {
        buf.reserve(len);
        let start = buf.len();
        // SAFETY: as in `read_exact_at_append`; the length grows only when
        // every byte was written.
        unsafe {
            let done = self.read_cached_raw(buf.as_mut_ptr().add(start), len, offset);
            if done {
                buf.set_len(start + len);
            }
            done
        }
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// Holds an `flock` on the open file; closing the file releases it.
struct PosixLock(#[allow(dead_code)] fs::File);

impl FileLock for PosixLock {}

impl FileSystem for PosixFs {
    fn create(&self, path: &Path, hint: WriteHint) -> Result<Box<dyn WritableFile>> {
        let (file, mode) = open_writable(path, hint)?;
        Ok(Box::new(PosixWritable::new(
            path,
            file,
            mode,
            hint.bytes_per_sync,
        )))
    }

    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        use std::os::unix::fs::MetadataExt;
        let mut open = OPEN_READERS.lock();
        let file = fs::File::open(path).map_err(ctx("open", path))?;
        let meta = file.metadata().map_err(ctx("stat", path))?;
        let id = (meta.dev(), meta.ino());
        *open.entry(id).or_insert(0) += 1;
        drop(open);
        Ok(Arc::new(PosixReadable {
            path: path.to_path_buf(),
            file,
            len: meta.len(),
            nowait: AtomicBool::new(true),
            _open: ReaderMark(id),
        }))
    }

    fn read_all(&self, path: &Path) -> Result<Vec<u8>> {
        fs::read(path).map_err(ctx("read", path))
    }

    fn link(&self, from: &Path, to: &Path) -> Result<bool> {
        match fs::hard_link(from, to) {
            Ok(()) => Ok(true),
            // Another device (EXDEV), or a file system without hard links
            // (EPERM, EOPNOTSUPP, EMLINK): the caller copies.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EXDEV | libc::EPERM | libc::EOPNOTSUPP | libc::EMLINK)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(Error::io(
                format!("link {} to {}", from.display(), to.display()),
                e,
            )),
        }
    }

    fn retire(&self, path: &Path, to: &Path) -> Result<bool> {
        use std::os::unix::fs::MetadataExt;
        let open = OPEN_READERS.lock();
        let meta = fs::metadata(path).map_err(ctx("stat", path))?;
        if meta.nlink() != 1 || open.contains_key(&(meta.dev(), meta.ino())) {
            return Ok(false);
        }
        self.rename(path, to)?;
        Ok(true)
    }

    fn reuse(&self, from: &Path, path: &Path, hint: WriteHint) -> Result<Box<dyn WritableFile>> {
        if hint.direct {
            // Written around the page cache: nothing to gain.
            self.remove(from)?;
            return self.create(path, hint);
        }
        self.rename(from, path)?;
        let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| Error::io(format!("create {}", path.display()), e.into()))?;
        let mut w = PosixWritable::new(
            path,
            fs::File::from(fd),
            IoMode::Buffered,
            hint.bytes_per_sync,
        );
        w.cut_pending = true;
        Ok(Box::new(w))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        fs::rename(from, to)
            .map_err(|e| Error::io(format!("rename {} to {}", from.display(), to.display()), e))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        fs::remove_file(path).map_err(ctx("remove", path))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for e in fs::read_dir(dir).map_err(ctx("list", dir))? {
            let e = e.map_err(ctx("list", dir))?;
            out.push(e.file_name().to_string_lossy().into_owned());
        }
        Ok(out)
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        fs::create_dir_all(dir).map_err(ctx("create dir", dir))
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let d = fs::File::open(dir).map_err(ctx("open dir", dir))?;
        rustix::fs::fsync(&d)
            .map_err(|e| Error::io(format!("sync dir {}", dir.display()), e.into()))
    }

    fn file_size(&self, path: &Path) -> Result<u64> {
        Ok(fs::metadata(path).map_err(ctx("stat", path))?.len())
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(ctx("open lock file", path))?;
        match rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Box::new(PosixLock(f))),
            Err(Errno::WOULDBLOCK) => Err(Error::Locked(format!(
                "{} is held by another opener",
                path.display()
            ))),
            Err(e) => Err(Error::io(format!("lock {}", path.display()), e.into())),
        }
    }

    fn free_space(&self, dir: &Path) -> Result<u64> {
        let s = rustix::fs::statvfs(dir)
            .map_err(|e| Error::io(format!("statvfs {}", dir.display()), e.into()))?;
        Ok(s.f_bavail.saturating_mul(s.f_frsize))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand::{Rng, RngCore, SeedableRng};

    fn pattern(n: usize, seed: u64) -> Vec<u8> {
        let mut v = vec![0; n];
        rand::rngs::SmallRng::seed_from_u64(seed).fill_bytes(&mut v);
        v
    }

    /// Writes `data` to a new file at `p`, syncs it and opens it for reads.
    fn synced_file(fs: &PosixFs, p: &Path, data: &[u8]) -> Arc<dyn RandomAccessFile> {
        let mut f = fs.create(p, WriteHint::default()).unwrap();
        f.append(data).unwrap();
        f.sync().unwrap();
        drop(f);
        fs.open(p).unwrap()
    }

    /// A cached read returns the bytes when the page cache holds them, and
    /// says it would wait (never an error) past the end or once the pages
    /// are dropped.
    #[test]
    fn cached_reads_never_wait_for_the_device() {
        let dir = tempfile::tempdir().unwrap();
        let fs = PosixFs::new();
        let p = dir.path().join("000013.sst");
        let data = pattern(64 << 10, 2);
        let r = synced_file(&fs, &p, &data);
        let mut buf = vec![0; 8192];
        // Just written: in the page cache (unless the kernel refuses the
        // flag on this file system, then always "would wait").
        let supported = r.read_cached_at(4096, &mut buf);
        if supported {
            assert_eq!(buf, data[4096..4096 + 8192]);
        }
        assert!(!r.read_cached_at(data.len() as u64 - 10, &mut buf));
        let mut exact = vec![0; 8192];
        r.read_exact_at(4096, &mut exact).unwrap();
        assert_eq!(exact, data[4096..4096 + 8192]);
        // Clean pages dropped (a memory file system keeps them: they are
        // its storage): the read would wait for the device.
        let file = fs::File::open(&p).unwrap();
        let on_tmpfs = rustix::fs::fstatfs(&file).unwrap().f_type == 0x0102_1994;
        rustix::fs::fadvise(&file, 0, 0, rustix::fs::Advice::DontNeed).unwrap();
        if supported && !on_tmpfs {
            assert!(!r.read_cached_at(4096, &mut buf));
        }
    }

    /// The appending reads fill a buffer's spare capacity with exactly the
    /// file's bytes, keep what it held, and leave it as it was when they
    /// fail (past the end) or would wait.
    #[test]
    fn appending_reads_fill_spare_capacity_or_leave_the_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let fs = PosixFs::new();
        let p = dir.path().join("000014.sst");
        let data = pattern(64 << 10, 3);
        let r = synced_file(&fs, &p, &data);
        let mut buf = b"head".to_vec();
        r.read_exact_at_append(1000, 5000, &mut buf).unwrap();
        assert_eq!(&buf[..4], b"head");
        assert_eq!(buf[4..], data[1000..6000]);
        let end = data.len() as u64 - 10;
        match r.read_exact_at_append(end, 100, &mut buf) {
            Err(Error::Corruption { at, .. }) => assert_eq!(at.offset, end),
            other => panic!("expected corruption, got {other:?}"),
        }
        assert_eq!(buf.len(), 5004, "a failed read appends nothing");
        let mut cached = Vec::with_capacity(3);
        if r.read_cached_at_append(8192, 4096, &mut cached) {
            assert_eq!(cached, data[8192..8192 + 4096]);
        } else {
            assert!(cached.is_empty());
        }
        let mut past = vec![7u8];
        assert!(!r.read_cached_at_append(end, 100, &mut past));
        assert_eq!(past, [7]);
    }

    #[test]
    fn buffered_roundtrip_and_read_past_end_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let fs = PosixFs::new();
        let p = dir.path().join("000012.log");
        let mut f = fs.create(&p, WriteHint::default()).unwrap();
        let data = pattern(3 * WRITE_BUFFER_BYTES + 123, 1);
        let mut expect = Vec::new();
        // Small appends, then a large one that bypasses the buffer.
        for chunk in data[..10_000].chunks(17) {
            f.append(chunk).unwrap();
            expect.extend_from_slice(chunk);
        }
        f.append(&data[10_000..]).unwrap();
        expect.extend_from_slice(&data[10_000..]);
        assert_eq!(f.len(), expect.len() as u64);
        f.sync().unwrap();
        assert_eq!(fs.read_all(&p).unwrap(), expect);

        let r = fs.open(&p).unwrap();
        assert_eq!(r.len(), expect.len() as u64);
        let mut b = [0u8; 100];
        r.read_exact_at(5000, &mut b).unwrap();
        assert_eq!(&b[..], &expect[5000..5100]);
        let end = expect.len() as u64 - 10;
        match r.read_exact_at(end, &mut b) {
            Err(Error::Corruption { at, .. }) => {
                assert_eq!(at.offset, end);
                assert!(at.source.ends_with("000012.log"));
            }
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn the_write_buffer_shows_only_bytes_written() {
        let mut b = AlignedBuf::new(2 * DIRECT_ALIGN);
        assert_eq!(b.ptr.as_ptr() as usize % DIRECT_ALIGN, 0);
        assert!(b.filled(0..0).is_empty());
        b.write_at(0, b"hello");
        b.write_at(5, b" world");
        assert_eq!(b.filled(0..11), b"hello world");
        // Moving written bytes down keeps them readable where they land.
        b.copy_within(6..11, 0);
        assert_eq!(b.filled(0..5), b"world");
        assert_eq!(b.filled(0..11), b"world world");
        // Writing on from the end of what was written, up to the capacity.
        b.write_at(11, &[7u8; 2 * DIRECT_ALIGN - 11]);
        assert_eq!(b.filled(2 * DIRECT_ALIGN - 1..2 * DIRECT_ALIGN), [7]);
        let beyond = |f: fn(&mut AlignedBuf)| {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut b = AlignedBuf::new(DIRECT_ALIGN);
                b.write_at(0, b"abc");
                f(&mut b);
            }));
            assert!(r.is_err(), "unwritten or out-of-range bytes reached");
        };
        beyond(|b| {
            let _ = b.filled(0..4);
        });
        beyond(|b| b.write_at(4, b"gap"));
        beyond(|b| b.write_at(DIRECT_ALIGN - 1, b"xy"));
        beyond(|b| b.copy_within(0..4, 0));
        beyond(|b| b.copy_within(0..3, DIRECT_ALIGN - 2));
    }

    fn direct_roundtrip(sizes: &[usize], flush_every: usize) {
        let dir = tempfile::tempdir().unwrap();
        let fs = PosixFs::new();
        let p = dir.path().join("000007.sst");
        let mut f = fs.create(&p, WriteHint::direct()).unwrap();
        let mut expect = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let d = pattern(n, i as u64);
            f.append(&d).unwrap();
            expect.extend_from_slice(&d);
            if flush_every > 0 && i % flush_every == 0 {
                f.flush().unwrap();
                assert_eq!(fs.file_size(&p).unwrap(), expect.len() as u64);
                assert_eq!(fs.read_all(&p).unwrap(), expect);
            }
        }
        f.sync().unwrap();
        assert_eq!(f.len(), expect.len() as u64);
        assert_eq!(fs.file_size(&p).unwrap(), expect.len() as u64);
        assert_eq!(fs.read_all(&p).unwrap(), expect);
    }

    #[test]
    fn direct_writes_exact_length_with_partial_tail() {
        direct_roundtrip(&[5000], 0);
        direct_roundtrip(&[4096], 0);
        direct_roundtrip(&[1], 0);
        direct_roundtrip(&[], 0);
        direct_roundtrip(&[WRITE_BUFFER_BYTES + 7, 3, WRITE_BUFFER_BYTES * 2], 0);
    }

    #[test]
    fn direct_tail_rewritten_after_flush() {
        // Flushing between appends writes the tail buffered, then rewrites
        // its block with O_DIRECT once it is complete.
        let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
        let sizes: Vec<usize> = (0..300).map(|_| rng.gen_range(1..20_000)).collect();
        direct_roundtrip(&sizes, 3);
    }

    #[test]
    fn direct_file_uses_o_direct_on_disk() {
        // /tmp is a real disk file system here; O_DIRECT must be in effect.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d");
        let (file, mode) = open_writable(&p, WriteHint::direct()).unwrap();
        if mode == IoMode::Buffered {
            eprintln!(
                "note: O_DIRECT not supported under {}",
                dir.path().display()
            );
        } else {
            assert!(rustix::fs::fcntl_getfl(&file)
                .unwrap()
                .contains(OFlags::DIRECT));
        }
    }

    #[test]
    fn direct_refused_at_open_falls_back() {
        REFUSE_DIRECT_OPEN.with(|r| r.set(true));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.sst");
        let (_, mode) = open_writable(&p, WriteHint::direct()).unwrap();
        assert_eq!(mode, IoMode::Buffered);
        direct_roundtrip(&[5000, 10, WRITE_BUFFER_BYTES], 1);
        REFUSE_DIRECT_OPEN.with(|r| r.set(false));
    }

    #[test]
    fn direct_refused_at_write_falls_back() {
        let dir = tempfile::tempdir().unwrap();
        let fs = PosixFs::new();
        let p = dir.path().join("y.sst");
        let mut f = fs.create(&p, WriteHint::direct()).unwrap();
        let a = pattern(10_000, 1);
        f.append(&a).unwrap();
        f.flush().unwrap();
        REFUSE_DIRECT_WRITE.with(|r| r.set(true));
        let b = pattern(WRITE_BUFFER_BYTES + 5, 2);
        f.append(&b).unwrap();
        f.sync().unwrap();
        let mut expect = a;
        expect.extend_from_slice(&b);
        assert_eq!(fs.read_all(&p).unwrap(), expect);
    }

    #[test]
    fn bytes_per_sync_starts_write_back_as_the_file_grows() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("000007.sst");
        let (file, mode) = open_writable(&p, WriteHint::default()).unwrap();
        let mut f = PosixWritable::new(&p, file, mode, (WRITE_BUFFER_BYTES + 1) as u64);
        let data = pattern(5 * WRITE_BUFFER_BYTES + 77, 4);
        for chunk in data.chunks(4000) {
            f.append(chunk).unwrap();
            // Started only for bytes the OS has, and never lagging by
            // `bytes_per_sync` or more.
            assert!(f.writeback_from <= f.os_len);
            assert!(f.os_len - f.writeback_from < f.bytes_per_sync);
        }
        assert!(f.writeback_from >= 2 * WRITE_BUFFER_BYTES as u64);
        f.sync().unwrap();
        assert_eq!(PosixFs::new().read_all(&p).unwrap(), data);
        // Direct mode never starts write-back (the page cache is bypassed).
        let hint = WriteHint {
            direct: true,
            bytes_per_sync: 4096,
        };
        let q = dir.path().join("000008.sst");
        let (file, mode) = open_writable(&q, hint).unwrap();
        let mut g = PosixWritable::new(&q, file, mode, hint.bytes_per_sync);
        g.append(&data).unwrap();
        g.sync().unwrap();
        assert_eq!(g.writeback_from, 0);
        assert_eq!(PosixFs::new().read_all(&q).unwrap(), data);
    }

    #[test]
    fn drop_flushes_without_sync() {
        let dir = tempfile::tempdir().unwrap();
        let fs = PosixFs::new();
        for direct in [false, true] {
            let p = dir.path().join(format!("f{direct}"));
            let mut f = fs
                .create(
                    &p,
                    WriteHint {
                        direct,
                        ..WriteHint::default()
                    },
                )
                .unwrap();
            f.append(b"hello").unwrap();
            f.append(&pattern(9000, 3)).unwrap();
            drop(f);
            assert_eq!(fs.file_size(&p).unwrap(), 9005);
        }
    }

    #[test]
    fn lock_is_exclusive_and_namespace_ops_work() {
        let dir = tempfile::tempdir().unwrap();
        let fs = PosixFs::new();
        let l = fs.lock(&dir.path().join("LOCK")).unwrap();
        assert!(matches!(
            fs.lock(&dir.path().join("LOCK")),
            Err(Error::Locked(_))
        ));
        drop(l);
        let _l = fs.lock(&dir.path().join("LOCK")).unwrap();

        let sub = dir.path().join("a/b");
        fs.create_dir_all(&sub).unwrap();
        let mut f = fs.create(&sub.join("t"), WriteHint::default()).unwrap();
        f.append(b"x").unwrap();
        f.sync().unwrap();
        fs.rename(&sub.join("t"), &sub.join("u")).unwrap();
        fs.sync_dir(&sub).unwrap();
        assert!(fs.exists(&sub.join("u")) && !fs.exists(&sub.join("t")));
        assert_eq!(fs.list(&sub).unwrap(), vec!["u".to_string()]);
        fs.remove(&sub.join("u")).unwrap();
        assert!(fs.free_space(dir.path()).unwrap() > 0);
        match fs.remove(&sub.join("u")) {
            Err(Error::Io { context, .. }) => assert!(context.contains("remove")),
            other => panic!("expected io error, got {other:?}"),
        }
    }

    /// A reused file holds exactly what was appended to it, shorter or
    /// longer than the file it was, synced or only dropped.
    #[test]
    fn a_reused_file_is_written_over_and_cut_to_what_was_appended() {
        let dir = tempfile::tempdir().unwrap();
        let fs = PosixFs::new();
        let (a, b, c) = (
            dir.path().join("000001.sst"),
            dir.path().join("000002.sst"),
            dir.path().join("000003.sst"),
        );
        let kept = dir.path().join("000001.recycle");
        drop(synced_file(&fs, &a, &pattern(10_000, 1)));
        assert!(fs.retire(&a, &kept).unwrap());
        assert!(!a.exists() && kept.exists());

        // Shorter than the old bytes, synced.
        let mut f = fs.reuse(&kept, &b, WriteHint::default()).unwrap();
        let short = pattern(3000, 2);
        f.append(&short).unwrap();
        f.sync().unwrap();
        assert!(fs.read_all(&b).unwrap() == short, "cut at the sync");
        drop(f);
        assert!(!kept.exists());

        // Longer, past a write-back request and the write buffer, synced.
        assert!(fs.retire(&b, &kept).unwrap());
        let hint = WriteHint {
            bytes_per_sync: 4096,
            ..WriteHint::default()
        };
        let mut f = fs.reuse(&kept, &c, hint).unwrap();
        let long = pattern(WRITE_BUFFER_BYTES + 5000, 3);
        f.append(&long).unwrap();
        f.sync().unwrap();
        drop(f);
        assert!(fs.read_all(&c).unwrap() == long, "extended");

        // Shorter again, never synced: cut when dropped.
        assert!(fs.retire(&c, &kept).unwrap());
        let mut f = fs.reuse(&kept, &a, WriteHint::default()).unwrap();
        f.append(b"tail").unwrap();
        drop(f);
        assert_eq!(fs.read_all(&a).unwrap(), b"tail");

        // Direct output gains nothing from cached pages: a new file.
        assert!(fs.retire(&a, &kept).unwrap());
        let mut f = fs.reuse(&kept, &b, WriteHint::direct()).unwrap();
        f.append(b"fresh").unwrap();
        f.sync().unwrap();
        drop(f);
        assert_eq!(fs.read_all(&b).unwrap(), b"fresh");
        assert!(!kept.exists());
    }

    /// A file another name links (a checkpoint's hard link) or a reader of
    /// this process has open is never kept for reuse: writing over it
    /// would change what they read.
    #[test]
    fn a_linked_or_open_file_is_not_retired() {
        let dir = tempfile::tempdir().unwrap();
        let fs = PosixFs::new();
        let a = dir.path().join("000001.sst");
        let kept = dir.path().join("000001.recycle");
        let data = pattern(8192, 4);
        let reader = synced_file(&fs, &a, &data);
        assert!(!fs.retire(&a, &kept).unwrap(), "a reader is open");
        let twin = fs.open(&a).unwrap();
        drop(reader);
        assert!(!fs.retire(&a, &kept).unwrap(), "one reader is still open");
        drop(twin);

        let link = dir.path().join("checkpoint.sst");
        assert!(fs.link(&a, &link).unwrap());
        assert!(!fs.retire(&a, &kept).unwrap(), "another name links it");
        assert!(a.exists() && !kept.exists());
        fs.remove(&link).unwrap();

        assert!(fs.retire(&a, &kept).unwrap());
        assert!(!a.exists() && kept.exists());
    }
}
