//! The active NVTable: the log the write path appends to (NV-Cache §III-D,
//! step ①). There is no WAL: each committed group's entries become nodes
//! of the memtable's NVTable before the memtable insert, persisted before
//! the write is acknowledged; the flush later only sorts them
//! ([`super::table`]).
//!
//! # Layout
//!
//! A log is a chain of *segments* (runs of pages, `format.rs`): segment 0
//! holds the `head` link word, every segment the link to the next one.
//! Nodes are appended at the end of the last segment (a node never
//! crosses a segment; one larger than a segment gets a segment of its
//! own) and form a singly published, doubly linked list in append order
//! (= seqno order).
//!
//! # The append protocol (one committed group)
//!
//! 1. Place every node of the group (sizes are known from the batch); a
//!    node that does not fit the last segment starts a new segment:
//!    allocate it, persist its header, store its offset into the previous
//!    segment's next-segment word and persist that word.
//! 2. **Group mode** (`NvAppend::Group`, the default): write the nodes
//!    *pre-linked* (each `next` = the following node, the last one's 0,
//!    each `prev` = the preceding node) and persist them — one persist per
//!    segment the group touches, normally one.
//! 3. Publish: one 8-byte store of the group's first node into the link
//!    word of its predecessor (the previous group's last node, or the
//!    head word), and persist it. Only then is the write acknowledged.
//!
//! **Per-entry mode** (`NvAppend::PerEntry`, the paper's "PMDK transaction
//! per insert"): each node is written with `next` = 0, persisted, and
//! published on its own (two persists per entry); a crash between two
//! entries of a group leaves an incomplete trailing group, which recovery
//! drops (every node records the size of its group).
//!
//! # Sealing
//!
//! When its writer is retired — the memtable switches to a new log, or
//! the database closes — a log gets its **seal** in segment 0
//! (`format.rs`): the number of nodes published, tied to the log by a
//! checksum, in one 8-byte store persisted after every group was
//! (`LogWriter::seal` at a clean close, the writer's `Drop` at a switch).
//! A log whose writer saw an error is never sealed (it may end inside a
//! group). Nothing is appended after the seal. A process killed before it
//! leaves the log unsealed: its tail is then read as after a crash.
//!
//! # Recovery ([`walk`])
//!
//! Follows the segment chain from the first segment (which must be valid:
//! the MANIFEST vouches for it) and the node list from the head. Links
//! are stored only after what they point at was persisted — but a link
//! stored after the crash point may still reach the durable image (an
//! early cache write-back), so whoever follows one validates what it
//! reaches (the `PmRegion` contract, rule 5c). The rules:
//!
//! 1. **Where a node can be.** The writer places nodes back to back, in
//!    list order: the node after `x` is at `x`'s end if it fits `x`'s
//!    segment, else at the first node position of the next segment of the
//!    chain (the log's first node: of segment 0, or of segment 1 when it
//!    did not fit segment 0). A link that names neither place is damage
//!    in a sealed log, and so is such a head word in any log (the head is
//!    written with its segment's header and then only published into); a
//!    node's link that does so in an unsealed log ends the list like rule
//!    4 (the node may be one written after the crash point whose link word
//!    kept stale bytes).
//! 2. **What a node must be.** At that place, a valid successor: both
//!    checksums, the next seqno, a `prev` link naming its predecessor,
//!    group sizes that agree.
//! 3. **Sealed log.** Exactly the sealed number of nodes, in whole groups,
//!    then a zero link; a chain link to an invalid segment, a zero link
//!    before the count, a node breaking rule 1 or 2 is `Error::Corruption`
//!    naming the region, the offset and the structure.
//! 4. **Unsealed log (a crash).** The list ends at the first zero link or
//!    node breaking rule 2 — a torn tail, never acknowledged — unless
//!    published nodes follow: only the group in flight at the crash can
//!    be durable and unpublished, and stale nodes of a reused page are
//!    older than it, so a valid node anywhere after the last good one
//!    whose seqno is at least the in-flight seqno + its own group's size
//!    belongs to a later, published group and proves damage:
//!    `Error::Corruption` (found by scanning the rest of the log, node by
//!    node, resynchronising over bytes that do not check). So does
//!    a valid node in a segment the chain lost. A chain link to an invalid
//!    segment ends the chain. An incomplete trailing group (a torn
//!    publish, or an entry-by-entry append cut short) is dropped: none of
//!    it was acknowledged. (Damage that empties an unsealed log from its
//!    head cannot be told from a crash before its first publish: the head
//!    has no predecessor whose seqno separates this log's nodes from stale
//!    ones of a reused page.)
//!
//! # Concurrency
//!
//! A [`NvLogWriter`] is used by the write path's leader only. Its
//! [`LogShared`] (the segment list and the seqno → node-offset map the
//! flush reads) is behind a mutex; the flush reads it after the memtable
//! became immutable (the writer is then gone). Link words are written with
//! `store_u64` and read with `load_u64` (the `PmRegion` contract, rule 5).
//!
//! # Invariants
//!
//! 1. Every reachable link word points at bytes persisted before the
//!    link itself was stored.
//! 2. Nodes of one log have consecutive seqnos in list order, starting at
//!    the seqno of the log's first group.
//! 3. `LogShared::offsets[s - first_seq]` is the node of seqno `s`.
//! 4. The segments of a log are exactly its chain (the flush lists them
//!    in the table's `pm_pages`; reconcile at open learns them through
//!    `Design::live_pm_runs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::format::{
    encode_node, encode_seal, node_size, read_seal, Node, SegmentHeader, SegmentKind,
    FLAG_PER_ENTRY, HEAD_WORD, NEXT_SEGMENT_WORD, NODE_HEADER_BYTES, NODE_NEXT, NODE_PREV,
    SEAL_WORD, SEGMENT_HEADER_BYTES,
};
use crate::coding::Reader;
use crate::error::{Error, Result};
use crate::key::{Kind, SeqNo};
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};
use crate::storage::pm::PmTier;
use crate::storage::PmRegion;
use crate::wal::LogWriter;

const PAGE: u64 = PAGE_SIZE_BYTES;

/// How long an allocation in the write path or a flush waits for
/// compaction to free PM before failing.
pub const PM_WAIT_LIMIT: Duration = Duration::from_secs(30);

/// The PM space NV-Cache allocates from.
pub struct Space {
    /// The region.
    pub region: Arc<dyn PmRegion>,
    /// Its page allocator.
    pub tier: Arc<PmTier>,
    /// Pages of a segment.
    pub segment_pages: u64,
}

/// The error of a full PM tier (an `ENOSPC` I/O error, so
/// `Error::is_no_space` is true).
pub fn pm_full(region: &dyn PmRegion, what: &str, pages: u64) -> Error {
    Error::io(
        format!(
            "{}: PM tier full: no run of {pages} free pages for {what}",
            region.name()
        ),
        std::io::Error::from_raw_os_error(28),
    )
}

