//! Moving a database between designs that do not share a PM layout
//! (`identity.rs` says which pairs need it).
//!
//! # `Db::migrate(dir, from, to)`
//!
//! 1. Open the database with `from` (its own design), flush, and compact
//!    every level down to the last one (`Db::compact_range` over
//!    everything): the PM designs keep nothing in PM at the last level, so
//!    every table is then an SST on SSD.
//! 2. Close it with one more MANIFEST record ([`Inner::detach_pm`]): the PM
//!    WALs retired (the memtables are empty and everything they held is in
//!    SSTs), the design's records removed, and the identity naming `to`
//!    with no PM region. That record is the switch: before it the database
//!    is still `from`'s, whole; after it, `to`'s, with nothing in PM.
//! 3. Open it with `to` (a PM design starts its PM tier empty on the same
//!    region or its own; the pages `from` used go back to the allocator, as
//!    the MANIFEST references none of them) and close it.
//!
//! Crashes: step 1 is ordinary flushes and compactions, and step 2 one
//! atomic MANIFEST record, so a crash anywhere leaves either `from`'s
//! database (run the migration again: it repeats step 1, which finds little
//! left to do) or `to`'s (open it with `to`; running the migration again
//! only opens it). Nothing is copied out of the directory and no file is
//! deleted by the migration itself.
//!
//! A switch that needs no migration (same layout, or an SSD-only database
//! to a PM design: the upgrade of `identity.rs`) is just step 3.

use std::path::Path;
use std::time::{Duration, Instant};

use super::identity::{switch, Switch};
use super::{Db, Inner};
use crate::error::{Error, Result};
use crate::inspect;
use crate::options::{Options, Preset};
use crate::stats::Tier;
use crate::version::edit::VersionEdit;

/// What [`Db::migrate`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrateReport {
    /// The design the database was made by (as its MANIFEST records it).
    pub from: Option<Preset>,
    /// The design it now opens with.
    pub to: Option<Preset>,
    /// Whether its PM data had to move to SSD (false: `to` opened it as it
    /// was).
    pub moved_pm_data: bool,
    /// Bytes of SSTs the database holds after the migration.
    pub ssd_bytes: u64,
}

/// `Db::migrate` (module doc).
pub fn migrate(dir: &Path, from: Options, to: Options) -> Result<MigrateReport> {
    let dump = inspect::read_manifest(from.fs.as_ref(), dir)?;
    let recorded = inspect::infer_design(&dump.state);
    let made_by = match recorded.design {
        Some(p) => p,
        None => {
            return Err(Error::InvalidOptions(format!(
                "cannot tell the design of {}: {}",
                dir.display(),
                recorded.how
            )))
        }
    };
    let mut report = MigrateReport {
        from: Some(made_by),
        to: Some(to.design),
        ..MigrateReport::default()
    };
    if switch(made_by, to.design) == Switch::NeedsMigration {
        if switch(made_by, from.design) != Switch::Compatible {
            return Err(Error::InvalidOptions(format!(
                "{} was made by design `{made_by}`; `from` names design `{}`, which cannot open it \
                 (give the options it is opened with)",
                dir.display(),
                from.design
            )));
        }
        let mut from = crate::design::evacuation_options(&from);
        from.create_if_missing = false;
        from.error_if_exists = false;
        let db = Db::open(dir, from)?;
        db.compact_range(None, None)?;
        db.wait_out_of_pm()?;
        db.close_detached(to.design)?;
        report.moved_pm_data = true;
    }
    let mut to = to;
    to.create_if_missing = false;
    to.error_if_exists = false;
    let fs = to.fs.clone();
    Db::open(dir, to)?.close()?;
    report.ssd_bytes = inspect::read_manifest(fs.as_ref(), dir)?
        .state
        .tables()
        .filter(|(_, _, t)| t.tier != Tier::Pm)
        .map(|(_, _, t)| t.size_bytes)
        .sum();
    Ok(report)
}

