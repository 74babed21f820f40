//! `Db`: the engine, one room per job.
//!
//! * [`mod.rs`](self) — the API (gets, iterators, snapshots, writes, flush,
//!   compaction, close) and the shared state the rooms work on;
//! * [`write`] — the write path: the writer queue, group commit, the log
//!   behind the `LogWriter` trait (the engine's WAL on SSD or in PM, or a
//!   log the design owns), memtable switches;
//! * [`control`] — the write controller: delays and stops, and the
//!   admitted-write-rate meter the pickers see;
//! * [`jobs`] — the background scheduler with the flush and compaction
//!   jobs, manual flushes and compactions;
//! * [`recovery`] — open: the MANIFEST, the design's recovery hook, PM
//!   reconcile, log replay;
//! * [`obsolete`] — releasing the files and PM pages of tables no version
//!   references;
//! * [`properties`] — `property()` and `stats()`;
//! * [`region`] — regions (`Options::regions`): memtables and routing;
//! * [`repair`] — `Db::repair`: a database rebuilt from the tables and
//!   logs found when its MANIFEST is damaged or lost.
//!
//! Concurrency contract:
//! 1. Writers queue in `writers`; the writer at the front is the *leader*:
//!    it makes room (may stall), takes a group of queued batches, appends
//!    them to the log as one record, inserts them into the memtable and
//!    publishes their seqnos. Only the leader touches the log writer and
//!    inserts into the mutable memtable.
//! 2. Readers take an `Arc<SuperVersion>` (mutable memtable, immutable
//!    memtables, version) under a short read lock and never block on
//!    background work. A super version is replaced, never mutated.
//! 3. A seqno is visible (`last_seq`) only after its batch is in the log and
//!    the memtable, so a reader at `last_seq` sees complete batches.
//! 4. Background threads (`Options::background_threads`; one of them
//!    reserved for flushes when there are two or more) pick work under the
//!    `state` mutex and run it without it. Tables being compacted are in
//!    `busy`, so pickers never hand one table to two jobs.
//! 5. Memtables flush in order (oldest first), one at a time; a WAL is
//!    deleted only after the edit that covers it is durable.
//! 6. With `Options::regions` > 1 each region (db/region.rs) has its own
//!    memtables and version; the log, the seqnos, the manifest, the busy
//!    set, the threads and the memtable budget are shared. Flushes take
//!    the oldest immutable memtable of any region, compactions go round
//!    robin over the regions' pickers.
//! 7. Lock order: `writers` → `state` → `log` → `closed_logs`; the
//!    super-version lock and the stats locks are leaves.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex, RwLock};

use crate::batch::WriteBatch;
use crate::design::{Design, DesignFactory, JobEnv};
use crate::error::{Error, Result};
use crate::iter::{DbIterator, InternalIterator, MergingIterator};
use crate::key::{Kind, SeqNo};
use crate::memtable::MemTable;
use crate::options::{Options, Preset};
use crate::stats::{Stats, StatsRecorder};
use crate::storage::pm::PmTier;
use crate::storage::{FileLock, FileSystem};
use crate::version::set::VersionSet;
use crate::version::Version;
use crate::wal::{LogWriter, PmWals};

mod checkpoint;
mod control;
pub mod identity;
mod jobs;
pub mod migrate;
mod obsolete;
mod properties;
mod range;
#[cfg(test)]
mod read_path_tests;
mod recovery;
pub mod region;
pub mod repair;
mod write;

pub use checkpoint::{CheckpointOptions, CheckpointStats};
use control::{Pacer, RateMeter, WriteController};
pub use migrate::MigrateReport;
pub use range::Range;
use region::{Regions, Router};
pub use repair::RepairReport;
use write::Writer;

/// Per-write options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Make the write durable before acknowledging it (fsync of an SSD
    /// WAL). Writes to a PM WAL are always persisted.
    pub sync: bool,
}

