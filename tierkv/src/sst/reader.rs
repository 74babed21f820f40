//! Reading an SST file: [`Table`] (point gets, the two-level iterator
//! [`TableIter`]) over a [`RandomAccessFile`].
//!
//! # What `open` checks
//!
//! 1. The file is at least a footer long; the footer's magic, checksum and
//!    version are right; the three metadata handles lie before the footer.
//! 2. The filter, properties and index blocks (read with one positional
//!    read: they are contiguous after the data blocks) have correct trailers
//!    and checksums, whatever `verify_checksums` says, and decode.
//! 3. Every index entry holds a handle of a data block lying before the
//!    metadata, in increasing non-overlapping order, and their count is the
//!    properties' data block count.
//!
//! Any failure is `Error::Corruption` naming the file and the offset of the
//! bad block (or of the footer). Data blocks are checked when read: trailer
//! type always, checksum when `ReadConfig::verify_checksums`; a bad one is an
//! error from the `get` or iterator step that read it.
//!
//! # Readahead
//!
//! A [`TableIter`] that reads data blocks in file order (a compaction's
//! input, a long scan) reads ahead: from the third block in a row, a block
//! the cache does not hold is cut from a window of the file read at once —
//! 8 KiB, doubling per window up to [`READAHEAD_MAX_BYTES`] (RocksDB's auto
//! readahead, `FilePrefetchBuffer`); the head of a block a window cut short
//! starts the next one. A compaction of 4 KiB values otherwise makes a
//! `pread` per block: 1.3 M of them in a `medium` `triangle` fill, 38 K
//! with readahead (`strace -c`). Blocks are checked as before, each on its
//! own (trailer, checksum), and a window never reaches past the data
//! blocks. A seek, a step backwards or a block out of order starts over
//! without a window, so point reads and short seeks read what they read
//! before.
//!
//! # Concurrency
//!
//! A [`Table`] is immutable and shared (`Arc<Table>`) by any number of
//! readers; the index and filter stay in memory, data blocks go through the
//! shared [`BlockCache`]. Each iterator belongs to one thread.

use std::cmp::Ordering;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::iter::{Found, InternalIterator, TableReader};
use crate::key::{compare_internal, parse_internal_key, seek_key, Kind, SeqNo, MAX_SEQNO};
use crate::stats::StatsRecorder;
use crate::storage::RandomAccessFile;

use super::block::{Block, BlockIter};
use super::bloom::BloomFilter;
use super::builder::{
    unmask_crc, Footer, TableProps, BLOCK_TRAILER_LEN, BLOCK_TYPE_NONE, FOOTER_LEN,
};
use super::cache::{BlockCache, Lookup};
use super::compress::{decompress_block, Compression};
use super::index::BlockHandle;

/// Where a table's reads are counted. Every field is optional; the
/// engine passes its [`StatsRecorder`] (see [`TableCounters::from_recorder`])
/// or its own counters.
#[derive(Clone, Default)]
pub struct TableCounters {
    /// Bytes read from the file (the SSD-read statistic).
    pub bytes_read: Option<Arc<AtomicU64>>,
    /// Data block reads served by the block cache.
    pub cache_hits: Option<Arc<AtomicU64>>,
    /// Data block reads that missed the block cache (counted only when the
    /// table has a cache).
    pub cache_misses: Option<Arc<AtomicU64>>,
    /// The engine's recorder: its `ssd_bytes_read`, `block_cache_hits` and
    /// `block_cache_misses` are updated too.
    pub recorder: Option<Arc<StatsRecorder>>,
}

impl std::fmt::Debug for TableCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableCounters")
            .field("bytes_read", &self.bytes_read)
            .field("cache_hits", &self.cache_hits)
            .field("cache_misses", &self.cache_misses)
            .field("recorder", &self.recorder.is_some())
            .finish()
    }
}

impl TableCounters {
    /// Counters that feed the engine's recorder.
    pub fn from_recorder(recorder: Arc<StatsRecorder>) -> Self {
        TableCounters {
            recorder: Some(recorder),
            ..TableCounters::default()
        }
    }

    #[inline]
    fn add_bytes_read(&self, n: u64) {
        if let Some(c) = &self.bytes_read {
            c.fetch_add(n, AtomicOrdering::Relaxed);
        }
        if let Some(r) = &self.recorder {
            r.ssd_bytes_read.fetch_add(n, AtomicOrdering::Relaxed);
        }
    }

