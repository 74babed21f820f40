//! The persistent skip lists and buffers of `tlsm` for `Db::repair`
//! (`design/salvage.rs`), found without the MANIFEST by their magic at
//! page starts.
//!
//! # What is read
//!
//! * **Every closed skip list** (`"TLSMSkip"` at a page start, directory
//!   offset ≠ 0): its header run is sized from its own header
//!   (`build::header_run_at`) and grown to the end of the directory when
//!   the directory sits in it (a flush's), or the directory's own run is
//!   taken (`build::dir_run_at`, sized exactly from the decoded
//!   directory); the table metadata the reader needs is derived from the
//!   checksummed header and directory (id, `pm_pages`, entries = the
//!   linked count, `size_bytes` = the directory's entry bytes), and the
//!   list is opened by the engine's own reader (`SkipList::open_found`:
//!   every check of a MANIFEST-listed list — header, directory, buffers'
//!   headers and entries crc, inline entries' crc, the walk of every node
//!   with its links, key order and the sentinel's crc — but the first and
//!   last keys, which only a MANIFEST records). A `full` list that fails
//!   any check gives nothing (its problem names the offset); a `ps` /
//!   `ps_bac` one is then read by place (below, "Limits"). Its entries come
//!   from the list's iterator, in internal-key order, tombstones included.
//!   Flush lists, compaction outputs (pointer nodes into other lists'
//!   buffers or inline nodes) and copy-forwards are all read: duplicates
//!   and superseded versions are resolved by seqno.
//! * **Every persistent buffer that no list that opened links**
//!   (`"TLSMBuf\0"` at a page start, header crc and entries crc verified,
//!   the run sized from its own entry bytes): a flush interrupted before
//!   its list's header was written (its memtable is normally still in the
//!   WAL: the flush's edit, which retires the WAL, comes after the list is
//!   closed — so these are duplicates), an in-flight copy-forward's new
//!   buffer (copies of a live list's entries), and — the case that matters
//!   — the buffers of a flushed list whose header, directory or nodes are
//!   damaged: the WAL that held those writes was retired by the flush's
//!   edit, and the buffer is the only copy left. Its entries are read in
//!   order (each entry decoded by the buffer reader; the order is checked,
//!   an entry out of order ends the source with an error).
//!
//! # What is skipped
//!
//! * Lists that are not closed (directory offset 0): only an in-flight
//!   compaction or copy-forward leaves them (a flush writes its header run
//!   whole, closed, with one persist), and their nodes point at — or, in
//!   copy mode, copy — entries their inputs, still closed and listed,
//!   hold. Each is listed as a source with no entries, without a problem
//!   (a flush list that is not closed is damage: a problem). Slot runs
//!   (`"TLSMSlot"`) hold no entries.
//! * Buffers linked by a list that opened: that list gives the entries it
//!   links; the other bytes of the buffer are entries no live list links
//!   any more (superseded, or dropped with a tombstone), which would
//!   resurface.
//! * Stale bytes. A structure is only what its checksummed fields say
//!   (a buffer ends at its entry bytes, a list at its sentinel, with the
//!   runs its directory names), and one found in pages that are allocated
//!   but not (yet) rewritten — a run handed out to a flush or a job that
//!   had not written it when the power went, the unused tail pages of a
//!   node run — is skipped, with a problem, when any run it uses is a free
//!   page, when its header lies inside a run of a list that opened, or
//!   (a buffer) inside another buffer.
//!
//! # Limits
//!
//! A `full` list that fails a check is lost whole: its entries come back
//! from its buffers (unless no other list that opened links them, in
//! which case they are read as orphan buffers — with the dead entries
//! those hold). A `ps` / `ps_bac` list, whose entries live in its nodes,
//! is read by place when its header and directory check
//! ([`SkipList::read_by_place`]: every node that checks where the layout
//! rule puts it, resynchronising on inline nodes after damage); the nodes
//! it cannot read are named, and with a damaged header or directory the
//! whole list is lost (its node runs are known only from the directory). A stale structure whose every run is allocated and intact
//! (pages handed out but not yet written at the crash) is read: its old
//! entries can resurface a key whose tombstone a compaction has since
//! dropped — the limit RocksDB's repairer has with obsolete tables.

