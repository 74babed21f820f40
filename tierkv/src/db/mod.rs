//! `Db`: the engine. Write path with group commit, read path over a
//! consistent "super version", background flushes and compactions driven by
//! the design, recovery.
//!
//! Concurrency contract:
//! 1. Writers queue in `writers`; the writer at the front is the *leader*:
//!    it makes room (may stall), takes a group of queued batches, appends
//!    them to the WAL as one record, inserts them into the memtable and
//!    publishes their seqnos. Only the leader touches the WAL writer and
//!    inserts into the mutable memtable.
//! 2. Readers take an `Arc<SuperVersion>` (mutable memtable, immutable
//!    memtables, version) under a short read lock and never block on
//!    background work. A super version is replaced, never mutated.
//! 3. A seqno is visible (`last_seq`) only after its batch is in the WAL and
//!    the memtable, so a reader at `last_seq` sees complete batches.
//! 4. Background threads (`Options::background_threads`; one of them
//!    reserved for flushes when there are two or more) pick work under the
//!    `state` mutex and run it without it. Tables being compacted are in
//!    `busy`, so pickers never hand one table to two jobs.
//! 5. Memtables flush in order (oldest first), one at a time; a WAL is
//!    deleted only after the edit that covers it is durable.
//! 6. With `Options::regions` > 1 each region (db/region.rs) has its own
//!    memtables and version; the WAL, the seqnos, the manifest, the busy
//!    set, the threads and the memtable budget are shared. Flushes take
//!    the oldest immutable memtable of any region, compactions go round
//!    robin over the regions' pickers.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::batch::WriteBatch;
use crate::design::{self, Design, JobEnv, Task, WriteControl};
use crate::error::{Error, Result};
use crate::iter::{DbIterator, InternalIterator, MergingIterator};
use crate::key::{Kind, SeqNo, MAX_SEQNO};
use crate::memtable::MemTable;
use crate::options::{Options, WalPlacement, WalRecovery};
use crate::sst::{BlockCache, TableCounters};
use crate::stats::{CompactionRecord, StallCause, Stats, StatsRecorder, Tier};
use crate::storage::{FileLock, FileSystem, WriteHint};
use crate::version::closed::{Closed, CLOSED_FILE_NAME};
use crate::version::edit::VersionEdit;
use crate::version::set::{wal_name, Recovered, VersionSet};
use crate::version::{TableContext, Version};
use crate::wal::{self, FileSink};

pub mod pm;
pub mod region;
use pm::PmTier;
use region::{Regions, Router};

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

/// The WAL being written, on either tier.
enum LogWriter {
    File(wal::Writer<FileSink>),
    Pm(wal::Writer<wal::PmSink>),
}

impl LogWriter {
    fn add_record(&mut self, payload: &[u8]) -> Result<()> {
        match self {
            LogWriter::File(w) => w.add_record(payload),
            LogWriter::Pm(w) => w.add_record(payload),
        }
    }
    fn sync(&mut self) -> Result<()> {
        match self {
            LogWriter::File(w) => w.sync(),
            LogWriter::Pm(w) => w.sync(),
        }
    }
    /// Hands buffered records to the OS (a file log; a PM log writes in
    /// place).
    fn flush(&mut self) -> Result<()> {
        match self {
            LogWriter::File(w) => w.flush(),
            LogWriter::Pm(_) => Ok(()),
        }
    }
    /// Closes the log for good where its synced records end (a PM log
    /// records it, so that later damage reads as corruption).
    fn seal(&mut self) -> Result<()> {
        match self {
            LogWriter::File(w) => w.seal(),
            LogWriter::Pm(w) => w.seal(),
        }
    }
    fn is_pm(&self) -> bool {
        matches!(self, LogWriter::Pm(_))
    }
    fn bytes_written(&self) -> u64 {
        match self {
            LogWriter::File(w) => w.bytes_written(),
            LogWriter::Pm(w) => w.bytes_written(),
        }
    }
}

/// One queued write.
struct Writer {
    batch: Mutex<Option<WriteBatch>>,
    sync: bool,
    /// Switch the memtable even if it is not full (`flush()`).
    force_switch: bool,
    done: AtomicBool,
    result: Mutex<Option<Result<()>>>,
}

/// State guarded by the `state` mutex.
struct State {
    /// The regions' memtables and the live WALs.
    mem: Regions,
    busy: HashSet<u64>,
    flushing: bool,
    compactions_running: usize,
    manual_running: bool,
    bg_error: Option<Error>,
    shutting_down: bool,
    /// Delayed-write token bucket.
    delay_next: Option<Instant>,
    /// The delayed write rate. It persists across delay episodes, as
    /// RocksDB's `WriteController::delayed_write_rate` does.
    delay_rate_bytes_per_sec: f64,
    /// Debt at the last recalculation.
    last_debt: u64,
    /// The last recalculation's verdict was `Delay` (RocksDB's
    /// `NeedsDelay()`): only then is the rate adjusted (a stop that turns
    /// into a delay keeps the rate, as in RocksDB with one column family).
    delaying: bool,
    /// Write-controller verdict for (version-set generation, imm count, design epoch).
    control_cache: Option<((u64, usize, u64), WriteControl)>,
}

struct Inner {
    dir: PathBuf,
    opts: Options,
    fs: Arc<dyn FileSystem>,
    design: Arc<dyn Design>,
    router: Router,
    versions: VersionSet,
    stats: Arc<StatsRecorder>,
    pm: Option<Arc<PmTier>>,
    state: Mutex<State>,
    /// Wakes background threads.
    bg_cv: Condvar,
    /// Signalled whenever background work finishes (stalled writers,
    /// `flush()` and `compact_range()` wait on it).
    done_cv: Condvar,
    writers: Mutex<VecDeque<Arc<Writer>>>,
    writers_cv: Condvar,
    log: Mutex<LogWriter>,
    /// SSD WALs retired by memtable switches and not known durable yet,
    /// with their numbers, oldest first.
    closed_logs: Mutex<Vec<(u64, LogWriter)>>,
    super_version: RwLock<Arc<SuperVersion>>,
    last_seq: AtomicU64,
    snapshots: Arc<Mutex<BTreeMap<SeqNo, usize>>>,
    _lock: Box<dyn FileLock>,
}

/// An open database. `Send + Sync`: share it with `Arc<Db>`.
pub struct Db {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// Largest group a leader commits at once.
const GROUP_MAX_BYTES: usize = 1 << 20;

impl Db {
    /// Opens (or creates) the database in `dir`.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Db> {
        options.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let fs = Arc::clone(&options.fs);
        fs.create_dir_all(&dir)?;
        let lock = fs.lock(&dir.join("LOCK"))?;
        let exists = fs.exists(&dir.join("CURRENT"));
        if exists && options.error_if_exists {
            return Err(Error::InvalidOptions(format!(
                "`error_if_exists` is set and {} already holds a database",
                dir.display()
            )));
        }
        if !exists {
            check_not_foreign(fs.as_ref(), &dir)?;
            if !options.create_if_missing {
                return Err(Error::NotADatabase(format!(
                    "{} holds no database and `create_if_missing` is false",
                    dir.display()
                )));
            }
        }