impl Space {
    /// Allocates `pages` pages, waiting up to `wait` for compaction to free
    /// some; `Ok(None)` if none came.
    pub fn alloc(&self, pages: u64, wait: Duration) -> Result<Option<PageRun>> {
        let start = Instant::now();
        loop {
            if let Some(r) = self.tier.allocator().alloc(pages)? {
                return Ok(Some(r));
            }
            if start.elapsed() >= wait {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Allocates a segment that holds at least `min_bytes` of nodes,
    /// writes and persists its header. `Ok(None)`: no PM within `wait`.
    pub fn new_segment(
        &self,
        owner: u64,
        index: u32,
        kind: SegmentKind,
        flags: u16,
        min_bytes: u64,
        wait: Duration,
    ) -> Result<Option<PageRun>> {
        let pages = self
            .segment_pages
            .max((SEGMENT_HEADER_BYTES + min_bytes).div_ceil(PAGE));
        let Some(run) = self.alloc(pages, wait)? else {
            return Ok(None);
        };
        let h = SegmentHeader {
            owner,
            pages,
            index,
            kind,
            flags,
        };
        let at = run.first * PAGE;
        let r = self
            .region
            .write(at, &h.encode())
            .and_then(|()| self.region.persist(at, SEGMENT_HEADER_BYTES as usize));
        if let Err(e) = r {
            let _ = self.tier.free_pages(run);
            return Err(e);
        }
        Ok(Some(run))
    }
}

/// What the write path's log and the flush share.
pub struct LogShared {
    /// The log number.
    pub number: u64,
    /// Segments and node offsets.
    pub state: Mutex<LogState>,
}

/// The DRAM side of one log.
#[derive(Debug, Default)]
pub struct LogState {
    /// The segment chain, in chain order.
    pub segments: Vec<PageRun>,
    /// Seqno of `offsets[0]`.
    pub first_seq: SeqNo,
    /// Node offset of each seqno from `first_seq` on (invariant 3).
    pub offsets: Vec<u64>,
    /// Bytes of nodes appended.
    pub node_bytes: u64,
}

/// The logs whose memtables are not flushed yet, by number.
#[derive(Default)]
pub struct Logs {
    map: Mutex<HashMap<u64, Arc<LogShared>>>,
}

impl Logs {
    /// Registers a new log.
    pub fn insert(&self, shared: Arc<LogShared>) {
        self.map.lock().insert(shared.number, shared);
    }

    /// The log `number`, if it is registered.
    pub fn get(&self, number: u64) -> Option<Arc<LogShared>> {
        self.map.lock().get(&number).cloned()
    }

    /// Forgets log `number` (its memtable was flushed).
    pub fn remove(&self, number: u64) {
        self.map.lock().remove(&number);
    }
}

/// Creates log `number`: its first segment (header persisted) and its
/// writer. Never waits (the engine holds its state lock): a full PM tier
/// is an `ENOSPC` error.
pub fn create(
    space: &Arc<Space>,
    logs: &Logs,
    number: u64,
    per_entry: bool,
) -> Result<(NvLogWriter, u64)> {
    let flags = if per_entry { FLAG_PER_ENTRY } else { 0 };
    let run = space
        .new_segment(number, 0, SegmentKind::Log, flags, 0, Duration::ZERO)?
        .ok_or_else(|| {
            pm_full(
                space.region.as_ref(),
                "a new NVTable log",
                space.segment_pages,
            )
        })?;
    let at = run.first * PAGE;
    let shared = Arc::new(LogShared {
        number,
        state: Mutex::new(LogState {
            segments: vec![run],
            ..LogState::default()
        }),
    });
    logs.insert(Arc::clone(&shared));
    let w = NvLogWriter {
        space: Arc::clone(space),
        shared,
        per_entry,
        flags,
        seg_end: (run.first + run.count) * PAGE,
        cursor: at + SEGMENT_HEADER_BYTES,
        seg_link: at + NEXT_SEGMENT_WORD,
        seg_index: 0,
        pred_link: at + HEAD_WORD,
        last_node: 0,
        buf: Vec::new(),
        placed: Vec::new(),
        bytes_written: SEGMENT_HEADER_BYTES,
        seg0: at,
        published: 0,
        broken: false,
    };
    Ok((w, at))
}

/// The write path's appender of one log (module doc).
pub struct NvLogWriter {
    space: Arc<Space>,
    shared: Arc<LogShared>,
    per_entry: bool,
    flags: u16,
    /// End of the last segment.
    seg_end: u64,
    /// Where the next node goes.
    cursor: u64,
    /// The next-segment word of the last segment.
    seg_link: u64,
    seg_index: u32,
    /// The link word the next group is published into.
    pred_link: u64,
    /// The last published node (0: none).
    last_node: u64,
    /// Scratch: the bytes of the nodes being written.
    buf: Vec<u8>,
    /// Scratch: where each node of the group goes.
    placed: Vec<u64>,
    bytes_written: u64,
    /// Region offset of segment 0 (where the seal goes).
    seg0: u64,
    /// Nodes published (whole groups).
    published: u64,
    /// An append failed: the log may end inside a group, so it is never
    /// sealed (recovery reads its tail as after a crash).
    broken: bool,
}

fn malformed() -> Error {
    Error::InvalidArgument("NV-Cache log: malformed write batch".into())
}

impl NvLogWriter {
    /// Appends a segment to the chain (allocate, persist its header, link
    /// it from the previous one, persist the link).
    fn grow(&mut self, min_bytes: u64) -> Result<()> {
        let space = Arc::clone(&self.space);
        let run = space
            .new_segment(
                self.shared.number,
                self.seg_index + 1,
                SegmentKind::Log,
                self.flags,
                min_bytes,
                PM_WAIT_LIMIT,
            )?
            .ok_or_else(|| {
                pm_full(
                    space.region.as_ref(),
                    "an NVTable log segment",
                    space.segment_pages,
                )
            })?;
        let at = run.first * PAGE;
        let region = space.region.as_ref();
        region.store_u64(self.seg_link, at)?;
        region.persist(self.seg_link, 8)?;
        self.shared.state.lock().segments.push(run);
        self.seg_index += 1;
        self.seg_link = at + NEXT_SEGMENT_WORD;
        self.cursor = at + SEGMENT_HEADER_BYTES;
        self.seg_end = (run.first + run.count) * PAGE;
        self.bytes_written += SEGMENT_HEADER_BYTES;
        Ok(())
    }

    /// Writes `buf` at `at` and persists it.
    fn write_persist(&mut self, at: u64) -> Result<()> {
        let region = self.space.region.as_ref();
        region.write(at, &self.buf)?;
        region.persist(at, self.buf.len())?;
        self.bytes_written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Stores `node` into the predecessor's link word and persists it.
    fn publish(&mut self, node: u64) -> Result<()> {
        let region = self.space.region.as_ref();
        region.store_u64(self.pred_link, node)?;
        region.persist(self.pred_link, 8)?;
        self.pred_link = node + NODE_NEXT;
        self.last_node = node;
        Ok(())
    }
}

/// Iterates the `(kind, key, value)` records of an encoded batch.
fn records(body: &[u8]) -> impl Iterator<Item = Result<(Kind, &[u8], &[u8])>> {
    let mut r = Reader::new(body);
    std::iter::from_fn(move || {
        if r.is_empty() {
            return None;
        }
        let rec = (|| {
            let kind = Kind::from_u8(r.u8()?)?;
            let key = r.length_prefixed()?;
            let value = match kind {
                Kind::Put => r.length_prefixed()?,
                Kind::Delete => &[][..],
            };
            Some((kind, key, value))
        })();
        Some(rec.ok_or_else(malformed))
    })
}

impl LogWriter for NvLogWriter {
    fn add_record(&mut self, record: &[u8]) -> Result<()> {
        let r = self.append(record);
        if r.is_err() {
            self.broken = true;
        }
        r
    }

    fn sync(&mut self) -> Result<()> {
        // Every group was persisted and published by `add_record`.
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    fn in_pm(&self) -> bool {
        true
    }

    fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Stores the seal (module doc, "Sealing"): every group before it was
    /// persisted and published by `add_record`.
    fn seal(&mut self) -> Result<()> {
        let Ok(nodes) = u32::try_from(self.published) else {
            return Ok(()); // too many to count: left unsealed
        };
        if self.broken {
            return Ok(());
        }
        let at = self.seg0 + SEAL_WORD;
        let region = self.space.region.as_ref();
        region.store_u64(at, encode_seal(self.shared.number, nodes))?;
        region.persist(at, 8)?;
        self.bytes_written += 8;
        self.broken = true; // nothing may follow
        Ok(())
    }
}

impl Drop for NvLogWriter {
    /// A retired log is sealed (module doc, "Sealing"); a failure leaves it
    /// unsealed, which recovery reads as after a crash.
    fn drop(&mut self) {
        let _ = LogWriter::seal(self);
    }
}

impl NvLogWriter {
    /// Appends one committed group (module doc, "The append protocol").
    fn append(&mut self, record: &[u8]) -> Result<()> {
        if self.broken {
            return Err(Error::InvalidArgument(format!(
                "NVTable log {}: append after a failed append or the seal",
                self.shared.number
            )));
        }
        let mut r = Reader::new(record);
        let seq0 = r.u64().ok_or_else(malformed)?;
        let count = r.u32().ok_or_else(malformed)?;
        let body = r.remaining();
        if count == 0 {
            return Ok(());
        }
        // 1. Placement (and new segments, linked before any node is).
        let mut placed = std::mem::take(&mut self.placed);
        placed.clear();
        let mut group_bytes = 0u64;
        for rec in records(body) {
            let (_, k, v) = rec?;
            let size = node_size(k.len(), v.len());
            if self.cursor + size > self.seg_end {
                self.grow(size)?;
            }
            placed.push(self.cursor);
            self.cursor += size;
            group_bytes += size;
        }
        if placed.len() != count as usize {
            self.placed = placed;
            return Err(malformed());
        }
        // 2–3. The nodes, then the publish.
        let first = placed[0];
        let mut run_start = first;
        for (i, rec) in records(body).enumerate() {
            let (kind, k, v) = rec?;
            let at = placed[i];
            let prev = if i == 0 {
                self.last_node
            } else {
                placed[i - 1]
            };
            if self.per_entry {
                encode_node(&mut self.buf, 0, prev, seq0 + i as u64, kind, k, v, count);
                self.write_persist(at)?;
                self.publish(at)?;
                continue;
            }
            let next = placed.get(i + 1).copied().unwrap_or(0);
            if at != run_start + self.buf.len() as u64 {
                // The group continues in a new segment.
                self.write_persist(run_start)?;
                run_start = at;
            }
            encode_node(
                &mut self.buf,
                next,
                prev,
                seq0 + i as u64,
                kind,
                k,
                v,
                count,
            );
        }
        if !self.per_entry {
            self.write_persist(run_start)?;
            self.publish(first)?;
            let last = *placed.last().unwrap_or(&first);
            self.last_node = last;
            self.pred_link = last + NODE_NEXT;
        }
        {
            let mut st = self.shared.state.lock();
            if st.offsets.is_empty() {
                st.first_seq = seq0;
            }
            let idx = (seq0 - st.first_seq) as usize;
            debug_assert_eq!(idx, st.offsets.len(), "seqnos of a log are consecutive");
            st.offsets.resize(idx, 0);
            st.offsets.extend_from_slice(&placed);
            st.node_bytes += group_bytes;
        }
        self.published += placed.len() as u64;
        self.placed = placed;
        Ok(())
    }
}

/// A node found by [`walk`].
#[derive(Debug, Clone)]
pub struct WalkedNode {
    /// Its offset.
    pub at: u64,
    /// Its size.
    pub size: u64,
    /// Its internal key.
    pub ikey: Vec<u8>,
}

/// A log's segment chain as recovery reads it.
struct Chain {
    /// The segments, in chain order.
    segs: Vec<PageRun>,
    /// Segment 0's flags.
    flags: u16,
    /// The nodes the log was sealed with (`None`: not sealed).
    seal: Option<u32>,
}

/// A node the walk accepted: where it is and what follows from it.
#[derive(Debug, Clone, Copy)]
struct Placed {
    at: u64,
    /// Its chain index.
    seg: usize,
    /// Where it ends (where the next node goes if it fits there).
    end: u64,
    seq: SeqNo,
}

impl Chain {
    /// Where nodes of chain segment `i` start.
    fn nodes_start(&self, i: usize) -> Option<u64> {
        self.segs
            .get(i)
            .map(|r| r.first * PAGE + SEGMENT_HEADER_BYTES)
    }

    fn seg_end(&self, i: usize) -> u64 {
        self.segs.get(i).map_or(0, |r| (r.first + r.count) * PAGE)
    }

    /// The chain segment holding byte `at`, if any.
    fn segment_index(&self, at: u64) -> Option<usize> {
        self.segs
            .iter()
            .position(|r| r.first * PAGE <= at && at < (r.first + r.count) * PAGE)
    }

    /// Where the node after `pred` (`None`: the log's first node) can be,
    /// with its chain index: the writer places nodes back to back, and a
    /// node that does not fit its predecessor's segment starts the next
    /// one (module doc, "Recovery", rule 1).
    fn next_positions(&self, pred: Option<Placed>) -> [Option<(u64, usize)>; 2] {
        match pred {
            None => [
                self.nodes_start(0).map(|p| (p, 0)),
                self.nodes_start(1).map(|p| (p, 1)),
            ],
            Some(x) => [
                (x.end + NODE_HEADER_BYTES <= self.seg_end(x.seg)).then_some((x.end, x.seg)),
                self.nodes_start(x.seg + 1).map(|p| (p, x.seg + 1)),
            ],
        }
    }

    /// The node at `at` (in chain segment `seg`) if it is a valid
    /// successor of `pred`: inside its segment, both checksums, the next
    /// seqno and a `prev` link naming `pred` (0 for the first node);
    /// otherwise why not.
    fn successor<'a>(
        &self,
        region: &'a dyn PmRegion,
        at: u64,
        seg: usize,
        pred: Option<Placed>,
    ) -> std::result::Result<Node<'a>, String> {
        let lo = self.nodes_start(seg).unwrap_or(0);
        let node = Node::read(region, at, lo, self.seg_end(seg)).map_err(|e| e.to_string())?;
        node.value(region, true).map_err(|e| e.to_string())?;
        if let Some(p) = pred {
            if node.seq() != p.seq + 1 {
                return Err(format!(
                    "seqno {} does not follow {} of node {}",
                    node.seq(),
                    p.seq,
                    p.at
                ));
            }
        }
        let want = pred.map_or(0, |p| p.at);
        let prev = region.load_u64(at + NODE_PREV).map_err(|e| e.to_string())?;
        if prev != want {
            return Err(format!("prev link {prev}, not {want}"));
        }
        Ok(node)
    }

    /// The node the writer placed after `x` (rule 1), if one checks there:
    /// both checksums, a group size, the seqno after `x`'s. Its link words
    /// are not looked at (`walk_salvage`: they may be the damage).
    fn placed_successor<'a>(
        &self,
        region: &'a dyn PmRegion,
        x: Placed,
    ) -> Option<(Node<'a>, u64, usize)> {
        self.next_positions(Some(x))
            .into_iter()
            .flatten()
            .find_map(|(at, seg)| {
                let lo = self.nodes_start(seg)?;
                let n = Node::read(region, at, lo, self.seg_end(seg)).ok()?;
                let ok = n.group > 0
                    && n.seq() == x.seq.checked_add(1)?
                    && n.value(region, true).is_ok();
                ok.then_some((n, at, seg))
            })
    }

    /// The nodes that check (both checksums, a group size) from byte
    /// `from` of chain segment `seg` on, with their offsets, in place
    /// order — the writer's order (rule 1) — resynchronising 8 bytes at a
    /// time over bytes that do not check: how recovery reads a log by
    /// place where its list does not lead ([`Chain::published_after`],
    /// [`resync`]).
    fn by_place<'a>(
        &'a self,
        region: &'a dyn PmRegion,
        mut seg: usize,
        from: u64,
    ) -> impl Iterator<Item = (u64, Node<'a>)> + 'a {
        let mut p = from;
        std::iter::from_fn(move || loop {
            let lo = self.nodes_start(seg)?;
            let hi = self.seg_end(seg);
            p = p.max(lo);
            if p + NODE_HEADER_BYTES > hi {
                seg += 1;
                p = 0;
                continue;
            }
            match Node::read(region, p, lo, hi) {
                Ok(n) if n.group > 0 && n.value(region, true).is_ok() => {
                    let at = p;
                    p += n.size();
                    return Some((at, n));
                }
                _ => p += 8,
            }
        })
    }

    /// Whether published nodes follow the end of the list after `x` in an
    /// unsealed log (module doc, "Recovery", rule 4): scans the bytes after
    /// `x` by place ([`Chain::by_place`]) for a valid node of a group after
    /// the one in flight (seqno ≥ `x`'s + 1 + its group size). Only the
    /// group in flight at a crash can be durable and unpublished, and stale
    /// nodes of a reused page are older; such a node was published after
    /// the break.
    fn published_after(&self, region: &dyn PmRegion, x: Placed) -> Option<u64> {
        let a = x.seq + 1;
        self.by_place(region, x.seg, x.end)
            .find(|(_, n)| n.seq() >= a + u64::from(n.group))
            .map(|(at, _)| at)
    }
}

/// Reads the chain of log `number` from `locator` (see [`walk_segments`]).
/// With `salvage`, damage after the first segment's header — a damaged
/// seal, a sealed log's chain link to an invalid segment, a chain that
/// loops — is recorded there instead of failing: the seal is then ignored
/// (the log is read as unsealed) and the chain ends before the bad link.
fn read_chain(
    region: &dyn PmRegion,
    locator: u64,
    number: u64,
    mut salvage: Option<&mut Vec<Error>>,
) -> Result<Chain> {
    let first = SegmentHeader::read(region, locator)?;
    if first.owner != number || first.index != 0 || first.kind != SegmentKind::Log {
        return Err(Error::corruption(
            region.name(),
            locator,
            format!(
                "NVTable log {number}: its first segment belongs to owner {} (index {}, {:?})",
                first.owner, first.index, first.kind
            ),
        ));
    }
    let seal = match (read_seal(region, locator, number), salvage.as_deref_mut()) {
        (Err(e), Some(problems)) if e.is_corruption() => {
            problems.push(e);
            None
        }
        (r, _) => r?,
    };
    let mut segs = vec![PageRun {
        first: locator / PAGE,
        count: first.pages,
    }];
    let mut at = locator;
    let limit = region.len() / PAGE;
    loop {
        let next = region.load_u64(at + NEXT_SEGMENT_WORD)?;
        if next == 0 {
            break;
        }
        let index = segs.len() as u32;
        let h = SegmentHeader::read(region, next).and_then(|h| {
            if h.owner == number && h.index == index && h.kind == SegmentKind::Log {
                Ok(h)
            } else {
                Err(Error::corruption(
                    region.name(),
                    next,
                    format!(
                        "NVTable log {number}: segment {index} at {next} belongs to owner {} (index {}, {:?})",
                        h.owner, h.index, h.kind
                    ),
                ))
            }
        });
        let h = match h {
            Ok(h) => h,
            // A sealed log's chain is whole: a bad link is damage.
            Err(e) if seal.is_some() => {
                let e = Error::corruption(
                    region.name(),
                    at + NEXT_SEGMENT_WORD,
                    format!("NVTable log {number} (sealed): chain link to {next}: {e}"),
                );
                match salvage.as_deref_mut() {
                    Some(problems) => {
                        problems.push(e);
                        break;
                    }
                    None => return Err(e),
                }
            }
            Err(_) => {
                log::warn!(
                    "NVTable log {number}: chain ends at a segment never persisted (link at {})",
                    at + NEXT_SEGMENT_WORD
                );
                break;
            }
        };
        let run = PageRun {
            first: next / PAGE,
            count: h.pages,
        };
        if segs.len() as u64 > limit || segs.iter().any(|r| r.first == run.first) {
            let e = Error::corruption(
                region.name(),
                at + NEXT_SEGMENT_WORD,
                format!("NVTable log {number}: segment chain loops"),
            );
            match salvage.as_deref_mut() {
                Some(problems) => {
                    problems.push(e);
                    break;
                }
                None => return Err(e),
            }
        }
        segs.push(run);
        at = next;
    }
    Ok(Chain {
        segs,
        flags: first.flags,
        seal,
    })
}

/// The segment chain of log `number` whose first segment is at `locator`
/// (module doc, "Recovery"): the first segment must be valid (the
/// MANIFEST vouches for it) and so must its seal, if it has one. The chain
/// ends at the first link that is 0; in an unsealed log also at a link
/// that reaches no valid segment of this log (a segment linked but never
/// persisted: nothing in it was ever published), which in a sealed log is
/// `Error::Corruption`.
pub fn walk_segments(
    region: &dyn PmRegion,
    locator: u64,
    number: u64,
) -> Result<(Vec<PageRun>, u16)> {
    let c = read_chain(region, locator, number, None)?;
    Ok((c.segs, c.flags))
}

/// Walks log `number` (module doc, "Recovery"): its segments and the
/// nodes reachable from its head, in seqno order, each a valid successor
/// of the one before at the place the writer puts it. A sealed log must
/// hold exactly the nodes it was sealed with, in whole groups; any
/// shortfall is corruption. An unsealed log ends at the first link that
/// does not lead on — a torn tail, never acknowledged — unless published
/// nodes follow it (corruption); an incomplete trailing group is dropped.
pub fn walk(
    region: &dyn PmRegion,
    locator: u64,
    number: u64,
) -> Result<(Vec<PageRun>, Vec<WalkedNode>)> {
    let chain = read_chain(region, locator, number, None)?;
    let mut out = Walked::default();
    walk_chain(region, &chain, locator, number, None, &mut out)?;
    Ok((chain.segs, out.nodes))
}

/// What [`walk_salvage`] read of a log.
#[derive(Debug)]
pub struct SalvagedLog {
    /// The segment chain as far as it could be followed.
    pub segs: Vec<PageRun>,
    /// The node count of the seal (`None`: not sealed, or the seal was
    /// damaged).
    pub sealed: Option<u32>,
    /// The nodes read, in seqno order: whole groups only.
    pub nodes: Vec<WalkedNode>,
    /// The damage met (each `Error::Corruption` naming the offset), and an
    /// unsealed log's torn tail (an append a crash cut, or damage to its
    /// last group: they cannot be told apart). Empty: [`walk`] returns the
    /// same nodes, and the list ended at a zero link.
    pub problems: Vec<Error>,
}

/// [`walk`] for `Db::repair` (`design/nvcache/salvage.rs`): where `walk`
/// fails on damage, this returns the whole groups before it, with the
/// damage in `problems`. It follows `walk`'s rules, except that
///
/// - a damaged seal is recorded and the log read as unsealed (rule 4:
///   a torn tail still ends it, published nodes after a break are still
///   damage);
/// - a sealed log's chain ends before a link to an invalid segment or a
///   loop (its nodes beyond are then missing: damage);
/// - where `walk` would report damage (a sealed log's list breaking before
///   its count, an unsealed log's break with published nodes after it)
///   and a node that checks — both checksums, the next seqno — sits where
///   the writer put the next node, it is taken and the walk goes on: the
///   link words are outside every checksum, so a damaged `next` or `prev`
///   word does not cost the nodes after it. A stale node of a reused page
///   cannot pass for it: it is older than the log's first node.
///
/// An unsealed log's torn tail — a link to a node that does not check
/// with nothing published after it, an incomplete trailing group — ends
/// it as in `walk`, but is named in `problems`: it is also what damage to
/// the last group looks like.
///
/// Damage in a node itself ends the list walk there; the rest of the
/// log is then read by place ([`resync`]): every node that checks after
/// the last whole group, in the order the writer placed them, taken in
/// whole groups from the first group start that can be proven. The
/// verified nodes of a group the damage cut are dropped with it (a group
/// is one batch, applied whole or not at all), and so is every group
/// whose start cannot be proven. `Err` only if segment 0 itself does not
/// check (or is not log `number`'s).
pub fn walk_salvage(region: &dyn PmRegion, locator: u64, number: u64) -> Result<SalvagedLog> {
    let mut problems = Vec::new();
    let chain = read_chain(region, locator, number, Some(&mut problems))?;
    let mut out = Walked::default();
    if let Err(e) = walk_chain(
        region,
        &chain,
        locator,
        number,
        Some(&mut problems),
        &mut out,
    ) {
        problems.push(e);
        let cut = out.nodes.get(out.whole).cloned();
        let cut_count = out.nodes.len().saturating_sub(out.whole);
        out.nodes.truncate(out.whole);
        resync(
            region,
            &chain,
            number,
            cut.as_ref(),
            &mut out,
            &mut problems,
        );
        let cut = cut.map(|c| c.at);
        if let Some(at) = cut.filter(|&at| !out.nodes.iter().any(|n| n.at == at)) {
            problems.push(Error::corruption(
                region.name(),
                at,
                format!(
                    "NVTable log {number}: the {cut_count} verified nodes of the group the damage \
                     cut were dropped (a group is one batch: applied whole or not at all)"
                ),
            ));
        }
    }
    Ok(SalvagedLog {
        segs: chain.segs,
        sealed: chain.seal,
        nodes: out.nodes,
        problems,
    })
}

/// A node that checks, found by place after damage ([`resync`]).
struct Found {
    at: u64,
    size: u64,
    seq: SeqNo,
    group: u32,
    ikey: Vec<u8>,
}

/// [`walk_salvage`] after damage ended its list walk: reads on by place
/// and appends to `out` the whole groups it can prove.
///
/// Where: from the end of the last whole group the walk accepted — or,
/// with none, from the first node of the group the damage cut (`cut`,
/// the log's first node: verified, so a group start) — every node that
/// checks (both checksums, a group size) with a seqno above the last one
/// taken, in place order — the writer's order (rule 1) —
/// resynchronising 8 bytes at a time over bytes that do not check
/// ([`Chain::by_place`], as `published_after` scans). Nothing is read
/// when the walk verified no node: the seqno bound is what keeps out the
/// stale nodes of a reused page (older than the log's first node), and
/// without a verified node there is none.
///
/// Which: a group of g nodes is g nodes of consecutive seqnos, each
/// carrying g, and the groups tile the seqnos from the first one (the
/// end of the walk's last whole group). Lost nodes leave gaps; for each
/// node found, the seqnos its group can start at are those of every
/// tiling consistent with all the nodes found — forward from the first
/// group start, then pruned backward to the tilings that also fit every
/// later node ([`Phases`]). A node whose group start is then one seqno is
/// in a proven group, taken if all its nodes are there. A group whose
/// start stays ambiguous (every size around a gap equal: its nodes could
/// be the tail of one batch and the head of the next) is dropped, and so
/// is a group a lost node belongs to. A sealed log takes no more than its
/// seal's count, and its last group ends at the seqno that count gives —
/// which settles the tilings a lost node leaves open when every group
/// after it has the same size (an unsealed log, the log of a crash,
/// keeps them open: those groups are dropped).
fn resync(
    region: &dyn PmRegion,
    chain: &Chain,
    number: u64,
    cut: Option<&WalkedNode>,
    out: &mut Walked,
    problems: &mut Vec<Error>,
) {
    let seq_of = |n: &WalkedNode| {
        let t = &n.ikey[n.ikey.len() - 8..];
        u64::from_le_bytes(t.try_into().expect("8 bytes")) >> 8
    };
    // Where to read from, and the seqno the first group starts at.
    let (from, at, first) = match (out.nodes.last(), cut) {
        (Some(last), _) => (last.at + last.size, last.at, seq_of(last) + 1),
        (None, Some(c)) => (c.at, c.at, seq_of(c)),
        (None, None) => return,
    };
    let Some(seg) = chain.segment_index(at) else {
        return;
    };
    let mut found: Vec<Found> = Vec::new();
    let mut above = first.saturating_sub(1);
    for (at, n) in chain.by_place(region, seg, from) {
        if n.seq() > above {
            above = n.seq();
            let mut ikey = Vec::with_capacity(n.key.len() + 8);
            ikey.extend_from_slice(n.key);
            ikey.extend_from_slice(&n.tag.to_le_bytes());
            found.push(Found {
                at,
                size: n.size(),
                seq: n.seq(),
                group: n.group,
                ikey,
            });
        }
    }
    // A sealed log's last node is the last of its group: its seqno is
    // `first` plus the nodes the seal counts beyond those already taken.
    let end = chain
        .seal
        .and_then(|c| (c as usize).checked_sub(out.nodes.len()))
        .and_then(|left| (first + left as u64).checked_sub(1));
    let Some(starts) = Phases::solve(first, end, &found) else {
        problems.push(Error::corruption(
            region.name(),
            found.first().map_or(0, |f| f.at),
            format!(
                "NVTable log {number}: the {} nodes that check after the damage fit no tiling \
                 into groups, or too many: dropped",
                found.len()
            ),
        ));
        return;
    };
    let cap = chain.seal.map_or(usize::MAX, |c| c as usize);
    let (before, mut taken, mut dropped) = (out.nodes.len(), 0usize, 0usize);
    let mut lost_from = first;
    let mut i = 0;
    while i < found.len() {
        let f = &found[i];
        let g = f.group as usize;
        let whole = starts[i] == Some(f.seq)
            && found.get(i..i + g).is_some_and(|run| {
                run.iter()
                    .enumerate()
                    .all(|(j, n)| n.group == f.group && n.seq == f.seq + j as u64)
            })
            && out.nodes.len() + g <= cap;
        if !whole {
            dropped += 1;
            i += 1;
            continue;
        }
        let start = f.seq;
        if start > lost_from {
            problems.push(Error::corruption(
                region.name(),
                f.at,
                format!(
                    "NVTable log {number}: seqnos {lost_from}..={} lost (damaged nodes, or groups \
                     whose start could not be proven); read on from the group at {} (seqno \
                     {start})",
                    start - 1,
                    f.at,
                ),
            ));
        }
        for n in &mut found[i..i + g] {
            out.nodes.push(WalkedNode {
                at: n.at,
                size: n.size,
                ikey: std::mem::take(&mut n.ikey),
            });
        }
        taken += g;
        lost_from = start + g as u64;
        i += g;
    }
    out.whole = out.nodes.len();
    if dropped > 0 {
        problems.push(Error::corruption(
            region.name(),
            found.first().map_or(0, |f| f.at),
            format!(
                "NVTable log {number}: {dropped} nodes that check after the damage were dropped: \
                 not in a whole group whose start could be proven"
            ),
        ));
    }
    if taken > 0 {
        log::warn!(
            "NVTable log {number}: {taken} nodes read past the damage in whole groups \
             ({before} before it)"
        );
    }
}

/// Where the group of each node found after damage can start
/// ([`resync`]): sets of seqnos, kept as sorted disjoint inclusive ranges.
struct Phases;

/// A set of seqnos as sorted, disjoint, inclusive ranges.
type Starts = Vec<(SeqNo, SeqNo)>;

impl Phases {
    /// More ranges than this for one node: crafted input, not a log.
    const MAX_RANGES: usize = 64;

    /// For each node of `found` (seqnos increasing, groups ≥ 1), the one
    /// seqno its group starts at in every tiling of the seqnos from
    /// `first` (to `end`, the last seqno of a sealed log, whose last group
    /// ends there) consistent with all of `found`, or `None` where tilings
    /// disagree. `None` overall when no tiling fits, or the sets grow
    /// past [`Self::MAX_RANGES`].
    fn solve(first: SeqNo, end: Option<SeqNo>, found: &[Found]) -> Option<Vec<Option<SeqNo>>> {
        if found.is_empty() {
            return Some(Vec::new());
        }
        let g = |i: usize| u64::from(found[i].group);
        // Forward: the starts each node's group can have.
        let mut fwd: Vec<Starts> = Vec::with_capacity(found.len());
        let t0 = found[0].seq;
        fwd.push(vec![(first.max((t0 + 1).saturating_sub(g(0))), t0)]);
        for i in 1..found.len() {
            let (gp, u, gu) = (g(i - 1), found[i].seq, g(i));
            let mut next = Starts::new();
            for &(lo, hi) in &fwd[i - 1] {
                // Starts s with u inside [s, s + gp): the same group.
                let same_lo = lo.max((u + 1).saturating_sub(gp));
                if gu == gp && same_lo <= hi {
                    next.push((same_lo, hi));
                }
                // Starts s with s + gp <= u: u's group starts anywhere
                // from the end of that group (the seqnos between are
                // lost, any groups) within u's own size.
                if let Some(last) = u.checked_sub(gp) {
                    if lo <= last {
                        let from = (lo + gp).max((u + 1).saturating_sub(gu));
                        if from <= u {
                            next.push((from, u));
                        }
                    }
                }
            }
            let next = Self::merge(next);
            if next.is_empty() || next.len() > Self::MAX_RANGES {
                return None;
            }
            fwd.push(next);
        }
        // Backward: keep the starts that reach a kept start of the next
        // node (every start of the last node is kept: a log may end in a
        // group cut short).
        let mut out = vec![None; found.len()];
        let last = found.len() - 1;
        let mut keep = match end {
            // The last node's group fits before the log's end.
            Some(e) => {
                let y = (e + 1).checked_sub(g(last))?;
                Self::merge(
                    fwd[last]
                        .iter()
                        .filter(|r| r.0 <= y)
                        .map(|&(a, b)| (a, b.min(y)))
                        .collect(),
                )
            }
            None => fwd[last].clone(),
        };
        if keep.is_empty() {
            return None;
        }
        for i in (0..found.len()).rev() {
            if i + 1 < found.len() {
                let (gp, u, gu) = (g(i), found[i + 1].seq, g(i + 1));
                let max_next = keep.last().map(|r| r.1);
                let mut k = Starts::new();
                for &(lo, hi) in &fwd[i] {
                    // The same group: s must be kept for the next node.
                    if gu == gp {
                        let same_lo = lo.max((u + 1).saturating_sub(gp));
                        for &(a, b) in &keep {
                            let (x, y) = (a.max(same_lo), b.min(hi));
                            if x <= y {
                                k.push((x, y));
                            }
                        }
                    }
                    // A later group: s + gp <= some kept start of the next.
                    if let (Some(last), Some(m)) = (u.checked_sub(gp), max_next) {
                        let y = hi.min(last).min(m.saturating_sub(gp));
                        if lo <= y && m >= gp {
                            k.push((lo, y));
                        }
                    }
                }
                keep = Self::merge(k);
                if keep.is_empty() {
                    return None;
                }
            }
            if let [(a, b)] = keep[..] {
                if a == b {
                    out[i] = Some(a);
                }
            }
        }
        Some(out)
    }

    fn merge(mut v: Starts) -> Starts {
        v.sort_unstable();
        let mut out: Starts = Vec::with_capacity(v.len());
        for (a, b) in v {
            match out.last_mut() {
                Some(l) if a <= l.1.saturating_add(1) => l.1 = l.1.max(b),
                _ => out.push((a, b)),
            }
        }
        out
    }
}

/// What a walk accepted so far.
#[derive(Default)]
struct Walked {
    nodes: Vec<WalkedNode>,
    /// Nodes in whole groups (a prefix of `nodes`).
    whole: usize,
}

/// Why the list does not go on at a link: `Ok(None)` a zero link,
/// `Ok(Some((at, why)))` the link's target is not a valid successor —
/// either ends the list of an unsealed log (rule 4) — and `Err` damage
/// `walk` reports whatever follows.
type Stop = std::result::Result<Option<(u64, String)>, Error>;

/// The walk of [`walk`] (strict, `salvage` = `None`) and
/// [`walk_salvage`] (damage that can be walked past is recorded in
/// `salvage`). Accepted nodes go to `out`, which holds them also when an
/// error returns.
fn walk_chain(
    region: &dyn PmRegion,
    chain: &Chain,
    locator: u64,
    number: u64,
    mut salvage: Option<&mut Vec<Error>>,
    out: &mut Walked,
) -> Result<()> {
    let bad = |off: u64, what: String| {
        Error::corruption(region.name(), off, format!("NVTable log {number}: {what}"))
    };
    let nodes = &mut out.nodes;
    let mut link = locator + HEAD_WORD;
    let mut pred: Option<Placed> = None;
    let mut group_left = 0u32;
    let mut group_size = 0u32;
    let mut group_start = 0usize;
    let torn = |at: u64, why: &str| {
        log::warn!(
            "NVTable log {number}: torn tail at {at} ({why}; a write never acknowledged) dropped"
        );
    };
    loop {
        let target = region.load_u64(link)?;
        if let Some(c) = chain.seal {
            if nodes.len() as u64 == u64::from(c) {
                if target != 0 {
                    let e = bad(
                        link,
                        format!(
                            "link {target} after the last of the {c} nodes the log was sealed with"
                        ),
                    );
                    // Salvage: every sealed node was read.
                    match salvage.as_deref_mut() {
                        Some(problems) => problems.push(e),
                        None => return Err(e),
                    }
                }
                break;
            }
            if target == 0 && salvage.is_none() {
                return Err(bad(
                    link,
                    format!(
                        "the list ends after {} of the {c} nodes the log was sealed with",
                        nodes.len()
                    ),
                ));
            }
        }
        // Rule 1: where the writer puts the next node.
        let pos = chain
            .next_positions(pred)
            .into_iter()
            .flatten()
            .find(|&(p, _)| p == target);
        let step: std::result::Result<(Node<'_>, u64, usize), Stop> = match pos {
            _ if target == 0 => Err(Ok(None)),
            Some((at, seg)) => chain
                .successor(region, at, seg, pred)
                .map(|n| (n, at, seg))
                .map_err(|why| Ok(Some((at, why)))),
            None if chain.seal.is_none() && chain.segment_index(target).is_none() => {
                // Unsealed: a link into a segment the chain lost (linked
                // after the crash point). A valid node there was published.
                let valid = Node::read(region, target, 0, region.len())
                    .is_ok_and(|n| n.value(region, true).is_ok());
                if valid {
                    Err(Err(bad(
                        target,
                        format!("node at {target}: a published node outside the log's segments"),
                    )))
                } else {
                    Err(Ok(Some((target, "outside the log's segments".to_string()))))
                }
            }
            // The head word is written whole with segment 0's header and
            // then only published into, so it is never stale.
            None if chain.seal.is_some() || pred.is_none() => {
                let want: Vec<u64> = chain
                    .next_positions(pred)
                    .into_iter()
                    .flatten()
                    .map(|p| p.0)
                    .collect();
                Err(Err(bad(
                    link,
                    format!("link names {target}, not where the log's next node goes ({want:?})"),
                )))
            }
            // Unsealed: the writer never stores such a link, but the node
            // holding it may be one written after the crash point whose
            // link word kept stale bytes; damage shows as what follows.
            None => Err(Ok(Some((
                target,
                "not where the log's next node goes".to_string(),
            )))),
        };
        // Salvage: where this is damage (rule 3, or rule 4 with published
        // nodes after it), take the node the writer placed next if it
        // checks (`walk_salvage`).
        let step = match (step, pred, salvage.as_deref_mut()) {
            (Err(stop), Some(p), Some(problems))
                if stop.is_err()
                    || chain.seal.is_some()
                    || chain.published_after(region, p).is_some() =>
            {
                match chain.placed_successor(region, p) {
                    Some((n, at, seg)) => {
                        let what = match &stop {
                            Ok(None) => format!("a zero link at {link}"),
                            Ok(Some((to, why))) => format!("the link at {link} to {to} ({why})"),
                            Err(Error::Corruption { what, .. }) => what
                                .strip_prefix(&format!("NVTable log {number}: "))
                                .unwrap_or(what)
                                .to_string(),
                            Err(e) => e.to_string(),
                        };
                        problems.push(bad(
                            link,
                            format!(
                                "{what}: the node of seqno {} checks where the writer put it ({at}); the walk goes on from it",
                                n.seq()
                            ),
                        ));
                        Ok((n, at, seg))
                    }
                    None => Err(stop),
                }
            }
            (s, _, _) => s,
        };
        let (node, at, seg) = match step {
            Ok(s) => s,
            Err(Err(e)) => return Err(e),
            Err(Ok(why)) => {
                // Rule 3 (sealed) or 4 (unsealed).
                if let Some(c) = chain.seal {
                    return Err(match &why {
                        Some((at, why)) => bad(
                            *at,
                            format!(
                                "node at {at}, {} of the {c} nodes the log was sealed with: {why}",
                                nodes.len() + 1
                            ),
                        ),
                        None => bad(
                            link,
                            format!(
                                "the list ends after {} of the {c} nodes the log was sealed with",
                                nodes.len()
                            ),
                        ),
                    });
                }
                if let Some(n) = pred.and_then(|p| chain.published_after(region, p)) {
                    let (off, what) = match &why {
                        Some((at, why)) if pos.is_some() => {
                            (*at, format!("node at {at} is damaged ({why})"))
                        }
                        Some((at, why)) => (link, format!("the link at {link} to {at} ({why})")),
                        None => (link, format!("a zero link at {link} ends the list")),
                    };
                    return Err(bad(off, format!("{what} and published node {n} follows")));
                }
                if let Some((at, why)) = why {
                    torn(at, &why);
                    // Salvage: named, as repair names a WAL's torn tail.
                    if let Some(problems) = salvage.as_deref_mut() {
                        problems.push(bad(
                            at,
                            format!(
                                "the list ends at {at} ({why}): a torn tail (an append the crash cut, never acknowledged) or damage to the last group"
                            ),
                        ));
                    }
                }
                break;
            }
        };
        let bad_node = |what: String| bad(at, format!("node at {at}: {what}"));
        if group_left == 0 {
            if node.group == 0 {
                return Err(bad_node("group of 0 nodes".into()));
            }
            group_left = node.group;
            group_size = node.group;
            group_start = nodes.len();
        } else if node.group != group_size {
            return Err(bad_node(format!(
                "group {} inside a group of {group_size}",
                node.group
            )));
        }
        group_left -= 1;
        let mut ikey = Vec::with_capacity(node.key.len() + 8);
        ikey.extend_from_slice(node.key);
        ikey.extend_from_slice(&node.tag.to_le_bytes());
        nodes.push(WalkedNode {
            at,
            size: node.size(),
            ikey,
        });
        if group_left == 0 {
            out.whole = nodes.len();
        }
        pred = Some(Placed {
            at,
            seg,
            end: at + node.size(),
            seq: node.seq(),
        });
        link = at + NODE_NEXT;
    }
    if group_left > 0 {
        if let Some(c) = chain.seal {
            let at = nodes.last().map_or(locator, |n| n.at);
            return Err(bad(
                at,
                format!("the {c} nodes the log was sealed with end inside a group of {group_size}"),
            ));
        }
        log::warn!(
            "NVTable log {number}: incomplete trailing group of {group_size} entries dropped \
             (never acknowledged{})",
            if chain.flags & FLAG_PER_ENTRY != 0 {
                ""
            } else {
                "; its publish raced the crash"
            }
        );
        if let Some(problems) = &mut salvage {
            problems.push(bad(
                nodes.get(group_start).map_or(locator, |n| n.at),
                format!(
                    "incomplete trailing group of {group_size} entries ({} found) dropped: an append the crash cut (never acknowledged) or damage",
                    nodes.len() - group_start
                ),
            ));
        }
        nodes.truncate(group_start);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::WriteBatch;
    use crate::design::nvcache::table::TableBuild;
    use crate::storage::sim::SimRegion;

    fn space(bytes: usize) -> (Arc<SimRegion>, Arc<Space>) {
        let sim = Arc::new(SimRegion::new(bytes));
        let tier = Arc::new(PmTier::open(Arc::clone(&sim) as Arc<dyn PmRegion>, false).unwrap());
        let space = Arc::new(Space {
            region: Arc::clone(&sim) as Arc<dyn PmRegion>,
            tier,
            segment_pages: 4,
        });
        (sim, space)
    }

    fn hex(b: &[u8]) -> String {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// docs/format/pm.md, "NVTable", worked example.
    #[test]
    fn worked_example() {
        let (sim, space) = space(64 << 10);
        let logs = Logs::default();
        let (mut w, at) = create(&space, &logs, 7, false).unwrap();
        assert_eq!(at, 0x2000);
        let mut b = WriteBatch::new();
        b.put(b"apple", b"red");
        b.set_seqno(5);
        w.add_record(b.encoded()).unwrap();
        let seg = sim.slice(0x2000, 0x78).unwrap();
        assert_eq!(
            hex(&seg[..0x40]),
            "4e 56 53 65 67 6d 6e 74 07 00 00 00 00 00 00 00 \
             04 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 \
             01 00 00 00 0e 6e b1 df 40 20 00 00 00 00 00 00 \
             00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
        );
        assert_eq!(
            hex(&seg[0x40..]),
            "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
             01 05 00 00 00 00 00 00 05 00 00 00 03 00 00 00 \
             01 00 00 00 02 92 64 10 e0 2f 60 02 61 70 70 6c \
             65 72 65 64 00 00 00 00"
        );
        let st = logs.get(7).unwrap();
        let st = st.state.lock();
        assert_eq!((st.first_seq, st.offsets.as_slice()), (5, &[0x2040u64][..]));
        let mut t = TableBuild::with_capacity(1);
        t.push(0x2040, 56, st.segments[0], b"apple", (5 << 8) | 1);
        let built = t.finish(&space, 9, Duration::ZERO).unwrap().unwrap();
        assert_eq!(built.meta.pm_pages[0], PageRun { first: 6, count: 1 });
        let a = sim.slice(0x6000, 88).unwrap();
        assert_eq!(
            hex(a),
            "4e 56 54 61 62 6c 65 00 01 00 00 00 40 00 00 00 \
             09 00 00 00 00 00 00 00 05 00 00 00 00 00 00 00 \
             05 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 \
             01 00 00 00 7e bf 17 18 00 00 00 00 67 dd ac d0 \
             40 20 00 00 00 00 00 00 02 00 00 00 00 00 00 00 \
             04 00 00 00 38 00 00 00"
        );
        // The walk finds the node.
        let (segs, nodes) = walk(sim.as_ref(), 0x2000, 7).unwrap();
        assert_eq!(segs, vec![PageRun { first: 2, count: 4 }]);
        assert_eq!((nodes.len(), nodes[0].at, nodes[0].size), (1, 0x2040, 56));
        // A clean close seals it: 1 node, crc32c(07 00 .. 00 ‖ 01 00 00 00).
        w.seal().unwrap();
        assert_eq!(
            hex(sim.slice(0x2038, 8).unwrap()),
            "01 00 00 00 75 33 70 60"
        );
        assert_eq!(walk(sim.as_ref(), 0x2000, 7).unwrap().1.len(), 1);
        assert!(w.add_record(b.encoded()).is_err(), "nothing after the seal");
    }

    /// A group that does not fit the last segment continues in a new one
    /// (linked before the group is published); a node larger than a
    /// segment gets a segment of its own; per-entry logs publish node by
    /// node. The walk finds every node in order.
    #[test]
    fn groups_cross_segments_and_walk_back() {
        for per_entry in [false, true] {
            let (sim, space) = space(1 << 20);
            let logs = Logs::default();
            let (mut w, at) = create(&space, &logs, 3, per_entry).unwrap();
            let mut seq = 1;
            let mut want = Vec::new();
            for g in 0..40u64 {
                let mut b = WriteBatch::new();
                let n = 1 + g % 4;
                for j in 0..n {
                    let v = if g == 17 && j == 0 {
                        vec![7u8; 40_000]
                    } else {
                        vec![g as u8; 900]
                    };
                    let k = format!("k{g:03}-{j}");
                    b.put(k.as_bytes(), &v);
                    want.push(k.into_bytes());
                }
                b.set_seqno(seq);
                seq += n;
                w.add_record(b.encoded()).unwrap();
            }
            let shared = logs.get(3).unwrap();
            let st = shared.state.lock();
            assert!(st.segments.len() > 5, "{:?}", st.segments);
            assert!(st.segments.iter().any(|s| s.count > 4), "a jumbo segment");
            let (segs, nodes) = walk(sim.as_ref(), at, 3).unwrap();
            assert_eq!(segs, st.segments);
            let keys: Vec<Vec<u8>> = nodes
                .iter()
                .map(|n| crate::key::user_key(&n.ikey).to_vec())
                .collect();
            assert_eq!(keys, want);
            let offs: Vec<u64> = nodes.iter().map(|n| n.at).collect();
            assert_eq!(offs, st.offsets);
        }
    }

    /// Log 3: 30 groups of 1, 2 or 3 nodes with 700-byte values, across
    /// several segments; sealed or not. Returns the region, segment 0,
    /// the node offsets and the index of each group's first node.
    fn groups(seal: bool) -> (Arc<SimRegion>, u64, Vec<u64>, Vec<usize>) {
        let (sim, space) = space(1 << 20);
        let logs = Logs::default();
        let (mut w, at) = create(&space, &logs, 3, false).unwrap();
        let (mut seq, mut starts) = (1, Vec::new());
        for g in 0..30u64 {
            let mut b = WriteBatch::new();
            let n = 1 + g % 3;
            for j in 0..n {
                b.put(format!("k{g:03}-{j}").as_bytes(), &[g as u8; 700]);
            }
            b.set_seqno(seq);
            starts.push((seq - 1) as usize);
            seq += n;
            w.add_record(b.encoded()).unwrap();
        }
        if seal {
            w.seal().unwrap();
        }
        let offs = logs.get(3).unwrap().state.lock().offsets.clone();
        // A crash now: the writer's drop would seal the log.
        let image = Arc::new(sim.crash());
        drop(w);
        (image, at, offs, starts)
    }

    /// Damage done to a copy of a region.
    type Damage = Box<dyn Fn(&SimRegion)>;

    fn value_at(sim: &SimRegion, at: u64) -> u64 {
        Node::read(sim, at, 0, sim.len()).unwrap().value_at()
    }

    /// A sealed log must hold exactly its sealed nodes: every shortfall —
    /// a publish lost, a link changed, a node or the seal damaged, the
    /// chain cut — is corruption, even at the log's very end.
    #[test]
    fn sealed_log_damage_is_corruption() {
        let (sim, seg0, offs, starts) = groups(true);
        assert_eq!(offs.len(), 60);
        let (segs, nodes) = walk(sim.as_ref(), seg0, 3).unwrap();
        assert!(segs.len() > 2, "{segs:?}");
        assert_eq!(nodes.len(), 60);
        let last_publish = offs[starts[29] - 1] + NODE_NEXT;
        let cases: Vec<(&str, Damage)> = vec![
            (
                "last publish zeroed",
                Box::new(move |r| r.store_u64(last_publish, 0).unwrap()),
            ),
            (
                "middle link changed",
                Box::new({
                    let at = offs[20] + 1;
                    move |r| r.corrupt(at, 0x0f).unwrap()
                }),
            ),
            (
                "last value",
                Box::new({
                    let at = value_at(&sim, offs[59]) + 5;
                    move |r| r.corrupt(at, 0x01).unwrap()
                }),
            ),
            (
                "seal",
                Box::new(move |r| r.corrupt(seg0 + SEAL_WORD + 5, 0x01).unwrap()),
            ),
            (
                "chain cut",
                Box::new(move |r| r.store_u64(seg0 + NEXT_SEGMENT_WORD, 0).unwrap()),
            ),
            (
                "head zeroed",
                Box::new(move |r| r.store_u64(seg0 + HEAD_WORD, 0).unwrap()),
            ),
            (
                "past the end",
                Box::new({
                    let at = offs[59] + NODE_NEXT;
                    move |r| r.store_u64(at, offs[59] + 1000).unwrap()
                }),
            ),
        ];
        for (what, damage) in cases {
            let r = sim.crash();
            damage(&r);
            let e = walk(&r, seg0, 3).unwrap_err();
            assert!(e.is_corruption(), "{what}: {e}");
        }
    }

    /// An unsealed log (a crash): damage at its end cannot be told from an
    /// append the crash tore, and is dropped with its group; damage with
    /// published nodes after it is corruption.
    #[test]
    fn unsealed_log_tail_is_torn_and_damage_before_it_is_corruption() {
        let (sim, seg0, offs, starts) = groups(false);
        assert_eq!(walk(sim.as_ref(), seg0, 3).unwrap().1.len(), 60);
        let torn: Vec<(&str, u64, u8)> = vec![
            ("last publish zeroed", offs[starts[29] - 1] + NODE_NEXT, 0),
            ("last value", value_at(&sim, offs[59]) + 5, 1),
            ("last group's first node", offs[57] + 30, 1),
        ];
        for (what, at, mask) in torn {
            let r = sim.crash();
            if mask == 0 {
                r.store_u64(at, 0).unwrap();
            } else {
                r.corrupt(at, mask).unwrap();
            }
            let (_, nodes) = walk(&r, seg0, 3).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(nodes.len(), 57, "{what}");
        }
        let page = (offs[20] / PAGE) * PAGE;
        let damaged: Vec<(&str, Damage)> = vec![
            (
                "middle publish zeroed",
                Box::new({
                    let at = offs[starts[10] - 1] + NODE_NEXT;
                    move |r| r.store_u64(at, 0).unwrap()
                }),
            ),
            (
                "middle link changed",
                Box::new({
                    let at = offs[20] + 1;
                    move |r| r.corrupt(at, 0x0f).unwrap()
                }),
            ),
            (
                "middle value",
                Box::new({
                    let at = value_at(&sim, offs[starts[10]]) + 9;
                    move |r| r.corrupt(at, 0x40).unwrap()
                }),
            ),
            (
                "a group's first node",
                Box::new({
                    let at = offs[starts[12]] + 20;
                    move |r| r.corrupt(at, 0x02).unwrap()
                }),
            ),
            (
                "a middle page zeroed",
                Box::new(move |r| {
                    for (i, b) in r
                        .slice(page, PAGE as usize)
                        .unwrap()
                        .to_vec()
                        .into_iter()
                        .enumerate()
                    {
                        if b != 0 {
                            r.corrupt(page + i as u64, b).unwrap();
                        }
                    }
                }),
            ),
        ];
        for (what, damage) in damaged {
            let r = sim.crash();
            damage(&r);
            match walk(&r, seg0, 3) {
                Err(e) => assert!(e.is_corruption(), "{what}: {e}"),
                Ok((_, n)) => panic!("{what}: walked {} nodes without an error", n.len()),
            }
        }
    }

    /// `walk_salvage` (for `Db::repair`): what `walk` accepts it returns
    /// alike, without problems; where `walk` reports damage it keeps the
    /// whole groups before the damage, walks past damaged link words (the
    /// node the writer placed next still checks), reads a log whose seal
    /// is damaged as unsealed, and names every damage.
    #[test]
    fn salvage_walk_keeps_the_groups_before_damage() {
        for seal in [true, false] {
            let (sim, seg0, offs, starts) = groups(seal);
            let s = walk_salvage(sim.as_ref(), seg0, 3).unwrap();
            assert!(s.problems.is_empty(), "{:?}", s.problems);
            assert_eq!(s.nodes.len(), 60);
            assert_eq!(s.sealed, seal.then_some(60));
            assert_eq!(s.segs, walk(sim.as_ref(), seg0, 3).unwrap().0);
            let page = (offs[20] / PAGE) * PAGE;
            // The nodes of every group but `lost`, in log order.
            let group_of = |i: usize| starts.iter().rposition(|&s| s <= i).unwrap();
            let without = |lost: &[usize]| -> Vec<u64> {
                (0..offs.len())
                    .filter(|&i| !lost.contains(&group_of(i)))
                    .map(|i| offs[i])
                    .collect()
            };
            let size_of = |at: u64| Node::read(sim.as_ref(), at, 0, sim.len()).unwrap().size();
            // (what, damage, the groups lost: every group a damaged node
            // belongs to — the walk stops at the damage, and the rest of
            // the log is read on by place in whole groups)
            let cases: Vec<(&str, Damage, Vec<usize>)> = vec![
                (
                    "middle publish zeroed",
                    Box::new({
                        let at = offs[starts[10] - 1] + NODE_NEXT;
                        move |r| r.store_u64(at, 0).unwrap()
                    }),
                    vec![],
                ),
                (
                    "middle link changed",
                    Box::new({
                        let at = offs[20] + 1;
                        move |r| r.corrupt(at, 0x0f).unwrap()
                    }),
                    vec![],
                ),
                (
                    "middle prev link changed",
                    Box::new({
                        let at = offs[33] + NODE_PREV + 2;
                        move |r| r.corrupt(at, 0x10).unwrap()
                    }),
                    vec![],
                ),
                (
                    // Group 10's second node: the walk keeps groups 0..10,
                    // the read by place groups 11..30.
                    "middle value",
                    Box::new({
                        let at = value_at(&sim, offs[starts[10] + 1]) + 9;
                        move |r| r.corrupt(at, 0x40).unwrap()
                    }),
                    vec![10],
                ),
                (
                    // Group 12 is one node; group 13 (two nodes) then
                    // starts right after it — or group 12 had two nodes and
                    // 13 starts one later: group 14's size (three) rules
                    // that tiling out.
                    "a group's first node",
                    Box::new({
                        let at = offs[starts[12]] + 20;
                        move |r| r.corrupt(at, 0x02).unwrap()
                    }),
                    vec![12],
                ),
                (
                    "a middle page zeroed",
                    Box::new(move |r| {
                        for (i, b) in r
                            .slice(page, PAGE as usize)
                            .unwrap()
                            .to_vec()
                            .into_iter()
                            .enumerate()
                        {
                            if b != 0 {
                                r.corrupt(page + i as u64, b).unwrap();
                            }
                        }
                    }),
                    {
                        let mut g: Vec<usize> = (0..offs.len())
                            .filter(|&i| offs[i] < page + PAGE && offs[i] + size_of(offs[i]) > page)
                            .map(group_of)
                            .collect();
                        g.dedup();
                        g
                    },
                ),
                (
                    "head zeroed",
                    Box::new(move |r| r.store_u64(seg0 + HEAD_WORD, 0).unwrap()),
                    (0..30).collect(),
                ),
            ];
            for (what, damage, lost) in cases {
                let r = sim.crash();
                damage(&r);
                let strict = walk(&r, seg0, 3);
                let s = walk_salvage(&r, seg0, 3).unwrap_or_else(|e| panic!("{what}: {e}"));
                if what == "head zeroed" && !seal {
                    // An unsealed log emptied from its head reads as one
                    // that never published (module doc, rule 4).
                    assert_eq!(strict.unwrap().1.len(), 0);
                    assert_eq!(s.nodes.len(), 0);
                    continue;
                }
                assert!(
                    strict.is_err(),
                    "{what} (sealed {seal}): strict walk succeeds"
                );
                assert!(!s.problems.is_empty(), "{what} (sealed {seal})");
                for e in &s.problems {
                    assert!(e.is_corruption(), "{what}: {e}");
                }
                let got: Vec<u64> = s.nodes.iter().map(|n| n.at).collect();
                assert_eq!(
                    got,
                    without(&lost),
                    "{what} (sealed {seal}): {:?}",
                    s.problems
                );
            }
            // A torn tail is no damage: the same nodes as `walk`, no problem.
            if !seal {
                let r = sim.crash();
                r.store_u64(offs[starts[29] - 1] + NODE_NEXT, 0).unwrap();
                let s = walk_salvage(&r, seg0, 3).unwrap();
                assert_eq!((s.nodes.len(), s.problems.len()), (57, 0));
            }
        }
        // A damaged seal: read as unsealed, the damage named.
        let (sim, seg0, _, _) = groups(true);
        let r = sim.crash();
        r.corrupt(seg0 + SEAL_WORD + 5, 0x01).unwrap();
        assert!(walk(&r, seg0, 3).is_err());
        let s = walk_salvage(&r, seg0, 3).unwrap();
        assert_eq!((s.nodes.len(), s.sealed, s.problems.len()), (60, None, 1));
        // A sealed log's chain cut after segment 0: the nodes there.
        let r = sim.crash();
        r.store_u64(seg0 + NEXT_SEGMENT_WORD, 0x7fff_f000).unwrap();
        let s = walk_salvage(&r, seg0, 3).unwrap();
        assert_eq!(s.segs.len(), 1);
        assert!(!s.nodes.is_empty() && s.nodes.len() < 60);
        assert!(s.problems.len() >= 2, "{:?}", s.problems);
    }

    /// Groups all of one size leave the read past a lost group's first
    /// node two tilings (that group of two nodes, or of one and every
    /// later group one seqno later): a sealed log's end settles it, an
    /// unsealed log's groups after the damage are dropped.
    #[test]
    fn salvage_of_equal_groups_needs_the_seal_to_place_them() {
        for seal in [true, false] {
            let (sim, space) = space(1 << 20);
            let logs = Logs::default();
            let (mut w, seg0) = create(&space, &logs, 3, false).unwrap();
            for g in 0..20u64 {
                let mut b = WriteBatch::new();
                for j in 0..2 {
                    b.put(format!("k{g:03}-{j}").as_bytes(), &[g as u8; 300]);
                }
                b.set_seqno(1 + 2 * g);
                w.add_record(b.encoded()).unwrap();
            }
            if seal {
                w.seal().unwrap();
            }
            let offs = logs.get(3).unwrap().state.lock().offsets.clone();
            let r = sim.crash();
            drop(w);
            // Group 8's first node: its key checksum fails.
            r.corrupt(offs[16] + 20, 0x02).unwrap();
            assert!(walk(&r, seg0, 3).is_err());
            let s = walk_salvage(&r, seg0, 3).unwrap();
            let got: Vec<u64> = s.nodes.iter().map(|n| n.at).collect();
            let want: Vec<u64> = if seal {
                offs.iter()
                    .enumerate()
                    .filter(|&(i, _)| i / 2 != 8)
                    .map(|(_, &o)| o)
                    .collect()
            } else {
                offs[..16].to_vec()
            };
            assert_eq!(got, want, "sealed {seal}: {:?}", s.problems);
            assert!(
                s.problems.iter().any(|e| e.to_string().contains(if seal {
                    "seqnos 17..=18 lost"
                } else {
                    "not in a whole group whose start could be proven"
                })),
                "sealed {seal}: {:?}",
                s.problems
            );
        }
    }

    /// The tiling behind the read past damage, on crafted nodes.
    #[test]
    fn phases_prove_group_starts_only_where_every_tiling_agrees() {
        let f = |nodes: &[(SeqNo, u32)]| -> Vec<Found> {
            nodes
                .iter()
                .map(|&(seq, group)| Found {
                    at: seq * 64,
                    size: 64,
                    seq,
                    group,
                    ikey: Vec::new(),
                })
                .collect()
        };
        assert_eq!(Phases::solve(1, None, &[]), Some(vec![]));
        // Seqno 12 lost between groups of 1: every start proven.
        let v = f(&[(10, 1), (11, 1), (13, 1)]);
        assert_eq!(
            Phases::solve(10, None, &v),
            Some(vec![Some(10), Some(11), Some(13)])
        );
        // 10 and 13 lost: 11 (size 2) starts a group of 11, 12 — or
        // 10's group of 2 holds it and 12, 13 are one. 14's group of 3
        // starts at 14, or at 13 with 16 starting a group cut short: a
        // sealed end at 16 rules that out, not the first ambiguity.
        let v = f(&[(11, 2), (12, 2), (14, 3), (15, 3), (16, 3)]);
        assert_eq!(Phases::solve(10, None, &v), Some(vec![None; 5]));
        assert_eq!(
            Phases::solve(10, Some(16), &v),
            Some(vec![None, None, Some(14), Some(14), Some(14)])
        );
        // 13 says 3 beside 12's 2: a boundary, and 11, 12 a group.
        let v = f(&[(11, 2), (12, 2), (13, 3), (14, 3), (15, 3)]);
        assert_eq!(
            Phases::solve(10, None, &v),
            Some(vec![Some(11), Some(11), Some(13), Some(13), Some(13)])
        );
        // Equal sizes: open, unless the sealed end closes it.
        let v = f(&[(11, 2), (12, 2), (13, 2)]);
        assert_eq!(Phases::solve(10, None, &v), Some(vec![None, None, None]));
        assert_eq!(
            Phases::solve(10, Some(13), &v),
            Some(vec![Some(10), Some(12), Some(12)])
        );
        // No tiling: 11 sits in 10's group of 2 but says 3; a group past
        // the sealed end.
        assert_eq!(Phases::solve(10, None, &f(&[(10, 2), (11, 3)])), None);
        assert_eq!(Phases::solve(10, Some(11), &f(&[(11, 3)])), None);
        // Crafted sizes do not overflow.
        let v = f(&[(5, u32::MAX), (6, u32::MAX)]);
        assert_eq!(Phases::solve(0, None, &v), Some(vec![None, None]));
    }

    /// A retired writer seals its log; one whose append failed does not.
    #[test]
    fn retired_writer_seals_unless_an_append_failed() {
        let (sim, space) = space(1 << 20);
        let logs = Logs::default();
        let mut b = WriteBatch::new();
        b.put(b"k", b"v");
        b.set_seqno(1);
        let (mut w, at) = create(&space, &logs, 4, false).unwrap();
        w.add_record(b.encoded()).unwrap();
        assert_eq!(read_seal(sim.as_ref(), at, 4).unwrap(), None);
        drop(w);
        assert_eq!(read_seal(sim.as_ref(), at, 4).unwrap(), Some(1));
        // A record claiming two entries and holding one.
        let mut bad = b.encoded().to_vec();
        bad[8..12].copy_from_slice(&2u32.to_le_bytes());
        let (mut w, at) = create(&space, &logs, 5, false).unwrap();
        w.add_record(b.encoded()).unwrap();
        assert!(w.add_record(&bad).is_err());
        drop(w);
        assert_eq!(read_seal(sim.as_ref(), at, 5).unwrap(), None);
    }
}
