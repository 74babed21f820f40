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
//! Regions (`Options::regions` = N): the set holds one current version and
//! one log number per region; an edit names its region and a group of
//! edits (one manifest record) changes several regions atomically.
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

use super::closed::Closed;
use super::edit::{
    decode_current, encode_current, manifest_file_name, DbIdentity, PmWal, RegionLayout,
    VersionEdit,
};
use super::{Removed, TableContext, Version};
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
    /// The largest seqno recorded so far. Callers read the engine's last
    /// seqno before they take the manifest lock, so edits can arrive with
    /// values out of order; the recorded value never goes backwards
    /// (invariant: it is ≥ every seqno in every table of the version).
    last_seqno: SeqNo,
    /// Set when a record failed to be written or synced: the file may or
    /// may not hold it, so no later edit may follow it (the engine stops;
    /// recovery reads whatever the file holds, and both states reference
    /// only files that still exist).
    failed: Option<String>,
}

/// What recovery found besides the version.
#[derive(Debug, Clone, Default)]
pub struct Recovered {
    /// WALs numbered below this hold nothing that is not in tables (the
    /// smallest of the regions' log numbers).
    pub log_number: u64,
    /// Per region: its records in WALs numbered below this are in its tables.
    pub region_log_numbers: Vec<u64>,
    /// The last seqno the manifest knows of.
    pub last_seqno: SeqNo,
    /// PM WALs still live.
    pub pm_wals: Vec<PmWal>,
    /// The manifest ended in an incomplete (torn) record at this offset: an
    /// edit that was never installed. Files the version does not reference
    /// are then kept in `lost/` instead of being deleted, and so is the
    /// damaged manifest.
    pub manifest_torn_at: Option<u64>,
    /// The database was closed cleanly (`version::closed`): every live SSD
    /// WAL's number and length then, which replay must find exactly.
    pub closed_wals: Option<Vec<(u64, u64)>>,
    /// What the manifest says created the database (empty for databases
    /// created before the identity record existed).
    pub identity: DbIdentity,
    /// Tables a replayed edit deleted. Their files are normally gone; one a
    /// crash left behind is deleted at open, never kept in `lost/`.
    pub deleted_tables: std::collections::HashSet<u64>,
}

/// The current version and its manifest.
pub struct VersionSet {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    ctx: Arc<TableContext>,
    stats: Arc<StatsRecorder>,
    /// One current version per region.
    current: RwLock<Vec<Arc<Version>>>,
    next_file_number: AtomicU64,
    manifest: Mutex<Option<Manifest>>,
    /// One log number per region.
    log_numbers: Mutex<Vec<u64>>,
    pm_wals: Mutex<Vec<PmWal>>,
    layout: RegionLayout,
    /// Written in every snapshot record (empty: none is written); an edit
    /// carrying an identity replaces it.
    identity: Mutex<DbIdentity>,
    /// Counts every applied group: changes whenever any region's version does.
    generation: AtomicU64,
}

/// The layout a manifest without one describes: a single region.
fn single_region() -> RegionLayout {
    RegionLayout {
        count: 1,
        boundaries: Vec::new(),
    }
}

fn describe(l: &RegionLayout) -> String {
    if l.count == 1 {
        "1 region".to_string()
    } else if l.boundaries.is_empty() {
        format!("{} hash-routed regions", l.count)
    } else {
        format!("{} regions split at {:?}", l.count, l.boundaries)
    }
}

impl VersionSet {
    /// Creates the files of a new, empty database in `dir`, with no
    /// identity record.
    pub fn create(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        ctx: Arc<TableContext>,
        stats: Arc<StatsRecorder>,
        level_count: usize,
        layout: RegionLayout,
    ) -> Result<VersionSet> {
        Self::create_with_identity(
            fs,
            dir,
            ctx,
            stats,
            level_count,
            layout,
            DbIdentity::default(),
        )
    }

    /// Creates the files of a new, empty database in `dir` whose manifests
    /// record `identity` (in every snapshot record).
    pub fn create_with_identity(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        ctx: Arc<TableContext>,
        stats: Arc<StatsRecorder>,
        level_count: usize,
        layout: RegionLayout,
        identity: DbIdentity,
    ) -> Result<VersionSet> {
        debug_assert!(layout.count >= 1);
        let versions = (0..layout.count)
            .map(|_| Version::empty(level_count))
            .collect();
        let vs = VersionSet::new(fs, dir, ctx, stats, versions, 1, layout);
        *vs.identity.lock() = identity;
        vs.write_new_manifest(0)?;
        Ok(vs)
    }

