//! Obsolete table files kept to be written over by new tables
//! (`Options::recycle_table_files`), as RocksDB recycles its WAL files
//! (`recycle_log_file_num`).
//!
//! When a table's last handle is gone, [`TableRecycler::retire`] renames
//! its file to `{id:06}.recycle` instead of unlinking it, while fewer than
//! the configured number are kept and the file system agrees
//! ([`FileSystem::retire`]: nothing else links the file, as a checkpoint's
//! hard link would, and this process has no reader of it open); the next
//! table a flush or a compaction writes takes one ([`TableRecycler::create`],
//! [`FileSystem::reuse`]): renamed to the new table's name and written over
//! from its start, cut to its length when synced. Writing over pages the
//! page cache holds, on blocks already allocated, is cheaper than writing a
//! new file (storage/posix.rs).
//!
//! Nothing reads a kept file, and nothing refers to one: a crash leaves
//! `.recycle` files the next open removes (with any table written over one
//! and never recorded, as any unrecorded table), and `close` removes the
//! kept ones. Table numbers are never reused, so the block cache (keyed by
//! table number) never serves a kept file's old blocks as a new table's.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::error::Result;
use crate::storage::{FileSystem, WritableFile, WriteHint};

/// The extension of a kept file (`{id:06}.recycle`).
pub const RECYCLE_EXTENSION: &str = "recycle";

/// A file is kept only while the device has this many times its size
/// free: a filling disk gets its space back at once, and a write that
/// finds it full fails for want of space, not for the kept files.
pub const ROOM_FACTOR: u64 = 64;

/// The kept files of one database directory.
#[derive(Debug, Default)]
pub struct TableRecycler {
    /// How many files may be kept (0: none).
    capacity: AtomicUsize,
    files: Mutex<Vec<PathBuf>>,
    /// Tables written over a kept file.
    reused: AtomicU64,
}

impl TableRecycler {
    /// Keeps at most `n` files from now on.
    pub fn set_capacity(&self, n: usize) {
        self.capacity.store(n, Ordering::Relaxed);
    }

    /// Keeps the obsolete table file `path` if there is room, the device
    /// is not short of space ([`ROOM_FACTOR`]) and `fs` can; `false`: the
    /// caller removes it.
    pub fn retire(&self, fs: &dyn FileSystem, path: &Path) -> bool {
        let mut files = self.files.lock();
        if files.len() >= self.capacity.load(Ordering::Relaxed) {
            return false;
        }
        let room = match (fs.file_size(path), path.parent().map(|d| fs.free_space(d))) {
            (Ok(size), Some(Ok(free))) => leaves_room(size, free),
            _ => false,
        };
        if !room {
            return false;
        }
        let to = path.with_extension(RECYCLE_EXTENSION);
        match fs.retire(path, &to) {
            Ok(true) => {
                files.push(to);
                true
            }
            Ok(false) => false,
            Err(e) => {
                log::debug!("could not keep {} for reuse: {e}", path.display());
                false
            }
        }
    }

    /// Creates the table file `path`, over a kept file when there is one.
    pub fn create(
        &self,
        fs: &dyn FileSystem,
        path: &Path,
        hint: WriteHint,
    ) -> Result<Box<dyn WritableFile>> {
        let kept = self.files.lock().pop();
        if let Some(from) = kept {
            match fs.reuse(&from, path, hint) {
                Ok(f) => {
                    self.reused.fetch_add(1, Ordering::Relaxed);
                    return Ok(f);
                }
                Err(e) => {
                    // Whatever the failure left (the kept file under either
                    // name), `create` truncates or the next open removes.
                    log::debug!("could not reuse {}: {e}", from.display());
                    let _ = fs.remove(&from);
                }
            }
        }
        fs.create(path, hint)
    }

    /// Forgets every kept file; returns them, for the caller to remove.
    pub fn drain(&self) -> Vec<PathBuf> {
        std::mem::take(&mut *self.files.lock())
    }

    /// How many tables were written over a kept file.
    pub fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }

    /// How many files are kept now.
    pub fn kept(&self) -> usize {
        self.files.lock().len()
    }

    /// True if `name` is a kept file's.
    pub fn is_kept_name(name: &str) -> bool {
        Path::new(name)
            .extension()
            .is_some_and(|e| e == RECYCLE_EXTENSION)
    }
}

/// Whether keeping a file of `size` bytes leaves a device with `free`
/// bytes room enough ([`ROOM_FACTOR`]).
fn leaves_room(size: u64, free: u64) -> bool {
    free / ROOM_FACTOR >= size
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::storage::posix::PosixFs;

    fn table(fs: &dyn FileSystem, path: &Path, len: usize) {
        let mut f = fs.create(path, WriteHint::default()).unwrap();
        f.append(&vec![7u8; len]).unwrap();
        f.sync().unwrap();
    }

    /// Files are kept up to the capacity; new tables take them, last kept
    /// first; a device short of space keeps none.
    #[test]
    fn files_are_kept_within_the_capacity_and_the_free_space() {
        assert!(leaves_room(4096, ROOM_FACTOR * 4096));
        assert!(!leaves_room(4096, ROOM_FACTOR * 4096 - 1));

        let dir = tempfile::tempdir().unwrap();
        let fs = PosixFs::new();
        let r = TableRecycler::default();
        let p = |n: u64| dir.path().join(format!("{n:06}.sst"));
        for n in 1..=3 {
            table(&fs, &p(n), 4096);
        }
        assert!(!r.retire(&fs, &p(1)), "capacity 0 keeps nothing");
        r.set_capacity(2);
        assert!(r.retire(&fs, &p(1)) && r.retire(&fs, &p(2)));
        assert!(!r.retire(&fs, &p(3)), "full");
        assert_eq!(r.kept(), 2);
        assert!(dir.path().join("000002.recycle").exists());

        let mut f = r.create(&fs, &p(5), WriteHint::default()).unwrap();
        f.append(b"new").unwrap();
        f.sync().unwrap();
        assert_eq!(fs.read_all(&p(5)).unwrap(), b"new");
        assert!(
            !dir.path().join("000002.recycle").exists(),
            "last kept first"
        );
        assert_eq!((r.reused(), r.kept()), (1, 1));
        assert_eq!(r.drain(), vec![dir.path().join("000001.recycle")]);
        assert_eq!(r.kept(), 0);
    }
}
