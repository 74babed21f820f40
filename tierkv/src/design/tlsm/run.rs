//! The jobs of [`Tlsm`]: the fresh PM-output job (byte-addressable or copy
//! compaction, copy-forward), its resume at open, the SST jobs (merges,
//! evictions), and the reaping of finished jobs' slot runs and tags.

use std::sync::Arc;
use std::time::Duration;

use super::build::{self, Mode, OutputParams, Outputs, SlotRef};
use super::format::{self, Layout, Slot};
use super::job::{
    self, merge_into, origin_of, output_layout, read_slot, write_slot, Base, BufferSource,
    GpCutter, JobKind, JobRecord, LevelSource, ListSource, Merge, PartRecord, PartView, Source,
};
use super::list::{self, SkipList};
use super::{PmPages, Tlsm};
use crate::compaction::{merge_to_ssts, JobEnv, OutputSpec};
use crate::design::{leveled, JobOutput, Task, Written};
use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};
use crate::version::edit::VersionEdit;
use crate::version::Version;

const PAGE: u64 = PAGE_SIZE_BYTES;

/// How long a job waits for PM pages before it fails.
const JOB_PM_WAIT: Duration = Duration::from_secs(2);

/// A finished (or failed) job whose slot run and tag go back once its
/// record is gone from the version.
pub(super) struct Pending {
    pub(super) region: usize,
    pub(super) tag: u32,
    pub(super) job: u64,
    pub(super) runs: Vec<PageRun>,
}

/// The region whose current version holds the task's first input.
fn region_of(env: &JobEnv, task: &Task) -> usize {
    let Some(id) = task.input_ids().next() else {
        return 0;
    };
    env.versions
        .current_all()
        .iter()
        .position(|v| v.table_ids().any(|t| t == id))
        .unwrap_or(0)
}

impl Tlsm {
    /// Frees the slot runs and tags of jobs whose records are gone.
    pub(super) fn reap(&self, env: &JobEnv) {
        let versions = env.versions.current_all();
        let mut pending = self.pending.lock();
        pending.retain(|p| {
            let live = versions
                .get(p.region)
                .and_then(|v| v.design_state.get(&p.tag))
                .is_some_and(|b| JobRecord::decode(b).is_ok_and(|r| r.job == p.job));
            if live {
                return true;
            }
            for r in &p.runs {
                if let Err(e) = self.pm.free_pages(*r) {
                    log::warn!("tlsm: could not free the slot run of job {}: {e}", p.job);
                }
            }
            self.tags.lock().remove(&p.tag);
            false
        });
    }

    fn acquire_tag(&self) -> Result<u32> {
        let mut tags = self.tags.lock();
        let tag = (job::JOB_TAG_BASE..job::JOB_TAG_BASE + job::JOB_TAGS)
            .find(|t| !tags.contains(t))
            .ok_or_else(|| {
                Error::InvalidArgument("tlsm: every in-flight job tag is in use".into())
            })?;
        tags.insert(tag);
        Ok(tag)
    }

    /// Opens the input lists of a task, per level.
    pub(super) fn input_lists(&self, task: &Task) -> Result<Vec<(usize, Vec<Arc<SkipList>>)>> {
        task.inputs
            .iter()
            .filter(|(_, ts)| !ts.is_empty())
            .map(|(l, ts)| {
                let lists = ts
                    .iter()
                    .map(|t| self.lists.get(&t.meta))
                    .collect::<Result<Vec<_>>>()?;
                Ok((*l, lists))
            })
            .collect()
    }

    /// The mode and output layout of a PM-output job over `inputs`.
    pub(super) fn mode_for(&self, inputs: &[(usize, Vec<Arc<SkipList>>)]) -> (Mode, Layout) {
        let mut layouts = inputs
            .iter()
            .flat_map(|(_, ls)| ls.iter())
            .map(|l| l.header().layout);
        let first = layouts.next().unwrap_or(Layout::Full);
        let uniform = layouts.all(|l| l.inline() == first.inline());
        let mode = if self.cfg.variant == crate::options::TlsmVariant::Ps || !uniform {
            Mode::Copy
        } else {
            Mode::Link
        };
        (mode, output_layout(mode, first))
    }