use std::collections::HashSet;
use std::sync::Arc;

use super::build;
use super::format::{
    self, Header, Layout, Origin, BUFFER_HEADER_BYTES, BUFFER_MAGIC, HEADER_MAGIC,
};
use super::job::{BufferSource, Source};
use super::list::{self, SkipList, Verified};
use crate::design::salvage::{Salvaged, SourceKind};
use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::key::{self, compare_internal, SeqNo};
use crate::stats::Tier;
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};
use crate::storage::PmRegion;
use crate::version::edit::{TableFormat, TableMeta};

const PAGE: u64 = PAGE_SIZE_BYTES;

/// A list that opened.
struct Opened {
    at: u64,
    list: Arc<SkipList>,
    /// Every run it uses: its own (header, directory, node runs) and the
    /// data runs it links into.
    runs: Vec<PageRun>,
    seq_max: SeqNo,
    /// Read by place (an inline-layout list that failed a check): the
    /// entries taken and the problems, the first why it failed.
    by_place: Option<(Vec<u64>, Vec<String>)>,
}

/// Every closed skip list and every buffer no list that opened links, at
/// the starts of `pages` (module doc).
pub fn salvage(region: &Arc<dyn PmRegion>, pages: &[u64]) -> Vec<Salvaged> {
    let mut allocated = pages.to_vec();
    allocated.sort_unstable();
    allocated.dedup();
    let magic_at = |page: u64, magic: &[u8; 8]| {
        page.checked_mul(PAGE)
            .and_then(|at| region.slice(at, 8).ok())
            == Some(&magic[..])
    };
    let mut out = Vec::new();
    let verified = Verified::default();
    let mut opened: Vec<Opened> = Vec::new();
    for &page in &allocated {
        if !magic_at(page, &HEADER_MAGIC) {
            continue;
        }
        let at = page * PAGE;
        match open_list(region, at, &allocated, &verified) {
            Ok(Listed::Closed(o)) => opened.push(o),
            // Listed as read, with nothing taken from it.
            Ok(Listed::NotClosed(h)) => out.push(Salvaged {
                kind: SourceKind::PmSkipList,
                name: format!(
                    "{} at offset {at}: skip list {} (L{}, {}, {}, not closed: an interrupted job's output, whose inputs hold its entries; skipped)",
                    region.name(),
                    h.id,
                    h.level,
                    origin_name(h.origin),
                    layout_name(h.layout)
                ),
                entries: None,
                seq_max: 0,
                problems: Vec::new(),
            }),
            Err(problem) => out.push(failed(
                SourceKind::PmSkipList,
                format!("{} at offset {at}: skip list", region.name()),
                problem,
            )),
        }
    }
    // A header inside a run another list uses is stale bytes of a reused
    // page (a live list's runs are its own, or data runs).
    let claims: Vec<(PageRun, usize)> = opened
        .iter()
        .enumerate()
        .flat_map(|(i, o)| o.runs.iter().map(move |r| (*r, i)))
        .collect();
    let inside = |page: u64, not: usize| {
        claims
            .iter()
            .find(|(r, i)| *i != not && contains(*r, page))
            .map(|(_, i)| *i)
    };
    let stale: Vec<Option<usize>> = opened
        .iter()
        .enumerate()
        .map(|(i, o)| inside(o.at / PAGE, i))
        .collect();
    let mut kept: Vec<&Opened> = Vec::new();
    for (o, s) in opened.iter().zip(&stale) {
        let name = list_name(region.as_ref(), o);
        match s {
            Some(j) => out.push(failed(
                SourceKind::PmSkipList,
                name,
                format!(
                    "{} skip list {} at offset {}: its header lies inside a run of skip list {} at offset {} (stale bytes of a reused page): skipped",
                    region.name(),
                    o.list.id(),
                    o.at,
                    opened[*j].list.id(),
                    opened[*j].at
                ),
            )),
            None => {
                kept.push(o);
                let (entries, problems): (Box<dyn InternalIterator>, _) = match &o.by_place {
                    None => (Box::new(o.list.iter_list()), Vec::new()),
                    Some((offs, problems)) => (
                        Box::new(OffsetIter::new(Arc::clone(&o.list), offs.clone())),
                        problems.clone(),
                    ),
                };
                out.push(Salvaged {
                    kind: SourceKind::PmSkipList,
                    name,
                    entries: Some(entries),
                    seq_max: o.seq_max,
                    problems,
                });
            }
        }
    }
    // Buffers no list that opened links.
    let linked: HashSet<u64> = kept
        .iter()
        .flat_map(|o| o.list.directory().data.iter().map(|d| d.run.first))
        .collect();
    let own_runs: Vec<PageRun> = kept.iter().flat_map(|o| o.runs.iter().copied()).collect();
    let mut buffers: Vec<(PageRun, Option<Error>)> = Vec::new();
    for &page in &allocated {
        if !magic_at(page, &BUFFER_MAGIC) || linked.contains(&page) {
            continue;
        }
        buffers.push(buffer_run(region.as_ref(), page, &allocated));
    }
    for (i, (run, err)) in buffers.iter().enumerate() {
        let at = run.first * PAGE;
        let name = format!("{} at offset {at}: persistent buffer", region.name());
        if let Some(e) = err {
            out.push(failed(SourceKind::PmBuffer, name, e.to_string()));
            continue;
        }
        let within_list = own_runs.iter().find(|r| contains(**r, run.first));
        let within_buffer = buffers
            .iter()
            .enumerate()
            .find(|(j, (r, e))| *j != i && e.is_none() && contains(*r, run.first));
        if within_list.is_some() || within_buffer.is_some() {
            out.push(failed(
                SourceKind::PmBuffer,
                name,
                format!(
                    "{} persistent buffer at offset {at}: it lies inside a run a skip list or another buffer uses (stale bytes of a reused page): skipped",
                    region.name()
                ),
            ));
            continue;
        }
        match BufferSource::open(Arc::clone(region), *run) {
            Ok(src) => {
                let mut it = BufferIter::new(region, src);
                let mut seq_max = 0;
                it.seek_to_first();
                let mut n = 0u64;
                while it.valid() {
                    if let Some(p) = key::parse_internal_key(it.key()) {
                        seq_max = seq_max.max(p.seq);
                    }
                    n += 1;
                    it.next();
                }
                out.push(Salvaged {
                    kind: SourceKind::PmBuffer,
                    name: format!(
                        "{name} ({n} entries in {} pages, linked by no skip list that opened)",
                        run.count
                    ),
                    entries: Some(Box::new(it)),
                    seq_max,
                    problems: Vec::new(),
                });
            }
            Err(e) => out.push(failed(
                SourceKind::PmBuffer,
                name,
                format!("{} persistent buffer at offset {at}: {e}", region.name()),
            )),
        }
    }
    out
}

