//! Looking inside a database without opening it: what the `tierkv`
//! command-line tool (tierkv-cli) is built on.
//!
//! * [`read_manifest`] reads CURRENT and the live MANIFEST record by record
//!   (strictly: damage is `Error::Corruption` naming the file and offset)
//!   and replays the edits into a [`ManifestState`] of table metas, without
//!   opening a table.
//! * [`infer_design`] says which design made the database: the MANIFEST's
//!   identity record (docs/format/manifest.md §2.2), or for a database
//!   older than that record, what its tables are.
//! * [`options_for`] builds the `Options` that open an existing database:
//!   its design, region layout and level count from the manifest, the PM
//!   region's size from its file; [`options_for_repair`] the same for
//!   `Db::repair`, also when the manifest cannot be read.
//! * [`describe_pm`] / [`verify_pm`] describe and check the PM region: the
//!   page allocator, the PM WALs, and the design's own structures through
//!   [`crate::design::inspect`] (one function per design).
//!
//! Reports are [`Node`] trees of named fields, which a tool prints as text
//! or JSON without knowing any design.
//!
//! Nothing here writes: the PM region is mapped but only read, and the
//! database directory is only read. Inspecting a database that another
//! process has open shows a moment of a moving state.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::key::SeqNo;
use crate::options::{Options, Preset};
use crate::storage::alloc::PageAllocator;
use crate::storage::alloc::PageRun;
use crate::storage::mmap::MmapRegion;
use crate::storage::{FileSystem, PmRegion};
use crate::version::edit::{
    decode_current, manifest_file_name, DbIdentity, PmWal, RegionLayout, TableFormat, TableMeta,
    VersionEdit,
};
use crate::wal::{self, FileLog, PmLog};

// ------------------------------------------------------------------ reports

/// A value in a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// A number.
    Num(u64),
    /// Text.
    Text(String),
    /// A flag.
    Bool(bool),
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Field::Num(n) => write!(f, "{n}"),
            Field::Text(t) => f.write_str(t),
            Field::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// One described structure: a name, where it is, its fields, and the
/// structures inside it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    /// What it is (`"PM WAL 12"`, `"row #40"`).
    pub name: String,
    /// Its byte offset in the region or file, if it has one.
    pub offset: Option<u64>,
    /// Its fields, in order.
    pub fields: Vec<(String, Field)>,
    /// What it contains.
    pub children: Vec<Node>,
}

impl Node {
    /// A node named `name`.
    pub fn new(name: impl Into<String>) -> Node {
        Node {
            name: name.into(),
            ..Node::default()
        }
    }

    /// Sets the offset.
    pub fn at(mut self, offset: u64) -> Node {
        self.offset = Some(offset);
        self
    }

    /// Adds a numeric field.
    pub fn num(mut self, name: &str, v: u64) -> Node {
        self.fields.push((name.to_string(), Field::Num(v)));
        self
    }

    /// Adds a text field.
    pub fn text(mut self, name: &str, v: impl Into<String>) -> Node {
        self.fields.push((name.to_string(), Field::Text(v.into())));
        self
    }

    /// Adds a flag.
    pub fn flag(mut self, name: &str, v: bool) -> Node {
        self.fields.push((name.to_string(), Field::Bool(v)));
        self
    }

    /// Adds a child.
    pub fn child(mut self, c: Node) -> Node {
        self.children.push(c);
        self
    }
}

/// One check of a verification: what was checked, and the damage found.
#[derive(Debug, Clone)]
pub struct Check {
    /// What was checked (`"PM WAL 12: every record"`).
    pub what: String,
    /// `Err` names the damage (a `Corruption` names the file or region and
    /// the offset).
    pub result: Result<()>,
}

impl Check {
    /// A check of `what` with its result.
    pub fn new(what: impl Into<String>, result: Result<()>) -> Check {
        Check {
            what: what.into(),
            result,
        }
    }
}

