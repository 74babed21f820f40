//! The write-ahead log record format, shared by the WAL (an SSD file or an
//! extent chain in PM) and the MANIFEST. See `docs/format/wal.md`.
//!
//! # Byte layout
//!
//! A log is a sequence of 32 KiB *blocks* ([`BLOCK_SIZE`]). A record (the
//! caller's payload) is cut into *fragments*, each preceded by an 11-byte
//! header ([`HEADER_SIZE`]); a fragment never crosses a block boundary.
//!
//! ```text
//! block:   | fragment | fragment | ... | fragment | pad (< 11 zero bytes) |
//! fragment:
//!  0        4        6      7            11
//!  +--------+--------+------+------------+---------------------+
//!  | crc32c | length | type | log_number |  payload (length B) |
//!  |  u32le | u16le  |  u8  | u32le      |                     |
//!  +--------+--------+------+------------+---------------------+
//!  crc32c = mask(crc32c(type ‖ log_number ‖ payload))
//!  type   = 1 FULL | 2 FIRST | 3 MIDDLE | 4 LAST      (0 is never written)
//!  log_number = the low 32 bits of the log's number
//! ```
//!
//! A record that fits in the rest of the current block is one FULL fragment;
//! otherwise it is FIRST, zero or more MIDDLE and a LAST. When fewer than
//! [`HEADER_SIZE`] bytes are left in a block, they are zero-filled and the
//! next fragment starts the next block. Hence every block that holds data
//! starts with a header (invariant 2 below), which is what lets the reader
//! look for valid records after a damaged one without misreading a payload
//! as a header.
//!
//! Worked example: log 5, payload `"hi"` at the start of a log, 13 bytes:
//!
//! ```text
//! e1 fe 39 0c | 02 00 | 01 | 05 00 00 00 | 68 69
//!   crc32c      len=2  FULL   log 5        "hi"
//! ```
//!
//! (`crc32c(01 05 00 00 00 68 69) = 0x8a04b4db`; masked — rotated right by
//! 15 bits, plus `0xa282ead8` — `0x0c39fee1`, stored little-endian.)
//!
//! # Invariants
//!
//! 1. A fragment's header and payload lie inside one block.
//! 2. Every block that holds any fragment starts with a fragment header.
//! 3. Bytes after the last fragment of a block are zero (< 11 of them), or
//!    the block ends the log.
//! 4. Every header carries the log number, and the checksum covers it, so
//!    stale bytes of another log (a recycled PM page, an old file) are never
//!    taken for records of this log.
//!
//! # Modules
//!
//! - [`writer`]: [`Writer`] over a [`LogSink`] ([`FileSink`], [`PmSink`]).
//! - [`reader`]: [`Reader`] over a [`LogSource`] (a whole file, or a PM
//!   extent chain), with the torn-tail rule.
//! - [`pm`]: the WAL as a chain of extents in the PM region.
//! - [`LogWriter`]: what the engine's write path appends each committed
//!   group to, implemented by both WALs and by a design's own log.

pub mod pm;
pub mod reader;
pub mod writer;

pub use pm::{is_pm_full, ExtentSource, PmLog, PmSink, PmSource, PmWals};
pub use reader::{FileLog, LogSource, Reader, Tail};
pub use writer::{FileSink, LogSink, Writer};

/// Size of a log block in bytes.
pub const BLOCK_SIZE: usize = 32 * 1024;

/// Size of a fragment header in bytes: crc (4) + length (2) + type (1) +
/// log number (4).
pub const HEADER_SIZE: usize = 11;

/// Largest payload of one fragment.
pub const MAX_FRAGMENT_BYTES: usize = BLOCK_SIZE - HEADER_SIZE;

/// Zero bytes used for block padding and end markers.
pub(crate) static ZEROS: [u8; HEADER_SIZE] = [0; HEADER_SIZE];

/// The type byte of a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordType {
    /// A whole record in one fragment.
    Full = 1,
    /// The first fragment of a record.
    First = 2,
    /// A fragment in the middle of a record.
    Middle = 3,
    /// The last fragment of a record.
    Last = 4,
}

