//! Releasing storage no version references: the PM pages and SST files of
//! tables removed by a durable edit whose last handle is gone
//! (version/mod.rs invariant 3), and at open the files a crash left
//! behind — deleted, or kept in `lost/` (`crate::lost`) when a damaged
//! manifest or WAL means they may hold what a person wants ([`Salvage`]).

use std::collections::HashSet;

use crate::error::Result;
use crate::stats::Tier;
use crate::version::closed::CLOSED_FILE_NAME;

use super::Inner;

/// What the cleanup at the end of an open keeps in `lost/` instead of
/// deleting.
pub(super) struct Salvage {
    /// The manifest ended in a torn record: unreferenced tables and the old
    /// manifest are kept.
    pub manifest_torn: bool,
    /// WAL files to keep.
    pub damaged_wals: Vec<u64>,
}

impl Inner {
    /// Releases the storage of tables no version references any more: PM
    /// pages first — the runs each handle was the last to list, and any
    /// runs the design frees on being told (`Design::release`) — waking the
    /// writers stopped on full PM as soon as they are back (they were woken
    /// when the job ended, before this, and would otherwise sleep out their
    /// wait), then the SST files, whose unlinks take milliseconds each.
    /// REQUIRES: `state` not locked.
    pub(super) fn release_obsolete(&self) {
        self.release_obsolete_tiers(true);
    }

    /// Whether tables in PM wait for their storage to be released.
    pub(super) fn obsolete_in_pm(&self) -> bool {
        let ob = self.versions.ctx().obsolete.lock();
        ob.iter().any(|m| m.tier == Tier::Pm)
    }

    /// [`Inner::release_obsolete`]; without `ssd_files` only the PM pages,
    /// the SST files left for the next call with them. The flush thread
    /// releases PM only: a flush may be waiting for those pages, and
    /// unlinking a compaction's inputs (20-75 ms per 64 MiB file on the
    /// development machine's ext4, `strace -T` and `perf trace`) held the
    /// next flush up for half a second while the memtables were full.
    pub(super) fn release_obsolete_tiers(&self, ssd_files: bool) {
        let (pm_tables, ssd_tables): (Vec<_>, Vec<_>) = {
            let mut ob = self.versions.ctx().obsolete.lock();
            let all: Vec<_> = std::mem::take(&mut *ob);
            let (pm, ssd): (Vec<_>, Vec<_>) = all.into_iter().partition(|m| m.tier == Tier::Pm);
            if ssd_files {
                (pm, ssd)
            } else {
                *ob = ssd;
                (pm, Vec::new())
            }
        };
        if let (Some(pm), false) = (&self.pm, pm_tables.is_empty()) {
            // Runs the design retains (`Design::retained_pm_runs`: e.g.
            // RangeKV's buffers, allocated once and reused) stay allocated
            // when the last table listing them goes. If the design cannot
            // say, nothing is freed: a leak the next open's reconcile
            // repairs, never a live run handed out again.
            let kept: Option<HashSet<_>> =
                match self.design.retained_pm_runs(&self.versions.current_all()) {
                    Ok(runs) => Some(runs.into_iter().collect()),
                    Err(e) => {
                        log::warn!("design could not list its live PM runs: {e}");
                        None
                    }
                };
            for m in &pm_tables {
                let more = self.design.release(m).unwrap_or_else(|e| {
                    log::warn!("design could not release PM of table {}: {e}", m.id);
                    Vec::new()
                });
                let own = m
                    .pm_pages
                    .iter()
                    .filter(|r| kept.as_ref().is_some_and(|k| !k.contains(r)));
                for run in own.chain(&more) {
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

    /// At open, last: removes SSTs no version references, WALs below the
    /// log number, manifests CURRENT does not name, a stale CLOSED and
    /// leftover temporary files — or moves them to `lost/` when `salvage`
    /// says they may hold what a person wants: every unreferenced table and
    /// the old manifest after a torn manifest, damaged WALs.
    pub(super) fn remove_obsolete_files(&self, salvage: &Salvage) -> Result<()> {
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
}
