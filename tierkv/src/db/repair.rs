//! `Db::repair` (RocksDB's `RepairDB`): rebuild a database whose MANIFEST
//! is damaged or lost from the tables and logs found.
//!
//! # What it reads
//!
//! Without the MANIFEST, every source is read on its own, and seqnos order
//! what they hold:
//!
//! - every `*.sst` in the directory, scanned whole with block checksums
//!   verified (a table that fails to open is skipped; one that fails in the
//!   middle gives the entries before the failure);
//! - every `*.log` (SSD WAL), read in *salvage* mode: damage followed by
//!   valid records is skipped and reading resumes after it
//!   (`wal::Reader::salvage`);
//! - with a PM tier configured (`Options::pm_dir` or `pm_region`): the PM
//!   WAL extent chains (`PmLog::find_chains`) and the design's own
//!   structures (`design::salvage`: the RowTables of `triangle` /
//!   `matrix`, the RangeTab buffers of `rangetab`, the NVTables and logs
//!   of `nvcache`, the closed skip lists and unlinked persistent buffers
//!   of `tlsm`), found by their magic at page starts. With a page
//!   allocator that opens, only allocated pages are looked at (freed
//!   structures are skipped); without one, every page is. Entries that do
//!   not verify are skipped (a row's entries whose value extent fails its
//!   checksum: freed and reused after the container consumed it).
//!
//! # What it writes
//!
//! The merge of everything read keeps the newest entry of each user key (by
//! seqno) and drops deleted keys (nothing older remains anywhere). It is
//! written as new SSTs at the last level, each region's keys into its own
//! tables (`Options::regions`), and a new MANIFEST whose single snapshot
//! record lists them, with a log number above every WAL found, is installed
//! through CURRENT. Then every file that was read (tables, WALs, old
//! manifests) is moved to `lost/` (`crate::lost`), and a copy of the PM
//! region's bytes is kept there as `lost/pm.region`: the new database
//! references nothing in PM, so its next open gives every PM page back. A PM
//! region whose allocator cannot be opened is formatted after the copy, so
//! the database opens again.
//!
//! Order and crashes: the new tables are synced before the manifest names
//! them, and the manifest before CURRENT; the inputs move to `lost/` only
//! after CURRENT. A crash before CURRENT leaves the old state plus some new
//! tables (a second repair reads both; seqnos resolve the duplicates); a
//! crash after it leaves the repaired database with some inputs not moved
//! yet (the next open deletes them as unreferenced).
//!
//! # Limits
//!
//! Repair works from what the files and the PM region hold. A key whose
//! tombstone a compaction already dropped can reappear if an older version
//! of it survives in a file or a PM structure the version no longer
//! referenced (an obsolete table not deleted yet, a row extent the
//! container had consumed but not freed, a RangeTab buffer a merge left
//! stale, a structure over pages freed and reused but not yet
//! overwritten): the same limit as RocksDB's repairer. Everything skipped
//! is listed in [`RepairReport::problems`]; each design's own limits are
//! in its `salvage.rs` and docs/format/pm.md.
//!
//! The PM structures of each design are read by the design
//! (`design/salvage.rs`); a design whose structures repair could not read
//! would be refused with `InvalidOptions` before anything is touched (the
//! rebuilt database would reference nothing in PM, and its next open
//! would give their pages back). Every design's are read today.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::batch::WriteBatch;
pub use crate::design::salvage::SourceKind;
use crate::design::salvage::{self, Salvaged};
use crate::error::{Error, Result};
use crate::iter::{InternalIterator, MergingIterator};
use crate::key::{self, Kind, SeqNo};
use crate::lost;
use crate::memtable::MemTable;
use crate::options::{Options, Preset};
use crate::sst::{sst_file_name, ReadConfig, Table, TableBuilder, TableOptions};
use crate::stats::Tier;
use crate::storage::alloc::{read_identity, PageAllocator, PAGE_SIZE_BYTES};
use crate::storage::pm::REGION_FILE_NAME;
use crate::storage::posix::PosixFs;
use crate::storage::{open_pm_region, FileSystem, PmRegion, WriteHint};
use crate::version::closed::CLOSED_FILE_NAME;
use crate::version::edit::{manifest_file_name, DbIdentity, TableFormat, TableMeta, VersionEdit};
use crate::version::set::{file_number, install_snapshot_manifest};
use crate::wal::{FileLog, LogSource, PmLog, Reader};

