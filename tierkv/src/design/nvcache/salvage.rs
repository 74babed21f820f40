//! NV-Cache's PM structures for `Db::repair` (`design/salvage.rs`), found
//! without the MANIFEST at the starts of the allocated pages:
//!
//! - **completed NVTables**: an offset-array run (magic `"NVTable\0"`)
//!   whose header and body checksums verify is opened with the table
//!   reader ([`NvTable::open`]) from its own header — id, seqnos, entry
//!   count, and the usage entries for the segment runs (each must lie in
//!   the region). Every entry is read as the reader reads it (inside its
//!   segment, key checksum, value checksum); an entry that fails is
//!   skipped and named.
//! - **logs** (the active NVTables: there is no WAL): a segment header
//!   (magic `"NVSegmnt"`) of kind log and index 0 starts one, log number
//!   its owner. It is walked with the recovery walk in salvage mode
//!   ([`log::walk_salvage`]): a sealed log ends at its seal, an unsealed
//!   one at the first link that does not lead on (a torn tail, never
//!   acknowledged: not a problem); damage is named, and gives the whole
//!   groups before it and those after it the read by place can prove
//!   (`log::walk_salvage`). Its nodes come in seqno order and are sorted
//!   by internal key here.
//!
//!   A log whose segment 0 a completed table lists, with a seqno at least
//!   that of the log's first node, was flushed: that table (or the
//!   compaction output it became) holds its nodes, and the log is not
//!   walked — a compaction may have relinked its nodes (the walk would
//!   call that damage), and its superseded versions would only add stale
//!   entries. A stale table that lists the pages from before they were
//!   reused for this log holds only older seqnos, so it does not count.
//!
//! Arena segments (kind 2) hold copies of nodes that the arrays of the
//! compaction outputs name: they are read through those arrays. A segment
//! header that does not check is reported (a log starting there cannot be
//! read; after a crash it can also be the torn header of a segment never
//! linked).
//!
//! Stale bytes: only allocated pages are looked at, and every entry
//! returned verifies, but an array or a log header that a structure
//! allocated over freed pages has not overwritten yet still verifies: its
//! (old) entries are returned. Seqnos put newer versions first; a key
//! whose tombstone a compaction already dropped can come back (the limit
//! `db/repair.rs` documents).

use std::sync::Arc;

use super::format::{
    self, read_table_header, table_bytes, Node, SegmentHeader, SegmentKind, HEAD_WORD,
    SEGMENT_MAGIC, TABLE_HEADER_BYTES, TABLE_MAGIC, USAGE_BYTES,
};
use super::log::{self, WalkedNode};
use super::table::NvTable;
use crate::design::salvage::{Salvaged, SourceKind};
use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::key::{self, SeqNo};
use crate::stats::Tier;
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};
use crate::storage::PmRegion;
use crate::version::edit::{TableFormat, TableMeta};

const PAGE: u64 = PAGE_SIZE_BYTES;

/// Problems named one by one per structure; the rest are counted.
const LISTED: usize = 8;

/// A completed table that opened: its reader and its header's largest
/// seqno.
struct Opened {
    table: Arc<NvTable>,
    seq_max: SeqNo,
}

