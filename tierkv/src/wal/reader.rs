//! Reading records back, and telling a torn tail from body corruption.
//!
//! A [`Reader`] walks the blocks of a [`LogSource`] (a whole file in memory,
//! [`FileLog`], or a PM extent chain, [`PmSource`](super::PmSource), read in
//! place) and reassembles fragments into records (format: the [module
//! docs](super)).
//!
//! # Where the log ends
//!
//! The log ends cleanly at the end of the input, at a zero-filled header
//! (never-written space), or at a valid fragment of *another* log (the
//! recycled tail of a reused PM page or file).
//!
//! # The torn-tail rule
//!
//! A *damaged* record — checksum mismatch, a length that overruns its block,
//! an unknown type, a broken FIRST/MIDDLE/LAST sequence, a truncated header —
//! is either the tail a crash tore, or corruption of the log's body. The
//! reader decides by looking *after* it: it visits every later block start
//! (invariant 2 of the format: every block holding data starts with a
//! header) and follows the valid fragments of this log from there.
//!
//! - If some later fragment of this log that *starts* a record (FULL or
//!   FIRST) verifies, records were written after the damaged one: that is
//!   body corruption, and the reader returns `Error::Corruption` naming the
//!   source and the damaged record's offset.
//! - Otherwise the damage is a torn tail: the log ends cleanly before it,
//!   and [`Reader::torn_tail`] reports the offset where valid data ended.
//!
//! Later MIDDLE/LAST fragments alone do not count: they may be the rest of
//! the very record whose beginning the crash tore. When the damage is a
//! checksum mismatch or an unknown type, the header's length is taken at
//! its word and the search starts right after the damaged fragment, in the
//! same block (a flipped payload byte leaves the length intact, and the
//! record after it proves the damage is not a tail; a 32-bit checksum and
//! the log number make a false match vanishingly unlikely). When the length
//! itself cannot be trusted (it overruns the block, or the header is zero),
//! the search starts at the next block, so such damage inside the last
//! block of a log reads as a torn tail.
//!
//! The rule assumes that only the unsynced tail can be damaged by a crash,
//! which holds for the PM WAL (synced after every record) and the MANIFEST.
//! A file written without sync on a file system that writes pages back out
//! of order can, after a power loss, hold a hole followed by records; a
//! reader in point-in-time mode ([`Reader::point_in_time`]) ends the log at
//! the first damaged record in every case and reports whether valid records
//! were dropped ([`Reader::dropped_records`]).
//!
//! Offsets are physical: the file offset, or the byte offset in the PM
//! region.
//!
//! # Concurrency
//!
//! A reader belongs to one thread; the source must not be written while it
//! is read (recovery reads logs nobody writes).

use std::path::Path;

use crate::error::{Error, Result};
use crate::storage::FileSystem;

use super::{header_log_number, Header, RecordType, BLOCK_SIZE, HEADER_SIZE};

/// Blocks of a log to read.
pub trait LogSource {
    /// The file path or PM region name, for error messages.
    fn name(&self) -> &str;

    /// The number of blocks. Every block is [`BLOCK_SIZE`] bytes, except
    /// that the last block of a file may be shorter.
    fn block_count(&self) -> u64;

    /// The bytes of block `index` (< `block_count()`) and the physical
    /// offset of its first byte.
    fn block(&self, index: u64) -> Result<(&[u8], u64)>;
}

/// A whole log file read into memory.
#[derive(Debug, Clone)]
pub struct FileLog {
    name: String,
    data: Vec<u8>,
}

impl FileLog {
    /// A log held in `data`, called `name` in error messages.
    pub fn new(name: impl Into<String>, data: Vec<u8>) -> Self {
        FileLog {
            name: name.into(),
            data,
        }
    }

    /// Reads the file at `path` through `fs`.
    pub fn read(fs: &dyn FileSystem, path: &Path) -> Result<Self> {
        Ok(FileLog::new(path.display().to_string(), fs.read_all(path)?))
    }
}

impl LogSource for FileLog {
    fn name(&self) -> &str {
        &self.name
    }

    fn block_count(&self) -> u64 {
        self.data.len().div_ceil(BLOCK_SIZE) as u64
    }

    fn block(&self, index: u64) -> Result<(&[u8], u64)> {
        let start = usize::try_from(index)
            .ok()
            .and_then(|i| i.checked_mul(BLOCK_SIZE))
            .filter(|&s| s < self.data.len())
            .ok_or_else(|| Error::InvalidArgument(format!("{}: no block {index}", self.name)))?;
        let end = (start + BLOCK_SIZE).min(self.data.len());
        Ok((&self.data[start..end], start as u64))
    }
}

