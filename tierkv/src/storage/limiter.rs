//! The background write limiter: compaction output reaches the SSD at a
//! rate that tunes itself to the latency of foreground reads.
//!
//! Why: a point read that misses the page cache queues behind compaction's
//! writes on the same device. Measured on the development machine (perf,
//! switch events of every read over 1 ms, `medium` readrandom right after
//! a fill, README "Reads"): 73% of the time in `classic`'s slow reads was
//! such disk waits, the median disk read 0.3 ms but the 99th percentile
//! 18 ms, while compactions wrote. RocksDB's answer is a rate limiter on
//! background writes (auto-tuned from how often it is drained); this one
//! tunes to what it protects, the foreground reads.
//!
//! Control law, one window of [`WINDOW`] at a time:
//! 1. Foreground threads (every thread not marked with
//!    [`mark_background`]) time their file reads that the page cache could
//!    not serve (asked first without waiting for the device,
//!    [`RandomAccessFile::read_cached_at`]); such a read slower than
//!    [`SLOW_READ`] counts as slow. An idle disk's read takes a few hundred
//!    microseconds; a millisecond means queueing. A page-cache hit never
//!    counts, however long it took: it waited for a CPU, not the device
//!    (measured before this rule: half the time of slow reads after the
//!    first fixes was preemption by other threads).
//! 2. A window with a slow foreground read halves the limit, starting
//!    from what background writes achieved in that window when there was
//!    none, never below [`FLOOR_BYTES_PER_SEC`]: compaction always makes
//!    progress (the write controller slows writers if it falls behind, as
//!    it must when reads are to stay fast).
//! 3. A window without one raises the limit by half; past
//!    [`CEILING_BYTES_PER_SEC`] the limit is lifted. From the floor to no
//!    limit takes about 1.3 s of fast reads; a burst of slow reads brings
//!    it down within a few windows (multiplicative decrease, as TCP).
//! 4. Admission is a token bucket holding at most one window's bytes, so
//!    a lifted limit never releases a saved-up burst.
//!
//! Only compaction output into the SSD levels (L1 and below) is limited:
//! a flush is what writers wait on, and throttling it would turn fast
//! reads into write stalls. PM writes are not I/O.

use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::Result;
use crate::storage::{FileLock, FileSystem, RandomAccessFile, WritableFile, WriteHint};

/// One control window.
pub const WINDOW: Duration = Duration::from_millis(100);
/// A foreground read this slow has queued behind something.
pub const SLOW_READ: Duration = Duration::from_millis(1);
/// The lowest limit: 8 MiB/s (a 64 MiB table in 8 s).
pub const FLOOR_BYTES_PER_SEC: f64 = 8.0 * 1048576.0;
/// Above this the limit is lifted: 1 GiB/s, more than the SSDs this was
/// measured on write.
pub const CEILING_BYTES_PER_SEC: f64 = 1024.0 * 1048576.0;