use super::region::Router;

/// One source repair read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairSource {
    /// What it is.
    pub kind: SourceKind,
    /// The file name, or the region and offset.
    pub name: String,
    /// Entries (puts and deletes) read from it.
    pub entries: u64,
    /// False if part of it could not be read (see the problems).
    pub complete: bool,
}

/// What [`repair`] recovered and what it could not.
#[derive(Debug, Clone, Default)]
pub struct RepairReport {
    /// Every source read, in the order read.
    pub sources: Vec<RepairSource>,
    /// What could not be recovered or was skipped, each naming the file or
    /// region and the offset.
    pub problems: Vec<String>,
    /// Entries read from all sources.
    pub entries_read: u64,
    /// Live keys written into the new tables.
    pub keys_written: u64,
    /// The new tables (file numbers).
    pub tables_written: Vec<u64>,
    /// Bytes of the new tables.
    pub bytes_written: u64,
    /// The largest seqno found: the repaired database continues after it.
    pub last_seqno: SeqNo,
    /// The new manifest's number.
    pub manifest_number: u64,
    /// Files moved to `lost/` (names inside it).
    pub kept_in_lost: Vec<String>,
}

impl RepairReport {
    /// True if every source was read whole and nothing was skipped.
    pub fn is_complete(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for RepairReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "repair: {} sources, {} entries read, {} keys written into {} tables ({} bytes), last seqno {}, MANIFEST-{:06}",
            self.sources.len(),
            self.entries_read,
            self.keys_written,
            self.tables_written.len(),
            self.bytes_written,
            self.last_seqno,
            self.manifest_number
        )?;
        for s in &self.sources {
            writeln!(
                f,
                "  {} {}: {} entries{}",
                s.kind.name(),
                s.name,
                s.entries,
                if s.complete { "" } else { " (incomplete)" }
            )?;
        }
        if self.problems.is_empty() {
            writeln!(f, "everything found was recovered")?;
        } else {
            writeln!(f, "could not recover ({}):", self.problems.len())?;
            for p in &self.problems {
                writeln!(f, "  {p}")?;
            }
        }
        if !self.kept_in_lost.is_empty() {
            writeln!(
                f,
                "kept in {}/: {}",
                lost::LOST_DIR,
                self.kept_in_lost.join(" ")
            )?;
        }
        Ok(())
    }
}

/// Shared between a source's iterator and the report.
#[derive(Debug)]
struct SourceState {
    source: RepairSource,
    problem: Option<String>,
}

type Shared = Arc<Mutex<SourceState>>;

fn shared(kind: SourceKind, name: String) -> Shared {
    Arc::new(Mutex::new(SourceState {
        source: RepairSource {
            kind,
            name,
            entries: 0,
            complete: true,
        },
        problem: None,
    }))
}

/// A forward iterator that ends, instead of failing, at its input's first
/// error (recorded in the source's state), and counts the entries.
struct UntilError {
    inner: Box<dyn InternalIterator>,
    state: Shared,
    failed: bool,
}

impl UntilError {
    fn settle(&mut self) {
        if self.failed {
            return;
        }
        if self.inner.valid() {
            self.state.lock().source.entries += 1;
        } else if let Err(e) = self.inner.status() {
            self.failed = true;
            let mut st = self.state.lock();
            st.source.complete = false;
            st.problem = Some(format!(
                "{} {}: read ended after {} entries: {e}",
                st.source.kind.name(),
                st.source.name,
                st.source.entries
            ));
        }
    }
}

