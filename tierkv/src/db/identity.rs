//! Who a database is, checked at open before anything is written.
//!
//! The MANIFEST's identity record (docs/format/manifest.md §2.2) names the
//! design that made the database, the database's random id, and the PM
//! region that holds its PM data (the region's id and size). The region's
//! identity block (docs/format/pm.md §1) holds the region's id and the id
//! of the database that owns it. [`admit`] compares them with the options
//! before open writes anything — no new log, no format, no MANIFEST record
//! — and refuses with a message that names the cause:
//!
//! * **Design.** Designs are grouped by where they keep data in PM
//!   ([`pm_layout`]): `classic` and `vlsm` keep none; `triangle` and
//!   `matrix` share the PM container; `rangetab`, `nvcache` and `tlsm` each
//!   have their own. A design opens a database of its own layout as it is
//!   ([`Switch::Compatible`]); a PM design opens an SSD-only database as an
//!   upgrade ([`Switch::Upgrade`]: its SSTs stay, its PM tier starts
//!   empty); a database whose data sits in one PM layout is refused under a
//!   design of another, naming both, until `Db::migrate` has moved its PM
//!   data to SSD ([`Switch::NeedsMigration`], `db/migrate.rs`).
//! * **PM region.** A region missing (or replaced by a blank one) where the
//!   MANIFEST references PM data is "the PM tier is gone", naming what it
//!   held and what SSD still holds; a region owned by another database, or
//!   not the region the MANIFEST names while it references PM data, is
//!   refused naming both ids; a region file of the wrong size is refused
//!   where it is mapped (`storage::open_pm_region`).
//! * **Sharing.** The PM directory is locked ([`PmLock`]) before anything is
//!   read from it, so a second database is refused naming the holder.
//!
//! What open records, once the checks passed: the identity with the design
//! it opened as, the database id (new for a database older than ids), and
//! the region it uses — in the MANIFEST first, and only then the region's
//! owner word ([`bind`]). A crash between the two leaves a region with no
//! owner that the MANIFEST names, which the next open binds; never a region
//! that names an owner the MANIFEST does not know.
//!
//! # The upgrade
//!
//! The PM designs own levels above the last one (the PM container or the
//! RangeTabs at L0; `nvcache` and `tlsm` size their PM levels from the
//! region at open), and read an SST there as their own structure. The only
//! level every design reads as plain SSTs is the last, so an SSD-only
//! database with tables above it is first compacted down under its own
//! design ([`upgrade_from`]; `Db::open` does it), an ordinary crash-safe
//! compaction. RocksDB asks the same of a change of compaction style.

use std::path::Path;

use crate::error::{Error, Result};
use crate::inspect::{self, ManifestState};
use crate::options::{Options, Preset};
use crate::stats::Tier;
use crate::storage::alloc::{random_db_id, read_identity, RegionIdentity};
use crate::storage::pm::{self, PmLock, PmTier};
use crate::storage::FileSystem;
use crate::version::edit::{DbIdentity, PmRegionRef};

/// Where a design keeps its data in PM (`None`: it keeps none). Designs
/// with the same layout open each other's databases.
pub fn pm_layout(design: Preset) -> Option<&'static str> {
    match design {
        Preset::Classic | Preset::Vlsm => None,
        Preset::Triangle | Preset::Matrix => Some("a PM container of RowTables"),
        Preset::RangeTab => Some("RangeTabs"),
        Preset::NvCache => Some("NVTables"),
        Preset::Tlsm => Some("persistent skip lists"),
    }
}

/// How a database made by one design opens under another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// The same design, or one with the same PM layout: opens as it is.
    Compatible,
    /// An SSD-only database under a PM design: its SSTs stay (moved to the
    /// last level first if any is above it), its PM tier starts empty.
    Upgrade,
    /// PM data under a design of another layout: refused at open;
    /// `Db::migrate` moves the PM data to SSD first.
    NeedsMigration,
}

/// How a database made by `from` opens under `to`.
pub fn switch(from: Preset, to: Preset) -> Switch {
    if pm_layout(from) == pm_layout(to) {
        Switch::Compatible
    } else if pm_layout(from).is_none() {
        Switch::Upgrade
    } else {
        Switch::NeedsMigration
    }
}

