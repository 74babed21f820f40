//! Compaction machinery shared by the designs: the job environment, the
//! merge that drops shadowed versions and dead tombstones, and SST cutting.
//!
//! Dropping rules (leveldb's, with snapshots):
//! 1. An entry is dropped if a newer entry of the same user key exists whose
//!    seqno is `<=` the smallest live snapshot (no reader can see past it).
//! 2. A tombstone is dropped if its seqno is `<=` the smallest snapshot and
//!    no level below the output level can hold the key (it is at its base
//!    level): tombstones disappear only at the last level that has the key.
//!
//! Cutting: a [`Cutter`] decides, before the first entry of each user key,
//! whether the open output table closes first. [`merge_to_ssts`] picks the
//! cutter from the options ([`cutter_for`]):
//! * [`SizeCutter`] (the default, leveldb's rule): close at the target size,
//!   or when the table already overlaps more than
//!   `MAX_GRANDPARENT_OVERLAP_FACTOR` × target bytes of the next level, so
//!   no future compaction of it drags in an oversized piece of that level;
//! * [`vsst::VsstCutter`] for L1 output when `Options::vsst_enabled`:
//!   vLSM's overlap-aware vSSTs (see that module).

pub mod vsst;

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::key::{self, compare_internal, Kind, SeqNo};
use crate::options::Options;
use crate::sst::{TableBuilder, TableOptions};
use crate::stats::{StatsRecorder, Tier};
use crate::storage::limiter::{BackgroundLimiter, Throttled};
use crate::storage::{FileSystem, WriteHint};
use crate::version::edit::{TableFormat, TableMeta};
use crate::version::set::VersionSet;
use crate::version::{TableHandle, Version};

/// Outputs may overlap at most this many target sizes of the next level.
pub const MAX_GRANDPARENT_OVERLAP_FACTOR: u64 = 10;

/// What a flush or compaction job may use.
pub struct JobEnv<'a> {
    /// The options the database was opened with.
    pub opts: &'a Options,
    /// The SSD file system.
    pub fs: &'a Arc<dyn FileSystem>,
    /// The database directory.
    pub dir: &'a Path,
    /// The version set (file numbers).
    pub versions: &'a VersionSet,
    /// Stats.
    pub stats: &'a StatsRecorder,
    /// Smallest seqno any live snapshot reads at (or the last seqno).
    pub smallest_snapshot: SeqNo,
    /// The version the job was picked from.
    pub version: Arc<Version>,
    /// Admits compaction output into the SSD levels
    /// (`Options::background_io_autotune`); `None`: no limit.
    pub limiter: Option<&'a Arc<BackgroundLimiter>>,
}

impl JobEnv<'_> {
    /// SST builder settings from the options, for tables of `level`.
    pub fn table_options(&self, level: usize) -> TableOptions {
        TableOptions::from_options(self.opts, level)
    }
}

/// How the merge writes its output.
pub struct OutputSpec<'a> {
    /// Level the outputs go to.
    pub level: usize,
    /// Target size of one output table (`u64::MAX`: one table).
    pub target_size_bytes: u64,
    /// Tables of the level below the output, for cutting.
    pub grandparents: &'a [Arc<TableHandle>],
    /// May tombstones be dropped (rule 2 still checks deeper levels)?
    pub may_drop_tombstones: bool,
}

/// Where a merge cuts its output into tables.
///
/// The merge calls [`Cutter::cut_before`] once per user key, before its
/// first (newest) entry is written, in ascending key order, and
/// [`Cutter::finish`] once at the end. A cutter sees only keys that are
/// written (dropped entries never reach it). It is a pure policy: it does
/// no I/O, so it can be tested on constructed layouts.
pub trait Cutter {
    /// `ikey` is the first entry of the next user key; `open_bytes` the
    /// estimated size of the table being written, `None` if none is open
    /// (the key will start one). Returns true to close the open table
    /// first; the key then starts the next table.
    fn cut_before(&mut self, ikey: &[u8], open_bytes: Option<u64>) -> bool;

    /// The input ended; `open_bytes` is the size of the last table, if any.
    fn finish(&mut self, open_bytes: Option<u64>) {
        let _ = open_bytes;
    }
}

/// leveldb's rule: close at `target_size_bytes`, or once the open table
/// overlaps more than `MAX_GRANDPARENT_OVERLAP_FACTOR` × target bytes of
/// the grandparent level.
pub struct SizeCutter<'a> {
    target_size_bytes: u64,
    grandparents: &'a [Arc<TableHandle>],
    gp_index: usize,
    gp_overlap_bytes: u64,
    gp_seen_key: bool,
}