        let stats = Arc::new(StatsRecorder::new());
        let counters = TableCounters::from_recorder(Arc::clone(&stats));
        let cache = (options.block_cache_bytes > 0)
            .then(|| Arc::new(BlockCache::new(options.block_cache_bytes)));
        let ctx = Arc::new(TableContext::new(
            Arc::clone(&fs),
            dir.clone(),
            cache,
            counters,
            options.verify_checksums,
        ));
        let pm = if options.has_pm() {
            Some(Arc::new(PmTier::open(&options, exists)?))
        } else {
            None
        };
        let design = design::build(&options, pm.clone())?;
        let router = Router::new(&options);
        design.install(&ctx);
        let (versions, recovered) = if exists {
            VersionSet::recover(
                Arc::clone(&fs),
                &dir,
                Arc::clone(&ctx),
                Arc::clone(&stats),
                options.level_count,
                router.layout(),
            )?
        } else {
            let vs = VersionSet::create(
                Arc::clone(&fs),
                &dir,
                Arc::clone(&ctx),
                Arc::clone(&stats),
                options.level_count,
                router.layout(),
            )?;
            (vs, Recovered::default())
        };
        // PM runs that manifest replay saw released were freed before the
        // crash (or leaked, and `reconcile` below reclaims them); freeing
        // them again could free pages a later table reuses.
        versions
            .ctx()
            .obsolete
            .lock()
            .retain(|m| m.tier != Tier::Pm);

        // Pages a crash left allocated but unrecorded go back before replay
        // allocates (the PM tier may be nearly full).
        if let Some(pm) = &pm {
            pm.reconcile(&versions)?;
        }
        // Replay the WALs the manifest does not cover.
        let replay = Replay::run(
            &options,
            &fs,
            &dir,
            &versions,
            &stats,
            &design,
            &router,
            pm.as_deref(),
            &recovered,
        )?;

        // A fresh WAL for new writes; the edits (one per region, one
        // manifest record) make the replayed ones obsolete.
        let log_number = versions.new_file_number();
        let (log, pm_wal) = new_log(&options, &fs, &dir, pm.as_deref(), log_number)?;
        let mut edits = replay.edits;
        for e in &mut edits {
            e.log_number = Some(log_number);
        }
        if let Some(w) = pm_wal {
            edits[0].new_pm_wals.push(w);
        }
        edits[0].deleted_pm_wals = versions
            .pm_wals()
            .iter()
            .map(|w| w.log_number)
            .filter(|&n| n < log_number)
            .collect();
        versions.log_and_apply_group(edits, replay.last_seq)?;

        let mut mem = Regions::new(router.count(), log_number);
        if pm_wal.is_none() {
            mem.ssd_wals.push_back(log_number);
        }
        let sv = SuperVersion {
            regions: mem
                .regions
                .iter()
                .zip(versions.current_all())
                .map(|(r, version)| RegionView {
                    mem: Arc::clone(&r.mem),
                    imms: Vec::new(),
                    version,
                })
                .collect(),
        };
        let inner = Arc::new(Inner {
            dir,
            fs,
            design,
            stats,
            pm,
            state: Mutex::new(State {
                mem,
                busy: HashSet::new(),
                flushing: false,
                compactions_running: 0,
                manual_running: false,
                bg_error: None,
                shutting_down: false,
                delay_next: None,
                delay_rate_bytes_per_sec: options.delayed_write_rate_bytes_per_sec as f64,
                last_debt: 0,
                delaying: false,
                control_cache: None,
            }),
            bg_cv: Condvar::new(),
            done_cv: Condvar::new(),
            writers: Mutex::new(VecDeque::new()),
            writers_cv: Condvar::new(),
            log: Mutex::new(log),
            closed_logs: Mutex::new(Vec::new()),
            super_version: RwLock::new(Arc::new(sv)),
            last_seq: AtomicU64::new(replay.last_seq),
            snapshots: Arc::new(Mutex::new(BTreeMap::new())),
            opts: options,
            router,
            versions,
            _lock: lock,
        });
        if let Some(pm) = &inner.pm {
            pm.reconcile(&inner.versions)?;
        }
        // Last: nothing is deleted by an open that fails.
        inner.remove_obsolete_files(&Salvage {
            manifest_torn: recovered.manifest_torn_at.is_some(),
            damaged_wals: replay.damaged_wals,
        })?;

        let threads = start_background(&inner);
        Ok(Db {
            inner,
            threads: Mutex::new(threads),
        })
    }

    /// Rebuilds the database in `dir` from the tables and logs found (and
    /// the PM tier's WALs and RowTables), when its MANIFEST is damaged or
    /// lost: RocksDB's `RepairDB`. Reports what was recovered and what
    /// could not be; the files it read are kept in `lost/`. See
    /// [`crate::repair`].
    pub fn repair(dir: impl AsRef<Path>, options: Options) -> Result<crate::repair::RepairReport> {
        crate::repair::repair(dir.as_ref(), options)
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
    /// `tierkv.design`, `tierkv.regions` (one line per region: its tables
    /// per level); `None` for unknown names. Level counts and sizes are
    /// totals over the regions.
    pub fn property(&self, name: &str) -> Option<String> {
        let vs = self.inner.versions.current_all();
        let several = vs.len() > 1;
        let level_count = self.inner.opts.level_count;
        let level_tables = |l: usize| vs.iter().map(|v| v.levels[l].len()).sum::<usize>();
        match name {
            "tierkv.stats" => Some(self.stats().to_table()),
            "tierkv.levels" => Some(
                (0..level_count)
                    .map(|i| {
                        let bytes: u64 = vs.iter().map(|v| v.level_bytes(i)).sum();
                        format!("L{i}: {} tables, {bytes} bytes\n", level_tables(i))
                    })
                    .collect(),
            ),
            "tierkv.tables" => Some(
                vs.iter()
                    .enumerate()
                    .flat_map(|(r, v)| {
                        v.levels
                            .iter()
                            .enumerate()
                            .flat_map(move |(i, l)| l.iter().map(move |t| (r, i, t)))
                    })
                    .map(|(r, i, t)| {
                        format!(
                            "{}L{i} #{} {} {} {:?} {:?}\n",
                            if several {
                                format!("R{r} ")
                            } else {
                                String::new()
                            },
                            t.meta.id,
                            t.meta.tier.name(),
                            t.meta.size_bytes,
                            String::from_utf8_lossy(t.smallest_user_key()),
                            String::from_utf8_lossy(t.largest_user_key())
                        )
                    })
                    .collect(),
            ),
            "tierkv.regions" => Some(
                vs.iter()
                    .enumerate()
                    .map(|(r, v)| {
                        let shape: Vec<String> =
                            v.levels.iter().map(|l| l.len().to_string()).collect();
                        format!("R{r}: {}\n", shape.join(" "))
                    })
                    .collect(),
            ),
            "tierkv.last-sequence" => Some(self.last_sequence().to_string()),
            "tierkv.design" => Some(self.inner.opts.design.name().to_string()),
            _ => {
                let n = name.strip_prefix("tierkv.num-files-at-level")?;
                let level: usize = n.parse().ok()?;
                (level < level_count).then(|| level_tables(level).to_string())
            }
        }
    }

    /// Stops background work (finishing running jobs), makes every
    /// acknowledged write durable and releases the database.
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&self) -> Result<()> {
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
        // Wait for queued writers to drain, then make the WAL durable.
        let _w = self.inner.writers.lock();
        let r = self.inner.sync_closed_logs().and_then(|()| {
            let mut log = self.inner.log.lock();
            log.sync()?;
            log.seal()
        });
        self.inner.release_obsolete();
        // Seal the manifest and the WALs only if everything got out whole.
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
        let _ = self.shutdown();
    }
}

