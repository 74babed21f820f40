//! The WAL in the PM region: a chain of extents holding log blocks.
//!
//! # Byte layout
//!
//! An extent is a contiguous run of `extent_len` bytes of the region,
//! handed out by an [`ExtentSource`]. Its first [`EXTENT_HEADER_BYTES`]
//! (one 4 KiB page) hold the header; 32 KiB log blocks follow, as many as
//! fit ([`blocks_per_extent`]); a tail shorter than a block is unused, so
//! choose `extent_len = EXTENT_HEADER_BYTES + k × BLOCK_SIZE`
//! ([`extent_len_for_blocks`]).
//!
//! ```text
//! extent at offset E:
//!  E+0    magic       8 bytes  "tkvPMWAL"
//!  E+8    version     u32le    1
//!  E+12   crc32c      u32le    masked crc32c of bytes E+0..E+12 ‖ E+16..E+32
//!  E+16   log_number  u64le    the full log number
//!  E+24   extent_len  u64le    this extent's length in bytes
//!  E+32   next        u64le    offset of the next extent, 0 = none
//!                              (not covered by the crc: updated in place)
//!  E+40   seal_end    u64le    first extent only: the log offset where the
//!                              log was closed cleanly (0 when created)
//!  E+48   seal_crc    u32le    masked crc32c of log_number ‖ seal_end (u64le
//!                              each); any other value: not sealed
//!  E+52   0           u32
//!  E+56   unused up to E+4096
//!  E+4096 block 0 | block 1 | ... | block k-1       (log format, mod docs)
//! ```
//!
//! The log is the concatenation of the blocks of the extents in chain order;
//! the reader reads blocks in place ([`PmRegion::slice`]), without copying
//! the log.
//!
//! Worked example: log 9 in an extent at offset 0x10000 of 4096 + 2×32768
//! = 0x11000 bytes, the last of its chain:
//!
//! ```text
//! 0x10000  74 6b 76 50 4d 57 41 4c   "tkvPMWAL"
//! 0x10008  01 00 00 00               version 1
//! 0x1000c  05 b5 c1 fe               mask(crc32c(bytes 0..12 ‖ 16..32))
//! 0x10010  09 00 00 00 00 00 00 00   log 9
//! 0x10018  00 10 01 00 00 00 00 00   extent_len 0x11000
//! 0x10020  00 00 00 00 00 00 00 00   next: none
//! 0x11000  first fragment header of block 0
//! ```
//!
//! # Crash consistency
//!
//! 1. A new extent's header (with `next = 0`) and a zero first fragment
//!    header are written and persisted before the extent is linked: then the
//!    previous extent's 8-byte `next` field is stored and persisted (an
//!    aligned 8-byte store is atomic across a crash). A chain reachable from
//!    the first extent is therefore always made of valid headers.
//! 2. [`PmSink::sync`] persists exactly the bytes appended since the last
//!    sync, plus a zeroed fragment header just past them (so that a reader
//!    finds a clean end instead of the stale bytes of a reused page), in one
//!    [`PmRegion::persist`] per extent touched (one, unless the bytes cross
//!    into a new extent).
//! 3. Stale bytes in a reused extent are never read as records of this log:
//!    every fragment header carries the log number (format invariant 4).
//! 4. An extent allocated but not yet linked when a crash hits is reachable
//!    from nothing: the engine's allocator reconciliation frees it (it
//!    knows the live chains through [`PmLog::extents`]).
//! 5. The seal ([`PmSink::seal`], when the engine retires the log at a
//!    memtable switch, and at a clean close) is stored only after
//!    every record before it was persisted, and its checksum ties it to the
//!    log, so a seal that verifies proves that no record before `seal_end`
//!    was in flight: damage there is corruption, never a torn tail
//!    (reader module docs). A new extent's seal fields are zeroed with its
//!    header, so stale bytes of a reused page never read as a seal.
//!
//! # Full region
//!
//! When the [`ExtentSource`] has no run of `extent_len` bytes, the sink asks
//! for half as many blocks, then a quarter, down to one block (a fragmented
//! region still takes the log; every header records its extent's length).
//! When it has no space even for that (`Ok(None)`), [`PmSink`] returns an
//! `Error::Io` with `ENOSPC` that [`is_pm_full`] recognises. The writer asks
//! for the space of a whole record before writing any of it
//! ([`LogSink::reserve`]), so the log is left intact and the engine can
//! switch to a new log (on SSD, or after space was freed) and retry.
//!
//! # Concurrency
//!
//! A [`PmSink`] is owned by the one WAL writer. A chain is read
//! ([`PmLog::open_for_read`], [`PmLog::extents`]) only when nobody appends
//! to it (recovery, or after the log was retired).

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::storage::alloc::PageRun;
use crate::storage::pm::PmTier;
use crate::storage::PmRegion;

