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
//! # Recovery ([`walk`])
//!
//! Follows the segment chain from the first segment (which must be valid:
//! the MANIFEST vouches for it) and the node list from the head, checking
//! each node's checksums, that its seqno follows the previous one and that
//! its `prev` names the node before it. Links are stored only after what
//! they point at was persisted — but a link stored after the crash point
//! may still reach the durable image (an early cache write-back), so
//! whoever follows one validates what it reaches (the `PmRegion`
//! contract, rule 5c): a chain link to an invalid segment ends the chain,
//! and a node link to an invalid node ends the list (a torn tail: never
//! acknowledged) — unless that node's own `next` leads to a valid node
//! that names it as its predecessor, which means published data follows
//! the damage: `Error::Corruption` naming the region, the offset and the
//! structure. So is a valid node outside the log's valid segments. An
//! incomplete trailing group (a torn publish, or an entry-by-entry append
//! cut short) is dropped: none of it was acknowledged.
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
    encode_node, node_size, Node, SegmentHeader, SegmentKind, FLAG_PER_ENTRY, HEAD_WORD,
    NEXT_SEGMENT_WORD, NODE_NEXT, NODE_PREV, SEGMENT_HEADER_BYTES,
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
        self.placed = placed;
        Ok(())
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

/// The segment chain of log `number` whose first segment is at `locator`
/// (module doc, "Recovery"): the first segment must be valid (the
/// MANIFEST vouches for it); the chain ends at the first link that is 0
/// or reaches no valid segment of this log (a segment linked but never
/// persisted: nothing in it was ever published).
pub fn walk_segments(
    region: &dyn PmRegion,
    locator: u64,
    number: u64,
) -> Result<(Vec<PageRun>, u16)> {
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
        let ok = SegmentHeader::read(region, next)
            .ok()
            .filter(|h| h.owner == number && h.index == index && h.kind == SegmentKind::Log);
        let Some(h) = ok else {
            log::warn!(
                "NVTable log {number}: chain ends at a segment never persisted (link at {})",
                at + NEXT_SEGMENT_WORD
            );
            break;
        };
        let run = PageRun {
            first: next / PAGE,
            count: h.pages,
        };
        if segs.len() as u64 > limit || segs.iter().any(|r| r.first == run.first) {
            return Err(Error::corruption(
                region.name(),
                at + NEXT_SEGMENT_WORD,
                format!("NVTable log {number}: segment chain loops"),
            ));
        }
        segs.push(run);
        at = next;
    }
    Ok((segs, first.flags))
}

/// The node at `at` if it is a valid successor of `prev` (at `prev_at`,
/// with seqno `prev_seq`; none for the first node): inside the region,
/// both checksums, the next seqno, and a `prev` link naming `prev_at`.
fn successor<'a>(
    region: &'a dyn PmRegion,
    at: u64,
    prev_at: u64,
    prev_seq: Option<SeqNo>,
) -> Option<Node<'a>> {
    let node = Node::read(region, at, 0, region.len()).ok()?;
    node.value(region, true).ok()?;
    if prev_seq.is_some_and(|s| node.seq() != s + 1) {
        return None;
    }
    (region.load_u64(at + NODE_PREV).ok()? == prev_at).then_some(node)
}

/// Walks log `number` (module doc, "Recovery"): its segments and the
/// nodes reachable from its head, in seqno order. The list ends at a link
/// of 0, or at a link whose target is not a valid successor — a torn
/// tail, never acknowledged — unless that target's own `next` leads to a
/// valid node that names it as its predecessor: published data after
/// damage is corruption. Every node found must lie in one of the log's
/// segments, and an incomplete trailing group is dropped.
pub fn walk(
    region: &dyn PmRegion,
    locator: u64,
    number: u64,
) -> Result<(Vec<PageRun>, Vec<WalkedNode>)> {
    let (segs, flags) = walk_segments(region, locator, number)?;
    let mut sorted = segs.clone();
    sorted.sort_unstable();
    let mut nodes: Vec<WalkedNode> = Vec::new();
    let mut link = locator + HEAD_WORD;
    let mut prev_seq: Option<SeqNo> = None;
    let mut prev = 0u64;
    let mut group_left = 0u32;
    let mut group_size = 0u32;
    let mut group_start = 0usize;
    loop {
        let at = region.load_u64(link)?;
        if at == 0 {
            break;
        }
        let Some(node) = successor(region, at, prev, prev_seq) else {
            // Torn, or damaged: damaged if published nodes follow.
            let after = region
                .load_u64(at + NODE_NEXT)
                .ok()
                .filter(|&n| n != 0)
                .and_then(|n| {
                    let node = Node::read(region, n, 0, region.len()).ok()?;
                    let back = region.load_u64(n + NODE_PREV).ok()?;
                    (back == at && prev_seq.is_none_or(|s| node.seq() > s)).then_some(n)
                });
            if let Some(n) = after {
                return Err(Error::corruption(
                    region.name(),
                    at,
                    format!(
                        "NVTable log {number}: node at {at} is damaged and published node {n} follows it"
                    ),
                ));
            }
            if at.is_multiple_of(8) && at < region.len() {
                log::warn!(
                    "NVTable log {number}: torn tail at {at} (a write never acknowledged) dropped"
                );
            }
            break;
        };
        let bad = |what: String| {
            Error::corruption(
                region.name(),
                at,
                format!("NVTable log {number}: node at {at}: {what}"),
            )
        };
        let i = sorted.partition_point(|r| (r.first + r.count) * PAGE <= at);
        let in_seg = sorted.get(i).is_some_and(|r| {
            r.first * PAGE + SEGMENT_HEADER_BYTES <= at
                && at + node.size() <= (r.first + r.count) * PAGE
        });
        if !in_seg {
            return Err(bad("a published node outside the log's segments".into()));
        }
        if group_left == 0 {
            if node.group == 0 {
                return Err(bad("group of 0 nodes".into()));
            }
            group_left = node.group;
            group_size = node.group;
            group_start = nodes.len();
        } else if node.group != group_size {
            return Err(bad(format!(
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
        prev_seq = Some(node.seq());
        prev = at;
        link = at + NODE_NEXT;
    }
    if group_left > 0 {
        log::warn!(
            "NVTable log {number}: incomplete trailing group of {group_size} entries dropped \
             (never acknowledged{})",
            if flags & FLAG_PER_ENTRY != 0 {
                ""
            } else {
                "; its publish raced the crash"
            }
        );
        nodes.truncate(group_start);
    }
    Ok((segs, nodes))
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
}
