//! Open: everything between `Db::open` and the first write.
//!
//! 1. Lock the directory; refuse a foreign directory or a missing database
//!    (`create_if_missing`), or an existing one (`error_if_exists`); lock
//!    the PM directory and check who the database is against the options
//!    (`identity.rs`: its design, its PM region and the region's owner),
//!    all before anything is written.
//! 2. Map the PM tier (if any) and build the design, which registers how
//!    its PM tables are read (`Design::install`).
//! 3. Read the MANIFEST (`VersionSet::recover`), or create one.
//! 4. Reconcile the PM allocator with what the database references: every
//!    table's runs (a run several tables list counted once), every live PM
//!    WAL's extents, and the runs the design declares
//!    (`Design::live_pm_runs`, which covers what step 5 will resume);
//!    every other page goes back before anything allocates.
//! 5. The design's recovery hook (`Design::recover`), on that clean
//!    allocator: its edits are applied before anything else changes, the
//!    allocator is reconciled again (what the hook's edits retired goes
//!    back), and the engine's last seqno covers every table they added.
//! 6. Replay the engine's WALs the MANIFEST does not cover into tables
//!    (a design-owned log is the design's to adopt in step 5).
//! 7. Start a new log; one MANIFEST record adds the replayed tables,
//!    retires the replayed logs (so a crash during replay replays the same
//!    logs again instead of duplicating them) and records the identity the
//!    database opened with; then the PM region names the database as its
//!    owner.
//! 8. Release the tables durable edits removed; reconcile again (step 7
//!    freed PM WALs).
//! 9. Last, so that an open that fails deletes nothing: remove the files
//!    the database no longer needs (`obsolete.rs`), or keep them in `lost/`
//!    when the manifest or a WAL was damaged ([`Salvage`]). A *create*
//!    that fails at any step removes the files it wrote (the directory
//!    held nothing but LOCK), so the next open starts from nothing.
//!
//! Damage: a MANIFEST or WAL record that is complete but fails its
//! checksum is `Error::Corruption` naming the file and offset (only an
//! incomplete final record is a torn tail, `wal::reader`); after a clean
//! close (CLOSED, `version::closed`) every log must also have exactly the
//! length recorded then, and the PM WAL's seal turns any damage before it
//! into corruption.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex, RwLock};

use crate::batch::WriteBatch;
use crate::design::{self, Design, DesignFactory, JobEnv};
use crate::error::{Error, Result};
use crate::key::SeqNo;
use crate::memtable::MemTable;
use crate::options::{Options, WalPlacement, WalRecovery};
use crate::sst::{BlockCache, TableCounters};
use crate::stats::StatsRecorder;
use crate::storage::alloc::PageRun;
use crate::storage::limiter::{BackgroundLimiter, GovernedFs};
use crate::storage::pm::PmTier;
use crate::storage::{FileLock, FileSystem};
use crate::version::closed::Closed;
use crate::version::edit::VersionEdit;
use crate::version::set::{wal_name, Recovered, VersionSet};
use crate::version::TableContext;
use crate::wal::{self, PmWals};

use super::control::{Pacer, RateMeter, WriteController};
use super::identity;
use super::obsolete::Salvage;
use super::region::{Regions, Router};
use super::write::new_log;
use super::{Inner, RegionView, State, SuperVersion};

/// Opens (or creates) the database in `dir`: steps 1–9 of the module doc.
pub(super) fn open(
    dir: &Path,
    options: Options,
    factory: Option<&DesignFactory>,
) -> Result<Arc<Inner>> {
    options.validate()?;
    let dir = dir.to_path_buf();
    // With the limiter, the engine reads through a wrapper that times
    // foreground reads for it.
    let limiter = options
        .background_io_autotune
        .then(|| Arc::new(BackgroundLimiter::new()));
    let fs: Arc<dyn FileSystem> = match &limiter {
        Some(l) => Arc::new(GovernedFs::new(Arc::clone(&options.fs), Arc::clone(l))),
        None => Arc::clone(&options.fs),
    };
    fs.create_dir_all(&dir)?;
    let lock: Arc<dyn FileLock> = Arc::from(fs.lock(&dir.join("LOCK"))?);
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

    let opened = open_locked(
        &dir,
        &fs,
        options,
        factory,
        limiter,
        Arc::clone(&lock),
        exists,
    );
    if opened.is_err() && !exists {
        // A create that fails (e.g. a design refusing its PM geometry once
        // the region is mapped) leaves no half-made database behind: the
        // directory held nothing but LOCK, so every file in it now is one
        // this open wrote. Still under the lock. Best effort: the error
        // that stopped the open is the one to report.
        if let Ok(names) = fs.list(&dir) {
            for name in names.iter().filter(|n| n.as_str() != "LOCK") {
                let _ = fs.remove(&dir.join(name));
            }
        }
    }
    opened
}

