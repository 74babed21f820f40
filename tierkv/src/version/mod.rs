//! Versions: the immutable set of tables, the edits that change it, and the
//! MANIFEST that records them.
//!
//! A [`Version`] is immutable; a change builds a new one from a
//! [`edit::VersionEdit`]. Readers hold `Arc<Version>` and never block on
//! compaction. Tables are shared between versions as `Arc<TableHandle>`.
//!
//! Invariants:
//! 1. L0 tables are ordered newest first (`seq_max` descending); their key
//!    ranges may overlap, their seqno ranges do not — except between
//!    key-disjoint tables (one flush cut into several L0 SSTs), where no
//!    key can be in both.
//! 2. Tables of L1 and below are ordered by smallest key and do not overlap.
//! 3. A table's file or PM pages are released only when it has been removed
//!    by an edit *and* the last `Arc<TableHandle>` (held by versions,
//!    iterators or jobs) is gone. A PM page run may be listed by several
//!    tables (successive metas of one PM structure that give up pages as
//!    they are consumed, e.g. a RowTable whose compacted extents are freed):
//!    it is released when the last live handle listing it goes, and only
//!    if that handle was removed by an edit.
//! 4. A design may serve a whole level through one reader
//!    ([`TableContext::level_view`], e.g. a PM container searched with
//!    cross-row hints); it is built for every version by [`Version::apply`]
//!    and then answers gets and iteration of that level.
//! 5. A table id names one metadata for its whole life: an edit that
//!    deletes and re-adds an id moves the table between levels unchanged;
//!    re-adding it with other metadata is refused. A PM table that grows by
//!    appends (or gives pages back) is re-listed under a new id, so an
//!    append racing a compaction that picked the old id makes the
//!    compaction's edit fail ("deletes table … which is not in L…")
//!    instead of dropping the appended data.

pub mod bounds;
pub mod closed;
pub mod edit;
pub mod recycle;
pub mod set;

use std::cmp::Ordering;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::iter::{EmptyIterator, Found, InternalIterator, TableReader};
use crate::key::{self, compare_internal, SeqNo};
use crate::sst::{BlockCache, ReadConfig, Table, TableCounters};
use crate::stats::{LevelShape, Tier};
use crate::storage::alloc::PageRun;
use crate::storage::FileSystem;
use edit::{TableFormat, TableMeta, VersionEdit};

/// Opens a PM table of a design-specific format.
pub type PmTableOpener = dyn Fn(&TableMeta) -> Result<Arc<dyn TableReader>> + Send + Sync;

/// Builds a design's reader for one whole level of a version (e.g. a PM
/// container searched with cross-row hints); `None` reads the level table
/// by table. Called by [`Version::apply`] for every level of every new
/// version, so it must be cheap (defer real work to the first read).
pub type LevelViewBuilder = dyn Fn(&Version, usize) -> Option<Arc<dyn TableReader>> + Send + Sync;

/// Checks a design record (tag, bytes) read back from the MANIFEST.
pub type DesignRecordCheck = dyn Fn(u32, &[u8]) -> Result<()> + Send + Sync;

/// What a table needs to open its reader and to release its storage.
pub struct TableContext {
    /// The SSD file system.
    pub fs: Arc<dyn FileSystem>,
    /// The database directory (SST files live here).
    pub dir: PathBuf,
    /// The shared block cache.
    pub cache: Option<Arc<BlockCache>>,
    /// Counters the SST readers update.
    pub counters: TableCounters,
    /// Verify block checksums.
    pub verify_checksums: bool,
    /// Opens PM tables (set by PM designs).
    pub pm_opener: OnceLock<Box<PmTableOpener>>,
    /// Serves whole levels (set by designs that read a level as one unit).
    pub level_view: OnceLock<Box<LevelViewBuilder>>,
    /// Validates the design records of the MANIFEST at recovery (set by
    /// designs that write them): a record it rejects makes the open fail
    /// with `Corruption` naming the manifest and the record's offset.
    pub design_record_check: OnceLock<Box<DesignRecordCheck>>,
    /// Live handles listing each PM page run (invariant 3).
    pub pm_run_refs: Mutex<HashMap<PageRun, u32>>,
    /// Tables whose storage must be released (processed by the background
    /// thread, never by a reader). For PM tables, `pm_pages` holds only the
    /// runs to free.
    pub obsolete: Mutex<Vec<TableMeta>>,
    /// Obsolete table files kept for new tables to be written over.
    pub recycler: recycle::TableRecycler,
}