/// Per-read options.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// Read as of this snapshot (default: the latest state).
    pub snapshot: Option<Snapshot>,
    /// Iterators: smallest user key to return (inclusive).
    pub lower_bound: Option<Vec<u8>>,
    /// Iterators: user keys must be below this (exclusive).
    pub upper_bound: Option<Vec<u8>>,
    /// Do not let blocks read by this operation enter the block cache.
    pub skip_cache: bool,
}

/// A consistent point-in-time view; released when dropped.
#[derive(Clone)]
pub struct Snapshot {
    inner: Arc<SnapshotInner>,
}

struct SnapshotInner {
    seq: SeqNo,
    list: Arc<Mutex<BTreeMap<SeqNo, usize>>>,
}

impl Snapshot {
    /// The seqno the snapshot reads at.
    pub fn seqno(&self) -> SeqNo {
        self.inner.seq
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Snapshot({})", self.inner.seq)
    }
}

impl Drop for SnapshotInner {
    fn drop(&mut self) {
        let mut l = self.list.lock();
        if let Some(n) = l.get_mut(&self.seq) {
            *n -= 1;
            if *n == 0 {
                l.remove(&self.seq);
            }
        }
    }
}

/// What readers read of one region: its memtables and its version.
struct RegionView {
    mem: Arc<MemTable>,
    /// Immutable memtables, newest first.
    imms: Vec<Arc<MemTable>>,
    version: Arc<Version>,
}

/// What readers read: every region's view, replaced together.
struct SuperVersion {
    regions: Vec<RegionView>,
}

/// State guarded by the `state` mutex.
struct State {
    /// The regions' memtables and the live WALs.
    mem: Regions,
    busy: HashSet<u64>,
    flushing: bool,
    /// The region whose oldest immutable memtable's flush has built its
    /// output and awaits its edit: that memtable no longer counts among
    /// those the design keeps room for (`State::waiting_imms`).
    flush_built: Option<usize>,
    compactions_running: usize,
    manual_running: bool,
    bg_error: Option<Error>,
    shutting_down: bool,
    /// Delays and stops (db/control.rs).
    control: WriteController,
    /// Pacing (db/control.rs).
    pacer: Pacer,
}

/// What every room of the engine shares.
struct Inner {
    dir: PathBuf,
    opts: Options,
    fs: Arc<dyn FileSystem>,
    design: Arc<dyn Design>,
    router: Router,
    versions: VersionSet,
    stats: Arc<StatsRecorder>,
    pm: Option<Arc<PmTier>>,
    /// The WALs in the PM tier, when the PM tier holds the WAL.
    pm_wals: Option<PmWals>,
    state: Mutex<State>,
    /// Wakes background threads.
    bg_cv: Condvar,
    /// Signalled whenever background work finishes (stalled writers,
    /// `flush()` and `compact_range()` wait on it).
    done_cv: Condvar,
    writers: Mutex<VecDeque<Arc<Writer>>>,
    writers_cv: Condvar,
    log: Mutex<Box<dyn LogWriter>>,
    /// SSD WALs retired by memtable switches and not known durable yet,
    /// with their numbers, oldest first.
    closed_logs: Mutex<Vec<(u64, Box<dyn LogWriter>)>>,
    /// An SSD WAL was created since the directory was last synced
    /// ([`Inner::sync_wal_dir`]): its name is not yet crash-proof.
    wal_dir_unsynced: AtomicBool,
    /// The next PM WAL with its number, created and named in the MANIFEST
    /// ahead of the memtable switch that takes it
    /// ([`Inner::prepare_spare_log`]), so that a switch writes no MANIFEST
    /// record under the state mutex (an fsync: 8-12 ms writes in a fill,
    /// README "Stalls"). Locked while one is made, and by a switch until
    /// its log has a number: logs are switched to in increasing numbers.
    spare_log: Mutex<Option<(u64, write::NewLog)>>,
    /// A switch took the spare (or none was made yet): the flush thread
    /// makes the next one.
    spare_wanted: AtomicBool,
    /// User bytes the write path admits (the pickers' load figure).
    admitted: RateMeter,
    super_version: RwLock<Arc<SuperVersion>>,
    /// Super versions replaced but perhaps still held by a reader or an
    /// iterator. Holding one more reference here means no reader ever
    /// drops the last: freeing a flushed memtable (a million allocations)
    /// or an old version's table readers is left to a background thread
    /// ([`Inner::reap_super_versions`]), never done inside a `get`
    /// (README "Reads": 29% of the time in readwhilewriting's slowest
    /// reads was the reader freeing a memtable).
    retired_super_versions: Mutex<Vec<Arc<SuperVersion>>>,
    /// Unlinks obsolete SST files off the flush and compaction threads.
    deleter: obsolete::Deleter,
    /// Compaction's SSD writes against foreground reads
    /// (`Options::background_io_autotune`).
    limiter: Option<Arc<crate::storage::limiter::BackgroundLimiter>>,
    /// The compaction threads' CPU policy, switched by the write path
    /// (`Options::adaptive_compaction_priority`; control.rs).
    compaction_cpu: Option<Arc<crate::sched::ThreadGroup>>,
    last_seq: AtomicU64,
    snapshots: Arc<Mutex<BTreeMap<SeqNo, usize>>>,
    _lock: Arc<dyn FileLock>,
    /// The PM directory's lock (`identity.rs`), with `pm_dir`.
    _pm_lock: Option<crate::storage::pm::PmLock>,
}

