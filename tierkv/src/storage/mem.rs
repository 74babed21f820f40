//! An in-memory [`FileSystem`] that can crash.
//!
//! It keeps two namespaces: the *live* one every call sees, and the *durable*
//! one a crash returns to. A file's bytes become durable at
//! [`WritableFile::sync`] (up to the length at that moment); its name, a
//! rename or a removal become durable at [`FileSystem::sync_dir`] of its
//! directory. [`MemFs::crash`] returns a new file system holding exactly the
//! durable state — what a machine would find after losing power.
//!
//! To crash at a chosen instant, [`MemFs::set_sync_budget`] lets only the next
//! `n` durability operations (file syncs and directory syncs) take effect;
//! later ones return `Ok` but make nothing durable, as if the power had gone
//! out at that point while the process ran on. [`MemFs::sync_count`] counts
//! them, so a test can enumerate every crash point of an operation.
//!
//! Concurrency: every method takes `&self`; one mutex guards the namespaces,
//! and each file's bytes have their own lock.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::{FileLock, FileSystem, Power, RandomAccessFile, WritableFile, WriteHint};
use crate::error::{Error, Result};

#[derive(Default)]
struct FileData {
    bytes: RwLock<Vec<u8>>,
    synced_len: AtomicU64,
    /// How it was created (tests check what the engine asks for).
    hint: WriteHint,
}

#[derive(Default)]
struct State {
    live: BTreeMap<PathBuf, Arc<FileData>>,
    durable: BTreeMap<PathBuf, Arc<FileData>>,
    dirs: BTreeSet<PathBuf>,
    locks: HashSet<PathBuf>,
    /// Remaining durability operations that take effect; `None` = unlimited.
    sync_budget: Option<u64>,
    /// Shared power switch; when cut, nothing more becomes durable.
    power: Power,
}

/// The crashable in-memory file system. Cheap to clone (shared state).
#[derive(Clone, Default)]
pub struct MemFs {
    state: Arc<Mutex<State>>,
    syncs: Arc<AtomicU64>,
}