/// Text for a user key: printable ASCII as is, other bytes `\xNN`.
pub fn escape(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

// ----------------------------------------------------------------- manifest

/// One region's state after the manifest's edits.
#[derive(Debug, Clone, Default)]
pub struct RegionState {
    /// Table metas per level (L0 newest first, deeper levels by key).
    pub levels: Vec<Vec<TableMeta>>,
    /// Design records by tag (e.g. the PM container's state).
    pub design_state: BTreeMap<u32, Vec<u8>>,
    /// The region's log number.
    pub log_number: u64,
}

/// What a manifest describes, replayed without opening a table.
#[derive(Debug, Clone, Default)]
pub struct ManifestState {
    /// One entry per region.
    pub regions: Vec<RegionState>,
    /// How keys are split into regions (a single region if none recorded).
    pub layout: RegionLayout,
    /// What created the database (empty for older databases).
    pub identity: DbIdentity,
    /// The live PM WALs.
    pub pm_wals: Vec<PmWal>,
    /// The next file number.
    pub next_file_number: u64,
    /// The largest seqno recorded.
    pub last_seqno: SeqNo,
}

impl ManifestState {
    /// Every table with its region and level.
    pub fn tables(&self) -> impl Iterator<Item = (usize, usize, &TableMeta)> {
        self.regions.iter().enumerate().flat_map(|(r, s)| {
            s.levels
                .iter()
                .enumerate()
                .flat_map(move |(l, ts)| ts.iter().map(move |t| (r, l, t)))
        })
    }

    /// WALs numbered below this hold nothing that is not in tables.
    pub fn log_number(&self) -> u64 {
        self.regions.iter().map(|r| r.log_number).min().unwrap_or(0)
    }

    /// The deepest level holding a table, if any.
    pub fn deepest_level(&self) -> Option<usize> {
        self.tables().map(|(_, l, _)| l).max()
    }

    /// Applies one edit (what `Version::apply` does to the metas).
    fn apply(&mut self, e: &VersionEdit, source: &str, offset: u64) -> Result<()> {
        let region = e.region as usize;
        if region >= self.regions.len() {
            self.regions.resize_with(region + 1, RegionState::default);
        }
        let r = &mut self.regions[region];
        for &(level, id) in &e.deleted_tables {
            let tables = r.levels.get_mut(level as usize);
            match tables.and_then(|t| t.iter().position(|m| m.id == id).map(|i| (t, i))) {
                Some((t, i)) => {
                    t.remove(i);
                }
                None => {
                    return Err(Error::corruption(
                        source,
                        offset,
                        format!(
                            "edit of region {region} deletes table {id}, which is not in L{level}"
                        ),
                    ))
                }
            }
        }
        for (level, meta) in &e.new_tables {
            let level = *level as usize;
            if r.levels.len() <= level {
                r.levels.resize_with(level + 1, Vec::new);
            }
            r.levels[level].push(meta.clone());
        }
        for (l, ts) in r.levels.iter_mut().enumerate() {
            if l == 0 {
                ts.sort_by(|a, b| b.seq_max.cmp(&a.seq_max).then(b.id.cmp(&a.id)));
            } else {
                ts.sort_by(|a, b| crate::key::compare_internal(&a.smallest, &b.smallest));
            }
        }
        for (tag, bytes) in &e.design_records {
            if bytes.is_empty() {
                r.design_state.remove(tag);
            } else {
                r.design_state.insert(*tag, bytes.clone());
            }
        }
        if let Some(n) = e.log_number {
            r.log_number = n;
        }
        if let Some(n) = e.next_file_number {
            self.next_file_number = n;
        }
        if let Some(s) = e.last_seqno {
            self.last_seqno = self.last_seqno.max(s);
        }
        self.pm_wals.extend(e.new_pm_wals.iter().copied());
        self.pm_wals
            .retain(|w| !e.deleted_pm_wals.contains(&w.log_number));
        if let Some(l) = &e.region_layout {
            self.layout = l.clone();
        }
        if let Some(id) = &e.identity {
            self.identity = id.clone();
        }
        Ok(())
    }
}

/// One manifest record: a group of edits.
#[derive(Debug, Clone)]
pub struct ManifestRecord {
    /// The record's offset in the manifest.
    pub offset: u64,
    /// Its edits (one per region it changes).
    pub edits: Vec<VersionEdit>,
}

/// A whole manifest, record by record, and the state it describes.
#[derive(Debug, Clone)]
pub struct ManifestDump {
    /// The manifest's path.
    pub path: PathBuf,
    /// Its number (what CURRENT names).
    pub number: u64,
    /// Its records, in order.
    pub records: Vec<ManifestRecord>,
    /// Where a torn last record (an edit that never took effect) starts.
    pub torn_tail: Option<u64>,
    /// The state after every record.
    pub state: ManifestState,
}

/// Reads CURRENT and the manifest it names in `dir`, strictly: damage is
/// `Error::Corruption` naming the file and the record's offset (a torn last
/// record is reported in `torn_tail`, as recovery drops it).
pub fn read_manifest(fs: &dyn FileSystem, dir: &Path) -> Result<ManifestDump> {
    let current = dir.join("CURRENT");
    if !fs.exists(&current) {
        return Err(Error::NotADatabase(format!(
            "{} has no CURRENT file",
            dir.display()
        )));
    }
    let number = decode_current(&fs.read_all(&current)?, &current.display().to_string())?;
    let path = dir.join(manifest_file_name(number));
    let source = path.display().to_string();
    let mut reader = wal::Reader::new(FileLog::new(source.clone(), fs.read_all(&path)?), number);
    let mut state = ManifestState {
        layout: RegionLayout {
            count: 1,
            boundaries: Vec::new(),
        },
        regions: vec![RegionState::default()],
        ..ManifestState::default()
    };
    let mut records = Vec::new();
    while let Some(payload) = reader.next_record()? {
        let offset = reader.last_record_offset();
        let edits = VersionEdit::decode_group(&payload, &source, offset)?;
        for e in &edits {
            state.apply(e, &source, offset)?;
        }
        records.push(ManifestRecord { offset, edits });
    }
    if records.is_empty() {
        return Err(Error::corruption(
            source,
            reader.torn_tail().unwrap_or(0),
            "manifest has no complete snapshot record",
        ));
    }
    let count = state.layout.count.max(1) as usize;
    if state.regions.len() < count {
        state.regions.resize_with(count, RegionState::default);
    }
    Ok(ManifestDump {
        path,
        number,
        records,
        torn_tail: reader.torn_tail(),
        state,
    })
}

/// What `CLOSED` (a clean close, docs/format/manifest.md §6) requires of
/// the database in `dir` whose manifest `dump` is, checked as the next open
/// checks it: `None` if there is no CLOSED naming that manifest; else
/// whether the manifest and every WAL it lists have exactly the recorded
/// length and end cleanly (`Error::Corruption` naming the file and offset).
pub fn check_closed(fs: &dyn FileSystem, dir: &Path, dump: &ManifestDump) -> Option<Result<()>> {
    use crate::version::closed::Closed;
    let closed = Closed::read(fs, dir, dump.number)?;
    let check = || -> Result<()> {
        let len = fs.file_size(&dump.path)?;
        let source = dump.path.display().to_string();
        Closed::check_log(closed.manifest.1, &source, len, dump.torn_tail)?;
        closed.check_wals(fs, dir)
    };
    Some(check())
}

// ------------------------------------------------------------------- design

/// The design of a database and how it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inference {
    /// The design, if it could be told.
    pub design: Option<Preset>,
    /// How: recorded, or what the tables suggest, or why it cannot be told.
    pub how: String,
}