    fn new(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        ctx: Arc<TableContext>,
        stats: Arc<StatsRecorder>,
        versions: Vec<Version>,
        next_file_number: u64,
        layout: RegionLayout,
    ) -> VersionSet {
        VersionSet {
            fs,
            dir: dir.to_path_buf(),
            ctx,
            stats,
            log_numbers: Mutex::new(vec![0; versions.len()]),
            current: RwLock::new(versions.into_iter().map(Arc::new).collect()),
            next_file_number: AtomicU64::new(next_file_number),
            manifest: Mutex::new(None),
            pm_wals: Mutex::new(Vec::new()),
            layout,
            identity: Mutex::new(DbIdentity::default()),
            generation: AtomicU64::new(0),
        }
    }

    /// Recovers the version from CURRENT and its manifest, then starts a
    /// fresh manifest holding a snapshot of it. A manifest whose region
    /// layout differs from `layout` is refused (`InvalidOptions`).
    ///
    /// Only an incomplete final record is a torn tail (an edit that was
    /// never installed: `Recovered::manifest_torn_at`); any other damage is
    /// `Error::Corruption` naming the manifest and the record's offset, and
    /// so is a design record the design rejects
    /// (`TableContext::design_record_check`). The old manifest is left in
    /// place: the caller removes it (or keeps it in `lost/`) once the open
    /// succeeded.
    pub fn recover(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        ctx: Arc<TableContext>,
        stats: Arc<StatsRecorder>,
        level_count: usize,
        layout: RegionLayout,
    ) -> Result<(VersionSet, Recovered)> {
        let current_path = dir.join("CURRENT");
        let current = fs.read_all(&current_path)?;
        let manifest_number = decode_current(&current, &current_path.display().to_string())?;
        let manifest_path = dir.join(manifest_file_name(manifest_number));
        let bytes = fs.read_all(&manifest_path)?;
        let manifest_len = bytes.len() as u64;
        let source = manifest_path.display().to_string();
        let mut reader = LogReader::new(FileLog::new(source.clone(), bytes), manifest_number);

        let regions = layout.count as usize;
        let mut versions: Vec<Version> =
            (0..regions).map(|_| Version::empty(level_count)).collect();
        let mut rec = Recovered {
            region_log_numbers: vec![0; regions],
            ..Default::default()
        };
        let mut next_file = None;
        let mut pm_wals: Vec<PmWal> = Vec::new();
        let mut records = 0u64;
        while let Some(record) = reader.next_record()? {
            records += 1;
            let offset = reader.last_record_offset();
            let group = VersionEdit::decode_group(&record, &source, offset)?;
            if records == 1 {
                // The snapshot record says how the keys were split.
                let found = group[0].region_layout.clone().unwrap_or_else(single_region);
                if found != layout {
                    return Err(Error::InvalidOptions(format!(
                        "`regions` / `region_boundaries` describe {} but {} holds {}",
                        describe(&layout),
                        dir.display(),
                        describe(&found)
                    )));
                }
            }
            for e in group {
                if let Some(check) = ctx.design_record_check.get() {
                    for (tag, bytes) in &e.design_records {
                        check(*tag, bytes).map_err(|err| match err {
                            Error::Corruption { what, .. } => Error::corruption(
                                source.clone(),
                                offset,
                                format!("design record {tag:#x}: {what}"),
                            ),
                            other => other,
                        })?;
                    }
                }
                let v = versions.get_mut(e.region as usize).ok_or_else(|| {
                    Error::corruption(
                        source.clone(),
                        offset,
                        format!("edit names region {} of {regions}", e.region),
                    )
                })?;
                // Replay marks nothing obsolete: releasing every table the
                // history ever deleted would cost one unlink per table the
                // database ever had (and free PM pages later tables reuse).
                // The ids tell the open's cleanup which leftover files a
                // recorded edit deleted.
                let (next, removed) = v.apply_pending(&e, &ctx).map_err(|err| match err {
                    Error::Corruption { what, .. } => {
                        Error::corruption(source.clone(), offset, what)
                    }
                    other => other,
                })?;
                *v = next;
                rec.deleted_tables.extend(removed.into_ids());
                if let Some(n) = e.log_number {
                    rec.region_log_numbers[e.region as usize] = n;
                }
                if let Some(n) = e.next_file_number {
                    next_file = Some(n);
                }
                if let Some(s) = e.last_seqno {
                    rec.last_seqno = rec.last_seqno.max(s);
                }
                pm_wals.extend(e.new_pm_wals.iter().copied());
                pm_wals.retain(|w| !e.deleted_pm_wals.contains(&w.log_number));
                if let Some(id) = &e.identity {
                    rec.identity = id.clone();
                }
            }
        }
        rec.log_number = rec.region_log_numbers.iter().copied().min().unwrap_or(0);
        // Manifests written before the recorded seqno was kept monotonic may
        // hold one below data already in tables: new writes must never get
        // a seqno that an existing entry already has.
        let in_tables = versions
            .iter()
            .flat_map(|v| v.levels.iter().flatten())
            .map(|t| t.meta.seq_max)
            .max()
            .unwrap_or(0);
        rec.last_seqno = rec.last_seqno.max(in_tables);
        if records == 0 {
            // A manifest is synced with its snapshot record before CURRENT
            // names it: an empty or torn first record is damage, not a tail.
            return Err(Error::corruption(
                source,
                reader.torn_tail().unwrap_or(0),
                "manifest has no complete snapshot record",
            ));
        }
        if let Some(closed) = Closed::read(fs.as_ref(), dir, manifest_number) {
            // A clean close sealed the manifest's length: a record cut short
            // since (or a file cut at a record boundary) is damage. So is a
            // recorded WAL that changed; checked now, before the new
            // manifest below makes CLOSED stale (an open that failed later
            // must leave these checks to the next one).
            Closed::check_log(closed.manifest.1, &source, manifest_len, reader.torn_tail())?;
            closed.check_wals(fs.as_ref(), dir)?;
            rec.closed_wals = Some(closed.wals);
        }
        if let Some(off) = reader.torn_tail() {
            // A manifest record is synced before its edit takes effect, so an
            // incomplete last record is an edit that never happened.
            log::warn!("{source}: torn tail at offset {off} dropped (an edit never installed)");
            rec.manifest_torn_at = Some(off);
        }
        let next_file = next_file.ok_or_else(|| {
            Error::corruption(source.clone(), 0, "manifest has no next-file-number record")
        })?;
        // A file the manifest does not know of (the output of an edit that
        // was torn, a WAL created after the last record) must never be
        // overwritten by a new file of the same number.
        let next_file = next_file
            .max(manifest_number + 1)
            .max(largest_file_number(fs.as_ref(), dir).saturating_add(1));
        rec.pm_wals = pm_wals.clone();
        let vs = VersionSet::new(fs, dir, ctx, stats, versions, next_file, layout);
        *vs.identity.lock() = rec.identity.clone();
        vs.log_numbers
            .lock()
            .copy_from_slice(&rec.region_log_numbers);
        *vs.pm_wals.lock() = pm_wals;
        vs.write_new_manifest(rec.last_seqno)?;
        Ok((vs, rec))
    }

