//! The design seam's hooks (design/mod.rs), each exercised by a toy
//! design defined here — not a preset — and plugged in with
//! `Db::open_with_design`.
//!
//! The toy keeps L0 in PM as RowTables (the container's format, copied
//! from the memtable at flush), owns its log (a PM WAL chain the flush
//! adopts: its extents join the new table's `pm_pages`, so they are freed
//! with the table), shares one PM "arena" run among all its PM tables by
//! a reference count of its own (freed through `release` when the last
//! table referencing it goes; declared live to reconcile through
//! `live_pm_runs`), and compacts all of L0 with the overlapped L1 into L1
//! SSTs under its own task kind.
//!
//! One test per hook:
//! * `flush` / `run` bytes reach the stats per tier and cause;
//! * `pick` sees the engine's load in its `PickContext`;
//! * a design-defined `TaskKind` reaches the stats;
//! * `log`: every group goes to the design's log, none to an engine WAL;
//!   the MANIFEST lists the live logs and the flushes retire them;
//! * `recover` adopts the logs a crash left: every acknowledged write is
//!   back, before any replay;
//! * `live_pm_runs` keeps PM that no table lists allocated through
//!   reconcile (and reconcile frees what nothing declares);
//! * `release` is told of every released PM table; the runs it returns
//!   are freed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;

use tierkv::design::container::rowtable::{self, BuildParams, Expect, PageSource, RowTable};
use tierkv::design::{
    leveled, Design, DesignLog, JobEnv, JobOutput, PickContext, Task, TaskKind, WriteControl,
    Written,
};
use tierkv::iter::TableReader;
use tierkv::memtable::MemTable;
use tierkv::storage::alloc::PageRun;
use tierkv::storage::mem::MemFs;
use tierkv::storage::pm::PmTier;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::{FileSystem, PmRegion};
use tierkv::version::edit::{PmWal, TableMeta, VersionEdit};
use tierkv::version::{TableContext, Version};
use tierkv::wal::{LogWriter, PmWals};
use tierkv::{Db, Options, Preset, ReadOptions, Result, WriteBatch};

/// The toy's compaction.
const TOY_MERGE: TaskKind = TaskKind::new("toy-merge");
/// Design record: the arena run, `first ‖ count` (written once).
const ARENA_TAG: u32 = 0x544f_5941;

/// What the hooks saw.
#[derive(Default)]
struct Seen {
    /// `(immutable memtables, PM free bytes, PM capacity)` of every pick.
    contexts: Vec<(usize, Option<u64>, Option<u64>)>,
    /// Ids of released PM tables.
    released: Vec<u64>,
    /// Logs created.
    logs: Vec<u64>,
    /// Logs adopted by `recover`.
    adopted: Vec<u64>,
    /// Bytes the flushes reported.
    flushed: Written,
    /// Arena runs taken into use (allocated, or found at recovery) and
    /// given back through `release`.
    arenas_taken: usize,
    arenas_freed: usize,
}

struct Toy {
    pm: Arc<PmTier>,
    wals: PmWals,
    /// The shared arena and the PM tables referencing it.
    arena: Mutex<Option<(PageRun, u64)>>,
    /// Extents of each log, by number, while it is the write path's.
    logs: Mutex<HashMap<u64, u64>>,
    seen: Mutex<Seen>,
    /// Pick merges in the background (off: only `compact_range` merges).
    auto_merge: bool,
}

struct Pages<'a>(&'a PmTier);

impl PageSource for Pages<'_> {
    fn alloc(&self, want: u64, min: u64) -> Result<PageRun> {
        let mut n = want;
        loop {
            if let Some(r) = self.0.allocator().alloc(n)? {
                return Ok(r);
            }
            if n == min {
                return Err(tierkv::Error::InvalidArgument("toy: PM full".into()));
            }
            n = (n / 2).max(min);
        }
    }
    fn free(&self, run: PageRun) -> Result<()> {
        self.0.free_pages(run)
    }
}

fn decode_run(b: &[u8]) -> Option<PageRun> {
    let first = u64::from_le_bytes(b.get(0..8)?.try_into().ok()?);
    let count = u64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
    Some(PageRun { first, count })
}

impl Toy {
    fn new(pm: Arc<PmTier>, auto_merge: bool) -> Toy {
        Toy {
            auto_merge,
            wals: PmWals::new(Arc::clone(&pm)),
            pm,
            arena: Mutex::new(None),
            logs: Mutex::new(HashMap::new()),
            seen: Mutex::new(Seen::default()),
        }
    }