/// A structure that gave nothing.
fn failed(kind: SourceKind, name: String, problem: String) -> Salvaged {
    Salvaged {
        kind,
        name,
        entries: None,
        seq_max: 0,
        problems: vec![problem],
    }
}

fn contains(r: PageRun, page: u64) -> bool {
    page >= r.first && r.first.checked_add(r.count).is_some_and(|end| page < end)
}

/// True if every page of `r` is in `allocated` (sorted).
fn all_allocated(allocated: &[u64], r: PageRun) -> bool {
    let Some(end) = r.first.checked_add(r.count) else {
        return false;
    };
    let lo = allocated.partition_point(|&p| p < r.first);
    let hi = allocated.partition_point(|&p| p < end);
    (hi - lo) as u64 == r.count
}

fn origin_name(o: Origin) -> &'static str {
    match o {
        Origin::Flush => "flush",
        Origin::Compaction => "compaction output",
        Origin::CopyForward => "copy-forward",
    }
}

fn layout_name(l: Layout) -> &'static str {
    match l {
        Layout::Ps => "ps",
        Layout::PsBac => "ps_bac",
        Layout::Full => "full",
    }
}

fn list_name(region: &dyn PmRegion, o: &Opened) -> String {
    let h = o.list.header();
    format!(
        "{} at offset {}: skip list {} (L{}, {}, {}, {} entries)",
        region.name(),
        o.at,
        o.list.id(),
        h.level,
        origin_name(h.origin),
        layout_name(h.layout),
        o.list.len()
    )
}