impl InternalIterator for UntilError {
    fn valid(&self) -> bool {
        !self.failed && self.inner.valid()
    }
    fn seek_to_first(&mut self) {
        self.inner.seek_to_first();
        self.settle();
    }
    fn seek_to_last(&mut self) {
        self.inner.seek_to_last();
    }
    fn seek(&mut self, target: &[u8]) {
        self.inner.seek(target);
    }
    fn next(&mut self) {
        self.inner.next();
        self.settle();
    }
    fn prev(&mut self) {
        self.inner.prev();
    }
    fn key(&self) -> &[u8] {
        self.inner.key()
    }
    fn value(&self) -> &[u8] {
        self.inner.value()
    }
    fn status(&self) -> Result<()> {
        Ok(())
    }
}

/// Everything the sources gave, before the merge.
struct Found {
    children: Vec<Box<dyn InternalIterator>>,
    states: Vec<Shared>,
    /// Files read, to move to `lost/` at the end.
    inputs: Vec<String>,
    last_seqno: SeqNo,
    problems: Vec<String>,
}

impl Found {
    fn add(&mut self, inner: Box<dyn InternalIterator>, state: Shared) {
        self.children.push(Box::new(UntilError {
            inner,
            state: Arc::clone(&state),
            failed: false,
        }));
        self.states.push(state);
    }

    /// Replays the records of a log into a memtable of its own.
    fn add_log<S: LogSource>(&mut self, mut reader: Reader<S>, state: Shared) {
        let mem = Arc::new(MemTable::new(0));
        let source = reader.source_name().to_string();
        loop {
            let record = match reader.next_record() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    self.problems.push(format!("{source}: {e}"));
                    state.lock().source.complete = false;
                    break;
                }
            };
            let offset = reader.last_record_offset();
            match WriteBatch::decode(record, &source, offset) {
                Ok(batch) => {
                    let end = batch.seqno() + u64::from(batch.count()).saturating_sub(1);
                    for (seq, r) in (batch.seqno()..).zip(batch.iter()) {
                        match r {
                            Ok((kind, k, v)) => {
                                // A damaged log may repeat a seqno; the
                                // memtable holds each internal key once.
                                if mem.get(k, seq).is_none_or(|f| f.seq != seq) {
                                    mem.add(seq, kind, k, v);
                                }
                            }
                            Err(e) => {
                                self.problems.push(format!("{source}: {e}"));
                                state.lock().source.complete = false;
                                break;
                            }
                        }
                    }
                    self.last_seqno = self.last_seqno.max(end);
                }
                Err(e) => {
                    self.problems.push(format!("{source}: {e}"));
                    state.lock().source.complete = false;
                }
            }
        }
        for (at, what) in reader.skipped() {
            self.problems.push(format!(
                "{source}: damaged record at offset {at} skipped: {what}"
            ));
            state.lock().source.complete = false;
        }
        if let Some(at) = reader.torn_tail() {
            self.problems.push(format!(
                "{source}: ends at damage at offset {at} (a torn tail, or damage with nothing valid after it)"
            ));
            state.lock().source.complete = false;
        }
        // The iterator counts the entries as the merge reads them.
        self.add(Box::new(mem.iter()), state);
    }
}

