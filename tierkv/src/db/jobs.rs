//! The background scheduler and its jobs: threads pick a flush (the oldest
//! immutable memtable of any region) or a compaction (the design's picker,
//! round robin over regions) under the `state` mutex and run it without
//! it; `flush()` and `compact_range()` drive the same jobs and wait.
//!
//! Roles: with two or more background threads, thread 0 only flushes (a
//! flush never waits behind a long compaction) and the others only
//! compact; one thread does both.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::design::{JobOutput, PickContext, Task};
use crate::error::{Error, Result};
use crate::memtable::MemTable;
use crate::stats::CompactionRecord;
use crate::storage::alloc::PAGE_SIZE_BYTES;
use crate::version::set::wal_name;
use crate::version::Version;

use super::{Inner, State};

pub(super) fn start_background(inner: &Arc<Inner>) -> Vec<JoinHandle<()>> {
    let nice = inner.opts.background_nice;
    inner.deleter.start(move || {
        lower_priority(nice);
        crate::storage::limiter::mark_background();
    });
    let n = inner.opts.background_threads;
    (0..n)
        .map(|i| {
            let role = if n == 1 {
                Role::Both
            } else if i == 0 {
                Role::Flush
            } else {
                Role::Compaction
            };
            let inner = Arc::clone(inner);
            std::thread::Builder::new()
                .name(format!("tierkv-bg-{i}"))
                .spawn(move || {
                    lower_priority(inner.opts.background_nice);
                    if inner.opts.background_sched_idle
                        || (inner.opts.compaction_sched_idle && role == Role::Compaction)
                    {
                        idle_policy();
                    }
                    crate::storage::limiter::mark_background();
                    let _cpu = inner
                        .compaction_cpu
                        .as_ref()
                        .filter(|_| role == Role::Compaction)
                        .map(crate::sched::join);
                    inner.background_loop(role)
                })
                .map_err(|e| Error::io("spawn background thread", e))
        })
        .filter_map(|r| match r {
            Ok(h) => Some(h),
            Err(e) => {
                log::error!("{e}");
                None
            }
        })
        .collect()
}

