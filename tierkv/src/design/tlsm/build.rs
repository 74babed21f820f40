//! Writing persistent skip lists: the flush of a memtable (Algorithm 1, in
//! the sound and the faithful persist order, and the PS variants' inline
//! nodes) and the outputs of a compaction (Algorithm 2), written node by
//! node behind a persisted linked count so that a crash leaves a durable
//! prefix a resumed compaction continues from.
//!
//! # Persist order of a flush
//!
//! | variant / order | writes and persists, in order |
//! |---|---|
//! | full, sound (the spec's fix) | each buffer (1 persist each); node pages, sentinel excluded (1 per node run); sentinel (1); header + directory (1) |
//! | full, faithful (Algorithm 1 as printed) | per node: the node (1), then each predecessor link (1 per level); the null node and its link (2); then each buffer (1 each); header + directory (1) |
//!
//! A flush's buffer is one run when PM has a free run that long, else
//! several, each a buffer of its own holding the entries that fit it whole
//! (`place_buffers`; the module doc of `tlsm`, "PM room").
//! | PS, PS+BAC (entries inline) | per node: the node with its entry (1), then each predecessor link (1 per level); the null node and its link (2); header + directory (1) |
//!
//! In every order the MANIFEST edit that adds the list is the commit: a
//! crash before it leaves pages no table lists (reclaimed at open) and the
//! memtable in the WAL (replayed). The faithful order can leave a
//! null-terminated list whose buffer never became durable — harmless here,
//! fatal to a recovery that trusted the null node (the paper's Alg. 3).
//!
//! # Compaction outputs (the sound protocol)
//!
//! 1. The header run (job, ordinal, input ids; link words: k = 1 and slot
//!    0 = node run 0, which the head starts; linked count and directory
//!    offset 0) is written and persisted, then named in the job's slot run
//!    (offset word, then count word, each persisted).
//! 2. Nodes are appended in key order at the end of the node area; a node
//!    that would not leave room for a sentinel in its run goes to a new run
//!    (a run marker ends the old one; the new run is named in a header slot
//!    and persisted before any node in it is counted).
//! 3. Every `persist_every` nodes: the node bytes written since the last
//!    persist are persisted, then the linked count is stored and
//!    persisted. Only the first `linked count` nodes are ever trusted; the
//!    links between them are rebuilt by a resume, and links of earlier nodes
//!    updated later are made durable at close.
//! 4. Close: all node bytes persisted (links included), the null sentinel
//!    with the crc of the node bytes written and persisted, the directory
//!    written and persisted, and its offset stored and persisted last.
//!
//! # Concurrency
//!
//! A builder is used by one job thread; the pages it writes belong to no
//! published structure until the job's edit is applied.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::format::{
    self, align8, height_of, node_size, pack_run, put_entry, put_inline_entry, put_node, DataRef,
    Directory, Header, Layout, LinkWords, Origin, BUFFER_HEADER_BYTES, HEAD_MARK, MAX_HEIGHT,
    NODE_FIXED, NODE_RUN_SLOTS,
};
use super::list::{read_header, SkipList};
use super::refs::ListRefs;
use crate::design::Written;
use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::key::{self, Kind, SeqNo};
use crate::options::TlsmPersistOrder;
use crate::sst::bloom::BloomBuilder;
use crate::stats::Tier;
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};
use crate::storage::PmRegion;
use crate::version::edit::{TableFormat, TableMeta};

const PAGE: u64 = PAGE_SIZE_BYTES;

/// Where a builder's PM pages come from.
pub trait Pages {
    /// A run of `min..=want` pages (`0 < min <= want`).
    fn alloc(&self, want: u64, min: u64) -> Result<PageRun>;
    /// Gives back a run never published.
    fn free(&self, run: PageRun) -> Result<()>;
}

/// A list written, persisted and ready for the MANIFEST.
#[derive(Debug)]
pub struct BuiltList {
    /// Its table metadata.
    pub meta: TableMeta,
    /// What the reference index keeps of it.
    pub refs: ListRefs,
    /// Bytes stored into PM.
    pub written: Written,
    /// Its reader, from what the builder recorded
    /// ([`SkipList::from_builder`]; `None` for an output a resume found
    /// closed).
    pub reader: Option<SkipList>,
}

/// What a flush needs besides the entries.
pub struct FlushParams<'a> {
    /// The region.
    pub region: &'a Arc<dyn PmRegion>,
    /// Pages.
    pub pages: &'a dyn Pages,
    /// The new list's id.
    pub id: u64,
    /// Node layout (variant).
    pub layout: Layout,
    /// Persist order (full variant only).
    pub order: TlsmPersistOrder,
    /// Bits per user key of the reader's bloom filter (0: none).
    pub filter_bits: usize,
}

/// One entry of a flush, staged in DRAM.
struct Staged {
    /// Offset of the entry in the DRAM buffer (full) or inline image (PS).
    at: usize,
    /// Bytes the entry takes in the staging buffer (inline: padded).
    len: usize,
    /// Bytes of the entry as a reference counts it (inline: crc
    /// included, padding not).
    entry_len: usize,
    height: usize,
}

/// Lays nodes out over node runs, keeping room for a sentinel or run
/// marker at the end of each run (the list's layout rule).
struct Placer<'a> {
    pages: &'a dyn Pages,
    runs: Vec<PageRun>,
    /// Bytes used in each run (markers included, sentinel excluded).
    used: Vec<u64>,
    /// Bytes still expected (sizing of the next run).
    expect: u64,
}

impl Placer<'_> {
    fn start(&self) -> u64 {
        self.runs.last().map_or(0, |r| r.first * PAGE)
    }

    fn end(&self) -> u64 {
        self.runs.last().map_or(0, |r| (r.first + r.count) * PAGE)
    }

    /// The offset of the next node of `size` bytes; `Some(marker)` when the
    /// node opens a new run and a run marker must end the previous one.
    fn place(&mut self, size: u64) -> Result<(u64, Option<u64>)> {
        let fixed = NODE_FIXED as u64;
        let (start, end) = (self.start(), self.end());
        let mut marker = None;
        if let Some(u) = self.used.last_mut() {
            let at = start + *u;
            if at + size + fixed <= end {
                *u += size;
                self.expect = self.expect.saturating_sub(size);
                return Ok((at, None));
            }
            marker = Some(at);
            *u += fixed;
        }
        // A header names at most NODE_RUN_SLOTS node runs: in a
        // fragmented PM each run takes at least its share of what is left.
        let left = (NODE_RUN_SLOTS - self.runs.len().min(NODE_RUN_SLOTS - 1)) as u64;
        let want = (self.expect + fixed).div_ceil(PAGE);
        let min = (size + fixed)
            .div_ceil(PAGE)
            .max(want.div_ceil(left))
            .min(want.max((size + fixed).div_ceil(PAGE)));
        let want = want.max(min);
        let run = self.pages.alloc(want, min)?;
        self.runs.push(run);
        self.used.push(size);
        self.expect = self.expect.saturating_sub(size);
        Ok((run.first * PAGE, marker))
    }

    fn release(&mut self) {
        for r in self.runs.drain(..) {
            let _ = self.pages.free(r);
        }
    }
}

/// One buffer of a flush: a run holding the staged bytes `from..to`.
struct BufferPart {
    run: PageRun,
    from: usize,
    to: usize,
}

/// Takes the runs of a flush's buffers: each as long as what is left (or
/// the longest PM has, down to the pages of the next entry alone), holding
/// the entries that fit it whole after the buffer header. A fragmented PM
/// gives more, smaller buffers instead of failing the flush.
fn place_buffers(
    pages: &dyn Pages,
    buf: &[u8],
    staged: &[Staged],
    taken: &mut Vec<PageRun>,
) -> Result<Vec<BufferPart>> {
    let hdr = BUFFER_HEADER_BYTES as u64;
    let mut parts = Vec::new();
    let mut i = 0;
    while i < staged.len() {
        let from = staged[i].at;
        let want = (hdr + (buf.len() - from) as u64).div_ceil(PAGE);
        let min = (hdr + staged[i].len as u64).div_ceil(PAGE).min(want);
        let run = pages.alloc(want, min)?;
        taken.push(run);
        let cap = (run.count * PAGE - hdr) as usize;
        let mut j = i + 1;
        while j < staged.len() && staged[j].at + staged[j].len - from <= cap {
            j += 1;
        }
        let to = staged[j - 1].at + staged[j - 1].len;
        debug_assert!(to - from <= cap);
        parts.push(BufferPart { run, from, to });
        i = j;
    }
    Ok(parts)
}

/// Flushes the entries of `it` (internal-key order) into a new list.
/// Nothing is published; on error every page taken here is given back.
pub fn flush_list(p: &FlushParams<'_>, it: &mut dyn InternalIterator) -> Result<BuiltList> {
    let mut taken: Vec<PageRun> = Vec::new();
    let r = flush_inner(p, it, &mut taken);
    if r.is_err() {
        for run in taken {
            let _ = p.pages.free(run);
        }
    }
    r
}

