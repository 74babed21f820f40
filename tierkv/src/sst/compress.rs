//! Block compression: the codecs of an SST data block and the block type
//! byte of its trailer.
//!
//! # Stored form of a block (docs/format/sst.md §1.1)
//!
//! ```text
//! type 0 (none):  stored = the block itself
//! type 1 (LZ4):   stored = varint raw_len ‖ LZ4 block format (no frame)
//! type 2 (Zstd):  stored = varint raw_len ‖ one Zstandard frame
//! trailer         = type: u8 ‖ mask(crc32c(stored ‖ type)): u32le
//! ```
//!
//! The checksum covers the stored (compressed) bytes, so a damaged block is
//! caught before the decompressor sees it; with checksums off, every
//! decompressor error and every length mismatch is still
//! `Error::Corruption` (the codecs used here return errors on malformed
//! input instead of panicking: `lz4_flex` with `checked-decode`, `zstd`'s
//! C library).
//!
//! A block is kept compressed only when that saves at least 1/8 of it
//! (RocksDB's rule); otherwise it is stored as type 0, so a table written
//! with compression on may hold uncompressed blocks. The writer compresses
//! data blocks only: the filter, properties and index blocks are always
//! type 0, and the reader refuses another type there.
//!
//! Each codec is a cargo feature of the crate (`lz4`, `zstd`, both on by
//! default): [`Compression::is_available`] tells whether this build has it,
//! and `Options::validate` refuses a missing one at open.

use crate::coding::{get_varint, put_varint};
use crate::error::{Error, Result};

/// Block type byte of an uncompressed block.
pub const BLOCK_TYPE_NONE: u8 = 0;
/// Block type byte of an LZ4-compressed block.
pub const BLOCK_TYPE_LZ4: u8 = 1;
/// Block type byte of a Zstd-compressed block.
pub const BLOCK_TYPE_ZSTD: u8 = 2;

/// The Zstandard level blocks are compressed at (zstd's own default).
pub const ZSTD_LEVEL: i32 = 3;

/// The largest block a compressed block may claim to expand to: a 4 MiB
/// block plus one entry with the largest key and value. A larger `raw_len`
/// is corruption (and bounds what a damaged length can make us allocate).
pub const MAX_RAW_BLOCK_BYTES: u64 =
    (4 << 20) + crate::key::MAX_VALUE_LEN as u64 + crate::key::MAX_KEY_LEN as u64 + 64;

/// A block compression codec (`Options::compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// Blocks are stored as they are (the default).
    #[default]
    None,
    /// LZ4 block format (the `lz4_flex` crate): fast, modest ratio.
    Lz4,
    /// Zstandard at level [`ZSTD_LEVEL`] (the `zstd` crate): better ratio,
    /// more CPU.
    Zstd,
}

impl Compression {
    /// Every codec, in type-byte order.
    pub const ALL: [Compression; 3] = [Compression::None, Compression::Lz4, Compression::Zstd];

    /// The name used in options and on the command line (`none`, `lz4`,
    /// `zstd`).
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// Parses [`Compression::name`].
    pub fn from_name(s: &str) -> Option<Compression> {
        Compression::ALL.into_iter().find(|c| c.name() == s)
    }

    /// The trailer's type byte of a block stored with this codec.
    pub fn block_type(self) -> u8 {
        match self {
            Compression::None => BLOCK_TYPE_NONE,
            Compression::Lz4 => BLOCK_TYPE_LZ4,
            Compression::Zstd => BLOCK_TYPE_ZSTD,
        }
    }

    /// The codec of a trailer's type byte; `None` for an unknown byte.
    pub fn from_block_type(t: u8) -> Option<Compression> {
        Compression::ALL.into_iter().find(|c| c.block_type() == t)
    }