    /// A RowTable of `mem`'s entries, owning `extra` runs too.
    fn row(
        &self,
        env: &JobEnv,
        mem: &Arc<MemTable>,
        extra: Vec<PageRun>,
    ) -> Result<(TableMeta, u64)> {
        let built = rowtable::build(
            &BuildParams {
                region: self.pm.region(),
                pages: &Pages(&self.pm),
                extent_pages: 4,
                pred: None,
                entries_hint: mem.entries() as usize,
                key_bytes_hint: 0,
            },
            &mut mem.iter(),
        )?;
        let written = built.written_bytes;
        let mut meta = built.into_meta(env.versions.new_file_number());
        meta.pm_pages.extend(extra);
        Ok((meta, written))
    }

    /// One more table references the arena (allocated, and recorded in
    /// `edit`, on first use).
    fn take_arena(&self, edit: &mut VersionEdit) -> Result<()> {
        let mut a = self.arena.lock();
        match &mut *a {
            Some((_, refs)) => *refs += 1,
            None => {
                let run = Pages(&self.pm).alloc(2, 2)?;
                let mut b = run.first.to_le_bytes().to_vec();
                b.extend_from_slice(&run.count.to_le_bytes());
                edit.design_records.push((ARENA_TAG, b));
                *a = Some((run, 1));
                self.seen.lock().arenas_taken += 1;
            }
        }
        Ok(())
    }

    fn pm_tables(v: &Version) -> u64 {
        v.levels
            .iter()
            .flatten()
            .filter(|t| t.meta.tier == tierkv::stats::Tier::Pm)
            .count() as u64
    }
}

impl DesignLog for Toy {
    fn create(&self, number: u64) -> Result<(Box<dyn LogWriter>, u64)> {
        let (w, first) = self.wals.create_log(number)?;
        self.logs.lock().insert(number, first);
        self.seen.lock().logs.push(number);
        Ok((Box::new(w), first))
    }
}

impl Design for Toy {
    fn preset(&self) -> Preset {
        Preset::Classic
    }

    fn flush(&self, env: &JobEnv, mem: &Arc<MemTable>) -> Result<JobOutput> {
        let mut edit = VersionEdit::default();
        if mem.is_empty() {
            return Ok(JobOutput::default());
        }
        // The flushed memtable's log becomes part of its table.
        let log_runs = match self.logs.lock().remove(&mem.log_number()) {
            Some(first) => self.wals.runs(first)?,
            None => Vec::new(),
        };
        let (meta, bytes) = self.row(env, mem, log_runs)?;
        self.take_arena(&mut edit)?;
        edit.new_tables.push((0, meta));
        let written = Written {
            pm_copied: bytes,
            ..Written::default()
        };
        self.seen.lock().flushed += written;
        Ok(JobOutput { edit, written })
    }

    fn pick(&self, v: &Version, cx: &PickContext) -> Option<Task> {
        self.seen.lock().contexts.push((
            cx.immutable_memtables,
            cx.pm_free_bytes,
            cx.pm_capacity_bytes,
        ));
        let l0 = &v.levels[0];
        if !self.auto_merge || l0.len() < 2 || l0.iter().any(|t| cx.busy.contains(&t.meta.id)) {
            return None;
        }
        let (lo, hi) = leveled::user_range(l0);
        let l1 = v.overlapping(1, Some(&lo), Some(&hi));
        if l1.iter().any(|t| cx.busy.contains(&t.meta.id)) {
            return None;
        }
        Some(Task::new(TOY_MERGE, vec![(0, l0.clone()), (1, l1)], 1))
    }

    fn run(&self, env: &JobEnv, task: &Task) -> Result<JobOutput> {
        leveled::run_merge(env, task, env.opts.sst_size_bytes)
    }

    fn write_control(&self, _v: &Version, _imm: usize) -> WriteControl {
        WriteControl::Proceed
    }

    fn install(&self, ctx: &Arc<TableContext>) {
        let region = Arc::clone(self.pm.region());
        let _ = ctx.pm_opener.set(Box::new(move |meta: &TableMeta| {
            let t: Arc<dyn TableReader> = Arc::new(RowTable::open(
                Arc::clone(&region),
                meta.pm_pages[0],
                Expect {
                    seq_min: meta.seq_min,
                    seq_max: meta.seq_max,
                    entries: meta.entries,
                },
                &meta.pm_pages,
                true,
            )?);
            Ok(t)
        }));
    }