impl TableContext {
    /// A context with no design hooks installed.
    pub fn new(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        cache: Option<Arc<BlockCache>>,
        counters: TableCounters,
        verify_checksums: bool,
    ) -> TableContext {
        TableContext {
            fs,
            dir,
            cache,
            counters,
            verify_checksums,
            pm_opener: OnceLock::new(),
            level_view: OnceLock::new(),
            design_record_check: OnceLock::new(),
            pm_run_refs: Mutex::new(HashMap::new()),
            obsolete: Mutex::new(Vec::new()),
            recycler: recycle::TableRecycler::default(),
        }
    }

    /// Path of an SST file.
    pub fn sst_path(&self, id: u64) -> PathBuf {
        self.dir.join(crate::sst::sst_file_name(id))
    }
}

/// One table shared by the versions that contain it.
pub struct TableHandle {
    /// What the manifest says about it.
    pub meta: TableMeta,
    reader: OnceLock<Arc<dyn TableReader>>,
    obsolete: AtomicBool,
    ctx: Arc<TableContext>,
}

/// A handle on an SST that exists only as metadata — `id`, user keys `lo`
/// to `hi`, `size` bytes — for tests of pure policies (pickers, cutters,
/// subcompaction cuts) that read no table.
#[cfg(test)]
pub(crate) fn detached_table(id: u64, lo: &str, hi: &str, size: u64) -> Arc<TableHandle> {
    use crate::key::{make_internal_key, Kind};
    let ctx = Arc::new(TableContext::new(
        Arc::new(crate::storage::mem::MemFs::new()),
        PathBuf::from("/t"),
        None,
        crate::sst::TableCounters::default(),
        true,
    ));
    TableHandle::new(
        edit::TableMeta {
            id,
            tier: crate::stats::Tier::Ssd,
            format: edit::TableFormat::Sst,
            size_bytes: size,
            smallest: make_internal_key(lo.as_bytes(), 1, Kind::Put),
            largest: make_internal_key(hi.as_bytes(), 1, Kind::Put),
            seq_min: 1,
            seq_max: 1,
            entries: 1,
            deletions: 0,
            pm_pages: Vec::new(),
        },
        ctx,
    )
}

impl TableHandle {
    /// A handle for a table described by `meta`.
    pub fn new(meta: TableMeta, ctx: Arc<TableContext>) -> Arc<TableHandle> {
        if !meta.pm_pages.is_empty() {
            let mut refs = ctx.pm_run_refs.lock();
            for run in &meta.pm_pages {
                *refs.entry(*run).or_insert(0) += 1;
            }
        }
        Arc::new(TableHandle {
            meta,
            reader: OnceLock::new(),
            obsolete: AtomicBool::new(false),
            ctx,
        })
    }

    /// The table's reader, opened on first use and kept open.
    pub fn reader(&self) -> Result<Arc<dyn TableReader>> {
        if let Some(r) = self.reader.get() {
            return Ok(Arc::clone(r));
        }
        let r: Arc<dyn TableReader> = match (self.meta.tier, self.meta.format) {
            (Tier::Ssd, TableFormat::Sst) => {
                let path = self.ctx.sst_path(self.meta.id);
                let file = self.ctx.fs.open(&path)?;
                Table::open(
                    file,
                    self.meta.id,
                    self.ctx.cache.clone(),
                    ReadConfig {
                        verify_checksums: self.ctx.verify_checksums,
                        counters: self.ctx.counters.clone(),
                    },
                )?
            }
            _ => match self.ctx.pm_opener.get() {
                Some(open) => open(&self.meta)?,
                None => {
                    return Err(Error::corruption(
                        "MANIFEST",
                        0,
                        format!(
                            "table {} has format {:?} in tier {} but this design cannot read it",
                            self.meta.id,
                            self.meta.format,
                            self.meta.tier.name()
                        ),
                    ))
                }
            },
        };
        let _ = self.reader.set(Arc::clone(&r));
        Ok(self.reader.get().cloned().unwrap_or(r))
    }

    /// Whether the reader is open.
    pub fn is_open(&self) -> bool {
        self.reader.get().is_some()
    }

    /// Opens the reader if no one has yet ([`TableHandle::reader`]) and
    /// lets it build what its first lookup would ([`TableReader::warm`]).
    pub fn warm(&self) -> Result<()> {
        self.reader()?.warm()
    }

    /// Smallest user key.
    pub fn smallest_user_key(&self) -> &[u8] {
        key::user_key(&self.meta.smallest)
    }