    /// The number of the manifest CURRENT names (`None` once closed).
    pub fn manifest_number(&self) -> Option<u64> {
        self.manifest.lock().as_ref().map(|m| m.number)
    }

    /// The current version of region 0 (the only one without regions).
    pub fn current(&self) -> Arc<Version> {
        self.current_in(0)
    }

    /// The current version of `region`. REQUIRES: `region < region_count()`.
    pub fn current_in(&self, region: usize) -> Arc<Version> {
        Arc::clone(&self.current.read()[region])
    }

    /// The current version of every region, in region order.
    pub fn current_all(&self) -> Vec<Arc<Version>> {
        self.current.read().clone()
    }

    /// What the manifest records as having created the database.
    pub fn identity(&self) -> DbIdentity {
        self.identity.lock().clone()
    }

    /// Number of regions.
    pub fn region_count(&self) -> usize {
        self.layout.count as usize
    }

    /// Changes whenever any region's version changes.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The number the next [`VersionSet::new_file_number`] gives (files
    /// numbered from here on are newer than now).
    pub fn next_file_number(&self) -> u64 {
        self.next_file_number.load(Ordering::Relaxed)
    }

    /// A fresh file number (WALs, tables, manifests).
    pub fn new_file_number(&self) -> u64 {
        self.next_file_number.fetch_add(1, Ordering::Relaxed)
    }