/// Statistics of a list's entries.
#[derive(Debug, Clone, Default)]
struct EntryStats {
    n: u64,
    deletions: u64,
    seq_min: SeqNo,
    seq_max: SeqNo,
    smallest: Vec<u8>,
    largest: Vec<u8>,
    entry_bytes: u64,
}

impl EntryStats {
    fn add(&mut self, ikey: &[u8], len: u64) -> Result<()> {
        let p = key::parse_internal_key(ikey).ok_or_else(|| {
            Error::corruption("skip list input", self.n, "malformed internal key")
        })?;
        if self.n == 0 {
            self.smallest = ikey.to_vec();
            self.seq_min = p.seq;
            self.seq_max = p.seq;
        }
        self.seq_min = self.seq_min.min(p.seq);
        self.seq_max = self.seq_max.max(p.seq);
        if p.kind == Kind::Delete {
            self.deletions += 1;
        }
        self.largest.clear();
        self.largest.extend_from_slice(ikey);
        self.n += 1;
        self.entry_bytes += len;
        Ok(())
    }

    fn meta(&self, id: u64, pm_pages: Vec<PageRun>) -> TableMeta {
        TableMeta {
            id,
            tier: Tier::Pm,
            format: TableFormat::PmSkipList,
            size_bytes: self.entry_bytes,
            smallest: self.smallest.clone(),
            largest: self.largest.clone(),
            seq_min: self.seq_min,
            seq_max: self.seq_max,
            entries: self.n,
            deletions: self.deletions,
            pm_pages,
        }
    }
}

fn flush_inner(
    p: &FlushParams<'_>,
    it: &mut dyn InternalIterator,
    taken: &mut Vec<PageRun>,
) -> Result<BuiltList> {
    let region = p.region;
    let inline = p.layout.inline();
    // Stage the entries: one DRAM buffer (full) or the inline entries (PS).
    let mut buf: Vec<u8> = Vec::new();
    let mut staged: Vec<Staged> = Vec::new();
    let mut stats = EntryStats::default();
    let mut filter = BloomBuilder::new(p.filter_bits);
    it.seek_to_first();
    while it.valid() {
        let (k, v) = (it.key(), it.value());
        filter.add_key(key::user_key(k));
        let at = buf.len();
        if inline {
            put_inline_entry(&mut buf, k, v);
        } else {
            put_entry(&mut buf, k, v);
        }
        let len = if inline {
            format::inline_len(k.len(), v.len())
        } else {
            buf.len() - at
        };
        stats.add(k, len as u64)?;
        staged.push(Staged {
            at,
            len: buf.len() - at,
            entry_len: len,
            height: height_of(k),
        });
        it.next();
    }
    it.status()?;
    if stats.n == 0 {
        return Err(Error::InvalidArgument(format!(
            "{}: a skip list needs at least one entry",
            region.name()
        )));
    }
    let mut written = Written::default();

    // The buffers (full variant): as few runs as PM has free, each a
    // buffer of its own holding the entries that fit it whole, so a flush
    // never needs one run as large as the memtable.
    let parts = if inline {
        Vec::new()
    } else {
        place_buffers(p.pages, &buf, &staged, taken)?
    };
    for part in &parts {
        written.pm_copied += BUFFER_HEADER_BYTES as u64 + (part.to - part.from) as u64;
    }
    let write_buffer = |region: &Arc<dyn PmRegion>| -> Result<()> {
        for part in &parts {
            let off = part.run.first * PAGE;
            let bytes = &buf[part.from..part.to];
            let h = format::encode_buffer_header(&format::BufferHeader {
                id: p.id,
                entry_bytes: bytes.len() as u64,
                entries_crc: crate::coding::crc32c(bytes),
            });
            region.write(off, &h)?;
            region.write(off + BUFFER_HEADER_BYTES as u64, bytes)?;
            region.persist(off, BUFFER_HEADER_BYTES + bytes.len())?;
        }
        Ok(())
    };
    if !parts.is_empty() && p.order == TlsmPersistOrder::Sound {
        write_buffer(region)?;
    }

    // Lay the nodes out.
    let head_size = node_size(MAX_HEIGHT, 0) as u64;
    let sizes: Vec<u64> = staged
        .iter()
        .map(|s| node_size(s.height, if inline { s.len } else { 0 }) as u64)
        .collect();
    let mut placer = Placer {
        pages: p.pages,
        runs: Vec::new(),
        used: Vec::new(),
        expect: head_size + sizes.iter().sum::<u64>(),
    };
    let placed = (|| -> Result<(u64, Vec<u64>, Vec<u64>)> {
        let (head, _) = placer.place(head_size)?;
        let mut offs = Vec::with_capacity(sizes.len());
        let mut markers = Vec::new();
        for &s in &sizes {
            let (at, marker) = placer.place(s)?;
            offs.push(at);
            markers.extend(marker);
        }
        Ok((head, offs, markers))
    })();
    let (head, offs, markers) = match placed {
        Ok(x) => x,
        Err(e) => {
            placer.release();
            return Err(e);
        }
    };
    let node_runs = placer.runs.clone();
    taken.extend(node_runs.iter().copied());
    let sentinel = {
        let last = node_runs.len() - 1;
        node_runs[last].first * PAGE + placer.used[last]
    };
    // The region offset of each buffered entry: its part's run, past the
    // buffer header, at its place in the part.
    let mut buffered: Vec<u64> = Vec::with_capacity(if inline { 0 } else { staged.len() });
    for part in &parts {
        let base = part.run.first * PAGE + BUFFER_HEADER_BYTES as u64;
        for s in &staged[buffered.len()..] {
            if s.at >= part.to {
                break;
            }
            buffered.push(base + (s.at - part.from) as u64);
        }
    }
    debug_assert!(inline || buffered.len() == staged.len());
    let entry_off = |i: usize| -> u64 {
        if inline {
            offs[i] + (NODE_FIXED + 8 * staged[i].height) as u64
        } else {
            buffered[i]
        }
    };

    // Node images per run, links computed in the sequential pass.
    let mut images: Vec<Vec<u8>> = node_runs
        .iter()
        .zip(&placer.used)
        .map(|(_, &u)| Vec::with_capacity(u as usize + NODE_FIXED))
        .collect();
    let run_of = |off: u64| -> usize {
        node_runs
            .iter()
            .position(|r| off >= r.first * PAGE && off < (r.first + r.count) * PAGE)
            .unwrap_or(0)
    };
    let mut order: Vec<(u64, usize)> = Vec::with_capacity(offs.len() + markers.len() + 1);
    order.push((head, usize::MAX));
    for (i, &o) in offs.iter().enumerate() {
        order.push((o, i));
    }
    for &m in &markers {
        order.push((m, usize::MAX - 1));
    }
    order.sort_by_key(|&(o, _)| (run_of(o), o));
    let mut pos_in: Vec<usize> = vec![0; offs.len()];
    for &(o, i) in &order {
        let img = &mut images[run_of(o)];
        match i {
            usize::MAX => put_node(img, HEAD_MARK, MAX_HEIGHT),
            x if x == usize::MAX - 1 => img.extend_from_slice(&format::run_marker()),
            i => {
                pos_in[i] = img.len();
                put_node(img, entry_off(i), staged[i].height);
                if inline {
                    img.extend_from_slice(&buf[staged[i].at..staged[i].at + staged[i].len]);
                }
            }
        }
    }
    let head_pos = 0usize;
    let set = |images: &mut Vec<Vec<u8>>, node: u64, node_pos: usize, level: usize, to: u64| {
        let r = run_of(node);
        let at = node_pos + NODE_FIXED + 8 * level;
        images[r][at..at + 8].copy_from_slice(&to.to_le_bytes());
    };
    let faithful = !inline && p.order == TlsmPersistOrder::Faithful;
    let one_by_one = inline || faithful;
    if !one_by_one {
        let mut last: [(u64, usize); MAX_HEIGHT] = [(head, head_pos); MAX_HEIGHT];
        for (i, &o) in offs.iter().enumerate() {
            for (j, l) in last.iter_mut().enumerate().take(staged[i].height) {
                set(&mut images, l.0, l.1, j, o);
                *l = (o, pos_in[i]);
            }
        }
        set(&mut images, last[0].0, last[0].1, 0, sentinel);
        let mut crc = 0u32;
        for img in &images {
            crc = crate::coding::crc32c_append(crc, img);
        }
        for (r, img) in node_runs.iter().zip(&images) {
            region.write(r.first * PAGE, img)?;
            region.persist(r.first * PAGE, img.len())?;
            written.pm_copied += img.len() as u64;
        }
        region.write(sentinel, &format::sentinel(crc))?;
        region.persist(sentinel, NODE_FIXED)?;
        written.pm_copied += NODE_FIXED as u64;
    } else {
        // Algorithm 1's loop: write and persist each node, then link it
        // into its predecessors, persisting each link.
        let mut crc_images = images.clone();
        let mut last: [(u64, usize); MAX_HEIGHT] = [(head, head_pos); MAX_HEIGHT];
        // The head (and any run markers) first.
        let h = &images[0][..head_size as usize];
        region.write(head, h)?;
        region.persist(head, h.len())?;
        written.pm_copied += h.len() as u64;
        for &m in &markers {
            region.write(m, &format::run_marker())?;
            region.persist(m, NODE_FIXED)?;
            written.pm_copied += NODE_FIXED as u64;
        }
        for (i, &o) in offs.iter().enumerate() {
            let r = run_of(o);
            let size = sizes[i] as usize;
            let bytes = &images[r][pos_in[i]..pos_in[i] + size];
            region.write(o, bytes)?;
            region.persist(o, size)?;
            written.pm_copied += size as u64;
            for (j, l) in last.iter_mut().enumerate().take(staged[i].height) {
                let at = l.0 + (NODE_FIXED + 8 * j) as u64;
                region.write(at, &o.to_le_bytes())?;
                region.persist(at, 8)?;
                written.pm_copied += 8;
                set(&mut crc_images, l.0, l.1, j, o);
                *l = (o, pos_in[i]);
            }
        }
        set(&mut crc_images, last[0].0, last[0].1, 0, sentinel);
        let mut crc = 0u32;
        for img in &crc_images {
            crc = crate::coding::crc32c_append(crc, img);
        }
        region.write(sentinel, &format::sentinel(crc))?;
        region.persist(sentinel, NODE_FIXED)?;
        let at = last[0].0 + NODE_FIXED as u64;
        region.write(at, &sentinel.to_le_bytes())?;
        region.persist(at, 8)?;
        written.pm_copied += (NODE_FIXED + 8) as u64;
        if faithful {
            write_buffer(region)?;
        }
    }

    // The header run, with the directory inside it when it fits.
    let header = Header {
        id: p.id,
        job: 0,
        level: 0,
        layout: p.layout,
        origin: Origin::Flush,
        ordinal: 0,
        inputs: Vec::new(),
    };
    let data: Vec<DataRef> = if !inline {
        let mut d: Vec<DataRef> = parts
            .iter()
            .map(|part| DataRef {
                run: part.run,
                bytes: (part.to - part.from) as u64,
            })
            .collect();
        d.sort_by_key(|r| r.run.first);
        d
    } else {
        let mut per: BTreeMap<u64, DataRef> = BTreeMap::new();
        for (i, &o) in offs.iter().enumerate() {
            let r = node_runs[run_of(o)];
            per.entry(r.first)
                .or_insert(DataRef { run: r, bytes: 0 })
                .bytes += staged[i].entry_len as u64;
        }
        per.into_values().collect()
    };
    let dir = Directory {
        entries: stats.n,
        entry_bytes: stats.entry_bytes,
        node_runs: node_runs.clone(),
        data: data.clone(),
    };
    let d = dir.encode();
    let hbytes = header.bytes() + d.len();
    let hpages = (hbytes as u64).div_ceil(PAGE);
    let hrun = p.pages.alloc(hpages, hpages)?;
    taken.push(hrun);
    let hoff = hrun.first * PAGE;
    let mut img = header.encode();
    let w = LinkWords::at(header.link_offset());
    put_word(&mut img, w.linked, stats.n);
    put_word(&mut img, w.dir, hoff + header.bytes() as u64);
    put_word(&mut img, w.runs, node_runs.len() as u64);
    for (i, r) in node_runs.iter().enumerate() {
        if !format::packable(*r) || i >= format::NODE_RUN_SLOTS {
            return Err(Error::InvalidArgument(format!(
                "{}: node run {r:?} cannot be named in a skip list header",
                region.name()
            )));
        }
        put_word(&mut img, w.slots + 8 * i, pack_run(*r));
    }
    img.extend_from_slice(&d);
    region.write(hoff, &img)?;
    region.persist(hoff, img.len())?;
    written.pm_copied += img.len() as u64;

    // The list's own runs: the header run, then every node run that is
    // not a data run — all of them for pointer nodes; with inline entries,
    // a run that holds none (the head alone, when the first node did not
    // fit after it). Every run the list uses is listed here or counted as
    // a data run, so a release frees it and a reconcile keeps it.
    let mut pm_pages = vec![hrun];
    pm_pages.extend(
        node_runs
            .iter()
            .filter(|r| !data.iter().any(|d| d.run == **r))
            .copied(),
    );
    let own_bytes = pm_pages.iter().map(|r| r.count * PAGE).sum();
    let reader =
        SkipList::from_builder(Arc::clone(region), p.id, header, dir, sentinel, &mut filter);
    Ok(BuiltList {
        meta: stats.meta(p.id, pm_pages),
        refs: ListRefs { own_bytes, data },
        written,
        reader: Some(reader),
    })
}