    /// Largest user key.
    pub fn largest_user_key(&self) -> &[u8] {
        key::user_key(&self.meta.largest)
    }

    /// True if the user-key range `[lo, hi]` overlaps this table (`None` = unbounded).
    pub fn overlaps(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
        !(lo.is_some_and(|l| self.largest_user_key() < l)
            || hi.is_some_and(|h| self.smallest_user_key() > h))
    }

    fn mark_obsolete(&self) {
        self.obsolete.store(true, AtomicOrdering::Release);
    }
}

impl Drop for TableHandle {
    fn drop(&mut self) {
        let obsolete = self.obsolete.load(AtomicOrdering::Acquire);
        if self.meta.pm_pages.is_empty() {
            if obsolete {
                self.ctx.obsolete.lock().push(self.meta.clone());
            }
            return;
        }
        // Invariant 3: a run goes when no live handle lists it any more.
        let mut last: Vec<PageRun> = Vec::new();
        {
            let mut refs = self.ctx.pm_run_refs.lock();
            for run in &self.meta.pm_pages {
                match refs.get_mut(run) {
                    Some(n) if *n > 1 => *n -= 1,
                    _ => {
                        refs.remove(run);
                        last.push(*run);
                    }
                }
            }
        }
        if obsolete && !last.is_empty() {
            let mut m = self.meta.clone();
            m.pm_pages = last;
            self.ctx.obsolete.lock().push(m);
        }
    }
}

impl std::fmt::Debug for TableHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "#{}[{:?}..{:?}]",
            self.meta.id,
            String::from_utf8_lossy(self.smallest_user_key()),
            String::from_utf8_lossy(self.largest_user_key())
        )
    }
}

/// The tables an edit removed, not yet marked obsolete (see
/// [`Version::apply_pending`]).
#[must_use = "commit the removed tables once the edit is durable"]
pub struct Removed(Vec<Arc<TableHandle>>);

impl Removed {
    /// Marks the removed tables obsolete: each is released when its last
    /// reference goes.
    pub fn commit(self) {
        for t in &self.0 {
            t.mark_obsolete();
        }
    }

    /// The removed tables' ids, leaving them unmarked: for manifest replay
    /// at open, where a removal is history — its storage was released
    /// before the crash, or is a leftover the open finds by listing.
    pub fn into_ids(self) -> impl Iterator<Item = u64> {
        self.0.into_iter().map(|t| t.meta.id)
    }
}

/// An immutable set of tables arranged in levels.
#[derive(Clone, Default)]
pub struct Version {
    /// `levels[0]` = L0 (newest first), then L1.. (sorted, disjoint).
    pub levels: Vec<Vec<Arc<TableHandle>>>,
    /// Per-level round-robin compaction cursors (internal keys).
    pub compact_cursors: Vec<Vec<u8>>,
    /// Design-specific state recorded in the manifest, by tag.
    pub design_state: std::collections::BTreeMap<u32, Vec<u8>>,
    /// Per level, a design's reader for the whole level (invariant 4).
    pub level_views: Vec<Option<Arc<dyn TableReader>>>,
    /// Counts the edits applied since open: tells versions apart cheaply.
    pub generation: u64,
    /// Per level below L0, the tables' largest keys laid out for the point
    /// read's search ([`bounds`]); built once per version, by
    /// [`apply`](Self::apply) or the first [`get`](Self::get), and unbuilt
    /// in a clone. Code that changes `levels` in place (pickers' scratch
    /// copies, tests) must do so before reading through `get`.
    pub bounds: bounds::Bounds,
}

impl Version {
    /// An empty version with `level_count` levels.
    pub fn empty(level_count: usize) -> Self {
        Version {
            levels: vec![Vec::new(); level_count],
            compact_cursors: vec![Vec::new(); level_count],
            design_state: Default::default(),
            level_views: vec![None; level_count],
            generation: 0,
            bounds: Default::default(),
        }
    }

    /// Number of levels.
    pub fn level_count(&self) -> usize {
        self.levels.len()
    }

    /// Bytes in a level.
    pub fn level_bytes(&self, level: usize) -> u64 {
        self.levels
            .get(level)
            .map_or(0, |l| l.iter().map(|t| t.meta.size_bytes).sum())
    }