/// Which design made the database whose manifest says `state`: the identity
/// record (docs/format/manifest.md §2.2), else, for databases older than
/// that record, what the tables are: RowTables in PM ⇒ `triangle` (or
/// `matrix`, when the container state records a compactor); another PM
/// format ⇒ its design; PM WALs alone ⇒ unknown (a PM design, or any
/// design with its WAL on PM); otherwise `classic` (which reads any
/// SST-only database; `vlsm` cannot be told from it).
pub fn infer_design(state: &ManifestState) -> Inference {
    if let Some(name) = &state.identity.design {
        return match Preset::from_name(name) {
            Some(p) => Inference {
                design: Some(p),
                how: "recorded in the MANIFEST".into(),
            },
            None => Inference {
                design: None,
                how: format!(
                    "the MANIFEST records design `{name}`, which this build does not know"
                ),
            },
        };
    }
    let formats: Vec<TableFormat> = state
        .tables()
        .filter(|(_, _, t)| t.tier == crate::stats::Tier::Pm)
        .map(|(_, _, t)| t.format)
        .collect();
    let found = |p: Preset, why: &str| Inference {
        design: Some(p),
        how: format!("inferred (no identity record): {why}"),
    };
    if formats.contains(&TableFormat::RowTable) {
        let matrix = state.regions.iter().any(|r| {
            r.design_state
                .get(&crate::design::container::CONTAINER_TAG)
                .and_then(|b| crate::design::container::ContainerState::decode(b).ok())
                .is_some_and(|s| s.compactor_seq > 0 || !s.first_key_index.is_empty())
        });
        return if matrix {
            found(Preset::Matrix, "RowTables in PM and a matrix compactor")
        } else {
            found(Preset::Triangle, "RowTables in PM")
        };
    }
    for (format, preset) in [
        (TableFormat::RangeTab, Preset::RangeTab),
        (TableFormat::NvTable, Preset::NvCache),
        (TableFormat::PmSkipList, Preset::Tlsm),
    ] {
        if formats.contains(&format) {
            return found(preset, &format!("{format:?} tables in PM"));
        }
    }
    if !state.pm_wals.is_empty() {
        return Inference {
            design: None,
            how: "inferred (no identity record): a WAL in PM but no PM tables; give the design"
                .into(),
        };
    }
    found(Preset::Classic, "SSTs only")
}