impl<'a> SizeCutter<'a> {
    /// A cutter for tables of `target_size_bytes` over `grandparents`
    /// (sorted, disjoint).
    pub fn new(target_size_bytes: u64, grandparents: &'a [Arc<TableHandle>]) -> Self {
        SizeCutter {
            target_size_bytes,
            grandparents,
            gp_index: 0,
            gp_overlap_bytes: 0,
            gp_seen_key: false,
        }
    }
}

impl Cutter for SizeCutter<'_> {
    fn cut_before(&mut self, ikey: &[u8], open_bytes: Option<u64>) -> bool {
        let gps = self.grandparents;
        while self.gp_index < gps.len()
            && compare_internal(ikey, &gps[self.gp_index].meta.largest).is_gt()
        {
            if self.gp_seen_key {
                self.gp_overlap_bytes += gps[self.gp_index].meta.size_bytes;
            }
            self.gp_index += 1;
        }
        self.gp_seen_key = true;
        let Some(open_bytes) = open_bytes else {
            return false;
        };
        let limit = self
            .target_size_bytes
            .saturating_mul(MAX_GRANDPARENT_OVERLAP_FACTOR);
        if self.gp_overlap_bytes > limit {
            self.gp_overlap_bytes = 0;
            return true;
        }
        open_bytes >= self.target_size_bytes
    }
}

/// The cutter the options ask for at `spec.level`: vSSTs over the next
/// level of `env.version` for L1 output when `Options::vsst_enabled`, the
/// size/grandparent rule otherwise.
pub fn cutter_for<'a>(env: &'a JobEnv<'_>, spec: &OutputSpec<'a>) -> Box<dyn Cutter + 'a> {
    if spec.level == 1 && env.opts.vsst_enabled() {
        let next: &'a [Arc<TableHandle>] = env.version.levels.get(2).map_or(&[], |l| l.as_slice());
        Box::new(vsst::VsstCutter::new(
            next,
            vsst::VsstParams::new(spec.target_size_bytes, env.opts.vlsm_growth_factor),
        ))
    } else {
        Box::new(SizeCutter::new(spec.target_size_bytes, spec.grandparents))
    }
}

/// Writes SSTs for a merged stream, cutting where the cutter says.
struct Outputs<'a, 'e> {
    env: &'a JobEnv<'e>,
    /// The level the tables go to (it decides their compression).
    level: usize,
    cutter: &'a mut dyn Cutter,
    done: Vec<TableMeta>,
    /// Files of `done` not synced yet (synced together at the end).
    unsynced: Vec<Box<dyn crate::storage::WritableFile>>,
    cur: Option<(u64, TableBuilder)>,
}

impl<'a, 'e> Outputs<'a, 'e> {
    fn add(&mut self, ikey: &[u8], value: &[u8], new_user_key: bool) -> Result<()> {
        if new_user_key {
            let open = self.cur.as_ref().map(|(_, b)| b.estimated_size());
            if self.cutter.cut_before(ikey, open) && self.cur.is_some() {
                self.finish_current()?;
            }
        }
        if self.cur.is_none() {
            let id = self.env.versions.new_file_number();
            let path = self.env.dir.join(crate::sst::sst_file_name(id));
            let hint = WriteHint {
                direct: self.env.opts.use_direct_io_for_flush_and_compaction,
                bytes_per_sync: self.env.opts.bytes_per_sync,
            };
            let mut file =
                self.env
                    .versions
                    .ctx()
                    .recycler
                    .create(self.env.fs.as_ref(), &path, hint)?;
            // L0 is a flush's target: writers wait on it, so it is not
            // limited.
            if let Some(l) = self.env.limiter.filter(|_| self.level >= 1) {
                file = Box::new(Throttled::new(file, Arc::clone(l)));
            }
            self.cur = Some((
                id,
                TableBuilder::new(file, self.env.table_options(self.level)),
            ));
        }
        if let Some((_, b)) = &mut self.cur {
            b.add(ikey, value)?;
        }
        Ok(())
    }

    fn finish_current(&mut self) -> Result<()> {
        if let Some((id, b)) = self.cur.take() {
            let (p, file) = b.finish_unsynced()?;
            self.unsynced.push(file);
            self.done.push(TableMeta {
                id,
                tier: Tier::Ssd,
                format: TableFormat::Sst,
                size_bytes: p.file_size_bytes,
                smallest: p.smallest,
                largest: p.largest,
                seq_min: p.seq_min,
                seq_max: p.seq_max,
                entries: p.entries,
                deletions: p.deletions,
                pm_pages: Vec::new(),
            });
        }
        Ok(())
    }

    /// Removes every file this job created (on failure).
    fn abandon(&mut self) {
        self.unsynced.clear();
        if let Some((id, b)) = self.cur.take() {
            b.abandon();
            let _ = self
                .env
                .fs
                .remove(&self.env.dir.join(crate::sst::sst_file_name(id)));
        }
        for m in self.done.drain(..) {
            let _ = self
                .env
                .fs
                .remove(&self.env.dir.join(crate::sst::sst_file_name(m.id)));
        }
    }
}