/// Every completed NVTable and every log at the start of one of `pages`.
pub fn salvage(region: &Arc<dyn PmRegion>, pages: &[u64]) -> Vec<Salvaged> {
    let mut out = Vec::new();
    let mut tables = Vec::new();
    let mut logs = Vec::new();
    for &page in pages {
        let Some(at) = page.checked_mul(PAGE) else {
            continue;
        };
        let Ok(magic) = region.slice(at, 8) else {
            continue;
        };
        if magic == TABLE_MAGIC {
            let (found, opened) = table(region, page);
            out.push(found);
            tables.extend(opened);
        } else if magic == SEGMENT_MAGIC {
            match SegmentHeader::read(region.as_ref(), at) {
                Ok(h) if h.kind == SegmentKind::Log && h.index == 0 => logs.push((at, h.owner)),
                // A later segment of a log (read along its chain) or an
                // arena (read through the arrays).
                Ok(_) => {}
                Err(e) => out.push(Salvaged {
                    kind: SourceKind::NvLog,
                    name: format!("{} segment at offset {at}", region.name()),
                    entries: None,
                    seq_max: 0,
                    problems: vec![format!(
                        "NVTable segment at offset {at}: its header does not check, so a log starting there cannot be read: {e}"
                    )],
                }),
            }
        } else if let Some(what) = [
            (&TABLE_MAGIC, "an offset array"),
            (&SEGMENT_MAGIC, "a segment"),
        ]
        .into_iter()
        .find_map(|(m, what)| near(magic, m).then_some(what))
        {
            // An allocated page whose first bytes miss a magic by a byte or
            // two: a header damaged where its checksum cannot even be
            // looked for. Named, so that what it held is not lost silently.
            out.push(Salvaged {
                kind: SourceKind::NvLog,
                name: format!("{} page at offset {at}", region.name()),
                entries: None,
                seq_max: 0,
                problems: vec![format!(
                    "NVTable structure at offset {at}: the page starts with {:?}, a damaged magic of {what}? Not read",
                    String::from_utf8_lossy(magic)
                )],
            });
        }
    }
    for (at, number) in logs {
        out.push(read_log(region, at, number, &tables));
    }
    out
}

/// Whether `bytes` differ from `magic` in one or two bytes.
fn near(bytes: &[u8], magic: &[u8; 8]) -> bool {
    let differ = bytes.iter().zip(magic).filter(|(a, b)| a != b).count();
    bytes.len() == magic.len() && (1..=2).contains(&differ)
}

/// The completed table whose array run starts at `page`.
fn table(region: &Arc<dyn PmRegion>, page: u64) -> (Salvaged, Option<Opened>) {
    let at = page * PAGE;
    let mut found = Salvaged {
        kind: SourceKind::NvTable,
        name: format!("{} at offset {at}", region.name()),
        entries: None,
        seq_max: 0,
        problems: Vec::new(),
    };
    let (t, h) = match open_table(region, page) {
        Ok(x) => x,
        Err(e) => {
            found
                .problems
                .push(format!("NVTable array at offset {at}: {e}"));
            return (found, None);
        }
    };
    found.name = format!("{} table {} at offset {at}", region.name(), h.id);
    found.seq_max = h.seq_max;
    // Every entry as the reader reads it; an entry that does not verify
    // (or breaks the order) is skipped.
    let mut skip = Vec::new();
    let mut last: Vec<u8> = Vec::new();
    let mut ikey = Vec::new();
    for i in 0..t.len() {
        let why = match t
            .node(i)
            .and_then(|n| n.value(region.as_ref(), true).map(|_| n))
        {
            Ok(n) => {
                ikey.clear();
                ikey.extend_from_slice(n.key);
                ikey.extend_from_slice(&n.tag.to_le_bytes());
                // Internal keys are never empty: `last` is only before
                // the first entry that verified.
                (!last.is_empty() && key::compare_internal(&last, &ikey).is_ge()).then(|| {
                    format!(
                        "corruption in {} at offset {}: node out of internal-key order",
                        region.name(),
                        n.at
                    )
                })
            }
            Err(e) => Some(e.to_string()),
        };
        match why {
            None => std::mem::swap(&mut last, &mut ikey),
            Some(why) => {
                if skip.len() < LISTED {
                    found.problems.push(format!(
                        "NVTable {} (array at offset {at}): entry {i} skipped: {why}",
                        h.id
                    ));
                }
                skip.push(i);
            }
        }
    }
    if skip.len() > LISTED {
        found.problems.push(format!(
            "NVTable {} (array at offset {at}): {} more entries skipped ({} of {} in all)",
            h.id,
            skip.len() - LISTED,
            skip.len(),
            t.len()
        ));
    }
    found.entries = Some(Box::new(NodeIter::new(
        Arc::clone(region),
        Entries::Table {
            table: Arc::clone(&t),
            skip,
        },
    )));
    (
        found,
        Some(Opened {
            table: t,
            seq_max: h.seq_max,
        }),
    )
}