/// A skip list header found at a page start.
enum Listed {
    /// A closed list that opened.
    Closed(Opened),
    /// A list that is not closed (its static header).
    NotClosed(Header),
}

/// Opens the skip list whose header is at `at` from its own header and
/// directory. `Err`: the problem, naming the offset.
fn open_list(
    region: &Arc<dyn PmRegion>,
    at: u64,
    allocated: &[u64],
    verified: &Verified,
) -> std::result::Result<Listed, String> {
    let r = region.as_ref();
    let what = |e: Error| format!("{} skip list at offset {at}: {e}", r.name());
    let hrun = build::header_run_at(r, at).map_err(what)?;
    let hv = list::read_header(r, hrun).map_err(what)?;
    if hv.dir_off == 0 {
        if hv.header.origin == Origin::Flush {
            return Err(format!(
                "{} skip list {} at offset {at}: a flushed list that is not closed (directory offset 0; a flush writes its header closed): damaged, skipped",
                r.name(),
                hv.header.id
            ));
        }
        return Ok(Listed::NotClosed(hv.header));
    }
    // The directory, read from a run that surely holds it, then its exact
    // extent: in the header run (a flush's, sized for it) or a run of its
    // own (a compaction output whose directory did not fit).
    let dir_off = hv.dir_off;
    let probe = build::dir_run_at(r, dir_off).map_err(what)?;
    let probe = PageRun {
        count: probe.count
            + u64::from(
                probe
                    .first
                    .checked_add(probe.count + 1)
                    .and_then(|e| e.checked_mul(PAGE))
                    .is_some_and(|e| e <= r.len()),
            ),
        ..probe
    };
    let dir = list::read_directory(r, dir_off, &[probe]).map_err(what)?;
    let dir_end = dir_off
        .checked_add(dir.encoded_len() as u64)
        .ok_or_else(|| what(Error::corruption(r.name(), dir_off, "directory overflows")))?;
    let hrun_end = (hrun.first + hrun.count) * PAGE;
    let pm_pages = if (at..hrun_end).contains(&dir_off) {
        vec![PageRun {
            first: hrun.first,
            count: hrun.count.max(dir_end.div_ceil(PAGE) - hrun.first),
        }]
    } else {
        let first = dir_off / PAGE;
        vec![
            hrun,
            PageRun {
                first,
                count: dir_end.div_ceil(PAGE) - first,
            },
        ]
    };
    let mut runs = pm_pages.clone();
    runs.extend(dir.node_runs.iter().copied());
    runs.extend(dir.data.iter().map(|d| d.run));
    if let Some(free) = runs.iter().find(|x| !all_allocated(allocated, **x)) {
        return Err(format!(
            "{} skip list {} at offset {at}: it uses pages {}+{}, not all allocated (stale bytes of a freed list in a reused page): skipped",
            r.name(),
            hv.header.id,
            free.first,
            free.count
        ));
    }
    let meta = TableMeta {
        id: hv.header.id,
        tier: Tier::Pm,
        format: TableFormat::PmSkipList,
        size_bytes: dir.entry_bytes,
        smallest: Vec::new(),
        largest: Vec::new(),
        seq_min: 0,
        seq_max: 0,
        entries: hv.linked,
        deletions: 0,
        pm_pages,
    };
    let (list, by_place) = match SkipList::open_found(Arc::clone(region), &meta, true, verified) {
        Ok(list) => (Arc::new(list), None),
        // Its entries are in its own nodes (or those of the lists it
        // links into): read what checks by place.
        Err(e) if hv.header.layout.inline() => {
            let r =
                SkipList::read_by_place(Arc::clone(region), &meta).map_err(|_| what(e.clone()))?;
            let mut problems = vec![what(e)];
            problems.extend(r.problems.into_iter().map(&what));
            (r.list, Some((r.entries, problems)))
        }
        Err(e) => return Err(what(e)),
    };
    let seq_of = |k: &[u8]| key::parse_internal_key(k).map_or(0, |p| p.seq);
    let seq_max = match &by_place {
        None => {
            let (mut seq_max, mut it) = (0, list.iter_list());
            it.seek_to_first();
            while it.valid() {
                seq_max = seq_max.max(seq_of(it.key()));
                it.next();
            }
            it.status().map_err(what)?;
            seq_max
        }
        // Verified by the read.
        Some((offs, _)) => offs
            .iter()
            .filter_map(|&off| list.entry(off).ok())
            .map(|(k, _)| seq_of(k))
            .max()
            .unwrap_or(0),
    };
    Ok(Listed::Closed(Opened {
        at,
        list,
        runs,
        seq_max,
        by_place,
    }))
}