    /// Recovery: file `n` exists, so no new file may take its number (a
    /// WAL created after the last manifest record is newer than the
    /// manifest's next file number; RocksDB's `MarkFileNumberUsed`).
    pub fn mark_file_number_used(&self, n: u64) {
        self.next_file_number
            .fetch_max(n.saturating_add(1), Ordering::Relaxed);
    }

    /// WALs numbered below this are obsolete: the smallest of the regions'
    /// log numbers.
    pub fn log_number(&self) -> u64 {
        self.log_numbers.lock().iter().copied().min().unwrap_or(0)
    }

    /// PM WALs the manifest considers live.
    pub fn pm_wals(&self) -> Vec<PmWal> {
        self.pm_wals.lock().clone()
    }

    /// The table context.
    pub fn ctx(&self) -> &Arc<TableContext> {
        &self.ctx
    }

    /// Writes `edit` durably to the manifest, then installs the new version
    /// of its region (returned). `last_seqno` is the engine's last committed seqno.
    pub fn log_and_apply(&self, edit: VersionEdit, last_seqno: SeqNo) -> Result<Arc<Version>> {
        let region = edit.region as usize;
        self.log_and_apply_group(vec![edit], last_seqno)?;
        Ok(self.current_in(region))
    }

    /// Writes a group of edits durably as one manifest record (all or
    /// nothing after a crash), then installs the new versions of their
    /// regions. REQUIRES: every edit's region below `region_count()`.
    pub fn log_and_apply_group(
        &self,
        mut edits: Vec<VersionEdit>,
        last_seqno: SeqNo,
    ) -> Result<()> {
        if edits.is_empty() {
            return Ok(());
        }
        let mut guard = self.manifest.lock();
        let m = guard.as_mut().ok_or(Error::Closed)?;
        if let Some(why) = &m.failed {
            return Err(Error::Background(format!(
                "MANIFEST {} is unusable after a failed write: {why}",
                m.number
            )));
        }
        let first = &mut edits[0];
        let last_seqno = last_seqno.max(m.last_seqno);
        first.next_file_number = Some(self.next_file_number.load(Ordering::Relaxed));
        first.last_seqno = Some(last_seqno);
        let mut next = self.current_all();
        let mut removed = Vec::with_capacity(edits.len());
        for e in &edits {
            let v = next.get_mut(e.region as usize).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "edit for region {} of {}",
                    e.region, self.layout.count
                ))
            })?;
            let (applied, gone) = v.apply_pending(e, &self.ctx)?;
            *v = Arc::new(applied);
            removed.push(gone);
        }
        let mut buf = Vec::with_capacity(256);
        VersionEdit::encode_group(&edits, &mut buf);
        let before = m.writer.bytes_written();
        if let Err(e) = m.writer.add_record(&buf).and_then(|()| m.writer.sync()) {
            m.failed = Some(e.to_string());
            return Err(e);
        }
        m.last_seqno = last_seqno;
        // Durable: only now may the removed tables' storage go.
        removed.into_iter().for_each(Removed::commit);
        for e in &edits {
            self.stats.record_table_changes(
                &e.deleted_tables,
                e.new_tables.iter().map(|(l, t)| (*l, t.id)),
            );
        }
        let written = m.writer.bytes_written() - before;
        self.stats.add_written(|w| w.manifest += written);
        {
            let mut logs = self.log_numbers.lock();
            let mut pw = self.pm_wals.lock();
            for e in &edits {
                if let Some(n) = e.log_number {
                    logs[e.region as usize] = n;
                }
                if let Some(id) = &e.identity {
                    *self.identity.lock() = id.clone();
                }
                pw.extend(e.new_pm_wals.iter().copied());
                pw.retain(|w| !e.deleted_pm_wals.contains(&w.log_number));
            }
        }
        *self.current.write() = next;
        self.generation.fetch_add(1, Ordering::AcqRel);
        let rotate = m.writer.bytes_written() > MANIFEST_ROTATE_BYTES;
        drop(guard);
        if rotate {
            self.write_new_manifest(last_seqno)?;
        }
        Ok(())
    }

    /// Starts a new manifest holding a snapshot of the current version and
    /// points CURRENT at it; removes the previous manifest.
    fn write_new_manifest(&self, last_seqno: SeqNo) -> Result<()> {
        let mut guard = self.manifest.lock();
        let last_seqno = guard
            .as_ref()
            .map_or(last_seqno, |m| m.last_seqno.max(last_seqno));
        let number = self.new_file_number();
        let group = self.snapshot_group(&self.current_all(), last_seqno);
        let writer = write_snapshot_manifest(self.fs.as_ref(), &self.dir, number, &group)?;
        self.stats
            .add_written(|w| w.manifest += writer.bytes_written());
        set_current(self.fs.as_ref(), &self.dir, number)?;
        if let Some(old) = guard.replace(Manifest {
            writer,
            number,
            last_seqno,
            failed: None,
        }) {
            let _ = self
                .fs
                .remove(&self.dir.join(manifest_file_name(old.number)));
        }
        Ok(())
    }

    /// The snapshot record of `versions` (one per region) with the set's
    /// log numbers, next file number, PM WALs, layout and identity: one edit
    /// per region, region 0 first with the global fields.
    fn snapshot_group(&self, versions: &[Arc<Version>], last_seqno: SeqNo) -> Vec<VersionEdit> {
        let logs = self.log_numbers.lock().clone();
        let mut group: Vec<VersionEdit> = versions
            .iter()
            .zip(logs)
            .enumerate()
            .map(|(region, (v, log))| {
                let mut e = v.snapshot_edit();
                e.region = region as u32;
                e.log_number = Some(log);
                e
            })
            .collect();
        let snap = &mut group[0];
        snap.next_file_number = Some(self.next_file_number.load(Ordering::Relaxed));
        snap.last_seqno = Some(last_seqno);
        snap.new_pm_wals = self.pm_wals();
        if self.layout.count > 1 {
            snap.region_layout = Some(self.layout.clone());
        }
        let identity = self.identity.lock().clone();
        if !identity.is_empty() {
            snap.identity = Some(identity);
        }
        group
    }

    /// The current state as one consistent snapshot, for a checkpoint:
    /// taken under the manifest lock, so the versions, log numbers and PM
    /// WALs are those of one applied edit. The versions pin their tables'
    /// files and PM pages while they are held.
    pub fn checkpoint_state(&self) -> Result<CheckpointState> {
        let guard = self.manifest.lock();
        let m = guard.as_ref().ok_or(Error::Closed)?;
        let versions = self.current_all();
        let group = self.snapshot_group(&versions, m.last_seqno);
        Ok(CheckpointState {
            log_number: self.log_number(),
            pm_wals: self.pm_wals(),
            versions,
            group,
        })
    }

    /// Closes the manifest.
    pub fn close(&self) {
        self.manifest.lock().take();
    }

    /// Closes the manifest after a clean shutdown (every log synced, no
    /// failure) and seals it: writes CLOSED with the manifest's length and
    /// that of every SSD WAL at or above the log number
    /// (`version::closed`). A manifest whose last write failed is closed
    /// without a seal.
    pub fn close_clean(&self) -> Result<()> {
        let Some(m) = self.manifest.lock().take() else {
            return Ok(());
        };
        if m.failed.is_some() {
            return Ok(());
        }
        let log_number = self.log_number();
        let mut wals: Vec<(u64, u64)> = Vec::new();
        for name in self.fs.list(&self.dir)? {
            if let Some(n) = name
                .strip_suffix(".log")
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|&n| n >= log_number)
            {
                wals.push((n, self.fs.file_size(&self.dir.join(&name))?));
            }
        }
        wals.sort_unstable();
        Closed {
            manifest: (m.number, m.writer.bytes_written()),
            wals,
        }
        .write(self.fs.as_ref(), &self.dir)
    }
}

