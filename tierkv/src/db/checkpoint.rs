//! Checkpoints: a consistent, openable copy of a live database
//! ([`Db::checkpoint`], RocksDB's `Checkpoint::CreateCheckpoint`).
//!
//! # What the copy holds
//!
//! ```text
//!  live database                         checkpoint
//!  dir/000012.sst ───── hard link ─────► cdir/000012.sst   (copied across devices)
//!  dir/000015.log ───── copy ──────────► cdir/000015.log   (WALs not yet in tables)
//!  dir/MANIFEST-…      (not copied)      cdir/MANIFEST-<n> one snapshot record
//!                                        cdir/CURRENT
//!  pm_dir/pm.region                      cpm_dir/pm.region  same size, freshly formatted:
//!    RowTable runs, PM WAL extents ──────► copied to the same offsets
//! ```
//!
//! The copy's state is a prefix of the writes: every write acknowledged
//! before `checkpoint` was called, and perhaps some that ran concurrently,
//! without holes. Steps:
//!
//! 1. With [`CheckpointOptions::flush`] (the default, as RocksDB does), the
//!    memtables are flushed first, so the WALs to copy are short.
//! 2. Flushes are held off (no WAL can become obsolete and be deleted or
//!    freed), and the WAL writer is locked (no record is half written):
//!    the version set's state is captured under its manifest lock (one
//!    applied edit: versions, log numbers, PM WALs), and the WALs it does
//!    not cover yet are copied — SSD files byte for byte, PM WAL extents to
//!    the same offsets of the new region. Writers wait for this step only.
//! 3. The captured versions pin their tables (invariant 3 of `version`),
//!    so afterwards, with writes and flushes running again, SSTs are hard
//!    linked (or copied) and the page runs of PM tables are copied to the
//!    same offsets of the new region, whose allocator is then reconciled
//!    to exactly those runs and the WAL extents.
//! 4. The copy's `MANIFEST-<n>` holds one snapshot record of the captured
//!    state (tables, cursors, design records, log numbers, live PM WALs,
//!    region layout, identity), with a next file number above every file
//!    the state names; CURRENT names it. Opening the copy replays its WALs
//!    as after a crash.
//!
//! PM structures store region offsets, so keeping every offset makes the
//! copy's manifest true of the new region without rewriting it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{Db, Inner};
use crate::error::{Error, Result};
use crate::stats::Tier;
use crate::storage::alloc::{random_db_id, PageAllocator, PageRun};
use crate::storage::pm::REGION_FILE_NAME;
use crate::storage::{copy_file, open_pm_region, FileSystem, PmRegion, WriteHint};
use crate::version::edit::PmRegionRef;
use crate::version::set::{install_snapshot_manifest, wal_name};
use crate::wal::PmLog;

/// How [`Db::checkpoint_with`] makes its copy.
#[derive(Clone)]
pub struct CheckpointOptions {
    /// Flush the memtables first (the default), so the copy's WALs are
    /// short. Off: the copy holds every unflushed WAL instead.
    pub flush: bool,
    /// The PM directory of the copy, for a database with a PM tier: the
    /// copy's region is `<pm_dir>/pm.region`, of the same size as the
    /// live one, and must not exist yet.
    pub pm_dir: Option<PathBuf>,
    /// A PM region to copy the PM tier into instead of `pm_dir` (tests
    /// pass a simulator); of the same size as the live region.
    pub pm_region: Option<Arc<dyn PmRegion>>,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        CheckpointOptions {
            flush: true,
            pm_dir: None,
            pm_region: None,
        }
    }
}

impl std::fmt::Debug for CheckpointOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointOptions")
            .field("flush", &self.flush)
            .field("pm_dir", &self.pm_dir)
            .field(
                "pm_region",
                &self.pm_region.as_ref().map(|r| r.name().to_string()),
            )
            .finish()
    }
}

/// What a checkpoint copied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    /// SSTs hard-linked into the copy.
    pub ssts_linked: u64,
    /// SSTs copied (where the file system could not link).
    pub ssts_copied: u64,
    /// Bytes of SSD WALs copied.
    pub wal_bytes: u64,
    /// Bytes of PM copied (tables and WAL extents).
    pub pm_bytes: u64,
    /// The last seqno the copy's manifest records (WAL replay may add).
    pub last_seqno: u64,
}