fn put_word(img: &mut [u8], at: usize, v: u64) {
    img[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

// ---------------------------------------------------------------- outputs

/// One entry handed to an output: its internal key and value, and where it
/// already lives in PM (link mode).
pub struct Item<'a> {
    /// Internal key.
    pub ikey: &'a [u8],
    /// Value.
    pub value: &'a [u8],
    /// Region offset of the entry (link mode).
    pub entry_off: u64,
    /// Bytes of the entry as stored (link mode: as the input stores it).
    pub entry_len: u64,
    /// The data run holding it (link mode).
    pub data_run: Option<PageRun>,
}

/// How outputs get their entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Nodes point at the existing entries (byte-addressable compaction).
    Link,
    /// Nodes carry copies of the entries inline (PS compaction).
    Copy,
}

/// The slot run of a job: where its outputs are named.
#[derive(Debug, Clone, Copy)]
pub struct SlotRef {
    /// The run.
    pub run: PageRun,
    /// Region offset of the output count word.
    pub count_word: u64,
    /// Region offset of the job buffer word.
    pub buffer_word: u64,
    /// Region offset of the first output offset word.
    pub outputs: u64,
    /// Outputs it can name.
    pub capacity: u32,
}

/// What every output of a job shares.
pub struct OutputParams<'a> {
    /// The region.
    pub region: &'a Arc<dyn PmRegion>,
    /// Pages.
    pub pages: &'a dyn Pages,
    /// The slot.
    pub slot: SlotRef,
    /// Job id.
    pub job: u64,
    /// Output level.
    pub level: u32,
    /// Layout written into headers.
    pub layout: Layout,
    /// Origin written into headers.
    pub origin: Origin,
    /// Input ids written into headers.
    pub inputs: Vec<u64>,
    /// Nodes per persist of the linked count.
    pub persist_every: usize,
    /// Link or copy.
    pub mode: Mode,
    /// Expected node bytes of one output (first node run size).
    pub node_bytes_hint: u64,
    /// Fresh table ids.
    pub next_id: &'a (dyn Fn() -> u64 + Sync),
    /// Bits per user key of each output reader's bloom filter (0: none).
    pub filter_bits: usize,
}

/// A node found in an output by a resume.
#[derive(Debug, Clone, Copy)]
struct Replayed {
    pos: u64,
    entry_off: u64,
    height: usize,
    size: u64,
}

/// One output list being written (or resumed).
struct Output {
    id: u64,
    header: Header,
    hrun: PageRun,
    hoff: u64,
    w: LinkWords,
    runs: Vec<PageRun>,
    used: Vec<u64>,
    last: [u64; MAX_HEIGHT],
    head: u64,
    linked: u64,
    persisted: u64,
    dirty: Option<(u64, u64)>,
    stats: EntryStats,
    data: BTreeMap<u64, DataRef>,
    closed: bool,
    replay: std::collections::VecDeque<Replayed>,
    /// Directory run when the directory did not fit in the header run.
    dir_run: Option<PageRun>,
    /// The user keys linked so far, for the reader's filter.
    filter: BloomBuilder,
}

/// Outputs of one job: named in the slot, linked node by node, closed at
/// cuts; a resume replays what the slot names before linking more.
pub struct Outputs<'a> {
    p: OutputParams<'a>,
    done: Vec<BuiltList>,
    cur: Option<Output>,
    /// Outputs named in the slot not yet reached by the replay.
    pending: std::collections::VecDeque<Output>,
    named: u32,
    written: Written,
}

/// Why a resume cannot continue: the caller drops the job instead.
#[derive(Debug)]
pub struct Unresumable(pub String);