/// Rebuilds the database in `dir` (module docs). `options` are those the
/// database is opened with: the file system, the PM tier, the regions, the
/// level count and the SST size are used.
pub fn repair(dir: &Path, options: Options) -> Result<RepairReport> {
    options.validate()?;
    if !salvage::can_salvage(options.design) {
        return Err(Error::InvalidOptions(format!(
            "`Db::repair` cannot read the PM structures of design `{}` (design/salvage.rs): \
             rebuilding {} without them would give up what they hold, so nothing was changed",
            options.design,
            dir.display()
        )));
    }
    let fs = Arc::clone(&options.fs);
    let names = fs
        .list(dir)
        .map_err(|e| Error::NotADatabase(format!("{}: {e}", dir.display())))?;
    let is_db_file = |n: &String| file_number(n).is_some() || n == "CURRENT";
    if !names.iter().any(is_db_file) && !options.has_pm() {
        return Err(Error::NotADatabase(format!(
            "{} holds no tables, logs, MANIFEST or CURRENT: nothing to repair",
            dir.display()
        )));
    }
    let _lock = fs.lock(&dir.join("LOCK"))?;
    let mut found = Found {
        children: Vec::new(),
        states: Vec::new(),
        inputs: Vec::new(),
        last_seqno: 0,
        problems: Vec::new(),
    };
    let mut next_number = names
        .iter()
        .chain(
            fs.list(&dir.join(lost::LOST_DIR))
                .unwrap_or_default()
                .iter(),
        )
        .filter_map(|n| file_number(n))
        .max()
        .unwrap_or(0)
        + 1;

    let numbered = |suffix: &str| -> Vec<(u64, String)> {
        let mut v: Vec<(u64, String)> = names
            .iter()
            .filter_map(|n| {
                n.strip_suffix(suffix)
                    .and_then(|x| x.parse::<u64>().ok())
                    .map(|x| (x, n.clone()))
            })
            .collect();
        v.sort();
        v
    };
    // Tables.
    for (id, name) in numbered(".sst") {
        let path = dir.join(&name);
        let state = shared(SourceKind::Sst, name.clone());
        found.inputs.push(name.clone());
        let opened = fs.open(&path).and_then(|f| {
            Table::open(
                f,
                id,
                None,
                ReadConfig {
                    verify_checksums: true,
                    ..ReadConfig::default()
                },
            )
        });
        match opened {
            Ok(t) => {
                found.last_seqno = found.last_seqno.max(t.props().seq_max);
                found.add(Box::new(t.table_iter(false)), state);
            }
            Err(e) => {
                found
                    .problems
                    .push(format!("table {name} could not be opened: {e}"));
                state.lock().source.complete = false;
                found.states.push(state);
            }
        }
    }
    // SSD WALs.
    for (n, name) in numbered(".log") {
        let path = dir.join(&name);
        found.inputs.push(name.clone());
        let state = shared(SourceKind::Wal, name.clone());
        match fs.read_all(&path) {
            Ok(bytes) => {
                let reader =
                    Reader::new(FileLog::new(path.display().to_string(), bytes), n).salvage(true);
                found.add_log(reader, state);
            }
            Err(e) => {
                found.problems.push(format!("WAL {name}: {e}"));
                state.lock().source.complete = false;
                found.states.push(state);
            }
        }
    }
    // A seal of the old manifest means nothing for the new one.
    if names.iter().any(|n| n == CLOSED_FILE_NAME) {
        found.inputs.push(CLOSED_FILE_NAME.to_string());
    }
    // The PM tier.
    let region = pm_region(&options)?;
    let mut format_pm = false;
    if let Some(region) = &region {
        format_pm = read_pm(options.design, region, &mut found)?;
    }

    // Merge, keep the newest entry of each key, write the new tables.
    let router = Router::new(&options);
    let level = options.level_count - 1;
    let mut outputs = Outputs {
        fs: fs.as_ref(),
        dir,
        table_options: TableOptions::from_options(&options, level),
        target_bytes: options.sst_size_bytes,
        open: (0..router.count()).map(|_| None).collect(),
        done: (0..router.count()).map(|_| Vec::new()).collect(),
        next_number: &mut next_number,
    };
    let mut keys_written = 0u64;
    {
        let mut merged = MergingIterator::new(std::mem::take(&mut found.children));
        merged.seek_to_first();
        let mut last_user: Option<Vec<u8>> = None;
        while merged.valid() {
            let ikey = merged.key();
            if let Some(p) = key::parse_internal_key(ikey) {
                found.last_seqno = found.last_seqno.max(p.seq);
                if last_user.as_deref() != Some(p.user_key) {
                    last_user = Some(p.user_key.to_vec());
                    if p.kind == Kind::Put {
                        outputs.add(router.route(p.user_key), ikey, merged.value())?;
                        keys_written += 1;
                    }
                }
            }
            merged.next();
        }
        merged.status()?;
    }
    let tables = outputs.finish()?;
    fs.sync_dir(dir)?;

    // The new manifest, then CURRENT.
    let manifest_number = next_number;
    let log_number = manifest_number + 1;
    let mut group: Vec<VersionEdit> = tables
        .iter()
        .enumerate()
        .map(|(r, metas)| VersionEdit {
            region: r as u32,
            log_number: Some(log_number),
            new_tables: metas.iter().map(|m| (level as u32, m.clone())).collect(),
            ..VersionEdit::default()
        })
        .collect();
    group[0].next_file_number = Some(log_number + 1);
    group[0].last_seqno = Some(found.last_seqno);
    // The database keeps its id when the PM region names it as owner, so
    // that the region stays its own (the rebuilt manifest references
    // nothing in PM; the next open records the region again).
    group[0].identity = Some(DbIdentity {
        db_id: region
            .as_ref()
            .and_then(|r| read_identity(r.as_ref()).ok().flatten())
            .map(|id| id.owner)
            .filter(|&owner| owner != 0),
        ..DbIdentity::for_design(options.design)
    });
    if router.count() > 1 {
        group[0].region_layout = Some(router.layout());
    }
    install_snapshot_manifest(fs.as_ref(), dir, manifest_number, &group)?;

    // The inputs go to lost/.
    let mut report = RepairReport {
        last_seqno: found.last_seqno,
        manifest_number,
        keys_written,
        ..RepairReport::default()
    };
    for st in &found.states {
        let st = st.lock();
        report.entries_read += st.source.entries;
        report.sources.push(st.source.clone());
        if let Some(p) = &st.problem {
            report.problems.push(p.clone());
        }
    }
    report.problems.append(&mut found.problems);
    for m in tables.iter().flatten() {
        report.tables_written.push(m.id);
        report.bytes_written += m.size_bytes;
    }
    let new_manifest = manifest_file_name(manifest_number);
    let old_manifests = names
        .iter()
        .filter(|n| n.starts_with("MANIFEST-") && **n != new_manifest)
        .cloned();
    for name in found.inputs.into_iter().chain(old_manifests) {
        let kept = lost::keep(fs.as_ref(), dir, &name, "input of a repair")?;
        report.kept_in_lost.push(kept);
    }
    if let Some(region) = &region {
        let kept = keep_region_copy(fs.as_ref(), dir, region.as_ref())?;
        report.kept_in_lost.push(kept);
        if format_pm {
            PageAllocator::format(Arc::clone(region))?;
            report.problems.push(format!(
                "{}: the page allocator could not be opened; the region was formatted after its copy was kept in {}/{REGION_FILE_NAME}",
                region.name(),
                lost::LOST_DIR
            ));
        }
    }
    Ok(report)
}