/// Steps 2–9 of the module doc, under the directory's lock.
fn open_locked(
    dir: &Path,
    fs: &Arc<dyn FileSystem>,
    options: Options,
    factory: Option<&DesignFactory>,
    limiter: Option<Arc<BackgroundLimiter>>,
    lock: Arc<dyn FileLock>,
    exists: bool,
) -> Result<Arc<Inner>> {
    let (dir, fs) = (dir.to_path_buf(), Arc::clone(fs));
    // Who the database is, against the options: refused here, before
    // anything is written (`identity.rs`).
    let admitted = identity::admit(fs.as_ref(), &dir, exists, &options)?;
    let mut db_identity = admitted.identity.clone();

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
    ctx.recycler.set_capacity(options.recycle_table_files);
    let pm = if options.has_pm() {
        // A region the MANIFEST references nothing in (a new database, an
        // upgrade, a migration's target) may be formatted even if a crash
        // left it half-formatted; one it references never is.
        Some(Arc::new(open_pm_tier(&options, admitted.pm_referenced)?))
    } else {
        None
    };
    if let Some(pm) = &pm {
        let _ = stats
            .pm_persistence
            .set(pm.region().persistence().describe());
        identity::bind_ref(pm, &mut db_identity)?;
    }
    let design = match factory {
        Some(f) => f(&options, pm.clone())?,
        None => design::build(&options, pm.clone())?,
    };
    let pm_wals = match (&pm, options.wal_placement(), design.log()) {
        (Some(pm), WalPlacement::Pm, None) => Some(PmWals::new(Arc::clone(pm))),
        _ => None,
    };
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
        let vs = VersionSet::create_with_identity(
            Arc::clone(&fs),
            &dir,
            Arc::clone(&ctx),
            Arc::clone(&stats),
            options.level_count,
            router.layout(),
            db_identity.clone(),
        )?;
        (vs, Recovered::default())
    };
    // Manifest replay marks nothing obsolete: PM runs it saw released were
    // freed before the crash (or leaked, and `reconcile` below reclaims
    // them), and freeing them again could free pages a later table reuses.
    debug_assert!(versions.ctx().obsolete.lock().is_empty());

    // Pages a crash left allocated but unrecorded go back before anything
    // allocates (the PM tier may be nearly full), the recovery hook
    // included.
    if let Some(pm) = &pm {
        reconcile(pm, &versions, pm_wals.as_ref(), design.as_ref())?;
    }
    // The design's recovery step, before anything else changes.
    let edits = {
        let env = JobEnv {
            opts: &options,
            fs: &fs,
            dir: &dir,
            versions: &versions,
            stats: &stats,
            smallest_snapshot: recovered.last_seqno,
            version: versions.current(),
            limiter: None,
        };
        design.recover(&env)?
    };
    let hook_edits = !edits.is_empty();
    for e in edits {
        versions.log_and_apply(e, recovered.last_seqno)?;
    }
    // Tables the hook adopted (an adopted log) may hold seqnos the
    // MANIFEST never recorded: new writes must not reuse them.
    let in_tables = versions
        .current_all()
        .iter()
        .flat_map(|v| v.levels.iter().flatten())
        .map(|t| t.meta.seq_max)
        .max()
        .unwrap_or(0);
    let mut recovered = recovered;
    recovered.last_seqno = recovered.last_seqno.max(in_tables);
    // What the hook's edits retired goes back before replay allocates.
    if hook_edits {
        if let Some(pm) = &pm {
            reconcile(pm, &versions, pm_wals.as_ref(), design.as_ref())?;
        }
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
        pm_wals.as_ref(),
        &recovered,
    )?;

    // A fresh log for new writes; the edits (one per region, one
    // manifest record) make the replayed ones obsolete.
    let log_number = versions.new_file_number();
    let log = new_log(
        &options,
        &fs,
        &dir,
        design.as_ref(),
        pm_wals.as_ref(),
        &stats,
        log_number,
        true,
    )?;
    let mut edits = replay.edits;
    edits[0].new_pm_wals.extend(log.pm_wal);
    for e in &mut edits {
        e.log_number = Some(log_number);
    }
    edits[0].deleted_pm_wals = versions
        .pm_wals()
        .iter()
        .map(|w| w.log_number)
        .filter(|&n| n < log_number)
        .collect();
    if versions.identity() != db_identity {
        edits[0].identity = Some(db_identity.clone());
    }
    versions.log_and_apply_group(edits, replay.last_seq)?;
    // The MANIFEST names the region and the database now; the region's
    // owner word follows (`identity.rs`: never an owner the MANIFEST does
    // not know).
    if let (Some(pm), Some(db_id)) = (&pm, db_identity.db_id) {
        identity::bind(pm, db_id)?;
    }

    let mut mem = Regions::new(router.count(), log_number, options.memtable_filter_bytes());
    if log.ssd_file {
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
    let deleter = super::obsolete::Deleter::new(Arc::clone(&fs));
    let inner = Arc::new(Inner {
        dir,
        fs,
        design,
        stats,
        pm,
        pm_wals,
        state: Mutex::new(State {
            mem,
            busy: HashSet::new(),
            flushing: false,
            flush_built: None,
            compactions_running: 0,
            manual_running: false,
            bg_error: None,
            shutting_down: false,
            control: WriteController::new(options.delayed_write_rate_bytes_per_sec),
            pacer: Pacer::new(),
        }),
        bg_cv: Condvar::new(),
        done_cv: Condvar::new(),
        writers: Mutex::new(VecDeque::new()),
        writers_cv: Condvar::new(),
        log: Mutex::new(log.writer),
        closed_logs: Mutex::new(Vec::new()),
        wal_dir_unsynced: AtomicBool::new(false),
        spare_log: Mutex::new(None),
        spare_wanted: AtomicBool::new(true),
        admitted: RateMeter::new(),
        super_version: RwLock::new(Arc::new(sv)),
        retired_super_versions: Mutex::new(Vec::new()),
        deleter,
        limiter,
        compaction_cpu: (options.adaptive_compaction_priority && cfg!(target_os = "linux"))
            .then(|| crate::sched::ThreadGroup::new(true)),
        last_seq: AtomicU64::new(replay.last_seq),
        snapshots: Arc::new(Mutex::new(BTreeMap::new())),
        opts: options,
        router,
        versions,
        _lock: lock,
        _pm_lock: admitted.pm_lock,
    });
    inner.release_obsolete();
    if let Some(pm) = &inner.pm {
        reconcile(
            pm,
            &inner.versions,
            inner.pm_wals.as_ref(),
            inner.design.as_ref(),
        )?;
    }
    // Last: nothing is deleted by an open that fails.
    inner.remove_obsolete_files(&Salvage {
        manifest_torn: recovered.manifest_torn_at.is_some(),
        damaged_wals: replay.damaged_wals,
        deleted_tables: recovered.deleted_tables,
    })?;
    Ok(inner)
}

