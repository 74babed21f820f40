//! Durability-event counting for the crash-at-every-persist-point tests:
//! a countdown that cuts the power just before the n-th PM persist or
//! file/directory sync, and the PM region and file system wrappers that
//! report those events to it. Shared by every design's `*_crash.rs`.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::{
    FileLock, FileSystem, PmRegion, Power, RandomAccessFile, WritableFile, WriteHint,
};
use tierkv::Result;

/// Cuts the power just before the n-th durability event (PM persist or
/// file/directory sync) once armed; counts events either way.
#[derive(Default)]
pub struct Countdown {
    left: AtomicU64,
    pub events: AtomicU64,
    pub power: parking_lot::Mutex<Power>,
}

impl Countdown {
    pub fn new(power: Power) -> Arc<Countdown> {
        Arc::new(Countdown {
            left: AtomicU64::new(u64::MAX),
            events: AtomicU64::new(0),
            power: parking_lot::Mutex::new(power),
        })
    }
    /// Cuts the power before the `n`-th event from now (0: the next).
    pub fn arm(&self, n: u64) {
        self.events.store(0, Ordering::SeqCst);
        self.left.store(n, Ordering::SeqCst);
    }
    /// Whether the power is still on.
    pub fn is_on(&self) -> bool {
        self.power.lock().is_on()
    }
    /// One durability event.
    pub fn tick(&self) {
        self.events.fetch_add(1, Ordering::SeqCst);
        let prev = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |x| {
                (x != u64::MAX && x > 0).then(|| x - 1).or(Some(x))
            })
            .unwrap_or(u64::MAX);
        if prev == 0 {
            self.power.lock().cut();
        }
    }
}

/// A simulated PM region whose persists are durability events.
pub struct CountingRegion {
    pub inner: Arc<SimRegion>,
    pub cd: Arc<Countdown>,
}

impl PmRegion for CountingRegion {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.inner.write(offset, data)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read(offset, buf)
    }
    fn slice(&self, offset: u64, len: usize) -> Result<&[u8]> {
        self.inner.slice(offset, len)
    }
    fn persist(&self, offset: u64, len: usize) -> Result<()> {
        self.cd.tick();
        self.inner.persist(offset, len)
    }
    fn fence(&self) {
        self.inner.fence()
    }
    fn persistence(&self) -> tierkv::storage::Persistence {
        self.inner.persistence()
    }
    fn store_u64(&self, offset: u64, value: u64) -> Result<()> {
        self.inner.store_u64(offset, value)
    }
    fn load_u64(&self, offset: u64) -> Result<u64> {
        self.inner.load_u64(offset)
    }
}

/// A crashable in-memory file system whose file and directory syncs
/// are durability events.
pub struct CountingFs {
    pub inner: MemFs,
    pub cd: Arc<Countdown>,
}

/// A file of [`CountingFs`].
pub struct CountingFile {
    inner: Box<dyn WritableFile>,
    cd: Arc<Countdown>,
}

impl WritableFile for CountingFile {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.inner.append(data)
    }
    fn flush(&mut self) -> Result<()> {
        self.inner.flush()
    }
    fn sync(&mut self) -> Result<()> {
        self.cd.tick();
        self.inner.sync()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}

impl FileSystem for CountingFs {
    fn create(&self, path: &Path, hint: WriteHint) -> Result<Box<dyn WritableFile>> {
        Ok(Box::new(CountingFile {
            inner: self.inner.create(path, hint)?,
            cd: Arc::clone(&self.cd),
        }))
    }
    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        self.inner.open(path)
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
        self.cd.tick();
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
}