    #[inline]
    fn add_hit(&self) {
        if let Some(c) = &self.cache_hits {
            c.fetch_add(1, AtomicOrdering::Relaxed);
        }
        if let Some(r) = &self.recorder {
            r.block_cache_hits.fetch_add(1, AtomicOrdering::Relaxed);
        }
    }

    #[inline]
    fn add_miss(&self) {
        if let Some(c) = &self.cache_misses {
            c.fetch_add(1, AtomicOrdering::Relaxed);
        }
        if let Some(r) = &self.recorder {
            r.block_cache_misses.fetch_add(1, AtomicOrdering::Relaxed);
        }
    }
}

/// How a table is read.
#[derive(Debug, Clone)]
pub struct ReadConfig {
    /// Verify the checksum of every data block read (metadata blocks are
    /// always verified).
    pub verify_checksums: bool,
    /// Where reads are counted.
    pub counters: TableCounters,
}

impl Default for ReadConfig {
    fn default() -> Self {
        ReadConfig {
            verify_checksums: true,
            counters: TableCounters::default(),
        }
    }
}

/// An open SST file.
pub struct Table {
    file: Arc<dyn RandomAccessFile>,
    path: Arc<str>,
    id: u64,
    cache: Option<Arc<BlockCache>>,
    cfg: ReadConfig,
    index: Arc<Block>,
    filter: BloomFilter,
    props: TableProps,
    /// End of the data blocks = start of the metadata blocks.
    data_end: u64,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("path", &self.path)
            .field("id", &self.id)
            .field("props", &self.props)
            .finish()
    }
}

/// Checks a block's trailer (a known type always, the checksum if
/// `verify`) and returns the block type.
fn check_trailer(block_and_trailer: &[u8], verify: bool, path: &str, offset: u64) -> Result<u8> {
    let n = block_and_trailer.len() - BLOCK_TRAILER_LEN;
    let t = &block_and_trailer[n..];
    if Compression::from_block_type(t[0]).is_none() {
        return Err(Error::corruption(
            path,
            offset,
            format!("unknown block type {}", t[0]),
        ));
    }
    if verify {
        let stored = u32::from_le_bytes([t[1], t[2], t[3], t[4]]);
        let actual = crate::coding::crc32c(&block_and_trailer[..n + 1]);
        if unmask_crc(stored) != actual {
            return Err(Error::corruption(path, offset, "block checksum mismatch"));
        }
    }
    Ok(t[0])
}

impl Table {
    /// Opens the SST in `file` (see the module docs for what is checked).
    /// `table_id` keys the table's blocks in `cache`.
    pub fn open(
        file: Arc<dyn RandomAccessFile>,
        table_id: u64,
        cache: Option<Arc<BlockCache>>,
        opts: ReadConfig,
    ) -> Result<Arc<Table>> {
        let path: Arc<str> = Arc::from(file.path().display().to_string());
        let corrupt = |offset: u64, what: String| Error::corruption(&*path, offset, what);
        let len = file.len();
        if len < FOOTER_LEN as u64 {
            return Err(corrupt(
                0,
                format!("file of {len} bytes is too short to be an SST"),
            ));
        }
        let footer_off = len - FOOTER_LEN as u64;
        let mut fbuf = [0u8; FOOTER_LEN];
        file.read_exact_at(footer_off, &mut fbuf)?;
        opts.counters.add_bytes_read(FOOTER_LEN as u64);
        let footer = Footer::decode(&fbuf).map_err(|w| corrupt(footer_off, w.to_string()))?;

        let handles = [
            ("filter", footer.filter),
            ("properties", footer.props),
            ("index", footer.index),
        ];
        let mut meta_start = footer_off;
        for (name, h) in handles {
            match h.end_with_trailer() {
                Some(end) if end <= footer_off => meta_start = meta_start.min(h.offset),
                _ => {
                    return Err(corrupt(
                        footer_off,
                        format!(
                            "{name} block handle (offset {}, size {}) beyond the footer",
                            h.offset, h.size
                        ),
                    ))
                }
            }
        }

        // One read for the three metadata blocks.
        let meta_len = usize::try_from(footer_off - meta_start)
            .map_err(|_| corrupt(footer_off, "metadata too large".into()))?;
        let mut meta = vec![0u8; meta_len];
        file.read_exact_at(meta_start, &mut meta)?;
        opts.counters.add_bytes_read(meta_len as u64);
        let block_of = |h: BlockHandle| -> Result<Vec<u8>> {
            // In range: end_with_trailer(h) <= footer_off and h.offset >= meta_start.
            let start = (h.offset - meta_start) as usize;
            let end = start + h.size as usize + BLOCK_TRAILER_LEN;
            let raw = &meta[start..end];
            let t = check_trailer(raw, true, &path, h.offset)?;
            if t != BLOCK_TYPE_NONE {
                return Err(corrupt(
                    h.offset,
                    format!("metadata block of type {t}: metadata blocks are never compressed"),
                ));
            }
            Ok(raw[..h.size as usize].to_vec())
        };

        let mut props = TableProps::decode(&block_of(footer.props)?)
            .map_err(|w| corrupt(footer.props.offset, format!("bad properties block: {w}")))?;
        props.file_size_bytes = len;
        props.index_size_bytes = footer.index.size;
        props.filter_size_bytes = footer.filter.size;

        let filter = BloomFilter::new(block_of(footer.filter)?)
            .ok_or_else(|| corrupt(footer.filter.offset, "bad filter block".into()))?;

        let index = Arc::new(Block::new(
            block_of(footer.index)?,
            Arc::clone(&path),
            footer.index.offset,
        )?);
        drop(meta);
        validate_index(&index, meta_start, &props, &path, footer.index.offset)?;

        Ok(Arc::new(Table {
            file,
            path,
            id: table_id,
            cache,
            cfg: opts,
            index,
            filter,
            props,
            data_end: meta_start,
        }))
    }