/// The tier a flush wrote to: that of its first new table (a PM design may
/// send a memtable straight to SSD), else `default`.
fn flush_tier_of(edit: &VersionEdit, default: Tier) -> Tier {
    edit.new_tables.first().map_or(default, |(_, m)| m.tier)
}

/// Refuses a directory that has files but no CURRENT.
fn check_not_foreign(fs: &dyn FileSystem, dir: &Path) -> Result<()> {
    let names = fs.list(dir)?;
    let foreign: Vec<&String> = names.iter().filter(|n| n.as_str() != "LOCK").collect();
    if let Some(first) = foreign.first() {
        return Err(Error::NotADatabase(format!(
            "{} is not empty (e.g. `{first}`) and has no CURRENT file: not a tierkv database",
            dir.display()
        )));
    }
    Ok(())
}

/// Creates WAL `n` on the configured tier; for PM, also the manifest entry.
fn new_log(
    opts: &Options,
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    pm: Option<&PmTier>,
    n: u64,
) -> Result<(LogWriter, Option<crate::version::edit::PmWal>)> {
    match (opts.wal_placement(), pm) {
        (WalPlacement::Pm, Some(pm)) => {
            let (w, first_extent) = pm.create_log(n)?;
            Ok((
                LogWriter::Pm(w),
                Some(crate::version::edit::PmWal {
                    log_number: n,
                    first_extent,
                }),
            ))
        }
        _ => {
            let hint = WriteHint {
                bytes_per_sync: opts.wal_bytes_per_sync,
                ..WriteHint::default()
            };
            let file = fs.create(&dir.join(wal_name(n)), hint)?;
            // The name must survive a crash for synced records to.
            fs.sync_dir(dir)?;
            Ok((LogWriter::File(wal::Writer::new(FileSink(file), n)), None))
        }
    }
}

/// Result of WAL replay at open.
struct Replay {
    /// One edit per region (region order) adding the replayed tables.
    edits: Vec<VersionEdit>,
    last_seq: SeqNo,
    /// SSD WALs that ended damaged (a torn tail, or damage a point-in-time
    /// recovery stopped at): kept in `lost/` once obsolete.
    damaged_wals: Vec<u64>,
}

/// What the cleanup at the end of an open keeps in `lost/` instead of
/// deleting.
struct Salvage {
    /// The manifest ended in a torn record: unreferenced tables and the old
    /// manifest are kept.
    manifest_torn: bool,
    /// WAL files to keep.
    damaged_wals: Vec<u64>,
}

