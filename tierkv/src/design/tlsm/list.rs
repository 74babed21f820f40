//! Reading a persistent skip list: open (every check of a MANIFEST-listed
//! list), point lookups searched top-down, and an iterator (forward by the
//! level-0 links, backward by FindLessThan searches, as LevelDB's skip list
//! does).
//!
//! # What `open` checks
//!
//! Any failure is `Error::Corruption` naming the region and the byte
//! offset, never a panic:
//!
//! | check | offset reported |
//! |---|---|
//! | header magic, version, crc, link offset; list id = the MANIFEST's | header run + field |
//! | the list is closed: directory offset set (a list without its sentinel) | header link word |
//! | directory magic, version, crc; runs inside the region | directory + field |
//! | entries = linked count = MANIFEST entries, entry bytes = size | directory |
//! | walk from the head: node heights, each node inside its run, level-0 links = the layout, each upper link `next[l]` = the next node taller than l (0 after the last), entries inside a data run and decodable, keys ascending, first and last key = the MANIFEST's | the node, or the link |
//! | the null sentinel after the last node, and its crc of the node bytes | the sentinel |
//! | each buffer's header (and, with `verify_checksums`, its entries' crc, once per process); each inline entry's crc (with `verify_checksums`) | the buffer / entry |
//!
//! # Concurrency
//!
//! A [`SkipList`] is immutable once open: a closed list is never written
//! again (its link words were written before it was published), so readers
//! slice its nodes and entries freely (PmRegion contract 4). Any number of
//! threads share one reader.
//!
//! # Invariants (of a list that opened)
//!
//! 1. Nodes follow the head in key order, each `16 + 8h (+ inline)` bytes
//!    after the previous one or at the start of the next node run after a
//!    run marker; `next[0]` of each node is its successor, of the last the
//!    sentinel.
//! 2. `next[l]` of a node is the next node of height > l, or 0.
//! 3. Internal keys are strictly ascending.
//! 4. Every `entry_off` lies in one of the directory's data runs, and the
//!    entry there fits in the run (inside a buffer's entry bytes).

use std::cmp::Ordering;
use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;

use super::format::{
    self, node_head, Directory, Header, LinkWords, BUFFER_HEADER_BYTES, ENTRY_PROBE, HEAD_MARK,
    MARKER_HEIGHT, MAX_HEIGHT, NODE_FIXED,
};
use crate::error::{Error, Result};
use crate::iter::{Found, InternalIterator, TableReader};
use crate::key::{self, compare_internal, Kind, SeqNo};
use crate::sst::bloom::{BloomBuilder, BloomFilter};
use crate::stats::Tier;
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};
use crate::storage::PmRegion;
use crate::version::edit::{TableFormat, TableMeta};

const PAGE: u64 = PAGE_SIZE_BYTES;

/// An open, checked persistent skip list.
pub struct SkipList {
    region: Arc<dyn PmRegion>,
    id: u64,
    header: Header,
    head: u64,
    sentinel: u64,
    dir: Directory,
    /// A DRAM bloom filter over the list's user keys, built by the walk
    /// that opens it (every key is read there anyway), as an SST carries
    /// one: a lookup the list cannot answer costs a hash and a few bit
    /// probes instead of a skip-list search — a PM cache miss per node it
    /// compares (`SkipList::key_at` and the entry's varints were a quarter
    /// of a `medium` readrandom's CPU samples after a fill, one L0 list to
    /// search per read). `None`: opened without one (repair, inspection).
    filter: Option<BloomFilter>,
}

impl std::fmt::Debug for SkipList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkipList")
            .field("id", &self.id)
            .field("level", &self.header.level)
            .field("entries", &self.dir.entries)
            .field("head", &self.head)
            .finish()
    }
}

/// Reads a whole page run of the region.
pub(super) fn run_bytes(region: &dyn PmRegion, run: PageRun) -> Result<&[u8]> {
    let off = run.first.checked_mul(PAGE);
    let len = run
        .count
        .checked_mul(PAGE)
        .and_then(|l| usize::try_from(l).ok());
    match (off, len) {
        (Some(off), Some(len))
            if off
                .checked_add(len as u64)
                .is_some_and(|e| e <= region.len()) =>
        {
            region.slice(off, len)
        }
        _ => Err(Error::corruption(
            region.name(),
            run.first.saturating_mul(PAGE),
            format!(
                "page run {}+{} lies outside the region",
                run.first, run.count
            ),
        )),
    }
}

/// What a list's header run says about the list (static header, link
/// words and, for a closed list, the directory).
pub struct HeaderView {
    /// The static header.
    pub header: Header,
    /// Linked count.
    pub linked: u64,
    /// Directory offset (0: not closed).
    pub dir_off: u64,
    /// Node runs named by the link-word slots.
    pub slot_runs: Vec<PageRun>,
}

/// Reads a header run: the static header and its link words.
pub fn read_header(region: &dyn PmRegion, run: PageRun) -> Result<HeaderView> {
    let at = run.first * PAGE;
    let b = run_bytes(region, run)?;
    let header =
        Header::decode(b).map_err(|(o, what)| Error::corruption(region.name(), at + o, what))?;
    let w = LinkWords::at(header.link_offset());
    let linked = region.load_u64(at + w.linked as u64)?;
    let dir_off = region.load_u64(at + w.dir as u64)?;
    let k = region.load_u64(at + w.runs as u64)?;
    if k > format::NODE_RUN_SLOTS as u64 {
        return Err(Error::corruption(
            region.name(),
            at + w.runs as u64,
            format!(
                "skip list header: {k} node runs (at most {})",
                format::NODE_RUN_SLOTS
            ),
        ));
    }
    let mut slot_runs = Vec::with_capacity(k as usize);
    for i in 0..k as usize {
        let off = at + (w.slots + 8 * i) as u64;
        let run = format::unpack_run(region.load_u64(off)?).ok_or_else(|| {
            Error::corruption(region.name(), off, "skip list header: empty node run slot")
        })?;
        slot_runs.push(run);
    }
    Ok(HeaderView {
        header,
        linked,
        dir_off,
        slot_runs,
    })
}