    /// The table's properties.
    pub fn props(&self) -> &TableProps {
        &self.props
    }

    /// The id the table was opened with.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The file path (as used in error messages).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Number of data blocks.
    pub fn block_count(&self) -> u64 {
        self.props.data_block_count
    }

    /// False only if the filter rules `user_key` out.
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        self.filter.may_contain(user_key)
    }

    /// Approximate file offset where `internal_key` would be: the offset of
    /// the data block that may hold it, or the end of the data blocks.
    pub fn approximate_offset_of(&self, internal_key: &[u8]) -> u64 {
        let mut it = BlockIter::new(Arc::clone(&self.index));
        it.seek(internal_key);
        if it.valid() {
            if let Some(h) = BlockHandle::decode(it.value()) {
                return h.offset;
            }
        }
        self.data_end
    }

    /// An iterator over the table with its concrete type.
    pub fn table_iter(self: &Arc<Self>, fill_cache: bool) -> TableIter {
        TableIter::new(Arc::clone(self), fill_cache)
    }

    fn bad_handle(&self, at: u64) -> Error {
        Error::corruption(&*self.path, at, "malformed block handle in the index block")
    }

    /// Reads (or finds in the cache) the data block at `h`; a miss is read
    /// through `ahead` when it has one.
    fn read_block(
        &self,
        h: BlockHandle,
        fill_cache: bool,
        ahead: Option<&mut Readahead>,
    ) -> Result<Arc<Block>> {
        let need = self.stored_len(h)?;
        let ahead = ahead.and_then(|a| a.in_order(h.offset, need).then_some(a));
        let buf = match &self.cache {
            Some(cache) => {
                // A spare buffer only for a block that goes back to the cache.
                let found = if fill_cache {
                    cache.lookup(self.id, h.offset, need)
                } else {
                    cache
                        .get(self.id, h.offset)
                        .map_or_else(|| Lookup::Miss(Vec::with_capacity(need)), Lookup::Hit)
                };
                match found {
                    Lookup::Hit(b) => {
                        self.cfg.counters.add_hit();
                        return Ok(b);
                    }
                    Lookup::Miss(buf) => {
                        self.cfg.counters.add_miss();
                        buf
                    }
                }
            }
            None => Vec::with_capacity(need),
        };
        let verify = self.cfg.verify_checksums;
        let (t, buf) = match ahead {
            Some(ahead) => self.read_stored_ahead(h, need, verify, buf, ahead)?,
            None => self.read_stored_into(h, need, verify, buf)?,
        };
        let buf = decompress_block(t, buf, &self.path, h.offset)?;
        let block = Arc::new(Block::new(buf, Arc::clone(&self.path), h.offset)?);
        if fill_cache {
            if let Some(cache) = &self.cache {
                cache.insert(self.id, h.offset, Arc::clone(&block));
            }
        }
        Ok(block)
    }
}