/// The run of the buffer whose header is at the start of `page`, sized
/// from its entry bytes, or why it cannot be read.
fn buffer_run(region: &dyn PmRegion, page: u64, allocated: &[u64]) -> (PageRun, Option<Error>) {
    let at = page * PAGE;
    let one = PageRun {
        first: page,
        count: 1,
    };
    let header = match region.slice(at, BUFFER_HEADER_BYTES) {
        Ok(b) => b,
        Err(e) => return (one, Some(e)),
    };
    let h = match format::decode_buffer_header(header) {
        Ok(h) => h,
        Err((o, what)) => return (one, Some(Error::corruption(region.name(), at + o, what))),
    };
    let pages = (BUFFER_HEADER_BYTES as u64)
        .checked_add(h.entry_bytes)
        .map(|b| b.div_ceil(PAGE));
    let run = match pages {
        Some(count) if page.checked_add(count).is_some() => PageRun { first: page, count },
        _ => {
            return (
                one,
                Some(Error::corruption(
                    region.name(),
                    at + 24,
                    "persistent buffer: entry bytes overflow",
                )),
            )
        }
    };
    if !all_allocated(allocated, run) {
        return (
            one,
            Some(Error::corruption(
                region.name(),
                at,
                format!(
                    "persistent buffer {}: its {} entry bytes reach free or missing pages (stale bytes of a freed buffer, or damage): skipped",
                    h.id, h.entry_bytes
                ),
            )),
        );
    }
    (run, None)
}

/// The entries of a list read by place, by their offsets.
struct OffsetIter {
    list: Arc<SkipList>,
    offs: Vec<u64>,
    pos: usize,
    key: Vec<u8>,
    value: Vec<u8>,
    err: Option<Error>,
}

impl OffsetIter {
    fn new(list: Arc<SkipList>, offs: Vec<u64>) -> OffsetIter {
        let pos = offs.len();
        OffsetIter {
            list,
            offs,
            pos,
            key: Vec::new(),
            value: Vec::new(),
            err: None,
        }
    }

    fn load(&mut self) {
        let Some(&off) = self.offs.get(self.pos) else {
            return;
        };
        match self.list.entry(off) {
            Ok((k, v)) => {
                self.key.clear();
                self.key.extend_from_slice(k);
                self.value.clear();
                self.value.extend_from_slice(v);
            }
            Err(e) => {
                self.err.get_or_insert(e);
                self.pos = self.offs.len();
            }
        }
    }
}