/// Rebuilds the PM allocator from what the database references (step 4):
/// every table's runs, every live PM WAL's extents, the design's own runs.
fn reconcile(
    pm: &PmTier,
    versions: &VersionSet,
    pm_wals: Option<&PmWals>,
    design: &dyn Design,
) -> Result<()> {
    let current = versions.current_all();
    let mut live: Vec<PageRun> = current
        .iter()
        .flat_map(|v| v.levels.iter().flatten())
        .flat_map(|t| t.meta.pm_pages.iter().copied())
        .collect();
    // The logs in PM: the engine's WAL extents, or a design's own logs
    // (which the design declares below).
    let listed = versions.pm_wals();
    match (pm_wals, listed.first()) {
        (Some(wals), _) => {
            for w in &listed {
                live.extend(wals.runs(w.first_extent)?);
            }
        }
        (None, Some(w)) if design.log().is_none() => {
            return Err(Error::InvalidOptions(format!(
                "the manifest has WAL {} in the PM tier, but this configuration keeps no WAL there",
                w.log_number
            )))
        }
        (None, _) => {}
    }
    live.extend(design.live_pm_runs(&current, &listed)?);
    // A run several live tables list (a segment of nodes shared by the
    // tables of an NV-Cache level), or a table and the design (RangeKV's
    // buffers), is one run.
    live.sort_unstable();
    live.dedup();
    pm.reconcile(&live)
}