/// One data block as a table's index lists it (for inspection tools).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataBlockInfo {
    /// The index key of the block (≥ its last key, < the next block's first).
    pub separator: Vec<u8>,
    /// Where the stored block lies (size without the trailer).
    pub handle: BlockHandle,
    /// The codec of the block's trailer type byte.
    pub compression: Compression,
    /// The size of the block once decompressed (the stored size for an
    /// uncompressed block; from the length prefix otherwise).
    pub raw_size_bytes: u64,
}

impl Table {
    /// Every index entry: separator key and data block handle, in file
    /// order.
    pub fn index_entries(&self) -> Result<Vec<(Vec<u8>, BlockHandle)>> {
        let mut out = Vec::new();
        let mut it = BlockIter::new(Arc::clone(&self.index));
        it.seek_to_first();
        while it.valid() {
            let h = BlockHandle::decode(it.value())
                .ok_or_else(|| self.bad_handle(self.index.file_offset()))?;
            out.push((it.key().to_vec(), h));
            it.next();
        }
        it.status()?;
        Ok(out)
    }

    /// Reads the stored bytes and trailer of the data block at `h`,
    /// bypassing the cache; checks the trailer's type (and its checksum if
    /// `verify`). Returns the block type and the stored bytes.
    fn read_stored(&self, h: BlockHandle, verify: bool) -> Result<(u8, Vec<u8>)> {
        let len = self.stored_len(h)?;
        self.read_stored_into(h, len, verify, Vec::new())
    }

    /// The bytes of the data block at `h` with its trailer, checked to lie
    /// in the data area (open checked every index handle; a buffer is
    /// never sized from one that does not).
    fn stored_len(&self, h: BlockHandle) -> Result<usize> {
        match h.end_with_trailer() {
            Some(end) if end <= self.data_end => Ok((end - h.offset) as usize),
            _ => Err(Error::corruption(
                &*self.path,
                h.offset,
                format!("data block of {} bytes beyond the data area", h.size),
            )),
        }
    }

    /// [`Table::read_stored`] of the `len` bytes [`Table::stored_len`]
    /// gave for `h`, into `buf` (its contents are discarded).
    fn read_stored_into(
        &self,
        h: BlockHandle,
        len: usize,
        verify: bool,
        mut buf: Vec<u8>,
    ) -> Result<(u8, Vec<u8>)> {
        buf.clear();
        buf.reserve_exact(len);
        self.file.read_exact_at_append(h.offset, len, &mut buf)?;
        self.cfg.counters.add_bytes_read(buf.len() as u64);
        let t = check_trailer(&buf, verify, &self.path, h.offset)?;
        buf.truncate(h.size as usize);
        Ok((t, buf))
    }

    /// [`Table::read_stored_into`] through `ahead`: the block is cut from
    /// its window, which is refilled first if it does not hold the block
    /// (module doc, "Readahead").
    fn read_stored_ahead(
        &self,
        h: BlockHandle,
        len: usize,
        verify: bool,
        mut buf: Vec<u8>,
        ahead: &mut Readahead,
    ) -> Result<(u8, Vec<u8>)> {
        if ahead.slice(h.offset, len).is_none() {
            // `stored_len` checked that the block ends within the data.
            let room = usize::try_from(self.data_end - h.offset).unwrap_or(usize::MAX);
            let want = ahead.window.max(len).min(room);
            ahead.window = (ahead.window * 2).min(READAHEAD_MAX_BYTES);
            // The head of a block the last window cut short is kept, not
            // read again.
            let kept = match h.offset.checked_sub(ahead.start) {
                Some(d) if d < ahead.buf.len() as u64 => ahead.buf.len() - d as usize,
                _ => 0,
            };
            ahead.buf.drain(..ahead.buf.len() - kept);
            ahead.start = h.offset;
            let from = h.offset + kept as u64;
            if let Err(e) = self
                .file
                .read_exact_at_append(from, want - kept, &mut ahead.buf)
            {
                ahead.buf.clear();
                return Err(e);
            }
            self.cfg.counters.add_bytes_read((want - kept) as u64);
        }
        let bytes = ahead.slice(h.offset, len).ok_or_else(|| {
            Error::corruption(
                &*self.path,
                h.offset,
                "short read into the readahead window",
            )
        })?;
        buf.clear();
        buf.extend_from_slice(bytes);
        let t = check_trailer(&buf, verify, &self.path, h.offset)?;
        buf.truncate(h.size as usize);
        Ok((t, buf))
    }

