//! Writing an SST file: [`TableBuilder`], plus the codecs of the pieces the
//! reader checks — block trailer, properties block and footer.
//!
//! # File layout (docs/format/sst.md has the full description)
//!
//! ```text
//! data block 0 ‖ trailer ‖ … ‖ data block N-1 ‖ trailer
//! filter block ‖ trailer          bloom over user keys (bloom.rs)
//! properties block ‖ trailer      tagged fields (below)
//! index block ‖ trailer           one entry per data block (index.rs)
//! footer                          64 bytes, fixed
//!
//! trailer    = type: u8 ‖ mask(crc32c(stored ‖ type)): u32le
//!              type 0 = uncompressed, 1 = LZ4, 2 = Zstd (compress.rs);
//!              stored = the block, or varint raw_len ‖ compressed bytes
//! mask(c)    = ((c >> 15) | (c << 17)) + 0xa282ead8   (mod 2^32)
//!
//! properties = (tag: varint ‖ len: varint ‖ bytes[len])*
//!              tags: 1 entries, 2 deletions, 3 raw key bytes,
//!                    4 raw value bytes, 7 seq_min, 8 seq_max,
//!                    9 data block count (varints inside);
//!                    5 smallest, 6 largest (internal keys, raw bytes).
//!              Unknown tags are skipped.
//!
//! footer     = filter.offset u64 ‖ filter.size u64
//!            ‖ props.offset u64  ‖ props.size u64
//!            ‖ index.offset u64  ‖ index.size u64
//!            ‖ format_version u32 (= 1)
//!            ‖ mask(crc32c(the 52 bytes before)) u32
//!            ‖ magic "tierkSST"                       (all little-endian)
//! ```
//!
//! # Invariants
//!
//! 1. Keys are added in strictly increasing [`compare_internal`] order.
//! 2. A data block is cut as soon as its size estimate reaches
//!    `block_size_bytes`; its index entry is written when the next key is
//!    known (a short separator) or at `finish` (a short successor).
//! 3. Nothing is durable until `finish` has synced the file; after any
//!    error the builder refuses further work (and the caller removes the
//!    file).
//!
//! # Concurrency
//!
//! A builder is owned by the one thread writing the table.

use std::cmp::Ordering;

use crate::coding::{get_u32, get_u64, put_u32, put_u64, put_varint, Reader};
use crate::error::{Error, Result};
use crate::key::{compare_internal, parse_internal_key, user_key, Kind, SeqNo};
use crate::options::Options;
use crate::storage::WritableFile;

use super::block::BlockBuilder;
use super::bloom::BloomBuilder;
use super::compress::{compress_block, Compression};
use super::index::{short_successor, shortest_separator, BlockHandle};

/// Bytes after every block: compression type and masked crc32c.
pub const BLOCK_TRAILER_LEN: usize = 5;
/// The block type of an uncompressed block (the others: [`super::compress`]).
pub const BLOCK_TYPE_NONE: u8 = super::compress::BLOCK_TYPE_NONE;
/// Size of the footer at the end of every SST file.
pub const FOOTER_LEN: usize = 64;
/// The footer's last 8 bytes.
pub const MAGIC: [u8; 8] = *b"tierkSST";
/// The format version written in the footer.
pub const FORMAT_VERSION: u32 = 1;

const CRC_MASK_DELTA: u32 = 0xa282_ead8;

/// leveldb's crc mask: stored checksums are masked so that a checksum of
/// data that itself contains checksums stays well distributed.
#[inline]
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(CRC_MASK_DELTA)
}

/// Inverse of [`mask_crc`].
#[inline]
pub fn unmask_crc(masked: u32) -> u32 {
    masked.wrapping_sub(CRC_MASK_DELTA).rotate_left(15)
}

/// The trailer for an uncompressed `block`: type byte 0 and masked crc of
/// block ‖ type.
#[inline]
pub fn block_trailer(block: &[u8]) -> [u8; BLOCK_TRAILER_LEN] {
    block_trailer_typed(block, BLOCK_TYPE_NONE)
}

/// The trailer for `stored` bytes of block type `block_type`: the type
/// byte and the masked crc of stored ‖ type.
#[inline]
pub fn block_trailer_typed(stored: &[u8], block_type: u8) -> [u8; BLOCK_TRAILER_LEN] {
    let crc = crate::coding::crc32c_append(crate::coding::crc32c(stored), &[block_type]);
    let m = mask_crc(crc).to_le_bytes();
    [block_type, m[0], m[1], m[2], m[3]]
}

