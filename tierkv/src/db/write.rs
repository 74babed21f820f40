//! The write path: writers queue, the leader commits a group (one log
//! record, one memtable insert, one seqno publication), and switches to a
//! new memtable and log when the current one is full.
//!
//! The log is a `Box<dyn LogWriter>`: the engine's WAL (an SSD file, or an
//! extent chain in the PM tier when the PM tier holds the WAL), or the log
//! the design owns (`Design::log`, e.g. NV-Cache's NVTable). [`new_log`]
//! makes the next one and says what must be recorded before it is used.
//!
//! Durability: a group bound for a log in PM is persisted before it is
//! acknowledged, sync or not (a few cache-line write-backs); for an SSD
//! log a sync write syncs every retired log first and then the current
//! one, and any other write reaches the OS (survives a process crash) as
//! RocksDB does without `manual_wal_flush`.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::batch::WriteBatch;
use crate::design::{Design, WriteControl};
use crate::error::{Error, Result};
use crate::key::MAX_SEQNO;
use crate::options::{Options, WalPlacement};
use crate::stats::{StallCause, StatsRecorder};
use crate::storage::{FileSystem, WriteHint};
use crate::version::edit::{PmWal, VersionEdit};
use crate::version::set::wal_name;
use crate::wal::{self, FileSink, LogWriter, PmWals};

use super::control::StopEpisode;
use super::Inner;

/// One queued write.
pub(super) struct Writer {
    batch: Mutex<Option<WriteBatch>>,
    sync: bool,
    /// Switch the memtable even if it is not full (`flush()`).
    force_switch: bool,
    done: AtomicBool,
    result: Mutex<Option<Result<()>>>,
}

/// Largest group a leader commits at once.
const GROUP_MAX_BYTES: usize = 1 << 20;

/// A new log and what the engine must record before its first record.
pub(super) struct NewLog {
    /// The writer.
    pub(super) writer: Box<dyn LogWriter>,
    /// Its entry in the MANIFEST's list of logs in PM (the engine's PM WAL,
    /// or a design's own log); `None` for an SSD WAL, whose file name is
    /// its record.
    pub(super) pm_wal: Option<PmWal>,
    /// True for an SSD WAL file (deleted by the engine once flushed).
    pub(super) ssd_file: bool,
}

/// Creates log `n`: the design's own log if it has one, else the WAL on
/// the configured tier. What creating it wrote (a PM log's header) is
/// counted as WAL bytes. An SSD WAL's name is synced into the directory
/// now if `sync_dir`, else left to [`Inner::sync_wal_dir`] (`NewLog::ssd_file`
/// tells the caller to arrange it).
#[allow(clippy::too_many_arguments)]
pub(super) fn new_log(
    opts: &Options,
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    design: &dyn Design,
    pm_wals: Option<&PmWals>,
    stats: &StatsRecorder,
    n: u64,
    sync_dir: bool,
) -> Result<NewLog> {
    let log = create_log(opts, fs, dir, design, pm_wals, n, sync_dir)?;
    let created = log.writer.bytes_written();
    let in_pm = log.writer.in_pm();
    stats.add_written(|w| {
        if in_pm {
            w.wal_pm += created
        } else {
            w.wal_ssd += created
        }
    });
    Ok(log)
}