thread_local! {
    static BACKGROUND: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as background work: its reads are not the
/// foreground reads the limiter protects.
pub fn mark_background() {
    BACKGROUND.with(|b| b.set(true));
}

/// Marks the calling thread as background work until the guard drops (a
/// manual compaction on a user's thread).
pub fn background_scope() -> BackgroundScope {
    BackgroundScope(BACKGROUND.with(|b| b.replace(true)))
}

/// See [`background_scope`].
pub struct BackgroundScope(bool);

impl Drop for BackgroundScope {
    fn drop(&mut self) {
        BACKGROUND.with(|b| b.set(self.0));
    }
}

fn is_background() -> bool {
    BACKGROUND.with(Cell::get)
}

/// The limiter (module doc). Shared by the engine's file system wrapper
/// ([`GovernedFs`]) and the compaction output writers.
#[derive(Debug)]
pub struct BackgroundLimiter {
    slow_reads: AtomicU64,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// Bytes per second; `None`: no limit.
    limit: Option<f64>,
    tokens: f64,
    refilled: Instant,
    window_start: Instant,
    /// Background bytes admitted in this window.
    window_bytes: u64,
    /// Windows that lowered the limit (for the property).
    lowered: u64,
}

impl Default for BackgroundLimiter {
    fn default() -> Self {
        BackgroundLimiter::new()
    }
}

impl BackgroundLimiter {
    /// A limiter with no limit yet.
    pub fn new() -> BackgroundLimiter {
        let now = Instant::now();
        BackgroundLimiter {
            slow_reads: AtomicU64::new(0),
            state: Mutex::new(Bucket {
                limit: None,
                tokens: 0.0,
                refilled: now,
                window_start: now,
                window_bytes: 0,
                lowered: 0,
            }),
        }
    }

    /// A foreground read took `elapsed`.
    pub fn observe_read(&self, elapsed: Duration) {
        if elapsed >= SLOW_READ {
            self.slow_reads.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The limit now, bytes per second (`None`: none), and how many
    /// windows lowered it so far.
    pub fn limit(&self) -> (Option<u64>, u64) {
        let b = self.state.lock();
        (b.limit.map(|l| l as u64), b.lowered)
    }

    /// Admits `bytes` of background writes, sleeping as the limit asks.
    pub fn request(&self, bytes: usize) {
        let mut want = bytes as f64;
        loop {
            let sleep = {
                let mut b = self.state.lock();
                let now = Instant::now();
                self.tune(&mut b, now);
                b.window_bytes += want as u64;
                let Some(limit) = b.limit else {
                    return;
                };
                let elapsed = now.saturating_duration_since(b.refilled).as_secs_f64();
                b.refilled = now;
                let burst = limit * WINDOW.as_secs_f64();
                b.tokens = (b.tokens + elapsed * limit).min(burst);
                if b.tokens >= want {
                    b.tokens -= want;
                    return;
                }
                // Take what there is; sleep for the rest (at most a
                // window, then look at the limit again).
                want -= b.tokens.max(0.0);
                b.window_bytes -= want as u64;
                b.tokens = 0.0;
                Duration::from_secs_f64((want / limit).min(WINDOW.as_secs_f64()))
            };
            std::thread::sleep(sleep);
        }
    }

    /// Closes the window if it is over (module doc, rules 2 and 3).
    fn tune(&self, b: &mut Bucket, now: Instant) {
        let span = now.saturating_duration_since(b.window_start);
        if span < WINDOW {
            return;
        }
        let slow = self.slow_reads.swap(0, Ordering::Relaxed);
        let achieved = b.window_bytes as f64 / span.as_secs_f64();
        b.limit = next_limit(b.limit, achieved, slow);
        if slow > 0 {
            b.lowered += 1;
        }
        b.window_start = now;
        b.window_bytes = 0;
    }
}

/// The control law (module doc): the limit after a window in which
/// background writes achieved `achieved` bytes/s and `slow` foreground
/// reads were slow.
pub fn next_limit(limit: Option<f64>, achieved: f64, slow: u64) -> Option<f64> {
    if slow > 0 {
        let base = limit
            .unwrap_or(achieved)
            .min(achieved.max(FLOOR_BYTES_PER_SEC));
        return Some((base / 2.0).max(FLOOR_BYTES_PER_SEC));
    }
    match limit {
        None => None,
        Some(l) if l * 1.5 > CEILING_BYTES_PER_SEC => None,
        Some(l) => Some(l * 1.5),
    }
}

/// A writer whose appends the limiter admits.
pub struct Throttled {
    inner: Box<dyn WritableFile>,
    limiter: Arc<BackgroundLimiter>,
}

impl Throttled {
    /// Wraps `inner`.
    pub fn new(inner: Box<dyn WritableFile>, limiter: Arc<BackgroundLimiter>) -> Throttled {
        Throttled { inner, limiter }
    }
}

impl WritableFile for Throttled {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.limiter.request(data.len());
        self.inner.append(data)
    }
    fn flush(&mut self) -> Result<()> {
        self.inner.flush()
    }
    fn sync(&mut self) -> Result<()> {
        self.inner.sync()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}

/// The engine's file system: the given one, with foreground reads timed
/// for the limiter.
pub struct GovernedFs {
    inner: Arc<dyn FileSystem>,
    limiter: Arc<BackgroundLimiter>,
}

impl GovernedFs {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn FileSystem>, limiter: Arc<BackgroundLimiter>) -> GovernedFs {
        GovernedFs { inner, limiter }
    }
}

struct TimedReads {
    inner: Arc<dyn RandomAccessFile>,
    limiter: Arc<BackgroundLimiter>,
}

impl TimedReads {
    /// A foreground read of `buf` timed for the limiter: `cached` first,
    /// and only a read that had to wait for the device (`exact` after it)
    /// is observed. A background thread's read goes straight to `exact`.
    fn timed<B: ?Sized>(
        &self,
        buf: &mut B,
        cached: impl FnOnce(&dyn RandomAccessFile, &mut B) -> bool,
        exact: impl FnOnce(&dyn RandomAccessFile, &mut B) -> Result<()>,
    ) -> Result<()> {
        let inner = self.inner.as_ref();
        if is_background() {
            return exact(inner, buf);
        }
        // A page-cache hit waited for no device: however long it took
        // (preempted by other threads), compaction's I/O was not the cause.
        if cached(inner, buf) {
            return Ok(());
        }
        let t0 = Instant::now();
        let r = exact(inner, buf);
        self.limiter.observe_read(t0.elapsed());
        r
    }
}

impl RandomAccessFile for TimedReads {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.timed(
            buf,
            |f, b| f.read_cached_at(offset, b),
            |f, b| f.read_exact_at(offset, b),
        )
    }
    fn read_exact_at_append(&self, offset: u64, len: usize, buf: &mut Vec<u8>) -> Result<()> {
        self.timed(
            buf,
            |f, b| f.read_cached_at_append(offset, len, b),
            |f, b| f.read_exact_at_append(offset, len, b),
        )
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}

impl FileSystem for GovernedFs {
    fn create(&self, path: &Path, hint: WriteHint) -> Result<Box<dyn WritableFile>> {
        self.inner.create(path, hint)
    }
    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        Ok(Arc::new(TimedReads {
            inner: self.inner.open(path)?,
            limiter: Arc::clone(&self.limiter),
        }))
    }
    fn read_all(&self, path: &Path) -> Result<Vec<u8>> {
        self.inner.read_all(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        self.inner.remove(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.inner.sync_dir(dir)
    }
    fn file_size(&self, path: &Path) -> Result<u64> {
        self.inner.file_size(path)
    }
    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        self.inner.lock(path)
    }
    fn free_space(&self, dir: &Path) -> Result<u64> {
        self.inner.free_space(dir)
    }
    fn link(&self, from: &Path, to: &Path) -> Result<bool> {
        self.inner.link(from, to)
    }
    fn retire(&self, path: &Path, to: &Path) -> Result<bool> {
        self.inner.retire(path, to)
    }
    fn reuse(&self, from: &Path, path: &Path, hint: WriteHint) -> Result<Box<dyn WritableFile>> {
        self.inner.reuse(from, path, hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1048576.0;

    #[test]
    fn slow_reads_halve_from_what_background_achieved() {
        // No limit, 200 MiB/s written, a slow read: 100 MiB/s.
        assert_eq!(next_limit(None, 200.0 * MIB, 1), Some(100.0 * MIB));
        // Limited at 100 but only 40 achieved: halve what was achieved.
        assert_eq!(
            next_limit(Some(100.0 * MIB), 40.0 * MIB, 3),
            Some(20.0 * MIB)
        );
        // Never below the floor, even with nothing written.
        assert_eq!(next_limit(None, 0.0, 1), Some(FLOOR_BYTES_PER_SEC));
        assert_eq!(
            next_limit(Some(FLOOR_BYTES_PER_SEC), 1.0, 9),
            Some(FLOOR_BYTES_PER_SEC)
        );
    }

    #[test]
    fn fast_windows_lift_the_limit() {
        let mut l = Some(FLOOR_BYTES_PER_SEC);
        let mut windows = 0;
        while l.is_some() {
            l = next_limit(l, 0.0, 0);
            windows += 1;
            assert!(windows < 20, "the limit never lifts");
        }
        // 8 MiB/s × 1.5^n > 1 GiB/s at n = 12: 1.2 s of fast reads.
        assert_eq!(windows, 12);
        assert_eq!(next_limit(None, 500.0 * MIB, 0), None);
    }

    #[test]
    fn a_limited_writer_waits_for_its_bytes() {
        let l = BackgroundLimiter::new();
        l.state.lock().limit = Some(FLOOR_BYTES_PER_SEC);
        // The window never closes during this test's second (no slow
        // reads would keep the limit; make the window long ago closed
        // only after): at 8 MiB/s, 2 MiB need at least 0.25 s minus the
        // one window of burst the bucket may hold (none: it starts empty).
        l.state.lock().window_start = Instant::now() + Duration::from_secs(3600);
        let t0 = Instant::now();
        for _ in 0..32 {
            l.request(64 << 10);
        }
        assert!(
            t0.elapsed() >= Duration::from_millis(240),
            "{:?}",
            t0.elapsed()
        );
    }

    /// A file whose reads take 5 ms, served from the page cache or not.
    struct SlowFile {
        cached: bool,
    }

    impl RandomAccessFile for SlowFile {
        fn read_exact_at(&self, _offset: u64, buf: &mut [u8]) -> Result<()> {
            std::thread::sleep(Duration::from_millis(5));
            buf.fill(7);
            Ok(())
        }
        fn read_cached_at(&self, offset: u64, buf: &mut [u8]) -> bool {
            self.cached && self.read_exact_at(offset, buf).is_ok()
        }
        fn len(&self) -> u64 {
            1 << 20
        }
        fn path(&self) -> &Path {
            Path::new("/slow")
        }
    }

    /// A slow page-cache hit waited for a CPU, not the device: only reads
    /// the cache could not serve count.
    #[test]
    fn only_reads_that_wait_for_the_device_count() {
        let limiter = Arc::new(BackgroundLimiter::new());
        let mut buf = [0u8; 16];
        for cached in [true, false] {
            let f = TimedReads {
                inner: Arc::new(SlowFile { cached }),
                limiter: Arc::clone(&limiter),
            };
            f.read_exact_at(0, &mut buf)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(buf, [7; 16]);
            assert_eq!(
                limiter.slow_reads.load(Ordering::Relaxed),
                u64::from(!cached),
                "cached {cached}"
            );
        }
    }

    #[test]
    fn only_foreground_reads_count() {
        let l = BackgroundLimiter::new();
        l.observe_read(Duration::from_millis(5));
        l.observe_read(Duration::from_micros(5));
        assert_eq!(l.slow_reads.load(Ordering::Relaxed), 1);
        let fs = Arc::new(crate::storage::mem::MemFs::new());
        let limiter = Arc::new(BackgroundLimiter::new());
        let g = GovernedFs::new(fs, Arc::clone(&limiter));
        let p = Path::new("/t");
        let mut f = g
            .create(p, WriteHint::default())
            .unwrap_or_else(|e| panic!("{e}"));
        f.append(b"abc").unwrap_or_else(|e| panic!("{e}"));
        f.sync().unwrap_or_else(|e| panic!("{e}"));
        drop(f);
        let r = g.open(p).unwrap_or_else(|e| panic!("{e}"));
        let mut buf = [0u8; 3];
        r.read_exact_at(0, &mut buf)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&buf, b"abc");
        std::thread::spawn(move || {
            mark_background();
            assert!(is_background());
        })
        .join()
        .unwrap_or_else(|_| panic!("thread"));
        assert!(!is_background());
    }
}