/// Reads the records of one log.
pub struct Reader<S: LogSource> {
    source: S,
    log32: u32,
    /// Next block to read and the position in it.
    block: u64,
    pos: usize,
    done: bool,
    error: Option<Error>,
    torn_tail: Option<u64>,
    dropped: bool,
    point_in_time: bool,
    last_record_offset: u64,
}

impl Reader<FileLog> {
    /// A reader over the log file at `path` (read whole through `fs`).
    pub fn open_file(fs: &dyn FileSystem, path: &Path, log_number: u64) -> Result<Self> {
        Ok(Reader::new(FileLog::read(fs, path)?, log_number))
    }
}

/// Outcome of looking at one fragment position.
enum Step {
    /// A whole record is in the buffer.
    Record,
    /// Keep going.
    Continue,
    /// The log stops here; see [`Reader::stop`].
    Stop {
        fragment_at: u64,
        what: &'static str,
        /// The stop is itself an ordinary end (zero header, other log).
        clean: bool,
        /// Where to look for later records: `None` = nothing to look at.
        scan_from: Option<(u64, usize)>,
    },
}

impl<S: LogSource> Reader<S> {
    /// A reader over `source`, accepting fragments of log `log_number`.
    pub fn new(source: S, log_number: u64) -> Self {
        Reader {
            source,
            log32: header_log_number(log_number),
            block: 0,
            pos: 0,
            done: false,
            error: None,
            torn_tail: None,
            dropped: false,
            point_in_time: false,
            last_record_offset: 0,
        }
    }

    /// Point-in-time mode: every damaged record ends the log (no
    /// `Corruption` error); [`dropped_records`](Self::dropped_records)
    /// reports whether valid records followed it.
    pub fn point_in_time(mut self, on: bool) -> Self {
        self.point_in_time = on;
        self
    }

    /// The source's name (file path or PM region).
    pub fn source_name(&self) -> &str {
        self.source.name()
    }

    /// The source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// After the end: the offset where valid data ended if the log ended at
    /// a torn (damaged) tail rather than cleanly.
    pub fn torn_tail(&self) -> Option<u64> {
        self.torn_tail
    }

    /// In point-in-time mode: true if valid records followed the damaged
    /// record that ended the log (they were not returned).
    pub fn dropped_records(&self) -> bool {
        self.dropped
    }

    /// Offset of the first fragment of the record returned last.
    pub fn last_record_offset(&self) -> u64 {
        self.last_record_offset
    }

    /// The next record, or `None` at the end of the log.
    pub fn next_record(&mut self) -> Result<Option<Vec<u8>>> {
        let mut buf = Vec::new();
        Ok(if self.read_record(&mut buf)? {
            Some(buf)
        } else {
            None
        })
    }

    /// Reads the next record into `buf` (cleared first); `false` at the end
    /// of the log. After an error, every call returns it again.
    pub fn read_record(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        buf.clear();
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if self.done {
            return Ok(false);
        }
        // Offset of the FIRST fragment while inside a fragmented record.
        let mut start: Option<u64> = None;
        loop {
            let step = match self.step(buf, &mut start) {
                Ok(step) => step,
                Err(e) => {
                    // The position may be inside a record: do not resume.
                    buf.clear();
                    self.error = Some(e.clone());
                    return Err(e);
                }
            };
            match step {
                Step::Record => return Ok(true),
                Step::Continue => {}
                Step::Stop {
                    fragment_at,
                    what,
                    clean,
                    scan_from,
                } => {
                    buf.clear();
                    return self.stop(start, fragment_at, what, clean, scan_from);
                }
            }
        }
    }