/// How tables are built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableOptions {
    /// Target size of an (uncompressed) data block.
    pub block_size_bytes: usize,
    /// Entries between restart points in data blocks.
    pub restart_interval: usize,
    /// Bloom filter bits per user key (0: no filter).
    pub bloom_bits_per_key: usize,
    /// Codec of the data blocks (metadata blocks are never compressed).
    pub compression: Compression,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            block_size_bytes: 4096,
            restart_interval: 16,
            bloom_bits_per_key: 10,
            compression: Compression::None,
        }
    }
}

impl TableOptions {
    /// The table options an engine configured by `opts` uses for tables of
    /// `level` (the level decides the compression,
    /// [`Options::compression_for_level`]).
    pub fn from_options(opts: &Options, level: usize) -> Self {
        TableOptions {
            block_size_bytes: opts.block_size_bytes,
            bloom_bits_per_key: opts.bloom_bits_per_key,
            compression: opts.compression_for_level(level),
            ..TableOptions::default()
        }
    }
}

/// What a finished table holds: what the manifest records, and a few sizes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableProps {
    /// Size of the whole file.
    pub file_size_bytes: u64,
    /// Number of entries (puts and deletes).
    pub entries: u64,
    /// Number of tombstones.
    pub deletions: u64,
    /// Sum of internal key lengths.
    pub raw_key_bytes: u64,
    /// Sum of value lengths.
    pub raw_value_bytes: u64,
    /// Smallest internal key (empty for an empty table).
    pub smallest: Vec<u8>,
    /// Largest internal key (empty for an empty table).
    pub largest: Vec<u8>,
    /// Smallest seqno (0 for an empty table).
    pub seq_min: SeqNo,
    /// Largest seqno (0 for an empty table).
    pub seq_max: SeqNo,
    /// Number of data blocks.
    pub data_block_count: u64,
    /// Size of the index block.
    pub index_size_bytes: u64,
    /// Size of the filter block.
    pub filter_size_bytes: u64,
}

const TAG_ENTRIES: u64 = 1;
const TAG_DELETIONS: u64 = 2;
const TAG_RAW_KEY_BYTES: u64 = 3;
const TAG_RAW_VALUE_BYTES: u64 = 4;
const TAG_SMALLEST: u64 = 5;
const TAG_LARGEST: u64 = 6;
const TAG_SEQ_MIN: u64 = 7;
const TAG_SEQ_MAX: u64 = 8;
const TAG_DATA_BLOCKS: u64 = 9;

impl TableProps {
    /// Encodes the persisted fields as a properties block.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.smallest.len() + self.largest.len());
        let mut tmp = Vec::with_capacity(10);
        let mut int = |out: &mut Vec<u8>, tag: u64, v: u64| {
            tmp.clear();
            put_varint(&mut tmp, v);
            put_varint(out, tag);
            put_varint(out, tmp.len() as u64);
            out.extend_from_slice(&tmp);
        };
        int(&mut out, TAG_ENTRIES, self.entries);
        int(&mut out, TAG_DELETIONS, self.deletions);
        int(&mut out, TAG_RAW_KEY_BYTES, self.raw_key_bytes);
        int(&mut out, TAG_RAW_VALUE_BYTES, self.raw_value_bytes);
        int(&mut out, TAG_SEQ_MIN, self.seq_min);
        int(&mut out, TAG_SEQ_MAX, self.seq_max);
        int(&mut out, TAG_DATA_BLOCKS, self.data_block_count);
        for (tag, k) in [(TAG_SMALLEST, &self.smallest), (TAG_LARGEST, &self.largest)] {
            put_varint(&mut out, tag);
            put_varint(&mut out, k.len() as u64);
            out.extend_from_slice(k);
        }
        out
    }

    /// Decodes a properties block; `Err(what)` if malformed. Sizes that are
    /// not persisted are left 0.
    pub fn decode(src: &[u8]) -> std::result::Result<TableProps, &'static str> {
        let mut p = TableProps::default();
        let mut r = Reader::new(src);
        let mut seen = 0u32;
        while !r.is_empty() {
            let tag = r.varint().ok_or("bad property tag")?;
            let val = r.length_prefixed().ok_or("bad property length")?;
            let int = || -> std::result::Result<u64, &'static str> {
                let mut vr = Reader::new(val);
                let v = vr.varint().ok_or("bad property value")?;
                if !vr.is_empty() {
                    return Err("bad property value");
                }
                Ok(v)
            };
            match tag {
                TAG_ENTRIES => p.entries = int()?,
                TAG_DELETIONS => p.deletions = int()?,
                TAG_RAW_KEY_BYTES => p.raw_key_bytes = int()?,
                TAG_RAW_VALUE_BYTES => p.raw_value_bytes = int()?,
                TAG_SEQ_MIN => p.seq_min = int()?,
                TAG_SEQ_MAX => p.seq_max = int()?,
                TAG_DATA_BLOCKS => p.data_block_count = int()?,
                TAG_SMALLEST => p.smallest = val.to_vec(),
                TAG_LARGEST => p.largest = val.to_vec(),
                _ => continue,
            }
            seen |= 1 << tag;
        }
        let required = (1..=9).fold(0u32, |m, t| m | (1 << t));
        if seen & required != required {
            return Err("properties block lacks a required field");
        }
        if p.deletions > p.entries || p.seq_min > p.seq_max {
            return Err("properties are inconsistent");
        }
        if p.entries > 0 {
            if parse_internal_key(&p.smallest).is_none() || parse_internal_key(&p.largest).is_none()
            {
                return Err("smallest or largest key is not an internal key");
            }
            if compare_internal(&p.smallest, &p.largest) == Ordering::Greater {
                return Err("smallest key is greater than largest key");
            }
        }
        Ok(p)
    }
}