/// Reads the directory at `dir_off`, which must lie in one of `runs`.
pub fn read_directory(region: &dyn PmRegion, dir_off: u64, runs: &[PageRun]) -> Result<Directory> {
    let Some(run) = runs
        .iter()
        .find(|r| dir_off >= r.first * PAGE && dir_off < (r.first + r.count) * PAGE)
    else {
        return Err(Error::corruption(
            region.name(),
            dir_off,
            "skip list directory lies outside the list's own pages",
        ));
    };
    let end = (run.first + run.count) * PAGE;
    let b = region.slice(dir_off, (end - dir_off) as usize)?;
    let d = Directory::decode(b)
        .map_err(|(o, what)| Error::corruption(region.name(), dir_off + o, what))?;
    for r in d.node_runs.iter().chain(d.data.iter().map(|x| &x.run)) {
        let end = r.first.checked_add(r.count).map(|e| e.saturating_mul(PAGE));
        if end.is_none_or(|e| e > region.len()) || r.first == 0 {
            return Err(Error::corruption(
                region.name(),
                dir_off,
                format!(
                    "skip list directory names pages {}+{} outside the region",
                    r.first, r.count
                ),
            ));
        }
    }
    Ok(d)
}

/// Buffers (by first page) whose header and entries this process checked.
pub type Verified = Mutex<HashSet<u64>>;

/// The head node's bytes: the fixed part and `MAX_HEIGHT` links.
const HEAD_BYTES: u64 = (NODE_FIXED + 8 * MAX_HEIGHT) as u64;

/// A list of an inline layout read by place ([`SkipList::read_by_place`]).
///
/// Nodes are read where the layout rule puts them (from each node run's
/// start, back to back, to a run marker or the sentinel), and a node is
/// taken if it checks: inside its run, its entry in a data run with the
/// entry's crc, the height its key hashes to, and a key above the last
/// taken. Only the list's own nodes lie there: a run's bytes past its
/// marker or sentinel (stale pages) are never reached. At a node that does
/// not check, the run is read on from the next 8-byte position holding an
/// *inline* node that checks (its entry directly after its links: a node
/// that names its own place, which stray bytes do not mimic) — unless the
/// damage may be the run's marker (the next run's first node would not
/// have fitted after it), where the rest of the run is stale and skipped.
/// A run marker ends a run only where the layout allows one (from that
/// point on), the sentinel only in the last run: elsewhere either is
/// damage (past damage, bytes of a value). No more than the directory's
/// count is taken, so a damaged sentinel cannot lead into the stale bytes
/// after it when the list lost nothing else.
pub struct ReadByPlace {
    /// The list's header and directory.
    pub list: Arc<SkipList>,
    /// The offsets of the entries taken, in internal-key order.
    pub entries: Vec<u64>,
    /// The damage met, each naming the offset.
    pub problems: Vec<Error>,
}

/// What the layout rule finds at a position ([`SkipList::node_by_place`]).
enum Place {
    Marker,
    Sentinel,
    Node {
        len: u64,
        entry_off: u64,
        /// The entry is inline, directly after the links.
        inline: bool,
        ikey: Vec<u8>,
    },
}

impl SkipList {
    /// Opens and checks the list `meta` describes (module doc).
    /// `verify_data`: check entry checksums (buffers once per process,
    /// tracked in `verified`).
    pub fn open(
        region: Arc<dyn PmRegion>,
        meta: &TableMeta,
        verify_data: bool,
        verified: &Verified,
    ) -> Result<SkipList> {
        Self::open_filtered(region, meta, verify_data, verified, 0)
    }

    /// [`open`](Self::open), with a DRAM bloom filter of `filter_bits`
    /// bits per user key built by the opening walk (0: none).
    pub fn open_filtered(
        region: Arc<dyn PmRegion>,
        meta: &TableMeta,
        verify_data: bool,
        verified: &Verified,
        filter_bits: usize,
    ) -> Result<SkipList> {
        let keys = Some((meta.smallest.as_slice(), meta.largest.as_slice()));
        Self::open_checked(region, meta, keys, verify_data, verified, filter_bits)
    }

    /// [`open`](Self::open) for a list found in the region without a
    /// MANIFEST (`Db::repair`, `design/tlsm/salvage.rs`): `meta` is derived
    /// from the list's own header and directory (id, `pm_pages`, entries,
    /// entry bytes). Every check of `open` is made but the first and last
    /// keys' (only a MANIFEST records them; the walk still checks that the
    /// keys ascend).
    pub fn open_found(
        region: Arc<dyn PmRegion>,
        meta: &TableMeta,
        verify_data: bool,
        verified: &Verified,
    ) -> Result<SkipList> {
        Self::open_checked(region, meta, None, verify_data, verified, 0)
    }

    /// Reads a list of an inline layout (`ps`, `ps_bac`) that
    /// [`open_found`](Self::open_found) refused, by place, for `Db::repair`
    /// (`design/tlsm/salvage.rs`): the entries of every node that checks
    /// where the layout rule puts it — no link, no sentinel crc is needed.
    /// `Err` only if the header or the directory (the node runs) cannot be
    /// read; `meta` as for `open_found` (its counts are not compared: the
    /// linked count is a link word, outside every checksum). See
    /// [`ReadByPlace`] for what a node must be to be taken.
    pub fn read_by_place(region: Arc<dyn PmRegion>, meta: &TableMeta) -> Result<ReadByPlace> {
        let Some(&hrun) = meta.pm_pages.first() else {
            return Err(Error::corruption(
                "MANIFEST",
                0,
                format!("PM skip list {} lists no page runs", meta.id),
            ));
        };
        let hv = read_header(region.as_ref(), hrun)?;
        if !hv.header.layout.inline() {
            return Err(Error::corruption(
                region.name(),
                hrun.first * PAGE + 36,
                format!("skip list {}: not an inline layout", meta.id),
            ));
        }
        let dir = read_directory(region.as_ref(), hv.dir_off, &meta.pm_pages)?;
        let list = SkipList::unwalked(region, meta.id, hv.header, dir);
        let (entries, problems) = list.walk_by_place();
        Ok(ReadByPlace {
            list: Arc::new(list),
            entries,
            problems,
        })
    }

