//! A completed NVTable (NV-Cache §III-B): nodes in segments, found through
//! a sorted offset array. Readers use the array only — never a link word —
//! so lookups stay correct while a compaction relinks the same nodes for
//! another table, and after a crash in the middle of a relink.
//!
//! Byte layout: `format.rs` and docs/format/pm.md ("NVTable").
//!
//! # What `open` checks
//!
//! The array run lies in the region; its magic, version, header and body
//! checksums; that its id, seqnos and entry count are the MANIFEST's; that
//! its usage entries are the table's `pm_pages` after the array run; and
//! that every offset is 8-aligned inside one of those segments, past the
//! segment header. Each node is checked when it is read: inside its
//! segment, its lengths and kind, its key checksum, and the value checksum
//! of every value returned (`Options::verify_checksums`). Any failure is
//! `Error::Corruption` naming the region, the byte offset and the
//! structure.
//!
//! A checksum is checked once per open table, as an SST block's is once,
//! on its way into the block cache: building the search index checks
//! every node's key checksum, after which node reads check bounds and
//! lengths only; each value's checksum is checked the first time the
//! table returns it (a bit per entry, [`NvTable::values_checked`]). This
//! is sound because the bytes checked are never written while a version
//! lists the table ("Concurrency"); a reopen opens the table anew and
//! checks again. In a profile of YCSB-E (scans of 1000-byte values) the
//! checksums of every entry walked were 11% of the samples.
//!
//! # Concurrency
//!
//! An [`NvTable`] is immutable and shared by any number of readers. The
//! bytes it reads (array run, node bodies) are never written while a
//! version lists the table; only link words (outside what it reads) are.
//!
//! # Invariants
//!
//! 1. Offsets are in strictly increasing internal-key order.
//! 2. Every node lies inside a segment of the table's usage list, and
//!    `usage.live_bytes` is the sum of the sizes of its nodes there.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::format::{
    self, encode_table, node_size, read_table_header, Node, TableHeader, Usage, TABLE_HEADER_BYTES,
    USAGE_BYTES,
};
use super::log::Space;
use crate::error::{Error, Result};
use crate::iter::{Found, InternalIterator, TableReader};
use crate::key::{self, Kind, SeqNo};
use crate::sst::bloom::{BloomBuilder, BloomFilter};
use crate::stats::Tier;
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};
use crate::storage::PmRegion;
use crate::version::edit::{TableFormat, TableMeta};

const PAGE: u64 = PAGE_SIZE_BYTES;

/// A completed NVTable opened for reading.
pub struct NvTable {
    region: Arc<dyn PmRegion>,
    id: u64,
    seq_min: SeqNo,
    seq_max: SeqNo,
    n: usize,
    offsets_at: u64,
    /// By first page (invariant 2).
    usage: Vec<Usage>,
    verify: bool,
    /// The DRAM search index, built on the first lookup. Once it is
    /// built, every node's key checksum has been checked.
    index: OnceLock<SearchIndex>,
    /// One bit per entry: its value's checksum has been checked (module
    /// doc, "What `open` checks").
    values_checked: Box<[AtomicU64]>,
}

/// A DRAM index over a table's keys (not part of the PM format): for each
/// entry, 8 bytes of its user key after the prefix every key of the table
/// shares, as a big-endian number. Entries whose numbers differ are
/// ordered by them, so a lookup narrows its binary search in DRAM and
/// reads PM only for the entries that tie — typically one or two nodes
/// instead of log2(n). Built from nodes whose key checksums were checked.
///
/// Beside it a bloom filter over the table's user keys
/// ([`FILTER_BITS_PER_KEY`]), as an SST has one: a point lookup that
/// misses the table is answered by the filter (a hash and a few bit
/// probes) instead of two binary searches of `keys` — at `medium` those
/// searches were 17% of a quiesced YCSB-C's CPU samples with two L0
/// NVTables of 16 K entries each to probe.
#[derive(Debug)]
struct SearchIndex {
    /// The user-key prefix every entry shares.
    common: Vec<u8>,
    keys: Box<[u64]>,
    /// `None` for an empty table.
    filter: Option<BloomFilter>,
}