use super::reader::{LogSource, Reader, Tail};
use super::writer::{LogSink, Writer};
use super::{mask_crc, unmask_crc, BLOCK_SIZE, HEADER_SIZE, ZEROS};

/// Bytes reserved for an extent's header; log blocks start this far in.
pub const EXTENT_HEADER_BYTES: u64 = 4096;

/// The extent magic.
pub const EXTENT_MAGIC: [u8; 8] = *b"tkvPMWAL";

/// The extent header format version.
pub const EXTENT_VERSION: u32 = 1;

/// Offset of the `next` field inside an extent header.
const NEXT_FIELD: u64 = 32;

/// Bytes of the header under the checksum (and the `next` field).
const HEADER_FIELDS_BYTES: usize = 40;

/// Offset of the seal (first extent of a chain: `seal_end`, `seal_crc`, 0).
const SEAL_FIELD: u64 = 40;

/// Bytes of the seal.
const SEAL_BYTES: usize = 16;

const BLOCK: u64 = BLOCK_SIZE as u64;

/// The context prefix of the error [`is_pm_full`] recognises.
const PM_FULL_CONTEXT: &str = "PM WAL: no free extent";

/// Hands out and takes back extents of the PM region (the engine implements
/// it with the persistent page allocator).
pub trait ExtentSource: Send + Sync {
    /// Allocates `len_bytes` contiguous bytes; `Ok(None)` when there is no
    /// space. The offset must be 8-byte aligned and non-zero.
    fn alloc_extent(&self, len_bytes: u64) -> Result<Option<u64>>;
    /// Returns an extent obtained from [`alloc_extent`](Self::alloc_extent).
    fn free_extent(&self, offset: u64, len_bytes: u64) -> Result<()>;
}

/// True if `e` is the error a [`PmSink`] returns when the [`ExtentSource`]
/// has no space left (an `Error::Io` with `ENOSPC`, so
/// [`Error::is_no_space`] is true as well).
pub fn is_pm_full(e: &Error) -> bool {
    match e {
        Error::Io { context, source } => {
            context.starts_with(PM_FULL_CONTEXT)
                && source.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error())
        }
        _ => false,
    }
}

fn pm_full(region: &dyn PmRegion, log_number: u64, len_bytes: u64) -> Error {
    Error::io(
        format!(
            "{PM_FULL_CONTEXT} in {} for log {log_number} ({len_bytes} bytes)",
            region.name()
        ),
        io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error()),
    )
}

/// Log blocks an extent of `extent_len` bytes holds.
pub fn blocks_per_extent(extent_len: u64) -> u64 {
    extent_len.saturating_sub(EXTENT_HEADER_BYTES) / BLOCK
}

/// The extent length that holds exactly `blocks` log blocks.
pub fn extent_len_for_blocks(blocks: u64) -> u64 {
    EXTENT_HEADER_BYTES + blocks * BLOCK
}

/// A decoded, verified extent header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ExtentHeader {
    log_number: u64,
    extent_len: u64,
    next: u64,
}

fn header_crc(b: &[u8; HEADER_FIELDS_BYTES]) -> u32 {
    mask_crc(crate::coding::crc32c_append(
        crate::coding::crc32c(&b[0..12]),
        &b[16..32],
    ))
}