impl Replay {
    #[allow(clippy::too_many_arguments)]
    fn run(
        opts: &Options,
        fs: &Arc<dyn FileSystem>,
        dir: &Path,
        versions: &VersionSet,
        stats: &StatsRecorder,
        design: &Arc<dyn Design>,
        router: &Router,
        pm: Option<&PmTier>,
        rec: &Recovered,
    ) -> Result<Replay> {
        // Every WAL not yet covered by tables, in order: SSD files and PM
        // logs. (Files below the newest may be missing: the engine deletes
        // a WAL once no region has unflushed records in it.)
        let mut logs: Vec<(u64, Option<u64>)> = Vec::new();
        for name in fs.list(dir)? {
            if let Some(n) = name
                .strip_suffix(".log")
                .and_then(|n| n.parse::<u64>().ok())
            {
                if n >= rec.log_number {
                    logs.push((n, None));
                }
            }
        }
        for w in &rec.pm_wals {
            if w.log_number >= rec.log_number {
                logs.push((w.log_number, Some(w.first_extent)));
            }
        }
        logs.sort_unstable();
        // After a clean close every WAL it sealed must be there (checked
        // for its length and damage as it is replayed).
        for &(n, _) in rec.closed_wals.iter().flatten() {
            if !logs.iter().any(|&(l, pm)| l == n && pm.is_none()) {
                return Err(Error::corruption(
                    dir.join(wal_name(n)).display().to_string(),
                    0,
                    "missing, but the database was closed cleanly with it (CLOSED)",
                ));
            }
        }
        // A WAL created after the last manifest record has a number the
        // manifest's next file number does not cover yet: the new WAL and
        // the replay's tables must not take it (a new WAL of the same
        // number would truncate a log whose records are not in tables yet).
        for &(n, _) in &logs {
            versions.mark_file_number_used(n);
        }
        let regions = router.count();
        let mut last_seq = rec.last_seqno;
        let mut edits: Vec<VersionEdit> = (0..regions)
            .map(|r| VersionEdit {
                region: r as u32,
                ..Default::default()
            })
            .collect();
        let mut mems: Vec<Arc<MemTable>> =
            (0..regions).map(|_| Arc::new(MemTable::new(0))).collect();
        // Replayed memtables become tables that the caller's edits add in
        // one record together with the new log numbers, so a crash during
        // replay replays the same WALs again instead of duplicating them.
        let flush = |region: usize,
                     mem: &Arc<MemTable>,
                     edit: &mut VersionEdit,
                     last_seq: SeqNo|
         -> Result<()> {
            let env = JobEnv {
                opts,
                fs,
                dir,
                versions,
                stats,
                smallest_snapshot: last_seq,
                version: versions.current_in(region),
            };
            let start = Instant::now();
            let e = design.flush(&env, mem)?;
            let bytes = e.new_tables.iter().map(|(_, m)| m.size_bytes).sum();
            stats.record_flush(start, bytes, flush_tier_of(&e, Tier::Ssd));
            edit.new_tables.extend(e.new_tables);
            Ok(())
        };
        let count = logs.len();
        let mut damaged_wals = Vec::new();
        for (i, &(n, pm_first)) in logs.iter().enumerate() {
            let mut apply = |record: Vec<u8>, source: &str, offset: u64| -> Result<()> {
                let batch = WriteBatch::decode(record, source, offset)?;
                let end = batch.seqno() + u64::from(batch.count()).saturating_sub(1);
                if regions == 1 {
                    mems[0].apply(&batch)?;
                } else {
                    // A region skips its records below its log number: they
                    // are in its tables already.
                    for (seq, r) in (batch.seqno()..).zip(batch.iter()) {
                        let (kind, k, v) = r?;
                        let region = router.route(k);
                        if n >= rec.region_log_numbers.get(region).copied().unwrap_or(0) {
                            mems[region].add(seq, kind, k, v);
                        }
                    }
                }
                last_seq = last_seq.max(end);
                // The memtable budget as at run time: flush the largest
                // region when the total is full.
                let total: usize = mems.iter().map(|m| m.size_bytes()).sum();
                if total >= opts.memtable_size_bytes {
                    let (region, _) = mems
                        .iter()
                        .enumerate()
                        .max_by_key(|(i, m)| (m.size_bytes(), std::cmp::Reverse(*i)))
                        .unwrap_or((0, &mems[0]));
                    flush(region, &mems[region], &mut edits[region], last_seq)?;
                    mems[region] = Arc::new(MemTable::new(0));
                }
                Ok(())
            };
            let (torn, dropped) = match pm_first {
                Some(first) => {
                    let pm = pm.ok_or_else(|| {
                        Error::InvalidOptions(format!(
                            "the manifest has WAL {n} in the PM tier but no PM tier is configured (`pm_dir`)"
                        ))
                    })?;
                    replay_log(pm.open_log(first, n)?, &mut apply)?
                }
                None => {
                    let path = dir.join(wal_name(n));
                    let bytes = fs.read_all(&path)?;
                    let len = bytes.len() as u64;
                    let log = wal::FileLog::new(path.display().to_string(), bytes);
                    let point_in_time = opts.wal_recovery == WalRecovery::PointInTime;
                    let r = replay_log(
                        wal::Reader::new(log, n).point_in_time(point_in_time),
                        &mut apply,
                    )?;
                    if let Some(&(_, sealed)) =
                        rec.closed_wals.iter().flatten().find(|(w, _)| *w == n)
                    {
                        Closed::check_log(sealed, &path.display().to_string(), len, r.0)?;
                    }
                    r
                }
            };
            if let (Some(off), Some(_)) = (torn, pm_first) {
                // Every record of a PM WAL is persisted before the next is
                // written, and a newer log is written only after the last
                // one: only the newest PM WAL can have a record in flight.
                if let Some(later) = first_log_with_records(fs, dir, pm, &logs[i + 1..])? {
                    return Err(Error::corruption(
                        pm.map_or("PM region", |p| p.region().name()),
                        off,
                        format!("PM WAL {n} ends in a damaged record but WAL {later} holds later records (only the newest log can be torn by a crash)"),
                    ));
                }
            }
            if let (Some(_), None) = (torn, pm_first) {
                damaged_wals.push(n);
            }
            if let Some(off) = torn {
                if dropped {
                    log::warn!(
                        "WAL {n}: ends at damage at offset {off}; later records dropped (point-in-time recovery)"
                    );
                } else {
                    log::warn!("WAL {n}: torn tail at offset {off} dropped (never acknowledged)");
                }
                // A log that ended damaged was never synced past the damage,
                // so no later log holds a synced write (a sync write syncs
                // every earlier log first); replaying one would leave a hole
                // in the recovered writes.
                if i + 1 < count {
                    log::warn!(
                        "WAL {n} ended damaged: the {} later WAL(s) are not replayed",
                        count - i - 1
                    );
                    break;
                }
            }
        }
        for (region, mem) in mems.iter().enumerate() {
            if !mem.is_empty() {
                flush(region, mem, &mut edits[region], last_seq)?;
            }
        }
        Ok(Replay {
            edits,
            last_seq,
            damaged_wals,
        })
    }
}

/// The number of the first of `logs` (SSD files and PM WALs, as replay
/// lists them) that holds a record.
fn first_log_with_records(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    pm: Option<&PmTier>,
    logs: &[(u64, Option<u64>)],
) -> Result<Option<u64>> {
    for &(n, pm_first) in logs {
        let has = match (pm_first, pm) {
            (Some(first), Some(pm)) => pm.open_log(first, n)?.point_in_time(true).next_record()?,
            (Some(_), None) => None,
            (None, _) => {
                let path = dir.join(wal_name(n));
                let log = wal::FileLog::new(path.display().to_string(), fs.read_all(&path)?);
                wal::Reader::new(log, n).point_in_time(true).next_record()?
            }
        };
        if has.is_some() {
            return Ok(Some(n));
        }
    }
    Ok(None)
}

/// Receives each replayed WAL record with its source name and offset.
type RecordSink<'a> = dyn FnMut(Vec<u8>, &str, u64) -> Result<()> + 'a;

/// Feeds every record of a log to `apply`; returns the offset where a
/// damaged tail was dropped, and whether valid records followed it
/// (point-in-time mode only).
fn replay_log<S: wal::LogSource>(
    mut reader: wal::Reader<S>,
    apply: &mut RecordSink<'_>,
) -> Result<(Option<u64>, bool)> {
    let name = reader.source_name().to_string();
    while let Some(record) = reader.next_record()? {
        apply(record, &name, reader.last_record_offset())?;
    }
    Ok((reader.torn_tail(), reader.dropped_records()))
}

fn start_background(inner: &Arc<Inner>) -> Vec<JoinHandle<()>> {
    let n = inner.opts.background_threads;
    (0..n)
        .map(|i| {
            let role = if n == 1 {
                Role::Both
            } else if i == 0 {
                Role::Flush
            } else {
                Role::Compaction
            };
            let inner = Arc::clone(inner);
            std::thread::Builder::new()
                .name(format!("tierkv-bg-{i}"))
                .spawn(move || inner.background_loop(role))
                .map_err(|e| Error::io("spawn background thread", e))
        })
        .filter_map(|r| match r {
            Ok(h) => Some(h),
            Err(e) => {
                log::error!("{e}");
                None
            }
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Flush,
    Compaction,
    Both,
}

enum Work {
    /// Flush region `.0`'s oldest immutable memtable.
    Flush(usize, Arc<MemTable>),
    /// Run a task picked from region `.0`'s version.
    Compact(usize, Task),
}

/// A writer's stop: its waits for one cause, recorded as one stall interval
/// when the cause changes or the writer goes on (also on an error return),
/// however many condition-variable waits it took.
struct StopEpisode<'a> {
    stats: &'a StatsRecorder,
    current: Option<(Instant, StallCause)>,
}

impl StopEpisode<'_> {
    /// The writer is about to wait for `cause`.
    fn waiting(&mut self, cause: StallCause) {
        if self.current.is_some_and(|(_, c)| c == cause) {
            return;
        }
        self.end();
        self.current = Some((Instant::now(), cause));
    }

    fn end(&mut self) {
        if let Some((start, cause)) = self.current.take() {
            self.stats.record_stall(start, cause);
        }
    }
}