    /// `open`, with the first and last keys checked if `keys` are given.
    fn open_checked(
        region: Arc<dyn PmRegion>,
        meta: &TableMeta,
        keys: Option<(&[u8], &[u8])>,
        verify_data: bool,
        verified: &Verified,
        filter_bits: usize,
    ) -> Result<SkipList> {
        let name = region.name().to_string();
        if meta.tier != Tier::Pm || meta.format != TableFormat::PmSkipList {
            return Err(Error::corruption(
                "MANIFEST",
                0,
                format!("table {} is not a PM skip list", meta.id),
            ));
        }
        let Some(&hrun) = meta.pm_pages.first() else {
            return Err(Error::corruption(
                "MANIFEST",
                0,
                format!("PM skip list {} lists no page runs", meta.id),
            ));
        };
        let at = hrun.first * PAGE;
        let hv = read_header(region.as_ref(), hrun)?;
        if hv.header.id != meta.id {
            return Err(Error::corruption(
                &name,
                at + 16,
                format!(
                    "skip list header names list {} where the MANIFEST has {}",
                    hv.header.id, meta.id
                ),
            ));
        }
        let w = LinkWords::at(hv.header.link_offset());
        if hv.dir_off == 0 {
            return Err(Error::corruption(
                &name,
                at + w.dir as u64,
                format!("skip list {} has no null sentinel: the MANIFEST lists a list that was never closed", meta.id),
            ));
        }
        let dir = read_directory(region.as_ref(), hv.dir_off, &meta.pm_pages)?;
        if dir.entries != hv.linked
            || dir.entries != meta.entries
            || dir.entry_bytes != meta.size_bytes
        {
            return Err(Error::corruption(
                &name,
                hv.dir_off,
                format!(
                    "skip list {}: directory has {} entries ({} bytes), linked count {}, MANIFEST {} entries ({} bytes)",
                    meta.id, dir.entries, dir.entry_bytes, hv.linked, meta.entries, meta.size_bytes
                ),
            ));
        }
        let mut l = SkipList::unwalked(region, meta.id, hv.header, dir);
        l.check_buffers(verify_data, verified)?;
        let mut filter = BloomBuilder::new(filter_bits);
        l.sentinel = l.walk(keys, verify_data, &mut filter)?;
        if filter_bits > 0 {
            l.filter = BloomFilter::new(filter.finish());
        }
        Ok(l)
    }

    /// The reader of a list this process has just written and closed,
    /// from what its builder recorded — header, directory, sentinel and the
    /// bloom filter of its user keys — instead of the opening walk (which
    /// would read back every node and entry key the builder has just
    /// written; without it a `tlsm10` fill runs 1.1-1.24x faster, README
    /// "TLSM").
    /// RocksDB and LevelDB open a table they have just written the same
    /// way, without reading its every block (RocksDB's
    /// `paranoid_file_checks`, off by default, is
    /// `TlsmOptions::check_outputs` here). After a restart every list is
    /// walked before its first use.
    pub(super) fn from_builder(
        region: Arc<dyn PmRegion>,
        id: u64,
        header: Header,
        dir: Directory,
        sentinel: u64,
        filter: &mut BloomBuilder,
    ) -> SkipList {
        let mut l = SkipList::unwalked(region, id, header, dir);
        l.sentinel = sentinel;
        if filter.bits_per_key() > 0 {
            l.filter = BloomFilter::new(filter.finish());
        }
        l
    }

    /// The list its header and directory describe, before any walk (its
    /// sentinel not yet known).
    fn unwalked(region: Arc<dyn PmRegion>, id: u64, header: Header, dir: Directory) -> SkipList {
        SkipList {
            head: dir.node_runs[0].first * PAGE,
            sentinel: 0,
            region,
            id,
            header,
            dir,
            filter: None,
        }
    }

    /// Checks the buffers of a full-variant list.
    fn check_buffers(&self, verify_data: bool, verified: &Verified) -> Result<()> {
        if self.header.layout.inline() {
            return Ok(());
        }
        for d in &self.dir.data {
            if verified.lock().contains(&d.run.first) {
                continue;
            }
            let b = run_bytes(self.region.as_ref(), d.run)?;
            let at = d.run.first * PAGE;
            let h = format::decode_buffer_header(b)
                .map_err(|(o, what)| Error::corruption(self.region.name(), at + o, what))?;
            let end = (BUFFER_HEADER_BYTES as u64).saturating_add(h.entry_bytes);
            if end > b.len() as u64 {
                return Err(Error::corruption(
                    self.region.name(),
                    at + 24,
                    format!(
                        "persistent buffer: {} entry bytes overrun its {} pages",
                        h.entry_bytes, d.run.count
                    ),
                ));
            }
            if verify_data
                && crate::coding::crc32c(&b[BUFFER_HEADER_BYTES..end as usize]) != h.entries_crc
            {
                return Err(Error::corruption(
                    self.region.name(),
                    at + BUFFER_HEADER_BYTES as u64,
                    "persistent buffer: entries checksum mismatch",
                ));
            }
            verified.lock().insert(d.run.first);
        }
        Ok(())
    }