    /// Every table id in the version.
    pub fn table_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.levels.iter().flatten().map(|t| t.meta.id)
    }

    /// The level shape for stats.
    pub fn shape(&self) -> Vec<LevelShape> {
        let mut out = Vec::new();
        for (level, tables) in self.levels.iter().enumerate() {
            for tier in [Tier::Pm, Tier::Ssd] {
                let (n, b) = tables
                    .iter()
                    .filter(|t| t.meta.tier == tier)
                    .fold((0, 0), |(n, b), t| (n + 1, b + t.meta.size_bytes));
                if n > 0 {
                    out.push(LevelShape {
                        level,
                        tier,
                        tables: n,
                        bytes: b,
                    });
                }
            }
        }
        out
    }

    /// Tables of `level` overlapping the user-key range `[lo, hi]`.
    pub fn overlapping(
        &self,
        level: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Vec<Arc<TableHandle>> {
        let Some(tables) = self.levels.get(level) else {
            return Vec::new();
        };
        if level == 0 {
            return tables
                .iter()
                .filter(|t| t.overlaps(lo, hi))
                .cloned()
                .collect();
        }
        // Sorted and disjoint: binary search the first table that can overlap.
        let start = match lo {
            Some(l) => tables.partition_point(|t| t.largest_user_key() < l),
            None => 0,
        };
        tables[start..]
            .iter()
            .take_while(|t| hi.is_none_or(|h| t.smallest_user_key() <= h))
            .cloned()
            .collect()
    }

    /// The newest entry for `user_key` visible at `seq` in the tables.
    pub fn get(&self, user_key: &[u8], seq: SeqNo) -> Result<Option<Found>> {
        let bounds = self.bounds.get(&self.levels);
        for (level, tables) in self.levels.iter().enumerate() {
            if let Some(Some(view)) = self.level_views.get(level) {
                if let Some(f) = view.get(user_key, seq)? {
                    return Ok(Some(f));
                }
            } else if level == 0 {
                // Newest first; seqno ranges are disjoint, so the first hit wins.
                for t in tables {
                    if t.meta.seq_min > seq || !t.overlaps(Some(user_key), Some(user_key)) {
                        continue;
                    }
                    if let Some(f) = t.reader()?.get(user_key, seq)? {
                        return Ok(Some(f));
                    }
                }
            } else {
                debug_assert_eq!(
                    bounds[level].len(),
                    tables.len(),
                    "L{level} changed after get"
                );
                let i = bounds[level].find(user_key);
                if let Some(t) = tables.get(i) {
                    if t.smallest_user_key() <= user_key {
                        if let Some(f) = t.reader()?.get(user_key, seq)? {
                            return Ok(Some(f));
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// Adds one iterator per L0 table and one per deeper level to `out`.
    /// A level's iterator shares the version's list of tables (a scan's
    /// seek must not clone and drop a handle per table of every level).
    pub fn add_iterators(
        self: &Arc<Self>,
        out: &mut Vec<Box<dyn InternalIterator>>,
        fill_cache: bool,
    ) {
        for (level, tables) in self.levels.iter().enumerate() {
            if let Some(Some(view)) = self.level_views.get(level) {
                out.push(Arc::clone(view).iter(fill_cache));
            } else if level == 0 {
                for t in tables {
                    out.push(table_iter(t, fill_cache));
                }
            } else if !tables.is_empty() {
                out.push(Box::new(LevelIterator::of_version(
                    Arc::clone(self),
                    level,
                    fill_cache,
                )));
            }
        }
    }

    /// Applies an edit, producing the next version. Tables removed and not
    /// re-added are marked obsolete (released when their last reference goes).
    pub fn apply(&self, e: &VersionEdit, ctx: &Arc<TableContext>) -> Result<Version> {
        let (v, removed) = self.apply_pending(e, ctx)?;
        removed.commit();
        Ok(v)
    }

    /// Like [`apply`](Self::apply), but the removed tables are marked
    /// obsolete only when the caller commits them — after the edit is
    /// durable. Dropping the [`Removed`] (the edit failed) keeps them live.
    pub fn apply_pending(
        &self,
        e: &VersionEdit,
        ctx: &Arc<TableContext>,
    ) -> Result<(Version, Removed)> {
        let mut v = self.clone();
        v.generation += 1;
        let mut removed: Vec<Arc<TableHandle>> = Vec::new();
        for &(level, id) in &e.deleted_tables {
            let level = level as usize;
            let tables = v.levels.get_mut(level).ok_or_else(|| bad_level(level))?;
            match tables.iter().position(|t| t.meta.id == id) {
                Some(i) => removed.push(tables.remove(i)),
                None => {
                    return Err(Error::corruption(
                        "MANIFEST",
                        0,
                        format!("edit deletes table {id} which is not in L{level}"),
                    ))
                }
            }
        }
        for (level, meta) in &e.new_tables {
            let level = *level as usize;
            let handle = match removed.iter().position(|t| t.meta.id == meta.id) {
                // A move between levels keeps the table as it is. A table
                // whose metadata changes takes a new id (invariant 5).
                Some(i) if removed[i].meta == *meta => removed.swap_remove(i),
                Some(_) => {
                    return Err(Error::corruption(
                        "MANIFEST",
                        0,
                        format!(
                            "edit re-adds table {} with other metadata (a changed table takes a new id)",
                            meta.id
                        ),
                    ))
                }
                None => TableHandle::new(meta.clone(), Arc::clone(ctx)),
            };
            v.levels
                .get_mut(level)
                .ok_or_else(|| bad_level(level))?
                .push(handle);
        }
        for (level, cursor) in &e.compact_cursors {
            if let Some(c) = v.compact_cursors.get_mut(*level as usize) {
                *c = cursor.clone();
            }
        }
        for (tag, bytes) in &e.design_records {
            // An empty record removes the tag (its owner has no state).
            if bytes.is_empty() {
                v.design_state.remove(tag);
            } else {
                v.design_state.insert(*tag, bytes.clone());
            }
        }
        v.sort_levels();
        v.check_invariants()?;
        v.level_views = match ctx.level_view.get() {
            Some(build) => (0..v.levels.len()).map(|l| build(&v, l)).collect(),
            None => vec![None; v.levels.len()],
        };
        // Built here, by the writer of the version, not by its first reader.
        v.bounds.get(&v.levels);
        Ok((v, Removed(removed)))
    }

    fn sort_levels(&mut self) {
        for (level, tables) in self.levels.iter_mut().enumerate() {
            if level == 0 {
                tables.sort_by(|a, b| {
                    b.meta
                        .seq_max
                        .cmp(&a.meta.seq_max)
                        .then(b.meta.id.cmp(&a.meta.id))
                });
            } else {
                tables.sort_by(|a, b| compare_internal(&a.meta.smallest, &b.meta.smallest));
            }
        }
    }

    /// Checks invariant 2 (always) and invariant 1 (with `invariants`).
    fn check_invariants(&self) -> Result<()> {
        for (level, tables) in self.levels.iter().enumerate().skip(1) {
            for w in tables.windows(2) {
                if compare_internal(&w[0].meta.largest, &w[1].meta.smallest) != Ordering::Less {
                    return Err(Error::corruption(
                        "MANIFEST",
                        0,
                        format!(
                            "L{level} tables {} and {} overlap",
                            w[0].meta.id, w[1].meta.id
                        ),
                    ));
                }
            }
        }
        #[cfg(feature = "invariants")]
        for w in self.levels[0].windows(2) {
            assert!(
                w[0].meta.seq_min > w[1].meta.seq_max
                    || w[0].meta.entries == 0
                    || w[1].meta.entries == 0
                    || w[0].largest_user_key() < w[1].smallest_user_key()
                    || w[1].largest_user_key() < w[0].smallest_user_key(),
                "L0 seqno ranges overlap: {:?} {:?}",
                w[0],
                w[1]
            );
        }
        Ok(())
    }

    /// An edit that recreates this version from nothing (manifest snapshot).
    pub fn snapshot_edit(&self) -> VersionEdit {
        let mut e = VersionEdit::default();
        for (level, tables) in self.levels.iter().enumerate() {
            for t in tables {
                e.new_tables.push((level as u32, t.meta.clone()));
            }
        }
        for (level, c) in self.compact_cursors.iter().enumerate() {
            if !c.is_empty() {
                e.compact_cursors.push((level as u32, c.clone()));
            }
        }
        e.design_records = self
            .design_state
            .iter()
            .map(|(t, b)| (*t, b.clone()))
            .collect();
        e
    }
}

fn bad_level(level: usize) -> Error {
    Error::corruption(
        "MANIFEST",
        0,
        format!("edit names level {level}, beyond the configured levels"),
    )
}

/// An iterator over one table; an open error becomes the iterator's status.
pub fn table_iter(t: &Arc<TableHandle>, fill_cache: bool) -> Box<dyn InternalIterator> {
    match t.reader() {
        Ok(r) => r.iter(fill_cache),
        Err(e) => Box::new(EmptyIterator::with_error(e)),
    }
}

/// The tables a [`LevelIterator`] walks: its own list (a job's inputs), or
/// one level of a version it keeps alive.
enum LevelTables {
    Owned(Vec<Arc<TableHandle>>),
    Version(Arc<Version>, usize),
}

impl LevelTables {
    #[inline]
    fn list(&self) -> &[Arc<TableHandle>] {
        match self {
            LevelTables::Owned(t) => t,
            LevelTables::Version(v, level) => v.levels.get(*level).map_or(&[], |t| t.as_slice()),
        }
    }
}

/// Concatenates the disjoint, sorted tables of one level, opening each
/// table's iterator only when the cursor reaches it.
pub struct LevelIterator {
    tables: LevelTables,
    index: usize,
    cur: Option<Box<dyn InternalIterator>>,
    fill_cache: bool,
    err: Option<Error>,
}

impl LevelIterator {
    /// An iterator over `tables` (sorted by key, disjoint).
    pub fn new(tables: Vec<Arc<TableHandle>>, fill_cache: bool) -> Self {
        Self::over(LevelTables::Owned(tables), fill_cache)
    }

    /// An iterator over `level` of `version` (L1 or deeper), sharing the
    /// version's list of tables.
    pub fn of_version(version: Arc<Version>, level: usize, fill_cache: bool) -> Self {
        Self::over(LevelTables::Version(version, level), fill_cache)
    }

    fn over(tables: LevelTables, fill_cache: bool) -> Self {
        LevelIterator {
            tables,
            index: 0,
            cur: None,
            fill_cache,
            err: None,
        }
    }

    fn open(&mut self, index: usize) {
        if let Some(c) = &self.cur {
            if let Err(e) = c.status() {
                self.err.get_or_insert(e);
            }
        }
        self.index = index;
        self.cur = self
            .tables
            .list()
            .get(index)
            .map(|t| table_iter(t, self.fill_cache));
    }

    fn skip_forward(&mut self) {
        while self.cur.as_ref().is_some_and(|c| !c.valid()) {
            if let Some(Err(e)) = self.cur.as_ref().map(|c| c.status()) {
                self.err.get_or_insert(e);
                self.cur = None;
                return;
            }
            if self.index + 1 >= self.tables.list().len() {
                self.cur = None;
                return;
            }
            self.open(self.index + 1);
            if let Some(c) = &mut self.cur {
                c.seek_to_first();
            }
        }
    }

    fn skip_backward(&mut self) {
        while self.cur.as_ref().is_some_and(|c| !c.valid()) {
            if let Some(Err(e)) = self.cur.as_ref().map(|c| c.status()) {
                self.err.get_or_insert(e);
                self.cur = None;
                return;
            }
            if self.index == 0 {
                self.cur = None;
                return;
            }
            self.open(self.index - 1);
            if let Some(c) = &mut self.cur {
                c.seek_to_last();
            }
        }
    }
}

impl InternalIterator for LevelIterator {
    fn valid(&self) -> bool {
        self.cur.as_ref().is_some_and(|c| c.valid())
    }
    fn seek_to_first(&mut self) {
        self.open(0);
        if let Some(c) = &mut self.cur {
            c.seek_to_first();
        }
        self.skip_forward();
    }
    fn seek_to_last(&mut self) {
        self.open(self.tables.list().len().saturating_sub(1));
        if let Some(c) = &mut self.cur {
            c.seek_to_last();
        }
        self.skip_backward();
    }
    fn seek(&mut self, target: &[u8]) {
        let tables = self.tables.list();
        let i =
            tables.partition_point(|t| compare_internal(&t.meta.largest, target) == Ordering::Less);
        if i >= tables.len() {
            self.cur = None;
            return;
        }
        if self.index != i || self.cur.is_none() {
            self.open(i);
        }
        if let Some(c) = &mut self.cur {
            c.seek(target);
        }
        self.skip_forward();
    }
    fn next(&mut self) {
        if let Some(c) = &mut self.cur {
            c.next();
        }
        self.skip_forward();
    }
    fn prev(&mut self) {
        if let Some(c) = &mut self.cur {
            c.prev();
        }
        self.skip_backward();
    }
    fn key(&self) -> &[u8] {
        self.cur.as_ref().map_or(&[], |c| c.key())
    }
    fn value(&self) -> &[u8] {
        self.cur.as_ref().map_or(&[], |c| c.value())
    }
    fn status(&self) -> Result<()> {
        if let Some(e) = &self.err {
            return Err(e.clone());
        }
        self.cur.as_ref().map_or(Ok(()), |c| c.status())
    }
}