    /// True if this build of tierkv has the codec (cargo features `lz4`
    /// and `zstd`).
    pub fn is_available(self) -> bool {
        match self {
            Compression::None => true,
            Compression::Lz4 => cfg!(feature = "lz4"),
            Compression::Zstd => cfg!(feature = "zstd"),
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Compresses `raw` with `c` into `out` (cleared first) in the stored form
/// of the module docs. Returns the block type to write: `c`'s, or
/// [`BLOCK_TYPE_NONE`] when compressing did not save 1/8 of the block (or
/// `c` is `None`), in which case `out` is left empty and the caller stores
/// `raw` itself.
pub fn compress_block(c: Compression, raw: &[u8], out: &mut Vec<u8>) -> Result<u8> {
    out.clear();
    if c == Compression::None || raw.is_empty() {
        return Ok(BLOCK_TYPE_NONE);
    }
    put_varint(out, raw.len() as u64);
    let header = out.len();
    match c {
        Compression::None => {}
        #[cfg(feature = "lz4")]
        Compression::Lz4 => {
            out.resize(
                header + lz4_flex::block::get_maximum_output_size(raw.len()),
                0,
            );
            let n = lz4_flex::block::compress_into(raw, &mut out[header..]).map_err(|e| {
                Error::InvalidArgument(format!(
                    "lz4 compression of a {}-byte block: {e}",
                    raw.len()
                ))
            })?;
            out.truncate(header + n);
        }
        #[cfg(feature = "zstd")]
        Compression::Zstd => {
            let z = zstd::bulk::compress(raw, ZSTD_LEVEL).map_err(|e| {
                Error::io(format!("zstd compression of a {}-byte block", raw.len()), e)
            })?;
            out.extend_from_slice(&z);
        }
        #[allow(unreachable_patterns)]
        other => {
            return Err(Error::InvalidOptions(format!(
                "`compression` = {other}: this build of tierkv lacks the `{other}` feature"
            )))
        }
    }
    if out.len() >= raw.len() - raw.len() / 8 {
        out.clear();
        return Ok(BLOCK_TYPE_NONE);
    }
    Ok(c.block_type())
}

/// Turns a stored block of type `block_type` back into the block. `source`
/// and `offset` (the file and the block's first byte) name the block in
/// the `Error::Corruption` that any malformed input yields; this never
/// panics.
pub fn decompress_block(
    block_type: u8,
    stored: Vec<u8>,
    source: &str,
    offset: u64,
) -> Result<Vec<u8>> {
    let corrupt = |what: String| Error::corruption(source, offset, what);
    let Some(c) = Compression::from_block_type(block_type) else {
        return Err(corrupt(format!("unknown block type {block_type}")));
    };
    if c == Compression::None {
        return Ok(stored);
    }
    if !c.is_available() {
        return Err(Error::NotADatabase(format!(
            "{source}: the block at offset {offset} is compressed with {c}, which this build of \
             tierkv lacks (cargo feature `{c}`)"
        )));
    }
    let (raw_len, header) =
        get_varint(&stored).ok_or_else(|| corrupt(format!("{c} block: bad length prefix")))?;
    if raw_len > MAX_RAW_BLOCK_BYTES {
        return Err(corrupt(format!(
            "{c} block claims {raw_len} bytes uncompressed, more than any block holds"
        )));
    }
    let body = &stored[header..];
    let raw_len = raw_len as usize;
    let raw: Vec<u8> = match c {
        Compression::None => return Ok(stored),
        #[cfg(feature = "lz4")]
        Compression::Lz4 => {
            let mut raw = vec![0u8; raw_len];
            let n = lz4_flex::block::decompress_into(body, &mut raw)
                .map_err(|e| corrupt(format!("lz4 block does not decompress: {e}")))?;
            raw.truncate(n);
            raw
        }
        #[cfg(feature = "zstd")]
        Compression::Zstd => zstd::bulk::decompress(body, raw_len)
            .map_err(|e| corrupt(format!("zstd block does not decompress: {e}")))?,
        #[allow(unreachable_patterns)]
        _ => return Err(corrupt(format!("{c} is not available"))),
    };
    if raw.len() != raw_len {
        return Err(corrupt(format!(
            "{c} block decompresses to {} bytes, its header says {raw_len}",
            raw.len()
        )));
    }
    Ok(raw)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        (0..4000u32)
            .flat_map(|i| format!("key{:05}value{}", i / 3, i % 7).into_bytes())
            .take(4096)
            .collect()
    }

    #[test]
    fn names_and_type_bytes_round_trip() {
        for c in Compression::ALL {
            assert_eq!(Compression::from_name(c.name()), Some(c));
            assert_eq!(Compression::from_block_type(c.block_type()), Some(c));
        }
        assert_eq!(Compression::from_name("snappy"), None);
        assert_eq!(Compression::from_block_type(3), None);
        assert_eq!(Compression::default(), Compression::None);
    }

    #[test]
    fn every_available_codec_round_trips_and_shrinks_text() {
        let raw = sample();
        for c in [Compression::Lz4, Compression::Zstd] {
            if !c.is_available() {
                continue;
            }
            let mut out = Vec::new();
            let t = compress_block(c, &raw, &mut out).unwrap();
            assert_eq!(t, c.block_type(), "{c}");
            assert!(out.len() < raw.len() / 2, "{c}: {} bytes", out.len());
            assert_eq!(decompress_block(t, out, "f", 0).unwrap(), raw, "{c}");
        }
    }

    #[test]
    fn incompressible_blocks_are_stored_raw() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let raw: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for c in Compression::ALL {
            let mut out = vec![1, 2, 3];
            assert_eq!(compress_block(c, &raw, &mut out).unwrap(), BLOCK_TYPE_NONE);
            assert!(out.is_empty());
        }
    }

    #[test]
    fn damaged_compressed_blocks_are_corruption_never_a_panic() {
        let raw = sample();
        for c in [Compression::Lz4, Compression::Zstd] {
            if !c.is_available() {
                continue;
            }
            let mut good = Vec::new();
            let t = compress_block(c, &raw, &mut good).unwrap();
            let mut cases: Vec<Vec<u8>> = vec![Vec::new(), good[..good.len() / 2].to_vec()];
            for i in (0..good.len()).step_by(7) {
                let mut b = good.clone();
                b[i] ^= 0x5a;
                cases.push(b);
            }
            // A length prefix claiming more than any block.
            let mut huge = Vec::new();
            put_varint(&mut huge, MAX_RAW_BLOCK_BYTES + 1);
            huge.extend_from_slice(&good[2..]);
            cases.push(huge);
            for b in cases {
                match decompress_block(t, b, "t.sst", 99) {
                    Ok(out) => assert_eq!(out.len(), raw.len(), "{c}: wrong length accepted"),
                    Err(Error::Corruption { at, .. }) => {
                        assert_eq!((at.source.as_str(), at.offset), ("t.sst", 99))
                    }
                    Err(e) => panic!("{c}: {e}"),
                }
            }
        }
    }
}