/// Bits per user key of an NVTable's DRAM bloom filter: the SSTs' default
/// `bloom_bits_per_key` (about 0.8% false positives), 1.25 bytes per
/// entry beside the index's 8.
const FILTER_BITS_PER_KEY: usize = 10;

/// 8 bytes of `k` from `at` on, zero padded, as a big-endian number.
#[inline]
fn key_number(k: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    if at < k.len() {
        let n = (k.len() - at).min(8);
        b[..n].copy_from_slice(&k[at..at + n]);
    }
    u64::from_be_bytes(b)
}

impl std::fmt::Debug for NvTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvTable")
            .field("id", &self.id)
            .field("entries", &self.n)
            .field("seq", &(self.seq_min..=self.seq_max))
            .field("segments", &self.usage.len())
            .finish()
    }
}

/// Compares a node with a probe `(user key, tag)` in internal-key order.
#[inline]
fn cmp_node(node_key: &[u8], node_tag: u64, key: &[u8], tag: u64) -> Ordering {
    node_key.cmp(key).then(tag.cmp(&node_tag))
}

impl NvTable {
    /// Opens the table `meta` describes (module doc, "What `open` checks").
    pub fn open(region: Arc<dyn PmRegion>, meta: &TableMeta, verify: bool) -> Result<NvTable> {
        let name = region.name().to_string();
        let Some(&array) = meta.pm_pages.first() else {
            return Err(Error::corruption(
                "MANIFEST",
                0,
                format!("NVTable {} lists no PM pages", meta.id),
            ));
        };
        let at = array.first.saturating_mul(PAGE);
        let h = read_table_header(region.as_ref(), array)?;
        let bad = |off: u64, what: String| {
            Error::corruption(
                name.clone(),
                off,
                format!("NVTable {} (array at {at}): {what}", meta.id),
            )
        };
        if (h.id, h.seq_min, h.seq_max, h.n) != (meta.id, meta.seq_min, meta.seq_max, meta.entries)
        {
            return Err(bad(
                at + 16,
                format!(
                    "holds table {} with seqnos {}..={} and {} entries, the manifest says table {} with {}..={} and {}",
                    h.id, h.seq_min, h.seq_max, h.n, meta.id, meta.seq_min, meta.seq_max, meta.entries
                ),
            ));
        }
        if u64::from(h.u) + 1 != meta.pm_pages.len() as u64 {
            return Err(bad(
                at + 48,
                format!(
                    "{} segments, the manifest lists {}",
                    h.u,
                    meta.pm_pages.len() - 1
                ),
            ));
        }
        let usage_at = at + TABLE_HEADER_BYTES + 8 * h.n;
        let ub = region.slice(usage_at, (USAGE_BYTES * u64::from(h.u)) as usize)?;
        let mut usage = Vec::with_capacity(h.u as usize);
        for (i, e) in ub.chunks_exact(USAGE_BYTES as usize).enumerate() {
            let u = Usage {
                run: PageRun {
                    first: format::u64_at(e, 0),
                    count: u64::from(format::u32_at(e, 8)),
                },
                live_bytes: format::u32_at(e, 12),
            };
            if u.run != meta.pm_pages[i + 1]
                || usage
                    .last()
                    .is_some_and(|p: &Usage| p.run.first >= u.run.first)
                || u64::from(u.live_bytes) > u.run.count * PAGE
            {
                return Err(bad(
                    usage_at + USAGE_BYTES * i as u64,
                    format!(
                        "usage entry {i} {:?} does not match the manifest's run {:?}",
                        u,
                        meta.pm_pages[i + 1]
                    ),
                ));
            }
            usage.push(u);
        }
        let t = NvTable {
            region: Arc::clone(&region),
            id: meta.id,
            seq_min: h.seq_min,
            seq_max: h.seq_max,
            n: h.n as usize,
            offsets_at: at + TABLE_HEADER_BYTES,
            usage,
            verify,
            index: OnceLock::new(),
            values_checked: (0..(h.n as usize).div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        };
        let offs = t.offsets()?;
        for i in 0..t.n {
            let o = format::u64_at(offs, 8 * i);
            let ok = o.is_multiple_of(8) && t.segment_of(o).is_some_and(|u| o >= u.nodes_start());
            if !ok {
                return Err(bad(
                    t.offsets_at + 8 * i as u64,
                    format!("offset {i} = {o} is not inside one of the table's segments"),
                ));
            }
        }
        Ok(t)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True for a table without entries.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The table id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The segments its nodes live in, with their live bytes.
    pub fn usage(&self) -> &[Usage] {
        &self.usage
    }

    /// The region.
    pub fn region(&self) -> &Arc<dyn PmRegion> {
        &self.region
    }

    /// Whether values are checksummed when read.
    pub fn verify(&self) -> bool {
        self.verify
    }

    fn offsets(&self) -> Result<&[u8]> {
        self.region.slice(self.offsets_at, 8 * self.n)
    }

    /// The usage entry of the segment holding `at`.
    pub fn segment_of(&self, at: u64) -> Option<&Usage> {
        let i = self.usage.partition_point(|u| u.end() <= at);
        self.usage.get(i).filter(|u| u.run.first * PAGE <= at)
    }

    /// Offset of entry `i`. REQUIRES: `i < len()`.
    pub fn offset(&self, i: usize) -> Result<u64> {
        let b = self.region.slice(self.offsets_at + 8 * i as u64, 8)?;
        Ok(format::u64_at(b, 0))
    }

    /// The node at `at` (an offset of this table), checked (its key
    /// checksum only until the search index is built: module doc).
    pub fn node_at(&self, at: u64) -> Result<Node<'_>> {
        let u = self.segment_of(at).ok_or_else(|| {
            Error::corruption(
                self.region.name(),
                at,
                format!("NVTable {}: node outside its segments", self.id),
            )
        })?;
        let check_key = self.index.get().is_none();
        Node::read_with(
            self.region.as_ref(),
            at,
            u.nodes_start(),
            u.end(),
            check_key,
        )
    }

    /// Entry `i`'s value (`node`), its checksum checked if values are
    /// verified and it has not been by this table before.
    fn value_of<'a>(&'a self, i: usize, node: &Node<'a>) -> Result<&'a [u8]> {
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        let check = self.verify
            && self
                .values_checked
                .get(word)
                .is_none_or(|w| w.load(AtomicOrdering::Relaxed) & bit == 0);
        let v = node.value(self.region.as_ref(), check)?;
        if check {
            if let Some(w) = self.values_checked.get(word) {
                w.fetch_or(bit, AtomicOrdering::Relaxed);
            }
        }
        Ok(v)
    }

    /// Entries whose value checksum has been checked (module doc).
    pub fn values_checked(&self) -> usize {
        self.values_checked
            .iter()
            .map(|w| w.load(AtomicOrdering::Relaxed).count_ones() as usize)
            .sum()
    }

    /// Entry `i`, checked. REQUIRES: `i < len()`.
    pub fn node(&self, i: usize) -> Result<Node<'_>> {
        self.node_at(self.offset(i)?)
    }