    /// The data run holding `entry_off`, and where its entries end.
    fn data_run_of(&self, entry_off: u64) -> Option<(PageRun, u64)> {
        let page = entry_off / PAGE;
        let i = self.dir.data.partition_point(|d| d.run.first <= page);
        let d = self.dir.data.get(i.checked_sub(1)?)?;
        let start = d.run.first * PAGE;
        let end = start + d.run.count * PAGE;
        if entry_off >= end {
            return None;
        }
        if self.header.layout.inline() {
            return Some((d.run, end));
        }
        // A buffer: entries between its header and its entry bytes.
        let eb = self.region.slice(start + 24, 8).ok()?;
        let n = u64::from_le_bytes(eb.try_into().ok()?);
        let lo = start + BUFFER_HEADER_BYTES as u64;
        let hi = lo.checked_add(n)?.min(end);
        (entry_off >= lo && entry_off < hi).then_some((d.run, hi))
    }

    /// Walks every node from the head (module doc); returns the sentinel's
    /// offset. `keys`: the first and last internal keys the list must have;
    /// `filter` is given every user key.
    fn walk(
        &self,
        keys: Option<(&[u8], &[u8])>,
        verify_data: bool,
        filter: &mut BloomBuilder,
    ) -> Result<u64> {
        let name = self.region.name();
        let bad = |off: u64, what: String| {
            Error::corruption(name, off, format!("skip list {}: {what}", self.id))
        };
        let runs = &self.dir.node_runs;
        let mut ri = 0usize;
        let run_end = |ri: usize| (runs[ri].first + runs[ri].count) * PAGE;
        let mut crc = 0u32;
        let mut pos = self.head;
        let head = self.node_bytes(pos, run_end(0))?;
        let h = node_head(head).ok_or_else(|| bad(pos, "truncated head".into()))?;
        if h.entry_off != HEAD_MARK || h.height as usize != MAX_HEIGHT {
            return Err(bad(pos, "bad head node".into()));
        }
        crc = crate::coding::crc32c_append(crc, head);
        // `tall[l]`: the last node so far of height > l (invariant 2).
        let mut tall = [pos; MAX_HEIGHT];
        let mut prev = pos;
        pos += head.len() as u64;
        let mut last_key: Vec<u8> = Vec::new();
        let mut n = 0u64;
        loop {
            if pos + NODE_FIXED as u64 > run_end(ri) {
                return Err(bad(
                    pos,
                    "node run ends without a sentinel or run marker".into(),
                ));
            }
            let fixed = self.region.slice(pos, NODE_FIXED)?;
            let nh = node_head(fixed).ok_or_else(|| bad(pos, "truncated node".into()))?;
            if nh.entry_off == 0 && nh.height == MARKER_HEIGHT {
                crc = crate::coding::crc32c_append(crc, fixed);
                ri += 1;
                let Some(r) = runs.get(ri) else {
                    return Err(bad(pos, "run marker after the last node run".into()));
                };
                pos = r.first * PAGE;
                continue;
            }
            let link = self.next(prev, 0)?;
            if link != pos {
                return Err(bad(
                    prev + NODE_FIXED as u64,
                    format!("level-0 link {link} where the next node is at {pos}"),
                ));
            }
            if nh.entry_off == 0 {
                if nh.height != 0 {
                    return Err(bad(pos, "bad sentinel".into()));
                }
                if n != self.dir.entries {
                    return Err(bad(
                        pos,
                        format!("sentinel after {n} of {} entries", self.dir.entries),
                    ));
                }
                if nh.crc != crc {
                    return Err(bad(pos + 12, "node checksum mismatch".into()));
                }
                if n > 0 && keys.is_some_and(|(_, largest)| last_key != largest) {
                    return Err(bad(pos, "last key differs from the MANIFEST's".into()));
                }
                for (l, &t) in tall.iter().enumerate().skip(1) {
                    let link = self.next(t, l)?;
                    if link != 0 {
                        return Err(bad(
                            t + (NODE_FIXED + 8 * l) as u64,
                            format!("level-{l} link {link} after the last node taller than {l}"),
                        ));
                    }
                }
                return Ok(pos);
            }
            if n >= self.dir.entries {
                return Err(bad(
                    pos,
                    format!("more than {} nodes before the sentinel", self.dir.entries),
                ));
            }
            let node = self.node_bytes(pos, run_end(ri))?;
            let (_, hi) = self.data_run_of(nh.entry_off).ok_or_else(|| {
                bad(
                    pos,
                    format!("entry offset {} outside the list's data runs", nh.entry_off),
                )
            })?;
            let (ikey, _) = self
                .entry_within(nh.entry_off, hi, verify_data)
                .map_err(|_| {
                    bad(
                        nh.entry_off,
                        "entry malformed or overrunning its run".into(),
                    )
                })?;
            let Some(parsed) = key::parse_internal_key(ikey) else {
                return Err(bad(nh.entry_off, "malformed internal key".into()));
            };
            filter.add_key(parsed.user_key);
            if n == 0 {
                if keys.is_some_and(|(smallest, _)| ikey != smallest) {
                    return Err(bad(
                        nh.entry_off,
                        "first key differs from the MANIFEST's".into(),
                    ));
                }
            } else if compare_internal(&last_key, ikey) != Ordering::Less {
                return Err(bad(pos, "keys out of order".into()));
            }
            // The upper links: searches follow them, so a link that skips
            // a node or leads back would misdirect (or never end) a lookup.
            for (l, t) in tall.iter_mut().enumerate().take(nh.height as usize).skip(1) {
                let link = self.next(*t, l)?;
                if link != pos {
                    return Err(bad(
                        *t + (NODE_FIXED + 8 * l) as u64,
                        format!(
                            "level-{l} link {link} where the next node taller than {l} is at {pos}"
                        ),
                    ));
                }
                *t = pos;
            }
            last_key.clear();
            last_key.extend_from_slice(ikey);
            crc = crate::coding::crc32c_append(crc, node);
            n += 1;
            prev = pos;
            pos += node.len() as u64;
        }
    }