fn create_log(
    opts: &Options,
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    design: &dyn Design,
    pm_wals: Option<&PmWals>,
    n: u64,
    sync_dir: bool,
) -> Result<NewLog> {
    if let Some(log) = design.log() {
        let (writer, locator) = log.create(n)?;
        return Ok(NewLog {
            writer,
            pm_wal: Some(PmWal {
                log_number: n,
                first_extent: locator,
            }),
            ssd_file: false,
        });
    }
    match (opts.wal_placement(), pm_wals) {
        (WalPlacement::Pm, Some(wals)) => {
            let (w, first_extent) = wals.create_log(n)?;
            Ok(NewLog {
                writer: Box::new(w),
                pm_wal: Some(PmWal {
                    log_number: n,
                    first_extent,
                }),
                ssd_file: false,
            })
        }
        _ => {
            let hint = WriteHint {
                bytes_per_sync: opts.wal_bytes_per_sync,
                ..WriteHint::default()
            };
            let file = fs.create(&dir.join(wal_name(n)), hint)?;
            // The name must survive a crash for synced records to: now, or
            // before the first sync write (`Inner::sync_wal_dir`).
            if sync_dir {
                fs.sync_dir(dir)?;
            }
            Ok(NewLog {
                writer: Box::new(wal::Writer::new(FileSink(file), n)),
                pm_wal: None,
                ssd_file: true,
            })
        }
    }
}

impl Inner {
    /// Queues a write (or, with `force_switch` and no batch, a memtable
    /// switch) and runs it as leader or waits for a leader to.
    pub(super) fn write(
        &self,
        batch: Option<WriteBatch>,
        sync: bool,
        force_switch: bool,
    ) -> Result<()> {
        let me = Arc::new(Writer {
            batch: Mutex::new(batch),
            sync,
            force_switch,
            done: AtomicBool::new(false),
            result: Mutex::new(None),
        });
        let mut q = self.writers.lock();
        q.push_back(Arc::clone(&me));
        while !me.done.load(Ordering::Acquire) && !q.front().is_some_and(|f| Arc::ptr_eq(f, &me)) {
            self.writers_cv.wait(&mut q);
        }
        if me.done.load(Ordering::Acquire) {
            return me.result.lock().take().unwrap_or(Ok(()));
        }
        // Leader. Make room without holding the queue lock.
        drop(q);
        let own_bytes = me.batch.lock().as_ref().map_or(0, |b| b.encoded().len());
        let room = self.make_room_for_write(own_bytes, force_switch);
        let mut q = self.writers.lock();
        let result = match room {
            Ok(()) if force_switch => {
                q.pop_front();
                Ok(())
            }
            Err(e) => {
                // Fail only the leader; followers retry as leaders.
                q.pop_front();
                self.writers_cv.notify_all();
                return Err(e);
            }
            Ok(()) => {
                // Take a group: the leader plus followers up to the size cap.
                let mut group: Vec<Arc<Writer>> = Vec::new();
                let mut bytes = 0usize;
                let mut any_sync = false;
                let cap = if own_bytes <= 128 << 10 {
                    own_bytes + (128 << 10)
                } else {
                    GROUP_MAX_BYTES
                };
                for w in q.iter() {
                    if w.force_switch {
                        break;
                    }
                    let n = w.batch.lock().as_ref().map_or(0, |b| b.encoded().len());
                    if !group.is_empty() && (bytes + n > cap || (w.sync && !me.sync)) {
                        break;
                    }
                    bytes += n;
                    any_sync |= w.sync;
                    group.push(Arc::clone(w));
                }
                drop(q);
                let r = self.commit_group(&group, any_sync);
                q = self.writers.lock();
                for w in &group[1..] {
                    *w.result.lock() = Some(r.clone());
                    w.done.store(true, Ordering::Release);
                }
                for _ in 0..group.len() {
                    q.pop_front();
                }
                r
            }
        };
        self.writers_cv.notify_all();
        drop(q);
        result
    }