/// The PM region of `options`, opened without creating or formatting it.
fn pm_region(options: &Options) -> Result<Option<Arc<dyn PmRegion>>> {
    if let Some(r) = &options.pm_region {
        return Ok(Some(Arc::clone(r)));
    }
    match &options.pm_dir {
        Some(pm_dir) => {
            let path = pm_dir.join(REGION_FILE_NAME);
            if !PosixFs::new().exists(&path) {
                return Err(Error::InvalidOptions(format!(
                    "`pm_dir` names {} but it holds no PM region ({REGION_FILE_NAME}): repair without `pm_dir` to rebuild from the SSD files only",
                    pm_dir.display()
                )));
            }
            Ok(Some(open_pm_region(
                &path,
                options.pm_size_bytes,
                options.pm_backend,
                false,
            )?))
        }
        None => Ok(None),
    }
}

/// Reads the PM WALs and rows of `region` into `found`; returns true if
/// the page allocator could not be opened (the region is formatted at the
/// end).
fn read_pm(design: Preset, region: &Arc<dyn PmRegion>, found: &mut Found) -> Result<bool> {
    let pages = region.len() / PAGE_SIZE_BYTES;
    let alloc = match PageAllocator::open(Arc::clone(region)) {
        Ok(a) => Some(a),
        Err(e) => {
            found.problems.push(format!(
                "{}: page allocator unreadable ({e}): every page was searched, so structures freed earlier may have been read too",
                region.name()
            ));
            None
        }
    };
    let first_page = alloc.as_ref().map_or(1, |a| a.data_start_page());
    let candidates: Vec<u64> = (first_page..pages)
        .filter(|&p| alloc.as_ref().is_none_or(|a| a.is_allocated(p)))
        .collect();
    // WALs.
    for (first, log) in PmLog::find_chains(
        region.as_ref(),
        candidates.iter().map(|p| p * PAGE_SIZE_BYTES),
    ) {
        let state = shared(
            SourceKind::PmWal,
            format!("{} log {log} at offset {first}", region.name()),
        );
        match PmLog::open_prefix_for_salvage(Arc::clone(region), first, log) {
            Ok((reader, cut)) => {
                if let Some(e) = cut {
                    found
                        .problems
                        .push(format!("PM WAL {log}: extent chain cut short: {e}"));
                    state.lock().source.complete = false;
                }
                found.add_log(reader.salvage(true), state);
            }
            Err(e) => {
                found.problems.push(format!("PM WAL {log}: {e}"));
                state.lock().source.complete = false;
                found.states.push(state);
            }
        }
    }
    // The design's own structures.
    for Salvaged {
        kind,
        name,
        entries,
        seq_max,
        problems,
    } in salvage::salvage_pm(design, region, &candidates)
    {
        let state = shared(kind, name);
        found.last_seqno = found.last_seqno.max(seq_max);
        if !problems.is_empty() {
            state.lock().source.complete = false;
            found.problems.extend(problems);
        }
        match entries {
            Some(it) => found.add(it, state),
            None => found.states.push(state),
        }
    }
    Ok(alloc.is_none())
}