impl<'a> Outputs<'a> {
    /// Outputs for a new job (nothing named in the slot yet).
    pub fn new(p: OutputParams<'a>) -> Outputs<'a> {
        Outputs {
            p,
            done: Vec::new(),
            cur: None,
            pending: Default::default(),
            named: 0,
            written: Written::default(),
        }
    }

    /// Outputs of an interrupted job: the outputs its slot names, each with
    /// its linked prefix, to be replayed (matched against the merge) before
    /// anything new is linked.
    pub fn resume(
        p: OutputParams<'a>,
        headers: &[u64],
    ) -> std::result::Result<Outputs<'a>, Unresumable> {
        let mut o = Outputs::new(p);
        for (i, &hoff) in headers.iter().enumerate() {
            let out = load_output(
                o.p.region.as_ref(),
                o.p.job,
                o.p.level,
                o.p.mode,
                i as u32,
                hoff,
                o.p.filter_bits,
            )
            .and_then(|out| {
                if !out.closed {
                    // The head again (it may never have become durable:
                    // it is persisted with the first nodes), with no
                    // links: they are rebuilt as the prefix is replayed.
                    let mut h = Vec::with_capacity(node_size(MAX_HEIGHT, 0));
                    put_node(&mut h, HEAD_MARK, MAX_HEIGHT);
                    o.p.region.write(out.head, &h)?;
                }
                Ok(out)
            })
            .map_err(|e| Unresumable(e.to_string()))?;
            o.pending.push_back(out);
        }
        o.named = headers.len() as u32;
        Ok(o)
    }

    /// Ids of the outputs a resume found named in the slot (fresh table
    /// ids must not collide with them).
    pub fn named_ids(&self) -> Vec<u64> {
        self.pending.iter().map(|o| o.id).collect()
    }

    /// Bytes of the open output's entries (`None`: no output open).
    pub fn open_bytes(&self) -> Option<u64> {
        self.cur.as_ref().map(|c| c.stats.entry_bytes)
    }

    /// True while a resume still has linked nodes to match.
    pub fn replaying(&self) -> bool {
        self.cur.as_ref().is_some_and(|c| !c.replay.is_empty()) || !self.pending.is_empty()
    }

    /// Closes the open output (a cut falls before the next user key).
    pub fn cut(&mut self) -> std::result::Result<(), Unresumable> {
        let Some(c) = self.cur.take() else {
            return Ok(());
        };
        if !c.replay.is_empty() {
            return Err(Unresumable(format!(
                "output {} was cut after {} of its linked nodes",
                c.header.ordinal, c.linked
            )));
        }
        self.finish(c).map_err(|e| Unresumable(e.to_string()))
    }

    fn finish(&mut self, mut c: Output) -> Result<()> {
        if c.stats.n == 0 {
            // Named but empty (a crash right after it was named): nothing
            // to publish; its pages go back at the next open's reconcile.
            return Ok(());
        }
        let built = if c.closed {
            self.reopen_closed(c)?
        } else {
            self.close(&mut c)?
        };
        self.done.push(built);
        Ok(())
    }

    /// Adds one entry (in merge order, after the dropping rules).
    pub fn add(&mut self, item: &Item<'_>) -> std::result::Result<(), Unresumable> {
        if self.cur.is_none() {
            self.cur = match self.pending.pop_front() {
                Some(o) => Some(o),
                None => Some(self.open_new().map_err(|e| Unresumable(e.to_string()))?),
            };
        }
        let region = self.p.region;
        let p_mode = self.p.mode;
        let Some(c) = self.cur.as_mut() else {
            return Err(Unresumable("no output".into()));
        };
        if let Some(r) = c.replay.pop_front() {
            // Match the linked node against the merge.
            let ok = match p_mode {
                Mode::Link => r.entry_off == item.entry_off,
                Mode::Copy => {
                    let mut want = Vec::new();
                    put_inline_entry(&mut want, item.ikey, item.value);
                    let len = format::inline_len(item.ikey.len(), item.value.len());
                    region
                        .slice(r.entry_off, len)
                        .map(|b| b == &want[..len])
                        .unwrap_or(false)
                }
            };
            if !ok || r.height != height_of(item.ikey) {
                return Err(Unresumable(format!(
                    "output {} node {} at {} does not match the merge",
                    c.header.ordinal, c.linked, r.pos
                )));
            }
            let write = !c.closed;
            Self::account(c, p_mode, item, r.pos, r.size)
                .map_err(|e| Unresumable(e.to_string()))?;
            if write {
                let zeros = vec![0u8; 8 * r.height];
                region
                    .write(r.pos + NODE_FIXED as u64, &zeros)
                    .and_then(|()| Self::link(region, c, r.pos, r.height))
                    .map_err(|e| Unresumable(e.to_string()))?;
            }
            c.linked += 1;
            if c.replay.is_empty() && !c.closed {
                // Live from here: what follows the prefix is scratch.
                c.persisted = c.linked;
            }
            return Ok(());
        }
        if c.closed {
            return Err(Unresumable(format!(
                "closed output {} would take more than its {} nodes",
                c.header.ordinal, c.linked
            )));
        }
        self.append(item).map_err(|e| Unresumable(e.to_string()))
    }

    /// Updates an output's statistics and data runs for a node at `pos`.
    fn account(c: &mut Output, mode: Mode, item: &Item<'_>, pos: u64, _size: u64) -> Result<()> {
        c.filter.add_key(key::user_key(item.ikey));
        match mode {
            Mode::Link => {
                c.stats.add(item.ikey, item.entry_len)?;
                let run = item.data_run.ok_or_else(|| {
                    Error::InvalidArgument("linked entry without its data run".into())
                })?;
                c.data
                    .entry(run.first)
                    .or_insert(DataRef { run, bytes: 0 })
                    .bytes += item.entry_len;
            }
            Mode::Copy => {
                let len = format::inline_len(item.ikey.len(), item.value.len()) as u64;
                c.stats.add(item.ikey, len)?;
                let run = c
                    .runs
                    .iter()
                    .find(|r| pos >= r.first * PAGE && pos < (r.first + r.count) * PAGE)
                    .copied()
                    .ok_or_else(|| Error::InvalidArgument("node outside its runs".into()))?;
                c.data
                    .entry(run.first)
                    .or_insert(DataRef { run, bytes: 0 })
                    .bytes += len;
            }
        }
        Ok(())
    }

    /// Links the node at `pos` of `height` after the last node of each of
    /// its levels.
    fn link(region: &Arc<dyn PmRegion>, c: &mut Output, pos: u64, height: usize) -> Result<()> {
        for j in 0..height {
            region.write(c.last[j] + (NODE_FIXED + 8 * j) as u64, &pos.to_le_bytes())?;
            c.last[j] = pos;
        }
        Ok(())
    }

    /// Names a new output in the slot and writes its head.
    fn open_new(&mut self) -> Result<Output> {
        let region = self.p.region;
        let ordinal = self.named;
        if ordinal >= self.p.slot.capacity {
            return Err(Error::InvalidArgument(format!(
                "{}: compaction job {} needs more than {} outputs",
                region.name(),
                self.p.job,
                self.p.slot.capacity
            )));
        }
        let header = Header {
            id: (self.p.next_id)(),
            job: self.p.job,
            level: self.p.level,
            layout: self.p.layout,
            origin: self.p.origin,
            ordinal,
            inputs: self.p.inputs.clone(),
        };
        let hpages = (header.bytes() as u64).div_ceil(PAGE);
        let hrun = self.p.pages.alloc(hpages, hpages)?;
        let head_size = node_size(MAX_HEIGHT, 0) as u64;
        let want = (self.p.node_bytes_hint + head_size + NODE_FIXED as u64)
            .div_ceil(PAGE)
            .max(1);
        let run0 = match self.p.pages.alloc(
            want,
            (head_size + 2 * NODE_FIXED as u64 + 8 * MAX_HEIGHT as u64).div_ceil(PAGE),
        ) {
            Ok(r) => r,
            Err(e) => {
                let _ = self.p.pages.free(hrun);
                return Err(e);
            }
        };
        let hoff = hrun.first * PAGE;
        let w = LinkWords::at(header.link_offset());
        let mut img = header.encode();
        put_word(&mut img, w.runs, 1);
        put_word(&mut img, w.slots, pack_run(run0));
        region.write(hoff, &img)?;
        region.persist(hoff, img.len())?;
        // Named in the slot: the offset word, then the count.
        let word = self.p.slot.outputs + 8 * u64::from(ordinal);
        region.store_u64(word, hoff)?;
        region.persist(word, 8)?;
        region.store_u64(self.p.slot.count_word, u64::from(ordinal) + 1)?;
        region.persist(self.p.slot.count_word, 8)?;
        self.named += 1;
        let head = run0.first * PAGE;
        let mut h = Vec::with_capacity(head_size as usize);
        put_node(&mut h, HEAD_MARK, MAX_HEIGHT);
        region.write(head, &h)?;
        self.written_add(img.len() as u64 + 16 + head_size);
        Ok(Output {
            id: header.id,
            header,
            hrun,
            hoff,
            w,
            runs: vec![run0],
            used: vec![head_size],
            last: [head; MAX_HEIGHT],
            head,
            linked: 0,
            persisted: 0,
            dirty: Some((head, head + head_size)),
            stats: EntryStats::default(),
            data: BTreeMap::new(),
            closed: false,
            replay: Default::default(),
            dir_run: None,
            filter: BloomBuilder::new(self.p.filter_bits),
        })
    }