    /// Looks at the fragment at the current position.
    fn step(&mut self, buf: &mut Vec<u8>, start: &mut Option<u64>) -> Result<Step> {
        if self.block >= self.source.block_count() {
            // End of input; a pending partial record is torn.
            return Ok(Step::Stop {
                fragment_at: start.unwrap_or(0),
                what: "record without its LAST fragment",
                clean: true,
                scan_from: None,
            });
        }
        let (data, phys) = self.source.block(self.block)?;
        let rem = data.len().saturating_sub(self.pos);
        let at = phys + self.pos as u64;
        if rem < HEADER_SIZE {
            let tail = &data[self.pos.min(data.len())..];
            if data.len() == BLOCK_SIZE || tail.is_empty() {
                // Block padding (or the block is used up): next block.
                self.block += 1;
                self.pos = 0;
                return Ok(Step::Continue);
            }
            // A short last block ending in a partial header.
            let zero = tail.iter().all(|&b| b == 0);
            return Ok(Step::Stop {
                fragment_at: at,
                what: "truncated fragment header",
                clean: zero,
                scan_from: None,
            });
        }
        let h = Header::decode(&data[self.pos..]);
        if h.is_zero() {
            return Ok(Step::Stop {
                fragment_at: at,
                what: "zero-filled bytes",
                clean: true,
                scan_from: Some((self.block + 1, 0)),
            });
        }
        let body = self.pos + HEADER_SIZE;
        let Some(payload) = data.get(body..body + h.length) else {
            return Ok(Step::Stop {
                fragment_at: at,
                what: "fragment length overruns the block",
                clean: false,
                scan_from: Some((self.block + 1, 0)),
            });
        };
        if !h.verify(payload) {
            // If only the payload is damaged, the length is right and the
            // next fragment starts right after this one: look there first,
            // so damage early in the last block is not taken for a torn tail.
            return Ok(Step::Stop {
                fragment_at: at,
                what: "checksum mismatch",
                clean: false,
                scan_from: Some((self.block, body + h.length)),
            });
        }
        if h.log32 != self.log32 {
            // A recycled tail: the log ends here, nothing to scan.
            return Ok(Step::Stop {
                fragment_at: at,
                what: "fragment of another log",
                clean: true,
                scan_from: None,
            });
        }
        let Some(ty) = RecordType::from_u8(h.ty) else {
            return Ok(Step::Stop {
                fragment_at: at,
                what: "unknown fragment type",
                clean: false,
                scan_from: Some((self.block, body + h.length)),
            });
        };
        if ty.starts_record() && start.is_some() {
            // The pending record never got its LAST fragment, and this
            // valid fragment starts a new one (the scan finds it).
            return Ok(Step::Stop {
                fragment_at: at,
                what: "record without its LAST fragment",
                clean: false,
                scan_from: Some((self.block, self.pos)),
            });
        }
        if !ty.starts_record() && start.is_none() {
            return Ok(Step::Stop {
                fragment_at: at,
                what: "MIDDLE or LAST fragment without a FIRST",
                clean: false,
                scan_from: Some((self.block, self.pos + HEADER_SIZE + h.length)),
            });
        }
        buf.extend_from_slice(payload);
        self.pos = body + h.length;
        match ty {
            RecordType::Full => {
                self.last_record_offset = at;
                Ok(Step::Record)
            }
            RecordType::First => {
                *start = Some(at);
                Ok(Step::Continue)
            }
            RecordType::Middle => Ok(Step::Continue),
            RecordType::Last => {
                self.last_record_offset = start.take().unwrap_or(at);
                Ok(Step::Record)
            }
        }
    }

    /// Ends the log at a damaged or ending fragment, applying the torn-tail
    /// rule. `start` is the pending record's first fragment, if any: then the
    /// damaged record is that one, and the stop is never clean.
    fn stop(
        &mut self,
        start: Option<u64>,
        fragment_at: u64,
        what: &'static str,
        clean: bool,
        scan_from: Option<(u64, usize)>,
    ) -> Result<bool> {
        let record_at = start.unwrap_or(fragment_at);
        let clean = clean && start.is_none();
        let later = match scan_from {
            Some((block, pos)) => self.find_record_start(block, pos)?,
            None => None,
        };
        self.done = true;
        match later {
            Some(next_at) if !self.point_in_time => {
                let detail = if record_at == fragment_at {
                    String::new()
                } else {
                    format!(" (in its fragment at {fragment_at})")
                };
                let e = Error::corruption(
                    self.source.name(),
                    record_at,
                    format!("log record: {what}{detail}, followed by a valid record at {next_at}"),
                );
                self.error = Some(e.clone());
                Err(e)
            }
            Some(_) => {
                self.dropped = true;
                self.torn_tail = Some(record_at);
                Ok(false)
            }
            None => {
                if !clean {
                    self.torn_tail = Some(record_at);
                }
                Ok(false)
            }
        }
    }

    /// The offset of the first valid fragment of this log that starts a
    /// record, found by following valid fragments from `(block, pos)` (a
    /// fragment boundary) and from every later block start.
    fn find_record_start(&self, mut block: u64, mut pos: usize) -> Result<Option<u64>> {
        let count = self.source.block_count();
        while block < count {
            let (data, phys) = self.source.block(block)?;
            while data.len().saturating_sub(pos) >= HEADER_SIZE {
                let h = Header::decode(&data[pos..]);
                let body = pos + HEADER_SIZE;
                let Some(payload) = data.get(body..body + h.length) else {
                    break;
                };
                if h.is_zero() || h.log32 != self.log32 || !h.verify(payload) {
                    break;
                }
                match RecordType::from_u8(h.ty) {
                    Some(t) if t.starts_record() => return Ok(Some(phys + pos as u64)),
                    Some(_) => pos = body + h.length,
                    None => break,
                }
            }
            block += 1;
            pos = 0;
        }
        Ok(None)
    }
}