    /// Starts bringing entry `i`'s node header and key into the CPU's
    /// caches, for a walk in key order that will read it soon (the nodes
    /// of one table lie all over its segments). Out of range or unreadable:
    /// nothing; the read itself checks.
    #[inline]
    pub fn prefetch(&self, i: usize) {
        if i >= self.n {
            return;
        }
        if let Ok(at) = self.offset(i) {
            if let Ok(b) = self
                .region
                .slice(at, 128.min(self.region.len().saturating_sub(at)) as usize)
            {
                crate::storage::prefetch(b);
            }
        }
    }

    /// DRAM bytes of the search index and its filter (0 until built).
    pub fn dram_index_bytes(&self) -> u64 {
        self.index.get().map_or(0, |ix| {
            (ix.common.len()
                + 8 * ix.keys.len()
                + ix.filter.as_ref().map_or(0, BloomFilter::size_bytes)
                + 8 * self.values_checked.len()) as u64
        })
    }

    /// Whether the DRAM search index is built ([`TableReader::warm`]).
    pub fn is_indexed(&self) -> bool {
        self.index.get().is_some()
    }

    /// The search index, built on first use (an error is returned and the
    /// build retried next time).
    fn search_index(&self) -> Result<&SearchIndex> {
        if let Some(ix) = self.index.get() {
            return Ok(ix);
        }
        let ix = if self.n == 0 {
            SearchIndex {
                common: Vec::new(),
                keys: Box::new([]),
                filter: None,
            }
        } else {
            let first = self.node(0)?.key.to_vec();
            let last = self.node(self.n - 1)?.key;
            let lcp = first.iter().zip(last).take_while(|(a, b)| a == b).count();
            let offs = self.offsets()?;
            let mut keys = Vec::with_capacity(self.n);
            let mut filter = BloomBuilder::new(FILTER_BITS_PER_KEY);
            for i in 0..self.n {
                let node = self.node_at(format::u64_at(offs, 8 * i))?;
                keys.push(key_number(node.key, lcp));
                filter.add_key(node.key);
            }
            SearchIndex {
                common: first[..lcp].to_vec(),
                keys: keys.into_boxed_slice(),
                filter: BloomFilter::new(filter.finish()),
            }
        };
        let _ = self.index.set(ix);
        self.index
            .get()
            .ok_or_else(|| Error::InvalidArgument("NVTable search index lost".into()))
    }