fn encode_extent_header(log_number: u64, extent_len: u64) -> [u8; HEADER_FIELDS_BYTES] {
    let mut b = [0u8; HEADER_FIELDS_BYTES];
    b[0..8].copy_from_slice(&EXTENT_MAGIC);
    b[8..12].copy_from_slice(&EXTENT_VERSION.to_le_bytes());
    b[16..24].copy_from_slice(&log_number.to_le_bytes());
    b[24..32].copy_from_slice(&extent_len.to_le_bytes());
    // next = 0
    let crc = header_crc(&b);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Reads and verifies the extent header at `at`.
fn read_extent_header(region: &dyn PmRegion, at: u64) -> Result<ExtentHeader> {
    let bad = |what: &str| Error::corruption(region.name(), at, format!("PM WAL extent: {what}"));
    if at == 0 || at & 7 != 0 {
        return Err(bad("misaligned or null extent offset"));
    }
    let in_region = at
        .checked_add(HEADER_FIELDS_BYTES as u64)
        .is_some_and(|end| end <= region.len());
    if !in_region {
        return Err(bad("header beyond the end of the region"));
    }
    let mut b = [0u8; HEADER_FIELDS_BYTES];
    region.read(at, &mut b)?;
    if b[0..8] != EXTENT_MAGIC {
        return Err(bad("bad magic"));
    }
    let word = |i: usize| {
        u64::from_le_bytes([
            b[i],
            b[i + 1],
            b[i + 2],
            b[i + 3],
            b[i + 4],
            b[i + 5],
            b[i + 6],
            b[i + 7],
        ])
    };
    let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    let stored = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
    if unmask_crc(stored) != unmask_crc(header_crc(&b)) {
        return Err(bad("header checksum mismatch"));
    }
    if version != EXTENT_VERSION {
        return Err(bad(&format!("unsupported version {version}")));
    }
    let h = ExtentHeader {
        log_number: word(16),
        extent_len: word(24),
        next: word(32),
    };
    if blocks_per_extent(h.extent_len) == 0 {
        return Err(bad(&format!(
            "extent length {} holds no block",
            h.extent_len
        )));
    }
    let fits = at
        .checked_add(h.extent_len)
        .is_some_and(|end| end <= region.len());
    if !fits {
        return Err(bad(&format!(
            "extent of {} bytes overruns the region",
            h.extent_len
        )));
    }
    Ok(h)
}

fn seal_crc(log_number: u64, seal_end: u64) -> u32 {
    let mut b = [0u8; 16];
    b[0..8].copy_from_slice(&log_number.to_le_bytes());
    b[8..16].copy_from_slice(&seal_end.to_le_bytes());
    mask_crc(crate::coding::crc32c(&b))
}

fn encode_seal(log_number: u64, seal_end: u64) -> [u8; SEAL_BYTES] {
    let mut b = [0u8; SEAL_BYTES];
    b[0..8].copy_from_slice(&seal_end.to_le_bytes());
    b[8..12].copy_from_slice(&seal_crc(log_number, seal_end).to_le_bytes());
    b
}

/// The seal of the chain whose first extent is at `first`: `Some(log
/// offset)` if the log was sealed (the seal verifies), `None` otherwise. A
/// verified seal beyond the chain's `capacity` (log bytes) is corruption.
fn read_seal(
    region: &dyn PmRegion,
    first: u64,
    log_number: u64,
    capacity: u64,
) -> Result<Option<u64>> {
    let mut b = [0u8; SEAL_BYTES];
    region.read(first + SEAL_FIELD, &mut b)?;
    let end = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let crc = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    if crc != seal_crc(log_number, end) {
        return Ok(None);
    }
    if end > capacity {
        return Err(Error::corruption(
            region.name(),
            first + SEAL_FIELD,
            format!("PM WAL seal at log offset {end}, beyond the chain's {capacity} log bytes"),
        ));
    }
    Ok(Some(end))
}

/// Walks the chain from `first`, verifying every header, that every extent
/// belongs to `log_number` (that of the first extent if `None`) and that no
/// two extents overlap (which also rules out cycles).
fn walk_chain(
    region: &dyn PmRegion,
    first: u64,
    log_number: Option<u64>,
) -> Result<Vec<(u64, ExtentHeader)>> {
    let (chain, error) = walk_chain_prefix(region, first, log_number);
    match error {
        Some(e) => Err(e),
        None => Ok(chain),
    }
}

/// Like [`walk_chain`], but returns the valid prefix of the chain together
/// with the error that ended it, if any.
fn walk_chain_prefix(
    region: &dyn PmRegion,
    first: u64,
    log_number: Option<u64>,
) -> (Vec<(u64, ExtentHeader)>, Option<Error>) {
    let mut out: Vec<(u64, ExtentHeader)> = Vec::new();
    match walk_into(region, first, log_number, &mut out) {
        Ok(()) => (out, None),
        Err(e) => (out, Some(e)),
    }
}

fn walk_into(
    region: &dyn PmRegion,
    first: u64,
    log_number: Option<u64>,
    out: &mut Vec<(u64, ExtentHeader)>,
) -> Result<()> {
    let mut ranges: BTreeMap<u64, u64> = BTreeMap::new();
    let mut at = first;
    loop {
        let from = out.last().map(|(prev, _)| prev + NEXT_FIELD);
        let h = read_extent_header(region, at).map_err(|e| match (e, from) {
            (Error::Corruption { at: loc, what }, Some(p)) => Error::Corruption {
                at: loc,
                what: format!("{what} (linked from the next field at {p})"),
            },
            (e, _) => e,
        })?;
        let expect = log_number.unwrap_or(out.first().map_or(h.log_number, |(_, f)| f.log_number));
        if h.log_number != expect {
            return Err(Error::corruption(
                region.name(),
                at,
                format!(
                    "PM WAL extent of log {} in the chain of log {expect}",
                    h.log_number
                ),
            ));
        }
        let end = at + h.extent_len;
        let overlaps_prev = ranges
            .range(..=at)
            .next_back()
            .is_some_and(|(_, &e)| e > at);
        let overlaps_next = ranges.range(at..).next().is_some_and(|(&s, _)| s < end);
        if overlaps_prev || overlaps_next {
            return Err(Error::corruption(
                region.name(),
                at,
                "PM WAL extent overlaps an earlier extent of its chain (cycle)",
            ));
        }
        ranges.insert(at, end);
        out.push((at, h));
        if h.next == 0 {
            return Ok(());
        }
        at = h.next;
    }
}

/// A reader over the blocks of `chain`.
fn reader_over(
    region: Arc<dyn PmRegion>,
    chain: Vec<(u64, ExtentHeader)>,
    log_number: u64,
    sealed_end: Option<u64>,
) -> Reader<PmSource> {
    let mut extents = Vec::with_capacity(chain.len());
    let mut block_count = 0;
    for (offset, h) in chain {
        extents.push(SourceExtent {
            offset,
            first_block: block_count,
        });
        block_count += blocks_per_extent(h.extent_len);
    }
    let name = region.name().to_string();
    Reader::new(
        PmSource {
            region,
            name,
            extents,
            block_count,
            sealed_end,
        },
        log_number,
    )
}

/// Entry points for WALs in PM.
pub struct PmLog;

impl PmLog {
    /// Starts log `log_number` in a new extent of `extent_len` bytes and
    /// returns its sink; [`PmSink::first_extent`] is the offset to record in
    /// the MANIFEST. The extent header is persisted before this returns.
    pub fn create(
        region: Arc<dyn PmRegion>,
        source: Arc<dyn ExtentSource>,
        log_number: u64,
        extent_len: u64,
    ) -> Result<PmSink> {
        if blocks_per_extent(extent_len) == 0 {
            return Err(Error::InvalidArgument(format!(
                "PM WAL extent length {extent_len} is below {} (header + one block)",
                extent_len_for_blocks(1)
            )));
        }
        let mut sink = PmSink {
            region,
            source,
            log_number,
            extent_len,
            extents: Vec::new(),
            cur: 0,
            cur_pos: 0,
            synced: (0, 0),
            sealed: false,
            device_bytes: 0,
        };
        sink.grow()?;
        Ok(sink)
    }

    /// A reader over log `log_number` whose first extent is at
    /// `first_extent`. Every extent header of the chain is verified first:
    /// a bad one is `Error::Corruption` naming the region and its offset.
    pub fn open_for_read(
        region: Arc<dyn PmRegion>,
        first_extent: u64,
        log_number: u64,
    ) -> Result<Reader<PmSource>> {
        let chain = walk_chain(region.as_ref(), first_extent, Some(log_number))?;
        let capacity = chain
            .iter()
            .map(|(_, h)| blocks_per_extent(h.extent_len) * BLOCK)
            .sum();
        let sealed_end = read_seal(region.as_ref(), first_extent, log_number, capacity)?;
        Ok(reader_over(region, chain, log_number, sealed_end))
    }

    /// For `Db::repair`: a reader over the longest valid prefix of the chain
    /// starting at `first_extent` (its first extent must verify), and the
    /// error that cut the chain short, if one did. The seal is ignored.
    pub fn open_prefix_for_salvage(
        region: Arc<dyn PmRegion>,
        first_extent: u64,
        log_number: u64,
    ) -> Result<(Reader<PmSource>, Option<Error>)> {
        let (chain, error) = walk_chain_prefix(region.as_ref(), first_extent, Some(log_number));
        if chain.is_empty() {
            return Err(error.unwrap_or_else(|| {
                Error::corruption(region.name(), first_extent, "PM WAL: no extent")
            }));
        }
        Ok((reader_over(region, chain, log_number, None), error))
    }

    /// For `Db::repair`: the chains of PM WAL extents found without the
    /// MANIFEST. Looks for an extent header that verifies at each offset of
    /// `offsets` (extents start at page boundaries), and returns `(first
    /// extent, log number)` of every chain — an extent that no other found
    /// extent of its log links to — ordered by log number.
    pub fn find_chains(
        region: &dyn PmRegion,
        offsets: impl Iterator<Item = u64>,
    ) -> Vec<(u64, u64)> {
        let mut found: BTreeMap<u64, ExtentHeader> = BTreeMap::new();
        for at in offsets {
            let magic = region.slice(at, EXTENT_MAGIC.len());
            if magic.is_ok_and(|m| m == EXTENT_MAGIC) {
                if let Ok(h) = read_extent_header(region, at) {
                    found.insert(at, h);
                }
            }
        }
        let linked: std::collections::HashSet<(u64, u64)> = found
            .values()
            .filter(|h| h.next != 0)
            .map(|h| (h.next, h.log_number))
            .collect();
        let mut chains: Vec<(u64, u64)> = found
            .iter()
            .filter(|(at, h)| !linked.contains(&(**at, h.log_number)))
            .map(|(at, h)| (*at, h.log_number))
            .collect();
        chains.sort_by_key(|&(at, log)| (log, at));
        chains
    }

    /// The log offset the log starting at `first_extent` was sealed at when
    /// it was retired or closed cleanly, if it was (`None` for the log being
    /// written at a crash).
    pub fn sealed_end(region: &dyn PmRegion, first_extent: u64) -> Result<Option<u64>> {
        let chain = walk_chain(region, first_extent, None)?;
        let log_number = chain.first().map_or(0, |(_, h)| h.log_number);
        let capacity = chain
            .iter()
            .map(|(_, h)| blocks_per_extent(h.extent_len) * BLOCK)
            .sum();
        read_seal(region, first_extent, log_number, capacity)
    }

    /// The extents `(offset, len_bytes)` of the chain starting at
    /// `first_extent`, in chain order, after verifying every header (so the
    /// engine can free them, or reconcile its allocator with them).
    pub fn extents(region: &dyn PmRegion, first_extent: u64) -> Result<Vec<(u64, u64)>> {
        Ok(walk_chain(region, first_extent, None)?
            .into_iter()
            .map(|(offset, h)| (offset, h.extent_len))
            .collect())
    }
}

/// The PM WALs of a PM tier: extents handed out by its page allocator.
pub struct PmWals {
    tier: Arc<PmTier>,
    source: Arc<dyn ExtentSource>,
    extent_len_bytes: u64,
}

/// Hands WAL extents out of the page allocator.
struct AllocExtents(Arc<PmTier>);

impl ExtentSource for AllocExtents {
    fn alloc_extent(&self, len_bytes: u64) -> Result<Option<u64>> {
        let alloc = self.0.allocator();
        let pages = len_bytes.div_ceil(alloc.page_size());
        Ok(alloc.alloc(pages)?.map(|run| alloc.page_offset(run.first)))
    }
    fn free_extent(&self, offset: u64, len_bytes: u64) -> Result<()> {
        self.0.free_pages(self.0.run_of(offset, len_bytes))
    }
}

/// Bytes of one PM WAL extent for a region of `region_len_bytes`: about
/// 1/64 of the region, between 4 and 128 log blocks.
pub fn extent_len_for_region(region_len_bytes: u64) -> u64 {
    extent_len_for_blocks((region_len_bytes / 64 / BLOCK_SIZE as u64).clamp(4, 128))
}

impl PmWals {
    /// The WALs of `tier`.
    pub fn new(tier: Arc<PmTier>) -> PmWals {
        PmWals {
            extent_len_bytes: extent_len_for_region(tier.region().len()),
            source: Arc::new(AllocExtents(Arc::clone(&tier))),
            tier,
        }
    }

    /// The region the WALs live in.
    pub fn region(&self) -> &Arc<dyn PmRegion> {
        self.tier.region()
    }

    /// Bytes of one extent (a WAL grows by this much at a time).
    pub fn extent_len_bytes(&self) -> u64 {
        self.extent_len_bytes
    }

    /// Creates PM WAL `n`; returns its writer and first extent offset.
    pub fn create_log(&self, n: u64) -> Result<(Writer<PmSink>, u64)> {
        let sink = PmLog::create(
            Arc::clone(self.tier.region()),
            Arc::clone(&self.source),
            n,
            self.extent_len_bytes,
        )?;
        let first = sink.first_extent();
        Ok((Writer::new(sink, n), first))
    }

    /// Opens PM WAL `n` for replay.
    pub fn open_log(&self, first_extent: u64, n: u64) -> Result<Reader<PmSource>> {
        PmLog::open_for_read(Arc::clone(self.tier.region()), first_extent, n)
    }

    /// The page runs of the WAL starting at `first_extent`.
    pub fn runs(&self, first_extent: u64) -> Result<Vec<PageRun>> {
        Ok(PmLog::extents(self.tier.region().as_ref(), first_extent)?
            .into_iter()
            .map(|(offset, len)| self.tier.run_of(offset, len))
            .collect())
    }

    /// Frees every extent of a PM WAL whose data is in tables.
    pub fn free_log(&self, first_extent: u64) -> Result<()> {
        for run in self.runs(first_extent)? {
            self.tier.free_pages(run)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
struct SinkExtent {
    offset: u64,
    /// Bytes allocated for it.
    len: u64,
    /// Log bytes it holds (a multiple of the block size).
    cap: u64,
}

/// Appends log bytes to a PM extent chain (see the module docs).
///
/// Invariants: `cur < extents.len()`; `cur_pos <= extents[cur].cap`;
/// `synced` is at or before `(cur, cur_pos)`; every extent after `cur` is
/// linked, initialised and empty (space taken by [`LogSink::reserve`]).
pub struct PmSink {
    region: Arc<dyn PmRegion>,
    source: Arc<dyn ExtentSource>,
    log_number: u64,
    extent_len: u64,
    extents: Vec<SinkExtent>,
    cur: usize,
    cur_pos: u64,
    synced: (usize, u64),
    /// Sealed: nothing may be appended any more.
    sealed: bool,
    /// Bytes stored into the region: extent headers and seals, links, log
    /// bytes, end markers.
    device_bytes: u64,
}

impl PmSink {
    /// Bytes this sink has stored into the region (headers with their
    /// zeroed seal fields, links, log bytes, the zeroed end markers a sync
    /// writes, and the seal).
    pub fn device_bytes(&self) -> u64 {
        self.device_bytes
    }

    /// Offset of the chain's first extent (recorded in the MANIFEST).
    pub fn first_extent(&self) -> u64 {
        self.extents.first().map_or(0, |e| e.offset)
    }

    /// The log number.
    pub fn log_number(&self) -> u64 {
        self.log_number
    }

    /// The extents `(offset, len_bytes)` linked so far, in chain order.
    pub fn extents(&self) -> Vec<(u64, u64)> {
        self.extents.iter().map(|e| (e.offset, e.len)).collect()
    }

    fn data_offset(&self, extent: usize, pos: u64) -> u64 {
        self.extents[extent].offset + EXTENT_HEADER_BYTES + pos
    }

    /// Allocates, initialises and links a new extent at the end of the chain.
    /// When no run of `extent_len` bytes is free (a fragmented region), it
    /// takes the largest run of half, a quarter, … of the blocks, down to
    /// one block: every extent header records its own length.
    fn grow(&mut self) -> Result<()> {
        let region = self.region.as_ref();
        let mut len = self.extent_len;
        let offset = loop {
            if let Some(offset) = self.source.alloc_extent(len)? {
                break offset;
            }
            let blocks = blocks_per_extent(len);
            if blocks <= 1 {
                return Err(pm_full(region, self.log_number, self.extent_len));
            }
            len = extent_len_for_blocks(blocks / 2);
        };
        let fits = offset
            .checked_add(len)
            .is_some_and(|end| end <= region.len());
        if offset == 0 || offset & 7 != 0 || !fits {
            let _ = self.source.free_extent(offset, len);
            return Err(Error::InvalidArgument(format!(
                "{}: extent source returned offset {offset} for {len} bytes \
                 (must be non-zero, 8-byte aligned and inside the region)",
                region.name()
            )));
        }
        // (1) The header with next = 0 (and a zeroed seal) and a zero first
        // fragment header, persisted before anything points at them.
        let header = encode_extent_header(self.log_number, len);
        region.write(offset, &header)?;
        region.write(offset + SEAL_FIELD, &[0u8; SEAL_BYTES])?;
        region.persist(offset, header.len() + SEAL_BYTES)?;
        region.write(offset + EXTENT_HEADER_BYTES, &ZEROS)?;
        region.persist(offset + EXTENT_HEADER_BYTES, HEADER_SIZE)?;
        self.device_bytes += (header.len() + SEAL_BYTES + HEADER_SIZE) as u64;
        // (2) Then the 8-byte atomic link from the previous extent.
        if let Some(prev) = self.extents.last() {
            let at = prev.offset + NEXT_FIELD;
            region.write(at, &offset.to_le_bytes())?;
            region.persist(at, 8)?;
            self.device_bytes += 8;
        }
        self.extents.push(SinkExtent {
            offset,
            len,
            cap: blocks_per_extent(len) * BLOCK,
        });
        Ok(())
    }

    /// Checks the struct invariants (feature `invariants`, on in tests).
    fn check_invariants(&self) {
        #[cfg(feature = "invariants")]
        {
            assert!(self.cur < self.extents.len());
            assert!(self.cur_pos <= self.extents[self.cur].cap);
            assert!(self.synced <= (self.cur, self.cur_pos));
            assert!(self
                .extents
                .iter()
                .all(|e| e.cap > 0 && e.cap % BLOCK == 0 && e.offset != 0));
        }
    }

    /// Bytes that can be appended without allocating.
    fn available(&self) -> u64 {
        let cur = &self.extents[self.cur];
        let later: u64 = self.extents[self.cur + 1..].iter().map(|e| e.cap).sum();
        cur.cap - self.cur_pos + later
    }

    /// Zeroes the fragment header position that follows `cur_pos` (after the
    /// block padding if the block has no room for a header) and returns the
    /// end of the zeroed range, relative to the current extent's data.
    fn write_end_marker(&mut self) -> Result<u64> {
        let cap = self.extents[self.cur].cap;
        let pos = self.cur_pos;
        if pos >= cap {
            // The next fragment goes to the next extent, whose first header
            // was zeroed when it was initialised.
            return Ok(pos);
        }
        let in_block = BLOCK - pos % BLOCK;
        let mut end = pos + in_block.min(HEADER_SIZE as u64);
        if in_block < HEADER_SIZE as u64 && pos + in_block < cap {
            end = pos + in_block + HEADER_SIZE as u64;
        }
        let mut at = pos;
        while at < end {
            let n = (end - at).min(HEADER_SIZE as u64);
            self.region
                .write(self.data_offset(self.cur, at), &ZEROS[..n as usize])?;
            self.device_bytes += n;
            at += n;
        }
        Ok(end)
    }
}

impl LogSink for PmSink {
    fn append(&mut self, mut data: &[u8]) -> Result<()> {
        if self.sealed {
            return Err(Error::InvalidArgument(format!(
                "{}: PM WAL {} is sealed",
                self.region.name(),
                self.log_number
            )));
        }
        while !data.is_empty() {
            if self.cur_pos == self.extents[self.cur].cap {
                if self.cur + 1 == self.extents.len() {
                    self.grow()?;
                }
                self.cur += 1;
                self.cur_pos = 0;
            }
            let room = self.extents[self.cur].cap - self.cur_pos;
            let n = usize::try_from(room).map_or(data.len(), |r| r.min(data.len()));
            let (now, rest) = data.split_at(n);
            self.region
                .write(self.data_offset(self.cur, self.cur_pos), now)?;
            self.device_bytes += n as u64;
            self.cur_pos += n as u64;
            data = rest;
        }
        self.check_invariants();
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        let (mut i, mut pos) = self.synced;
        if (i, pos) == (self.cur, self.cur_pos) {
            return Ok(());
        }
        // Whole earlier extents (only when the bytes crossed into a new one).
        while i < self.cur {
            let e = self.extents[i];
            if pos < e.cap {
                self.region
                    .persist(self.data_offset(i, pos), (e.cap - pos) as usize)?;
            }
            i += 1;
            pos = 0;
        }
        let end = self.write_end_marker()?;
        if end > pos {
            self.region
                .persist(self.data_offset(self.cur, pos), (end - pos) as usize)?;
        }
        self.synced = (self.cur, self.cur_pos);
        self.check_invariants();
        Ok(())
    }

    /// Stores the seal (module docs, crash consistency 5) at the synced
    /// end: `synced` is a record boundary with every byte before it
    /// persisted, whatever was appended later.
    fn seal(&mut self) -> Result<()> {
        let (i, pos) = self.synced;
        let end = self.extents[..i].iter().map(|e| e.cap).sum::<u64>() + pos;
        let at = self.first_extent() + SEAL_FIELD;
        self.region.write(at, &encode_seal(self.log_number, end))?;
        self.region.persist(at, SEAL_BYTES)?;
        self.device_bytes += SEAL_BYTES as u64;
        self.sealed = true;
        Ok(())
    }

    fn reserve(&mut self, len_bytes: u64) -> Result<()> {
        let mut available = self.available();
        while available < len_bytes {
            self.grow()?;
            available += self.extents.last().map_or(0, |e| e.cap);
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
struct SourceExtent {
    offset: u64,
    first_block: u64,
}

/// The blocks of a PM extent chain, read in place.
pub struct PmSource {
    region: Arc<dyn PmRegion>,
    name: String,
    extents: Vec<SourceExtent>,
    block_count: u64,
    sealed_end: Option<u64>,
}

impl PmSource {
    /// The offsets of the chain's extents, in chain order.
    pub fn extent_offsets(&self) -> Vec<u64> {
        self.extents.iter().map(|e| e.offset).collect()
    }
}

impl LogSource for PmSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn block_count(&self) -> u64 {
        self.block_count
    }

    fn block(&self, index: u64) -> Result<(&[u8], u64)> {
        if index >= self.block_count {
            return Err(Error::InvalidArgument(format!(
                "{}: no block {index}",
                self.name
            )));
        }
        let i = self
            .extents
            .partition_point(|e| e.first_block <= index)
            .saturating_sub(1);
        let e = self.extents[i];
        let at = e.offset + EXTENT_HEADER_BYTES + (index - e.first_block) * BLOCK;
        Ok((self.region.slice(at, BLOCK_SIZE)?, at))
    }

    fn tail(&self) -> Tail {
        Tail::Unordered {
            sealed_end: self.sealed_end,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::storage::sim::SimRegion;

    #[test]
    fn worked_example_header_bytes() {
        let b = encode_extent_header(9, extent_len_for_blocks(2));
        assert_eq!(&b[0..16], b"tkvPMWAL\x01\0\0\0\x05\xb5\xc1\xfe");
        assert_eq!(&b[24..32], &[0x00, 0x10, 0x01, 0, 0, 0, 0, 0]);
        let r = SimRegion::new(0x30000);
        r.write(0x10000, &b).unwrap();
        let h = read_extent_header(&r, 0x10000).unwrap();
        assert_eq!((h.log_number, h.extent_len, h.next), (9, 0x11000, 0));
        // `next` is outside the checksum: linking does not rewrite it.
        r.write(0x10020, &0x20000u64.to_le_bytes()).unwrap();
        assert_eq!(read_extent_header(&r, 0x10000).unwrap().next, 0x20000);
        r.corrupt(0x10018, 1).unwrap();
        assert!(read_extent_header(&r, 0x10000).unwrap_err().is_corruption());
    }
}