/// An open database. `Send + Sync`: share it with `Arc<Db>`.
///
/// ```
/// use tierkv::{Db, Options, WriteBatch, WriteOptions};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// let db = Db::open(dir.path(), Options::default())?;
/// db.put(b"apple", b"red")?;
/// let mut batch = WriteBatch::new();
/// batch.put(b"banana", b"yellow").put(b"cherry", b"dark red").delete(b"apple");
/// db.write(batch, &WriteOptions { sync: true })?; // atomic and durable
/// assert_eq!(db.get(b"banana")?, Some(b"yellow".to_vec()));
/// assert_eq!(db.get(b"apple")?, None);
///
/// // Iteration: a Rust iterator over a range (or `prefix`), both ways.
/// for kv in db.range("b".as_bytes().."d".as_bytes()) {
///     let (key, value) = kv?;
///     println!("{} = {}", String::from_utf8_lossy(&key), String::from_utf8_lossy(&value));
/// }
/// let last = db.range::<&[u8], _>(..).next_back().transpose()?;
/// assert_eq!(last.map(|(k, _)| k), Some(b"cherry".to_vec()));
///
/// // A snapshot keeps reading the state it was taken at.
/// let snapshot = db.snapshot();
/// db.put(b"banana", b"green")?;
/// let then: Vec<_> = db.prefix(b"banana").at(&snapshot).collect::<tierkv::Result<_>>()?;
/// assert_eq!(then[0].1, b"yellow");
/// db.close()?;
/// # Ok(()) }
/// ```
pub struct Db {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Db {
    /// Opens (or creates) the database in `dir`.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Db> {
        Self::open_inner(dir.as_ref(), options, None)
    }

    /// Opens (or creates) the database in `dir` with a design built by
    /// `factory` instead of `options.design`'s preset: for designs that
    /// are not presets (a test's toy design, an experiment). The factory
    /// gets the options and the PM tier (when `pm_dir` or `pm_region` is
    /// set); `options.design` still names the preset for stats.
    pub fn open_with_design(
        dir: impl AsRef<Path>,
        options: Options,
        factory: &DesignFactory,
    ) -> Result<Db> {
        Self::open_inner(dir.as_ref(), options, Some(factory))
    }

    /// Rebuilds the database in `dir` from the tables and logs found (and
    /// the PM tier's WALs and RowTables), when its MANIFEST is damaged or
    /// lost: RocksDB's `RepairDB`. Reports what was recovered and what
    /// could not be; the files it read are kept in `lost/`. `options` are
    /// those the database is opened with. See [`repair`].
    pub fn repair(dir: impl AsRef<Path>, options: Options) -> Result<RepairReport> {
        repair::repair(dir.as_ref(), options)
    }