/// File name of the PM region inside a PM directory.
pub const PM_REGION_FILE: &str = crate::storage::pm::REGION_FILE_NAME;

/// Maps the PM region in `pm_dir` (it must exist) at its file's size, for
/// reading.
pub fn open_pm(pm_dir: &Path) -> Result<Arc<dyn PmRegion>> {
    let path = pm_dir.join(PM_REGION_FILE);
    let len = crate::storage::posix::PosixFs::new().file_size(&path)?;
    Ok(Arc::new(MmapRegion::open(&path, len, false)?))
}

/// `Options` that open the existing database in `dir`: its design (given,
/// else [`infer_design`]), its region layout, enough levels for its tables,
/// and with `pm_dir` its PM region at the region file's size (and
/// memtables of at most a quarter of it). Everything else is the design's
/// defaults ([`Options::for_design`]). Fails with
/// `InvalidOptions` when the design cannot be told or a PM design has no
/// `pm_dir`.
pub fn options_for(
    dir: &Path,
    pm_dir: Option<&Path>,
    design: Option<Preset>,
) -> Result<(Options, Inference)> {
    let fs = crate::storage::posix::PosixFs::new();
    let dump = read_manifest(&fs, dir)?;
    let inferred = infer_design(&dump.state);
    let inference = match design {
        Some(p) => Inference {
            design: Some(p),
            how: format!("given ({})", inferred.how),
        },
        None => inferred,
    };
    let Some(preset) = inference.design else {
        return Err(Error::InvalidOptions(format!(
            "cannot tell the design of {}: {}",
            dir.display(),
            inference.how
        )));
    };
    let mut o = Options::for_design(preset);
    o.create_if_missing = false;
    o.level_count = o
        .level_count
        .max(dump.state.deepest_level().map_or(0, |l| l + 1));
    o.regions = dump.state.layout.count.max(1) as usize;
    o.region_boundaries = dump.state.layout.boundaries.clone();
    let needs_pm = preset.needs_pm() || !dump.state.pm_wals.is_empty();
    match pm_dir {
        Some(p) => {
            let len = fs.file_size(&p.join(PM_REGION_FILE))?;
            o.pm_dir = Some(p.to_path_buf());
            o.pm_size_bytes = len;
            fit_memtables_to_pm(&mut o);
        }
        None if needs_pm => {
            return Err(Error::InvalidOptions(format!(
                "{} keeps data in PM (design `{preset}`): give its PM directory (`pm_dir`, \
                 `--pm-dir`)",
                dir.display()
            )))
        }
        None => {}
    }
    Ok((o, inference))
}

