//! Appending records to a log.
//!
//! [`Writer`] cuts each record into fragments (format: the [module
//! docs](super)) and hands the header and payload slices to a [`LogSink`]:
//! no allocation and no copy per record besides the sink's own.
//!
//! # Concurrency
//!
//! A `Writer` is used by one thread at a time (`&mut self`); the engine's
//! group commit serialises writers in front of it.
//!
//! # Invariants
//!
//! 1. `block_offset` is the number of bytes of the current block already
//!    handed to the sink (`0..=BLOCK_SIZE`).
//! 2. `bytes_written` is the number of bytes handed to the sink.
//! 3. If a sink call fails after part of a record was appended, the log no
//!    longer ends at a record boundary: the writer is *poisoned* and every
//!    later call returns that error. A failure of [`LogSink::reserve`]
//!    happens before any byte of the record is appended and does not poison
//!    the writer (this is how a full PM region is reported cleanly).

use crate::error::{Error, Result};
use crate::storage::WritableFile;

use super::{
    encode_header, header_log_number, physical_len, type_log_crc, RecordType, BLOCK_SIZE,
    HEADER_SIZE, ZEROS,
};

/// Where a [`Writer`] puts log bytes.
pub trait LogSink: Send {
    /// Appends bytes after everything appended so far. Not durable until
    /// [`sync`](LogSink::sync).
    fn append(&mut self, data: &[u8]) -> Result<()>;

    /// Makes every appended byte durable.
    fn sync(&mut self) -> Result<()>;

    /// Hands buffered bytes to the OS so that a process crash (not a power
    /// loss) keeps them. Default: nothing to do.
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    /// Makes sure the next `len_bytes` bytes can be appended without running
    /// out of space. Called by the writer before each record, so that a full
    /// device is reported before any byte of the record is written. Default:
    /// nothing to do.
    fn reserve(&mut self, len_bytes: u64) -> Result<()> {
        let _ = len_bytes;
        Ok(())
    }

    /// Records durably that the log was closed cleanly where its synced
    /// records end, so that a reader takes later damage for corruption,
    /// never for a torn tail (a PM sink; see `docs/format/wal.md` §4).
    /// Nothing may be appended afterwards. Default: nothing to do (a file's
    /// torn tail is recognised without it).
    fn seal(&mut self) -> Result<()> {
        Ok(())
    }
}

/// A boxed sink is a sink, so the engine can pick the sink at run time
/// (`Writer<Box<dyn LogSink>>`).
impl<S: LogSink + ?Sized> LogSink for Box<S> {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        (**self).append(data)
    }
    fn sync(&mut self) -> Result<()> {
        (**self).sync()
    }
    fn flush(&mut self) -> Result<()> {
        (**self).flush()
    }
    fn reserve(&mut self, len_bytes: u64) -> Result<()> {
        (**self).reserve(len_bytes)
    }
    fn seal(&mut self) -> Result<()> {
        (**self).seal()
    }
}

/// A log in an SSD file: `append` is the file's buffered append, `sync` is
/// the file's sync, `flush` its flush.
pub struct FileSink(pub Box<dyn WritableFile>);

impl LogSink for FileSink {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.0.append(data)
    }
    fn sync(&mut self) -> Result<()> {
        self.0.sync()
    }
    fn flush(&mut self) -> Result<()> {
        self.0.flush()
    }
}

/// Writes records in the log format to a sink.
pub struct Writer<S: LogSink> {
    sink: S,
    log32: u32,
    /// `type_log_crc(t, log32)` for t = 0..=4, so that a fragment's checksum
    /// is one pass over its payload.
    seeds: [u32; 5],
    block_offset: usize,
    bytes_written: u64,
    poisoned: Option<Error>,
}

impl<S: LogSink> Writer<S> {
    /// A writer for a new, empty log numbered `log_number`.
    pub fn new(sink: S, log_number: u64) -> Self {
        let log32 = header_log_number(log_number);
        let mut seeds = [0u32; 5];
        for (t, s) in seeds.iter_mut().enumerate() {
            *s = type_log_crc(t as u8, log32);
        }
        Writer {
            sink,
            log32,
            seeds,
            block_offset: 0,
            bytes_written: 0,
            poisoned: None,
        }
    }

    /// Appends one record (any length, empty included). Not durable until
    /// [`sync`](Self::sync).
    pub fn add_record(&mut self, payload: &[u8]) -> Result<()> {
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        self.sink
            .reserve(physical_len(self.block_offset, payload.len()))?;
        let r = self.emit_record(payload);
        if let Err(e) = &r {
            self.poisoned = Some(e.clone());
        }
        r
    }

    fn emit_record(&mut self, payload: &[u8]) -> Result<()> {
        let mut left = payload;
        let mut begin = true;
        loop {
            debug_assert!(self.block_offset <= BLOCK_SIZE);
            let leftover = BLOCK_SIZE - self.block_offset;
            if leftover < HEADER_SIZE {
                if leftover > 0 {
                    self.sink.append(&ZEROS[..leftover])?;
                    self.bytes_written += leftover as u64;
                }
                self.block_offset = 0;
            }
            let avail = BLOCK_SIZE - self.block_offset - HEADER_SIZE;
            let n = left.len().min(avail);
            let end = n == left.len();
            let ty = match (begin, end) {
                (true, true) => RecordType::Full,
                (true, false) => RecordType::First,
                (false, false) => RecordType::Middle,
                (false, true) => RecordType::Last,
            };
            let (frag, rest) = left.split_at(n);
            let header = encode_header(self.seeds[ty as usize], ty, self.log32, frag);
            self.sink.append(&header)?;
            if !frag.is_empty() {
                self.sink.append(frag)?;
            }
            self.block_offset += HEADER_SIZE + n;
            self.bytes_written += (HEADER_SIZE + n) as u64;
            left = rest;
            begin = false;
            if end {
                debug_assert_eq!(
                    self.bytes_written % BLOCK_SIZE as u64,
                    (self.block_offset % BLOCK_SIZE) as u64
                );
                return Ok(());
            }
        }
    }

