//! List compaction (NV-Cache §III-E): NVTables of one cached level merged
//! into the next one without copying a key or a value.
//!
//! 1. **Merge** the inputs' offset arrays (the victims, and the overlapped
//!    tables of the next level read as one sorted run) in internal-key
//!    order. Nothing walks an input's KV list: after a crash in the middle
//!    of a relink the links of live tables are not trustworthy, and the
//!    arrays say everything.
//! 2. **Deduplicate**: a version shadowed by a newer one of the same key
//!    that every live snapshot sees is dropped (its node stays where it
//!    is, for the old versions that still read it); tombstones are kept —
//!    they drop only at the SSD base (`compaction` rule 2, in the
//!    eviction's merge).
//! 3. **Cut** the survivors into output NVTables at `nvcache_table_bytes`
//!    of nodes (the paper makes one unbounded output: `u64::MAX`), at user
//!    keys, avoiding too much overlap with the level below (leveldb's
//!    rule, `compaction::SizeCutter`).
//! 4. **Copy out** (ours, `nvcache_copy_out_percent`): survivors that live
//!    in a segment whose live bytes after this compaction — the nodes of
//!    every table of the version there, minus the inputs', plus the
//!    survivors' — fall under that share of its capacity are copied into
//!    fresh arena segments, sparsest segments first, within the PM budget
//!    the picker granted. Segments are freed only when no table lists
//!    them, so without this a few live nodes pin a whole segment.
//! 5. **Relink** (`nvcache_relink`, the paper's default): every output
//!    node's `next`/`prev` words are rewritten to the output's list order
//!    (`store_u64`, then a persist of the node's 16 link bytes) — 16 bytes
//!    per node, reported as PM *relinked* bytes. Nothing reads the links
//!    of a completed table (readers and compactions use the arrays,
//!    recovery walks only logs), so `ArrayOnly` skips this step.
//! 6. **Array**: each output's offset array is written and persisted; the
//!    edit deletes the inputs and adds the outputs (new ids: a table that
//!    changes takes a new id).
//!
//! Crash consistency: everything a job writes before its edit is durable
//! is either fresh PM no table lists (arrays, arena segments: reclaimed at
//! open) or link words no reader uses. A crash anywhere leaves the inputs
//! listed, readable and complete; a re-run succeeds.
//!
//! Concurrency: the inputs are the job's alone (the engine's busy set);
//! old versions may still read them — through their arrays, never their
//! links — and the links this job rewrites belong to its inputs' nodes only.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::format::{SegmentKind, NODE_BODY, NODE_NEXT, NODE_PREV, SEGMENT_HEADER_BYTES};
use super::log::Space;
use super::table::{NvTable, TableBuild, PREFETCH_AHEAD};
use super::TableCache;
use crate::compaction::{Cutter, JobEnv, SizeCutter};
use crate::design::{JobOutput, Task, Written};
use crate::error::Result;
use crate::key::{self, SeqNo};
use crate::stats::Tier;
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};
use crate::version::edit::VersionEdit;

const PAGE: u64 = PAGE_SIZE_BYTES;

/// How long a compaction waits for PM before it gives up (its inputs stay
/// as they are; the picker then prefers an eviction).
const COMPACTION_PM_WAIT: Duration = Duration::from_millis(200);

/// How a list compaction treats the KV lists and sparse segments.
#[derive(Debug, Clone, Copy)]
pub struct ListConfig {
    /// Output size in node bytes (`u64::MAX`: one output).
    pub table_bytes: u64,
    /// Rewrite the links of every output node (the paper).
    pub relink: bool,
    /// Copy nodes out of segments less live than this percentage.
    pub copy_out_percent: u32,
}

/// A sorted run of tables read entry by entry.
struct Run {
    tables: Vec<Arc<NvTable>>,
    t: usize,
    i: usize,
    /// The current entry's user key and tag.
    key: Vec<u8>,
    tag: u64,
    at: u64,
    size: u64,
    seg: PageRun,
}