    /// Moves the database in `dir`, made by the design of `from`, to the
    /// design of `to`, where `to` cannot open it as it is (its data sits in
    /// another PM layout): its PM data goes to SSD first. See [`migrate`].
    pub fn migrate(dir: impl AsRef<Path>, from: Options, to: Options) -> Result<MigrateReport> {
        migrate::migrate(dir.as_ref(), from, to)
    }

    fn open_inner(dir: &Path, options: Options, factory: Option<&DesignFactory>) -> Result<Db> {
        // An SSD-only database opened by a PM design: its tables above the
        // last level move down first, under its own design (`identity.rs`,
        // "The upgrade").
        if let Some(from) = identity::upgrade_from(options.fs.as_ref(), dir, &options)? {
            migrate::compact_to_last_level(dir, &options, from)?;
        }
        let inner = recovery::open(dir, options, factory)?;
        let threads = jobs::start_background(&inner);
        Ok(Db {
            inner,
            threads: Mutex::new(threads),
        })
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut b = WriteBatch::with_capacity(key.len() + value.len() + 8);
        b.put(key, value);
        self.write(b, &WriteOptions::default())
    }

    /// Deletes `key`.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.write(b, &WriteOptions::default())
    }

    /// Applies a batch atomically.
    pub fn write(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        batch.validate()?;
        if batch.is_empty() {
            return Ok(());
        }
        self.inner.write(Some(batch), opts.sync, false)
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(key, &ReadOptions::default())
    }

    /// The value of `key` under `opts` (snapshot).
    pub fn get_with(&self, key: &[u8], opts: &ReadOptions) -> Result<Option<Vec<u8>>> {
        let sv = self.inner.super_version();
        let seq = match &opts.snapshot {
            Some(s) => s.seqno(),
            None => self.inner.last_seq.load(Ordering::Acquire),
        };
        let r = &sv.regions[self.inner.router.route(key)];
        let found = match r.mem.get(key, seq) {
            Some(f) => Some(f),
            None => match r.imms.iter().find_map(|m| m.get(key, seq)) {
                Some(f) => Some(f),
                None => r.version.get(key, seq)?,
            },
        };
        Ok(found.and_then(|f| match f.kind {
            Kind::Put => Some(f.value),
            Kind::Delete => None,
        }))
    }

    /// An iterator over the database (forward and reverse, with bounds).
    /// It starts unpositioned: call a seek first.
    pub fn iter(&self, opts: ReadOptions) -> Result<DbIterator> {
        let sv = self.inner.super_version();
        let (seq, snap) = match opts.snapshot {
            Some(s) => (s.seqno(), s),
            None => {
                // Pin a snapshot so compaction keeps what the iterator sees.
                let s = self.snapshot();
                (s.seqno(), s)
            }
        };
        // One seqno space: the regions' entries merge like one LSM's.
        let mut children: Vec<Box<dyn InternalIterator>> = Vec::with_capacity(8);
        let (lower, upper) = (opts.lower_bound.as_deref(), opts.upper_bound.as_deref());
        for (i, r) in sv.regions.iter().enumerate() {
            if !self.inner.router.may_overlap(i, lower, upper) {
                continue;
            }
            children.push(Box::new(r.mem.iter()));
            for m in &r.imms {
                children.push(Box::new(m.iter()));
            }
            r.version.add_iterators(&mut children, !opts.skip_cache);
        }
        let merged = MergingIterator::new(children);
        Ok(DbIterator::new(
            Box::new(merged),
            seq,
            opts.lower_bound,
            opts.upper_bound,
            Box::new((sv, snap)),
        ))
    }

    /// A snapshot of the current state.
    pub fn snapshot(&self) -> Snapshot {
        let mut l = self.inner.snapshots.lock();
        // Read the seqno under the list lock so compaction's view of the
        // smallest snapshot never misses this one.
        let seq = self.inner.last_seq.load(Ordering::Acquire);
        *l.entry(seq).or_insert(0) += 1;
        Snapshot {
            inner: Arc::new(SnapshotInner {
                seq,
                list: Arc::clone(&self.inner.snapshots),
            }),
        }
    }

    /// The seqno of the last committed write.
    pub fn last_sequence(&self) -> SeqNo {
        self.inner.last_seq.load(Ordering::Acquire)
    }

    /// Writes every memtable to its flush target and waits for it.
    pub fn flush(&self) -> Result<()> {
        self.inner.flush_all()
    }

    /// Compacts the user-key range `[begin, end]` (`None` = unbounded) down
    /// the levels, waiting for the result.
    pub fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        self.inner.flush_all()?;
        self.inner.compact_range(begin, end)
    }

    /// Statistics (DESIGN.md §5).
    pub fn stats(&self) -> Stats {
        self.inner.stats_snapshot()
    }

    /// A named property: `tierkv.stats` (a table), `tierkv.levels`,
    /// `tierkv.tables` (one line per table: level, id, tier, size, smallest
    /// and largest user key; prefixed by `R<region> ` with several
    /// regions), `tierkv.num-files-at-level<N>`, `tierkv.last-sequence`,
    /// `tierkv.design`, `tierkv.design-stats` (the design's own figures,
    /// `Design::stats`, one `name: value` a line; `None` if it has none),
    /// `tierkv.regions` (one line per region: its tables per level),
    /// `tierkv.level-targets` (one region's target per level, as the design
    /// scores levels: `L0: 4 tables`, `L1: 268435456 bytes`, …; absent when
    /// the design reports none); `tierkv.headroom` (what the pacing write
    /// controller reads of the design's bounded resource, per region:
    /// `region 0: free <bytes> capacity <bytes> step <bytes>`, in user
    /// bytes; `None` when the memtables are the only one);
    /// `tierkv.recycled-tables` (`reused <n>` tables written over an
    /// obsolete table's file, `kept <n>` such files now:
    /// `Options::recycle_table_files`); RocksDB's four background figures
    /// `tierkv.num-running-flushes`, `tierkv.num-running-compactions`,
    /// `tierkv.mem-table-flush-pending` and `tierkv.compaction-pending`
    /// (all 0 once background work is done); `None` for unknown names.
    /// Level counts and sizes are
    /// totals over the regions.
    pub fn property(&self, name: &str) -> Option<String> {
        self.inner.property(name)
    }

    /// Stops background work (finishing running jobs), makes every
    /// acknowledged write durable and releases the database. When every
    /// log synced and nothing failed, the close is recorded as clean: the
    /// PM WAL is sealed and CLOSED holds the lengths of the MANIFEST and
    /// of every live SSD WAL, so that a log cut short afterwards is
    /// corruption at the next open, not a torn tail
    /// (`docs/format/manifest.md` §6).
    pub fn close(self) -> Result<()> {
        self.shutdown(None)
    }

    /// Closes the database as [`Db::close`] does, after one more MANIFEST
    /// record that leaves it to design `to` with nothing in PM
    /// ([`Inner::detach_pm`]): the last step of a migration.
    pub(crate) fn close_detached(self, to: Preset) -> Result<()> {
        self.shutdown(Some(to))
    }

    fn shutdown(&self, detach: Option<Preset>) -> Result<()> {
        {
            let mut st = self.inner.state.lock();
            if st.shutting_down {
                return Ok(());
            }
            st.shutting_down = true;
        }
        self.inner.bg_cv.notify_all();
        self.inner.done_cv.notify_all();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        // Wait for queued writers to drain, then make the log durable and
        // seal it.
        let _w = self.inner.writers.lock();
        let r = self
            .inner
            .sync_closed_logs()
            .and_then(|()| {
                let mut log = self.inner.log.lock();
                log.sync()?;
                self.inner.sync_wal_dir()?;
                log.seal()?;
                // A spare PM WAL is listed like the log: sealed empty.
                match self.inner.spare_log.lock().take() {
                    Some((_, mut spare)) => spare.writer.seal(),
                    None => Ok(()),
                }
            })
            .and_then(|()| match detach {
                Some(to) => self.inner.detach_pm(to),
                None => Ok(()),
            });
        // Readers are gone (`close` takes the Db; a drop has no other
        // owner): the retired versions' storage is released with the rest.
        self.inner.reap_super_versions();
        self.inner.release_obsolete();
        self.inner.remove_kept_tables();
        self.inner.deleter.stop();
        // Record a clean close (CLOSED: the manifest's and the WALs'
        // lengths) only if everything got out whole.
        if r.is_ok() && self.inner.state.lock().bg_error.is_none() {
            self.inner.versions.close_clean()?;
        } else {
            self.inner.versions.close();
        }
        r
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = self.shutdown(None);
    }
}