/// The number of a table, WAL or manifest file name.
pub fn file_number(name: &str) -> Option<u64> {
    name.strip_suffix(".sst")
        .or_else(|| name.strip_suffix(".log"))
        .or_else(|| name.strip_prefix("MANIFEST-"))
        .and_then(|n| n.parse::<u64>().ok())
}

/// The largest file number in `dir` and in its `lost/` directory (0 if
/// none).
fn largest_file_number(fs: &dyn FileSystem, dir: &Path) -> u64 {
    [dir.to_path_buf(), dir.join(crate::lost::LOST_DIR)]
        .iter()
        .filter_map(|d| fs.list(d).ok())
        .flatten()
        .filter_map(|n| file_number(&n))
        .max()
        .unwrap_or(0)
}

/// What [`VersionSet::checkpoint_state`] captures.
pub struct CheckpointState {
    /// The current version of every region (they pin their tables).
    pub versions: Vec<Arc<Version>>,
    /// Their snapshot record, as a new manifest's first record holds it.
    pub group: Vec<VersionEdit>,
    /// The PM WALs live in that state.
    pub pm_wals: Vec<PmWal>,
    /// WALs numbered below this are in tables in that state.
    pub log_number: u64,
}

/// Writes `MANIFEST-<number>` in `dir` holding the snapshot record `group`
/// and syncs it (CURRENT is not touched); returns the writer (its byte
/// count).
fn write_snapshot_manifest(
    fs: &dyn FileSystem,
    dir: &Path,
    number: u64,
    group: &[VersionEdit],
) -> Result<LogWriter<FileSink>> {
    let path = dir.join(manifest_file_name(number));
    let file = fs.create(&path, WriteHint::default())?;
    let mut writer = LogWriter::new(FileSink(file), number);
    let mut buf = Vec::new();
    VersionEdit::encode_group(group, &mut buf);
    writer.add_record(&buf)?;
    writer.sync()?;
    Ok(writer)
}