    /// Makes every record added so far durable.
    pub fn sync(&mut self) -> Result<()> {
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        self.sink.sync()
    }

    /// Hands buffered records to the OS (survives a process crash, not a
    /// power loss).
    pub fn flush(&mut self) -> Result<()> {
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        self.sink.flush()
    }

    /// Closes the log for good: seals it where its synced records end
    /// ([`LogSink::seal`]). Records added after the last sync are not
    /// covered (they were never acknowledged); a poisoned writer seals too,
    /// since the synced part of its log ends at a record boundary.
    pub fn seal(&mut self) -> Result<()> {
        self.sink.seal()
    }

    /// Log bytes handed to the sink so far (headers and padding included).
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// The sink.
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// The sink, mutably (e.g. to inspect a PM sink's extents).
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// Gives the sink back.
    pub fn into_sink(self) -> S {
        self.sink
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A sink that records appends, for format tests.
    #[derive(Default)]
    struct VecSink {
        bytes: Vec<u8>,
        syncs: usize,
        fail_reserve: bool,
    }

    impl LogSink for VecSink {
        fn append(&mut self, data: &[u8]) -> Result<()> {
            self.bytes.extend_from_slice(data);
            Ok(())
        }
        fn sync(&mut self) -> Result<()> {
            self.syncs += 1;
            Ok(())
        }
        fn reserve(&mut self, _len_bytes: u64) -> Result<()> {
            if self.fail_reserve {
                return Err(Error::InvalidArgument("full".into()));
            }
            Ok(())
        }
    }

    #[test]
    fn writes_the_worked_example() {
        let mut w = Writer::new(VecSink::default(), 5);
        w.add_record(b"hi").unwrap();
        w.sync().unwrap();
        assert_eq!(
            w.sink().bytes,
            [0xe1, 0xfe, 0x39, 0x0c, 2, 0, 1, 5, 0, 0, 0, b'h', b'i']
        );
        assert_eq!(w.bytes_written(), 13);
        assert_eq!(w.sink().syncs, 1);
    }

    #[test]
    fn writes_the_fragmented_example() {
        // docs/format/wal.md: 40 000 × 'a' in log 5 at the start of a log.
        let mut w = Writer::new(VecSink::default(), 5);
        w.add_record(&[b'a'; 40_000]).unwrap();
        let b = &w.sink().bytes;
        assert_eq!(b.len(), 40_000 + 2 * HEADER_SIZE);
        let first = 0x777d_821du32.to_le_bytes();
        let last = 0x4261_b8d3u32.to_le_bytes();
        assert_eq!(&b[0..4], &first);
        assert_eq!(&b[4..11], &[0xf5, 0x7f, 2, 5, 0, 0, 0]);
        assert_eq!(&b[BLOCK_SIZE..BLOCK_SIZE + 4], &last);
        assert_eq!(
            &b[BLOCK_SIZE + 4..BLOCK_SIZE + 11],
            &[0x4b, 0x1c, 4, 5, 0, 0, 0]
        );
    }

    #[test]
    fn fragments_never_cross_blocks_and_pad_with_zeros() {
        let mut w = Writer::new(VecSink::default(), 7);
        let mut expect = 0u64;
        for len in [0usize, 1, BLOCK_SIZE - 30, 5, 100_000, 3, BLOCK_SIZE, 0] {
            let before = w.bytes_written();
            let off = (before % BLOCK_SIZE as u64) as usize;
            w.add_record(&vec![0xab; len]).unwrap();
            expect += physical_len(off, len);
            assert_eq!(w.bytes_written(), expect);
            assert_eq!(w.sink().bytes.len() as u64, expect);
        }
        // Walk the blocks: every header lies inside its block.
        let b = &w.sink().bytes;
        let mut pos = 0usize;
        while pos < b.len() {
            let in_block = BLOCK_SIZE - pos % BLOCK_SIZE;
            if in_block < HEADER_SIZE {
                assert!(b[pos..pos + in_block].iter().all(|&x| x == 0));
                pos += in_block;
                continue;
            }
            let h = super::super::Header::decode(&b[pos..]);
            assert!(HEADER_SIZE + h.length <= in_block);
            assert!(h.verify(&b[pos + HEADER_SIZE..pos + HEADER_SIZE + h.length]));
            pos += HEADER_SIZE + h.length;
        }
        assert_eq!(pos, b.len());
    }

    #[test]
    fn failed_reserve_writes_nothing_and_does_not_poison() {
        let mut w = Writer::new(VecSink::default(), 1);
        w.add_record(b"a").unwrap();
        w.sink_mut().fail_reserve = true;
        assert!(w.add_record(b"b").is_err());
        assert_eq!(w.sink().bytes.len(), 12);
        w.sink_mut().fail_reserve = false;
        w.add_record(b"c").unwrap();
        assert_eq!(w.bytes_written(), 24);
    }
}