/// Opens the table whose array run starts at `page` from its own header:
/// the run's length from its entry and segment counts, the segment runs
/// from its usage entries (checked to lie in the region: the reader takes
/// them from the MANIFEST, which the allocator's reconcile vouches for).
fn open_table(
    region: &Arc<dyn PmRegion>,
    page: u64,
) -> Result<(Arc<NvTable>, format::TableHeader)> {
    let at = page * PAGE;
    let total = region.len() / PAGE;
    let h = read_table_header(
        region.as_ref(),
        PageRun {
            first: page,
            count: total.saturating_sub(page),
        },
    )?;
    // The header check made sure these fit the region.
    let array = PageRun {
        first: page,
        count: table_bytes(h.n, u64::from(h.u)).div_ceil(PAGE),
    };
    let usage_at = at + TABLE_HEADER_BYTES + 8 * h.n;
    let ub = region.slice(usage_at, (USAGE_BYTES * u64::from(h.u)) as usize)?;
    let mut pm_pages = Vec::with_capacity(h.u as usize + 1);
    pm_pages.push(array);
    for (i, e) in ub.chunks_exact(USAGE_BYTES as usize).enumerate() {
        let run = PageRun {
            first: format::u64_at(e, 0),
            count: u64::from(format::u32_at(e, 8)),
        };
        if run.first == 0
            || run.count == 0
            || run
                .first
                .checked_add(run.count)
                .is_none_or(|end| end > total)
        {
            return Err(Error::corruption(
                region.name(),
                usage_at + USAGE_BYTES * i as u64,
                format!(
                    "NVTable {} (array at {at}): usage entry {i} names pages {}+{} outside the region",
                    h.id, run.first, run.count
                ),
            ));
        }
        pm_pages.push(run);
    }
    let meta = TableMeta {
        id: h.id,
        tier: Tier::Pm,
        format: TableFormat::NvTable,
        size_bytes: 0,
        smallest: Vec::new(),
        largest: Vec::new(),
        seq_min: h.seq_min,
        seq_max: h.seq_max,
        entries: h.n,
        deletions: 0,
        pm_pages,
    };
    let t = NvTable::open(Arc::clone(region), &meta, true)?;
    Ok((Arc::new(t), h))
}

/// Log `number` whose segment 0 is at `at`: walked in salvage mode unless
/// a completed table holds its nodes (module doc).
fn read_log(region: &Arc<dyn PmRegion>, at: u64, number: u64, tables: &[Opened]) -> Salvaged {
    let name = format!("{} log {number} at offset {at}", region.name());
    let head = region.load_u64(at + HEAD_WORD).unwrap_or(0);
    let first_seq = (head != 0)
        .then(|| Node::read(region.as_ref(), head, 0, region.len()).ok())
        .flatten()
        .map(|n| n.seq());
    if let Some(s0) = first_seq {
        let page = at / PAGE;
        let covering = tables
            .iter()
            .find(|o| o.seq_max >= s0 && o.table.usage().iter().any(|u| u.run.first == page));
        if let Some(o) = covering {
            return Salvaged {
                kind: SourceKind::NvLog,
                name: format!(
                    "{name} (flushed: its nodes are read from NVTable {})",
                    o.table.id()
                ),
                entries: None,
                seq_max: 0,
                problems: Vec::new(),
            };
        }
    }
    let mut found = Salvaged {
        kind: SourceKind::NvLog,
        name,
        entries: None,
        seq_max: 0,
        problems: Vec::new(),
    };
    match log::walk_salvage(region.as_ref(), at, number) {
        Ok(walked) => {
            // A log whose links a compaction rewrote (its table lost) is
            // walked past each of them: one problem per node.
            let n = walked.problems.len();
            found.problems.extend(
                walked
                    .problems
                    .iter()
                    .take(LISTED)
                    .map(|e| format!("NVTable log {number} at offset {at}: {e}")),
            );
            if n > LISTED {
                found.problems.push(format!(
                    "NVTable log {number} at offset {at}: {} more problems ({n} in all)",
                    n - LISTED
                ));
            }
            let mut nodes = walked.nodes;
            nodes.sort_by(|a, b| key::compare_internal(&a.ikey, &b.ikey));
            found.seq_max = nodes
                .iter()
                .map(|n| key::trailer(&n.ikey) >> 8)
                .max()
                .unwrap_or(0);
            found.entries = Some(Box::new(NodeIter::new(
                Arc::clone(region),
                Entries::Log { nodes },
            )));
        }
        Err(e) => found
            .problems
            .push(format!("NVTable log {number} at offset {at}: {e}")),
    }
    found
}