/// Holds background flushes off while alive: no WAL becomes obsolete (and
/// is deleted or freed) meanwhile.
struct FlushHold<'a>(&'a Inner);

impl<'a> FlushHold<'a> {
    fn acquire(inner: &'a Inner) -> Result<FlushHold<'a>> {
        let mut st = inner.state.lock();
        while st.flushing {
            if let Some(e) = &st.bg_error {
                return Err(Error::Background(e.to_string()));
            }
            if st.shutting_down {
                return Err(Error::Closed);
            }
            inner.done_cv.wait_for(&mut st, Duration::from_millis(20));
        }
        st.flushing = true;
        Ok(FlushHold(inner))
    }
}

impl Drop for FlushHold<'_> {
    fn drop(&mut self) {
        self.0.state.lock().flushing = false;
        self.0.bg_cv.notify_all();
    }
}

/// Copies `[offset, offset + len)` of `from` to the same offset of `to`
/// and persists it.
fn copy_pm(from: &dyn PmRegion, to: &dyn PmRegion, offset: u64, len: u64) -> Result<()> {
    const CHUNK_BYTES: u64 = 4 << 20;
    let mut at = offset;
    while at < offset + len {
        let n = (offset + len - at).min(CHUNK_BYTES) as usize;
        to.write(at, from.slice(at, n)?)?;
        at += n as u64;
    }
    to.persist(offset, len as usize)
}

impl Db {
    /// Makes a consistent, openable copy of the database in `dir` (which
    /// must not exist or be empty) while it keeps serving reads and
    /// writes: SSTs hard-linked where the file system allows, the WALs not
    /// yet in tables copied, a fresh MANIFEST and CURRENT. The copy holds
    /// every write acknowledged before the call. A database with a PM tier
    /// needs [`Db::checkpoint_with`] and a PM directory for the copy.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let db = tierkv::Db::open(dir.path().join("live"), tierkv::Options::default())?;
    /// db.put(b"k", b"v")?;
    /// db.checkpoint(dir.path().join("copy"))?;
    /// db.put(b"k", b"after")?;
    /// let copy = tierkv::Db::open(dir.path().join("copy"), tierkv::Options::default())?;
    /// assert_eq!(copy.get(b"k")?, Some(b"v".to_vec()));
    /// # Ok(()) }
    /// ```
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<CheckpointStats> {
        self.checkpoint_with(dir, &CheckpointOptions::default())
    }