/// The PM tier the options ask for: the injected region, or the region
/// file in `pm_dir`. The region of an existing database (`db_exists`) is
/// never formatted while it holds data (`PmTier::open`).
pub(crate) fn open_pm_tier(opts: &Options, db_exists: bool) -> Result<PmTier> {
    match (&opts.pm_region, &opts.pm_dir) {
        (Some(r), _) => PmTier::open(Arc::clone(r), db_exists),
        (None, Some(dir)) => PmTier::open_dir(dir, opts.pm_size_bytes, opts.pm_backend, db_exists),
        (None, None) => Err(Error::InvalidOptions(
            "a PM tier needs `pm_dir` (or an injected `pm_region`)".into(),
        )),
    }
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

/// Result of WAL replay at open.
struct Replay {
    /// One edit per region (region order) adding the replayed tables.
    edits: Vec<VersionEdit>,
    last_seq: SeqNo,
    /// SSD WALs that ended damaged (a torn tail, or damage a point-in-time
    /// recovery stopped at): kept in `lost/` once obsolete.
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
        pm_wals: Option<&PmWals>,
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
        // A design's own logs are the design's to adopt (its recovery
        // hook); only their numbers are taken.
        for w in &rec.pm_wals {
            if w.log_number >= rec.log_number {
                match pm_wals {
                    Some(_) => logs.push((w.log_number, Some(w.first_extent))),
                    None if design.log().is_some() => versions.mark_file_number_used(w.log_number),
                    None => logs.push((w.log_number, Some(w.first_extent))),
                }
            }
        }
        logs.sort_unstable();
        // After a clean close every WAL it recorded must be there, whole
        // (`VersionSet::recover` checked them before writing anything;
        // checked again here as they are replayed).
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
        // Each flush sees the versions the earlier replayed flushes made,
        // chained in memory (never installed: a removed table is not
        // released), and its edit is folded into its region's edit
        // (`VersionEdit::compose`): a design whose flush re-lists or
        // deletes tables, or writes design records, replays like it runs.
        let mut chained: Vec<Arc<crate::version::Version>> = versions.current_all();
        let flush = |region: usize,
                     mem: &Arc<MemTable>,
                     edit: &mut VersionEdit,
                     chained: &mut Vec<Arc<crate::version::Version>>,
                     last_seq: SeqNo|
         -> Result<()> {
            let env = JobEnv {
                opts,
                fs,
                dir,
                versions,
                stats,
                smallest_snapshot: last_seq,
                version: Arc::clone(&chained[region]),
                limiter: None,
            };
            let start = Instant::now();
            let out = design.flush(&env, mem)?;
            let w = out.written;
            stats.record_flush(start, w.pm_copied, w.pm_relinked, w.ssd);
            let (next, _kept) = chained[region].apply_pending(&out.edit, versions.ctx())?;
            chained[region] = Arc::new(next);
            edit.compose(out.edit);
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
                    flush(
                        region,
                        &mems[region],
                        &mut edits[region],
                        &mut chained,
                        last_seq,
                    )?;
                    mems[region] = Arc::new(MemTable::new(0));
                }
                Ok(())
            };
            let (torn, dropped) = match pm_first {
                Some(first) => {
                    let wals = pm_wals.ok_or_else(|| {
                        Error::InvalidOptions(format!(
                            "the manifest has WAL {n} in the PM tier but no PM tier is configured (`pm_dir`)"
                        ))
                    })?;
                    replay_log(wals.open_log(first, n)?, &mut apply)?
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
            if let (Some(off), Some(_), Some(wals)) = (torn, pm_first, pm_wals) {
                // Every record of a PM WAL is persisted before the next is
                // written, and a newer log is written only after the last
                // one: only the newest PM WAL can have a record in flight.
                if let Some(later) = first_log_with_records(fs, dir, pm_wals, &logs[i + 1..])? {
                    return Err(Error::corruption(
                        wals.region().name(),
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
                flush(region, mem, &mut edits[region], &mut chained, last_seq)?;
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
    pm_wals: Option<&PmWals>,
    logs: &[(u64, Option<u64>)],
) -> Result<Option<u64>> {
    for &(n, pm_first) in logs {
        let has = match (pm_first, pm_wals) {
            (Some(first), Some(wals)) => {
                wals.open_log(first, n)?.point_in_time(true).next_record()?
            }
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
