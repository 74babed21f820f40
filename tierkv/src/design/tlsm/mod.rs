//! `tlsm`: TLSM (seed 003, IEEE Access 2020) — the levels in PM are
//! persistent skip lists instead of SSTs; compaction between them is
//! byte-addressable (new nodes point at entries already in PM, no key or
//! value byte is copied); a flush copies the memtable once into a
//! persistent buffer; tiering policies decide which levels live in PM.
//!
//! * **Flush** ([`build::flush_list`], Algorithm 1): the memtable is encoded
//!   into one DRAM buffer (length-prefixed entries), copied into persistent
//!   buffers with one write and one persist each (one buffer when PM has a
//!   free run that long, else as many as it takes: see "PM room" below),
//!   and an L0 skip list
//!   is built in DRAM over it (heights from a hash of each key, p = 1/4,
//!   at most 12) and written with one persist per node run; a null
//!   sentinel closes it. The MANIFEST edit that adds the list commits the
//!   flush. `TlsmOptions::persist_order = Faithful` runs Algorithm 1 as
//!   printed instead (each node persisted and linked one by one, the null
//!   node, then the buffer): the paper's unsafe order, kept to measure it.
//! * **Byte-addressable compaction** ([`picker::LINK`], Algorithm 2): the
//!   inputs' entries are merged (leveldb's dropping rules) and each kept
//!   one gets a new node pointing at its bytes where they already are;
//!   outputs are cut on user-key boundaries (the engine's size and
//!   grandparent rule) and closed with a null sentinel (also the last,
//!   part-full one). An entry outside its data run is `Corruption` and
//!   the job ends with no edit. Bytes written are reported as relinked;
//!   none are copied. A merge of at least two outputs is cut into
//!   key-range parts (`max_subcompactions`) linked side by side, each
//!   resumable on its own (`run::run_pm_job`): linking is CPU work, and
//!   one thread per job left a core idle.
//! * **Variants** (`TlsmOptions::variant`): `ps` — nodes hold their key and
//!   value inline; compaction copies them (`tlsm-copy`); `ps_bac` — inline
//!   nodes at flush, compaction links to the entries inside the input
//!   nodes (pinning those node runs; a copy-forward copies them, or it
//!   would free nothing); `full` — buffer + pointer nodes.
//! * **Tiering** (`TlsmOptions::policy`, [`picker`]): `leveled` (PM up to
//!   `level_threshold`, SSTs below; nothing below the threshold stays a
//!   skip list: a move across it converts), `lru` (everything in PM; at
//!   95% of `lru_capacity_bytes` the longest-resident lists are written to
//!   SSD as SSTs at their own levels until 85%; with an SST among a
//!   compaction's inputs the outputs are SSTs), `none` (everything in PM;
//!   at 95% live entries are copied forward out of the buffers dead ones
//!   pin; a PM tier with nothing to reclaim stops writes with a clear
//!   error).
//! * **Space**: buffers are shared by every list that links into them; the
//!   design counts their references ([`refs`]) and frees a buffer when the
//!   last live list referencing it is released (`Design::release`). Bytes
//!   pinned by dead entries are reported (`Design::stats`: PM space
//!   amplification).
//! * **Readers**: a list this process writes (a flush, each compaction
//!   output) is read through the reader its builder recorded — header,
//!   directory, sentinel and a DRAM bloom filter of the user keys it
//!   linked ([`list::SkipList::from_builder`]) — as RocksDB opens a table
//!   it has just written without reading its every block; a list opened
//!   after a restart (or any list with `TlsmOptions::check_outputs`,
//!   RocksDB's `paranoid_file_checks`) is walked and checked node by node
//!   before its first use ([`list`]). Not walking every output made a `tlsm10` fill
//!   1.1-1.24x faster (README, "TLSM").
//! * **Recovery** (Algorithm 3, with the MANIFEST as the truth): a flush
//!   interrupted before its edit leaves pages no table lists (reclaimed)
//!   and its memtable in the WAL (replayed); a compaction interrupted after
//!   its in-flight record resumes from the last linked node and ends as if
//!   it had never stopped ([`job`]). The allocator is reconciled before
//!   the resume, so `live_pm_runs` declares, besides the data runs of the
//!   listed lists, every run an in-flight record references, read with the
//!   resume's checks: the slot run, a copy-forward's new buffer, and the
//!   header, node and directory runs of the outputs the slot names.
//!
//! # Byte layouts
//!
//! Written twice: here in short, in [`format`] field by field, and in
//! docs/format/pm.md ("TLSM persistent skip lists") with a worked example.
//!
//! ```text
//!  buffer run (full)      node runs (in list order)               header run
//! +--------+-----------+ +------+------+-----+------+-----------+ +--------+-------+-----+
//! | header | entries   | | head | node | ... | node | sentinel  | | static | link  | dir |
//! | 40 B   | klen vlen | | h=12 | off  |     |      | crc of    | | header | words |     |
//! |        | key value | |      | h    |     |      | the nodes | | inputs |       |     |
//! +--------+-----------+ +------+--|---+-----+------+-----------+ +--------+-------+-----+
//!              ^                   |                                  linked count,
//!              +-------------------+  entry_off                       dir offset, node runs
//! ```
//!
//! A list's table metadata lists its own runs (`pm_pages`: the header
//! run first, its node runs that are not data runs — pointer nodes, or in
//! a PS list a first run holding only the head — and a directory run if
//! the directory did not fit in the header run); its data runs (buffers,
//! or node runs holding inline entries) are named by its directory and
//! counted by the design. Every run a list uses is one or the other.
//! `size_bytes` is the bytes of the entries it references, so level scores
//! are LevelDB's.
//!
//! # PM room: fragmentation and the flushes' share
//!
//! A flush used to take its buffer as one run of the whole memtable
//! (16022 pages for a 64 MiB memtable). Buffers are freed only when the
//! last list linking into them goes, at any time, while node, header,
//! directory and slot runs of a few pages each are handed out by the
//! allocator's next-fit cursor all over the region: after some flushes,
//! compactions and evictions the free pages were plenty but in no run of
//! a memtable's size, and nothing merges free runs (nothing in PM moves:
//! a list is never rewritten, and every node that links into a buffer
//! would have to follow it). The flush waited 120 s and the database
//! stopped ("no run of 16022 free pages ... (20337 pages free)", a
//! `medium` fillrandom). The write controller was no help: it stops on
//! free pages, which were enough. Two ways out: make PM defragmentable
//! (moving buffers, rewriting every list that points into them — a
//! compaction's worth of PM writes to gain a run), or let a flush use
//! what is free. TLSM does the second:
//!
//! * **A flush's buffer is split** where PM is: each run it takes is a
//!   buffer of its own (header, id, length, crc: the format is
//!   unchanged, and a list referencing several buffers is what every
//!   compaction output already is), holding the entries that fit it whole;
//!   a run is as long as what is left or the longest PM has, down to the
//!   pages of the next entry. Its node runs likewise (they always could
//!   split), each at least its share of the 64 a header names.
//!   `prepare_flush` reserves the same way. So a flush needs free pages,
//!   not a free run, and the write controller's free-page count is the
//!   right measure (no largest-run bookkeeping is needed). Compaction
//!   outputs take node runs as before; a copy-forward still writes one
//!   buffer (its slot names one run) — copy-forward is off by default and
//!   under `none`, its buffer is one list, not a memtable.
//! * **Flushes have a share of PM**: under `lru` and `leveled` the picker
//!   evicts lists to SSD when free PM runs below what the flushes need
//!   ([`Shape::flush_shortfall`]); before, under `leveled` nothing freed PM
//!   while the levels fit above the threshold, and under `lru` the 95%
//!   trigger never fires when a flush needs more than 5% of the tier (a
//!   64 MiB memtable is a fifth of 400 MiB), so a flush could wait for
//!   room no job would make.
//! * **Waiting is for progress**: a flush waits for pages as long as the
//!   free pages grow (an eviction or a compaction finishing); it fails,
//!   stopping the database, only after 120 s in which nothing was freed —
//!   a tier with nothing left to evict (`none` with nothing to copy
//!   forward). Writers meanwhile wait on the write controller's PM-full
//!   stop (a recorded stall) or are paced by the headroom.
//! * **Headroom**: the pages `prepare_flush` reserved for the memtable
//!   being flushed count as taken, not as still needed (they used to be
//!   counted twice: in the free pages and in the waiting memtable's
//!   estimate), so the one step a memtable switch takes at once is one
//!   memtable (`Headroom::step_bytes`).
//!
//! # Invariants
//!
//! 1. A list is written, persisted and closed (sentinel, directory) before
//!    an edit publishes it; a closed list is never written again.
//! 2. Every data run a live list references is allocated; a data run is
//!    freed only when no registered list references it, after the engine
//!    released the last one (so no version, iterator or job can reach it).
//!    Every other run a live list uses is in its `pm_pages`.
//! 3. Every in-flight PM-output job has a non-empty record in its region's
//!    version under its own tag; the job's edit clears it atomically with
//!    the inputs' deletion and the outputs' addition. A slot run is freed
//!    only after its record is gone from the current (durable) version;
//!    at open, the runs the record references stay allocated until the
//!    resume's edit clears it (`live_pm_runs`).
//! 4. Under `leveled`, every skip list lives at a level ≤ the threshold
//!    once the picker has caught up (misplaced lists are evicted first).
//!
//! # Concurrency
//!
//! `Tlsm` is `Send + Sync`. Flushes are serial (the engine's contract);
//! compactions run on several threads over disjoint inputs (the engine's
//! busy set), and a split merge's parts each on a thread of its own. Shared state: the list cache, the reference index, the tag
//! pool, the reap list and the flush reservation, each behind its own
//! mutex, never held across I/O other than the allocator's. Readers use
//! only closed lists.