/// True if no level below `level` in `v` can contain `user_key`.
/// `cursor[l]` is a per-level position hint for keys arriving in order.
fn is_base_level_for_key(v: &Version, level: usize, user_key: &[u8], cursor: &mut [usize]) -> bool {
    for (tables, c) in v.levels.iter().zip(cursor.iter_mut()).skip(level + 1) {
        while *c < tables.len() && tables[*c].largest_user_key() < user_key {
            *c += 1;
        }
        if *c < tables.len() && tables[*c].smallest_user_key() <= user_key {
            return false;
        }
    }
    true
}

/// Merges `input` (positioned by this function) into SSTs per `spec`,
/// applying the dropping rules. Files are synced and the directory synced
/// before returning, so the caller may reference them in the manifest.
pub fn merge_to_ssts(
    env: &JobEnv<'_>,
    input: &mut dyn InternalIterator,
    spec: &OutputSpec<'_>,
) -> Result<Vec<TableMeta>> {
    let mut cutter = cutter_for(env, spec);
    merge_to_ssts_with(env, input, spec, cutter.as_mut())
}

/// [`merge_to_ssts`] with an explicit cutting policy (`spec.target_size_bytes`
/// and `spec.grandparents` are then only the cutter's business).
pub fn merge_to_ssts_with(
    env: &JobEnv<'_>,
    input: &mut dyn InternalIterator,
    spec: &OutputSpec<'_>,
    cutter: &mut dyn Cutter,
) -> Result<Vec<TableMeta>> {
    let mut out = Outputs {
        env,
        level: spec.level,
        cutter,
        done: Vec::new(),
        unsynced: Vec::new(),
        cur: None,
    };
    match merge_loop(env, input, spec, &mut out) {
        Ok(()) => Ok(out.done),
        Err(e) => {
            out.abandon();
            Err(e)
        }
    }
}

fn merge_loop(
    env: &JobEnv<'_>,
    input: &mut dyn InternalIterator,
    spec: &OutputSpec<'_>,
    out: &mut Outputs<'_, '_>,
) -> Result<()> {
    let mut cursor = vec![0usize; env.version.level_count()];
    let mut cur_user_key: Vec<u8> = Vec::new();
    let mut has_cur = false;
    let mut last_seq_for_key = SeqNo::MAX;
    input.seek_to_first();
    while input.valid() {
        let ikey = input.key();
        let p = key::parse_internal_key(ikey)
            .ok_or_else(|| Error::corruption("compaction input", 0, "malformed internal key"))?;
        let new_user_key = !has_cur || p.user_key != cur_user_key.as_slice();
        if new_user_key {
            cur_user_key.clear();
            cur_user_key.extend_from_slice(p.user_key);
            has_cur = true;
            last_seq_for_key = SeqNo::MAX;
        }
        let drop = if last_seq_for_key <= env.smallest_snapshot {
            true // rule 1: shadowed by a newer entry every reader sees
        } else {
            p.kind == Kind::Delete
                && p.seq <= env.smallest_snapshot
                && spec.may_drop_tombstones
                && is_base_level_for_key(&env.version, spec.level, p.user_key, &mut cursor)
        };
        last_seq_for_key = p.seq;
        if !drop {
            out.add(ikey, input.value(), new_user_key)?;
        }
        input.next();
    }
    input.status()?;
    let open = out.cur.as_ref().map(|(_, b)| b.estimated_size());
    out.cutter.finish(open);
    out.finish_current()?;
    sync_all(&mut out.unsynced)?;
    out.unsynced.clear();
    if !out.done.is_empty() {
        env.fs.sync_dir(env.dir)?;
    }
    Ok(())
}

/// One key range of a merge's input: the entries of `inner` whose user
/// keys lie in `[lo, hi)` (`hi` `None`: to the end). Forward only — a merge
/// reads it once from `seek_to_first`; `seek_to_last` and `prev` leave it
/// invalid. Subcompactions ([`crate::design::leveled::run_merge`]) and the
/// PM containers' side merges cut their input with it.
pub struct KeyRange<I> {
    inner: I,
    lo: Vec<u8>,
    hi: Option<Vec<u8>>,
    valid: bool,
}

impl<I: InternalIterator> KeyRange<I> {
    /// The entries of `inner` in `[lo, hi)` (an empty `lo`: from the start).
    pub fn new(inner: I, lo: Vec<u8>, hi: Option<Vec<u8>>) -> KeyRange<I> {
        KeyRange {
            inner,
            lo,
            hi,
            valid: false,
        }
    }