    /// The bytes of the node at `pos` (fixed part, links and any inline
    /// entry), which must end before `run_end` leaves room for a sentinel.
    fn node_bytes(&self, pos: u64, run_end: u64) -> Result<&[u8]> {
        let fixed = self.region.slice(pos, NODE_FIXED)?;
        let nh = node_head(fixed)
            .ok_or_else(|| Error::corruption(self.region.name(), pos, "truncated node"))?;
        let h = nh.height as usize;
        if nh.entry_off != HEAD_MARK && !(1..=MAX_HEIGHT).contains(&h) {
            return Err(Error::corruption(
                self.region.name(),
                pos + 8,
                format!("skip list {}: node height {h}", self.id),
            ));
        }
        let base = (NODE_FIXED + 8 * h) as u64;
        let mut len = base;
        if self.header.layout.inline() && nh.entry_off == pos + base {
            let probe = self.region.slice(
                pos + base + 4,
                (ENTRY_PROBE as u64).min(run_end.saturating_sub(pos + base + 4)) as usize,
            )?;
            let s = entry_prefix_len(probe).ok_or_else(|| {
                Error::corruption(
                    self.region.name(),
                    pos + base,
                    format!("skip list {}: malformed inline entry", self.id),
                )
            })?;
            len += format::align8(4 + s) as u64;
        }
        if pos + len + NODE_FIXED as u64 > run_end {
            return Err(Error::corruption(
                self.region.name(),
                pos,
                format!("skip list {}: node overruns its run", self.id),
            ));
        }
        self.region.slice(pos, len as usize)
    }