    /// Writes a group to the log and the memtable and publishes it.
    fn commit_group(&self, group: &[Arc<Writer>], sync: bool) -> Result<()> {
        let first = self.last_seq.load(Ordering::Acquire) + 1;
        let mut batch = match group[0].batch.lock().take() {
            Some(b) => b,
            None => return Ok(()),
        };
        for w in &group[1..] {
            if let Some(b) = w.batch.lock().take() {
                batch.append(&b);
            }
        }
        let count = u64::from(batch.count());
        if first + count > MAX_SEQNO {
            return Err(Error::InvalidArgument("sequence numbers exhausted".into()));
        }
        batch.set_seqno(first);
        // Only the leader switches memtables, so the super version holds
        // the current ones.
        let sv = self.super_version();
        {
            let mut log = self.log.lock();
            let before = log.bytes_written();
            let in_pm = log.in_pm();
            let r = log.add_record(batch.encoded()).and_then(|()| {
                if sync && !in_pm {
                    // Closed logs first, so a crash keeps a prefix of the
                    // writes; and the logs' names.
                    self.sync_closed_logs()?;
                    self.sync_wal_dir()?;
                }
                if sync || in_pm {
                    log.sync()
                } else {
                    // As RocksDB does unless `manual_wal_flush`: the record
                    // reaches the OS before the write is acknowledged, so it
                    // survives a crash of the process (a power loss needs
                    // `sync`).
                    log.flush()
                }
            });
            let written = log.bytes_written() - before;
            drop(log);
            self.stats.add_written(|w| {
                if in_pm {
                    w.wal_pm += written
                } else {
                    w.wal_ssd += written
                }
            });
            if let Err(e) = r {
                // The log may now end in a partial record: stop writes.
                self.set_bg_error(&e);
                return Err(e);
            }
        }
        if let [one] = sv.regions.as_slice() {
            one.mem.apply(&batch)?;
        } else {
            for (seq, r) in (first..).zip(batch.iter()) {
                let (kind, k, v) = r?;
                sv.regions[self.router.route(k)].mem.add(seq, kind, k, v);
            }
        }
        let user_bytes = batch.user_bytes();
        self.stats.user_ops.fetch_add(count, Ordering::Relaxed);
        self.stats
            .user_bytes
            .fetch_add(user_bytes, Ordering::Relaxed);
        self.admitted.add(user_bytes);
        self.last_seq.store(first + count - 1, Ordering::Release);
        Ok(())
    }

