//! Releasing storage no version references: the PM pages and SST files of
//! tables removed by a durable edit whose last handle is gone
//! (version/mod.rs invariant 3; an SST file is kept for reuse instead of
//! unlinked while `Options::recycle_table_files` allows, version/recycle.rs),
//! and at open the files a crash left
//! behind — deleted, or kept in `lost/` (`crate::lost`) when a damaged
//! manifest or WAL means they may hold what a person wants ([`Salvage`]).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use crate::error::Result;
use crate::stats::Tier;
use crate::storage::FileSystem;
use crate::version::closed::CLOSED_FILE_NAME;
use crate::version::recycle::TableRecycler;

use super::Inner;

/// What the cleanup at the end of an open keeps in `lost/` instead of
/// deleting.
pub(super) struct Salvage {
    /// The manifest ended in a torn record: unreferenced tables and the old
    /// manifest are kept.
    pub manifest_torn: bool,
    /// WAL files to keep.
    pub damaged_wals: Vec<u64>,
    /// Tables a recorded edit deleted: a file of one is removed even when
    /// the manifest is torn (the recorded history says it is not needed).
    pub deleted_tables: HashSet<u64>,
}

impl Inner {
    /// Releases the storage of tables no version references any more: PM
    /// pages first — the runs each handle was the last to list, and any
    /// runs the design frees on being told (`Design::release`) — waking the
    /// writers stopped on full PM as soon as they are back (they were woken
    /// when the job ended, before this, and would otherwise sleep out their
    /// wait), then the SST files, queued for the [`Deleter`].
    /// REQUIRES: `state` not locked.
    pub(super) fn release_obsolete(&self) {
        let (pm_tables, ssd_tables): (Vec<_>, Vec<_>) = {
            let mut ob = self.versions.ctx().obsolete.lock();
            let all: Vec<_> = std::mem::take(&mut *ob);
            all.into_iter().partition(|m| m.tier == Tier::Pm)
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
        let ctx = self.versions.ctx();
        for m in ssd_tables {
            let path = ctx.sst_path(m.id);
            if !ctx.recycler.retire(self.fs.as_ref(), &path) {
                self.deleter.remove(path);
            }
        }
    }

    /// Removes the table files kept for reuse (at close: nothing will take
    /// them).
    pub(super) fn remove_kept_tables(&self) {
        for path in self.versions.ctx().recycler.drain() {
            self.deleter.remove(path);
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
                let deleted = salvage.deleted_tables.contains(&n);
                (dead, dead && salvage.manifest_torn && !deleted)
            } else if let Some(n) = number(".log") {
                let dead = n < log_number;
                (dead, dead && salvage.damaged_wals.contains(&n))
            } else if let Some(n) = name
                .strip_prefix("MANIFEST-")
                .and_then(|n| n.parse::<u64>().ok())
            {
                let dead = manifest.is_some_and(|m| m != n);
                (dead, dead && salvage.manifest_torn)
            } else if TableRecycler::is_kept_name(&name) {
                // Kept for reuse by an earlier open that did not close.
                (true, false)
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

/// Unlinks obsolete SST files on a thread of its own (`tierkv-rm`), so
/// that no flush or compaction waits for an unlink: on ext4 mounted with
/// `discard` an unlink issues the discard of the file's blocks and waits
/// for it. At `medium` a `rangetab` fill's one compaction thread spent
/// 2.3 s of 23 s blocked in `blkdev_issue_discard` under `unlink` and
/// 0.9 s more freeing the files' cached pages (`perf record -a -e
/// sched:sched_switch -g`, `perf record -g`), time in which no merge ran
/// while writers were paced. RocksDB deletes obsolete files from its
/// background jobs too, on a thread of their own with
/// `avoid_unnecessary_blocking_io`.
///
/// Before [`Deleter::start`] and after [`Deleter::stop`] files are removed
/// by the caller: at open (nothing may still be queued when the leftover
/// files are listed) and at close (every file queued is gone when `close`
/// returns). A file queued when the process dies is unreferenced, and the
/// next open removes it. Table file numbers are never reused, so a late
/// unlink never meets a newer file of the same name.
pub(super) struct Deleter {
    fs: Arc<dyn FileSystem>,
    queue: Mutex<Option<mpsc::Sender<PathBuf>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Deleter {
    /// A deleter of files in `fs`, on the caller's thread until started.
    pub(super) fn new(fs: Arc<dyn FileSystem>) -> Deleter {
        Deleter {
            fs,
            queue: Mutex::new(None),
            thread: Mutex::new(None),
        }
    }

    /// Starts the thread; `setup` runs on it first (the background
    /// threads' niceness, the limiter's background mark). If the thread
    /// cannot be started, files go on being removed by the caller.
    pub(super) fn start(&self, setup: impl FnOnce() + Send + 'static) {
        let (tx, rx) = mpsc::channel::<PathBuf>();
        let fs = Arc::clone(&self.fs);
        let spawned = std::thread::Builder::new()
            .name("tierkv-rm".into())
            .spawn(move || {
                setup();
                for path in rx {
                    remove_file(fs.as_ref(), &path);
                }
            });
        match spawned {
            Ok(h) => {
                *self.queue.lock() = Some(tx);
                *self.thread.lock() = Some(h);
            }
            Err(e) => log::warn!("could not start the file deleter thread: {e}"),
        }
    }

    /// Removes `path`: queued for the thread while it runs, else at once.
    pub(super) fn remove(&self, path: PathBuf) {
        let path = match self.queue.lock().as_ref() {
            Some(tx) => match tx.send(path) {
                Ok(()) => return,
                Err(mpsc::SendError(path)) => path,
            },
            None => path,
        };
        remove_file(self.fs.as_ref(), &path);
    }

    /// Removes every file queued and stops the thread; later removals are
    /// the caller's.
    pub(super) fn stop(&self) {
        drop(self.queue.lock().take());
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
    }
}

/// Removes `path`; a file already gone is what was wanted (the MANIFEST's
/// replay at open marks every table its history deleted, most of them
/// long unlinked: one `warn` each was noise, not news).
fn remove_file(fs: &dyn FileSystem, path: &std::path::Path) {
    match fs.remove(path) {
        Ok(()) => {}
        Err(crate::Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            log::debug!("obsolete {} was already gone", path.display());
        }
        Err(e) => log::warn!("could not remove obsolete {}: {e}", path.display()),
    }
}