    fn written_add(&mut self, n: u64) {
        match self.p.mode {
            Mode::Link => self.written.pm_relinked += n,
            Mode::Copy => self.written.pm_copied += n,
        }
    }

    /// Appends a new node for `item` to the open output.
    fn append(&mut self, item: &Item<'_>) -> Result<()> {
        let region = self.p.region;
        let mode = self.p.mode;
        let every = self.p.persist_every as u64;
        let pages = self.p.pages;
        let height = height_of(item.ikey);
        let mut node = Vec::with_capacity(NODE_FIXED + 8 * height + 32);
        let mut written = 0u64;
        let Some(c) = self.cur.as_mut() else {
            return Err(Error::InvalidArgument("no open output".into()));
        };
        let size = match mode {
            Mode::Link => node_size(height, 0),
            Mode::Copy => node_size(
                height,
                format::inline_len(item.ikey.len(), item.value.len()),
            ),
        } as u64;
        // Place it (rule 2 of the module doc).
        let ri = c.runs.len() - 1;
        let mut pos = c.runs[ri].first * PAGE + c.used[ri];
        let end = (c.runs[ri].first + c.runs[ri].count) * PAGE;
        if pos + size + NODE_FIXED as u64 > end {
            region.write(pos, &format::run_marker())?;
            c.used[ri] += NODE_FIXED as u64;
            Self::mark_dirty(c, pos, pos + NODE_FIXED as u64);
            if c.runs.len() >= format::NODE_RUN_SLOTS {
                return Err(Error::InvalidArgument(format!(
                    "{}: output {} needs more than {} node runs",
                    region.name(),
                    c.id,
                    format::NODE_RUN_SLOTS
                )));
            }
            let min = (size + NODE_FIXED as u64).div_ceil(PAGE);
            let prev = c.runs[ri].count;
            let run = pages.alloc((prev * 2).max(min), min)?;
            let slot = c.hoff + (c.w.slots + 8 * c.runs.len()) as u64;
            region.store_u64(slot, pack_run(run))?;
            region.persist(slot, 8)?;
            let count = c.hoff + c.w.runs as u64;
            region.store_u64(count, c.runs.len() as u64 + 1)?;
            region.persist(count, 8)?;
            // The marker must be durable before a node in the new run counts.
            Self::persist_dirty(region, c)?;
            c.runs.push(run);
            c.used.push(0);
            pos = run.first * PAGE;
            written += NODE_FIXED as u64 + 16;
        }
        let entry_off = match mode {
            Mode::Link => item.entry_off,
            Mode::Copy => pos + (NODE_FIXED + 8 * height) as u64,
        };
        put_node(&mut node, entry_off, height);
        if mode == Mode::Copy {
            put_inline_entry(&mut node, item.ikey, item.value);
        }
        debug_assert_eq!(node.len() as u64, size);
        region.write(pos, &node)?;
        let ri = c.runs.len() - 1;
        c.used[ri] += size;
        Self::mark_dirty(c, pos, pos + size);
        Self::account(c, mode, item, pos, size)?;
        Self::link(region, c, pos, height)?;
        c.linked += 1;
        written += size + 8 * height as u64;
        if c.linked - c.persisted >= every {
            Self::persist_dirty(region, c)?;
            let word = c.hoff + c.w.linked as u64;
            region.store_u64(word, c.linked)?;
            region.persist(word, 8)?;
            c.persisted = c.linked;
            written += 8;
        }
        self.written_add(written);
        Ok(())
    }

    fn mark_dirty(c: &mut Output, a: u64, b: u64) {
        c.dirty = Some(match c.dirty {
            Some((x, y)) if y == a => (x, b),
            Some((x, y)) if a >= x && b <= y => (x, y),
            _ => (a, b),
        });
    }

    fn persist_dirty(region: &Arc<dyn PmRegion>, c: &mut Output) -> Result<()> {
        if let Some((a, b)) = c.dirty.take() {
            region.persist(a, (b - a) as usize)?;
        }
        Ok(())
    }

    /// Closes an output (rule 4): links durable, sentinel, directory.
    fn close(&mut self, c: &mut Output) -> Result<BuiltList> {
        let region = self.p.region;
        // The last node of level 0 points at the sentinel, right after it.
        let ri = c.runs.len() - 1;
        let sentinel = c.runs[ri].first * PAGE + c.used[ri];
        region.write(c.last[0] + NODE_FIXED as u64, &sentinel.to_le_bytes())?;
        let mut crc = 0u32;
        for (r, &u) in c.runs.iter().zip(&c.used) {
            let b = region.slice(r.first * PAGE, u as usize)?;
            crc = crate::coding::crc32c_append(crc, b);
            region.persist(r.first * PAGE, u as usize)?;
        }
        c.dirty = None;
        region.write(sentinel, &format::sentinel(crc))?;
        region.persist(sentinel, NODE_FIXED)?;
        let word = c.hoff + c.w.linked as u64;
        region.store_u64(word, c.linked)?;
        region.persist(word, 8)?;
        let data: Vec<DataRef> = c.data.values().copied().collect();
        let dir = Directory {
            entries: c.stats.n,
            entry_bytes: c.stats.entry_bytes,
            node_runs: c.runs.clone(),
            data,
        };
        let d = dir.encode();
        let inside = c.header.bytes() + d.len() <= (c.hrun.count * PAGE) as usize;
        let dir_off = if inside {
            c.hoff + c.header.bytes() as u64
        } else {
            let pages = (d.len() as u64).div_ceil(PAGE);
            let run = self.p.pages.alloc(pages, pages)?;
            c.dir_run = Some(run);
            run.first * PAGE
        };
        region.write(dir_off, &d)?;
        region.persist(dir_off, d.len())?;
        let word = c.hoff + c.w.dir as u64;
        region.store_u64(word, dir_off)?;
        region.persist(word, 8)?;
        // The level-0 link, the sentinel, the linked count, the directory
        // and its offset.
        let n = (8 + NODE_FIXED + 8 + d.len() + 8) as u64;
        self.written_add(n);
        c.closed = true;
        let reader = SkipList::from_builder(
            Arc::clone(region),
            c.id,
            c.header.clone(),
            dir.clone(),
            sentinel,
            &mut c.filter,
        );
        let mut built = self.built(c, dir);
        built.reader = Some(reader);
        Ok(built)
    }

    /// The result of an output closed before the crash (a resume).
    fn reopen_closed(&mut self, mut c: Output) -> Result<BuiltList> {
        let region = self.p.region;
        let dir_off = region.load_u64(c.hoff + c.w.dir as u64)?;
        let in_header = dir_off >= c.hoff && dir_off < c.hoff + c.hrun.count * PAGE;
        let run = if in_header {
            c.hrun
        } else {
            dir_run_at(region.as_ref(), dir_off)?
        };
        let dir = super::list::read_directory(region.as_ref(), dir_off, &[run])?;
        if !in_header {
            c.dir_run = Some(run);
        }
        let data: Vec<DataRef> = c.data.values().copied().collect();
        if dir.entries != c.stats.n
            || dir.entry_bytes != c.stats.entry_bytes
            || dir.node_runs != c.runs
            || dir.data != data
        {
            return Err(Error::corruption(
                region.name(),
                dir_off,
                "closed output's directory differs from its replayed nodes",
            ));
        }
        Ok(self.built(&c, dir))
    }

    fn built(&self, c: &Output, dir: Directory) -> BuiltList {
        let mut pm_pages = vec![c.hrun];
        let data_firsts: std::collections::HashSet<u64> =
            dir.data.iter().map(|d| d.run.first).collect();
        for r in &c.runs {
            if !data_firsts.contains(&r.first) {
                pm_pages.push(*r);
            }
        }
        pm_pages.extend(c.dir_run);
        let own_bytes = pm_pages.iter().map(|r| r.count * PAGE).sum();
        BuiltList {
            meta: c.stats.meta(c.id, pm_pages),
            refs: ListRefs {
                own_bytes,
                data: dir.data,
            },
            written: Written::default(),
            reader: None,
        }
    }