    /// Leader only: waits out stalls and switches to a new memtable when the
    /// current one is full (or `force` and non-empty).
    ///
    /// A design with a PM tier flushes each memtable into PM whole, and its
    /// PM was sized at open for memtables of `memtable_size_bytes` (two
    /// WALs and a flushed memtable at least): a bigger memtable could wait
    /// for PM that nothing frees. So there the memtable switches before a
    /// write that would grow it past its size, and a batch larger than a
    /// memtable is refused before anything is logged.
    fn make_room_for_write(&self, bytes: usize, force: bool) -> Result<()> {
        let bound = self
            .opts
            .design
            .needs_pm()
            .then_some(self.opts.memtable_size_bytes);
        if let Some(b) = bound.filter(|&b| bytes > b) {
            return Err(Error::InvalidArgument(format!(
                "a write batch of {bytes} bytes is larger than `memtable_size_bytes` = {b}: \
                 design `{}` flushes each memtable into PM whole, so it takes batches up \
                 to a memtable's size; split the batch or raise `memtable_size_bytes` \
                 (and `pm_size_bytes` with it)",
                self.opts.design
            )));
        }
        let mut delayed = false;
        // The pacer is sampled for the compaction threads' priority too
        // (`Options::adaptive_compaction_priority`), paced or not.
        let sampled = self.opts.write_pacing || self.compaction_cpu.is_some();
        let mut paced = !sampled || force;
        let mut stopped = StopEpisode {
            stats: &self.stats,
            current: None,
        };
        let mut st = self.state.lock();
        loop {
            Inner::stopped(&st)?;
            if !paced {
                // Short pauses now, so that no stop comes later
                // (db/control.rs, the pacing law).
                paced = true;
                let now = Instant::now();
                self.sample_pacer(&mut st, now);
                let pause = if self.opts.write_pacing {
                    st.pacer.pause_for(bytes, now)
                } else {
                    Duration::ZERO
                };
                if !pause.is_zero() {
                    drop(st);
                    std::thread::sleep(pause);
                    self.stats.record_pause(now);
                    st = self.state.lock();
                    continue;
                }
            }
            let control = self.write_control(&mut st);
            let mem_full = st.mem.mutable_full(&self.opts)
                || (force && st.mem.any_mutable_data())
                || bound.is_some_and(|b| {
                    st.mem.any_mutable_data() && st.mem.mutable_bytes() + bytes > b
                });
            match control {
                WriteControl::Delay(cause) if !delayed && !force => {
                    stopped.end();
                    delayed = true;
                    let now = Instant::now();
                    let wait = st.control.delay_for(bytes, now);
                    if !wait.is_zero() {
                        drop(st);
                        std::thread::sleep(wait);
                        self.stats.record_stall(now, cause);
                        st = self.state.lock();
                    }
                    continue;
                }
                WriteControl::Stop(cause) if !force || mem_full => {
                    stopped.waiting(cause);
                    self.bg_cv.notify_all();
                    self.done_cv.wait_for(&mut st, Duration::from_millis(100));
                    continue;
                }
                _ => {}
            }
            if !mem_full {
                return Ok(());
            }
            if st.mem.imms_full(&self.opts) {
                let cause = self
                    .versions
                    .current_all()
                    .iter()
                    .find_map(|v| self.design.flush_blocked(v))
                    .unwrap_or(StallCause::MemtableFull);
                stopped.waiting(cause);
                self.bg_cv.notify_all();
                self.done_cv.wait_for(&mut st, Duration::from_millis(100));
                continue;
            }
            // Switch to a new log and memtable: the spare PM WAL if one is
            // ready (already named in the MANIFEST), else a new log. The
            // spare slot stays locked until the new log has its number, so
            // no spare made meanwhile is numbered below it.
            let mut spare_slot = self.spares_logs().then(|| self.spare_log.lock());
            let spare = spare_slot.as_mut().and_then(|slot| slot.take());
            if spare_slot.is_some() {
                self.spare_wanted.store(true, Ordering::Release);
            }
            let (n, log) = match spare {
                Some(spare) => spare,
                None => self.make_log()?,
            };
            drop(spare_slot);
            if log.ssd_file {
                // Its name is synced before a sync write, a flush's edit or
                // a clean close needs it, not here: a directory fsync in
                // the write path took 10-130 ms under a fill's writeback
                // (perf sched timehist, README "Stalls").
                self.wal_dir_unsynced.store(true, Ordering::Release);
            }
            // The old SSD log is synced in the background (by the next
            // flush when regions share it, or first thing by a later sync
            // write), never here in the write path: an fsync of a whole
            // memtable's log would stall writers.
            let mut old = std::mem::replace(&mut *self.log.lock(), log.writer);
            if old.in_pm() {
                // A retired PM log is sealed where its persisted groups end
                // (every one of them was persisted before it was
                // acknowledged), so that damage at its end reads as
                // corruption, not as a torn tail dropping acknowledged
                // writes, until its memtable is flushed. A failed seal
                // leaves it as after a crash: recovery reads its tail by
                // the torn-tail rule.
                let before = old.bytes_written();
                let _ = old.seal();
                let sealed = old.bytes_written() - before;
                self.stats.add_written(|w| w.wal_pm += sealed);
            } else {
                let number = st.mem.ssd_wals.back().copied().unwrap_or(0);
                self.closed_logs.lock().push((number, old));
            }
            if log.ssd_file {
                st.mem.ssd_wals.push_back(n);
            }
            st.mem.switch(n, force);
            self.install_super_version(&st);
            drop(st);
            self.bg_cv.notify_all();
            return Ok(());
        }
    }

    /// Makes a log under a new number; one in PM is named in the MANIFEST
    /// (PM has no directory to find it by). Its name, for an SSD WAL, is
    /// synced later (`sync_wal_dir`).
    fn make_log(&self) -> Result<(u64, NewLog)> {
        let n = self.versions.new_file_number();
        let log = new_log(
            &self.opts,
            &self.fs,
            &self.dir,
            self.design.as_ref(),
            self.pm_wals.as_ref(),
            &self.stats,
            n,
            false,
        )?;
        if let Some(w) = log.pm_wal {
            let edit = VersionEdit {
                new_pm_wals: vec![w],
                ..Default::default()
            };
            self.versions
                .log_and_apply(edit, self.last_seq.load(Ordering::Acquire))?;
        }
        Ok((n, log))
    }