/// The fixed-size footer: handles of the metadata blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// The filter block.
    pub filter: BlockHandle,
    /// The properties block.
    pub props: BlockHandle,
    /// The index block.
    pub index: BlockHandle,
    /// The format version.
    pub version: u32,
}

impl Footer {
    /// Encodes the footer (see the module docs).
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut v = Vec::with_capacity(FOOTER_LEN);
        for h in [self.filter, self.props, self.index] {
            put_u64(&mut v, h.offset);
            put_u64(&mut v, h.size);
        }
        put_u32(&mut v, self.version);
        let crc = mask_crc(crate::coding::crc32c(&v));
        put_u32(&mut v, crc);
        v.extend_from_slice(&MAGIC);
        let mut out = [0u8; FOOTER_LEN];
        out.copy_from_slice(&v);
        out
    }

    /// Decodes and checks a footer; `Err(what)` on a bad magic, checksum or
    /// version.
    pub fn decode(src: &[u8]) -> std::result::Result<Footer, &'static str> {
        if src.len() != FOOTER_LEN {
            return Err("footer has the wrong size");
        }
        if src[FOOTER_LEN - 8..] != MAGIC {
            return Err("bad magic: not a tierkv SST file");
        }
        let stored = get_u32(src, 52).ok_or("short footer")?;
        if unmask_crc(stored) != crate::coding::crc32c(&src[..52]) {
            return Err("footer checksum mismatch");
        }
        let version = get_u32(src, 48).ok_or("short footer")?;
        if version != FORMAT_VERSION {
            return Err("unsupported SST format version");
        }
        let h = |i: usize| -> std::result::Result<BlockHandle, &'static str> {
            Ok(BlockHandle {
                offset: get_u64(src, i * 16).ok_or("short footer")?,
                size: get_u64(src, i * 16 + 8).ok_or("short footer")?,
            })
        };
        Ok(Footer {
            filter: h(0)?,
            props: h(1)?,
            index: h(2)?,
            version,
        })
    }
}

/// Writes one SST file (see the module docs).
pub struct TableBuilder {
    file: Box<dyn WritableFile>,
    opts: TableOptions,
    data_block: BlockBuilder,
    index_block: BlockBuilder,
    bloom: BloomBuilder,
    /// Bytes written to the file so far.
    offset: u64,
    last_key: Vec<u8>,
    /// The last data block written, whose index entry waits for the next key.
    pending_handle: Option<BlockHandle>,
    props: TableProps,
    scratch: Vec<u8>,
    handle_buf: Vec<u8>,
    /// The compressed form of the block being written.
    compressed: Vec<u8>,
    failed: Option<Error>,
    finished: bool,
}