    /// The first entry `>=` the internal key `(user_key, tag)`.
    pub fn seek_index(&self, user_key: &[u8], tag: u64) -> Result<usize> {
        self.seek_index_for(user_key, tag).map(|(i, _)| i)
    }

    /// [`seek_index`](Self::seek_index), and whether the entry found can
    /// have `user_key` for its user key: `false` when the search index
    /// proves it cannot (no entry shares the key's number), so a point
    /// lookup that misses the table reads no node in PM.
    fn seek_index_for(&self, user_key: &[u8], tag: u64) -> Result<(usize, bool)> {
        let ix = self.search_index()?;
        let c = ix.common.len();
        let (mut lo, mut hi) = match user_key.get(..c).map(|p| p.cmp(&ix.common)) {
            // Every entry shares `common`: the key sorts before or after all.
            Some(Ordering::Less) => return Ok((0, false)),
            Some(Ordering::Greater) => return Ok((self.n, false)),
            Some(Ordering::Equal) => {
                let x = key_number(user_key, c);
                let lo = ix.keys.partition_point(|&k| k < x);
                // Equal numbers are few (keys alike in their first 8 bytes
                // past `common`): step over them, and search only if many.
                let mut hi = lo;
                while hi < ix.keys.len() && ix.keys[hi] == x && hi - lo < 4 {
                    hi += 1;
                }
                if hi - lo == 4 {
                    hi = lo + ix.keys[lo..].partition_point(|&k| k <= x);
                }
                (lo, hi)
            }
            None => {
                // Shorter than `common`: compare what it has.
                return Ok((
                    if ix.common.starts_with(user_key) || user_key < &ix.common[..] {
                        0
                    } else {
                        self.n
                    },
                    false,
                ));
            }
        };
        // Equal keys have equal numbers: only entries in `lo..hi` can hold
        // `user_key`.
        let end = hi;
        let offs = self.offsets()?;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let node = self.node_at(format::u64_at(offs, 8 * mid))?;
            if cmp_node(node.key, node.tag, user_key, tag) == Ordering::Less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok((lo, lo < end))
    }
}