impl Inner {
    fn super_version(&self) -> Arc<SuperVersion> {
        Arc::clone(&self.super_version.read())
    }

    /// Rebuilds the super version from the state. The one it replaces
    /// goes to the retired list, for a background thread to drop once no
    /// reader holds it ([`Inner::reap_super_versions`]): it may hold the
    /// last reference to a flushed memtable (freeing tens of MiB took
    /// writers waiting on `state` 8-19 ms, README "Stalls", and readers as
    /// long) or to an old version. REQUIRES: `state` locked.
    fn install_super_version(&self, st: &State) {
        let sv = SuperVersion {
            regions: st
                .mem
                .regions
                .iter()
                .zip(self.versions.current_all())
                .map(|(r, version)| RegionView {
                    mem: Arc::clone(&r.mem),
                    imms: r.imms.iter().rev().cloned().collect(),
                    version,
                })
                .collect(),
        };
        let old = std::mem::replace(&mut *self.super_version.write(), Arc::new(sv));
        self.retired_super_versions.lock().push(old);
    }

    /// Drops the retired super versions no reader holds any more (the
    /// list's reference is the last: nobody can take a new one, readers
    /// clone only the current). Called by background threads, and at
    /// close; the frees run after the list is unlocked.
    fn reap_super_versions(&self) {
        let dead: Vec<Arc<SuperVersion>> = {
            let mut l = self.retired_super_versions.lock();
            if l.is_empty() {
                return;
            }
            let (dead, live) = std::mem::take(&mut *l)
                .into_iter()
                .partition(|sv| Arc::strong_count(sv) == 1);
            *l = live;
            dead
        };
        drop(dead);
    }

    fn smallest_snapshot(&self) -> SeqNo {
        let l = self.snapshots.lock();
        let last = self.last_seq.load(Ordering::Acquire);
        l.keys().next().copied().unwrap_or(last).min(last)
    }

    fn job_env(&self, version: Arc<Version>) -> JobEnv<'_> {
        JobEnv {
            opts: &self.opts,
            fs: &self.fs,
            dir: &self.dir,
            versions: &self.versions,
            stats: &self.stats,
            smallest_snapshot: self.smallest_snapshot(),
            version,
            limiter: self.limiter.as_ref(),
        }
    }

    fn set_bg_error(&self, e: &Error) {
        let mut st = self.state.lock();
        if st.bg_error.is_none() {
            log::error!("tierkv: stopping writes after background error: {e}");
            st.bg_error = Some(e.clone());
        }
        drop(st);
        self.done_cv.notify_all();
    }

    /// The background error or shutdown that ends a wait. REQUIRES:
    /// `state` locked.
    fn stopped(st: &State) -> Result<()> {
        if let Some(e) = &st.bg_error {
            return Err(Error::Background(e.to_string()));
        }
        if st.shutting_down {
            return Err(Error::Closed);
        }
        Ok(())
    }
}