pub mod build;
pub mod format;
pub mod inspect;
pub mod job;
pub mod list;
pub mod picker;
pub mod refs;
mod run;
pub mod salvage;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::design::classic::l0_headroom;
use crate::design::{
    Design, Headroom, JobEnv, JobOutput, PickContext, Task, TaskKind, WriteControl,
};
use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::memtable::MemTable;
use crate::options::{Options, Preset, TlsmPersistOrder, TlsmVariant, WalPlacement};
use crate::stats::Tier;
use crate::storage::alloc::{take_counted, PageRun, PAGE_SIZE_BYTES};
use crate::storage::pm::PmTier;
use crate::storage::PmRegion;
use crate::version::edit::{PmWal, TableFormat, TableMeta, VersionEdit};
use crate::version::{TableContext, Version};

use build::{FlushParams, Pages};
use format::{Layout, NODE_FIXED};
use job::{is_job_tag, JobKind, JobRecord};
use list::ListCache;
use picker::Shape;
use refs::{ListRefs, RefIndex, Space};

const PAGE: u64 = PAGE_SIZE_BYTES;

/// How long a flush waits for PM pages before it fails.
const FLUSH_PM_WAIT: Duration = Duration::from_secs(120);

/// Sizes and switches of the design.
#[derive(Debug, Clone)]
pub struct Config {
    /// Ablation variant.
    pub variant: TlsmVariant,
    /// Flush persist order.
    pub order: TlsmPersistOrder,
    /// Compaction nodes per linked-count persist.
    pub persist_every: usize,
    /// Output list (and SST) size.
    pub sst_size_bytes: u64,
    /// Memtable size.
    pub memtable_bytes: u64,
    /// Upper bound of the PM one flush takes.
    pub flush_estimate_bytes: u64,
    /// PM kept for the WAL (when it lives in PM).
    pub wal_reserve_bytes: u64,
    /// Bytes of PM data pages.
    pub capacity_bytes: u64,
}