impl TableBuilder {
    /// A builder writing to `file` (empty, freshly created).
    pub fn new(file: Box<dyn WritableFile>, opts: TableOptions) -> Self {
        debug_assert!(file.is_empty(), "TableBuilder needs an empty file");
        let offset = file.len();
        TableBuilder {
            file,
            opts,
            data_block: BlockBuilder::new(opts.restart_interval),
            index_block: BlockBuilder::new(1),
            bloom: BloomBuilder::new(opts.bloom_bits_per_key),
            offset,
            last_key: Vec::new(),
            pending_handle: None,
            props: TableProps {
                seq_min: SeqNo::MAX,
                ..TableProps::default()
            },
            scratch: Vec::new(),
            handle_buf: Vec::with_capacity(BlockHandle::MAX_ENCODED_LEN),
            compressed: Vec::new(),
            failed: None,
            finished: false,
        }
    }

    fn check(&self) -> Result<()> {
        debug_assert!(!self.finished, "TableBuilder used after finish");
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn record<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    /// Appends an entry.
    ///
    /// REQUIRES: `internal_key` is greater than every key added before
    /// (invariant 1). A key that is not an internal key is
    /// `Error::InvalidArgument`.
    pub fn add(&mut self, internal_key: &[u8], value: &[u8]) -> Result<()> {
        self.check()?;
        debug_assert!(
            self.props.entries == 0
                || compare_internal(internal_key, &self.last_key) == Ordering::Greater,
            "TableBuilder keys must be strictly increasing"
        );
        let Some(parsed) = parse_internal_key(internal_key) else {
            return Err(Error::InvalidArgument(format!(
                "not an internal key ({} bytes) added to {}",
                internal_key.len(),
                self.file.path().display()
            )));
        };
        if let Some(handle) = self.pending_handle.take() {
            shortest_separator(&self.last_key, internal_key, &mut self.scratch);
            self.handle_buf.clear();
            handle.encode_to(&mut self.handle_buf);
            self.index_block.add(&self.scratch, &self.handle_buf);
        }
        if self.props.entries == 0 || user_key(&self.last_key) != parsed.user_key {
            self.bloom.add_key(parsed.user_key);
        }
        let p = &mut self.props;
        if p.entries == 0 {
            p.smallest.clear();
            p.smallest.extend_from_slice(internal_key);
        }
        p.entries += 1;
        if parsed.kind == Kind::Delete {
            p.deletions += 1;
        }
        p.raw_key_bytes += internal_key.len() as u64;
        p.raw_value_bytes += value.len() as u64;
        p.seq_min = p.seq_min.min(parsed.seq);
        p.seq_max = p.seq_max.max(parsed.seq);
        self.last_key.clear();
        self.last_key.extend_from_slice(internal_key);

        self.data_block.add(internal_key, value);
        if self.data_block.current_size_estimate() >= self.opts.block_size_bytes {
            self.flush_data_block()?;
        }
        Ok(())
    }

    /// Writes the current data block, if any, and remembers its handle.
    fn flush_data_block(&mut self) -> Result<()> {
        if self.data_block.is_empty() {
            return Ok(());
        }
        debug_assert!(self.pending_handle.is_none());
        let contents = self.data_block.finish();
        let r =
            compress_block(self.opts.compression, contents, &mut self.compressed).and_then(|t| {
                let stored = if t == BLOCK_TYPE_NONE {
                    contents
                } else {
                    &self.compressed
                };
                write_block_typed(&mut *self.file, &mut self.offset, stored, t)
            });
        let handle = self.record(r)?;
        self.data_block.reset();
        self.pending_handle = Some(handle);
        self.props.data_block_count += 1;
        Ok(())
    }

    /// Bytes the file would have if finished now (data written plus the
    /// open data block, counted uncompressed; metadata excluded).
    pub fn estimated_size(&self) -> u64 {
        self.offset + self.data_block.current_size_estimate() as u64
    }

    /// Entries added so far.
    pub fn entries(&self) -> u64 {
        self.props.entries
    }

    /// Writes the filter, properties and index blocks and the footer, syncs
    /// the file, and returns the table's properties.
    pub fn finish(self) -> Result<TableProps> {
        let (props, mut file) = self.finish_unsynced()?;
        file.sync()?;
        Ok(props)
    }

    /// [`TableBuilder::finish`] without the sync: returns the file too, for
    /// the caller to sync (e.g. all outputs of a compaction at once) before
    /// the table is referenced by anything durable.
    pub fn finish_unsynced(mut self) -> Result<(TableProps, Box<dyn WritableFile>)> {
        self.check()?;
        self.flush_data_block()?;

        // Filter.
        let filter = self.bloom.finish();
        let r = write_block(&mut *self.file, &mut self.offset, &filter);
        let filter_handle = self.record(r)?;

        // Properties.
        if self.props.entries == 0 {
            self.props.seq_min = 0;
        }
        self.props.largest.clear();
        self.props.largest.extend_from_slice(&self.last_key);
        let props_block = self.props.encode();
        let r = write_block(&mut *self.file, &mut self.offset, &props_block);
        let props_handle = self.record(r)?;

        // Index.
        if let Some(handle) = self.pending_handle.take() {
            short_successor(&self.last_key, &mut self.scratch);
            self.handle_buf.clear();
            handle.encode_to(&mut self.handle_buf);
            self.index_block.add(&self.scratch, &self.handle_buf);
        }
        let index = self.index_block.finish();
        let r = write_block(&mut *self.file, &mut self.offset, index);
        let index_handle = self.record(r)?;

        // Footer.
        let footer = Footer {
            filter: filter_handle,
            props: props_handle,
            index: index_handle,
            version: FORMAT_VERSION,
        }
        .encode();
        let r = self.file.append(&footer);
        self.record(r)?;
        self.offset += FOOTER_LEN as u64;
        self.finished = true;

        let mut props = std::mem::take(&mut self.props);
        props.file_size_bytes = self.offset;
        props.index_size_bytes = index_handle.size;
        props.filter_size_bytes = filter_handle.size;
        Ok((props, self.file))
    }

    /// Gives up on the table: nothing more is written. The caller removes
    /// the file.
    pub fn abandon(mut self) {
        self.finished = true;
    }
}

/// Appends the uncompressed `contents` and its trailer at `*offset`;
/// returns its handle.
fn write_block(
    file: &mut dyn WritableFile,
    offset: &mut u64,
    contents: &[u8],
) -> Result<BlockHandle> {
    write_block_typed(file, offset, contents, BLOCK_TYPE_NONE)
}

/// Appends `stored` (a block in the stored form of `block_type`) and its
/// trailer at `*offset`; returns its handle (whose size is the stored size).
fn write_block_typed(
    file: &mut dyn WritableFile,
    offset: &mut u64,
    stored: &[u8],
    block_type: u8,
) -> Result<BlockHandle> {
    let handle = BlockHandle {
        offset: *offset,
        size: stored.len() as u64,
    };
    file.append(stored)?;
    file.append(&block_trailer_typed(stored, block_type))?;
    *offset += (stored.len() + BLOCK_TRAILER_LEN) as u64;
    Ok(handle)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn crc_mask_roundtrip() {
        for c in [0u32, 1, 0xdead_beef, u32::MAX] {
            assert_eq!(unmask_crc(mask_crc(c)), c);
            assert_ne!(mask_crc(c), c);
        }
    }

    #[test]
    fn footer_roundtrip_and_checks() {
        let f = Footer {
            filter: BlockHandle {
                offset: 10,
                size: 20,
            },
            props: BlockHandle {
                offset: 35,
                size: 7,
            },
            index: BlockHandle {
                offset: 47,
                size: 99,
            },
            version: FORMAT_VERSION,
        };
        let b = f.encode();
        assert_eq!(Footer::decode(&b), Ok(f));
        for i in 0..FOOTER_LEN {
            let mut c = b;
            c[i] ^= 0x40;
            assert!(Footer::decode(&c).is_err(), "byte {i}");
        }
    }

    #[test]
    fn props_roundtrip() {
        let p = TableProps {
            entries: 3,
            deletions: 1,
            raw_key_bytes: 30,
            raw_value_bytes: 12,
            smallest: crate::key::make_internal_key(b"a", 5, Kind::Put),
            largest: crate::key::make_internal_key(b"c", 2, Kind::Delete),
            seq_min: 2,
            seq_max: 5,
            data_block_count: 1,
            ..TableProps::default()
        };
        assert_eq!(TableProps::decode(&p.encode()), Ok(p.clone()));
        let enc = p.encode();
        assert!(TableProps::decode(&enc[..enc.len() - 1]).is_err());
        assert!(TableProps::decode(&[]).is_err());
    }
}