    /// [`read_by_place`](Self::read_by_place)'s walk: the entry offsets
    /// taken, in key order, and the damage met.
    fn walk_by_place(&self) -> (Vec<u64>, Vec<Error>) {
        let name = self.region.name();
        let bad = |off: u64, what: String| {
            Error::corruption(name, off, format!("skip list {}: {what}", self.id))
        };
        let runs = &self.dir.node_runs;
        let (mut taken, mut problems) = (Vec::new(), Vec::new());
        let mut last: Vec<u8> = Vec::new();
        'runs: for (ri, r) in runs.iter().enumerate() {
            let start = r.first * PAGE;
            let end = start + r.count * PAGE;
            // The head starts run 0; links are all it holds.
            let mut pos = start + if ri == 0 { HEAD_BYTES } else { 0 };
            // Where a run marker could be: the next run's first node did
            // not fit after it (the layout rule). Unknown: anywhere.
            let marker_from = runs.get(ri + 1).map(|n| {
                let at = n.first * PAGE;
                let size = self
                    .node_by_place(at, at + n.count * PAGE)
                    .ok()
                    .and_then(|p| match p {
                        Place::Node { len, .. } => Some(len),
                        _ => None,
                    });
                size.map_or(start, |len| end.saturating_sub(len + NODE_FIXED as u64))
            });
            let last_run = ri + 1 == runs.len();
            let mut damaged: Option<u64> = None;
            while pos + NODE_FIXED as u64 <= end {
                if taken.len() as u64 >= self.dir.entries {
                    break 'runs;
                }
                let place = self.node_by_place(pos, end).and_then(|p| match p {
                    Place::Node { ref ikey, .. }
                        if !last.is_empty() && compare_internal(&last, ikey) != Ordering::Less =>
                    {
                        Err(bad(pos, "keys out of order".into()))
                    }
                    Place::Node { inline: false, .. } if damaged.is_some() => Err(bad(
                        pos,
                        "a pointer node cannot start a read past damage".into(),
                    )),
                    // A run end where the layout puts none is damage (or,
                    // past damage, bytes of a value).
                    Place::Marker if last_run || marker_from.is_some_and(|m| pos < m) => {
                        Err(bad(pos, "a run marker where the layout puts none".into()))
                    }
                    Place::Sentinel if !last_run => {
                        Err(bad(pos, "a sentinel before the last node run".into()))
                    }
                    p => Ok(p),
                });
                if matches!(place, Ok(Place::Marker | Place::Sentinel)) {
                    if let Some(d) = damaged.take() {
                        problems.push(bad(
                            d,
                            format!("bytes {d}..{pos} hold no node that checks: skipped"),
                        ));
                    }
                }
                match place {
                    Ok(Place::Marker) => continue 'runs,
                    Ok(Place::Sentinel) => break 'runs,
                    Ok(Place::Node {
                        len,
                        entry_off,
                        ikey,
                        ..
                    }) => {
                        if let Some(d) = damaged.take() {
                            problems.push(bad(
                                d,
                                format!("bytes {d}..{pos} hold no node that checks: skipped"),
                            ));
                        }
                        taken.push(entry_off);
                        last = ikey;
                        pos += len;
                    }
                    Err(_) if damaged.is_some() => pos += 8,
                    Err(e) => {
                        // The run's marker may be what is damaged: the
                        // bytes after it are stale, never read past.
                        if marker_from.is_some_and(|m| pos >= m) {
                            problems.push(e);
                            problems.push(bad(
                                pos,
                                format!("the rest of node run {ri} is not read: its run marker may be here"),
                            ));
                            continue 'runs;
                        }
                        problems.push(e);
                        damaged = Some(pos);
                        pos += 8;
                    }
                }
            }
            problems.push(match damaged {
                Some(d) => bad(
                    d,
                    format!("bytes {d}..{end} hold no node that checks: skipped"),
                ),
                None => bad(pos, "node run ends without a sentinel or run marker".into()),
            });
        }
        if (taken.len() as u64) < self.dir.entries {
            problems.push(bad(
                self.head,
                format!(
                    "{} of {} entries read by place",
                    taken.len(),
                    self.dir.entries
                ),
            ));
        }
        (taken, problems)
    }

    /// What the layout rule finds at `pos` in a node run ending at `end`,
    /// checked as [`walk_by_place`](Self::walk_by_place) needs: a node must
    /// be inside its run, its entry inside a data run with its crc
    /// verified, an internal key, and the height the key hashes to.
    fn node_by_place(&self, pos: u64, end: u64) -> Result<Place> {
        let fixed = self.region.slice(pos, NODE_FIXED)?;
        let nh = node_head(fixed)
            .ok_or_else(|| Error::corruption(self.region.name(), pos, "truncated node"))?;
        let bad = |off: u64, what: String| {
            Error::corruption(
                self.region.name(),
                off,
                format!("skip list {}: {what}", self.id),
            )
        };
        match (nh.entry_off, nh.height) {
            (0, MARKER_HEIGHT) => return Ok(Place::Marker),
            (0, 0) => return Ok(Place::Sentinel),
            (0, _) | (HEAD_MARK, _) => return Err(bad(pos, "not a node".into())),
            _ => {}
        }
        let len = self.node_bytes(pos, end)?.len() as u64;
        let (_, hi) = self.data_run_of(nh.entry_off).ok_or_else(|| {
            bad(
                pos,
                format!("entry offset {} outside the data runs", nh.entry_off),
            )
        })?;
        let (ikey, _) = self.entry_within(nh.entry_off, hi, true)?;
        if key::parse_internal_key(ikey).is_none() {
            return Err(bad(nh.entry_off, "malformed internal key".into()));
        }
        let h = nh.height as usize;
        if format::height_of(ikey) != h {
            return Err(bad(
                pos + 8,
                format!(
                    "height {h}, not the {} its key hashes to",
                    format::height_of(ikey)
                ),
            ));
        }
        Ok(Place::Node {
            len,
            entry_off: nh.entry_off,
            inline: nh.entry_off == pos + (NODE_FIXED + 8 * h) as u64,
            ikey: ikey.to_vec(),
        })
    }

    /// Where the entry at `off` inside `[off, hi)` keeps its internal key
    /// and value; with `verify`, an inline entry's crc is checked.
    fn locate(&self, off: u64, hi: u64, verify: bool) -> Result<EntryLoc> {
        let skip = if self.header.layout.inline() { 4 } else { 0 };
        let body = off + skip;
        let avail = hi.saturating_sub(body);
        let probe = self
            .region
            .slice(body, (ENTRY_PROBE as u64).min(avail) as usize)?;
        // One read of the lengths: `probe` holds both varints.
        let s = format::entry_shape_from_prefix(probe)
            .ok_or_else(|| Error::corruption(self.region.name(), off, "malformed entry"))?;
        if s.len as u64 > avail {
            return Err(Error::corruption(
                self.region.name(),
                off,
                "entry overruns its run",
            ));
        }
        if verify && skip == 4 {
            let b = self.region.slice(body, s.len)?;
            let c = self.region.slice(off, 4)?;
            if u32::from_le_bytes([c[0], c[1], c[2], c[3]]) != crate::coding::crc32c(b) {
                return Err(Error::corruption(
                    self.region.name(),
                    off,
                    "inline entry checksum mismatch",
                ));
            }
        }
        Ok(EntryLoc {
            key: (body + s.key_at as u64, s.key_len),
            value: (body + s.value_at as u64, s.value_len),
        })
    }

    /// The entry at `off` inside `[off, hi)`: its internal key and value.
    fn entry_within(&self, off: u64, hi: u64, verify: bool) -> Result<(&[u8], &[u8])> {
        let l = self.locate(off, hi, verify)?;
        Ok((
            self.region.slice(l.key.0, l.key.1)?,
            self.region.slice(l.value.0, l.value.1)?,
        ))
    }

    /// The entry at `off` (checked at open): internal key and value.
    #[inline]
    pub fn entry(&self, off: u64) -> Result<(&[u8], &[u8])> {
        self.entry_within(off, self.region.len(), false)
    }

    /// Bytes the entry at `off` takes (crc of an inline entry included).
    pub fn entry_len(&self, off: u64) -> Result<u64> {
        let (k, v) = self.entry(off)?;
        Ok(if self.header.layout.inline() {
            format::inline_len(k.len(), v.len())
        } else {
            format::entry_len(k.len(), v.len())
        } as u64)
    }

    /// `next[level]` of the node at `node`.
    #[inline]
    pub fn next(&self, node: u64, level: usize) -> Result<u64> {
        let b = self
            .region
            .slice(node + (NODE_FIXED + 8 * level) as u64, 8)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    /// `entry_off` of the node at `node`.
    #[inline]
    pub fn entry_off(&self, node: u64) -> Result<u64> {
        let b = self.region.slice(node, 8)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    fn is_end(&self, node: u64) -> bool {
        node == 0 || node == self.sentinel
    }

    fn key_at(&self, node: u64) -> Result<&[u8]> {
        Ok(self.entry(self.entry_off(node)?)?.0)
    }

    /// The first node whose key is `>= target` (the sentinel if none).
    pub fn seek_node(&self, target: &[u8]) -> Result<u64> {
        let mut x = self.head;
        let mut level = MAX_HEIGHT - 1;
        let mut skip: u64 = 0; // a node already known to be >= target
        loop {
            let next = self.next(x, level)?;
            if !self.is_end(next)
                && next != skip
                && compare_internal(self.key_at(next)?, target) == Ordering::Less
            {
                x = next;
                continue;
            }
            if level == 0 {
                return Ok(if next == 0 { self.sentinel } else { next });
            }
            skip = next;
            level -= 1;
        }
    }

    /// The last node whose key is `< target` (the head if none).
    pub fn find_less_than(&self, target: &[u8]) -> Result<u64> {
        let mut x = self.head;
        let mut level = MAX_HEIGHT - 1;
        loop {
            let next = self.next(x, level)?;
            if !self.is_end(next) && compare_internal(self.key_at(next)?, target) == Ordering::Less
            {
                x = next;
                continue;
            }
            if level == 0 {
                return Ok(x);
            }
            level -= 1;
        }
    }

    /// The last node (the head if the list is empty).
    pub fn find_last(&self) -> Result<u64> {
        let mut x = self.head;
        let mut level = MAX_HEIGHT - 1;
        loop {
            let next = self.next(x, level)?;
            if !self.is_end(next) {
                x = next;
                continue;
            }
            if level == 0 {
                return Ok(x);
            }
            level -= 1;
        }
    }

    /// DRAM the list's bloom filter takes.
    pub fn dram_filter_bytes(&self) -> u64 {
        self.filter.as_ref().map_or(0, |f| f.size_bytes() as u64)
    }

    /// True if this reader holds what the opening walk finds in `walked`,
    /// the same list opened by [`open_filtered`](Self::open_filtered) with
    /// the same filter bits: head, sentinel, header, directory and filter.
    /// Tests and the fuzz target hold every builder's reader
    /// ([`from_builder`](Self::from_builder)) to it.
    pub fn same_as_walked(&self, walked: &SkipList) -> bool {
        self.id == walked.id
            && self.head == walked.head
            && self.sentinel == walked.sentinel
            && self.header == walked.header
            && self.dir == walked.dir
            && self.filter == walked.filter
    }

    /// The list id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The static header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The directory.
    pub fn directory(&self) -> &Directory {
        &self.dir
    }

    /// Offset of the head node.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Offset of the sentinel.
    pub fn sentinel(&self) -> u64 {
        self.sentinel
    }

    /// The data run holding `entry_off` (checked against the buffer's
    /// entry bytes).
    pub fn data_run(&self, entry_off: u64) -> Option<PageRun> {
        self.data_run_of(entry_off).map(|(r, _)| r)
    }

    /// The data run holding `entry_off` of a node of this (opened) list:
    /// a binary search of the directory, nothing read from PM.
    #[inline]
    pub fn data_run_fast(&self, entry_off: u64) -> Option<PageRun> {
        let page = entry_off / PAGE;
        let i = self.dir.data.partition_point(|d| d.run.first <= page);
        let d = self.dir.data.get(i.checked_sub(1)?)?;
        (page < d.run.first + d.run.count).then_some(d.run)
    }

    /// True if entries are stored inline in nodes (PS variants).
    pub fn inline(&self) -> bool {
        self.header.layout.inline()
    }

    /// The region.
    pub fn region(&self) -> &Arc<dyn PmRegion> {
        &self.region
    }

    /// Entries.
    pub fn len(&self) -> u64 {
        self.dir.entries
    }

    /// True if the list holds no entry.
    pub fn is_empty(&self) -> bool {
        self.dir.entries == 0
    }

    /// An iterator over the list.
    pub fn iter_list(self: &Arc<Self>) -> ListIter {
        ListIter {
            list: Arc::clone(self),
            node: 0,
            entry_off: 0,
            key: (0, 0),
            value: (0, 0),
            err: None,
        }
    }
}

/// Where an entry's internal key and value lie: (region offset, length).
#[derive(Debug, Clone, Copy)]
struct EntryLoc {
    key: (u64, usize),
    value: (u64, usize),
}

/// Length of the entry whose varints start `b` (whole entry, no crc).
pub(super) fn entry_prefix_len(b: &[u8]) -> Option<usize> {
    format::entry_shape_from_prefix(b).map(|s| s.len)
}

impl TableReader for SkipList {
    fn get(&self, user_key: &[u8], seq: SeqNo) -> Result<Option<Found>> {
        if self
            .filter
            .as_ref()
            .is_some_and(|f| !f.may_contain(user_key))
        {
            return Ok(None);
        }
        let target = key::seek_key(user_key, seq);
        let node = self.seek_node(&target)?;
        if self.is_end(node) {
            return Ok(None);
        }
        let (ikey, value) = self.entry(self.entry_off(node)?)?;
        let p = key::parse_internal_key(ikey)
            .ok_or_else(|| Error::corruption(self.region.name(), node, "malformed internal key"))?;
        if p.user_key != user_key {
            return Ok(None);
        }
        Ok(Some(Found {
            seq: p.seq,
            kind: p.kind,
            value: match p.kind {
                Kind::Put => value.to_vec(),
                Kind::Delete => Vec::new(),
            },
        }))
    }

    fn iter(self: Arc<Self>, _fill_cache: bool) -> Box<dyn InternalIterator> {
        Box::new(self.iter_list())
    }
}

/// An iterator over one list (`node == 0`: not valid).
pub struct ListIter {
    list: Arc<SkipList>,
    node: u64,
    entry_off: u64,
    key: (u64, usize),
    value: (u64, usize),
    err: Option<Error>,
}

impl ListIter {
    fn set(&mut self, node: Result<u64>) {
        let node = match node {
            Ok(n) => n,
            Err(e) => {
                self.fail(e);
                return;
            }
        };
        if self.list.is_end(node) || node == self.list.head {
            self.node = 0;
            return;
        }
        let r = (|| -> Result<()> {
            let off = self.list.entry_off(node)?;
            let l = self.list.locate(off, self.list.region.len(), false)?;
            self.key = l.key;
            self.value = l.value;
            self.entry_off = off;
            Ok(())
        })();
        match r {
            Ok(()) => self.node = node,
            Err(e) => self.fail(e),
        }
    }

    fn fail(&mut self, e: Error) {
        self.err.get_or_insert(e);
        self.node = 0;
    }

    /// Region offset of the current entry. REQUIRES: valid.
    pub fn entry_off(&self) -> u64 {
        self.entry_off
    }

    /// The list.
    pub fn list(&self) -> &Arc<SkipList> {
        &self.list
    }
}

impl InternalIterator for ListIter {
    fn valid(&self) -> bool {
        self.node != 0
    }
    fn seek_to_first(&mut self) {
        let n = self.list.next(self.list.head, 0);
        self.set(n);
    }
    fn seek_to_last(&mut self) {
        let n = self.list.find_last();
        self.set(n);
    }
    fn seek(&mut self, target: &[u8]) {
        let n = self.list.seek_node(target);
        self.set(n);
    }
    fn next(&mut self) {
        if self.node == 0 {
            return;
        }
        let n = self.list.next(self.node, 0);
        self.set(n);
    }
    fn prev(&mut self) {
        if self.node == 0 {
            return;
        }
        let target = self.key().to_vec();
        let n = self.list.find_less_than(&target);
        self.set(n);
    }
    fn key(&self) -> &[u8] {
        self.list
            .region
            .slice(self.key.0, self.key.1)
            .unwrap_or(&[])
    }
    fn value(&self) -> &[u8] {
        self.list
            .region
            .slice(self.value.0, self.value.1)
            .unwrap_or(&[])
    }
    fn status(&self) -> Result<()> {
        match &self.err {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

/// Open lists by id, shared by table handles, pickers and jobs, so a list
/// is checked once per process.
pub struct ListCache {
    region: Arc<dyn PmRegion>,
    verify_data: bool,
    filter_bits: usize,
    /// Open the lists this process writes by the full walk too
    /// (`TlsmOptions::check_outputs`) instead of adopting their builders'
    /// readers.
    check_outputs: bool,
    open: Mutex<std::collections::HashMap<u64, Arc<SkipList>>>,
    verified: Verified,
}

impl ListCache {
    /// A cache over `region`; lists get DRAM bloom filters of
    /// `filter_bits` bits per user key (0: none).
    pub fn new(region: Arc<dyn PmRegion>, verify_data: bool, filter_bits: usize) -> ListCache {
        ListCache {
            region,
            verify_data,
            filter_bits,
            check_outputs: true,
            open: Mutex::new(Default::default()),
            verified: Mutex::new(HashSet::new()),
        }
    }

    /// The reader of the list `meta` describes.
    pub fn get(&self, meta: &TableMeta) -> Result<Arc<SkipList>> {
        if let Some(l) = self.open.lock().get(&meta.id) {
            return Ok(Arc::clone(l));
        }
        let l = Arc::new(SkipList::open_filtered(
            Arc::clone(&self.region),
            meta,
            self.verify_data,
            &self.verified,
            self.filter_bits,
        )?);
        Ok(Arc::clone(self.open.lock().entry(meta.id).or_insert(l)))
    }

    /// Whether the lists this process writes are opened by the full walk
    /// (`true`, the default of a bare cache) or adopted from their
    /// builders ([`adopt`](Self::adopt)).
    pub fn with_check_outputs(mut self, check: bool) -> ListCache {
        self.check_outputs = check;
        self
    }

    /// Bits per user key a builder gives its reader's filter: the lists'
    /// (0: none), or 0 when the cache walks what this process writes
    /// (`check_outputs`), whose walk builds the filter the reader keeps.
    pub fn builder_filter_bits(&self) -> usize {
        if self.check_outputs {
            0
        } else {
            self.filter_bits
        }
    }

    /// The reader of the list `meta` describes, which this process has just
    /// written: `built` (its builder's reader,
    /// [`SkipList::from_builder`]) unless the cache checks outputs or has
    /// none, then [`get`](Self::get)'s walk.
    pub fn adopt(&self, meta: &TableMeta, built: Option<SkipList>) -> Result<Arc<SkipList>> {
        match built {
            Some(l) if !self.check_outputs && l.id == meta.id => Ok(Arc::clone(
                self.open.lock().entry(meta.id).or_insert(Arc::new(l)),
            )),
            _ => self.get(meta),
        }
    }

    /// DRAM the open lists' bloom filters take
    /// (`tlsm.dram_filter_bytes` in `tierkv.design-stats`).
    pub fn dram_filter_bytes(&self) -> u64 {
        self.open
            .lock()
            .values()
            .map(|l| l.dram_filter_bytes())
            .sum()
    }

    /// Marks a buffer this process wrote as checked.
    pub fn verified_buffer(&self, first_page: u64) {
        self.verified.lock().insert(first_page);
    }

    /// Forgets list `id` (released) and, if given, freed buffers.
    pub fn forget(&self, id: u64, freed: &[PageRun]) {
        self.open.lock().remove(&id);
        if !freed.is_empty() {
            let mut v = self.verified.lock();
            for r in freed {
                v.remove(&r.first);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::storage::sim::SimRegion;

    /// A directory naming a node run whose end overflows is corruption
    /// (seen reading the decoders for fuzz/fuzz_targets/tlsm.rs: the sum
    /// wrapped — a panic where overflow is checked; where it is not, a run
    /// ending past page 2^64 passed the region check).
    #[test]
    fn directory_runs_past_u64_max_are_corruption() {
        let region = SimRegion::new(8 * 4096);
        for first in [u64::MAX, u64::MAX - 2] {
            let d = Directory {
                entries: 0,
                entry_bytes: 0,
                node_runs: vec![PageRun { first, count: 3 }],
                data: Vec::new(),
            };
            region.write(4096, &d.encode()).unwrap();
            let e = read_directory(&region, 4096, &[PageRun { first: 1, count: 1 }]).unwrap_err();
            assert!(e.is_corruption(), "{e}");
        }
    }
}