impl InternalIterator for OffsetIter {
    fn valid(&self) -> bool {
        self.pos < self.offs.len()
    }
    fn seek_to_first(&mut self) {
        self.pos = 0;
        self.load();
    }
    fn seek_to_last(&mut self) {
        self.pos = self.offs.len().saturating_sub(1);
        self.load();
    }
    fn seek(&mut self, target: &[u8]) {
        let list = &self.list;
        self.pos = self.offs.partition_point(|&off| {
            list.entry(off)
                .is_ok_and(|(k, _)| compare_internal(k, target) == std::cmp::Ordering::Less)
        });
        self.load();
    }
    fn next(&mut self) {
        if self.valid() {
            self.pos += 1;
            self.load();
        }
    }
    fn prev(&mut self) {
        if self.valid() {
            self.pos = self.pos.checked_sub(1).unwrap_or(self.offs.len());
            self.load();
        }
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn value(&self) -> &[u8] {
        &self.value
    }
    fn status(&self) -> Result<()> {
        match &self.err {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

/// The entries of one persistent buffer, forward, each checked to follow
/// the previous one in internal-key order (a buffer is written sorted).
struct BufferIter {
    region: Arc<dyn PmRegion>,
    src: BufferSource,
    prev: Vec<u8>,
    first: bool,
    err: Option<Error>,
}

impl BufferIter {
    fn new(region: &Arc<dyn PmRegion>, src: BufferSource) -> BufferIter {
        BufferIter {
            region: Arc::clone(region),
            src,
            prev: Vec::new(),
            first: true,
            err: None,
        }
    }

    /// Checks the entry the source is on.
    fn check(&mut self) {
        if !self.src.valid() {
            return;
        }
        let k = self.src.key();
        let bad = if key::parse_internal_key(k).is_none() {
            Some("persistent buffer: malformed internal key")
        } else if !self.first && compare_internal(&self.prev, k).is_ge() {
            Some("persistent buffer: entries out of internal-key order")
        } else {
            None
        };
        if let Some(what) = bad {
            self.err = Some(Error::corruption(
                self.region.name(),
                self.src.entry_off(),
                what,
            ));
            return;
        }
        self.first = false;
        self.prev.clear();
        self.prev.extend_from_slice(k);
    }

    /// Positions on the entry at region offset `off` (forward from the
    /// first), or past the end for `None`.
    fn goto(&mut self, off: Option<u64>) {
        self.seek_to_first();
        while self.valid() && Some(self.src.entry_off()) != off {
            self.next();
        }
    }
}

impl InternalIterator for BufferIter {
    fn valid(&self) -> bool {
        self.err.is_none() && self.src.valid()
    }
    fn seek_to_first(&mut self) {
        self.err = None;
        self.first = true;
        self.src.seek_to_first();
        self.check();
    }
    fn seek_to_last(&mut self) {
        self.seek_to_first();
        let mut last = None;
        while self.valid() {
            last = Some(self.src.entry_off());
            self.next();
        }
        self.goto(last);
    }
    fn seek(&mut self, target: &[u8]) {
        self.seek_to_first();
        while self.valid() && compare_internal(self.key(), target).is_lt() {
            self.next();
        }
    }
    fn next(&mut self) {
        if self.valid() {
            self.src.next();
            self.check();
        }
    }
    fn prev(&mut self) {
        if !self.valid() {
            return;
        }
        let at = self.src.entry_off();
        self.seek_to_first();
        let mut before = None;
        while self.valid() && self.src.entry_off() != at {
            before = Some(self.src.entry_off());
            self.next();
        }
        self.goto(before);
    }
    fn key(&self) -> &[u8] {
        self.src.key()
    }
    fn value(&self) -> &[u8] {
        self.src.value()
    }
    fn status(&self) -> Result<()> {
        match &self.err {
            Some(e) => Err(e.clone()),
            None => self.src.status(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::key::{make_internal_key, Kind};
    use crate::storage::sim::SimRegion;

    /// A buffer at page 2 holding `entries` (internal key, value), crcs
    /// right.
    fn put_buffer(sim: &SimRegion, page: u64, entries: &[(Vec<u8>, Vec<u8>)]) {
        let mut buf = Vec::new();
        for (k, v) in entries {
            format::put_entry(&mut buf, k, v);
        }
        let h = format::encode_buffer_header(&format::BufferHeader {
            id: 7,
            entry_bytes: buf.len() as u64,
            entries_crc: crate::coding::crc32c(&buf),
        });
        sim.write(page * PAGE, &h).unwrap();
        sim.write(page * PAGE + BUFFER_HEADER_BYTES as u64, &buf)
            .unwrap();
    }

    fn read_all(s: &mut Salvaged) -> (Vec<Vec<u8>>, Result<()>) {
        let it = s.entries.as_mut().unwrap();
        let mut keys = Vec::new();
        it.seek_to_first();
        while it.valid() {
            keys.push(it.key().to_vec());
            it.next();
        }
        (keys, it.status())
    }

    /// A buffer no list links is read in order, tombstones included; one
    /// whose entries are out of order (a crc cannot tell) ends with an
    /// error at the first entry out of place; one reaching a free page
    /// is skipped with a problem naming its offset.
    #[test]
    fn orphan_buffers_are_read_in_order_or_not_at_all() {
        let sim = Arc::new(SimRegion::new(16 * PAGE as usize));
        let region: Arc<dyn PmRegion> = sim.clone();
        let a = make_internal_key(b"a", 5, Kind::Put);
        let b = make_internal_key(b"b", 6, Kind::Delete);
        let c = make_internal_key(b"c", 4, Kind::Put);
        put_buffer(
            &sim,
            2,
            &[(a.clone(), b"1".to_vec()), (b.clone(), Vec::new())],
        );
        put_buffer(
            &sim,
            4,
            &[(c.clone(), b"3".to_vec()), (a.clone(), b"1".to_vec())],
        );
        put_buffer(&sim, 6, &[(c.clone(), vec![7; 5000])]);
        let all: Vec<u64> = (1..16).filter(|&p| p != 7).collect();
        let mut found = salvage(&region, &all);
        assert_eq!(found.len(), 3);
        let (keys, st) = read_all(&mut found[0]);
        assert_eq!(keys, vec![a.clone(), b.clone()]);
        assert!(st.is_ok() && found[0].seq_max == 6);
        let (keys, st) = read_all(&mut found[1]);
        assert_eq!(keys, vec![c.clone()]);
        assert!(st.unwrap_err().is_corruption());
        assert!(found[2].entries.is_none());
        assert!(found[2].problems[0].contains(&format!("at offset {}", 6 * PAGE)));
    }

    /// Arbitrary bytes behind the magics at page starts never panic, and
    /// nothing is returned from them.
    #[test]
    fn garbage_behind_the_magics_never_panics() {
        let sim = Arc::new(SimRegion::new(32 * PAGE as usize));
        let region: Arc<dyn PmRegion> = sim.clone();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..50 {
            let mut bytes = vec![0u8; 30 * PAGE as usize];
            for b in bytes.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = (x >> 56) as u8;
                if round % 2 == 0 && x.is_multiple_of(3) {
                    *b = 0;
                }
            }
            sim.write(2 * PAGE, &bytes).unwrap();
            for p in 2..32 {
                let m = if p % 2 == 0 {
                    HEADER_MAGIC
                } else {
                    BUFFER_MAGIC
                };
                sim.write(p * PAGE, &m).unwrap();
            }
            let pages: Vec<u64> = (1..32).collect();
            for mut s in salvage(&region, &pages) {
                if s.entries.is_some() {
                    let (keys, _) = read_all(&mut s);
                    assert!(keys.is_empty(), "entries from garbage");
                }
            }
        }
    }
}