impl RecordType {
    /// Decodes the type byte; `None` for 0 and unknown values.
    pub fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => RecordType::Full,
            2 => RecordType::First,
            3 => RecordType::Middle,
            4 => RecordType::Last,
            _ => return None,
        })
    }

    /// True for FULL and FIRST: a fragment that starts a record.
    pub fn starts_record(self) -> bool {
        matches!(self, RecordType::Full | RecordType::First)
    }
}

const MASK_DELTA: u32 = 0xa282_ead8;

/// Masks a crc32c before storing it, so that the checksum of data that
/// itself contains checksums does not degenerate (the leveldb mask).
#[inline]
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// Inverse of [`mask_crc`].
#[inline]
pub fn unmask_crc(masked: u32) -> u32 {
    masked.wrapping_sub(MASK_DELTA).rotate_left(15)
}

/// The low 32 bits of a log number, as stored in every header.
#[inline]
pub fn header_log_number(log_number: u64) -> u32 {
    log_number as u32
}

/// crc32c of the type byte and log number: the seed a fragment's payload
/// checksum continues from.
#[inline]
pub(crate) fn type_log_crc(ty: u8, log32: u32) -> u32 {
    let l = log32.to_le_bytes();
    crate::coding::crc32c(&[ty, l[0], l[1], l[2], l[3]])
}

/// Builds the 11-byte header of a fragment; `seed` is
/// [`type_log_crc`]`(ty, log32)`.
#[inline]
pub(crate) fn encode_header(
    seed: u32,
    ty: RecordType,
    log32: u32,
    payload: &[u8],
) -> [u8; HEADER_SIZE] {
    debug_assert!(payload.len() <= MAX_FRAGMENT_BYTES);
    let crc = mask_crc(crate::coding::crc32c_append(seed, payload));
    let mut h = [0u8; HEADER_SIZE];
    h[0..4].copy_from_slice(&crc.to_le_bytes());
    h[4..6].copy_from_slice(&(payload.len() as u16).to_le_bytes());
    h[6] = ty as u8;
    h[7..11].copy_from_slice(&log32.to_le_bytes());
    h
}

/// A decoded fragment header (not yet verified against its payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub masked_crc: u32,
    pub length: usize,
    pub ty: u8,
    pub log32: u32,
}

impl Header {
    /// Decodes the first [`HEADER_SIZE`] bytes of `b` (which must hold them).
    #[inline]
    pub fn decode(b: &[u8]) -> Header {
        debug_assert!(b.len() >= HEADER_SIZE);
        Header {
            masked_crc: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            length: usize::from(u16::from_le_bytes([b[4], b[5]])),
            ty: b[6],
            log32: u32::from_le_bytes([b[7], b[8], b[9], b[10]]),
        }
    }

    /// True if the header bytes are all zero (a zero-filled, never written
    /// tail).
    #[inline]
    pub fn is_zero(&self) -> bool {
        self.masked_crc == 0 && self.length == 0 && self.ty == 0 && self.log32 == 0
    }

    /// True if `payload` (exactly `self.length` bytes) matches the checksum.
    #[inline]
    pub fn verify(&self, payload: &[u8]) -> bool {
        debug_assert_eq!(payload.len(), self.length);
        let seed = type_log_crc(self.ty, self.log32);
        unmask_crc(self.masked_crc) == crate::coding::crc32c_append(seed, payload)
    }
}

/// The number of log bytes (headers, payload and block padding) that
/// appending a record of `payload_len` bytes writes when the current block
/// already holds `block_offset` bytes.
pub fn physical_len(block_offset: usize, payload_len: usize) -> u64 {
    debug_assert!(block_offset <= BLOCK_SIZE);
    let mut offset = block_offset;
    let mut left = payload_len;
    let mut total: u64 = 0;
    loop {
        let leftover = BLOCK_SIZE - offset;
        if leftover < HEADER_SIZE {
            total += leftover as u64;
            offset = 0;
        }
        let avail = BLOCK_SIZE - offset - HEADER_SIZE;
        let frag = left.min(avail);
        total += (HEADER_SIZE + frag) as u64;
        offset += HEADER_SIZE + frag;
        left -= frag;
        if left == 0 {
            return total;
        }
    }
}