    /// Moves the range to `[lo, hi)`; the next `seek_to_first` starts it.
    pub fn set_range(&mut self, lo: Vec<u8>, hi: Option<Vec<u8>>) {
        self.lo = lo;
        self.hi = hi;
        self.valid = false;
    }

    fn check(&mut self) {
        self.valid = self.inner.valid()
            && self
                .hi
                .as_deref()
                .is_none_or(|h| key::user_key(self.inner.key()) < h);
    }
}

impl<I: InternalIterator> InternalIterator for KeyRange<I> {
    fn valid(&self) -> bool {
        self.valid
    }
    fn seek_to_first(&mut self) {
        let t = key::seek_key(&self.lo, key::MAX_SEQNO);
        self.inner.seek(&t);
        self.check();
    }
    fn seek_to_last(&mut self) {
        self.valid = false;
    }
    fn seek(&mut self, target: &[u8]) {
        if key::user_key(target) < self.lo.as_slice() {
            self.seek_to_first();
        } else {
            self.inner.seek(target);
            self.check();
        }
    }
    fn next(&mut self) {
        self.inner.next();
        self.check();
    }
    fn prev(&mut self) {
        self.valid = false;
    }
    fn key(&self) -> &[u8] {
        self.inner.key()
    }
    fn value(&self) -> &[u8] {
        self.inner.value()
    }
    fn status(&self) -> Result<()> {
        self.inner.status()
    }
}

/// The key ranges `[lo, hi)` between ascending `cuts`: from the start
/// (an empty `lo`) to the first cut, …, from the last cut to the end
/// (`hi` `None`) — the parts [`run_parts`] runs, each read through a
/// [`KeyRange`].
pub fn ranges_between(cuts: Vec<Vec<u8>>) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut lo = Vec::new();
    for c in cuts {
        out.push((std::mem::replace(&mut lo, c.clone()), Some(c)));
    }
    out.push((lo, None));
    out
}

/// Runs `parts` side by side, one scoped thread each (marked as background
/// work for the I/O limiter; a single part runs on the calling thread),
/// and returns their results in the parts' order. A part that panics is
/// an error of that part. Every design that cuts a job into key ranges
/// runs them through here ([`run_parts`] for SST outputs).
pub fn side_by_side<T, F>(parts: Vec<F>) -> Vec<Result<T>>
where
    T: Send,
    F: FnOnce() -> Result<T> + Send,
{
    if parts.len() <= 1 {
        return parts.into_iter().map(|part| part()).collect();
    }
    let cpu = crate::sched::current();
    std::thread::scope(|sc| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|part| {
                let cpu = cpu.clone();
                sc.spawn(move || {
                    crate::storage::limiter::mark_background();
                    let _cpu = cpu.as_ref().map(crate::sched::join);
                    part()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::InvalidArgument(
                        "a merge part's thread panicked".into(),
                    ))
                })
            })
            .collect()
    })
}

/// Runs the parts of one merge — each writing the tables of its own key
/// range — side by side ([`side_by_side`]) and returns their outputs in
/// the parts' order. If any part fails, every table every part wrote is
/// removed and the first error is returned: the job then leaves nothing
/// behind, as a failed single merge does.
pub fn run_parts<F>(env: &JobEnv<'_>, parts: Vec<F>) -> Result<Vec<TableMeta>>
where
    F: FnOnce() -> Result<Vec<TableMeta>> + Send,
{
    let results = side_by_side(parts);
    let mut outputs: Vec<TableMeta> = Vec::new();
    let mut first_err: Option<Error> = None;
    for r in results {
        match r {
            Ok(ms) => outputs.extend(ms),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        for m in &outputs {
            let _ = env
                .fs
                .remove(&env.dir.join(crate::sst::sst_file_name(m.id)));
        }
        return Err(e);
    }
    Ok(outputs)
}

/// Syncs the finished outputs of one merge, up to `SYNC_THREADS` at a time:
/// a merge cutting many small tables (vLSM's vSSTs, a range-partitioned
/// flush) waits for one round of device flushes instead of one per table.
fn sync_all(files: &mut [Box<dyn crate::storage::WritableFile>]) -> Result<()> {
    const SYNC_THREADS: usize = 4;
    if files.len() <= 1 {
        return files.iter_mut().try_for_each(|f| f.sync());
    }
    let per = files.len().div_ceil(SYNC_THREADS);
    std::thread::scope(|s| {
        let handles: Vec<_> = files
            .chunks_mut(per)
            .map(|chunk| s.spawn(move || chunk.iter_mut().try_for_each(|f| f.sync())))
            .collect();
        let mut first: Result<()> = Ok(());
        for h in handles {
            let r = h.join().unwrap_or_else(|_| {
                Err(Error::io(
                    "sync compaction output",
                    std::io::Error::other("sync thread panicked"),
                ))
            });
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}