    /// [`Db::checkpoint`] with options: the PM directory (or region) of the
    /// copy, whether to flush first. See the module docs
    /// (`tierkv/src/db/checkpoint.rs`) for how the copy is made consistent.
    pub fn checkpoint_with(
        &self,
        dir: impl AsRef<Path>,
        opts: &CheckpointOptions,
    ) -> Result<CheckpointStats> {
        let inner = &*self.inner;
        let dir = dir.as_ref();
        let fs = inner.fs.as_ref();
        if dir == inner.dir.as_path() {
            return Err(Error::InvalidArgument(
                "a checkpoint cannot go into the database's own directory".into(),
            ));
        }
        fs.create_dir_all(dir)?;
        if let Some(name) = fs.list(dir)?.first() {
            return Err(Error::InvalidArgument(format!(
                "checkpoint directory {} is not empty (it holds `{name}`)",
                dir.display()
            )));
        }
        // The copy's PM region, formatted: only the copied runs will be
        // allocated (reconciled below).
        let target: Option<(Arc<dyn PmRegion>, PageAllocator)> = match &inner.pm {
            None => None,
            Some(pm) => {
                let len = pm.region().len();
                let region = match (&opts.pm_region, &opts.pm_dir) {
                    (Some(r), _) => Arc::clone(r),
                    (None, Some(pm_dir)) => {
                        let path = pm_dir.join(REGION_FILE_NAME);
                        let posix = crate::storage::posix::PosixFs::new();
                        if posix.exists(&path) {
                            return Err(Error::InvalidArgument(format!(
                                "the checkpoint's PM region {} exists already",
                                path.display()
                            )));
                        }
                        posix.create_dir_all(pm_dir)?;
                        open_pm_region(&path, len, inner.opts.pm_backend, true)?
                    }
                    (None, None) => {
                        return Err(Error::InvalidArgument(
                            "the database has a PM tier: its checkpoint needs a PM directory \
                             (`CheckpointOptions::pm_dir`) for the copy's region"
                                .into(),
                        ))
                    }
                };
                if region.len() != len {
                    return Err(Error::InvalidArgument(format!(
                        "the checkpoint's PM region {} has {} bytes; the live one has {len}",
                        region.name(),
                        region.len()
                    )));
                }
                let alloc = PageAllocator::format(Arc::clone(&region))?;
                Some((region, alloc))
            }
        };
        let mut stats = CheckpointStats::default();

        // 1. Flush first: the WALs to copy are then short.
        if opts.flush {
            self.flush()?;
        }

        // 2. No flush (so no WAL goes away), no half-written record.
        let hold = FlushHold::acquire(inner)?;
        let st = inner.state.lock();
        let log = inner.log.lock();
        let ssd_wals: Vec<u64> = st.mem.ssd_wals.iter().copied().collect();
        drop(st);
        let cp = inner.versions.checkpoint_state()?;
        for n in ssd_wals.into_iter().filter(|&n| n >= cp.log_number) {
            let bytes = fs.read_all(&inner.dir.join(wal_name(n)))?;
            let mut f = fs.create(&dir.join(wal_name(n)), WriteHint::default())?;
            f.append(&bytes)?;
            f.sync()?;
            stats.wal_bytes += bytes.len() as u64;
        }
        let mut live_runs: Vec<PageRun> = Vec::new();
        if let (Some(pm), Some((region, alloc))) = (&inner.pm, &target) {
            // Every PM WAL the state lists: the copy's open walks them all.
            for w in &cp.pm_wals {
                for (offset, len) in PmLog::extents(pm.region().as_ref(), w.first_extent)? {
                    copy_pm(pm.region().as_ref(), region.as_ref(), offset, len)?;
                    stats.pm_bytes += len;
                    live_runs.push(PageRun {
                        first: offset / alloc.page_size(),
                        count: len.div_ceil(alloc.page_size()),
                    });
                }
            }
        }
        drop(log);
        drop(hold);

        // 3. The tables, pinned by `cp.versions`.
        for t in cp.versions.iter().flat_map(|v| v.levels.iter().flatten()) {
            match t.meta.tier {
                Tier::Ssd => {
                    let from = inner.versions.ctx().sst_path(t.meta.id);
                    let to = dir.join(crate::sst::sst_file_name(t.meta.id));
                    if fs.link(&from, &to)? {
                        stats.ssts_linked += 1;
                    } else {
                        copy_file(fs, &from, &to)?;
                        stats.ssts_copied += 1;
                    }
                }
                Tier::Pm => {
                    let (Some(pm), Some((region, alloc))) = (&inner.pm, &target) else {
                        return Err(Error::corruption(
                            "MANIFEST",
                            0,
                            format!(
                                "table {} is in PM but the database has no PM tier",
                                t.meta.id
                            ),
                        ));
                    };
                    for run in &t.meta.pm_pages {
                        let (offset, len) =
                            (alloc.page_offset(run.first), run.count * alloc.page_size());
                        copy_pm(pm.region().as_ref(), region.as_ref(), offset, len)?;
                        stats.pm_bytes += len;
                        live_runs.push(*run);
                    }
                }
            }
        }
        if let Some((_, alloc)) = &target {
            // A run listed by two metas of one PM structure is copied twice
            // and must be allocated once.
            live_runs.sort_unstable();
            live_runs.dedup();
            alloc.reconcile(&live_runs)?;
        }
        fs.sync_dir(dir)?;

        // 4. The copy's manifest: the captured state, numbered above every
        // file it names.
        // The copy is a database of its own: a new id, and its own PM
        // region (`db/identity.rs`), named as owner once the manifest is in.
        let mut group = cp.group;
        let number = group[0].next_file_number.unwrap_or(1).max(1);
        group[0].next_file_number = Some(number + 1);
        stats.last_seqno = group[0].last_seqno.unwrap_or(0);
        let db_id = random_db_id()?;
        let mut identity = group[0].identity.clone().unwrap_or_default();
        identity.db_id = Some(db_id);
        identity.pm_region = match &target {
            Some((region, alloc)) => Some(PmRegionRef {
                region_id: alloc.adopt_identity()?.region_id,
                size_bytes: region.len(),
            }),
            None => None,
        };
        group[0].identity = Some(identity);
        install_snapshot_manifest(fs, dir, number, &group)?;
        if let Some((_, alloc)) = &target {
            alloc.bind(db_id)?;
        }
        Ok(stats)
    }
}