/// Raises the calling thread's niceness by `nice` (`Options::background_nice`);
/// threads it starts inherit it. A failure (a sandbox refusing it) costs
/// latency, not correctness: logged, and the thread goes on.
fn lower_priority(nice: i32) {
    if nice == 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on the calling thread's own id.
        let tid = unsafe { libc::gettid() } as libc::id_t;
        let r = unsafe {
            let now = libc::getpriority(libc::PRIO_PROCESS, tid);
            libc::setpriority(libc::PRIO_PROCESS, tid, (now + nice).min(19))
        };
        if r != 0 {
            log::warn!(
                "could not lower the background thread's priority by {nice}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// Puts the calling thread under `SCHED_IDLE`
/// (`Options::background_sched_idle`, `Options::compaction_sched_idle`);
/// threads it starts inherit it. A
/// failure costs latency, not correctness: logged, and the thread goes on.
fn idle_policy() {
    if let Err(e) = crate::sched::set_policy(crate::sched::this_tid(), true) {
        log::warn!("could not put the background thread under SCHED_IDLE: {e}");
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Flush,
    Compaction,
    Both,
}

enum Work {
    /// Flush region `.0`'s oldest immutable memtable.
    Flush(usize, Arc<MemTable>),
    /// Run a task picked from region `.0`'s version.
    Compact(usize, Task),
}

impl Inner {
    /// What the pickers see besides the version. REQUIRES: `state` locked.
    fn pick_context<'a>(&self, st: &'a State) -> PickContext<'a> {
        let (write_bytes_per_sec, write_bytes_per_sec_peak) = self.admitted.rates();
        let (pm_free_bytes, pm_capacity_bytes) = match &self.pm {
            Some(pm) => {
                let a = pm.allocator();
                let data_pages = a.total_pages() - a.data_start_page();
                (
                    Some(a.free_pages() * PAGE_SIZE_BYTES),
                    Some(data_pages * PAGE_SIZE_BYTES),
                )
            }
            None => (None, None),
        };
        PickContext {
            busy: &st.busy,
            immutable_memtables: st.mem.imm_count(),
            compactions_running: st.compactions_running,
            flush_running: st.flushing,
            pm_free_bytes,
            pm_capacity_bytes,
            write_bytes_per_sec,
            write_bytes_per_sec_peak,
        }
    }

    fn background_loop(self: Arc<Self>, role: Role) {
        let mut st = self.state.lock();
        loop {
            if st.shutting_down {
                return;
            }
            if role != Role::Compaction {
                self.relax_compaction_cpu(&st, Instant::now());
            }
            // The next PM WAL first (one MANIFEST record): the switch that
            // took the last one may come again within a memtable's fill.
            if role != Role::Compaction
                && st.bg_error.is_none()
                && self.spare_wanted.load(Ordering::Acquire)
            {
                drop(st);
                self.prepare_spare_log();
                st = self.state.lock();
                continue;
            }
            let work = if st.bg_error.is_some() {
                None
            } else {
                self.next_work(&mut st, role)
            };
            let Some(work) = work else {
                // Storage released by readers dropping old versions goes
                // back while idle too (a flush may be waiting for PM pages).
                drop(st);
                self.reap_super_versions();
                st = self.state.lock();
                if st.shutting_down {
                    return;
                }
                if !self.versions.ctx().obsolete.lock().is_empty() {
                    drop(st);
                    self.release_obsolete();
                    st = self.state.lock();
                    continue;
                }
                self.bg_cv.wait_for(&mut st, Duration::from_millis(200));
                continue;
            };
            drop(st);
            let mut dead_wals = Vec::new();
            let first_output = self.versions.next_file_number();
            match &work {
                Work::Flush(region, mem) => {
                    let region = *region;
                    let r = self.run_flush(region, mem);
                    if r.is_ok() {
                        self.warm_tables(region, first_output);
                    }
                    st = self.state.lock();
                    st.flushing = false;
                    st.flush_built = None;
                    match r {
                        Ok(wals) => {
                            dead_wals = wals;
                            let imms = &mut st.mem.regions[region].imms;
                            if imms.front().is_some_and(|m| Arc::ptr_eq(m, mem)) {
                                imms.pop_front();
                            }
                            self.install_super_version(&st);
                        }
                        Err(e) => {
                            drop(st);
                            self.set_bg_error(&e);
                            st = self.state.lock();
                        }
                    }
                }
                Work::Compact(region, task) => {
                    let region = *region;
                    let v = self.versions.current_in(region);
                    let r = self.run_compaction(region, task, v);
                    if r.is_ok() {
                        self.warm_tables(region, first_output);
                    }
                    st = self.state.lock();
                    for id in task.input_ids() {
                        st.busy.remove(&id);
                    }
                    st.compactions_running -= 1;
                    match r {
                        Ok(()) => self.install_super_version(&st),
                        Err(e) => {
                            drop(st);
                            self.set_bg_error(&e);
                            st = self.state.lock();
                        }
                    }
                }
            }
            drop(st);
            // The job itself (the flushed memtable's last reference but the
            // retired super version's) is dropped after `state` is unlocked.
            drop(work);
            self.reap_super_versions();
            // Writers waiting on this job go first; then the storage it
            // made obsolete: the flushed logs, unlinked here, so that the
            // WALs alive never run ahead of the memtables they back; the
            // tables, queued for the deleter thread (unlinking a 64 MiB SST
            // takes milliseconds, and no job waits for one).
            self.done_cv.notify_all();
            self.bg_cv.notify_all();
            for n in dead_wals {
                let _ = self.fs.remove(&self.dir.join(wal_name(n)));
            }
            self.release_obsolete();
            st = self.state.lock();
        }
    }

    /// Picks the next job for a thread of `role`. REQUIRES: `state` locked.
    fn next_work(&self, st: &mut State, role: Role) -> Option<Work> {
        if role != Role::Compaction && !st.flushing {
            // The design may hold flushes back while its flush target is
            // full (vLSM's L0 queue); compactions below make room.
            let region = st.mem.flush_candidate(|r| {
                self.design
                    .flush_blocked(&self.versions.current_in(r))
                    .is_none()
            });
            if let Some(r) = region {
                if let Some(m) = st.mem.regions[r].imms.front() {
                    let m = Arc::clone(m);
                    st.flushing = true;
                    return Some(Work::Flush(r, m));
                }
            }
        }
        if role != Role::Flush && !st.manual_running {
            // Round robin: every region's picker gets its turn.
            let n = self.router.count();
            let start = st.mem.next_pick;
            let picked = {
                let cx = self.pick_context(st);
                (0..n).find_map(|i| {
                    let region = (start + i) % n;
                    let v = self.versions.current_in(region);
                    self.design.pick(&v, &cx).map(|task| (region, task))
                })
            };
            if let Some((region, task)) = picked {
                st.busy.extend(task.input_ids());
                st.compactions_running += 1;
                st.mem.next_pick = (region + 1) % n;
                return Some(Work::Compact(region, task));
            }
        }
        None
    }

    /// Opens (and so verifies) the tables of `region`'s current version
    /// numbered from `first` on — the outputs of the job just run — before
    /// the super version that shows them to readers is installed: readers
    /// never pay for a new table's open (footer, index and filter read and
    /// checksummed; a PM structure's scan and DRAM index,
    /// [`TableReader::warm`](crate::iter::TableReader::warm)), as RocksDB's flush and
    /// compaction jobs add their outputs to the table cache. Older tables
    /// stay opened on first use. A failure is left for the first reader
    /// to report.
    fn warm_tables(&self, region: usize, first: u64) {
        let v = self.versions.current_in(region);
        for t in v.levels.iter().flatten().filter(|t| t.meta.id >= first) {
            let _ = t.warm();
        }
    }

    /// Whether a compaction thread would find work now: one is running or
    /// a region's picker picks a task (`tierkv.compaction-pending`).
    pub(super) fn compaction_pending(&self) -> bool {
        let st = self.state.lock();
        if st.compactions_running > 0 || st.manual_running {
            return true;
        }
        let cx = self.pick_context(&st);
        (0..self.router.count()).any(|region| {
            self.design
                .pick(&self.versions.current_in(region), &cx)
                .is_some()
        })
    }

    /// Flushes `mem`, the oldest immutable memtable of `region`; returns
    /// the SSD WALs it made obsolete, for the caller to delete once the
    /// writers waiting on the flush are released.
    fn run_flush(&self, region: usize, mem: &Arc<MemTable>) -> Result<Vec<u64>> {
        // With regions sharing the WAL, this flush makes one region's records
        // durable ahead of the others' in the same logs: make the retired
        // WALs durable first, as RocksDB's flush job does with more than one
        // column family. With one region every record of the retired logs
        // this flush covers is in its table once the edit is durable, and
        // the later ones are newer than all of them, so what survives a
        // crash is still a prefix of the writes (a sync write syncs the
        // retired logs first, `write`).
        if self.router.count() > 1 {
            self.sync_closed_logs()?;
        }
        let start = Instant::now();
        self.design.prepare_flush(mem)?;
        let env = self.job_env(self.versions.current_in(region));
        let JobOutput { mut edit, written } = self.design.flush(&env, mem)?;
        {
            let mut st = self.state.lock();
            st.flush_built = Some(region);
            self.design.flush_built();
        }
        // The region's records below its next memtable's log are now in
        // tables; logs below the bound hold no unflushed record of any
        // region. (Flushes run one at a time, and memtables created later
        // only raise the bound.)
        let (next_log, bound) = {
            let st = self.state.lock();
            (st.mem.next_log_number(region), st.mem.wal_bound(region))
        };
        edit.region = region as u32;
        edit.log_number = Some(next_log);
        // The edit names the next log as where recovery starts: its name
        // must be durable first.
        self.sync_wal_dir()?;
        let pm_logs: Vec<_> = self
            .versions
            .pm_wals()
            .into_iter()
            .filter(|w| w.log_number < bound)
            .collect();
        edit.deleted_pm_wals
            .extend(pm_logs.iter().map(|w| w.log_number));
        self.versions
            .log_and_apply(edit, self.last_seq.load(Ordering::Acquire))?;
        self.stats
            .record_flush(start, written.pm_copied, written.pm_relinked, written.ssd);
        // The WALs are obsolete only now that the edit is durable.
        if let Some(wals) = &self.pm_wals {
            for w in &pm_logs {
                wals.free_log(w.first_extent)?;
            }
        }
        let ssd_logs: Vec<u64> = {
            let mut st = self.state.lock();
            let wals = &mut st.mem.ssd_wals;
            let keep = wals.iter().position(|&n| n >= bound).unwrap_or(wals.len());
            wals.drain(..keep).collect()
        };
        // Their writers are no longer needed (nor is syncing them).
        self.closed_logs.lock().retain(|(n, _)| *n >= bound);
        Ok(ssd_logs)
    }

    fn run_compaction(&self, region: usize, task: &Task, v: Arc<Version>) -> Result<()> {
        let start = Instant::now();
        let env = self.job_env(v);
        let JobOutput { mut edit, written } = self.design.run(&env, task)?;
        edit.region = region as u32;
        self.versions
            .log_and_apply(edit, self.last_seq.load(Ordering::Acquire))?;
        self.stats.record_compaction(
            CompactionRecord {
                start: self.stats.since_open(start),
                duration: start.elapsed(),
                kind: task.kind.name().to_string(),
                input_bytes: self.design.task_input_bytes(task),
                output_level: task.output_level,
                output_bytes: written.ssd + written.pm_copied + written.pm_relinked,
            },
            written.pm_copied,
            written.pm_relinked,
        );
        Ok(())
    }

    /// Switches the memtable (if non-empty) and waits until every immutable
    /// memtable is flushed.
    pub(super) fn flush_all(&self) -> Result<()> {
        self.write(None, false, true)?;
        let mut st = self.state.lock();
        while !st.mem.no_imms() {
            Inner::stopped(&st)?;
            self.bg_cv.notify_all();
            self.done_cv.wait_for(&mut st, Duration::from_millis(100));
        }
        Ok(())
    }

    pub(super) fn compact_range(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Result<()> {
        for region in 0..self.router.count() {
            self.compact_range_in(region, lo, hi)?;
        }
        Ok(())
    }

    fn compact_range_in(&self, region: usize, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Result<()> {
        let levels = self.opts.level_count;
        for level in 0..levels - 1 {
            loop {
                let mut st = self.state.lock();
                Inner::stopped(&st)?;
                let v = self.versions.current_in(region);
                if v.overlapping(level, lo, hi).is_empty() {
                    break;
                }
                let task = {
                    let cx = self.pick_context(&st);
                    self.design.pick_manual(&v, &cx, level, lo, hi)
                };
                let Some(task) = task else {
                    // Inputs busy: wait for the running job.
                    self.done_cv.wait_for(&mut st, Duration::from_millis(50));
                    continue;
                };
                let ids: Vec<u64> = task.input_ids().collect();
                st.busy.extend(ids.iter().copied());
                st.manual_running = true;
                drop(st);
                let r = {
                    // Its reads are not the foreground's (the limiter).
                    let _bg = crate::storage::limiter::background_scope();
                    self.run_compaction(region, &task, v)
                };
                drop(task);
                let mut st = self.state.lock();
                for id in &ids {
                    st.busy.remove(id);
                }
                st.manual_running = false;
                // Readers move to the new version, so the inputs' storage
                // is released once they finish.
                if r.is_ok() {
                    self.install_super_version(&st);
                }
                drop(st);
                // The caller's thread is no reader: the replaced version's
                // storage goes back now, for the next pick to see.
                self.reap_super_versions();
                self.done_cv.notify_all();
                self.bg_cv.notify_all();
                r?;
                break;
            }
        }
        Ok(())
    }
}