/// The upgrade of an SSD-only database to the PM design of `options`
/// (`identity.rs`, "The upgrade"): opens it with its own design `from` and
/// compacts every table down to the last level.
pub(super) fn compact_to_last_level(dir: &Path, options: &Options, from: Preset) -> Result<()> {
    let mut o = options.clone();
    o.design = from;
    o.create_if_missing = false;
    o.error_if_exists = false;
    // Its own PM tier, if it kept its WAL there; else none.
    let dump = inspect::read_manifest(o.fs.as_ref(), dir)?;
    if dump.state.pm_wals.is_empty() {
        o.pm_dir = None;
        o.pm_region = None;
        o.wal = None;
    }
    log::info!(
        "{}: opening a `{from}` database as `{}`: compacting its tables to the last level first",
        dir.display(),
        options.design
    );
    let db = Db::open_inner(dir, o, None)?;
    db.compact_range(None, None)?;
    db.close()
}

impl Db {
    /// Waits until no table is left in PM (the design's own background
    /// work may still be converting tables the compaction left there,
    /// `design::evacuation_options`); fails naming a table if a minute
    /// passes without one leaving.
    fn wait_out_of_pm(&self) -> Result<()> {
        let pm_tables = || -> Vec<u64> {
            self.inner
                .versions
                .current_all()
                .iter()
                .flat_map(|v| v.levels.iter().flatten())
                .filter(|t| t.meta.tier == Tier::Pm)
                .map(|t| t.meta.id)
                .collect()
        };
        let mut left = pm_tables();
        let mut progress = Instant::now();
        while !left.is_empty() {
            {
                let mut st = self.inner.state.lock();
                Inner::stopped(&st)?;
                self.inner.bg_cv.notify_all();
                self.inner
                    .done_cv
                    .wait_for(&mut st, Duration::from_millis(20));
            }
            let now = pm_tables();
            if now.len() < left.len() {
                progress = Instant::now();
            } else if progress.elapsed() > Duration::from_secs(60) {
                return Err(Error::InvalidOptions(format!(
                    "migration: design `{}` keeps {} tables in PM (e.g. table {}) after compacting \
                     every level down, and moves none of them; nothing was changed",
                    self.inner.opts.design,
                    now.len(),
                    now[0]
                )));
            }
            left = now;
        }
        Ok(())
    }
}

impl Inner {
    /// The last MANIFEST record of a migration (module doc, step 2): REQUIRES
    /// background work stopped and the writers' lock held (`Db::shutdown`).
    /// Fails, changing nothing, if anything is still in a memtable or in PM.
    pub(super) fn detach_pm(&self, to: Preset) -> Result<()> {
        let st = self.state.lock();
        if st
            .mem
            .regions
            .iter()
            .any(|r| !r.mem.is_empty() || !r.imms.is_empty())
        {
            return Err(Error::InvalidArgument(
                "migration: a memtable is not empty after the final flush".into(),
            ));
        }
        drop(st);
        let versions = self.versions.current_all();
        if let Some(t) = versions
            .iter()
            .flat_map(|v| v.levels.iter().flatten())
            .find(|t| t.meta.tier == Tier::Pm)
        {
            return Err(Error::InvalidOptions(format!(
                "migration: design `{}` left table {} in PM after compacting every level down; \
                 nothing was changed",
                self.opts.design, t.meta.id
            )));
        }
        let mut edits: Vec<VersionEdit> = versions
            .iter()
            .enumerate()
            .map(|(r, v)| VersionEdit {
                region: r as u32,
                design_records: v
                    .design_state
                    .keys()
                    .map(|&tag| (tag, Vec::new()))
                    .collect(),
                ..VersionEdit::default()
            })
            .collect();
        edits[0].deleted_pm_wals = self
            .versions
            .pm_wals()
            .iter()
            .map(|w| w.log_number)
            .collect();
        let mut id = self.versions.identity();
        id.design = Some(to.name().to_string());
        id.pm_region = None;
        edits[0].identity = Some(id);
        let last = self.last_seq.load(std::sync::atomic::Ordering::Acquire);
        self.versions.log_and_apply_group(edits, last)?;
        Ok(())
    }
}