/// What a [`NodeIter`] walks, in internal-key order.
enum Entries {
    /// A table's offset array, without the entries in `skip` (ascending).
    Table {
        table: Arc<NvTable>,
        skip: Vec<usize>,
    },
    /// A log's verified nodes, sorted.
    Log { nodes: Vec<WalkedNode> },
}

impl Entries {
    fn len(&self) -> usize {
        match self {
            Entries::Table { table, .. } => table.len(),
            Entries::Log { nodes } => nodes.len(),
        }
    }

    fn skipped(&self, i: usize) -> bool {
        match self {
            Entries::Table { skip, .. } => skip.binary_search(&i).is_ok(),
            Entries::Log { .. } => false,
        }
    }
}

/// The verified entries of a table or a log.
struct NodeIter {
    region: Arc<dyn PmRegion>,
    entries: Entries,
    /// `entries.len()` when not positioned.
    pos: usize,
    key: Vec<u8>,
    value_at: u64,
    vlen: usize,
    err: Option<Error>,
}

impl NodeIter {
    fn new(region: Arc<dyn PmRegion>, entries: Entries) -> NodeIter {
        let pos = entries.len();
        NodeIter {
            region,
            entries,
            pos,
            key: Vec::new(),
            value_at: 0,
            vlen: 0,
            err: None,
        }
    }

    /// Moves from `pos` past skipped entries (forward or back) and loads
    /// the entry there.
    fn settle(&mut self, forward: bool) {
        let n = self.entries.len();
        while self.pos < n && self.entries.skipped(self.pos) {
            if forward {
                self.pos += 1;
            } else if self.pos == 0 {
                self.pos = n;
            } else {
                self.pos -= 1;
            }
        }
        if self.pos >= n || self.err.is_some() {
            self.pos = n;
            return;
        }
        let r = match &self.entries {
            Entries::Table { table, .. } => table.node(self.pos).map(|node| {
                self.key.clear();
                self.key.extend_from_slice(node.key);
                self.key.extend_from_slice(&node.tag.to_le_bytes());
                (node.value_at(), node.vlen)
            }),
            Entries::Log { nodes } => {
                let w = &nodes[self.pos];
                Node::read(self.region.as_ref(), w.at, 0, self.region.len()).map(|node| {
                    self.key.clear();
                    self.key.extend_from_slice(&w.ikey);
                    (node.value_at(), node.vlen)
                })
            }
        };
        match r {
            Ok((at, len)) => {
                self.value_at = at;
                self.vlen = len;
            }
            Err(e) => {
                self.err = Some(e);
                self.pos = n;
            }
        }
    }
}