impl MemFs {
    /// An empty file system.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new file system holding only what was durable: synced bytes of
    /// files whose names were made durable by a directory sync.
    pub fn crash(&self) -> MemFs {
        let st = self.state.lock();
        let mut durable = BTreeMap::new();
        for (path, f) in &st.durable {
            let n = f.synced_len.load(Ordering::Acquire) as usize;
            let bytes = f.bytes.read();
            let copy = Arc::new(FileData {
                bytes: RwLock::new(bytes[..n.min(bytes.len())].to_vec()),
                synced_len: AtomicU64::new(n as u64),
                hint: f.hint,
            });
            durable.insert(path.clone(), copy);
        }
        MemFs {
            state: Arc::new(Mutex::new(State {
                live: durable.clone(),
                durable,
                dirs: st.dirs.clone(),
                locks: HashSet::new(),
                sync_budget: None,
                power: Power::new(),
            })),
            syncs: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Lets only the next `n` durability operations take effect (`None`:
    /// all of them).
    pub fn set_sync_budget(&self, n: Option<u64>) {
        self.state.lock().sync_budget = n;
    }

    /// Connects this file system to a shared power switch.
    pub fn set_power(&self, power: Power) {
        self.state.lock().power = power;
    }

    /// Durability operations (file and directory syncs) performed so far.
    pub fn sync_count(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// The live files with the hints they were created with, by path.
    pub fn write_hints(&self) -> Vec<(PathBuf, WriteHint)> {
        let st = self.state.lock();
        st.live.iter().map(|(p, f)| (p.clone(), f.hint)).collect()
    }

    /// Total bytes of all live files.
    pub fn total_bytes(&self) -> u64 {
        let st = self.state.lock();
        st.live.values().map(|f| f.bytes.read().len() as u64).sum()
    }

    /// Overwrites bytes of a live file in place (corruption tests).
    pub fn corrupt(&self, path: &Path, offset: usize, xor: u8) -> Result<()> {
        let st = self.state.lock();
        let f = st.live.get(path).ok_or_else(|| not_found(path))?;
        let mut b = f.bytes.write();
        match b.get_mut(offset) {
            Some(x) => {
                *x ^= xor;
                Ok(())
            }
            None => Err(Error::InvalidArgument(format!(
                "corrupt: offset {offset} beyond {}",
                path.display()
            ))),
        }
    }

    /// Truncates a live file (torn-tail tests); also truncates its durable bytes.
    pub fn truncate(&self, path: &Path, len: usize) -> Result<()> {
        let st = self.state.lock();
        let f = st.live.get(path).ok_or_else(|| not_found(path))?;
        f.bytes.write().truncate(len);
        f.synced_len.fetch_min(len as u64, Ordering::AcqRel);
        Ok(())
    }

    /// Consumes one unit of sync budget; true if the operation takes effect.
    fn take_sync(st: &mut State) -> bool {
        if !st.power.is_on() {
            return false;
        }
        match &mut st.sync_budget {
            None => true,
            Some(0) => false,
            Some(n) => {
                *n -= 1;
                true
            }
        }
    }
}

fn not_found(path: &Path) -> Error {
    Error::io(
        format!("open {}", path.display()),
        std::io::Error::from(std::io::ErrorKind::NotFound),
    )
}

struct MemWritable {
    path: PathBuf,
    data: Arc<FileData>,
    fs: MemFs,
}

impl WritableFile for MemWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.data.bytes.write().extend_from_slice(data);
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        self.fs.syncs.fetch_add(1, Ordering::Relaxed);
        let mut st = self.fs.state.lock();
        if MemFs::take_sync(&mut st) {
            let n = self.data.bytes.read().len() as u64;
            self.data.synced_len.store(n, Ordering::Release);
        }
        Ok(())
    }
    fn len(&self) -> u64 {
        self.data.bytes.read().len() as u64
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

struct MemReadable {
    path: PathBuf,
    data: Arc<FileData>,
}

impl RandomAccessFile for MemReadable {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let b = self.data.bytes.read();
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        match start
            .checked_add(buf.len())
            .and_then(|end| b.get(start..end))
        {
            Some(src) => {
                buf.copy_from_slice(src);
                Ok(())
            }
            None => Err(Error::corruption(
                self.path.display().to_string(),
                offset,
                format!("read of {} bytes past end of file ({})", buf.len(), b.len()),
            )),
        }
    }
    fn len(&self) -> u64 {
        self.data.bytes.read().len() as u64
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

struct MemLock {
    path: PathBuf,
    fs: MemFs,
}

impl FileLock for MemLock {}

impl Drop for MemLock {
    fn drop(&mut self) {
        self.fs.state.lock().locks.remove(&self.path);
    }
}

impl FileSystem for MemFs {
    fn create(&self, path: &Path, hint: WriteHint) -> Result<Box<dyn WritableFile>> {
        let data = Arc::new(FileData {
            hint,
            ..FileData::default()
        });
        self.state
            .lock()
            .live
            .insert(path.to_path_buf(), Arc::clone(&data));
        Ok(Box::new(MemWritable {
            path: path.to_path_buf(),
            data,
            fs: self.clone(),
        }))
    }

    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        let st = self.state.lock();
        let data = st.live.get(path).cloned().ok_or_else(|| not_found(path))?;
        Ok(Arc::new(MemReadable {
            path: path.to_path_buf(),
            data,
        }))
    }

    fn read_all(&self, path: &Path) -> Result<Vec<u8>> {
        let st = self.state.lock();
        let f = st.live.get(path).ok_or_else(|| not_found(path))?;
        let v = f.bytes.read().clone();
        Ok(v)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut st = self.state.lock();
        let f = st.live.remove(from).ok_or_else(|| not_found(from))?;
        st.live.insert(to.to_path_buf(), f);
        Ok(())
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut st = self.state.lock();
        st.live
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }

    fn exists(&self, path: &Path) -> bool {
        let st = self.state.lock();
        st.live.contains_key(path) || st.dirs.contains(path)
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let st = self.state.lock();
        if !st.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(st
            .live
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect())
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        let mut st = self.state.lock();
        let mut d = Some(dir);
        while let Some(p) = d {
            if p.as_os_str().is_empty() {
                break;
            }
            st.dirs.insert(p.to_path_buf());
            d = p.parent();
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let mut st = self.state.lock();
        if !MemFs::take_sync(&mut st) {
            return Ok(());
        }
        let st = &mut *st;
        st.durable.retain(|p, _| p.parent() != Some(dir));
        for (p, f) in st.live.iter().filter(|(p, _)| p.parent() == Some(dir)) {
            st.durable.insert(p.clone(), Arc::clone(f));
        }
        Ok(())
    }

    fn file_size(&self, path: &Path) -> Result<u64> {
        let st = self.state.lock();
        let f = st.live.get(path).ok_or_else(|| not_found(path))?;
        let n = f.bytes.read().len() as u64;
        Ok(n)
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        let mut st = self.state.lock();
        if !st.locks.insert(path.to_path_buf()) {
            return Err(Error::Locked(format!(
                "{} is held by another opener",
                path.display()
            )));
        }
        st.live
            .entry(path.to_path_buf())
            .or_insert_with(|| Arc::new(FileData::default()));
        drop(st);
        Ok(Box::new(MemLock {
            path: path.to_path_buf(),
            fs: self.clone(),
        }))
    }

    fn free_space(&self, _dir: &Path) -> Result<u64> {
        Ok(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_keeps_only_synced_bytes_of_dir_synced_names() {
        let fs = MemFs::new();
        let d = Path::new("/db");
        fs.create_dir_all(d).unwrap();
        let mut a = fs.create(&d.join("a"), WriteHint::default()).unwrap();
        a.append(b"hello").unwrap();
        a.sync().unwrap();
        a.append(b" world").unwrap();
        // Name not yet durable: a crash loses the file.
        assert!(!fs.crash().exists(&d.join("a")));
        fs.sync_dir(d).unwrap();
        let c = fs.crash();
        assert_eq!(c.read_all(&d.join("a")).unwrap(), b"hello");
        // Rename is durable only after the directory sync.
        fs.rename(&d.join("a"), &d.join("b")).unwrap();
        assert!(fs.crash().exists(&d.join("a")));
        fs.sync_dir(d).unwrap();
        assert!(fs.crash().exists(&d.join("b")));
    }

    #[test]
    fn sync_budget_freezes_durability() {
        let fs = MemFs::new();
        let d = Path::new("/db");
        fs.create_dir_all(d).unwrap();
        let mut a = fs.create(&d.join("a"), WriteHint::default()).unwrap();
        fs.sync_dir(d).unwrap();
        fs.set_sync_budget(Some(1));
        a.append(b"one").unwrap();
        a.sync().unwrap();
        a.append(b"two").unwrap();
        a.sync().unwrap();
        assert_eq!(fs.crash().read_all(&d.join("a")).unwrap(), b"one");
        assert_eq!(fs.sync_count(), 3);
    }

    #[test]
    fn lock_is_exclusive_until_dropped() {
        let fs = MemFs::new();
        let l = fs.lock(Path::new("/LOCK")).unwrap();
        assert!(matches!(fs.lock(Path::new("/LOCK")), Err(Error::Locked(_))));
        drop(l);
        assert!(fs.lock(Path::new("/LOCK")).is_ok());
    }
}