    /// Describes every data block (reads each block's trailer and length
    /// prefix; checksums are not verified: see [`Table::verify`]).
    pub fn data_blocks(&self) -> Result<Vec<DataBlockInfo>> {
        self.index_entries()?
            .into_iter()
            .map(|(separator, h)| {
                let (t, stored) = self.read_stored(h, false)?;
                let compression = Compression::from_block_type(t).unwrap_or_default();
                let raw_size_bytes = if compression == Compression::None {
                    h.size
                } else {
                    crate::coding::get_varint(&stored).map_or(0, |(n, _)| n)
                };
                Ok(DataBlockInfo {
                    separator,
                    handle: h,
                    compression,
                    raw_size_bytes,
                })
            })
            .collect()
    }

    /// Checks the whole table, whatever `ReadConfig::verify_checksums`
    /// says: every data block's checksum, that it decompresses and decodes,
    /// that keys are internal keys increasing across the file and within
    /// their block's index separator, and that the entries add up to the
    /// properties' count. Returns the number of entries. The first damage
    /// is `Error::Corruption` naming the file and the block's offset.
    pub fn verify(&self) -> Result<u64> {
        let mut count = 0u64;
        let mut deletions = 0u64;
        let mut prev: Vec<u8> = Vec::new();
        for (separator, h) in self.index_entries()? {
            let (t, stored) = self.read_stored(h, true)?;
            let raw = decompress_block(t, stored, &self.path, h.offset)?;
            let block = Arc::new(Block::new(raw, Arc::clone(&self.path), h.offset)?);
            let mut it = block.iter();
            it.seek_to_first();
            while it.valid() {
                let bad =
                    |what: &str| Err(Error::corruption(&*self.path, h.offset, what.to_string()));
                let Some(p) = parse_internal_key(it.key()) else {
                    return bad("entry key is not an internal key");
                };
                if count > 0 && compare_internal(&prev, it.key()) != Ordering::Less {
                    return bad("keys are not increasing");
                }
                if compare_internal(it.key(), &separator) == Ordering::Greater {
                    return bad("a key is beyond the block's index separator");
                }
                if p.kind == Kind::Delete {
                    deletions += 1;
                }
                prev.clear();
                prev.extend_from_slice(it.key());
                count += 1;
                it.next();
            }
            it.status()?;
        }
        if count != self.props.entries || deletions != self.props.deletions {
            return Err(Error::corruption(
                &*self.path,
                self.index.file_offset(),
                format!(
                    "the blocks hold {count} entries ({deletions} deletions); the properties say {} ({})",
                    self.props.entries, self.props.deletions
                ),
            ));
        }
        Ok(count)
    }
}

/// Open-time check 3 (see the module docs).
fn validate_index(
    index: &Arc<Block>,
    data_end: u64,
    props: &TableProps,
    path: &str,
    index_offset: u64,
) -> Result<()> {
    let mut it = index.iter();
    it.seek_to_first();
    let mut count = 0u64;
    let mut next_free = 0u64;
    let mut prev_key: Vec<u8> = Vec::new();
    while it.valid() {
        let bad = |what: &str| Err(Error::corruption(path, index_offset, what.to_string()));
        let Some(h) = BlockHandle::decode(it.value()) else {
            return bad("malformed block handle in the index block");
        };
        match h.end_with_trailer() {
            Some(end) if h.offset >= next_free && end <= data_end => next_free = end,
            _ => return bad("index block handle out of order or out of range"),
        }
        if count > 0 && compare_internal(&prev_key, it.key()) != Ordering::Less {
            return bad("index keys are not increasing");
        }
        prev_key.clear();
        prev_key.extend_from_slice(it.key());
        count += 1;
        it.next();
    }
    it.status()?;
    if count != props.data_block_count || (count == 0) != (props.entries == 0) {
        return Err(Error::corruption(
            path,
            index_offset,
            format!(
                "index has {count} entries; properties say {} data blocks and {} entries",
                props.data_block_count, props.entries
            ),
        ));
    }
    Ok(())
}