impl Run {
    fn new(tables: Vec<Arc<NvTable>>) -> Result<Run> {
        let mut r = Run {
            tables,
            t: 0,
            i: 0,
            key: Vec::new(),
            tag: 0,
            at: 0,
            size: 0,
            seg: PageRun { first: 0, count: 0 },
        };
        r.load()?;
        Ok(r)
    }

    fn valid(&self) -> bool {
        self.t < self.tables.len()
    }

    /// Loads the entry at `(t, i)`, skipping to the next table at the end
    /// of one.
    fn load(&mut self) -> Result<()> {
        while self.t < self.tables.len() && self.i >= self.tables[self.t].len() {
            self.t += 1;
            self.i = 0;
        }
        let Some(table) = self.tables.get(self.t) else {
            return Ok(());
        };
        let node = table.node(self.i)?;
        self.key.clear();
        self.key.extend_from_slice(node.key);
        self.tag = node.tag;
        self.at = node.at;
        self.size = node.size();
        self.seg = table
            .segment_of(node.at)
            .map_or(PageRun { first: 0, count: 0 }, |u| u.run);
        Ok(())
    }

    fn advance(&mut self) -> Result<()> {
        self.i += 1;
        if let Some(t) = self.tables.get(self.t) {
            t.prefetch(self.i + PREFETCH_AHEAD);
        }
        self.load()
    }

    fn table(&self) -> &Arc<NvTable> {
        &self.tables[self.t]
    }
}

/// A node that survives the merge.
#[derive(Debug, Clone, Copy)]
struct Survivor {
    at: u64,
    size: u64,
    seg: PageRun,
    tag: u64,
    key_at: usize,
    key_len: usize,
    /// Index of the input table holding it.
    table: usize,
}

/// The PM a job allocates: arena segments for the copies (filled in
/// order) and the outputs' array runs. Freed on drop unless the job
/// finished.
struct JobPm<'a> {
    space: &'a Space,
    owner: u64,
    /// The arena segment being filled: where the next copy goes, its end.
    cur: Option<PageRun>,
    cursor: u64,
    end: u64,
    /// Unwritten copies, starting at `start`.
    buf: Vec<u8>,
    start: u64,
    runs: Vec<PageRun>,
    done: bool,
}

impl JobPm<'_> {
    /// Appends a copy of a node (`body`: its bytes from offset 16 on);
    /// returns where it goes and its segment. `Ok(None)`: no PM.
    fn copy(&mut self, body: &[u8], size: u64) -> Result<Option<(u64, PageRun)>> {
        let run = match self.cur {
            Some(run) if self.cursor + size <= self.end => run,
            _ => {
                self.flush()?;
                let Some(run) = self.space.new_segment(
                    self.owner,
                    self.runs.len() as u32,
                    SegmentKind::Arena,
                    0,
                    size,
                    COMPACTION_PM_WAIT,
                )?
                else {
                    return Ok(None);
                };
                self.runs.push(run);
                self.cur = Some(run);
                self.cursor = run.first * PAGE + SEGMENT_HEADER_BYTES;
                self.end = (run.first + run.count) * PAGE;
                self.start = self.cursor;
                run
            }
        };
        let at = self.cursor;
        self.buf.extend_from_slice(&[0u8; NODE_BODY as usize]);
        self.buf.extend_from_slice(body);
        self.buf.resize((at + size - self.start) as usize, 0);
        self.cursor += size;
        Ok(Some((at, run)))
    }

    /// Writes and persists the buffered copies.
    fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.space.region.write(self.start, &self.buf)?;
            self.space.region.persist(self.start, self.buf.len())?;
            self.start += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }
}

impl Drop for JobPm<'_> {
    fn drop(&mut self) {
        if !self.done {
            for r in &self.runs {
                let _ = self.space.tier.free_pages(*r);
            }
        }
    }
}

