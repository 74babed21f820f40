//! The real file system (skeleton: buffered I/O only; O_DIRECT to come).

use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{FileLock, FileSystem, RandomAccessFile, WritableFile, WriteHint};
use crate::error::{Error, Result};

/// POSIX files.
#[derive(Debug, Default, Clone)]
pub struct PosixFs;

impl PosixFs {
    /// The file system.
    pub fn new() -> Self {
        PosixFs
    }
}

fn ctx(what: &str, p: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let c = format!("{what} {}", p.display());
    move |e| Error::io(c, e)
}

struct PosixWritable {
    path: PathBuf,
    file: std::io::BufWriter<fs::File>,
    len: u64,
}

impl WritableFile for PosixWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.file
            .write_all(data)
            .map_err(ctx("append to", &self.path))?;
        self.len += data.len() as u64;
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        self.file.flush().map_err(ctx("flush", &self.path))
    }
    fn sync(&mut self) -> Result<()> {
        self.flush()?;
        self.file
            .get_ref()
            .sync_data()
            .map_err(ctx("sync", &self.path))
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

struct PosixReadable {
    path: PathBuf,
    file: fs::File,
    len: u64,
}

impl RandomAccessFile for PosixReadable {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.file.read_exact_at(buf, offset).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::corruption(
                    self.path.display().to_string(),
                    offset,
                    "read past end of file",
                )
            } else {
                Error::io(format!("read {}", self.path.display()), e)
            }
        })
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

struct PosixLock(#[allow(dead_code)] fs::File);
impl FileLock for PosixLock {}

impl FileSystem for PosixFs {
    fn create(&self, path: &Path, _hint: WriteHint) -> Result<Box<dyn WritableFile>> {
        let f = fs::File::create(path).map_err(ctx("create", path))?;
        Ok(Box::new(PosixWritable {
            path: path.to_path_buf(),
            file: std::io::BufWriter::with_capacity(1 << 20, f),
            len: 0,
        }))
    }
    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        let file = fs::File::open(path).map_err(ctx("open", path))?;
        let len = file.metadata().map_err(ctx("stat", path))?.len();
        Ok(Arc::new(PosixReadable {
            path: path.to_path_buf(),
            file,
            len,
        }))
    }
    fn read_all(&self, path: &Path) -> Result<Vec<u8>> {
        fs::read(path).map_err(ctx("read", path))
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        fs::rename(from, to).map_err(ctx("rename", from))
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
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(ctx("sync dir", dir))
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
            .map_err(ctx("open lock", path))?;
        rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive)
            .map_err(|_| Error::Locked(format!("{} is held by another process", path.display())))?;
        Ok(Box::new(PosixLock(f)))
    }
    fn free_space(&self, dir: &Path) -> Result<u64> {
        let s = rustix::fs::statvfs(dir)
            .map_err(|e| Error::io(format!("statvfs {}", dir.display()), e.into()))?;
        Ok(s.f_bavail.saturating_mul(s.f_frsize))
    }
}