impl TableReader for Table {
    fn get(&self, user_key: &[u8], seq: SeqNo) -> Result<Option<Found>> {
        if !self.filter.may_contain(user_key) {
            return Ok(None);
        }
        let target = seek_key(user_key, seq.min(MAX_SEQNO));
        // One key buffer serves the index and the data block seek.
        let key_buf = Vec::with_capacity(target.len() + 32);
        let mut idx = BlockIter::with_buffer(Arc::clone(&self.index), key_buf);
        idx.seek(&target);
        if !idx.valid() {
            idx.status()?;
            return Ok(None);
        }
        let h = BlockHandle::decode(idx.value())
            .ok_or_else(|| self.bad_handle(self.index.file_offset()))?;
        let block = self.read_block(h, true, None)?;
        let mut it = BlockIter::with_buffer(block, idx.into_key_buffer());
        it.seek(&target);
        if !it.valid() {
            it.status()?;
            return Ok(None);
        }
        let Some(p) = parse_internal_key(it.key()) else {
            return Err(Error::corruption(
                &*self.path,
                h.offset,
                "entry key is not an internal key",
            ));
        };
        if p.user_key != user_key {
            return Ok(None);
        }
        let value = match p.kind {
            Kind::Put => it.value().to_vec(),
            Kind::Delete => Vec::new(),
        };
        Ok(Some(Found {
            seq: p.seq,
            kind: p.kind,
            value,
        }))
    }

    fn iter(self: Arc<Self>, fill_cache: bool) -> Box<dyn InternalIterator> {
        Box::new(TableIter::new(self, fill_cache))
    }
}

/// The two-level iterator over a table: an index iterator picking data
/// blocks, and a data block iterator within the current one.
///
/// On an I/O error or corruption it becomes invalid for good and reports
/// the error from `status`.
pub struct TableIter {
    table: Arc<Table>,
    index: BlockIter,
    data: Option<BlockIter>,
    /// File offset of the block in `data`.
    data_offset: u64,
    /// The key buffer while `data` is `None`.
    spare: Vec<u8>,
    fill_cache: bool,
    ahead: Readahead,
    err: Option<Error>,
}

/// The largest readahead window (RocksDB's `max_auto_readahead_size`): 64
/// blocks of 4 KiB values a read, enough that the `pread`s' fixed costs
/// vanish, small enough that a merge's dozens of input iterators hold a few
/// MiB between them.
pub const READAHEAD_MAX_BYTES: usize = 256 << 10;

/// The first window, after two blocks in file order.
const READAHEAD_FIRST_BYTES: usize = 8 << 10;

/// Blocks read in file order before a read fills a window.
const READAHEAD_AFTER_BLOCKS: u32 = 2;

/// A [`TableIter`]'s readahead: the blocks it read in file order and the
/// window of the file it read last (module doc, "Readahead").
struct Readahead {
    /// File bytes from `start`.
    buf: Vec<u8>,
    start: u64,
    /// Where the block after the last one read starts.
    next: u64,
    /// Blocks read in file order up to the last one.
    run: u32,
    /// The size of the next window.
    window: usize,
}

impl Readahead {
    fn new() -> Self {
        Readahead {
            buf: Vec::new(),
            start: 0,
            next: u64::MAX,
            run: 0,
            window: READAHEAD_FIRST_BYTES,
        }
    }

    /// Notes a block read of `len` bytes at `offset`; true when it is read
    /// through the window (it follows enough blocks in file order, or the
    /// window holds it already).
    fn in_order(&mut self, offset: u64, len: usize) -> bool {
        if offset == self.next {
            self.run = self.run.saturating_add(1);
        } else {
            self.run = 0;
            self.window = READAHEAD_FIRST_BYTES;
        }
        self.next = offset.saturating_add(len as u64);
        self.run >= READAHEAD_AFTER_BLOCKS || self.slice(offset, len).is_some()
    }

    /// The `len` bytes at `offset`, if the window holds them.
    fn slice(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let from = usize::try_from(offset.checked_sub(self.start)?).ok()?;
        self.buf.get(from..from.checked_add(len)?)
    }
}

impl TableIter {
    /// An unpositioned iterator over `table`.
    pub fn new(table: Arc<Table>, fill_cache: bool) -> Self {
        let index = BlockIter::new(Arc::clone(&table.index));
        TableIter {
            table,
            index,
            data: None,
            data_offset: 0,
            spare: Vec::new(),
            fill_cache,
            ahead: Readahead::new(),
            err: None,
        }
    }

    fn fail(&mut self, e: Error) {
        if self.err.is_none() {
            self.err = Some(e);
        }
        self.clear_data();
    }