/// Runs a list compaction (module doc).
pub fn run_list(
    space: &Space,
    cache: &TableCache,
    cfg: &ListConfig,
    env: &JobEnv,
    task: &Task,
    copy_budget: u64,
) -> Result<JobOutput> {
    let level_out = task.output_level;
    // The upper inputs one run each (L0 tables overlap), the output
    // level's tables one run.
    let mut inputs: Vec<Arc<NvTable>> = Vec::new();
    let mut runs: Vec<Run> = Vec::new();
    for (level, tables) in &task.inputs {
        let opened: Vec<Arc<NvTable>> = tables
            .iter()
            .map(|t| cache.open(&t.meta))
            .collect::<Result<_>>()?;
        inputs.extend(opened.iter().cloned());
        if *level == level_out {
            runs.push(Run::new(opened)?);
        } else {
            for t in opened {
                runs.push(Run::new(vec![t])?);
            }
        }
    }
    let index_of: HashMap<u64, usize> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id(), i))
        .collect();

    // 1–3. Merge, deduplicate, cut.
    let mut keys: Vec<u8> = Vec::new();
    let mut survivors: Vec<Survivor> = Vec::new();
    let mut cuts: Vec<usize> = vec![0];
    let mut cutter = SizeCutter::new(cfg.table_bytes, &task.grandparents);
    let mut ikey: Vec<u8> = Vec::new();
    let mut prev_key: Vec<u8> = Vec::new();
    let mut open_bytes = 0u64;
    let mut last_seq_for_key = SeqNo::MAX;
    let mut have_key = false;
    loop {
        let mut best: Option<usize> = None;
        for (i, r) in runs.iter().enumerate() {
            if !r.valid() {
                continue;
            }
            let better = match best {
                None => true,
                Some(b) => r
                    .key
                    .as_slice()
                    .cmp(runs[b].key.as_slice())
                    .then(runs[b].tag.cmp(&r.tag))
                    .is_lt(),
            };
            if better {
                best = Some(i);
            }
        }
        let Some(b) = best else { break };
        let r = &runs[b];
        let new_key = !have_key || prev_key != r.key;
        if new_key {
            prev_key.clear();
            prev_key.extend_from_slice(&r.key);
            have_key = true;
            last_seq_for_key = SeqNo::MAX;
        }
        // Rule 1: shadowed by a newer version every reader sees.
        let drop = last_seq_for_key <= env.smallest_snapshot;
        last_seq_for_key = r.tag >> 8;
        if !drop {
            if new_key {
                ikey.clear();
                ikey.extend_from_slice(&r.key);
                ikey.extend_from_slice(&r.tag.to_le_bytes());
                let open = (survivors.len() > cuts[cuts.len() - 1]).then_some(open_bytes);
                if cutter.cut_before(&ikey, open) && open.is_some() {
                    cuts.push(survivors.len());
                    open_bytes = 0;
                }
            }
            let key_at = keys.len();
            keys.extend_from_slice(&r.key);
            survivors.push(Survivor {
                at: r.at,
                size: r.size,
                seg: r.seg,
                tag: r.tag,
                key_at,
                key_len: r.key.len(),
                table: index_of.get(&r.table().id()).copied().unwrap_or(0),
            });
            open_bytes += r.size;
        }
        runs[b].advance()?;
    }
    cutter.finish(Some(open_bytes));
    cuts.push(survivors.len());
    cuts.dedup();

    // 4. Which segments to copy out of.
    let copy: HashSet<u64> = if cfg.copy_out_percent == 0 || copy_budget == 0 {
        HashSet::new()
    } else {
        choose_copies(
            cache,
            env,
            &inputs,
            &survivors,
            cfg.copy_out_percent,
            copy_budget,
        )?
    };

    // 5–6. Outputs.
    let mut edit = VersionEdit::default();
    for (level, tables) in &task.inputs {
        for t in tables {
            edit.deleted_tables.push((*level as u32, t.meta.id));
        }
    }
    let mut written = Written::default();
    let first_id = env.versions.new_file_number();
    let mut pm = JobPm {
        space,
        owner: first_id,
        cur: None,
        cursor: 0,
        end: 0,
        buf: Vec::new(),
        start: 0,
        runs: Vec::new(),
        done: false,
    };
    let mut placed: Vec<u64> = Vec::new();
    for (n, w) in cuts.windows(2).enumerate() {
        let group = &survivors[w[0]..w[1]];
        if group.is_empty() {
            continue;
        }
        let mut build = TableBuild::with_capacity(group.len());
        placed.clear();
        for s in group {
            let key = &keys[s.key_at..s.key_at + s.key_len];
            let mut at_seg = (s.at, s.seg);
            if copy.contains(&s.seg.first) {
                let t = &inputs[s.table];
                let node = t.node_at(s.at)?;
                node.value(t.region().as_ref(), true)?;
                let body = t
                    .region()
                    .slice(s.at + NODE_BODY, (s.size - NODE_BODY) as usize)?;
                // Without PM the node simply stays where it is.
                if let Some(copied) = pm.copy(body, s.size)? {
                    written.pm_copied += s.size;
                    at_seg = copied;
                }
            }
            placed.push(at_seg.0);
            build.push(at_seg.0, s.size, at_seg.1, key, s.tag);
        }
        pm.flush()?;
        if cfg.relink {
            written.pm_relinked += relink(space, &placed)?;
        }
        let id = if n == 0 {
            first_id
        } else {
            env.versions.new_file_number()
        };
        let Some(built) = build.finish(space, id, COMPACTION_PM_WAIT)? else {
            log::info!("NV-Cache list compaction abandoned: no PM for an offset array");
            return Ok(JobOutput::default());
        };
        pm.runs.push(built.meta.pm_pages[0]);
        written.pm_copied += built.array_bytes;
        edit.new_tables.push((level_out as u32, built.meta));
    }
    pm.done = true;
    debug_assert!(edit.new_tables.windows(2).all(|w| key::compare_internal(
        &w[0].1.largest,
        &w[1].1.smallest
    )
    .is_lt()));
    Ok(JobOutput { edit, written })
}