    fn recover(&self, env: &JobEnv) -> Result<Vec<VersionEdit>> {
        // The arena and its references, from the MANIFEST.
        let v = &env.version;
        let arena = v.design_state.get(&ARENA_TAG).and_then(|b| decode_run(b));
        let refs = Self::pm_tables(v);
        *self.arena.lock() = arena.filter(|_| refs > 0).map(|r| (r, refs));
        if refs > 0 {
            self.seen.lock().arenas_taken += 1;
        }
        // Every listed log becomes an L0 table, oldest first.
        let mut edits = Vec::new();
        let mut logs = env.versions.pm_wals();
        logs.sort_by_key(|w| w.log_number);
        for w in logs {
            let mem = Arc::new(MemTable::new(w.log_number));
            let mut reader = self.wals.open_log(w.first_extent, w.log_number)?;
            while let Some(rec) = reader.next_record()? {
                let off = reader.last_record_offset();
                mem.apply(&WriteBatch::decode(rec, "toy log", off)?)?;
            }
            let runs = self.wals.runs(w.first_extent)?;
            let mut edit = VersionEdit::default();
            // An empty log is only dropped from the list: reconcile frees
            // its pages once nothing declares them.
            if !mem.is_empty() {
                let (meta, _) = self.row(env, &mem, runs)?;
                self.take_arena(&mut edit)?;
                edit.new_tables.push((0, meta));
            }
            edit.deleted_pm_wals.push(w.log_number);
            edits.push(edit);
            self.seen.lock().adopted.push(w.log_number);
        }
        Ok(edits)
    }

    fn live_pm_runs(&self, versions: &[Arc<Version>], logs: &[PmWal]) -> Result<Vec<PageRun>> {
        let mut live = Vec::new();
        for w in logs {
            live.extend(self.wals.runs(w.first_extent)?);
        }
        if versions.iter().any(|v| Self::pm_tables(v) > 0) {
            live.extend(self.arena.lock().map(|(r, _)| r));
        }
        Ok(live)
    }

    fn release(&self, meta: &TableMeta) -> Result<Vec<PageRun>> {
        self.seen.lock().released.push(meta.id);
        let mut a = self.arena.lock();
        match &mut *a {
            Some((run, refs)) => {
                *refs -= 1;
                if *refs == 0 {
                    let run = *run;
                    *a = None;
                    self.seen.lock().arenas_freed += 1;
                    return Ok(vec![run]);
                }
                Ok(Vec::new())
            }
            None => Ok(Vec::new()),
        }
    }

    fn log(&self) -> Option<&dyn DesignLog> {
        Some(self)
    }

    fn debt(&self, v: &Version) -> u64 {
        v.levels[0].len() as u64
    }
}

/// A toy database on a crashable file system and a simulated PM region.
struct Setup {
    fs: MemFs,
    sim: Arc<SimRegion>,
    auto_merge: bool,
}

impl Setup {
    fn new() -> Setup {
        Setup {
            fs: MemFs::new(),
            sim: Arc::new(SimRegion::new(16 << 20)),
            auto_merge: true,
        }
    }

    fn options(&self) -> Options {
        let region: Arc<dyn PmRegion> = self.sim.clone();
        Options {
            fs: Arc::new(self.fs.clone()),
            pm_region: Some(region),
            pm_size_bytes: 16 << 20,
            memtable_size_bytes: 64 << 10,
            sst_size_bytes: 64 << 10,
            background_threads: 2,
            ..Options::default()
        }
    }

    /// Opens with a fresh toy; returns both.
    fn open(&self) -> (Db, Arc<Toy>) {
        let made: Arc<Mutex<Option<Arc<Toy>>>> = Arc::new(Mutex::new(None));
        let m = Arc::clone(&made);
        let auto_merge = self.auto_merge;
        let db = Db::open_with_design("/db", self.options(), &move |_o, pm| {
            let toy = Arc::new(Toy::new(pm.expect("a PM tier"), auto_merge));
            *m.lock() = Some(Arc::clone(&toy));
            Ok(toy as Arc<dyn Design>)
        })
        .expect("open");
        let toy = made.lock().take().expect("factory ran");
        (db, toy)
    }

    /// The database after a power cut: only what was durable.
    fn crash(&self) -> Setup {
        Setup {
            fs: self.fs.crash(),
            sim: Arc::new(self.sim.crash()),
            auto_merge: self.auto_merge,
        }
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:06}").into_bytes()
}

fn value(i: u32, gen: u32) -> Vec<u8> {
    format!("v{i}-{gen}-{}", "x".repeat(200)).into_bytes()
}

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "key {k:?}");
    }
    let mut it = db.iter(ReadOptions::default()).unwrap();
    it.seek_to_first();
    let mut n = 0;
    while it.valid() {
        assert_eq!(model.get(it.key()).map(Vec::as_slice), Some(it.value()));
        n += 1;
        it.next();
    }
    it.status().unwrap();
    assert_eq!(n, model.len());
}

fn write(db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, range: std::ops::Range<u32>, gen: u32) {
    for i in range {
        db.put(&key(i), &value(i, gen)).unwrap();
        model.insert(key(i), value(i, gen));
    }
}