    /// True if memtable switches take a spare log made ahead
    /// (`Inner::spare_log`): the engine's own WAL, in PM.
    pub(super) fn spares_logs(&self) -> bool {
        self.design.log().is_none()
            && self.pm_wals.is_some()
            && self.opts.wal_placement() == WalPlacement::Pm
    }

    /// Makes the next PM WAL and names it in the MANIFEST, outside the
    /// write path (a flush thread, once a switch took the last one). Its
    /// number is taken with `spare_log` locked, so it is above every log a
    /// switch made before: switches take logs in increasing numbers. A
    /// failure leaves the next switch to make its log itself, as without
    /// spares; a log made but not named goes back at the next open's
    /// reconcile. REQUIRES: `state` not locked.
    pub(super) fn prepare_spare_log(&self) {
        if !self.spare_wanted.swap(false, Ordering::AcqRel) || !self.spares_logs() {
            return;
        }
        let mut spare = self.spare_log.lock();
        if spare.is_some() {
            return;
        }
        match self.make_log() {
            Ok(made) => *spare = Some(made),
            Err(e) => {
                log::debug!("no spare PM WAL made ahead ({e}); the next switch makes its own")
            }
        }
    }

    /// Makes the names of the SSD WALs created so far crash-proof (one
    /// directory sync, if any was created since the last). RocksDB syncs a
    /// new log's directory the same way, lazily, before the first sync
    /// write to it.
    pub(super) fn sync_wal_dir(&self) -> Result<()> {
        if self.wal_dir_unsynced.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.fs.sync_dir(&self.dir) {
                self.wal_dir_unsynced.store(true, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Syncs (and closes) the SSD logs retired since the last call, oldest
    /// first. A log whose sync fails stays, with every later one, so the
    /// next sync write tries again instead of skipping it.
    pub(super) fn sync_closed_logs(&self) -> Result<()> {
        let mut closed = self.closed_logs.lock();
        let mut synced = 0;
        let r = closed.iter_mut().try_for_each(|(_, log)| {
            log.sync()?;
            synced += 1;
            Ok(())
        });
        closed.drain(..synced);
        r
    }
}

#[cfg(test)]
mod tests {
    use crate::storage::WriteHint;
    use crate::{Db, Options};
    use std::sync::Arc;

    #[test]
    fn wal_and_table_files_get_their_own_write_back_hints() {
        let fs = crate::storage::mem::MemFs::new();
        let opts = Options {
            fs: Arc::new(fs.clone()),
            memtable_size_bytes: 64 << 10,
            sst_size_bytes: 64 << 10,
            bytes_per_sync: 8 << 10,
            wal_bytes_per_sync: 32 << 10,
            ..Options::default()
        };
        let db = Db::open("/db", opts).unwrap();
        for i in 0..100u32 {
            db.put(format!("k{i:04}").as_bytes(), &[7u8; 100]).unwrap();
        }
        db.flush().unwrap();
        let hints = fs.write_hints();
        let with_ext = |ext: &str| -> Vec<WriteHint> {
            hints
                .iter()
                .filter(|(p, _)| p.extension().is_some_and(|e| e == ext))
                .map(|(_, h)| *h)
                .collect()
        };
        let (logs, tables) = (with_ext("log"), with_ext("sst"));
        assert!(!logs.is_empty() && !tables.is_empty(), "{hints:?}");
        assert!(logs
            .iter()
            .all(|h| h.bytes_per_sync == 32 << 10 && !h.direct));
        assert!(tables.iter().all(|h| h.bytes_per_sync == 8 << 10));
        db.close().unwrap();
    }
}