/// Rewrites the links of `nodes` (in list order) and persists each
/// node's link words; returns the bytes stored.
fn relink(space: &Space, nodes: &[u64]) -> Result<u64> {
    let region = space.region.as_ref();
    for (i, &at) in nodes.iter().enumerate() {
        let next = nodes.get(i + 1).copied().unwrap_or(0);
        let prev = if i == 0 { 0 } else { nodes[i - 1] };
        region.store_u64(at + NODE_NEXT, next)?;
        region.store_u64(at + NODE_PREV, prev)?;
        region.persist(at, 16)?;
    }
    Ok(16 * nodes.len() as u64)
}

/// The segments whose survivors are copied out (module doc, step 4).
fn choose_copies(
    cache: &TableCache,
    env: &JobEnv,
    inputs: &[Arc<NvTable>],
    survivors: &[Survivor],
    percent: u32,
    budget: u64,
) -> Result<HashSet<u64>> {
    // Live bytes per segment in the version, then without the inputs.
    let mut live: HashMap<u64, (u64, i64)> = HashMap::new();
    for t in env.version.levels.iter().flatten() {
        if t.meta.tier != Tier::Pm {
            continue;
        }
        for u in cache.usage(&t.meta)?.iter() {
            let e = live.entry(u.run.first).or_insert((u.run.count, 0));
            e.1 += i64::from(u.live_bytes);
        }
    }
    for t in inputs {
        for u in t.usage() {
            if let Some(e) = live.get_mut(&u.run.first) {
                e.1 -= i64::from(u.live_bytes);
            }
        }
    }
    let mut mine: HashMap<u64, u64> = HashMap::new();
    for s in survivors {
        *mine.entry(s.seg.first).or_insert(0) += s.size;
    }
    let mut sparse: Vec<(u64, u64)> = Vec::new();
    for (&first, &bytes) in &mine {
        let Some(&(pages, outside)) = live.get(&first) else {
            continue;
        };
        let capacity = pages * PAGE - SEGMENT_HEADER_BYTES;
        let after = outside.max(0) as u64 + bytes;
        if after * 100 < capacity * u64::from(percent) {
            sparse.push((after, first));
        }
    }
    sparse.sort_unstable();
    let mut out = HashSet::new();
    let mut spent = 0u64;
    for (_, first) in sparse {
        let bytes = mine.get(&first).copied().unwrap_or(0);
        if spent + bytes > budget {
            break;
        }
        spent += bytes;
        out.insert(first);
    }
    Ok(out)
}