    /// Ends the job: closes the open output. `Err` if a resume still had
    /// linked nodes the merge never reached.
    pub fn finish_all(mut self) -> std::result::Result<(Vec<BuiltList>, Written), Unresumable> {
        if let Some(c) = self.cur.take() {
            if !c.replay.is_empty() {
                return Err(Unresumable(format!(
                    "the merge ended before output {}'s {} linked nodes",
                    c.header.ordinal,
                    c.linked + c.replay.len() as u64
                )));
            }
            self.finish(c).map_err(|e| Unresumable(e.to_string()))?;
        }
        if let Some(p) = self
            .pending
            .iter()
            .find(|p| !p.replay.is_empty() || p.closed)
        {
            return Err(Unresumable(format!(
                "the merge ended before output {}",
                p.header.ordinal
            )));
        }
        Ok((self.done, self.written))
    }

    /// Every run the outputs took so far (header, node and directory runs),
    /// for a job that gives up.
    pub fn runs_taken(&self) -> Vec<PageRun> {
        let mut v = Vec::new();
        let outs = self.cur.iter().chain(self.pending.iter());
        for o in outs {
            v.push(o.hrun);
            v.extend(o.runs.iter().copied());
            v.extend(o.dir_run);
        }
        for b in &self.done {
            v.extend(b.meta.pm_pages.iter().copied());
        }
        v
    }
}

/// Reads output `ordinal` of job `job` (output level `level`, outputs
/// written in `mode`) whose header run is at `hoff`, and walks its linked
/// prefix by the layout rule: the checks of a resume (module doc of
/// `job.rs`). Reads only; node runs past the walk are dropped from the
/// output (nothing counted is in them).
fn load_output(
    region: &dyn PmRegion,
    job: u64,
    level: u32,
    mode: Mode,
    ordinal: u32,
    hoff: u64,
    filter_bits: usize,
) -> Result<Output> {
    if !hoff.is_multiple_of(PAGE) {
        return Err(Error::corruption(
            region.name(),
            hoff,
            "output header not page aligned",
        ));
    }
    let hrun = header_run_at(region, hoff)?;
    let hv = read_header(region, hrun)?;
    let h = &hv.header;
    if h.job != job || h.ordinal != ordinal || h.level != level {
        return Err(Error::corruption(
            region.name(),
            hoff,
            format!(
                "output {ordinal} of job {} names job {} output {} at L{}",
                job, h.job, h.ordinal, h.level
            ),
        ));
    }
    let w = LinkWords::at(h.link_offset());
    let mut out = Output {
        id: h.id,
        header: h.clone(),
        hrun,
        hoff,
        w,
        runs: hv.slot_runs.clone(),
        used: vec![0; hv.slot_runs.len()],
        last: [0; MAX_HEIGHT],
        head: 0,
        linked: 0,
        persisted: hv.linked,
        dirty: None,
        stats: EntryStats::default(),
        data: BTreeMap::new(),
        closed: hv.dir_off != 0,
        replay: Default::default(),
        dir_run: None,
        filter: BloomBuilder::new(filter_bits),
    };
    let Some(run0) = out.runs.first().copied() else {
        return Err(Error::corruption(
            region.name(),
            hoff,
            "output names no node run",
        ));
    };
    out.head = run0.first * PAGE;
    out.last = [out.head; MAX_HEIGHT];
    // Walk the linked prefix by the layout rule.
    let mut ri = 0usize;
    let end = |r: &PageRun| (r.first + r.count) * PAGE;
    let head_size = node_size(MAX_HEIGHT, 0) as u64;
    let mut pos = out.head + head_size;
    out.used[0] = head_size;
    let inline = mode == Mode::Copy;
    for _ in 0..hv.linked {
        loop {
            if pos + NODE_FIXED as u64 > end(&out.runs[ri]) {
                return Err(Error::corruption(
                    region.name(),
                    pos,
                    "linked node beyond its run",
                ));
            }
            let f = region.slice(pos, NODE_FIXED)?;
            let nh = format::node_head(f)
                .ok_or_else(|| Error::corruption(region.name(), pos, "truncated node"))?;
            if nh.entry_off == 0 && nh.height == format::MARKER_HEIGHT {
                out.used[ri] += NODE_FIXED as u64;
                ri += 1;
                if ri >= out.runs.len() {
                    return Err(Error::corruption(
                        region.name(),
                        pos,
                        "run marker after the last node run",
                    ));
                }
                pos = out.runs[ri].first * PAGE;
                continue;
            }
            let h = nh.height as usize;
            if !(1..=MAX_HEIGHT).contains(&h) || nh.entry_off == 0 || nh.entry_off == HEAD_MARK {
                return Err(Error::corruption(region.name(), pos, "bad linked node"));
            }
            let base = (NODE_FIXED + 8 * h) as u64;
            let mut size = base;
            if inline {
                if nh.entry_off != pos + base {
                    return Err(Error::corruption(
                        region.name(),
                        pos,
                        "copied node without its entry",
                    ));
                }
                let avail = end(&out.runs[ri]).saturating_sub(pos + base + 4);
                let probe = region.slice(
                    pos + base + 4,
                    avail.min(format::ENTRY_PROBE as u64) as usize,
                )?;
                let (k, a) = crate::coding::get_varint(probe)
                    .ok_or_else(|| Error::corruption(region.name(), pos, "bad inline entry"))?;
                let (v, c) = crate::coding::get_varint(probe.get(a..).unwrap_or(&[]))
                    .ok_or_else(|| Error::corruption(region.name(), pos, "bad inline entry"))?;
                size += align8(4 + a + c + k as usize + v as usize) as u64;
            }
            if pos + size + NODE_FIXED as u64 > end(&out.runs[ri]) {
                return Err(Error::corruption(
                    region.name(),
                    pos,
                    "linked node overruns its run",
                ));
            }
            out.replay.push_back(Replayed {
                pos,
                entry_off: nh.entry_off,
                height: h,
                size,
            });
            out.used[ri] += size;
            pos += size;
            break;
        }
    }
    // Runs past the walk hold nothing counted (a later append names
    // its own; an unused one goes back at the next open's reconcile).
    out.runs.truncate(ri + 1);
    out.used.truncate(ri + 1);
    Ok(out)
}

/// The runs output `ordinal` of an interrupted job uses as its resume will
/// find it (the same reads and checks, `load_output`): the header run, the
/// node runs of its linked prefix and, for a closed output, a directory
/// run of its own. `Err` where the resume would give up on the job.
pub fn output_runs(
    region: &dyn PmRegion,
    job: u64,
    level: u32,
    mode: Mode,
    ordinal: u32,
    hoff: u64,
) -> Result<Vec<PageRun>> {
    let out = load_output(region, job, level, mode, ordinal, hoff, 0)?;
    let mut runs = vec![out.hrun];
    runs.extend(out.runs.iter().copied());
    if out.closed {
        let dir_off = region.load_u64(out.hoff + out.w.dir as u64)?;
        if !(out.hoff..out.hoff + out.hrun.count * PAGE).contains(&dir_off) {
            runs.push(dir_run_at(region, dir_off)?);
        }
    }
    Ok(runs)
}

/// The header run at `hoff`, sized by the input count it records.
pub fn header_run_at(region: &dyn PmRegion, hoff: u64) -> Result<PageRun> {
    let b = region.slice(hoff, 48)?;
    let m = crate::coding::get_u32(b, 44).unwrap_or(u32::MAX) as u64;
    let bytes = (align8(52 + 8 * m.min(1 << 24) as usize) + format::HEADER_LINK_BYTES) as u64;
    let run = PageRun {
        first: hoff / PAGE,
        count: bytes.div_ceil(PAGE),
    };
    if (run.first + run.count) * PAGE > region.len() {
        return Err(Error::corruption(
            region.name(),
            hoff + 44,
            "skip list header overruns the region",
        ));
    }
    Ok(run)
}

/// The run of a directory written outside its header run, sized by the
/// counts it records.
pub fn dir_run_at(region: &dyn PmRegion, dir_off: u64) -> Result<PageRun> {
    let b = region.slice(dir_off, format::DIR_FIXED)?;
    let r = u64::from(crate::coding::get_u32(b, 12).unwrap_or(0));
    let k = u64::from(crate::coding::get_u32(b, 32).unwrap_or(0));
    let len = (format::DIR_FIXED as u64)
        .saturating_add(format::DIR_NODE_RUN as u64 * k)
        .saturating_add(format::DIR_DATA_RUN as u64 * r)
        + 4;
    let run = PageRun {
        first: dir_off / PAGE,
        count: len.div_ceil(PAGE),
    };
    if (run.first + run.count).saturating_mul(PAGE) > region.len() {
        return Err(Error::corruption(
            region.name(),
            dir_off + 12,
            "skip list directory overruns the region",
        ));
    }
    Ok(run)
}