/// Counters the design reports.
#[derive(Debug, Default)]
pub struct Counters {
    /// Bytes copied by copy-forward jobs.
    pub copy_forward_bytes: AtomicU64,
    /// Lists written to SSD by evictions.
    pub evicted_lists: AtomicU64,
    /// PM-output compactions that wrote SSTs because PM was short.
    pub sst_fallbacks: AtomicU64,
    /// Compactions resumed at open.
    pub resumed: AtomicU64,
    /// PM-output merges cut into key-range parts run side by side.
    pub split_jobs: AtomicU64,
}

/// The TLSM design.
pub struct Tlsm {
    cfg: Config,
    shape: Shape,
    pm: Arc<PmTier>,
    region: Arc<dyn PmRegion>,
    lists: Arc<ListCache>,
    refs: Arc<RefIndex>,
    reserved: Mutex<Vec<PageRun>>,
    /// Bytes `prepare_flush` took for the flush of the oldest waiting
    /// memtable (its reservation, less what went back unused), until the
    /// engine stops counting that memtable as waiting
    /// (`Design::flush_built`).
    flush_held: AtomicU64,
    tags: Mutex<HashSet<u32>>,
    pending: Mutex<Vec<run::Pending>>,
    counters: Counters,
}

/// Pages from the PM tier: first from a reservation, then from the
/// allocator, waiting up to `wait` for compaction to free some.
pub(crate) struct PmPages<'a> {
    pm: &'a PmTier,
    wait: Duration,
    reserved: Option<&'a Mutex<Vec<PageRun>>>,
}