/// Copies the region's bytes to `lost/pm.region` (or `pm.region.<n>` if a
/// copy is there already) through the SSD file system; returns the name.
fn keep_region_copy(fs: &dyn FileSystem, dir: &Path, region: &dyn PmRegion) -> Result<String> {
    const CHUNK: u64 = 1 << 20;
    let lost = dir.join(lost::LOST_DIR);
    fs.create_dir_all(&lost)?;
    let name = lost::free_name(fs, dir, REGION_FILE_NAME);
    let mut f = fs.create(&lost.join(&name), WriteHint::default())?;
    let mut at = 0;
    while at < region.len() {
        let n = CHUNK.min(region.len() - at);
        f.append(region.slice(at, n as usize)?)?;
        at += n;
    }
    f.sync()?;
    drop(f);
    fs.sync_dir(&lost)?;
    Ok(name)
}

/// The new tables, one stream per region.
struct Outputs<'a> {
    fs: &'a dyn FileSystem,
    dir: &'a Path,
    table_options: TableOptions,
    target_bytes: u64,
    open: Vec<Option<(u64, TableBuilder)>>,
    done: Vec<Vec<TableMeta>>,
    next_number: &'a mut u64,
}

impl Outputs<'_> {
    fn add(&mut self, region: usize, ikey: &[u8], value: &[u8]) -> Result<()> {
        if self.open[region]
            .as_ref()
            .is_some_and(|(_, b)| b.estimated_size() >= self.target_bytes)
        {
            self.close(region)?;
        }
        if self.open[region].is_none() {
            let id = *self.next_number;
            *self.next_number += 1;
            let file = self
                .fs
                .create(&self.dir.join(sst_file_name(id)), WriteHint::default())?;
            self.open[region] = Some((id, TableBuilder::new(file, self.table_options)));
        }
        if let Some((_, b)) = &mut self.open[region] {
            b.add(ikey, value)?;
        }
        Ok(())
    }

    fn close(&mut self, region: usize) -> Result<()> {
        if let Some((id, b)) = self.open[region].take() {
            let p = b.finish()?;
            self.done[region].push(TableMeta {
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

    fn finish(mut self) -> Result<Vec<Vec<TableMeta>>> {
        for r in 0..self.open.len() {
            self.close(r)?;
        }
        Ok(self.done)
    }
}