impl Drop for StopEpisode<'_> {
    fn drop(&mut self) {
        self.end();
    }
}

impl Inner {
    fn super_version(&self) -> Arc<SuperVersion> {
        Arc::clone(&self.super_version.read())
    }

    /// Rebuilds the super version from the state. REQUIRES: `state` locked.
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
        *self.super_version.write() = Arc::new(sv);
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
        }
    }

    // ---------------------------------------------------------------- writes

    /// Queues a write (or, with `force_switch` and no batch, a memtable
    /// switch) and runs it as leader or waits for a leader to.
    fn write(&self, batch: Option<WriteBatch>, sync: bool, force_switch: bool) -> Result<()> {
        let me = Arc::new(Writer {
            batch: Mutex::new(batch),
            sync,
            force_switch,
            done: AtomicBool::new(false),
            result: Mutex::new(None),
        });
        let mut q = self.writers.lock();
        q.push_back(Arc::clone(&me));
        while !me.done.load(Ordering::Acquire) && !q.front().is_some_and(|f| Arc::ptr_eq(f, &me)) {
            self.writers_cv.wait(&mut q);
        }
        if me.done.load(Ordering::Acquire) {
            return me.result.lock().take().unwrap_or(Ok(()));
        }
        // Leader. Make room without holding the queue lock.
        drop(q);
        let own_bytes = me.batch.lock().as_ref().map_or(0, |b| b.encoded().len());
        let room = self.make_room_for_write(own_bytes, force_switch);
        let mut q = self.writers.lock();
        let result = match room {
            Ok(()) if force_switch => {
                q.pop_front();
                Ok(())
            }
            Err(e) => {
                // Fail only the leader; followers retry as leaders.
                q.pop_front();
                self.writers_cv.notify_all();
                return Err(e);
            }
            Ok(()) => {
                // Take a group: the leader plus followers up to the size cap.
                let mut group: Vec<Arc<Writer>> = Vec::new();
                let mut bytes = 0usize;
                let mut any_sync = false;
                let cap = if own_bytes <= 128 << 10 {
                    own_bytes + (128 << 10)
                } else {
                    GROUP_MAX_BYTES
                };
                for w in q.iter() {
                    if w.force_switch {
                        break;
                    }
                    let n = w.batch.lock().as_ref().map_or(0, |b| b.encoded().len());
                    if !group.is_empty() && (bytes + n > cap || (w.sync && !me.sync)) {
                        break;
                    }
                    bytes += n;
                    any_sync |= w.sync;
                    group.push(Arc::clone(w));
                }
                drop(q);
                let r = self.commit_group(&group, any_sync);
                q = self.writers.lock();
                for w in &group[1..] {
                    *w.result.lock() = Some(r.clone());
                    w.done.store(true, Ordering::Release);
                }
                for _ in 0..group.len() {
                    q.pop_front();
                }
                r
            }
        };
        self.writers_cv.notify_all();
        drop(q);
        result
    }

    /// Writes a group to the WAL and the memtable and publishes it.
    fn commit_group(&self, group: &[Arc<Writer>], sync: bool) -> Result<()> {
        let first = self.last_seq.load(Ordering::Acquire) + 1;
        let mut batch = match group[0].batch.lock().take() {
            Some(b) => b,
            None => return Ok(()),
        };
        for w in &group[1..] {
            if let Some(b) = w.batch.lock().take() {
                batch.append(&b);
            }
        }
        let count = u64::from(batch.count());
        if first + count > MAX_SEQNO {
            return Err(Error::InvalidArgument("sequence numbers exhausted".into()));
        }
        batch.set_seqno(first);
        // Only the leader switches memtables, so the super version holds
        // the current ones.
        let sv = self.super_version();
        {
            let mut log = self.log.lock();
            let before = log.bytes_written();
            let r = log.add_record(batch.encoded()).and_then(|()| {
                if sync && !log.is_pm() {
                    // Closed WALs first, so a crash keeps a prefix of the writes.
                    self.sync_closed_logs()?;
                }
                if sync || log.is_pm() {
                    log.sync()
                } else {
                    // As RocksDB does unless `manual_wal_flush`: the record
                    // reaches the OS before the write is acknowledged, so it
                    // survives a crash of the process (a power loss needs
                    // `sync`).
                    log.flush()
                }
            });
            let written = log.bytes_written() - before;
            let pm = log.is_pm();
            drop(log);
            self.stats.add_written(|w| {
                if pm {
                    w.wal_pm += written
                } else {
                    w.wal_ssd += written
                }
            });
            if let Err(e) = r {
                // The WAL may now end in a partial record: stop writes.
                self.set_bg_error(&e);
                return Err(e);
            }
        }
        if let [one] = sv.regions.as_slice() {
            one.mem.apply(&batch)?;
        } else {
            for (seq, r) in (first..).zip(batch.iter()) {
                let (kind, k, v) = r?;
                sv.regions[self.router.route(k)].mem.add(seq, kind, k, v);
            }
        }
        self.stats.user_ops.fetch_add(count, Ordering::Relaxed);
        self.stats
            .user_bytes
            .fetch_add(batch.user_bytes(), Ordering::Relaxed);
        self.last_seq.store(first + count - 1, Ordering::Release);
        Ok(())
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

    /// The strictest region's verdict and the total debt. REQUIRES: `state`
    /// locked.
    fn write_control(&self, st: &State) -> (WriteControl, u64) {
        let rank = |c: &WriteControl| match c {
            WriteControl::Proceed => 0,
            WriteControl::Delay(_) => 1,
            WriteControl::Stop(_) => 2,
        };
        let mut verdict = WriteControl::Proceed;
        let mut debt = 0u64;
        for (v, r) in self.versions.current_all().iter().zip(&st.mem.regions) {
            let c = self.design.write_control(v, r.imms.len());
            if rank(&c) > rank(&verdict) {
                verdict = c;
            }
            debt = debt.saturating_add(self.design.debt(v));
        }
        (verdict, debt)
    }

    /// RocksDB's `RecalculateWriteStallConditions` / `SetupDelay`, run once
    /// per change of the verdict's inputs: while writes stay delayed, the
    /// rate falls ×0.6 near a stop, ×0.8 while the debt does not shrink, and
    /// rises ×1.25 (up to the configured rate) as it is paid; leaving the
    /// delay condition rewards ×1.4. The rate is kept between episodes and
    /// never drops below 16 KiB/s. REQUIRES: `state` locked.
    fn recalculate_delay(&self, st: &mut State, control: WriteControl, debt: u64) {
        const MIN_RATE_BYTES_PER_SEC: f64 = 16384.0;
        let max = self.opts.delayed_write_rate_bytes_per_sec as f64;
        let rate = st.delay_rate_bytes_per_sec;
        match control {
            WriteControl::Delay(_) => {
                if st.delaying && max > MIN_RATE_BYTES_PER_SEC {
                    let near_stop = self
                        .versions
                        .current_all()
                        .iter()
                        .any(|v| self.design.near_stop(v));
                    st.delay_rate_bytes_per_sec = if near_stop {
                        (rate * 0.6).max(MIN_RATE_BYTES_PER_SEC)
                    } else if st.last_debt > 0 && st.last_debt <= debt {
                        (rate * 0.8).max(MIN_RATE_BYTES_PER_SEC)
                    } else if st.last_debt > debt {
                        (rate * 1.25).min(max)
                    } else {
                        rate
                    };
                }
                st.delaying = true;
            }
            WriteControl::Stop(_) => {
                st.delaying = false;
                st.delay_next = None;
            }
            WriteControl::Proceed => {
                if st.delaying {
                    st.delay_rate_bytes_per_sec = (rate * 1.4).min(max);
                }
                st.delaying = false;
                st.delay_next = None;
            }
        }
        st.last_debt = debt;
    }

    /// Leader only: waits out stalls and switches to a new memtable when the
    /// current one is full (or `force` and non-empty).
    fn make_room_for_write(&self, bytes: usize, force: bool) -> Result<()> {
        let mut delayed = false;
        let mut stopped = StopEpisode {
            stats: &self.stats,
            current: None,
        };
        let mut st = self.state.lock();
        loop {
            if let Some(e) = &st.bg_error {
                return Err(Error::Background(e.to_string()));
            }
            if st.shutting_down {
                return Err(Error::Closed);
            }
            // The verdict depends only on the versions and the memtable
            // backlog: compute it once per change, not once per write.
            let key = (
                self.versions.generation(),
                st.mem.imm_count(),
                self.design.write_control_epoch(),
            );
            let control = match st.control_cache {
                Some((k, c)) if k == key => c,
                _ => {
                    let (c, debt) = self.write_control(&st);
                    self.recalculate_delay(&mut st, c, debt);
                    st.control_cache = Some((key, c));
                    c
                }
            };
            let mem_full = st.mem.mutable_full(&self.opts) || (force && st.mem.any_mutable_data());
            match control {
                WriteControl::Delay(cause) if !delayed && !force => {
                    stopped.end();
                    delayed = true;
                    let now = Instant::now();
                    let next = st.delay_next.unwrap_or(now).max(now);
                    let wait = Duration::from_secs_f64(bytes as f64 / st.delay_rate_bytes_per_sec);
                    st.delay_next = Some(next + wait);
                    if next > now {
                        drop(st);
                        std::thread::sleep(next - now);
                        self.stats.record_stall(now, cause);
                        st = self.state.lock();
                    }
                    continue;
                }
                WriteControl::Stop(cause) if !force || mem_full => {
                    stopped.waiting(cause);
                    self.bg_cv.notify_all();
                    self.done_cv.wait_for(&mut st, Duration::from_millis(100));
                    continue;
                }
                _ => {}
            }
            if !mem_full {
                return Ok(());
            }
            if st.mem.imms_full(&self.opts) {
                let cause = self
                    .versions
                    .current_all()
                    .iter()
                    .find_map(|v| self.design.flush_blocked(v))
                    .unwrap_or(StallCause::MemtableFull);
                stopped.waiting(cause);
                self.bg_cv.notify_all();
                self.done_cv.wait_for(&mut st, Duration::from_millis(100));
                continue;
            }
            // Switch to a new WAL and memtable.
            let n = self.versions.new_file_number();
            let (log, pm_wal) = new_log(&self.opts, &self.fs, &self.dir, self.pm.as_deref(), n)?;
            if let Some(w) = pm_wal {
                let edit = VersionEdit {
                    new_pm_wals: vec![w],
                    ..Default::default()
                };
                self.versions
                    .log_and_apply(edit, self.last_seq.load(Ordering::Acquire))?;
            }
            // The old WAL is synced in the background (by the next flush
            // when regions share it, or first thing by a later sync write),
            // never here in the write path: an fsync of a whole memtable's
            // log would stall writers.
            let old = std::mem::replace(&mut *self.log.lock(), log);
            if !old.is_pm() {
                let number = st.mem.ssd_wals.back().copied().unwrap_or(0);
                self.closed_logs.lock().push((number, old));
            }
            if pm_wal.is_none() {
                st.mem.ssd_wals.push_back(n);
            }
            st.mem.switch(n, force);
            self.install_super_version(&st);
            self.bg_cv.notify_all();
            return Ok(());
        }
    }

    /// Switches the memtable (if non-empty) and waits until every immutable
    /// memtable is flushed.
    fn flush_all(&self) -> Result<()> {
        self.write(None, false, true)?;
        let mut st = self.state.lock();
        while !st.mem.no_imms() {
            if let Some(e) = &st.bg_error {
                return Err(Error::Background(e.to_string()));
            }
            if st.shutting_down {
                return Err(Error::Closed);
            }
            self.bg_cv.notify_all();
            self.done_cv.wait_for(&mut st, Duration::from_millis(100));
        }
        Ok(())
    }

    fn compact_range(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Result<()> {
        for region in 0..self.router.count() {
            self.compact_range_in(region, lo, hi)?;
        }
        Ok(())
    }

    fn compact_range_in(&self, region: usize, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Result<()> {
        let levels = self.opts.level_count;
        for level in 0..levels - 1 {
            loop {
                let mut st = self.state.lock();
                if let Some(e) = &st.bg_error {
                    return Err(Error::Background(e.to_string()));
                }
                if st.shutting_down {
                    return Err(Error::Closed);
                }
                let v = self.versions.current_in(region);
                if v.overlapping(level, lo, hi).is_empty() {
                    break;
                }
                let Some(task) = self.design.pick_manual(&v, &st.busy, level, lo, hi) else {
                    // Inputs busy: wait for the running job.
                    self.done_cv.wait_for(&mut st, Duration::from_millis(50));
                    continue;
                };
                st.busy.extend(task.input_ids());
                st.manual_running = true;
                drop(st);
                let r = self.run_compaction(region, &task, v);
                let mut st = self.state.lock();
                for id in task.input_ids() {
                    st.busy.remove(&id);
                }
                st.manual_running = false;
                drop(st);
                self.done_cv.notify_all();
                self.bg_cv.notify_all();
                r?;
                break;
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------ background

    fn background_loop(self: Arc<Self>, role: Role) {
        let mut st = self.state.lock();
        loop {
            if st.shutting_down {
                return;
            }
            let work = if st.bg_error.is_some() {
                None
            } else {
                self.next_work(&mut st, role)
            };
            let Some(work) = work else {
                // Storage released by readers dropping old versions goes
                // back while idle too (a flush may be waiting for PM pages).
                if !self.versions.ctx().obsolete.lock().is_empty() {
                    drop(st);
                    self.release_obsolete();
                    st = self.state.lock();
                    continue;
                }
                self.bg_cv.wait_for(&mut st, Duration::from_millis(200));
                continue;
            };
            drop(st);
            let mut dead_wals = Vec::new();
            match work {
                Work::Flush(region, mem) => {
                    let r = self.run_flush(region, &mem);
                    st = self.state.lock();
                    st.flushing = false;
                    match r {
                        Ok(wals) => {
                            dead_wals = wals;
                            let imms = &mut st.mem.regions[region].imms;
                            if imms.front().is_some_and(|m| Arc::ptr_eq(m, &mem)) {
                                imms.pop_front();
                            }
                            self.install_super_version(&st);
                        }
                        Err(e) => {
                            drop(st);
                            self.set_bg_error(&e);
                            st = self.state.lock();
                        }
                    }
                }
                Work::Compact(region, task) => {
                    let v = self.versions.current_in(region);
                    let r = self.run_compaction(region, &task, v);
                    st = self.state.lock();
                    for id in task.input_ids() {
                        st.busy.remove(&id);
                    }
                    st.compactions_running -= 1;
                    match r {
                        Ok(()) => self.install_super_version(&st),
                        Err(e) => {
                            drop(st);
                            self.set_bg_error(&e);
                            st = self.state.lock();
                        }
                    }
                }
            }
            drop(st);
            // Writers waiting on this job go first; then the unlinks, which
            // take milliseconds per file. A flush thread leaves the tables
            // compactions made obsolete to the compaction threads, so that
            // deleting them never holds up the next flush.
            self.done_cv.notify_all();
            self.bg_cv.notify_all();
            for n in dead_wals {
                let _ = self.fs.remove(&self.dir.join(wal_name(n)));
            }
            if role != Role::Flush {
                self.release_obsolete();
            }
            st = self.state.lock();
        }
    }

    /// Picks the next job for a thread of `role`. REQUIRES: `state` locked.
    fn next_work(&self, st: &mut State, role: Role) -> Option<Work> {
        if role != Role::Compaction && !st.flushing {
            // The design may hold flushes back while its flush target is
            // full (vLSM's L0 queue); compactions below make room.
            let region = st.mem.flush_candidate(|r| {
                self.design
                    .flush_blocked(&self.versions.current_in(r))
                    .is_none()
            });
            if let Some(r) = region {
                if let Some(m) = st.mem.regions[r].imms.front() {
                    let m = Arc::clone(m);
                    st.flushing = true;
                    return Some(Work::Flush(r, m));
                }
            }
        }
        if role != Role::Flush && !st.manual_running {
            // Round robin: every region's picker gets its turn.
            let n = self.router.count();
            let start = st.mem.next_pick;
            for i in 0..n {
                let region = (start + i) % n;
                let v = self.versions.current_in(region);
                if let Some(task) = self.design.pick(&v, &st.busy) {
                    st.busy.extend(task.input_ids());
                    st.compactions_running += 1;
                    st.mem.next_pick = (region + 1) % n;
                    return Some(Work::Compact(region, task));
                }
            }
        }
        None
    }

    /// Flushes `mem`, the oldest immutable memtable of `region`.
    /// Syncs (and closes) the WALs retired since the last call, oldest
    /// first. A log whose sync fails stays, with every later one, so the
    /// next sync write tries again instead of skipping it.
    fn sync_closed_logs(&self) -> Result<()> {
        let mut closed = self.closed_logs.lock();
        let mut synced = 0;
        let r = closed.iter_mut().try_for_each(|(_, log)| {
            log.sync()?;
            synced += 1;
            Ok(())
        });
        closed.drain(..synced);
        r
    }

    /// Flushes `mem`; returns the SSD WALs it made obsolete, for the caller
    /// to delete once the writers waiting on the flush are released
    /// (unlinking a memtable-sized log takes milliseconds).
    fn run_flush(&self, region: usize, mem: &Arc<MemTable>) -> Result<Vec<u64>> {
        // With regions sharing the WAL, this flush makes one region's records
        // durable ahead of the others' in the same logs: make the retired
        // WALs durable first, as RocksDB's flush job does with more than one
        // column family. With one region every record of the retired logs
        // this flush covers is in its table once the edit is durable, and
        // the later ones are newer than all of them, so what survives a
        // crash is still a prefix of the writes (a sync write syncs the
        // retired logs first, `write`).
        if self.router.count() > 1 {
            self.sync_closed_logs()?;
        }
        let start = Instant::now();
        self.design.prepare_flush(mem)?;
        let env = self.job_env(self.versions.current_in(region));
        let mut edit = self.design.flush(&env, mem)?;
        let out: u64 = edit.new_tables.iter().map(|(_, m)| m.size_bytes).sum();
        // The region's records below its next memtable's WAL are now in
        // tables; WALs below the bound hold no unflushed record of any
        // region. (Flushes run one at a time, and memtables created later
        // only raise the bound.)
        let (next_log, bound) = {
            let st = self.state.lock();
            (st.mem.next_log_number(region), st.mem.wal_bound(region))
        };
        edit.region = region as u32;
        edit.log_number = Some(next_log);
        let pm_logs: Vec<_> = self
            .versions
            .pm_wals()
            .into_iter()
            .filter(|w| w.log_number < bound)
            .collect();
        edit.deleted_pm_wals
            .extend(pm_logs.iter().map(|w| w.log_number));
        let tier = flush_tier_of(&edit, self.flush_tier());
        self.versions
            .log_and_apply(edit, self.last_seq.load(Ordering::Acquire))?;
        self.stats.record_flush(start, out, tier);
        // The WALs are obsolete only now that the edit is durable.
        if let Some(pm) = &self.pm {
            for w in &pm_logs {
                pm.free_log(w.first_extent)?;
            }
        }
        let ssd_logs: Vec<u64> = {
            let mut st = self.state.lock();
            let wals = &mut st.mem.ssd_wals;
            let keep = wals.iter().position(|&n| n >= bound).unwrap_or(wals.len());
            wals.drain(..keep).collect()
        };
        // Their writers are no longer needed (nor is syncing them).
        self.closed_logs.lock().retain(|(n, _)| *n >= bound);
        Ok(ssd_logs)
    }

    fn flush_tier(&self) -> Tier {
        if self.opts.design.needs_pm() {
            Tier::Pm
        } else {
            Tier::Ssd
        }
    }

    fn run_compaction(&self, region: usize, task: &Task, v: Arc<Version>) -> Result<()> {
        let start = Instant::now();
        let env = self.job_env(v);
        let mut edit = self.design.run(&env, task)?;
        edit.region = region as u32;
        // What the job wrote: its new tables at the output level (a PM
        // design's edit may also re-list a table it gave pages back from).
        let output_bytes: u64 = if task.kind == design::TaskKind::TrivialMove {
            0
        } else {
            edit.new_tables
                .iter()
                .filter(|(l, _)| *l as usize == task.output_level)
                .map(|(_, m)| m.size_bytes)
                .sum()
        };
        self.versions
            .log_and_apply(edit, self.last_seq.load(Ordering::Acquire))?;
        self.stats.record_compaction(
            CompactionRecord {
                start: self.stats.since_open(start),
                duration: start.elapsed(),
                kind: task.kind.name().to_string(),
                input_bytes: self.design.task_input_bytes(task),
                output_level: task.output_level,
                output_bytes,
            },
            Tier::Ssd,
        );
        Ok(())
    }

    /// Releases the storage of tables no version references any more: PM
    /// pages first, waking the writers stopped on full PM as soon as they
    /// are back (they were woken when the job ended, before this, and would
    /// otherwise sleep out their wait), then the SST files, whose unlinks
    /// take milliseconds each. REQUIRES: `state` not locked.
    fn release_obsolete(&self) {
        let metas: Vec<_> = std::mem::take(&mut *self.versions.ctx().obsolete.lock());
        let (pm_tables, ssd_tables): (Vec<_>, Vec<_>) =
            metas.into_iter().partition(|m| m.tier == Tier::Pm);
        if let (Some(pm), false) = (&self.pm, pm_tables.is_empty()) {
            for m in &pm_tables {
                for run in &m.pm_pages {
                    if let Err(e) = pm.free_pages(*run) {
                        log::warn!("could not free PM pages of table {}: {e}", m.id);
                    }
                }
            }
            // A writer that saw PM full before the pages came back holds
            // `state` until it waits: taking it here orders the wake-up
            // after that wait, so none is lost.
            drop(self.state.lock());
            self.done_cv.notify_all();
        }
        for m in ssd_tables {
            let path = self.versions.ctx().sst_path(m.id);
            if let Err(e) = self.fs.remove(&path) {
                log::warn!("could not remove obsolete {}: {e}", path.display());
            }
        }
    }

    /// At open: removes SSTs no version references, WALs below the log
    /// number, manifests CURRENT does not name, and leftover temporary
    /// files — or moves them to `lost/` (`crate::lost`) when `salvage` says
    /// they may hold what a person wants: every unreferenced table and the
    /// old manifest after a torn manifest, damaged WALs.
    fn remove_obsolete_files(&self, salvage: &Salvage) -> Result<()> {
        self.release_obsolete();
        let live: HashSet<u64> = self
            .versions
            .current_all()
            .iter()
            .flat_map(|v| v.table_ids().collect::<Vec<_>>())
            .collect();
        let log_number = self.versions.log_number();
        let manifest = self.versions.manifest_number();
        for name in self.fs.list(&self.dir)? {
            let number = |suffix: &str| {
                name.strip_suffix(suffix)
                    .and_then(|n| n.parse::<u64>().ok())
            };
            let (remove, keep) = if let Some(n) = number(".sst") {
                let dead = !live.contains(&n);
                (dead, dead && salvage.manifest_torn)
            } else if let Some(n) = number(".log") {
                let dead = n < log_number;
                (dead, dead && salvage.damaged_wals.contains(&n))
            } else if let Some(n) = name
                .strip_prefix("MANIFEST-")
                .and_then(|n| n.parse::<u64>().ok())
            {
                let dead = manifest.is_some_and(|m| m != n);
                (dead, dead && salvage.manifest_torn)
            } else {
                // A CLOSED names the manifest the open replaced.
                let leftover = ["CURRENT.tmp", "CLOSED.tmp", CLOSED_FILE_NAME];
                (leftover.contains(&name.as_str()), false)
            };
            if keep {
                crate::lost::keep(
                    self.fs.as_ref(),
                    &self.dir,
                    &name,
                    "it may hold data a damaged log or manifest no longer references",
                )?;
            } else if remove {
                let _ = self.fs.remove(&self.dir.join(&name));
            }
        }
        Ok(())
    }

    fn stats_snapshot(&self) -> Stats {
        let shapes: Vec<Vec<crate::stats::LevelShape>> = self
            .versions
            .current_all()
            .iter()
            .map(|v| v.shape())
            .collect();
        self.stats.snapshot_regions(shapes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_is_one_interval_however_many_waits_it_takes() {
        let stats = StatsRecorder::new();
        {
            let mut stop = StopEpisode {
                stats: &stats,
                current: None,
            };
            stop.end(); // nothing to record yet
            for _ in 0..3 {
                stop.waiting(StallCause::PmFull);
                std::thread::sleep(Duration::from_millis(2));
            }
            stop.waiting(StallCause::MemtableFull);
            stop.waiting(StallCause::MemtableFull);
        } // the writer goes on
        let stalls = stats.snapshot(Vec::new()).stalls;
        let causes: Vec<StallCause> = stalls.iter().map(|s| s.cause).collect();
        assert_eq!(causes, [StallCause::PmFull, StallCause::MemtableFull]);
        assert!(stalls[0].duration >= Duration::from_millis(6));
    }

    #[test]
    fn wal_and_table_files_get_their_own_write_back_hints() {
        let fs = crate::storage::mem::MemFs::new();
        let opts = Options {
            fs: Arc::new(fs.clone()),
            memtable_size_bytes: 64 << 10,
            sst_size_bytes: 64 << 10,
            bytes_per_sync: 8 << 10,
            wal_bytes_per_sync: 32 << 10,
            ..Options::default()
        };
        let db = Db::open("/db", opts).unwrap();
        for i in 0..100u32 {
            db.put(format!("k{i:04}").as_bytes(), &[7u8; 100]).unwrap();
        }
        db.flush().unwrap();
        let hints = fs.write_hints();
        let with_ext = |ext: &str| -> Vec<WriteHint> {
            hints
                .iter()
                .filter(|(p, _)| p.extension().is_some_and(|e| e == ext))
                .map(|(_, h)| *h)
                .collect()
        };
        let (logs, tables) = (with_ext("log"), with_ext("sst"));
        assert!(!logs.is_empty() && !tables.is_empty(), "{hints:?}");
        assert!(logs
            .iter()
            .all(|h| h.bytes_per_sync == 32 << 10 && !h.direct));
        assert!(tables.iter().all(|h| h.bytes_per_sync == 8 << 10));
        db.close().unwrap();
    }
}