/// What the write path appends each committed group's batch to before the
/// memtable insert: the WAL on SSD or in PM, or a log a design owns
/// (`design::DesignLog`). One writer is owned by the write path's leader
/// at a time.
pub trait LogWriter: Send {
    /// Appends one record (an encoded write batch with its seqno).
    fn add_record(&mut self, record: &[u8]) -> crate::error::Result<()>;
    /// Makes every appended record durable.
    fn sync(&mut self) -> crate::error::Result<()>;
    /// Hands buffered records to the OS (survives a process crash); a log
    /// written in place does nothing.
    fn flush(&mut self) -> crate::error::Result<()>;
    /// True if the log lives in PM: every group is then persisted before
    /// it is acknowledged (a few cache-line write-backs), sync or not.
    fn in_pm(&self) -> bool;
    /// Bytes this log has written to its device so far.
    fn bytes_written(&self) -> u64;
    /// Closes the log for good where its synced records end (the engine
    /// calls it when it retires a PM log at a memtable switch, and on the
    /// current log at a clean close): a log whose reader cannot tell a torn
    /// tail from damage by
    /// itself (a PM WAL, `docs/format/wal.md` §4) records it, so that later
    /// damage reads as corruption. Nothing may be appended afterwards.
    /// Default: nothing to do (a file's torn tail is recognised without it).
    fn seal(&mut self) -> crate::error::Result<()> {
        Ok(())
    }
}

impl LogWriter for Writer<FileSink> {
    fn add_record(&mut self, record: &[u8]) -> crate::error::Result<()> {
        Writer::add_record(self, record)
    }
    fn sync(&mut self) -> crate::error::Result<()> {
        Writer::sync(self)
    }
    fn flush(&mut self) -> crate::error::Result<()> {
        Writer::flush(self)
    }
    fn in_pm(&self) -> bool {
        false
    }
    fn bytes_written(&self) -> u64 {
        Writer::bytes_written(self)
    }
    fn seal(&mut self) -> crate::error::Result<()> {
        Writer::seal(self)
    }
}

impl LogWriter for Writer<PmSink> {
    fn add_record(&mut self, record: &[u8]) -> crate::error::Result<()> {
        Writer::add_record(self, record)
    }
    fn sync(&mut self) -> crate::error::Result<()> {
        Writer::sync(self)
    }
    fn flush(&mut self) -> crate::error::Result<()> {
        Ok(())
    }
    fn in_pm(&self) -> bool {
        true
    }
    fn bytes_written(&self) -> u64 {
        self.sink().device_bytes()
    }
    fn seal(&mut self) -> crate::error::Result<()> {
        Writer::seal(self)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn mask_roundtrips() {
        for c in [0u32, 1, 0xdead_beef, u32::MAX, 0xa282_ead8] {
            assert_eq!(unmask_crc(mask_crc(c)), c);
        }
    }

    #[test]
    fn worked_example_bytes() {
        let seed = type_log_crc(RecordType::Full as u8, 5);
        let h = encode_header(seed, RecordType::Full, 5, b"hi");
        assert_eq!(
            crate::coding::crc32c(&[1, 5, 0, 0, 0, b'h', b'i']),
            0x8a04_b4db
        );
        assert_eq!(h, [0xe1, 0xfe, 0x39, 0x0c, 2, 0, 1, 5, 0, 0, 0]);
        let d = Header::decode(&h);
        assert!(d.verify(b"hi"));
        assert!(!d.verify(b"ho"));
    }

    #[test]
    fn physical_len_counts_headers_and_padding() {
        assert_eq!(physical_len(0, 0), HEADER_SIZE as u64);
        assert_eq!(physical_len(0, 2), 13);
        assert_eq!(physical_len(0, MAX_FRAGMENT_BYTES), BLOCK_SIZE as u64);
        assert_eq!(
            physical_len(0, MAX_FRAGMENT_BYTES + 1),
            (BLOCK_SIZE + HEADER_SIZE + 1) as u64
        );
        // 5 bytes left in the block: padded, then a full header in the next.
        assert_eq!(physical_len(BLOCK_SIZE - 5, 1), 5 + 12);
        // Exactly a header left: an empty-payload FIRST, then LAST.
        assert_eq!(
            physical_len(BLOCK_SIZE - HEADER_SIZE, 1),
            (2 * HEADER_SIZE + 1) as u64
        );
    }
}
