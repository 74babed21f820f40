//! `VersionSet`: the current version, the MANIFEST, and recovery.
//!
//! Files in the database directory:
//! ```text
//! CURRENT           names the live manifest ("MANIFEST-000007\ncrc32c:…\n"), replaced atomically
//! MANIFEST-000007   WAL-format records, each one encoded VersionEdit;
//!                   the first is a snapshot of the whole version
//! 000012.log        write-ahead logs (when the WAL is on SSD)
//! 000015.sst        tables
//! LOCK              held by the opener
//! ```
//! (docs/format/manifest.md has the byte layouts.)
//!
//! Concurrency contract: `log_and_apply` is serialized by an internal
//! mutex; `current()` is a cheap `Arc` clone under a short read lock; file
//! numbers come from an atomic counter.
//!
//! Invariants:
//! 1. An edit is applied to the in-memory version only after its manifest
//!    record is durable (synced), so readers never see a state that a crash
//!    could take back.
//! 2. CURRENT always names a complete manifest: a new manifest is written and
//!    synced before CURRENT is switched to it (write CURRENT.tmp, sync,
//!    rename, sync the directory).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::edit::{decode_current, encode_current, manifest_file_name, PmWal, VersionEdit};
use super::{TableContext, Version};
use crate::error::{Error, Result};
use crate::key::SeqNo;
use crate::stats::StatsRecorder;
use crate::storage::{FileSystem, WriteHint};
use crate::wal::{FileLog, FileSink, Reader as LogReader, Writer as LogWriter};

/// A manifest grows to this size before it is rewritten as a snapshot.
const MANIFEST_ROTATE_BYTES: u64 = 64 << 20;

/// Name of the SSD WAL with number `n`.
pub fn wal_name(n: u64) -> String {
    format!("{n:06}.log")
}

struct Manifest {
    writer: LogWriter<FileSink>,
    number: u64,
}

/// What recovery found besides the version.
#[derive(Debug, Clone, Default)]
pub struct Recovered {
    /// WALs numbered below this hold nothing that is not in tables.
    pub log_number: u64,
    /// The last seqno the manifest knows of.
    pub last_seqno: SeqNo,
    /// PM WALs still live.
    pub pm_wals: Vec<PmWal>,
}

/// The current version and its manifest.
pub struct VersionSet {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    ctx: Arc<TableContext>,
    stats: Arc<StatsRecorder>,
    current: RwLock<Arc<Version>>,
    next_file_number: AtomicU64,
    manifest: Mutex<Option<Manifest>>,
    log_number: AtomicU64,
    pm_wals: Mutex<Vec<PmWal>>,
}

impl VersionSet {
    /// Creates the files of a new, empty database in `dir`.
    pub fn create(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        ctx: Arc<TableContext>,
        stats: Arc<StatsRecorder>,
        level_count: usize,
    ) -> Result<VersionSet> {
        let vs = VersionSet::new(fs, dir, ctx, stats, Version::empty(level_count), 1);
        vs.write_new_manifest(0)?;
        Ok(vs)
    }

    fn new(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        ctx: Arc<TableContext>,
        stats: Arc<StatsRecorder>,
        v: Version,
        next_file_number: u64,
    ) -> VersionSet {
        VersionSet {
            fs,
            dir: dir.to_path_buf(),
            ctx,
            stats,
            current: RwLock::new(Arc::new(v)),
            next_file_number: AtomicU64::new(next_file_number),
            manifest: Mutex::new(None),
            log_number: AtomicU64::new(0),
            pm_wals: Mutex::new(Vec::new()),
        }
    }

    /// Recovers the version from CURRENT and its manifest, then starts a
    /// fresh manifest holding a snapshot of it.
    pub fn recover(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        ctx: Arc<TableContext>,
        stats: Arc<StatsRecorder>,
        level_count: usize,
    ) -> Result<(VersionSet, Recovered)> {
        let current_path = dir.join("CURRENT");
        let current = fs.read_all(&current_path)?;
        let manifest_number = decode_current(&current, &current_path.display().to_string())?;
        let manifest_path = dir.join(manifest_file_name(manifest_number));
        let bytes = fs.read_all(&manifest_path)?;
        let source = manifest_path.display().to_string();
        let mut reader = LogReader::new(FileLog::new(source.clone(), bytes), manifest_number);

        let mut v = Version::empty(level_count);
        let mut rec = Recovered::default();
        let mut next_file = None;
        let mut pm_wals: Vec<PmWal> = Vec::new();
        let mut records = 0u64;
        while let Some(record) = reader.next_record()? {
            records += 1;
            let offset = reader.last_record_offset();
            let e = VersionEdit::decode(&record, &source, offset)?;
            v = v.apply(&e, &ctx).map_err(|err| match err {
                Error::Corruption { what, .. } => Error::corruption(source.clone(), offset, what),
                other => other,
            })?;
            if let Some(n) = e.log_number {
                rec.log_number = n;
            }
            if let Some(n) = e.next_file_number {
                next_file = Some(n);
            }
            if let Some(s) = e.last_seqno {
                rec.last_seqno = s;
            }
            pm_wals.extend(e.new_pm_wals.iter().copied());
            pm_wals.retain(|w| !e.deleted_pm_wals.contains(&w.log_number));
        }
        if records == 0 {
            // A manifest is synced with its snapshot record before CURRENT
            // names it: an empty or torn first record is damage, not a tail.
            return Err(Error::corruption(
                source,
                reader.torn_tail().unwrap_or(0),
                "manifest has no complete snapshot record",
            ));
        }
        if let Some(off) = reader.torn_tail() {
            // A manifest record is synced before its edit takes effect, so a
            // torn tail is an edit that never happened.
            log::warn!("{source}: torn tail at offset {off} dropped");
        }
        let next_file = next_file.ok_or_else(|| {
            Error::corruption(source.clone(), 0, "manifest has no next-file-number record")
        })?;
        let next_file = next_file.max(manifest_number + 1);
        rec.pm_wals = pm_wals.clone();
        let vs = VersionSet::new(fs, dir, ctx, stats, v, next_file);
        vs.log_number.store(rec.log_number, Ordering::Relaxed);
        *vs.pm_wals.lock() = pm_wals;
        vs.write_new_manifest(rec.last_seqno)?;
        let _ = vs.fs.remove(&manifest_path);
        Ok((vs, rec))
    }