impl InternalIterator for NodeIter {
    fn valid(&self) -> bool {
        self.pos < self.entries.len()
    }
    fn seek_to_first(&mut self) {
        self.pos = 0;
        self.settle(true);
    }
    fn seek_to_last(&mut self) {
        self.pos = self.entries.len().saturating_sub(1);
        self.settle(false);
    }
    fn seek(&mut self, target: &[u8]) {
        self.pos = match &self.entries {
            Entries::Table { table, .. } => {
                match table.seek_index(key::user_key(target), key::trailer(target)) {
                    Ok(i) => i,
                    Err(e) => {
                        self.err.get_or_insert(e);
                        table.len()
                    }
                }
            }
            Entries::Log { nodes } => {
                nodes.partition_point(|n| key::compare_internal(&n.ikey, target).is_lt())
            }
        };
        self.settle(true);
    }
    fn next(&mut self) {
        self.pos += 1;
        self.settle(true);
    }
    fn prev(&mut self) {
        self.pos = match self.pos.checked_sub(1) {
            Some(p) => p,
            None => self.entries.len(),
        };
        self.settle(false);
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn value(&self) -> &[u8] {
        if !self.valid() {
            return &[];
        }
        self.region.slice(self.value_at, self.vlen).unwrap_or(&[])
    }
    fn status(&self) -> Result<()> {
        match &self.err {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};
    use std::time::Duration;

    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::batch::WriteBatch;
    use crate::design::nvcache::log::{create, Logs, Space};
    use crate::design::nvcache::table::TableBuild;
    use crate::key::Kind;
    use crate::storage::pm::PmTier;
    use crate::storage::sim::SimRegion;
    use crate::wal::LogWriter;

    /// What was written, by seqno: kind, user key, value.
    type Written = HashMap<SeqNo, (Kind, Vec<u8>, Vec<u8>)>;

    /// Log 3, sealed and flushed (table 9, built as the flush builds it),
    /// and log 4, not sealed: the image a crash leaves. Overwrites and
    /// deletes across both. Returns the image, its allocated pages and
    /// what was written.
    fn image() -> (Arc<SimRegion>, Vec<u64>, Written) {
        let sim = Arc::new(SimRegion::new(256 << 10));
        let region: Arc<dyn PmRegion> = sim.clone();
        let tier = Arc::new(PmTier::open(Arc::clone(&region), false).unwrap());
        let space = Arc::new(Space {
            region: Arc::clone(&region),
            tier: Arc::clone(&tier),
            segment_pages: 2,
        });
        let logs = Logs::default();
        let mut written = Written::new();
        let mut seq = 1;
        let mut open = None;
        for number in [3, 4] {
            let (mut w, _) = create(&space, &logs, number, false).unwrap();
            for g in 0..30u64 {
                let mut b = WriteBatch::new();
                let n = 1 + g % 3;
                for j in 0..n {
                    let k = format!("k{:02}", (g * 7 + j + number) % 23).into_bytes();
                    if (g + j) % 5 == 0 {
                        b.delete(&k);
                        written.insert(seq + j, (Kind::Delete, k, Vec::new()));
                    } else {
                        let v = vec![(g + j) as u8; 300 + 37 * j as usize];
                        b.put(&k, &v);
                        written.insert(seq + j, (Kind::Put, k, v));
                    }
                }
                b.set_seqno(seq);
                seq += n;
                w.add_record(b.encoded()).unwrap();
            }
            if number == 4 {
                open = Some(w);
                continue;
            }
            w.seal().unwrap();
            let shared = logs.get(3).unwrap();
            let st = shared.state.lock();
            let mut segs = st.segments.clone();
            segs.sort_unstable();
            let mut nodes: Vec<Node<'_>> = st
                .offsets
                .iter()
                .map(|&at| Node::read(sim.as_ref(), at, 0, sim.len()).unwrap())
                .collect();
            nodes.sort_by(|a, b| a.key.cmp(b.key).then(b.tag.cmp(&a.tag)));
            let mut build = TableBuild::with_capacity(nodes.len());
            for s in &segs {
                build.include(*s);
            }
            for n in &nodes {
                let seg = *segs
                    .iter()
                    .find(|r| r.first * PAGE <= n.at && n.at < (r.first + r.count) * PAGE)
                    .unwrap();
                build.push(n.at, n.size(), seg, n.key, n.tag);
            }
            build.finish(&space, 9, Duration::ZERO).unwrap().unwrap();
        }
        let alloc = tier.allocator();
        let pages = (alloc.data_start_page()..alloc.total_pages())
            .filter(|&p| alloc.is_allocated(p))
            .collect();
        // The crash: log 4's writer never retired (its drop would seal).
        let image = Arc::new(sim.crash());
        drop(open);
        (image, pages, written)
    }

    /// Reads every source whole; checks that each entry is one written,
    /// with its key, kind and value, in internal-key order. Returns the
    /// seqnos read and the problems.
    fn drain(sim: &Arc<SimRegion>, pages: &[u64], written: &Written) -> (HashSet<SeqNo>, usize) {
        let region: Arc<dyn PmRegion> = sim.clone();
        let mut seen = HashSet::new();
        let mut problems = 0;
        for s in salvage(&region, pages) {
            problems += s.problems.len();
            let Some(mut it) = s.entries else {
                continue;
            };
            it.seek_to_first();
            let mut prev: Option<Vec<u8>> = None;
            while it.valid() {
                let k = it.key().to_vec();
                let p = key::parse_internal_key(&k).unwrap();
                let (kind, uk, v) = written
                    .get(&p.seq)
                    .unwrap_or_else(|| panic!("{}: seqno {} never written", s.name, p.seq));
                assert_eq!((p.kind, p.user_key, it.value()), (*kind, &uk[..], &v[..]));
                if let Some(q) = &prev {
                    assert!(key::compare_internal(q, &k).is_lt(), "{}: order", s.name);
                }
                assert!(p.seq <= s.seq_max);
                seen.insert(p.seq);
                prev = Some(k);
                it.next();
            }
        }
        (seen, problems)
    }

    #[test]
    fn salvage_reads_the_table_and_the_log_it_does_not_hold() {
        let (sim, pages, written) = image();
        assert!(pages.len() > 10, "logs of several segments: {pages:?}");
        let region: Arc<dyn PmRegion> = sim.clone();
        let found = salvage(&region, &pages);
        let kinds: Vec<(SourceKind, bool)> = found
            .iter()
            .map(|s| (s.kind, s.entries.is_some()))
            .collect();
        assert_eq!(
            kinds,
            [
                (SourceKind::NvTable, true),
                (SourceKind::NvLog, false),
                (SourceKind::NvLog, true)
            ],
            "table 9; log 3, which it holds; log 4"
        );
        assert!(found[1].name.contains("log 3 ") && found[1].name.contains("NVTable 9"));
        let (seen, problems) = drain(&sim, &pages, &written);
        assert_eq!(problems, 0);
        assert_eq!(seen.len(), written.len(), "every entry, each once");
    }

    /// Random damage (1 to 3 bytes) never panics, never gives an entry
    /// that was not written as it was, and never loses one without naming
    /// a problem. (Run with 60,000 images and other seeds while writing
    /// this: the last rule found the damaged magic of a log's segment 0,
    /// now named.)
    #[test]
    fn salvage_of_damaged_images_returns_only_what_was_written() {
        let (sim, pages, written) = image();
        let mut rng = SmallRng::seed_from_u64(11);
        let mut lost = 0;
        for _ in 0..400 {
            let r = Arc::new(sim.crash());
            for _ in 0..rng.gen_range(1..4) {
                let page = pages[rng.gen_range(0..pages.len())];
                let at = page * PAGE + rng.gen_range(0..PAGE);
                r.corrupt(at, rng.gen_range(1..=255)).unwrap();
            }
            let (seen, problems) = drain(&r, &pages, &written);
            if seen.len() < written.len() {
                assert!(problems > 0, "entries lost without a problem");
                lost += 1;
            }
        }
        assert!(lost > 0);
    }
}