    /// True if PM can take the outputs of a job over `inputs`.
    pub(super) fn pm_room_for(&self, inputs: &[(usize, Vec<Arc<SkipList>>)], mode: Mode) -> bool {
        let (entries, bytes): (u64, u64) = inputs
            .iter()
            .flat_map(|(_, ls)| ls.iter())
            .fold((0, 0), |(n, b), l| {
                (n + l.len(), b + l.directory().entry_bytes)
            });
        let need = match mode {
            Mode::Link => entries * 32,
            Mode::Copy => bytes + entries * 40,
        } + 64 * PAGE;
        let free = self.pm.allocator().free_pages() * PAGE;
        free >= need + self.cfg.flush_estimate_bytes
    }

    /// Runs a merge into PM (`tlsm-link`, `tlsm-copy`) or a copy-forward:
    /// records the job, links or copies its outputs, and returns the edit
    /// that adds them, deletes the inputs and clears the record.
    ///
    /// A merge big enough is cut into key-range parts
    /// ([`leveled::subcompaction_cuts`], at most `max_subcompactions`) run
    /// side by side: a link merge is CPU work (a node per kept entry, the
    /// entry's key read through PM), and one thread was all a compaction
    /// had — the bound of TLSM's writes at `tlsm10` (issue 19's profile:
    /// one compaction thread saturated, 1.28 of 2 cores busy). Each part
    /// has its own job id and slot and is resumed on its own; the job's
    /// one edit adds every part's outputs, in key order.
    pub(super) fn run_pm_job(
        &self,
        env: &JobEnv,
        task: &Task,
        kind: JobKind,
        inputs: Vec<(usize, Vec<Arc<SkipList>>)>,
    ) -> Result<JobOutput> {
        let region = region_of(env, task);
        let (mode, layout) = match self.mode_for(&inputs) {
            // A copy-forward exists to free the runs its input pins: linking
            // to entries inline in the input's own nodes (ps_bac) would pin
            // them again and free nothing, so inline entries are copied.
            (Mode::Link, l) if kind == JobKind::CopyForward && l.inline() => {
                (Mode::Copy, output_layout(Mode::Copy, l))
            }
            ml => ml,
        };
        let target = match kind {
            JobKind::Merge => self.cfg.sst_size_bytes,
            JobKind::CopyForward => u64::MAX,
        };
        let grandparents: Vec<(Vec<u8>, u64)> = match kind {
            JobKind::Merge => task
                .grandparents
                .iter()
                .map(|g| (g.meta.largest.clone(), g.meta.size_bytes))
                .collect(),
            JobKind::CopyForward => Vec::new(),
        };
        let (entries, bytes) = entries_and_bytes(&inputs);
        let gp_bytes: u64 = grandparents.iter().map(|g| g.1).sum();
        let capacity = match kind {
            JobKind::CopyForward => 4,
            JobKind::Merge => {
                let t = target.max(1);
                let est = bytes / t + gp_bytes / t.saturating_mul(10).max(1) + 4;
                (2 * est + 8).min(u64::from(u32::MAX / 16)) as u32
            }
        };
        let cuts = match kind {
            JobKind::Merge => leveled::subcompaction_cuts(task, env.opts.subcompactions(), target),
            JobKind::CopyForward => Vec::new(),
        };
        let job = env.versions.new_file_number();
        let pages = PmPages::new(&self.pm, JOB_PM_WAIT);
        // One slot per part (each part's outputs are named in its own,
        // under its own job id), every one holding the grandparents.
        let mut slots: Vec<(u64, PageRun, SlotRef)> = Vec::with_capacity(cuts.len() + 1);
        let mut slot_bytes = 0u64;
        let made = (|| -> Result<()> {
            for i in 0..=cuts.len() {
                let part_job = if i == 0 {
                    job
                } else {
                    env.versions.new_file_number()
                };
                let slot = Slot {
                    job: part_job,
                    capacity,
                    grandparents: grandparents.clone(),
                };
                let n = (slot.bytes() as u64).div_ceil(PAGE);
                let run = build::Pages::alloc(&pages, n, n)?;
                match write_slot(&self.region, run, &slot) {
                    Ok(r) => slots.push((part_job, run, r)),
                    Err(e) => {
                        let _ = self.pm.free_pages(run);
                        return Err(e);
                    }
                }
                slot_bytes += slot.bytes() as u64;
            }
            Ok(())
        })();
        let free_slots = |slots: &[(u64, PageRun, SlotRef)]| {
            for (_, run, _) in slots {
                let _ = self.pm.free_pages(*run);
            }
        };
        if let Err(e) = made {
            free_slots(&slots);
            return Err(e);
        }
        let tag = match self.acquire_tag() {
            Ok(t) => t,
            Err(e) => {
                free_slots(&slots);
                return Err(e);
            }
        };
        let drop_tombstones = kind == JobKind::Merge;
        let record = JobRecord {
            job,
            level: task.output_level as u32,
            kind,
            mode,
            drop_tombstones,
            smallest_snapshot: env.smallest_snapshot,
            target_bytes: target,
            slot: slots[0].1,
            inputs: inputs
                .iter()
                .flat_map(|(l, ls)| ls.iter().map(move |x| (*l as u32, x.id())))
                .collect(),
            more_parts: slots[1..]
                .iter()
                .zip(&cuts)
                .map(|((part_job, run, _), key)| PartRecord {
                    job: *part_job,
                    slot: *run,
                    first_key: key.clone(),
                })
                .collect(),
        };
        let start = VersionEdit {
            region: region as u32,
            design_records: vec![(tag, record.encode())],
            ..VersionEdit::default()
        };
        if let Err(e) = env.versions.log_and_apply(start, 0) {
            free_slots(&slots);
            self.tags.lock().remove(&tag);
            return Err(e);
        }
        // From here the record names the slots: they go back once the
        // record is cleared (`reap`).
        self.pending.lock().push(super::run::Pending {
            region,
            tag,
            job,
            runs: slots.iter().map(|s| s.1).collect(),
        });
        let mut written = Written::default();
        match mode {
            Mode::Link => written.pm_relinked += slot_bytes,
            Mode::Copy => written.pm_copied += slot_bytes,
        }
        // A copy-forward of a buffer list first writes the new buffer (one
        // part: it is one list) and links to it.
        let copied_buffer = match (kind, layout) {
            (JobKind::CopyForward, Layout::Full) => {
                let list = inputs
                    .first()
                    .and_then(|(_, ls)| ls.first())
                    .ok_or_else(|| {
                        Error::InvalidArgument("copy-forward without an input".into())
                    })?;
                let (run, n) =
                    build::write_buffer(&self.region, &pages, job, &mut list.iter_list())?;
                written.pm_copied += n;
                self.lists.verified_buffer(run.first);
                let sref = slots[0].2;
                self.region
                    .store_u64(sref.buffer_word, format::pack_run(run))?;
                self.region.persist(sref.buffer_word, 8)?;
                Some(Merge::new(vec![Box::new(BufferSource::open(
                    Arc::clone(&self.region),
                    run,
                )?)]))
            }
            _ => None,
        };
        let shared = PartShared {
            rec: &record,
            layout,
            node_hint: node_hint(entries, bytes, target, mode),
            grandparents: &grandparents,
            version: &env.version,
            inputs: &inputs,
        };
        let mut first = copied_buffer;
        let parts = record.parts();
        if parts.len() > 1 {
            self.counters
                .split_jobs
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let runs: Vec<_> = parts
            .iter()
            .zip(&slots)
            .map(|(part, slot)| {
                let merge = first.take();
                let shared = &shared;
                move || self.run_part(env, shared, *part, slot.2, None, merge)
            })
            .collect();
        let mut built = Vec::new();
        let mut first_err = None;
        for r in crate::compaction::side_by_side(runs) {
            match r {
                Ok((b, w)) => {
                    built.extend(b);
                    written += w;
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        // A failed part fails the job; its record stays, and the next open
        // resumes it (as a failed single merge).
        if let Some(e) = first_err {
            return Err(e);
        }
        let mut edit = VersionEdit::default();
        for (l, ls) in &inputs {
            for x in ls {
                edit.deleted_tables.push((*l as u32, x.id()));
            }
        }
        for b in built {
            self.refs.register(b.meta.id, b.refs);
            edit.new_tables.push((task.output_level as u32, b.meta));
        }
        if let Some((l, c)) = &task.cursor {
            edit.compact_cursors.push((*l as u32, c.clone()));
        }
        edit.design_records.push((tag, Vec::new()));
        if kind == JobKind::CopyForward {
            self.counters
                .copy_forward_bytes
                .fetch_add(written.pm_copied, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(JobOutput { edit, written })
    }

    /// Runs one key-range part of a PM-output job into the outputs its
    /// slot names: fresh (`named` `None`), or resumed over the outputs a
    /// crash left named (`named`: their header offsets), replaying their
    /// linked nodes before linking more. `merge`: the job's merge when it
    /// is not the inputs' (a copy-forward's new buffer).
    fn run_part(
        &self,
        env: &JobEnv,
        sh: &PartShared<'_>,
        part: PartView<'_>,
        sref: SlotRef,
        named: Option<&[u64]>,
        merge: Option<Merge>,
    ) -> Result<(Vec<build::BuiltList>, Written)> {
        let rec = sh.rec;
        let unresumable = |u: build::Unresumable| {
            Error::InvalidArgument(format!("tlsm job {} part {}: {}", rec.job, part.job, u.0))
        };
        let pages = PmPages::new(&self.pm, JOB_PM_WAIT);
        let next_id = || env.versions.new_file_number();
        let params = OutputParams {
            region: &self.region,
            pages: &pages,
            slot: sref,
            job: part.job,
            level: rec.level,
            layout: sh.layout,
            origin: origin_of(rec.kind),
            inputs: rec.inputs.iter().map(|(_, id)| *id).collect(),
            persist_every: self.cfg.persist_every,
            mode: rec.mode,
            node_bytes_hint: sh.node_hint,
            next_id: &next_id,
            filter_bits: self.lists.builder_filter_bits(),
        };
        let mut outs = match named {
            None => Outputs::new(params),
            Some(headers) => {
                let o = Outputs::resume(params, headers).map_err(unresumable)?;
                // Ids handed out before the crash may be above the
                // MANIFEST's next file number: the outputs about to be
                // made must not take them.
                for id in o.named_ids() {
                    env.versions.mark_file_number_used(id);
                }
                o
            }
        };
        let mut merge = merge.unwrap_or_else(|| Self::merge_of(sh.inputs));
        let mut cutter = GpCutter::new(rec.target_bytes, sh.grandparents.to_vec());
        let base = rec.drop_tombstones.then_some(Base {
            version: sh.version,
            level: rec.level as usize,
        });
        merge_into(
            &mut merge,
            part.span,
            &mut outs,
            &mut cutter,
            rec.smallest_snapshot,
            base,
        )?
        .map_err(unresumable)?;
        let (mut built, written) = outs.finish_all().map_err(unresumable)?;
        // Register each output's reader here, on the part's own thread:
        // the builder's own (`ListCache::adopt`), or with `check_outputs`
        // the opening walk (every node checked, the DRAM filter built),
        // which would otherwise run when the job's tables are warmed, one
        // list after another on the compaction thread (7-8% of its samples
        // at tlsm10). A list that fails its checks is left for its first
        // reader to report.
        for b in &mut built {
            if let Err(e) = self.lists.adopt(&b.meta, b.reader.take()) {
                log::warn!("tlsm: output #{} of job {}: {e}", b.meta.id, rec.job);
            }
        }
        Ok((built, written))
    }

    /// The merge of a job's inputs: each L0 list alone, each deeper level
    /// as one concatenation.
    fn merge_of(inputs: &[(usize, Vec<Arc<SkipList>>)]) -> Merge {
        let mut kids: Vec<Box<dyn Source>> = Vec::new();
        for (l, ls) in inputs {
            if *l == 0 || ls.len() == 1 {
                kids.extend(
                    ls.iter()
                        .map(|x| Box::new(ListSource::new(x)) as Box<dyn Source>),
                );
            } else {
                kids.push(Box::new(LevelSource::new(ls.clone())));
            }
        }
        Merge::new(kids)
    }

    /// Resumes (or drops) the job recorded under `tag` in region `region`'s
    /// version `v`; returns the edit finishing it.
    pub(super) fn resume(
        &self,
        env: &JobEnv,
        region: usize,
        v: &Version,
        tag: u32,
        rec: &JobRecord,
    ) -> VersionEdit {
        let mut edit = VersionEdit {
            region: region as u32,
            design_records: vec![(tag, Vec::new())],
            ..VersionEdit::default()
        };
        for part in rec.parts() {
            env.versions.mark_file_number_used(part.job);
        }
        match self.try_resume(env, v, rec) {
            Ok(Some((inputs, built))) => {
                for (l, id) in inputs {
                    edit.deleted_tables.push((l, id));
                }
                for b in built {
                    env.versions.mark_file_number_used(b.meta.id);
                    self.refs.register(b.meta.id, b.refs);
                    edit.new_tables.push((rec.level, b.meta));
                }
                self.counters
                    .resumed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                log::info!(
                    "tlsm: resumed compaction job {} into L{}",
                    rec.job,
                    rec.level
                );
            }
            Ok(None) => {
                log::warn!(
                    "tlsm: compaction job {} was not resumed (an input is gone); its pages go back",
                    rec.job
                );
            }
            Err(e) => {
                log::warn!("tlsm: compaction job {} cannot be resumed ({e}); it is dropped and its inputs stay", rec.job);
            }
        }
        edit
    }

    /// The runs the in-flight job `rec` uses, read as its resume will read
    /// them (`Design::live_pm_runs`, before the resume): each part's slot
    /// run, a copy-forward's new buffer, and the header, node and
    /// directory runs of every output a slot names. Nothing past the first
    /// thing the resume would reject: the resume then drops the job, and
    /// what it had written goes back at the reconcile after the recovery
    /// hook.
    pub(super) fn job_runs(&self, rec: &JobRecord) -> Vec<PageRun> {
        let region = self.region.as_ref();
        let mut runs = Vec::new();
        for part in rec.parts() {
            let (slot, _, outs, buffer_word) = match read_slot(region, part.slot) {
                Ok(s) => s,
                Err(e) => {
                    log::debug!(
                        "tlsm: job {} part {}: slot run unreadable ({e})",
                        rec.job,
                        part.job
                    );
                    return runs;
                }
            };
            if slot.job != part.job {
                log::debug!(
                    "tlsm: job {}: slot run of part {} names job {}",
                    rec.job,
                    part.job,
                    slot.job
                );
                return runs;
            }
            runs.push(part.slot);
            if rec.kind == JobKind::CopyForward {
                if let Some(run) = format::unpack_run(buffer_word) {
                    match BufferSource::open(Arc::clone(&self.region), run) {
                        Ok(_) => runs.push(run),
                        Err(e) => {
                            log::debug!("tlsm: job {}: buffer unreadable ({e})", rec.job);
                            return runs;
                        }
                    }
                }
            }
            for (i, &hoff) in outs.iter().enumerate() {
                match build::output_runs(region, part.job, rec.level, rec.mode, i as u32, hoff) {
                    Ok(r) => runs.extend(r),
                    Err(e) => {
                        log::debug!(
                            "tlsm: job {} part {}: output {i} unreadable ({e})",
                            rec.job,
                            part.job
                        );
                        return runs;
                    }
                }
            }
        }
        runs
    }

    /// Runs the interrupted job `rec` to its end, part after part (each
    /// over its own slot's outputs); `None` if an input is gone.
    #[allow(clippy::type_complexity)]
    fn try_resume(
        &self,
        env: &JobEnv,
        v: &Version,
        rec: &JobRecord,
    ) -> Result<Option<(Vec<(u32, u64)>, Vec<build::BuiltList>)>> {
        let mut inputs: Vec<(usize, Vec<Arc<SkipList>>)> = Vec::new();
        for &(l, id) in &rec.inputs {
            let Some(t) = v
                .levels
                .get(l as usize)
                .and_then(|ts| ts.iter().find(|t| t.meta.id == id))
            else {
                return Ok(None);
            };
            let list = self.lists.get(&t.meta)?;
            match inputs.iter_mut().find(|(x, _)| *x == l as usize) {
                Some((_, ls)) => ls.push(list),
                None => inputs.push((l as usize, vec![list])),
            }
        }
        let first_layout = inputs
            .first()
            .and_then(|(_, ls)| ls.first())
            .map_or(Layout::Full, |l| l.header().layout);
        let layout = output_layout(rec.mode, first_layout);
        let (entries, bytes) = entries_and_bytes(&inputs);
        // Ids the crash left named in any part's slot may be above the
        // MANIFEST's next file number: mark them all before the first part
        // makes a new output (or it could take a later part's id).
        for part in rec.parts() {
            let Ok((_, _, outs, _)) = read_slot(self.region.as_ref(), part.slot) else {
                continue; // that part's resume reports it
            };
            for hoff in outs {
                if let Ok(h) = build::header_run_at(self.region.as_ref(), hoff)
                    .and_then(|run| list::read_header(self.region.as_ref(), run))
                {
                    env.versions.mark_file_number_used(h.header.id);
                }
            }
        }
        let mut built = Vec::new();
        for part in rec.parts() {
            let (slot, sref, outs, buffer_word) = read_slot(self.region.as_ref(), part.slot)?;
            if slot.job != part.job {
                return Err(Error::corruption(
                    self.region.name(),
                    part.slot.first * PAGE,
                    "slot run names another job",
                ));
            }
            let merge = match (rec.kind, layout) {
                (JobKind::CopyForward, Layout::Full) => {
                    let run = match format::unpack_run(buffer_word) {
                        Some(run) => run,
                        None => {
                            let list =
                                inputs
                                    .first()
                                    .and_then(|(_, ls)| ls.first())
                                    .ok_or_else(|| {
                                        Error::InvalidArgument(
                                            "copy-forward without an input".into(),
                                        )
                                    })?;
                            let pages = PmPages::new(&self.pm, JOB_PM_WAIT);
                            let (run, _) = build::write_buffer(
                                &self.region,
                                &pages,
                                rec.job,
                                &mut list.iter_list(),
                            )?;
                            self.region
                                .store_u64(sref.buffer_word, format::pack_run(run))?;
                            self.region.persist(sref.buffer_word, 8)?;
                            run
                        }
                    };
                    Some(Merge::new(vec![Box::new(BufferSource::open(
                        Arc::clone(&self.region),
                        run,
                    )?)]))
                }
                _ => None,
            };
            let shared = PartShared {
                rec,
                layout,
                node_hint: node_hint(entries, bytes, rec.target_bytes, rec.mode),
                grandparents: &slot.grandparents,
                version: v,
                inputs: &inputs,
            };
            let (b, _) = self.run_part(env, &shared, part, sref, Some(&outs), merge)?;
            built.extend(b);
        }
        Ok(Some((rec.inputs.clone(), built)))
    }

    /// Writes skip lists to SSD as SSTs at their own levels (`tlsm-evict`).
    pub(super) fn run_evict(&self, env: &JobEnv, task: &Task) -> Result<JobOutput> {
        let mut edit = VersionEdit::default();
        let mut made = Vec::new();
        let r = (|| -> Result<()> {
            for (level, ts) in &task.inputs {
                for t in ts {
                    let list = self.lists.get(&t.meta)?;
                    let gps = env.version.overlapping(
                        level + 1,
                        Some(t.smallest_user_key()),
                        Some(t.largest_user_key()),
                    );
                    let spec = OutputSpec {
                        level: *level,
                        target_size_bytes: if *level == 0 {
                            u64::MAX
                        } else {
                            self.cfg.sst_size_bytes
                        },
                        grandparents: &gps,
                        may_drop_tombstones: false,
                    };
                    let mut it: Box<dyn InternalIterator> = Box::new(list.iter_list());
                    let metas = merge_to_ssts(env, it.as_mut(), &spec)?;
                    edit.deleted_tables.push((*level as u32, t.meta.id));
                    for m in metas {
                        made.push(m.id);
                        edit.new_tables.push((*level as u32, m));
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            for id in made {
                let _ = env.fs.remove(&env.dir.join(crate::sst::sst_file_name(id)));
            }
            return Err(e);
        }
        self.counters.evicted_lists.fetch_add(
            task.inputs.iter().map(|(_, ts)| ts.len() as u64).sum(),
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(JobOutput::ssd(edit))
    }

    /// A compaction writing SSTs (or a trivial move).
    pub(super) fn run_sst(&self, env: &JobEnv, task: &Task) -> Result<JobOutput> {
        leveled::run_merge(env, task, self.cfg.sst_size_bytes)
    }
}

/// What every part of one PM-output job shares.
struct PartShared<'a> {
    rec: &'a JobRecord,
    layout: Layout,
    node_hint: u64,
    grandparents: &'a [(Vec<u8>, u64)],
    /// The version whose deeper levels decide where tombstones may drop.
    version: &'a Version,
    inputs: &'a [(usize, Vec<Arc<SkipList>>)],
}

/// Entries and entry bytes of a job's inputs.
fn entries_and_bytes(inputs: &[(usize, Vec<Arc<SkipList>>)]) -> (u64, u64) {
    inputs
        .iter()
        .flat_map(|(_, ls)| ls.iter())
        .fold((0, 0), |(n, b), l| {
            (n + l.len(), b + l.directory().entry_bytes)
        })
}

/// The first node run of an output: about one output's nodes.
fn node_hint(entries: u64, bytes: u64, target: u64, mode: Mode) -> u64 {
    let avg = (bytes / entries.max(1)).max(1);
    let per_output = (target.min(bytes) / avg).clamp(1, entries.max(1));
    let node = match mode {
        Mode::Link => 30,
        Mode::Copy => 30 + avg + 8,
    };
    (per_output * node + per_output * node / 8).min(64 << 20)
}