/// Lowers `o.memtable_size_bytes` so that the PM region of
/// `o.pm_size_bytes` takes what the design keeps of its memtables: a
/// quarter of the region (two WALs and a flushed memtable in `triangle` /
/// `matrix`, two logs and a cache in `nvcache`, the WALs and the
/// RangeTabs in `rangetab`: the benchmark's ratio at every scale), an
/// eighth in `tlsm` (two flushed memtables and two WALs). What the tool
/// opens and creates a PM database with; the library's own defaults are
/// left to the caller.
pub fn fit_memtables_to_pm(o: &mut Options) {
    let share = if o.design == Preset::Tlsm { 8 } else { 4 };
    let fit = usize::try_from(o.pm_size_bytes / share).unwrap_or(usize::MAX);
    o.memtable_size_bytes = o.memtable_size_bytes.min(fit.max(64 << 10));
}

/// `Options` for `Db::repair` of the database in `dir`: those of
/// [`options_for`] while its manifest can still be read; otherwise (a
/// damaged or lost MANIFEST or CURRENT, what repair is for) the given
/// `design`'s defaults with one region, and with `pm_dir` its PM region at
/// the region file's size. Fails with `InvalidOptions` when the design
/// cannot be told or a PM design has no `pm_dir`.
pub fn options_for_repair(
    dir: &Path,
    pm_dir: Option<&Path>,
    design: Option<Preset>,
) -> Result<(Options, Inference)> {
    let fs = crate::storage::posix::PosixFs::new();
    let unreadable = match read_manifest(&fs, dir) {
        Ok(_) => return options_for(dir, pm_dir, design),
        Err(e) => e,
    };
    let Some(preset) = design else {
        return Err(Error::InvalidOptions(format!(
            "cannot tell the design of {}: its MANIFEST cannot be read ({unreadable}); give the design (`--design`)",
            dir.display()
        )));
    };
    let mut o = Options::for_design(preset);
    o.create_if_missing = false;
    match pm_dir {
        Some(p) => {
            o.pm_dir = Some(p.to_path_buf());
            o.pm_size_bytes = fs.file_size(&p.join(PM_REGION_FILE))?;
        }
        None if preset.needs_pm() => {
            return Err(Error::InvalidOptions(format!(
                "design `{preset}` keeps data in PM: give the PM directory of {} (`pm_dir`, \
                 `--pm-dir`)",
                dir.display()
            )))
        }
        None => {}
    }
    Ok((
        o,
        Inference {
            design: Some(preset),
            how: format!("given (the MANIFEST cannot be read: {unreadable})"),
        },
    ))
}

// ----------------------------------------------------------------------- PM