/// What a MANIFEST says lives in PM, and what lives on SSD.
#[derive(Debug, Default)]
pub(super) struct PmData {
    wals: Vec<u64>,
    /// `(level, id, bytes)` of every PM table.
    tables: Vec<(usize, u64, u64)>,
    /// Design records of a PM design (structures it keeps in PM besides
    /// its tables, e.g. RangeKV's buffers).
    design_records: usize,
    ssd_tables: usize,
    ssd_bytes: u64,
}

impl PmData {
    pub(super) fn of(s: &ManifestState) -> PmData {
        let mut d = PmData {
            wals: s.pm_wals.iter().map(|w| w.log_number).collect(),
            ..PmData::default()
        };
        let pm_design = inspect::infer_design(s)
            .design
            .is_some_and(|p| pm_layout(p).is_some());
        if pm_design {
            d.design_records = s.regions.iter().map(|r| r.design_state.len()).sum();
        }
        for (_, level, t) in s.tables() {
            match t.tier {
                Tier::Pm => d.tables.push((level, t.id, t.size_bytes)),
                _ => {
                    d.ssd_tables += 1;
                    d.ssd_bytes += t.size_bytes;
                }
            }
        }
        d
    }

    pub(super) fn is_empty(&self) -> bool {
        self.wals.is_empty() && self.tables.is_empty() && self.design_records == 0
    }