impl TableReader for NvTable {
    fn get(&self, user_key: &[u8], seq: SeqNo) -> Result<Option<Found>> {
        let ix = self.search_index()?;
        if ix.filter.as_ref().is_some_and(|f| !f.may_contain(user_key)) {
            return Ok(None);
        }
        let (i, may_match) = self.seek_index_for(user_key, key::pack_trailer(seq, Kind::MAX))?;
        if i >= self.n || !may_match {
            return Ok(None);
        }
        let node = self.node(i)?;
        if node.key != user_key {
            return Ok(None);
        }
        let kind = node.kind();
        let value = match kind {
            Kind::Put => self.value_of(i, &node)?.to_vec(),
            Kind::Delete => Vec::new(),
        };
        Ok(Some(Found {
            seq: node.seq(),
            kind,
            value,
        }))
    }

    fn iter(self: Arc<Self>, _fill_cache: bool) -> Box<dyn InternalIterator> {
        Box::new(NvTableIter {
            table: self,
            pos: None,
            key: Vec::new(),
            value_at: 0,
            vlen: 0,
            err: None,
        })
    }

    /// The search index, built before readers see the table (a pass over
    /// every node's key: a first reader waited 17 ms for a 64 MiB table
    /// of 4 KiB values in a traced `medium` run).
    fn warm(&self) -> Result<()> {
        self.search_index().map(|_| ())
    }
}

/// How many entries ahead a forward walk prefetches: enough to cover a
/// DRAM miss (~100 ns) with the few hundred nanoseconds one entry of a
/// merge takes, few enough not to evict what the walk still needs.
pub const PREFETCH_AHEAD: usize = 4;

/// An iterator over one NVTable's offset array.
pub struct NvTableIter {
    table: Arc<NvTable>,
    pos: Option<usize>,
    /// The current internal key (user key ‖ trailer).
    key: Vec<u8>,
    value_at: u64,
    vlen: usize,
    err: Option<Error>,
}

impl NvTableIter {
    fn load(&mut self, i: Option<usize>) {
        self.pos = None;
        let Some(i) = i.filter(|&i| i < self.table.n) else {
            return;
        };
        let r = (|| {
            let node = self.table.node(i)?;
            if node.kind() == Kind::Put {
                self.table.value_of(i, &node)?;
            }
            self.key.clear();
            self.key.extend_from_slice(node.key);
            self.key.extend_from_slice(&node.tag.to_le_bytes());
            self.value_at = node.value_at();
            self.vlen = node.vlen;
            Ok(())
        })();
        match r {
            Ok(()) => self.pos = Some(i),
            Err(e) => {
                self.err.get_or_insert(e);
            }
        }
    }
}