#[test]
fn the_design_log_takes_every_write_and_flushes_adopt_it() {
    let s = Setup::new();
    let (db, toy) = s.open();
    let mut model = BTreeMap::new();
    write(&db, &mut model, 0..1500, 0);
    db.flush().unwrap();
    // No engine WAL anywhere: no .log file.
    let names = s.fs.list(std::path::Path::new("/db")).unwrap();
    assert!(names.iter().all(|n| !n.ends_with(".log")), "{names:?}");
    let seen = toy.seen.lock();
    assert!(seen.logs.len() >= 3, "a log per memtable: {:?}", seen.logs);
    let stats = db.stats();
    assert_eq!(stats.written.wal_ssd, 0);
    assert!(
        stats.written.wal_pm > 0,
        "groups were appended to the toy's log"
    );
    // The flushes' bytes are what the toy reported, under the flush cause.
    assert_eq!(stats.written.flush_pm, seen.flushed.pm_copied);
    assert_eq!(stats.written.flush_ssd, 0);
    drop(seen);
    check(&db, &model);
    db.close().unwrap();
}

#[test]
fn pickers_see_the_engines_load_and_custom_tasks_reach_the_stats() {
    let s = Setup::new();
    let (db, toy) = s.open();
    let mut model = BTreeMap::new();
    for gen in 0..3 {
        write(&db, &mut model, 0..800, gen);
        db.flush().unwrap();
    }
    db.compact_range(None, None).unwrap();
    check(&db, &model);
    let stats = db.stats();
    let merges: Vec<_> = stats
        .compactions
        .iter()
        .filter(|c| c.kind == TOY_MERGE.name())
        .collect();
    assert!(!merges.is_empty(), "{:?}", stats.compactions);
    // Merges (the toy's and the manual ones) write SSTs, booked as
    // compaction into L1.
    let out: u64 = stats
        .compactions
        .iter()
        .filter(|c| c.output_level == 1)
        .map(|c| c.output_bytes)
        .sum();
    assert_eq!(stats.written.compaction_ssd.get(1).copied(), Some(out));
    let seen = toy.seen.lock();
    assert!(!seen.contexts.is_empty());
    let capacity = seen.contexts[0].2.expect("PM capacity");
    assert!(capacity > 15 << 20 && capacity <= 16 << 20, "{capacity}");
    assert!(seen
        .contexts
        .iter()
        .all(|(_, free, _)| free.is_some_and(|f| f <= capacity)));
    drop(seen);
    db.close().unwrap();
}

#[test]
fn release_frees_what_the_design_counts_and_live_runs_survive_reconcile() {
    let s = Setup {
        auto_merge: false,
        ..Setup::new()
    };
    let (db, toy) = s.open();
    let mut model = BTreeMap::new();
    write(&db, &mut model, 0..700, 0);
    db.flush().unwrap();
    let (arena, refs) = toy.arena.lock().expect("an arena");
    assert!(refs >= 1);
    db.close().unwrap();

    // Reopen: no table lists the arena; only live_pm_runs keeps it.
    let (db, toy) = s.open();
    let alloc = toy.pm.allocator();
    assert!(alloc.is_allocated(arena.first), "declared live, kept");
    check(&db, &model);
    // Merge every PM table into L1 SSTs: each release is told, and the
    // last one frees the arena.
    write(&db, &mut model, 0..700, 1);
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    check(&db, &model);
    drop(db.iter(ReadOptions::default()).unwrap()); // no reader pins old versions
    db.close().unwrap();
    // No PM table is left: every arena taken into use was given back,
    // and the allocator holds no data page but the current log's.
    let seen = toy.seen.lock();
    assert!(!seen.released.is_empty());
    assert!(toy.arena.lock().is_none());
    assert_eq!(seen.arenas_taken, seen.arenas_freed);
    let a = toy.pm.allocator();
    let data_pages = a.total_pages() - a.data_start_page();
    let log_pages = tierkv::wal::pm::extent_len_for_region(toy.pm.region().len()) / 4096;
    assert!(
        data_pages - a.free_pages() <= log_pages,
        "{} pages still allocated",
        data_pages - a.free_pages()
    );
}

#[test]
fn recover_adopts_the_logs_a_crash_left() {
    let s = Setup::new();
    let (db, _toy) = s.open();
    let mut model = BTreeMap::new();
    write(&db, &mut model, 0..1200, 0);
    // A power cut: the design's log holds the unflushed writes (every
    // group was persisted before it was acknowledged).
    let c = s.crash();
    drop(db);
    let (db, toy) = c.open();
    assert!(
        !toy.seen.lock().adopted.is_empty(),
        "the listed logs are adopted"
    );
    check(&db, &model);
    assert_eq!(db.stats().written.wal_ssd, 0);
    // The adopted tables are ordinary: they merge and reopen.
    db.compact_range(None, None).unwrap();
    check(&db, &model);
    db.close().unwrap();
    let (db, _toy) = c.open();
    check(&db, &model);
    db.close().unwrap();
}