    /// "WAL 15 and 3 tables of 2097152 bytes (L0 #12 1048576 bytes, …)".
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.wals.is_empty() {
            let n: Vec<String> = self.wals.iter().map(u64::to_string).collect();
            parts.push(format!(
                "WAL{} {}",
                if n.len() > 1 { "s" } else { "" },
                n.join(", ")
            ));
        }
        if !self.tables.is_empty() {
            let total: u64 = self.tables.iter().map(|t| t.2).sum();
            let shown: Vec<String> = self
                .tables
                .iter()
                .take(8)
                .map(|(l, id, b)| format!("L{l} #{id} {b} bytes"))
                .collect();
            let more = self.tables.len().saturating_sub(shown.len());
            parts.push(format!(
                "{} table{} of {total} bytes ({}{})",
                self.tables.len(),
                if self.tables.len() > 1 { "s" } else { "" },
                shown.join(", "),
                if more > 0 {
                    format!(", and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        if self.design_records > 0 {
            parts.push(format!("{} design records", self.design_records));
        }
        parts.join(" and ")
    }
}

/// What open may go on with: the identity to record and the PM lock held.
pub(super) struct Admitted {
    /// What it records from this open on: the design opened as, the
    /// database id; `pm_region` is filled by [`bind_ref`] once the tier is
    /// open.
    pub identity: DbIdentity,
    /// The PM directory's lock (none without `pm_dir`).
    pub pm_lock: Option<PmLock>,
    /// Whether the MANIFEST references anything in PM (a database whose
    /// MANIFEST could not be read counts as referencing): only then is a
    /// region that does not open never formatted (`PmTier::open`).
    pub pm_referenced: bool,
}

/// The checks of the module doc, for the database in `dir` opened with
/// `options` (`exists`: it has a CURRENT). Reads only (the PM directory's
/// lock file aside). A MANIFEST that cannot be read is left to recovery,
/// which reports its damage.
pub(super) fn admit(
    fs: &dyn FileSystem,
    dir: &Path,
    exists: bool,
    options: &Options,
) -> Result<Admitted> {
    let pm_lock = match (&options.pm_region, &options.pm_dir) {
        (None, Some(pm_dir)) => Some(PmLock::acquire(pm_dir, dir)?),
        _ => None,
    };
    let state = if exists {
        inspect::read_manifest(fs, dir).ok().map(|d| d.state)
    } else {
        None
    };
    let recorded = state
        .as_ref()
        .map(|s| s.identity.clone())
        .unwrap_or_default();
    let pm_data = state.as_ref().map(PmData::of).unwrap_or_default();
    let pm_referenced = match &state {
        Some(_) => !pm_data.is_empty(),
        None => exists,
    };
    match &state {
        Some(s) => {
            check_design(dir, s, options, false)?;
            check_region(dir, options, &recorded, &pm_data)?;
        }
        // A new database: only the region's owner is checked.
        None if !exists => check_region(dir, options, &recorded, &pm_data)?,
        // A MANIFEST that cannot be read says nothing of who the database
        // is; recovery reports its damage (and refuses before writing).
        None => {}
    }
    let db_id = match recorded.db_id {
        Some(id) => id,
        None => random_db_id()?,
    };
    Ok(Admitted {
        identity: DbIdentity {
            design: Some(options.design.name().to_string()),
            db_id: Some(db_id),
            pm_region: None,
        },
        pm_lock,
        pm_referenced,
    })
}

/// The design an SSD-only database in `dir` must be compacted under before
/// `options.design` (a PM design) opens it: `Some` when it has tables above
/// the last level (module doc, "The upgrade"). Runs the checks [`admit`]
/// will run, so that an open refused for another cause changes nothing.
pub(super) fn upgrade_from(
    fs: &dyn FileSystem,
    dir: &Path,
    options: &Options,
) -> Result<Option<Preset>> {
    if !fs.exists(&dir.join("CURRENT")) {
        return Ok(None);
    }
    let Ok(dump) = inspect::read_manifest(fs, dir) else {
        return Ok(None);
    };
    let s = &dump.state;
    let Some(from) = inspect::infer_design(s).design else {
        return Ok(None);
    };
    if switch(from, options.design) != Switch::Upgrade || tables_above_last(s, options).is_none() {
        return Ok(None);
    }
    check_design(dir, s, options, true)?;
    check_region(dir, options, &s.identity, &PmData::of(s))?;
    Ok(Some(from))
}

/// The first level above the last that holds a table.
fn tables_above_last(s: &ManifestState, options: &Options) -> Option<usize> {
    let last = options.level_count.saturating_sub(1);
    s.tables().map(|(_, l, _)| l).filter(|&l| l < last).min()
}

/// Refuses a design that cannot read what the database holds.
/// `upgrading`: the upgrade compaction is about to run (tables above the
/// last level are expected).
fn check_design(dir: &Path, s: &ManifestState, options: &Options, upgrading: bool) -> Result<()> {
    let to = options.design;
    let inference = inspect::infer_design(s);
    let from = match inference.design {
        Some(p) => p,
        None if s.identity.design.is_some() => {
            return Err(Error::InvalidOptions(format!(
                "{}: {}; refusing to open it as `{to}`",
                dir.display(),
                inference.how
            )))
        }
        // An older database with only a WAL in PM: nothing tells its
        // design; the WAL's placement is checked at recovery.
        None => return Ok(()),
    };
    match switch(from, to) {
        Switch::Compatible => Ok(()),
        Switch::Upgrade => match tables_above_last(s, options) {
            Some(l) if !upgrading => Err(Error::InvalidOptions(format!(
                "{} was made by design `{from}` and has SSTs in L{l}, a level design `{to}` \
                 keeps in PM; Db::open moves them to the last level (L{}) under `{from}` first \
                 — open it with Db::open",
                dir.display(),
                options.level_count.saturating_sub(1)
            ))),
            _ => Ok(()),
        },
        Switch::NeedsMigration => {
            let data = PmData::of(s);
            let holds = if data.is_empty() {
                String::new()
            } else {
                format!(" (it holds {} in PM)", data.describe())
            };
            let reads = match pm_layout(to) {
                None => "keeps no data in PM".to_string(),
                Some(l) => format!("keeps {l} there"),
            };
            Err(Error::InvalidOptions(format!(
                "{} was made by design `{from}`, which keeps {} in PM{holds}; design `{to}` {reads} \
                 and cannot read it. Open it as `{from}`, or move it to `{to}` with \
                 Db::migrate (`tierkv migrate --to {to}`), which first moves its PM data to SSD. \
                 Nothing was changed.",
                dir.display(),
                pm_layout(from).unwrap_or("its data"),
            )))
        }
    }
}

/// Refuses a PM region that is gone, foreign or shared (module doc).
fn check_region(
    dir: &Path,
    options: &Options,
    recorded: &DbIdentity,
    pm_data: &PmData,
) -> Result<()> {
    let (name, found) = match (&options.pm_region, &options.pm_dir) {
        (Some(r), _) => (r.name().to_string(), Some(read_identity(r.as_ref())?)),
        (None, Some(pm_dir)) => (
            pm_dir.join(pm::REGION_FILE_NAME).display().to_string(),
            pm::probe_dir(pm_dir)?,
        ),
        (None, None) => return Ok(()),
    };
    let referenced = !pm_data.is_empty();
    let gone = |how: String| {
        Error::InvalidOptions(format!(
            "the PM tier of {} is gone: {name} {how}, but the database keeps data there: {}. \
             (A PM tier under /dev/shm does not survive a reboot.) SSD still holds {} SSTs of \
             {} bytes and the SSD WALs; Db::repair (`tierkv repair`) rebuilds the database \
             from them, without what was only in PM. Nothing was changed.",
            dir.display(),
            pm_data.describe(),
            pm_data.ssd_tables,
            pm_data.ssd_bytes
        ))
    };
    match found {
        None if referenced => Err(gone("does not exist".into())),
        Some(None) if referenced && recorded.pm_region.is_some() => {
            // A region with data but no identity block is this region
            // damaged (its superblock page zeroed), not another one.
            let data = match (&options.pm_region, &options.pm_dir) {
                (Some(r), _) => pm::first_non_zero(r.as_ref())?,
                (None, Some(pm_dir)) => pm::first_non_zero_in_dir(pm_dir)?,
                (None, None) => None,
            };
            if let Some(at) = data {
                return Err(Error::corruption(
                    name,
                    crate::storage::alloc::ID_OFFSET,
                    format!(
                        "the region's identity block is blank, yet the region holds data (a \
                         non-zero byte at offset {at}) and the MANIFEST of {} names region \
                         {:#018x}: its superblock page is damaged (Db::repair rebuilds the \
                         database from what the region and the directory hold)",
                        dir.display(),
                        recorded.pm_region.map_or(0, |r| r.region_id)
                    ),
                ));
            }
            Err(gone(format!(
                "holds no region identity, so it is not the region the database used (its \
             MANIFEST names region {:#018x}); it was formatted anew or replaced, or its identity \
             block was zeroed, and the region holds nothing else",
                recorded.pm_region.map_or(0, |r| r.region_id)
            )))
        }
        Some(Some(id)) => check_owner(dir, &name, &id, recorded, referenced),
        _ => Ok(()),
    }
}

fn check_owner(
    dir: &Path,
    name: &str,
    id: &RegionIdentity,
    recorded: &DbIdentity,
    referenced: bool,
) -> Result<()> {
    let ours = recorded.db_id.is_some_and(|d| d == id.owner);
    if ours {
        return Ok(());
    }
    let this = match recorded.db_id {
        Some(d) => format!("database {d:#018x}"),
        None => "a database that has no id yet".to_string(),
    };
    if id.owner != 0 {
        return Err(Error::InvalidOptions(format!(
            "the PM region {name} (region {:#018x}) belongs to database {:#018x}, but {} is {this}: \
             a region is never shared; give {} a PM directory of its own. Nothing was changed.",
            id.region_id,
            id.owner,
            dir.display(),
            dir.display()
        )));
    }
    match recorded.pm_region {
        Some(m) if referenced && m.region_id != id.region_id => {
            Err(Error::InvalidOptions(format!(
                "the PM region {name} is region {:#018x}, but the MANIFEST of {} names region \
                 {:#018x}, where its PM data is: a different PM tier. Point `pm_dir` at the \
                 database's own region. Nothing was changed.",
                id.region_id,
                dir.display(),
                m.region_id
            )))
        }
        _ => Ok(()),
    }
}

/// Once the PM tier is open: gives a region formatted before identities
/// existed one, and fills `identity.pm_region` with the region's id and
/// size.
pub(super) fn bind_ref(pm: &PmTier, identity: &mut DbIdentity) -> Result<()> {
    let id = pm.allocator().adopt_identity()?;
    identity.pm_region = Some(PmRegionRef {
        region_id: id.region_id,
        size_bytes: pm.region().len(),
    });
    Ok(())
}

/// After the MANIFEST records `db_id` and the region: makes the region name
/// the database as its owner (one persisted 8-byte store, if it does not
/// already).
pub(super) fn bind(pm: &PmTier, db_id: u64) -> Result<()> {
    match pm.allocator().identity()? {
        Some(id) if id.owner == db_id => Ok(()),
        _ => pm.allocator().bind(db_id),
    }
}