impl InternalIterator for NvTableIter {
    fn valid(&self) -> bool {
        self.pos.is_some()
    }
    fn seek_to_first(&mut self) {
        self.load(Some(0));
    }
    fn seek_to_last(&mut self) {
        self.load(self.table.n.checked_sub(1));
    }
    fn seek(&mut self, target: &[u8]) {
        let (uk, tag) = (key::user_key(target), key::trailer(target));
        match self.table.seek_index(uk, tag) {
            Ok(i) => self.load(Some(i)),
            Err(e) => {
                self.pos = None;
                self.err.get_or_insert(e);
            }
        }
    }
    fn next(&mut self) {
        let i = self.pos.map(|i| i + 1);
        if let Some(i) = i {
            self.table.prefetch(i + PREFETCH_AHEAD);
        }
        self.load(i);
    }
    fn prev(&mut self) {
        let i = self.pos.and_then(|i| i.checked_sub(1));
        self.load(i);
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn value(&self) -> &[u8] {
        if self.pos.is_none() {
            return &[];
        }
        // In range: `load` read the node that holds it.
        self.table
            .region
            .slice(self.value_at, self.vlen)
            .unwrap_or(&[])
    }
    fn status(&self) -> Result<()> {
        match &self.err {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

/// Collects the entries of a new NVTable (in internal-key order) and
/// writes its offset-array run.
#[derive(Debug, Default)]
pub struct TableBuild {
    offsets: Vec<u64>,
    usage: HashMap<u64, (u64, u64)>,
    smallest: Vec<u8>,
    largest: Vec<u8>,
    seq_min: SeqNo,
    seq_max: SeqNo,
    deletions: u64,
    node_bytes: u64,
}

/// A table written by [`TableBuild::finish`].
#[derive(Debug)]
pub struct Built {
    /// Its metadata.
    pub meta: TableMeta,
    /// Bytes of its array run (what building it wrote).
    pub array_bytes: u64,
}

impl TableBuild {
    /// An empty build with room for `n` entries.
    pub fn with_capacity(n: usize) -> TableBuild {
        TableBuild {
            offsets: Vec::with_capacity(n),
            seq_min: SeqNo::MAX,
            ..TableBuild::default()
        }
    }

    /// Entries so far.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// True before the first entry.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Bytes of the nodes so far.
    pub fn node_bytes(&self) -> u64 {
        self.node_bytes
    }

    /// Adds the node at `at` (of `size` bytes, in segment `seg`) holding
    /// `(user_key, tag)`; entries come in internal-key order.
    pub fn push(&mut self, at: u64, size: u64, seg: PageRun, user_key: &[u8], tag: u64) {
        debug_assert!(
            self.offsets.is_empty()
                || key::compare_internal(&self.largest, &{
                    let mut k = user_key.to_vec();
                    k.extend_from_slice(&tag.to_le_bytes());
                    k
                })
                .is_lt(),
            "entries in internal-key order"
        );
        self.largest.clear();
        self.largest.extend_from_slice(user_key);
        self.largest.extend_from_slice(&tag.to_le_bytes());
        if self.offsets.is_empty() {
            self.smallest = self.largest.clone();
        }
        self.offsets.push(at);
        let seq = tag >> 8;
        self.seq_min = self.seq_min.min(seq);
        self.seq_max = self.seq_max.max(seq);
        if tag & 0xff == Kind::Delete as u64 {
            self.deletions += 1;
        }
        self.node_bytes += size;
        let e = self.usage.entry(seg.first).or_insert((seg.count, 0));
        e.1 += size;
    }

    /// Lists segment `seg` in the table even if none of its nodes is
    /// there (a log segment left empty: it goes when the table goes).
    pub fn include(&mut self, seg: PageRun) {
        self.usage.entry(seg.first).or_insert((seg.count, 0));
    }

    /// Writes the array run (waiting up to `wait` for PM) and returns the
    /// table's metadata; `Ok(None)` if PM had no room in time.
    pub fn finish(self, space: &Space, id: u64, wait: Duration) -> Result<Option<Built>> {
        debug_assert!(!self.offsets.is_empty());
        let mut usage: Vec<Usage> = self
            .usage
            .iter()
            .map(|(&first, &(count, live))| Usage {
                run: PageRun { first, count },
                live_bytes: u32::try_from(live).unwrap_or(u32::MAX),
            })
            .collect();
        usage.sort_unstable_by_key(|u| u.run.first);
        let h = TableHeader {
            id,
            seq_min: self.seq_min,
            seq_max: self.seq_max,
            n: self.offsets.len() as u64,
            u: usage.len() as u32,
        };
        let bytes = encode_table(&h, &self.offsets, &usage);
        let pages = (bytes.len() as u64).div_ceil(PAGE);
        let Some(run) = space.alloc(pages, wait)? else {
            return Ok(None);
        };
        let at = run.first * PAGE;
        let r = space
            .region
            .write(at, &bytes)
            .and_then(|()| space.region.persist(at, bytes.len()));
        if let Err(e) = r {
            let _ = space.tier.free_pages(run);
            return Err(e);
        }
        let mut pm_pages = Vec::with_capacity(usage.len() + 1);
        pm_pages.push(run);
        pm_pages.extend(usage.iter().map(|u| u.run));
        let array_bytes = bytes.len() as u64;
        Ok(Some(Built {
            meta: TableMeta {
                id,
                tier: Tier::Pm,
                format: TableFormat::NvTable,
                size_bytes: self.node_bytes + array_bytes,
                smallest: self.smallest,
                largest: self.largest,
                seq_min: self.seq_min,
                seq_max: self.seq_max,
                entries: self.offsets.len() as u64,
                deletions: self.deletions,
                pm_pages,
            },
            array_bytes,
        }))
    }
}

/// Size of a node from its lengths (re-exported for the flush).
#[inline]
pub fn entry_size(user_key: &[u8], value: &[u8]) -> u64 {
    node_size(user_key.len(), value.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::WriteBatch;
    use crate::design::nvcache::log::{create, walk, Logs};
    use crate::storage::pm::PmTier;
    use crate::storage::sim::SimRegion;
    use crate::wal::LogWriter;

    /// A completed table of `n` entries `k00`.. with 100-byte values, on a
    /// fresh region; returns the region, the table's metadata and each
    /// entry's node offset.
    fn table(n: u8) -> (Arc<SimRegion>, TableMeta, Vec<u64>) {
        let entries: Vec<_> = (0..n)
            .map(|i| (format!("k{i:02}").into_bytes(), vec![i; 100]))
            .collect();
        table_of(&entries)
    }

    /// A completed table of `entries` (distinct keys) on a fresh region.
    fn table_of(entries: &[(Vec<u8>, Vec<u8>)]) -> (Arc<SimRegion>, TableMeta, Vec<u64>) {
        let sim = Arc::new(SimRegion::new(1 << 20));
        let region = Arc::clone(&sim) as Arc<dyn PmRegion>;
        let tier = Arc::new(PmTier::open(Arc::clone(&region), false).unwrap());
        let space = Arc::new(Space {
            region,
            tier,
            segment_pages: 16,
        });
        let logs = Logs::default();
        let (mut w, locator) = create(&space, &logs, 7, false).unwrap();
        let mut b = WriteBatch::new();
        for (k, v) in entries {
            b.put(k, v);
        }
        b.set_seqno(1);
        w.add_record(b.encoded()).unwrap();
        let (segs, nodes) = walk(sim.as_ref(), locator, 7).unwrap();
        let mut build = TableBuild::with_capacity(nodes.len());
        for node in &nodes {
            let user_key = key::user_key(&node.ikey);
            build.push(
                node.at,
                node.size,
                segs[0],
                user_key,
                key::trailer(&node.ikey),
            );
        }
        let built = build.finish(&space, 9, Duration::ZERO).unwrap().unwrap();
        (sim, built.meta, nodes.iter().map(|n| n.at).collect())
    }

    fn open(sim: &Arc<SimRegion>, meta: &TableMeta) -> Arc<NvTable> {
        Arc::new(NvTable::open(Arc::clone(sim) as Arc<dyn PmRegion>, meta, true).unwrap())
    }

    fn is_corruption<T: std::fmt::Debug>(r: Result<T>) -> bool {
        matches!(r, Err(Error::Corruption { .. }))
    }

    /// Each value's checksum is checked the first time the open table
    /// returns it, by a get or a scan; a damaged value is reported then.
    #[test]
    fn a_value_is_checked_on_its_first_read() {
        let (sim, meta, at) = table(8);
        let t = open(&sim, &meta);
        t.warm().unwrap();
        assert_eq!(t.values_checked(), 0);
        let found = t.get(b"k03", key::MAX_SEQNO).unwrap().unwrap();
        assert_eq!(found.value, vec![3; 100]);
        assert_eq!(t.values_checked(), 1);
        let mut it = Arc::clone(&t).iter(false);
        it.seek_to_first();
        let mut n = 0;
        while it.valid() {
            n += 1;
            it.next();
        }
        it.status().unwrap();
        assert_eq!((n, t.values_checked()), (8, 8));

        // Damaged before it was read: the get and the scan both report it.
        let (sim, meta, at2) = table(8);
        let node = t.node_at(at[5]).unwrap();
        let value_at = at2[5] + (node.value_at() - node.at);
        sim.corrupt(value_at + 7, 0x20).unwrap();
        let t = open(&sim, &meta);
        assert!(is_corruption(t.get(b"k05", key::MAX_SEQNO)));
        let mut it = Arc::clone(&t).iter(false);
        it.seek_to_first();
        while it.valid() {
            it.next();
        }
        assert!(is_corruption(it.status()));
        assert_eq!(t.values_checked(), 5, "the values before the damage");
    }

    /// Keys alike in the eight bytes past the common prefix share a search
    /// number: lookups and seeks among few and among many of them find
    /// exactly the right entry.
    #[test]
    fn keys_sharing_a_search_number_are_told_apart() {
        let mut entries = vec![(b"0".to_vec(), b"first".to_vec())];
        for (prefix, count) in [(&b"AAAAAAAA"[..], 12u8), (b"AAAAAAAB", 2), (b"AAAAAAAC", 1)] {
            for i in 0..count {
                let mut k = prefix.to_vec();
                k.extend_from_slice(&[b'm', i * 2]);
                entries.push((k.clone(), k));
            }
        }
        entries.push((b"z".to_vec(), b"last".to_vec()));
        let (sim, meta, _) = table_of(&entries);
        let t = open(&sim, &meta);
        let mut sorted = entries.clone();
        sorted.sort();
        for (k, v) in &sorted {
            let found = t.get(k, key::MAX_SEQNO).unwrap().unwrap();
            assert_eq!(&found.value, v, "{k:?}");
            // Between two keys: absent, and a seek lands on the next one.
            let mut between = k.clone();
            between.push(1);
            assert!(t.get(&between, key::MAX_SEQNO).unwrap().is_none());
            let mut it = Arc::clone(&t).iter(false);
            it.seek(&key::make_internal_key(&between, key::MAX_SEQNO, Kind::MAX));
            let next = sorted.iter().find(|(s, _)| s > &between);
            assert_eq!(
                it.valid().then(|| key::user_key(it.key()).to_vec()),
                next.map(|(s, _)| s.clone()),
                "{between:?}"
            );
        }
        for odd in [
            &b"AAAAAAAAm\x01"[..],
            b"AAAAAAABm\x03",
            b"AAAAAAAA",
            b"AAAAAAAD",
        ] {
            assert!(t.get(odd, key::MAX_SEQNO).unwrap().is_none(), "{odd:?}");
        }
    }

    /// The search index checks every node's key checksum: a damaged key is
    /// reported by the first lookup (or the warm-up), after which node
    /// reads check bounds and lengths only.
    #[test]
    fn keys_are_checked_when_the_index_is_built() {
        let (sim, meta, at) = table(8);
        sim.corrupt(at[6] + 44, 0x01).unwrap(); // the key's first byte
        let t = open(&sim, &meta);
        assert!(is_corruption(t.warm()));
        assert!(is_corruption(t.get(b"k00", key::MAX_SEQNO)));

        // Checked once: damage to a stored key checksum after the index is
        // built goes unread by this open table (the key itself is intact,
        // so the answer is right), and the next open reports it.
        let (sim, meta, at) = table(8);
        let t = open(&sim, &meta);
        t.warm().unwrap();
        sim.corrupt(at[6] + 36, 0x01).unwrap();
        let found = t.get(b"k06", key::MAX_SEQNO).unwrap().unwrap();
        assert_eq!(found.value, vec![6; 100]);
        assert!(is_corruption(open(&sim, &meta).warm()));
    }
}