impl<'a> PmPages<'a> {
    fn new(pm: &'a PmTier, wait: Duration) -> PmPages<'a> {
        PmPages {
            pm,
            wait,
            reserved: None,
        }
    }
}

/// Takes `want` pages (at least `min`) off the front of a reserved run.
fn carve(runs: &mut Vec<PageRun>, want: u64, min: u64) -> Option<PageRun> {
    let i = runs.iter().position(|r| r.count >= min)?;
    let r = &mut runs[i];
    let n = want.min(r.count);
    let out = PageRun {
        first: r.first,
        count: n,
    };
    r.first += n;
    r.count -= n;
    if r.count == 0 {
        runs.remove(i);
    }
    Some(out)
}

impl Pages for PmPages<'_> {
    fn alloc(&self, want: u64, min: u64) -> Result<PageRun> {
        debug_assert!(min > 0 && min <= want);
        if let Some(r) = self.reserved {
            if let Some(run) = carve(&mut r.lock(), want, min) {
                return Ok(run);
            }
        }
        let alloc = self.pm.allocator();
        // The wait is for progress: it starts again whenever pages come
        // back (an eviction or compaction freeing PM), and fails only once
        // nothing has freed any for `wait`.
        let mut start = Instant::now();
        let mut free_seen = alloc.free_pages();
        loop {
            let mut n = want;
            loop {
                if let Some(r) = alloc.alloc(n)? {
                    return Ok(r);
                }
                if n == min {
                    break;
                }
                n = (n / 2).max(min);
            }
            let free_now = alloc.free_pages();
            if free_now > free_seen {
                start = Instant::now();
            }
            free_seen = free_now;
            if start.elapsed() >= self.wait {
                return Err(Error::io(
                    format!(
                        "{}: PM tier full: no run of {min} free pages for a TLSM skip list, and none freed in {} s ({} pages free)",
                        self.pm.region().name(),
                        self.wait.as_secs_f64(),
                        alloc.free_pages()
                    ),
                    std::io::Error::from_raw_os_error(28),
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn free(&self, run: PageRun) -> Result<()> {
        self.pm.free_pages(run)
    }
}

impl Tlsm {
    /// The design on `pm`, sized by `opts` (options checked by
    /// `Options::validate`; the PM tier must hold two flushes besides the
    /// WAL).
    pub fn new(opts: &Options, pm: Arc<PmTier>) -> Result<Tlsm> {
        let alloc = pm.allocator();
        let capacity_bytes = (alloc.total_pages() - alloc.data_start_page()) * PAGE;
        let mem = opts.memtable_size_bytes as u64;
        let flush_estimate_bytes = mem + mem / 3 + 4 * PAGE;
        let wal_on_pm = opts.wal_placement() == WalPlacement::Pm;
        let wal_extent = crate::wal::pm::extent_len_for_region(pm.region().len());
        let wal_reserve_bytes = if wal_on_pm { 3 * wal_extent } else { 0 };
        let floor = 2 * flush_estimate_bytes
            + if wal_on_pm {
                2 * (mem + wal_reserve_bytes)
            } else {
                0
            };
        if capacity_bytes < floor {
            return Err(Error::InvalidOptions(format!(
                "`pm_size_bytes` = {} is too small for design `tlsm`: its {capacity_bytes} data bytes must hold \
                 two flushed memtables{} ({floor} bytes with `memtable_size_bytes` = {mem})",
                opts.pm_size_bytes.max(capacity_bytes),
                if wal_on_pm { " and two WALs" } else { "" },
            )));
        }
        let t = &opts.tlsm;
        let region = Arc::clone(pm.region());
        Ok(Tlsm {
            cfg: Config {
                variant: t.variant,
                order: t.persist_order,
                persist_every: t.persist_every,
                sst_size_bytes: opts.sst_size_bytes,
                memtable_bytes: mem,
                flush_estimate_bytes,
                wal_reserve_bytes,
                capacity_bytes,
            },
            shape: Shape {
                policy: t.policy,
                threshold: t.level_threshold,
                variant: t.variant,
                l0_trigger: opts.l0_compaction_trigger,
                l0_slowdown: opts.l0_slowdown_trigger,
                l0_stop: opts.l0_stop_trigger,
                l1_bytes: opts.l1_size_bytes,
                multiplier: opts.level_size_multiplier,
                sst_bytes: opts.sst_size_bytes,
                capacity_bytes: t.lru_capacity_bytes,
                copy_forward_ratio: t.copy_forward_live_ratio,
                flush_bytes: flush_estimate_bytes,
                wal_reserve_bytes,
            },
            lists: Arc::new(
                ListCache::new(
                    Arc::clone(&region),
                    opts.verify_checksums,
                    opts.bloom_bits_per_key,
                )
                .with_check_outputs(t.check_outputs),
            ),
            refs: Arc::new(RefIndex::new()),
            region,
            pm,
            reserved: Mutex::new(Vec::new()),
            flush_held: AtomicU64::new(0),
            tags: Mutex::new(HashSet::new()),
            pending: Mutex::new(Vec::new()),
            counters: Counters::default(),
        })
    }

    /// Sizes and switches.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The picker's parameters.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The reference index of the data runs.
    pub fn refs(&self) -> &RefIndex {
        &self.refs
    }

    /// The reader of a list.
    pub fn list(&self, meta: &TableMeta) -> Result<Arc<list::SkipList>> {
        self.lists.get(meta)
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// PM space of the lists (reference index).
    pub fn space(&self) -> Space {
        self.refs.space()
    }

    fn layout(&self) -> Layout {
        match self.cfg.variant {
            TlsmVariant::Ps => Layout::Ps,
            TlsmVariant::PsBac => Layout::PsBac,
            TlsmVariant::Full => Layout::Full,
        }
    }

    /// Exact PM a flush of `mem` takes: (buffer entry bytes, largest
    /// entry, node bytes, header pages).
    fn flush_pages(&self, mem: &Arc<MemTable>) -> Option<(u64, u64, u64, u64)> {
        let inline = self.layout().inline();
        let mut it = mem.iter();
        it.seek_to_first();
        let (mut n, mut entries, mut largest, mut nodes) = (0u64, 0u64, 0u64, 0u64);
        while it.valid() {
            let (k, v) = (it.key(), it.value());
            let h = format::height_of(k);
            if inline {
                nodes += format::node_size(h, format::inline_len(k.len(), v.len())) as u64;
            } else {
                let e = format::entry_len(k.len(), v.len()) as u64;
                entries += e;
                largest = largest.max(e);
                nodes += format::node_size(h, 0) as u64;
            }
            n += 1;
            it.next();
        }
        if n == 0 {
            return None;
        }
        let head = format::node_size(format::MAX_HEIGHT, 0) as u64;
        let node_bytes = head + nodes + NODE_FIXED as u64;
        let header = format::Header {
            id: 0,
            job: 0,
            level: 0,
            layout: self.layout(),
            origin: format::Origin::Flush,
            ordinal: 0,
            inputs: Vec::new(),
        };
        let dir = format::DIR_FIXED + 4 + 8 * (format::DIR_NODE_RUN + format::DIR_DATA_RUN);
        let header_pages = ((header.bytes() + dir) as u64).div_ceil(PAGE);
        Some((entries, largest, node_bytes, header_pages))
    }

    fn release_reservation(&self) {
        for run in std::mem::take(&mut *self.reserved.lock()) {
            let _ = self
                .flush_held
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                    Some(h.saturating_sub(run.count * PAGE))
                });
            if let Err(e) = self.pm.free_pages(run) {
                log::warn!("tlsm: could not free reserved PM pages {run:?}: {e}");
            }
        }
    }

    /// Free PM the memtables waiting to be flushed still need (and the
    /// WAL's reserve): a flush estimate each, less the pages the oldest
    /// one's flush already took (`prepare_flush`'s reservation: the free
    /// pages no longer hold them, so counting them in both would stop
    /// writes a flush early).
    fn flush_need(&self, immutable_count: usize) -> u64 {
        let est = immutable_count as u64 * self.cfg.flush_estimate_bytes;
        let held = self
            .flush_held
            .load(Ordering::Acquire)
            .min(self.cfg.flush_estimate_bytes);
        est.saturating_sub(held) + self.cfg.wal_reserve_bytes
    }

    /// What the index keeps of a MANIFEST-listed list: its header and
    /// directory. A list that was never closed is `Corruption`.
    fn read_refs(&self, meta: &TableMeta) -> Result<ListRefs> {
        let Some(&hrun) = meta.pm_pages.first() else {
            return Err(Error::corruption(
                "MANIFEST",
                0,
                format!("PM skip list {} lists no page runs", meta.id),
            ));
        };
        let hv = list::read_header(self.region.as_ref(), hrun)?;
        let w = format::LinkWords::at(hv.header.link_offset());
        if hv.header.id != meta.id {
            return Err(Error::corruption(
                self.region.name(),
                hrun.first * PAGE + 16,
                format!(
                    "skip list header names list {} where the MANIFEST has {}",
                    hv.header.id, meta.id
                ),
            ));
        }
        if hv.dir_off == 0 {
            return Err(Error::corruption(
                self.region.name(),
                hrun.first * PAGE + w.dir as u64,
                format!("skip list {} has no null sentinel: the MANIFEST lists a list that was never closed", meta.id),
            ));
        }
        let dir = list::read_directory(self.region.as_ref(), hv.dir_off, &meta.pm_pages)?;
        Ok(ListRefs {
            own_bytes: meta.pm_pages.iter().map(|r| r.count * PAGE).sum(),
            data: dir.data,
        })
    }
}

impl Design for Tlsm {
    fn preset(&self) -> Preset {
        Preset::Tlsm
    }

    fn flush(&self, env: &JobEnv, mem: &Arc<MemTable>) -> Result<JobOutput> {
        self.reap(env);
        if mem.is_empty() {
            self.release_reservation();
            return Ok(JobOutput::default());
        }
        let pages = PmPages {
            pm: &self.pm,
            wait: FLUSH_PM_WAIT,
            reserved: Some(&self.reserved),
        };
        let id = env.versions.new_file_number();
        let r = build::flush_list(
            &FlushParams {
                region: &self.region,
                pages: &pages,
                id,
                layout: self.layout(),
                order: self.cfg.order,
                filter_bits: self.lists.builder_filter_bits(),
            },
            &mut mem.iter(),
        );
        self.release_reservation();
        // The pages are the list's now; they stay subtracted from the
        // memtable's need until the engine stops counting it as waiting
        // (`Design::flush_built`), in the same step.
        let mut built = r?;
        for d in &built.refs.data {
            if !self.layout().inline() {
                self.lists.verified_buffer(d.run.first);
            }
        }
        // Its reader now, on the flush thread, as the builder recorded it
        // (or walked, with `check_outputs`): the first read or compaction
        // finds it open.
        if let Err(e) = self.lists.adopt(&built.meta, built.reader.take()) {
            log::warn!("tlsm: flushed list #{}: {e}", built.meta.id);
        }
        self.refs.register(built.meta.id, built.refs);
        let mut edit = VersionEdit::default();
        edit.new_tables.push((0, built.meta));
        Ok(JobOutput {
            edit,
            written: built.written,
        })
    }

    fn pick(&self, v: &Version, cx: &PickContext) -> Option<Task> {
        self.shape.pick(v, cx, &self.refs)
    }

    fn pick_manual(
        &self,
        v: &Version,
        cx: &PickContext,
        level: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Option<Task> {
        crate::design::leveled::pick_manual_range(v, cx.busy, level, lo, hi)
            .map(|t| self.shape.classify(t))
    }

    fn prepare_flush(&self, mem: &Arc<MemTable>) -> Result<()> {
        self.release_reservation();
        // The last flush's pages are its list's now (its memtable is no
        // longer counted as waiting).
        self.flush_held.store(0, Ordering::Release);
        let Some((entries, largest, nodes, header)) = self.flush_pages(mem) else {
            return Ok(());
        };
        let pages = PmPages::new(&self.pm, FLUSH_PM_WAIT);
        let mut taken: Vec<PageRun> = Vec::new();
        let r = (|| -> Result<()> {
            // Buffer pages: one run if PM has one, else smaller runs (each
            // a buffer of its own), each counted as losing the room of the
            // largest entry at its end.
            // Counted as held from before a run is taken, so that free PM
            // less the memtable's need does not move while it is taken.
            let take = |want: u64, min: u64, taken: &mut Vec<PageRun>| -> Result<PageRun> {
                let run = take_counted(&self.flush_held, want, || pages.alloc(want, min))?;
                taken.push(run);
                Ok(run)
            };
            let hdr = format::BUFFER_HEADER_BYTES as u64;
            let min = (hdr + largest).div_ceil(PAGE);
            let mut left = entries;
            while left > 0 {
                let want = (hdr + left).div_ceil(PAGE).max(min);
                let run = take(want, min, &mut taken)?;
                left = if run.count == want {
                    0
                } else {
                    left.saturating_sub((run.count * PAGE).saturating_sub(hdr + largest).max(1))
                };
            }
            // Node pages: one run if PM has one, else smaller runs, each
            // counted as losing the room of its largest node and a marker
            // at its end, and each at least the share of the node pages
            // the flush asks of a run (a header names at most 64).
            let waste = (format::node_size(format::MAX_HEIGHT, 0) + 64 + NODE_FIXED) as u64;
            let min = (waste + NODE_FIXED as u64)
                .div_ceil(PAGE)
                .max(nodes.div_ceil(PAGE).div_ceil(format::NODE_RUN_SLOTS as u64));
            let mut left = nodes;
            while left > 0 {
                let want = left.div_ceil(PAGE).max(min);
                let run = take(want, min, &mut taken)?;
                left = left.saturating_sub((run.count * PAGE).saturating_sub(waste));
            }
            take(header, header, &mut taken)?;
            Ok(())
        })();
        match r {
            Ok(()) => {
                *self.reserved.lock() = taken;
                Ok(())
            }
            Err(e) => {
                for run in taken {
                    let _ = self.pm.free_pages(run);
                }
                self.flush_held.store(0, Ordering::Release);
                Err(e)
            }
        }
    }

    fn run(&self, env: &JobEnv, task: &Task) -> Result<JobOutput> {
        self.reap(env);
        let k = task.kind;
        if k == TaskKind::TRIVIAL_MOVE {
            return self.run_sst(env, task);
        }
        if k == picker::EVICT {
            return self.run_evict(env, task);
        }
        if k == picker::COPY_FORWARD {
            let inputs = self.input_lists(task)?;
            return self.run_pm_job(env, task, JobKind::CopyForward, inputs);
        }
        let tables: Vec<_> = task.inputs.iter().flat_map(|(_, ts)| ts.iter()).collect();
        let all_pm = !tables.is_empty()
            && tables
                .iter()
                .all(|t| t.meta.tier == Tier::Pm && t.meta.format == TableFormat::PmSkipList);
        if all_pm && self.shape.pm_level(task.output_level) {
            let inputs = self.input_lists(task)?;
            let (mode, _) = self.mode_for(&inputs);
            if self.shape.policy == crate::options::TlsmPolicy::None
                || self.pm_room_for(&inputs, mode)
            {
                return self.run_pm_job(env, task, JobKind::Merge, inputs);
            }
            self.counters.sst_fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        self.run_sst(env, task)
    }

    fn write_control(&self, v: &Version, immutable_count: usize) -> WriteControl {
        let free = self.pm.allocator().free_pages() * PAGE;
        self.shape
            .write_control(v, free < self.flush_need(immutable_count))
    }

    fn headroom(&self, v: &Version, immutable_count: usize) -> Option<Headroom> {
        // The tighter of the two stops: L0 lists (LevelDB's slowdown) and
        // free PM (a flush's worth per memtable waiting), in user bytes.
        let mem = self.cfg.memtable_bytes;
        let l0 = l0_headroom(v.levels[0].len(), self.shape.l0_slowdown, mem);
        let est = self.cfg.flush_estimate_bytes.max(1);
        let free = self.pm.allocator().free_pages() * PAGE;
        let need = self.flush_need(immutable_count);
        let to_user = |b: u64| (u128::from(b) * u128::from(mem) / u128::from(est)) as u64;
        let pm = Headroom {
            free_bytes: to_user(free.saturating_sub(need)),
            capacity_bytes: to_user(
                self.cfg
                    .capacity_bytes
                    .saturating_sub(self.cfg.wal_reserve_bytes),
            ),
            // A memtable switch adds a flush to `need` at once. The
            // flush's reservation does not take room a second time: `need`
            // counts what it reserved as already taken (`flush_held`).
            step_bytes: mem,
        };
        Some(if pm.free_bytes < l0.free_bytes {
            pm
        } else {
            l0
        })
    }

    fn flush_built(&self) {
        self.flush_held.store(0, Ordering::Release);
    }

    fn write_control_epoch(&self) -> u64 {
        // The verdict follows free PM plus what the flush holds (a flush
        // taking its pages moves them from one to the other).
        let step = (self.cfg.flush_estimate_bytes / 64).max(PAGE);
        let held = self
            .flush_held
            .load(Ordering::Acquire)
            .min(self.cfg.flush_estimate_bytes);
        (self.pm.allocator().free_pages() * PAGE + held) / step
    }

    fn install(&self, ctx: &Arc<TableContext>) {
        let lists = Arc::clone(&self.lists);
        let _ = ctx.pm_opener.set(Box::new(move |meta: &TableMeta| {
            let t: Arc<dyn crate::iter::TableReader> = lists.get(meta)?;
            Ok(t)
        }));
    }

    fn recover(&self, env: &JobEnv) -> Result<Vec<VersionEdit>> {
        let mut edits = Vec::new();
        for (r, v) in env.versions.current_all().iter().enumerate() {
            for (tag, bytes) in &v.design_state {
                if !is_job_tag(*tag) || bytes.is_empty() {
                    continue;
                }
                let rec = JobRecord::decode(bytes)?;
                edits.push(self.resume(env, r, v, *tag, &rec));
            }
        }
        Ok(edits)
    }

    fn live_pm_runs(&self, versions: &[Arc<Version>], logs: &[PmWal]) -> Result<Vec<PageRun>> {
        let _ = logs; // the engine's WAL: TLSM has no log of its own
        self.refs.clear();
        for v in versions {
            for t in v.levels.iter().flatten() {
                if t.meta.tier == Tier::Pm && t.meta.format == TableFormat::PmSkipList {
                    let refs = self.read_refs(&t.meta)?;
                    self.refs.register(t.meta.id, refs);
                }
            }
        }
        let mut runs = self.refs.data_runs();
        // The runs of in-flight jobs: the recovery hook, which runs after
        // this reconcile, resumes them and allocates, and must not be
        // handed the pages it is resuming.
        for v in versions {
            for (tag, bytes) in &v.design_state {
                if is_job_tag(*tag) && !bytes.is_empty() {
                    runs.extend(self.job_runs(&JobRecord::decode(bytes)?));
                }
            }
        }
        Ok(runs)
    }

    fn release(&self, meta: &TableMeta) -> Result<Vec<PageRun>> {
        let freed = self.refs.unregister(meta.id);
        self.lists.forget(meta.id, &freed);
        Ok(freed)
    }

    fn debt(&self, v: &Version) -> u64 {
        self.shape.debt(v)
    }

    fn stats(&self, versions: &[Arc<Version>]) -> Vec<(String, String)> {
        let sp = self.refs.space();
        let lists: u64 = versions
            .iter()
            .flat_map(|v| v.levels.iter().flatten())
            .filter(|t| t.meta.tier == Tier::Pm)
            .count() as u64;
        let alloc = self.pm.allocator();
        let free = alloc.free_pages() * PAGE;
        let c = &self.counters;
        let mb = |b: u64| format!("{:.1} MB", b as f64 / 1048576.0);
        vec![
            ("tlsm.policy".into(), self.shape.policy.name().into()),
            ("tlsm.variant".into(), self.cfg.variant.name().into()),
            ("tlsm.persist_order".into(), self.cfg.order.name().into()),
            (
                "tlsm.pm_used".into(),
                format!(
                    "{} of {}",
                    mb(self.cfg.capacity_bytes.saturating_sub(free)),
                    mb(self.cfg.capacity_bytes)
                ),
            ),
            (
                "tlsm.pm_used_bytes".into(),
                self.cfg.capacity_bytes.saturating_sub(free).to_string(),
            ),
            (
                "tlsm.lists".into(),
                format!("{lists} in the versions, {} alive", sp.lists),
            ),
            (
                "tlsm.data_runs".into(),
                format!("{} runs, {}", sp.data_runs, mb(sp.data_run_bytes)),
            ),
            ("tlsm.live_entry_bytes".into(), mb(sp.live_entry_bytes)),
            ("tlsm.pinned_dead_bytes".into(), mb(sp.pinned_dead_bytes())),
            (
                "tlsm.pm_space_amp".into(),
                format!("{:.3}", sp.amplification()),
            ),
            ("tlsm.list_own_bytes".into(), mb(sp.own_bytes)),
            (
                "tlsm.copy_forward_bytes".into(),
                mb(c.copy_forward_bytes.load(Ordering::Relaxed)),
            ),
            (
                "tlsm.evicted_lists".into(),
                c.evicted_lists.load(Ordering::Relaxed).to_string(),
            ),
            (
                "tlsm.sst_fallbacks".into(),
                c.sst_fallbacks.load(Ordering::Relaxed).to_string(),
            ),
            (
                "tlsm.resumed_jobs".into(),
                c.resumed.load(Ordering::Relaxed).to_string(),
            ),
            (
                "tlsm.split_jobs".into(),
                c.split_jobs.load(Ordering::Relaxed).to_string(),
            ),
            (
                "tlsm.dram_filter_bytes".into(),
                self.lists.dram_filter_bytes().to_string(),
            ),
        ]
    }
}