    fn clear_data(&mut self) {
        if let Some(d) = self.data.take() {
            self.spare = d.into_key_buffer();
        }
    }

    /// Points `data` at the block the index is on (unpositioned).
    /// REQUIRES: the index iterator is valid.
    fn load_data_block(&mut self) {
        let Some(h) = BlockHandle::decode(self.index.value()) else {
            let e = self.table.bad_handle(self.table.index.file_offset());
            self.fail(e);
            return;
        };
        if self.data.is_some() && self.data_offset == h.offset {
            return;
        }
        match self
            .table
            .read_block(h, self.fill_cache, Some(&mut self.ahead))
        {
            Ok(b) => {
                match &mut self.data {
                    Some(d) => d.reset(b),
                    None => {
                        let buf = std::mem::take(&mut self.spare);
                        self.data = Some(BlockIter::with_buffer(b, buf));
                    }
                }
                self.data_offset = h.offset;
            }
            Err(e) => self.fail(e),
        }
    }

    /// After the index moved off its range: records its error, if any.
    fn index_exhausted(&mut self) {
        match self.index.status() {
            Ok(()) => self.clear_data(),
            Err(e) => self.fail(e),
        }
    }

    /// True if the data iterator is valid; records its error if it has one.
    fn data_ok(&mut self) -> bool {
        match &self.data {
            Some(d) if d.valid() => true,
            Some(d) => {
                if let Err(e) = d.status() {
                    self.fail(e);
                }
                false
            }
            None => false,
        }
    }

    fn skip_empty_forward(&mut self) {
        while self.err.is_none() && !self.data_ok() && self.err.is_none() {
            if !self.index.valid() {
                self.index_exhausted();
                return;
            }
            self.index.next();
            if !self.index.valid() {
                self.index_exhausted();
                return;
            }
            self.load_data_block();
            if let Some(d) = &mut self.data {
                d.seek_to_first();
            }
        }
    }

    fn skip_empty_backward(&mut self) {
        while self.err.is_none() && !self.data_ok() && self.err.is_none() {
            if !self.index.valid() {
                self.index_exhausted();
                return;
            }
            self.index.prev();
            if !self.index.valid() {
                self.index_exhausted();
                return;
            }
            self.load_data_block();
            if let Some(d) = &mut self.data {
                d.seek_to_last();
            }
        }
    }

    /// Positions the index with `f`, loads its block and positions that
    /// with `g`.
    fn position(&mut self, f: impl FnOnce(&mut BlockIter), g: impl FnOnce(&mut BlockIter)) {
        if self.err.is_some() {
            return;
        }
        f(&mut self.index);
        if !self.index.valid() {
            self.index_exhausted();
            return;
        }
        self.load_data_block();
        if let Some(d) = &mut self.data {
            g(d);
        }
    }
}

impl InternalIterator for TableIter {
    #[inline]
    fn valid(&self) -> bool {
        self.err.is_none() && self.data.as_ref().is_some_and(|d| d.valid())
    }

    fn seek_to_first(&mut self) {
        self.position(|i| i.seek_to_first(), |d| d.seek_to_first());
        self.skip_empty_forward();
    }

    fn seek_to_last(&mut self) {
        self.position(|i| i.seek_to_last(), |d| d.seek_to_last());
        self.skip_empty_backward();
    }

    fn seek(&mut self, target: &[u8]) {
        self.position(|i| i.seek(target), |d| d.seek(target));
        self.skip_empty_forward();
    }

    fn next(&mut self) {
        debug_assert!(self.valid(), "TableIter::next on an invalid iterator");
        if let Some(d) = &mut self.data {
            d.next();
        }
        self.skip_empty_forward();
    }

    fn prev(&mut self) {
        debug_assert!(self.valid(), "TableIter::prev on an invalid iterator");
        if let Some(d) = &mut self.data {
            d.prev();
        }
        self.skip_empty_backward();
    }

    #[inline]
    fn key(&self) -> &[u8] {
        match &self.data {
            Some(d) if d.valid() => d.key(),
            _ => &[],
        }
    }

    #[inline]
    fn value(&self) -> &[u8] {
        match &self.data {
            Some(d) if d.valid() => d.value(),
            _ => &[],
        }
    }

    fn status(&self) -> Result<()> {
        if let Some(e) = &self.err {
            return Err(e.clone());
        }
        self.index.status()?;
        match &self.data {
            Some(d) => d.status(),
            None => Ok(()),
        }
    }
}