/// Writes a copy-forward buffer holding `entries` (key, value) in order;
/// returns the run and each entry's region offset and length.
pub fn write_buffer(
    region: &Arc<dyn PmRegion>,
    pages: &dyn Pages,
    id: u64,
    entries: &mut dyn InternalIterator,
) -> Result<(PageRun, u64)> {
    let mut buf = Vec::new();
    entries.seek_to_first();
    while entries.valid() {
        put_entry(&mut buf, entries.key(), entries.value());
        entries.next();
    }
    entries.status()?;
    let bytes = BUFFER_HEADER_BYTES as u64 + buf.len() as u64;
    let pages_n = bytes.div_ceil(PAGE);
    let run = pages.alloc(pages_n, pages_n)?;
    let off = run.first * PAGE;
    let h = format::encode_buffer_header(&format::BufferHeader {
        id,
        entry_bytes: buf.len() as u64,
        entries_crc: crate::coding::crc32c(&buf),
    });
    let r = region
        .write(off, &h)
        .and_then(|()| region.write(off + BUFFER_HEADER_BYTES as u64, &buf))
        .and_then(|()| region.persist(off, bytes as usize));
    if let Err(e) = r {
        let _ = pages.free(run);
        return Err(e);
    }
    Ok((run, bytes))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::memtable::MemTable;
    use crate::storage::pm::PmTier;
    use crate::storage::sim::SimRegion;

    struct Alloc(Arc<PmTier>);
    impl Pages for Alloc {
        fn alloc(&self, want: u64, min: u64) -> Result<PageRun> {
            let _ = min;
            Ok(self.0.allocator().alloc(want)?.unwrap())
        }
        fn free(&self, run: PageRun) -> Result<()> {
            self.0.free_pages(run)
        }
    }

    fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect()
    }

    /// `mem` flushed as list 9 (full variant, sound order) into `region`,
    /// a fresh PM tier.
    fn flush_full_list(region: &Arc<dyn PmRegion>, mem: &Arc<MemTable>) -> BuiltList {
        let tier = Arc::new(PmTier::open(Arc::clone(region), false).unwrap());
        flush_list(
            &FlushParams {
                region,
                pages: &Alloc(tier),
                id: 9,
                layout: Layout::Full,
                order: TlsmPersistOrder::Sound,
                filter_bits: 10,
            },
            &mut mem.iter(),
        )
        .unwrap()
    }

    /// The worked example of docs/format/pm.md ("TLSM persistent skip
    /// lists"), byte for byte: `apple@7 = "red"`, `apple@5 = "green"` and
    /// a tombstone `kiwi@6` flushed (full variant, sound order) into a
    /// fresh 64 KiB region as list 9.
    #[test]
    fn worked_example() {
        let sim = Arc::new(SimRegion::new(64 << 10));
        let region: Arc<dyn PmRegion> = sim.clone();
        let mem = Arc::new(MemTable::new(0));
        mem.add(7, Kind::Put, b"apple", b"red");
        mem.add(5, Kind::Put, b"apple", b"green");
        mem.add(6, Kind::Delete, b"kiwi", b"");
        let b = flush_full_list(&region, &mem);
        // The buffer (page 2), the nodes (page 3), the header (page 4).
        assert_eq!(
            b.refs.data,
            vec![DataRef {
                run: PageRun { first: 2, count: 1 },
                bytes: 52
            }]
        );
        assert_eq!(
            b.meta.pm_pages,
            vec![
                PageRun { first: 4, count: 1 },
                PageRun { first: 3, count: 1 }
            ]
        );
        assert_eq!(
            (b.meta.size_bytes, b.meta.entries, b.meta.deletions),
            (52, 3, 1)
        );
        let buffer = hex("54 4c 53 4d 42 75 66 00 01 00 00 00 28 00 00 00
             09 00 00 00 00 00 00 00 34 00 00 00 00 00 00 00
             01 66 87 21 c7 76 ab 1f 0d 03 61 70 70 6c 65 01
             07 00 00 00 00 00 00 72 65 64 0d 05 61 70 70 6c
             65 01 05 00 00 00 00 00 00 67 72 65 65 6e 0c 00
             6b 69 77 69 00 06 00 00 00 00 00 00");
        assert_eq!(sim.slice(0x2000, buffer.len()).unwrap(), &buffer[..]);
        let nodes = hex("ff ff ff ff ff ff ff ff 0c 00 00 00 00 00 00 00
             70 30 00 00 00 00 00 00 88 30 00 00 00 00 00 00
             00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
             00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
             00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
             00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
             00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
             28 20 00 00 00 00 00 00 01 00 00 00 00 00 00 00
             88 30 00 00 00 00 00 00 3a 20 00 00 00 00 00 00
             02 00 00 00 00 00 00 00 a8 30 00 00 00 00 00 00
             00 00 00 00 00 00 00 00 4e 20 00 00 00 00 00 00
             01 00 00 00 00 00 00 00 c0 30 00 00 00 00 00 00
             00 00 00 00 00 00 00 00 00 00 00 00 2d 89 f5 6e");
        assert_eq!(sim.slice(0x3000, nodes.len()).unwrap(), &nodes[..]);
        let header = hex("54 4c 53 4d 53 6b 69 70 01 00 00 00 38 00 00 00
             09 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
             00 00 00 00 02 00 00 00 00 00 00 00 00 00 00 00
             30 67 ce ba 00 00 00 00 03 00 00 00 00 00 00 00
             50 42 00 00 00 00 00 00 01 00 00 00 00 00 00 00
             01 00 30 00 00 00 00 00");
        assert_eq!(sim.slice(0x4000, header.len()).unwrap(), &header[..]);
        let dir = hex("54 4c 53 4d 44 69 72 00 01 00 00 00 01 00 00 00
             03 00 00 00 00 00 00 00 34 00 00 00 00 00 00 00
             01 00 00 00 00 00 00 00 03 00 00 00 00 00 00 00
             01 00 00 00 02 00 00 00 00 00 00 00 01 00 00 00
             34 00 00 00 00 00 00 00 37 0b 55 99");
        assert_eq!(sim.slice(0x4250, dir.len()).unwrap(), &dir[..]);
        // And it reads back.
        let list = Arc::new(
            super::super::list::SkipList::open(region, &b.meta, true, &Default::default()).unwrap(),
        );
        use crate::iter::TableReader;
        let f = list.get(b"apple", 6).unwrap().unwrap();
        assert_eq!((f.seq, f.value.as_slice()), (5, &b"green"[..]));
        assert_eq!(list.get(b"kiwi", 9).unwrap().unwrap().kind, Kind::Delete);
        assert!(list.get(b"banana", 9).unwrap().is_none());
    }

    /// Pages as a fragmented PM hands them out: each request gets the
    /// fewest pages it allows.
    struct Tight(Arc<PmTier>);
    impl Pages for Tight {
        fn alloc(&self, want: u64, min: u64) -> Result<PageRun> {
            let _ = want;
            Ok(self.0.allocator().alloc(min)?.unwrap())
        }
        fn free(&self, run: PageRun) -> Result<()> {
            self.0.free_pages(run)
        }
    }

    /// A PS (and PS+BAC) flush whose first node does not fit after the
    /// head (a 5000-byte value, single pages from the allocator): the first
    /// node run holds only the head and a run marker. Every run the list
    /// uses is in its `pm_pages` or is one of its data runs — the pages
    /// the flush took are exactly those, so a release frees them all and a
    /// reopen's reconcile frees none of them while the list lives.
    #[test]
    fn ps_flush_head_only_first_run_is_listed() {
        for layout in [Layout::Ps, Layout::PsBac] {
            let sim = Arc::new(SimRegion::new(1 << 20));
            let region: Arc<dyn PmRegion> = sim.clone();
            let tier = Arc::new(PmTier::open(Arc::clone(&region), false).unwrap());
            let free_before = tier.allocator().free_pages();
            let mem = Arc::new(MemTable::new(0));
            mem.add(1, Kind::Put, b"big", &[7u8; 5000]);
            mem.add(2, Kind::Put, b"small", b"x");
            let b = flush_list(
                &FlushParams {
                    region: &region,
                    pages: &Tight(Arc::clone(&tier)),
                    id: 9,
                    layout,
                    order: TlsmPersistOrder::Sound,
                    filter_bits: 10,
                },
                &mut mem.iter(),
            )
            .unwrap();
            let list =
                super::super::list::SkipList::open(region, &b.meta, true, &Default::default())
                    .unwrap();
            let runs = &list.directory().node_runs;
            let data: Vec<PageRun> = b.refs.data.iter().map(|d| d.run).collect();
            // The case: run 0 holds the head only, so it is no data run.
            assert!(runs.len() >= 2 && !data.contains(&runs[0]), "{layout:?}");
            for r in runs {
                assert!(
                    b.meta.pm_pages.contains(r) || data.contains(r),
                    "{layout:?}: node run {r:?} is in neither pm_pages {:?} nor the data runs {data:?}",
                    b.meta.pm_pages
                );
            }
            let listed: u64 = b.meta.pm_pages.iter().chain(&data).map(|r| r.count).sum();
            assert_eq!(
                free_before - tier.allocator().free_pages(),
                listed,
                "{layout:?}: the flush took pages it lists nowhere"
            );
            use crate::iter::TableReader;
            let f = list.get(b"big", 9).unwrap().unwrap();
            assert_eq!(f.value, vec![7u8; 5000]);
            assert_eq!(list.get(b"small", 9).unwrap().unwrap().value, b"x");
        }
    }

    /// `open` checks the upper links too (found by
    /// fuzz/fuzz_targets/tlsm.rs): a list whose `next[l]` words were
    /// damaged under a matching sentinel crc opened, and lookups, which
    /// follow those links, then misread (a link into other bytes) or never
    /// ended (a link back to its own node).
    #[test]
    fn open_checks_upper_links() {
        use super::super::list::SkipList;
        let sim = Arc::new(SimRegion::new(1 << 20));
        let region: Arc<dyn PmRegion> = sim.clone();
        let mem = Arc::new(MemTable::new(0));
        for i in 0..200u64 {
            mem.add(i + 1, Kind::Put, format!("k{i:04}").as_bytes(), b"v");
        }
        let b = flush_full_list(&region, &mem);
        let list = SkipList::open(Arc::clone(&region), &b.meta, true, &Default::default()).unwrap();
        assert_eq!(list.directory().node_runs.len(), 1);
        let (head, sentinel) = (list.head(), list.sentinel());
        let tall = list.next(head, 1).unwrap();
        assert!(tall != 0 && tall != sentinel);
        drop(list);
        let word = |node: u64, l: u64| node + NODE_FIXED as u64 + 8 * l;
        for (what, at, value) in [
            ("the head's level-1 link cleared", word(head, 1), 0),
            ("a level-1 link to its own node", word(tall, 1), tall),
            (
                "a level-1 link into a node's bytes",
                word(tall, 1),
                tall + 8,
            ),
        ] {
            let old = sim.load_u64(at).unwrap();
            sim.write(at, &value.to_le_bytes()).unwrap();
            // The damage under a matching crc (a crc32c collision).
            let crc = crate::coding::crc32c(sim.slice(head, (sentinel - head) as usize).unwrap());
            sim.write(sentinel + 12, &crc.to_le_bytes()).unwrap();
            let e = SkipList::open(Arc::clone(&region), &b.meta, true, &Default::default())
                .err()
                .unwrap_or_else(|| panic!("{what}: the list opens"));
            assert!(e.is_corruption(), "{what}: {e}");
            assert!(e.to_string().contains("level-1 link"), "{what}: {e}");
            sim.write(at, &old.to_le_bytes()).unwrap();
        }
        let crc = crate::coding::crc32c(sim.slice(head, (sentinel - head) as usize).unwrap());
        sim.write(sentinel + 12, &crc.to_le_bytes()).unwrap();
        assert!(SkipList::open(region, &b.meta, true, &Default::default()).is_ok());
    }

    /// A list opened with a filter answers a lookup of a key it does not
    /// hold from the DRAM filter, reading no node: with the nodes wiped
    /// after the open, such a lookup still returns `None`, while one that
    /// the filter lets through reads the damage (and a list opened without
    /// a filter reads it for every lookup).
    #[test]
    fn filtered_lookups_of_absent_keys_read_no_node() {
        use super::super::list::SkipList;
        use crate::iter::TableReader;
        let sim = Arc::new(SimRegion::new(1 << 20));
        let region: Arc<dyn PmRegion> = sim.clone();
        let mem = Arc::new(MemTable::new(0));
        for i in 0..200u64 {
            mem.add(i + 1, Kind::Put, format!("k{:04}", 2 * i).as_bytes(), b"v");
        }
        let b = flush_full_list(&region, &mem);
        let open = |bits| {
            SkipList::open_filtered(
                Arc::clone(&region),
                &b.meta,
                true,
                &Default::default(),
                bits,
            )
            .unwrap()
        };
        let (filtered, plain) = (open(10), open(0));
        assert!(filtered.dram_filter_bytes() >= 200 * 10 / 8);
        assert_eq!(plain.dram_filter_bytes(), 0);
        assert_eq!(filtered.get(b"k0042", 500).unwrap().unwrap().value, b"v");
        let absent: Vec<String> = (0..200).map(|i| format!("k{:04}", 2 * i + 1)).collect();
        for k in &absent {
            assert!(filtered.get(k.as_bytes(), 500).unwrap().is_none());
        }
        // Wipe every node but the head (its links lead into the wipe).
        let (head, sentinel) = (filtered.head(), filtered.sentinel());
        let first = head + (NODE_FIXED + 8 * super::super::format::MAX_HEIGHT) as u64;
        sim.write(first, &vec![0xEE; (sentinel - first) as usize])
            .unwrap();
        let ruled_out = absent
            .iter()
            .filter(|k| filtered.get(k.as_bytes(), 500).unwrap().is_none())
            .count();
        assert!(ruled_out >= 190, "{ruled_out} of 200 absent keys ruled out");
        assert!(
            filtered.get(b"k0042", 500).is_err(),
            "a present key reads the node"
        );
        assert!(plain.get(absent[0].as_bytes(), 500).is_err());
    }

    /// The reader a builder records for a list it wrote (flush, and every
    /// output of a link and a copy compaction, cut into several) is the
    /// reader the opening walk finds: head, sentinel, header, directory
    /// and filter (`SkipList::same_as_walked`), so adopting it
    /// (`ListCache::adopt`, `TlsmOptions::check_outputs` off) reads
    /// exactly what a walked list reads.
    #[test]
    fn builders_readers_are_the_walked_readers() {
        use super::super::format::Slot;
        use super::super::job::{self, GpCutter, KeySpan, ListSource, Merge, Source};
        use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
        let walked = |region: &Arc<dyn PmRegion>, b: &BuiltList| {
            SkipList::open_filtered(Arc::clone(region), &b.meta, true, &Default::default(), 10)
                .unwrap()
        };
        for layout in [Layout::Full, Layout::Ps] {
            let sim = Arc::new(SimRegion::new(8 << 20));
            let region: Arc<dyn PmRegion> = sim.clone();
            let tier = Arc::new(PmTier::open(Arc::clone(&region), false).unwrap());
            let pages = Alloc(Arc::clone(&tier));
            // Three overlapping flushes, with overwrites and tombstones.
            let mut lists = Vec::new();
            for f in 0..3u64 {
                let mem = Arc::new(MemTable::new(0));
                for i in 0..400u64 {
                    let k = format!("key{:05}", (i * 7 + f * 3) % 900);
                    let seq = 1 + f * 1000 + i;
                    if i % 11 == 5 {
                        mem.add(seq, Kind::Delete, k.as_bytes(), b"");
                    } else {
                        mem.add(seq, Kind::Put, k.as_bytes(), &[b'a' + f as u8; 40]);
                    }
                }
                let b = flush_list(
                    &FlushParams {
                        region: &region,
                        pages: &pages,
                        id: 10 + f,
                        layout,
                        order: TlsmPersistOrder::Sound,
                        filter_bits: 10,
                    },
                    &mut mem.iter(),
                )
                .unwrap();
                let w = walked(&region, &b);
                assert!(b.reader.as_ref().unwrap().same_as_walked(&w), "flush {f}");
                lists.push(Arc::new(w));
            }
            for mode in [Mode::Link, Mode::Copy] {
                let slot = pages.alloc(1, 1).unwrap();
                let sref = job::write_slot(
                    &region,
                    slot,
                    &Slot {
                        job: 77,
                        capacity: 64,
                        grandparents: Vec::new(),
                    },
                )
                .unwrap();
                let next = AtomicU64::new(100);
                let next_id = || next.fetch_add(1, AtomicOrdering::Relaxed);
                let mut outs = Outputs::new(OutputParams {
                    region: &region,
                    pages: &pages,
                    slot: sref,
                    job: 77,
                    level: 1,
                    layout: job::output_layout(mode, layout),
                    origin: Origin::Compaction,
                    inputs: vec![10, 11, 12],
                    persist_every: 3,
                    mode,
                    node_bytes_hint: 2048,
                    next_id: &next_id,
                    filter_bits: 10,
                });
                let mut merge = Merge::new(
                    lists
                        .iter()
                        .map(|l| Box::new(ListSource::new(l)) as Box<dyn Source>)
                        .collect(),
                );
                let mut cutter = GpCutter::new(8 << 10, Vec::new());
                job::merge_into(
                    &mut merge,
                    KeySpan::default(),
                    &mut outs,
                    &mut cutter,
                    0,
                    None,
                )
                .unwrap()
                .unwrap();
                let (built, _) = outs.finish_all().unwrap();
                assert!(built.len() >= 3, "{mode:?}: {} outputs", built.len());
                for b in &built {
                    let w = walked(&region, b);
                    assert!(
                        b.reader.as_ref().unwrap().same_as_walked(&w),
                        "{layout:?} {mode:?}: output {}",
                        b.meta.id
                    );
                }
            }
        }
    }
}