    /// The current version.
    pub fn current(&self) -> Arc<Version> {
        Arc::clone(&self.current.read())
    }

    /// A fresh file number (WALs, tables, manifests).
    pub fn new_file_number(&self) -> u64 {
        self.next_file_number.fetch_add(1, Ordering::Relaxed)
    }

    /// The log number recorded last.
    pub fn log_number(&self) -> u64 {
        self.log_number.load(Ordering::Relaxed)
    }

    /// PM WALs the manifest considers live.
    pub fn pm_wals(&self) -> Vec<PmWal> {
        self.pm_wals.lock().clone()
    }

    /// The table context.
    pub fn ctx(&self) -> &Arc<TableContext> {
        &self.ctx
    }

    /// Writes `edit` durably to the manifest, then installs the new version.
    /// `last_seqno` is the engine's last committed seqno.
    pub fn log_and_apply(&self, mut edit: VersionEdit, last_seqno: SeqNo) -> Result<Arc<Version>> {
        let mut guard = self.manifest.lock();
        edit.next_file_number = Some(self.next_file_number.load(Ordering::Relaxed));
        edit.last_seqno = Some(last_seqno);
        let base = self.current();
        let next = Arc::new(base.apply(&edit, &self.ctx)?);
        let m = guard.as_mut().ok_or(Error::Closed)?;
        let mut buf = Vec::with_capacity(256);
        edit.encode(&mut buf);
        let before = m.writer.bytes_written();
        m.writer.add_record(&buf)?;
        m.writer.sync()?;
        let written = m.writer.bytes_written() - before;
        self.stats.add_written(|w| w.manifest += written);
        if let Some(n) = edit.log_number {
            self.log_number.store(n, Ordering::Relaxed);
        }
        {
            let mut pw = self.pm_wals.lock();
            pw.extend(edit.new_pm_wals.iter().copied());
            pw.retain(|w| !edit.deleted_pm_wals.contains(&w.log_number));
        }
        *self.current.write() = Arc::clone(&next);
        let rotate = m.writer.bytes_written() > MANIFEST_ROTATE_BYTES;
        drop(guard);
        if rotate {
            self.write_new_manifest(last_seqno)?;
        }
        Ok(next)
    }

    /// Starts a new manifest holding a snapshot of the current version and
    /// points CURRENT at it; removes the previous manifest.
    fn write_new_manifest(&self, last_seqno: SeqNo) -> Result<()> {
        let mut guard = self.manifest.lock();
        let number = self.new_file_number();
        let path = self.dir.join(manifest_file_name(number));
        let file = self.fs.create(&path, WriteHint::default())?;
        let mut writer = LogWriter::new(FileSink(file), number);
        let mut snap = self.current().snapshot_edit();
        snap.log_number = Some(self.log_number());
        snap.next_file_number = Some(self.next_file_number.load(Ordering::Relaxed));
        snap.last_seqno = Some(last_seqno);
        snap.new_pm_wals = self.pm_wals();
        let mut buf = Vec::new();
        snap.encode(&mut buf);
        writer.add_record(&buf)?;
        writer.sync()?;
        self.stats
            .add_written(|w| w.manifest += writer.bytes_written());
        set_current(self.fs.as_ref(), &self.dir, number)?;
        if let Some(old) = guard.replace(Manifest { writer, number }) {
            let _ = self
                .fs
                .remove(&self.dir.join(manifest_file_name(old.number)));
        }
        Ok(())
    }

    /// Closes the manifest.
    pub fn close(&self) {
        self.manifest.lock().take();
    }
}

/// Points CURRENT at manifest `number` atomically and durably.
fn set_current(fs: &dyn FileSystem, dir: &Path, number: u64) -> Result<()> {
    let tmp = dir.join("CURRENT.tmp");
    let mut f = fs.create(&tmp, WriteHint::default())?;
    f.append(&encode_current(number))?;
    f.sync()?;
    drop(f);
    fs.rename(&tmp, &dir.join("CURRENT"))?;
    fs.sync_dir(dir)
}