/// Makes `dir` a database whose state is the snapshot record `group`: writes
/// and syncs `MANIFEST-<number>`, points CURRENT at it, syncs the directory.
/// `group[0].next_file_number` must be above `number` and every file the
/// state names (checkpoints; `Db::repair`, whose group describes the whole
/// database it rebuilt, region 0 first, with its tables already durable).
pub fn install_snapshot_manifest(
    fs: &dyn FileSystem,
    dir: &Path,
    number: u64,
    group: &[VersionEdit],
) -> Result<()> {
    debug_assert!(group
        .first()
        .and_then(|e| e.next_file_number)
        .is_some_and(|n| n > number));
    write_snapshot_manifest(fs, dir, number, group)?;
    fs.sync_dir(dir)?;
    set_current(fs, dir, number)
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::key::{make_internal_key, Kind};
    use crate::sst::TableCounters;
    use crate::stats::Tier;
    use crate::storage::fault::{FaultFs, FaultRule, Op};
    use crate::storage::mem::MemFs;
    use crate::version::edit::{TableFormat, TableMeta};

    fn ctx(fs: &Arc<dyn FileSystem>, dir: &Path) -> Arc<TableContext> {
        Arc::new(TableContext::new(
            Arc::clone(fs),
            dir.to_path_buf(),
            None,
            TableCounters::default(),
            true,
        ))
    }

    fn table(id: u64, seq_max: SeqNo) -> TableMeta {
        TableMeta {
            id,
            tier: Tier::Ssd,
            format: TableFormat::Sst,
            size_bytes: 100,
            smallest: make_internal_key(b"a", seq_max, Kind::Put),
            largest: make_internal_key(b"z", seq_max, Kind::Put),
            seq_min: seq_max,
            seq_max,
            entries: 1,
            deletions: 0,
            pm_pages: Vec::new(),
        }
    }

    /// A new, empty single-region database in `dir`.
    fn create(fs: &Arc<dyn FileSystem>, dir: &Path, ctx: Arc<TableContext>) -> VersionSet {
        let stats = Arc::new(StatsRecorder::new());
        VersionSet::create(Arc::clone(fs), dir, ctx, stats, 4, single_region()).unwrap()
    }

    /// A new version set in `/db` of an empty in-memory file system.
    fn fresh() -> (Arc<dyn FileSystem>, &'static Path, VersionSet) {
        let mem: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let dir = Path::new("/db");
        mem.create_dir_all(dir).unwrap();
        let vs = create(&mem, dir, ctx(&mem, dir));
        (mem, dir, vs)
    }

    fn open(fs: &Arc<dyn FileSystem>, dir: &Path) -> (VersionSet, Recovered) {
        let stats = Arc::new(StatsRecorder::new());
        VersionSet::recover(Arc::clone(fs), dir, ctx(fs, dir), stats, 4, single_region()).unwrap()
    }

    /// Two jobs read the engine's last seqno before taking the manifest
    /// lock; the one holding the older value logs last. The recorded seqno
    /// must not go back below what the first job's table holds.
    #[test]
    fn recorded_seqno_never_goes_backwards() {
        let (mem, dir, vs) = fresh();
        let flush = VersionEdit {
            new_tables: vec![(0, table(vs.new_file_number(), 150))],
            ..Default::default()
        };
        vs.log_and_apply(flush, 150).unwrap();
        let compaction = VersionEdit::default();
        vs.log_and_apply(compaction, 100).unwrap();
        vs.close();
        let (_, rec) = open(&mem, dir);
        assert_eq!(rec.last_seqno, 150);
    }

    /// The identity written at create is in every later manifest's
    /// snapshot; a database created without one recovers an empty one.
    #[test]
    fn identity_survives_reopen_and_rotation() {
        let mem: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let dir = Path::new("/db");
        mem.create_dir_all(dir).unwrap();
        let id = DbIdentity::for_design(crate::options::Preset::Matrix);
        let stats = Arc::new(StatsRecorder::new());
        let vs = VersionSet::create_with_identity(
            Arc::clone(&mem),
            dir,
            ctx(&mem, dir),
            stats,
            4,
            single_region(),
            id.clone(),
        )
        .unwrap();
        vs.write_new_manifest(0).unwrap(); // a rotation
        vs.close();
        let (vs, rec) = open(&mem, dir);
        assert_eq!(
            (rec.identity.clone(), vs.identity()),
            (id.clone(), id.clone())
        );
        vs.close();
        drop(vs);
        let (_, rec) = open(&mem, dir); // the recovery's own new manifest
        assert_eq!(rec.identity.preset(), Some(crate::options::Preset::Matrix));
        let (mem, dir, vs) = fresh();
        vs.close();
        assert!(open(&mem, dir).1.identity.is_empty());
    }

    /// File numbers found on disk are never handed out again.
    #[test]
    fn numbers_of_files_found_at_recovery_are_not_reused() {
        let (_, _, vs) = fresh();
        let n = vs.new_file_number();
        vs.mark_file_number_used(n + 10);
        assert_eq!(vs.new_file_number(), n + 11);
        vs.mark_file_number_used(3); // lower: no effect
        assert_eq!(vs.new_file_number(), n + 12);
    }

    /// A manifest that already holds a seqno below a table's (written
    /// before the fix) recovers to the table's.
    #[test]
    fn recovery_takes_seqnos_in_tables_into_account() {
        let (mem, dir, vs) = fresh();
        // Simulate the old behaviour: log with a seqno below the table's.
        let edit = VersionEdit {
            new_tables: vec![(0, table(vs.new_file_number(), 150))],
            ..Default::default()
        };
        vs.log_and_apply(edit, 90).unwrap();
        vs.close();
        let (_, rec) = open(&mem, dir);
        assert_eq!(rec.last_seqno, 150);
    }

    /// A compaction whose manifest write fails must not release its input
    /// tables (they are still in the current version), and no later edit
    /// may follow the failed record.
    #[test]
    fn failed_edit_keeps_removed_tables_live() {
        let mem: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let dir = Path::new("/db");
        mem.create_dir_all(dir).unwrap();
        let fault = Arc::new(FaultFs::new(Arc::clone(&mem)));
        let fs: Arc<dyn FileSystem> = fault.clone();
        let ctx = ctx(&fs, dir);
        let vs = create(&fs, dir, Arc::clone(&ctx));
        let id = vs.new_file_number();
        let add = VersionEdit {
            new_tables: vec![(1, table(id, 10))],
            ..Default::default()
        };
        vs.log_and_apply(add, 10).unwrap();
        fault.add_rule(FaultRule::new(Op::Sync).path_contains("MANIFEST"));
        let remove = VersionEdit {
            deleted_tables: vec![(1, id)],
            ..Default::default()
        };
        assert!(vs.log_and_apply(remove, 10).is_err());
        assert_eq!(vs.current().levels[1].len(), 1);
        let Err(later) = vs.log_and_apply(VersionEdit::default(), 11) else {
            panic!("an edit after a failed record was accepted");
        };
        assert!(later.to_string().contains("failed write"), "{later}");
        // Dropping every version (as a close does) must not queue it.
        vs.close();
        drop(vs);
        assert!(ctx.obsolete.lock().is_empty());
    }
}