fn runs_node(runs: &[PageRun]) -> String {
    runs.iter()
        .map(|r| format!("{}+{}", r.first, r.count))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The allocated runs of the bitmap, as `(first page, count)`.
fn allocated_runs(alloc: &PageAllocator) -> Vec<PageRun> {
    let mut runs: Vec<PageRun> = Vec::new();
    for p in alloc.data_start_page()..alloc.total_pages() {
        if !alloc.is_allocated(p) {
            continue;
        }
        match runs.last_mut() {
            Some(r) if r.first + r.count == p => r.count += 1,
            _ => runs.push(PageRun { first: p, count: 1 }),
        }
    }
    runs
}

/// The page runs the manifest says are live: PM tables', PM WALs' and
/// what the design owns beyond them (`design::inspect::live_runs`).
fn live_runs(
    region: &Arc<dyn PmRegion>,
    state: &ManifestState,
    design: Preset,
    page: u64,
) -> Vec<(String, PageRun)> {
    let mut live: Vec<(String, PageRun)> = state
        .tables()
        .flat_map(|(_, l, t)| {
            t.pm_pages
                .iter()
                .map(move |r| (format!("L{l} table #{}", t.id), *r))
        })
        .collect();
    live.extend(crate::design::inspect::live_runs(design, region, state));
    if crate::design::inspect::owns_pm_logs(design) {
        return live;
    }
    for w in &state.pm_wals {
        if let Ok(ext) = PmLog::extents(region.as_ref(), w.first_extent) {
            live.extend(ext.into_iter().map(|(o, len)| {
                (
                    format!("PM WAL {}", w.log_number),
                    PageRun {
                        first: o / page,
                        count: len.div_ceil(page),
                    },
                )
            }));
        }
    }
    live
}

/// Describes the PM region: the allocator (superblock, free and allocated
/// pages, and runs no live structure owns), every live PM WAL's extents,
/// and the design's structures ([`crate::design::inspect::describe_pm`]).
pub fn describe_pm(
    region: &Arc<dyn PmRegion>,
    state: &ManifestState,
    design: Preset,
) -> Result<Node> {
    let alloc = PageAllocator::open(Arc::clone(region))?;
    let page = alloc.page_size();
    let allocated = allocated_runs(&alloc);
    let live = live_runs(region, state, design, page);
    let owned = |p: u64| {
        live.iter()
            .any(|(_, r)| (r.first..r.first + r.count).contains(&p))
    };
    let unowned: Vec<PageRun> = allocated
        .iter()
        .flat_map(|r| r.first..r.first + r.count)
        .filter(|&p| !owned(p))
        .fold(Vec::new(), |mut v: Vec<PageRun>, p| {
            match v.last_mut() {
                Some(r) if r.first + r.count == p => r.count += 1,
                _ => v.push(PageRun { first: p, count: 1 }),
            }
            v
        });
    let mut root = Node::new(format!("PM region {}", region.name()))
        .num("bytes", region.len())
        .text("design", design.name());
    root = root.child(
        Node::new("page allocator")
            .at(0)
            .num("page_size_bytes", page)
            .num("pages", alloc.total_pages())
            .num("metadata_pages", alloc.data_start_page())
            .num("free_pages", alloc.free_pages())
            .num(
                "allocated_pages",
                allocated.iter().map(|r| r.count).sum::<u64>(),
            )
            .text("allocated_runs", runs_node(&allocated))
            .text("unowned_runs", runs_node(&unowned)),
    );
    let mut wals = Node::new("PM WALs");
    let engine_logs: &[PmWal] = if crate::design::inspect::owns_pm_logs(design) {
        &[]
    } else {
        &state.pm_wals
    };
    for w in engine_logs {
        let mut n = Node::new(format!("PM WAL {}", w.log_number))
            .at(w.first_extent)
            .num("log_number", w.log_number);
        match PmLog::extents(region.as_ref(), w.first_extent) {
            Ok(ext) => {
                n = n.num("extents", ext.len() as u64);
                for (o, len) in ext {
                    n = n.child(
                        Node::new("extent")
                            .at(o)
                            .num("bytes", len)
                            .num("blocks", wal::pm::blocks_per_extent(len)),
                    );
                }
            }
            Err(e) => n = n.text("error", e.to_string()),
        }
        wals = wals.child(n);
    }
    root = root.child(wals);
    for n in crate::design::inspect::describe_pm(design, region, state)? {
        root = root.child(n);
    }
    Ok(root)
}

/// Checks every checksum of the PM region: the allocator's superblock
/// (and that every live run is allocated), every live PM WAL (headers and
/// records, strictly), and the design's structures
/// ([`crate::design::inspect::verify_pm`]).
pub fn verify_pm(region: &Arc<dyn PmRegion>, state: &ManifestState, design: Preset) -> Vec<Check> {
    let mut checks = Vec::new();
    let alloc = PageAllocator::open(Arc::clone(region));
    let page = alloc.as_ref().map_or(4096, |a| a.page_size());
    if let Ok(a) = &alloc {
        let missing = live_runs(region, state, design, page)
            .into_iter()
            .find(|(_, r)| (r.first..r.first + r.count).any(|p| !a.is_allocated(p)));
        checks.push(Check::new(
            "PM allocator: every live run allocated",
            match missing {
                None => Ok(()),
                Some((owner, r)) => Err(Error::corruption(
                    region.name(),
                    a.page_offset(r.first),
                    format!(
                        "pages {}+{} of {owner} are free in the bitmap",
                        r.first, r.count
                    ),
                )),
            },
        ));
    }
    checks.insert(0, Check::new("PM allocator superblock", alloc.map(|_| ())));
    let engine_logs: &[PmWal] = if crate::design::inspect::owns_pm_logs(design) {
        &[]
    } else {
        &state.pm_wals
    };
    for w in engine_logs {
        let r = PmLog::open_for_read(Arc::clone(region), w.first_extent, w.log_number).and_then(
            |mut reader| {
                while reader.next_record()?.is_some() {}
                Ok(())
            },
        );
        checks.push(Check::new(format!("PM WAL {}", w.log_number), r));
    }
    checks.extend(crate::design::inspect::verify_pm(design, region, state));
    checks
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::design::container::{ContainerState, CONTAINER_TAG};
    use crate::key::make_internal_key;
    use crate::stats::Tier;

    fn table(id: u64, tier: Tier, format: TableFormat) -> TableMeta {
        TableMeta {
            id,
            tier,
            format,
            size_bytes: 1,
            smallest: make_internal_key(b"a", 1, crate::key::Kind::Put),
            largest: make_internal_key(b"b", 1, crate::key::Kind::Put),
            seq_min: 1,
            seq_max: 1,
            entries: 1,
            deletions: 0,
            pm_pages: Vec::new(),
        }
    }

    fn state(tables: Vec<(usize, TableMeta)>) -> ManifestState {
        let mut r = RegionState::default();
        for (l, t) in tables {
            if r.levels.len() <= l {
                r.levels.resize_with(l + 1, Vec::new);
            }
            r.levels[l].push(t);
        }
        ManifestState {
            regions: vec![r],
            ..ManifestState::default()
        }
    }

    /// Databases older than the identity record: the design from what the
    /// manifest holds.
    #[test]
    fn designs_are_inferred_without_an_identity() {
        let sst = table(1, Tier::Ssd, TableFormat::Sst);
        assert_eq!(
            infer_design(&state(vec![(1, sst.clone())])).design,
            Some(Preset::Classic)
        );
        assert_eq!(infer_design(&state(vec![])).design, Some(Preset::Classic));
        let row = table(2, Tier::Pm, TableFormat::RowTable);
        let mut s = state(vec![(0, row), (1, sst)]);
        let i = infer_design(&s);
        assert_eq!(i.design, Some(Preset::Triangle));
        assert!(i.how.starts_with("inferred"), "{}", i.how);
        let matrix = ContainerState {
            compactor_seq: 9,
            ..ContainerState::default()
        };
        s.regions[0]
            .design_state
            .insert(CONTAINER_TAG, matrix.encode());
        assert_eq!(infer_design(&s).design, Some(Preset::Matrix));
        let mut wal_only = state(vec![]);
        wal_only.pm_wals.push(PmWal {
            log_number: 3,
            first_extent: 8192,
        });
        assert_eq!(infer_design(&wal_only).design, None);
        // The record wins; an unknown name is not guessed at.
        wal_only.identity = DbIdentity::for_design(Preset::Vlsm);
        assert_eq!(infer_design(&wal_only).design, Some(Preset::Vlsm));
        wal_only.identity.design = Some("future".into());
        let i = infer_design(&wal_only);
        assert!(
            i.design.is_none() && i.how.contains("`future`"),
            "{}",
            i.how
        );
    }

    #[test]
    fn manifests_read_without_opening_the_database() {
        use crate::storage::mem::MemFs;
        let fs = MemFs::new();
        let opts = Options {
            fs: Arc::new(fs.clone()),
            memtable_size_bytes: 64 << 10,
            ..Options::for_design(Preset::Vlsm)
        };
        let db = crate::Db::open("/db", opts).unwrap();
        for i in 0..2000u32 {
            db.put(format!("k{i:05}").as_bytes(), &[1u8; 64]).unwrap();
        }
        db.flush().unwrap();
        db.close().unwrap();
        let d = read_manifest(&fs, Path::new("/db")).unwrap();
        assert!(!d.records.is_empty() && d.torn_tail.is_none());
        assert_eq!(infer_design(&d.state).design, Some(Preset::Vlsm));
        assert!(d.state.tables().count() > 0);
        assert!(d.state.tables().all(|(_, _, t)| t.tier == Tier::Ssd));
        assert!(matches!(
            read_manifest(&fs, Path::new("/nothing")),
            Err(Error::NotADatabase(_))
        ));
    }
}
